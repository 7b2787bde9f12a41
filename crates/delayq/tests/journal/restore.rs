//! Restores after a loss: a mixed history of 10,000 jobs made through a journaled store and,
//! call for call, through the journal-less reference (a memory store); then the store loses
//! everything (FLUSHALL of its private Redis, or its data dir deleted), the journal restores
//! it, and every job is compared with the reference once both have run the same timer passes.

use crate::db::TestDb;
use crate::support::redis_server::{RedisServer, flushall};
use delayq::clock::{Clock, SystemClock};
use delayq::job::{Callback, Job, JobId, JobSpec, JobState, Publish, Topic};
use delayq::journal::{Journal, JournalMode, Journaled, Overdue, RestoreCounts, RestoreOptions};
use delayq::store::embedded::{EmbeddedOptions, EmbeddedStore};
use delayq::store::memory::MemoryStore;
use delayq::store::redis::{RedisOptions, RedisStore, RedisTarget};
use delayq::store::{PushMode, Reschedule, Store, StoreError};
use std::sync::Arc;
use std::time::Duration;

journal_tests!(
    ten_thousand_jobs_come_back_on_redis_after_flushall,
    ten_thousand_jobs_come_back_on_embedded_after_losing_its_data_dir,
    skipped_overdue_jobs_stay_out_of_later_restores,
    one_job_by_id_and_finished_jobs_never_come_back,
    retention_prunes_ended_jobs_and_old_events_but_never_live_ones,
);

const TTR_MS: u64 = 30_000;
/// Jobs of the big history.
const JOBS: usize = 10_000;

pub async fn open_journal(db: &TestDb, mode: JournalMode) -> Journal {
    Journal::open(
        &db.url,
        mode,
        Duration::from_secs(3600),
        Arc::new(SystemClock),
    )
    .await
    .expect("open the journal")
}

fn id(i: usize) -> JobId {
    JobId::parse(format!("job-{i:05}")).unwrap()
}

fn topic(i: usize) -> Topic {
    Topic::parse(format!("t{}", i % 5)).unwrap()
}

/// Job `i` of the history: every field varies with `i` (bodies with quotes, NULs and
/// non-ASCII text; some callbacks, publishes, backoffs and attempt limits), and its due time is past,
/// now, or 1 to 2 hours ahead.
fn spec(i: usize, t0: u64) -> JobSpec {
    let run_at = match i % 4 {
        0 => t0 - 1_000,
        1 => t0,
        2 => t0 + 3_600_000,
        _ => t0 + 60_000 + i as u64,
    };
    let mut s = JobSpec::new(topic(i), id(i), format!("body {i} \"é\" \0 ✓"), run_at);
    s.ttr_ms = TTR_MS;
    s.priority = (i % 7) as u32;
    s.max_attempts = u32::from(i.is_multiple_of(3));
    if i % 4 == 1 {
        s.backoff_ms = vec![5_000, 60_000];
    }
    if i % 10 == 7 {
        s.callback = Some(Callback {
            url: format!("http://127.0.0.1:9/cb/{i}"),
            timeout_ms: 1_000,
        });
    }
    if i % 10 == 3 {
        s.publish = Some(Box::new(Publish {
            exchange: format!("ex-{i}"),
            routing_key: "order.ü".into(),
            content_type: (i % 20 == 3).then(|| "application/octet-stream".into()),
            headers: (i % 20 == 3).then(|| r#"{"k":{"LongInt":7}}"#.into()),
            body_base64: i % 20 == 3,
        }));
    }
    s
}

/// Runs the same calls on both stores and checks they answer alike.
struct Twin<'a> {
    subject: &'a dyn Store,
    reference: &'a dyn Store,
}

