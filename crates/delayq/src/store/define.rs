//! The machinery behind the `store_calls!` declaration in `store/mod.rs`. From one entry per
//! store call it derives the call's [`Store`] method, the hooks' view of it ([`Call`]) and of
//! its answer ([`Reply`]), what it does to jobs ([`CallKind`]), and the call in each of the
//! three `Store` impls: [`Hooked`](super::hook::Hooked) (the hook around the wrapped store's
//! call), [`EngineStore`](super::engine_store::EngineStore) (the [`Engine`] method of the
//! call's name) and [`RedisStore`](super::redis::RedisStore) (the `redis::Calls` function of
//! the call's name).
//!
//! It declares no call (`mod.rs` does) and performs none (the engine, the Redis functions and
//! the hooks do): it only forwards, so that a new call is declared once and the compiler asks
//! for each of its implementations and for each decision about it (how metrics.rs counts it,
//! what journal/mod.rs writes for it), never a forwarding by hand.
//!
//! [`Engine`]: super::engine::Engine
//! [`Store`]: super::Store
//! [`Call`]: super::Call
//! [`Reply`]: super::Reply

use super::hook::StoreHook;
use super::{PushMode, Reschedule, SettingsChange, StoreResult};
use crate::job::{JobSpec, JobState, UnixMillis};

/// What a call does to jobs, declared with it in `store_calls!`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CallKind {
    /// Changes no job (`get`, `stats`, the listings, `ping`). The engine store commits nothing
    /// for it; the journal writes nothing for it and refuses it never.
    Read,
    /// Changes jobs as the caller asks (a push, a reserve, a finish...). The engine store answers
    /// once the change is durable; the journal writes it, and in `sync` mode refuses it while
    /// the journal cannot be written.
    Change,
    /// The timer's pass (`tick`): changes jobs only as job.rs's rules say from what is already
    /// recorded (due jobs become ready, expired reservations end). The engine store commits it
    /// lazily (nobody waits: a restart redoes it); the journal neither writes nor refuses it.
    Timer,
}

/// What a hook sees of a call's argument, in [`Call`](super::Call) and
/// [`Reply`](super::Reply): the argument itself when it is borrowed or copied. An argument
/// moved into the store is gone once the call is made, so the hooks see what is left of it: a
/// push's number of jobs, a reschedule's new due time. A call with an argument of a new type
/// needs an impl here (the compiler says so).
pub trait Seen<'a> {
    type Seen: Copy;

    fn seen(&self) -> Self::Seen;

    /// The jobs this argument moves into the store (a push's), which a hook that asks for
    /// them ([`StoreHook::SEES_PUSHED_JOBS`]) is given a copy of ([`pushed_for`]).
    fn pushed(&self) -> &[JobSpec] {
        &[]
    }
}

impl<'a, T: ?Sized> Seen<'a> for &'a T {
    type Seen = &'a T;

    fn seen(&self) -> &'a T {
        self
    }
}

impl<'a, T: ?Sized> Seen<'a> for Option<&'a T> {
    type Seen = Option<&'a T>;

    fn seen(&self) -> Option<&'a T> {
        *self
    }
}

impl Seen<'_> for u64 {
    type Seen = u64;

    fn seen(&self) -> u64 {
        *self
    }
}

impl Seen<'_> for usize {
    type Seen = usize;

    fn seen(&self) -> usize {
        *self
    }
}

impl Seen<'_> for Option<u64> {
    type Seen = Option<u64>;

    fn seen(&self) -> Option<u64> {
        *self
    }
}

impl Seen<'_> for Option<u32> {
    type Seen = Option<u32>;

    fn seen(&self) -> Option<u32> {
        *self
    }
}

impl Seen<'_> for PushMode {
    type Seen = PushMode;

    fn seen(&self) -> PushMode {
        *self
    }
}

impl Seen<'_> for JobState {
    type Seen = JobState;

    fn seen(&self) -> JobState {
        *self
    }
}

/// A push's jobs: how many.
impl Seen<'_> for Vec<JobSpec> {
    type Seen = usize;

    fn seen(&self) -> usize {
        self.len()
    }

    fn pushed(&self) -> &[JobSpec] {
        self
    }
}

/// A reschedule's change: its new due time (the new body and priority are in the reply's
/// job).
impl Seen<'_> for Reschedule {
    type Seen = UnixMillis;

    fn seen(&self) -> UnixMillis {
        self.run_at
    }
}

/// A change of a topic's settings: all of it.
impl Seen<'_> for SettingsChange {
    type Seen = SettingsChange;

    fn seen(&self) -> SettingsChange {
        *self
    }
}

