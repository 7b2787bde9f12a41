//! `GET /v1/openapi.json` against the server: every route of the router is described (and
//! nothing else), with the methods it allows, the fields the API sends, and the limits, ranges,
//! nullable fields and character sets the handlers enforce (`.ci/schemathesis` checks the same at
//! random; these tests, by example).

use super::*;

/// The document describes every route of the router, and only those (tests/http/routes.rs
/// reads the router's paths and the methods each allows; health checks included: the document
/// describes them though another module serves them), each answered by the router.
async fn openapi_document_describes_every_route(b: &Backend) {
    let app = TestApp::new(b);
    let r = app.get("/v1/openapi.json").await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(r.content_type.as_deref(), Some("application/json"));
    let doc = &r.json;
    assert_eq!(doc["openapi"], "3.1.0");
    let paths = doc["paths"].as_object().unwrap();
    let mut described = BTreeSet::new();
    for (path, item) in paths {
        for method in ["get", "post", "put", "delete", "patch"] {
            if let Some(op) = item.get(method) {
                described.insert((method.to_string(), path.clone()));
                assert!(op["operationId"].is_string(), "{method} {path}");
                assert!(op["responses"].is_object(), "{method} {path}");
            }
        }
    }
    // The journal's routes, which only a server with a journal describes, answer 404
    // `journal_disabled` on this one.
    for u in crate::routes::UNDOCUMENTED.iter().filter(|u| u.journal) {
        assert!(!paths.contains_key(u.template), "{} described", u.template);
        let method = Method::from_bytes(u.method.as_bytes()).unwrap();
        let r = app.send(method, u.path, u.body, None).await;
        assert_eq!(r.status, StatusCode::NOT_FOUND, "{} {}", u.method, u.path);
        assert_eq!(r.json["error"]["code"], "journal_disabled", "{}", u.path);
    }
    let served = crate::routes::router_routes(&app).await;
    let undescribed: Vec<_> = served.difference(&described).collect();
    let unserved: Vec<_> = described.difference(&served).collect();
    assert!(
        undescribed.is_empty() && unserved.is_empty(),
        "routes the document does not describe: {undescribed:?}; \
         operations the router does not serve: {unserved:?}"
    );

    // Every route the router serves (other than health checks) answers something other than
    // "no such route" (404 with an empty body) or 405.
    for (method, path) in &served {
        if path.starts_with("/healthz") || path.starts_with("/readyz") {
            continue;
        }
        let concrete = path.replace("{id}", "nope").replace("{topic}", "t");
        let method = Method::from_bytes(method.to_uppercase().as_bytes()).unwrap();
        let r = app.send(method.clone(), &concrete, "{}", None).await;
        assert_ne!(
            r.status,
            StatusCode::METHOD_NOT_ALLOWED,
            "{method} {concrete}"
        );
        assert!(
            r.status != StatusCode::NOT_FOUND
                || r.json["error"]["code"] == "not_found"
                || r.json["error"]["code"] == "journal_disabled",
            "{method} {concrete}: {:?}",
            r
        );
    }

    // Every `$ref` resolves.
    let mut refs = Vec::new();
    collect_refs(doc, &mut refs);
    assert!(!refs.is_empty());
    for r in refs {
        let pointer = r.strip_prefix('#').unwrap();
        assert!(doc.pointer(pointer).is_some(), "dangling $ref {r}");
    }
    // The described objects have the fields the API really sends.
    let schema_fields = |name: &str| -> BTreeSet<String> {
        let schema = &doc["components"]["schemas"][name];
        let props: BTreeSet<String> = schema["properties"]
            .as_object()
            .unwrap()
            .keys()
            .cloned()
            .collect();
        let required: BTreeSet<String> = schema["required"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_str().unwrap().to_string())
            .collect();
        assert_eq!(props, required, "{name}: every field is always sent");
        props
    };
    let keys = |v: &Value| -> BTreeSet<String> { v.as_object().unwrap().keys().cloned().collect() };
    let job = pushed(&app, json!({"topic": "t", "id": "doc"})).await;
    assert_eq!(keys(&job), schema_fields("Job"));
    assert_eq!(keys(&stats(&app).await), schema_fields("Stats"));
    let reserved = app.post("/v1/reserve", json!({"topics": ["t"]})).await.json;
    assert_eq!(keys(&reserved), schema_fields("ReserveReply"));
    let r = app
        .post("/v1/jobs/doc/reschedule", json!({"delay_ms": 0}))
        .await;
    assert_eq!(keys(&r.json), schema_fields("Error"));
    let detail = &doc["components"]["schemas"]["Error"]["properties"]["error"]["properties"];
    assert_eq!(
        keys(&r.json["error"]),
        keys(detail),
        "wrong_state sends every field"
    );

    // Each operation with a path parameter declares it.
    for (path, item) in paths {
        if path.contains('{') {
            assert!(item["parameters"].is_array(), "{path}");
        }
    }
}

