//! Reading /v1 request bodies: JSON parsed by hand from the raw bytes, field by field, so that
//! every mistake becomes a 400 naming the exact field (`jobs[2].ttr_ms`) instead of a serde
//! message about a line and column.
//!
//! [`Fields`] checks one JSON object: unknown keys are refused (a typo such as `delay` for
//! `delay_ms` would otherwise be silently ignored), `null` counts as absent, and each typed
//! accessor names the field when the value has the wrong type. Range checks that belong to the
//! domain stay in job.rs and in the handlers; this module only knows JSON types.

use super::error::ApiError;
use serde_json::{Map, Value};

/// What kind of JSON value this is, for error messages.
fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(n) if n.is_i64() && n.as_i64().is_some_and(|i| i < 0) => "a negative integer",
        Value::Number(n) if n.is_u64() || n.is_i64() => "an integer",
        Value::Number(_) => "a fractional or too large number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// Parses a request body that must be a JSON object. An empty (or all-whitespace) body is `{}`
/// when `empty_ok`, else an `invalid_json` error.
pub fn object(bytes: &[u8], empty_ok: bool) -> Result<Map<String, Value>, ApiError> {
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return if empty_ok {
            Ok(Map::new())
        } else {
            Err(ApiError::InvalidJson(
                "the request body is empty; expected a JSON object".into(),
            ))
        };
    }
    let value: Value = serde_json::from_slice(bytes)
        .map_err(|e| ApiError::InvalidJson(format!("the request body is not valid JSON: {e}")))?;
    match value {
        Value::Object(map) => Ok(map),
        other => Err(ApiError::InvalidJson(format!(
            "the request body must be a JSON object, got {}",
            kind(&other)
        ))),
    }
}

/// The fields of one JSON object, taken out one by one.
pub struct Fields {
    map: Map<String, Value>,
    /// Prepended to field names in errors: `""` at the top level, `"jobs[3]."` in a batch.
    prefix: String,
}

impl Fields {
    /// Checks that every key of `map` is one of `allowed`.
    pub fn new(
        map: Map<String, Value>,
        prefix: impl Into<String>,
        allowed: &[&str],
    ) -> Result<Fields, ApiError> {
        let prefix = prefix.into();
        if let Some(unknown) = map.keys().find(|k| !allowed.contains(&k.as_str())) {
            return Err(ApiError::field(
                format!("{prefix}{unknown}"),
                format!("unknown field; expected one of {}", allowed.join(", ")),
            ));
        }
        Ok(Fields { map, prefix })
    }

    /// Checks a JSON value that must be an object (an element of a batch).
    pub fn from_value(value: Value, name: &str, allowed: &[&str]) -> Result<Fields, ApiError> {
        match value {
            Value::Object(map) => Fields::new(map, format!("{name}."), allowed),
            other => Err(ApiError::field(
                name,
                format!("must be an object, got {}", kind(&other)),
            )),
        }
    }

    /// The full name of a field, for errors.
    pub fn name(&self, field: &str) -> String {
        format!("{}{field}", self.prefix)
    }

    /// The value of a field; `None` when absent or `null`.
    pub fn take(&mut self, field: &str) -> Option<Value> {
        match self.map.remove(field) {
            None | Some(Value::Null) => None,
            Some(v) => Some(v),
        }
    }

    pub fn string(&mut self, field: &str) -> Result<Option<String>, ApiError> {
        match self.take(field) {
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some(s)),
            Some(other) => Err(ApiError::field(
                self.name(field),
                format!("must be a string, got {}", kind(&other)),
            )),
        }
    }

    pub fn bool(&mut self, field: &str) -> Result<Option<bool>, ApiError> {
        match self.take(field) {
            None => Ok(None),
            Some(Value::Bool(b)) => Ok(Some(b)),
            Some(other) => Err(ApiError::field(
                self.name(field),
                format!("must be true or false, got {}", kind(&other)),
            )),
        }
    }

    /// A non-negative integer that fits in a `u64` ([`integer`]: `5.0` is 5).
    pub fn u64(&mut self, field: &str) -> Result<Option<u64>, ApiError> {
        match self.take(field) {
            None => Ok(None),
            Some(v) => integer(&v)
                .map(Some)
                .ok_or_else(|| ApiError::field(self.name(field), not_u64(&v))),
        }
    }

    /// A non-negative integer that fits in a `u32` ([`integer`]: `5.0` is 5).
    pub fn u32(&mut self, field: &str) -> Result<Option<u32>, ApiError> {
        match self.take(field) {
            None => Ok(None),
            Some(v) => integer(&v)
                .and_then(|n| u32::try_from(n).ok())
                .map(Some)
                .ok_or_else(|| {
                    ApiError::field(
                        self.name(field),
                        format!(
                            "must be an integer between 0 and {}, got {}",
                            u32::MAX,
                            describe(&v)
                        ),
                    )
                }),
        }
    }

    pub fn array(&mut self, field: &str) -> Result<Option<Vec<Value>>, ApiError> {
        match self.take(field) {
            None => Ok(None),
            Some(Value::Array(a)) => Ok(Some(a)),
            Some(other) => Err(ApiError::field(
                self.name(field),
                format!("must be an array, got {}", kind(&other)),
            )),
        }
    }

    /// An array of strings, each element's errors naming it (`ids[2]`).
    pub fn strings(&mut self, field: &str) -> Result<Option<Vec<String>>, ApiError> {
        let Some(items) = self.array(field)? else {
            return Ok(None);
        };
        let name = self.name(field);
        items
            .into_iter()
            .enumerate()
            .map(|(i, v)| match v {
                Value::String(s) => Ok(s),
                other => Err(ApiError::field(
                    format!("{name}[{i}]"),
                    format!("must be a string, got {}", kind(&other)),
                )),
            })
            .collect::<Result<Vec<_>, _>>()
            .map(Some)
    }

    /// An array of non-negative integers, each element's errors naming it.
    pub fn u64s(&mut self, field: &str) -> Result<Option<Vec<u64>>, ApiError> {
        let Some(items) = self.array(field)? else {
            return Ok(None);
        };
        let name = self.name(field);
        items
            .iter()
            .enumerate()
            .map(|(i, v)| {
                integer(v).ok_or_else(|| ApiError::field(format!("{name}[{i}]"), not_u64(v)))
            })
            .collect::<Result<Vec<_>, _>>()
            .map(Some)
    }
}

