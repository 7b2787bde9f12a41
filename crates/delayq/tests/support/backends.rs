//! Opens each storage backend for a test, and `backend_tests!`, which runs every listed test
//! body once per backend (the conformance suite and the HTTP suites use it: one definition,
//! every backend).

use delayq::store::Store;
use delayq::store::embedded::{EmbeddedOptions, EmbeddedStore};
use delayq::store::memory::MemoryStore;
use delayq::store::redis::{RedisOptions, RedisStore};
use std::any::Any;
use std::sync::Arc;

/// A store under test plus whatever keeps it alive (a temp dir, a redis-server process).
pub struct Backend {
    pub name: &'static str,
    pub store: Arc<dyn Store>,
    guard: Option<Box<dyn Any + Send + Sync>>,
}

impl Backend {
    /// An `EmbeddedStore` in a fresh temporary directory. Fields drop in order, so the store
    /// (when this is its last handle) is closed before the directory is removed.
    pub async fn embedded() -> Backend {
        let dir = tempfile::TempDir::new().expect("create a temp dir");
        let store = EmbeddedStore::open(EmbeddedOptions {
            data_dir: dir.path().to_path_buf(),
        })
        .await
        .expect("open the embedded store");
        Backend {
            name: "embedded",
            store: Arc::new(store),
            guard: Some(Box::new(dir)),
        }
    }

    pub async fn memory() -> Backend {
        Backend {
            name: "memory",
            store: Arc::new(MemoryStore::new()),
            guard: None,
        }
    }

    /// A `RedisStore` on its own fresh `redis-server` with `shards` shards.
    pub async fn redis(name: &'static str, shards: u16) -> Backend {
        let server = super::redis_server::RedisServer::start();
        let store = RedisStore::connect(RedisOptions {
            url: server.url(),
            prefix: "delayq".into(),
            shards,
        })
        .await
        .expect("connect to the test redis-server");
        Backend {
            name,
            store: Arc::new(store),
            guard: Some(Box::new(server)),
        }
    }
}

/// `backend_tests!(a, b)` expects `async fn a(b: &Backend)` etc. in the calling module and
/// generates `memory::a`, `redis::a` (8 shards, the default), `redis_one_shard::a`, ... (one
/// `#[tokio::test]` per backend and test).
#[macro_export]
macro_rules! backend_tests {
    ($($name:ident),* $(,)?) => {
        mod memory {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    let b = $crate::support::backends::Backend::memory().await;
                    super::$name(&b).await;
                }
            )*
        }
        mod embedded {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    let b = $crate::support::backends::Backend::embedded().await;
                    super::$name(&b).await;
                }
            )*
        }
        mod redis {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    let b = $crate::support::backends::Backend::redis("redis", 8).await;
                    super::$name(&b).await;
                }
            )*
        }
        mod redis_one_shard {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    let b = $crate::support::backends::Backend::redis("redis_one_shard", 1).await;
                    super::$name(&b).await;
                }
            )*
        }
    };
}
