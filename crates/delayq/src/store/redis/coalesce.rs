//! Group commit for Redis round trips: concurrent calls of one kind (push, remove, and reserve
//! on a one-shard server) are joined into one pipeline of function calls, one call per shard.
//!
//! Why: on a busy server most of the cost of a one-job push or finish is per round trip, not
//! per job, on both sides: a Redis `FCALL` costs a few µs before the function does anything,
//! plus a read, a write and a wake-up each in Redis and in delayq. Eight producers pushing one
//! job each then cost eight round trips where one would do.
//!
//! How: callers hand their request to a [`Coalescer`] and await the answer. A request that
//! finds the coalescer idle (nothing queued, nothing running) runs at once in its caller's
//! task, as a batch of one: no task hop, so batching costs nothing at low load. Any other is
//! queued: one task per coalescer takes the first waiting request, gives the scheduler
//! [`BATCH_TURNS`] turns (so handlers already woken can queue theirs), then takes every other
//! one already queued (up to `max_units` jobs), and runs them as one batch; at most `in_flight`
//! batches (an inline one included) run at once, and requests arriving meanwhile queue for
//! the next. Nothing waits on a timer for company, and batches grow by themselves with load. A
//! request is never split over two batches, so the jobs of one request keep their order.
//!
//! The task holds no reference to the store: it ends when the store (the last sender) is
//! dropped.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use tokio::sync::{Semaphore, mpsc, oneshot};

/// Turns of the scheduler the coalescer's task gives before it cuts a batch of queued
/// requests (docs/benchmarks.md, "Turns before a batch is cut").
const BATCH_TURNS: usize = 2;

type Waiting<R, O> = (R, oneshot::Sender<O>);
type Run<R, O> =
    Arc<dyn Fn(Vec<R>, Queued) -> Pin<Box<dyn Future<Output = Vec<O>> + Send>> + Send + Sync>;

/// Whether a batch was formed by the coalescer's task from queued requests (`true`: other
/// requests were running when they came, i.e. callers are concurrent) or is one request run
/// inline by its caller, which found the coalescer idle (`false`).
pub type Queued = bool;

/// Joins concurrent requests `R` into batches run by one function; each request gets its `O`.
pub struct Coalescer<R, O> {
    tx: mpsc::UnboundedSender<Waiting<R, O>>,
    run: Run<R, O>,
    /// One per batch that may run at once.
    slots: Arc<Semaphore>,
    /// Requests accepted and not yet answered: queued, in a batch, or running inline.
    busy: Arc<AtomicUsize>,
}

/// Counts requests in `busy` until dropped (a caller that goes away mid-call included).
struct Busy(Arc<AtomicUsize>, usize);

impl Drop for Busy {
    fn drop(&mut self) {
        self.0.fetch_sub(self.1, Ordering::SeqCst);
    }
}

