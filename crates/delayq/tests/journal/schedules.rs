//! Recurring schedules and topics' flow control settings through the journal: made through a
//! journaled store and fired there, then the store loses everything (FLUSHALL of its private
//! Redis, or a new data dir), the journal restores it, and each schedule and setting is back
//! exactly as it was; the next tick fires once, and no tick fired before the loss fires again.

use crate::db::TestDb;
use crate::restore::open_journal;
use crate::support::redis_server::{RedisServer, flushall};
use delayq::clock::{Clock, SystemClock};
use delayq::job::{Callback, JobId, JobSpec, JobState, Topic, UnixMillis};
use delayq::journal::{Journal, JournalMode, Journaled, Overdue, RestoreCounts, RestoreOptions};
use delayq::schedule::{CatchUp, Overlap, Rule, Schedule, ScheduleId, ScheduleSpec};
use delayq::store::embedded::{EmbeddedOptions, EmbeddedStore};
use delayq::store::redis::{RedisOptions, RedisStore, RedisTarget};
use delayq::store::{FireOutcome, SettingsChange, Store, StoreError, TopicSettings};
use std::sync::Arc;
use std::time::Duration;

journal_tests!(
    schedules_and_settings_come_back_on_redis_and_no_tick_fires_twice,
    schedules_and_settings_come_back_on_embedded_and_no_tick_fires_twice,
);

const SEC: u64 = 1_000;

fn sid(s: &str) -> ScheduleId {
    ScheduleId::parse(s).unwrap()
}

fn topic(s: &str) -> Topic {
    Topic::parse(s).unwrap()
}

/// A schedule of `rule` at `t0`, its template's fields all set.
fn schedule(name: &str, rule: Rule, t0: UnixMillis) -> Schedule {
    let mut job = JobSpec::new(topic("ticks"), sid(name).job_id(0), "{\"n\": \"ü\"}", 0);
    job.ttr_ms = 45_000;
    job.priority = 3;
    job.max_attempts = 4;
    job.backoff_ms = vec![1_000, 5_000];
    let spec = ScheduleSpec {
        id: sid(name),
        rule: rule.clone(),
        job,
        start_at: None,
        end_at: None,
        catch_up: CatchUp::Latest,
        overlap: Overlap::Allow,
        paused: false,
    };
    Schedule::new(spec, &rule.recurrence().unwrap(), t0)
}

/// The schedules of the test: one every second from `t0`; a daily report at 09:00 Berlin
/// time with a callback, `catch_up: all`, `overlap: skip` and an end; a paused one; and one
/// deleted after it was made.
fn schedules(t0: UnixMillis) -> Vec<Schedule> {
    let every = |ms| Rule::Every {
        every_ms: ms,
        anchor: t0,
    };
    let second = schedule("every-second", every(SEC), t0);
    let mut report = schedule(
        "report",
        Rule::Cron {
            expr: "0 9 * * MON-FRI".into(),
            tz: "Europe/Berlin".into(),
        },
        t0,
    );
    report.spec.catch_up = CatchUp::All;
    report.spec.overlap = Overlap::Skip;
    report.spec.end_at = Some(t0 + 400 * 86_400_000);
    report.spec.job.callback = Some(Callback {
        url: "http://127.0.0.1:9/report".into(),
        timeout_ms: 2_000,
    });
    let mut paused = schedule("paused", every(5 * SEC), t0);
    paused.spec.paused = true;
    let gone = schedule("gone", every(2 * SEC), t0);
    vec![second, report, paused, gone]
}

/// The settings of the test's topics: a rate with a burst and a limit; a pause; and a topic
/// whose limit was set, then removed (back to the defaults: nothing to restore).
fn settings() -> Vec<(Topic, SettingsChange)> {
    vec![
        (
            topic("limited"),
            SettingsChange {
                rate_micros: Some(Some(2_500_000)),
                burst: Some(Some(4)),
                max_in_flight: Some(Some(7)),
                ..SettingsChange::default()
            },
        ),
        (
            topic("held"),
            SettingsChange {
                paused: Some(true),
                ..SettingsChange::default()
            },
        ),
        (
            topic("back"),
            SettingsChange {
                max_in_flight: Some(Some(1)),
                ..SettingsChange::default()
            },
        ),
        (
            topic("back"),
            SettingsChange {
                max_in_flight: Some(None),
                ..SettingsChange::default()
            },
        ),
    ]
}

