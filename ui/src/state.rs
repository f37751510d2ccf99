//! The console's state and its one update function: terminal keys and API results come in as [`Action`]s,
//! `update` changes the state and returns the [`Effect`]s (API calls) to run. No I/O and no `.await` here.

use chrono::{DateTime, Utc};
use ratatui::layout::{Constraint, Layout, Rect};
use serde_json::Value;

pub use crate::effects::{Effect, EndpointAction, ExternalEdit};
use crate::keymap::{Command, Context, Keymap};
use crate::pager::Pager;
use crate::spec::Outcome;

/// A refusal from the server: its message and its `{path, message}` issues.
pub type Refusal = (String, Vec<(String, String)>);

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
    pub recipes: Vec<Recipe>,
    /// What `/` searches, lowercased once.
    search: String,
}

/// One recipe of a catalog model.
#[derive(Debug, Clone, PartialEq)]
pub struct Recipe {
    pub id: String,
    pub accelerator: String,
    pub engine: String,
    /// The model file, for engines that take one (empty otherwise).
    pub file: String,
}

impl Recipe {
    /// The column heads over [`Recipe::line`]s.
    pub fn header() -> String {
        Recipe::columns("RECIPE", "ACCELERATOR", "ENGINE", "MODEL FILE")
    }

    /// The recipe as a line of the recipes pane and of a model's description.
    pub fn line(&self) -> String {
        Recipe::columns(&self.id, &self.accelerator, &self.engine, &self.file)
    }

    fn columns(id: &str, accelerator: &str, engine: &str, file: &str) -> String {
        format!("{id:<44} {accelerator:<12} {engine:<12} {file}")
            .trim_end()
            .to_string()
    }
}

