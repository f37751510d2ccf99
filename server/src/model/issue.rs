//! Validation issues (`{path, message}`), path building, and turning serde errors into issues.

use std::fmt;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use utoipa::ToSchema;

use crate::model::strict::Strict;

/// One problem with a request body. `path` is dotted with indices (`compute.scaling.schedule[1].at`), and empty
/// when the problem is with the whole body.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct Issue {
    pub path: String,
    pub message: String,
}

impl Issue {
    pub fn new(path: impl Into<String>, message: impl Into<String>) -> Self {
        Issue {
            path: path.into(),
            message: message.into(),
        }
    }
}

impl fmt::Display for Issue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.path.is_empty() {
            f.write_str(&self.message)
        } else {
            write!(f, "{}: {}", self.path, self.message)
        }
    }
}

/// Collects issues so that every rule runs and the caller hears about all problems at once.
#[derive(Debug, Default)]
pub(crate) struct Issues(Vec<Issue>);

impl Issues {
    pub(crate) fn push(&mut self, path: impl Into<String>, message: impl Into<String>) {
        self.0.push(Issue::new(path, message));
    }

    pub(crate) fn extend(&mut self, more: impl IntoIterator<Item = Issue>) {
        self.0.extend(more);
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// `Ok(value)` when nothing was collected.
    pub(crate) fn into_result<T>(self, value: T) -> Result<T, Vec<Issue>> {
        if self.0.is_empty() {
            Ok(value)
        } else {
            Err(self.0)
        }
    }

    pub(crate) fn into_vec(self) -> Vec<Issue> {
        self.0
    }
}

/// `base.key`, or `base["key"]` when the key would make the dotted path ambiguous (env names are user data).
pub(crate) fn child(base: &str, key: &str) -> String {
    let plain = !key.is_empty()
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    match (base.is_empty(), plain) {
        (true, true) => key.to_owned(),
        (false, true) => format!("{base}.{key}"),
        (_, false) => format!("{base}[{}]", Value::String(key.to_owned())),
    }
}

/// `base[index]`.
pub(crate) fn index(base: &str, index: usize) -> String {
    format!("{base}[{index}]")
}

/// Parses request body text. Malformed JSON is one issue for the whole body.
pub fn parse_json(body: &[u8]) -> Result<Value, Vec<Issue>> {
    serde_json::from_slice(body).map_err(|e| vec![Issue::new("", format!("malformed JSON: {e}"))])
}

/// Structural decode of `value` into `T`: the first serde error becomes an issue at the path where it happened.
/// Where the value may hold a secret, the message does not quote it (see [`may_hold_a_secret`]).
pub(crate) fn decode<'de, T: Deserialize<'de>>(value: &'de Value) -> Result<T, Issue> {
    serde_path_to_error::deserialize(Strict(value)).map_err(|err| {
        let path = path_of(err.path());
        let mut issue = structural_issue(&path, &err.into_inner().to_string());
        if may_hold_a_secret(&issue.path) {
            issue.message = without_value(&issue.message);
        }
        issue
    })
}

/// The fields that hold secrets (`model.secrets`, the custom image's registry credentials, a user's
/// `password` in the admin bodies), what is in them, and what holds them: a wrong value at any of these
/// paths may be a secret put in the wrong shape.
fn may_hold_a_secret(path: &str) -> bool {
    const SECRET_FIELDS: [&str; 3] = [
        "model.secrets",
        "model.image.custom.credentials",
        "password",
    ];
    // `inner` is `outer` or a path inside it.
    let within = |outer: &str, inner: &str| {
        outer.is_empty()
            || inner
                .strip_prefix(outer)
                .is_some_and(|rest| rest.is_empty() || rest.starts_with(['.', '[']))
    };
    SECRET_FIELDS
        .iter()
        .any(|field| within(path, field) || within(field, path))
}

/// A serde message without the value it quotes: `invalid type: string "…", expected a string or null`
/// becomes `invalid type: a string, expected a string or null`. Other messages quote no value (field and
/// variant names at most) and are kept.
pub(crate) fn without_value(message: &str) -> String {
    let Some((lead, rest)) = ["invalid type: ", "invalid value: "]
        .iter()
        .find_map(|lead| Some((*lead, message.strip_prefix(lead)?)))
    else {
        return message.to_owned();
    };
    let found = [
        ("string", "a string"),
        ("integer", "a number"),
        ("floating point", "a number"),
        ("boolean", "a boolean"),
        ("sequence", "an array"),
        ("map", "an object"),
        ("unit value", "null"),
    ]
    .iter()
    .find(|(serde_word, _)| rest.starts_with(serde_word))
    .map_or("a value", |(_, json_word)| json_word);
    match rest.rsplit_once(", expected ") {
        Some((_, expected)) => format!("{lead}{found}, expected {expected}"),
        None => format!("{lead}{found}"),
    }
}

fn path_of(path: &serde_path_to_error::Path) -> String {
    use serde_path_to_error::Segment;
    path.iter()
        .fold(String::new(), |acc, segment| match segment {
            Segment::Seq { index: i } => index(&acc, *i),
            Segment::Map { key } | Segment::Enum { variant: key } => child(&acc, key),
            Segment::Unknown => child(&acc, "?"),
        })
}

/// serde reports a missing field at the enclosing object; point the path at the field itself (an unknown field's
/// path already ends with it), and replace Rust type names in messages by JSON words.
pub(crate) fn structural_issue(path: &str, message: &str) -> Issue {
    if let Some(field) = message
        .strip_prefix("missing field `")
        .and_then(|rest| rest.split('`').next())
    {
        return Issue::new(child(path, field), message);
    }
    Issue::new(path, json_words(message))
}

fn json_words(message: &str) -> String {
    const SINGLE_KEY: &str = "invalid value: map, expected map with a single key";
    if message == SINGLE_KEY {
        return "must have exactly one key".to_owned();
    }
    // `expected struct Provider` / `expected enum ModelImage` / `expected a map` leak Rust vocabulary.
    if let Some((head, tail)) = message.split_once("expected ") {
        let word = if tail.starts_with("struct ") || tail == "a map" {
            Some("an object")
        } else if tail.starts_with("enum ") {
            Some("an object with exactly one key")
        } else if tail == "f64" {
            Some("a number")
        } else {
            None
        };
        if let Some(word) = word {
            return format!("{head}expected {word}");
        }
    }
    message.to_owned()
}

/// Reads a JSON object field by field, recording every problem instead of stopping at the first. Used for the
/// small deploy bodies, whose spec asks for all issues, including type errors.
pub(crate) struct Fields<'a> {
    map: &'a Map<String, Value>,
    path: String,
    known: Vec<&'static str>,
}

