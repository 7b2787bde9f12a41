//! Opens each storage backend for a test, and `backend_tests!`, which runs every listed test
//! body once per backend (the conformance suite and the HTTP suites use it: one definition,
//! every backend).
//!
//! The Redis Cluster arm shares one cluster per test binary (starting one takes a few
//! seconds; a cluster per test would cost minutes): a `static` started by the first test that
//! needs it, each test on its own key prefix `t<N>` so none sees another's jobs or events. The
//! static is never dropped; its processes die with the test process (see `redis_cluster.rs`).

use delayq::store::Store;
use delayq::store::embedded::{EmbeddedOptions, EmbeddedStore};
use delayq::store::memory::MemoryStore;
use delayq::store::redis::{RedisOptions, RedisStore, RedisTarget};
use std::any::Any;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, LazyLock, OnceLock};

/// The cluster every `redis_cluster` test of this binary uses: 3 masters, no replicas.
static SHARED_CLUSTER: OnceLock<super::redis_cluster::RedisCluster> = OnceLock::new();
/// Numbers the key prefixes of tests on the shared cluster.
static NEXT_PREFIX: AtomicU64 = AtomicU64::new(0);

/// Held shared by every backend test for its life; a test whose timing bound a parallel load
/// would break (multi_instance's lateness) takes it alone, so it runs while no backend test
/// does.
pub static TIMING: LazyLock<Arc<tokio::sync::RwLock<()>>> = LazyLock::new(Default::default);

/// A store under test plus whatever keeps it alive (a temp dir, a redis-server process).
pub struct Backend {
    pub name: &'static str,
    pub store: Arc<dyn Store>,
    guard: Option<Box<dyn Any + Send + Sync>>,
    _timing: tokio::sync::OwnedRwLockReadGuard<()>,
}

/// A share of [`TIMING`].
async fn timing() -> tokio::sync::OwnedRwLockReadGuard<()> {
    TIMING.clone().read_owned().await
}

impl Backend {
    /// An `EmbeddedStore` in a fresh temporary directory. Fields drop in order, so the store
    /// (when this is its last handle) is closed before the directory is removed.
    pub async fn embedded() -> Backend {
        let dir = tempfile::TempDir::new().expect("create a temp dir");
        let store = EmbeddedStore::open(EmbeddedOptions::new(dir.path().to_path_buf()))
            .await
            .expect("open the embedded store");
        Backend {
            name: "embedded",
            store: Arc::new(store),
            guard: Some(Box::new(dir)),
            _timing: timing().await,
        }
    }

    /// An `EmbeddedStore` whose memory window is 1 ms and which checkpoints after every
    /// commit: every delayed job goes to the cold tier at once and comes back when due, so
    /// each case of the suite moves jobs between disk and memory.
    pub async fn embedded_cold() -> Backend {
        let dir = tempfile::TempDir::new().expect("create a temp dir");
        let mut opts = EmbeddedOptions::new(dir.path());
        opts.memory_window = Some(std::time::Duration::from_millis(1));
        opts.checkpoint_every = Some(std::time::Duration::ZERO);
        let store = EmbeddedStore::open(opts)
            .await
            .expect("open the embedded store");
        Backend {
            name: "embedded_cold",
            store: Arc::new(store),
            guard: Some(Box::new(dir)),
            _timing: timing().await,
        }
    }

    pub async fn memory() -> Backend {
        Backend {
            name: "memory",
            store: Arc::new(MemoryStore::new()),
            guard: None,
            _timing: timing().await,
        }
    }

    /// A `RedisStore` on its own fresh `redis-server` with `shards` shards.
    pub async fn redis(name: &'static str, shards: u16) -> Backend {
        let server = super::redis_server::RedisServer::start();
        let store = RedisStore::connect(RedisOptions {
            target: RedisTarget::Server(server.url()),
            prefix: "delayq".into(),
            shards,
        })
        .await
        .expect("connect to the test redis-server");
        Backend {
            name,
            store: Arc::new(store),
            guard: Some(Box::new(server)),
            _timing: timing().await,
        }
    }
}

impl Backend {
    /// A `RedisStore` with 8 shards (the default) on this binary's shared 3-master Redis
    /// Cluster, under a key prefix no other test uses. Its seeds are all the masters.
    pub async fn redis_cluster() -> Backend {
        let cluster =
            SHARED_CLUSTER.get_or_init(|| super::redis_cluster::RedisCluster::start(3, 0));
        let prefix = format!("t{}", NEXT_PREFIX.fetch_add(1, Ordering::Relaxed));
        let store = RedisStore::connect(RedisOptions {
            target: RedisTarget::Cluster(cluster.urls()),
            prefix,
            shards: 8,
        })
        .await
        .expect("connect to the shared test Redis Cluster");
        Backend {
            name: "redis_cluster",
            store: Arc::new(store),
            guard: None,
            _timing: timing().await,
        }
    }
}

/// `backend_tests!(a, b)` expects `async fn a(b: &Backend)` etc. in the calling module and
/// generates `memory::a`, `redis::a` (8 shards, the default), `redis_one_shard::a`,
/// `redis_cluster::a`, ... (one `#[tokio::test]` per backend and test), and whatever the
/// test binary's own `extra_backends!` adds (the store suite: `embedded_cold`, the cold tier's
/// moves under every case; the HTTP suites: nothing, the API being the same over it).
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
        $crate::extra_backends!($($name),*);
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
        mod redis_cluster {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    let b = $crate::support::backends::Backend::redis_cluster().await;
                    super::$name(&b).await;
                }
            )*
        }
    };
}
