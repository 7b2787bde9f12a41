//! The timer and the long-poll waiters, written once for every store.
//!
//! STUB: to be replaced by the real implementation (event-driven timer, FCFS waiters).

use crate::clock::Clock;
use crate::job::{Job, Topic};
use crate::store::{Store, StoreResult};
use std::sync::Arc;
use std::time::Duration;

pub struct Dispatcher {
    store: Arc<dyn Store>,
    clock: Arc<dyn Clock>,
}

impl Dispatcher {
    pub fn new(store: Arc<dyn Store>, clock: Arc<dyn Clock>) -> Arc<Dispatcher> {
        Arc::new(Dispatcher { store, clock })
    }

    /// Reserves up to `max` jobs from `topics` (preferred in order), waiting up to `wait` for
    /// one to become ready. Returns an empty vector when none did in time.
    pub async fn reserve(
        &self,
        topics: Vec<Topic>,
        max: usize,
        wait: Duration,
    ) -> StoreResult<Vec<Job>> {
        let _ = wait;
        self.store.reserve(&topics, max, self.clock.now()).await
    }
}
