//! The embedded store's cold tier on disk: delayed jobs due beyond the memory window
//! (`--memory-window`), kept in an LSM tree (fjall) in `<data_dir>/cold/` and in no index in
//! memory (the engine's side, `engine/cold.rs`, keeps only their counts by queue and minute).
//!
//! Three keyspaces, written together in one atomic batch per checkpoint:
//! - `due`: `[queue length u16][queue][run_at u64][id]` → the job's record (`record.rs`): each
//!   queue's cold jobs in due order, for loading them back and for the listings;
//! - `ids`: `id` → `[run_at u64][queue]`: where a job's `due` entry is (a get, delete or
//!   reschedule of a far-future job, a push's check that its id is free);
//! - `hist`: `[queue length u16][queue][minute u64]` → how many cold jobs of the queue fall due
//!   in that minute: the engine's counts at open, without reading the jobs.
//!
//! Only the checkpoint thread writes (`group_commit.rs`), from the write-ahead log's cold
//! entries (`record::cold_key`), after they are durable in the log: so the tier is never ahead
//! of the log, and a checkpoint replayed after a crash rewrites the same state. Each batch is
//! synced before the checkpoint retires its log. Numbers are big-endian, so byte order is
//! numeric order.

use super::record;
use crate::job::{Job, JobId, Topic, UnixMillis};
use crate::store::engine::cold::ColdTier;
use crate::store::{Cause, SCHEDULE_BUCKET_MS};
use fjall::{Database, Keyspace, KeyspaceCreateOptions, PersistMode, Readable};
use foldhash::{HashMap, HashMapExt};
use std::borrow::Cow;
use std::path::Path;
use std::sync::{Mutex, MutexGuard};

/// The cold tier's directory inside the data directory.
pub const COLD_DIR: &str = "cold";

/// fjall's block cache: the tier is read for loads (sequential) and by-id lookups (rare).
const CACHE_BYTES: u64 = 32 << 20;

/// fjall's journals, at most, before it flushes the memtables they hold.
const JOURNAL_BYTES: u64 = 128 << 20;

/// What a checkpoint did to the tier, for the engine (`Engine::cold_applied`): each change it
/// applied, by job id and the number the engine gave it (`Change::PutCold`,
/// `Change::RemoveCold`).
#[derive(Debug, Default)]
pub struct ColdReport {
    pub applied: Vec<(JobId, u64)>,
}

pub struct ColdStore {
    db: Database,
    due: Keyspace,
    ids: Keyspace,
    hist: Keyspace,
    /// The `hist` keyspace's counts, kept here by the only writer (the checkpoint thread).
    counts: Mutex<HashMap<(Topic, u64), u64>>,
    /// Reports of checkpoints the engine has not taken yet.
    reports: Mutex<Vec<ColdReport>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

fn io(what: &str, e: fjall::Error) -> Cause {
    Cause::with_source(format!("cold tier: cannot {what}"), e)
}

fn queue_prefix(queue: &str) -> Vec<u8> {
    let mut k = Vec::with_capacity(2 + queue.len() + 8 + 16);
    k.extend_from_slice(&(queue.len() as u16).to_be_bytes());
    k.extend_from_slice(queue.as_bytes());
    k
}

fn due_key(queue: &str, run_at: UnixMillis, id: &str) -> Vec<u8> {
    let mut k = queue_prefix(queue);
    k.extend_from_slice(&run_at.to_be_bytes());
    k.extend_from_slice(id.as_bytes());
    k
}

fn hist_key(queue: &str, minute: u64) -> Vec<u8> {
    let mut k = queue_prefix(queue);
    k.extend_from_slice(&minute.to_be_bytes());
    k
}

/// Splits a `due` or `hist` key into its queue and what follows it.
fn split_queue(key: &[u8]) -> Option<(&str, &[u8])> {
    let (len, rest) = key.split_first_chunk::<2>()?;
    let (queue, rest) = rest.split_at_checked(u16::from_be_bytes(*len) as usize)?;
    Some((std::str::from_utf8(queue).ok()?, rest))
}

fn u64_at(bytes: &[u8]) -> Option<u64> {
    bytes.first_chunk::<8>().map(|b| u64::from_be_bytes(*b))
}

/// An `ids` value: the job's due time and queue.
fn located(v: &[u8]) -> Option<(UnixMillis, &str)> {
    Some((u64_at(v)?, std::str::from_utf8(v.get(8..)?).ok()?))
}

/// A cold entry's value in the write-ahead log, by its first byte:
/// - [`PUT`] or [`PUT_FRESH`] (the tier holds no copy of the job yet: its writer need not
///   look for one), the change's number, the job's due time and queue (`[u16 length][name]`:
///   what its keys are made of, so a checkpoint decodes no record), then its record;
/// - [`REMOVED`], the change's number;
/// - 0 or 1, the job's record: a put as logged before changes were numbered (a removal was
///   then an entry without a value).
const PUT: u8 = 2;
const PUT_FRESH: u8 = 3;
const REMOVED: u8 = 4;

/// A put's cold entry (see [`PUT`]).
pub fn encode(job: Job, fresh: bool, seq: u64) -> Vec<u8> {
    let queue = job.spec.queue();
    let mut v = vec![if fresh { PUT_FRESH } else { PUT }];
    v.extend_from_slice(&seq.to_be_bytes());
    v.extend_from_slice(&job.spec.run_at.to_be_bytes());
    v.extend_from_slice(&queue_prefix(queue.as_str()));
    v.extend_from_slice(&record::encode(job));
    v
}

/// A removal's cold entry (see [`PUT`]).
pub fn encode_removal(seq: u64) -> Vec<u8> {
    let mut v = vec![REMOVED];
    v.extend_from_slice(&seq.to_be_bytes());
    v
}

/// A cold entry's value decoded.
struct Entry<'a> {
    fresh: bool,
    /// The job's due time, queue and record; `None`: a removal.
    put: Option<(UnixMillis, Cow<'a, str>, &'a [u8])>,
    /// The change's number; `None` in an entry logged before changes were numbered.
    seq: Option<u64>,
}

