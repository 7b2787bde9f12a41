//! Reading /v1 request bodies: JSON parsed by hand from the raw bytes, field by field, so that
//! every mistake becomes a 400 naming the exact field (`jobs[2].ttr_ms`) instead of a serde
//! message about a line and column.
//!
//! [`object`] refuses a key given twice in any object of the body, naming it. [`Fields`] checks
//! one JSON object: unknown keys are refused (a typo such as `delay` for
//! `delay_ms` would otherwise be silently ignored), `null` counts as absent, and each typed
//! accessor names the field when the value has the wrong type. Range checks that belong to the
//! domain stay in job.rs and in the handlers; this module only knows JSON types.

use super::error::ApiError;
use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};
use std::cell::RefCell;
use std::fmt;

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
    match strict_json(bytes)? {
        Value::Object(map) => Ok(map),
        other => Err(ApiError::InvalidJson(format!(
            "the request body must be a JSON object, got {}",
            kind(&other)
        ))),
    }
}

/// Parses JSON as `serde_json` does, but refuses an object that has the same key twice (JSON
/// allows it, and parsers disagree on which one counts: `serde_json` keeps the last), as a 400
/// naming the key where it is (`callback.url`, `jobs[2].topic`), as a repeated query parameter
/// is refused. The depth limit is `serde_json`'s.
fn strict_json(bytes: &[u8]) -> Result<Value, ApiError> {
    let repeated = RefCell::new(None);
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let parsed = NoRepeats {
        path: Path::Root,
        repeated: &repeated,
    }
    .deserialize(&mut de)
    .and_then(|v| de.end().map(|()| v));
    match (parsed, repeated.into_inner()) {
        (Ok(v), _) => Ok(v),
        (Err(_), Some(field)) => Err(ApiError::field(field, "is given more than once")),
        (Err(e), None) => Err(ApiError::InvalidJson(format!(
            "the request body is not valid JSON: {e}"
        ))),
    }
}

/// Where a value sits in the body, kept on the stack as the parser descends and written out
/// only to name a repeated key.
#[derive(Clone, Copy)]
enum Path<'a> {
    Root,
    Key(&'a Path<'a>, &'a str),
    Index(&'a Path<'a>, usize),
}

impl Path<'_> {
    /// The API's name of this place: `jobs[2].callback.url`.
    fn write(&self, out: &mut String) {
        match self {
            Path::Root => {}
            Path::Key(parent, key) => {
                parent.write(out);
                if !out.is_empty() {
                    out.push('.');
                }
                out.push_str(key);
            }
            Path::Index(parent, i) => {
                parent.write(out);
                out.push_str(&format!("[{i}]"));
            }
        }
    }
}

/// A JSON value at `path`; on a repeated key, its name goes to `repeated` and parsing stops.
struct NoRepeats<'a> {
    path: Path<'a>,
    repeated: &'a RefCell<Option<String>>,
}

impl<'de> DeserializeSeed<'de> for NoRepeats<'_> {
    type Value = Value;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for NoRepeats<'_> {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }

    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
        // Always finite: JSON has no NaN or infinity.
        Ok(Value::from(v))
    }

    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_owned()))
    }

    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }

    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element_seed(NoRepeats {
            path: Path::Index(&self.path, items.len()),
            repeated: self.repeated,
        })? {
            items.push(item);
        }
        Ok(Value::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut access: A) -> Result<Value, A::Error> {
        let mut map = Map::new();
        while let Some(key) = access.next_key::<String>()? {
            let path = Path::Key(&self.path, &key);
            if map.contains_key(&key) {
                let mut name = String::new();
                path.write(&mut name);
                *self.repeated.borrow_mut() = Some(name);
                return Err(de::Error::custom("a key is given more than once"));
            }
            let value = access.next_value_seed(NoRepeats {
                path,
                repeated: self.repeated,
            })?;
            map.insert(key, value);
        }
        Ok(Value::Object(map))
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

    /// Whether a field is given as `null` (which [`Fields::take`] reads as absent).
    pub fn is_null(&self, field: &str) -> bool {
        matches!(self.map.get(field), Some(Value::Null))
    }

    /// A number from `min` to `max`, fractions allowed.
    pub fn number(&mut self, field: &str, min: f64, max: f64) -> Result<Option<f64>, ApiError> {
        match self.take(field) {
            None => Ok(None),
            Some(Value::Number(n)) if n.as_f64().is_some_and(|f| (min..=max).contains(&f)) => {
                Ok(n.as_f64())
            }
            Some(other) => Err(ApiError::field(
                self.name(field),
                format!(
                    "must be a number from {min} to {max}, got {}",
                    describe(&other)
                ),
            )),
        }
    }

    /// An integer from 1 to `max` ([`integer`]: `5.0` is 5).
    pub fn count(&mut self, field: &str, max: u64) -> Result<Option<u64>, ApiError> {
        match self.take(field) {
            None => Ok(None),
            Some(v) => match integer(&v) {
                Some(n) if (1..=max).contains(&n) => Ok(Some(n)),
                _ => Err(ApiError::field(
                    self.name(field),
                    format!("must be an integer from 1 to {max}, got {}", describe(&v)),
                )),
            },
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

    fn repeated(json: &str) -> Option<String> {
        match object(json.as_bytes(), false) {
            Err(ApiError::InvalidField { field, .. }) => Some(field),
            Ok(_) => None,
            Err(e) => panic!("{json}: {e:?}"),
        }
    }

    #[test]
    fn a_key_given_twice_is_refused_by_its_place_in_the_body() {
        assert_eq!(
            repeated(r#"{"topic":"a","topic":"b"}"#).as_deref(),
            Some("topic")
        );
        assert_eq!(
            repeated(r#"{"callback":{"url":"x","timeout_ms":1,"url":"y"}}"#).as_deref(),
            Some("callback.url")
        );
        assert_eq!(
            repeated(
                r#"{"jobs":[{"topic":"a"},{"id":"1","publish":{"exchange":"","exchange":""}}]}"#
            )
            .as_deref(),
            Some("jobs[1].publish.exchange")
        );
        assert_eq!(
            repeated(r#"{"x":[[{"a":1,"a":1}]]}"#).as_deref(),
            Some("x[0][0].a")
        );
        // Equal values in different objects, and keys differing in case, are not repeats.
        assert_eq!(repeated(r#"{"a":{"k":1},"b":{"k":1},"K":2,"k":3}"#), None);
    }

    #[test]
    fn bodies_without_repeats_parse_as_serde_json_parses_them() {
        for json in [
            r#"{"topic":"t","id":"é\u00e9","delay_ms":1.5e3,"n":-3,"big":18446744073709551615}"#,
            r#"{"a":[1,2.5,null,true,"s",{"b":[]}],"c":{}}"#,
        ] {
            let ours = Value::Object(object(json.as_bytes(), false).unwrap());
            assert_eq!(ours, serde_json::from_str::<Value>(json).unwrap(), "{json}");
        }
        for bad in ["{", r#"{"a":1} x"#, "[1]", r#"{"a":1,}"#] {
            assert!(matches!(
                object(bad.as_bytes(), false),
                Err(ApiError::InvalidJson(_))
            ));
        }
        let deep = format!("{{\"a\":{}{}}}", "[".repeat(100_000), "]".repeat(100_000));
        assert!(matches!(
            object(deep.as_bytes(), false),
            Err(ApiError::InvalidJson(_))
        ));
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
