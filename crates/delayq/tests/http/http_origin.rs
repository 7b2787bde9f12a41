//! Requests a browser may make (docs/operations.md "Security"): a request addressed to a host
//! the server does not answer to is refused 421 (DNS rebinding), and a change a browser marks
//! as coming from another site (`Sec-Fetch-Site`, `Origin`) is refused 403, both in the shape of
//! the path's API and changing nothing; curl-like clients (no `Origin`) and the server's own
//! pages pass. In-process through the router, and over a loopback socket for HTTP/2's
//! `:authority` and the Rust client.

use crate::support;

use axum::body::Body;
use axum::http::{Method, Request, StatusCode};
use delayq::config::AllowedHosts;
use delayq::config::{AuthToken, Config};
use delayq::store::memory::MemoryStore;
use serde_json::{Value, json};
use std::sync::Arc;
use support::app::{LiveServer, TestApp};
use support::backends::Backend;
use tower::ServiceExt;

/// A response's status, JSON body and whether it allowed another origin to read it.
struct Answer {
    status: StatusCode,
    json: Value,
    cors: bool,
}

async fn send(
    app: &TestApp,
    method: Method,
    uri: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> Answer {
    let mut req = Request::builder().method(method).uri(uri);
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let resp = app
        .router
        .clone()
        .oneshot(req.body(Body::from(body.to_string())).unwrap())
        .await
        .unwrap();
    let status = resp.status();
    let cors = resp.headers().contains_key("access-control-allow-origin");
    let raw = axum::body::to_bytes(resp.into_body(), usize::MAX)
        .await
        .unwrap();
    let json = serde_json::from_slice(&raw)
        .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&raw).into_owned()));
    Answer { status, json, cors }
}

fn hosts(entries: &[&str]) -> Option<AllowedHosts> {
    let entries: Vec<String> = entries.iter().map(|e| e.to_string()).collect();
    Some(AllowedHosts::parse(&entries).unwrap())
}

/// An app with one job, `secret` (topic `orders`, body `the-secret-body`), due in an hour.
async fn app_with_a_job(config: Config) -> (Backend, TestApp) {
    let b = Backend::memory().await;
    let app = TestApp::with_config(&b, config);
    let r = app
        .post(
            "/v1/jobs",
            json!({"topic": "orders", "id": "secret", "body": "the-secret-body", "delay_ms": 3_600_000}),
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.json);
    (b, app)
}

async fn status_with_host(app: &TestApp, host: &str) -> StatusCode {
    send(app, Method::GET, "/v1/jobs/secret", &[("host", host)], "")
        .await
        .status
}

