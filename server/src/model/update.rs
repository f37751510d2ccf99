//! Partial updates (`PUT /v2/endpoint/{ns}/{name}`): deep-merge a patch into the stored spec, then re-validate.

use serde_json::{Map, Value};

use crate::model::endpoint::EndpointSpec;
use crate::model::image::canonical_key;
use crate::model::issue::{Issue, Issues};

impl EndpointSpec {
    /// Applies a partial update and validates the result as a whole with [`EndpointSpec::parse`].
    ///
    /// Objects merge recursively; arrays and scalars replace; an explicit null sets null. On top of that:
    /// - `model.image` / `compute.scaling.measure` with a different key than stored replace the whole value (the
    ///   variants share no fields worth keeping); the same key merges.
    /// - in `model.secrets` and for the custom image's registry password, null keeps the stored value:
    ///   responses show them as null, so a body copied from a response must not wipe them. In `model.env` and `customRouter.env`, null removes the variable.
    /// - raising `compute.scaling.minReplica` above 0 without mentioning `scaleToZeroTimeout` resets the timeout,
    ///   which is only allowed with `minReplica` 0.
    /// - `name` may be repeated but not changed.
    ///
    /// The result has `compute.id` unset, like any parsed spec.
    pub fn apply_update(&self, patch: &Value) -> Result<EndpointSpec, Vec<Issue>> {
        let Value::Object(patch) = patch else {
            return Err(vec![Issue::new("", "the update must be a JSON object")]);
        };
        let mut issues = Issues::default();
        let mut patch = patch.clone();
        match patch.remove("name") {
            Some(Value::String(name)) if name == self.name => {}
            None => {}
            Some(_) => issues.push("name", "renaming an endpoint is not supported"),
        }

        // A null secret keeps the stored value; a null for a secret that does not exist has nothing to keep.
        if let Some(Value::Object(secrets)) = patch.get("model").and_then(|m| m.get("secrets")) {
            for (k, v) in secrets {
                if v.is_null() && !self.model.secrets.0.contains_key(k) {
                    issues.push(format!("model.secrets.{k}"), "a new secret needs a value");
                }
            }
        }

        let mut merged = serde_json::to_value(self).map_err(|e| {
            // Serializing our own types cannot fail; report rather than panic all the same.
            vec![Issue::new(
                "",
                format!("stored endpoint could not be read: {e}"),
            )]
        })?;
        reset_timeout_when_min_raised(&mut merged, &patch);
        merge_object(&mut merged, patch, &[]);

        match EndpointSpec::parse(&merged) {
            Ok(spec) => issues.into_result(spec),
            Err(more) => {
                issues.extend(more);
                Err(issues.into_vec())
            }
        }
    }
}

fn reset_timeout_when_min_raised(stored: &mut Value, patch: &Map<String, Value>) {
    let Some(scaling) = patch
        .get("compute")
        .and_then(|c| c.get("scaling"))
        .and_then(Value::as_object)
    else {
        return;
    };
    let raised = scaling
        .get("minReplica")
        .and_then(Value::as_f64)
        .is_some_and(|m| m > 0.0);
    if raised && !scaling.contains_key("scaleToZeroTimeout") {
        if let Some(timeout) = stored.pointer_mut("/compute/scaling/scaleToZeroTimeout") {
            *timeout = Value::Null;
        }
    }
}

/// Merges `patch` into `target` at `path` (keys from the root), applying the special cases above.
fn merge_object(target: &mut Value, patch: Map<String, Value>, path: &[&str]) {
    if !target.is_object() {
        // Merging into null (an unset optional object) starts from an empty object.
        *target = Value::Object(Map::new());
    }
    let Value::Object(target) = target else {
        return;
    };
    for (key, value) in patch {
        let here = [path, &[key.as_str()]].concat();
        match (here.as_slice(), value) {
            (["model", "secrets"], Value::Object(secrets)) => {
                merge_map(
                    target.entry(key.clone()).or_insert(Value::Null),
                    secrets,
                    KeepOnNull,
                );
            }
            (["model", "env"] | ["customRouter", "env"], Value::Object(vars)) => {
                merge_map(
                    target.entry(key.clone()).or_insert(Value::Null),
                    vars,
                    RemoveOnNull,
                );
            }
            (["model", "image", "custom", "credentials"], Value::Object(mut credentials)) => {
                // Responses show the registry password as null, like secrets: sending it back keeps it.
                if credentials.get("password").is_some_and(Value::is_null) {
                    credentials.remove("password");
                }
                let slot = target.entry(key.clone()).or_insert(Value::Null);
                merge_object(slot, credentials, &here);
            }
            (["model", "image"] | ["compute", "scaling", "measure"], Value::Object(variant)) => {
                merge_variant(
                    target.entry(key.clone()).or_insert(Value::Null),
                    variant,
                    &here,
                );
            }
            (_, Value::Object(inner)) => {
                let slot = target.entry(key.clone()).or_insert(Value::Null);
                merge_object(slot, inner, &here);
            }
            (_, value) => {
                target.insert(key, value);
            }
        }
    }
}

