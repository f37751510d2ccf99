//! The console's state and its one update function: terminal keys and API results come in as [`Action`]s,
//! `update` changes the state and returns the [`Effect`]s (API calls) to run. No I/O and no `.await` here.

use chrono::{DateTime, Utc};
use serde_json::Value;

use crate::keymap::{Command, Context, Keymap};

/// The fields `/` looks in, lowercased and kept apart so a match never spans two of them.
fn search_text(fields: &[&str]) -> String {
    fields.join("\u{1}").to_lowercase()
}

/// One catalog item as the list shows it.
#[derive(Debug, Clone, PartialEq)]
pub struct CatalogRow {
    pub repo_id: String,
    pub author: String,
    pub model: String,
    pub task: String,
    pub license: String,
    pub accelerators: String,
    pub engines: String,
    pub created: String,
    /// (public id, accelerator, engine, model file)
    pub recipes: Vec<(String, String, String, String)>,
    /// What `/` searches, lowercased once.
    search: String,
}

impl CatalogRow {
    pub fn from_json(item: &Value) -> CatalogRow {
        let s = |v: &Value| v.as_str().unwrap_or("").to_string();
        let recipes: Vec<(String, String, String, String)> = item["recipes"]
            .as_array()
            .map(|rs| {
                rs.iter()
                    .map(|r| {
                        (
                            s(&r["publicId"]),
                            s(&r["accelerator"]),
                            s(&r["engineType"]),
                            s(&r["ggufFile"]),
                        )
                    })
                    .collect()
            })
            .unwrap_or_default();
        let distinct = |f: fn(&(String, String, String, String)) -> &String| {
            let mut v: Vec<String> = recipes.iter().map(|r| f(r).clone()).collect();
            v.sort();
            v.dedup();
            v.join(",")
        };
        let mut row = CatalogRow {
            search: String::new(),
            repo_id: s(&item["repoId"]),
            author: s(&item["authorName"]),
            model: s(&item["modelName"]),
            task: s(&item["task"]),
            license: s(&item["license"]),
            accelerators: distinct(|r| &r.1),
            engines: distinct(|r| &r.2),
            created: s(&item["createdAt"]).chars().take(10).collect(),
            recipes,
        };
        row.search = search_text(&[
            &row.repo_id,
            &row.task,
            &row.license,
            &row.accelerators,
            &row.engines,
        ]);
        row
    }

    fn matches(&self, filter: &str) -> bool {
        self.search.contains(filter)
    }
}

/// One endpoint as the list shows it; `raw` is the whole resource for describe.
#[derive(Debug, Clone, PartialEq)]
pub struct EndpointRow {
    pub namespace: String,
    pub name: String,
    pub state: String,
    pub ready: u64,
    pub target: u64,
    pub model: String,
    pub kind: String,
    pub url: String,
    pub updated: String,
    pub raw: Value,
    /// What `/` searches, lowercased once.
    search: String,
}

impl EndpointRow {
    pub fn from_json(namespace: &str, ep: &Value) -> EndpointRow {
        let s = |v: &Value| v.as_str().unwrap_or("").to_string();
        let mut row = EndpointRow {
            search: String::new(),
            namespace: namespace.to_string(),
            name: s(&ep["name"]),
            state: s(&ep["status"]["state"]),
            ready: ep["status"]["readyReplica"].as_u64().unwrap_or(0),
            target: ep["status"]["targetReplica"].as_u64().unwrap_or(0),
            model: s(&ep["model"]["repository"]),
            kind: s(&ep["type"]),
            url: s(&ep["status"]["url"]),
            updated: s(&ep["status"]["updatedAt"])
                .replace('T', " ")
                .chars()
                .take(19)
                .collect(),
            raw: ep.clone(),
        };
        row.search = search_text(&[&row.namespace, &row.name, &row.state, &row.model, &row.kind]);
        row
    }

    fn matches(&self, filter: &str) -> bool {
        self.search.contains(filter)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum View {
    Catalog,
    Endpoints,
}

/// A lifecycle action on an endpoint, as the API names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EndpointAction {
    Pause,
    Resume,
    ScaleToZero,
    Delete,
}

impl EndpointAction {
    pub fn verb(self) -> &'static str {
        match self {
            EndpointAction::Pause => "pause",
            EndpointAction::Resume => "resume",
            EndpointAction::ScaleToZero => "scale-to-zero",
            EndpointAction::Delete => "delete",
        }
    }
}

