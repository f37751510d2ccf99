//! Property tests: arbitrary bodies and query strings thrown at the real router never panic, never
//! produce a 5xx, and always answer with a JSON error object.

use std::sync::OnceLock;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use proptest::prelude::*;
use serde_json::{json, Value};
use switchyard_server::api::{router, AppState};
use switchyard_server::model::catalog::CatalogQuery;
use switchyard_server::model::{DeployModelIn, EndpointSpec};
use switchyard_server::{Config, Services};
use tower::ServiceExt;

struct Harness {
    rt: tokio::runtime::Runtime,
    state: AppState,
    token: String,
    _dir: tempfile::TempDir,
}

fn harness() -> &'static Harness {
    static H: OnceLock<Harness> = OnceLock::new();
    H.get_or_init(|| {
        let rt = tokio::runtime::Runtime::new().expect("runtime");
        let dir = tempfile::tempdir().expect("tempdir");
        let mut config = Config::default();
        config.store.data_dir = Some(dir.path().to_path_buf());
        let services = rt
            .block_on(Services::open(
                &config,
                std::sync::Arc::new(switchyard_server::clock::SystemClock),
            ))
            .expect("services");
        let token = std::fs::read_to_string(dir.path().join("admin-token")).expect("token");
        Harness {
            rt,
            state: services.state,
            token: token.trim().to_string(),
            _dir: dir,
        }
    })
}

fn call(method: &str, uri: &str, body: Vec<u8>) -> (StatusCode, Value) {
    let h = harness();
    h.rt.block_on(async {
        let req = Request::builder()
            .method(method)
            .uri(uri)
            .header("authorization", format!("Bearer {}", h.token))
            .header("content-type", "application/json")
            .body(Body::from(body))
            .expect("request");
        let resp = router(h.state.clone())
            .oneshot(req)
            .await
            .expect("infallible");
        let status = resp.status();
        let bytes = axum::body::to_bytes(resp.into_body(), usize::MAX)
            .await
            .expect("body");
        let v = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
        (status, v)
    })
}

