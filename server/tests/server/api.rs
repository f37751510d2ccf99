//! The public API end to end over real HTTP: catalog, deploy, endpoints, accounts, and the error contract.

use crate::common;

use common::{endpoint_body, spawn, spawn_with};
use reqwest::StatusCode;
use serde_json::{json, Value};
use switchyard_server::client::ClientError;

fn status<T: std::fmt::Debug>(r: Result<T, ClientError>) -> StatusCode {
    r.expect_err("expected an error")
        .status()
        .expect("an API error")
}

fn body<T: std::fmt::Debug>(r: Result<T, ClientError>) -> Value {
    match r.expect_err("expected an error") {
        ClientError::Api { body, .. } => body,
        e => panic!("{e}"),
    }
}

#[tokio::test]
async fn health_and_the_response_contract() {
    let srv = spawn().await;
    let h = srv.anonymous().health().await.unwrap();
    assert_eq!(h, json!({"status": "ok"}));

    let http = reqwest::Client::new();
    let r = http
        .get(format!("{}/health", srv.url))
        .send()
        .await
        .unwrap();
    assert!(r.headers().get("x-request-id").is_some());
    let r = http
        .get(format!("{}/health", srv.url))
        .header("x-request-id", "trace-123")
        .send()
        .await
        .unwrap();
    assert_eq!(r.headers()["x-request-id"], "trace-123");

    let r = http
        .get(format!("{}/no/such/route", srv.url))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 404);
    assert!(r.headers().get("x-error-message").is_some());
    assert!(r.headers().get("x-request-id").is_some());
    let b: Value = r.json().await.unwrap();
    assert!(b["error"].is_string());

    let r = http
        .delete(format!("{}/api/v1/catalog/list", srv.url))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 405);
    let b: Value = r.json().await.unwrap();
    assert!(b["error"].is_string());

    let big = "x".repeat(2 * 1024 * 1024);
    let r = http
        .post(format!("{}/v2/endpoint/admin", srv.url))
        .bearer_auth(
            std::fs::read_to_string(srv.data_dir.join("admin-token"))
                .unwrap()
                .trim(),
        )
        .header("content-type", "application/json")
        .body(big)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 413);
    let b: Value = r.json().await.unwrap();
    assert!(b["error"].as_str().unwrap().contains("larger"));
}

#[tokio::test]
async fn catalog_list_filters_and_rejects_bad_queries() {
    let srv = spawn().await;
    let anon = srv.anonymous();
    let all: Value = anon.catalog_list(&[]).await.unwrap();
    let items = all["items"].as_array().unwrap();
    assert!(items.len() >= 40);

    let neuron: Value = anon
        .catalog_list(&[("accelerator", "neuron")])
        .await
        .unwrap();
    let neuron = neuron["items"].as_array().unwrap();
    assert!(!neuron.is_empty() && neuron.len() < items.len());
    for it in neuron {
        for r in it["recipes"].as_array().unwrap() {
            assert_eq!(r["accelerator"], "neuron");
        }
    }
    let limited: Value = anon
        .catalog_list(&[("limit", "2"), ("task", "text-generation")])
        .await
        .unwrap();
    assert_eq!(limited["items"].as_array().unwrap().len(), 2);

    for (k, v) in [
        ("limit", "0"),
        ("limit", "-1"),
        ("limit", "2.5"),
        ("limit", "ten"),
        ("limit", "9007199254740992"),
        ("task", "dancing"),
        ("engine", "tgi"),
        ("accelerator", "tpu"),
    ] {
        let err = anon.catalog_list::<Value>(&[(k, v)]).await;
        let b = body(err);
        assert!(b["error"].is_string(), "{k}={v}");
        assert!(b["details"][k].is_string(), "details names {k}: {b}");
    }
    let b = body(
        anon.catalog_list::<Value>(&[("task", "x"), ("limit", "0")])
            .await,
    );
    assert!(b["details"]["task"].is_string() && b["details"]["limit"].is_string());
}