/// The jobs a call moves into the store (each argument's [`Seen::pushed`]), copied only for a
/// hook that asks for them: known at compile time, so any other hook costs no copy.
pub fn pushed_for<H: StoreHook>(moved: &[&[JobSpec]]) -> Vec<JobSpec> {
    if H::SEES_PUSHED_JOBS {
        moved.concat()
    } else {
        Vec::new()
    }
}

/// An [`Engine`](super::engine::Engine) method's result as its call's answer: the engine
/// answers with the call's value when it cannot refuse (a reserve, a tick) and with a
/// `StoreResult` of it when it can (`NotFound`, `WrongState`).
pub trait Answer<T> {
    fn answer(self) -> StoreResult<T>;
}

impl<T> Answer<T> for T {
    fn answer(self) -> StoreResult<T> {
        Ok(self)
    }
}

impl<T> Answer<T> for StoreResult<T> {
    fn answer(self) -> StoreResult<T> {
        self
    }
}

/// Declares the [`Store`](super::Store) trait from one entry per call (`store/mod.rs` is its
/// one caller; the expansion names `define`, `hook`, `engine_store`, `redis` and the types of
/// the signatures as `store/mod.rs` sees them):
///
/// ```text
/// /// The method's docs: what it does, what it refuses.
/// Change Touch fn touch(id: &'a JobId, now: UnixMillis) -> Job;
/// ```
///
/// - `Change` is its [`CallKind`]: `Read`, `Change` or `Timer`.
/// - `Touch` names its variant of `Call` and of `Reply`.
/// - Then the method's signature without `&self` and without the `StoreResult` around what it
///   returns. A borrowed argument is written `&'a T`: `'a` is the call's borrow, which
///   `Call` and `Reply` hold.
///
/// From that entry:
///
/// - `Store::touch(&self, id: &JobId, now: UnixMillis) -> StoreResult<Job>`, with its docs;
/// - `Call::Touch { id, now }`: each argument as the hooks see it ([`Seen`]);
/// - `Reply::Touch { id, now, out }`: the same, and `out`, the call's `Ok` value;
/// - `Call::kind`: `CallKind::Change` for `Call::Touch`;
/// - in `impl Store for Hooked<H>`: `touch` between the hook's `before`, and its `after` and
///   `settle` (store/hook.rs);
/// - in `impl Store for EngineStore<D>`: `Engine::touch(id, now, fx)` (a `Read` is called
///   without `fx`), run by `EngineStore::run` as its kind says (store/engine_store.rs), its
///   result turned into the answer by [`Answer`];
/// - in `impl Store for RedisStore`: `redis::Calls::touch(store, id, now)`, which lives in
///   the module of `store/redis/` that owns that kind of call.
///
/// Besides the calls, the trait has `kind`, `subscribe`, `online_backup` and `stop` (not
/// calls: no hook sees them; each impl above says where they come from) and `push`, a push of
/// one job (a `PushBatch` to the hooks).
macro_rules! store_calls {
    // How `EngineStore` calls the engine: a read borrows it, anything else also records its
    // effects in `fx`.
    (@engine Read $e:ident $fx:ident $name:ident ($($arg:ident),*)) => {{
        let _ = $fx;
        $e.$name($($arg),*)
    }};
    (@engine $kind:ident $e:ident $fx:ident $name:ident ($($arg:ident),*)) => {
        $e.$name($($arg,)* $fx)
    };
    (
        $(#[$trait_doc:meta])*
        pub trait Store {
            $(
                $(#[$doc:meta])*
                $kind:ident $Call:ident fn $name:ident($($arg:ident: $ty:ty),* $(,)?) -> $ret:ty;
            )*
        }
    ) => {
        $(#[$trait_doc])*
        #[async_trait::async_trait]
        pub trait Store: Send + Sync + 'static {
            /// A short name for logs and `/readyz`: `redis`, `embedded`, `memory`.
            fn kind(&self) -> &'static str;

            /// A receiver of this store's events (from every instance sharing it).
            fn subscribe(&self) -> tokio::sync::broadcast::Receiver<StoreEvent>;

            /// The store's online backup, if it has one (the embedded store's).
            fn online_backup(&self) -> Option<&dyn OnlineBackup> {
                None
            }

            /// Hands back what the store holds for consumers that have not asked for it yet
            /// (the Redis read-ahead, `redis/read_ahead.rs`), so that a stopped instance leaves
            /// no job waiting for its TTR. Called once at shutdown, after the front ends
            /// stopped; the store still answers calls after it.
            async fn stop(&self) {}

            $(
                $(#[$doc])*
                #[allow(clippy::extra_unused_lifetimes)]
                async fn $name<'a>(&self, $($arg: $ty),*) -> StoreResult<$ret>;
            )*

            /// Pushes one job.
            async fn push(
                &self,
                job: $crate::job::JobSpec,
                mode: PushMode,
                now: $crate::job::UnixMillis,
            ) -> StoreResult<PushOutcome> {
                let mut out = self.push_batch(vec![job], mode, now).await?;
                out.pop()
                    .unwrap_or_else(|| Err(StoreError::Unavailable("empty push reply".into())))
            }
        }

        /// A [`Store`] call and its arguments, borrowed from the caller, as a hook sees it
        /// (`hook.rs`): one variant per call declared in `store_calls!`, with its arguments
        /// as [`Seen`](define::Seen) (a push's jobs as their number, a reschedule's change as
        /// its new due time: both are moved into the store). [`Store::push`] arrives as a
        /// `PushBatch` of one.
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        pub enum Call<'a> {
            $(
                #[doc = concat!("[`Store::", stringify!($name), "`]")]
                $Call { $($arg: <$ty as define::Seen<'a>>::Seen),* },
            )*
        }

        /// A call that succeeded, as a hook sees it: the [`Call`] variant of the same name,
        /// with what the call returned (`out`, borrowed from the answer its caller gets).
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        pub enum Reply<'a> {
            $(
                #[doc = concat!("[`Store::", stringify!($name), "`] and its answer")]
                $Call { $($arg: <$ty as define::Seen<'a>>::Seen,)* out: &'a $ret },
            )*
        }

        impl Call<'_> {
            /// What the call does to jobs, as declared.
            pub fn kind(&self) -> define::CallKind {
                match self {
                    $( Call::$Call { .. } => define::CallKind::$kind, )*
                }
            }
        }

        #[async_trait::async_trait]
        impl<H: hook::StoreHook> Store for hook::Hooked<H> {
            fn kind(&self) -> &'static str {
                self.hook().kind(self.inner())
            }

            fn subscribe(&self) -> tokio::sync::broadcast::Receiver<StoreEvent> {
                self.hook().subscribe(self.inner())
            }

            fn online_backup(&self) -> Option<&dyn OnlineBackup> {
                self.inner().online_backup()
            }

            async fn stop(&self) {
                self.inner().stop().await
            }

            $(
                #[allow(clippy::extra_unused_lifetimes)]
                async fn $name<'a>(&self, $($arg: $ty),*) -> StoreResult<$ret> {
                    let seen = ($(define::Seen::seen(&$arg),)*);
                    let call = {
                        let ($($arg,)*) = seen;
                        Call::$Call { $($arg),* }
                    };
                    let pushed = define::pushed_for::<H>(&[$(define::Seen::pushed(&$arg)),*]);
                    self.hook().before(&call)?;
                    let result = self.inner().$name($($arg),*).await;
                    let settled = {
                        let reply = result.as_ref().map(|out| {
                            let ($($arg,)*) = seen;
                            Reply::$Call { $($arg,)* out }
                        });
                        self.hook().after(&call, reply);
                        self.hook().settle(&call, reply, &pushed)
                    };
                    settled.await?;
                    result
                }
            )*
        }

        #[async_trait::async_trait]
        impl<D: engine_store::Durability> Store for engine_store::EngineStore<D> {
            fn kind(&self) -> &'static str {
                D::KIND
            }

            fn subscribe(&self) -> tokio::sync::broadcast::Receiver<StoreEvent> {
                self.events().subscribe()
            }

            fn online_backup(&self) -> Option<&dyn OnlineBackup> {
                self.durability().online_backup()
            }

            $(
                #[allow(clippy::extra_unused_lifetimes)]
                async fn $name<'a>(&self, $($arg: $ty),*) -> StoreResult<$ret> {
                    let kind = define::CallKind::$kind;
                    let out = self
                        .run(kind, |e, fx| store_calls!(@engine $kind e fx $name($($arg),*)))
                        .await?;
                    define::Answer::<$ret>::answer(out)
                }
            )*
        }

        #[async_trait::async_trait]
        impl Store for redis::RedisStore {
            fn kind(&self) -> &'static str {
                redis::Calls::kind(self)
            }

            fn subscribe(&self) -> tokio::sync::broadcast::Receiver<StoreEvent> {
                redis::Calls::subscribe(self)
            }

            async fn stop(&self) {
                redis::Calls::stop(self).await
            }

            $(
                #[allow(clippy::extra_unused_lifetimes)]
                async fn $name<'a>(&self, $($arg: $ty),*) -> StoreResult<$ret> {
                    redis::Calls::$name(self, $($arg),*).await
                }
            )*
        }
    };
}

pub(super) use store_calls;