fn collect_refs(v: &Value, out: &mut Vec<String>) {
    match v {
        Value::Object(m) => {
            for (k, v) in m {
                if k == "$ref" {
                    out.push(v.as_str().unwrap().to_string());
                } else {
                    collect_refs(v, out);
                }
            }
        }
        Value::Array(a) => a.iter().for_each(|v| collect_refs(v, out)),
        _ => {}
    }
}

/// The schema of a request field in the document: the field's own schema, or the non-null one
/// of an optional field's `oneOf`.
fn field_schema<'a>(doc: &'a Value, schema: &str, field: &str) -> &'a Value {
    let s = &doc["components"]["schemas"][schema]["properties"][field];
    match s["oneOf"].as_array() {
        Some(alternatives) => alternatives
            .iter()
            .find(|a| a["type"] != "null")
            .unwrap_or(s),
        None => s,
    }
}

async fn openapi(app: &TestApp) -> Value {
    let r = app.get("/v1/openapi.json").await;
    assert_eq!(r.status, StatusCode::OK);
    r.json
}

async fn integers_may_be_written_with_a_fraction_or_an_exponent(b: &Backend) {
    let app = TestApp::with_config(b, small_limits());
    let before = now_ms();
    // `1614.0`, `5e3`: integers in JSON Schema, so in the document, so on the server.
    let f = pushed(
        &app,
        json!({"topic": "slow", "id": "f", "delay_ms": 1614.0, "ttr_ms": 5e3, "priority": 7.0,
               "max_attempts": 2.0, "backoff_ms": [10.0, 2e1]}),
    )
    .await;
    assert_eq!(
        [
            &f["ttr_ms"],
            &f["priority"],
            &f["max_attempts"],
            &f["backoff_ms"]
        ],
        [&json!(5000), &json!(7), &json!(2), &json!([10, 20])]
    );
    let run_at = f["run_at_ms"].as_u64().unwrap();
    assert!((before + 1614..=now_ceil_ms() + 1614).contains(&run_at));
    let g = pushed(&app, json!({"topic": "t", "id": "g", "run_at_ms": 1.0})).await;
    assert_eq!((&g["run_at_ms"], &g["state"]), (&json!(1), &json!("ready")));
    let r = app
        .post(
            "/v1/reserve",
            json!({"topics": ["t"], "max": 1.0, "timeout_ms": 0.0}),
        )
        .await;
    assert_eq!(ids(r.json["jobs"].as_array().unwrap()), ["g"]);
    let r = app
        .post("/v1/jobs/g/release", json!({"delay_ms": 0.0}))
        .await;
    assert_eq!(r.json["state"], "ready", "{:?}", r.json);
    let r = app.send(Method::POST, "/v1/jobs/g/bury", "", None).await;
    assert_eq!(r.json["state"], "dead", "{:?}", r.json);
    let r = app.post("/v1/topics/t/kick", json!({"max": 1.0})).await;
    assert_eq!(r.json, json!({"kicked": 1}));
    let r = app
        .post(
            "/v1/jobs/f/reschedule",
            json!({"run_at_ms": 2.0, "priority": 3.0}),
        )
        .await;
    assert_eq!(
        (&r.json["job"]["run_at_ms"], &r.json["job"]["priority"]),
        (&json!(2), &json!(3)),
        "{:?}",
        r.json
    );

    // A fraction is refused, naming the field.
    let before = stats(&app).await;
    let cases = [
        (
            "/v1/jobs",
            json!({"topic": "t", "delay_ms": 1614.5}),
            "delay_ms",
        ),
        (
            "/v1/jobs",
            json!({"topic": "t", "run_at_ms": 1614.5}),
            "run_at_ms",
        ),
        (
            "/v1/jobs",
            json!({"topic": "t", "ttr_ms": 1614.5}),
            "ttr_ms",
        ),
        (
            "/v1/jobs",
            json!({"topic": "t", "priority": 1614.5}),
            "priority",
        ),
        (
            "/v1/jobs",
            json!({"topic": "t", "max_attempts": 1614.5}),
            "max_attempts",
        ),
        (
            "/v1/jobs",
            json!({"topic": "t", "backoff_ms": [1, 1614.5]}),
            "backoff_ms[1]",
        ),
        (
            "/v1/jobs/batch",
            json!({"jobs": [{"topic": "t", "priority": 1614.5}]}),
            "jobs[0].priority",
        ),
        ("/v1/reserve", json!({"topics": ["t"], "max": 1.5}), "max"),
        (
            "/v1/reserve",
            json!({"topics": ["t"], "timeout_ms": 1614.5}),
            "timeout_ms",
        ),
        ("/v1/topics/t/kick", json!({"max": 1.5}), "max"),
        (
            "/v1/jobs/f/release",
            json!({"delay_ms": 1614.5}),
            "delay_ms",
        ),
        (
            "/v1/jobs/f/reschedule",
            json!({"delay_ms": 1614.5}),
            "delay_ms",
        ),
    ];
    for (path, body, field) in cases {
        let r = app.post(path, body.clone()).await;
        assert_error(&r, StatusCode::BAD_REQUEST, "invalid_field", Some(field));
        let message = r.json["error"]["message"].as_str().unwrap();
        assert!(message.contains(".5"), "{path} {body}: {message}");
    }
    assert_eq!(stats(&app).await, before);
}