/// Decodes job `id`'s cold entry (`None`: a removal logged before changes were numbered).
fn decode_entry<'a>(id: &str, v: Option<&'a [u8]>) -> Result<Entry<'a>, Cause> {
    let bad = || corrupt(format_args!("the log entry of job {id:?}"));
    let removal = |seq| Entry {
        fresh: false,
        put: None,
        seq,
    };
    let Some(v) = v else {
        return Ok(removal(None));
    };
    let (&flag, rest) = v.split_first().ok_or_else(bad)?;
    match flag {
        0 | 1 => {
            let job = record::decode(id, rest)
                .map_err(|e| Cause::new(format!("cold tier: job {id:?}: {e}")))?;
            let queue = Cow::Owned(job.spec.queue().as_str().to_string());
            let (fresh, put, seq) = (flag == 1, Some((job.spec.run_at, queue, rest)), None);
            Ok(Entry { fresh, put, seq })
        }
        PUT | PUT_FRESH => {
            let (seq, rest) = rest.split_first_chunk::<8>().ok_or_else(bad)?;
            let (run_at, rest) = rest.split_first_chunk::<8>().ok_or_else(bad)?;
            let (queue, rec) = split_queue(rest).ok_or_else(bad)?;
            let put = Some((u64::from_be_bytes(*run_at), Cow::Borrowed(queue), rec));
            let (fresh, seq) = (flag == PUT_FRESH, Some(u64::from_be_bytes(*seq)));
            Ok(Entry { fresh, put, seq })
        }
        REMOVED => Ok(removal(Some(u64_at(rest).ok_or_else(bad)?))),
        _ => Err(bad()),
    }
}

fn corrupt(what: impl std::fmt::Display) -> Cause {
    Cause::new(format!("cold tier: {what} cannot be decoded"))
}

/// Opens (creating if needed) a tier's database in `dir` and its keyspaces: `due`, `ids`,
/// `hist`.
fn open_db(dir: &Path) -> Result<(Database, [Keyspace; 3]), Cause> {
    let db = Database::builder(dir)
        .cache_size(CACHE_BYTES)
        .manual_journal_persist(true)
        // One background worker: with more, an idle one hands a compaction request back
        // to the queue and takes it again while the other compacts, a busy loop.
        .worker_threads(1)
        // Replayed at open: a smaller journal is a faster restart (it flushes memtables
        // sooner).
        .max_journaling_size(JOURNAL_BYTES)
        .open()
        .map_err(|e| io("open", e))?;
    let ks = |name: &str| {
        db.keyspace(name, KeyspaceCreateOptions::default)
            .map_err(|e| io("open a keyspace", e))
    };
    let keyspaces = [ks("due")?, ks("ids")?, ks("hist")?];
    Ok((db, keyspaces))
}

