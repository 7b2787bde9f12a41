//! Reading the `--config` TOML file into the keys `settings!` derives, with errors that name
//! the file, the line and the key at fault. The values' rules are applied later, with the
//! other sources'.

use super::ConfigError;
use serde::de::DeserializeOwned;
use std::path::Path;

/// Reads and parses the file, naming the key at fault when TOML's error allows.
pub(super) fn read<T: DeserializeOwned>(path: &Path) -> Result<T, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|source| ConfigError::ReadFile {
        path: path.to_path_buf(),
        source,
    })?;
    toml::from_str(&text).map_err(|e| {
        let line = e
            .span()
            .map(|span| text[..span.start].matches('\n').count() + 1);
        let key = e.span().and_then(|span| key_at(&text, span.start));
        let message = e.message().trim().to_string();
        ConfigError::File {
            path: path.to_path_buf(),
            key,
            message: match line {
                Some(line) => format!("{message} (line {line})"),
                None => message,
            },
        }
    })
}

/// The key of the line holding byte `at`. An error's span points at the offending key, or at
/// the value of the offending key: the key is what precedes `=` on that line (delayq's file is
/// flat, one key per line).
fn key_at(text: &str, at: usize) -> Option<String> {
    let start = text[..at].rfind('\n').map_or(0, |i| i + 1);
    let end = text[at..].find('\n').map_or(text.len(), |i| at + i);
    let line = text[start..end].trim();
    let key = match line.strip_prefix('[') {
        // A table header: delayq has no tables, the name is the unknown key.
        Some(header) => header.trim_end_matches(']'),
        None => line.split('=').next()?,
    };
    let key = key.trim().trim_matches('"');
    (!key.is_empty() && !key.starts_with('#')).then(|| key.to_string())
}
