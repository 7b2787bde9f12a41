//! The dashboard (`/ui/`, docs/dashboard.md) in a real headless Chromium, driven over WebDriver
//! (Debian's `chromium` and `chromium-driver`): each test starts a server on loopback, pushes jobs
//! through the /v1 API as a producer would, and checks what the page shows and does. Run with
//! `cargo test -p delayq --test browser`; with `DELAYQ_SCREENSHOTS=docs/images` it also writes
//! the README's screenshots.
//!
//! `cross_site.rs`: pages of other sites (and a rebinding page) try to use the server through
//! the browser, and cannot.
//!
//! One browser at a time (`ONE_BROWSER`): the tests run one after another, each with its own
//! chromedriver and browser, so parallel test threads do not start several browsers at once.

#[macro_use]
#[path = "../support/mod.rs"]
mod support;

mod cross_site;
mod driver;

use delayq::config::{AuthToken, Config};
use delayq::store::memory::MemoryStore;
use driver::Browser;
use serde_json::{Value, json};
use std::sync::Arc;
use support::app::LiveServer;

static ONE_BROWSER: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

const MINUTE_MS: u64 = 60_000;

/// A server on loopback (memory store) and a producer's HTTP client for it.
struct Server {
    live: LiveServer,
    http: reqwest::Client,
    token: Option<String>,
}

impl Server {
    async fn start(token: Option<&str>) -> Server {
        delayq::install_tls_provider();
        let config = Config {
            auth_tokens: token.iter().map(|t| AuthToken::from(*t)).collect(),
            ..Config::default()
        };
        Server {
            live: LiveServer::start(Arc::new(MemoryStore::new()), config).await,
            http: reqwest::Client::new(),
            token: token.map(str::to_string),
        }
    }

    fn ui(&self) -> String {
        format!("{}/ui/", self.live.base_url)
    }

    async fn call(&self, method: reqwest::Method, path: &str, body: Option<Value>) -> Value {
        let mut req = self
            .http
            .request(method.clone(), format!("{}{path}", self.live.base_url));
        if let Some(t) = &self.token {
            req = req.bearer_auth(t);
        }
        if let Some(b) = body {
            req = req.json(&b);
        }
        let resp = req.send().await.unwrap();
        let status = resp.status();
        let text = resp.text().await.unwrap();
        assert!(status.is_success(), "{method} {path}: {status} {text}");
        serde_json::from_str(&text).unwrap_or(Value::Null)
    }

    async fn push(&self, job: Value) -> Value {
        self.call(reqwest::Method::POST, "/v1/jobs", Some(job))
            .await
    }

    /// A job of `topic` pushed and buried: dead.
    async fn dead_job(&self, topic: &str, id: &str) {
        self.push(
            json!({"topic": topic, "id": id, "body": "{\"order\":42}", "delay_ms": 3_600_000}),
        )
        .await;
        let id: String = url::form_urlencoded::byte_serialize(id.as_bytes()).collect();
        let path = format!("/v1/jobs/{id}/bury");
        self.call(reqwest::Method::POST, &path, None).await;
    }

    async fn reserve(&self, topic: &str, max: u32) {
        let body = json!({"topics": [topic], "max": max});
        self.call(reqwest::Method::POST, "/v1/reserve", Some(body))
            .await;
    }
}

