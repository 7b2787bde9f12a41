//! A store that fails every call with one error, for the tests of what the HTTP layer makes of
//! a store that is down (`Unavailable`) or holds what it cannot read (`Corrupt`).

use async_trait::async_trait;
use delayq::job::{Job, JobId, JobSpec, JobState, Topic, UnixMillis};
use delayq::store::{
    PushMode, PushOutcome, Reschedule, Stats, Store, StoreError, StoreEvent, StoreResult,
    TickOutcome,
};
use tokio::sync::broadcast;

pub struct FailingStore {
    error: StoreError,
    /// Kept so subscribers see an open, silent channel, as from a store that is merely down.
    events: broadcast::Sender<StoreEvent>,
}

impl FailingStore {
    pub fn new(error: StoreError) -> FailingStore {
        FailingStore {
            error,
            events: broadcast::channel(16).0,
        }
    }

    fn fail<T>(&self) -> StoreResult<T> {
        Err(self.error.clone())
    }
}

#[async_trait]
impl Store for FailingStore {
    fn kind(&self) -> &'static str {
        "failing"
    }
    async fn push_batch(
        &self,
        _: Vec<JobSpec>,
        _: PushMode,
        _: UnixMillis,
    ) -> StoreResult<Vec<StoreResult<PushOutcome>>> {
        self.fail()
    }
    async fn reserve(&self, _: &[Topic], _: usize, _: UnixMillis) -> StoreResult<Vec<Job>> {
        self.fail()
    }
    async fn finish(&self, _: &JobId) -> StoreResult<JobState> {
        self.fail()
    }
    async fn delete(&self, _: &JobId) -> StoreResult<JobState> {
        self.fail()
    }
    async fn release(&self, _: &JobId, _: Option<u64>, _: UnixMillis) -> StoreResult<Job> {
        self.fail()
    }
    async fn touch(&self, _: &JobId, _: UnixMillis) -> StoreResult<Job> {
        self.fail()
    }
    async fn bury(&self, _: &JobId, _: UnixMillis) -> StoreResult<Job> {
        self.fail()
    }
    async fn kick(&self, _: &JobId, _: UnixMillis) -> StoreResult<Job> {
        self.fail()
    }
    async fn kick_topic(&self, _: &Topic, _: u64, _: UnixMillis) -> StoreResult<u64> {
        self.fail()
    }
    async fn reschedule(
        &self,
        _: &JobId,
        _: Reschedule,
        _: UnixMillis,
    ) -> StoreResult<(Job, JobState)> {
        self.fail()
    }
    async fn get(&self, _: &JobId) -> StoreResult<Job> {
        self.fail()
    }
    async fn stats(&self) -> StoreResult<Stats> {
        self.fail()
    }
    async fn tick(&self, _: UnixMillis, _: usize) -> StoreResult<TickOutcome> {
        self.fail()
    }
    fn subscribe(&self) -> broadcast::Receiver<StoreEvent> {
        self.events.subscribe()
    }
    async fn ping(&self) -> StoreResult<()> {
        self.fail()
    }
}
