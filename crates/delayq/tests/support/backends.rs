//! Opens each storage backend for a test, and `backend_tests!`, which runs every listed test
//! body once per backend (the conformance suite and the HTTP suites use it: one definition,
//! every backend).

use delayq::store::Store;
use delayq::store::memory::MemoryStore;
use std::any::Any;
use std::sync::Arc;

/// A store under test plus whatever keeps it alive (a temp dir, a redis-server process).
pub struct Backend {
    pub name: &'static str,
    pub store: Arc<dyn Store>,
    guard: Option<Box<dyn Any + Send + Sync>>,
}

impl Backend {
    pub async fn memory() -> Backend {
        Backend {
            name: "memory",
            store: Arc::new(MemoryStore::new()),
            guard: None,
        }
    }
}

/// `backend_tests!(a, b)` expects `async fn a(b: &Backend)` etc. in the calling module and
/// generates `memory::a`, ... (one `#[tokio::test]` per backend and test).
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
    };
}
