//! The engine's side of a cold tier: delayed jobs due beyond the memory window live on disk
//! only (the embedded store's `embedded/cold.rs`), and the engine keeps of them just their
//! counts by queue and minute (so `stats`, the listings' totals and the "what fires next"
//! chart need no disk read).
//!
//! How a job moves:
//! - **Out.** A change that leaves a job delayed and due at or after [`Cold::spill_from`] (the
//!   window's far edge) leaves it out of the indexes and records `Change::PutCold` (with
//!   `Change::Remove` of its hot record, if it may have one) instead of `Change::Put`. Until
//!   the checkpoint has written it to the tier it waits in `pending`, where every read finds
//!   it first; the checkpoint's report ([`Engine::cold_applied`]) drops it from there if that
//!   write is still its last.
//! - **In, ahead of time.** The timer's pass (`tick`) loads every cold job due before
//!   `now + window` once the earliest one is within half the window, in chunks of at most
//!   [`LOAD_CHUNK`] (the pass reports `next_due = now` while more is to load). A loaded job
//!   keeps its copy on disk until its first change, which removes it (`Change::RemoveCold`);
//!   its promotion is no change, as for any job, so a restart loads and promotes it again.
//! - **In, on demand.** A call naming a job the engine does not hold (delete, reschedule,
//!   bury, kick, a push replacing it) reads it from the tier first ([`Engine::fault_in`]); `get`
//!   and a push's check that the id is free read it without loading it.
//!
//! Two sets keep memory and disk apart while the checkpoint has not caught up: `origin`, the
//! jobs in the indexes that may have a copy on disk (a later change removes that copy), and
//! `gone`, the ids whose copy on disk is stale (removed or changed in memory since): no read
//! believes it until a checkpoint reports that removal applied. Each write and removal is
//! numbered (`Cold::changes`) and only the report of a job's last one counts: a checkpoint
//! keeps only the last change of a job it holds, and an earlier removal's report must not
//! make a copy readable that a later removal, still on its way, takes away. So a job is never
//! in memory twice, never read back after its removal, and never loaded early: a loaded job
//! is promoted by the timer at its due time like any other.

use super::{Change, Effects, Engine, Stored, bump_minute};
use crate::job::{Job, JobId, JobState, Topic, UnixMillis};
use crate::store::{Cause, SCHEDULE_BUCKET_MS, StoreError, StoreEvent, StoreResult};
use foldhash::{HashMap, HashSet};
use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::Arc;

/// Most cold jobs one timer pass loads: a pass holds the engine's lock.
pub const LOAD_CHUNK: usize = 2_000;

/// Where cold jobs are read from (`embedded/cold.rs`). Reads only: the tier is written by the
/// store's checkpoint from the changes the engine records.
pub trait ColdTier: Send + Sync {
    /// The job as the tier holds it.
    fn get(&self, id: &JobId) -> Result<Option<Job>, Cause>;
    /// Jobs of `queue` due in `[from, to)`, in due order (then id), at most `limit`.
    fn due(
        &self,
        queue: &Topic,
        from: UnixMillis,
        to: UnixMillis,
        limit: usize,
    ) -> Result<Vec<Job>, Cause>;
    /// Jobs of `queue` after `(run_at, id)` (from the first when `None`), in due order, at most
    /// `limit`.
    fn after(
        &self,
        queue: &Topic,
        after: Option<(UnixMillis, &JobId)>,
        limit: usize,
    ) -> Result<Vec<Job>, Cause>;
    /// The due time of `queue`'s first job due at or after `from`.
    fn first_due(&self, queue: &Topic, from: UnixMillis) -> Result<Option<UnixMillis>, Cause>;
}