fn first_repo_with(items: &Value, pred: impl Fn(&Value) -> bool) -> (String, Value) {
    let it = items["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| pred(i))
        .expect("a matching catalog item")
        .clone();
    (it["repoId"].as_str().unwrap().to_string(), it)
}

/// A server that runs only CPU replicas: the hardware list says so, and GPU compute is refused up front
/// (409 for a deploy, 400 at `compute` for a create), with nothing made.
#[tokio::test]
async fn compute_the_server_cannot_run_is_refused_up_front() {
    let srv = spawn_with(|c| c.runtime.accelerators = Some(vec!["cpu".into()])).await;
    let hw: Value = srv.admin.hardware("admin").await.unwrap();
    let computes: Vec<&Value> = hw["vendors"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|v| v["regions"].as_array().unwrap())
        .flat_map(|r| r["computes"].as_array().unwrap())
        .collect();
    assert!(computes.iter().any(|c| c["accelerator"] == "gpu"));
    for c in &computes {
        let expected = if c["accelerator"] == "cpu" {
            "available"
        } else {
            "unavailable"
        };
        assert_eq!(c["status"], expected, "{c}");
    }

    let catalog: Value = srv.anonymous().catalog_list(&[]).await.unwrap();
    let (repo, _) = first_repo_with(&catalog, |i| {
        i["recipes"]
            .as_array()
            .unwrap()
            .iter()
            .all(|x| x["accelerator"] == "gpu")
    });
    let refused = srv
        .admin
        .deploy_model::<Value>(&repo, &json!({"namespace": "admin"}))
        .await;
    let e = body(refused);
    let message = e["error"].as_str().unwrap();
    assert!(
        message.starts_with("no compatible compute found"),
        "{message}"
    );
    assert!(message.contains("runs no gpu replicas"), "{message}");

    let mut gpu = endpoint_body("on-gpu");
    gpu["compute"] = json!({"accelerator": "gpu", "instanceType": "nvidia-t4", "instanceSize": "x1",
        "scaling": {"maxReplica": 1, "minReplica": 0}});
    let created = srv.admin.create_endpoint::<Value>("admin", &gpu).await;
    let e = body(created);
    assert_eq!(e["issues"][0]["path"], "compute", "{e}");
    let why = e["issues"][0]["message"].as_str().unwrap();
    assert!(why.contains("runs no gpu replicas"), "{why}");

    let engines: Value = srv.admin.engines().await.unwrap();
    let gpu_recipe = engines["recipes"]
        .as_object()
        .unwrap()
        .iter()
        .find(|(id, _)| id.contains("-gpu-"))
        .expect("a GPU recipe")
        .1;
    assert_eq!(gpu_recipe["runs"], false);
    assert!(gpu_recipe["message"]
        .as_str()
        .unwrap()
        .contains("runs no gpu replicas"));
    let listed: Value = srv.admin.list_endpoints("admin").await.unwrap();
    assert_eq!(listed["items"], json!([]), "nothing was made");
}

#[tokio::test]
async fn deploy_from_catalog_by_model_and_by_recipe() {
    let srv = spawn_with(|c| c.runtime.accelerators = Some(vec!["cpu".into(), "gpu".into()])).await;
    let catalog: Value = srv.anonymous().catalog_list(&[]).await.unwrap();

    // By model, choosing the GPU recipe of an item that has CPU and GPU ones.
    let (repo, _) = first_repo_with(&catalog, |i| {
        let r = i["recipes"].as_array().unwrap();
        r.iter().any(|x| x["accelerator"] == "cpu") && r.iter().any(|x| x["accelerator"] == "gpu")
    });
    let out: Value = srv
        .admin
        .deploy_model(&repo, &json!({"namespace": "admin", "accelerator": "gpu"}))
        .await
        .unwrap();
    let ep = &out["endpoint"];
    assert_eq!(ep["model"]["repository"], repo.as_str());
    assert_eq!(ep["model"]["fromCatalog"], true);
    assert_eq!(ep["compute"]["accelerator"], "gpu");
    assert_eq!(ep["status"]["state"], "pending");
    assert!(ep["status"]["createdAt"].as_str().unwrap().ends_with('Z'));
    assert_eq!(ep["healthRoute"], "/health");
    assert!(ep["compute"]["id"].as_str().unwrap().starts_with("aws-"));
    let first_name = ep["name"].as_str().unwrap().to_string();
    assert!(first_name.len() <= 32);

    // The same model again gets a distinct derived name.
    let again: Value = srv
        .admin
        .deploy_model(&repo, &json!({"namespace": "admin"}))
        .await
        .unwrap();
    assert_ne!(again["endpoint"]["name"].as_str().unwrap(), first_name);

    // A GGUF file picks its recipe and becomes the model path.
    let (gguf_repo, gguf_item) = first_repo_with(&catalog, |i| {
        i["recipes"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|r| r.get("ggufFile").is_some())
            .count()
            >= 2
    });
    let gguf = gguf_item["recipes"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|r| r["ggufFile"].as_str())
        .next_back()
        .unwrap()
        .to_string();
    let out: Value = srv
        .admin
        .deploy_model(
            &gguf_repo,
            &json!({"namespace": "admin", "ggufFile": gguf, "config": {"name": "gguf-one"}}),
        )
        .await
        .unwrap();
    assert_eq!(out["endpoint"]["name"], "gguf-one");
    assert!(out["endpoint"]["model"]["image"]["llamacpp"]["modelPath"]
        .as_str()
        .unwrap()
        .ends_with(&gguf));
    assert_eq!(out["endpoint"]["model"]["framework"], "llamacpp");

    // The name is taken now: 409 with its own message.
    let err = srv
        .admin
        .deploy_model::<Value>(
            &gguf_repo,
            &json!({"namespace": "admin", "config": {"name": "gguf-one"}}),
        )
        .await;
    let b = body(err);
    assert!(
        b["error"].as_str().unwrap().contains("already exists"),
        "{b}"
    );

    // By recipe, with config overrides.
    let recipe = catalog["items"][0]["recipes"][0]["publicId"]
        .as_str()
        .unwrap()
        .to_string();
    let out: Value = srv
        .admin
        .deploy_recipe(
            &recipe,
            &json!({"namespace": "admin", "config": {"name": "by-recipe", "type": "private",
                "scaling": {"minReplica": 1, "maxReplica": 3},
                "privateService": {"accountId": "123456789012"}}}),
        )
        .await
        .unwrap();
    let ep = &out["endpoint"];
    assert_eq!(ep["type"], "private");
    assert_eq!(ep["compute"]["scaling"]["minReplica"], 1);
    assert_eq!(ep["compute"]["scaling"]["maxReplica"], 3);
    assert_eq!(ep["privateService"]["region"], "us-east-1");

    // Everything deployed is listed.
    let listed: Value = srv.admin.list_endpoints("admin").await.unwrap();
    assert_eq!(listed["items"].as_array().unwrap().len(), 4);
}

#[tokio::test]
async fn deploy_errors_have_the_spec_shapes_and_change_nothing() {
    let srv = spawn().await;
    let catalog: Value = srv.anonymous().catalog_list(&[]).await.unwrap();
    let repo = catalog["items"][0]["repoId"].as_str().unwrap().to_string();
    let ok = json!({"namespace": "admin"});

    // 401 before anything else.
    assert_eq!(
        status(srv.anonymous().deploy_model::<Value>(&repo, &ok).await),
        StatusCode::UNAUTHORIZED
    );
    let bad_token = srv
        .anonymous()
        .with_token(Some("sy_not-a-real-token".into()));
    let b = body(bad_token.deploy_model::<Value>(&repo, &ok).await);
    assert!(b["error"].is_string());

    // 400 {error, issues} with a path per issue.
    let cases = [
        (json!({}), "namespace"),
        (json!({"namespace": "admin", "extra": 1}), "extra"),
        (
            json!({"namespace": "admin", "accelerator": "tpu"}),
            "accelerator",
        ),
        (
            json!({"namespace": "admin", "config": {"scaling": {"minReplica": -1}}}),
            "config.scaling.minReplica",
        ),
        (
            json!({"namespace": "admin", "config": {"scaling": {"maxReplica": 1.5}}}),
            "config.scaling.maxReplica",
        ),
        (
            json!({"namespace": "admin", "config": {"scaling": {"burst": 1}}}),
            "config.scaling",
        ),
        (
            json!({"namespace": "admin", "config": {"privateService": {"accountId": "1"}}}),
            "config.privateService",
        ),
        (
            json!({"namespace": "admin", "config": {"name": "Not_Valid"}}),
            "config.name",
        ),
        (
            json!({"namespace": "admin", "config": {"type": "secret"}}),
            "config.type",
        ),
        (json!([1, 2]), ""),
    ];
    for (input, path) in cases {
        let b = body(srv.admin.deploy_model::<Value>(&repo, &input).await);
        assert!(b["error"].is_string(), "{input}");
        let issues = b["issues"]
            .as_array()
            .unwrap_or_else(|| panic!("issues for {input}: {b}"));
        assert!(
            issues
                .iter()
                .any(|i| i["path"].as_str().unwrap_or("").starts_with(path)),
            "{input} -> {b}"
        );
    }
    // Malformed JSON gets the same shape.
    let token = std::fs::read_to_string(srv.data_dir.join("admin-token")).unwrap();
    let r = reqwest::Client::new()
        .post(format!("{}/api/v1/catalog/model/{repo}/deploy", srv.url))
        .bearer_auth(token.trim())
        .header("content-type", "application/json")
        .body("{\"namespace\": ")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
    let b: Value = r.json().await.unwrap();
    assert!(b["issues"].is_array());

    // 404 for an unknown model or recipe, 409 when nothing is large enough.
    assert_eq!(
        status(srv.admin.deploy_model::<Value>("nobody/nothing", &ok).await),
        StatusCode::NOT_FOUND
    );
    assert_eq!(
        status(
            srv.admin
                .deploy_recipe::<Value>("no-such-recipe", &ok)
                .await
        ),
        StatusCode::NOT_FOUND
    );
    let huge = catalog["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["repoId"].as_str().unwrap().contains("405B"))
        .unwrap()["repoId"]
        .as_str()
        .unwrap()
        .to_string();
    let b = body(srv.admin.deploy_model::<Value>(&huge, &ok).await);
    assert!(
        b["error"]
            .as_str()
            .unwrap()
            .contains("no compatible compute"),
        "{b}"
    );
    assert_eq!(
        status(srv.admin.deploy_model::<Value>(&huge, &ok).await),
        StatusCode::CONFLICT
    );

    // None of that created anything.
    let listed: Value = srv.admin.list_endpoints("admin").await.unwrap();
    assert!(listed["items"].as_array().unwrap().is_empty());
}

#[tokio::test]
async fn endpoint_management_round_trip() {
    let srv = spawn().await;
    let mut spec = endpoint_body("my-endpoint");
    spec["model"]["secrets"] = json!({"API_KEY": "s3cr3t-value"});
    spec["model"]["env"] = json!({"MODE": "fast"});
    let created: Value = srv.admin.create_endpoint("admin", &spec).await.unwrap();
    assert_eq!(created["name"], "my-endpoint");
    assert_eq!(created["status"]["state"], "pending");
    assert_eq!(created["model"]["secrets"], json!({"API_KEY": null}));
    assert!(created["model"]
        .as_object()
        .unwrap()
        .contains_key("revision"));
    assert_eq!(created["model"]["image"], json!({"hub": {}}));
    assert_eq!(created["status"]["createdBy"]["name"], "admin");

    // Duplicate name -> 409.
    assert_eq!(
        status(srv.admin.create_endpoint::<Value>("admin", &spec).await),
        StatusCode::CONFLICT
    );

    // Partial update: nested objects are partial too; a null secret keeps its value.
    let updated: Value = srv
        .admin
        .update_endpoint("admin", "my-endpoint", &json!({"compute": {"scaling": {"maxReplica": 4}}, "model": {"env": {"MODE": "slow"}, "secrets": {"API_KEY": null, "OTHER": "x"}}}))
        .await
        .unwrap();
    assert_eq!(updated["compute"]["scaling"]["maxReplica"], 4);
    assert_eq!(updated["compute"]["scaling"]["minReplica"], 0);
    assert_eq!(updated["compute"]["instanceType"], "intel-icl");
    assert_eq!(updated["model"]["env"], json!({"MODE": "slow"}));
    assert_eq!(
        updated["model"]["secrets"],
        json!({"API_KEY": null, "OTHER": null})
    );

    // Secrets are encrypted at rest: no plaintext in the database files.
    for f in ["switchyard.db", "switchyard.db-wal"] {
        if let Ok(bytes) = std::fs::read(srv.data_dir.join(f)) {
            let hay = String::from_utf8_lossy(&bytes);
            assert!(!hay.contains("s3cr3t-value"), "plaintext secret in {f}");
        }
    }

    // An invalid update is a 400 and changes nothing.
    let before: Value = srv
        .admin
        .get_endpoint("admin", "my-endpoint")
        .await
        .unwrap();
    let b = body(
        srv.admin
            .update_endpoint::<Value>(
                "admin",
                "my-endpoint",
                &json!({"compute": {"scaling": {"minReplica": 9}}}),
            )
            .await,
    );
    assert!(b["issues"].is_array(), "{b}");
    assert_eq!(
        status(
            srv.admin
                .update_endpoint::<Value>("admin", "my-endpoint", &json!({"bogus": true}))
                .await
        ),
        StatusCode::BAD_REQUEST
    );
    let after: Value = srv
        .admin
        .get_endpoint("admin", "my-endpoint")
        .await
        .unwrap();
    // The runtime may move the status along meanwhile; what a refused update must not touch is the
    // rest of the resource (nor its last change: the runtime's writes keep `updatedBy`).
    let without_status = |mut v: Value| {
        let by = v["status"]["updatedBy"].take();
        v["status"] = by;
        v
    };
    assert_eq!(without_status(before), without_status(after.clone()));

    // A response body sent back as an update changes nothing and is accepted.
    let same: Value = srv
        .admin
        .update_endpoint("admin", "my-endpoint", &after)
        .await
        .unwrap();
    assert_eq!(same["compute"], after["compute"]);
    assert_eq!(
        same["model"]["secrets"],
        json!({"API_KEY": null, "OTHER": null})
    );

    // Unknown compute is a 400 naming the hardware list.
    let mut bad = endpoint_body("bad-compute");
    bad["compute"]["instanceSize"] = json!("x999");
    let b = body(srv.admin.create_endpoint::<Value>("admin", &bad).await);
    assert!(b["error"].as_str().unwrap().contains("/v2/provider"), "{b}");

    // Lifecycle: each action, and the state it leaves (or the status it is refused with).
    let act = |action: &'static str| {
        let admin = srv.admin.clone();
        async move {
            admin
                .endpoint_action::<Value>("admin", "my-endpoint", action)
                .await
                .map(|e| e["status"]["state"].as_str().unwrap_or("").to_string())
                .map_err(|e| e.status())
        }
    };
    // Resuming an endpoint that is already starting changes nothing (the runtime may have moved it on).
    let resumed = act("resume").await;
    assert!(
        matches!(resumed.as_deref(), Ok("pending" | "initializing")),
        "{resumed:?}"
    );
    assert_eq!(act("pause").await, Ok("paused".into()));
    assert_eq!(
        act("scale-to-zero").await,
        Err(Some(StatusCode::BAD_REQUEST))
    );
    assert_eq!(act("resume").await, Ok("pending".into()));
    assert_eq!(act("scale-to-zero").await, Ok("scaledToZero".into()));

    // Hardware list in the shape the client parses.
    let hw: Value = srv.admin.hardware("admin").await.unwrap();
    assert!(hw["vendors"][0]["regions"][0]["computes"][0]["quota"]["maxAccelerators"].is_number());

    // Delete, then it is gone.
    srv.admin
        .delete_endpoint("admin", "my-endpoint")
        .await
        .unwrap();
    assert_eq!(
        status(
            srv.admin
                .get_endpoint::<Value>("admin", "my-endpoint")
                .await
        ),
        StatusCode::NOT_FOUND
    );
    assert_eq!(
        status(srv.admin.delete_endpoint("admin", "my-endpoint").await),
        StatusCode::NOT_FOUND
    );
}

#[tokio::test]
async fn namespaces_roles_and_scopes() {
    let srv = spawn().await;
    let alice = srv.user("alice", None).await;
    let bob = srv.user("bob", None).await;
    let _: Value = srv.admin.admin_create_org("acme").await.unwrap();
    let _: Value = srv
        .admin
        .admin_set_member("acme", "alice", "write")
        .await
        .unwrap();
    let _: Value = srv
        .admin
        .admin_set_member("acme", "bob", "read")
        .await
        .unwrap();

    // Own namespace: yes. Someone else's: 403.
    let _: Value = alice
        .create_endpoint("alice", &endpoint_body("mine"))
        .await
        .unwrap();
    assert_eq!(
        status(bob.list_endpoints::<Value>("alice").await),
        StatusCode::FORBIDDEN
    );
    assert_eq!(
        status(
            bob.create_endpoint::<Value>("alice", &endpoint_body("x"))
                .await
        ),
        StatusCode::FORBIDDEN
    );

    // Organization: write members change, read members only read.
    let _: Value = alice
        .create_endpoint("acme", &endpoint_body("shared"))
        .await
        .unwrap();
    let listed: Value = bob.list_endpoints("acme").await.unwrap();
    assert_eq!(listed["items"][0]["name"], "shared");
    assert_eq!(
        status(
            bob.endpoint_action::<Value>("acme", "shared", "pause")
                .await
        ),
        StatusCode::FORBIDDEN
    );
    assert_eq!(
        status(bob.delete_endpoint("acme", "shared").await),
        StatusCode::FORBIDDEN
    );

    // Scoped tokens.
    let reader = srv.token_for("alice", Some(&["read-endpoints"])).await;
    let _: Value = reader.list_endpoints("alice").await.unwrap();
    let b = body(
        reader
            .create_endpoint::<Value>("alice", &endpoint_body("nope"))
            .await,
    );
    assert!(b["error"].as_str().unwrap().contains("write-endpoints"));
    let unrelated = srv.token_for("alice", Some(&["openid"])).await;
    assert_eq!(
        status(unrelated.list_endpoints::<Value>("alice").await),
        StatusCode::FORBIDDEN
    );
    let writer = srv.token_for("alice", Some(&["write-endpoints"])).await;
    let _: Value = writer
        .create_endpoint("alice", &endpoint_body("scoped"))
        .await
        .unwrap();

    // Non-admins cannot administer.
    assert_eq!(
        status(alice.admin_create_org::<Value>("evil").await),
        StatusCode::FORBIDDEN
    );

    // whoami in the client's shape.
    let me: Value = alice.whoami().await.unwrap();
    assert_eq!(me["type"], "user");
    assert_eq!(me["name"], "alice");
    assert_eq!(me["orgs"][0]["name"], "acme");
    assert_eq!(me["orgs"][0]["roleInOrg"], "write");
    assert_eq!(me["auth"]["accessToken"]["role"], "write");
    let me: Value = reader.whoami().await.unwrap();
    assert_eq!(me["auth"]["accessToken"]["role"], "fineGrained");
    assert_eq!(
        status(srv.anonymous().whoami::<Value>().await),
        StatusCode::UNAUTHORIZED
    );
}

#[tokio::test]
async fn expired_tokens_are_refused() {
    let srv = spawn().await;
    let _: Value = srv
        .admin
        .admin_create_user(&json!({"name": "carol"}))
        .await
        .unwrap();
    // The shortest lifetime is a second; wait it out.
    let token = srv
        .admin
        .admin_create_token("carol", &json!({"expiresIn": "1s"}))
        .await
        .unwrap();
    let carol = srv.anonymous().with_token(Some(token));
    tokio::time::sleep(std::time::Duration::from_millis(1200)).await;
    assert_eq!(
        status(carol.whoami::<Value>().await),
        StatusCode::UNAUTHORIZED
    );
}

#[tokio::test]
async fn admin_catalog_changes_show_in_the_list() {
    let srv = spawn().await;
    let entry = json!({
        "modelName": "tiny-model", "createdAt": "2026-01-02T03:04:05Z", "authorName": "switchyard",
        "license": "apache-2.0", "repoId": "switchyard/tiny-model", "task": "text-classification",
        "recipes": [{"accelerator": "cpu", "engineType": "tei", "publicId": "tiny-model-cpu-tei", "memoryGb": 1}]
    });
    let _: Value = srv.admin.admin_put_catalog_item(&entry).await.unwrap();
    let found: Value = srv
        .anonymous()
        .catalog_list(&[("search", "TINY-model")])
        .await
        .unwrap();
    assert_eq!(found["items"][0]["repoId"], "switchyard/tiny-model");
    assert!(
        found["items"][0]["recipes"][0].get("memoryGb").is_none(),
        "internal field stays internal"
    );

    let out: Value = srv
        .admin
        .deploy_recipe("tiny-model-cpu-tei", &json!({"namespace": "admin"}))
        .await
        .unwrap();
    assert!(out["endpoint"]["model"]["image"]["tei"]["url"]
        .as_str()
        .unwrap()
        .contains("cpu"));

    let mut bad = entry.clone();
    bad["recipes"][0]["memoryGb"] = json!(0);
    assert_eq!(
        status(srv.admin.admin_put_catalog_item::<Value>(&bad).await),
        StatusCode::BAD_REQUEST
    );

    srv.admin
        .admin_delete_catalog_item("switchyard/tiny-model")
        .await
        .unwrap();
    let found: Value = srv
        .anonymous()
        .catalog_list(&[("search", "tiny-model")])
        .await
        .unwrap();
    assert!(found["items"].as_array().unwrap().is_empty());
}

#[tokio::test]
async fn a_store_failure_is_a_bare_500() {
    let srv = spawn().await;
    // Break the real store under the running server: the catalog table disappears.
    let pool = srv.db().await;
    sqlx::raw_sql("DROP TABLE catalog_recipes; DROP TABLE catalog_items")
        .execute(&pool)
        .await
        .unwrap();
    pool.close().await;

    let reload = srv
        .admin
        .request::<Value>(reqwest::Method::POST, "/api/v1/admin/catalog/reload", None)
        .await;
    assert_eq!(status(reload), StatusCode::INTERNAL_SERVER_ERROR);
    let err = srv.anonymous().catalog_list::<Value>(&[]).await;
    let b = body(err);
    assert_eq!(
        b,
        json!({"error": "internal server error"}),
        "no internals leak"
    );
    // The rest of the service still answers.
    let _: Value = srv.admin.whoami().await.unwrap();
}

async fn stored_spec(srv: &common::TestServer, name: &str) -> Value {
    let pool = srv.db().await;
    let spec: String = sqlx::query_scalar("SELECT spec FROM endpoints WHERE name = $1")
        .bind(name)
        .fetch_one(&pool)
        .await
        .unwrap();
    pool.close().await;
    serde_json::from_str(&spec).unwrap()
}

#[tokio::test]
async fn secrets_updates_are_exact() {
    let srv = spawn().await;
    let mut spec = endpoint_body("sec");
    spec["model"]["secrets"] = json!({"API_KEY": "first-value"});
    let _: Value = srv.admin.create_endpoint("admin", &spec).await.unwrap();
    let sealed = stored_spec(&srv, "sec").await["model"]["secrets"]["API_KEY"].clone();
    assert!(sealed.as_str().unwrap().starts_with("enc:v1:"));

    // Sets API_KEY through an update and returns its stored ciphertext.
    let srv = &srv;
    let set_key = |value: &'static str| async move {
        let _: Value = srv
            .admin
            .update_endpoint(
                "admin",
                "sec",
                &json!({"model": {"secrets": {"API_KEY": value}}}),
            )
            .await
            .unwrap();
        stored_spec(srv, "sec").await["model"]["secrets"]["API_KEY"].clone()
    };
    // Sending the same value again keeps the same ciphertext: not a change. A new value is a new one.
    assert_eq!(set_key("first-value").await, sealed);
    assert_ne!(set_key("second-value").await, sealed);

    // A null for a secret that was never set has nothing to keep: 400, nothing stored.
    let b = body(
        srv.admin
            .update_endpoint::<Value>(
                "admin",
                "sec",
                &json!({"model": {"secrets": {"NEW": null}}}),
            )
            .await,
    );
    assert_eq!(b["issues"][0]["path"], "model.secrets.NEW");
    let now: Value = srv.admin.get_endpoint("admin", "sec").await.unwrap();
    assert_eq!(now["model"]["secrets"], json!({"API_KEY": null}));
}

