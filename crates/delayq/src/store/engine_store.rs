//! The one [`Store`](crate::store::Store) over the [`Engine`]: [`EngineStore`], generic over
//! how a transition's changes become durable ([`Durability`]). The memory store keeps nothing
//! (`memory.rs`); the embedded store logs every change to disk before it answers
//! (`embedded.rs`).
//!
//! Each call locks the engine, runs its transition, and, if the transition changed any job,
//! hands the changes to the durability while still holding the lock, so they reach it in
//! engine order. Events the durability does not hold back are published at once, also under
//! the lock, so a transition one of them prompts comes after this one. The caller then waits
//! for the durability's acknowledgement outside the lock, so concurrent callers share one
//! commit. A transition that changed nothing answers at once (a promotion records no change:
//! a restart redoes it from the delayed record); the timer's expiries are lazy commits, which
//! nobody waits for (a restart redoes a lost expiry by itself), and so are a reservation and
//! the finish of a reserved job (`Effects::answer_before_durable`): they are written with the
//! next commit, and if a crash comes first the job is delivered again, as at-least-once
//! delivery allows. Reads (`get`, `stats`, `list`, `schedule`, `ping`) see the engine.
//!
//! Its `Store` impl is derived from `store_calls!` (store/define.rs): each call is
//! `EngineStore::run` of the [`Engine`] method of the call's name, with the call's arguments
//! (and, unless it is a read, the transition's [`Effects`]). So a new call needs its `Engine`
//! method and nothing here.
//!
//! Not here: the rules (`engine.rs`, job.rs), and what durable means (each [`Durability`]).
//! The durability is a type parameter, not a trait object: each store is compiled for its own.

use crate::store::engine::{Effects, Engine};
use crate::store::{CallKind, OnlineBackup, StoreEvent, StoreResult};
use parking_lot::{Mutex, MutexGuard};
use std::future::Future;
use tokio::sync::broadcast;

/// How an [`EngineStore`]'s transitions become durable.
pub trait Durability: Send + Sync + 'static {
    /// The store's [`Store::kind`](crate::store::Store::kind).
    const KIND: &'static str;

    /// What a caller holds, outside the engine lock, until its changes are durable.
    type Ack: Send;

    /// Whether the store still takes calls, asked under the engine lock before every call
    /// (reads included); an `Err` is that call's answer.
    fn check(&self) -> StoreResult<()>;

    /// Takes a transition's changes (`fx.changes`, never empty), under the engine lock, and
    /// the events that must wait until they are durable; the events it leaves in `fx.events`
    /// are published at once. Returns what to wait for: `None` when there is nothing to wait
    /// for, always so for a [`CommitMode::Lazy`] one (see the module docs).
    fn commit(&self, fx: &mut Effects, mode: CommitMode) -> StoreResult<Option<Self::Ack>>;

    /// Resolves once the commit `ack` belongs to is durable, or failed.
    fn wait(ack: Self::Ack) -> impl Future<Output = StoreResult<()>> + Send;

    /// The store's online backup (`Store::online_backup`): none unless it keeps something.
    fn online_backup(&self) -> Option<&dyn OnlineBackup> {
        None
    }

    /// Runs under the engine's lock before every call: hands the engine what the durability
    /// did since (the embedded store's cold tier: the jobs its checkpoints moved to disk).
    fn prepare(&self, _engine: &mut Engine) {}
}

/// Whether anyone waits for a commit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CommitMode {
    /// A change: its caller answers once it is durable, and the events the durability holds
    /// back wait with it.
    Acknowledged,
    /// The timer's pass, and a transition whose effects say it may be answered before it is
    /// durable (a reservation, a touch, the finish of a reserved job): nobody waits and its
    /// events go out at once; the next acknowledged commit makes it durable (a restart redoes a
    /// lost pass; a lost reservation or finish delivers its job again).
    Lazy,
}

impl CommitMode {
    /// How a call of this kind commits its changes (a read has none).
    fn of(kind: CallKind) -> CommitMode {
        match kind {
            CallKind::Timer => CommitMode::Lazy,
            CallKind::Change | CallKind::Read => CommitMode::Acknowledged,
        }
    }
}

/// A [`Store`](crate::store::Store) running the [`Engine`] in this process, made durable by
/// `D`.
pub struct EngineStore<D> {
    engine: Mutex<Engine>,
    events: broadcast::Sender<StoreEvent>,
    durability: D,
}

