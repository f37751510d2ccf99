//! The spec editor: an endpoint's spec as JSON in a text area, checked as you type by the server's own rules
//! (`EndpointSpec::parse`), each issue shown at its line; saved through the update API only when valid.

use ratatui_textarea::{Input, Key, TextArea};
use serde_json::Value;
use switchyard_server::model::status::strip_response_fields;
use switchyard_server::model::EndpointSpec;

#[derive(Debug, Clone)]
pub struct SpecEditor {
    pub namespace: String,
    pub name: String,
    pub text: TextArea<'static>,
    /// (line, 0-based; message)
    pub issues: Vec<(usize, String)>,
}

impl PartialEq for SpecEditor {
    fn eq(&self, other: &Self) -> bool {
        self.namespace == other.namespace
            && self.name == other.name
            && self.text.lines() == other.text.lines()
            && self.issues == other.issues
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

/// Our key names as the text area's input.
fn input(key: &str) -> Option<Input> {
    let plain = |key| Input {
        key,
        ctrl: false,
        alt: false,
        shift: false,
    };
    Some(match key {
        "enter" => plain(Key::Enter),
        "backspace" => plain(Key::Backspace),
        "delete" => plain(Key::Delete),
        "left" => plain(Key::Left),
        "right" => plain(Key::Right),
        "up" => plain(Key::Up),
        "down" => plain(Key::Down),
        "home" => plain(Key::Home),
        "end" => plain(Key::End),
        "pageup" => plain(Key::PageUp),
        "pagedown" => plain(Key::PageDown),
        "tab" => plain(Key::Char(' ')),
        "space" => plain(Key::Char(' ')),
        k if k.chars().count() == 1 => plain(Key::Char(k.chars().next()?)),
        _ => return None,
    })
}

impl SpecEditor {
    pub fn new(namespace: &str, name: &str, endpoint: &Value) -> SpecEditor {
        let mut spec = endpoint.clone();
        strip_response_fields(&mut spec);
        let text = serde_json::to_string_pretty(&spec).unwrap_or_default();
        let mut editor = SpecEditor {
            namespace: namespace.to_string(),
            name: name.to_string(),
            text: TextArea::new(text.lines().map(str::to_string).collect()),
            issues: Vec::new(),
        };
        editor.check();
        editor
    }

    /// The text parsed and checked; `Ok` is the spec to save.
    fn parsed(&self) -> Result<Value, Vec<(usize, String)>> {
        let lines = self.text.lines();
        let value: Value = serde_json::from_str(&lines.join("\n"))
            .map_err(|e| vec![(e.line().saturating_sub(1), format!("JSON: {e}"))])?;
        EndpointSpec::parse(&value).map_err(|issues| {
            issues
                .into_iter()
                .map(|i| {
                    (
                        line_of(lines, &i.path),
                        format!("{}: {}", i.path, i.message),
                    )
                })
                .collect::<Vec<_>>()
        })?;
        Ok(value)
    }

    pub fn check(&mut self) {
        self.issues = self.parsed().err().unwrap_or_default();
    }

    /// A key while the editor is open; `Some(spec)` on `ctrl-s` when it is valid.
    pub fn on_key(&mut self, key: &str) -> Option<Value> {
        if key == "ctrl-s" {
            return self.parsed().ok();
        }
        if let Some(i) = input(key) {
            self.text.input(i);
            self.check();
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn endpoint() -> Value {
        json!({
            "name": "ep", "type": "public", "healthRoute": "/health", "accountId": null,
            "status": {"state": "running"},
            "provider": {"vendor": "aws", "region": "us-east-1"},
            "compute": {"accelerator": "cpu", "instanceType": "intel-icl", "instanceSize": "x2",
                        "scaling": {"minReplica": 0, "maxReplica": 4}},
            "model": {"repository": "org/m", "framework": "pytorch", "image": {"hub": {}}},
        })
    }

    #[test]
    fn issues_are_shown_at_their_line_and_only_a_valid_spec_saves() {
        let mut e = SpecEditor::new("ns", "ep", &endpoint());
        assert!(e.issues.is_empty(), "{:?}", e.issues);
        assert!(!e.text.lines().join("\n").contains("healthRoute"));
        // Go to the maxReplica line and make it smaller than minReplica... by making min 9.
        let min_line = line_of(e.text.lines(), "compute.scaling.minReplica");
        assert!(
            e.text.lines()[min_line].contains("\"minReplica\": 0"),
            "{:?}",
            e.text.lines()
        );
        for _ in 0..min_line {
            e.on_key("down");
        }
        // The line ends `0,`: step over the comma.
        e.on_key("end");
        e.on_key("left");
        e.on_key("backspace");
        e.on_key("9");
        assert_eq!(e.issues.len(), 1, "{:?}", e.issues);
        assert_eq!(e.issues[0].0, min_line);
        assert!(e.issues[0].1.contains("minReplica"));
        assert_eq!(e.on_key("ctrl-s"), None);
        // Broken JSON: the parser's line.
        e.on_key("backspace");
        e.on_key("x");
        assert!(e.issues[0].1.starts_with("JSON"), "{:?}", e.issues);
        e.on_key("backspace");
        e.on_key("1");
        let saved = e.on_key("ctrl-s").expect("valid");
        assert_eq!(saved["compute"]["scaling"]["minReplica"], 1);
    }

    #[test]
    fn paths_find_their_lines() {
        let lines: Vec<String> = serde_json::to_string_pretty(&endpoint())
            .unwrap()
            .lines()
            .map(str::to_string)
            .collect();
        let l = line_of(&lines, "compute.scaling.maxReplica");
        assert!(lines[l].contains("maxReplica"));
        let l = line_of(&lines, "model.image.hub");
        assert!(lines[l].contains("\"hub\""));
    }
}
