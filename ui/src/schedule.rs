//! The schedule editor: an endpoint's daily UTC schedule as a 24-hour timeline and a list of entries, checked
//! as you type by the server's own rules (`EndpointSpec::parse` on the endpoint with the edited schedule).

use chrono::{DateTime, Timelike, Utc};
use serde_json::{json, Value};
use switchyard_server::model::status::strip_response_fields;
use switchyard_server::model::EndpointSpec;

use crate::forms::input::{step, type_into};

/// One entry as typed: `at` is `HH:MM`, the counts are digits (an empty timeout means the default).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub at: String,
    pub min: String,
    pub max: String,
    pub timeout: String,
}

pub const COLUMNS: [&str; 4] = ["at (UTC)", "min", "max", "scale to zero after (min)"];

/// An edit of the schedule. Which key asks for which is the keymap's (the `schedule` context); a key it does
/// not bind is typed into the focused field.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScheduleEdit<'a> {
    NextEntry,
    PrevEntry,
    NextField,
    PrevField,
    Add,
    Remove,
    Save,
    Type(&'a str),
}

#[derive(Debug, Clone, PartialEq)]
pub struct ScheduleEditor {
    pub namespace: String,
    pub name: String,
    /// The endpoint's spec as read (response-only fields removed), into which the schedule is put to check it.
    spec: Value,
    pub own_min: u64,
    pub own_max: u64,
    pub entries: Vec<Entry>,
    pub row: usize,
    pub col: usize,
    /// What the server's rules say of the current edit: (entry index or none, message).
    pub issues: Vec<(Option<usize>, String)>,
    /// A save is under way: the editor stays open until the server answers.
    pub busy: bool,
}

/// An issue of the spec placed at its schedule entry, when its path is inside one.
fn placed(path: &str, message: &str) -> (Option<usize>, String) {
    let entry = path
        .strip_prefix("compute.scaling.schedule[")
        .and_then(|rest| rest.split(']').next())
        .and_then(|n| n.parse::<usize>().ok());
    let field = path.rsplit('.').next().unwrap_or("");
    (entry, format!("{field}: {message}"))
}

fn count(v: &Value) -> String {
    v.as_u64().map(|n| n.to_string()).unwrap_or_default()
}

/// Minutes since midnight of `HH:MM`, when well-formed.
fn minutes(at: &str) -> Option<u16> {
    switchyard_server::model::endpoint::parse_time_of_day(at)
}

/// The minute of the day (UTC) `now` is in.
pub fn minute_of_day(now: DateTime<Utc>) -> u16 {
    (now.hour() * 60 + now.minute()) as u16
}

/// Which of the entries starting at `ats` (`HH:MM`, in the schedule's order) is in effect at `minute` of the
/// day: the latest starting at or before it, else (wrapping past midnight) the last of the day. `None`
/// without entries: the endpoint's own values apply.
pub fn in_effect<'a>(ats: impl Iterator<Item = &'a str>, minute: u16) -> Option<usize> {
    let timed: Vec<(u16, usize)> = ats
        .enumerate()
        .filter_map(|(i, at)| Some((minutes(at)?, i)))
        .collect();
    timed
        .iter()
        .filter(|(at, _)| *at <= minute)
        .max_by_key(|(at, _)| *at)
        .or_else(|| timed.iter().max_by_key(|(at, _)| *at))
        .map(|(_, i)| *i)
}

impl ScheduleEditor {
    pub fn new(namespace: &str, name: &str, endpoint: &Value) -> ScheduleEditor {
        let mut spec = endpoint.clone();
        strip_response_fields(&mut spec);
        let scaling = &endpoint["compute"]["scaling"];
        let entries = scaling["schedule"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|e| Entry {
                at: e["at"].as_str().unwrap_or("").to_string(),
                min: count(&e["minReplica"]),
                max: count(&e["maxReplica"]),
                timeout: count(&e["scaleToZeroTimeout"]),
            })
            .collect();
        let mut editor = ScheduleEditor {
            namespace: namespace.to_string(),
            name: name.to_string(),
            spec,
            own_min: scaling["minReplica"].as_u64().unwrap_or(0),
            own_max: scaling["maxReplica"].as_u64().unwrap_or(0),
            entries,
            row: 0,
            col: 0,
            issues: Vec::new(),
            busy: false,
        };
        editor.check();
        editor
    }

