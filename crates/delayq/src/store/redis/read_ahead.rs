//! Read-ahead on a one-shard server: when consumers reserve faster than one reserve call at a
//! time can serve them, a reserve batch (`reserve.rs` `run_batch`) takes up to [`AHEAD`] times
//! as many jobs again as it was asked for, and the next reserves of those topics are answered
//! from what it holds, without a round trip to Redis.
//!
//! Why: with one job per request, a consumer's `reserve` and `finish` are each a round trip
//! to Redis on top of the consumer's own; under load the reserve's is what a consumer waits for
//! most, and a reserve call of one job costs Redis several times what a job costs in a larger
//! call. Read-ahead serves busy consumers from memory and makes the reserve calls larger.
//!
//! What a held job is: reserved in Redis, at the time of the batch that took it (attempts + 1,
//! reserved until that time + TTR), by a call like any other, so it is never handed to two
//! consumers, on this instance or any other. Only the consumer that gets it is decided later.
//! Bounds, so that read-ahead never changes what a user sees for longer than a moment:
//! - only a batch of requests that queued behind others reads ahead (`coalesce.rs` `Queued`):
//!   a reserve that finds none running (a lone consumer, the dispatcher serving its waiters,
//!   the callback deliverer at a quiet moment) runs as it is;
//! - held jobs go first to reserves for the same topics in the same preference order, and to
//!   any reserve of their topic that finds nothing else;
//! - at most [`MAX_HELD`] jobs per topic list;
//! - a job no reserve took within [`HOLD`] is given back by the sweeper (`unreserve.lua`:
//!   ready again, its attempts as before, its place in the queue kept), as is at once a held
//!   job that one of this instance's calls names (release, touch, bury, kick, reschedule,
//!   reserve-by-id: the call then finds it ready; finish and delete remove it as it is) and
//!   every held job of a topic whose flow control this instance changes.
//!
//! What it costs: a job may be handed out after a higher-priority job of the same topics that
//! became ready while it was held, and some of its TTR (about [`HOLD`] at most) has run when
//! its consumer gets it; while held it counts as reserved in the stats; and if the instance
//! dies, its held jobs are delivered again once their TTR ends, as any reserved job's
//! (docs/reliability.md).

use crate::job::{Job, JobId, Topic};
use std::collections::VecDeque;
use std::sync::Mutex;
use std::time::{Duration, Instant};
use tokio::sync::Notify;

/// How long a job is held for a consumer before the sweeper gives it back.
pub(super) const HOLD: Duration = Duration::from_millis(50);

/// A batch reads ahead up to this many times the jobs its requests asked for.
pub(super) const AHEAD: usize = 4;

/// The most jobs held for one topic list.
pub(super) const MAX_HELD: usize = 64;

/// Jobs reserved ahead, per topic list, in delivery order.
#[derive(Default)]
pub(super) struct ReadAhead {
    lists: Mutex<Vec<Held>>,
    /// Woken when jobs are held: the sweeper sleeps while none are.
    kept: Notify,
}

struct Held {
    topics: Vec<Topic>,
    jobs: VecDeque<HeldJob>,
}

/// Where `job`'s queue comes in `topics` (a topic list in preference order), if it does.
pub(super) fn preference(topics: &[Topic], job: &Job) -> Option<usize> {
    topics.iter().position(|t| {
        let (name, callback) = t.split_queue();
        name == job.spec.topic.as_str() && callback == job.spec.is_pushed()
    })
}

/// Puts a reply made of held and freshly reserved jobs in the order a reserve of `topics`
/// promises: every job of a topic before any of a later one (each part is in order, but a job
/// held while its topic had nothing better may meet a job of an earlier topic that became
/// ready since). Within a topic the parts keep their order.
pub(super) fn in_preference_order(topics: &[Topic], jobs: &mut [Job]) {
    sort_by_preference(topics, jobs, |j| j);
}

/// Stable-sorts `items` by where each one's job comes in `topics` (a topic list in preference
/// order); with one topic they already are.
fn sort_by_preference<T>(topics: &[Topic], items: &mut [T], job: impl Fn(&T) -> &Job) {
    if topics.len() < 2 {
        return;
    }
    items.sort_by_key(|i| preference(topics, job(i)).unwrap_or(usize::MAX));
}

/// A job reserved ahead, held since `since`.
pub(super) struct HeldJob {
    pub job: Job,
    since: Instant,
}

