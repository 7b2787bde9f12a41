//! Other sites' pages against a server without tokens (the default), in a real Chromium: a page
//! served by a second loopback HTTP server, on another site (`127.0.0.2`) or another port of
//! the same host (same-site), tries with `fetch()` and form posts to create, finish and delete
//! jobs and to read them; a rebinding page (the name `evil.test`, which Chromium is told
//! resolves to 127.0.0.1) tries the same from "its own" origin. Afterwards the store, read
//! through the API as a producer would, is unchanged, and nothing the pages got holds a job;
//! the dashboard, reached as `localhost`, still works.

use crate::driver::Browser;
use crate::{ONE_BROWSER, Server};
use serde_json::{Value, json};
use std::net::SocketAddr;

/// The attacker's page. `TARGET` is replaced with the server's base URL. Its script runs every
/// attempt in turn, then writes what each got into `#done`.
const ATTACK_PAGE: &str = r#"<!doctype html>
<meta charset="utf-8">
<title>a page of another site</title>
<pre id="done"></pre>
<script>
const target = "TARGET";
const results = {};
const text = {"Content-Type": "text/plain"};

async function tryFetch(name, path, init) {
  try {
    const r = await fetch(target + path, init);
    let body = null;
    try { body = await r.text(); } catch (e) { body = "unreadable: " + e; }
    results[name] = {type: r.type, status: r.status, body};
  } catch (e) {
    results[name] = {error: String(e)};
  }
}

// A form posted into a hidden frame (a page cannot read a cross-origin frame, but the post is
// sent). A text/plain form of one field `name` with value `"}` sends `name="}`: JSON.
function submitForm(name, path, enctype, fields) {
  return new Promise((resolve) => {
    const frame = document.createElement("iframe");
    frame.name = "frame-" + name;
    document.body.appendChild(frame);
    const form = document.createElement("form");
    form.method = "POST";
    form.action = target + path;
    form.enctype = enctype;
    form.target = frame.name;
    for (const [k, v] of fields) {
      const input = document.createElement("input");
      input.type = "hidden";
      input.name = k;
      input.value = v;
      form.appendChild(input);
    }
    document.body.appendChild(form);
    const timer = setTimeout(() => { results[name] = "no load"; resolve(); }, 10000);
    frame.addEventListener("load", () => {
      clearTimeout(timer);
      results[name] = "submitted";
      resolve();
    }, {once: true});
    form.submit();
  });
}

async function attack() {
  await tryFetch("fetch-compat-push", "/push", {method: "POST", mode: "no-cors", headers: text,
    body: JSON.stringify({topic: "attack", id: "fetch-push", delay: 0, ttr: 30, body: "x"})});
  await tryFetch("fetch-v1-push", "/v1/jobs", {method: "POST", mode: "no-cors", headers: text,
    body: JSON.stringify({topic: "attack", id: "fetch-v1", body: "x"})});
  await tryFetch("fetch-v1-finish", "/v1/jobs/victim-reserved/finish",
    {method: "POST", mode: "no-cors"});
  await tryFetch("fetch-compat-finish", "/finish", {method: "POST", mode: "no-cors",
    headers: text, body: JSON.stringify({id: "victim-delayed"})});
  await tryFetch("fetch-compat-delete", "/delete", {method: "POST", mode: "no-cors",
    headers: text, body: JSON.stringify({id: "victim-ready"})});
  await tryFetch("fetch-v1-bury", "/v1/jobs/victim-ready/bury", {method: "POST", mode: "no-cors"});
  await tryFetch("fetch-v1-delete", "/v1/jobs/victim-ready", {method: "DELETE"});
  await tryFetch("fetch-read-job", "/v1/jobs/victim-ready", {});
  await tryFetch("fetch-read-job-no-cors", "/v1/jobs/victim-ready", {mode: "no-cors"});
  await tryFetch("fetch-read-list", "/v1/topics/orders/jobs?state=ready", {});
  await submitForm("form-compat-push", "/push", "text/plain",
    [['{"topic":"attack","id":"form-push","delay":0,"ttr":30,"body":"', '"}']]);
  await submitForm("form-v1-push", "/v1/jobs", "text/plain",
    [['{"topic":"attack","id":"form-v1","body":"', '"}']]);
  await submitForm("form-v1-finish", "/v1/jobs/victim-reserved/finish",
    "application/x-www-form-urlencoded", [["x", "1"]]);
  await submitForm("form-compat-delete", "/delete", "text/plain",
    [['{"id":"victim-ready","x":"', '"}']]);
  await submitForm("form-compat-finish", "/finish", "text/plain",
    [['{"id":"victim-delayed","x":"', '"}']]);
  document.getElementById("done").textContent = JSON.stringify(results);
}
attack();
</script>
"#;

