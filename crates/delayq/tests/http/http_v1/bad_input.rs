//! Bad input and limits: each invalid field of a push named in its 400, bodies that are not a
//! JSON object, any content type, bodies over the limits (413), and arbitrary requests to every
//! operation that takes a body, which get a 4xx with the error body or a success, never a 5xx.

use super::*;

async fn push_refuses_each_invalid_field_naming_it_and_changes_nothing(b: &Backend) {
    let app = TestApp::new(b);
    pushed(&app, json!({"topic": "t", "id": "existing"})).await;
    let before = stats(&app).await;
    let backoff_65: Vec<u64> = vec![1; 65];
    let cases = [
        (json!({}), "topic"),
        (json!({"topic": null}), "topic"),
        (json!({"topic": ""}), "topic"),
        (json!({"topic": "a b"}), "topic"),
        (json!({"topic": "a,b"}), "topic"),
        (json!({"topic": "a\u{1}"}), "topic"),
        (json!({"topic": "x".repeat(129)}), "topic"),
        (json!({"topic": 5}), "topic"),
        (json!({"topic": "t", "id": ""}), "id"),
        (json!({"topic": "t", "id": "a\u{7}b"}), "id"),
        (json!({"topic": "t", "id": "a\nb"}), "id"),
        (json!({"topic": "t", "id": "x".repeat(257)}), "id"),
        (json!({"topic": "t", "id": 12}), "id"),
        (json!({"topic": "t", "body": {"order": 42}}), "body"),
        (json!({"topic": "t", "delay_ms": -1}), "delay_ms"),
        (json!({"topic": "t", "delay_ms": 1.5}), "delay_ms"),
        (json!({"topic": "t", "delay_ms": "5s"}), "delay_ms"),
        (json!({"topic": "t", "delay_ms": u64::MAX}), "delay_ms"),
        (json!({"topic": "t", "delay_ms": 1e30}), "delay_ms"),
        (
            json!({"topic": "t", "delay_ms": 5, "run_at_ms": 5}),
            "run_at_ms",
        ),
        (json!({"topic": "t", "run_at_ms": -1}), "run_at_ms"),
        (
            json!({"topic": "t", "run_at_ms": MAX_RUN_AT + 1}),
            "run_at_ms",
        ),
        (json!({"topic": "t", "ttr_ms": "60000"}), "ttr_ms"),
        (json!({"topic": "t", "ttr_ms": 1.5}), "ttr_ms"),
        (json!({"topic": "t", "ttr_ms": 0}), "ttr_ms"),
        (json!({"topic": "t", "ttr_ms": 86_400_001}), "ttr_ms"),
        (
            json!({"topic": "t", "priority": 4_294_967_296_u64}),
            "priority",
        ),
        (json!({"topic": "t", "priority": -1}), "priority"),
        (json!({"topic": "t", "max_attempts": -1}), "max_attempts"),
        (
            json!({"topic": "t", "max_attempts": 4_294_967_296_u64}),
            "max_attempts",
        ),
        (json!({"topic": "t", "backoff_ms": 1000}), "backoff_ms"),
        (json!({"topic": "t", "backoff_ms": "1s"}), "backoff_ms"),
        (
            json!({"topic": "t", "backoff_ms": [1, -2]}),
            "backoff_ms[1]",
        ),
        (
            json!({"topic": "t", "backoff_ms": [1, "2"]}),
            "backoff_ms[1]",
        ),
        (
            json!({"topic": "t", "backoff_ms": backoff_65}),
            "backoff_ms",
        ),
        (
            json!({"topic": "t", "backoff_ms": [u64::MAX]}),
            "backoff_ms",
        ),
        (json!({"topic": "t", "replace": "yes"}), "replace"),
        (json!({"topic": "t", "delay": 5}), "delay"),
        (json!({"topic": "t", "ttr": 5}), "ttr"),
    ];
    for (body, field) in cases {
        let r = push(&app, body.clone()).await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST, "{body}: {:?}", r.json);
        assert_error(&r, StatusCode::BAD_REQUEST, "invalid_field", Some(field));
        let message = r.json["error"]["message"].as_str().unwrap();
        assert!(message.starts_with(&format!("{field}: ")), "{message}");
        assert_eq!(stats(&app).await, before, "{body}");
    }
    // At the limits it is fine.
    let ok = json!({"topic": "x".repeat(128), "id": "é".repeat(256), "ttr_ms": 86_400_000,
                    "priority": 4_294_967_295_u64, "max_attempts": 4_294_967_295_u64,
                    "backoff_ms": vec![1; 64], "run_at_ms": MAX_RUN_AT});
    pushed(&app, ok).await;
    // Nulls are absent fields.
    let j = pushed(
        &app,
        json!({"topic": "t", "id": null, "delay_ms": null, "replace": null}),
    )
    .await;
    assert_eq!(j["state"], "ready");
}