fn arb_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(Value::from),
        prop_oneof![
            "[a-z0-9-]{0,40}",
            Just("huggingface".to_string()),
            Just("cpu".to_string()),
            Just("00:00".to_string()),
            Just("10.0.0.0/8".to_string()),
            ".{0,20}"
        ]
        .prop_map(Value::String),
    ];
    let keys = prop_oneof![
        Just("name".to_string()),
        Just("type".to_string()),
        Just("namespace".to_string()),
        Just("config".to_string()),
        Just("scaling".to_string()),
        Just("minReplica".to_string()),
        Just("maxReplica".to_string()),
        Just("model".to_string()),
        Just("image".to_string()),
        Just("compute".to_string()),
        Just("schedule".to_string()),
        Just("measure".to_string()),
        Just("secrets".to_string()),
        Just("network".to_string()),
        Just("privateService".to_string()),
        "[a-zA-Z]{1,12}"
    ];
    leaf.prop_recursive(4, 48, 6, move |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::btree_map(keys.clone(), inner, 0..6)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// A valid endpoint body, in the shape the Python client sends.
fn endpoint_body() -> Value {
    json!({
        "compute": {
            "accelerator": "cpu", "instanceSize": "x2", "instanceType": "intel-icl",
            "scaling": {"maxReplica": 2, "minReplica": 0, "scaleToZeroTimeout": null}
        },
        "model": {
            "framework": "pytorch", "repository": "sentence-transformers/all-MiniLM-L6-v2", "revision": null,
            "task": "sentence-embeddings", "image": {"huggingface": {}}
        },
        "name": "e1",
        "provider": {"region": "us-east-1", "vendor": "aws"},
        "type": "authenticated"
    })
}

/// Where a field of an endpoint body may be changed.
const FIELDS: [&str; 24] = [
    "/name",
    "/type",
    "/compute/accelerator",
    "/compute/instanceSize",
    "/compute/scaling/minReplica",
    "/compute/scaling/maxReplica",
    "/compute/scaling/scaleToZeroTimeout",
    "/compute/scaling/measure",
    "/compute/scaling/schedule",
    "/model/revision",
    "/model/task",
    "/model/image",
    "/model/env",
    "/model/secrets",
    "/model/args",
    "/tags",
    "/network",
    "/privateService",
    "/route",
    "/notifications",
    "/experimentalFeatures",
    "/cacheHttpResponses",
    "/customRouter",
    "/provider",
];

/// Values a field may get: mostly ones of the right kind, some anything at all.
fn arb_field_value() -> impl Strategy<Value = Value> {
    prop_oneof![
        (0u32..6).prop_map(Value::from),
        "[a-z][a-z0-9-]{0,20}".prop_map(Value::from),
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        prop_oneof![
            Just(json!("public")),
            Just(json!("private")),
            Just(json!("authenticated")),
            Just(json!("gpu")),
            Just(json!("sentence-similarity")),
        ],
        prop_oneof![
            Just(json!({"pendingRequests": 4.5})),
            Just(json!({"hardwareUsage": null})),
            Just(json!({"inferenceLoad": {"kvCacheUsage": 50}})),
            Just(json!({"email": true, "push": false})),
            Just(json!({"domain": "api.example.com", "path": "/x"})),
            Just(json!({"tei": {"url": "ghcr.io/x/y:1"}})),
            Just(json!({"custom": {"url": "local/x", "healthRoute": "/health"}})),
            Just(json!({"cacheHttpResponses": true, "loadBalancer": "leastConnections"})),
            Just(json!({"privateLink": null, "allowedCidrs": ["10.0.0.0/8"]})),
        ],
        ("[01][0-9]", "[0-5][0-9]", 0u32..3, 1u32..4).prop_map(|(h, m, lo, hi)| {
            json!([{"at": format!("{h}:{m}"), "minReplica": lo, "maxReplica": hi}])
        }),
        prop::collection::btree_map("[A-Z_]{1,8}", "[a-z0-9]{0,8}", 0..3).prop_map(|m| json!(m)),
        prop::collection::vec("[a-z0-9-]{1,10}", 0..3).prop_map(|v| json!(v)),
        arb_json(),
    ]
}

/// A valid endpoint body with up to three fields changed: many still parse.
fn arb_endpoint_body() -> impl Strategy<Value = Value> {
    prop::collection::vec((prop::sample::select(&FIELDS[..]), arb_field_value()), 0..4).prop_map(
        |changes| {
            let mut body = endpoint_body();
            for (path, value) in changes {
                let (parent, key) = path.rsplit_once('/').expect("a path");
                if let Some(Value::Object(fields)) = body.pointer_mut(parent) {
                    fields.insert(key.to_string(), value);
                }
            }
            body
        },
    )
}

/// A spec that parses serialises (to the shape the API answers and the store keeps) and parses back equal,
/// through the API's parser and through the store's plain deserialization.
fn round_trips(spec: &EndpointSpec) -> Result<(), TestCaseError> {
    let shown = serde_json::to_value(spec).expect("serialise");
    let again = EndpointSpec::parse(&shown);
    prop_assert_eq!(again.as_ref(), Ok(spec), "parsed back from {}", shown);
    let stored: EndpointSpec = serde_json::from_value(shown.clone()).expect("the store reads it");
    prop_assert_eq!(&stored, spec, "read back from {}", shown);
    Ok(())
}

/// The round trip, over bodies of which many parse (arbitrary JSON hardly ever does); fails if too few did for
/// it to say much.
#[test]
fn a_spec_that_parses_round_trips() {
    let parsed = std::cell::Cell::new(0usize);
    let cases = 300;
    // A fixed seed: the share of bodies that parse is the same in every run (about a quarter).
    let rng = proptest::test_runner::TestRng::deterministic_rng(
        proptest::test_runner::RngAlgorithm::ChaCha,
    );
    let config = ProptestConfig {
        cases,
        ..ProptestConfig::default()
    };
    let mut runner = proptest::test_runner::TestRunner::new_with_rng(config, rng);
    runner
        .run(&arb_endpoint_body(), |v| match EndpointSpec::parse(&v) {
            Ok(spec) => {
                parsed.set(parsed.get() + 1);
                round_trips(&spec)
            }
            Err(_) => Ok(()),
        })
        .unwrap();
    assert!(
        parsed.get() >= cases as usize / 10,
        "only {} of {cases} bodies parsed: the round trip was hardly tried",
        parsed.get()
    );
}

fn assert_client_error(status: StatusCode, body: &Value) {
    assert!(!status.is_server_error(), "5xx: {status} {body}");
    if !status.is_success() {
        assert!(body["error"].is_string(), "error body: {body}");
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, .. ProptestConfig::default() })]

    #[test]
    fn parsers_never_panic(v in arb_json()) {
        if let Ok(spec) = EndpointSpec::parse(&v) {
            round_trips(&spec)?;
        }
        let _ = DeployModelIn::parse(&v);
    }

    #[test]
    fn deploy_bodies_get_clean_answers(v in arb_json()) {
        let (status, body) = call("POST", "/api/v1/catalog/recipe/bge-large-en-v1-5-cpu-tei/deploy", serde_json::to_vec(&v).unwrap());
        assert_client_error(status, &body);
    }

    #[test]
    fn endpoint_bodies_get_clean_answers(v in arb_json()) {
        let (status, body) = call("POST", "/v2/endpoint/admin", serde_json::to_vec(&v).unwrap());
        assert_client_error(status, &body);
        let (status, body) = call("PUT", "/v2/endpoint/admin/nothing-here", serde_json::to_vec(&v).unwrap());
        assert_client_error(status, &body);
    }

    #[test]
    fn raw_bytes_get_clean_answers(bytes in prop::collection::vec(any::<u8>(), 0..256)) {
        let (status, body) = call("POST", "/v2/endpoint/admin", bytes);
        assert_client_error(status, &body);
    }

    #[test]
    fn catalog_queries_get_clean_answers(q in "[a-z=&%0-9.+-]{0,60}") {
        let (status, body) = call("GET", &format!("/api/v1/catalog/list?{q}"), Vec::new());
        assert_client_error(status, &body);
        if status == StatusCode::BAD_REQUEST {
            prop_assert!(body.get("details").is_some());
        }
        let pairs: Vec<(String, String)> = serde_urlencoded::from_str(&q).unwrap_or_default();
        let _ = CatalogQuery::parse(&pairs);
    }
}
