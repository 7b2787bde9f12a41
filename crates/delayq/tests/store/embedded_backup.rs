//! The embedded store's online backup (`Store::online_backup`, docs/operations.md "Backup and
//! restore"): the copy opens as a data directory with every job, setting and schedule as they
//! were when the backup was asked for, changes made right before it (still only in the
//! write-ahead log) included; it goes only into a new or empty directory; one runs at a time;
//! other stores have none.
//!
//! Under load through a real `delayq serve` (every acknowledged push in the copy, none twice,
//! no pause over 100 ms): `embedded_backup_load.rs`.

use delayq::job::{JobId, JobSpec, JobState, Topic};
use delayq::schedule::{CatchUp, Overlap, Rule, Schedule, ScheduleId, ScheduleSpec};
use delayq::store::embedded::{DB_FILE_NAME, EmbeddedOptions, EmbeddedStore};
use delayq::store::memory::MemoryStore;
use delayq::store::{BackupError, PushMode, PushOutcome, SettingsChange, Store};
use std::path::Path;

const NOW: u64 = 1_767_225_600_000;

fn spec(id: &str, run_at: u64) -> JobSpec {
    JobSpec::new(
        Topic::parse("orders").unwrap(),
        JobId::parse(id).unwrap(),
        format!("body of {id}"),
        run_at,
    )
}

fn id(s: &str) -> JobId {
    JobId::parse(s).unwrap()
}

async fn open(dir: &Path) -> EmbeddedStore {
    EmbeddedStore::open(EmbeddedOptions {
        data_dir: dir.to_path_buf(),
    })
    .await
    .unwrap()
}

async fn push(store: &EmbeddedStore, s: JobSpec) {
    assert_eq!(
        store.push(s, PushMode::Reject, NOW).await.unwrap(),
        PushOutcome::Created
    );
}

fn file_names(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    names
}

fn a_schedule() -> Schedule {
    let rule = Rule::Every {
        every_ms: 60_000,
        anchor: NOW,
    };
    Schedule::new(
        ScheduleSpec {
            id: ScheduleId::parse("every-minute").unwrap(),
            rule: rule.clone(),
            job: spec("template", 0),
            start_at: None,
            end_at: None,
            catch_up: CatchUp::Latest,
            overlap: Overlap::Allow,
            paused: true,
        },
        &rule.recurrence().unwrap(),
        NOW,
    )
}

#[tokio::test]
async fn a_backup_opens_with_every_job_setting_and_schedule_as_they_were() {
    let tmp = tempfile::tempdir().unwrap();
    let store = open(&tmp.path().join("data")).await;
    push(&store, spec("delayed", NOW + 3_600_000)).await;
    push(&store, spec("ready", NOW)).await;
    push(&store, spec("reserved", NOW)).await;
    let mut dead = spec("dead", NOW);
    dead.topic = Topic::parse("doomed").unwrap();
    dead.max_attempts = 1;
    push(&store, dead).await;
    let got = store
        .reserve(&[Topic::parse("orders").unwrap()], 2, NOW)
        .await
        .unwrap();
    assert_eq!(got.len(), 2);
    store.release(&id("ready"), Some(0), NOW).await.unwrap();
    let doomed = [Topic::parse("doomed").unwrap()];
    assert_eq!(store.reserve(&doomed, 1, NOW).await.unwrap().len(), 1);
    store.release(&id("dead"), None, NOW).await.unwrap();
    let change = SettingsChange {
        max_in_flight: Some(Some(7)),
        ..SettingsChange::default()
    };
    let settings = store
        .set_settings(&Topic::parse("limited").unwrap(), change, NOW)
        .await
        .unwrap();
    let schedule = store.put_schedule(&a_schedule(), None).await.unwrap();
    // Right before the backup, so it is only in the write-ahead log, not yet in redb.
    push(&store, spec("last", NOW)).await;
    let ids = ["delayed", "ready", "reserved", "dead", "last"];
    let mut before = Vec::new();
    for i in ids {
        before.push(store.get(&id(i)).await.unwrap());
    }
    assert_eq!(before[2].state, JobState::Reserved);
    assert_eq!(before[3].state, JobState::Dead);
    let stats = store.stats().await.unwrap();

    let copy = tmp.path().join("backups/first");
    let backup = store.online_backup().expect("the embedded store has one");
    let report = backup.backup(&copy).await.unwrap();
    assert_eq!((report.jobs, report.schedules), (5, 1));
    assert_eq!(file_names(&copy), [DB_FILE_NAME]);
    assert_eq!(
        report.bytes,
        std::fs::metadata(copy.join(DB_FILE_NAME)).unwrap().len()
    );
    // The store goes on serving, and what it does now is not in the copy.
    push(&store, spec("after", NOW)).await;

    let restored = open(&copy).await;
    for (i, want) in ids.iter().zip(&before) {
        assert_eq!(&restored.get(&id(i)).await.unwrap(), want, "job {i}");
    }
    assert!(restored.get(&id("after")).await.is_err());
    assert_eq!(restored.stats().await.unwrap(), stats);
    assert_eq!(
        restored
            .settings(&Topic::parse("limited").unwrap())
            .await
            .unwrap(),
        settings
    );
    assert_eq!(
        restored.list_schedules(None, 10).await.unwrap(),
        vec![schedule]
    );
}

#[tokio::test]
async fn a_backup_goes_only_into_a_new_or_empty_directory() {
    let tmp = tempfile::tempdir().unwrap();
    let store = open(&tmp.path().join("data")).await;
    push(&store, spec("a", NOW)).await;
    let backup = store.online_backup().unwrap();

    let full = tmp.path().join("full");
    std::fs::create_dir(&full).unwrap();
    std::fs::write(full.join("notes.txt"), "mine").unwrap();
    let err = backup.backup(&full).await.unwrap_err();
    assert_eq!(
        err,
        BackupError::Target(format!(
            "{} is not empty: a backup goes into a new or empty directory",
            full.display()
        ))
    );
    assert_eq!(file_names(&full), ["notes.txt"]);

    let file = tmp.path().join("a-file");
    std::fs::write(&file, "x").unwrap();
    let err = backup.backup(&file).await.unwrap_err();
    assert_eq!(
        err,
        BackupError::Target(format!("{} is not a directory", file.display()))
    );

    let empty = tmp.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    assert_eq!(backup.backup(&empty).await.unwrap().jobs, 1);
    // A second backup into the same directory finds it full.
    assert!(matches!(
        backup.backup(&empty).await,
        Err(BackupError::Target(m)) if m.ends_with("is not empty: a backup goes into a new or empty directory")
    ));
}

#[tokio::test]
async fn one_backup_runs_at_a_time() {
    let tmp = tempfile::tempdir().unwrap();
    let store = open(&tmp.path().join("data")).await;
    push(&store, spec("a", NOW)).await;
    let backup = store.online_backup().unwrap();
    let (one, two) = (tmp.path().join("one"), tmp.path().join("two"));
    let (first, second) = tokio::join!(backup.backup(&one), backup.backup(&two));
    assert_eq!(first.unwrap().jobs, 1);
    assert_eq!(second, Err(BackupError::Running));
    // Once it is done, the next may run.
    assert_eq!(backup.backup(&tmp.path().join("three")).await.unwrap().jobs, 1);
}

#[tokio::test]
async fn the_memory_store_has_no_online_backup() {
    assert!(MemoryStore::new().online_backup().is_none());
}