impl<R: Send + 'static, O: Send + 'static> Coalescer<R, O> {
    /// Starts the batching task. `run` gets a batch (and whether it was queued, [`Queued`]) and
    /// must return one output per request, in order; `units` weighs a request (jobs in it)
    /// against `max_units`.
    pub fn spawn<F, Fut>(in_flight: usize, max_units: usize, units: fn(&R) -> usize, run: F) -> Self
    where
        F: Fn(Vec<R>, Queued) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Vec<O>> + Send + 'static,
    {
        let (tx, mut rx) = mpsc::unbounded_channel::<Waiting<R, O>>();
        let run: Run<R, O> = Arc::new(move |batch, queued| Box::pin(run(batch, queued)));
        let busy = Arc::new(AtomicUsize::new(0));
        let slots = Arc::new(Semaphore::new(in_flight.max(1)));
        let (task_run, task_busy, task_slots) = (run.clone(), busy.clone(), slots.clone());
        tokio::spawn(async move {
            loop {
                let Some(first) = rx.recv().await else {
                    return;
                };
                // Take a slot before taking the others: while every slot is busy, requests
                // pile up in the channel and form the batch.
                let Ok(slot) = task_slots.clone().acquire_owned().await else {
                    return;
                };
                // Turns of the scheduler before the batch is cut: the handlers already woken
                // (by the same burst of requests) queue theirs and join it, so a burst goes out
                // as fewer, larger batches.
                for _ in 0..BATCH_TURNS {
                    tokio::task::yield_now().await;
                }
                let mut size = units(&first.0);
                let mut batch = vec![first];
                while size < max_units {
                    match rx.try_recv() {
                        Ok(next) => {
                            size += units(&next.0);
                            batch.push(next);
                        }
                        Err(_) => break,
                    }
                }
                let running = Busy(task_busy.clone(), batch.len());
                let (requests, replies): (Vec<R>, Vec<oneshot::Sender<O>>) =
                    batch.into_iter().unzip();
                let outputs = task_run(requests, true);
                tokio::spawn(async move {
                    let outputs = outputs.await;
                    debug_assert_eq!(outputs.len(), replies.len());
                    for (reply, out) in replies.into_iter().zip(outputs) {
                        // A caller that went away does not want its answer.
                        let _ = reply.send(out);
                    }
                    drop(running);
                    drop(slot);
                });
            }
        });
        Coalescer {
            tx,
            run,
            slots,
            busy,
        }
    }

    /// Runs `request` (inline when the coalescer is idle, else queued) and waits for its
    /// output; `None` if the batch it was in was dropped without an answer (the runtime is
    /// shutting down).
    pub async fn call(&self, request: R) -> Option<O> {
        // From here the request is counted in `busy` until it is answered (by the batch that
        // runs it, when queued).
        let idle = self.busy.fetch_add(1, Ordering::SeqCst) == 0;
        if idle && let Ok(_slot) = self.slots.clone().try_acquire_owned() {
            let _busy = Busy(self.busy.clone(), 1);
            return (self.run)(vec![request], false).await.into_iter().next();
        }
        let (reply, answer) = oneshot::channel();
        if self.tx.send((request, reply)).is_err() {
            self.busy.fetch_sub(1, Ordering::SeqCst);
            return None;
        }
        answer.await.ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    #[tokio::test]
    async fn a_lone_request_runs_at_once_and_gets_its_own_answer() {
        let c = Coalescer::spawn(
            1,
            100,
            |_: &u32| 1,
            |batch: Vec<u32>, _| async move { batch.into_iter().map(|x| x * 10).collect::<Vec<_>>() },
        );
        assert_eq!(c.call(4).await, Some(40));
        assert_eq!(c.call(5).await, Some(50));
    }

    /// Idle: the request runs in its caller's task (no hop). Busy: it is queued and run by the
    /// coalescer's task once the slot is free. Each batch answers with the task its function
    /// was called in.
    #[tokio::test]
    async fn only_a_request_that_finds_the_coalescer_idle_runs_in_its_caller_s_task() {
        let (gate, gate_rx) = tokio::sync::watch::channel(false);
        let started = Arc::new(AtomicUsize::new(0));
        let count = started.clone();
        let c = Arc::new(Coalescer::spawn(
            1,
            100,
            |_: &bool| 1,
            move |batch: Vec<bool>, _| {
                count.fetch_add(1, Ordering::SeqCst);
                let task = tokio::task::try_id();
                let mut gate = gate_rx.clone();
                async move {
                    if batch.contains(&true) {
                        let _ = gate.wait_for(|open| *open).await;
                    }
                    batch.iter().map(|_| task).collect::<Vec<_>>()
                }
            },
        ));
        let caller = tokio::task::try_id();
        assert_eq!(c.call(false).await, Some(caller));

        // A first request holds the coalescer busy until the gate opens.
        let held = tokio::spawn({
            let c = c.clone();
            async move { (tokio::task::try_id(), c.call(true).await) }
        });
        while c.busy.load(Ordering::SeqCst) == 0 {
            tokio::task::yield_now().await;
        }
        let queued = tokio::spawn({
            let c = c.clone();
            async move { c.call(false).await }
        });
        settle().await;
        assert_eq!(
            started.load(Ordering::SeqCst),
            2,
            "ran beside the held batch"
        );
        gate.send(true).unwrap();
        let (held_caller, held_ran_in) = held.await.unwrap();
        assert_eq!(held_ran_in, Some(held_caller));
        let ran_in = queued.await.unwrap().flatten();
        assert!(ran_in.is_some() && ran_in != held_caller && ran_in != caller);
    }

    /// A coalescer (one batch in flight, `max_units`) whose batches echo their requests and
    /// log them, each holding its slot until the gate opens; plus a first request already in
    /// flight, holding it.
    struct Gated<R: Send + 'static> {
        c: Arc<Coalescer<R, R>>,
        seen: Arc<Mutex<Vec<Vec<R>>>>,
        gate: tokio::sync::watch::Sender<bool>,
        first: tokio::task::JoinHandle<Option<R>>,
    }

