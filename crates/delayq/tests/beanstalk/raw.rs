//! What no client library sends, over a plain socket: each gets the reply protocol.txt gives,
//! the connection is closed only where it must be, the server stays up, and nothing
//! acknowledged is lost. Plus the ids between beanstalkd and HTTP.

use super::*;
use serde_json::{Value, json};
use std::time::Instant;

/// The server still serves: a new connection puts and takes a job, and HTTP answers.
async fn still_serves(server: &Server) {
    let mut b = server.connect().await;
    assert_eq!(b.cmd("use still").await, "USING still");
    assert_eq!(b.cmd("watch still").await, "WATCHING 2");
    assert_eq!(b.cmd("ignore default").await, "WATCHING 1");
    let id = b.put(0, 0, 10, b"alive").await;
    let (got, body) = b.job("reserve-with-timeout 5", "RESERVED").await;
    assert_eq!((got, body.as_slice()), (id, b"alive".as_slice()));
    assert_eq!(b.cmd(&format!("delete {id}")).await, "DELETED");
    let health = reqwest::get(format!("{}/healthz", server.delayq.base_url))
        .await
        .expect("HTTP answers");
    assert!(health.status().is_success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_lines_get_the_protocol_errors_and_the_connection_goes_on() {
    let server = Server::start(Backend::Embedded).await;
    let mut b = server.connect().await;
    assert_eq!(b.cmd("frobnicate 1 2").await, "UNKNOWN_COMMAND");
    assert_eq!(b.cmd("").await, "UNKNOWN_COMMAND");
    assert_eq!(b.cmd("put 0 0 10").await, "BAD_FORMAT");
    assert_eq!(b.cmd("put x 0 10 1").await, "BAD_FORMAT");
    assert_eq!(b.cmd("delete -4").await, "BAD_FORMAT");
    assert_eq!(b.cmd("use -starts-with-hyphen").await, "BAD_FORMAT");
    assert_eq!(
        b.cmd(&format!("use {}", "t".repeat(129))).await,
        "BAD_FORMAT"
    );
    assert_eq!(b.cmd("reserve-with-timeout soon").await, "BAD_FORMAT");
    // A line ended by LF alone.
    b.send(b"stats\n").await;
    assert_eq!(b.line().await, "BAD_FORMAT");
    // Errors of the commands themselves.
    assert_eq!(b.cmd("delete 999999").await, "NOT_FOUND");
    assert_eq!(b.cmd("release 999999 0 0").await, "NOT_FOUND");
    assert_eq!(b.cmd("touch 999999").await, "NOT_FOUND");
    assert_eq!(b.cmd("bury 999999 0").await, "NOT_FOUND");
    assert_eq!(b.cmd("kick-job 999999").await, "NOT_FOUND");
    assert_eq!(b.cmd("stats-job 999999").await, "NOT_FOUND");
    assert_eq!(b.cmd("stats-tube nosuchtube").await, "NOT_FOUND");
    assert_eq!(b.cmd("pause-tube nosuchtube 1").await, "NOT_FOUND");
    assert_eq!(b.cmd("ignore default").await, "NOT_IGNORED");
    assert_eq!(b.cmd("reserve-with-timeout 0").await, "TIMED_OUT");
    // reserve-job never hands out a delayed job early; kicked, it does.
    let later = b.put(0, 3600, 60, b"later").await;
    assert_eq!(b.cmd(&format!("reserve-job {later}")).await, "NOT_FOUND");
    assert_eq!(b.cmd(&format!("kick-job {later}")).await, "KICKED");
    let (got, _) = b.job(&format!("reserve-job {later}"), "RESERVED").await;
    assert_eq!(got, later);
    assert_eq!(b.cmd(&format!("delete {later}")).await, "DELETED");
    // Still the same connection.
    assert_eq!(b.cmd("list-tube-used").await, "USING default");
    b.send(b"quit\r\n").await;
    assert_eq!(b.line().await, "", "quit closes the connection");
    still_serves(&server).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bodies_longer_or_shorter_than_announced_store_nothing() {
    let server = Server::start(Backend::Embedded).await;
    let mut b = server.connect().await;
    assert_eq!(b.cmd("use sizes").await, "USING sizes");
    // Longer: the announced bytes are followed by something else than CRLF.
    b.send(b"put 0 0 10 3\r\nabcdef\r\n").await;
    assert_eq!(b.line().await, "EXPECTED_CRLF");
    // What followed the body is read as a command line, as beanstalkd does.
    assert_eq!(b.line().await, "UNKNOWN_COMMAND");
    // Too big: the body is read and dropped, the connection goes on.
    let big = vec![b'x'; MAX_JOB_SIZE + 1];
    let mut msg = format!("put 0 0 10 {}\r\n", big.len()).into_bytes();
    msg.extend_from_slice(&big);
    msg.extend_from_slice(b"\r\n");
    b.send(&msg).await;
    assert_eq!(b.line().await, "JOB_TOO_BIG");
    let stats = b.yaml("stats-tube sizes").await;
    assert_eq!(stats["current-jobs-ready"], "0", "{stats:?}");
    // Shorter, then the client leaves: nothing is stored.
    b.send(b"put 0 0 10 50\r\nonly a few bytes\r\n").await;
    drop(b);
    tokio::time::sleep(Duration::from_millis(200)).await;
    let mut c = server.connect().await;
    // No job, and nobody names the tube any more: it does not exist, as in beanstalkd.
    assert_eq!(c.cmd("stats-tube sizes").await, "NOT_FOUND");
    assert_eq!(c.cmd("use sizes").await, "USING sizes");
    assert_eq!(c.cmd("peek-ready").await, "NOT_FOUND");
    still_serves(&server).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_10_mb_line_is_bad_format_and_closes_that_connection_only() {
    let server = Server::start(Backend::Embedded).await;
    let mut other = server.connect().await;
    let id = other.put(0, 0, 60, b"kept").await;
    let mut b = server.connect().await;
    let line = vec![b'a'; 10 << 20];
    // The server stops reading long before the end: write from a task, whatever becomes of it.
    let (r, mut w) = (b.r, b.w);
    let writer = tokio::spawn(async move {
        let _ = w.write_all(&line).await;
        w
    });
    b = Bean {
        r,
        w: writer.await.unwrap(),
    };
    assert_eq!(b.line().await, "BAD_FORMAT");
    assert_eq!(b.line().await, "", "the connection is closed");
    // Another connection and what it put are untouched.
    let (got, body) = other.job(&format!("peek {id}"), "FOUND").await;
    assert_eq!((got, body.as_slice()), (id, b"kept".as_slice()));
    still_serves(&server).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_sending_a_byte_a_second_holds_up_nobody() {
    let server = Server::start(Backend::Embedded).await;
    let mut slow = server.connect().await;
    let started = Instant::now();
    let crawl = tokio::spawn(async move {
        for byte in b"use slowly\r\n" {
            slow.send(&[*byte]).await;
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
        let reply = slow.line().await;
        (slow, reply)
    });
    // Meanwhile others are served at once.
    for _ in 0..3 {
        let t = Instant::now();
        still_serves(&server).await;
        assert!(t.elapsed() < Duration::from_secs(2), "{:?}", t.elapsed());
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    let (mut slow, reply) = crawl.await.unwrap();
    assert_eq!(reply, "USING slowly");
    assert!(started.elapsed() >= Duration::from_secs(11));
    assert_eq!(slow.cmd("list-tube-used").await, "USING slowly");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reserved_job_is_handed_back_when_its_connection_closes() {
    let server = Server::start(Backend::Embedded).await;
    let mut a = server.connect().await;
    let id = a.put(0, 0, 300, b"held").await;
    let (got, _) = a.job("reserve", "RESERVED").await;
    assert_eq!(got, id);
    drop(a);
    let mut b = server.connect().await;
    let (again, body) = b.job("reserve-with-timeout 5", "RESERVED").await;
    assert_eq!((again, body.as_slice()), (id, b"held".as_slice()));
    let stats = b.yaml(&format!("stats-job {id}")).await;
    assert_eq!(stats["reserves"], "2", "{stats:?}");
}

async fn http(method: reqwest::Method, url: String, body: Option<Value>) -> (u16, Value) {
    let mut req = reqwest::Client::new().request(method, url);
    if let Some(b) = body {
        req = req.json(&b);
    }
    let r = req.send().await.expect("HTTP request");
    let status = r.status().as_u16();
    let text = r.text().await.unwrap_or_default();
    (status, serde_json::from_str(&text).unwrap_or(Value::Null))
}

async fn ids_between_beanstalkd_and_http(backend: Backend) {
    let server = Server::start(backend).await;
    let base = server.delayq.base_url.clone();
    let mut b = server.connect().await;
    assert_eq!(b.cmd("use mixed").await, "USING mixed");
    assert_eq!(b.cmd("watch mixed").await, "WATCHING 2");
    // Put over beanstalkd, seen over HTTP under its number.
    let id = b.put(7, 0, 30, b"from beanstalkd").await;
    assert!(id < 1 << 53, "{id} is exact in JavaScript");
    let (status, job) = http(reqwest::Method::GET, format!("{base}/v1/jobs/{id}"), None).await;
    assert_eq!(status, 200, "{job}");
    assert_eq!(job["topic"], "mixed");
    assert_eq!(job["body"], "from beanstalkd");
    assert_eq!(job["priority"], 7);
    assert_eq!(job["ttr_ms"], 30_000);
    let (status, _) = http(
        reqwest::Method::DELETE,
        format!("{base}/v1/jobs/{id}"),
        None,
    )
    .await;
    assert_eq!(status, 204);
    assert_eq!(b.cmd(&format!("peek {id}")).await, "NOT_FOUND");
    // Pushed over HTTP with a name for an id: reserved, touched, released, buried, kicked,
    // peeked and deleted over beanstalkd under the number it is shown with.
    let push = json!({"topic": "mixed", "id": "order-7", "body": "from HTTP"});
    let (status, _) = http(reqwest::Method::POST, format!("{base}/v1/jobs"), Some(push)).await;
    assert_eq!(status, 201);
    let (n, body) = b.job("reserve-with-timeout 5", "RESERVED").await;
    assert_eq!(body, b"from HTTP");
    assert_eq!(b.cmd(&format!("touch {n}")).await, "TOUCHED");
    assert_eq!(b.cmd(&format!("release {n} 3 0")).await, "RELEASED");
    let (status, job) = http(
        reqwest::Method::GET,
        format!("{base}/v1/jobs/order-7"),
        None,
    )
    .await;
    assert_eq!(
        (status, job["state"].as_str(), job["priority"].as_u64()),
        (200, Some("ready"), Some(3))
    );
    let (again, _) = b.job("reserve-with-timeout 5", "RESERVED").await;
    assert_eq!(again, n);
    assert_eq!(b.cmd(&format!("bury {n} 0")).await, "BURIED");
    let (peeked, _) = b.job("peek-buried", "FOUND").await;
    assert_eq!(peeked, n);
    assert_eq!(b.cmd(&format!("kick-job {n}")).await, "KICKED");
    let stats = b.yaml(&format!("stats-job {n}")).await;
    assert_eq!(stats["state"], "ready", "{stats:?}");
    assert_eq!(b.cmd(&format!("delete {n}")).await, "DELETED");
    let (status, _) = http(
        reqwest::Method::GET,
        format!("{base}/v1/jobs/order-7"),
        None,
    )
    .await;
    assert_eq!(status, 404);
    // A job reserved over HTTP is another consumer's: not deleted over beanstalkd.
    let push = json!({"topic": "mixed", "id": "42", "body": "numeric"});
    http(reqwest::Method::POST, format!("{base}/v1/jobs"), Some(push)).await;
    let reserve = json!({"topics": ["mixed"], "max": 1});
    let (status, got) = http(
        reqwest::Method::POST,
        format!("{base}/v1/reserve"),
        Some(reserve),
    )
    .await;
    assert_eq!(
        (status, got["jobs"][0]["id"].as_str()),
        (200, Some("42")),
        "{got}"
    );
    assert_eq!(b.cmd("delete 42").await, "NOT_FOUND");
    assert_eq!(b.cmd("release 42 0 0").await, "NOT_FOUND");
    let (status, _) = http(
        reqwest::Method::POST,
        format!("{base}/v1/jobs/42/finish"),
        None,
    )
    .await;
    assert_eq!(status, 204);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ids_between_beanstalkd_and_http_on_the_embedded_store() {
    ids_between_beanstalkd_and_http(Backend::Embedded).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ids_between_beanstalkd_and_http_on_redis() {
    ids_between_beanstalkd_and_http(Backend::Redis).await;
}

/// A put whose number a job pushed over HTTP holds draws the next one (docs/beanstalkd.md,
/// "Ids"): INSERTED with a free number, the HTTP job untouched. The first number a put can
/// draw in the 3 s after a first put (the first of every millisecond, and the one after the
/// first put's) is held over HTTP first, so the second put meets one whatever millisecond it
/// comes in.
async fn a_put_skips_numbers_held_over_http(backend: Backend) {
    // src/beanstalk/ids.rs: milliseconds since EPOCH_MS, then SEQ_BITS of sequence, then
    // TAG_BITS of the instance's tag.
    const EPOCH_MS: u64 = 1_704_067_200_000;
    const SHIFT: u32 = 8 + 4;
    const STEP: u64 = 1 << 4;
    const WINDOW_MS: u64 = 3_000;
    let server = Server::start(backend).await;
    let base = server.delayq.base_url.clone();
    let mut b = server.connect().await;
    let first = b.put(0, 0, 30, b"first put").await;
    let (tag, ms) = (first & (STEP - 1), (first >> SHIFT) + EPOCH_MS);
    let floor = |ms: u64| ((ms - EPOCH_MS) << SHIFT) | tag;
    let mut held = vec![first + STEP];
    held.extend((ms + 1..=ms + WINDOW_MS).map(floor));
    for chunk in held.chunks(1000) {
        let jobs: Vec<Value> = chunk
            .iter()
            .map(|n| json!({"topic": "held", "id": n.to_string(), "body": "from HTTP", "delay_ms": 3_600_000}))
            .collect();
        let (status, got) = http(
            reqwest::Method::POST,
            format!("{base}/v1/jobs/batch"),
            Some(json!({"jobs": jobs})),
        )
        .await;
        assert_eq!(status, 200, "{got}");
        let results = got["results"].as_array().expect("results");
        assert!(
            results.iter().all(|r| r["status"] == "created"),
            "{:?}",
            results.iter().find(|r| r["status"] != "created")
        );
    }
    let second = b.put(0, 0, 30, b"second put").await;
    let at = (second >> SHIFT) + EPOCH_MS;
    assert!(
        at <= ms + WINDOW_MS,
        "the second put came {} ms after the first: past the held numbers",
        at - ms
    );
    // Its first draw was held: the same millisecond's next number, or a later one's first.
    let drawn_first = if at == ms { first + STEP } else { floor(at) };
    assert!(held.contains(&drawn_first));
    assert!(!held.contains(&second), "{second} is held over HTTP");
    let (peeked, body) = b.job(&format!("peek {second}"), "FOUND").await;
    assert_eq!(
        (peeked, body.as_slice()),
        (second, b"second put".as_slice())
    );
    let (status, job) = http(
        reqwest::Method::GET,
        format!("{base}/v1/jobs/{drawn_first}"),
        None,
    )
    .await;
    assert_eq!(
        (status, job["topic"].as_str(), job["body"].as_str()),
        (200, Some("held"), Some("from HTTP")),
        "{job}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_put_skips_numbers_held_over_http_on_the_embedded_store() {
    a_put_skips_numbers_held_over_http(Backend::Embedded).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_put_skips_numbers_held_over_http_on_redis() {
    a_put_skips_numbers_held_over_http(Backend::Redis).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn past_max_connections_a_new_connection_waits_for_one_to_close() {
    let server = Server::start_with(Backend::Embedded, None, &["--max-connections", "2"]).await;
    let mut a = server.connect().await;
    let mut b = server.connect().await;
    assert_eq!(a.cmd("list-tube-used").await, "USING default");
    assert_eq!(b.cmd("list-tube-used").await, "USING default");
    let mut c = server.connect().await;
    c.send(b"list-tube-used\r\n").await;
    let early = tokio::time::timeout(Duration::from_millis(500), c.line()).await;
    assert!(early.is_err(), "served past the limit: {early:?}");
    drop(a);
    assert_eq!(c.line().await, "USING default");
    assert_eq!(b.cmd("list-tube-used").await, "USING default");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stop_closes_idle_and_waiting_connections_and_the_server_exits() {
    let mut server = Server::start(Backend::Embedded).await;
    let mut idle = server.connect().await;
    assert_eq!(idle.cmd("use stopping").await, "USING stopping");
    let mut waiting = server.connect().await;
    assert_eq!(waiting.cmd("watch stopping").await, "WATCHING 2");
    waiting.send(b"reserve\r\n").await;
    // Both connections have been served at least once and now wait: one for a command, one
    // for a job.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let started = Instant::now();
    let status = tokio::task::block_in_place(|| server.delayq.terminate(Duration::from_secs(20)));
    let took = started.elapsed();
    assert!(
        status.is_some_and(|s| s.success()),
        "SIGTERM: {status:?} after {took:?}"
    );
    // A connection that did not see the stop would hold it for the 5 s drain timeout.
    assert!(
        took < Duration::from_secs(4),
        "the server took {took:?} to stop with two connections open"
    );
    assert_eq!(idle.line().await, "", "the idle connection is closed");
    assert_eq!(waiting.line().await, "", "the waiting reserve is closed");
}
