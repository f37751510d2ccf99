//! The spec editor: an endpoint's spec as JSON or TOML in a text area, checked as you type by the server's own
//! rules (`EndpointSpec::parse`), each issue shown at its line; saved through the update API only when valid,
//! as the difference from the spec as read (so a removed key is removed, not kept).

use ratatui_textarea::{Input, Key, TextArea};
use serde_json::{Map, Value};
use switchyard_server::model::status::strip_response_fields;
use switchyard_server::model::EndpointSpec;

use crate::effects::{Effect, ExternalEdit};
use crate::format::Format;

/// The update that turns `before` into `after`, as the API's deep merge reads it: changed keys with their new
/// value, removed keys as null, unchanged keys left out. Objects are compared key by key; arrays and scalars
/// are replaced whole, and so is a one-key variant (`model.image`, `compute.scaling.measure`) whose key changed.
pub fn patch(before: &Value, after: &Value) -> Value {
    diff(before, after, &[])
}

fn diff(before: &Value, after: &Value, path: &[&str]) -> Value {
    let variant = matches!(path, ["model", "image"] | ["compute", "scaling", "measure"]);
    match (before, after) {
        (Value::Object(b), Value::Object(a)) if variant && a.keys().next() != b.keys().next() => {
            after.clone()
        }
        (Value::Object(b), Value::Object(a)) => {
            let mut out = Map::new();
            for (k, new) in a {
                match b.get(k) {
                    Some(old) if old == new => {}
                    Some(old @ Value::Object(_)) if new.is_object() => {
                        let here = [path, &[k.as_str()]].concat();
                        let inner = diff(old, new, &here);
                        // Nothing changed inside (e.g. only a redacted secret was dropped): nothing to send.
                        if inner.as_object().is_none_or(|m| !m.is_empty()) {
                            out.insert(k.clone(), inner);
                        }
                    }
                    _ => {
                        out.insert(k.clone(), new.clone());
                    }
                }
            }
            for k in b.keys().filter(|k| !a.contains_key(*k)) {
                if !b[k].is_null() {
                    out.insert(k.clone(), Value::Null);
                }
            }
            Value::Object(out)
        }
        _ => after.clone(),
    }
}

#[derive(Debug, Clone)]
pub struct SpecEditor {
    /// Whose spec, the spec as read from the server (a save sends the difference from it) and the text's
    /// format: what goes to `$EDITOR` and back.
    pub edit: ExternalEdit,
    pub text: TextArea<'static>,
    /// (line, 0-based; message)
    pub issues: Vec<(usize, String)>,
    /// A save is under way: the editor stays open, keeping the text, until the server answers.
    pub busy: bool,
    /// The server's refusal of the last save, or a note (e.g. nothing changed).
    pub note: Option<String>,
}

impl PartialEq for SpecEditor {
    fn eq(&self, other: &Self) -> bool {
        self.edit == other.edit
            && self.text.lines() == other.text.lines()
            && self.issues == other.issues
            && self.busy == other.busy
            && self.note == other.note
    }
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

/// An edit of the spec of `endpoint` (as the API shows it; the fields only a response has are left out),
/// and the spec's text to start from.
pub fn edit_of(namespace: &str, name: &str, endpoint: &Value) -> (ExternalEdit, String) {
    let mut spec = endpoint.clone();
    strip_response_fields(&mut spec);
    let text = Format::Json.write(&spec).unwrap_or_default();
    let edit = ExternalEdit {
        namespace: namespace.to_string(),
        name: name.to_string(),
        original: spec,
        format: Format::Json,
    };
    (edit, text)
}

impl SpecEditor {
    pub fn new(namespace: &str, name: &str, endpoint: &Value) -> SpecEditor {
        let (edit, text) = edit_of(namespace, name, endpoint);
        SpecEditor::with_text(edit, &text)
    }

    /// An editor on `text` (e.g. back from `$EDITOR`), saving against the spec the edit started from.
    pub fn with_text(edit: ExternalEdit, text: &str) -> SpecEditor {
        let mut editor = SpecEditor {
            edit,
            text: TextArea::new(text.lines().map(str::to_string).collect()),
            issues: Vec::new(),
            busy: false,
            note: None,
        };
        editor.check();
        editor
    }

    pub fn contents(&self) -> String {
        self.text.lines().join("\n")
    }

    /// The effect that hands this editor's text to `$EDITOR`.
    pub fn external(&self) -> Effect {
        Effect::ExternalEdit(self.edit.clone(), self.contents())
    }