    /// The schedule as the API takes it. Fields that are not numbers yet are sent as typed, so the rules
    /// report them.
    pub fn schedule(&self) -> Value {
        let num = |s: &str| {
            s.parse::<u64>()
                .map(Value::from)
                .unwrap_or_else(|_| json!(s))
        };
        Value::Array(
            self.entries
                .iter()
                .map(|e| {
                    let mut v =
                        json!({"at": e.at, "minReplica": num(&e.min), "maxReplica": num(&e.max)});
                    if !e.timeout.is_empty() {
                        v["scaleToZeroTimeout"] = num(&e.timeout);
                    }
                    v
                })
                .collect(),
        )
    }

    /// Runs the spec's rules on the endpoint with this schedule.
    pub fn check(&mut self) {
        let mut spec = self.spec.clone();
        spec["compute"]["scaling"]["schedule"] = self.schedule();
        self.issues = match EndpointSpec::parse(&spec) {
            Ok(_) => Vec::new(),
            Err(issues) => issues.iter().map(|i| placed(&i.path, &i.message)).collect(),
        };
    }

    /// The server refused the save: its issues go to their entries, the edit stays.
    pub fn refused(&mut self, message: String, issues: &[(String, String)]) {
        self.busy = false;
        self.issues = issues.iter().map(|(p, m)| placed(p, m)).collect();
        if self.issues.is_empty() {
            self.issues.push((None, message));
        }
    }

    pub fn valid(&self) -> bool {
        self.issues.is_empty()
    }

    /// The entry in effect at `minute` of the day: the latest starting at or before it, else (wrapping past
    /// midnight) the last of the day. `None` when there are no entries: the endpoint's own values apply.
    pub fn in_effect(&self, minute: u16) -> Option<usize> {
        in_effect(self.entries.iter().map(|e| e.at.as_str()), minute)
    }

    /// 48 half-hour cells: the number of the entry in effect (1-based), or `·` for the endpoint's own values.
    pub fn timeline(&self) -> String {
        (0..48u16)
            .map(|cell| match self.in_effect(cell * 30) {
                Some(i) if i < 9 => char::from(b'1' + i as u8),
                Some(_) => '+',
                None => '·',
            })
            .collect()
    }

    fn field(&mut self) -> Option<&mut String> {
        let e = self.entries.get_mut(self.row)?;
        Some(match self.col {
            0 => &mut e.at,
            1 => &mut e.min,
            2 => &mut e.max,
            _ => &mut e.timeout,
        })
    }

    /// Applies `edit` and checks the result; `Some(patch)` when saved (only a schedule the rules accept).
    /// Nothing changes while a save is under way.
    pub fn edit(&mut self, edit: ScheduleEdit) -> Option<Value> {
        if self.busy {
            return None;
        }
        let last = self.entries.len().saturating_sub(1);
        let n = COLUMNS.len();
        match edit {
            ScheduleEdit::NextEntry => self.row = (self.row + 1).min(last),
            ScheduleEdit::PrevEntry => self.row = self.row.saturating_sub(1),
            ScheduleEdit::NextField => self.col = step(self.col, n, true),
            ScheduleEdit::PrevField => self.col = step(self.col, n, false),
            ScheduleEdit::Add => self.add(),
            ScheduleEdit::Remove if !self.entries.is_empty() => {
                self.entries.remove(self.row);
                self.row = self.row.min(self.entries.len().saturating_sub(1));
            }
            ScheduleEdit::Save if self.valid() => {
                self.busy = true;
                return Some(json!({"compute": {"scaling": {"schedule": self.schedule()}}}));
            }
            ScheduleEdit::Type(key) => self.type_key(key),
            ScheduleEdit::Remove | ScheduleEdit::Save => {}
        }
        self.check();
        None
    }