/// The engine's state of its cold tier.
pub(super) struct Cold {
    tier: Arc<dyn ColdTier>,
    window: u64,
    /// Every cold job due before this is in memory.
    loaded_until: UnixMillis,
    /// The latest `now` a transition was given.
    seen: UnixMillis,
    /// No cold job is due before this (it may be earlier than the first one, never later).
    next: Option<UnixMillis>,
    origin: HashSet<JobId>,
    /// Ids whose copy on disk is stale, with the number of the removal to wait for.
    gone: HashMap<JobId, u64>,
    /// Writes and removals numbered so far.
    changes: u64,
    /// Cold jobs by queue and the minute they fall due (`pending` included).
    minutes: HashMap<Topic, BTreeMap<u64, u64>>,
    /// Jobs gone cold whose write to the tier no checkpoint has reported yet, with the
    /// write's number.
    pending: HashMap<JobId, (u64, Job)>,
    /// Where the sweep of the jobs loaded from the hot records at open goes on (`None`: done):
    /// those beyond the window (kept in memory by a delayq without a window, or with a larger
    /// one) go to disk, a chunk per timer pass.
    sweep: Option<(UnixMillis, Option<JobId>)>,
}

impl std::fmt::Debug for Cold {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cold")
            .field("window", &self.window)
            .field("loaded_until", &self.loaded_until)
            .field("origin", &self.origin.len())
            .field("gone", &self.gone.len())
            .finish_non_exhaustive()
    }
}

impl Cold {
    /// Delayed jobs due at or after this go to disk.
    fn spill_from(&self) -> UnixMillis {
        self.loaded_until.max(self.seen.saturating_add(self.window))
    }

    /// When the timer must load next: half a window before the first cold job is due.
    fn load_at(&self) -> Option<UnixMillis> {
        self.next.map(|n| n.saturating_sub(self.window / 2))
    }

    /// Whether the tier's copy of `id` may be read (memory holds no newer state of it, in
    /// `pending` or in the indexes, which the caller checks).
    fn readable(&self, id: &JobId) -> bool {
        !self.gone.contains_key(id) && !self.pending.contains_key(id)
    }

    /// Moves `next` to `run_at` if it is earlier; `true` if it moved.
    fn note_next(&mut self, run_at: UnixMillis) -> bool {
        let earlier = self.next.is_none_or(|n| run_at < n);
        if earlier {
            self.next = Some(run_at);
        }
        earlier
    }
}

fn unavailable(cause: Cause) -> StoreError {
    StoreError::Unavailable(cause)
}

/// The topic whose schedule counts a queue's jobs count in (a callback queue's topic).
fn topic_of(queue: &Topic) -> Topic {
    queue.callback_topic().unwrap_or_else(|| queue.clone())
}

impl Engine {
    /// Gives the engine a cold tier holding the delayed jobs due `window_ms` or more ahead,
    /// with the counts the tier holds at open (queue, minute, jobs).
    pub fn with_cold(
        mut self,
        tier: Arc<dyn ColdTier>,
        window_ms: u64,
        counts: Vec<(Topic, u64, u64)>,
    ) -> Engine {
        let next = counts
            .iter()
            .map(|(_, m, _)| m.saturating_mul(SCHEDULE_BUCKET_MS))
            .min();
        self.cold = Some(Box::new(Cold {
            tier,
            window: window_ms.max(1),
            loaded_until: 0,
            seen: 0,
            next,
            origin: HashSet::default(),
            gone: HashMap::default(),
            changes: 0,
            minutes: HashMap::default(),
            pending: HashMap::default(),
            sweep: Some((0, None)),
        }));
        for (queue, minute, n) in counts {
            self.count_cold(&queue, minute, n, true);
        }
        self
    }

    /// Notes the time a transition was given (the window's far edge moves with it).
    pub(super) fn observe(&mut self, now: UnixMillis) {
        if let Some(c) = self.cold.as_deref_mut() {
            c.seen = c.seen.max(now);
        }
    }

    /// Adds (`add`) or removes `n` cold jobs of `queue` due in `minute` to or from every
    /// count: the queue's delayed count, the schedule's minute counts and the tier's own.
    fn count_cold(&mut self, queue: &Topic, minute: u64, n: u64, add: bool) {
        self.count_due(&topic_of(queue), minute, n, add);
        if let Some(c) = self.cold.as_deref_mut() {
            let m = c.minutes.entry(queue.clone()).or_default();
            bump_minute(m, minute, n, add);
            if m.is_empty() {
                c.minutes.remove(queue);
            }
        }
        let counts = self.counts.entry(queue.clone()).or_default();
        counts.delayed = if add {
            counts.delayed + n
        } else {
            counts.delayed.saturating_sub(n)
        };
        if counts.total() == 0 {
            self.counts.remove(queue);
        }
    }