/// What covers the view, if anything. `Esc` closes it.
#[derive(Debug, Clone, PartialEq)]
pub enum Overlay {
    None,
    Help,
    /// Title and pretty text.
    Describe(String, String),
    /// Cancel is the default button (`yes` false).
    Confirm {
        action: EndpointAction,
        namespace: String,
        name: String,
        yes: bool,
    },
    /// `:` command line.
    Command(String),
    /// The spec editor of an endpoint.
    Spec(Box<crate::spec::SpecEditor>),
    /// The schedule editor of an endpoint.
    Schedule(Box<crate::schedule::ScheduleEditor>),
    /// The deploy form of a catalog item.
    Deploy(Box<crate::form::DeployForm>),
    /// An endpoint's replica output; refreshed every tick while `follow`.
    Logs {
        namespace: String,
        name: String,
        text: String,
        follow: bool,
    },
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Connection {
    Connecting,
    Connected,
    /// The server could not be reached: the console retries with backoff.
    Unreachable(String),
    /// The server refused the token.
    Unauthorized(String),
}

/// A key pressed, named as the keymap names keys (`ctrl-c`, `enter`, `G`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Key(pub String);

#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    Key(Key),
    /// A second passed (the clock in the status line) or a refresh is due.
    Tick(DateTime<Utc>),
    Resize,
    SignedIn(Result<(String, Vec<String>), String>),
    CatalogLoaded(Result<Vec<CatalogRow>, String>),
    EndpointsLoaded(Result<Vec<EndpointRow>, String>),
    /// An endpoint action finished: its message.
    Done(Result<String, String>),
    LogsLoaded {
        namespace: String,
        name: String,
        text: Result<String, String>,
    },
    /// `namespace/name` of the new endpoint, or the server's message and its `{path, message}` issues.
    Deployed(Result<String, (String, Vec<(String, String)>)>),
}

/// API work the runtime does for `update`; each reports back as an [`Action`].
#[derive(Debug, Clone, PartialEq)]
pub enum Effect {
    SignIn,
    /// With the API's filters (`accelerator`, `engine`, `license`, `task`, `search`, `limit`).
    LoadCatalog(Vec<(String, String)>),
    LoadLogs {
        namespace: String,
        name: String,
    },
    Deploy(crate::form::DeployRequest),
    /// Put text on the user's clipboard (OSC 52: works over ssh too).
    Copy(String),
    /// A partial update of an endpoint; `what` names it in the result message.
    Update {
        namespace: String,
        name: String,
        patch: Value,
        what: &'static str,
    },
    /// Every namespace the user may see.
    LoadEndpoints(Vec<String>),
    Act {
        action: EndpointAction,
        namespace: String,
        name: String,
    },
}

#[derive(Debug, Clone)]
pub struct State {
    pub view: View,
    pub overlay: Overlay,
    pub catalog: Vec<CatalogRow>,
    /// The filters the catalog was asked with (`:catalog task=… limit=…`).
    pub catalog_filters: Vec<(String, String)>,
    pub endpoints: Vec<EndpointRow>,
    pub selected: usize,
    /// `/` filter: editing (`Some(text)` while typing) and applied text.
    pub filter: String,
    pub filtering: bool,
    pub server: String,
    pub connection: Connection,
    pub user: Option<String>,
    pub namespaces: Vec<String>,
    pub message: Option<(String, bool)>,
    pub read_only: bool,
    pub quit: bool,
    /// An endpoints load is under way: ticks do not start another.
    pub loading: bool,
    retry_at: Option<DateTime<Utc>>,
    retry_delay: chrono::Duration,
    pub now: DateTime<Utc>,
    /// Where logs go, shown on the help screen.
    pub log_file: String,
    /// Problems with the keymap, shown once at start.
    pub keymap_problems: Vec<String>,
}

impl State {
    pub fn new(server: String, read_only: bool, now: DateTime<Utc>, log_file: String) -> State {
        State {
            view: View::Catalog,
            overlay: Overlay::None,
            catalog: Vec::new(),
            catalog_filters: Vec::new(),
            endpoints: Vec::new(),
            selected: 0,
            filter: String::new(),
            filtering: false,
            server,
            connection: Connection::Connecting,
            user: None,
            namespaces: Vec::new(),
            message: None,
            read_only,
            quit: false,
            loading: false,
            retry_at: None,
            retry_delay: chrono::Duration::seconds(1),
            now,
            log_file,
            keymap_problems: Vec::new(),
        }
    }