    /// The text parsed and checked; `Ok` is the spec to save.
    fn parsed(&self) -> Result<Value, Vec<(usize, String)>> {
        let value = self
            .edit
            .format
            .read(&self.contents())
            .map_err(|e| vec![e])?;
        EndpointSpec::parse(&value).map_err(|issues| {
            issues
                .iter()
                .map(|i| self.placed(&i.path, &i.message))
                .collect::<Vec<_>>()
        })?;
        Ok(value)
    }

    fn placed(&self, path: &str, message: &str) -> (usize, String) {
        (
            self.edit.format.line_of(self.text.lines(), path),
            format!("{path}: {message}"),
        )
    }

    pub fn check(&mut self) {
        self.issues = self.parsed().err().unwrap_or_default();
    }

    /// The server refused the save: its issues go to their lines, the text stays as it is.
    pub fn refused(&mut self, message: String, issues: &[(String, String)]) {
        self.busy = false;
        self.issues = issues.iter().map(|(p, m)| self.placed(p, m)).collect();
        self.note = Some(message);
    }

    /// Switches between JSON and TOML, when the text parses (not while a save is under way).
    pub fn switch_format(&mut self) {
        if self.busy {
            return;
        }
        let other = self.edit.format.other();
        match self
            .edit
            .format
            .read(&self.contents())
            .map(|v| other.write(&v))
        {
            Ok(Ok(text)) => {
                self.text = TextArea::new(text.lines().map(str::to_string).collect());
                self.edit.format = other;
                self.note = None;
                self.check();
            }
            Ok(Err(e)) => {
                self.note = Some(format!("this spec has no {} form: {e}", other.name()));
            }
            Err((line, _)) => {
                self.note = Some(format!(
                    "fix the {} at line {} before switching to {}",
                    self.edit.format.name(),
                    line + 1,
                    other.name()
                ))
            }
        }
    }

