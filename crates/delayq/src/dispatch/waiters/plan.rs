//! The serving plan: which waiters one store call serves, how many jobs it asks for, and who
//! gets which job. No store, no locks, no async: the serving task (waiters.rs) shows a [`Pass`]
//! the wait list, performs the [`Batch`] it gets back (one `reserve`), and hands the store's
//! answer back to the pass, which says who gets which job.
//!
//! The rules:
//! - **First come, first served.** Waiters are looked at in arrival order; the oldest waiter in
//!   scope leads the next batch, and the jobs of a batch go to its oldest member first.
//! - **One store call per topic list.** Later waiters asking for exactly the lead's topic list
//!   join its batch, until the batch asks for [`MAX_BATCH_JOBS`]. Between waiters of
//!   different, overlapping lists the order is that of each list's oldest waiter.
//! - **A batch asks for what its members asked for**, their `max` summed, and each member gets
//!   at most its own `max`, only from the batch's topics.
//! - **A newcomer never overtakes an older waiter of its topics.** A pass for newcomers also
//!   covers every older waiter sharing a topic with them, so a job that became ready just
//!   before the pass still goes to the oldest waiter.
//! - **Each waiter is looked at once per pass.** A store answer short of what a batch asked for
//!   means its topics have nothing more ready: the rest of the pass skips waiters whose topics
//!   are all among those. Waiters that stopped waiting are never served, only dropped.
//!
//! Not here: the wait list itself, the store call, delivering (waiters.rs).

use super::WaiterId;
use crate::job::Topic;
use foldhash::{HashSet, HashSetExt};

/// Most jobs one batch asks the store for: a batch takes no more members once it asks for this
/// many.
pub(super) const MAX_BATCH_JOBS: usize = 1000;

/// Which waiters one serving pass looks at.
pub(super) enum Scope {
    /// Those interested in a topic that gained ready jobs.
    Topic(Topic),
    /// Those interested in one of the topics of the waiters registered since the last pass: the
    /// newcomers, and before them every older waiter of the same topics.
    Newcomers(HashSet<Topic>),
    /// All of them (resync, lagged events, the safety re-check).
    All,
}

impl Scope {
    fn covers(&self, topics: &[Topic]) -> bool {
        match self {
            Scope::Topic(t) => topics.contains(t),
            Scope::Newcomers(theirs) => topics.iter().any(|t| theirs.contains(t)),
            Scope::All => true,
        }
    }
}

/// A registered waiter, as the plan sees it.
pub(super) struct Candidate<'a> {
    pub(super) id: WaiterId,
    pub(super) topics: &'a [Topic],
    /// Most jobs it takes.
    pub(super) max: usize,
    /// Its caller stopped waiting: it is dropped from the list, never served.
    pub(super) gone: bool,
}

/// One `reserve`: up to `ask` jobs of `topics` for `members`, oldest first.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Batch {
    pub(super) topics: Vec<Topic>,
    /// Each member and the most jobs it takes, in arrival order.
    pub(super) members: Vec<(WaiterId, usize)>,
    /// The members' `max`, summed.
    pub(super) ask: usize,
}

/// What one step of a pass decided.
#[derive(Debug)]
pub(super) struct Step {
    /// The next store call, or `None`: the pass is over.
    pub(super) batch: Option<Batch>,
    /// Waiters looked at by this step (the batch's members, and those skipped because their
    /// topics were all found empty): no longer newcomers.
    pub(super) looked_at: Vec<WaiterId>,
    /// Waiters that stopped waiting, to drop from the list.
    pub(super) gone: Vec<WaiterId>,
}

/// One serving pass: the batches it makes, one step at a time, and what it learned from the
/// store's answers so far.
pub(super) struct Pass {
    scope: Scope,
    /// Topics the store had nothing more ready for, within this pass.
    empty_topics: HashSet<Topic>,
    /// Waiters already looked at in this pass.
    looked_at: HashSet<WaiterId>,
}

impl Pass {
    pub(super) fn new(scope: Scope) -> Pass {
        Pass {
            scope,
            empty_topics: HashSet::new(),
            looked_at: HashSet::new(),
        }
    }