    pub fn context(&self) -> Context {
        match (&self.overlay, self.view) {
            (Overlay::Confirm { .. }, _) => Context::Dialog,
            (Overlay::Logs { .. }, _) => Context::Logs,
            (_, View::Catalog) => Context::Catalog,
            (_, View::Endpoints) => Context::Endpoints,
        }
    }

    /// Rows of the current view that pass the filter (indices into the view's list).
    pub fn visible(&self) -> Vec<usize> {
        let f = self.filter.to_lowercase();
        match self.view {
            View::Catalog => (0..self.catalog.len())
                .filter(|i| f.is_empty() || self.catalog[*i].matches(&f))
                .collect(),
            View::Endpoints => (0..self.endpoints.len())
                .filter(|i| f.is_empty() || self.endpoints[*i].matches(&f))
                .collect(),
        }
    }

    fn selected_endpoint(&self) -> Option<&EndpointRow> {
        let rows = self.visible();
        (self.view == View::Endpoints)
            .then(|| rows.get(self.selected).map(|i| &self.endpoints[*i]))
            .flatten()
    }

    fn switch(&mut self, view: View) -> Vec<Effect> {
        self.view = view;
        self.selected = 0;
        self.filter.clear();
        self.filtering = false;
        self.overlay = Overlay::None;
        self.refresh()
    }

    fn refresh(&mut self) -> Vec<Effect> {
        match self.view {
            View::Catalog => vec![Effect::LoadCatalog(self.catalog_filters.clone())],
            View::Endpoints if self.user.is_some() => {
                self.loading = true;
                vec![Effect::LoadEndpoints(self.namespaces.clone())]
            }
            View::Endpoints => vec![Effect::SignIn],
        }
    }
}

/// Applies one action. Returns the API calls to make.
pub fn update(state: &mut State, action: Action, keymap: &Keymap) -> Vec<Effect> {
    match action {
        Action::Tick(now) => {
            state.now = now;
            // Live lists: the endpoints view refreshes every tick; a lost server is retried.
            if let Overlay::Logs {
                namespace,
                name,
                follow: true,
                ..
            } = &state.overlay
            {
                return vec![Effect::LoadLogs {
                    namespace: namespace.clone(),
                    name: name.clone(),
                }];
            }
            match (&state.connection, state.view) {
                // Retried with backoff: 1 s, doubling up to 30 s.
                (Connection::Unreachable(_), _) if state.user.is_none() => {
                    if state.retry_at.is_some_and(|t| now < t) {
                        return Vec::new();
                    }
                    state.retry_at = Some(now + state.retry_delay);
                    state.retry_delay = (state.retry_delay * 2).min(chrono::Duration::seconds(30));
                    vec![Effect::SignIn]
                }
                (_, View::Endpoints) if state.overlay == Overlay::None && !state.loading => {
                    state.refresh()
                }
                _ => Vec::new(),
            }
        }
        Action::Resize => Vec::new(),
        Action::SignedIn(Ok((user, orgs))) => {
            state.connection = Connection::Connected;
            state.retry_at = None;
            state.retry_delay = chrono::Duration::seconds(1);
            state.namespaces = std::iter::once(user.clone()).chain(orgs).collect();
            state.user = Some(user);
            state.refresh()
        }
        // A token the server refuses is not a lost server: no retrying.
        Action::SignedIn(Err(e)) if e.starts_with("401") || e.starts_with("403") => {
            state.connection = Connection::Unauthorized(e);
            Vec::new()
        }
        Action::SignedIn(Err(e)) | Action::EndpointsLoaded(Err(e)) => {
            state.loading = false;
            state.connection = Connection::Unreachable(e);
            Vec::new()
        }
        // A catalog query the server refused (a bad filter) is the user's to fix, not a lost server.
        Action::CatalogLoaded(Err(e)) => {
            state.message = Some((format!("catalog: {e}"), true));
            Vec::new()
        }
        Action::LogsLoaded {
            namespace,
            name,
            text,
        } => {
            // Paused logs stay as they are, even when a load was already under way.
            if let Overlay::Logs {
                namespace: n,
                name: e,
                text: shown,
                follow: true,
            } = &mut state.overlay
            {
                if *n == namespace && *e == name {
                    *shown =
                        printable(&text.unwrap_or_else(|e| format!("(logs unavailable: {e})")));
                }
            }
            Vec::new()
        }
        Action::CatalogLoaded(Ok(rows)) => {
            state.connection = Connection::Connected;
            state.catalog = rows;
            clamp(state);
            Vec::new()
        }
        Action::EndpointsLoaded(Ok(rows)) => {
            state.loading = false;
            state.connection = Connection::Connected;
            // The selection follows its endpoint when rows come and go.
            let selected = state
                .selected_endpoint()
                .map(|e| (e.namespace.clone(), e.name.clone()));
            state.endpoints = rows;
            if let Some((ns, name)) = selected {
                if let Some(at) = state.visible().iter().position(|i| {
                    state.endpoints[*i].namespace == ns && state.endpoints[*i].name == name
                }) {
                    state.selected = at;
                }
            }
            clamp(state);
            Vec::new()
        }
        Action::Done(result) => {
            state.message = Some(match result {
                Ok(m) => (m, false),
                Err(m) => (m, true),
            });
            state.refresh()
        }
        Action::Deployed(Ok(endpoint)) => {
            state.message = Some((format!("deployed {endpoint}"), false));
            state.switch(View::Endpoints)
        }
        Action::Deployed(Err((message, issues))) => {
            match &mut state.overlay {
                Overlay::Deploy(form) => form.refused(message, &issues),
                _ => state.message = Some((format!("deploy: {message}"), true)),
            }
            Vec::new()
        }
        Action::Key(key) => on_key(state, &key.0, keymap),
    }
}