/// A server's configuration with its data in `dir`, on a free loopback port.
fn config_in(dir: &std::path::Path) -> switchyard_server::Config {
    let mut config = switchyard_server::Config::default();
    config.store.data_dir = Some(dir.to_path_buf());
    config.server.listen = "127.0.0.1:0".parse().unwrap();
    config
}

/// Why a server with `config` does not start.
async fn refusal(config: &switchyard_server::Config) -> String {
    let built = switchyard_server::Application::build(config).await;
    built.err().expect("refuses to start").to_string()
}

#[tokio::test]
async fn a_lost_key_file_stops_the_start_instead_of_orphaning_secrets() {
    let dir = tempfile::tempdir().unwrap();
    let config = config_in(dir.path());
    drop(
        switchyard_server::Application::build(&config)
            .await
            .unwrap(),
    );
    std::fs::remove_file(dir.path().join("secret.key")).unwrap();
    let err = refusal(&config).await;
    assert!(err.contains("missing"), "{err}");
    assert!(
        !dir.path().join("secret.key").exists(),
        "no new key was made"
    );
}

#[tokio::test]
async fn a_public_url_that_is_not_one_stops_the_start() {
    let dir = tempfile::tempdir().unwrap();
    for bad in ["switchyard.example.com", "ftp://example.com", "http://"] {
        let mut config = config_in(dir.path());
        config.runtime.public_url = Some(bad.into());
        let err = refusal(&config).await;
        assert!(err.contains("runtime.public_url"), "{err}");
        assert!(
            !dir.path().join("switchyard.db").exists(),
            "nothing was created"
        );
    }
}

