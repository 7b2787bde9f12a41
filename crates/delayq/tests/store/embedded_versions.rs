//! The embedded store's format version (docs/upgrading.md): a data directory written by an
//! earlier delayq (the fixture of each format version, `tests/fixtures/data-format-<n>/`)
//! opens with every job, setting and schedule; one of a newer format is refused, untouched,
//! with what to do.
//!
//! The fixture of the current version is written once, by hand, when a version is new:
//! `DELAYQ_BLESS=1 cargo test -p delayq --test store embedded_versions` writes it if it is
//! missing; it is never rewritten, since it stands for what that version's builds wrote.

use delayq::job::{JobId, JobSpec, JobState, Topic};
use delayq::schedule::{CatchUp, Overlap, Rule, Schedule, ScheduleId, ScheduleSpec};
use delayq::store::embedded::{DB_FILE_NAME, EmbeddedOptions, EmbeddedStore, FORMAT_VERSION};
use delayq::store::{PushMode, SettingsChange, Store, StoreError};
use std::path::{Path, PathBuf};

const NOW: u64 = 1_767_225_600_000;

fn fixture(version: u64) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("tests/fixtures/data-format-{version}"))
}

async fn open(dir: &Path) -> Result<EmbeddedStore, StoreError> {
    EmbeddedStore::open(EmbeddedOptions::new(dir.to_path_buf())).await
}

fn spec(topic: &str, id: &str, run_at: u64) -> JobSpec {
    let mut s = JobSpec::new(
        Topic::parse(topic).unwrap(),
        JobId::parse(id).unwrap(),
        format!("body of {id} 🦀"),
        run_at,
    );
    s.priority = 3;
    s.max_attempts = 2;
    s.backoff_ms = vec![1_000, 60_000];
    s
}

fn schedule() -> Schedule {
    let rule = Rule::Cron {
        expr: "0 9 * * MON-FRI".into(),
        tz: "Europe/Berlin".into(),
    };
    Schedule::new(
        ScheduleSpec {
            id: ScheduleId::parse("daily").unwrap(),
            rule: rule.clone(),
            job: spec("reports", "template", 0),
            start_at: Some(NOW),
            end_at: None,
            catch_up: CatchUp::All,
            overlap: Overlap::Skip,
            paused: true,
        },
        &rule.recurrence().unwrap(),
        NOW,
    )
}

/// What the fixture holds: a delayed, a ready, a reserved and a dead job, a callback job,
/// a topic's settings and a paused schedule.
async fn fill(store: &EmbeddedStore) {
    let push = |s: JobSpec| store.push(s, PushMode::Reject, NOW);
    push(spec("orders", "delayed", NOW + 86_400_000))
        .await
        .unwrap();
    push(spec("orders", "ready", NOW)).await.unwrap();
    push(spec("held", "reserved", NOW)).await.unwrap();
    let mut dead = spec("doomed", "dead", NOW);
    dead.max_attempts = 1;
    push(dead).await.unwrap();
    let mut called = spec("hooks", "called", NOW + 60_000);
    called.with_callback_defaults(
        delayq::job::Callback {
            url: "https://hooks.example.com/due".into(),
            timeout_ms: 5_000,
        },
        Some(30_000),
        Some(3),
        Some(vec![2_000]),
    );
    push(called).await.unwrap();
    let held = [Topic::parse("held").unwrap()];
    store.reserve(&held, 1, NOW).await.unwrap();
    let doomed = [Topic::parse("doomed").unwrap()];
    store.reserve(&doomed, 1, NOW).await.unwrap();
    store
        .release(&JobId::parse("dead").unwrap(), None, NOW)
        .await
        .unwrap();
    let change = SettingsChange {
        paused: Some(true),
        max_in_flight: Some(Some(4)),
        ..SettingsChange::default()
    };
    store
        .set_settings(&Topic::parse("orders").unwrap(), change, NOW)
        .await
        .unwrap();
    store.put_schedule(&schedule(), None).await.unwrap();
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        if e.file_type().unwrap().is_dir() {
            copy_dir(&e.path(), &to.join(e.file_name()));
        } else {
            std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
        }
    }
}