/// A second HTTP server on `ip` (port chosen by the system) serving [`ATTACK_PAGE`] aimed at
/// `target`; it stops with the test's runtime.
async fn attacker(ip: &str, target: &str) -> SocketAddr {
    let page = ATTACK_PAGE.replace("TARGET", target);
    let app = axum::Router::new().route(
        "/",
        axum::routing::get(move || {
            let page = page.clone();
            async move { axum::response::Html(page) }
        }),
    );
    let listener = tokio::net::TcpListener::bind((ip, 0))
        .await
        .unwrap_or_else(|e| panic!("binding {ip}:0 for the attacker's page: {e}"));
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    addr
}

/// The victims: one job in each state a page would want to change, with a body it would want
/// to read.
async fn victims(server: &Server) {
    for (id, delay) in [
        ("victim-ready", 0),
        ("victim-delayed", 3_600_000),
        ("victim-reserved", 0),
    ] {
        server
            .push(
                json!({"topic": if id == "victim-reserved" { "work" } else { "orders" },
                         "id": id, "body": "victim-body", "delay_ms": delay}),
            )
            .await;
    }
    server.reserve("work", 1).await;
    server.dead_job("orders", "victim-dead").await;
}

/// Each victim's state, and whether any job the pages tried to plant exists.
async fn store_state(server: &Server) -> Value {
    let mut out = serde_json::Map::new();
    let ids = [
        "victim-ready",
        "victim-delayed",
        "victim-reserved",
        "victim-dead",
        "fetch-push",
        "fetch-v1",
        "form-push",
        "form-v1",
    ];
    for id in ids {
        let resp = server
            .http
            .get(format!("{}/v1/jobs/{id}", server.live.base_url))
            .send()
            .await
            .unwrap();
        let state = match resp.status() {
            reqwest::StatusCode::NOT_FOUND => Value::Null,
            _ => resp.json::<Value>().await.unwrap()["state"].clone(),
        };
        out.insert(id.into(), state);
    }
    let stats = server.call(reqwest::Method::GET, "/v1/stats", None).await;
    out.insert("attack-topic".into(), stats["topics"]["attack"].clone());
    Value::Object(out)
}

fn untouched() -> Value {
    json!({
        "victim-ready": "ready",
        "victim-delayed": "delayed",
        "victim-reserved": "reserved",
        "victim-dead": "dead",
        "fetch-push": null,
        "fetch-v1": null,
        "form-push": null,
        "form-v1": null,
        "attack-topic": null,
    })
}