impl Twin<'_> {
    async fn push(&self, specs: Vec<JobSpec>, now: u64) {
        let a = self
            .subject
            .push_batch(specs.clone(), PushMode::Reject, now)
            .await
            .unwrap();
        let b = self
            .reference
            .push_batch(specs, PushMode::Reject, now)
            .await
            .unwrap();
        assert_eq!(a, b);
    }

    async fn reserve(&self, topics: &[Topic], max: usize, now: u64) -> Vec<Job> {
        let a = self.subject.reserve(topics, max, now).await.unwrap();
        let b = self.reference.reserve(topics, max, now).await.unwrap();
        let ids = |jobs: &[Job]| jobs.iter().map(|j| j.spec.id.clone()).collect::<Vec<_>>();
        assert_eq!(ids(&a), ids(&b), "both stores hand out the same jobs");
        a
    }

    /// Runs one step on both stores; they must both succeed or both refuse alike.
    async fn step(&self, step: Step) {
        let a = step.run(self.subject).await;
        let b = step.run(self.reference).await;
        assert_eq!(a, b, "the stores disagree on {step:?}");
    }
}

/// One call of the history on one job (or topic), at its time.
#[derive(Debug)]
enum Step {
    Finish(JobId),
    Release(JobId, u64),
    Touch(JobId, u64),
    Delete(JobId),
    Bury(JobId, Option<u32>, u64),
    Kick(JobId, u64),
    Reschedule(JobId, Reschedule, u64),
    KickTopic(Topic, u64, u64),
}

impl Step {
    /// The call's outcome: `Ok` or the store's refusal.
    async fn run(&self, s: &dyn Store) -> Result<(), StoreError> {
        match self {
            Step::Finish(id) => s.finish(id).await.map(drop),
            Step::Release(id, now) => s.release(id, None, *now).await.map(drop),
            Step::Touch(id, now) => s.touch(id, *now).await.map(drop),
            Step::Delete(id) => s.delete(id).await.map(drop),
            Step::Bury(id, priority, now) => s.bury(id, *priority, *now).await.map(drop),
            Step::Kick(id, now) => s.kick(id, *now).await.map(drop),
            Step::Reschedule(id, change, now) => {
                s.reschedule(id, change.clone(), *now).await.map(drop)
            }
            Step::KickTopic(topic, max, now) => s.kick_topic(topic, *max, *now).await.map(drop),
        }
    }
}

/// The mixed history at `t0`: pushes, reserves, finishes, releases (some to dead), deletes,
/// burials (some with a new priority), kicks, reschedules, a kick of a topic and touches.
async fn history(twin: &Twin<'_>, t0: u64) {
    let specs: Vec<JobSpec> = (0..JOBS).map(|i| spec(i, t0)).collect();
    for chunk in specs.chunks(500) {
        twin.push(chunk.to_vec(), t0).await;
    }
    let topics: Vec<Topic> = (0..5).map(topic).collect();
    let mut reserved = Vec::new();
    for _ in 0..20 {
        reserved.extend(twin.reserve(&topics, 100, t0).await);
    }
    assert!(reserved.len() > 1_000, "only {} reserved", reserved.len());
    for (k, job) in reserved.iter().enumerate() {
        let id = job.spec.id.clone();
        match k % 3 {
            0 => twin.step(Step::Finish(id)).await,
            1 => twin.step(Step::Release(id, t0)).await,
            _ if k % 7 == 2 => twin.step(Step::Touch(id, t0 + 1_000)).await,
            _ => {}
        }
    }
    for i in 0..JOBS {
        if i % 17 == 0 {
            twin.step(Step::Delete(id(i))).await;
        } else if i % 19 == 0 {
            // Odd multiples of 19 are buried with a priority of their own (and not kicked).
            let priority = (i % 38 == 19).then_some(2);
            twin.step(Step::Bury(id(i), priority, t0)).await;
        } else if i % 23 == 0 {
            let change = Reschedule {
                run_at: t0 + 7_200_000,
                body: Some(format!("rescheduled {i}")),
                priority: Some(3),
            };
            twin.step(Step::Reschedule(id(i), change, t0)).await;
        }
    }
    for i in (0..JOBS).step_by(38) {
        twin.step(Step::Kick(id(i), t0)).await;
    }
    twin.step(Step::KickTopic(topic(1), 5, t0)).await;
}