impl<'a> Fields<'a> {
    /// `None` (with an issue) when `value` is not an object.
    pub(crate) fn of(value: &'a Value, path: &str, issues: &mut Issues) -> Option<Self> {
        match value {
            Value::Object(map) => Some(Fields {
                map,
                path: path.to_owned(),
                known: Vec::new(),
            }),
            other => {
                issues.push(path, format!("expected an object, found {}", kind(other)));
                None
            }
        }
    }

    pub(crate) fn path(&self, key: &str) -> String {
        child(&self.path, key)
    }

    /// A field that must be present; not nullable.
    pub(crate) fn required<T: Deserialize<'a>>(
        &mut self,
        key: &'static str,
        issues: &mut Issues,
    ) -> Option<T> {
        self.known.push(key);
        match self.map.get(key) {
            Some(value) => self.value_of(key, value, issues),
            None => {
                issues.push(self.path(key), format!("missing field `{key}`"));
                None
            }
        }
    }

    /// A field that may be absent; not nullable (the deploy spec says "optional", never "or null").
    pub(crate) fn optional<T: Deserialize<'a>>(
        &mut self,
        key: &'static str,
        issues: &mut Issues,
    ) -> Option<T> {
        self.known.push(key);
        let value = self.map.get(key)?;
        self.value_of(key, value, issues)
    }

    /// An optional nested object, read with its own [`Fields`].
    pub(crate) fn object(&mut self, key: &'static str, issues: &mut Issues) -> Option<Fields<'a>> {
        self.known.push(key);
        let value = self.map.get(key)?;
        Fields::of(value, &self.path(key), issues)
    }

    fn value_of<T: Deserialize<'a>>(
        &self,
        key: &str,
        value: &'a Value,
        issues: &mut Issues,
    ) -> Option<T> {
        match decode(value) {
            Ok(v) => Some(v),
            Err(issue) => {
                let at = self.path(key);
                let path = match issue.path.chars().next() {
                    None => at,
                    Some('[') => format!("{at}{}", issue.path),
                    Some(_) => format!("{at}.{}", issue.path),
                };
                issues.push(path, issue.message);
                None
            }
        }
    }

    /// Whether `key` is present (with any value, null included).
    pub(crate) fn was_given(&self, key: &str) -> bool {
        self.map.contains_key(key)
    }

    /// Reports every key that no reader asked for: these bodies allow no additional properties.
    pub(crate) fn finish(self, issues: &mut Issues) {
        for key in self.map.keys() {
            if !self.known.contains(&key.as_str()) {
                issues.push(
                    self.path(key),
                    format!(
                        "unknown field `{key}`, expected one of {}",
                        self.known
                            .iter()
                            .map(|k| format!("`{k}`"))
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                );
            }
        }
    }
}