    /// Takes a cold job (read from the tier or taken from `pending`) into the indexes, unless
    /// memory holds a newer state of it; `fx` gets the events of its entry (the timer's new
    /// head).
    fn adopt(&mut self, mut j: Job, fx: &mut Effects) {
        self.count_cold(
            &j.spec.queue(),
            j.spec.run_at / SCHEDULE_BUCKET_MS,
            1,
            false,
        );
        if let Some(c) = self.cold.as_deref_mut() {
            c.origin.insert(j.spec.id.clone());
        }
        self.enter(&mut j, fx);
        self.jobs.insert(Stored(Box::new(j)));
    }

    /// Brings job `id` into the indexes from `pending` or the tier, if it is cold.
    pub(super) fn fault_in(&mut self, id: &JobId) -> StoreResult<()> {
        let Some(c) = self.cold.as_deref_mut() else {
            return Ok(());
        };
        if self.jobs.contains(id) {
            return Ok(());
        }
        let j = match c.pending.remove(id) {
            Some((_, j)) => j,
            None if c.readable(id) => match c.tier.get(id).map_err(unavailable)? {
                Some(j) => j,
                None => return Ok(()),
            },
            None => return Ok(()),
        };
        // Its events are the caller's to cause: it changes the job next.
        self.adopt(j, &mut Effects::default());
        Ok(())
    }

    /// Whether a job `id` exists, in memory or on disk (without loading it).
    pub(super) fn exists(&self, id: &JobId) -> StoreResult<bool> {
        if self.jobs.contains(id) {
            return Ok(true);
        }
        match self.cold.as_deref() {
            Some(c) if c.pending.contains_key(id) => Ok(true),
            Some(c) if c.readable(id) => Ok(c.tier.get(id).map_err(unavailable)?.is_some()),
            _ => Ok(false),
        }
    }

    /// A job not in the indexes, from `pending` or the tier.
    pub(super) fn get_cold(&self, id: &JobId) -> StoreResult<Job> {
        match self.cold.as_deref() {
            Some(c) if let Some((_, j)) = c.pending.get(id) => Ok(j.clone()),
            Some(c) if c.readable(id) => c
                .tier
                .get(id)
                .map_err(unavailable)?
                .ok_or(StoreError::NotFound),
            _ => Err(StoreError::NotFound),
        }
    }

    /// Sends `j` cold if it is delayed beyond the window (`hot_record`: it may have a hot
    /// record to remove); gives it back otherwise.
    pub(super) fn spill(&mut self, j: Job, hot_record: bool, fx: &mut Effects) -> Option<Job> {
        let Some(c) = self.cold.as_deref_mut() else {
            return Some(j);
        };
        if j.state != JobState::Delayed || j.spec.run_at < c.spill_from() {
            return Some(j);
        }
        let id = j.spec.id.clone();
        // Its copy on disk, if any, is this one from now on.
        let had_copy = c.origin.remove(&id) | c.gone.remove(&id).is_some();
        let (queue, run_at) = (j.spec.queue(), j.spec.run_at);
        if c.note_next(run_at)
            && let Some(t) = c.load_at()
        {
            fx.events.push(StoreEvent::Due(t));
        }
        c.changes += 1;
        let seq = c.changes;
        c.pending.insert(id.clone(), (seq, j.clone()));
        if hot_record {
            fx.changes.push(Change::Remove(id));
        }
        fx.changes.push(Change::PutCold {
            job: j,
            fresh: !had_copy,
            seq,
        });
        self.count_cold(&queue, run_at / SCHEDULE_BUCKET_MS, 1, true);
        None
    }

    /// Records a job's new state in the hot records, removing its copy on disk if it may have
    /// one.
    pub(super) fn record(&mut self, j: Job, fx: &mut Effects) {
        self.drop_copy(&j.spec.id, fx);
        fx.changes.push(Change::Put(j));
    }

    /// Records a job's removal, and its copy on disk's.
    pub(super) fn record_removal(&mut self, id: &JobId, fx: &mut Effects) {
        fx.changes.push(Change::Remove(id.clone()));
        self.drop_copy(id, fx);
    }