/// Replica output as text the terminal shows as it is: tabs expanded, escape sequences and other control
/// characters dropped (a replica's colours or cursor moves must not reach our screen).
fn printable(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\n' => out.push('\n'),
            '\t' => out.push_str("    "),
            '\u{1b}' => {
                // CSI sequences (`ESC [ … final`), else the one character after ESC.
                if chars.peek() == Some(&'[') {
                    chars.next();
                    for d in chars.by_ref() {
                        if ('@'..='~').contains(&d) {
                            break;
                        }
                    }
                } else {
                    chars.next();
                }
            }
            c if c.is_control() => {}
            c => out.push(c),
        }
    }
    out
}

fn clamp(state: &mut State) {
    let n = state.visible().len();
    state.selected = state.selected.min(n.saturating_sub(1));
}

fn on_key(state: &mut State, key: &str, keymap: &Keymap) -> Vec<Effect> {
    // ctrl-c always quits, whatever is open and whatever a keymap file says.
    if key == "ctrl-c" {
        state.quit = true;
        return Vec::new();
    }
    // Text entry first: the filter and the command line take every printable key.
    if state.filtering {
        match key {
            "esc" => {
                state.filtering = false;
                state.filter.clear();
            }
            "enter" => state.filtering = false,
            "backspace" => {
                state.filter.pop();
            }
            "space" => state.filter.push(' '),
            k if k.chars().count() == 1 => state.filter.push_str(k),
            _ => {}
        }
        state.selected = 0;
        return Vec::new();
    }
    // The forms and editors take every key; `esc` closes them, a save closes them with its effect.
    if matches!(
        state.overlay,
        Overlay::Spec(_) | Overlay::Schedule(_) | Overlay::Deploy(_)
    ) {
        if key == "esc" {
            state.overlay = Overlay::None;
            return Vec::new();
        }
        let update = |namespace: &str, name: &str, patch, what| Effect::Update {
            namespace: namespace.to_string(),
            name: name.to_string(),
            patch,
            what,
        };
        let saved = match &mut state.overlay {
            Overlay::Spec(e) => e
                .on_key(key)
                .map(|p| update(&e.namespace, &e.name, p, "spec")),
            Overlay::Schedule(e) => e
                .on_key(key)
                .map(|p| update(&e.namespace, &e.name, p, "schedule")),
            // The deploy form stays open until the server answers (its issues go beside the fields).
            Overlay::Deploy(form) => {
                return form.on_key(key).map(Effect::Deploy).into_iter().collect()
            }
            _ => None,
        };
        if saved.is_some() {
            state.overlay = Overlay::None;
        }
        return saved.into_iter().collect();
    }
    if let Overlay::Command(text) = &mut state.overlay {
        match key {
            "esc" => state.overlay = Overlay::None,
            "backspace" => {
                text.pop();
            }
            "enter" => {
                let cmd = text.trim().to_string();
                state.overlay = Overlay::None;
                return run_command(state, &cmd);
            }
            "space" => text.push(' '),
            k if k.chars().count() == 1 => text.push_str(k),
            _ => {}
        }
        return Vec::new();
    }
    let Some(command) = keymap.lookup(state.context(), key, state.read_only) else {
        return Vec::new();
    };
    if state.read_only && command.changes_something() {
        return Vec::new();
    }
    // Help, describe and logs cover the list: keys do not reach it through them.
    let covered = match &state.overlay {
        Overlay::Help | Overlay::Describe(..) => {
            !matches!(command, Command::Back | Command::Quit | Command::Help)
        }
        Overlay::Logs { .. } => !matches!(command, Command::Back | Command::Quit | Command::Follow),
        _ => false,
    };
    if covered {
        return Vec::new();
    }
    if let Overlay::Confirm {
        action,
        namespace,
        name,
        yes,
    } = &mut state.overlay
    {
        match command {
            Command::Toggle => *yes = !*yes,
            Command::Confirm if *yes => {
                let effect = Effect::Act {
                    action: *action,
                    namespace: namespace.clone(),
                    name: name.clone(),
                };
                state.overlay = Overlay::None;
                return vec![effect];
            }
            Command::Confirm | Command::Back => state.overlay = Overlay::None,
            _ => {}
        }
        return Vec::new();
    }
    let rows = state.visible().len();
    match command {
        Command::Quit => state.quit = true,
        Command::Help => state.overlay = Overlay::Help,
        Command::Command => state.overlay = Overlay::Command(String::new()),
        Command::Filter => {
            state.filtering = true;
            state.filter.clear();
        }
        Command::Back => {
            if state.overlay != Overlay::None {
                state.overlay = Overlay::None;
            } else {
                state.filter.clear();
                state.message = None;
            }
        }
        Command::NextView => {
            let next = match state.view {
                View::Catalog => View::Endpoints,
                View::Endpoints => View::Catalog,
            };
            return state.switch(next);
        }
        Command::Down => state.selected = (state.selected + 1).min(rows.saturating_sub(1)),
        Command::Up => state.selected = state.selected.saturating_sub(1),
        Command::Top => state.selected = 0,
        Command::Bottom => state.selected = rows.saturating_sub(1),
        Command::Refresh => return state.refresh(),
        Command::Describe => describe(state),
        Command::Pause | Command::Resume | Command::ScaleToZero | Command::Delete => {
            if let Some(ep) = state.selected_endpoint() {
                let action = match command {
                    Command::Pause => EndpointAction::Pause,
                    Command::Resume => EndpointAction::Resume,
                    Command::ScaleToZero => EndpointAction::ScaleToZero,
                    _ => EndpointAction::Delete,
                };
                state.overlay = Overlay::Confirm {
                    action,
                    namespace: ep.namespace.clone(),
                    name: ep.name.clone(),
                    yes: false,
                };
            }
        }
        Command::Copy => {
            let rows = state.visible();
            let text = rows.get(state.selected).map(|&i| match state.view {
                View::Catalog => state.catalog[i].repo_id.clone(),
                View::Endpoints => state.endpoints[i].url.clone(),
            });
            if let Some(text) = text.filter(|t| !t.is_empty()) {
                state.message = Some((format!("copied {text}"), false));
                return vec![Effect::Copy(text)];
            }
        }
        Command::Logs => {
            if let Some(ep) = state.selected_endpoint() {
                let (namespace, name) = (ep.namespace.clone(), ep.name.clone());
                state.overlay = Overlay::Logs {
                    namespace: namespace.clone(),
                    name: name.clone(),
                    text: String::new(),
                    follow: true,
                };
                return vec![Effect::LoadLogs { namespace, name }];
            }
        }
        Command::Edit => {
            if let Some(ep) = state.selected_endpoint() {
                let editor = crate::spec::SpecEditor::new(&ep.namespace, &ep.name, &ep.raw);
                state.overlay = Overlay::Spec(Box::new(editor));
            }
        }
        Command::Schedule => {
            if let Some(ep) = state.selected_endpoint() {
                let editor = crate::schedule::ScheduleEditor::new(&ep.namespace, &ep.name, &ep.raw);
                state.overlay = Overlay::Schedule(Box::new(editor));
            }
        }
        Command::Deploy => {
            let rows = state.visible();
            if let (View::Catalog, Some(&i)) = (state.view, rows.get(state.selected)) {
                let item = &state.catalog[i];
                let recipes = item.recipes.iter().map(|r| r.0.clone()).collect();
                let namespace = state.user.clone().unwrap_or_default();
                state.overlay = Overlay::Deploy(Box::new(crate::form::DeployForm::new(
                    &item.repo_id,
                    recipes,
                    &namespace,
                )));
            }
        }
        Command::Follow => {
            if let Overlay::Logs { follow, .. } = &mut state.overlay {
                *follow = !*follow;
            }
        }
        Command::Toggle | Command::Confirm => {}
    }
    Vec::new()
}