/// JSON type name for messages.
pub(crate) fn kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn paths_are_dotted_with_indices_and_quote_odd_keys() {
        assert_eq!(child("", "model"), "model");
        assert_eq!(child("model", "image"), "model.image");
        assert_eq!(
            index("compute.scaling.schedule", 1),
            "compute.scaling.schedule[1]"
        );
        assert_eq!(child("model.env", "a.b"), "model.env[\"a.b\"]");
    }

    #[test]
    fn malformed_json_is_one_issue_for_the_whole_body() {
        let issues = parse_json(b"{\"name\": ").unwrap_err();
        assert_eq!(issues.len(), 1);
        assert_eq!(issues[0].path, "");
        assert!(issues[0].message.starts_with("malformed JSON"));
    }

    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct Outer {
        inner: Vec<Inner>,
    }

    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct Inner {
        at: String,
    }

    #[test]
    fn values_that_may_be_secrets_are_not_quoted() {
        for path in [
            "",
            "model",
            "model.secrets",
            "model.secrets.TOKEN",
            "model.secrets[\"a.b\"]",
            "model.image",
            "model.image.custom.credentials.password",
            "password",
        ] {
            assert!(may_hold_a_secret(path), "{path}");
        }
        for path in [
            "model.env.A",
            "model.secretsX",
            "model.image.tgi.url",
            "name",
            "passwordX",
        ] {
            assert!(!may_hold_a_secret(path), "{path}");
        }
        assert_eq!(
            without_value("invalid type: string \"sekrit, expected x\", expected a map"),
            "invalid type: a string, expected a map"
        );
        assert_eq!(
            without_value("invalid type: integer `12345`, expected a string"),
            "invalid type: a number, expected a string"
        );
        assert_eq!(
            without_value("missing field `username`"),
            "missing field `username`"
        );
    }

    #[test]
    fn structural_errors_name_the_field() {
        let unknown =
            decode::<Outer>(&json!({"inner": [{"at": "x"}, {"at": "y", "foo": 1}]})).unwrap_err();
        assert_eq!(unknown.path, "inner[1].foo");
        assert!(unknown.message.starts_with("unknown field `foo`"));

        let missing = decode::<Outer>(&json!({"inner": [{}]})).unwrap_err();
        assert_eq!(missing.path, "inner[0].at");
        assert_eq!(missing.message, "missing field `at`");

        let wrong = decode::<Outer>(&json!({"inner": [1]})).unwrap_err();
        assert_eq!(wrong.path, "inner[0]");
        assert_eq!(
            wrong.message,
            "invalid type: integer `1`, expected an object"
        );
    }
}
