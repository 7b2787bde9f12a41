//! Finishes answered before Redis has run them: the finish of a job this instance handed out
//! (alone or in a batch) is acknowledged at once and its removal joins the next remove batch
//! (`remove.rs`).
//!
//! Why: with one job per request a consumer's cycle is a reserve (mostly answered from memory,
//! `read_ahead.rs`) and a finish, whose Redis round trip it waited for; under load that wait
//! set the pace of every consumer. At-least-once allows a finish acknowledged before it is
//! durable: if the instance dies before the removal reaches Redis, the job is delivered again
//! when its TTR ends, as if the consumer had died before finishing (docs/reliability.md).
//!
//! Which finishes: a job a reserve of this instance handed out (`Calls::reserve`,
//! `reserve_job`), named by no other call since ([`Finishing::handed`]). Any other finish (a
//! delayed or ready job, a job another instance handed out, one a release or touch named
//! since) waits for Redis as before and answers the state it found.
//!
//! What a user sees stays as if the finish had run when it was answered, on this instance:
//! - every call of this instance that names a job ([`Finishing::settle`]: push, get, the
//!   by-id transitions, a second finish or a delete) waits for that job's removal in flight,
//!   and every read over many jobs (stats, listings:
//!   [`Finishing::settle_all`]) for all of them; `stop` waits for them all;
//! - the removal takes away only the job it was answered for: it names the job's push stamp
//!   (`seq`), and a record with another stamp (the id pushed again, by this instance after
//!   the wait or by another one meanwhile) is left alone (`remove.lua`).
//!
//! While removals fail with Redis unreachable ([`Finishing::reached`]), no finish is answered
//! early: each waits for Redis and fails as any other call does, so a consumer learns that its
//! finish did not arrive, as before.
//!
//! Another instance sees the job for about one more round trip: its listings and stats may
//! still count it as reserved, and a push there with the same id in reject mode may find it.
//! If the removal fails (Redis unreachable), it is logged and the job is delivered again when
//! its TTR ends.

use crate::job::{Job, JobId, UnixMillis};
use foldhash::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use tokio::sync::watch;

/// Most jobs remembered as handed out: beyond it (consumers that never finish, say) a finish
/// of a job not remembered waits for Redis, as before.
const MAX_HANDED: usize = 65_536;

/// The jobs this instance handed out, and the finishes answered and not yet run.
#[derive(Default)]
pub(super) struct Finishing {
    state: Mutex<State>,
    /// The last removal could not reach Redis: finishes wait for Redis until one does.
    unreachable: AtomicBool,
}

#[derive(Default)]
struct State {
    /// A job handed out: its push stamp (which names this life of the id) and the end of its
    /// reservation (after which it is forgotten when room is needed).
    handed: HashMap<JobId, (u64, UnixMillis)>,
    /// Removals answered and not yet run: each closes its channel when done.
    in_flight: HashMap<JobId, watch::Receiver<()>>,
}

/// A finish answered early: the job's push stamp (the removal takes away only a record with
/// this stamp) and the channel to close, with [`Finishing::done`], once the removal has run.
pub(super) type Early = (u64, watch::Sender<()>);

impl Finishing {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Remembers `jobs` as handed out by a reserve at `now`: room is made by forgetting the
    /// jobs whose reservation ended before `now`; past [`MAX_HANDED`] a job is not remembered.
    pub fn handed(&self, jobs: &[Job], now: UnixMillis) {
        if jobs.is_empty() {
            return;
        }
        let mut st = self.lock();
        if st.handed.len() + jobs.len() > MAX_HANDED {
            st.handed.retain(|_, (_, until)| *until > now);
        }
        for j in jobs {
            if st.handed.len() >= MAX_HANDED {
                break;
            }
            let until = j.reserved_until.unwrap_or(now);
            st.handed.insert(j.spec.id.clone(), (j.seq, until));
        }
    }

    /// A finish of `id`: if this instance handed the job out (and nothing named it since),
    /// it is taken off the handed jobs and marked in flight, and the caller may answer at once
    /// and remove it in the background; else `None`.
    pub fn early(&self, id: &JobId) -> Option<Early> {
        if self.unreachable.load(Ordering::Relaxed) {
            return None;
        }
        let mut st = self.lock();
        let (seq, _) = st.handed.remove(id)?;
        let (tx, rx) = watch::channel(());
        st.in_flight.insert(id.clone(), rx);
        Some((seq, tx))
    }

    /// Whether a removal reached Redis (answered, whatever it found) or could not: while the
    /// last one could not, no finish is answered early.
    pub fn reached(&self, reached: bool) {
        self.unreachable.store(!reached, Ordering::Relaxed);
    }

    /// The removal of an early finish has run (or failed): the calls waiting on it go on.
    pub fn done(&self, id: &JobId, tx: watch::Sender<()>) {
        let mut st = self.lock();
        // Only this removal's entry: a later early finish of the same id has its own.
        if st
            .in_flight
            .get(id)
            .is_some_and(|rx| rx.same_channel(&tx.subscribe()))
        {
            st.in_flight.remove(id);
        }
        drop(st);
        drop(tx);
    }

    /// Before a call names `ids`: forgets them as handed out (the call may change the job, so
    /// a later finish waits for Redis) and waits until the removals in flight of any of them
    /// are done.
    pub async fn settle(&self, ids: impl IntoIterator<Item = &JobId>) {
        let waits: Vec<watch::Receiver<()>> = {
            let mut st = self.lock();
            if st.handed.is_empty() && st.in_flight.is_empty() {
                return;
            }
            ids.into_iter()
                .filter_map(|id| {
                    st.handed.remove(id);
                    st.in_flight.get(id).cloned()
                })
                .collect()
        };
        wait(waits).await;
    }

    /// Waits until every removal in flight now is done.
    pub async fn settle_all(&self) {
        let waits: Vec<watch::Receiver<()>> = self.lock().in_flight.values().cloned().collect();
        wait(waits).await;
    }
}

/// Waits for each channel to close (its sender dropped).
async fn wait(waits: Vec<watch::Receiver<()>>) {
    for mut rx in waits {
        // `changed` fails once the sender is gone, which is what is waited for; nothing is
        // ever sent.
        while rx.changed().await.is_ok() {}
    }
}
