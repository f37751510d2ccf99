//! Property tests: arbitrary bodies and query strings thrown at the real router never panic, never
//! produce a 5xx, and always answer with a JSON error object.

use std::sync::OnceLock;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use proptest::prelude::*;
use serde_json::Value;
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
        let _ = EndpointSpec::parse(&v);
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
