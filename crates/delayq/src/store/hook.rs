//! One way to wrap a store: [`Hooked`] forwards every [`Store`] call to the store it wraps
//! and calls a [`StoreHook`] around each, with the call ([`Call`]) and its answer ([`Reply`]).
//! A wrapper (the metrics, the journal, a test store that fails on demand) is a hook: it says
//! what to do around a call and never forwards one itself. The forwarding is derived with each
//! call from its declaration (`store_calls!` in store/mod.rs, store/define.rs), so a new call
//! is forwarded for every wrapper without a line here.
//!
//! Not here: what any hook does (metrics.rs counts; the journal writes; tests make calls
//! fail). Hooks are generic parameters, not trait objects, so a hook that only looks (the
//! metrics) costs a call per method and no allocation.

use crate::job::JobSpec;
use crate::store::{Store, StoreError, StoreEvent, StoreResult};
use std::future::Future;
use std::sync::Arc;
use tokio::sync::broadcast;

pub use crate::store::{Call, Reply};

/// What a wrapper does around each call of the store it wraps (see [`Hooked`]). Every method
/// has a default that changes nothing.
pub trait StoreHook: Send + Sync + 'static {
    /// Called before each call. An `Err` is the call's answer: the wrapped store is not asked
    /// and [`StoreHook::after`] is not called.
    fn before(&self, _call: &Call<'_>) -> StoreResult<()> {
        Ok(())
    }

    /// Called once the wrapped store answered a call, with the answer.
    fn after(&self, _call: &Call<'_>, _result: Result<Reply<'_>, &StoreError>) {}

    /// Whether [`StoreHook::settle`] is given the jobs of each `PushBatch`. They are moved
    /// into the wrapped store, so [`Hooked`] keeps a copy for the hook only when this is
    /// `true`; a hook that leaves it `false` costs nothing per push.
    const SEES_PUSHED_JOBS: bool = false;

    /// Called after [`StoreHook::after`], with the same answer; the caller gets its answer
    /// once the returned future completes, and an `Err` from it is the answer instead.
    /// For a hook that must finish work before a transition is acknowledged (the journal
    /// writes its rows here). `pushed` is the jobs of a `PushBatch`, in order, when
    /// [`StoreHook::SEES_PUSHED_JOBS`] is set; empty otherwise. The default completes at
    /// once, so a hook that only looks adds no await.
    fn settle(
        &self,
        _call: &Call<'_>,
        _result: Result<Reply<'_>, &StoreError>,
        _pushed: &[JobSpec],
    ) -> impl Future<Output = StoreResult<()>> + Send + 'static {
        std::future::ready(Ok(()))
    }

    /// [`Store::kind`] of the wrapper: the wrapped store's unless the hook names another.
    fn kind(&self, inner: &dyn Store) -> &'static str {
        inner.kind()
    }

    /// [`Store::subscribe`] of the wrapper: the wrapped store's events unless the hook hands
    /// out others.
    fn subscribe(&self, inner: &dyn Store) -> broadcast::Receiver<StoreEvent> {
        inner.subscribe()
    }
}

/// A hook shared with whoever else holds it (to read what it counted, or to switch it).
impl<H: StoreHook> StoreHook for Arc<H> {
    fn before(&self, call: &Call<'_>) -> StoreResult<()> {
        (**self).before(call)
    }

    fn after(&self, call: &Call<'_>, result: Result<Reply<'_>, &StoreError>) {
        (**self).after(call, result)
    }

    const SEES_PUSHED_JOBS: bool = H::SEES_PUSHED_JOBS;

    fn settle(
        &self,
        call: &Call<'_>,
        result: Result<Reply<'_>, &StoreError>,
        pushed: &[JobSpec],
    ) -> impl Future<Output = StoreResult<()>> + Send + 'static {
        (**self).settle(call, result, pushed)
    }

    fn kind(&self, inner: &dyn Store) -> &'static str {
        (**self).kind(inner)
    }

    fn subscribe(&self, inner: &dyn Store) -> broadcast::Receiver<StoreEvent> {
        (**self).subscribe(inner)
    }
}

/// A [`Store`] that forwards every call to `inner`, with `hook` around each. `finish` and
/// `finish_batch` are forwarded as themselves, so the wrapped store's own batching is kept.
pub struct Hooked<H> {
    inner: Arc<dyn Store>,
    hook: H,
}