/// What the firing task does at `now`: plans and fires every due schedule. Returns the ids
/// of the jobs pushed.
async fn fire_due(store: &dyn Store, now: UnixMillis) -> Vec<String> {
    let mut pushed = Vec::new();
    for sc in store.due_schedules(now, 100).await.unwrap().due {
        let previous = match (sc.spec.overlap, sc.last_tick) {
            (Overlap::Skip, Some(t)) => store.get(&sc.spec.id.job_id(t)).await.is_ok(),
            _ => false,
        };
        let plan = sc.plan(&sc.spec.rule.recurrence().unwrap(), now, previous);
        let fire = plan.fire.expect("a due schedule has a plan");
        let out = store.fire_schedule(&fire, now).await.unwrap();
        assert!(matches!(out, FireOutcome::Fired { .. }), "{out:?}");
        pushed.extend(fire.jobs.iter().map(|j| j.id.to_string()));
    }
    pushed
}

/// Every schedule of a store, in id order, without the store's own version.
async fn all_schedules(store: &dyn Store) -> Vec<Schedule> {
    let mut all = store.list_schedules(None, 100).await.unwrap();
    for sc in &mut all {
        sc.version = 0;
    }
    all
}

/// The settings of the test's topics in a store.
async fn all_settings(store: &dyn Store) -> Vec<TopicSettings> {
    let mut out = Vec::new();
    for (t, _) in settings() {
        out.push(store.settings(&t).await.unwrap());
    }
    out
}

