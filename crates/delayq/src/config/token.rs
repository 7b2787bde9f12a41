//! Bearer tokens: [`AuthToken`], its rules, and the rules of the `auth_tokens` and
//! `auth_token_file` settings. A token is never printed: not by `Debug`, not in an error.
//! Checking a request's token is `api/auth.rs`'s job.

use super::define::Rule;
use std::fmt;
use std::path::PathBuf;

/// Shortest accepted bearer token: 16 random characters are beyond guessing over HTTP.
pub const MIN_AUTH_TOKEN_LEN: usize = 16;

/// A bearer token clients must present. Its `Debug` hides it, so no `Config` or argument
/// dump shows a secret; [`AuthToken::check`] holds the rules, applied when the config loads.
#[derive(Clone, PartialEq, Eq)]
pub struct AuthToken(String);

impl AuthToken {
    /// The token as sent in the header, for comparing.
    pub fn as_bytes(&self) -> &[u8] {
        self.0.as_bytes()
    }

    /// The token, for sending it.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// At least [`MIN_AUTH_TOKEN_LEN`] characters, printable ASCII without spaces or commas
    /// (what fits an `Authorization` header and a comma-separated variable). The message never
    /// quotes the token.
    pub fn check(&self) -> Result<(), String> {
        if let Some(i) = self
            .0
            .bytes()
            .position(|b| !b.is_ascii_graphic() || b == b',')
        {
            return Err(format!(
                "has a character other than printable ASCII at position {} (spaces and commas \
                 are not allowed either)",
                i + 1
            ));
        }
        if self.0.len() < MIN_AUTH_TOKEN_LEN {
            return Err(format!(
                "is {} characters long; at least {MIN_AUTH_TOKEN_LEN} are required",
                self.0.len()
            ));
        }
        Ok(())
    }
}

impl From<&str> for AuthToken {
    fn from(s: &str) -> AuthToken {
        AuthToken(s.to_string())
    }
}

impl From<String> for AuthToken {
    fn from(s: String) -> AuthToken {
        AuthToken(s)
    }
}

/// For clap: any string is taken here and checked with the other settings, so the error names
/// where it came from.
impl std::str::FromStr for AuthToken {
    type Err = std::convert::Infallible;
    fn from_str(s: &str) -> Result<AuthToken, Self::Err> {
        Ok(AuthToken::from(s))
    }
}

impl fmt::Debug for AuthToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("AuthToken(***)")
    }
}

/// `auth_tokens`: each token checked; an error says which one (by position) and why.
pub(super) struct Tokens;

impl Rule<Vec<AuthToken>, Vec<AuthToken>> for Tokens {
    fn apply(&self, tokens: Vec<AuthToken>) -> Result<Vec<AuthToken>, String> {
        for (i, token) in tokens.iter().enumerate() {
            token.check().map_err(|m| format!("token {} {m}", i + 1))?;
        }
        Ok(tokens)
    }

    fn limits(&self) -> Option<String> {
        Some(format!(
            "each at least {MIN_AUTH_TOKEN_LEN} printable ASCII characters, no spaces or commas"
        ))
    }
}

/// `auth_token_file`: the tokens of the file, one per line, surrounding whitespace trimmed,
/// blank lines and lines starting with `#` ignored. An unreadable file, a bad token (named by
/// line, not quoted) or a file without any token is an error naming the file.
pub(super) struct TokenFile;

impl Rule<PathBuf, Vec<AuthToken>> for TokenFile {
    fn apply(&self, path: PathBuf) -> Result<Vec<AuthToken>, String> {
        let text = std::fs::read_to_string(&path)
            .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        let mut tokens = Vec::new();
        for (n, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let token = AuthToken::from(line);
            token
                .check()
                .map_err(|m| format!("the token on line {} of {} {m}", n + 1, path.display()))?;
            tokens.push(token);
        }
        if tokens.is_empty() {
            return Err(format!("{} holds no token", path.display()));
        }
        Ok(tokens)
    }
}