/// The timer passes both stores run after the restore: each reservation's deadline, then a
/// little later, so nothing reserved is left.
async fn ticks(store: &dyn Store, t0: u64) {
    for at in [t0 + TTR_MS, t0 + TTR_MS + 1_000, t0 + TTR_MS + 2_000] {
        loop {
            let out = store.tick(at, 100_000).await.unwrap();
            if out.next_due.is_none_or(|d| d > at) {
                break;
            }
        }
    }
}

/// Compares every job of the history: gone in both, or alike in everything but the store's
/// stamp.
async fn compare(subject: &dyn Store, reference: &dyn Store) -> usize {
    let mut present = 0;
    for i in 0..JOBS {
        let a = subject.get(&id(i)).await;
        let b = reference.get(&id(i)).await;
        match (a, b) {
            (Err(StoreError::NotFound), Err(StoreError::NotFound)) => {}
            (Ok(a), Ok(b)) => {
                present += 1;
                assert_eq!(a.spec, b.spec, "job {i}");
                assert_eq!(a.state, b.state, "job {i}");
                assert_eq!(a.attempts, b.attempts, "job {i}");
                assert_eq!(a.reserved_until, b.reserved_until, "job {i}");
            }
            (a, b) => panic!("job {i}: restored {a:?}, reference {b:?}"),
        }
    }
    present
}

/// The big history through `journal` on `subject`; then `lose` empties the store (and may
/// hand back a new one), the journal restores it, and both stores are compared.
async fn lose_and_restore<F, Fut>(journal: &Journal, subject: Arc<dyn Store>, lose: F)
where
    F: FnOnce(Arc<dyn Store>) -> Fut,
    Fut: std::future::Future<Output = Arc<dyn Store>>,
{
    let t0 = SystemClock.now();
    let reference = MemoryStore::new();
    let journaled = Journaled::new(subject.clone(), journal.clone());
    history(
        &Twin {
            subject: &journaled,
            reference: &reference,
        },
        t0,
    )
    .await;
    drop(journaled);
    let subject = lose(subject).await;
    assert_eq!(
        subject.stats().await.unwrap().topics.len(),
        0,
        "the store lost everything"
    );
    let journaled = Journaled::new(subject.clone(), journal.clone());
    let fire = RestoreOptions {
        overdue: Overdue::Fire,
        id: None,
    };
    let counts = journal.restore(&journaled, fire.clone(), t0).await.unwrap();
    let live = JOBS as u64 - counts.skipped_finished;
    assert_eq!(counts.restored, live, "{counts:?}");
    assert_eq!(counts.already_present + counts.skipped_overdue, 0);
    assert!(counts.skipped_finished > 500, "{counts:?}");

    // Twice: nothing changes, nothing is duplicated.
    let again = journal.restore(&journaled, fire, t0).await.unwrap();
    let want = RestoreCounts {
        restored: 0,
        already_present: counts.restored,
        skipped_overdue: 0,
        skipped_finished: counts.skipped_finished,
        ..RestoreCounts::default()
    };
    assert_eq!(again, want);

    ticks(&journaled, t0).await;
    ticks(&reference, t0).await;
    let present = compare(&journaled, &reference).await;
    assert_eq!(present as u64, counts.restored);
}

