//! A `serde_json::Value` deserializer that takes structs only from JSON objects.
//!
//! serde's derived struct visitors also accept a JSON array and fill the fields by position, so
//! `{"provider": ["aws", "us-east-1"]}` would decode. An API body with no additional properties must not, so every
//! decode of untrusted input goes through [`Strict`], which refuses anything but an object where a struct is
//! expected and otherwise behaves like `&Value`.

use serde::de::value::BorrowedStrDeserializer;
use serde::de::{
    self, DeserializeSeed, Deserializer, EnumAccess, MapAccess, SeqAccess, Unexpected,
    VariantAccess, Visitor,
};
use serde::forward_to_deserialize_any;
use serde_json::{Map, Number, Value};

type Error = serde_json::Error;

/// Deserializer over a borrowed JSON value; see the module comment.
pub(crate) struct Strict<'de>(pub &'de Value);

fn unexpected(value: &Value) -> Unexpected<'_> {
    match value {
        Value::Null => Unexpected::Unit,
        Value::Bool(b) => Unexpected::Bool(*b),
        Value::Number(n) => number_unexpected(n),
        Value::String(s) => Unexpected::Str(s),
        Value::Array(_) => Unexpected::Seq,
        Value::Object(_) => Unexpected::Map,
    }
}

fn number_unexpected(n: &Number) -> Unexpected<'static> {
    if let Some(u) = n.as_u64() {
        Unexpected::Unsigned(u)
    } else if let Some(i) = n.as_i64() {
        Unexpected::Signed(i)
    } else {
        Unexpected::Float(n.as_f64().unwrap_or(f64::NAN))
    }
}

fn visit_number<'de, V: Visitor<'de>>(n: &Number, visitor: V) -> Result<V::Value, Error> {
    if let Some(u) = n.as_u64() {
        visitor.visit_u64(u)
    } else if let Some(i) = n.as_i64() {
        visitor.visit_i64(i)
    } else {
        visitor.visit_f64(n.as_f64().unwrap_or(f64::NAN))
    }
}

impl<'de> Deserializer<'de> for Strict<'de> {
    type Error = Error;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        match self.0 {
            Value::Null => visitor.visit_unit(),
            Value::Bool(b) => visitor.visit_bool(*b),
            Value::Number(n) => visit_number(n, visitor),
            Value::String(s) => visitor.visit_borrowed_str(s),
            Value::Array(items) => visitor.visit_seq(Seq(items.iter())),
            Value::Object(map) => visitor.visit_map(Fields::new(map)),
        }
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        match self.0 {
            Value::Null => visitor.visit_none(),
            _ => visitor.visit_some(self),
        }
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Error> {
        match self.0 {
            Value::Object(map) => visitor.visit_map(Fields::new(map)),
            other => Err(de::Error::invalid_type(unexpected(other), &visitor)),
        }
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Error> {
        match self.0 {
            Value::String(s) => visitor.visit_enum(Variant {
                key: s,
                value: None,
            }),
            Value::Object(map) if map.len() == 1 => match map.iter().next() {
                Some((key, value)) => visitor.visit_enum(Variant {
                    key,
                    value: Some(value),
                }),
                None => Err(single_key()),
            },
            Value::Object(_) => Err(single_key()),
            other => Err(de::Error::invalid_type(unexpected(other), &visitor)),
        }
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        visitor: V,
    ) -> Result<V::Value, Error> {
        visitor.visit_newtype_struct(self)
    }

    fn deserialize_ignored_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        visitor.visit_unit()
    }

    forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string
        bytes byte_buf unit unit_struct seq tuple tuple_struct map identifier
    }
}

/// The message serde_json gives, so that [`crate::model::issue`] words it the same way for both.
fn single_key() -> Error {
    de::Error::invalid_value(Unexpected::Map, &"map with a single key")
}

struct Seq<'de>(std::slice::Iter<'de, Value>);

impl<'de> SeqAccess<'de> for Seq<'de> {
    type Error = Error;

    fn next_element_seed<T: DeserializeSeed<'de>>(
        &mut self,
        seed: T,
    ) -> Result<Option<T::Value>, Error> {
        self.0
            .next()
            .map(|item| seed.deserialize(Strict(item)))
            .transpose()
    }

    fn size_hint(&self) -> Option<usize> {
        Some(self.0.len())
    }
}

struct Fields<'de> {
    entries: serde_json::map::Iter<'de>,
    value: Option<&'de Value>,
}

impl<'de> Fields<'de> {
    fn new(map: &'de Map<String, Value>) -> Self {
        Fields {
            entries: map.iter(),
            value: None,
        }
    }
}