async fn push_refuses_bodies_that_are_not_a_json_object(b: &Backend) {
    let app = TestApp::new(b);
    let before = stats(&app).await;
    for body in [
        "",
        "  ",
        "not json",
        "{\"topic\": \"t\"",
        "[]",
        "[{\"topic\":\"t\"}]",
        "\"t\"",
        "42",
        "null",
    ] {
        let r = app
            .send(Method::POST, "/v1/jobs", body, Some("application/json"))
            .await;
        assert_error(&r, StatusCode::BAD_REQUEST, "invalid_json", None);
        assert_eq!(stats(&app).await, before, "{body}");
    }
    for path in ["/v1/jobs/batch", "/v1/reserve", "/v1/finish"] {
        let r = app.send(Method::POST, path, "[1]", None).await;
        assert_error(&r, StatusCode::BAD_REQUEST, "invalid_json", None);
    }
}

async fn push_accepts_any_or_no_content_type(b: &Backend) {
    let app = TestApp::new(b);
    for (i, ct) in [
        None,
        Some("text/plain"),
        Some("application/x-www-form-urlencoded"),
    ]
    .into_iter()
    .enumerate()
    {
        let body = json!({"topic": "t", "id": format!("j{i}")}).to_string();
        let r = app.send(Method::POST, "/v1/jobs", body, ct).await;
        assert_eq!(r.status, StatusCode::CREATED, "{ct:?}: {:?}", r.json);
    }
}

async fn push_of_a_body_over_the_limit_is_413_naming_body(b: &Backend) {
    let app = TestApp::with_config(b, small_limits());
    pushed(&app, json!({"topic": "t", "body": "x".repeat(16)})).await;
    // The limit is in bytes, not characters.
    pushed(&app, json!({"topic": "t", "body": "é".repeat(8)})).await;
    let before = stats(&app).await;
    for body in ["x".repeat(17), "é".repeat(9)] {
        let r = push(&app, json!({"topic": "t", "body": body})).await;
        assert_error(&r, StatusCode::PAYLOAD_TOO_LARGE, "too_large", Some("body"));
    }
    assert_eq!(stats(&app).await, before);
}

async fn a_request_body_over_the_server_limit_is_413(b: &Backend) {
    let app = TestApp::with_config(b, small_limits());
    let huge = json!({"topic": "t", "body": "x".repeat(4 << 20)}).to_string();
    for path in ["/v1/jobs", "/v1/jobs/batch", "/v1/reserve"] {
        let r = app.send(Method::POST, path, huge.clone(), None).await;
        assert_error(&r, StatusCode::PAYLOAD_TOO_LARGE, "too_large", None);
    }
    assert_eq!(stats(&app).await["topics"], json!({}));
}

/// Field names worth guessing: every name /v1 knows, plus anything.
fn field_name() -> impl Strategy<Value = String> {
    prop_oneof![
        3 => prop::sample::select(vec![
            "topic", "id", "body", "delay_ms", "run_at_ms", "ttr_ms", "priority",
            "max_attempts", "backoff_ms", "replace", "jobs", "topics", "max", "timeout_ms",
            "ids",
        ])
        .prop_map(String::from),
        1 => ".{0,6}",
    ]
}

fn any_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|n| json!(n)),
        any::<u64>().prop_map(|n| json!(n)),
        prop_oneof![
            Just(0u64),
            Just(1),
            Just(3),
            Just(86_400_000),
            Just(MAX_RUN_AT)
        ]
        .prop_map(|n| json!(n)),
        any::<f64>()
            .prop_filter("JSON has no NaN or infinity", |f| f.is_finite())
            .prop_map(|f| json!(f)),
        ".{0,12}".prop_map(Value::String),
        prop::sample::select(vec!["t", "a/b", "", "x y", "batch"]).prop_map(|s| json!(s)),
    ];
    leaf.prop_recursive(3, 40, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..5).prop_map(Value::Array),
            prop::collection::btree_map(field_name(), inner, 0..6)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// A request body: usually an object of plausible fields, sometimes any JSON, sometimes bytes.
