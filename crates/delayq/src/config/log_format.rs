//! The form of the server's log lines (`log_format`): text for people, JSON for log shippers.
//! Where the lines go and what they say is the binary's (cli.rs sets up `tracing`).

use super::define::{Rule, ShowDefault};
use std::fmt;

/// How each log line is written to stderr.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum LogFormat {
    /// One line of text per event, coloured only on a terminal (and never with `NO_COLOR`).
    #[default]
    Text,
    /// One JSON object per line (time, level, target, message and the event's fields at the
    /// top level), never coloured: what journald, Vector, Fluent Bit and Loki read as is.
    Json,
}

impl fmt::Display for LogFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            LogFormat::Text => "text",
            LogFormat::Json => "json",
        })
    }
}

/// `text` or `json`.
pub(super) struct LogFormatRule;

impl Rule<String, LogFormat> for LogFormatRule {
    fn apply(&self, given: String) -> Result<LogFormat, String> {
        match given.as_str() {
            "text" => Ok(LogFormat::Text),
            "json" => Ok(LogFormat::Json),
            _ => Err(format!("{given:?} is not `text` or `json`")),
        }
    }

    fn limits(&self) -> Option<String> {
        Some("`text`, `json`".into())
    }
}

impl ShowDefault for LogFormat {
    fn show(&self) -> Option<String> {
        Some(format!("`{self}`"))
    }
}