/// The tier as of one moment (a checkpoint), for an online backup (`backup.rs`): fjall keeps
/// what it sees until it is dropped, while checkpoints go on.
pub struct ColdSnapshot {
    snapshot: fjall::Snapshot,
    keyspaces: [Keyspace; 3],
}

impl ColdSnapshot {
    /// Writes the snapshot into a new tier in `dir` (which must not exist), each keyspace
    /// bulk-loaded in key order, and syncs it. `keep_going` is asked every few thousand rows
    /// (false: stop, with an error). Returns how many jobs it holds.
    pub fn copy_to(&self, dir: &Path, keep_going: &dyn Fn() -> bool) -> Result<u64, Cause> {
        if dir.exists() {
            return Err(Cause::new(format!("{} exists already", dir.display())));
        }
        let (db, into) = open_db(dir)?;
        let mut rows = [0u64; 3];
        for ((from, into), rows) in self.keyspaces.iter().zip(&into).zip(&mut rows) {
            let mut load = into.start_ingestion().map_err(|e| io("start a copy", e))?;
            for entry in self.snapshot.iter(from) {
                *rows += 1;
                if rows.is_multiple_of(4096) && !keep_going() {
                    return Err(Cause::new("the copy of the cold tier was stopped"));
                }
                let (k, v) = entry.into_inner().map_err(|e| io("read a snapshot", e))?;
                load.write(k, v).map_err(|e| io("write a copy", e))?;
            }
            load.finish().map_err(|e| io("write a copy", e))?;
        }
        db.persist(PersistMode::SyncAll)
            .map_err(|e| io("sync a copy", e))?;
        let [_, jobs, _] = rows;
        Ok(jobs)
    }
}

impl ColdStore {
    /// Opens (creating if needed) the tier in `<data_dir>/cold/` and reads its counts.
    pub fn open(data_dir: &Path) -> Result<ColdStore, Cause> {
        let (db, [due, ids, hist]) = open_db(&data_dir.join(COLD_DIR))?;
        let mut counts = HashMap::new();
        for entry in hist.iter() {
            let (k, v) = entry.into_inner().map_err(|e| io("read the counts", e))?;
            let (queue, rest) = split_queue(&k).ok_or_else(|| corrupt("a count's key"))?;
            let queue = Topic::parse_queue(queue).map_err(|_| corrupt("a count's queue"))?;
            let minute = u64_at(rest).ok_or_else(|| corrupt("a count's minute"))?;
            let n = u64_at(&v).ok_or_else(|| corrupt("a count"))?;
            counts.insert((queue, minute), n);
        }
        Ok(ColdStore {
            db,
            due,
            ids,
            hist,
            counts: Mutex::new(counts),
            reports: Mutex::default(),
        })
    }

    /// How many cold jobs each queue has due in each minute.
    pub fn counts(&self) -> Vec<(Topic, u64, u64)> {
        lock(&self.counts)
            .iter()
            .map(|((q, m), n)| (q.clone(), *m, *n))
            .collect()
    }

