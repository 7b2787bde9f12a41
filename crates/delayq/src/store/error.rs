//! Why a store call did not happen: [`StoreError`], and the [`Cause`] of a failure that was
//! not the job's fault (the store could not be reached, or holds data it cannot read).

use crate::job::JobState;
use std::error::Error;
use std::fmt;
use std::ops::Deref;
use std::sync::Arc;

/// Why a store operation did not happen. Domain refusals (`NotFound`, `WrongState`, `Exists`)
/// change nothing; `Unavailable` means the store could not be reached and nothing is known to
/// have changed.
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
#[non_exhaustive]
pub enum StoreError {
    #[error("job not found")]
    NotFound,
    /// The job exists but is in a state that does not allow the operation.
    #[error("job is {0}")]
    WrongState(JobState),
    /// A push without replace named an id that already exists.
    #[error("a job with this id already exists")]
    Exists,
    #[error("store unavailable: {0}")]
    Unavailable(Cause),
    /// Stored data could not be decoded; names the file or key.
    #[error("corrupt data: {0}")]
    Corrupt(Cause),
}

impl StoreError {
    /// `Unavailable`, saying what was being done, caused by `source` (a redb, I/O or Redis
    /// error), which stays reachable through [`Cause::source`].
    pub fn unavailable(
        context: impl fmt::Display,
        source: impl Error + Send + Sync + 'static,
    ) -> StoreError {
        StoreError::Unavailable(Cause::with_source(context, source))
    }

    /// `Corrupt`, naming what could not be read, caused by `source`.
    pub fn corrupt(
        context: impl fmt::Display,
        source: impl Error + Send + Sync + 'static,
    ) -> StoreError {
        StoreError::Corrupt(Cause::with_source(context, source))
    }
}

pub type StoreResult<T> = Result<T, StoreError>;

/// What went wrong: a message for people (what was being done, and the underlying error's own
/// message), and the underlying error itself, typed, when there is one.
///
/// The message already includes the source's text, so [`Error::source`] of a [`StoreError`]
/// does not repeat it; code that needs the typed error asks [`Cause::source`] or
/// [`Cause::downcast_ref`]. Two causes are equal when their messages are.
#[derive(Clone)]
pub struct Cause {
    message: String,
    source: Option<Arc<dyn Error + Send + Sync>>,
}

impl Cause {
    /// A cause with no underlying error.
    pub fn new(message: impl Into<String>) -> Cause {
        Cause {
            message: message.into(),
            source: None,
        }
    }

    /// `"{context}: {source}"`, keeping `source`.
    pub fn with_source(
        context: impl fmt::Display,
        source: impl Error + Send + Sync + 'static,
    ) -> Cause {
        Cause {
            message: format!("{context}: {source}"),
            source: Some(Arc::new(source)),
        }
    }

    /// The same underlying error under a new message, for a caller that says more about
    /// what failed (the message should include this cause's own).
    pub fn restated(&self, message: impl Into<String>) -> Cause {
        Cause {
            message: message.into(),
            source: self.source.clone(),
        }
    }

    /// The whole message.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// The underlying error, if the failure came from one.
    pub fn source(&self) -> Option<&(dyn Error + Send + Sync + 'static)> {
        self.source.as_deref()
    }

    /// The underlying error as `E`, if it is one.
    pub fn downcast_ref<E: Error + 'static>(&self) -> Option<&E> {
        self.source.as_deref().and_then(|e| e.downcast_ref::<E>())
    }

    /// `message` as it is (it already says what `source` says, in its own words), keeping
    /// `source`.
    pub fn with_message(
        message: impl Into<String>,
        source: impl Error + Send + Sync + 'static,
    ) -> Cause {
        Cause {
            message: message.into(),
            source: Some(Arc::new(source)),
        }
    }
}

impl fmt::Display for Cause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl fmt::Debug for Cause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut d = f.debug_struct("Cause");
        d.field("message", &self.message);
        if let Some(source) = &self.source {
            d.field("source", source);
        }
        d.finish()
    }
}

impl PartialEq for Cause {
    fn eq(&self, other: &Cause) -> bool {
        self.message == other.message
    }
}

impl Eq for Cause {}

impl Deref for Cause {
    type Target = str;
    fn deref(&self) -> &str {
        &self.message
    }
}

impl From<String> for Cause {
    fn from(message: String) -> Cause {
        Cause::new(message)
    }
}

impl From<&str> for Cause {
    fn from(message: &str) -> Cause {
        Cause::new(message)
    }
}

impl From<Cause> for String {
    fn from(cause: Cause) -> String {
        cause.message
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cause_keeps_its_typed_source_and_shows_its_text_once() {
        let io = std::io::Error::new(std::io::ErrorKind::StorageFull, "disk full");
        let e = StoreError::unavailable("cannot append to wal-7.log", io);
        assert_eq!(
            e.to_string(),
            "store unavailable: cannot append to wal-7.log: disk full"
        );
        let StoreError::Unavailable(cause) = &e else {
            panic!("{e:?}")
        };
        let typed = cause
            .downcast_ref::<std::io::Error>()
            .expect("an io::Error");
        assert_eq!(typed.kind(), std::io::ErrorKind::StorageFull);
        assert!(Error::source(&e).is_none(), "the message already says it");
    }

    #[test]
    fn causes_compare_by_message() {
        let a = StoreError::Corrupt(Cause::new("job:a"));
        let b = StoreError::corrupt("job:a", std::fmt::Error);
        assert_eq!(a, StoreError::Corrupt("job:a".into()));
        assert_ne!(a, b);
    }
}