#[tokio::test]
async fn a_request_for_a_foreign_host_is_refused_421_and_reads_nothing() {
    let (_b, app) = app_with_a_job(Config::default()).await;
    let evil = [("host", "evil.example:9277")];

    // What a rebinding page would read: the job, the lists, the dashboard.
    for path in [
        "/v1/jobs/secret",
        "/v1/topics/orders/jobs?state=delayed",
        "/ui/",
        "/metrics",
    ] {
        let r = send(&app, Method::GET, path, &evil, "").await;
        assert_eq!(
            r.status,
            StatusCode::MISDIRECTED_REQUEST,
            "{path}: {}",
            r.json
        );
        assert!(
            !r.json.to_string().contains("the-secret-body"),
            "{path}: {}",
            r.json
        );
        if path.starts_with("/v1/") {
            assert_eq!(r.json["error"]["code"], "host_not_allowed", "{}", r.json);
            let message = r.json["error"]["message"].as_str().unwrap();
            assert!(message.contains("evil.example:9277"), "{message}");
            assert!(message.contains("allowed_hosts"), "{message}");
        }
    }
    // The compat API answers in its envelope.
    let r = send(&app, Method::POST, "/get", &evil, r#"{"id":"secret"}"#).await;
    assert_eq!(r.status, StatusCode::MISDIRECTED_REQUEST);
    assert_eq!(
        (r.json["code"].clone(), r.json["data"].clone()),
        (json!(1), Value::Null)
    );
    assert!(
        !r.json.to_string().contains("the-secret-body"),
        "{}",
        r.json
    );

    // Changes too, even "same-origin" ones (the rebinding page's own origin).
    let headers = [
        ("host", "evil.example:9277"),
        ("sec-fetch-site", "same-origin"),
    ];
    let job = r#"{"topic":"orders","id":"planted"}"#;
    let r = send(&app, Method::POST, "/v1/jobs", &headers, job).await;
    assert_eq!(r.status, StatusCode::MISDIRECTED_REQUEST, "{}", r.json);
    let r = send(&app, Method::DELETE, "/v1/jobs/secret", &headers, "").await;
    assert_eq!(r.status, StatusCode::MISDIRECTED_REQUEST, "{}", r.json);
    // An absolute request target names the host too, whatever Host says.
    let r = send(
        &app,
        Method::GET,
        "http://evil.example/v1/jobs/secret",
        &[("host", "127.0.0.1:9277")],
        "",
    )
    .await;
    assert_eq!(r.status, StatusCode::MISDIRECTED_REQUEST, "{}", r.json);
    // Two Host headers are refused, not guessed between.
    let two = [("host", "127.0.0.1"), ("host", "evil.example")];
    assert_eq!(
        send(&app, Method::GET, "/healthz", &two, "").await.status,
        StatusCode::MISDIRECTED_REQUEST
    );

    assert_eq!(
        app.get("/v1/jobs/planted").await.status,
        StatusCode::NOT_FOUND
    );
    assert_eq!(app.get("/v1/jobs/secret").await.status, StatusCode::OK);
}

#[tokio::test]
async fn loopback_names_and_ip_addresses_are_served_on_any_port() {
    let (_b, app) = app_with_a_job(Config::default()).await;
    for host in [
        "127.0.0.1:9277",
        "127.0.0.1",
        "localhost:9277",
        "LocalHost",
        "localhost.:8080",
        "[::1]:9277",
        "[::1]",
        "192.0.2.7:80",
    ] {
        assert_eq!(status_with_host(&app, host).await, StatusCode::OK, "{host}");
    }
    // No Host at all (HTTP/1.0) is not a browser's request.
    assert_eq!(app.get("/v1/jobs/secret").await.status, StatusCode::OK);
    for host in [
        "evil.example",
        "localhost.evil.example",
        "127.0.0.1.nip.io",
        "127.0.0.1:9277@evil.example",
        "",
    ] {
        assert_eq!(
            status_with_host(&app, host).await,
            StatusCode::MISDIRECTED_REQUEST,
            "{host:?}"
        );
    }
}

#[tokio::test]
async fn allowed_hosts_adds_names_and_a_star_allows_any() {
    let config = Config {
        allowed_hosts: hosts(&["queue.example", "*.corp.example"]),
        ..Config::default()
    };
    let (_b, app) = app_with_a_job(config).await;
    for host in [
        "queue.example:9277",
        "a.corp.example",
        "b.a.corp.example:1",
        "localhost",
    ] {
        assert_eq!(status_with_host(&app, host).await, StatusCode::OK, "{host}");
    }
    for host in ["evil.example", "corp.example", "queue.example.evil"] {
        let status = status_with_host(&app, host).await;
        assert_eq!(status, StatusCode::MISDIRECTED_REQUEST, "{host}");
    }

    let any = Config {
        allowed_hosts: hosts(&["*"]),
        ..Config::default()
    };
    let (_b, app) = app_with_a_job(any).await;
    assert_eq!(status_with_host(&app, "evil.example").await, StatusCode::OK);
}

#[tokio::test]
async fn a_server_on_every_interface_allows_any_host_unless_the_setting_narrows_it() {
    let everywhere = Config {
        listen: "0.0.0.0:9277".parse().unwrap(),
        ..Config::default()
    };
    let (_b, app) = app_with_a_job(everywhere.clone()).await;
    assert_eq!(
        status_with_host(&app, "delayq.internal:9277").await,
        StatusCode::OK
    );

    let narrowed = Config {
        allowed_hosts: hosts(&["delayq.internal"]),
        ..everywhere
    };
    let (_b, app) = app_with_a_job(narrowed).await;
    assert_eq!(
        status_with_host(&app, "delayq.internal:9277").await,
        StatusCode::OK
    );
    assert_eq!(
        status_with_host(&app, "localhost:9277").await,
        StatusCode::OK
    );
    assert_eq!(
        status_with_host(&app, "evil.example:9277").await,
        StatusCode::MISDIRECTED_REQUEST
    );
}

/// Headers a browser sends on a request from a page of another site (or another port).
const CROSS_SITE: &[&[(&str, &str)]] = &[
    &[("sec-fetch-site", "cross-site")],
    &[("sec-fetch-site", "same-site")],
    &[
        ("sec-fetch-site", "cross-site"),
        ("origin", "http://127.0.0.2:8080"),
    ],
    // Browsers without Sec-Fetch-Site: the Origin decides.
    &[("origin", "http://evil.example")],
    &[("origin", "http://127.0.0.1:3000")],
    &[("origin", "http://localhost:9277")],
    &[("origin", "null")],
];

/// Every state-changing call a page could try, in the simple forms a page can send without a
/// preflight (`text/plain` bodies), plus `DELETE`.
fn changes() -> Vec<(Method, &'static str, &'static str)> {
    vec![
        (
            Method::POST,
            "/push",
            r#"{"topic":"orders","id":"planted","delay":0,"ttr":30,"body":"x"}"#,
        ),
        (
            Method::POST,
            "/v1/jobs",
            r#"{"topic":"orders","id":"planted-v1","body":"x"}"#,
        ),
        (Method::POST, "/v1/jobs/victim/finish", ""),
        (Method::POST, "/v1/jobs/victim/bury", ""),
        (
            Method::POST,
            "/v1/reserve",
            r#"{"topics":["orders"],"max":10}"#,
        ),
        (Method::POST, "/finish", r#"{"id":"victim"}"#),
        (Method::POST, "/delete", r#"{"id":"secret"}"#),
        (Method::GET, "/delete", r#"{"id":"secret"}"#),
        (Method::DELETE, "/v1/jobs/secret", ""),
        (Method::POST, "/v1/topics/orders/kick", r#"{"max":10}"#),
        (Method::GET, "/reStore?expire=true", ""),
    ]
}

/// The state of the two jobs the cross-site tests try to change, and of the planted ones.
async fn jobs(app: &TestApp) -> Value {
    let mut out = serde_json::Map::new();
    for id in ["secret", "victim", "planted", "planted-v1"] {
        let r = app.get(&format!("/v1/jobs/{id}")).await;
        out.insert(id.into(), r.json["state"].clone());
    }
    Value::Object(out)
}

#[tokio::test]
async fn changes_from_another_site_are_refused_403_and_change_nothing() {
    let (_b, app) = app_with_a_job(Config::default()).await;
    let r = app
        .post(
            "/v1/jobs",
            json!({"topic": "orders", "id": "victim", "body": "v"}),
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED);
    let before = jobs(&app).await;
    assert_eq!(
        before,
        json!({"secret": "delayed", "victim": "ready", "planted": null, "planted-v1": null})
    );

    for browser in CROSS_SITE {
        for (method, path, body) in changes() {
            let mut headers = vec![("host", "127.0.0.1:9277"), ("content-type", "text/plain")];
            headers.extend_from_slice(browser);
            let r = send(&app, method.clone(), path, &headers, body).await;
            assert_eq!(
                r.status,
                StatusCode::FORBIDDEN,
                "{method} {path} {browser:?}: {}",
                r.json
            );
            let compat = ["/push", "/finish", "/delete", "/reStore"]
                .iter()
                .any(|p| path.starts_with(p));
            if compat {
                assert_eq!(r.json["code"], 1, "{path}: {}", r.json);
                assert_eq!(r.json["data"], Value::Null, "{path}: {}", r.json);
            } else {
                assert_eq!(r.json["error"]["code"], "cross_site", "{path}: {}", r.json);
            }
        }
    }
    assert_eq!(jobs(&app).await, before);
}

#[tokio::test]
async fn same_origin_pages_and_clients_that_are_not_browsers_change_as_before() {
    let (_b, app) = app_with_a_job(Config::default()).await;
    let own: &[&[(&str, &str)]] = &[
        // curl, the CLI, the client crate, the bench: no Origin, no Sec-Fetch-Site.
        &[],
        &[
            ("sec-fetch-site", "same-origin"),
            ("origin", "http://127.0.0.1:9277"),
        ],
        // A typed URL or a bookmark.
        &[("sec-fetch-site", "none")],
        // Older browsers: the Origin is this server's.
        &[("origin", "http://127.0.0.1:9277")],
        &[("origin", "https://127.0.0.1:9277")],
        // Behind a proxy that rewrites Host: the browser's Sec-Fetch-Site decides.
        &[
            ("sec-fetch-site", "same-origin"),
            ("origin", "https://queue.example"),
        ],
    ];
    for (i, browser) in own.iter().enumerate() {
        let mut headers = vec![("host", "127.0.0.1:9277")];
        headers.extend_from_slice(browser);
        let job = format!(r#"{{"topic":"orders","id":"own-{i}","body":"x"}}"#);
        let r = send(&app, Method::POST, "/v1/jobs", &headers, &job).await;
        assert_eq!(r.status, StatusCode::CREATED, "{browser:?}: {}", r.json);
        let r = send(
            &app,
            Method::DELETE,
            &format!("/v1/jobs/own-{i}"),
            &headers,
            "",
        )
        .await;
        assert_eq!(r.status, StatusCode::NO_CONTENT, "{browser:?}: {}", r.json);
        let push =
            format!(r#"{{"topic":"orders","id":"compat-{i}","delay":0,"ttr":30,"body":"x"}}"#);
        let r = send(&app, Method::POST, "/push", &headers, &push).await;
        assert_eq!(
            (r.status, r.json["code"].clone()),
            (StatusCode::OK, json!(0)),
            "{}",
            r.json
        );
    }
}

#[tokio::test]
async fn reads_from_another_site_are_answered_without_letting_the_page_read_them() {
    // A link from another site to the dashboard works; a page's fetch of a job gets an answer
    // the browser does not hand it, since no CORS header allows another origin.
    let (_b, app) = app_with_a_job(Config::default()).await;
    let cross = [("host", "127.0.0.1:9277"), ("sec-fetch-site", "cross-site")];
    for path in ["/ui/", "/v1/jobs/secret", "/healthz"] {
        let r = send(&app, Method::GET, path, &cross, "").await;
        assert_eq!(r.status, StatusCode::OK, "{path}");
        assert!(!r.cors, "{path} allows another origin to read it");
    }
    let preflight = [
        ("host", "127.0.0.1:9277"),
        ("origin", "http://evil.example"),
        ("access-control-request-method", "DELETE"),
    ];
    let r = send(&app, Method::OPTIONS, "/v1/jobs/secret", &preflight, "").await;
    assert!(!r.cors, "a preflight was allowed: {}", r.json);
}

#[tokio::test]
async fn the_host_and_cross_site_checks_come_before_authentication() {
    let token = "0123456789abcdef";
    let config = Config {
        auth_tokens: vec![AuthToken::from(token)],
        ..Config::default()
    };
    let b = Backend::memory().await;
    let app = TestApp::with_config(&b, config);
    let bearer = format!("Bearer {token}");
    let r = send(
        &app,
        Method::GET,
        "/v1/stats",
        &[("host", "evil.example")],
        "",
    )
    .await;
    assert_eq!(r.status, StatusCode::MISDIRECTED_REQUEST, "{}", r.json);
    // A page that somehow holds the token still cannot change anything from another site.
    let headers = [
        ("host", "127.0.0.1:9277"),
        ("authorization", bearer.as_str()),
        ("sec-fetch-site", "cross-site"),
    ];
    let job = r#"{"topic":"orders","id":"x"}"#;
    let r = send(&app, Method::POST, "/v1/jobs", &headers, job).await;
    assert_eq!(r.status, StatusCode::FORBIDDEN, "{}", r.json);
    let headers = [
        ("host", "127.0.0.1:9277"),
        ("authorization", bearer.as_str()),
    ];
    let r = send(&app, Method::POST, "/v1/jobs", &headers, job).await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.json);
}

/// One HTTP/2 request (prior knowledge, as a client without TLS speaks it) to `addr`, with
/// `uri`'s authority as `:authority`.
async fn h2_status(
    addr: std::net::SocketAddr,
    method: Method,
    uri: &str,
    origin: Option<&str>,
) -> StatusCode {
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let (mut send, conn) = hyper::client::conn::http2::handshake(
        hyper_util::rt::TokioExecutor::new(),
        hyper_util::rt::TokioIo::new(tcp),
    )
    .await
    .unwrap();
    tokio::spawn(conn);
    let mut req = Request::builder().method(method).uri(uri);
    if let Some(o) = origin {
        req = req.header("origin", o);
    }
    let body = http_body_util::Full::new(bytes::Bytes::from_static(
        br#"{"topic":"orders","id":"h2","body":"x"}"#,
    ));
    send.send_request(req.body(body).unwrap())
        .await
        .unwrap()
        .status()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_a_socket_http2_authority_is_checked_and_the_rust_client_is_served() {
    delayq::install_tls_provider();
    let server = LiveServer::start(Arc::new(MemoryStore::new()), Config::default()).await;
    let port = server.addr.port();
    let at = |host: &str, path: &str| format!("http://{host}:{port}{path}");

    assert_eq!(
        h2_status(
            server.addr,
            Method::GET,
            &at("evil.example", "/healthz"),
            None
        )
        .await,
        StatusCode::MISDIRECTED_REQUEST
    );
    assert_eq!(
        h2_status(server.addr, Method::GET, &at("localhost", "/healthz"), None).await,
        StatusCode::OK
    );
    let own = at("127.0.0.1", "");
    assert_eq!(
        h2_status(
            server.addr,
            Method::POST,
            &at("127.0.0.1", "/v1/jobs"),
            Some("http://evil.example")
        )
        .await,
        StatusCode::FORBIDDEN
    );
    assert_eq!(
        h2_status(
            server.addr,
            Method::POST,
            &at("127.0.0.1", "/v1/jobs"),
            Some(&own)
        )
        .await,
        StatusCode::CREATED
    );

    // The Rust client (reqwest underneath) as the CLI uses it.
    let client = delayq_client::Client::new(&server.base_url).unwrap();
    let job = client.get("h2").await.unwrap();
    assert_eq!(job.id, "h2");
}