    /// Applies cold log entries (`record::cold_key` stripped: a job id and its [`encode`]d
    /// value, or `None` for its removal), in order, as one atomic batch, and syncs it.
    /// `report`: a checkpoint, whose report the engine takes; otherwise the replay of a log at
    /// open, which may have been applied before: it trusts no `fresh` flag, so replaying
    /// entries already applied changes nothing.
    pub fn apply(
        &self,
        entries: Vec<(String, Option<Vec<u8>>)>,
        report: bool,
    ) -> Result<(), Cause> {
        if entries.is_empty() {
            return Ok(());
        }
        // Only each job's last entry counts (a log replayed at open may hold several): the
        // tier never held the ones before it, which a checkpoint skipped the same way.
        let mut last: HashMap<&str, usize> = HashMap::with_capacity(entries.len());
        for (i, (id, _)) in entries.iter().enumerate() {
            last.insert(id.as_str(), i);
        }
        // Each keyspace's writes, put in key order before they go into the batch: sorted
        // inserts walk the memtable's skip list along nearly the same path one after another.
        let mut due = Vec::with_capacity(entries.len() * 2);
        let mut ids = Vec::with_capacity(entries.len());
        let mut hist = Vec::new();
        let mut deltas: HashMap<(Topic, u64), i64> = HashMap::new();
        let mut queues: HashMap<String, Topic> = HashMap::new();
        let mut topic = |queue: &str| -> Result<Topic, Cause> {
            if let Some(t) = queues.get(queue) {
                return Ok(t.clone());
            }
            let t = Topic::parse_queue(queue).map_err(|_| corrupt("a job's queue"))?;
            queues.insert(queue.to_string(), t.clone());
            Ok(t)
        };
        let mut out = ColdReport::default();
        for (i, (id, value)) in entries.iter().enumerate() {
            if last.get(id.as_str()) != Some(&i) {
                continue;
            }
            let Entry { fresh, put, seq } = decode_entry(id, value.as_deref())?;
            if report
                && let Some(seq) = seq
                && let Ok(job) = JobId::parse(id.as_str())
            {
                out.applied.push((job, seq));
            }
            let mut had = false;
            if !(fresh && report)
                && let Some(v) = self.ids.get(id).map_err(|e| io("read an id", e))?
            {
                let (run_at, queue) = located(&v).ok_or_else(|| corrupt("an id's entry"))?;
                due.push((due_key(queue, run_at, id), None));
                *deltas
                    .entry((topic(queue)?, run_at / SCHEDULE_BUCKET_MS))
                    .or_default() -= 1;
                had = true;
            }
            match put {
                Some((run_at, queue, rec)) => {
                    due.push((due_key(&queue, run_at, id), Some(rec.to_vec())));
                    let mut v = Vec::with_capacity(8 + queue.len());
                    v.extend_from_slice(&run_at.to_be_bytes());
                    v.extend_from_slice(queue.as_bytes());
                    ids.push((id.as_bytes().to_vec(), Some(v)));
                    *deltas
                        .entry((topic(&queue)?, run_at / SCHEDULE_BUCKET_MS))
                        .or_default() += 1;
                }
                None if had => ids.push((id.as_bytes().to_vec(), None)),
                None => {}
            }
        }
        let mut counts = lock(&self.counts);
        let mut written = Vec::with_capacity(deltas.len());
        for ((queue, minute), d) in deltas {
            if d == 0 {
                continue;
            }
            let n = counts.get(&(queue.clone(), minute)).copied().unwrap_or(0);
            let n = n.saturating_add_signed(d);
            let key = hist_key(queue.as_str(), minute);
            hist.push((key, (n > 0).then(|| n.to_be_bytes().to_vec())));
            written.push(((queue, minute), n));
        }
        let mut batch = self.db.batch();
        for (keyspace, mut writes) in [(&self.due, due), (&self.ids, ids), (&self.hist, hist)] {
            // Stable: a key's removal stays before its insertion.
            writes.sort_by(|a, b| a.0.cmp(&b.0));
            for (key, value) in writes {
                match value {
                    Some(v) => batch.insert(keyspace, key, v),
                    None => batch.remove(keyspace, key),
                }
            }
        }
        batch.commit().map_err(|e| io("write a checkpoint", e))?;
        self.db
            .persist(PersistMode::SyncAll)
            .map_err(|e| io("sync a checkpoint", e))?;
        for (key, n) in written {
            if n == 0 {
                counts.remove(&key);
            } else {
                counts.insert(key, n);
            }
        }
        drop(counts);
        if report {
            lock(&self.reports).push(out);
        }
        Ok(())
    }

    /// The tier as it is now. Taken by the checkpoint thread, the only writer, between two
    /// checkpoints: it matches redb's state at that point.
    pub fn snapshot(&self) -> ColdSnapshot {
        ColdSnapshot {
            snapshot: self.db.snapshot(),
            keyspaces: [self.due.clone(), self.ids.clone(), self.hist.clone()],
        }
    }

    /// The reports of the checkpoints written since the last call, oldest first.
    pub fn take_reports(&self) -> Vec<ColdReport> {
        std::mem::take(&mut *lock(&self.reports))
    }

    fn decode_due(&self, k: &[u8], v: &[u8]) -> Result<Job, Cause> {
        let (_, rest) = split_queue(k).ok_or_else(|| corrupt("a due key"))?;
        let id = rest
            .get(8..)
            .and_then(|id| std::str::from_utf8(id).ok())
            .ok_or_else(|| corrupt("a due key's id"))?;
        record::decode(id, v).map_err(|e| Cause::new(format!("cold tier: job {id:?}: {e}")))
    }

