//! The store tests, one binary: the conformance suite and the model test on every backend
//! (`backend_tests!`), then each backend's own promises (embedded, Redis, Redis Cluster, Redis
//! credentials) and several delayq processes on one Redis. Run one file's tests with
//! `cargo test -p delayq --test store conformance::`.

#[macro_use]
#[path = "../support/mod.rs"]
mod support;

/// `backend_tests!`'s backends beyond the common ones: the embedded store with a 1 ms memory
/// window, so every case moves its jobs to the cold tier and back.
#[macro_export]
macro_rules! extra_backends {
    ($($name:ident),*) => {
        mod embedded_cold {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    let b = $crate::support::backends::Backend::embedded_cold().await;
                    super::$name(&b).await;
                }
            )*
        }
    };
}

mod conformance;
mod embedded_backup;
mod embedded_cold;
mod embedded_crash;
mod embedded_store;
mod embedded_versions;
mod kill_load;
mod model;
mod multi_instance;
mod redis_auth;
mod redis_cluster;
mod redis_store;
mod schedule_instances;