/// Every change through the API has its event in the outbox, written with the change; a refused
/// change has none.
#[tokio::test]
async fn changes_and_their_events_commit_together() {
    use switchyard_server::store::Store;
    let srv = spawn().await;
    let store = srv.store().await;
    let events = || async {
        store
            .read()
            .await
            .unwrap()
            .events_after(0, 10_000)
            .await
            .unwrap()
    };
    let seeded = events().await.len();

    let mut evented = endpoint_body("evented");
    evented["model"]["secrets"] = json!({"API_KEY": "outbox-sekrit-42"});
    let _: Value = srv.admin.create_endpoint("admin", &evented).await.unwrap();
    let after_create = events().await;
    let kinds: Vec<&str> = after_create[seeded..]
        .iter()
        .map(|e| e.kind.as_str())
        .collect();
    assert_eq!(kinds.first(), Some(&"endpoint.created"), "{kinds:?}");
    let created = &after_create[seeded];
    assert_eq!(
        (created.namespace.as_str(), created.subject.as_str()),
        ("admin", "evented")
    );
    assert_eq!(created.payload["endpoint"]["name"], "evented");

    // A refused create (the name is taken) and a refused update write nothing, events included.
    let before = events().await.len();
    let taken = srv
        .admin
        .create_endpoint::<Value>("admin", &endpoint_body("evented"))
        .await;
    assert_eq!(status(taken), StatusCode::CONFLICT);
    let bad = srv
        .admin
        .update_endpoint::<Value>("admin", "evented", &json!({"bogus": true}))
        .await;
    assert_eq!(status(bad), StatusCode::BAD_REQUEST);
    let after_refusals = events().await;
    assert!(
        after_refusals[before..]
            .iter()
            .all(|e| e.kind.as_str() == "endpoint.status"),
        "only the runtime's state changes may have come in between: {:?}",
        after_refusals[before..]
            .iter()
            .map(|e| e.kind)
            .collect::<Vec<_>>()
    );

    // An owner's action is a state change with both states; a delete is the last word.
    let _: Value = srv
        .admin
        .endpoint_action("admin", "evented", "pause")
        .await
        .unwrap();
    srv.admin.delete_endpoint("admin", "evented").await.unwrap();
    let all = events().await;
    let paused = all
        .iter()
        .rev()
        .find(|e| e.kind.as_str() == "endpoint.status" && e.payload["state"] == "paused")
        .expect("a paused event");
    assert!(
        paused.payload["previousState"].is_string(),
        "{}",
        paused.payload
    );
    assert_eq!(
        all.last().map(|e| e.kind.as_str()),
        Some("endpoint.deleted")
    );
    // Every event's payload shows the endpoint without its secrets' values.
    let mine: Vec<_> = all.iter().filter(|e| e.subject == "evented").collect();
    assert!(
        mine.len() >= 3,
        "{:?}",
        mine.iter().map(|e| e.kind).collect::<Vec<_>>()
    );
    for e in mine {
        assert!(
            !e.payload.to_string().contains("outbox-sekrit-42"),
            "{}",
            e.payload
        );
        assert!(e.payload["endpoint"]["model"]["secrets"]
            .as_object()
            .is_some_and(|s| s.contains_key("API_KEY")));
    }
}

