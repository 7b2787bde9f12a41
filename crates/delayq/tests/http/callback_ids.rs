//! What a receiver sees of a job id in a callback (docs/delivery.md, "The request"): any id,
//! with spaces at its ends, non-ASCII letters, emoji or `%`, arrives in `webhook-id` as visible
//! ASCII that percent-decodes to the id, and the signature covers the header as sent, so that
//! receivers verify it. Checked with a Rust receiver and with a real Python one that runs
//! docs/delivery.md's two verification examples, extracted from the page, with the
//! `standardwebhooks` package (PyPI; `.ci/test-venv` installs it).

use crate::support;

use axum::http::StatusCode;
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use delayq::config::Config;
use delayq::delivery::allow::AllowList;
use delayq::delivery::sign::WebhookSecret;
use hmac::{Hmac, Mac};
use serde_json::{Value, json};
use sha2::Sha256;
use std::time::Duration;
use support::app::TestApp;
use support::backends::Backend;
use support::receiver::{Receiver, Reply};
use tokio::io::{AsyncBufReadExt, BufReader};

/// The secret of docs/delivery.md's examples, which hard-code it.
const DOCS_SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
/// Generous bound for calls that are due now.
const SOON: Duration = Duration::from_secs(15);

/// Ids a receiver used to get altered: non-ASCII, spaces at the ends, a `%`, plus a plain one.
const IDS: [&str; 5] = ["café-ü-😀", "  padded  ", "50%off", "order 42", "order-42"];

fn config() -> Config {
    Config {
        callback_allow: AllowList::parse(&["127.0.0.1".into()]).unwrap(),
        callback_secrets: vec![WebhookSecret::parse(DOCS_SECRET).unwrap()],
        ..Config::default()
    }
}

fn percent_decode(s: &str) -> String {
    percent_encoding::percent_decode_str(s)
        .decode_utf8()
        .unwrap()
        .into_owned()
}

async fn push(app: &TestApp, job: Value) {
    let r = app.post("/v1/jobs", job).await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.json);
}

async fn wait_gone(app: &TestApp, id: &str) {
    let path = format!(
        "/v1/jobs/{}",
        percent_encoding::utf8_percent_encode(id, percent_encoding::NON_ALPHANUMERIC)
    );
    let deadline = tokio::time::Instant::now() + SOON;
    loop {
        let r = app.get(&path).await;
        if r.status == StatusCode::NOT_FOUND {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{id:?} not finished: {}",
            r.json
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn any_id_arrives_as_visible_ascii_that_decodes_to_it_and_is_signed_as_sent() {
    let b = Backend::memory().await;
    let rx = Receiver::start(|_, _| Reply::Status(204)).await;
    let app = TestApp::with_config(&b, config());
    for id in IDS {
        push(
            &app,
            json!({"topic": "tópico-😀", "id": id, "body": "text",
                   "callback": {"url": format!("{}/hook", rx.base)}}),
        )
        .await;
    }
    let calls = rx.wait_for(IDS.len(), SOON).await;
    let key = BASE64.decode(&DOCS_SECRET["whsec_".len()..]).unwrap();
    let mut decoded: Vec<String> = Vec::new();
    for c in &calls {
        assert!(
            c.id.bytes().all(|b| b.is_ascii_graphic()),
            "webhook-id {:?}",
            c.id
        );
        assert_eq!(percent_decode(&c.topic), "tópico-😀");
        let mut mac = Hmac::<Sha256>::new_from_slice(&key).unwrap();
        mac.update(format!("{}.{}.", c.id, c.timestamp).as_bytes());
        mac.update(&c.body);
        let expected = format!("v1,{}", BASE64.encode(mac.finalize().into_bytes()));
        assert_eq!(
            c.signature.as_deref(),
            Some(expected.as_str()),
            "{:?}",
            c.id
        );
        decoded.push(percent_decode(&c.id));
    }
    decoded.sort();
    let mut want: Vec<String> = IDS.iter().map(|s| s.to_string()).collect();
    want.sort();
    assert_eq!(decoded, want);
    // An id that needs no encoding is sent as it is.
    assert!(calls.iter().any(|c| c.id == "order-42"));
}

/// The Python blocks of docs/delivery.md's "Verifying the signature", as written there: the
/// one with the library and the one by hand.
fn docs_examples() -> (String, String) {
    let page = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../docs/delivery.md"
    ))
    .unwrap();
    let section = page
        .split_once("### Verifying the signature")
        .expect("docs/delivery.md has a section \"Verifying the signature\"")
        .1;
    let section = section.split("\n## ").next().unwrap();
    let blocks: Vec<&str> = section
        .split("```python\n")
        .skip(1)
        .map(|rest| rest.split_once("```").unwrap().0)
        .collect();
    assert_eq!(blocks.len(), 2, "two Python examples in the section");
    assert!(blocks[0].contains("standardwebhooks"), "{}", blocks[0]);
    assert!(blocks[1].contains("def verified"), "{}", blocks[1]);
    (blocks[0].to_string(), blocks[1].to_string())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_standardwebhooks_library_and_the_docs_examples_verify_every_call() {
    let python = support::python::with("standardwebhooks");
    let (library, by_hand) = docs_examples();
    let mut receiver = tokio::process::Command::new(python)
        .arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/http/standard_webhooks_receiver.py"
        ))
        .arg(DOCS_SECRET)
        .env("DOCS_LIBRARY_EXAMPLE", library)
        .env("DOCS_BY_HAND_EXAMPLE", by_hand)
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("start the Python receiver");
    let mut lines = BufReader::new(receiver.stdout.take().unwrap()).lines();
    let first = tokio::time::timeout(SOON, lines.next_line())
        .await
        .expect("the Python receiver did not start")
        .unwrap()
        .expect("the Python receiver exited");
    let port = serde_json::from_str::<Value>(&first).unwrap()["port"]
        .as_u64()
        .unwrap();

    let b = Backend::memory().await;
    let app = TestApp::with_config(&b, config());
    // Each id with a JSON body and with a text body (the library must not parse it).
    let mut jobs = Vec::new();
    for id in IDS {
        for (suffix, body) in [("", r#"{"order":42,"note":"ü"}"#), (" text", "order 42 ü")] {
            let id = format!("{id}{suffix}");
            push(
                &app,
                json!({"topic": "orders", "id": id, "body": body, "max_attempts": 1,
                       "callback": {"url": format!("http://127.0.0.1:{port}/hook")}}),
            )
            .await;
            jobs.push((id, body));
        }
    }
    let mut reports = Vec::new();
    while reports.len() < jobs.len() {
        let line = tokio::time::timeout(SOON, lines.next_line())
            .await
            .unwrap_or_else(|_| {
                panic!(
                    "{} calls of {} arrived: {reports:?}",
                    reports.len(),
                    jobs.len()
                )
            })
            .unwrap()
            .expect("the Python receiver exited");
        reports.push(serde_json::from_str::<Value>(&line).unwrap());
    }
    for (id, body) in &jobs {
        let r = reports
            .iter()
            .find(|r| r["id"] == id.as_str())
            .unwrap_or_else(|| panic!("no call decoded to {id:?}: {reports:?}"));
        assert_eq!(r["library"], "ok", "{id:?}: {r}");
        assert_eq!(r["by_hand"], true, "{id:?}: {r}");
        assert_eq!(r["body"], *body, "{r}");
        // Verified, so the receiver answered 204 and the job is finished.
        wait_gone(&app, id).await;
    }
}
