//! The spec's text formats, JSON and TOML: writing, reading back, and the line a spec path is on.
//!
//! Imports nothing of the crate.

use serde_json::Value;

/// The text format of the editor; `ctrl-t` switches between them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Json,
    Toml,
}

impl Format {
    /// The format `ctrl-t` switches to.
    pub fn other(self) -> Format {
        match self {
            Format::Json => Format::Toml,
            Format::Toml => Format::Json,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Format::Json => "JSON",
            Format::Toml => "TOML",
        }
    }

    pub fn extension(self) -> &'static str {
        match self {
            Format::Json => "json",
            Format::Toml => "toml",
        }
    }

    /// A spec as text. TOML has no null: null fields are left out, which the spec editor's update reads as
    /// "unchanged". Some JSON has no TOML form at all (a null inside an array, a number past i64): an error.
    pub fn write(self, spec: &Value) -> Result<String, String> {
        match self {
            Format::Json => serde_json::to_string_pretty(spec).map_err(|e| e.to_string()),
            Format::Toml => toml::to_string_pretty(&without_nulls(spec)).map_err(|e| e.to_string()),
        }
    }

    /// Text back to a spec, or the 0-based line of the first syntax error and its message.
    pub fn read(self, text: &str) -> Result<Value, (usize, String)> {
        match self {
            Format::Json => serde_json::from_str(text)
                .map_err(|e| (e.line().saturating_sub(1), format!("JSON: {e}"))),
            Format::Toml => toml::from_str::<Value>(text).map_err(|e| {
                let line = e
                    .span()
                    .map(|s| text[..s.start.min(text.len())].matches('\n').count())
                    .unwrap_or(0);
                (line, format!("TOML: {}", e.message()))
            }),
        }
    }

    /// The 0-based line of a spec path (`compute.scaling.maxReplica`) in this format's text.
    pub fn line_of(self, lines: &[String], path: &str) -> usize {
        match self {
            Format::Json => line_of(lines, path),
            Format::Toml => toml_line_of(lines, path),
        }
    }
}

fn without_nulls(v: &Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(
            m.iter()
                .filter(|(_, v)| !v.is_null())
                .map(|(k, v)| (k.clone(), without_nulls(v)))
                .collect(),
        ),
        Value::Array(a) => Value::Array(a.iter().map(without_nulls).collect()),
        other => other.clone(),
    }
}

/// The line of `path` (`compute.scaling.maxReplica`, `model.image.tei.url`) in pretty JSON: each segment is
/// looked for after the line of the one before. Indices (`[2]`) are skipped; unknown paths give the last line found.
pub fn line_of(lines: &[String], path: &str) -> usize {
    let mut at = 0;
    for segment in path.split('.') {
        let key = segment.split('[').next().unwrap_or(segment);
        if key.is_empty() {
            continue;
        }
        let needle = format!("\"{key}\":");
        if let Some(i) = lines
            .iter()
            .skip(at)
            .position(|l| l.trim_start().starts_with(&needle))
        {
            at += i;
        }
    }
    at
}

/// The line of `path` in TOML: the deepest table header the path goes through (`[compute.scaling]`, or the
/// n-th `[[compute.scaling.schedule]]` for `schedule[n]`), then the key after it.
pub fn toml_line_of(lines: &[String], path: &str) -> usize {
    // (key, index into an array of tables)
    let segments: Vec<(&str, usize)> = path
        .split('.')
        .filter_map(|s| {
            let mut parts = s.split('[');
            let key = parts.next().filter(|k| !k.is_empty())?;
            let index = parts
                .next()
                .and_then(|i| i.trim_end_matches(']').parse().ok());
            Some((key, index.unwrap_or(0)))
        })
        .collect();
    let header = |l: &str| -> Option<String> {
        let t = l.trim();
        let inner = t.strip_prefix("[[").and_then(|t| t.strip_suffix("]]"));
        inner
            .or_else(|| t.strip_prefix('[').and_then(|t| t.strip_suffix(']')))
            .map(|h| h.replace('"', ""))
    };
    for depth in (0..=segments.len()).rev() {
        let table: Vec<&str> = segments[..depth].iter().map(|(k, _)| *k).collect();
        let table = table.join(".");
        let start = if depth == 0 {
            Some(0)
        } else {
            let nth = segments[depth - 1].1;
            lines
                .iter()
                .enumerate()
                .filter(|(_, l)| header(l).as_deref() == Some(table.as_str()))
                .nth(nth)
                .map(|(i, _)| i)
        };
        let Some(start) = start else {
            continue;
        };
        let Some((key, _)) = segments.get(depth) else {
            return start;
        };
        let found = lines[start..]
            .iter()
            .enumerate()
            .skip(usize::from(depth > 0))
            .take_while(|(_, l)| header(l).is_none())
            .find(|(_, l)| {
                l.trim_start()
                    .strip_prefix(key)
                    .is_some_and(|r| r.trim_start().starts_with('='))
            });
        return found.map_or(start, |(i, _)| start + i);
    }
    0
}
