//! Serde helpers for the wire format: strict integers and UTC timestamps that always end in `Z`.

use std::fmt;

use serde::de::{self, Deserializer, Unexpected, Visitor};
use serde::Deserialize;

/// Largest value of the spec's `int32` counts (replicas, timeouts, engine sizes).
pub(crate) const INT32_MAX: u64 = i32::MAX as u64;
/// Largest TCP port.
pub(crate) const PORT_MAX: u64 = u16::MAX as u64;

/// A JSON integer in `0..=MAX`. JSON Schema counts `1.0` as an integer, so an integral float is accepted;
/// `1.5`, `-1` and `"1"` are not, each with a message that says what was expected.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Int<const MAX: u64>(pub u64);

impl<'de, const MAX: u64> Deserialize<'de> for Int<MAX> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_u64(IntVisitor::<MAX>).map(Int)
    }
}

struct IntVisitor<const MAX: u64>;

impl<const MAX: u64> IntVisitor<MAX> {
    fn bounded<E: de::Error>(&self, value: u64, unexpected: Unexpected<'_>) -> Result<u64, E> {
        if value <= MAX {
            Ok(value)
        } else {
            Err(E::invalid_value(unexpected, self))
        }
    }
}

impl<const MAX: u64> Visitor<'_> for IntVisitor<MAX> {
    type Value = u64;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "a non-negative integer (at most {MAX})")
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<u64, E> {
        self.bounded(v, Unexpected::Unsigned(v))
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<u64, E> {
        match u64::try_from(v) {
            Ok(v) => self.bounded(v, Unexpected::Unsigned(v)),
            Err(_) => Err(E::invalid_value(Unexpected::Signed(v), &self)),
        }
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<u64, E> {
        // `v <= MAX as f64` is exact for every MAX we use (all below 2^53).
        if v.fract() == 0.0 && v >= 0.0 && v <= MAX as f64 {
            Ok(v as u64)
        } else {
            Err(E::invalid_value(Unexpected::Float(v), &self))
        }
    }
}

/// Narrows a checked [`Int`] to the field's Rust type; the bound makes the conversion infallible in practice.
fn narrow<T: TryFrom<u64>, E: de::Error>(value: u64) -> Result<T, E> {
    T::try_from(value).map_err(|_| E::custom("integer out of range"))
}

/// `#[serde(deserialize_with)]` for a required `u32` count (`int32`, minimum 0).
pub(crate) fn count<'de, D: Deserializer<'de>>(d: D) -> Result<u32, D::Error> {
    narrow(Int::<INT32_MAX>::deserialize(d)?.0)
}

/// `#[serde(deserialize_with)]` for an `integer or null` count; pair with `#[serde(default)]`.
pub(crate) fn opt_count<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u32>, D::Error> {
    Option::<Int<INT32_MAX>>::deserialize(d)?
        .map(|i| narrow(i.0))
        .transpose()
}

/// `#[serde(deserialize_with)]` for an `integer or null` TCP port; pair with `#[serde(default)]`.
pub(crate) fn opt_port<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u16>, D::Error> {
    Option::<Int<PORT_MAX>>::deserialize(d)?
        .map(|i| narrow(i.0))
        .transpose()
}

/// RFC 3339 UTC timestamps with a `Z` suffix (millisecond precision). The Python client rejects `+00:00`,
/// which is what chrono's default serializer writes, so every timestamp on the wire goes through here.
pub mod rfc3339_z {
    use chrono::{DateTime, SecondsFormat, Utc};
    use serde::{Deserialize, Deserializer, Serializer};

    /// Formats `t` as e.g. `2026-11-22T04:34:19.000Z`.
    pub fn format(t: &DateTime<Utc>) -> String {
        t.to_rfc3339_opts(SecondsFormat::Millis, true)
    }

    pub fn serialize<S: Serializer>(t: &DateTime<Utc>, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&format(t))
    }

    /// Accepts any RFC 3339 offset (the typed client reads our own output, but be liberal in what we take).
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<DateTime<Utc>, D::Error> {
        let text = String::deserialize(d)?;
        DateTime::parse_from_rfc3339(&text)
            .map(|t| t.with_timezone(&Utc))
            .map_err(serde::de::Error::custom)
    }

    /// The same for an optional timestamp (null when absent).
    pub mod option {
        use chrono::{DateTime, Utc};
        use serde::{Deserialize, Deserializer, Serializer};

        pub fn serialize<S: Serializer>(
            t: &Option<DateTime<Utc>>,
            s: S,
        ) -> Result<S::Ok, S::Error> {
            match t {
                Some(t) => super::serialize(t, s),
                None => s.serialize_none(),
            }
        }

        pub fn deserialize<'de, D: Deserializer<'de>>(
            d: D,
        ) -> Result<Option<DateTime<Utc>>, D::Error> {
            Option::<String>::deserialize(d)?
                .map(|text| {
                    DateTime::parse_from_rfc3339(&text)
                        .map(|t| t.with_timezone(&Utc))
                        .map_err(serde::de::Error::custom)
                })
                .transpose()
        }
    }
}