impl<'de> MapAccess<'de> for Fields<'de> {
    type Error = Error;

    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, Error> {
        let Some((key, value)) = self.entries.next() else {
            return Ok(None);
        };
        self.value = Some(value);
        seed.deserialize(BorrowedStrDeserializer::new(key))
            .map(Some)
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(&mut self, seed: V) -> Result<V::Value, Error> {
        match self.value.take() {
            Some(value) => seed.deserialize(Strict(value)),
            None => Err(de::Error::custom("value requested before its key")),
        }
    }

    fn size_hint(&self) -> Option<usize> {
        Some(self.entries.len())
    }
}

/// An enum as a bare string (unit variant) or as a one-key object (`{"variant": value}`).
struct Variant<'de> {
    key: &'de str,
    value: Option<&'de Value>,
}

impl<'de> EnumAccess<'de> for Variant<'de> {
    type Error = Error;
    type Variant = Self;

    fn variant_seed<S: DeserializeSeed<'de>>(self, seed: S) -> Result<(S::Value, Self), Error> {
        let variant = seed.deserialize(BorrowedStrDeserializer::<Error>::new(self.key))?;
        Ok((variant, self))
    }
}

impl<'de> VariantAccess<'de> for Variant<'de> {
    type Error = Error;

    fn unit_variant(self) -> Result<(), Error> {
        match self.value {
            None => Ok(()),
            Some(value) => Err(de::Error::invalid_type(unexpected(value), &"a string")),
        }
    }

    fn newtype_variant_seed<T: DeserializeSeed<'de>>(self, seed: T) -> Result<T::Value, Error> {
        match self.value {
            Some(value) => seed.deserialize(Strict(value)),
            // A bare `"hub"` where `{"hub": {…}}` is meant: say what the object form looks like.
            None => Err(de::Error::invalid_type(
                Unexpected::Str(self.key),
                &format!("an object like {{\"{}\": …}}", self.key).as_str(),
            )),
        }
    }

    fn tuple_variant<V: Visitor<'de>>(self, _len: usize, visitor: V) -> Result<V::Value, Error> {
        match self.value {
            Some(Value::Array(items)) => visitor.visit_seq(Seq(items.iter())),
            Some(other) => Err(de::Error::invalid_type(unexpected(other), &visitor)),
            None => Err(de::Error::invalid_type(Unexpected::Str(self.key), &visitor)),
        }
    }

    fn struct_variant<V: Visitor<'de>>(
        self,
        _fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Error> {
        match self.value {
            Some(Value::Object(map)) => visitor.visit_map(Fields::new(map)),
            Some(other) => Err(de::Error::invalid_type(unexpected(other), &visitor)),
            None => Err(de::Error::invalid_type(Unexpected::Str(self.key), &visitor)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;
    use serde_json::json;

    #[derive(Debug, Deserialize, PartialEq)]
    #[serde(deny_unknown_fields)]
    struct Pair {
        a: String,
        b: Option<u8>,
    }

    #[derive(Debug, Deserialize, PartialEq)]
    #[serde(rename_all = "camelCase")]
    enum Choice {
        Plain,
        Boxed(Pair),
    }

    fn strict<'de, T: Deserialize<'de>>(v: &'de Value) -> Result<T, String> {
        T::deserialize(Strict(v)).map_err(|e| e.to_string())
    }

    #[test]
    fn structs_only_from_objects() {
        assert_eq!(
            strict::<Pair>(&json!({"a": "x", "b": null})),
            Ok(Pair {
                a: "x".into(),
                b: None
            })
        );
        let positional = json!(["x", 1]);
        assert!(
            serde_json::from_value::<Pair>(positional.clone()).is_ok(),
            "what serde_json would allow"
        );
        assert!(strict::<Pair>(&positional)
            .unwrap_err()
            .starts_with("invalid type: sequence"));
    }

    #[test]
    fn enums_as_string_or_single_key_object() {
        assert_eq!(strict::<Choice>(&json!("plain")), Ok(Choice::Plain));
        assert_eq!(
            strict::<Choice>(&json!({"boxed": {"a": "y"}})),
            Ok(Choice::Boxed(Pair {
                a: "y".into(),
                b: None
            }))
        );
        assert!(strict::<Choice>(&json!({"plain": null})).is_err());
        assert_eq!(
            strict::<Choice>(&json!("boxed")).unwrap_err(),
            "invalid type: string \"boxed\", expected an object like {\"boxed\": …}"
        );
        assert!(strict::<Choice>(&json!({"boxed": ["y"]})).is_err());
        assert_eq!(
            strict::<Choice>(&json!({})).unwrap_err(),
            "invalid value: map, expected map with a single key"
        );
    }

    #[test]
    fn collections_and_scalars_behave_like_value() {
        let v = json!({"k": ["a", "b"]});
        let map: std::collections::BTreeMap<String, Vec<String>> = strict(&v).unwrap();
        assert_eq!(map["k"], ["a", "b"]);
        assert_eq!(strict::<f64>(&json!(3)), Ok(3.0));
        assert_eq!(strict::<Option<bool>>(&json!(null)), Ok(None));
        assert!(strict::<String>(&json!(1)).is_err());
    }
}
