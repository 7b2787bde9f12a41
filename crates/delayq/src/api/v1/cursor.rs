//! Listing cursors (`GET /v1/topics/{topic}/jobs`): the position after a page's last job, given
//! out as `next_cursor` and read back from `cursor`. Opaque to clients; anything this server did
//! not give out is refused naming `cursor`.

use super::ApiResult;
use super::error::ApiError;
use crate::job::JobId;
use crate::store::ListKey;
use base64::Engine as _;

/// A listing's cursor: the [`ListKey`] of the page's last job as `a.b.c.id`, base64url.
pub(super) fn encode_cursor(k: &ListKey) -> String {
    let text = format!("{}.{}.{}.{}", k.a, k.b, k.c, k.id);
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(text)
}

/// The [`ListKey`] of a cursor [`encode_cursor`] made.
pub(super) fn decode_cursor(s: &str) -> ApiResult<ListKey> {
    let bad = || ApiError::field("cursor", "is not a cursor this server gave out");
    let raw = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(s)
        .map_err(|_| bad())?;
    let text = String::from_utf8(raw).map_err(|_| bad())?;
    let mut parts = text.splitn(4, '.');
    let mut num = || -> ApiResult<u64> {
        let p = parts.next().ok_or_else(bad)?;
        if p.is_empty() || !p.bytes().all(|b| b.is_ascii_digit()) {
            return Err(bad());
        }
        p.parse().map_err(|_| bad())
    };
    let (a, b, c) = (num()?, num()?, num()?);
    let id = parts.next().ok_or_else(bad)?;
    let id = JobId::parse(id).map_err(|_| bad())?;
    Ok(ListKey { a, b, c, id })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursors_read_back_and_anything_else_is_refused_naming_the_cursor() {
        let k = ListKey {
            a: 1,
            b: 2,
            c: u64::MAX,
            id: JobId::parse("a.b/c d").unwrap(),
        };
        assert_eq!(decode_cursor(&encode_cursor(&k)), Ok(k));
        for bad in ["", "x", "MS4yLjM", "!!", "MS4yLjMu"] {
            match decode_cursor(bad) {
                Err(ApiError::InvalidField { field, .. }) => assert_eq!(field, "cursor"),
                other => panic!("{bad}: {other:?}"),
            }
        }
    }
}
