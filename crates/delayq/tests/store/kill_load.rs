//! The clients of the embedded store's kill -9 tests (embedded_crash.rs, embedded_cold.rs):
//! what they were told before the kill ([`Record`]), a push that records itself ([`push`]),
//! and the checks after the restart: every acknowledged push kept and no acknowledged delete
//! undone ([`kept`]), then each job delivered once, none early ([`drain`]).
//!
//! Over plain HTTP (the /v1 API of docs/api.md); each job's body is `body of <id>`.

use crate::support::load::now_ms;
use reqwest::{Client, StatusCode};
use serde_json::{Value, json};
use std::collections::{HashMap, HashSet};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// What the clients were told before the kill. "Sent" includes requests whose answer was lost.
#[derive(Default)]
pub struct Record {
    pub push_sent: HashSet<String>,
    pub push_acked: HashSet<String>,
    pub finish_sent: HashSet<String>,
    pub finish_acked: HashSet<String>,
    pub delete_sent: HashSet<String>,
    pub delete_acked: HashSet<String>,
    /// Pushed due in a minute or more, to be deleted or left delayed; one whose push answer
    /// was lost to the kill may be here with no delete sent.
    pub far: HashSet<String>,
    /// Delivered before the kill, where a test's consumers keep count.
    pub delivered: HashSet<String>,
}

/// The HTTP client of the load's pushers and consumers: every request gives up after 5 s, so a
/// request the kill cut off fails instead of hanging.
pub fn client() -> Client {
    crate::support::load::client(Duration::from_secs(5))
}

/// One job for [`push`].
pub struct Push<'a> {
    pub topic: &'a str,
    pub id: String,
    pub delay_ms: u64,
    pub ttr_ms: u64,
    /// Recorded in [`Record::far`].
    pub far: bool,
    /// Deleted as soon as its push is acknowledged.
    pub delete: bool,
}

/// Pushes the job (and deletes it, if asked), recording each request before it is sent and
/// each acknowledgement. False once a request failed: the server is gone.
pub async fn push(client: &Client, base: &str, rec: &Mutex<Record>, p: Push<'_>) -> bool {
    let id = p.id;
    {
        let mut rec = rec.lock().unwrap();
        rec.push_sent.insert(id.clone());
        if p.far {
            rec.far.insert(id.clone());
        }
    }
    let reply = client
        .post(format!("{base}/v1/jobs"))
        .json(
            &json!({"topic": p.topic, "id": id, "body": format!("body of {id}"),
                      "delay_ms": p.delay_ms, "ttr_ms": p.ttr_ms}),
        )
        .send()
        .await;
    match reply {
        Ok(r) if r.status() == StatusCode::CREATED => {
            rec.lock().unwrap().push_acked.insert(id.clone());
        }
        Ok(r) => panic!("push {id}: unexpected status {}", r.status()),
        Err(_) => return false,
    }
    if p.delete {
        rec.lock().unwrap().delete_sent.insert(id.clone());
        match client.delete(format!("{base}/v1/jobs/{id}")).send().await {
            Ok(r) if r.status() == StatusCode::NO_CONTENT => {
                rec.lock().unwrap().delete_acked.insert(id);
            }
            Ok(r) => panic!("delete {id}: unexpected status {}", r.status()),
            Err(_) => return false,
        }
    }
    true
}

/// The jobs [`kept`] found after the restart.
pub struct Kept {
    /// Every pushed job the server still has.
    pub present: HashSet<String>,
    /// Of those, the ones still reserved (their reservation survived the kill).
    pub reserved: HashSet<String>,
    /// Of those, the ones whose acknowledged finish the kill undid.
    pub finish_undone: usize,
}