impl<H: StoreHook> Hooked<H> {
    pub fn new(inner: Arc<dyn Store>, hook: H) -> Hooked<H> {
        Hooked { inner, hook }
    }

    pub fn hook(&self) -> &H {
        &self.hook
    }

    /// The wrapped store.
    pub(super) fn inner(&self) -> &dyn Store {
        &*self.inner
    }
}

// `impl Store for Hooked<H>` is derived from `store_calls!` (store/define.rs): each call is the
// hook's `before`, then the wrapped store's call (unless `before` refused it), then the hook's
// `after` and `settle` with its answer.

#[cfg(test)]
mod tests {
    use super::*;
    use crate::job::{JobId, JobState, Topic, UnixMillis};
    use crate::store::memory::MemoryStore;
    use crate::store::{PushMode, PushOutcome, Reschedule, Stats};
    use std::sync::Mutex;
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

    fn topic(name: &str) -> Topic {
        Topic::parse(name).unwrap()
    }

    fn id(name: &str) -> JobId {
        JobId::parse(name).unwrap()
    }

    fn spec(name: &str, run_at: UnixMillis) -> JobSpec {
        JobSpec::new(topic("t"), id(name), "body", run_at)
    }

    /// Writes down every call it sees, and every answer.
    #[derive(Default)]
    struct Recorder(Mutex<Vec<String>>);

    impl StoreHook for Recorder {
        fn before(&self, call: &Call<'_>) -> StoreResult<()> {
            self.0.lock().unwrap().push(format!("before {call:?}"));
            Ok(())
        }

        fn after(&self, call: &Call<'_>, result: Result<Reply<'_>, &StoreError>) {
            let line = format!("after {call:?}: {result:?}");
            self.0.lock().unwrap().push(line);
        }
    }

    impl Recorder {
        /// Asserts that since the last check the hook saw `call` once, before and after, and
        /// `result` as its answer.
        fn saw(&self, call: Call<'_>, result: Result<Reply<'_>, &StoreError>) {
            let seen = std::mem::take(&mut *self.0.lock().unwrap());
            let want = [
                format!("before {call:?}"),
                format!("after {call:?}: {result:?}"),
            ];
            assert_eq!(seen, want);
        }
    }

