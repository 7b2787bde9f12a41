//! Secrets kept out of logs and error messages: [`redact_url`] hides a URL's credentials.
//! Low on purpose: the journal, the server and anything else that names a URL in an error use
//! it without depending on each other.

/// A URL fit for logs and errors: any `user:password@` part is replaced by `***@`.
pub fn redact_url(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme_end), Some(at)) if at > scheme_end => {
            format!("{}***{}", &url[..scheme_end + 3], &url[at..])
        }
        _ => url.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redacted_urls_hide_credentials() {
        assert_eq!(
            redact_url("redis://user:secret@host:6379/0"),
            "redis://***@host:6379/0"
        );
        assert_eq!(redact_url("redis://host:6379"), "redis://host:6379");
    }
}
