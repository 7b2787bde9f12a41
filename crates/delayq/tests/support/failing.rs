//! A store that fails every call with one error, for the tests of what the HTTP layer makes of
//! a store that is down (`Unavailable`) or holds what it cannot read (`Corrupt`).

use delayq::store::hook::{Call, Hooked, StoreHook};
use delayq::store::memory::MemoryStore;
use delayq::store::{Store, StoreError, StoreResult};
use std::sync::Arc;

/// The hook that refuses every call with its error. [`FailingStore::new`] puts it around an
/// empty [`MemoryStore`], which no call reaches: its event channel stays open and silent, as
/// from a store that is merely down.
pub struct FailingStore {
    error: StoreError,
}

impl FailingStore {
    pub fn new(error: StoreError) -> Hooked<FailingStore> {
        Hooked::new(Arc::new(MemoryStore::new()), FailingStore { error })
    }
}

impl StoreHook for FailingStore {
    fn before(&self, _: &Call<'_>) -> StoreResult<()> {
        Err(self.error.clone())
    }

    fn kind(&self, _: &dyn Store) -> &'static str {
        "failing"
    }
}