    /// Jobs of `queue` from key `from` (inclusive) to `to` (exclusive), at most `limit`.
    fn scan(&self, from: Vec<u8>, to: Vec<u8>, limit: usize) -> Result<Vec<Job>, Cause> {
        let mut out = Vec::new();
        for entry in self.due.range(from..to) {
            if out.len() == limit {
                break;
            }
            let (k, v) = entry.into_inner().map_err(|e| io("read due jobs", e))?;
            out.push(self.decode_due(&k, &v)?);
        }
        Ok(out)
    }
}

impl ColdTier for ColdStore {
    fn get(&self, id: &JobId) -> Result<Option<Job>, Cause> {
        let Some(v) = self.ids.get(id.as_str()).map_err(|e| io("read an id", e))? else {
            return Ok(None);
        };
        let (run_at, queue) = located(&v).ok_or_else(|| corrupt("an id's entry"))?;
        let key = due_key(queue, run_at, id.as_str());
        match self.due.get(&key).map_err(|e| io("read a job", e))? {
            Some(rec) => self.decode_due(&key, &rec).map(Some),
            None => Err(corrupt(format_args!("job {id:?} (indexed, not stored)"))),
        }
    }

    fn due(
        &self,
        queue: &Topic,
        from: UnixMillis,
        to: UnixMillis,
        limit: usize,
    ) -> Result<Vec<Job>, Cause> {
        if from >= to {
            return Ok(Vec::new());
        }
        self.scan(
            due_key(queue.as_str(), from, ""),
            due_key(queue.as_str(), to, ""),
            limit,
        )
    }

    fn after(
        &self,
        queue: &Topic,
        after: Option<(UnixMillis, &JobId)>,
        limit: usize,
    ) -> Result<Vec<Job>, Cause> {
        let from = match after {
            // The smallest key above (run_at, id): the id followed by a zero byte.
            Some((run_at, id)) => {
                let mut k = due_key(queue.as_str(), run_at, id.as_str());
                k.push(0);
                k
            }
            None => queue_prefix(queue.as_str()),
        };
        let mut to = queue_prefix(queue.as_str());
        to.extend_from_slice(&[0xff; 9]);
        self.scan(from, to, limit)
    }

    fn first_due(&self, queue: &Topic, from: UnixMillis) -> Result<Option<UnixMillis>, Cause> {
        let mut to = queue_prefix(queue.as_str());
        to.extend_from_slice(&[0xff; 9]);
        let Some(entry) = self.due.range(due_key(queue.as_str(), from, "")..to).next() else {
            return Ok(None);
        };
        let k = entry.key().map_err(|e| io("read due jobs", e))?;
        let (_, rest) = split_queue(&k).ok_or_else(|| corrupt("a due key"))?;
        Ok(u64_at(rest))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::job::JobSpec;

    fn job(id: &str, topic: &str, run_at: UnixMillis) -> Job {
        let spec = JobSpec::new(
            Topic::parse(topic).unwrap(),
            JobId::parse(id).unwrap(),
            "body",
            run_at,
        );
        Job::new(spec, 0, 1)
    }

    fn put(j: &Job) -> (String, Option<Vec<u8>>) {
        put_as(j, 0)
    }

    /// A put numbered `seq`.
    fn put_as(j: &Job, seq: u64) -> (String, Option<Vec<u8>>) {
        let v = encode(j.clone(), false, seq);
        (j.spec.id.as_str().to_string(), Some(v))
    }

    /// A removal numbered `seq`.
    fn gone_as(id: &str, seq: u64) -> (String, Option<Vec<u8>>) {
        (id.to_string(), Some(encode_removal(seq)))
    }

    /// A removal as logged before changes were numbered.
    fn gone(id: &str) -> (String, Option<Vec<u8>>) {
        (id.to_string(), None)
    }

    #[test]
    fn applying_entries_twice_leaves_the_same_jobs_and_counts_which_survive_a_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let minute = 1_000 * SCHEDULE_BUCKET_MS;
        let (a, b) = (job("a", "t", minute + 5), job("b", "t", minute + 7));
        let moved = job("a", "t", 3 * minute);
        let entries = vec![
            put_as(&a, 1),
            put_as(&b, 2),
            put_as(&moved, 3),
            gone_as("b", 4),
            gone("never"),
        ];
        {
            let cold = ColdStore::open(dir.path()).unwrap();
            cold.apply(entries.clone(), true).unwrap();
            // A replay of the same log after a crash between the tier's sync and redb's.
            cold.apply(entries, false).unwrap();
            assert_eq!(cold.counts(), [(Topic::parse("t").unwrap(), 3 * 1_000, 1)]);
            assert_eq!(
                cold.get(&JobId::parse("a").unwrap()).unwrap(),
                Some(moved.clone())
            );
            assert_eq!(cold.get(&JobId::parse("b").unwrap()).unwrap(), None);
            let reports = cold.take_reports();
            assert_eq!(reports.len(), 1, "the replay reports nothing");
            let applied: Vec<(&str, u64)> = reports[0]
                .applied
                .iter()
                .map(|(id, seq)| (id.as_str(), *seq))
                .collect();
            // Each job's last change: the ones before it never reached the tier.
            assert_eq!(applied, [("a", 3), ("b", 4)]);
        }
        let cold = ColdStore::open(dir.path()).unwrap();
        assert_eq!(cold.counts(), [(Topic::parse("t").unwrap(), 3 * 1_000, 1)]);
        let t = Topic::parse("t").unwrap();
        assert_eq!(
            cold.due(&t, 0, u64::MAX, 10).unwrap(),
            std::slice::from_ref(&moved)
        );
        assert_eq!(cold.first_due(&t, 0).unwrap(), Some(3 * minute));
        assert_eq!(cold.first_due(&t, 3 * minute + 1).unwrap(), None);
        assert_eq!(
            cold.after(&t, Some((3 * minute, &moved.spec.id)), 10)
                .unwrap(),
            []
        );
    }