/// The text of a count cell in the overview's row of `topic`.
fn cell(topic: &str, state: &str) -> String {
    format!("tr[data-topic=\"{topic}\"] td[data-state=\"{state}\"]")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overview_shows_the_pushed_counts_and_follows_changes() {
    let _one = ONE_BROWSER.lock().await;
    let server = Server::start(None).await;
    for i in 0..3 {
        server
            .push(json!({"topic": "orders", "id": format!("o{i}"), "delay_ms": 3_600_000 + i * MINUTE_MS}))
            .await;
    }
    for i in 0..12 {
        server
            .push(json!({"topic": "emails", "id": format!("e{i}"), "body": "hello"}))
            .await;
    }
    for i in 0..14 {
        let job = json!({"topic": "reminders", "id": format!("m{i}"), "delay_ms": (i + 1) * 7 * MINUTE_MS});
        server.push(job).await;
    }
    server.reserve("emails", 4).await;
    server.dead_job("orders", "broken-1").await;
    server.dead_job("orders", "broken-2").await;

    let b = Browser::start().await;
    b.open(&server.ui()).await;
    b.wait_text(&cell("orders", "delayed"), "3").await;
    b.wait_text(&cell("orders", "ready"), "0").await;
    b.wait_text(&cell("orders", "dead"), "2").await;
    b.wait_text(&cell("emails", "ready"), "8").await;
    b.wait_text(&cell("emails", "reserved"), "4").await;
    b.wait_text(&cell("reminders", "delayed"), "14").await;
    // Topics in name order.
    let topics = b
        .eval(
            "return [...document.querySelectorAll('#topics tr')].map(r => r.dataset.topic)",
            vec![],
        )
        .await;
    assert_eq!(topics, json!(["emails", "orders", "reminders"]));
    // Polled: a push shows without reloading, and the rates come from two scrapes.
    server
        .push(json!({"topic": "orders", "id": "o-late", "delay_ms": 600_000}))
        .await;
    server.reserve("emails", 2).await;
    b.wait_text(&cell("orders", "delayed"), "4").await;
    b.wait_text(&cell("emails", "reserved"), "6").await;
    b.wait("the rates to be computed", || async {
        let rate = b.text("#rate-pushed").await.unwrap_or_default();
        rate.ends_with("/s").then_some(())
    })
    .await;
    let next = b.text("#next-due").await.unwrap();
    assert!(next.starts_with("in "), "next due: {next}");
    b.screenshot("overview").await;
    b.close().await;
}

/// docs/flow-control.md on the dashboard: a paused badge with Pause and Resume on each topic's
/// row, the limits on the topic's page.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_topic_is_paused_and_resumed_from_the_overview_and_its_page_shows_the_limits() {
    let _one = ONE_BROWSER.lock().await;
    let server = Server::start(None).await;
    server.push(json!({"topic": "orders", "id": "o1"})).await;
    server.push(json!({"topic": "emails", "id": "e1"})).await;
    let settings = |topic: &str| format!("/v1/topics/{topic}/settings");
    server
        .call(
            reqwest::Method::PUT,
            &settings("orders"),
            Some(json!({"rate_per_s": 50, "burst": 5, "max_in_flight": 3})),
        )
        .await;

    let b = Browser::start().await;
    b.open(&server.ui()).await;
    let row = "tr[data-topic=\"orders\"]";
    b.wait_text(&format!("{row} button"), "Pause").await;
    assert!(!b.visible(&format!("{row} .badge")).await);
    b.click(&format!("{row} button")).await;
    b.confirm().await;
    b.wait_text(&format!("{row} .badge.paused"), "paused").await;
    b.wait_text(&format!("{row} button"), "Resume").await;
    let got = server
        .call(reqwest::Method::GET, &settings("orders"), None)
        .await;
    assert_eq!(got["paused"], true);
    // The other topic is untouched.
    assert!(!b.visible("tr[data-topic=\"emails\"] .badge").await);

    b.open(&format!("{}#/topics/orders/ready", server.ui()))
        .await;
    b.wait_text(
        "#flow span",
        "Flow control: paused · 50/s (burst 5) · at most 3 in flight",
    )
    .await;
    b.click("#flow button").await;
    b.confirm().await;
    b.wait_text(
        "#flow span",
        "Flow control: running · 50/s (burst 5) · at most 3 in flight",
    )
    .await;
    let got = server
        .call(reqwest::Method::GET, &settings("orders"), None)
        .await;
    assert_eq!(got["paused"], false);
    b.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_job_is_kicked_from_its_page_and_leaves_the_dead_list() {
    let _one = ONE_BROWSER.lock().await;
    let server = Server::start(None).await;
    server.dead_job("payments", "pay-7").await;
    server.dead_job("payments", "pay-8").await;
    // Data is text, never markup: an id that looks like HTML shows as typed.
    server.dead_job("payments", "<i>x</i>").await;

    let b = Browser::start().await;
    b.open(&format!("{}#/topics/payments/dead", server.ui()))
        .await;
    b.wait_text("tr[data-job-id=\"<i>x</i>\"] a", "<i>x</i>")
        .await;
    let markup = "return document.querySelectorAll('#main i').length";
    assert_eq!(b.eval(markup, vec![]).await, json!(0));
    let row = "tr[data-job-id=\"pay-7\"]";
    b.click(&format!("{row} a")).await;
    b.wait_text("#job-state", "dead").await;
    b.wait_text("#job-body", "{\"order\":42}").await;
    b.click("#kick").await;
    b.confirm().await;
    b.wait_text("#job-state", "ready").await;
    // The state link leads to the job's list; the dead list no longer has it.
    b.open(&format!("{}#/topics/payments/dead", server.ui()))
        .await;
    b.wait("pay-7 to leave the dead list", || async {
        let gone = !b.visible(row).await && b.visible("tr[data-job-id=\"pay-8\"]").await;
        gone.then_some(())
    })
    .await;
    let job = server
        .call(reqwest::Method::GET, "/v1/jobs/pay-7", None)
        .await;
    assert_eq!(job["state"], "ready");
    // "Kick all dead" empties the list.
    b.click("#kick-all").await;
    b.confirm().await;
    b.wait("the dead list to be empty", || async {
        let rows = b
            .eval(
                "return document.querySelectorAll('#jobs tr[data-job-id]').length",
                vec![],
            )
            .await;
        (rows == json!(0) && b.text("#notice").await.as_deref() == Some("Kicked 2 jobs."))
            .then_some(())
    })
    .await;
    let job = server
        .call(reqwest::Method::GET, "/v1/jobs/pay-8", None)
        .await;
    assert_eq!(job["state"], "ready");
    b.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_schedule_chart_has_bars_for_the_jobs_due_in_the_next_hour() {
    let _one = ONE_BROWSER.lock().await;
    let server = Server::start(None).await;
    // In the middle of minutes ahead, so jobs of one minute share a bar whichever second the
    // page asks at (its chart starts at its "now" floored to the minute).
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    let base = now / MINUTE_MS * MINUTE_MS + MINUTE_MS / 2;
    let minutes = [5, 5, 5, 12, 30, 30, 47];
    for (i, m) in minutes.iter().enumerate() {
        let job =
            json!({"topic": "reports", "id": format!("r{i}"), "run_at_ms": base + m * MINUTE_MS});
        server.push(job).await;
    }
    // Beyond the hour: not in the chart.
    server
        .push(json!({"topic": "reports", "id": "later", "delay_ms": 3 * 3_600_000}))
        .await;
    server
        .push(json!({"topic": "other", "id": "x1", "delay_ms": 20 * MINUTE_MS}))
        .await;

    let b = Browser::start().await;
    b.open(&format!("{}#/schedule/reports", server.ui())).await;
    let bars = "return [...document.querySelectorAll('#chart rect.bar')].map(r => Number(r.dataset.count))";
    let counts: Vec<u64> = b
        .wait("the chart's bars", || async {
            let v = b.eval(bars, vec![]).await;
            let counts: Vec<u64> = serde_json::from_value(v).ok()?;
            (counts.len() == 60 && counts.iter().sum::<u64>() == 7).then_some(counts)
        })
        .await;
    let nonzero: Vec<u64> = counts.iter().copied().filter(|c| *c > 0).collect();
    // 5, 12, 30 and 47 minutes ahead: four bars, in time order.
    assert_eq!(nonzero, vec![3, 1, 2, 1], "{counts:?}");
    b.wait_text(
        "#schedule-total",
        "7 jobs due next hour in reports, per minute.",
    )
    .await;
    // All topics together, with a busier topic (for the screenshot).
    let digest = [
        8, 8, 8, 8, 8, 9, 9, 9, 15, 15, 20, 20, 20, 20, 20, 20, 20, 21, 21, 33, 33, 33, 34, 40, 40,
        40, 40, 45, 45, 50, 50, 50, 50, 50, 50, 51, 51, 52, 55, 55, 56, 57, 57, 58, 58, 58, 58, 58,
    ];
    for (i, m) in digest.iter().enumerate() {
        let job =
            json!({"topic": "digest", "id": format!("d{i}"), "run_at_ms": base + m * MINUTE_MS});
        server.push(job).await;
    }
    b.open(&format!("{}#/schedule", server.ui())).await;
    b.wait("the all-topics chart", || async {
        let v = b.eval(bars, vec![]).await;
        let counts: Vec<u64> = serde_json::from_value(v).ok()?;
        (counts.iter().sum::<u64>() == 8 + digest.len() as u64).then_some(())
    })
    .await;
    b.screenshot("schedule").await;
    // The next day, by hour: the job 3 hours ahead is in it.
    b.click("a[data-range=\"day\"]").await;
    b.wait("the day chart", || async {
        let v = b.eval(bars, vec![]).await;
        let counts: Vec<u64> = serde_json::from_value(v).ok()?;
        (counts.len() == 24 && counts.iter().sum::<u64>() == 9 + digest.len() as u64).then_some(())
    })
    .await;
    b.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_schedule_chart_shows_the_coming_ticks_of_recurring_schedules_apart() {
    let _one = ONE_BROWSER.lock().await;
    let server = Server::start(None).await;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    let base = now / MINUTE_MS * MINUTE_MS + MINUTE_MS / 2;
    // Every 10 minutes from 3.5 minutes ahead: 6 ticks in the next hour, whichever second the
    // page asks at.
    server
        .call(
            reqwest::Method::PUT,
            "/v1/schedules/sweep",
            Some(
                json!({"every_ms": 10 * MINUTE_MS, "start_at_ms": base + 3 * MINUTE_MS,
                "job": {"topic": "reports"}}),
            ),
        )
        .await;
    for i in 0..2 {
        let job = json!({"topic": "reports", "id": format!("r{i}"),
            "run_at_ms": base + 5 * MINUTE_MS});
        server.push(job).await;
    }

    let b = Browser::start().await;
    b.open(&format!("{}#/schedule/reports", server.ui())).await;
    let read = "return [[...document.querySelectorAll('#chart rect.bar')].map(r => Number(r.dataset.count)), \
        [...document.querySelectorAll('#chart rect.tick-bar')].map(r => Number(r.dataset.ticks))]";
    let (jobs, ticks): (Vec<u64>, Vec<u64>) = b
        .wait("the chart's jobs and ticks", || async {
            let v = b.eval(read, vec![]).await;
            let (jobs, ticks): (Vec<u64>, Vec<u64>) = serde_json::from_value(v).ok()?;
            (jobs.iter().sum::<u64>() == 2 && ticks.len() == 6).then_some((jobs, ticks))
        })
        .await;
    assert_eq!(jobs.len(), 60, "a bar of jobs per minute");
    assert_eq!(
        ticks,
        vec![1; 6],
        "a tick on each of six minutes, apart from the jobs"
    );
    b.wait_text(
        "#schedule-total",
        "2 jobs due next hour in reports, per minute, and 6 recurring schedule ticks.",
    )
    .await;
    b.screenshot("schedule-ticks").await;
    b.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_auth_on_the_page_asks_for_the_token_and_shows_nothing_until_given() {
    const TOKEN: &str = "dashboard-token-0123456789";
    let _one = ONE_BROWSER.lock().await;
    let server = Server::start(Some(TOKEN)).await;
    server
        .push(json!({"topic": "secret-topic", "id": "s1", "delay_ms": 600_000}))
        .await;

    let b = Browser::start().await;
    b.open(&server.ui()).await;
    b.wait("the sign-in form", || async {
        b.visible("#token").await.then_some(())
    })
    .await;
    let nothing = "return document.getElementById('main').childElementCount === 0 \
                   && document.getElementById('nav').hidden \
                   && !document.body.innerText.includes('secret-topic')";
    assert_eq!(b.eval(nothing, vec![]).await, json!(true));
    // A wrong token is refused and still shows nothing.
    b.type_into("#token", "not-the-token").await;
    b.click("#login-submit").await;
    b.wait("the refusal", || async {
        b.visible("#login-error").await.then_some(())
    })
    .await;
    assert_eq!(b.eval(nothing, vec![]).await, json!(true));
    // The right one: the overview, with the data.
    b.type_into("#token", TOKEN).await;
    b.click("#login-submit").await;
    b.wait_text(&cell("secret-topic", "delayed"), "1").await;
    // Kept for the tab: a reload needs no new sign-in.
    b.client.refresh().await.unwrap();
    b.wait_text(&cell("secret-topic", "delayed"), "1").await;
    // Signing out forgets it.
    b.click("#sign-out").await;
    b.wait("the sign-in form again", || async {
        b.visible("#token").await.then_some(())
    })
    .await;
    assert_eq!(b.eval(nothing, vec![]).await, json!(true));
    b.client.refresh().await.unwrap();
    b.wait("the sign-in form after a reload", || async {
        b.visible("#token").await.then_some(())
    })
    .await;
    assert_eq!(b.eval(nothing, vec![]).await, json!(true));
    b.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_is_pushed_from_the_form_then_rescheduled_buried_and_deleted() {
    let _one = ONE_BROWSER.lock().await;
    let server = Server::start(None).await;
    let b = Browser::start().await;
    b.open(&format!("{}#/push", server.ui())).await;
    b.type_into("#push-topic", "trial").await;
    b.type_into("#push-id", "try-1").await;
    b.type_into("#push-body", "hello <b>there</b>").await;
    b.type_into("#push-delay", "600").await;
    b.click("#push-submit").await;
    b.confirm().await;
    b.wait_text("#job-state", "delayed").await;
    b.wait_text("#job-body", "hello <b>there</b>").await;
    // This server has no journal (404 journal_disabled from the history route).
    b.wait("the history note", || async {
        let note = b.text("#history-note").await?;
        note.starts_with("No journal").then_some(())
    })
    .await;
    let job = server
        .call(reqwest::Method::GET, "/v1/jobs/try-1", None)
        .await;
    assert_eq!(job["topic"], "trial");
    // Reschedule to a minute two hours ahead, picked in the datetime-local input.
    let at = b
        .eval(
            "const d = new Date(Date.now() + 2 * 3600e3); d.setSeconds(0, 0); \
             const p = (n) => String(n).padStart(2, '0'); \
             document.getElementById('reschedule-at').value = \
               `${d.getFullYear()}-${p(d.getMonth() + 1)}-${p(d.getDate())}T${p(d.getHours())}:${p(d.getMinutes())}`; \
             return d.getTime()",
            vec![],
        )
        .await;
    b.click("#reschedule").await;
    b.confirm().await;
    b.wait("the new due time", || async {
        let job = server
            .call(reqwest::Method::GET, "/v1/jobs/try-1", None)
            .await;
        (job["run_at_ms"] == at).then_some(())
    })
    .await;
    b.click("#bury").await;
    b.confirm().await;
    b.wait_text("#job-state", "dead").await;
    // Cancelling the confirmation does nothing.
    b.click("#delete").await;
    b.wait("the confirmation dialog", || async {
        b.visible("#confirm-cancel").await.then_some(())
    })
    .await;
    b.click("#confirm-cancel").await;
    let job = server
        .call(reqwest::Method::GET, "/v1/jobs/try-1", None)
        .await;
    assert_eq!(job["state"], "dead");
    b.click("#delete").await;
    b.confirm().await;
    b.wait("the job to be deleted", || async {
        let resp = server
            .http
            .get(format!("{}/v1/jobs/try-1", server.live.base_url))
            .send()
            .await
            .unwrap();
        (resp.status() == reqwest::StatusCode::NOT_FOUND).then_some(())
    })
    .await;
    b.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_list_pages_forward_and_back_and_finds_a_job_by_id() {
    let _one = ONE_BROWSER.lock().await;
    let server = Server::start(None).await;
    // 120 delayed jobs, due one second apart: the list's order is by due time.
    let jobs: Vec<Value> = (0..120u64)
        .map(|i| json!({"topic": "bulk", "id": format!("b{i:03}"), "delay_ms": 600_000 + i * 1000}))
        .collect();
    server
        .call(
            reqwest::Method::POST,
            "/v1/jobs/batch",
            Some(json!({"jobs": jobs})),
        )
        .await;
    let ids = "return [...document.querySelectorAll('#jobs tr')].map(r => r.dataset.jobId)";
    let page = |first: u64, n: u64| {
        json!(
            (first..first + n)
                .map(|i| format!("b{i:03}"))
                .collect::<Vec<_>>()
        )
    };
    let b = Browser::start().await;
    b.open(&format!("{}#/topics/bulk/delayed", server.ui()))
        .await;
    for (first, n) in [(0, 50), (50, 50), (100, 20)] {
        if first > 0 {
            b.click("#next").await;
        }
        let want = page(first, n);
        b.wait(&format!("the page from b{first:03}"), || async {
            (b.eval(ids, vec![]).await == want).then_some(())
        })
        .await;
    }
    assert_eq!(
        b.eval("return document.getElementById('next').disabled", vec![])
            .await,
        json!(true)
    );
    b.click("#prev").await;
    let want = page(50, 50);
    b.wait("the previous page", || async {
        (b.eval(ids, vec![]).await == want).then_some(())
    })
    .await;
    // The search box opens a job's page.
    b.type_into("#search-id", "b117").await;
    b.click("#search button").await;
    b.wait_text("#job-fields [data-field=\"id\"]", "b117").await;
    b.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_schedules_page_shows_each_schedule_and_pauses_and_resumes_it() {
    let _one = ONE_BROWSER.lock().await;
    let server = Server::start(None).await;
    server
        .call(
            reqwest::Method::PUT,
            "/v1/schedules/daily-report",
            Some(json!({"cron": "0 9 * * *", "tz": "Europe/Berlin", "job": {"topic": "reports"}})),
        )
        .await;
    server
        .call(
            reqwest::Method::PUT,
            "/v1/schedules/sweep",
            Some(json!({"every_ms": 900_000, "job": {"topic": "sweeps"}})),
        )
        .await;

    let b = Browser::start().await;
    b.open(&format!("{}#/schedules", server.ui())).await;
    let row = "tr[data-schedule-id=\"daily-report\"]";
    b.wait_text(&format!("{row} td.state"), "active").await;
    b.wait_text(&format!("{row} td.mono"), "0 9 * * * (Europe/Berlin)")
        .await;
    b.wait_text("tr[data-schedule-id=\"sweep\"] td.mono", "every 15 min")
        .await;
    let next = b.text(&format!("{row} td.next")).await.unwrap_or_default();
    assert!(next.contains(" (in "), "the next run, to come: {next:?}");
    assert_eq!(
        b.text(&format!("{row} td.last")).await.as_deref(),
        Some("–")
    );

    b.click(&format!("{row} button.toggle")).await;
    b.wait_text(&format!("{row} td.state"), "paused").await;
    b.wait_text(&format!("{row} td.next"), "paused").await;
    let sc = server
        .call(reqwest::Method::GET, "/v1/schedules/daily-report", None)
        .await;
    assert_eq!(sc["paused"], true);
    b.click(&format!("{row} button.toggle")).await;
    b.wait_text(&format!("{row} td.state"), "active").await;
    let sc = server
        .call(reqwest::Method::GET, "/v1/schedules/daily-report", None)
        .await;
    assert_eq!(sc["paused"], false);
    b.close().await;
}