async fn ten_thousand_jobs_come_back_on_redis_after_flushall(db: &TestDb) {
    let journal = open_journal(db, JournalMode::Sync).await;
    let server = RedisServer::start();
    let store = RedisStore::connect(RedisOptions {
        target: RedisTarget::Server(server.url()),
        prefix: "delayq".into(),
        shards: 8,
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

async fn ten_thousand_jobs_come_back_on_embedded_after_losing_its_data_dir(db: &TestDb) {
    let journal = open_journal(db, JournalMode::Sync).await;
    let dir = tempfile::TempDir::new().unwrap();
    let data_dir = dir.path().join("data");
    let open = |d: std::path::PathBuf| async move {
        let store = EmbeddedStore::open(EmbeddedOptions::new(d)).await.unwrap();
        Arc::new(store) as Arc<dyn Store>
    };
    let store = open(data_dir.clone()).await;
    lose_and_restore(&journal, store, |store| async move {
        drop(store);
        // The store's threads let go of the directory once it is dropped; wait for its lock.
        let mut tries = 0;
        loop {
            std::fs::remove_dir_all(&data_dir).unwrap();
            match EmbeddedStore::open(EmbeddedOptions::new(data_dir.clone())).await {
                Ok(s) => break Arc::new(s) as Arc<dyn Store>,
                Err(e) if tries < 50 => {
                    tries += 1;
                    let _ = e;
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                Err(e) => panic!("cannot reopen the embedded store: {e}"),
            }
        }
    })
    .await;
    journal.close().await;
}

async fn skipped_overdue_jobs_stay_out_of_later_restores(db: &TestDb) {
    let journal = open_journal(db, JournalMode::Sync).await;
    let t0 = SystemClock.now();
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let journaled = Journaled::new(store, journal.clone());
    let past = |i: usize| JobSpec::new(topic(0), id(i), "late", t0 - 10_000);
    let future = |i: usize| JobSpec::new(topic(0), id(i), "later", t0 + 600_000);
    let jobs = vec![past(1), past(2), future(3), past(4)];
    journaled
        .push_batch(jobs, PushMode::Reject, t0 - 20_000)
        .await
        .unwrap();

    // A new, empty store: job 4 survived in it, the others were lost.
    let fresh: Arc<dyn Store> = Arc::new(MemoryStore::new());
    fresh
        .push(past(4), PushMode::Reject, t0 - 20_000)
        .await
        .unwrap();
    let journaled = Journaled::new(fresh.clone(), journal.clone());
    let skip = RestoreOptions {
        overdue: Overdue::Skip,
        id: None,
    };
    let counts = journal.restore(&journaled, skip, t0).await.unwrap();
    let want = RestoreCounts {
        restored: 1,
        already_present: 1,
        skipped_overdue: 2,
        skipped_finished: 0,
        ..RestoreCounts::default()
    };
    assert_eq!(counts, want);
    assert_eq!(fresh.get(&id(3)).await.unwrap().state, JobState::Delayed);
    assert_eq!(fresh.get(&id(1)).await, Err(StoreError::NotFound));
    assert_eq!(
        fresh.get(&id(4)).await.unwrap().spec.body,
        "late",
        "the job it still had is left alone"
    );

    // The skip is recorded: a later restore, even firing overdue jobs, leaves them out.
    let emptier: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let journaled = Journaled::new(emptier.clone(), journal.clone());
    let fire = RestoreOptions {
        overdue: Overdue::Fire,
        id: None,
    };
    let counts = journal.restore(&journaled, fire, t0).await.unwrap();
    assert_eq!(
        counts,
        RestoreCounts {
            restored: 2,
            already_present: 0,
            skipped_overdue: 2,
            skipped_finished: 0,
            ..RestoreCounts::default()
        }
    );
    assert_eq!(emptier.get(&id(1)).await, Err(StoreError::NotFound));
    assert_eq!(emptier.get(&id(4)).await.unwrap().state, JobState::Ready);
    let skipped = db
        .count("SELECT COUNT(*) FROM delayq_jobs WHERE state = 'skipped'")
        .await;
    assert_eq!(skipped, 2);
    journal.close().await;
}

async fn one_job_by_id_and_finished_jobs_never_come_back(db: &TestDb) {
    let journal = open_journal(db, JournalMode::Sync).await;
    let t0 = SystemClock.now();
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let journaled = Journaled::new(store, journal.clone());
    let jobs: Vec<JobSpec> = (0..3).map(|i| spec(i * 4 + 2, t0)).collect();
    journaled
        .push_batch(jobs, PushMode::Reject, t0)
        .await
        .unwrap();
    journaled.finish(&id(6)).await.unwrap();
    journaled.delete(&id(10)).await.unwrap();
    let events = db.count("SELECT COUNT(*) FROM delayq_job_events").await;
    assert_eq!(events, 5, "three pushes, a finish, a delete");

    let fresh: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let journaled = Journaled::new(fresh.clone(), journal.clone());
    let only = |i| RestoreOptions {
        overdue: Overdue::Fire,
        id: Some(id(i)),
    };
    let counts = journal.restore(&journaled, only(6), t0).await.unwrap();
    assert_eq!(counts.skipped_finished, 1);
    assert_eq!(counts.restored, 0);
    let counts = journal.restore(&journaled, only(2), t0).await.unwrap();
    assert_eq!(counts.restored, 1);
    assert_eq!(fresh.get(&id(2)).await.unwrap().spec, spec(2, t0));
    assert_eq!(
        fresh.stats().await.unwrap().topics.len(),
        1,
        "only that job"
    );
    let missing = journal.restore(&journaled, only(9_999), t0).await;
    assert_eq!(missing, Err(delayq::journal::RestoreError::NotFound));
    journal.close().await;
}

async fn retention_prunes_ended_jobs_and_old_events_but_never_live_ones(db: &TestDb) {
    let journal = open_journal(db, JournalMode::Sync).await;
    let t0 = SystemClock.now();
    let journaled = Journaled::new(Arc::new(MemoryStore::new()), journal.clone());
    let jobs = vec![spec(2, t0), spec(6, t0), spec(10, t0)];
    journaled
        .push_batch(jobs, PushMode::Reject, t0)
        .await
        .unwrap();
    journaled.finish(&id(6)).await.unwrap();
    journaled.delete(&id(10)).await.unwrap();
    journal.close().await;
    // A journal prunes when it opens, then once a minute: one with a retention of 60 s,
    // opened once `events` events are left.
    let prune_until = |events: i64| async move {
        let pruning = Journal::open(
            &db.url,
            JournalMode::Sync,
            Duration::from_secs(60),
            Arc::new(SystemClock),
        )
        .await
        .unwrap();
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        while db.count("SELECT COUNT(*) FROM delayq_job_events").await > events {
            assert!(std::time::Instant::now() < deadline, "not pruned");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        pruning
    };
    let jobs = || db.count("SELECT COUNT(*) FROM delayq_jobs");
    // Events an hour old, beyond the retention, but the ended jobs' rows changed since (as
    // when an ending is written late): the rows stay, and so do the events that end them,
    // else nothing would find those rows again.
    let old = t0 - 3_600_000;
    db.execute(&format!("UPDATE delayq_job_events SET at = {old}"))
        .await;
    prune_until(2).await.close().await;
    assert_eq!(
        jobs().await,
        3,
        "no row changed within the retention is pruned"
    );
    let ending = "SELECT COUNT(*) FROM delayq_job_events WHERE to_state IN ('finished', 'deleted')";
    assert_eq!(
        db.count(ending).await,
        2,
        "the ended rows' ending events are kept"
    );
    // Everything an hour old.
    db.execute(&format!("UPDATE delayq_jobs SET changed_at = {old}"))
        .await;
    let pruning = prune_until(0).await;
    assert_eq!(jobs().await, 1, "only the live job's row is left");
    let fresh: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let journaled = Journaled::new(fresh.clone(), pruning.clone());
    let fire = RestoreOptions {
        overdue: Overdue::Fire,
        id: None,
    };
    let counts = pruning.restore(&journaled, fire, t0).await.unwrap();
    assert_eq!(counts.restored, 1);
    pruning.close().await;
}