fn sized(name: &str, max_replica: u32) -> Value {
    let mut body = endpoint_body(name);
    body["compute"]["scaling"]["maxReplica"] = json!(max_replica);
    body
}

/// A namespace holds at most its quota of endpoints and replicas (an administrator's override here), and
/// of each instance type's accelerators (the hardware list's): what goes over is a 403 that changes
/// nothing, and only what grows is checked.
#[tokio::test]
async fn quotas_hold_endpoints_replicas_and_accelerators() {
    use reqwest::Method;
    let srv = spawn().await;
    let dora = srv.user("dora", None).await;
    let set: Value = srv
        .admin
        .request(
            Method::PUT,
            "/api/v1/admin/quotas/dora",
            Some(&json!({"endpoints": 2, "replicas": 3})),
        )
        .await
        .unwrap();
    assert_eq!(set["limits"], json!({"endpoints": 2, "replicas": 3}));

    let _: Value = dora.create_endpoint("dora", &sized("q1", 2)).await.unwrap();
    let over = dora.create_endpoint::<Value>("dora", &sized("q2", 2)).await;
    let b = body(over);
    assert!(b["error"].as_str().unwrap().contains("quota"), "{b}");
    let _: Value = dora.create_endpoint("dora", &sized("q2", 1)).await.unwrap();
    let third = dora.create_endpoint::<Value>("dora", &sized("q3", 1)).await;
    assert_eq!(status(third), StatusCode::FORBIDDEN);
    let grow = dora
        .update_endpoint::<Value>(
            "dora",
            "q1",
            &json!({"compute": {"scaling": {"maxReplica": 3}}}),
        )
        .await;
    assert_eq!(status(grow), StatusCode::FORBIDDEN);
    let listed: Value = dora.list_endpoints("dora").await.unwrap();
    let names: Vec<&str> = listed["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|e| e["name"].as_str())
        .collect();
    assert_eq!(names, ["q1", "q2"], "refusals changed nothing");
    let q1: Value = dora.get_endpoint("dora", "q1").await.unwrap();
    assert_eq!(q1["compute"]["scaling"]["maxReplica"], 2);

    // Lowered below what the namespace holds: what does not grow still goes through.
    let _: Value = srv
        .admin
        .request(
            Method::PUT,
            "/api/v1/admin/quotas/dora",
            Some(&json!({"replicas": 1})),
        )
        .await
        .unwrap();
    let _: Value = dora
        .update_endpoint(
            "dora",
            "q1",
            &json!({"compute": {"scaling": {"minReplica": 1}}}),
        )
        .await
        .unwrap();

    // Instance types: 17 replicas of a 2-accelerator instance hold 34 of the type's 32.
    let _: Value = srv
        .admin
        .request(
            Method::PUT,
            "/api/v1/admin/quotas/dora",
            Some(&json!({"endpoints": 10, "replicas": 100})),
        )
        .await
        .unwrap();
    let b = body(
        dora.create_endpoint::<Value>("dora", &sized("big", 17))
            .await,
    );
    assert!(b["error"].as_str().unwrap().contains("accelerators"), "{b}");
    let hw: Value = dora.hardware("dora").await.unwrap();
    let used: Vec<u64> = hw["vendors"][0]["regions"][0]["computes"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["instanceType"] == "intel-icl")
        .map(|c| c["quota"]["usedAccelerators"].as_u64().unwrap())
        .collect();
    assert!(
        !used.is_empty() && used.iter().all(|u| *u == 6),
        "q1 and q2 hold 3 x 2 accelerators: {used:?}"
    );
    let shown: Value = srv
        .admin
        .request(Method::GET, "/api/v1/admin/quotas/dora", None)
        .await
        .unwrap();
    assert_eq!(shown["used"], json!({"endpoints": 2, "replicas": 3}));
}

/// `alice`, `Alice` and `ALICE` are one name, for users and organizations alike.
#[tokio::test]
async fn names_are_unique_without_regard_to_case() {
    let srv = spawn().await;
    let _: Value = srv
        .admin
        .admin_create_user(&json!({"name": "alice"}))
        .await
        .unwrap();
    let b = body(
        srv.admin
            .admin_create_user::<Value>(&json!({"name": "Alice"}))
            .await,
    );
    assert!(
        b["error"].as_str().unwrap().contains("already taken"),
        "{b}"
    );
    assert_eq!(
        status(srv.admin.admin_create_org::<Value>("ALICE").await),
        StatusCode::CONFLICT
    );
    let users: Value = srv.admin.admin_list_users().await.unwrap();
    let alices = users
        .as_array()
        .unwrap()
        .iter()
        .filter(|u| u["name"].as_str().unwrap().eq_ignore_ascii_case("alice"))
        .count();
    assert_eq!(alices, 1);
}

/// Users and organizations can be removed: their endpoints go (with their events), their tokens stop
/// working at once; a disabled user's tokens are refused until it is enabled again; the last
/// administrator stays.
#[tokio::test]
async fn accounts_can_be_disabled_and_deleted() {
    use reqwest::Method;
    use switchyard_server::store::Store;
    let srv = spawn().await;
    let erin = srv.user("erin", None).await;
    let _: Value = erin
        .create_endpoint("erin", &endpoint_body("mine"))
        .await
        .unwrap();

    let off: Value = srv
        .admin
        .request(Method::POST, "/api/v1/admin/users/erin/disable", None)
        .await
        .unwrap();
    assert!(off["disabledAt"].is_string(), "{off}");
    assert_eq!(
        status(erin.whoami::<Value>().await),
        StatusCode::UNAUTHORIZED
    );
    let _: Value = srv
        .admin
        .request(Method::POST, "/api/v1/admin/users/erin/enable", None)
        .await
        .unwrap();
    let _: Value = erin.whoami().await.unwrap();

    let gone: Value = srv
        .admin
        .request(Method::DELETE, "/api/v1/admin/users/erin", None)
        .await
        .unwrap();
    assert_eq!(gone, json!({"endpointsDeleted": 1}));
    assert_eq!(
        status(erin.whoami::<Value>().await),
        StatusCode::UNAUTHORIZED
    );
    assert_eq!(
        status(srv.admin.get_endpoint::<Value>("erin", "mine").await),
        StatusCode::NOT_FOUND
    );
    let store = srv.store().await;
    let events = store
        .read()
        .await
        .unwrap()
        .events_after(0, 10_000)
        .await
        .unwrap();
    assert!(events
        .iter()
        .any(|e| e.kind.as_str() == "endpoint.deleted" && e.namespace == "erin"));
    // The name is free again.
    let _: Value = srv
        .admin
        .admin_create_user(&json!({"name": "erin"}))
        .await
        .unwrap();

    // An organization goes with its members' access to it.
    let _: Value = srv.admin.admin_create_org("acme").await.unwrap();
    let fred = srv.user("fred", None).await;
    let _: Value = srv
        .admin
        .admin_set_member("acme", "fred", "write")
        .await
        .unwrap();
    let _: Value = fred.list_endpoints("acme").await.unwrap();
    srv.admin
        .request::<Value>(Method::DELETE, "/api/v1/admin/orgs/acme/members/fred", None)
        .await
        .unwrap();
    assert_eq!(
        status(fred.list_endpoints::<Value>("acme").await),
        StatusCode::FORBIDDEN
    );
    let _: Value = srv
        .admin
        .request(Method::DELETE, "/api/v1/admin/orgs/acme", None)
        .await
        .unwrap();
    assert_eq!(
        status(srv.admin.list_endpoints::<Value>("acme").await),
        StatusCode::NOT_FOUND
    );

    // The last enabled administrator can be neither deleted nor disabled.
    let last = srv
        .admin
        .request::<Value>(Method::DELETE, "/api/v1/admin/users/admin", None)
        .await;
    assert_eq!(status(last), StatusCode::BAD_REQUEST);
    let last = srv
        .admin
        .request::<Value>(Method::POST, "/api/v1/admin/users/admin/disable", None)
        .await;
    assert_eq!(status(last), StatusCode::BAD_REQUEST);
}

/// What a raw request with the admin's token got: status, `X-Error-Message` (empty when absent), body.
async fn send_raw(
    srv: &common::TestServer,
    method: reqwest::Method,
    path: &str,
    content_type: Option<&str>,
    body: &str,
) -> (StatusCode, String, String) {
    let token = std::fs::read_to_string(srv.data_dir.join("admin-token")).unwrap();
    let mut req = reqwest::Client::new()
        .request(method, format!("{}{path}", srv.url))
        .bearer_auth(token.trim())
        .body(body.to_string());
    if let Some(t) = content_type {
        req = req.header("content-type", t);
    }
    let r = req.send().await.unwrap();
    let status = r.status();
    let message = r
        .headers()
        .get("x-error-message")
        .map(|v| v.to_str().unwrap().to_string())
        .unwrap_or_default();
    (status, message, r.text().await.unwrap())
}

/// Asserts the spec's invalid-body answer: 400 `{error, issues: [{path, message}]}` with an issue at
/// `path`, and the message in `X-Error-Message` too.
fn assert_invalid_at(answer: &(StatusCode, String, String), path: &str, what: &str) {
    let (status, message, text) = answer;
    assert_eq!(*status, StatusCode::BAD_REQUEST, "{what}: {text}");
    let b: Value = serde_json::from_str(text).unwrap();
    assert!(b["error"].is_string(), "{what}: {b}");
    assert!(!message.is_empty(), "{what}: X-Error-Message");
    let issues = b["issues"]
        .as_array()
        .unwrap_or_else(|| panic!("{what}: {b}"));
    assert!(
        issues
            .iter()
            .any(|i| i["path"] == path && i["message"].is_string()),
        "{what}: no issue at {path}: {b}"
    );
}

async fn endpoint_names(srv: &common::TestServer, namespace: &str) -> Vec<String> {
    let listed: Value = srv.admin.list_endpoints(namespace).await.unwrap();
    listed["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["name"].as_str().unwrap().to_string())
        .collect()
}

fn llamacpp_image(model_path: &str) -> Value {
    json!({"llamacpp": {"url": "ghcr.io/ggml-org/llama.cpp:server", "modelPath": model_path}})
}

#[tokio::test]
async fn repository_revision_and_model_path_are_checked_as_what_they_are() {
    let srv = spawn().await;
    let post = reqwest::Method::POST;
    let json_type = Some("application/json");
    let cases = [
        ("/model/repository", json!("a/b;id"), "model.repository"),
        ("/model/repository", json!("a/b$(id)"), "model.repository"),
        ("/model/repository", json!("--help/x"), "model.repository"),
        ("/model/repository", json!("a/b c"), "model.repository"),
        (
            "/model/revision",
            json!("--output=/etc/x"),
            "model.revision",
        ),
        ("/model/revision", json!("../../x"), "model.revision"),
        (
            "/model/image",
            llamacpp_image("../../../etc/passwd"),
            "model.image.llamacpp.modelPath",
        ),
        (
            "/model/image",
            llamacpp_image("/repository/../../etc/passwd"),
            "model.image.llamacpp.modelPath",
        ),
    ];
    for (pointer, value, path) in cases {
        let mut spec = endpoint_body("shell");
        *spec.pointer_mut(pointer).unwrap() = value.clone();
        let answer = send_raw(
            &srv,
            post.clone(),
            "/v2/endpoint/admin",
            json_type,
            &spec.to_string(),
        )
        .await;
        assert_invalid_at(&answer, path, &value.to_string());
    }
    assert!(
        endpoint_names(&srv, "admin").await.is_empty(),
        "nothing was created"
    );

    // The same fields hold what they are for.
    let mut spec = endpoint_body("fine");
    spec["model"]["revision"] = json!("refs/pr/1");
    spec["model"]["framework"] = json!("llamacpp");
    spec["model"]["image"] = llamacpp_image("/repository/Q4_K_M/m-Q4_K_M.gguf");
    let _: Value = srv.admin.create_endpoint("admin", &spec).await.unwrap();

    // An update re-checks them, and a refused one changes nothing.
    let before = stored_spec(&srv, "fine").await;
    for (patch, path) in [
        (
            json!({"model": {"revision": "--output=/etc/x"}}),
            "model.revision",
        ),
        (
            json!({"model": {"repository": "a/b;id"}}),
            "model.repository",
        ),
        (
            json!({"model": {"image": {"llamacpp": {"modelPath": "../../../etc/passwd"}}}}),
            "model.image.llamacpp.modelPath",
        ),
    ] {
        let answer = send_raw(
            &srv,
            reqwest::Method::PUT,
            "/v2/endpoint/admin/fine",
            json_type,
            &patch.to_string(),
        )
        .await;
        assert_invalid_at(&answer, path, &patch.to_string());
    }
    assert_eq!(stored_spec(&srv, "fine").await, before);
    assert_eq!(endpoint_names(&srv, "admin").await, ["fine"]);

    // Catalog items carry revisions and model files into deployed specs: checked the same way.
    let entry = json!({
        "modelName": "m", "createdAt": "2026-01-02T03:04:05Z", "authorName": "acme",
        "license": "mit", "repoId": "acme/m", "task": "text-generation",
        "recipes": [{"accelerator": "cpu", "engineType": "llamacpp", "publicId": "acme-m-cpu",
            "memoryGb": 1, "ggufFile": "../../../etc/passwd.gguf", "revision": "--output=/etc/x"}]
    });
    let answer = send_raw(
        &srv,
        post.clone(),
        "/api/v1/admin/catalog/items",
        json_type,
        &entry.to_string(),
    )
    .await;
    assert_invalid_at(&answer, "recipes[0].ggufFile", "catalog item");
    assert_invalid_at(&answer, "recipes[0].revision", "catalog item");
    let found: Value = srv
        .anonymous()
        .catalog_list(&[("search", "acme")])
        .await
        .unwrap();
    assert!(found["items"].as_array().unwrap().is_empty());
}

#[tokio::test]
async fn malformed_secrets_are_never_echoed() {
    let srv = spawn().await;
    const MARKER: &str = "sekrit-123";
    const NUMBER: i64 = 987_654_321;
    let shapes = [
        json!(MARKER),
        json!([MARKER]),
        json!({"TOKEN": NUMBER}),
        json!({"TOKEN": [MARKER]}),
        json!({"TOKEN": {"value": MARKER}}),
        json!({"TOKEN": true}),
    ];
    let mut bodies: Vec<(String, Value)> = shapes
        .iter()
        .map(|secrets| {
            let mut spec = endpoint_body("leaky");
            spec["model"]["secrets"] = secrets.clone();
            (format!("secrets {secrets}"), spec)
        })
        .collect();
    for credentials in [
        json!({"username": "u", "password": NUMBER}),
        json!({"username": "u", "password": [MARKER]}),
        json!(format!("u:{MARKER}")),
    ] {
        let mut spec = endpoint_body("leaky");
        spec["model"]["image"] = json!({"custom": {"url": "x", "credentials": credentials}});
        bodies.push((format!("credentials {credentials}"), spec));
    }
    let mut moved = endpoint_body("leaky");
    moved["model"] = json!(format!("secrets: {MARKER}"));
    bodies.push(("model as a string".into(), moved));
    bodies.push(("the body as a string".into(), json!(MARKER)));

    let _: Value = srv
        .admin
        .create_endpoint("admin", &endpoint_body("kept"))
        .await
        .unwrap();
    for (what, spec) in &bodies {
        for (method, path, body) in [
            (reqwest::Method::POST, "/v2/endpoint/admin", spec.clone()),
            (
                reqwest::Method::PUT,
                "/v2/endpoint/admin/kept",
                json!({"model": spec.get("model").cloned().unwrap_or(spec.clone())}),
            ),
        ] {
            let (status, message, text) = send_raw(
                &srv,
                method,
                path,
                Some("application/json"),
                &body.to_string(),
            )
            .await;
            assert_eq!(status, StatusCode::BAD_REQUEST, "{what}: {text}");
            let b: Value = serde_json::from_str(&text).unwrap();
            assert!(b["issues"].is_array() && !message.is_empty(), "{what}: {b}");
            for leak in [MARKER, &NUMBER.to_string()] {
                assert!(!text.contains(leak), "{what}: {path} echoed it: {text}");
                assert!(
                    !message.contains(leak),
                    "{what}: {path} X-Error-Message: {message}"
                );
            }
        }
    }
    assert_eq!(endpoint_names(&srv, "admin").await, ["kept"]);
}

#[tokio::test]
async fn a_private_endpoint_names_its_private_service_and_names_do_not_start_with_a_dash() {
    let srv = spawn().await;
    let post = reqwest::Method::POST;
    let json_type = Some("application/json");
    let mut private = endpoint_body("private-one");
    private["type"] = json!("private");
    let answer = send_raw(
        &srv,
        post.clone(),
        "/v2/endpoint/admin",
        json_type,
        &private.to_string(),
    )
    .await;
    assert_invalid_at(&answer, "privateService", "private without privateService");
    for name in ["-x", "--help"] {
        let answer = send_raw(
            &srv,
            post.clone(),
            "/v2/endpoint/admin",
            json_type,
            &endpoint_body(name).to_string(),
        )
        .await;
        assert_invalid_at(&answer, "name", name);
    }

    // The catalog's deploy says the same, at its own paths.
    let catalog: Value = srv.anonymous().catalog_list(&[]).await.unwrap();
    let recipe = catalog["items"][0]["recipes"][0]["publicId"]
        .as_str()
        .unwrap();
    let deploy = format!("/api/v1/catalog/recipe/{recipe}/deploy");
    for (config, path) in [
        (json!({"type": "private"}), "config.privateService"),
        (json!({"name": "-x"}), "config.name"),
    ] {
        let body = json!({"namespace": "admin", "config": config});
        let answer = send_raw(&srv, post.clone(), &deploy, json_type, &body.to_string()).await;
        assert_invalid_at(&answer, path, &config.to_string());
    }
    assert!(
        endpoint_names(&srv, "admin").await.is_empty(),
        "nothing was created"
    );

    // With the account it serves, a private endpoint is created; a private one cannot drop it.
    private["privateService"] = json!({"accountId": "123456789012", "region": "us-east-1"});
    let created: Value = srv.admin.create_endpoint("admin", &private).await.unwrap();
    assert_eq!(created["privateService"]["accountId"], "123456789012");
    let before = stored_spec(&srv, "private-one").await;
    let answer = send_raw(
        &srv,
        reqwest::Method::PUT,
        "/v2/endpoint/admin/private-one",
        json_type,
        &json!({"privateService": null}).to_string(),
    )
    .await;
    assert_invalid_at(&answer, "privateService", "dropping privateService");
    assert_eq!(stored_spec(&srv, "private-one").await, before);
}

#[tokio::test]
async fn bodies_must_be_sent_as_json() {
    let srv = spawn().await;
    let spec = endpoint_body("typed").to_string();
    let catalog: Value = srv.anonymous().catalog_list(&[]).await.unwrap();
    let recipe = catalog["items"][0]["recipes"][0]["publicId"]
        .as_str()
        .unwrap();
    let deploy = format!("/api/v1/catalog/recipe/{recipe}/deploy");
    let routes = [
        (
            reqwest::Method::POST,
            "/v2/endpoint/admin".to_string(),
            spec.clone(),
        ),
        (
            reqwest::Method::POST,
            deploy,
            json!({"namespace": "admin"}).to_string(),
        ),
        (
            reqwest::Method::POST,
            "/api/v1/admin/users".to_string(),
            json!({"name": "typed-user"}).to_string(),
        ),
    ];
    for (method, path, body) in &routes {
        for content_type in [
            None,
            Some("text/plain"),
            Some("application/x-www-form-urlencoded"),
            Some("multipart/form-data; boundary=x"),
        ] {
            let (status, message, text) =
                send_raw(&srv, method.clone(), path, content_type, body).await;
            let what = format!("{method} {path} with {content_type:?}");
            assert_eq!(status, StatusCode::UNSUPPORTED_MEDIA_TYPE, "{what}: {text}");
            let b: Value = serde_json::from_str(&text).unwrap();
            assert!(
                b["error"].as_str().unwrap().contains("application/json"),
                "{what}: {b}"
            );
            assert!(message.contains("application/json"), "{what}");
        }
    }
    assert!(
        endpoint_names(&srv, "admin").await.is_empty(),
        "nothing was created"
    );
    let users: Value = srv.admin.admin_list_users().await.unwrap();
    assert!(!users.to_string().contains("typed-user"));

    // JSON with a charset parameter (any case) is JSON; so is a +json type.
    let (status, _, text) = send_raw(
        &srv,
        reqwest::Method::POST,
        "/v2/endpoint/admin",
        Some("Application/JSON; charset=utf-8"),
        &spec,
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{text}");
    let patch = json!({"compute": {"scaling": {"maxReplica": 3}}}).to_string();
    for content_type in [None, Some("text/plain")] {
        let (status, _, _) = send_raw(
            &srv,
            reqwest::Method::PUT,
            "/v2/endpoint/admin/typed",
            content_type,
            &patch,
        )
        .await;
        assert_eq!(status, StatusCode::UNSUPPORTED_MEDIA_TYPE);
    }
    let (status, _, text) = send_raw(
        &srv,
        reqwest::Method::PUT,
        "/v2/endpoint/admin/typed",
        Some("application/merge-patch+json"),
        &patch,
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{text}");
    // Routes that take no body need no content type, as the Python client sends them.
    let (status, _, text) = send_raw(
        &srv,
        reqwest::Method::POST,
        "/v2/endpoint/admin/typed/pause",
        None,
        "",
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{text}");
}

/// A password set over the admin API is stored as an Argon2id hash, never as itself, and signs its user
/// in (by the name in any case) while the user is enabled; a wrong password, a user without one, an
/// organization and an unknown name sign nobody in. Refused passwords are never quoted back.
#[tokio::test]
async fn passwords_are_stored_hashed_and_checked() {
    use reqwest::Method;
    use switchyard_server::services::accounts::check_password;
    let srv = spawn().await;
    let store = srv.store().await;
    let db = srv.db().await;
    let stored = |name: &'static str| {
        let db = db.clone();
        async move {
            sqlx::query_scalar::<_, Option<String>>(
                "SELECT password_hash FROM accounts WHERE name = $1",
            )
            .bind(name)
            .fetch_one(&db)
            .await
            .unwrap()
        }
    };
    let signs_in = |name: &'static str, password: &'static str| {
        let store = &store;
        async move {
            check_password(store, name, password)
                .await
                .unwrap()
                .map(|a| a.name)
        }
    };

    // Created with a password, then given another one.
    let gina: Value = srv
        .admin
        .admin_create_user(&json!({"name": "gina", "password": "first password"}))
        .await
        .unwrap();
    assert!(
        gina.get("password").is_none() && gina.get("passwordHash").is_none(),
        "{gina}"
    );
    assert_eq!(
        signs_in("gina", "first password").await.as_deref(),
        Some("gina")
    );
    let (set, _, text) = send_raw(
        &srv,
        Method::PUT,
        "/api/v1/admin/users/gina/password",
        Some("application/json"),
        &json!({"password": "correct horse battery"}).to_string(),
    )
    .await;
    assert_eq!(set, StatusCode::NO_CONTENT, "{text}");
    let hash = stored("gina").await.expect("a stored hash");
    assert!(hash.starts_with("$argon2id$"), "{hash}");
    assert!(!hash.contains("correct horse battery"));
    let users: Value = srv.admin.admin_list_users().await.unwrap();
    assert!(!users.to_string().contains("argon2"), "{users}");

    assert_eq!(
        signs_in("gina", "correct horse battery").await.as_deref(),
        Some("gina")
    );
    assert_eq!(
        signs_in("GINA", "correct horse battery").await.as_deref(),
        Some("gina")
    );
    assert_eq!(signs_in("gina", "first password").await, None);
    assert_eq!(signs_in("gina", "correct horse batterY").await, None);
    assert_eq!(signs_in("nobody", "correct horse battery").await, None);

    // A user without a password, and an organization, sign nobody in.
    let _: Value = srv
        .admin
        .admin_create_user(&json!({"name": "hank"}))
        .await
        .unwrap();
    assert_eq!(stored("hank").await, None);
    assert_eq!(signs_in("hank", "").await, None);
    let _: Value = srv.admin.admin_create_org("acme").await.unwrap();
    assert_eq!(
        status(
            srv.admin
                .admin_set_password("acme", "correct horse battery")
                .await
        ),
        StatusCode::NOT_FOUND
    );
    assert_eq!(signs_in("acme", "correct horse battery").await, None);

    // A disabled user does not sign in, with the right password or not, until enabled again.
    let _: Value = srv
        .admin
        .request(Method::POST, "/api/v1/admin/users/gina/disable", None)
        .await
        .unwrap();
    assert_eq!(signs_in("gina", "correct horse battery").await, None);
    let _: Value = srv
        .admin
        .request(Method::POST, "/api/v1/admin/users/gina/enable", None)
        .await
        .unwrap();
    assert_eq!(
        signs_in("gina", "correct horse battery").await.as_deref(),
        Some("gina")
    );

    // Refusals: too short (no user is created with it), not a string, an unknown user, not an admin.
    let short = send_raw(
        &srv,
        Method::POST,
        "/api/v1/admin/users",
        Some("application/json"),
        &json!({"name": "ivan", "password": "seven77"}).to_string(),
    )
    .await;
    assert_invalid_at(&short, "password", "a short password");
    assert!(!short.2.contains("seven77"), "{}", short.2);
    let users: Value = srv.admin.admin_list_users().await.unwrap();
    assert!(!users.to_string().contains("ivan"));
    let short = send_raw(
        &srv,
        Method::PUT,
        "/api/v1/admin/users/gina/password",
        Some("application/json"),
        &json!({"password": "seven77"}).to_string(),
    )
    .await;
    assert_invalid_at(&short, "password", "a short password");
    let number = send_raw(
        &srv,
        Method::PUT,
        "/api/v1/admin/users/gina/password",
        Some("application/json"),
        r#"{"password": 31415926535}"#,
    )
    .await;
    assert_invalid_at(&number, "password", "a number");
    assert!(
        !number.1.contains("31415926535") && !number.2.contains("31415926535"),
        "{number:?}"
    );
    assert_eq!(
        status(
            srv.admin
                .admin_set_password("nobody", "correct horse battery")
                .await
        ),
        StatusCode::NOT_FOUND
    );
    let hank = srv.token_for("hank", None).await;
    assert_eq!(
        status(hank.admin_set_password("gina", "taken over by hank").await),
        StatusCode::FORBIDDEN
    );
    assert_eq!(
        signs_in("gina", "correct horse battery").await.as_deref(),
        Some("gina")
    );
}