/// A one-key object (`model.image`, `measure`): same key (after input aliases) merges, another key replaces.
fn merge_variant(target: &mut Value, mut patch: Map<String, Value>, path: &[&str]) {
    let stored_key = target
        .as_object()
        .filter(|m| m.len() == 1)
        .and_then(|m| m.keys().next().cloned());
    let patch_key = (patch.len() == 1)
        .then(|| patch.keys().next().cloned())
        .flatten();
    match (stored_key, patch_key) {
        (Some(stored), Some(key)) if canonical_key(&key) == stored => {
            let value = patch.remove(&key).unwrap_or(Value::Null);
            let slot = &mut target[stored.as_str()];
            match value {
                Value::Object(inner) => {
                    merge_object(slot, inner, &[path, &[stored.as_str()]].concat())
                }
                other => *slot = other,
            }
        }
        _ => *target = Value::Object(patch),
    }
}

#[derive(Clone, Copy)]
enum NullMeans {
    KeepOnNull,
    RemoveOnNull,
}
use NullMeans::{KeepOnNull, RemoveOnNull};

/// Merges a name → value map such as env or secrets; what a null value means depends on the map.
fn merge_map(target: &mut Value, patch: Map<String, Value>, null: NullMeans) {
    if !target.is_object() {
        *target = Value::Object(Map::new());
    }
    let Value::Object(target) = target else {
        return;
    };
    for (name, value) in patch {
        match (value, null) {
            (Value::Null, KeepOnNull) if target.contains_key(&name) => {}
            (Value::Null, RemoveOnNull) => {
                target.remove(&name);
            }
            (value, _) => {
                target.insert(name, value);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::endpoint::tests::client_body;
    use crate::model::endpoint::{Measure, Secrets};
    use crate::model::image::ModelImage;
    use serde_json::json;

    fn stored() -> EndpointSpec {
        EndpointSpec::parse(&client_body()).unwrap()
    }

    fn update(spec: &EndpointSpec, patch: Value) -> EndpointSpec {
        spec.apply_update(&patch)
            .unwrap_or_else(|e| panic!("{patch}: {e:?}"))
    }

    #[test]
    fn nested_objects_merge_and_scalars_replace() {
        let spec = update(
            &stored(),
            json!({"compute": {"scaling": {"maxReplica": 3}}, "tags": ["prod"]}),
        );
        assert_eq!(spec.compute.scaling.max_replica, 3);
        assert_eq!(
            spec.compute.scaling.min_replica, 0,
            "untouched sibling kept"
        );
        assert_eq!(spec.compute.instance_type, "intel-icl");
        assert_eq!(spec.tags, ["prod"]);
    }

    #[test]
    fn explicit_null_sets_null() {
        let base = update(&stored(), json!({"model": {"revision": "main"}}));
        assert_eq!(base.model.revision.as_deref(), Some("main"));
        let spec = update(&base, json!({"model": {"revision": null}}));
        assert_eq!(spec.model.revision, None);
    }

    #[test]
    fn image_with_another_key_replaces_same_key_merges() {
        let vllm = update(
            &stored(),
            json!({"model": {"image": {"vLLM": {"url": "vllm:1", "port": 8000}}}}),
        );
        let merged = update(
            &vllm,
            json!({"model": {"image": {"vLLM": {"tensorParallelSize": 2}}}}),
        );
        let ModelImage::Vllm(image) = &merged.model.image else {
            panic!("{:?}", merged.model.image)
        };
        assert_eq!(
            (image.url.as_str(), image.port, image.tensor_parallel_size),
            ("vllm:1", Some(8000), Some(2))
        );

        let hub = update(&merged, json!({"model": {"image": {"huggingface": {}}}}));
        assert_eq!(hub.model.image.key(), "hub");
        let same = update(&hub, json!({"model": {"image": {"huggingface": {}}}}));
        assert_eq!(same.model.image.key(), "hub");
    }

    #[test]
    fn measure_with_another_key_replaces() {
        let spec = update(
            &stored(),
            json!({"compute": {"scaling": {"measure": {"hardwareUsage": 80}}}}),
        );
        let spec = update(
            &spec,
            json!({"compute": {"scaling": {"measure": {"pendingRequests": 2}}}}),
        );
        assert_eq!(
            spec.compute.scaling.measure,
            Some(Measure::PendingRequests(Some(2.0)))
        );
    }

    #[test]
    fn null_for_an_unknown_secret_is_refused() {
        let err = stored()
            .apply_update(&json!({"model": {"secrets": {"NEVER_SET": null}}}))
            .unwrap_err();
        assert!(
            err.iter().any(|i| i.path == "model.secrets.NEVER_SET"),
            "{err:?}"
        );
    }

    #[test]
    fn null_registry_password_keeps_the_stored_one() {
        let custom = json!({"custom": {"url": "reg.example/app:1", "credentials": {"username": "u", "password": "p"}}});
        let spec = update(&stored(), json!({"model": {"image": custom}}));
        let round_trip = serde_json::to_value(spec.redacted()).unwrap();
        let again = update(&spec, json!({"model": round_trip["model"].clone()}));
        let ModelImage::Custom(image) = &again.model.image else {
            panic!("{:?}", again.model.image)
        };
        let creds = image.credentials.as_ref().unwrap();
        assert_eq!(creds.password.as_deref(), Some("p"));
        let changed = update(
            &again,
            json!({"model": {"image": {"custom": {"credentials": {"username": "u", "password": "q"}}}}}),
        );
        let ModelImage::Custom(image) = &changed.model.image else {
            panic!()
        };
        assert_eq!(
            image.credentials.as_ref().unwrap().password.as_deref(),
            Some("q")
        );
    }

    #[test]
    fn null_secret_keeps_the_stored_value() {
        let spec = stored();
        let round_trip = serde_json::to_value(spec.redacted()).unwrap();
        let patch = json!({"model": {"secrets": round_trip["model"]["secrets"].clone()}});
        let kept = update(&spec, patch);
        assert_eq!(
            kept.model.secrets.get("MY_SECRET_KEY"),
            Some("secret_value")
        );

        let changed = update(
            &spec,
            json!({"model": {"secrets": {"MY_SECRET_KEY": "new", "OTHER": "x"}}}),
        );
        assert_eq!(changed.model.secrets.get("MY_SECRET_KEY"), Some("new"));
        assert_eq!(changed.model.secrets.get("OTHER"), Some("x"));
        assert_ne!(changed.model.secrets, Secrets::default());
    }

    #[test]
    fn null_env_var_removes_it() {
        let spec = update(
            &stored(),
            json!({"model": {"env": {"MODEL_ID": null, "NEW": "1"}}}),
        );
        assert_eq!(spec.model.env.keys().collect::<Vec<_>>(), ["NEW"]);
    }

    #[test]
    fn raising_min_replica_resets_the_timeout() {
        let spec = stored();
        assert_eq!(spec.compute.scaling.scale_to_zero_timeout, Some(15));
        let raised = update(&spec, json!({"compute": {"scaling": {"minReplica": 1}}}));
        assert_eq!(raised.compute.scaling.scale_to_zero_timeout, None);

        let explicit = spec
            .apply_update(
                &json!({"compute": {"scaling": {"minReplica": 1, "scaleToZeroTimeout": 30}}}),
            )
            .unwrap_err();
        assert_eq!(explicit[0].path, "compute.scaling.scaleToZeroTimeout");
    }

    #[test]
    fn name_cannot_change() {
        let spec = stored();
        update(&spec, json!({"name": "finbert-classifier"}));
        let err = spec
            .apply_update(&json!({"name": "other", "model": {"repository": "x"}}))
            .unwrap_err();
        let paths: Vec<_> = err.iter().map(|i| i.path.as_str()).collect();
        assert_eq!(
            paths,
            ["name", "model.repository"],
            "all issues, not just the first"
        );
    }

    #[test]
    fn patch_must_be_an_object() {
        assert_eq!(
            stored().apply_update(&json!([1])).unwrap_err(),
            [Issue::new("", "the update must be a JSON object")]
        );
    }

    #[test]
    fn merging_into_an_unset_object_needs_its_required_fields() {
        let err = stored()
            .apply_update(&json!({"route": {"domain": "a.example.com"}}))
            .unwrap_err();
        assert_eq!(err[0].path, "route.path");
        let spec = update(
            &stored(),
            json!({"route": {"domain": "a.example.com", "path": "/x"}}),
        );
        assert_eq!(spec.route.unwrap().path, "/x");
    }

    #[test]
    fn python_client_update_payload() {
        // What `update_inference_endpoint(min_replica=1, max_replica=2, scaling_metric="pendingRequests",
        // scaling_threshold=None, revision="abc")` sends.
        let spec = update(
            &stored(),
            json!({
                "compute": {"scaling": {"maxReplica": 2, "minReplica": 1, "measure": {"pendingRequests": null}}},
                "model": {"revision": "abc"}
            }),
        );
        assert_eq!(spec.compute.scaling.min_replica, 1);
        assert_eq!(
            spec.compute.scaling.measure,
            Some(Measure::PendingRequests(None))
        );
    }
}