#[tokio::test]
async fn a_data_directory_of_every_earlier_format_opens_with_every_job() {
    let current = fixture(FORMAT_VERSION);
    if std::env::var_os("DELAYQ_BLESS").is_some() && !current.exists() {
        let tmp = tempfile::tempdir().unwrap();
        // With a cold tier (format 2 on): the delayed jobs on disk only.
        let mut opts = EmbeddedOptions::new(tmp.path());
        opts.memory_window = Some(std::time::Duration::from_millis(1));
        let store = EmbeddedStore::open(opts).await.unwrap();
        fill(&store).await;
        drop(store);
        copy_dir(tmp.path(), &current);
    }
    // What `fill` leaves, as this build reads it.
    let reference_dir = tempfile::tempdir().unwrap();
    let reference = open(reference_dir.path()).await.unwrap();
    fill(&reference).await;
    let ids = ["delayed", "ready", "reserved", "dead", "called"];
    for version in 1..=FORMAT_VERSION {
        let dir = fixture(version);
        assert!(
            dir.join(DB_FILE_NAME).exists(),
            "no fixture of format version {version}: write it with DELAYQ_BLESS=1"
        );
        let tmp = tempfile::tempdir().unwrap();
        copy_dir(&dir, tmp.path());
        let store = open(tmp.path()).await.unwrap();
        for id in ids {
            let id = JobId::parse(id).unwrap();
            assert_eq!(
                store.get(&id).await.unwrap(),
                reference.get(&id).await.unwrap(),
                "format {version}: job {id:?}"
            );
        }
        let states: Vec<JobState> = {
            let mut v = Vec::new();
            for id in ids {
                v.push(store.get(&JobId::parse(id).unwrap()).await.unwrap().state);
            }
            v
        };
        use JobState::*;
        assert_eq!(states, [Delayed, Ready, Reserved, Dead, Delayed]);
        // Counted alike, wherever they are kept (format 2's delayed jobs are on disk only).
        let (mut got, mut want) = (
            store.stats().await.unwrap(),
            reference.stats().await.unwrap(),
        );
        (got.on_disk, want.on_disk) = (None, None);
        (got.log_syncs, want.log_syncs) = (None, None);
        assert_eq!(got, want, "format {version}");
        assert_eq!(
            store.list_schedules(None, 10).await.unwrap(),
            reference.list_schedules(None, 10).await.unwrap()
        );
    }
}

#[tokio::test]
async fn a_data_directory_of_a_newer_format_is_refused_untouched_saying_what_to_do() {
    let tmp = tempfile::tempdir().unwrap();
    let store = open(tmp.path()).await.unwrap();
    fill(&store).await;
    drop(store);
    // As a newer delayq would leave it.
    let file = tmp.path().join(DB_FILE_NAME);
    set_format_version(&file, FORMAT_VERSION + 1);

    let err = open(tmp.path())
        .await
        .err()
        .expect("a newer format must be refused");
    let StoreError::Unavailable(cause) = &err else {
        panic!("{err:?}")
    };
    assert_eq!(
        cause.message(),
        format!(
            "{}: data format version {} was written by a newer delayq; this delayq ({}) reads \
             version {FORMAT_VERSION} and left it untouched: run the newer delayq, or, to go \
             back to this one, restore a backup taken before the upgrade (docs/upgrading.md)",
            file.display(),
            FORMAT_VERSION + 1,
            env!("CARGO_PKG_VERSION")
        )
    );
    assert_eq!(
        format_version(&file),
        FORMAT_VERSION + 1,
        "the version was changed"
    );
}

const META: redb::TableDefinition<&str, u64> = redb::TableDefinition::new("meta");

fn set_format_version(file: &Path, version: u64) {
    let db = redb::Database::open(file).unwrap();
    let tx = db.begin_write().unwrap();
    tx.open_table(META)
        .unwrap()
        .insert("format_version", version)
        .unwrap();
    tx.commit().unwrap();
}

fn format_version(file: &Path) -> u64 {
    use redb::ReadableDatabase;
    let db = redb::Database::open(file).unwrap();
    let tx = db.begin_read().unwrap();
    let meta = tx.open_table(META).unwrap();
    meta.get("format_version").unwrap().unwrap().value()
}