    /// A new entry at the first free whole hour, with the endpoint's own bounds; it becomes the one edited.
    fn add(&mut self) {
        let hour = (0..24)
            .find(|h| !self.entries.iter().any(|e| e.at == format!("{h:02}:00")))
            .unwrap_or(0);
        self.entries.push(Entry {
            at: format!("{hour:02}:00"),
            min: self.own_min.to_string(),
            max: self.own_max.to_string(),
            timeout: String::new(),
        });
        self.row = self.entries.len() - 1;
        self.col = 0;
    }

    /// Digits into any field, `:` into the time, `backspace`; five characters at most.
    fn type_key(&mut self, key: &str) {
        let at = self.col == 0;
        if let Some(f) = self.field() {
            type_into(f, key, 5, |c| c.is_ascii_digit() || (at && c == ':'));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn endpoint(schedule: Value) -> Value {
        json!({
            "name": "ep", "type": "public", "healthRoute": "/health", "accountId": null,
            "status": {"state": "running"},
            "provider": {"vendor": "aws", "region": "us-east-1"},
            "compute": {"accelerator": "cpu", "instanceType": "intel-icl", "instanceSize": "x2",
                        "scaling": {"minReplica": 0, "maxReplica": 4, "schedule": schedule}},
            "model": {"repository": "org/m", "framework": "pytorch", "image": {"hub": {}}, "secrets": {"K": null}},
        })
    }

    #[test]
    fn timeline_wraps_past_midnight() {
        let e = ScheduleEditor::new(
            "ns",
            "ep",
            &endpoint(json!([
                {"at": "08:00", "minReplica": 2, "maxReplica": 3},
                {"at": "20:00", "minReplica": 0, "maxReplica": 1, "scaleToZeroTimeout": 5}
            ])),
        );
        assert!(e.valid(), "{:?}", e.issues);
        let t = e.timeline();
        assert_eq!(&t[..16], "2222222222222222", "{t}");
        assert_eq!(&t[16..40], "111111111111111111111111", "{t}");
        assert_eq!(&t[40..], "22222222", "{t}");
        assert_eq!(e.in_effect(7 * 60 + 59), Some(1));
        let none = ScheduleEditor::new("ns", "ep", &endpoint(Value::Null));
        assert_eq!(none.timeline(), "·".repeat(48));
    }

    #[test]
    fn the_spec_rules_are_checked_as_you_type() {
        let mut e = ScheduleEditor::new("ns", "ep", &endpoint(Value::Null));
        e.edit(ScheduleEdit::Add);
        assert!(e.valid(), "{:?}", e.issues);
        e.edit(ScheduleEdit::NextField);
        e.edit(ScheduleEdit::NextField);
        e.edit(ScheduleEdit::Type("backspace"));
        e.edit(ScheduleEdit::Type("9"));
        // maxReplica 9 > the endpoint's 4.
        assert!(!e.valid());
        assert!(
            e.issues
                .iter()
                .any(|(i, m)| *i == Some(0) && m.contains("maxReplica")),
            "{:?}",
            e.issues
        );
        assert_eq!(
            e.edit(ScheduleEdit::Save),
            None,
            "an invalid schedule is not saved"
        );
        e.edit(ScheduleEdit::Type("backspace"));
        e.edit(ScheduleEdit::Type("3"));
        e.edit(ScheduleEdit::Add);
        // Second entry at 01:00; make it clash with the first (00:00).
        for _ in 0..5 {
            e.edit(ScheduleEdit::Type("backspace"));
        }
        for k in ["0", "0", ":", "0", "0"] {
            e.edit(ScheduleEdit::Type(k));
        }
        assert!(
            e.issues
                .iter()
                .any(|(i, m)| *i == Some(1) && m.contains("distinct")),
            "{:?}",
            e.issues
        );
        e.edit(ScheduleEdit::Remove);
        let patch = e.edit(ScheduleEdit::Save).expect("saved");
        assert_eq!(
            patch,
            json!({"compute": {"scaling": {"schedule": [{"at": "00:00", "minReplica": 0, "maxReplica": 3}]}}})
        );
        // Letters never reach a field.
        e.edit(ScheduleEdit::Type("q"));
        assert_eq!(e.entries[0].at, "00:00");
    }
}