    /// The next batch, from the waiters in arrival order.
    pub(super) fn next_batch<'a>(
        &mut self,
        waiters: impl IntoIterator<Item = Candidate<'a>>,
    ) -> Step {
        let mut step = Step {
            batch: None,
            looked_at: Vec::new(),
            gone: Vec::new(),
        };
        for w in waiters {
            if self.looked_at.contains(&w.id) {
                continue;
            }
            if w.gone {
                step.gone.push(w.id);
                continue;
            }
            if !self.scope.covers(w.topics) {
                continue;
            }
            match &mut step.batch {
                None => {
                    // Served now, or its topics were just found empty: either way seen.
                    self.looked_at.insert(w.id);
                    step.looked_at.push(w.id);
                    if w.topics.iter().all(|t| self.empty_topics.contains(t)) {
                        continue;
                    }
                    step.batch = Some(Batch {
                        topics: w.topics.to_vec(),
                        members: vec![(w.id, w.max)],
                        ask: w.max,
                    });
                }
                Some(batch) if batch.topics == w.topics && batch.ask < MAX_BATCH_JOBS => {
                    self.looked_at.insert(w.id);
                    step.looked_at.push(w.id);
                    batch.members.push((w.id, w.max));
                    batch.ask += w.max;
                }
                Some(_) => {}
            }
        }
        step
    }

    /// Who gets which of the `jobs` the store answered `batch` with: the oldest member first,
    /// each at most its `max`, in the store's order. Members left without a job are not in the
    /// result; they were looked at and wait for a later pass.
    pub(super) fn share<J>(&mut self, batch: Batch, jobs: Vec<J>) -> Vec<(WaiterId, Vec<J>)> {
        if jobs.len() < batch.ask {
            self.empty_topics.extend(batch.topics);
        }
        let mut jobs = jobs.into_iter();
        let mut shares = Vec::new();
        for (id, max) in batch.members {
            let mine: Vec<J> = jobs.by_ref().take(max).collect();
            if mine.is_empty() {
                break;
            }
            shares.push((id, mine));
        }
        shares
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn topic(s: &str) -> Topic {
        Topic::parse(s).unwrap()
    }

    /// A wait list as the serving task shows it, in arrival order: (id, topics, max, gone).
    struct List(Vec<(u64, Vec<Topic>, usize, bool)>);

    impl List {
        /// Waiters of these (topics, max), with ids 0, 1, 2... in arrival order.
        fn of(waiters: &[(&[&str], usize)]) -> List {
            List(
                waiters
                    .iter()
                    .enumerate()
                    .map(|(i, (topics, max))| {
                        let topics = topics.iter().map(|t| topic(t)).collect();
                        (i as u64, topics, *max, false)
                    })
                    .collect(),
            )
        }

        fn candidates(&self) -> impl Iterator<Item = Candidate<'_>> {
            self.0.iter().map(|(id, topics, max, gone)| Candidate {
                id: WaiterId(*id),
                topics,
                max: *max,
                gone: *gone,
            })
        }

        /// Removes the waiters that got jobs, as delivering does.
        fn served(&mut self, shares: &[(WaiterId, Vec<&str>)]) {
            self.0
                .retain(|(id, ..)| !shares.iter().any(|(got, _)| got.0 == *id));
        }
    }

    fn ids(members: &[(WaiterId, usize)]) -> Vec<u64> {
        members.iter().map(|(id, _)| id.0).collect()
    }

    fn topics(batch: &Batch) -> Vec<&str> {
        batch.topics.iter().map(|t| t.as_str()).collect()
    }

    fn batch(pass: &mut Pass, list: &List) -> Option<Batch> {
        pass.next_batch(list.candidates()).batch
    }

    #[test]
    fn waiters_of_one_topic_list_share_one_store_call_in_arrival_order() {
        let list = List::of(&[(&["t"], 1), (&["t"], 2), (&["t"], 1)]);
        let mut pass = Pass::new(Scope::Topic(topic("t")));
        let b = batch(&mut pass, &list).unwrap();
        assert_eq!(topics(&b), ["t"]);
        assert_eq!(ids(&b.members), [0, 1, 2]);
        assert_eq!(b.ask, 4, "the batch asks for what its members asked for");
    }

    #[test]
    fn jobs_go_to_the_oldest_waiter_first_each_at_most_its_max() {
        let list = List::of(&[(&["t"], 2), (&["t"], 1), (&["t"], 3)]);
        let mut pass = Pass::new(Scope::All);
        let b = batch(&mut pass, &list).unwrap();
        let shares = pass.share(b, vec!["j1", "j2", "j3", "j4"]);
        assert_eq!(
            shares,
            [
                (WaiterId(0), vec!["j1", "j2"]),
                (WaiterId(1), vec!["j3"]),
                (WaiterId(2), vec!["j4"]),
            ]
        );
    }

    #[test]
    fn a_short_answer_leaves_the_newest_waiters_without_jobs_until_a_later_pass() {
        let mut list = List::of(&[(&["t"], 1), (&["t"], 1), (&["t"], 1)]);
        let mut pass = Pass::new(Scope::All);
        let b = batch(&mut pass, &list).unwrap();
        let shares = pass.share(b, vec!["j1"]);
        assert_eq!(shares, [(WaiterId(0), vec!["j1"])]);
        list.served(&shares);
        assert_eq!(
            batch(&mut pass, &list),
            None,
            "the others were looked at: not asked for again in this pass"
        );
        let mut next = Pass::new(Scope::Topic(topic("t")));
        assert_eq!(ids(&batch(&mut next, &list).unwrap().members), [1, 2]);
    }

    #[test]
    fn a_waiter_is_only_served_from_its_own_topics() {
        let list = List::of(&[(&["a"], 1), (&["b", "c"], 1), (&["c"], 1)]);
        let mut pass = Pass::new(Scope::Topic(topic("c")));
        let first = batch(&mut pass, &list).unwrap();
        assert_eq!(topics(&first), ["b", "c"]);
        assert_eq!(ids(&first.members), [1], "a batch is one exact topic list");
        pass.share(first, vec!["j1"]);
        let second = batch(&mut pass, &list).unwrap();
        assert_eq!(topics(&second), ["c"]);
        assert_eq!(ids(&second.members), [2]);
        pass.share(second, vec!["j2"]);
        assert_eq!(
            batch(&mut pass, &list),
            None,
            "the waiter of topic a alone is not in a pass for c"
        );
    }

    #[test]
    fn overlapping_topic_lists_are_served_in_order_of_their_oldest_waiter() {
        let list = List::of(&[(&["a"], 1), (&["a", "b"], 1), (&["a"], 1)]);
        let mut pass = Pass::new(Scope::Topic(topic("a")));
        let first = batch(&mut pass, &list).unwrap();
        assert_eq!(topics(&first), ["a"]);
        assert_eq!(ids(&first.members), [0, 2]);
        pass.share(first, vec!["j1", "j2"]);
        let second = batch(&mut pass, &list).unwrap();
        assert_eq!(topics(&second), ["a", "b"]);
        assert_eq!(ids(&second.members), [1]);
    }

    #[test]
    fn a_batch_stops_taking_members_once_it_asks_for_the_most_jobs() {
        let list = List::of(&vec![(&["t"][..], 1); MAX_BATCH_JOBS + 5]);
        let mut pass = Pass::new(Scope::All);
        let first = batch(&mut pass, &list).unwrap();
        assert_eq!(first.ask, MAX_BATCH_JOBS);
        assert_eq!(first.members.len(), MAX_BATCH_JOBS);
        let jobs = vec!["j"; MAX_BATCH_JOBS];
        pass.share(first, jobs);
        let second = batch(&mut pass, &list).unwrap();
        let later: Vec<u64> = (MAX_BATCH_JOBS as u64..MAX_BATCH_JOBS as u64 + 5).collect();
        assert_eq!(
            ids(&second.members),
            later,
            "the rest, still in arrival order"
        );
    }

    #[test]
    fn one_large_waiter_is_asked_for_in_full() {
        let list = List::of(&[(&["t"], MAX_BATCH_JOBS + 10), (&["t"], 1)]);
        let mut pass = Pass::new(Scope::All);
        let first = batch(&mut pass, &list).unwrap();
        assert_eq!(ids(&first.members), [0]);
        assert_eq!(first.ask, MAX_BATCH_JOBS + 10);
    }

    #[test]
    fn a_newcomer_does_not_overtake_an_older_waiter_of_its_topic() {
        // 0 and 1 are older; 2 is the newcomer, on topic t.
        let list = List::of(&[(&["u"], 1), (&["t"], 1), (&["t"], 1)]);
        let newcomers = Scope::Newcomers([topic("t")].into_iter().collect());
        let mut pass = Pass::new(newcomers);
        let b = batch(&mut pass, &list).unwrap();
        assert_eq!(ids(&b.members), [1, 2], "the older waiter of t first");
        let shares = pass.share(b, vec!["j1"]);
        assert_eq!(shares, [(WaiterId(1), vec!["j1"])]);
        assert_eq!(
            batch(&mut pass, &list),
            None,
            "the waiter of u is not the newcomer's business"
        );
    }

    #[test]
    fn topics_found_empty_are_not_asked_for_again_in_the_pass() {
        let list = List::of(&[(&["a", "b"], 1), (&["a"], 1), (&["b"], 1), (&["b", "c"], 1)]);
        let mut pass = Pass::new(Scope::All);
        let first = batch(&mut pass, &list).unwrap();
        assert_eq!(topics(&first), ["a", "b"]);
        assert!(pass.share(first, Vec::<&str>::new()).is_empty());
        let step = pass.next_batch(list.candidates());
        let second = step.batch.unwrap();
        assert_eq!(topics(&second), ["b", "c"], "c may still have jobs");
        assert_eq!(
            step.looked_at,
            [WaiterId(1), WaiterId(2), WaiterId(3)],
            "the skipped waiters were looked at too"
        );
    }

    #[test]
    fn waiters_that_stopped_waiting_are_dropped_not_served() {
        let mut list = List::of(&[(&["t"], 1), (&["t"], 1)]);
        list.0[0].3 = true;
        let mut pass = Pass::new(Scope::All);
        let step = pass.next_batch(list.candidates());
        assert_eq!(step.gone, [WaiterId(0)]);
        assert_eq!(ids(&step.batch.unwrap().members), [1]);
    }

    #[test]
    fn a_pass_with_no_waiter_in_scope_asks_for_nothing() {
        let list = List::of(&[(&["a"], 1)]);
        let mut pass = Pass::new(Scope::Newcomers(HashSet::new()));
        let step = pass.next_batch(list.candidates());
        assert_eq!(step.batch, None);
        assert!(step.looked_at.is_empty());
    }
}