    /// Removes the copy on disk of a job in the indexes, if it may have one; no read believes
    /// that copy until a checkpoint reports it removed.
    fn drop_copy(&mut self, id: &JobId, fx: &mut Effects) {
        if let Some(c) = self.cold.as_deref_mut()
            && c.origin.remove(id)
        {
            c.changes += 1;
            c.gone.insert(id.clone(), c.changes);
            fx.changes.push(Change::RemoveCold(id.clone(), c.changes));
        }
    }

    /// Takes what checkpoints applied to the tier (job ids and the numbers of their changes,
    /// in order): a pending job whose last write it was lives on disk only; an id whose last
    /// removal it was may be read from the tier again. Earlier changes' reports say nothing.
    pub fn cold_applied(&mut self, applied: impl IntoIterator<Item = (JobId, u64)>) {
        let Some(c) = self.cold.as_deref_mut() else {
            return;
        };
        for (id, seq) in applied {
            if c.pending.get(&id).is_some_and(|(last, _)| *last == seq) {
                c.pending.remove(&id);
            } else if c.gone.get(&id) == Some(&seq) {
                c.gone.remove(&id);
            }
        }
    }

    /// Sends cold up to [`LOAD_CHUNK`] delayed jobs beyond the window that the indexes held
    /// since open (kept in memory by a delayq without a window, or a larger one); `true` when
    /// there may be more.
    fn sweep(&mut self, fx: &mut Effects) -> bool {
        let Some(c) = self.cold.as_deref() else {
            return false;
        };
        let Some((t, after)) = c.sweep.clone() else {
            return false;
        };
        let from = t.max(c.spill_from());
        let lower = match after {
            Some(id) if t >= from => Bound::Excluded((t, id)),
            _ => Bound::Included((from, JobId::lowest())),
        };
        let keys: Vec<(UnixMillis, JobId)> = self
            .timeline
            .range((lower, Bound::Unbounded))
            .take(LOAD_CHUNK)
            .cloned()
            .collect();
        let more = keys.len() == LOAD_CHUNK;
        for (_, id) in &keys {
            if self
                .jobs
                .get(id)
                .is_some_and(|s| s.0.state == JobState::Delayed)
                && let Some(stored) = self.jobs.take(id)
            {
                self.unindex(&stored.0);
                // Beyond the edge (the range starts there): it goes cold.
                self.put_as(*stored.0, true, fx);
            }
        }
        if let Some(c) = self.cold.as_deref_mut() {
            c.sweep = match (more, keys.last()) {
                (true, Some((t, id))) => Some((*t, Some(id.clone()))),
                _ => None,
            };
        }
        more
    }