    #[test]
    fn a_snapshot_copies_the_tier_as_it_was_when_taken() {
        let dir = tempfile::tempdir().unwrap();
        let cold = ColdStore::open(dir.path()).unwrap();
        let t = Topic::parse("t").unwrap();
        let (a, b) = (job("a", "t", 60_000), job("b", "t", 120_000));
        cold.apply(vec![put(&a), put(&b)], false).unwrap();
        let snapshot = cold.snapshot();
        cold.apply(vec![gone("a"), put(&job("c", "t", 5))], false)
            .unwrap();
        let copy = dir.path().join("copy");
        assert_eq!(snapshot.copy_to(&copy.join(COLD_DIR), &|| true).unwrap(), 2);
        assert!(
            snapshot.copy_to(&copy.join(COLD_DIR), &|| true).is_err(),
            "a copy never goes over an existing tier"
        );
        drop(snapshot);
        let copied = ColdStore::open(&copy).unwrap();
        assert_eq!(copied.due(&t, 0, u64::MAX, 10).unwrap(), [a.clone(), b]);
        assert_eq!(copied.get(&a.spec.id).unwrap(), Some(a));
        let mut counts = copied.counts();
        counts.sort();
        assert_eq!(counts, [(t.clone(), 1, 1), (t, 2, 1)]);
    }

    #[test]
    fn listings_and_loads_keep_each_queue_to_itself_in_due_order() {
        let dir = tempfile::tempdir().unwrap();
        let cold = ColdStore::open(dir.path()).unwrap();
        let jobs = [
            job("x2", "q", 20),
            job("x1", "q", 20),
            job("y", "q2", 5),
            job("z", "q", 10),
            job("w", "qq", 1),
        ];
        cold.apply(jobs.iter().map(put).collect(), false).unwrap();
        let q = Topic::parse("q").unwrap();
        let ids = |js: Vec<Job>| -> Vec<String> {
            js.iter().map(|j| j.spec.id.as_str().to_string()).collect()
        };
        assert_eq!(ids(cold.after(&q, None, 10).unwrap()), ["z", "x1", "x2"]);
        let x1 = JobId::parse("x1").unwrap();
        assert_eq!(ids(cold.after(&q, Some((20, &x1)), 10).unwrap()), ["x2"]);
        assert_eq!(ids(cold.due(&q, 10, 20, 10).unwrap()), ["z"]);
        assert_eq!(ids(cold.due(&q, 0, 100, 2).unwrap()), ["z", "x1"]);
        assert_eq!(cold.first_due(&q, 11).unwrap(), Some(20));
    }
}