    #[tokio::test]
    async fn the_hook_sees_each_call_once_with_its_arguments_and_its_answer() {
        let rec = Arc::new(Recorder::default());
        let store = Hooked::new(Arc::new(MemoryStore::new()), rec.clone());
        let (t, a, b) = (topic("t"), id("a"), id("b"));

        let pushed = store
            .push_batch(vec![spec("a", 0), spec("b", 50)], PushMode::Reject, 10)
            .await
            .unwrap();
        // The jobs are moved into the store: the hook sees how many.
        let call = Call::PushBatch {
            jobs: 2,
            mode: PushMode::Reject,
            now: 10,
        };
        let reply = Reply::PushBatch {
            jobs: 2,
            mode: PushMode::Reject,
            now: 10,
            out: &pushed,
        };
        rec.saw(call, Ok(reply));
        // `push` is a batch of one.
        let again = store.push(spec("a", 0), PushMode::Reject, 11).await;
        assert_eq!(again, Err(StoreError::Exists));
        let call = Call::PushBatch {
            jobs: 1,
            mode: PushMode::Reject,
            now: 11,
        };
        let reply = Reply::PushBatch {
            jobs: 1,
            mode: PushMode::Reject,
            now: 11,
            out: &vec![Err(StoreError::Exists)],
        };
        rec.saw(call, Ok(reply));

        let topics = [t.clone()];
        let jobs = store.reserve(&topics, 5, 20).await.unwrap();
        assert_eq!(jobs.len(), 1);
        let call = Call::Reserve {
            topics: &topics,
            max: 5,
            now: 20,
        };
        let reply = Reply::Reserve {
            topics: &topics,
            max: 5,
            now: 20,
            out: &jobs,
        };
        rec.saw(call, Ok(reply));
        let job = store.touch(&a, 30).await.unwrap();
        let reply = Reply::Touch {
            id: &a,
            now: 30,
            out: &job,
        };
        rec.saw(Call::Touch { id: &a, now: 30 }, Ok(reply));
        let job = store.release(&a, Some(1_000), 40).await.unwrap();
        let call = Call::Release {
            id: &a,
            delay_ms: Some(1_000),
            now: 40,
        };
        let reply = Reply::Release {
            id: &a,
            delay_ms: Some(1_000),
            now: 40,
            out: &job,
        };
        rec.saw(call, Ok(reply));
        let change = Reschedule {
            run_at: 60,
            ..Reschedule::default()
        };
        let rescheduled = store.reschedule(&a, change, 45).await.unwrap();
        // The change is moved into the store: the hook sees its new due time.
        let call = Call::Reschedule {
            id: &a,
            change: 60,
            now: 45,
        };
        let reply = Reply::Reschedule {
            id: &a,
            change: 60,
            now: 45,
            out: &rescheduled,
        };
        rec.saw(call, Ok(reply));
        let job = store.bury(&a, None, 50).await.unwrap();
        let reply = Reply::Bury {
            id: &a,
            priority: None,
            now: 50,
            out: &job,
        };
        rec.saw(
            Call::Bury {
                id: &a,
                priority: None,
                now: 50,
            },
            Ok(reply),
        );
        let job = store.kick(&a, 55).await.unwrap();
        let reply = Reply::Kick {
            id: &a,
            now: 55,
            out: &job,
        };
        rec.saw(Call::Kick { id: &a, now: 55 }, Ok(reply));
        store.bury(&a, None, 56).await.unwrap();
        rec.0.lock().unwrap().clear();
        assert_eq!(store.kick_topic(&t, 10, 57).await, Ok(1));
        let call = Call::KickTopic {
            topic: &t,
            max: 10,
            now: 57,
        };
        let reply = Reply::KickTopic {
            topic: &t,
            max: 10,
            now: 57,
            out: &1,
        };
        rec.saw(call, Ok(reply));
        let job = store.get(&a).await.unwrap();
        let reply = Reply::Get { id: &a, out: &job };
        rec.saw(Call::Get { id: &a }, Ok(reply));
        let stats = store.stats().await.unwrap();
        rec.saw(Call::Stats {}, Ok(Reply::Stats { out: &stats }));
        let tick = store.tick(100, 10).await.unwrap();
        assert_eq!(tick.promoted, 1);
        let call = Call::Tick {
            now: 100,
            limit: 10,
        };
        let reply = Reply::Tick {
            now: 100,
            limit: 10,
            out: &tick,
        };
        rec.saw(call, Ok(reply));
        store.ping().await.unwrap();
        rec.saw(Call::Ping {}, Ok(Reply::Ping { out: &() }));

        let state = store.finish(&a).await.unwrap();
        let reply = Reply::Finish {
            id: &a,
            out: &state,
        };
        rec.saw(Call::Finish { id: &a }, Ok(reply));
        // One call for the batch: the wrapped store's own, not one finish per id.
        let ids = [b.clone(), a.clone()];
        let out = store.finish_batch(&ids).await.unwrap();
        assert_eq!(out, [Ok(JobState::Ready), Err(StoreError::NotFound)]);
        let reply = Reply::FinishBatch {
            ids: &ids,
            out: &out,
        };
        rec.saw(Call::FinishBatch { ids: &ids }, Ok(reply));
        let err = store.delete(&a).await.unwrap_err();
        assert_eq!(err, StoreError::NotFound);
        rec.saw(Call::Delete { id: &a }, Err(&err));
    }

    /// Refuses every call while closed (as a test store fails its ticks on demand), counting
    /// what it sees.
    #[derive(Default)]
    struct Gate {
        closed: AtomicBool,
        before: AtomicU64,
        after: AtomicU64,
    }

    impl StoreHook for Gate {
        fn before(&self, _: &Call<'_>) -> StoreResult<()> {
            self.before.fetch_add(1, Ordering::SeqCst);
            if self.closed.load(Ordering::SeqCst) {
                return Err(StoreError::Unavailable("closed".into()));
            }
            Ok(())
        }

        fn after(&self, _: &Call<'_>, _: Result<Reply<'_>, &StoreError>) {
            self.after.fetch_add(1, Ordering::SeqCst);
        }
    }

    impl Gate {
        fn counts(&self) -> (u64, u64) {
            let before = self.before.load(Ordering::SeqCst);
            (before, self.after.load(Ordering::SeqCst))
        }
    }