/// `message` as the text of a header value: header values are ASCII, so the punctuation the messages use
/// is said in ASCII (`…` as `...`, a dash as `-`, an arrow as `->`, typographic quotes as plain ones), a
/// control character or any other non-ASCII character becomes `?`, and the text is cut at 512 bytes.
pub fn header_text(message: &str) -> String {
    let mut cleaned = String::with_capacity(message.len().min(512));
    for c in message.chars() {
        let ascii = match c {
            '…' => "...",
            '—' | '–' | '‐' | '−' => "-",
            '→' => "->",
            '←' => "<-",
            '‘' | '’' => "'",
            '“' | '”' => "\"",
            '≤' => "<=",
            '≥' => ">=",
            '×' => "x",
            '·' | '•' | '●' => "*",
            c if c.is_ascii() && !c.is_ascii_control() => {
                cleaned.push(c);
                ""
            }
            _ => "?",
        };
        cleaned.push_str(ascii);
        if cleaned.len() >= 512 {
            cleaned.truncate(512);
            break;
        }
    }
    cleaned
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn count_of(v: serde_json::Value) -> Result<u32, String> {
        count(&v).map_err(|e| e.to_string())
    }

    #[test]
    fn integers_accept_integral_floats_and_reject_the_rest() {
        assert_eq!(count_of(json!(3)), Ok(3));
        assert_eq!(count_of(json!(1.0)), Ok(1));
        assert_eq!(count_of(json!(0)), Ok(0));
        assert_eq!(count_of(json!(2147483647)), Ok(2147483647));
        for bad in [
            json!(-1),
            json!(1.5),
            json!("1"),
            json!(2147483648u64),
            json!(null),
        ] {
            let err = count_of(bad.clone()).unwrap_err();
            assert!(err.contains("non-negative integer"), "{bad}: {err}");
        }
    }

    #[test]
    fn ports_stop_at_65535() {
        let port = |v: serde_json::Value| opt_port(&v).map_err(|e| e.to_string());
        assert_eq!(port(json!(65535)), Ok(Some(65535)));
        assert_eq!(port(json!(null)), Ok(None));
        assert!(port(json!(65536)).unwrap_err().contains("at most 65535"));
    }

    #[test]
    fn timestamps_end_in_z() {
        let t = DateTimeUtc::from_timestamp(1_795_321_459, 0).unwrap();
        assert_eq!(rfc3339_z::format(&t), "2026-11-22T04:24:19.000Z");
        let back = rfc3339_z::deserialize(&json!("2026-11-22T04:24:19+00:00")).unwrap();
        assert_eq!(back, t);
    }

    type DateTimeUtc = chrono::DateTime<chrono::Utc>;
}