fn any_body() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        4 => prop::collection::btree_map(field_name(), any_json(), 0..6)
            .prop_map(|m| Value::Object(m.into_iter().collect()).to_string().into_bytes()),
        1 => any_json().prop_map(|v| v.to_string().into_bytes()),
        1 => prop::collection::vec(any::<u8>(), 0..40),
    ]
}

/// Every documented operation (tests/http/routes.rs), read once, before any runtime runs.
static ROUTES: std::sync::LazyLock<Vec<crate::routes::Route>> =
    std::sync::LazyLock::new(crate::routes::v1_blocking);

/// Each fuzzed operation (every one that takes a body) on the job and topic `t`, and a valid
/// body for it, which the fuzzer then bends.
fn fuzz_paths() -> Vec<(Method, String, String)> {
    ROUTES
        .iter()
        .filter(|r| !r.body.is_empty())
        .map(|r| (r.method.clone(), r.path("t", "t"), r.body.clone()))
        .collect()
}

/// The operations on one job that take no body (`GET /v1/jobs/{id}`, `.../touch`, ...), as
/// (method, suffix of `/v1/jobs/{id}`).
fn job_operations() -> Vec<(Method, String)> {
    ROUTES
        .iter()
        .filter(|r| r.body.is_empty())
        .filter_map(|r| Some((r.method.clone(), r.job_suffix()?.to_string())))
        .collect()
}

/// A request body: a valid one with up to two fields changed (so that requests get past the
/// first check), or anything at all.
#[derive(Debug, Clone)]
enum FuzzBody {
    Bent(Vec<(String, Value)>),
    Raw(Vec<u8>),
}

fn fuzz_body() -> impl Strategy<Value = FuzzBody> {
    prop_oneof![
        3 => prop::collection::vec((field_name(), any_json()), 0..3).prop_map(FuzzBody::Bent),
        1 => any_body().prop_map(FuzzBody::Raw),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_requests_get_a_4xx_or_a_success_never_a_5xx(
        requests in prop::collection::vec(
            (prop::sample::select(fuzz_paths()), fuzz_body(), ".{0,8}"), 1..8),
    ) {
        let job_operations = job_operations();
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        rt.block_on(async {
            let b = Backend::memory().await;
            // No long polls: any timeout_ms above 0 is refused.
            let app = TestApp::with_config(&b, Config { max_wait_secs: 0, ..small_limits() });
            pushed(&app, json!({"topic": "t", "id": "t"})).await;
            for ((method, path, valid), body, id) in requests {
                let body = match body {
                    FuzzBody::Raw(raw) => raw,
                    FuzzBody::Bent(changes) => {
                        let mut v: Value = serde_json::from_str(&valid).unwrap();
                        for (k, x) in changes {
                            v[k] = x;
                        }
                        v.to_string().into_bytes()
                    }
                };
                let r = app.send(method, &path, body.clone(), None).await;
                check_reply(&r, &path, &body);
                let enc: String = id.bytes().map(|b| format!("%{b:02X}")).collect();
                for (method, op) in &job_operations {
                    let p = format!("/v1/jobs/{enc}{op}");
                    let r = app.send(method.clone(), &p, "", None).await;
                    check_reply(&r, &p, b"");
                }
            }
            let r = app.get("/v1/stats").await;
            assert_eq!(r.status, StatusCode::OK);
        });
    }
}

#[track_caller]
fn check_reply(r: &Reply, path: &str, body: &[u8]) {
    let body = String::from_utf8_lossy(body);
    assert!(
        !r.status.is_server_error(),
        "{path} {body}: {} {:?}",
        r.status,
        r.json
    );
    if r.status.is_client_error() && r.status != StatusCode::NOT_FOUND
        || r.json.get("error").is_some()
    {
        let code = r.json["error"]["code"].as_str();
        assert!(code.is_some(), "{path} {body}: {:?}", r.json);
        if code == Some("invalid_field") {
            assert!(
                r.json["error"]["field"].is_string(),
                "{path} {body}: {:?}",
                r.json
            );
        }
    }
}

backend_tests!(
    push_refuses_each_invalid_field_naming_it_and_changes_nothing,
    push_refuses_bodies_that_are_not_a_json_object,
    push_accepts_any_or_no_content_type,
    push_of_a_body_over_the_limit_is_413_naming_body,
    a_request_body_over_the_server_limit_is_413,
);