    /// The timer pass's share: loads the cold jobs due within the window once the first is
    /// within half of it. Returns when the next pass must come for it (`now` when a chunk
    /// was not enough).
    pub(super) fn load_ahead(&mut self, now: UnixMillis, fx: &mut Effects) -> Option<UnixMillis> {
        self.observe(now);
        if self.sweep(fx) {
            return Some(now);
        }
        let c = self.cold.as_deref()?;
        if c.load_at().is_none_or(|t| t > now) {
            return c.load_at();
        }
        let (from, to) = (c.loaded_until, now.saturating_add(c.window));
        let last_minute = to.div_ceil(SCHEDULE_BUCKET_MS);
        let queues: Vec<Topic> = c
            .minutes
            .iter()
            .filter(|(_, m)| m.first_key_value().is_some_and(|(&f, _)| f <= last_minute))
            .map(|(q, _)| q.clone())
            .collect();
        let tier = c.tier.clone();
        let loaded = (|| -> Result<(Vec<Job>, UnixMillis), Cause> {
            let mut got = Vec::new();
            for q in &queues {
                got.extend(tier.due(q, from, to, LOAD_CHUNK + 1)?);
            }
            if got.len() <= LOAD_CHUNK {
                return Ok((got, to));
            }
            got.sort_by_key(|j| j.spec.run_at);
            let cut = got[LOAD_CHUNK].spec.run_at;
            if cut > from {
                got.retain(|j| j.spec.run_at < cut);
                return Ok((got, cut));
            }
            // More than a chunk due in one millisecond: all of them at once.
            let mut all = Vec::new();
            for q in &queues {
                all.extend(tier.due(q, from, from + 1, usize::MAX)?);
            }
            Ok((all, from + 1))
        })();
        let (jobs, until) = match loaded {
            Ok(l) => l,
            Err(cause) => {
                tracing::error!(%cause, "cannot load due jobs from the cold tier; retrying");
                return Some(now.saturating_add(1_000));
            }
        };
        for j in jobs {
            let Some(c) = self.cold.as_deref() else {
                break;
            };
            if !self.jobs.contains(&j.spec.id) && c.readable(&j.spec.id) {
                self.adopt(j, fx);
            }
        }
        // Pending jobs in the range: taken from there (their write to the tier goes on).
        let c = self.cold.as_deref_mut()?;
        let due: Vec<JobId> = c
            .pending
            .values()
            .filter(|(_, j)| j.spec.run_at < until)
            .map(|(_, j)| j.spec.id.clone())
            .collect();
        for id in due {
            if let Some((_, j)) = self.cold.as_deref_mut().and_then(|c| c.pending.remove(&id)) {
                self.adopt(j, fx);
            }
        }
        let next = queues
            .iter()
            .map(|q| tier.first_due(q, until))
            .collect::<Result<Vec<_>, _>>();
        let c = self.cold.as_deref_mut()?;
        c.loaded_until = until;
        c.next = match next {
            Ok(firsts) => firsts.into_iter().flatten().min(),
            // Read again at the next pass.
            Err(_) => Some(until),
        };
        // Queues with no cold job in the range were not read: their first minute bounds
        // `next` (not a read queue's, whose `first_due` is exact: its first minute may start
        // before `until` and would bring the timer back at once); so do the pending jobs.
        let mut bounds: Vec<UnixMillis> = c
            .minutes
            .iter()
            .filter(|(q, _)| !queues.contains(q))
            .filter_map(|(_, m)| m.first_key_value())
            .map(|(&f, _)| f.saturating_mul(SCHEDULE_BUCKET_MS).max(until))
            .collect();
        bounds.extend(c.pending.values().map(|(_, j)| j.spec.run_at));
        for b in bounds {
            c.note_next(b);
        }
        if until < to {
            return Some(now);
        }
        c.load_at()
    }

    /// How many jobs are cold (`None`: no cold tier).
    pub(super) fn on_disk(&self) -> Option<u64> {
        let c = self.cold.as_deref()?;
        Some(c.minutes.values().flat_map(BTreeMap::values).sum())
    }

    /// The due time of the first cold job.
    pub(super) fn first_cold(&self) -> Option<UnixMillis> {
        let c = self.cold.as_deref()?;
        let pending = c.pending.values().map(|(_, j)| j.spec.run_at).min();
        c.minutes
            .keys()
            .filter_map(|q| self.tier_page(c, q, None, 1).first().map(|j| j.spec.run_at))
            .chain(pending)
            .min()
    }

    /// Cold jobs of `queue` for a listing of its delayed jobs after `after`: at most `limit`,
    /// in due order, from `pending` and the tier, none whose copy on disk is stale.
    pub(super) fn list_cold(
        &self,
        queue: &Topic,
        after: Option<(UnixMillis, &JobId)>,
        limit: usize,
    ) -> Vec<Job> {
        let Some(c) = self.cold.as_deref() else {
            return Vec::new();
        };
        if !c.minutes.contains_key(queue) {
            return Vec::new();
        }
        let past = |j: &Job| after.is_none_or(|(t, id)| (j.spec.run_at, &j.spec.id) > (t, id));
        let mut out: Vec<Job> = c
            .pending
            .values()
            .map(|(_, j)| j)
            .filter(|j| j.spec.queue() == *queue && past(j))
            .cloned()
            .collect();
        out.extend(self.tier_page(c, queue, after, limit));
        out.sort_by_key(|j| (j.spec.run_at, j.spec.id.clone()));
        out.truncate(limit);
        out
    }