/// Request bodies, the document's schema of each, and the fields a valid one needs.
const REQUESTS: &[(&str, &str, &str)] = &[
    ("NewJob", "/v1/jobs", r#"{"topic": "t"}"#),
    (
        "BatchPush",
        "/v1/jobs/batch",
        r#"{"jobs": [{"topic": "t"}]}"#,
    ),
    ("ReserveRequest", "/v1/reserve", r#"{"topics": ["t"]}"#),
    ("Release", "/v1/jobs/n/release", "{}"),
    ("Reschedule", "/v1/jobs/n/reschedule", r#"{"delay_ms": 0}"#),
    ("Reschedule", "/v1/jobs/n/reschedule", r#"{"run_at_ms": 0}"#),
    ("FinishBatch", "/v1/finish", r#"{"ids": ["n"]}"#),
    ("KickTopic", "/v1/topics/t/kick", r#"{"max": 1}"#),
];

async fn null_is_an_absent_field_wherever_the_document_allows_it(b: &Backend) {
    let app = TestApp::new(b);
    let doc = openapi(&app).await;
    let schemas = &doc["components"]["schemas"];
    // The document: every optional field of a request may be `null`, no required one may.
    for (name, _, _) in REQUESTS {
        let required = schemas[name]["required"].as_array().cloned();
        for (field, schema) in schemas[name]["properties"].as_object().unwrap() {
            let nullable = schema["oneOf"]
                .as_array()
                .is_some_and(|a| a.contains(&json!({"type": "null"})));
            let is_required = required.as_ref().is_some_and(|r| r.contains(&json!(field)));
            assert_eq!(nullable, !is_required, "{name}.{field}");
        }
    }
    // The server: each valid request with every other field `null` is served as without them.
    for (name, path, valid) in REQUESTS {
        let mut body: Value = serde_json::from_str(valid).unwrap();
        for field in schemas[name]["properties"].as_object().unwrap().keys() {
            if body.get(field).is_none() {
                body[field] = Value::Null;
            }
        }
        let job = json!({"topic": "n", "id": "n", "run_at_ms": FAR_FUTURE, "replace": true});
        pushed(&app, job).await;
        if path.ends_with("/release") {
            app.post("/v1/jobs/n/reschedule", json!({"delay_ms": 0}))
                .await;
            assert_eq!(ids(&reserve(&app, &["n"], 1).await), ["n"]);
        }
        let r = app.post(path, body.clone()).await;
        assert!(r.status.is_success(), "{path} {body}: {:?}", r.json);
        if *name == "NewJob" {
            // The defaults of docs/api.md.
            assert_eq!(
                [&r.json["body"], &r.json["ttr_ms"], &r.json["priority"]],
                [&json!(""), &json!(60_000), &json!(1024)]
            );
            assert_eq!(
                [
                    &r.json["max_attempts"],
                    &r.json["backoff_ms"],
                    &r.json["state"]
                ],
                [&json!(0), &json!([]), &json!("ready")]
            );
        }
        app.send(Method::DELETE, "/v1/jobs/n", "", None).await;
    }
    // A required field that is `null` is missing.
    for (path, body, field) in [
        ("/v1/jobs", json!({"topic": null}), "topic"),
        ("/v1/jobs/batch", json!({"jobs": null}), "jobs"),
        ("/v1/reserve", json!({"topics": null}), "topics"),
        ("/v1/finish", json!({"ids": null}), "ids"),
        ("/v1/topics/t/kick", json!({"max": null}), "max"),
    ] {
        let r = app.post(path, body).await;
        assert_error(&r, StatusCode::BAD_REQUEST, "invalid_field", Some(field));
    }
}

async fn both_due_times_are_refused_as_the_document_says(b: &Backend) {
    let app = TestApp::new(b);
    let doc = openapi(&app).await;
    let schemas = &doc["components"]["schemas"];
    // NewJob: not both (each given, not null); Reschedule: exactly one.
    let both = &schemas["NewJob"]["not"];
    assert_eq!(both["required"], json!(["delay_ms", "run_at_ms"]));
    let one_of = schemas["Reschedule"]["oneOf"].as_array().unwrap();
    let required: Vec<&Value> = one_of.iter().map(|s| &s["required"]).collect();
    assert_eq!(required, [&json!(["delay_ms"]), &json!(["run_at_ms"])]);

    let r = push(&app, json!({"topic": "t", "delay_ms": 5, "run_at_ms": 5})).await;
    assert_error(
        &r,
        StatusCode::BAD_REQUEST,
        "invalid_field",
        Some("run_at_ms"),
    );
    pushed(
        &app,
        json!({"topic": "t", "id": "a", "delay_ms": 60_000, "run_at_ms": null}),
    )
    .await;
    pushed(
        &app,
        json!({"topic": "t", "id": "b", "delay_ms": null, "run_at_ms": FAR_FUTURE}),
    )
    .await;
    for (body, field) in [
        (json!({"delay_ms": 1, "run_at_ms": 1}), "run_at_ms"),
        (json!({"delay_ms": null, "run_at_ms": null}), "delay_ms"),
    ] {
        let r = app.post("/v1/jobs/a/reschedule", body).await;
        assert_error(&r, StatusCode::BAD_REQUEST, "invalid_field", Some(field));
    }
    let r = app
        .post(
            "/v1/jobs/a/reschedule",
            json!({"delay_ms": null, "run_at_ms": FAR_FUTURE}),
        )
        .await;
    assert_eq!(r.json["job"]["run_at_ms"], FAR_FUTURE, "{:?}", r.json);
}

async fn the_document_states_the_limits_of_the_configuration(b: &Backend) {
    let app = TestApp::with_config(b, small_limits());
    let doc = openapi(&app).await;
    let limit =
        |schema: &str, field: &str, key: &str| field_schema(&doc, schema, field)[key].clone();
    // small_limits: max_batch 3, max_wait 1 s, max_body_bytes 16.
    assert_eq!(limit("BatchPush", "jobs", "maxItems"), 3);
    assert_eq!(limit("ReserveRequest", "topics", "maxItems"), 3);
    assert_eq!(limit("ReserveRequest", "max", "maximum"), 3);
    assert_eq!(limit("ReserveRequest", "timeout_ms", "maximum"), 1_000);
    assert_eq!(limit("FinishBatch", "ids", "maxItems"), 3);
    assert_eq!(limit("KickTopic", "max", "maximum"), 3);
    assert_eq!(limit("NewJob", "body", "maxLength"), 16);
    assert_eq!(limit("Reschedule", "body", "maxLength"), 16);
    assert_eq!(limit("NewJob", "max_attempts", "minimum"), 0);
    // The server: at each limit it is fine, one past it is refused naming the field.
    pushed(
        &app,
        json!({"topic": "t", "id": "a", "run_at_ms": FAR_FUTURE}),
    )
    .await;
    let jobs = |n: usize| json!({"jobs": vec![json!({"topic": "t", "run_at_ms": FAR_FUTURE}); n]});
    let cases = [
        ("/v1/jobs/batch", jobs(3), jobs(4), "jobs"),
        (
            "/v1/topics/t/kick",
            json!({"max": 3}),
            json!({"max": 4}),
            "max",
        ),
        (
            "/v1/jobs",
            json!({"topic": "t", "body": "x".repeat(16), "max_attempts": 0}),
            json!({"topic": "t", "body": "x".repeat(17)}),
            "body",
        ),
    ];
    for (path, ok, over, field) in cases {
        let r = app.post(path, ok.clone()).await;
        assert!(r.status.is_success(), "{path} {ok}: {:?}", r.json);
        let r = app.post(path, over.clone()).await;
        assert!(r.status.is_client_error(), "{path} {over}: {:?}", r.json);
        assert_eq!(r.json["error"]["field"], field, "{path} {over}");
    }
    // A job with `max_attempts: 0` is delivered again and again (0 is unlimited).
    let j = pushed(&app, json!({"topic": "u", "id": "u", "max_attempts": 0})).await;
    assert_eq!(j["max_attempts"], 0);
    for _ in 0..3 {
        assert_eq!(ids(&reserve(&app, &["u"], 1).await), ["u"]);
        app.post("/v1/jobs/u/release", json!({})).await;
    }

    // The defaults, in a server with the default configuration.
    let app = TestApp::new(b);
    let doc = openapi(&app).await;
    let d = Config::default();
    let max_batch = json!(d.max_batch);
    assert_eq!(
        field_schema(&doc, "BatchPush", "jobs")["maxItems"],
        max_batch
    );
    assert_eq!(
        field_schema(&doc, "ReserveRequest", "max")["maximum"],
        max_batch
    );
    assert_eq!(
        field_schema(&doc, "ReserveRequest", "timeout_ms")["maximum"],
        d.max_wait_secs * 1000
    );
    assert_eq!(
        field_schema(&doc, "NewJob", "body")["maxLength"],
        json!(d.max_body_bytes)
    );
}

async fn delays_are_at_most_1000_years_as_the_document_says(b: &Backend) {
    let app = TestApp::new(b);
    let doc = openapi(&app).await;
    for schema in ["NewJob", "Release", "Reschedule"] {
        assert_eq!(
            field_schema(&doc, schema, "delay_ms")["maximum"],
            MAX_DELAY_MS,
            "{schema}"
        );
    }
    assert_eq!(MAX_DELAY_MS, 1000 * 365 * 86_400_000);
    let j = pushed(
        &app,
        json!({"topic": "t", "id": "a", "delay_ms": MAX_DELAY_MS}),
    )
    .await;
    assert_eq!(j["state"], "delayed");
    let over = MAX_DELAY_MS + 1;
    let r = push(&app, json!({"topic": "t", "delay_ms": over})).await;
    assert_error(
        &r,
        StatusCode::BAD_REQUEST,
        "invalid_field",
        Some("delay_ms"),
    );
    let r = app
        .post("/v1/jobs/a/reschedule", json!({"delay_ms": over}))
        .await;
    assert_error(
        &r,
        StatusCode::BAD_REQUEST,
        "invalid_field",
        Some("delay_ms"),
    );
    app.post("/v1/jobs/a/reschedule", json!({"delay_ms": 0}))
        .await;
    reserve(&app, &["t"], 1).await;
    let r = app
        .post("/v1/jobs/a/release", json!({"delay_ms": over}))
        .await;
    assert_error(
        &r,
        StatusCode::BAD_REQUEST,
        "invalid_field",
        Some("delay_ms"),
    );
    let r = app
        .post("/v1/jobs/a/release", json!({"delay_ms": MAX_DELAY_MS}))
        .await;
    assert_eq!(r.json["state"], "delayed", "{:?}", r.json);
}

/// The ranges of characters that a pattern of the document, `^[^<ranges>]+$` with each
/// character written `\uXXXX`, excludes.
fn excluded_ranges(pattern: &str) -> Vec<(u32, u32)> {
    let class = pattern
        .strip_prefix("^[^")
        .and_then(|p| p.strip_suffix("]+$"))
        .unwrap_or_else(|| panic!("unexpected pattern {pattern}"));
    let code = |s: &str| {
        assert!(s.starts_with("\\u"), "unexpected pattern {pattern}");
        u32::from_str_radix(&s[2..6], 16).unwrap()
    };
    let mut ranges = Vec::new();
    let mut rest = class;
    while !rest.is_empty() {
        let lo = code(rest);
        rest = &rest[6..];
        let hi = match rest.strip_prefix('-') {
            Some(r) => {
                rest = &r[6..];
                code(r)
            }
            None => lo,
        };
        ranges.push((lo, hi));
    }
    ranges
}

#[tokio::test]
async fn ids_and_topics_refuse_exactly_the_characters_the_documents_patterns_exclude() {
    let b = Backend::memory().await;
    let app = TestApp::new(&b);
    let doc = openapi(&app).await;
    let schemas = &doc["components"]["schemas"];
    let id_excluded = excluded_ranges(schemas["JobId"]["pattern"].as_str().unwrap());
    let topic_excluded = excluded_ranges(schemas["Topic"]["pattern"].as_str().unwrap());
    let excludes = |ranges: &[(u32, u32)], c: char| {
        ranges
            .iter()
            .any(|&(lo, hi)| (lo..=hi).contains(&u32::from(c)))
    };
    let candidates = (0..=0x2ffu32)
        .chain(0x1680..=0x1681)
        .chain(0x1ffe..=0x2070)
        .chain([0x3000, 0x3001, 0xfeff, 0xfffd, 0x10ffff])
        .filter_map(char::from_u32);
    for c in candidates {
        let enc: String = format!("a{c}b")
            .bytes()
            .map(|b| format!("%{b:02X}"))
            .collect();
        // A valid id that names no job is 404; an invalid one 400.
        let r = app.get(&format!("/v1/jobs/{enc}")).await;
        let refused = r.status == StatusCode::BAD_REQUEST;
        assert!(refused || r.status == StatusCode::NOT_FOUND, "{c:?}: {r:?}");
        assert_eq!(refused, excludes(&id_excluded, c), "id with {c:?}");
        let r = app
            .post(&format!("/v1/topics/{enc}/kick"), json!({"max": 1}))
            .await;
        let refused = r.status == StatusCode::BAD_REQUEST;
        assert!(refused || r.status == StatusCode::OK, "{c:?}: {r:?}");
        assert_eq!(refused, excludes(&topic_excluded, c), "topic with {c:?}");
    }
}

#[tokio::test]
async fn every_path_allows_exactly_the_methods_the_document_describes() {
    let b = Backend::memory().await;
    let app = TestApp::new(&b);
    let doc = openapi(&app).await;
    for (path, item) in doc["paths"].as_object().unwrap() {
        let mut documented: BTreeSet<String> = ["get", "post", "put", "delete", "patch"]
            .into_iter()
            .filter(|m| item.get(*m).is_some())
            .map(str::to_uppercase)
            .collect();
        // Every GET route answers HEAD too (axum), and HTTP says so.
        if documented.contains("GET") {
            documented.insert("HEAD".into());
        }
        let concrete = path.replace("{id}", "nope").replace("{topic}", "t");
        let allow = crate::routes::allowed_methods(&app, &concrete).await;
        assert_eq!(allow, documented, "OPTIONS {concrete}");
    }
}

backend_tests!(
    openapi_document_describes_every_route,
    integers_may_be_written_with_a_fraction_or_an_exponent,
    null_is_an_absent_field_wherever_the_document_allows_it,
    both_due_times_are_refused_as_the_document_says,
    the_document_states_the_limits_of_the_configuration,
    delays_are_at_most_1000_years_as_the_document_says,
);
