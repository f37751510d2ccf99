//! The keymap as data: (context, keys, action, description, dangerous). The help screen, the footer hints
//! and `switchyard keys` are generated from it; a user file overrides single bindings.

use ratatui::crossterm::event::KeyCode;
use serde::Deserialize;

use crate::effects::{AppAction, EndpointAction};

/// Where a binding applies. `Global` bindings apply in every view unless the view binds the key itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Context {
    Global,
    Catalog,
    Endpoints,
    /// The logs pane of an endpoint (its own keys, then the pager's).
    Logs,
    /// Describe and logs: scrolling and searching a text.
    Pager,
    Dialog,
    /// The OAuth apps of a namespace.
    Apps,
    /// An organization's audit log.
    Audit,
    /// A secret shown once: only dismissing it.
    Secret,
    /// The webhooks list.
    Webhooks,
    /// A webhook's attempts, live.
    Deliveries,
    /// The user's notifications.
    Notifications,
    /// The help screen over everything.
    Help,
    /// The spec editor.
    Spec,
    /// The schedule editor.
    Schedule,
    /// The forms: deploy, new app, webhook.
    Form,
}

impl Context {
    pub fn as_str(self) -> &'static str {
        match self {
            Context::Global => "global",
            Context::Catalog => "catalog",
            Context::Endpoints => "endpoints",
            Context::Logs => "logs",
            Context::Pager => "pager",
            Context::Dialog => "dialog",
            Context::Apps => "apps",
            Context::Audit => "audit",
            Context::Secret => "secret",
            Context::Webhooks => "webhooks",
            Context::Deliveries => "deliveries",
            Context::Notifications => "notifications",
            Context::Help => "help",
            Context::Spec => "spec",
            Context::Schedule => "schedule",
            Context::Form => "form",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Command {
    Quit,
    Help,
    Command,
    Filter,
    Back,
    NextView,
    Down,
    Up,
    Top,
    Bottom,
    Refresh,
    /// The selected row opened: its description, or a webhook's live deliveries.
    Open,
    Describe,
    Pause,
    Resume,
    ScaleToZero,
    /// The selected endpoint, app or webhook deleted (asked first). The old names of a user's keymap file
    /// still mean it.
    #[serde(alias = "delete-app", alias = "delete-webhook")]
    Delete,
    Toggle,
    Confirm,
    /// The selected endpoint's replica output, or a webhook's live deliveries (its log).
    #[serde(alias = "deliveries")]
    Logs,
    Follow,
    Deploy,
    Schedule,
    /// The selected endpoint's spec, or the selected webhook, in its editor.
    #[serde(alias = "edit-webhook")]
    Edit,
    EditExternal,
    Copy,
    PageDown,
    PageUp,
    Search,
    NextMatch,
    PrevMatch,
    /// A pager's long lines wrapped, or cut and scrolled sideways.
    Wrap,
    /// An endpoint's charts over the next time range (15 min, 1 h, 24 h, 7 days).
    Range,
    ScrollLeft,
    ScrollRight,
    /// The form for a new app or webhook.
    #[serde(alias = "new-app", alias = "new-webhook")]
    New,
    RotateSecret,
    DeleteSecret,
    /// Enables a disabled webhook, disables an enabled one.
    ToggleWebhook,
    /// Sends the selected delivery again.
    Replay,
    /// Saves an editor or sends a form (when it is valid).
    Save,
    /// The spec editor's text between JSON and TOML.
    SwitchFormat,
    /// A schedule entry added, or the selected one removed.
    AddEntry,
    RemoveEntry,
    /// The focus to the next or previous field of a form or a schedule entry.
    NextField,
    PrevField,
    /// The focused field's next or previous value, for fields with a choice of values.
    NextChoice,
    PrevChoice,
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Binding {
    pub context: Context,
    pub keys: Vec<String>,
    pub action: Command,
    pub description: String,
    /// Changes something on the server: confirmed first, and absent in read-only mode.
    #[serde(default)]
    pub dangerous: bool,
}

impl Command {
    /// The endpoint lifecycle action this command asks for (confirmed first), if it is one.
    pub fn endpoint_action(self) -> Option<EndpointAction> {
        match self {
            Command::Pause => Some(EndpointAction::Pause),
            Command::Resume => Some(EndpointAction::Resume),
            Command::ScaleToZero => Some(EndpointAction::ScaleToZero),
            Command::Delete => Some(EndpointAction::Delete),
            _ => None,
        }
    }

    /// The OAuth app action this command asks for (confirmed first), if it is one.
    pub fn app_action(self) -> Option<AppAction> {
        match self {
            Command::RotateSecret => Some(AppAction::RotateSecret),
            Command::DeleteSecret => Some(AppAction::DeleteSecret),
            Command::Delete => Some(AppAction::Delete),
            _ => None,
        }
    }

    /// Whether the command asks for confirmation before it runs.
    pub fn asks_first(self) -> bool {
        self.endpoint_action().is_some()
            || self.app_action().is_some()
            || matches!(self, Command::ToggleWebhook)
    }

    /// Whether the action changes something on the server. Read-only mode removes these whatever a keymap
    /// file says.
    pub fn changes_something(self) -> bool {
        matches!(
            self,
            Command::Pause
                | Command::Resume
                | Command::ScaleToZero
                | Command::Delete
                | Command::Deploy
                | Command::Schedule
                | Command::Edit
                | Command::EditExternal
                | Command::New
                | Command::RotateSecret
                | Command::DeleteSecret
                | Command::ToggleWebhook
                | Command::Replay
                | Command::Save
        )
    }
}

impl Binding {
    fn changes_something(&self) -> bool {
        self.dangerous || self.action.changes_something()
    }
}

/// The keys with names, as the console reads them from the terminal and keymap files write them.
pub const NAMED_KEYS: [(KeyCode, &str); 15] = [
    (KeyCode::Enter, "enter"),
    (KeyCode::Esc, "esc"),
    (KeyCode::Tab, "tab"),
    (KeyCode::BackTab, "backtab"),
    (KeyCode::Backspace, "backspace"),
    (KeyCode::Up, "up"),
    (KeyCode::Down, "down"),
    (KeyCode::Left, "left"),
    (KeyCode::Right, "right"),
    (KeyCode::Home, "home"),
    (KeyCode::End, "end"),
    (KeyCode::PageUp, "pageup"),
    (KeyCode::PageDown, "pagedown"),
    (KeyCode::Delete, "delete"),
    (KeyCode::Insert, "insert"),
];

/// Names the console gives keys: one character, `ctrl-` and a letter, `space`, `f1`…`f24`, or a named key.
fn known_key(k: &str) -> bool {
    let one = |s: &str| s.chars().count() == 1;
    one(k)
        || k == "space"
        || NAMED_KEYS.iter().any(|(_, name)| *name == k)
        || k.strip_prefix("ctrl-")
            .is_some_and(|c| one(c) && c.chars().all(|c| c.is_ascii_lowercase()))
        || k.strip_prefix('f')
            .is_some_and(|n| n.parse::<u8>().is_ok_and(|n| (1..=24).contains(&n)))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    #[serde(default)]
    binding: Vec<Binding>,
}

#[derive(Debug, Clone)]
pub struct Keymap {
    bindings: Vec<Binding>,
}

/// The help screen's two columns, the contexts each lists. Together they hold every context; on a narrow
/// terminal the help is one column, the first's contexts then the second's.
pub const HELP_COLUMNS: [&[Context]; 2] = [
    &[
        Context::Global,
        Context::Pager,
        Context::Logs,
        Context::Dialog,
        Context::Deliveries,
        Context::Notifications,
        Context::Spec,
        Context::Form,
    ],
    &[
        Context::Catalog,
        Context::Endpoints,
        Context::Apps,
        Context::Audit,
        Context::Secret,
        Context::Webhooks,
        Context::Schedule,
        Context::Help,
    ],
];

/// The contexts that are views (a list, with the global keys under its own): in each, a key has one meaning.
pub const VIEWS: [Context; 7] = [
    Context::Catalog,
    Context::Endpoints,
    Context::Apps,
    Context::Audit,
    Context::Webhooks,
    Context::Deliveries,
    Context::Notifications,
];

const DEFAULT: &str = include_str!("../../assets/keymap.toml");

impl Keymap {
    /// The built-in keymap.
    pub fn builtin() -> Keymap {
        // The asset is part of the build and tested; an error here is a bug, shown at once.
        let file: File =
            toml::from_str(DEFAULT).unwrap_or_else(|e| panic!("assets/keymap.toml: {e}"));
        Keymap {
            bindings: file.binding,
        }
    }

    /// The built-in keymap with a user file's bindings replacing those of the same context and action.
    /// Returns the problems found (unreadable file, keys bound twice) for the console to show.
    pub fn with_overrides(user: Option<&str>) -> (Keymap, Vec<String>) {
        let mut map = Keymap::builtin();
        let mut problems = Vec::new();
        if let Some(text) = user {
            match toml::from_str::<File>(text) {
                Ok(file) => {
                    for b in file.binding {
                        map.bindings
                            .retain(|d| !(d.context == b.context && d.action == b.action));
                        map.bindings.push(b);
                    }
                }
                Err(e) => problems.push(format!("keymap file ignored: {}", e.message())),
            }
        }
        problems.extend(map.conflicts());
        problems.extend(map.meanings());
        for b in &map.bindings {
            for k in b.keys.iter().filter(|k| !known_key(k)) {
                problems.push(format!(
                    "key {k:?} of {:?} is not a key name (e.g. `a`, `ctrl-d`, `enter`, `f5`)",
                    b.action
                ));
            }
        }
        (map, problems)
    }

    /// Keys bound to two actions where both would apply.
    pub fn conflicts(&self) -> Vec<String> {
        let mut out = Vec::new();
        for (i, a) in self.bindings.iter().enumerate() {
            for b in &self.bindings[i + 1..] {
                if a.context != b.context || a.action == b.action {
                    continue;
                }
                for k in a.keys.iter().filter(|k| b.keys.contains(k)) {
                    out.push(format!(
                        "key {k:?} in {} is bound to both {:?} and {:?}",
                        a.context.as_str(),
                        a.action,
                        b.action
                    ));
                }
            }
        }
        out
    }

    /// Keys that mean one thing in one view and another in another (a user file can do that): the views
    /// keep the k9s habit that a key means the same everywhere.
    pub fn meanings(&self) -> Vec<String> {
        let mut seen: Vec<(&str, Command, Context)> = Vec::new();
        let mut out = Vec::new();
        for view in VIEWS {
            for (b, keys) in self.free_keys(view, false) {
                for k in keys {
                    match seen.iter().find(|(key, _, _)| *key == k) {
                        Some((_, command, other)) if *command != b.action => out.push(format!(
                            "key {k:?} is {command:?} in {} but {:?} in {}",
                            other.as_str(),
                            b.action,
                            view.as_str()
                        )),
                        Some(_) => {}
                        None => seen.push((k, b.action, view)),
                    }
                }
            }
        }
        out
    }

    /// The contexts whose bindings apply in `context`, in the order they are looked in: its own, then for the
    /// lists the global ones. What covers the lists (panes, dialogs, help, editors, forms) has only its own.
    fn chain(context: Context) -> &'static [Context] {
        match context {
            Context::Global => &[Context::Global],
            Context::Dialog => &[Context::Dialog],
            Context::Secret => &[Context::Secret],
            Context::Help => &[Context::Help],
            Context::Spec => &[Context::Spec],
            Context::Schedule => &[Context::Schedule],
            Context::Form => &[Context::Form],
            Context::Catalog => &[Context::Catalog, Context::Global],
            Context::Endpoints => &[Context::Endpoints, Context::Global],
            Context::Apps => &[Context::Apps, Context::Global],
            Context::Audit => &[Context::Audit, Context::Global],
            Context::Webhooks => &[Context::Webhooks, Context::Global],
            Context::Deliveries => &[Context::Deliveries, Context::Global],
            Context::Notifications => &[Context::Notifications, Context::Global],
            Context::Pager => &[Context::Pager],
            Context::Logs => &[Context::Logs, Context::Pager],
        }
    }

    /// The action for `key` in `context`.
    pub fn lookup(&self, context: Context, key: &str, read_only: bool) -> Option<Command> {
        self.bindings(context, read_only)
            .find(|b| b.keys.iter().any(|k| k == key))
            .map(|b| b.action)
    }

    /// Bindings that apply in `context`, its own first.
    pub fn bindings(&self, context: Context, read_only: bool) -> impl Iterator<Item = &Binding> {
        Keymap::chain(context)
            .iter()
            .flat_map(move |ctx| self.bindings.iter().filter(move |b| b.context == *ctx))
            .filter(move |b| !(read_only && b.changes_something()))
    }

    /// The bindings that apply in `context`, nearer first, each with its keys that no nearer binding takes.
    fn free_keys(&self, context: Context, read_only: bool) -> Vec<(&Binding, Vec<&str>)> {
        let mut seen: Vec<&str> = Vec::new();
        self.bindings(context, read_only)
            .map(|b| {
                let keys: Vec<&str> = b
                    .keys
                    .iter()
                    .map(String::as_str)
                    .filter(|k| !seen.contains(k))
                    .collect();
                seen.extend(keys.iter().copied());
                (b, keys)
            })
            .collect()
    }

    /// `keys: description` pairs for the footer. A key the context binds itself is left out of a more general
    /// binding (a view's own `enter` hides no global key, but one that did would show only in the view's), and
    /// a binding with no key left is left out.
    pub fn hints(&self, context: Context, read_only: bool) -> Vec<(String, String)> {
        self.offered_hints(context, read_only, |_| true)
    }

    /// The same, for the commands `offered` keeps: what the state says can be done now (an action the token
    /// cannot take is not offered).
    pub fn offered_hints(
        &self,
        context: Context,
        read_only: bool,
        offered: impl Fn(Command) -> bool,
    ) -> Vec<(String, String)> {
        let mut hints: Vec<(String, String)> = Vec::new();
        let kept = self.free_keys(context, read_only).into_iter();
        for (b, keys) in kept.filter(|(b, keys)| !keys.is_empty() && offered(b.action)) {
            match hints.iter_mut().find(|(_, d)| *d == b.description) {
                // Two commands that do the same here (a webhook's `enter` and `l`) are one hint.
                Some((shown, _)) => {
                    shown.push('/');
                    shown.push_str(&keys.join("/"));
                }
                None => hints.push((keys.join("/"), b.description.clone())),
            }
        }
        hints
    }

    /// The keys `command` is on in `context` (its own bindings first; a key a nearer binding takes is not
    /// counted, as in [`Self::hints`]), as a hint names them: arrows as arrows, others by name, joined by
    /// `/`. None when no key is.
    pub fn keys_for(&self, context: Context, command: Command) -> Option<String> {
        let (_, keys) = self
            .free_keys(context, false)
            .into_iter()
            .find(|(b, _)| b.action == command)?;
        let shown: Vec<&str> = keys
            .into_iter()
            .map(|k| match k {
                "left" => "←",
                "right" => "→",
                "up" => "↑",
                "down" => "↓",
                other => other,
            })
            .collect();
        (!shown.is_empty()).then(|| shown.join("/"))
    }

    /// The bindings of `context` itself, as the help screen lists them under its name.
    pub fn own(&self, context: Context, read_only: bool) -> impl Iterator<Item = &Binding> {
        self.bindings(context, read_only)
            .filter(move |b| b.context == context)
    }

    /// Lines of the help screen in `columns` columns (1 or 2): the longer column's contexts' names and
    /// bindings.
    pub fn help_length(&self, read_only: bool, columns: usize) -> usize {
        let lines = |ctxs: &[Context]| -> usize {
            ctxs.iter()
                .map(|ctx| 1 + self.own(*ctx, read_only).count())
                .sum()
        };
        match columns {
            1 => HELP_COLUMNS.iter().map(|c| lines(c)).sum(),
            _ => HELP_COLUMNS.iter().map(|c| lines(c)).max().unwrap_or(0),
        }
    }

    /// The printed cheat-sheet (`switchyard keys`): one Markdown table.
    pub fn cheat_sheet(&self) -> String {
        let mut out = String::from("| Where | Keys | Does |\n|---|---|---|\n");
        for b in &self.bindings {
            let keys: Vec<String> = b.keys.iter().map(|k| format!("`{k}`")).collect();
            // Lifecycle actions ask first; forms are their own confirmation.
            let mark = if b.action.asks_first() {
                " (asks first; not in --read-only)"
            } else if b.changes_something() {
                " (not in --read-only)"
            } else {
                ""
            };
            out.push_str(&format!(
                "| {} | {} | {}{mark} |\n",
                b.context.as_str(),
                keys.join(" "),
                b.description
            ));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builtin_keymap_has_no_conflicts_and_finds_keys() {
        let map = Keymap::builtin();
        assert_eq!(map.conflicts(), Vec::<String>::new());
        assert_eq!(
            map.lookup(Context::Endpoints, "p", false),
            Some(Command::Pause)
        );
        assert_eq!(map.lookup(Context::Endpoints, "p", true), None);
        assert_eq!(
            map.lookup(Context::Catalog, "q", false),
            Some(Command::Quit)
        );
        assert_eq!(map.lookup(Context::Dialog, "q", false), None);
        assert_eq!(
            map.lookup(Context::Dialog, "esc", false),
            Some(Command::Back)
        );
        assert_eq!(map.lookup(Context::Catalog, "ctrl-d", false), None);
        // Deleting is `ctrl-d` wherever something can be deleted; `d` describes, `y` copies, everywhere.
        for view in [Context::Endpoints, Context::Apps, Context::Webhooks] {
            assert_eq!(map.lookup(view, "ctrl-d", false), Some(Command::Delete));
        }
        assert_eq!(
            map.lookup(Context::Apps, "d", false),
            Some(Command::Describe)
        );
        assert_eq!(map.lookup(Context::Apps, "y", false), Some(Command::Copy));
        assert_eq!(map.lookup(Context::Apps, "X", true), None);
        assert_eq!(
            map.lookup(Context::Apps, "r", false),
            Some(Command::Refresh)
        );
        // A webhook's log is its deliveries.
        assert_eq!(
            map.lookup(Context::Webhooks, "l", false),
            Some(Command::Logs)
        );
        // A secret shown once takes nothing but its dismissal.
        assert_eq!(map.lookup(Context::Secret, "q", false), None);
        assert_eq!(
            map.lookup(Context::Secret, "enter", false),
            Some(Command::Back)
        );
    }

    #[test]
    fn a_key_means_one_thing_in_every_view() {
        let map = Keymap::builtin();
        assert_eq!(map.meanings(), Vec::<String>::new());
        // The k9s habits, wherever the key is bound.
        let habits = [
            ("enter", Command::Open),
            ("d", Command::Describe),
            ("ctrl-d", Command::Delete),
            ("y", Command::Copy),
            ("e", Command::Edit),
            ("l", Command::Logs),
            ("n", Command::New),
            ("r", Command::Refresh),
        ];
        for view in VIEWS {
            for (key, command) in habits {
                let found = map.lookup(view, key, false);
                assert!(
                    found.is_none() || found == Some(command),
                    "{key} is {found:?} in {}",
                    view.as_str()
                );
            }
        }
        // A user file that gives a key another meaning in one view is told of it.
        let user = "[[binding]]\ncontext = \"apps\"\nkeys = [\"d\"]\naction = \"delete\"\ndescription = \"x\"\n";
        let (_, problems) = Keymap::with_overrides(Some(user));
        assert!(
            problems
                .iter()
                .any(|p| p.contains("key \"d\" is Describe in")),
            "{problems:?}"
        );
        // The old names of the merged actions still read.
        let old = "[[binding]]\ncontext = \"apps\"\nkeys = [\"D\"]\naction = \"delete-app\"\ndescription = \"x\"\n";
        let (map, _) = Keymap::with_overrides(Some(old));
        assert_eq!(map.lookup(Context::Apps, "D", false), Some(Command::Delete));
        assert_eq!(map.lookup(Context::Apps, "ctrl-d", false), None);
    }

    #[test]
    fn the_help_lists_every_context() {
        // Every context a binding is in (a new context with bindings is found without being listed here).
        let contexts: Vec<Context> = Keymap::builtin()
            .bindings
            .iter()
            .map(|b| b.context)
            .collect();
        assert!(contexts.len() > 15, "{contexts:?}");
        for ctx in contexts {
            let found = HELP_COLUMNS.iter().filter(|c| c.contains(&ctx)).count();
            assert_eq!(found, 1, "{ctx:?}");
        }
    }

    #[test]
    fn hints_name_the_keys_as_bound() {
        let map = Keymap::builtin();
        let keys = Keymap::keys_for;
        assert_eq!(
            keys(&map, Context::Schedule, Command::AddEntry).as_deref(),
            Some("a")
        );
        assert_eq!(
            keys(&map, Context::Form, Command::PrevChoice).as_deref(),
            Some("←")
        );
        assert_eq!(
            keys(&map, Context::Form, Command::NextChoice).as_deref(),
            Some("→")
        );
        let user = r#"
[[binding]]
context = "schedule"
keys = ["n", "insert"]
action = "add-entry"
description = "new entry"
"#;
        let (map, _) = Keymap::with_overrides(Some(user));
        assert_eq!(
            keys(&map, Context::Schedule, Command::AddEntry).as_deref(),
            Some("n/insert")
        );
        assert_eq!(keys(&map, Context::Schedule, Command::Pause), None);
        // `q` quits everywhere but where a nearer binding takes it.
        let user = "[[binding]]\ncontext = \"catalog\"\nkeys = [\"q\"]\naction = \"deploy\"\ndescription = \"deploy\"\n";
        let (map, _) = Keymap::with_overrides(Some(user));
        let quit = |c| keys(&map, c, Command::Quit);
        assert_eq!(quit(Context::Endpoints).as_deref(), Some("q/ctrl-c"));
        assert_eq!(quit(Context::Catalog).as_deref(), Some("ctrl-c"));
    }

    #[test]
    fn user_overrides_replace_single_bindings_and_conflicts_are_reported() {
        let user = r#"
[[binding]]
context = "endpoints"
keys = ["P"]
action = "pause"
description = "pause it"
dangerous = true

[[binding]]
context = "endpoints"
keys = ["z"]
action = "describe"
description = "describe"
"#;
        let (map, problems) = Keymap::with_overrides(Some(user));
        assert_eq!(
            map.lookup(Context::Endpoints, "P", false),
            Some(Command::Pause)
        );
        assert_eq!(map.lookup(Context::Endpoints, "p", false), None);
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert!(problems[0].contains("\"z\""), "{problems:?}");
        let bad = "[[binding]]\ncontext = \"endpoints\"\nkeys = [\"Ctrl+S\"]\naction = \"edit\"\ndescription = \"e\"\n";
        let (_, problems) = Keymap::with_overrides(Some(bad));
        assert!(
            problems
                .iter()
                .any(|p| p.contains("\"Ctrl+S\" of Edit is not a key name")),
            "{problems:?}"
        );
        let (_, problems) = Keymap::with_overrides(Some("[[binding]]\ncontext = 3"));
        assert!(
            problems[0].starts_with("keymap file ignored"),
            "{problems:?}"
        );
    }

    #[test]
    fn cheat_sheet_lists_every_binding() {
        let sheet = Keymap::builtin().cheat_sheet();
        assert!(
            sheet.contains("| endpoints | `ctrl-d` | delete (asks first; not in --read-only) |"),
            "{sheet}"
        );
        assert!(
            sheet.contains("| catalog | `D` | deploy (not in --read-only) |"),
            "{sheet}"
        );
        assert!(
            sheet.contains("| global | `q` `ctrl-c` | quit |"),
            "{sheet}"
        );
        assert_eq!(sheet.lines().count(), Keymap::builtin().bindings.len() + 2);
    }
}