/// The whole test on `subject`; `lose` empties the store (and may hand back a new one).
async fn lose_and_restore<F, Fut>(journal: &Journal, subject: Arc<dyn Store>, lose: F)
where
    F: FnOnce(Arc<dyn Store>) -> Fut,
    Fut: std::future::Future<Output = Arc<dyn Store>>,
{
    // Whole seconds, so the every-second schedule ticks at t0 + k s.
    let t0 = SystemClock.now() / SEC * SEC;
    let journaled = Journaled::new(subject.clone(), journal.clone());
    for sc in schedules(t0) {
        journaled.put_schedule(&sc, None).await.unwrap();
    }
    journaled.delete_schedule(&sid("gone")).await.unwrap();
    for (t, change) in settings() {
        journaled.set_settings(&t, change, t0).await.unwrap();
    }
    // Two ticks fire; the first tick's job is delivered and finished (its id is free again).
    let tick = |k: u64| sid("every-second").job_id(t0 + k * SEC).to_string();
    assert_eq!(fire_due(&journaled, t0 + SEC).await, [tick(1)]);
    let got = journaled.reserve(&[topic("ticks")], 10, t0 + SEC).await;
    assert_eq!(got.unwrap().len(), 1);
    journaled
        .finish(&JobId::parse(tick(1)).unwrap())
        .await
        .unwrap();
    assert_eq!(fire_due(&journaled, t0 + 2 * SEC).await, [tick(2)]);
    let schedules_before = all_schedules(&journaled).await;
    assert_eq!(schedules_before.len(), 3);
    assert_eq!(schedules_before[0].last_tick, Some(t0 + 2 * SEC));
    let settings_before = all_settings(&journaled).await;
    drop(journaled);

    let subject = lose(subject).await;
    assert!(subject.list_schedules(None, 10).await.unwrap().is_empty());
    let journaled = Journaled::new(subject.clone(), journal.clone());
    let fire = RestoreOptions {
        overdue: Overdue::Fire,
        id: None,
    };
    let at = t0 + 2 * SEC + 500;
    let mut counts = journal.restore(&journaled, fire.clone(), at).await.unwrap();
    // The finished first tick's job: its row, unless its push and finish were written in one
    // batch (async mode), which leaves no row.
    let finished = counts.skipped_finished;
    assert!(finished <= 1, "{counts:?}");
    counts.skipped_finished = 0;
    let want = RestoreCounts {
        restored: 1,
        schedules_restored: 3,
        settings_restored: 2,
        ..RestoreCounts::default()
    };
    assert_eq!(counts, want, "the second tick's job, 3 schedules, 2 topics");
    assert_eq!(all_schedules(&journaled).await, schedules_before, "exactly");
    assert_eq!(all_settings(&journaled).await, settings_before, "exactly");
    assert_eq!(
        journaled.get_schedule(&sid("gone")).await,
        Err(StoreError::NotFound),
        "a deleted schedule stays deleted"
    );

    // No tick fires twice: nothing is due before the third tick, which fires once.
    assert!(fire_due(&journaled, at).await.is_empty());
    assert_eq!(fire_due(&journaled, t0 + 3 * SEC).await, [tick(3)]);
    assert!(fire_due(&journaled, t0 + 3 * SEC + 900).await.is_empty());
    let gone = journaled.get(&JobId::parse(tick(1)).unwrap()).await;
    assert_eq!(gone.map(|j| j.state), Err(StoreError::NotFound));
    let mut ids = Vec::new();
    for state in [JobState::Delayed, JobState::Ready] {
        let page = journaled
            .list(&topic("ticks"), state, None, 100)
            .await
            .unwrap();
        ids.extend(page.jobs.iter().map(|j| j.spec.id.to_string()));
    }
    ids.sort();
    assert_eq!(ids, [tick(2), tick(3)], "each tick's job once");

    // Twice: what the store has is left as it is, and counted.
    journaled
        .set_settings(
            &topic("held"),
            SettingsChange {
                paused: Some(false),
                max_in_flight: Some(Some(2)),
                ..SettingsChange::default()
            },
            at,
        )
        .await
        .unwrap();
    let again = journal.restore(&journaled, fire, at).await.unwrap();
    let want = RestoreCounts {
        already_present: 2,
        skipped_finished: finished,
        schedules_already_present: 3,
        settings_already_present: 2,
        ..RestoreCounts::default()
    };
    assert_eq!(again, want);
    let held = journaled.settings(&topic("held")).await.unwrap();
    assert_eq!((held.paused, held.max_in_flight), (false, Some(2)));
    let second = journaled.get_schedule(&sid("every-second")).await.unwrap();
    assert_eq!(
        second.last_tick,
        Some(t0 + 3 * SEC),
        "the store's, not the journal's old one"
    );
}

async fn schedules_and_settings_come_back_on_redis_and_no_tick_fires_twice(db: &TestDb) {
    let journal = open_journal(db, JournalMode::Sync).await;
    let server = RedisServer::start();
    let store = RedisStore::connect(RedisOptions {
        target: RedisTarget::Server(server.url()),
        prefix: "delayq".into(),
        shards: 4,
    })
    .await
    .unwrap();
    let url = server.url();
    lose_and_restore(&journal, Arc::new(store), |store| async move {
        flushall(&url).await;
        store
    })
    .await;
    journal.close().await;
}

async fn schedules_and_settings_come_back_on_embedded_and_no_tick_fires_twice(db: &TestDb) {
    let journal = open_journal(db, JournalMode::Async).await;
    let dir = tempfile::TempDir::new().unwrap();
    let first = dir.path().join("first");
    let store = EmbeddedStore::open(EmbeddedOptions::new(first))
        .await
        .unwrap();
    let second = dir.path().join("second");
    lose_and_restore(&journal, Arc::new(store), |store| async move {
        drop(store);
        // A new, empty data dir: everything the first one held is lost.
        let store = EmbeddedStore::open(EmbeddedOptions::new(second))
            .await
            .unwrap();
        Arc::new(store) as Arc<dyn Store>
    })
    .await;
    // Async mode: the restore waited for the journal to catch up before reading it.
    tokio::time::sleep(Duration::from_millis(10)).await;
    journal.close().await;
}