    /// Saves the text when it is valid and changed: the update to send. Nothing while a save is under way.
    pub fn save(&mut self) -> Option<Value> {
        if self.busy {
            return None;
        }
        let spec = self.parsed().ok()?;
        // A secret is shown as null; the API keeps a secret sent as null, so deleting its line cannot remove
        // it. Say so rather than save something that does not do what it seems to.
        let kept: Vec<&String> = self.edit.original["model"]["secrets"]
            .as_object()
            .into_iter()
            .flat_map(|m| m.keys())
            .filter(|k| spec["model"]["secrets"].get(k.as_str()).is_none())
            .collect();
        if !kept.is_empty() {
            self.note = Some(format!(
                "secrets cannot be removed by deleting them here (the API keeps them): {}",
                kept.iter()
                    .map(|k| k.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
            return None;
        }
        let update = patch(&self.edit.original, &spec);
        if update.as_object().is_some_and(Map::is_empty) {
            self.note = Some("nothing changed".into());
            return None;
        }
        self.busy = true;
        self.note = None;
        Some(update)
    }

    /// A key typed into the text (a character, `enter`, the arrows…), checked at once.
    pub fn type_key(&mut self, key: &str) {
        if let Some(i) = input(key).filter(|_| !self.busy) {
            self.text.input(i);
            self.check();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::{line_of, toml_line_of};

    /// An edit of `ns/ep`, started from an empty spec.
    fn blank(format: Format) -> ExternalEdit {
        ExternalEdit {
            namespace: "ns".into(),
            name: "ep".into(),
            original: json!({}),
            format,
        }
    }
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
            e.type_key("down");
        }
        // The line ends `0,`: step over the comma.
        e.type_key("end");
        e.type_key("left");
        e.type_key("backspace");
        e.type_key("9");
        assert_eq!(e.issues.len(), 1, "{:?}", e.issues);
        assert_eq!(e.issues[0].0, min_line);
        assert!(e.issues[0].1.contains("minReplica"));
        assert_eq!(e.save(), None);
        assert!(!e.busy);
        // Broken JSON: the parser's line.
        e.type_key("backspace");
        e.type_key("x");
        assert!(e.issues[0].1.starts_with("JSON"), "{:?}", e.issues);
        e.type_key("backspace");
        e.type_key("1");
        // Only what changed is sent.
        assert_eq!(
            e.save(),
            Some(json!({"compute": {"scaling": {"minReplica": 1}}}))
        );
        assert!(e.busy);
        // Refused by the server: the text stays, the issue goes to its line.
        let text = e.contents();
        e.refused(
            "invalid".into(),
            &[("compute.scaling.maxReplica".into(), "too many".into())],
        );
        assert_eq!(e.contents(), text);
        assert!(!e.busy);
        assert_eq!(
            e.issues[0].0,
            line_of(e.text.lines(), "compute.scaling.maxReplica")
        );
    }

    #[test]
    fn the_update_is_the_difference_and_removed_keys_are_null() {
        let before = json!({"a": 1, "env": {"X": "1", "Y": "2"}, "model": {"image": {"hub": {}}},
                            "keep": {"k": [1, 2]}, "unset": null});
        let after = json!({"a": 2, "env": {"X": "1"}, "model": {"image": {"tei": {"url": "u"}}},
                           "keep": {"k": [1, 2]}, "new": true});
        assert_eq!(
            patch(&before, &after),
            json!({"a": 2, "env": {"Y": null}, "model": {"image": {"tei": {"url": "u"}}}, "new": true})
        );
        assert_eq!(patch(&before, &before), json!({}));
        // Objects in which nothing changed are left out.
        let with_secret = json!({"model": {"secrets": {"K": null}, "repository": "r"}});
        let dropped = json!({"model": {"secrets": {}, "repository": "r"}});
        assert_eq!(patch(&with_secret, &dropped), json!({}));
    }

    #[test]
    fn deleting_a_secret_is_refused_with_a_reason() {
        let mut ep = endpoint();
        ep["model"]["secrets"] = json!({"HF_TOKEN": null});
        let mut e = SpecEditor::new("ns", "ep", &ep);
        let text = e.contents().replace("\"HF_TOKEN\": null", "");
        e.text = TextArea::new(text.lines().map(str::to_string).collect());
        e.check();
        assert!(e.issues.is_empty(), "{:?}", e.issues);
        assert_eq!(e.save(), None);
        assert!(
            e.note.as_deref().unwrap_or("").contains("HF_TOKEN"),
            "{:?}",
            e.note
        );
    }

    #[test]
    fn toml_round_trips_and_finds_its_lines() {
        let mut e = SpecEditor::new("ns", "ep", &endpoint());
        let json_text = e.contents();
        e.switch_format();
        assert_eq!(e.edit.format, Format::Toml);
        assert!(e.issues.is_empty(), "{:?}", e.issues);
        let toml_text = e.contents();
        assert!(toml_text.contains("[compute.scaling]"), "{toml_text}");
        let line = toml_line_of(e.text.lines(), "compute.scaling.maxReplica");
        assert!(
            e.text.lines()[line].starts_with("maxReplica ="),
            "{line}: {toml_text}"
        );
        let line = toml_line_of(e.text.lines(), "model.image.hub");
        assert!(e.text.lines()[line].contains("hub"), "{toml_text}");
        // Nothing changed by the round trip: no update to send.
        assert_eq!(e.save(), None);
        assert_eq!(e.note.as_deref(), Some("nothing changed"));
        e.switch_format();
        assert_eq!(e.edit.format, Format::Json);
        let back: Value = serde_json::from_str(&e.contents()).unwrap();
        let first: Value = serde_json::from_str(&json_text).unwrap();
        assert_eq!(patch(&first, &back), json!({}), "{}", e.contents());
        // The n-th entry of an array of tables.
        let lines: Vec<String> = "[compute.scaling]\nmaxReplica = 3\n[[compute.scaling.schedule]]\nat = \"08:00\"\n[[compute.scaling.schedule]]\nat = \"20:00\"\n"
            .lines()
            .map(str::to_string)
            .collect();
        assert_eq!(toml_line_of(&lines, "compute.scaling.schedule[1].at"), 5);
        assert_eq!(toml_line_of(&lines, "compute.scaling.schedule[0].at"), 3);
        // A spec with no TOML form keeps its text.
        let mut j = SpecEditor::with_text(blank(Format::Json), "{\"a\": [1, null]}");
        j.switch_format();
        assert_eq!(j.edit.format, Format::Json);
        assert_eq!(j.contents(), "{\"a\": [1, null]}");
        assert!(
            j.note.as_deref().unwrap_or("").contains("no TOML form"),
            "{:?}",
            j.note
        );
        // A syntax error in TOML is placed at its line, and blocks switching.
        let broken = "name = \"ep\"\n[compute\nx = 1\n";
        let mut t = SpecEditor::with_text(blank(Format::Toml), broken);
        assert_eq!(t.issues[0].0, 1, "{:?}", t.issues);
        t.switch_format();
        assert_eq!(t.edit.format, Format::Toml);
        assert!(t.note.as_deref().unwrap_or("").contains("line 2"));
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
