//! What the dispatcher's tests share: a started dispatcher over a [`MemoryStore`] and small
//! helpers to name topics and jobs, wait for waiters and join tasks within a generous bound.

use super::{DispatchError, DispatchOptions, Dispatcher};
use crate::clock::{Clock, SystemClock};
use crate::job::{Job, JobId, JobSpec, Topic, UnixMillis};
use crate::store::memory::MemoryStore;
use crate::store::{PushMode, Store};
use std::sync::Arc;
use std::time::Duration;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// Generous bound for "promptly" on a loaded 2-core machine.
pub(super) const PROMPT: Duration = Duration::from_secs(5);

pub(super) fn topic(s: &str) -> Topic {
    Topic::parse(s).unwrap()
}

pub(super) fn spec(id: &str, run_at: UnixMillis) -> JobSpec {
    JobSpec::new(topic("t"), JobId::parse(id).unwrap(), id, run_at)
}

pub(super) struct Fixture {
    pub(super) store: Arc<MemoryStore>,
    pub(super) clock: Arc<SystemClock>,
    pub(super) dispatcher: Arc<Dispatcher>,
    pub(super) shutdown: CancellationToken,
    pub(super) task: JoinHandle<()>,
}

pub(super) fn fixture_with(options: DispatchOptions) -> Fixture {
    let store = Arc::new(MemoryStore::new());
    let clock = Arc::new(SystemClock);
    let dispatcher = Dispatcher::with_options(store.clone(), clock.clone(), options);
    let shutdown = CancellationToken::new();
    let task = dispatcher.start(shutdown.clone());
    Fixture {
        store,
        clock,
        dispatcher,
        shutdown,
        task,
    }
}

pub(super) fn fixture() -> Fixture {
    fixture_with(DispatchOptions::default())
}

impl Fixture {
    pub(super) async fn push(&self, s: JobSpec) {
        self.store
            .push(s, PushMode::Reject, self.clock.now())
            .await
            .unwrap();
    }

    /// Waits until `n` reserve calls are registered as waiters.
    pub(super) async fn until_waiters(&self, n: usize) {
        let deadline = Instant::now() + PROMPT;
        while self.dispatcher.waiters() != n {
            assert!(Instant::now() < deadline, "never saw {n} waiters");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    pub(super) fn spawn_reserve(
        &self,
        topics: &[&str],
        wait: Duration,
    ) -> JoinHandle<Result<Vec<Job>, DispatchError>> {
        let d = self.dispatcher.clone();
        let topics = topics.iter().map(|t| topic(t)).collect();
        tokio::spawn(async move { d.poll(topics, 1, wait).await })
    }
}

pub(super) fn ids(jobs: &[Job]) -> Vec<&str> {
    jobs.iter().map(|j| j.spec.id.as_str()).collect()
}

pub(super) async fn joined<T>(h: JoinHandle<T>) -> T {
    tokio::time::timeout(PROMPT, h)
        .await
        .expect("task did not finish in time")
        .unwrap()
}
