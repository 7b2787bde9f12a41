//! The rules of the journal's settings (`journal`, `journal_mode`): the URL's form is checked
//! by the journal's own rule ([`crate::journal::check_url`]), without connecting.

use super::define::{Rule, ShowDefault};
use crate::journal::JournalMode;

/// A PostgreSQL or MySQL/MariaDB URL.
pub(super) struct JournalUrl;

impl Rule<String, Option<String>> for JournalUrl {
    fn apply(&self, url: String) -> Result<Option<String>, String> {
        crate::journal::check_url(&url)?;
        Ok(Some(url))
    }
}

/// `sync` or `async`.
pub(super) struct JournalModeRule;

impl Rule<String, JournalMode> for JournalModeRule {
    fn apply(&self, given: String) -> Result<JournalMode, String> {
        JournalMode::parse(&given).ok_or_else(|| format!("{given:?} is not `sync` or `async`"))
    }

    fn limits(&self) -> Option<String> {
        Some("`sync`, `async`".into())
    }
}

impl ShowDefault for JournalMode {
    fn show(&self) -> Option<String> {
        Some(format!("`{self}`"))
    }
}
