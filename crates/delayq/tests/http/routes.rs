//! The route table of the HTTP tests, derived, not written: the /v1 routes come from the OpenAPI
//! document the server serves (`GET /v1/openapi.json`), each with a request it accepts made from
//! the document's schemas; the few routes the document does not describe (the compat API, the
//! dashboard's assets) are listed here, once. [`router_paths`] reads the paths the router serves
//! from the source of `src/`, so that a route that is in neither fails
//! `http_v1::openapi::openapi_document_describes_every_route`.
//!
//! Adding a /v1 route therefore needs no edit here: document it in api/openapi/paths.rs and every
//! route-wide test (bearer tokens, generated requests, a failing store, the document's own
//! checks) covers it.

use crate::support;

use axum::body::Body;
use axum::http::{Method, Request, StatusCode, header};
use delayq::config::Config;
use delayq::store::memory::MemoryStore;
use serde_json::{Map, Value, json};
use std::collections::BTreeSet;
use std::path::Path;
use std::sync::Arc;
use support::app::TestApp;
use tower::ServiceExt;

/// The methods an OpenAPI path item may describe.
const METHODS: [&str; 5] = ["get", "post", "put", "delete", "patch"];

/// A documented operation and a request it accepts.
#[derive(Debug, Clone)]
pub struct Route {
    pub method: Method,
    /// The path as the document writes it: `/v1/jobs/{id}`.
    pub template: String,
    /// The query string that the required query parameters need (`from=0&to=...`), or "".
    pub query: String,
    /// A body the operation accepts, "" when it takes none.
    pub body: String,
    /// Whether the document says the operation asks the store: it documents a 503 with the
    /// error body (`store_unavailable`).
    pub asks_the_store: bool,
    /// Whether the document says the operation answers otherwise on a server without
    /// `--journal` (as every test server of this binary is).
    pub needs_the_journal: bool,
    /// Whether the operation wants a bearer token when tokens are configured (only
    /// `/healthz`'s says `security: []`).
    pub authenticated: bool,
}

impl Route {
    /// The concrete path, `{id}` and `{topic}` replaced, with the required query parameters.
    pub fn path(&self, id: &str, topic: &str) -> String {
        let path = self.template.replace("{id}", id).replace("{topic}", topic);
        if self.query.is_empty() {
            path
        } else {
            format!("{path}?{}", self.query)
        }
    }

    /// The path after `/v1/jobs/{id}` of an operation on one job (`""`, `/finish`, ...).
    pub fn job_suffix(&self) -> Option<&str> {
        self.template.strip_prefix("/v1/jobs/{id}")
    }
}

/// A route the document does not describe, with a request it accepts.
pub struct Undocumented {
    /// As the router writes it.
    pub template: &'static str,
    pub method: &'static str,
    pub path: &'static str,
    pub body: &'static str,
    /// Refusals have the compat API's body (`{"code":1,...}`), and a token is wanted.
    pub compat: bool,
    /// A /v1 route the document describes only on a server with a journal (`--journal`): a
    /// token is wanted; without a journal it answers 404 `journal_disabled`.
    pub journal: bool,
}