impl<D: Durability> EngineStore<D> {
    /// A store over `engine`, publishing on `events` (which `durability` may publish on too,
    /// for the events it holds back).
    pub(crate) fn with_durability(
        engine: Engine,
        events: broadcast::Sender<StoreEvent>,
        durability: D,
    ) -> EngineStore<D> {
        EngineStore {
            engine: Mutex::new(engine),
            events,
            durability,
        }
    }

    pub(crate) fn durability(&self) -> &D {
        &self.durability
    }

    fn lock(&self) -> StoreResult<MutexGuard<'_, Engine>> {
        let engine = self.engine.lock();
        self.durability.check()?;
        Ok(engine)
    }

    /// Runs one call of `kind` under the lock and, if it changed anything, commits the changes
    /// (as [`CommitMode::of`] the kind) before releasing the lock. Returns the result and what
    /// to wait for. The timer's pass releases the lock to a waiting call, if any, before it
    /// can take it again: a timer making many jobs ready at once runs pass after pass, and
    /// would otherwise keep every request (reserves among them) waiting until the last one.
    fn begin<T>(
        &self,
        kind: CallKind,
        f: impl FnOnce(&mut Engine, &mut Effects) -> T,
    ) -> StoreResult<(T, Option<D::Ack>)> {
        let mode = CommitMode::of(kind);
        let mut engine = self.lock()?;
        let mut fx = Effects::default();
        self.durability.prepare(&mut engine);
        let out = f(&mut engine, &mut fx);
        engine.settle(&mut fx);
        let ack = if fx.changes.is_empty() {
            None
        } else {
            let mode = if fx.answer_before_durable {
                CommitMode::Lazy
            } else {
                mode
            };
            self.durability.commit(&mut fx, mode)?
        };
        for ev in fx.events {
            let _ = self.events.send(ev);
        }
        if kind == CallKind::Timer {
            MutexGuard::unlock_fair(engine);
        }
        Ok((out, ack))
    }

    /// Runs one call on the engine (`f`, under the lock) as its kind says, and answers once
    /// that is done: a [`CallKind::Change`] once its changes are durable; the timer's pass
    /// ([`CallKind::Timer`]) at once, its changes a lazy commit; a [`CallKind::Read`] changes
    /// nothing, so commits nothing. Every `Store` method of this store is one `run` (derived
    /// from `store_calls!`, store/define.rs).
    pub(super) async fn run<T>(
        &self,
        kind: CallKind,
        f: impl FnOnce(&mut Engine, &mut Effects) -> T,
    ) -> StoreResult<T> {
        let (out, ack) = self.begin(kind, f)?;
        if let Some(ack) = ack {
            D::wait(ack).await?;
        }
        Ok(out)
    }

    /// The channel this store publishes its events on (`Store::subscribe` hands out receivers).
    pub(super) fn events(&self) -> &broadcast::Sender<StoreEvent> {
        &self.events
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::job::{JobId, JobSpec, JobState, Topic, UnixMillis};
    use crate::store::{PushMode, Store, StoreError};
    use CommitMode::{Acknowledged, Lazy};
    use std::sync::Mutex;

    /// Records each commit (how many changes, its mode) and holds back the events of every
    /// commit that is waited for, as a durable store does until the commit is on disk (here
    /// they are never published). Refuses every call while `down` holds an error.
    #[derive(Default)]
    struct Recording {
        commits: Mutex<Vec<(usize, CommitMode)>>,
        down: Mutex<Option<StoreError>>,
    }

    impl Durability for Recording {
        const KIND: &'static str = "recording";
        type Ack = ();

        fn check(&self) -> StoreResult<()> {
            match &*self.down.lock().unwrap() {
                Some(e) => Err(e.clone()),
                None => Ok(()),
            }
        }

        fn commit(&self, fx: &mut Effects, mode: CommitMode) -> StoreResult<Option<()>> {
            self.commits.lock().unwrap().push((fx.changes.len(), mode));
            if mode == CommitMode::Lazy {
                return Ok(None);
            }
            fx.events.clear();
            Ok(Some(()))
        }

        async fn wait(_: ()) -> StoreResult<()> {
            Ok(())
        }
    }

    fn store() -> EngineStore<Recording> {
        EngineStore::with_durability(
            Engine::new(),
            broadcast::channel(16).0,
            Recording::default(),
        )
    }

    fn topic(name: &str) -> Topic {
        Topic::parse(name).unwrap()
    }

    fn id(name: &str) -> JobId {
        JobId::parse(name).unwrap()
    }

    fn spec(name: &str, run_at: UnixMillis) -> JobSpec {
        JobSpec::new(topic("t"), id(name), "body", run_at)
    }

    fn commits(store: &EngineStore<Recording>) -> Vec<(usize, CommitMode)> {
        store.durability().commits.lock().unwrap().clone()
    }

    #[tokio::test]
    async fn only_transitions_that_change_what_a_restart_needs_are_committed_and_only_those_a_crash_may_undo_lazily()
     {
        let store = store();
        let mut events = store.subscribe();
        let pushed = store
            .push_batch(vec![spec("a", 0), spec("b", 50)], PushMode::Reject, 10)
            .await
            .unwrap();
        assert_eq!(pushed.len(), 2);
        assert_eq!(commits(&store), [(2, Acknowledged)]);
        assert!(events.try_recv().is_err(), "held back by the durability");

        // Refusals, empty answers and reads change nothing: nothing to commit.
        assert!(
            store
                .reserve(&[topic("other")], 5, 10)
                .await
                .unwrap()
                .is_empty()
        );
        assert_eq!(store.finish(&id("zz")).await, Err(StoreError::NotFound));
        assert_eq!(
            store.touch(&id("a"), 10).await,
            Err(StoreError::WrongState(JobState::Ready))
        );
        store.get(&id("a")).await.unwrap();
        store.stats().await.unwrap();
        store.ping().await.unwrap();
        assert_eq!(commits(&store), [(2, Acknowledged)]);

        // A promotion is not committed (the timer's first pass after a restart makes it again
        // from the delayed record); its events are out at once.
        let tick = store.tick(100, 10).await.unwrap();
        assert_eq!(tick.promoted, 1);
        assert_eq!(commits(&store), [(2, Acknowledged)]);
        assert_eq!(events.try_recv(), Ok(StoreEvent::Ready(topic("t"))));
        store.tick(100, 10).await.unwrap();
        assert_eq!(commits(&store), [(2, Acknowledged)], "nothing was due");
        assert_eq!(store.kind(), "recording");

        // A reservation and the finish of a reserved job are answered before they are durable
        // (a crash delivers the job again); a finish of a job that is not reserved (a delete)
        // is not.
        let got = store.reserve(&[topic("t")], 1, 100).await.unwrap();
        assert_eq!(got.len(), 1);
        assert_eq!(store.finish(&got[0].spec.id).await, Ok(JobState::Reserved));
        let other = if got[0].spec.id == id("a") { "b" } else { "a" };
        assert_eq!(store.finish(&id(other)).await, Ok(JobState::Ready));
        assert_eq!(
            commits(&store)[1..],
            [(1, Lazy), (1, Lazy), (1, Acknowledged)],
            "reserve, finish of a reserved job, finish of a ready one"
        );

        // The timer's pass that ends a reservation (its TTR ran out) is committed lazily.
        store
            .push_batch(vec![spec("c", 0)], PushMode::Reject, 100)
            .await
            .unwrap();
        let got = store.reserve(&[topic("t")], 1, 100).await.unwrap();
        let until = got[0].reserved_until.unwrap();
        let tick = store.tick(until, 10).await.unwrap();
        assert_eq!(tick.expired, 1);
        assert_eq!(
            commits(&store)[4..],
            [(1, Acknowledged), (1, Lazy), (1, Lazy)],
            "push, reserve, the expiry"
        );
    }

    #[tokio::test]
    async fn while_the_durability_refuses_every_call_is_refused_reads_included() {
        let store = store();
        store
            .push(spec("a", 0), PushMode::Reject, 10)
            .await
            .unwrap();
        let down = StoreError::Unavailable("the disk is gone".into());
        *store.durability().down.lock().unwrap() = Some(down.clone());

        let refused = Err(down);
        assert_eq!(
            store
                .push(spec("b", 0), PushMode::Reject, 10)
                .await
                .map(drop),
            refused
        );
        assert_eq!(store.reserve(&[topic("t")], 5, 10).await.map(drop), refused);
        assert_eq!(store.finish(&id("a")).await.map(drop), refused);
        assert_eq!(store.get(&id("a")).await.map(drop), refused);
        assert_eq!(store.stats().await.map(drop), refused);
        assert_eq!(store.tick(10, 10).await.map(drop), refused);
        assert_eq!(store.ping().await, refused);

        *store.durability().down.lock().unwrap() = None;
        assert_eq!(
            commits(&store),
            [(1, Acknowledged)],
            "no refused call reached the engine"
        );
        let stats = store.stats().await.unwrap();
        assert_eq!(stats.topics[&topic("t")].ready, 1);
    }
}