impl CatalogRow {
    pub fn from_json(item: &Value) -> CatalogRow {
        let s = |v: &Value| v.as_str().unwrap_or("").to_string();
        let recipes: Vec<Recipe> = item["recipes"]
            .as_array()
            .map(|rs| {
                rs.iter()
                    .map(|r| Recipe {
                        id: s(&r["publicId"]),
                        accelerator: s(&r["accelerator"]),
                        engine: s(&r["engineType"]),
                        file: s(&r["ggufFile"]),
                    })
                    .collect()
            })
            .unwrap_or_default();
        let distinct = |f: fn(&Recipe) -> &String| {
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
            accelerators: distinct(|r| &r.accelerator),
            engines: distinct(|r| &r.engine),
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

/// What covers the view, if anything. `Esc` closes it.
#[derive(Debug, Clone, PartialEq)]
pub enum Overlay {
    None,
    Help,
    /// A catalog item's recipes or an endpoint's whole resource.
    Describe(Pager),
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
        pager: Pager,
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

/// Why signing in failed: the server refused the token (not retried), or could not be asked.
#[derive(Debug, Clone, PartialEq)]
pub enum SignInFailure {
    Refused(String),
    Unreachable(String),
}

#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    Key(Key),
    /// A second passed (the clock in the status line) or a refresh is due.
    Tick(DateTime<Utc>),
    /// The terminal's new size (columns, rows).
    Resize(u16, u16),
    /// A mouse wheel turn (`true`: down) or a click on a screen row.
    Wheel(bool),
    Click(u16),
    SignedIn(Result<(String, Vec<String>), SignInFailure>),
    /// The answer to the load with this sequence number; older answers than the latest asked are dropped.
    CatalogLoaded(u64, Result<Vec<CatalogRow>, String>),
    EndpointsLoaded(u64, Result<Vec<EndpointRow>, String>),
    /// An update from an editor was saved (its message) or refused.
    Saved {
        namespace: String,
        name: String,
        result: Result<String, Refusal>,
    },
    /// `$EDITOR` closed: the text it left, for the spec editor.
    ExternallyEdited(ExternalEdit, Result<String, String>),
    /// The in-process server stopped on its own: why.
    ServerStopped(String),
    /// An endpoint action finished: its message.
    Done(Result<String, String>),
    LogsLoaded {
        namespace: String,
        name: String,
        text: Result<String, String>,
    },
    /// `namespace/name` of the new endpoint, or the server's refusal.
    Deployed(Result<String, Refusal>),
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
    /// The latest catalog and endpoints loads asked for.
    pub catalog_seq: u64,
    pub endpoints_seq: u64,
    /// Bumped when the console switches server: answers from before are dropped by the runtime.
    pub epoch: u64,
    /// The server the console started with (`:server` alone goes back to it).
    pub home: String,
    /// The terminal's size (columns, rows).
    pub size: (u16, u16),
    /// Something on screen changed since the last frame.
    pub dirty: bool,
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
            home: server.clone(),
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
            catalog_seq: 0,
            endpoints_seq: 0,
            epoch: 0,
            size: (80, 24),
            dirty: true,
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
            (Overlay::Describe(_), _) => Context::Pager,
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
            View::Catalog => {
                self.catalog_seq += 1;
                vec![Effect::LoadCatalog(
                    self.catalog_seq,
                    self.catalog_filters.clone(),
                )]
            }
            View::Endpoints if self.user.is_some() => {
                self.loading = true;
                self.endpoints_seq += 1;
                vec![Effect::LoadEndpoints(
                    self.endpoints_seq,
                    self.namespaces.clone(),
                )]
            }
            View::Endpoints => vec![Effect::SignIn],
        }
    }
}

/// Applies one action. Returns the API calls to make. Sets `dirty` when the screen needs drawing again.
pub fn update(state: &mut State, action: Action, keymap: &Keymap) -> Vec<Effect> {
    // Ticks and refreshes mostly change nothing on screen: they say so themselves.
    if !matches!(
        action,
        Action::Tick(_) | Action::EndpointsLoaded(..) | Action::LogsLoaded { .. }
    ) {
        state.dirty = true;
    }
    match action {
        Action::Tick(now) => {
            // The clock shows minutes: one frame a minute when nothing else happens.
            if now.timestamp().div_euclid(60) != state.now.timestamp().div_euclid(60) {
                state.dirty = true;
            }
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
        Action::Resize(w, h) => {
            state.size = (w, h);
            Vec::new()
        }
        Action::Wheel(down) => {
            let command = if down { Command::Down } else { Command::Up };
            on_command(state, command)
        }
        Action::Click(row) => {
            if state.overlay == Overlay::None && !state.filtering {
                if let Some(i) = row_at(state, row) {
                    state.selected = i;
                }
            }
            Vec::new()
        }
        Action::SignedIn(Ok((user, orgs))) => {
            state.connection = Connection::Connected;
            state.retry_at = None;
            state.retry_delay = chrono::Duration::seconds(1);
            state.namespaces = std::iter::once(user.clone()).chain(orgs).collect();
            state.user = Some(user);
            state.refresh()
        }
        // A token the server refuses is not a lost server: no retrying.
        Action::SignedIn(Err(SignInFailure::Refused(e))) => {
            state.connection = Connection::Unauthorized(e);
            Vec::new()
        }
        Action::SignedIn(Err(SignInFailure::Unreachable(e))) => {
            state.connection = Connection::Unreachable(e);
            Vec::new()
        }
        Action::EndpointsLoaded(seq, _) if seq < state.endpoints_seq => Vec::new(),
        Action::CatalogLoaded(seq, _) if seq < state.catalog_seq => Vec::new(),
        Action::EndpointsLoaded(_, Err(e)) => {
            state.loading = false;
            state.dirty = true;
            state.connection = Connection::Unreachable(e);
            Vec::new()
        }
        // A catalog query the server refused (a bad filter) is the user's to fix, not a lost server.
        Action::CatalogLoaded(_, Err(e)) => {
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
                pager,
                follow: true,
            } = &mut state.overlay
            {
                if *n == namespace && *e == name {
                    let text =
                        printable(&text.unwrap_or_else(|e| format!("(logs unavailable: {e})")));
                    if text.lines().ne(pager.lines.iter().map(String::as_str)) {
                        pager.set_text(&text);
                        state.dirty = true;
                    }
                }
            }
            Vec::new()
        }
        Action::CatalogLoaded(_, Ok(rows)) => {
            state.connection = Connection::Connected;
            state.catalog = rows;
            clamp(state);
            Vec::new()
        }
        Action::EndpointsLoaded(_, Ok(rows)) => {
            state.loading = false;
            if state.connection != Connection::Connected {
                state.connection = Connection::Connected;
                state.dirty = true;
            }
            if rows == state.endpoints {
                return Vec::new();
            }
            state.dirty = true;
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
        Action::Saved {
            namespace,
            name,
            result,
        } => {
            // The editor that is waiting for this answer, if it is still open.
            let open = match &state.overlay {
                Overlay::Spec(e)
                    if e.busy && e.edit.namespace == namespace && e.edit.name == name =>
                {
                    Some("spec")
                }
                Overlay::Schedule(e) if e.busy && e.namespace == namespace && e.name == name => {
                    Some("schedule")
                }
                _ => None,
            };
            let what = open.unwrap_or("update");
            match result {
                Ok(_) => {
                    state.message =
                        Some((format!("saved the {what} of {namespace}/{name}"), false));
                    if open.is_some() {
                        state.overlay = Overlay::None;
                    }
                    state.refresh()
                }
                // The editor keeps its text and shows the refusal; a closed one leaves a message.
                Err((message, issues)) => {
                    match &mut state.overlay {
                        Overlay::Spec(e) if open.is_some() => e.refused(message, &issues),
                        Overlay::Schedule(e) if open.is_some() => e.refused(message, &issues),
                        _ => {
                            state.message =
                                Some((format!("saving {namespace}/{name}: {message}"), true))
                        }
                    }
                    Vec::new()
                }
            }
        }
        Action::ExternallyEdited(edit, text) => {
            match text {
                Ok(text) => {
                    let mut editor = crate::spec::SpecEditor::with_text(edit, &text);
                    editor.note =
                        Some("back from the editor: ctrl-s saves, esc drops the edit".into());
                    state.overlay = Overlay::Spec(Box::new(editor));
                }
                Err(e) => state.message = Some((e, true)),
            }
            Vec::new()
        }
        Action::ServerStopped(why) => {
            state.message = Some((format!("the in-process server stopped: {why}"), true));
            // Only while the console is on it: after `:server URL` the other server is still fine.
            if state.server == state.home {
                state.connection = Connection::Unreachable(why);
            }
            Vec::new()
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
    // Text entry first: the filter, a pager's search and the command line take every printable key.
    if state.filtering {
        match key {
            "esc" => {
                state.filtering = false;
                state.filter.clear();
            }
            "enter" => state.filtering = false,
            other => type_into(&mut state.filter, other),
        }
        state.selected = 0;
        return Vec::new();
    }
    let height = pager_height(state.size);
    if let Some((pager, follow)) = state.pager().filter(|(p, _)| p.typing) {
        match key {
            "esc" => {
                pager.typing = false;
                pager.query.clear();
                pager.current = None;
            }
            "enter" => {
                pager.typing = false;
                // Looking for something in logs pauses them, so the match stays put.
                if let Some(follow) = follow {
                    *follow = false;
                }
                if !pager.find(true, height) {
                    state.message = Some((format!("no match for {:?}", pager.query), true));
                }
            }
            other => type_into(&mut pager.query, other),
        }
        return Vec::new();
    }
    // The forms and editors take every key; `esc` closes them. They stay open until the server answers a
    // save: a refused one keeps what was typed.
    if matches!(
        state.overlay,
        Overlay::Spec(_) | Overlay::Schedule(_) | Overlay::Deploy(_)
    ) {
        if key == "esc" {
            state.overlay = Overlay::None;
            return Vec::new();
        }
        let update = |namespace: &str, name: &str, patch| Effect::Update {
            namespace: namespace.to_string(),
            name: name.to_string(),
            patch,
        };
        return match &mut state.overlay {
            Overlay::Spec(e) => match e.on_key(key) {
                Outcome::Stay => Vec::new(),
                Outcome::Save(patch) => vec![update(&e.edit.namespace, &e.edit.name, patch)],
                Outcome::External => vec![e.external()],
            },
            Overlay::Schedule(e) => e
                .on_key(key)
                .map(|p| update(&e.namespace, &e.name, p))
                .into_iter()
                .collect(),
            Overlay::Deploy(form) => form.on_key(key).map(Effect::Deploy).into_iter().collect(),
            _ => Vec::new(),
        };
    }
    if let Overlay::Command(text) = &mut state.overlay {
        match key {
            "esc" => state.overlay = Overlay::None,
            "enter" => {
                let cmd = text.trim().to_string();
                state.overlay = Overlay::None;
                return run_command(state, &cmd);
            }
            other => type_into(text, other),
        }
        return Vec::new();
    }
    // In read-only mode, lookup finds no command that changes something, whatever the keymap says.
    let Some(command) = keymap.lookup(state.context(), key, state.read_only) else {
        return Vec::new();
    };
    on_command(state, command)
}

/// A key typed into a line of text: backspace deletes, space and single characters are added.
fn type_into(text: &mut String, key: &str) {
    match key {
        "backspace" => {
            text.pop();
        }
        "space" => text.push(' '),
        k if k.chars().count() == 1 => text.push_str(k),
        _ => {}
    }
}

impl State {
    /// The open pager (describe or logs) and, for logs, whether they follow.
    fn pager(&mut self) -> Option<(&mut Pager, Option<&mut bool>)> {
        match &mut self.overlay {
            Overlay::Describe(p) => Some((p, None)),
            Overlay::Logs { pager, follow, .. } => Some((pager, Some(follow))),
            _ => None,
        }
    }
}

/// Scrolling and searching in describe and logs. Moving away from the end of followed logs pauses them,
/// like `less +F`.
fn on_pager(state: &mut State, command: Command) -> Vec<Effect> {
    let height = pager_height(state.size);
    let page = height as isize;
    let mut reload = false;
    let mut note = None;
    let Some((pager, follow)) = state.pager() else {
        return Vec::new();
    };
    let mut pause = false;
    match command {
        Command::Back if !pager.query.is_empty() => {
            pager.query.clear();
            pager.current = None;
        }
        Command::Down | Command::PageDown => {
            pager.scroll(if command == Command::Down { 1 } else { page }, height);
            // Down to the end keeps following; anywhere above it pauses.
            let at_end = pager.first_line(height) + height >= pager.lines.len();
            match follow {
                Some(true) if at_end => pager.tail = true,
                Some(true) => pause = true,
                _ => {}
            }
        }
        Command::Up => {
            pager.scroll(-1, height);
            pause = true;
        }
        Command::PageUp => {
            pager.scroll(-page, height);
            pause = true;
        }
        Command::Top => {
            pager.to_top();
            pause = true;
        }
        Command::Bottom => {
            pager.to_end(height);
            pager.tail = follow.as_deref() == Some(&true);
        }
        Command::Search => {
            pager.typing = true;
            pager.query.clear();
            pager.current = None;
        }
        Command::NextMatch | Command::PrevMatch => {
            if !pager.find(command == Command::NextMatch, height) {
                note = Some(if pager.query.is_empty() {
                    "no search: / searches".to_string()
                } else {
                    format!("no match for {:?}", pager.query)
                });
            }
            pause = true;
        }
        Command::Follow => {
            if let Some(follow) = follow {
                *follow = !*follow;
                pager.tail = *follow;
                reload = *follow;
            }
        }
        Command::Back => state.overlay = Overlay::None,
        Command::Quit => state.quit = true,
        Command::Help => state.overlay = Overlay::Help,
        // The pager covers the list: other keys do not reach it.
        _ => {}
    }
    if pause {
        if let Some((_, Some(follow))) = state.pager() {
            *follow = false;
        }
    }
    if let Some(n) = note {
        state.message = Some((n, true));
    }
    match &state.overlay {
        Overlay::Logs {
            namespace, name, ..
        } if reload => vec![Effect::LoadLogs {
            namespace: namespace.clone(),
            name: name.clone(),
        }],
        _ => Vec::new(),
    }
}

fn on_command(state: &mut State, command: Command) -> Vec<Effect> {
    if state.pager().is_some() {
        return on_pager(state, command);
    }
    // Help covers the list: keys do not reach it through it.
    if state.overlay == Overlay::Help
        && !matches!(command, Command::Back | Command::Quit | Command::Help)
    {
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
        Command::PageDown => {
            let page = list_height(state.view, state.size);
            state.selected = (state.selected + page).min(rows.saturating_sub(1));
        }
        Command::PageUp => {
            let page = list_height(state.view, state.size);
            state.selected = state.selected.saturating_sub(page);
        }
        Command::Top => state.selected = 0,
        Command::Bottom => state.selected = rows.saturating_sub(1),
        Command::Refresh => return state.refresh(),
        Command::Describe => describe(state),
        Command::Pause | Command::Resume | Command::ScaleToZero | Command::Delete => {
            if let (Some(ep), Some(action)) = (state.selected_endpoint(), command.endpoint_action())
            {
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
                    pager: Pager::new(format!("logs {namespace}/{name}"), "", true),
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
        Command::EditExternal => {
            if let Some(ep) = state.selected_endpoint() {
                let (edit, text) = crate::spec::edit_of(&ep.namespace, &ep.name, &ep.raw);
                return vec![Effect::ExternalEdit(edit, text)];
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
                let recipes = item.recipes.iter().map(|r| r.id.clone()).collect();
                let namespace = state.user.clone().unwrap_or_default();
                state.overlay = Overlay::Deploy(Box::new(crate::form::DeployForm::new(
                    &item.repo_id,
                    recipes,
                    &namespace,
                )));
            }
        }
        Command::Follow
        | Command::Search
        | Command::NextMatch
        | Command::PrevMatch
        | Command::Toggle
        | Command::Confirm => {}
    }
    Vec::new()
}

fn describe(state: &mut State) {
    let rows = state.visible();
    let Some(&i) = rows.get(state.selected) else {
        return;
    };
    let (title, text) = match state.view {
        View::Catalog => {
            let item = &state.catalog[i];
            let mut text = format!(
                "{}\ntask {} · license {}\n\n{}\n",
                item.repo_id,
                item.task,
                item.license,
                Recipe::header()
            );
            for recipe in &item.recipes {
                text.push_str(&recipe.line());
                text.push('\n');
            }
            (item.repo_id.clone(), text)
        }
        View::Endpoints => {
            let ep = &state.endpoints[i];
            let text = serde_json::to_string_pretty(&ep.raw).unwrap_or_default();
            (format!("{}/{}", ep.namespace, ep.name), text)
        }
    };
    state.overlay = Overlay::Describe(Pager::new(title, &text, false));
}

impl State {
    /// Forgets everything of the server in use and talks to another (`Effect::Connect`).
    fn connect(&mut self, label: String, to: Option<(String, Option<String>)>) -> Vec<Effect> {
        self.epoch += 1;
        self.server = label;
        self.connection = Connection::Connecting;
        self.user = None;
        self.namespaces.clear();
        self.catalog.clear();
        self.endpoints.clear();
        self.selected = 0;
        self.overlay = Overlay::None;
        self.loading = false;
        self.retry_at = None;
        self.retry_delay = chrono::Duration::seconds(1);
        vec![Effect::Connect(to), Effect::SignIn]
    }
}

/// The command line as shown: whatever follows the URL of `:server URL` (a token) is masked, split the way
/// the command itself splits it.
pub fn shown_command(text: &str) -> String {
    let mut words = text.split_whitespace();
    if words.next() != Some("server") {
        return text.to_string();
    }
    let Some(url) = words.next() else {
        return text.to_string();
    };
    let after_url = text.find(url).map_or(text.len(), |i| i + url.len());
    let masked: String = text[after_url..]
        .chars()
        .map(|c| if c.is_whitespace() { c } else { '•' })
        .collect();
    format!("{}{masked}", &text[..after_url])
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
        // `:server` goes back to the server the console started with.
        "server" => {
            let home = state.home.clone();
            state.message = Some((format!("back to {home}"), false));
            state.connect(home, None)
        }
        // `:server URL [TOKEN]`: another server; without a token, the one the console started with.
        c if c.starts_with("server ") => {
            let mut words = c["server ".len()..].split_whitespace();
            let url = words.next().unwrap_or("").trim_end_matches('/').to_string();
            let token = words.next().map(str::to_string);
            if !(url.starts_with("http://") || url.starts_with("https://")) || url.len() < 10 {
                state.message = Some((
                    format!("{url}: a server is an http:// or https:// URL (:server URL [TOKEN])"),
                    true,
                ));
                return Vec::new();
            }
            state.message = Some((format!("switched to {url}"), false));
            state.connect(url.clone(), Some((url, token)))
        }
        // Debug builds only: the terminal must come back after a panic, and a test checks that it does.
        #[cfg(debug_assertions)]
        "panic" => panic!("the console was asked to panic (:panic, debug builds only)"),
        other => {
            state.message = Some((
                format!("unknown command :{other} (try :catalog, :endpoints, :server, :q)"),
                true,
            ));
            Vec::new()
        }
    }
}

// Where things are on a terminal of a given size: paging and clicks need them as much as drawing does.

/// Lines of text a pager (describe, logs) shows on a terminal of `size`: the box leaves two rows above and
/// below, and has a border.
pub fn pager_height(size: (u16, u16)) -> usize {
    (size.1 as usize).saturating_sub(6).max(1)
}

/// Rows of the catalog's detail pane (the selected model's recipes), under the list.
const DETAIL_HEIGHT: u16 = 7;

/// Where the parts of the main screen go: the status line, the view's table, the catalog's detail pane and
/// the footer. Drawing, paging and mouse clicks all take the table's place from here.
pub struct Screen {
    pub top: Rect,
    pub table: Rect,
    pub detail: Option<Rect>,
    pub bottom: Rect,
}

pub fn screen(view: View, area: Rect) -> Screen {
    let [top, main, bottom] = Layout::vertical([
        Constraint::Length(1),
        Constraint::Min(3),
        Constraint::Length(2),
    ])
    .areas(area);
    let (table, detail) = match view {
        View::Catalog => {
            let [table, detail] =
                Layout::vertical([Constraint::Min(3), Constraint::Length(DETAIL_HEIGHT)])
                    .areas(main);
            (table, Some(detail))
        }
        View::Endpoints => (main, None),
    };
    Screen {
        top,
        table,
        detail,
        bottom,
    }
}

/// The table of a view on a terminal of `size`.
fn table_area(view: View, size: (u16, u16)) -> Rect {
    screen(view, Rect::new(0, 0, size.0, size.1)).table
}

/// Rows a table in `area` shows: its border and header taken away.
pub fn table_rows(area: Rect) -> usize {
    (area.height as usize).saturating_sub(3).max(1)
}

/// Rows of a view's table on a terminal of `size` (what page up and down move by).
pub fn list_height(view: View, size: (u16, u16)) -> usize {
    table_rows(table_area(view, size))
}

/// The first row of the list shown, keeping the selection in sight (the same rule `list` draws with).
pub fn list_offset(selected: usize, height: usize) -> usize {
    selected.saturating_sub(height.saturating_sub(1))
}

/// The row of the current view under screen row `y` (a mouse click), if any.
pub fn row_at(state: &State, y: u16) -> Option<usize> {
    let table = table_area(state.view, state.size);
    // Below the table's top border and header.
    let first = table.y as usize + 2;
    let height = table_rows(table);
    let y = (y as usize).checked_sub(first).filter(|y| *y < height)?;
    let rows = state.visible().len();
    let selected = state.selected.min(rows.saturating_sub(1));
    let at = list_offset(selected, height) + y;
    (at < rows).then_some(at)
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

    /// Types `text` a key at a time (spaces as `space`).
    fn typed(s: &mut State, text: &str) {
        for c in text.chars() {
            key(
                s,
                &if c == ' ' {
                    "space".into()
                } else {
                    c.to_string()
                },
            );
        }
    }

    fn signed_in(s: &mut State) {
        let who = Action::SignedIn(Ok(("alice".into(), vec![])));
        update(s, who, &Keymap::builtin());
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

    fn loaded(s: &mut State, rows: Result<Vec<EndpointRow>, String>) {
        let seq = s.endpoints_seq;
        update(s, Action::EndpointsLoaded(seq, rows), &Keymap::builtin());
    }

    #[test]
    fn sign_in_then_views_load_their_lists() {
        let mut s = state();
        let fx = update(
            &mut s,
            Action::SignedIn(Ok(("alice".into(), vec!["acme".into()]))),
            &Keymap::builtin(),
        );
        assert_eq!(fx, [Effect::LoadCatalog(1, Vec::new())]);
        assert_eq!(s.connection, Connection::Connected);
        assert_eq!(
            key(&mut s, "tab"),
            [Effect::LoadEndpoints(
                1,
                vec!["alice".into(), "acme".into()]
            )]
        );
        assert_eq!(s.view, View::Endpoints);
        // Live: each tick reloads the endpoints, but never while a load is under way.
        assert!(update(&mut s, Action::Tick(now()), &Keymap::builtin()).is_empty());
        loaded(&mut s, Ok(Vec::new()));
        assert_eq!(
            update(&mut s, Action::Tick(now()), &Keymap::builtin()).len(),
            1
        );
    }

    #[test]
    fn navigation_filter_and_commands() {
        let mut s = state();
        s.view = View::Endpoints;
        loaded(&mut s, Ok(endpoints()));
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
        typed(&mut s, "catalog");
        assert!(matches!(&key(&mut s, "enter")[..], [Effect::LoadCatalog(_, f)] if f.is_empty()));
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
        loaded(&mut s, Ok(endpoints()));
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
        typed(&mut s, "catalog task=text-generation limit=5");
        let fx = key(&mut s, "enter");
        let want = vec![
            ("task".to_string(), "text-generation".to_string()),
            ("limit".to_string(), "5".to_string()),
        ];
        assert_eq!(fx, [Effect::LoadCatalog(1, want.clone())]);
        assert_eq!(s.catalog_filters, want);
        // A filter the server refuses is shown, and the server is still considered up.
        signed_in(&mut s);
        let seq = s.catalog_seq;
        update(
            &mut s,
            Action::CatalogLoaded(seq, Err("limit: must be greater than 0".into())),
            &Keymap::builtin(),
        );
        assert_eq!(s.connection, Connection::Connected);
        assert!(s
            .message
            .as_ref()
            .is_some_and(|(m, e)| *e && m.contains("limit")));

        s.view = View::Endpoints;
        loaded(&mut s, Ok(endpoints()));
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
            matches!(&s.overlay, Overlay::Logs { pager, follow: true, .. } if pager.lines.last().is_some_and(|l| l == "line 2"))
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
        loaded(&mut s, Ok(endpoints()));
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
        let seq = s.endpoints_seq;
        update(&mut s, Action::EndpointsLoaded(seq, Ok(endpoints())), &map);
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
        loaded(&mut s, Ok(endpoints()));
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
        loaded(&mut s, Ok(rows));
        assert_eq!(s.endpoints[s.visible()[s.selected]].name, "beta");
    }

    #[test]
    fn unreachable_server_is_shown_and_retried() {
        let mut s = state();
        update(
            &mut s,
            Action::SignedIn(Err(SignInFailure::Unreachable("connection refused".into()))),
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
            Action::SignedIn(Err(SignInFailure::Refused(
                "401 Unauthorized: invalid or expired token".into(),
            ))),
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
            Action::CatalogLoaded(0, Ok(vec![row])),
            &Keymap::builtin(),
        );
        key(&mut s, "enter");
        let Overlay::Describe(pager) = &s.overlay else {
            panic!("{:?}", s.overlay)
        };
        assert_eq!(pager.title, "Qwen/Qwen2.5-7B");
        assert!(pager.lines.iter().any(|l| l.contains("q4.gguf")));
    }

    #[test]
    fn stale_answers_are_dropped_and_idle_ticks_draw_nothing() {
        let mut s = state();
        signed_in(&mut s);
        // Two catalog loads under way; the older answer arrives last and is dropped.
        key(&mut s, "r");
        assert_eq!(s.catalog_seq, 2);
        let row = |id: &str| CatalogRow::from_json(&json!({"repoId": id}));
        update(
            &mut s,
            Action::CatalogLoaded(2, Ok(vec![row("new")])),
            &Keymap::builtin(),
        );
        update(
            &mut s,
            Action::CatalogLoaded(1, Ok(vec![row("old")])),
            &Keymap::builtin(),
        );
        assert_eq!(s.catalog[0].repo_id, "new");
        // Ticks within the minute shown, and reloads that bring the same rows, need no frame.
        key(&mut s, "tab");
        loaded(&mut s, Ok(endpoints()));
        s.dirty = false;
        let t = now() + chrono::Duration::seconds(1);
        update(&mut s, Action::Tick(t), &Keymap::builtin());
        loaded(&mut s, Ok(endpoints()));
        assert!(!s.dirty);
        // A changed row does, and so does the next minute.
        let mut rows = endpoints();
        rows[0].state = "failed".into();
        loaded(&mut s, Ok(rows));
        assert!(s.dirty);
        s.dirty = false;
        update(
            &mut s,
            Action::Tick(now() + chrono::Duration::seconds(61)),
            &Keymap::builtin(),
        );
        assert!(s.dirty);
    }

    #[test]
    fn switching_server_forgets_the_old_one() {
        let mut s = state();
        signed_in(&mut s);
        key(&mut s, ":");
        typed(&mut s, "server http://10.0.0.5:8080 sy_secret");
        let Overlay::Command(text) = &s.overlay else {
            panic!("{:?}", s.overlay)
        };
        assert_eq!(shown_command(text), "server http://10.0.0.5:8080 •••••••••");
        assert_eq!(
            shown_command(" server  http://h  tok en"),
            " server  http://h  ••• ••"
        );
        assert_eq!(shown_command("catalog task=x"), "catalog task=x");
        let epoch = s.epoch;
        let fx = key(&mut s, "enter");
        assert_eq!(
            fx,
            [
                Effect::Connect(Some((
                    "http://10.0.0.5:8080".into(),
                    Some("sy_secret".into())
                ))),
                Effect::SignIn
            ]
        );
        assert_eq!(s.epoch, epoch + 1);
        assert_eq!(s.server, "http://10.0.0.5:8080");
        assert_eq!(s.user, None);
        assert_eq!(s.connection, Connection::Connecting);
        // Back home; a URL that is not one is refused and changes nothing.
        key(&mut s, ":");
        typed(&mut s, "server");
        assert_eq!(
            key(&mut s, "enter"),
            [Effect::Connect(None), Effect::SignIn]
        );
        assert_eq!(s.server, "in-process");
        key(&mut s, ":");
        typed(&mut s, "server ftp://x");
        assert!(key(&mut s, "enter").is_empty());
        assert_eq!(s.epoch, epoch + 2);
    }

    #[test]
    fn logs_scroll_back_pauses_them_and_search_finds_lines() {
        let mut s = state();
        s.view = View::Endpoints;
        s.size = (100, 26);
        loaded(&mut s, Ok(endpoints()));
        key(&mut s, "l");
        let text: Vec<String> = (0..100).map(|i| format!("request {i}")).collect();
        let logs = |s: &mut State, text: String| {
            update(
                s,
                Action::LogsLoaded {
                    namespace: "alice".into(),
                    name: "alpha".into(),
                    text: Ok(text),
                },
                &Keymap::builtin(),
            )
        };
        logs(&mut s, text.join("\n"));
        let pager = |s: &State| match &s.overlay {
            Overlay::Logs { pager, follow, .. } => (pager.clone(), *follow),
            other => panic!("{other:?}"),
        };
        let height = pager_height(s.size);
        assert_eq!(pager(&s).0.first_line(height), 100 - height);
        key(&mut s, "pageup");
        let (p, follow) = pager(&s);
        assert!(!follow, "scrolling back pauses");
        assert_eq!(p.first_line(height), 100 - 2 * height);
        // Paused: new output does not move the view.
        logs(&mut s, format!("{}\nrequest 100", text.join("\n")));
        assert_eq!(pager(&s).0.lines.len(), 100);
        for k in [
            "/", "r", "e", "q", "u", "e", "s", "t", "space", "4", "2", "enter",
        ] {
            key(&mut s, k);
        }
        assert_eq!(pager(&s).0.current, Some(42));
        // space follows again, at the end.
        assert_eq!(key(&mut s, "space").len(), 1);
        assert!(pager(&s).1 && pager(&s).0.tail);
        // Down at the end (a key, or the mouse wheel) keeps following.
        key(&mut s, "j");
        update(&mut s, Action::Wheel(true), &Keymap::builtin());
        assert!(pager(&s).1 && pager(&s).0.tail);
    }

    #[test]
    fn an_answer_for_a_closed_editor_is_a_message_and_clicks_select_rows() {
        let mut s = state();
        s.view = View::Endpoints;
        s.size = (100, 30);
        loaded(&mut s, Ok(endpoints()));
        update(
            &mut s,
            Action::Saved {
                namespace: "alice".into(),
                name: "beta".into(),
                result: Err(("conflict".into(), vec![])),
            },
            &Keymap::builtin(),
        );
        assert!(s
            .message
            .as_ref()
            .is_some_and(|(m, e)| *e && m == "saving alice/beta: conflict"));
        // Rows start below the status line, the border and the header.
        update(&mut s, Action::Click(5), &Keymap::builtin());
        assert_eq!(s.selected, 2);
        update(&mut s, Action::Click(1), &Keymap::builtin());
        assert_eq!(s.selected, 2);
        update(&mut s, Action::Wheel(false), &Keymap::builtin());
        assert_eq!(s.selected, 1);
    }
}