    /// Up to `limit` of `queue`'s jobs in the tier after `after`, in due order, none that
    /// memory holds a newer state of.
    fn tier_page(
        &self,
        c: &Cold,
        queue: &Topic,
        after: Option<(UnixMillis, &JobId)>,
        limit: usize,
    ) -> Vec<Job> {
        let key = |j: &Job| (j.spec.run_at, j.spec.id.clone());
        let mut out = Vec::new();
        let mut cursor = after.map(|(t, id)| (t, id.clone()));
        loop {
            let page = match c
                .tier
                .after(queue, cursor.as_ref().map(|(t, id)| (*t, id)), limit)
            {
                Ok(p) => p,
                Err(cause) => {
                    tracing::error!(%cause, "cannot list jobs of the cold tier");
                    break;
                }
            };
            let full = page.len() == limit;
            cursor = page.last().map(key);
            out.extend(
                page.into_iter()
                    .filter(|j| !self.jobs.contains(&j.spec.id) && c.readable(&j.spec.id)),
            );
            if out.len() >= limit || !full {
                break;
            }
        }
        out.truncate(limit);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::job::JobSpec;
    use crate::store::PushMode;
    use crate::store::embedded::cold::{self as tier, ColdStore};

    const NOW: UnixMillis = 1_000_000;

    /// A job of topic `t` due `delay_ms` after [`NOW`].
    fn spec(id: &str, body: &str, delay_ms: u64) -> JobSpec {
        let (topic, id) = (Topic::parse("t").unwrap(), JobId::parse(id).unwrap());
        JobSpec::new(topic, id, body, NOW + delay_ms)
    }

    /// A checkpoint of `batches` (each one a commit's changes, in order): their cold entries
    /// applied to the tier, its report given to the engine.
    fn checkpoint(engine: &mut Engine, tier: &ColdStore, batches: Vec<Effects>) {
        let mut entries = Vec::new();
        for fx in batches {
            for change in fx.changes {
                match change {
                    Change::PutCold { job, fresh, seq } => {
                        let id = job.spec.id.as_str().to_string();
                        entries.push((id, Some(tier::encode(job, fresh, seq))));
                    }
                    Change::RemoveCold(id, seq) => {
                        let id = id.as_str().to_string();
                        entries.push((id, Some(tier::encode_removal(seq))));
                    }
                    _ => {}
                }
            }
        }
        tier.apply(entries, true).unwrap();
        for report in tier.take_reports() {
            engine.cold_applied(report.applied);
        }
    }

    /// A removal reported late (its job pushed again, gone cold and removed again meanwhile)
    /// must not make the tier's copy of the second push readable while the second removal
    /// is not applied yet.
    #[test]
    fn an_earlier_removal_reported_does_not_revive_a_copy_a_later_removal_takes_away() {
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(ColdStore::open(dir.path()).unwrap());
        let mut engine = Engine::new().with_cold(store.clone(), 1_000, Vec::new());
        let x = JobId::parse("x").unwrap();
        let push = |engine: &mut Engine, body: &str| {
            let mut fx = Effects::default();
            let got = engine.push(spec("x", body, 60_000), PushMode::Reject, NOW, &mut fx);
            assert_eq!(got, Ok(crate::store::PushOutcome::Created));
            fx
        };
        let delete = |engine: &mut Engine| {
            let mut fx = Effects::default();
            assert_eq!(engine.delete(&x, &mut fx), Ok(JobState::Delayed));
            fx
        };
        let first = push(&mut engine, "first");
        checkpoint(&mut engine, &store, vec![first]);
        assert_eq!(engine.on_disk(), Some(1));

        let deleted = delete(&mut engine);
        let second = push(&mut engine, "second");
        let deleted_again = delete(&mut engine);
        // The first removal and the second write reach the tier; the second removal not yet.
        checkpoint(&mut engine, &store, vec![deleted, second]);
        assert_eq!(
            store.get(&x).unwrap().map(|j| j.spec.body),
            Some("second".into())
        );
        assert_eq!(engine.get(&x), Err(StoreError::NotFound));
        assert_eq!(engine.exists(&x), Ok(false));

        checkpoint(&mut engine, &store, vec![deleted_again]);
        assert_eq!(store.get(&x).unwrap(), None);
        assert_eq!(engine.get(&x), Err(StoreError::NotFound));
        assert_eq!(engine.on_disk(), Some(0));
    }
}