/// The parameters of a request's query string (GET routes), taken out one by one: unknown or
/// repeated parameters are refused, each accessor names the parameter in its errors.
pub struct Query {
    map: std::collections::HashMap<String, String>,
}

impl Query {
    /// Parses `raw` (the query string, percent-encoded, without `?`), checking that every
    /// parameter is one of `allowed` and given at most once.
    pub fn new(raw: Option<&str>, allowed: &[&str]) -> Result<Query, ApiError> {
        let mut map = std::collections::HashMap::new();
        for (k, v) in url::form_urlencoded::parse(raw.unwrap_or("").as_bytes()) {
            if !allowed.contains(&k.as_ref()) {
                return Err(ApiError::field(
                    k.as_ref(),
                    format!("unknown parameter; expected one of {}", allowed.join(", ")),
                ));
            }
            if map.insert(k.to_string(), v.into_owned()).is_some() {
                return Err(ApiError::field(k.as_ref(), "is given more than once"));
            }
        }
        Ok(Query { map })
    }

    pub fn string(&mut self, name: &str) -> Option<String> {
        self.map.remove(name)
    }

    /// A decimal integer >= 0 that fits in a `u64`.
    pub fn u64(&mut self, name: &str) -> Result<Option<u64>, ApiError> {
        match self.map.remove(name) {
            None => Ok(None),
            Some(v) => match v.parse::<u64>() {
                Ok(n) if v.bytes().all(|b| b.is_ascii_digit()) => Ok(Some(n)),
                _ => Err(ApiError::field(
                    name,
                    format!("must be an integer >= 0, got {:?}", shorten(&v)),
                )),
            },
        }
    }

    /// `true` or `false`.
    pub fn bool(&mut self, name: &str) -> Result<Option<bool>, ApiError> {
        match self.map.remove(name).as_deref() {
            None => Ok(None),
            Some("true") => Ok(Some(true)),
            Some("false") => Ok(Some(false)),
            Some(other) => Err(ApiError::field(
                name,
                format!("must be true or false, got {:?}", shorten(other)),
            )),
        }
    }
}

/// At most 40 characters of a parameter's value, for an error message.
pub fn shorten(v: &str) -> String {
    v.chars().take(40).collect()
}

/// The value of a JSON number that is a non-negative integer fitting in a `u64`. As in JSON
/// Schema, which the OpenAPI document is written in, a number is an integer when its fractional
/// part is zero, however it is written: `1614`, `1614.0` and `1.614e3` are all 1614. A number
/// written with a fraction or an exponent is read as an `f64`, exact up to 2^53, beyond every
/// limit /v1 accepts.
fn integer(v: &Value) -> Option<u64> {
    let Value::Number(n) = v else { return None };
    if let Some(u) = n.as_u64() {
        return Some(u);
    }
    // 2^64 as an `f64`: the first value that no longer fits.
    const TWO_POW_64: f64 = 18_446_744_073_709_551_616.0;
    match n.as_f64() {
        // `-0.0 >= 0.0`, so minus zero is 0, as in JSON Schema.
        Some(f) if f.fract() == 0.0 && (0.0..TWO_POW_64).contains(&f) => Some(f as u64),
        _ => None,
    }
}

/// A value, shortened for an error message (numbers are shown, other things described).
fn describe(v: &Value) -> String {
    match v {
        Value::Number(n) => n.to_string(),
        other => kind(other).to_string(),
    }
}

fn not_u64(v: &Value) -> String {
    format!("must be an integer >= 0, got {}", describe(v))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(json: &str) -> Option<u64> {
        integer(&serde_json::from_str(json).unwrap())
    }

    #[test]
    fn an_integer_may_have_a_zero_fraction_or_an_exponent() {
        assert_eq!(read("1614"), Some(1614));
        assert_eq!(read("1614.0"), Some(1614));
        assert_eq!(read("1.614e3"), Some(1614));
        assert_eq!(read("-0.0"), Some(0));
        assert_eq!(read("18446744073709551615"), Some(u64::MAX));
        assert_eq!(read("1e19"), Some(10_000_000_000_000_000_000));
    }

    #[test]
    fn fractions_negatives_and_numbers_past_u64_are_not_integers_here() {
        for json in [
            "1614.5",
            "1e-3",
            "-1",
            "-1.0",
            "18446744073709551616",
            "1e20",
            "\"5\"",
            "null",
        ] {
            assert_eq!(read(json), None, "{json}");
        }
    }
}