/// Every route the router serves that the OpenAPI document of /v1 does not describe: the compat
/// API (docs/compat.md: any method, JSON bodies; `/reStore` with a journal), the journal's /v1
/// routes (described only by a server with a journal; tests/journal/http.rs reads that
/// document) and the dashboard's static assets (public).
pub const UNDOCUMENTED: &[Undocumented] = &[
    compat(
        "/push",
        "POST",
        r#"{"topic":"t","id":"s1","delay":0,"ttr":10,"body":"b"}"#,
    ),
    compat("/pop", "POST", r#"{"topic":"t","timeout":0}"#),
    compat("/finish", "POST", r#"{"id":"s1"}"#),
    compat("/delete", "POST", r#"{"id":"s1"}"#),
    compat("/get", "POST", r#"{"id":"s1"}"#),
    Undocumented {
        template: "/reStore",
        method: "GET",
        path: "/reStore?expire=true",
        body: "",
        compat: true,
        journal: false,
    },
    Undocumented {
        template: "/reStore/{id}",
        method: "GET",
        path: "/reStore/s1",
        body: "",
        compat: true,
        journal: false,
    },
    Undocumented {
        template: "/v1/jobs/{id}/history",
        method: "GET",
        path: "/v1/jobs/j1/history",
        body: "",
        compat: false,
        journal: true,
    },
    Undocumented {
        template: "/v1/restore",
        method: "POST",
        path: "/v1/restore",
        body: r#"{"overdue":"fire"}"#,
        compat: false,
        journal: true,
    },
    dashboard("/ui"),
    dashboard("/ui/"),
    dashboard("/ui/app.js"),
    dashboard("/ui/app.css"),
];

const fn compat(path: &'static str, method: &'static str, body: &'static str) -> Undocumented {
    Undocumented {
        template: path,
        method,
        path,
        body,
        compat: true,
        journal: false,
    }
}

const fn dashboard(path: &'static str) -> Undocumented {
    Undocumented {
        template: path,
        method: "GET",
        path,
        body: "",
        compat: false,
        journal: false,
    }
}

/// Values of query parameters where the document's schema alone does not give a valid one: a
/// rule between parameters that OpenAPI cannot state (`to` after `from`).
const QUERY_VALUES: &[(&str, &str)] = &[("from", "0"), ("to", "3600000"), ("step", "60000")];

/// The OpenAPI document as a server with the default configuration serves it.
pub async fn document() -> Value {
    let app = TestApp::with_store(Arc::new(MemoryStore::new()), Config::default());
    let r = app.get("/v1/openapi.json").await;
    assert_eq!(r.status, StatusCode::OK, "{r:?}");
    r.json
}

/// Every operation of the document served with the default configuration.
pub async fn v1() -> Vec<Route> {
    documented(&document().await)
}

/// [`v1`] from outside a runtime (a `proptest!` strategy).
pub fn v1_blocking() -> Vec<Route> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(v1())
}

/// Every operation of `doc`, in the document's order.
pub fn documented(doc: &Value) -> Vec<Route> {
    let mut routes = Vec::new();
    for (template, item) in doc["paths"].as_object().expect("paths") {
        for method in METHODS {
            let Some(op) = item.get(method) else { continue };
            let query = op["parameters"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|p| p["in"] == "query" && p["required"] == true)
                .map(|p| {
                    let name = p["name"].as_str().unwrap();
                    let value = match QUERY_VALUES.iter().find(|(n, _)| *n == name) {
                        Some((_, v)) => v.to_string(),
                        None => match example(doc, &p["schema"]) {
                            Value::String(s) => s,
                            v => v.to_string(),
                        },
                    };
                    format!("{name}={value}")
                })
                .collect::<Vec<_>>()
                .join("&");
            let body = match op["requestBody"]["content"]["application/json"]["schema"] {
                Value::Null => String::new(),
                ref schema => example(doc, schema).to_string(),
            };
            let asks_the_store = op["responses"]["503"]["content"]["application/json"]["schema"]["$ref"]
                == "#/components/schemas/Error";
            let needs_the_journal =
                op["responses"]
                    .as_object()
                    .into_iter()
                    .flatten()
                    .any(|(_, r)| {
                        r["description"]
                            .as_str()
                            .is_some_and(|d| d.contains("without `--journal`"))
                    });
            routes.push(Route {
                method: Method::from_bytes(method.to_uppercase().as_bytes()).unwrap(),
                template: template.clone(),
                query,
                body,
                asks_the_store,
                needs_the_journal,
                authenticated: op["security"] != json!([]),
            });
        }
    }
    routes
}

/// A small valid value of `schema`: its required fields only (an object with alternative sets of
/// required fields takes the first), one item per array (or `minItems`), an enum's first value,
/// a number's minimum, and `t` for strings (a valid topic and id).
pub fn example(doc: &Value, schema: &Value) -> Value {
    if let Some(r) = schema["$ref"].as_str() {
        let target = doc
            .pointer(r.trim_start_matches('#'))
            .unwrap_or_else(|| panic!("dangling $ref {r}"));
        return example(doc, target);
    }
    if let Some(first) = schema["enum"].as_array().and_then(|e| e.first()) {
        return first.clone();
    }
    let alternatives = schema["oneOf"]
        .as_array()
        .or(schema["anyOf"].as_array())
        .cloned()
        .unwrap_or_default();
    if schema["type"].is_null() && schema["properties"].is_null() {
        // Only alternatives: the first that is not `null`.
        if let Some(a) = alternatives.iter().find(|a| a["type"] != "null") {
            return example(doc, a);
        }
    }
    match schema["type"].as_str() {
        Some("array") => {
            let n = schema["minItems"].as_u64().unwrap_or(1).max(1) as usize;
            Value::Array(vec![example(doc, &schema["items"]); n])
        }
        Some("string") => {
            let n = schema["minLength"].as_u64().unwrap_or(1).max(1) as usize;
            Value::String("t".repeat(n))
        }
        Some("integer" | "number") => json!(schema["minimum"].as_u64().unwrap_or(0)),
        Some("boolean") => json!(false),
        _ => {
            let mut required: Vec<&Value> = schema["required"]
                .as_array()
                .into_iter()
                .flatten()
                .collect();
            if let Some(first) = alternatives.first() {
                required.extend(first["required"].as_array().into_iter().flatten());
            }
            let mut object = Map::new();
            for field in required {
                let field = field.as_str().unwrap();
                object.insert(
                    field.to_string(),
                    example(doc, &schema["properties"][field]),
                );
            }
            Value::Object(object)
        }
    }
}

/// Every request that must carry a bearer token when tokens are configured: each documented
/// operation but the public ones (`/healthz`), ids `j1` and topics `t`, then each compat route
/// (ids `s1`) and the journal's routes. As (method, path, body).
pub async fn authenticated() -> Vec<(String, String, String)> {
    let mut requests: Vec<(String, String, String)> = v1()
        .await
        .into_iter()
        .filter(|r| r.authenticated)
        .map(|r| (r.method.to_string(), r.path("j1", "t"), r.body))
        .collect();
    requests.extend(
        UNDOCUMENTED
            .iter()
            .filter(|u| u.compat || u.journal)
            .map(|u| (u.method.into(), u.path.into(), u.body.into())),
    );
    requests
}

/// The paths the router serves, read from the `.route("...", ...)` calls in `src/`. A route
/// built any other way (`nest`, `route_service`, a path that is not a literal) fails here, so
/// that this stays the router's whole list.
pub fn router_paths() -> BTreeSet<String> {
    let mut paths = BTreeSet::new();
    let mut dirs = vec![Path::new(env!("CARGO_MANIFEST_DIR")).join("src")];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let file = entry.unwrap().path();
            if file.is_dir() {
                dirs.push(file);
                continue;
            }
            if file.extension().is_none_or(|e| e != "rs") {
                continue;
            }
            let text = std::fs::read_to_string(&file).unwrap();
            for other in [".nest(", ".nest_service(", ".route_service("] {
                assert!(
                    !text.contains(other),
                    "{}: `{other}` routes that tests/http/routes.rs cannot read",
                    file.display()
                );
            }
            for (at, call) in text.match_indices(".route(") {
                let literal = text[at + call.len()..]
                    .trim_start()
                    .strip_prefix('"')
                    .and_then(|rest| rest.split_once('"'))
                    .map(|(path, _)| path)
                    .unwrap_or_else(|| {
                        panic!(
                            "{}: a `.route(` whose path is not a string literal",
                            file.display()
                        )
                    });
                paths.insert(literal.to_string());
            }
        }
    }
    assert!(!paths.is_empty(), "no `.route(` found under src/");
    paths
}

/// The methods the router allows on `path` (the `Allow` header of its 405 to `OPTIONS`),
/// upper case, `HEAD` included for every `GET`.
pub async fn allowed_methods(app: &TestApp, path: &str) -> BTreeSet<String> {
    let req = Request::builder()
        .method(Method::OPTIONS)
        .uri(path)
        .body(Body::empty())
        .unwrap();
    let resp = app.router.clone().oneshot(req).await.unwrap();
    assert_eq!(
        resp.status(),
        StatusCode::METHOD_NOT_ALLOWED,
        "OPTIONS {path}"
    );
    resp.headers()
        .get(header::ALLOW)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .split(',')
        .map(|m| m.trim().to_string())
        .filter(|m| !m.is_empty())
        .collect()
}

/// Every (method, path) the router serves other than those in [`UNDOCUMENTED`], lower case as
/// in the document, `HEAD` left out (axum answers it for every `GET`).
pub async fn router_routes(app: &TestApp) -> BTreeSet<(String, String)> {
    let paths = router_paths();
    for u in UNDOCUMENTED {
        assert!(
            paths.contains(u.template),
            "routes.rs lists {} as undocumented, but the router has no such route",
            u.template
        );
    }
    let mut routes = BTreeSet::new();
    for path in paths {
        if UNDOCUMENTED.iter().any(|u| u.template == path) {
            continue;
        }
        let concrete = path.replace("{id}", "nope").replace("{topic}", "t");
        for method in allowed_methods(app, &concrete).await {
            if method != "HEAD" {
                routes.insert((method.to_lowercase(), path.clone()));
            }
        }
    }
    routes
}