impl ReadAhead {
    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Held>> {
        self.lists.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Up to `max` jobs held for exactly `topics` (the same topics in the same preference
    /// order), in order.
    pub fn take(&self, topics: &[Topic], max: usize) -> Vec<Job> {
        let mut lists = self.lock();
        let Some(held) = lists.iter_mut().find(|h| h.topics == topics) else {
            return Vec::new();
        };
        let n = max.min(held.jobs.len());
        held.jobs.drain(..n).map(|h| h.job).collect()
    }

    /// Up to `max` jobs of any of `topics` held for other topic lists: what a reserve that
    /// found nothing else takes, so that no job is kept from a consumer that asks for it.
    pub fn take_matching(&self, topics: &[Topic], max: usize) -> Vec<Job> {
        let mut lists = self.lock();
        let mut out = Vec::new();
        for held in lists.iter_mut() {
            let mut i = 0;
            while i < held.jobs.len() && out.len() < max {
                if preference(topics, &held.jobs[i].job).is_some() {
                    out.extend(held.jobs.remove(i).map(|h| h.job));
                } else {
                    i += 1;
                }
            }
        }
        out
    }

    /// How many more jobs may be held for `topics`.
    pub fn room(&self, topics: &[Topic]) -> usize {
        let lists = self.lock();
        let held = lists.iter().find(|h| h.topics == topics);
        MAX_HELD - held.map_or(0, |h| h.jobs.len()).min(MAX_HELD)
    }

    /// Holds `jobs` (just reserved by a batch) for the next reserves of `topics`, up to
    /// [`MAX_HELD`] (two batches in flight may both have counted on the same room): returns
    /// those beyond it, to be given back.
    pub fn keep(&self, topics: &[Topic], jobs: Vec<Job>) -> Vec<HeldJob> {
        if jobs.is_empty() {
            return Vec::new();
        }
        let since = Instant::now();
        let mut lists = self.lock();
        let i = match lists.iter().position(|h| h.topics == topics) {
            Some(i) => i,
            None => {
                lists.push(Held {
                    topics: topics.to_vec(),
                    jobs: VecDeque::new(),
                });
                lists.len() - 1
            }
        };
        let held = &mut lists[i].jobs;
        held.extend(jobs.into_iter().map(|job| HeldJob { job, since }));
        // Each batch's jobs are in preference order, but two batches' together need not be
        // (the second's best topic had jobs again): the held jobs stay in the order a
        // reserve of `topics` promises, so that any prefix taken is in it too.
        sort_by_preference(topics, held.make_contiguous(), |h| &h.job);
        let over = held.split_off(held.len().min(MAX_HELD));
        drop(lists);
        self.kept.notify_one();
        over.into()
    }

    /// Stops holding the jobs `ids` names and returns them (to be given back).
    pub fn forget(&self, ids: &[JobId]) -> Vec<HeldJob> {
        let mut lists = self.lock();
        let mut out = Vec::new();
        for held in lists.iter_mut() {
            let mut i = 0;
            while i < held.jobs.len() {
                if ids.contains(&held.jobs[i].job.spec.id) {
                    out.extend(held.jobs.remove(i));
                } else {
                    i += 1;
                }
            }
        }
        out
    }

    /// Stops holding every job of a list that names `topic` or its callback queue (its flow
    /// control changed) and returns them.
    pub fn forget_topic(&self, topic: &Topic) -> Vec<HeldJob> {
        let mut lists = self.lock();
        let mut out = Vec::new();
        let names = |h: &&mut Held| h.topics.iter().any(|t| t.split_queue().0 == topic.as_str());
        for held in lists.iter_mut().filter(names) {
            out.extend(held.jobs.drain(..));
        }
        out
    }

    /// Takes the jobs held for [`HOLD`] or longer (all of them when `all`).
    pub fn expired(&self, all: bool) -> Vec<HeldJob> {
        let mut lists = self.lock();
        let mut out = Vec::new();
        for held in lists.iter_mut() {
            while held
                .jobs
                .front()
                .is_some_and(|h| all || h.since.elapsed() >= HOLD)
            {
                out.extend(held.jobs.pop_front());
            }
        }
        lists.retain(|h| !h.jobs.is_empty());
        out
    }

    /// When the longest-held job will have been held for [`HOLD`]; `None` while none is held.
    fn next_expiry(&self) -> Option<Instant> {
        let lists = self.lock();
        let oldest = lists
            .iter()
            .filter_map(|h| h.jobs.front())
            .map(|h| h.since)
            .min();
        oldest.map(|since| since + HOLD)
    }

    /// Waits until a held job has been held for [`HOLD`] (the earliest instant
    /// [`ReadAhead::expired`] has something to take), sleeping while none is held.
    pub async fn until_one_expires(&self) {
        loop {
            let kept = self.kept.notified();
            if let Some(at) = self.next_expiry() {
                tokio::time::sleep_until(at.into()).await;
                return;
            }
            kept.await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::job::{JobSpec, JobState};

    fn job(id: &str) -> Job {
        let spec = JobSpec::new(topic("t"), JobId::parse(id).unwrap(), "", 0);
        let mut j = Job::new(spec, 0, 1);
        j.state = JobState::Reserved;
        j
    }

    fn topic(t: &str) -> Topic {
        Topic::parse(t).unwrap()
    }

    fn ids(jobs: &[Job]) -> Vec<&str> {
        jobs.iter().map(|j| j.spec.id.as_str()).collect()
    }

    #[test]
    fn a_reply_puts_every_job_of_a_topic_before_any_of_a_later_one() {
        let of = |t: &str, id: &str| {
            let mut j = job(id);
            j.spec.topic = topic(t);
            j
        };
        // Held for [a, b] while a had nothing ready, then an a reserved afresh, then a b held
        // for another list.
        let mut reply = vec![of("b", "b1"), of("b", "b2"), of("a", "a1"), of("b", "b3")];
        in_preference_order(&[topic("a"), topic("b")], &mut reply);
        assert_eq!(ids(&reply), ["a1", "b1", "b2", "b3"]);
        in_preference_order(&[topic("b"), topic("a")], &mut reply);
        assert_eq!(ids(&reply), ["b1", "b2", "b3", "a1"]);
    }

    #[test]
    fn held_jobs_go_in_order_to_the_same_topic_list_only() {
        let r = ReadAhead::default();
        let t = vec![topic("t")];
        let other = vec![topic("t"), topic("u")];
        r.keep(&t, vec![job("a"), job("b"), job("c")]);
        assert_eq!(r.room(&t), MAX_HELD - 3);
        assert!(r.take(&other, 5).is_empty());
        assert_eq!(ids(&r.take(&t, 2)), ["a", "b"]);
        assert_eq!(ids(&r.take(&t, 2)), ["c"]);
        assert!(r.take(&t, 2).is_empty());
    }

    #[test]
    fn jobs_held_by_two_batches_are_taken_in_preference_order() {
        let r = ReadAhead::default();
        let ab = vec![topic("a"), topic("b")];
        let of = |t: &str, id: &str| {
            let mut j = job(id);
            j.spec.topic = topic(t);
            j
        };
        // The first batch found a empty; by the second, a had jobs again.
        r.keep(&ab, vec![of("b", "b1"), of("b", "b2")]);
        r.keep(&ab, vec![of("a", "a1"), of("b", "b3")]);
        assert_eq!(ids(&r.take(&ab, 2)), ["a1", "b1"]);
        assert_eq!(ids(&r.take(&ab, 5)), ["b2", "b3"]);
    }

    #[test]
    fn jobs_beyond_the_most_held_are_returned_to_be_given_back() {
        let r = ReadAhead::default();
        let t = vec![topic("t")];
        let many =
            |from: usize, n: usize| (from..from + n).map(|i| job(&format!("j{i}"))).collect();
        assert!(r.keep(&t, many(0, MAX_HELD - 1)).is_empty());
        let over = r.keep(&t, many(MAX_HELD - 1, 3));
        let over: Vec<&str> = over.iter().map(|h| h.job.spec.id.as_str()).collect();
        assert_eq!(over, [format!("j{MAX_HELD}"), format!("j{}", MAX_HELD + 1)]);
        assert_eq!(r.room(&t), 0);
    }

    #[test]
    fn a_named_job_is_no_longer_held() {
        let r = ReadAhead::default();
        let t = vec![topic("t")];
        r.keep(&t, vec![job("a"), job("b"), job("c")]);
        let gone = r.forget(&[JobId::parse("b").unwrap(), JobId::parse("x").unwrap()]);
        assert_eq!(gone.len(), 1);
        assert_eq!(gone[0].job.spec.id.as_str(), "b");
        assert_eq!(ids(&r.take(&t, 5)), ["a", "c"]);
    }

    #[test]
    fn a_reserve_of_other_topics_takes_the_held_jobs_of_its_own() {
        let r = ReadAhead::default();
        let ab = vec![topic("a"), topic("b")];
        let jobs = [("a", "a1"), ("b", "b1"), ("a", "a2")].map(|(t, i)| {
            let mut j = job(i);
            j.spec.topic = topic(t);
            j
        });
        r.keep(&ab, jobs.into());
        assert!(r.take(&[topic("a")], 5).is_empty());
        assert_eq!(ids(&r.take_matching(&[topic("a")], 5)), ["a1", "a2"]);
        assert_eq!(ids(&r.take(&ab, 5)), ["b1"]);
    }

    #[test]
    fn jobs_held_too_long_expire_oldest_first() {
        let r = ReadAhead::default();
        let t = vec![topic("t")];
        r.keep(&t, vec![job("a")]);
        std::thread::sleep(HOLD + Duration::from_millis(5));
        r.keep(&t, vec![job("b")]);
        let expired = r.expired(false);
        assert_eq!(expired.len(), 1);
        assert_eq!(expired[0].job.spec.id.as_str(), "a");
        assert_eq!(ids(&r.take(&t, 5)), ["b"]);
        assert!(r.next_expiry().is_none(), "nothing held");
        r.keep(&t, vec![job("c")]);
        assert_eq!(r.expired(true).len(), 1, "all of them at a stop");
    }
}