    async fn gated<R>(max_units: usize, units: fn(&R) -> usize, first: R) -> Gated<R>
    where
        R: Clone + Send + Sync + 'static,
    {
        let seen: Arc<Mutex<Vec<Vec<R>>>> = Arc::default();
        let (gate, gate_rx) = tokio::sync::watch::channel(false);
        let log = seen.clone();
        let c = Arc::new(Coalescer::spawn(
            1,
            max_units,
            units,
            move |batch: Vec<R>, _| {
                let log = log.clone();
                let mut gate = gate_rx.clone();
                async move {
                    log.lock().unwrap().push(batch.clone());
                    let _ = gate.wait_for(|open| *open).await;
                    batch
                }
            },
        ));
        let first = tokio::spawn({
            let c = c.clone();
            async move { c.call(first).await }
        });
        while seen.lock().unwrap().is_empty() {
            tokio::task::yield_now().await;
        }
        Gated {
            c,
            seen,
            gate,
            first,
        }
    }

    impl<R: Clone + Send + Sync + 'static> Gated<R> {
        fn call(&self, r: R) -> tokio::task::JoinHandle<Option<R>> {
            let c = self.c.clone();
            tokio::spawn(async move { c.call(r).await })
        }
    }

    async fn settle() {
        for _ in 0..50 {
            tokio::task::yield_now().await;
        }
    }

    #[tokio::test]
    async fn requests_queued_while_a_batch_runs_form_the_next_batch_in_order() {
        let g = gated(100, |_: &u32| 1, 0).await;
        let rest: Vec<_> = (1..=5).map(|i| g.call(i)).collect();
        // Let every caller queue before the slot frees.
        settle().await;
        g.gate.send(true).unwrap();
        assert_eq!(g.first.await.unwrap(), Some(0));
        for (i, h) in rest.into_iter().enumerate() {
            assert_eq!(h.await.unwrap(), Some(i as u32 + 1));
        }
        assert_eq!(*g.seen.lock().unwrap(), vec![vec![0], vec![1, 2, 3, 4, 5]]);
    }

    #[tokio::test]
    async fn a_batch_stops_at_max_units_but_never_splits_a_request() {
        let g = gated(5, |r: &usize| *r, 1).await;
        let mut rest = Vec::new();
        for units in [3, 4, 2] {
            rest.push(g.call(units));
            settle().await;
        }
        g.gate.send(true).unwrap();
        g.first.await.unwrap();
        for h in rest {
            h.await.unwrap();
        }
        // 3 + 4 reaches 5: the 4 is taken whole, the 2 waits for the next batch.
        assert_eq!(*g.seen.lock().unwrap(), vec![vec![1], vec![3, 4], vec![2]]);
    }
}