    #[tokio::test]
    async fn a_refusal_before_a_call_is_its_answer_and_the_wrapped_store_is_not_asked() {
        let inner = Arc::new(MemoryStore::new());
        let store = Hooked::new(inner.clone(), Gate::default());
        store.hook().closed.store(true, Ordering::SeqCst);
        let closed = StoreError::Unavailable("closed".into());
        let refused = store.push(spec("a", 0), PushMode::Reject, 10).await;
        assert_eq!(refused, Err(closed.clone()));
        assert_eq!(store.tick(10, 10).await, Err(closed));
        assert_eq!(
            inner.stats().await,
            Ok(Stats::default()),
            "nothing reached it"
        );
        assert_eq!(
            store.hook().counts(),
            (2, 0),
            "no `after` for a refused call"
        );

        store.hook().closed.store(false, Ordering::SeqCst);
        let pushed = store.push(spec("a", 0), PushMode::Reject, 10).await;
        assert_eq!(pushed, Ok(PushOutcome::Created));
        assert_eq!(inner.get(&id("a")).await.unwrap().state, JobState::Ready);
        assert_eq!(store.hook().counts(), (3, 1));
    }

    /// Sees each push's jobs in `settle` and, while `fail` is set, makes it the answer.
    #[derive(Default)]
    struct Settler {
        seen: Mutex<Vec<String>>,
        fail: AtomicBool,
    }

    impl StoreHook for Settler {
        const SEES_PUSHED_JOBS: bool = true;

        fn settle(
            &self,
            call: &Call<'_>,
            _: Result<Reply<'_>, &StoreError>,
            pushed: &[JobSpec],
        ) -> impl Future<Output = StoreResult<()>> + Send + 'static {
            let ids = pushed.iter().map(|j| j.id.to_string());
            self.note(call, ids);
            let fail = self.fail.load(Ordering::SeqCst);
            async move {
                if fail {
                    return Err(StoreError::Unavailable("not settled".into()));
                }
                Ok(())
            }
        }
    }

    impl Settler {
        fn note(&self, call: &Call<'_>, ids: impl Iterator<Item = String>) {
            let mut seen = self.seen.lock().unwrap();
            seen.push(format!("{call:?}"));
            seen.extend(ids);
        }
    }

    #[tokio::test]
    async fn settle_sees_the_pushed_jobs_when_asked_and_its_error_is_the_answer() {
        let inner = Arc::new(MemoryStore::new());
        let store = Hooked::new(inner.clone(), Settler::default());
        store
            .push_batch(vec![spec("a", 0), spec("b", 0)], PushMode::Reject, 10)
            .await
            .unwrap();
        let seen = std::mem::take(&mut *store.hook().seen.lock().unwrap());
        assert_eq!(seen[1..], ["a".to_string(), "b".to_string()]);
        store.hook().fail.store(true, Ordering::SeqCst);
        let failed = store.delete(&id("a")).await;
        assert_eq!(failed, Err(StoreError::Unavailable("not settled".into())));
        assert_eq!(
            inner.get(&id("a")).await,
            Err(StoreError::NotFound),
            "the call was made; only its answer is the hook's"
        );
        // A hook that does not ask (the default, the metrics) is given no jobs.
        const { assert!(!<Arc<Recorder> as StoreHook>::SEES_PUSHED_JOBS) };
    }

    /// Names the store and hands out a channel of its own.
    struct Renamed(broadcast::Sender<StoreEvent>);

    impl StoreHook for Renamed {
        fn kind(&self, _: &dyn Store) -> &'static str {
            "renamed"
        }

        fn subscribe(&self, _: &dyn Store) -> broadcast::Receiver<StoreEvent> {
            self.0.subscribe()
        }
    }

    struct Plain;

    impl StoreHook for Plain {}

    #[tokio::test]
    async fn kind_and_events_are_the_wrapped_store_s_unless_the_hook_says_otherwise() {
        let plain = Hooked::new(Arc::new(MemoryStore::new()), Plain);
        let mut events = plain.subscribe();
        plain
            .push(spec("a", 0), PushMode::Reject, 10)
            .await
            .unwrap();
        assert_eq!(plain.kind(), "memory");
        assert_eq!(events.try_recv(), Ok(StoreEvent::Ready(topic("t"))));

        let renamed = Hooked::new(
            Arc::new(MemoryStore::new()),
            Renamed(broadcast::channel(4).0),
        );
        let mut events = renamed.subscribe();
        renamed
            .push(spec("a", 0), PushMode::Reject, 10)
            .await
            .unwrap();
        assert_eq!(renamed.kind(), "renamed");
        assert!(
            events.try_recv().is_err(),
            "the wrapped store's events are not handed out"
        );
    }
}
