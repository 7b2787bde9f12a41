//! The memory store: the [`Engine`](crate::store::engine::Engine) with nothing on disk, the
//! reference that tests and model checks compare the other stores against, and the store of
//! `delayq serve --memory`.
//!
//! Its durability, [`Volatile`], keeps nothing: a transition's events are published as it
//! happens and no caller waits. Everything else is [`EngineStore`]'s.

use crate::store::engine::{Effects, Engine};
use crate::store::engine_store::{CommitMode, Durability, EngineStore};
use crate::store::{EVENT_CHANNEL_CAPACITY, StoreResult};
use std::convert::Infallible;
use std::future::Future;
use tokio::sync::broadcast;

/// A [`Store`](crate::store::Store) that keeps everything in memory: fast, lost at exit.
pub type MemoryStore = EngineStore<Volatile>;

/// The durability of a store that keeps nothing: every commit is done as it is made.
#[derive(Debug, Default)]
pub struct Volatile;

impl Durability for Volatile {
    const KIND: &'static str = "memory";

    /// Never made: nothing is waited for.
    type Ack = Infallible;

    fn check(&self) -> StoreResult<()> {
        Ok(())
    }

    fn commit(&self, _: &mut Effects, _: CommitMode) -> StoreResult<Option<Infallible>> {
        Ok(None)
    }

    fn wait(_: Infallible) -> impl Future<Output = StoreResult<()>> + Send {
        std::future::ready(Ok(()))
    }
}

impl MemoryStore {
    pub fn new() -> MemoryStore {
        EngineStore::with_durability(
            Engine::new(),
            broadcast::channel(EVENT_CHANNEL_CAPACITY).0,
            Volatile,
        )
    }
}

impl Default for MemoryStore {
    fn default() -> Self {
        MemoryStore::new()
    }
}