/// Opens `url` and waits for its attack script's results.
async fn results_of_attack(b: &Browser, url: &str) -> Value {
    b.open(url).await;
    let done = b
        .wait("the attack page to finish", || async {
            let t = b.text("#done").await?;
            (!t.is_empty()).then_some(t)
        })
        .await;
    serde_json::from_str(&done).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pages_of_other_sites_cannot_create_change_or_read_jobs() {
    let _one = ONE_BROWSER.lock().await;
    let server = Server::start(None).await;
    victims(&server).await;
    assert_eq!(store_state(&server).await, untouched());
    let target = server.live.base_url.clone();
    // Another site, and another port of the server's own host (same site, another origin).
    let other_site = attacker("127.0.0.2", &target).await;
    let same_site = attacker("127.0.0.1", &target).await;

    let b = Browser::start().await;
    for page in [other_site, same_site] {
        let results = results_of_attack(&b, &format!("http://{page}/")).await;
        let shown = results.to_string();
        assert!(!shown.contains("victim-body"), "{page} read a job: {shown}");
        for read in ["fetch-read-job", "fetch-read-list"] {
            assert!(results[read]["error"].is_string(), "{page} {read}: {shown}");
        }
        assert_eq!(
            results["fetch-read-job-no-cors"]["type"], "opaque",
            "{shown}"
        );
        // The forms were sent (so their refusal, not a failure to send, kept the store intact).
        assert_eq!(results["form-compat-push"], "submitted", "{shown}");
        assert_eq!(
            store_state(&server).await,
            untouched(),
            "after the page on {page}: {shown}"
        );
    }

    // The dashboard, reached as localhost, still changes what its user asks it to.
    let ui = format!("http://localhost:{}/ui/", server.live.addr.port());
    b.open(&format!("{ui}#/jobs/victim-dead")).await;
    b.wait_text("#job-state", "dead").await;
    b.click("#kick").await;
    b.confirm().await;
    b.wait_text("#job-state", "ready").await;
    let job = server
        .call(reqwest::Method::GET, "/v1/jobs/victim-dead", None)
        .await;
    assert_eq!(job["state"], "ready");
    b.close().await;
}

/// What a page's script gets from `fetch`es to its own origin, which the browser resolves to
/// the server: the rebinding attack once the name points at 127.0.0.1.
const SAME_ORIGIN_ATTEMPTS: &str = r#"
const done = arguments[0];
const results = {};
async function attempt(name, path, init) {
  try {
    const r = await fetch(path, init);
    results[name] = {status: r.status, body: await r.text()};
  } catch (e) {
    results[name] = {error: String(e)};
  }
}
(async () => {
  await attempt("read-job", "/v1/jobs/victim-ready", {});
  await attempt("read-list", "/v1/topics/orders/jobs?state=ready", {});
  await attempt("read-compat", "/get", {method: "POST", body: JSON.stringify({id: "victim-ready"})});
  await attempt("push", "/v1/jobs", {method: "POST", headers: {"Content-Type": "application/json"},
    body: JSON.stringify({topic: "attack", id: "fetch-v1", body: "x"})});
  await attempt("delete", "/v1/jobs/victim-ready", {method: "DELETE"});
  await attempt("finish", "/v1/jobs/victim-reserved/finish", {method: "POST"});
  done(results);
})();
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rebinding_page_under_a_foreign_name_gets_nothing_from_the_server() {
    let _one = ONE_BROWSER.lock().await;
    let server = Server::start(None).await;
    victims(&server).await;
    let port = server.live.addr.port();

    // `evil.test` resolves to the server's address, as a rebinding name does once rebound.
    let b = Browser::start_with(&["--host-resolver-rules=MAP evil.test 127.0.0.1".into()]).await;
    b.open(&format!("http://evil.test:{port}/ui/")).await;
    let page = b.eval("return document.body.innerText", vec![]).await;
    let page = page.as_str().unwrap_or_default();
    assert!(page.contains("host_not_allowed"), "the page shows: {page}");
    let results = b
        .client
        .execute_async(SAME_ORIGIN_ATTEMPTS, vec![])
        .await
        .unwrap();
    let shown = results.to_string();
    assert!(
        !shown.contains("victim-body"),
        "the page read a job: {shown}"
    );
    for name in [
        "read-job",
        "read-list",
        "read-compat",
        "push",
        "delete",
        "finish",
    ] {
        assert_eq!(results[name]["status"], 421, "{name}: {shown}");
    }
    assert_eq!(store_state(&server).await, untouched(), "{shown}");
    b.close().await;
}