fn describe(state: &mut State) {
    let rows = state.visible();
    let Some(&i) = rows.get(state.selected) else {
        return;
    };
    state.overlay = match state.view {
        View::Catalog => {
            let item = &state.catalog[i];
            let mut text = format!(
                "{}\ntask {} · license {}\n\nRecipes:\n",
                item.repo_id, item.task, item.license
            );
            for (id, accel, engine, file) in &item.recipes {
                let file = if file.is_empty() {
                    String::new()
                } else {
                    format!("  {file}")
                };
                text.push_str(&format!("  {id:<40} {accel:<7} {engine:<11}{file}\n"));
            }
            Overlay::Describe(item.repo_id.clone(), text)
        }
        View::Endpoints => {
            let ep = &state.endpoints[i];
            let text = serde_json::to_string_pretty(&ep.raw).unwrap_or_default();
            Overlay::Describe(format!("{}/{}", ep.namespace, ep.name), text)
        }
    };
}

fn run_command(state: &mut State, cmd: &str) -> Vec<Effect> {
    match cmd {
        "q" | "quit" | "q!" => {
            state.quit = true;
            Vec::new()
        }
        "catalog" | "cat" => state.switch(View::Catalog),
        // `:catalog task=text-generation accelerator=gpu limit=10`: the API's own filters.
        c if c.starts_with("catalog ") => {
            let mut filters = Vec::new();
            for word in c["catalog ".len()..].split_whitespace() {
                match word.split_once('=') {
                    Some((k, v)) => filters.push((k.to_string(), v.to_string())),
                    None => {
                        state.message = Some((
                            format!("{word}: filters are key=value (accelerator, engine, license, task, search, limit)"),
                            true,
                        ));
                        return Vec::new();
                    }
                }
            }
            state.catalog_filters = filters;
            state.switch(View::Catalog)
        }
        "endpoints" | "ep" | "endpoint" => state.switch(View::Endpoints),
        "help" => {
            state.overlay = Overlay::Help;
            Vec::new()
        }
        other => {
            state.message = Some((
                format!("unknown command :{other} (try :catalog, :endpoints, :q)"),
                true,
            ));
            Vec::new()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;
    use serde_json::json;

    fn now() -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 11, 22, 12, 0, 0).unwrap()
    }

    fn state() -> State {
        State::new("in-process".into(), false, now(), "/tmp/x.log".into())
    }

    fn key(s: &mut State, k: &str) -> Vec<Effect> {
        update(s, Action::Key(Key(k.into())), &Keymap::builtin())
    }

    fn endpoints() -> Vec<EndpointRow> {
        ["alpha", "beta", "gamma"]
            .iter()
            .map(|n| {
                EndpointRow::from_json(
                    "alice",
                    &json!({"name": n, "type": "public", "model": {"repository": "org/m"},
                            "status": {"state": "running", "readyReplica": 1, "targetReplica": 1,
                                       "updatedAt": "2026-11-22T10:00:00.000Z", "url": "http://x"}}),
                )
            })
            .collect()
    }

    #[test]
    fn sign_in_then_views_load_their_lists() {
        let mut s = state();
        let fx = update(
            &mut s,
            Action::SignedIn(Ok(("alice".into(), vec!["acme".into()]))),
            &Keymap::builtin(),
        );
        assert_eq!(fx, [Effect::LoadCatalog(Vec::new())]);
        assert_eq!(s.connection, Connection::Connected);
        assert_eq!(
            key(&mut s, "tab"),
            [Effect::LoadEndpoints(vec!["alice".into(), "acme".into()])]
        );
        assert_eq!(s.view, View::Endpoints);
        // Live: each tick reloads the endpoints, but never while a load is under way.
        assert!(update(&mut s, Action::Tick(now()), &Keymap::builtin()).is_empty());
        update(
            &mut s,
            Action::EndpointsLoaded(Ok(Vec::new())),
            &Keymap::builtin(),
        );
        assert_eq!(
            update(&mut s, Action::Tick(now()), &Keymap::builtin()).len(),
            1
        );
    }

    #[test]
    fn navigation_filter_and_commands() {
        let mut s = state();
        s.view = View::Endpoints;
        update(
            &mut s,
            Action::EndpointsLoaded(Ok(endpoints())),
            &Keymap::builtin(),
        );
        key(&mut s, "j");
        key(&mut s, "j");
        key(&mut s, "j");
        assert_eq!(s.selected, 2);
        key(&mut s, "g");
        assert_eq!(s.selected, 0);
        key(&mut s, "/");
        for c in ["b", "e"] {
            key(&mut s, c);
        }
        key(&mut s, "enter");
        assert_eq!(s.visible(), [1]);
        key(&mut s, "esc");
        assert_eq!(s.visible().len(), 3);
        key(&mut s, ":");
        for c in "catalog".chars() {
            key(&mut s, &c.to_string());
        }
        assert_eq!(key(&mut s, "enter"), [Effect::LoadCatalog(Vec::new())]);
        assert_eq!(s.view, View::Catalog);
        key(&mut s, ":");
        key(&mut s, "x");
        key(&mut s, "enter");
        assert!(s
            .message
            .as_ref()
            .is_some_and(|(m, err)| *err && m.contains(":x")));
        key(&mut s, ":");
        key(&mut s, "q");
        key(&mut s, "enter");
        assert!(s.quit);
    }

    #[test]
    fn dangerous_actions_confirm_with_cancel_as_default() {
        let mut s = state();
        s.view = View::Endpoints;
        update(
            &mut s,
            Action::EndpointsLoaded(Ok(endpoints())),
            &Keymap::builtin(),
        );
        key(&mut s, "j");
        key(&mut s, "p");
        assert!(matches!(s.overlay, Overlay::Confirm { yes: false, .. }));
        // Enter on the default button cancels.
        assert!(key(&mut s, "enter").is_empty());
        assert_eq!(s.overlay, Overlay::None);
        key(&mut s, "ctrl-d");
        key(&mut s, "tab");
        let fx = key(&mut s, "enter");
        assert_eq!(
            fx,
            [Effect::Act {
                action: EndpointAction::Delete,
                namespace: "alice".into(),
                name: "beta".into()
            }]
        );
        // Read-only: no such actions at all.
        s.read_only = true;
        key(&mut s, "p");
        assert_eq!(s.overlay, Overlay::None);
    }

    #[test]
    fn catalog_filters_and_logs() {
        let mut s = state();
        key(&mut s, ":");
        for c in "catalog task=text-generation limit=5".chars() {
            key(
                &mut s,
                &if c == ' ' {
                    "space".to_string()
                } else {
                    c.to_string()
                },
            );
        }
        let fx = key(&mut s, "enter");
        let want = vec![
            ("task".to_string(), "text-generation".to_string()),
            ("limit".to_string(), "5".to_string()),
        ];
        assert_eq!(fx, [Effect::LoadCatalog(want.clone())]);
        assert_eq!(s.catalog_filters, want);
        // A filter the server refuses is shown, and the server is still considered up.
        update(
            &mut s,
            Action::SignedIn(Ok(("alice".into(), vec![]))),
            &Keymap::builtin(),
        );
        update(
            &mut s,
            Action::CatalogLoaded(Err("limit: must be greater than 0".into())),
            &Keymap::builtin(),
        );
        assert_eq!(s.connection, Connection::Connected);
        assert!(s
            .message
            .as_ref()
            .is_some_and(|(m, e)| *e && m.contains("limit")));

        s.view = View::Endpoints;
        update(
            &mut s,
            Action::EndpointsLoaded(Ok(endpoints())),
            &Keymap::builtin(),
        );
        let fx = key(&mut s, "l");
        assert_eq!(
            fx,
            [Effect::LoadLogs {
                namespace: "alice".into(),
                name: "alpha".into()
            }]
        );
        update(
            &mut s,
            Action::LogsLoaded {
                namespace: "alice".into(),
                name: "alpha".into(),
                text: Ok("line 1\nline 2".into()),
            },
            &Keymap::builtin(),
        );
        assert!(
            matches!(&s.overlay, Overlay::Logs { text, follow: true, .. } if text.ends_with("line 2"))
        );
        // Following: every tick reloads; paused: nothing.
        assert_eq!(
            update(&mut s, Action::Tick(now()), &Keymap::builtin()).len(),
            1
        );
        key(&mut s, "space");
        assert!(update(&mut s, Action::Tick(now()), &Keymap::builtin()).is_empty());
        key(&mut s, "esc");
        assert_eq!(s.overlay, Overlay::None);
    }

    #[test]
    fn copy_puts_the_url_on_the_clipboard() {
        let mut s = state();
        s.view = View::Endpoints;
        update(
            &mut s,
            Action::EndpointsLoaded(Ok(endpoints())),
            &Keymap::builtin(),
        );
        assert_eq!(key(&mut s, "y"), [Effect::Copy("http://x".into())]);
        assert!(s
            .message
            .as_ref()
            .is_some_and(|(m, _)| m == "copied http://x"));
    }

    #[test]
    fn replica_output_is_made_printable() {
        assert_eq!(
            printable("a\tb\u{1b}[31mred\u{1b}[0m\r\nnext\u{7}"),
            "a    bred\nnext"
        );
    }

    #[test]
    fn read_only_holds_whatever_the_keymap_says_and_ctrl_c_always_quits() {
        let user = "[[binding]]\ncontext = \"endpoints\"\nkeys = [\"x\"]\naction = \"delete\"\ndescription = \"delete\"\n";
        let (map, _) = Keymap::with_overrides(Some(user));
        let mut s = state();
        s.read_only = true;
        s.view = View::Endpoints;
        update(&mut s, Action::EndpointsLoaded(Ok(endpoints())), &map);
        update(&mut s, Action::Key(Key("x".into())), &map);
        assert_eq!(s.overlay, Overlay::None);
        key(&mut s, "/");
        key(&mut s, "ctrl-c");
        assert!(s.quit);
    }

    #[test]
    fn overlays_keep_keys_from_the_list_and_the_selection_follows_its_endpoint() {
        let mut s = state();
        s.view = View::Endpoints;
        update(
            &mut s,
            Action::EndpointsLoaded(Ok(endpoints())),
            &Keymap::builtin(),
        );
        key(&mut s, "j");
        key(&mut s, "?");
        key(&mut s, "j");
        assert_eq!(s.selected, 1);
        key(&mut s, "esc");
        // beta is selected; a reload with a new first row keeps it selected.
        let mut rows = endpoints();
        rows.insert(
            0,
            EndpointRow::from_json("alice", &json!({"name": "aaa", "status": {}})),
        );
        update(
            &mut s,
            Action::EndpointsLoaded(Ok(rows)),
            &Keymap::builtin(),
        );
        assert_eq!(s.endpoints[s.visible()[s.selected]].name, "beta");
    }

    #[test]
    fn unreachable_server_is_shown_and_retried() {
        let mut s = state();
        update(
            &mut s,
            Action::SignedIn(Err("connection refused".into())),
            &Keymap::builtin(),
        );
        assert_eq!(
            s.connection,
            Connection::Unreachable("connection refused".into())
        );
        assert_eq!(
            update(&mut s, Action::Tick(now()), &Keymap::builtin()),
            [Effect::SignIn]
        );
        // Backoff: not again within the next second, then after it.
        assert!(update(&mut s, Action::Tick(now()), &Keymap::builtin()).is_empty());
        let later = now() + chrono::Duration::seconds(1);
        assert_eq!(
            update(&mut s, Action::Tick(later), &Keymap::builtin()),
            [Effect::SignIn]
        );
        assert!(update(
            &mut s,
            Action::Tick(later + chrono::Duration::seconds(1)),
            &Keymap::builtin()
        )
        .is_empty());
        // A refused token is not retried.
        update(
            &mut s,
            Action::SignedIn(Err("401 Unauthorized: invalid or expired token".into())),
            &Keymap::builtin(),
        );
        assert!(matches!(s.connection, Connection::Unauthorized(_)));
        assert!(update(
            &mut s,
            Action::Tick(later + chrono::Duration::seconds(60)),
            &Keymap::builtin()
        )
        .is_empty());
    }

    #[test]
    fn catalog_rows_summarize_recipes() {
        let row = CatalogRow::from_json(&json!({
            "repoId": "Qwen/Qwen2.5-7B", "authorName": "Qwen", "modelName": "Qwen2.5-7B", "task": "text-generation",
            "license": "apache-2.0", "createdAt": "2024-09-19T00:00:00.000Z",
            "recipes": [{"publicId": "a", "accelerator": "gpu", "engineType": "vllm"},
                        {"publicId": "b", "accelerator": "cpu", "engineType": "llamacpp", "ggufFile": "q4.gguf"},
                        {"publicId": "c", "accelerator": "gpu", "engineType": "sglang"}]
        }));
        assert_eq!(row.accelerators, "cpu,gpu");
        assert_eq!(row.engines, "llamacpp,sglang,vllm");
        assert_eq!(row.created, "2024-09-19");
        let mut s = state();
        update(
            &mut s,
            Action::CatalogLoaded(Ok(vec![row])),
            &Keymap::builtin(),
        );
        key(&mut s, "enter");
        let Overlay::Describe(title, text) = &s.overlay else {
            panic!("{:?}", s.overlay)
        };
        assert_eq!(title, "Qwen/Qwen2.5-7B");
        assert!(text.contains("q4.gguf"));
    }
}