/// Reads every job a push was sent for, right after the restart at `restarted_at`: every
/// acknowledged push is there unless a finish or delete was sent for it (its answer may have
/// been lost to the kill), no acknowledged delete is undone, each body is intact, a job whose
/// acknowledged finish was undone is reserved or ready again, and a reservation that survived
/// still runs past the restart (nothing is handed out again before its TTR).
pub async fn kept(client: &Client, base: &str, rec: &Record, restarted_at: u64) -> Kept {
    let mut found = Kept {
        present: HashSet::new(),
        reserved: HashSet::new(),
        finish_undone: 0,
    };
    let mut pushed: Vec<&String> = rec.push_sent.iter().collect();
    pushed.sort();
    for id in pushed {
        match get(client, base, id).await {
            Some(job) => {
                assert!(
                    !rec.delete_acked.contains(id),
                    "job {id}: acknowledged delete undone by the crash"
                );
                if rec.finish_acked.contains(id) {
                    // Reserved (its reservation survived: it comes back after its TTR, not
                    // before) or ready again (the crash undid its reservation too: delivered
                    // again by the drain).
                    assert!(
                        job["state"] == "reserved" || job["state"] == "ready",
                        "job {id}: finish undone: {job}"
                    );
                    found.finish_undone += 1;
                }
                assert_eq!(job["body"], format!("body of {id}"), "job {id}");
                if job["state"] == "reserved" {
                    let until = job["reserved_until_ms"].as_u64().unwrap();
                    assert!(until > restarted_at, "job {id}: {job}");
                    found.reserved.insert(id.clone());
                }
                found.present.insert(id.clone());
            }
            None => assert!(
                !rec.push_acked.contains(id)
                    || rec.finish_sent.contains(id)
                    || rec.delete_sent.contains(id),
                "job {id}: acknowledged push lost by the crash"
            ),
        }
    }
    found
}

/// Reserves and finishes the topic's jobs until `done` (given the topic's counts of
/// `/v1/stats` and what was drained so far) says so, within 20 s: every job delivered was
/// pushed, is not far, was not reserved before the kill, comes once and not before it is due.
/// Returns when each was delivered.
pub async fn drain(
    client: &Client,
    base: &str,
    topic: &str,
    rec: &Record,
    reserved: &HashSet<String>,
    done: impl Fn(&Value, &HashMap<String, u64>) -> bool,
) -> HashMap<String, u64> {
    let mut drained = HashMap::new();
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let r: Value = client
            .post(format!("{base}/v1/reserve"))
            .json(&json!({"topics": [topic], "max": 100, "timeout_ms": 500}))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let at = now_ms();
        for job in r["jobs"].as_array().unwrap() {
            let id = job["id"].as_str().unwrap().to_string();
            let due = job["run_at_ms"].as_u64().unwrap();
            assert!(at >= due, "job {id} delivered {} ms early", due - at);
            assert!(rec.push_sent.contains(&id), "unknown job {id} delivered");
            assert!(
                !reserved.contains(&id),
                "job {id} redelivered before its TTR"
            );
            assert!(!rec.far.contains(&id), "far job {id} delivered");
            assert!(
                drained.insert(id.clone(), at).is_none(),
                "job {id} delivered twice"
            );
            let s = client
                .post(format!("{base}/v1/jobs/{id}/finish"))
                .send()
                .await
                .unwrap()
                .status();
            assert_eq!(s, StatusCode::NO_CONTENT, "finish {id}");
        }
        if done(&stats(client, base).await["topics"][topic], &drained) {
            return drained;
        }
        assert!(Instant::now() < deadline, "drain did not finish in 20 s");
    }
}

/// A topic count of `/v1/stats` (absent: 0).
pub fn count(counts: &Value, state: &str) -> u64 {
    counts[state].as_u64().unwrap_or(0)
}

/// `GET /v1/jobs/{id}`: the job, or `None` if the server has no such job.
pub async fn get(client: &Client, base: &str, id: &str) -> Option<Value> {
    let r = client
        .get(format!("{base}/v1/jobs/{id}"))
        .send()
        .await
        .unwrap();
    match r.status() {
        StatusCode::OK => Some(r.json().await.unwrap()),
        StatusCode::NOT_FOUND => None,
        s => panic!("GET {id}: unexpected status {s}"),
    }
}

/// `GET /v1/stats`.
pub async fn stats(client: &Client, base: &str) -> Value {
    client
        .get(format!("{base}/v1/stats"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}
