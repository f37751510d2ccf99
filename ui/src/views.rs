//! Drawing, from the state only: the status line, the view's table, the footer hints and the overlays.
//!
//! No popup covers the status line or the footer: popups are drawn inside the body between them.

use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Borders, Cell, Clear, Paragraph, Row, Table, TableState, Wrap};
use ratatui::Frame;

use crate::app_form::{AppField, AppForm};
use crate::form::{DeployForm, Field};
use crate::keymap::{Context, Keymap, HELP_COLUMNS};
use crate::pager::Pager;
use crate::schedule::{Entry, ScheduleEditor, COLUMNS};
use crate::spec::SpecEditor;
use crate::state::layout::{list_offset, screen, table_rows};
use crate::state::{
    shown_command, AppAction, Connection, Effect, IssuedSecret, Overlay, Recipe, State, View,
};
use crate::webhook_form::{HookField, WebhookForm};

/// The heights the keys page by, which are also the rows drawn.
pub use crate::state::layout::{list_height, pager_height};

pub const MIN_WIDTH: u16 = 80;
pub const MIN_HEIGHT: u16 = 24;

pub fn draw(frame: &mut Frame, state: &State, keymap: &Keymap) {
    let area = frame.area();
    if area.width < MIN_WIDTH || area.height < MIN_HEIGHT {
        let text = format!(
            "The console needs at least {MIN_WIDTH}×{MIN_HEIGHT}; this terminal is {}×{}.",
            area.width, area.height
        );
        frame.render_widget(Paragraph::new(text).wrap(Wrap { trim: true }), area);
        return;
    }
    let screen = screen(state.view, area);
    // The filtered rows, found once for the frame.
    let visible = state.visible();
    status_line(frame, screen.top, state);
    if let Some(detail) = screen.detail {
        recipes(frame, detail, state, &visible);
    }
    match state.view {
        View::Catalog => catalog(frame, screen.table, state, &visible),
        View::Endpoints => endpoints(frame, screen.table, state, &visible),
        View::Apps => apps(frame, screen.table, state, &visible),
        View::Audit => audit(frame, screen.table, state, &visible),
        View::Webhooks => webhooks(frame, screen.table, state, &visible),
        View::Deliveries => deliveries(frame, screen.table, state, &visible),
        View::Notifications => notifications(frame, screen.table, state, &visible),
    }
    footer(frame, screen.bottom, state, keymap);
    overlay(frame, screen.body, state, keymap);
}

/// What covers the view, inside `body`: never over the status line or the footer.
fn overlay(frame: &mut Frame, body: Rect, state: &State, keymap: &Keymap) {
    match &state.overlay {
        Overlay::None | Overlay::Command(_) => {}
        Overlay::Help(scroll) => help(frame, body, state, keymap, *scroll),
        Overlay::Describe(pager) => pane(frame, body, pager, None),
        Overlay::Deploy(form) => deploy(frame, body, form),
        Overlay::Schedule(editor) => schedule(frame, body, editor, state.now),
        Overlay::Spec(editor) => spec(frame, body, editor),
        Overlay::Logs { pager, follow, .. } => {
            let mode = if *follow { "following" } else { "paused" };
            pane(frame, body, pager, Some(mode))
        }
        Overlay::Confirm { asked, yes } => confirm(frame, body, &question(asked, state), *yes),
        Overlay::Secret(issued) => secret(frame, body, issued),
        Overlay::NewApp(form) => new_app(frame, body, form),
        Overlay::Webhook(form) => webhook_form(frame, body, form),
    }
}

fn status_line(frame: &mut Frame, area: Rect, state: &State) {
    let (conn, colour) = match &state.connection {
        Connection::Connecting => ("connecting".to_string(), Color::Yellow),
        Connection::Connected => ("connected".to_string(), Color::Green),
        Connection::Unreachable(why) => (format!("unreachable ({why}); retrying"), Color::Red),
        Connection::Unauthorized(why) => (format!("not signed in ({why})"), Color::Red),
    };
    let mut spans = vec![
        Span::styled(
            " switchyard ",
            Style::new()
                .add_modifier(Modifier::BOLD)
                .fg(Color::Black)
                .bg(Color::Cyan),
        ),
        Span::raw(format!(" {} ", state.server)),
        Span::styled(conn, Style::new().fg(colour)),
        Span::raw(format!("  user {}", state.user.as_deref().unwrap_or("-"))),
    ];
    if state.read_only {
        spans.push(Span::styled("  read-only", Style::new().fg(Color::Yellow)));
    }
    spans.push(Span::raw(format!(
        "  {} UTC",
        state.now.format("%Y-%m-%d %H:%M")
    )));
    // The newest notification, until the next one.
    if let Some((notice, bad)) = &state.notice {
        let colour = if *bad { Color::Red } else { Color::Cyan };
        spans.push(Span::styled(
            format!("  ● {notice}"),
            Style::new().fg(colour),
        ));
    }
    frame.render_widget(Paragraph::new(Line::from(spans)), area);
}

fn state_colour(state: &str) -> Color {
    match state {
        "running" => Color::Green,
        "initializing" | "pending" | "updating" => Color::Yellow,
        "failed" | "updateFailed" => Color::Red,
        "paused" | "scaledToZero" => Color::DarkGray,
        _ => Color::Reset,
    }
}

/// A view's table. Only the rows in the window are built: a frame costs the same for 30 rows as for
/// 10,000. The window scrolls to keep the selected row in sight.
fn list<'a>(
    frame: &mut Frame,
    area: Rect,
    state: &State,
    visible: &[usize],
    (name, total): (&str, usize),
    columns: &[(&'a str, Constraint)],
    row: impl Fn(usize) -> Row<'a>,
) {
    let header: Vec<&str> = columns.iter().map(|c| c.0).collect();
    let widths: Vec<Constraint> = columns.iter().map(|c| c.1).collect();
    let height = table_rows(area);
    let selected = state.selected.min(visible.len().saturating_sub(1));
    let offset = list_offset(selected, height);
    let rows: Vec<Row> = visible
        .iter()
        .skip(offset)
        .take(height)
        .map(|i| row(*i))
        .collect();
    let filter = if state.filtering || !state.filter.is_empty() {
        format!(
            " /{}{}",
            state.filter,
            if state.filtering { "▏" } else { "" }
        )
    } else {
        String::new()
    };
    let title = format!(" {name} ({}/{total}){filter} ", visible.len());
    let table = Table::new(rows, widths)
        .header(Row::new(header).style(Style::new().add_modifier(Modifier::BOLD)))
        .block(Block::default().borders(Borders::ALL).title(title))
        .row_highlight_style(Style::new().add_modifier(Modifier::REVERSED));
    let mut selection = TableState::default().with_selected(Some(selected - offset));
    frame.render_stateful_widget(table, area, &mut selection);
}

fn catalog(frame: &mut Frame, area: Rect, state: &State, visible: &[usize]) {
    let columns = [
        ("MODEL", Constraint::Fill(3)),
        ("AUTHOR", Constraint::Fill(2)),
        ("TASK", Constraint::Fill(2)),
        ("LICENSE", Constraint::Length(12)),
        ("ACCELERATORS", Constraint::Length(14)),
        ("ENGINES", Constraint::Fill(2)),
        ("CREATED", Constraint::Length(10)),
    ];
    // The server's filters, when the catalog shown was asked with some.
    let name = match state.catalog_filters.is_empty() {
        true => "catalog".to_string(),
        false => {
            let filters: Vec<String> = state
                .catalog_filters
                .iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect();
            format!("catalog [{}]", filters.join(" "))
        }
    };
    list(
        frame,
        area,
        state,
        visible,
        (&name, state.catalog.len()),
        &columns,
        |i| {
            let c = &state.catalog[i];
            Row::new(vec![
                c.model.clone(),
                c.author.clone(),
                c.task.clone(),
                c.license.clone(),
                c.accelerators.clone(),
                c.engines.clone(),
                c.created.clone(),
            ])
        },
    );
}

/// The detail pane: the selected model's recipes (all of them with `enter`).
fn recipes(frame: &mut Frame, area: Rect, state: &State, visible: &[usize]) {
    let item = visible
        .get(state.selected.min(visible.len().saturating_sub(1)))
        .map(|i| &state.catalog[*i]);
    let room = area.height.saturating_sub(3) as usize;
    let mut lines = vec![Line::styled(
        Recipe::header(),
        Style::new().add_modifier(Modifier::BOLD),
    )];
    let title = match item {
        Some(item) => {
            let shown = if item.recipes.len() > room {
                room.saturating_sub(1)
            } else {
                room
            };
            for recipe in item.recipes.iter().take(shown) {
                lines.push(Line::from(recipe.line()));
            }
            if item.recipes.len() > shown {
                lines.push(Line::styled(
                    format!("… {} more (enter shows all)", item.recipes.len() - shown),
                    Style::new().fg(Color::DarkGray),
                ));
            }
            format!(" recipes of {} ({}) ", item.repo_id, item.recipes.len())
        }
        None => " recipes ".to_string(),
    };
    frame.render_widget(
        Paragraph::new(lines).block(Block::default().borders(Borders::ALL).title(title)),
        area,
    );
}

fn endpoints(frame: &mut Frame, area: Rect, state: &State, visible: &[usize]) {
    let columns = [
        ("NAME", Constraint::Fill(2)),
        ("NAMESPACE", Constraint::Fill(1)),
        ("STATE", Constraint::Length(13)),
        ("READY", Constraint::Length(5)),
        ("MODEL", Constraint::Fill(2)),
        ("TYPE", Constraint::Length(13)),
        ("URL", Constraint::Fill(3)),
        ("UPDATED", Constraint::Length(19)),
    ];
    list(
        frame,
        area,
        state,
        visible,
        ("endpoints", state.endpoints.len()),
        &columns,
        |i| {
            let e = &state.endpoints[i];
            Row::new(vec![
                Cell::from(e.name.clone()),
                Cell::from(e.namespace.clone()),
                Cell::from(e.state.clone()).style(Style::new().fg(state_colour(&e.state))),
                Cell::from(format!("{}/{}", e.ready, e.target)),
                Cell::from(e.model.clone()),
                Cell::from(e.kind.clone()),
                Cell::from(e.url.clone()),
                Cell::from(e.updated.clone()),
            ])
        },
    );
}

/// What a view that could not load its list says in place of the table.
fn note(frame: &mut Frame, area: Rect, title: &str, note: &str) {
    let lines = vec![
        Line::default(),
        Line::styled(format!("  {note}"), Style::new().fg(Color::Yellow)),
    ];
    frame.render_widget(
        Paragraph::new(lines).wrap(Wrap { trim: false }).block(
            Block::default()
                .borders(Borders::ALL)
                .title(format!(" {title} ")),
        ),
        area,
    );
}

fn apps(frame: &mut Frame, area: Rect, state: &State, visible: &[usize]) {
    let whose = match (&state.apps_owner, &state.user) {
        (Some(owner), _) | (None, Some(owner)) => format!("apps of {owner}"),
        (None, None) => "apps".to_string(),
    };
    if let Some(why) = &state.apps_note {
        return note(frame, area, &whose, why);
    }
    let columns = [
        ("NAME", Constraint::Fill(2)),
        ("CLIENT ID", Constraint::Length(28)),
        ("TYPE", Constraint::Length(12)),
        ("EXCH", Constraint::Length(4)),
        ("REDIRECT URIS", Constraint::Fill(3)),
        ("SCOPES", Constraint::Fill(3)),
    ];
    list(
        frame,
        area,
        state,
        visible,
        (&whose, state.apps.len()),
        &columns,
        |i| {
            let a = &state.apps[i];
            let kind = Style::new().fg(if a.public { Color::Cyan } else { Color::Reset });
            Row::new(vec![
                Cell::from(a.name.clone()),
                Cell::from(a.id.clone()),
                Cell::from(a.kind()).style(kind),
                Cell::from(if a.token_exchange { " ✓" } else { "" }),
                Cell::from(a.redirect_uris.join(" ")),
                Cell::from(a.scopes.join(" ")),
            ])
        },
    );
}

fn audit(frame: &mut Frame, area: Rect, state: &State, visible: &[usize]) {
    let whose = format!("audit log of {}", state.audit_org);
    if let Some(why) = &state.audit_note {
        return note(frame, area, &whose, why);
    }
    // The outcome is never cut; on a narrow terminal the time leaves out the year and the action shares
    // what is left.
    let wide = area.width >= 110;
    let columns = [
        ("TIME (UTC)", Constraint::Length(if wide { 19 } else { 14 })),
        (
            "ACTION",
            if wide {
                Constraint::Length(20)
            } else {
                Constraint::Fill(2)
            },
        ),
        ("OUTCOME", Constraint::Length(15)),
        ("APP", Constraint::Fill(2)),
        ("SUBJECT EMAIL", Constraint::Fill(4)),
        ("USER", Constraint::Fill(1)),
        ("SCOPE", Constraint::Fill(3)),
    ];
    list(
        frame,
        area,
        state,
        visible,
        (&whose, state.audit.len()),
        &columns,
        |i| {
            let e = &state.audit[i];
            let outcome = if e.succeeded() {
                Color::Green
            } else {
                Color::Red
            };
            let at: String = e.at.chars().skip(if wide { 0 } else { 5 }).collect();
            Row::new(vec![
                Cell::from(at),
                Cell::from(e.action.clone()),
                Cell::from(e.outcome.clone()).style(Style::new().fg(outcome)),
                Cell::from(e.app.clone()),
                Cell::from(e.subject_email.clone()),
                Cell::from(e.user.clone()),
                Cell::from(e.scope.clone()),
            ])
        },
    );
}

fn webhooks(frame: &mut Frame, area: Rect, state: &State, visible: &[usize]) {
    if let Some(why) = &state.webhooks_note {
        return note(frame, area, "webhooks", why);
    }
    let columns = [
        ("URL", Constraint::Fill(3)),
        ("WATCHED", Constraint::Fill(2)),
        ("DOMAINS", Constraint::Length(16)),
        ("ENABLED", Constraint::Length(8)),
        ("LAST RESULT", Constraint::Length(30)),
    ];
    list(
        frame,
        area,
        state,
        visible,
        ("webhooks", state.webhooks.len()),
        &columns,
        |i| {
            let h = &state.webhooks[i];
            let enabled = match (h.enabled, h.disabled_reason.is_empty()) {
                (true, _) => Cell::from("yes").style(Style::new().fg(Color::Green)),
                (false, true) => Cell::from("no").style(Style::new().fg(Color::DarkGray)),
                // Disabled by the server (410, failing for days): said in red.
                (false, false) => Cell::from("no (!)").style(Style::new().fg(Color::Red)),
            };
            let last = if h.last.is_empty() {
                Cell::from("-")
            } else {
                let colour = if h.last_ok { Color::Green } else { Color::Red };
                Cell::from(h.last.clone()).style(Style::new().fg(colour))
            };
            Row::new(vec![
                Cell::from(h.url.clone()),
                Cell::from(h.watched.join(" ")),
                Cell::from(h.domains.join(" ")),
                enabled,
                last,
            ])
        },
    );
}

/// A webhook's attempts, newest at the top; a failed poll is said in the title until one succeeds.
fn deliveries(frame: &mut Frame, area: Rect, state: &State, visible: &[usize]) {
    let d = &state.deliveries;
    let title = match &d.note {
        Some(why) => format!("deliveries of {} · {why}; retrying", d.url),
        None => format!("deliveries of {} · live", d.url),
    };
    let columns = [
        ("TIME (UTC)", Constraint::Length(19)),
        ("EVENT", Constraint::Fill(2)),
        ("ATTEMPT", Constraint::Length(7)),
        ("STATUS", Constraint::Length(6)),
        ("DURATION", Constraint::Length(9)),
        ("ERROR", Constraint::Length(9)),
        ("NEXT ATTEMPT", Constraint::Length(19)),
        ("STATE", Constraint::Fill(1)),
    ];
    list(
        frame,
        area,
        state,
        visible,
        (&title, d.rows.len()),
        &columns,
        |i| {
            let a = &d.rows[i];
            let colour = if a.ok() { Color::Green } else { Color::Red };
            let attempt = if a.manual {
                format!("{} (r)", a.attempt)
            } else {
                a.attempt.to_string()
            };
            Row::new(vec![
                Cell::from(a.at.clone()),
                Cell::from(a.event.clone()),
                Cell::from(attempt),
                Cell::from(a.status_code.map_or_else(|| "-".into(), |c| c.to_string()))
                    .style(Style::new().fg(colour)),
                Cell::from(format!("{} ms", a.duration_ms)),
                Cell::from(a.error_class.clone()).style(Style::new().fg(Color::Red)),
                Cell::from(a.next_attempt.clone()),
                Cell::from(a.state.clone()),
            ])
        },
    );
}

/// The user's notifications, newest at the top.
fn notifications(frame: &mut Frame, area: Rect, state: &State, visible: &[usize]) {
    let n = &state.notifications;
    if n.unsupported {
        return note(
            frame,
            area,
            "notifications",
            "this server has no notifications (it is older than this console)",
        );
    }
    let columns = [
        ("TIME (UTC)", Constraint::Length(19)),
        ("KIND", Constraint::Length(20)),
        ("NAMESPACE", Constraint::Fill(1)),
        ("SUBJECT", Constraint::Fill(1)),
        ("TITLE", Constraint::Fill(3)),
    ];
    list(
        frame,
        area,
        state,
        visible,
        ("notifications", n.rows.len()),
        &columns,
        |i| {
            let r = &n.rows[i];
            let colour = if r.is_bad() { Color::Red } else { Color::Reset };
            Row::new(vec![
                Cell::from(r.at.clone()),
                Cell::from(r.kind.clone()).style(Style::new().fg(colour)),
                Cell::from(r.namespace.clone()),
                Cell::from(r.subject.clone()),
                Cell::from(r.headline()),
            ])
        },
    );
}

fn footer(frame: &mut Frame, area: Rect, state: &State, keymap: &Keymap) {
    let [message, hints] =
        Layout::vertical([Constraint::Length(1), Constraint::Length(1)]).areas(area);
    let line = match (&state.overlay, &state.message) {
        (Overlay::Command(text), _) => Line::from(format!(":{}▏", shown_command(text))),
        (_, Some((m, true))) => Line::styled(m.clone(), Style::new().fg(Color::Red)),
        (_, Some((m, false))) => Line::styled(m.clone(), Style::new().fg(Color::Green)),
        _ => match state.keymap_problems.first() {
            Some(p) => Line::styled(p.clone(), Style::new().fg(Color::Yellow)),
            None => Line::default(),
        },
    };
    frame.render_widget(Paragraph::new(line), message);
    let spans: Vec<Span> = keymap
        .hints(state.context(), state.read_only)
        .into_iter()
        .flat_map(|(k, d)| {
            [
                Span::styled(format!(" {k}"), Style::new().fg(Color::Cyan)),
                Span::raw(format!(" {d} ")),
            ]
        })
        .collect();
    frame.render_widget(Paragraph::new(Line::from(spans)), hints);
}

/// A box of at most `width`×`height` in the middle of `area` (the body: the box never covers the status
/// line or the footer).
fn centered(area: Rect, width: u16, height: u16) -> Rect {
    let w = width.min(area.width);
    let h = height.min(area.height);
    Rect::new(
        area.x + (area.width - w) / 2,
        area.y + (area.height - h) / 2,
        w,
        h,
    )
}

/// The `:` commands, over the help's columns.
const COMMANDS: [(&str, &str); 7] = [
    (":catalog", " [k=v]"),
    (":endpoints", ""),
    (":apps", " [OWNER]"),
    (":audit", " ORG"),
    (":webhooks", ""),
    (":notifications", ""),
    (":server", " [URL [TOKEN]]"),
];

/// Every binding in two columns (`HELP_COLUMNS`), under the `:` commands; scrolled when it does not fit.
fn help(frame: &mut Frame, area: Rect, state: &State, keymap: &Keymap, scroll: usize) {
    let box_ = centered(area, 100, area.height);
    let column = |ctxs: &[Context]| -> Vec<Line> {
        let mut lines = Vec::new();
        for ctx in ctxs {
            lines.push(Line::styled(
                ctx.as_str().to_string(),
                Style::new().add_modifier(Modifier::BOLD),
            ));
            for b in keymap.own(*ctx, state.read_only) {
                lines.push(Line::from(format!(
                    "  {:<18} {}",
                    b.keys.join(" "),
                    b.description
                )));
            }
        }
        lines
    };
    // The same numbers the keys scroll by (`help_height`): the box's inside, less the commands.
    let height = (box_.height as usize).saturating_sub(4).max(1);
    let last = keymap.help_length(state.read_only).saturating_sub(height);
    let scroll = scroll.min(last) as u16;
    let title = if last > 0 {
        " help (j/k scroll, esc to close) "
    } else {
        " help (esc to close) "
    };
    let commands: Vec<Span> = COMMANDS
        .iter()
        .enumerate()
        .flat_map(|(i, (command, args))| {
            [
                Span::raw(if i == 0 { "" } else { "  " }),
                Span::styled(*command, Style::new().fg(Color::Cyan)),
                Span::raw(*args),
            ]
        })
        .collect();
    frame.render_widget(Clear, box_);
    let block = Block::default()
        .borders(Borders::ALL)
        .title(title)
        .title_bottom(format!(" console log: {} ", state.log_file));
    let inner = block.inner(box_);
    frame.render_widget(block, box_);
    let [top, columns] = Layout::vertical([Constraint::Length(2), Constraint::Min(1)]).areas(inner);
    frame.render_widget(
        Paragraph::new(Line::from(commands)).wrap(Wrap { trim: true }),
        top,
    );
    let [l, r] =
        Layout::horizontal([Constraint::Percentage(45), Constraint::Percentage(55)]).areas(columns);
    frame.render_widget(
        Paragraph::new(column(HELP_COLUMNS[0])).scroll((scroll, 0)),
        l,
    );
    frame.render_widget(
        Paragraph::new(column(HELP_COLUMNS[1])).scroll((scroll, 0)),
        r,
    );
}

/// Describe and logs (`mode`: following or paused): the lines in the window, search matches highlighted, the
/// current match's line marked.
fn pane(frame: &mut Frame, area: Rect, pager: &Pager, mode: Option<&str>) {
    // Below the list's title, so what it covers stays named.
    let below_title = Rect {
        y: area.y + 1,
        height: area.height.saturating_sub(1),
        ..area
    };
    let box_ = centered(
        below_title,
        area.width.saturating_sub(4),
        below_title.height,
    );
    // The same count the keys scroll by (`pager_height`): the box's inside.
    let height = box_.height.saturating_sub(2).max(1) as usize;
    let first = pager.first_line(height);
    let hit = Style::new().fg(Color::Black).bg(Color::Yellow);
    let lines: Vec<Line> = pager
        .lines
        .iter()
        .enumerate()
        .skip(first)
        .take(height)
        .map(|(i, line)| {
            let mut spans = Vec::new();
            let mut at = 0;
            for (start, end) in pager.matches_in(line) {
                spans.push(Span::raw(&line[at..start]));
                spans.push(Span::styled(&line[start..end], hit));
                at = end;
            }
            spans.push(Span::raw(&line[at..]));
            let l = Line::from(spans);
            if pager.current == Some(i) {
                l.style(Style::new().add_modifier(Modifier::BOLD | Modifier::UNDERLINED))
            } else {
                l
            }
        })
        .collect();
    let search = if pager.typing {
        format!(" /{}▏", pager.query)
    } else if !pager.query.is_empty() {
        format!(" /{} (n next, N previous)", pager.query)
    } else {
        String::new()
    };
    let position = if pager.lines.len() > height {
        format!(
            " {}-{}/{}",
            first + 1,
            (first + height).min(pager.lines.len()),
            pager.lines.len()
        )
    } else {
        String::new()
    };
    frame.render_widget(Clear, box_);
    frame.render_widget(
        Paragraph::new(lines).block(Block::default().borders(Borders::ALL).title(format!(
            " {}{}{position}{search} ",
            pager.title,
            mode.map(|m| format!(" ({m})")).unwrap_or_default()
        ))),
        box_,
    );
}

/// The deploy form: each field with every issue the server had with it beside it, all at once.
fn deploy(frame: &mut Frame, area: Rect, form: &DeployForm) {
    let fields = Field::ALL.iter().map(|f| {
        let value = match f {
            Field::Recipe | Field::Type | Field::PrivateRegion => {
                format!("{} (←→ chooses)", form.value(*f))
            }
            _ => form.value(*f),
        };
        (f.label().to_string(), value, form.issues_of(*f))
    });
    let lines = form_lines(FormView {
        fields: fields.collect(),
        focus: form.focus,
        label_width: 26,
        busy: form.busy.then_some("deploying…"),
        errors: &form.errors,
        hints: &[],
    });
    form_popup(
        frame,
        area,
        96,
        &format!(" deploy {} ", form.repo_id),
        lines,
    );
}

/// The spec editor: the text with line numbers, and under it the issues (at most five) or a note.
fn spec(frame: &mut Frame, area: Rect, editor: &SpecEditor) {
    let box_ = centered(area, area.width.saturating_sub(6), area.height);
    let block = Block::default().borders(Borders::ALL).title(format!(
        " spec {}/{} ({}) ",
        editor.edit.namespace,
        editor.edit.name,
        editor.edit.format.name(),
    ));
    let inner = block.inner(box_);
    let shown_issues =
        editor.issues.len().min(5) as u16 + u16::from(editor.busy || editor.note.is_some());
    let [text, issues] =
        Layout::vertical([Constraint::Min(3), Constraint::Length(shown_issues.max(1))])
            .areas(inner);
    let mut textarea = editor.text.clone();
    textarea.set_line_number_style(Style::new().fg(Color::DarkGray));
    frame.render_widget(Clear, box_);
    frame.render_widget(block, box_);
    frame.render_widget(&textarea, text);
    let mut lines: Vec<Line> = editor
        .issues
        .iter()
        .take(5)
        .map(|(line, m)| {
            Line::styled(
                format!("line {}: {m}", line + 1),
                Style::new().fg(Color::Red),
            )
        })
        .collect();
    if editor.busy {
        lines.insert(0, Line::styled("saving…", Style::new().fg(Color::Yellow)));
    } else if let Some(note) = &editor.note {
        lines.insert(
            0,
            Line::styled(note.clone(), Style::new().fg(Color::Yellow)),
        );
    }
    if lines.is_empty() {
        lines.push(Line::styled("valid", Style::new().fg(Color::Green)));
    }
    frame.render_widget(Paragraph::new(lines), issues);
}

/// The schedule editor: the day, then the entries, `▶` on the one edited and `● in effect now` beside the
/// one the time now falls in.
fn schedule(
    frame: &mut Frame,
    area: Rect,
    editor: &ScheduleEditor,
    now: chrono::DateTime<chrono::Utc>,
) {
    let now_entry = editor.in_effect(minute_of_day(now));
    let mut lines = schedule_day(editor, now);
    for (i, e) in editor.entries.iter().enumerate() {
        lines.push(schedule_entry(editor, i, e, Some(i) == now_entry));
    }
    for (_, m) in editor.issues.iter().filter(|(n, _)| n.is_none()) {
        lines.push(Line::styled(m.clone(), Style::new().fg(Color::Red)));
    }
    if editor.busy {
        lines.push(Line::styled("saving…", Style::new().fg(Color::Yellow)));
    }
    let box_ = centered(area, 100, lines.len() as u16 + 2);
    frame.render_widget(Clear, box_);
    frame.render_widget(
        Paragraph::new(lines).block(
            Block::default()
                .borders(Borders::ALL)
                .title(format!(" schedule {}/{} ", editor.namespace, editor.name)),
        ),
        box_,
    );
}

fn minute_of_day(now: chrono::DateTime<chrono::Utc>) -> u16 {
    use chrono::Timelike;
    (now.hour() * 60 + now.minute()) as u16
}

/// The schedule editor's head: the endpoint's own values and what they mean now, the day's timeline with the
/// time now marked, and the entries' column heads (or, without entries, how to add one).
fn schedule_day(editor: &ScheduleEditor, now: chrono::DateTime<chrono::Utc>) -> Vec<Line<'static>> {
    let minute = minute_of_day(now);
    let axis: String = (0..8)
        .map(|i| format!("{:<6}", format!("{:02}", i * 3)))
        .collect();
    let marker = format!(
        "{}^ now ({})",
        " ".repeat((minute / 30) as usize),
        now.format("%H:%M UTC")
    );
    let own = format!("min {} max {}", editor.own_min, editor.own_max);
    let head = match editor.entries.is_empty() {
        true => format!("no entries: the endpoint's own values ({own}) apply all day"),
        false => format!(
            "the endpoint's own values: {own}; an entry's max may not exceed {}",
            editor.own_max
        ),
    };
    let mut lines = vec![
        Line::from(head),
        Line::from(format!(
            "a cell is 30 min; a digit is the entry in effect then{}",
            if editor.entries.is_empty() {
                ""
            } else {
                " · ▶ the entry you edit"
            }
        )),
        Line::default(),
        Line::from(axis),
        Line::styled(editor.timeline(), Style::new().fg(Color::Cyan)),
        Line::from(marker),
        Line::default(),
    ];
    lines.push(match editor.entries.is_empty() {
        true => Line::from("(the schedule is empty: `a` adds an entry)"),
        false => Line::styled(
            format!(
                "   #  {:<10} {:<6} {:<6} {}",
                COLUMNS[0], COLUMNS[1], COLUMNS[2], COLUMNS[3]
            ),
            Style::new().add_modifier(Modifier::BOLD),
        ),
    });
    lines
}

/// One entry of the schedule: `▶` when it is the one edited, its fields with the focused one shown, a mark
/// when it is in effect now, and its issues.
fn schedule_entry(editor: &ScheduleEditor, i: usize, e: &Entry, in_effect: bool) -> Line<'static> {
    let edited = i == editor.row;
    let cell = |col: usize, text: &str, width: usize| {
        let focused = edited && col == editor.col;
        let shown = format!(
            "{:<width$}",
            format!("{text}{}", if focused { "▏" } else { "" })
        );
        Span::styled(
            shown,
            if focused {
                Style::new().add_modifier(Modifier::REVERSED)
            } else {
                Style::new()
            },
        )
    };
    let mark = if edited { "▶" } else { " " };
    let mut spans = vec![
        Span::styled(
            format!(" {mark} {:<2} ", i + 1),
            Style::new().fg(Color::Cyan),
        ),
        cell(0, &e.at, 10),
        Span::raw(" "),
        cell(1, &e.min, 6),
        Span::raw(" "),
        cell(2, &e.max, 6),
        Span::raw(" "),
        cell(3, &e.timeout, 8),
    ];
    if in_effect {
        spans.push(Span::styled(
            "  ● in effect now",
            Style::new().fg(Color::Green),
        ));
    }
    for (_, m) in editor.issues.iter().filter(|(n, _)| *n == Some(i)) {
        spans.push(Span::styled(format!("  {m}"), Style::new().fg(Color::Red)));
    }
    Line::from(spans)
}

/// The question the confirm dialog asks before `asked` runs.
fn question(asked: &Effect, state: &State) -> String {
    match asked {
        Effect::Act {
            action,
            namespace,
            name,
        } => format!("{} {namespace}/{name}?", action.verb()),
        Effect::AppAct { action, id, name } => {
            let public = state.apps.iter().any(|a| a.id == *id && a.public);
            match action {
                AppAction::RotateSecret if public => format!(
                    "give {name} a secret? It becomes confidential; the secret is shown once."
                ),
                AppAction::RotateSecret => format!(
                    "rotate the secret of {name}? The old secret stops working at once; the new one is shown once."
                ),
                AppAction::DeleteSecret => format!(
                    "delete the secret of {name}? The app becomes public: it signs in with PKCE only."
                ),
                AppAction::Delete => {
                    format!("delete app {name}? Every token it holds stops working.")
                }
            }
        }
        Effect::WebhookAct { action, url, .. } => match action {
            crate::state::WebhookAction::Disable => {
                format!("disable webhook {url}? Its pending deliveries are cancelled.")
            }
            crate::state::WebhookAction::Enable => format!("enable webhook {url}?"),
            crate::state::WebhookAction::Delete => {
                format!("delete webhook {url}? Its deliveries go with it.")
            }
        },
        _ => "go ahead?".to_string(),
    }
}

/// `text` in lines of at most `width` characters, broken between words.
fn wrapped(text: &str, width: usize) -> Vec<String> {
    let mut lines: Vec<String> = Vec::new();
    for word in text.split_whitespace() {
        match lines.last_mut() {
            Some(line) if line.chars().count() + 1 + word.chars().count() <= width => {
                line.push(' ');
                line.push_str(word);
            }
            _ => lines.push(word.to_string()),
        }
    }
    lines
}

fn confirm(frame: &mut Frame, area: Rect, question: &str, yes: bool) {
    // A one-line question in a small box; a longer one wrapped in a wider one.
    let width: u16 = if question.chars().count() <= 46 {
        50
    } else {
        64
    };
    let question = wrapped(question, width as usize - 4);
    let box_ = centered(area, width, question.len() as u16 + 4);
    let button = |label: &'static str, on: bool| {
        let style = if on {
            Style::new().add_modifier(Modifier::REVERSED)
        } else {
            Style::new()
        };
        Span::styled(format!(" {label} "), style)
    };
    let mut lines: Vec<Line> = question.into_iter().map(Line::from).collect();
    lines.push(Line::default());
    lines.push(Line::from(vec![
        button("Cancel", !yes),
        Span::raw("   "),
        button("Yes", yes),
    ]));
    frame.render_widget(Clear, box_);
    frame.render_widget(
        Paragraph::new(lines).block(Block::default().borders(Borders::ALL).title(" confirm ")),
        box_,
    );
}

/// A secret just made, shown this once.
fn secret(frame: &mut Frame, area: Rect, issued: &IssuedSecret) {
    let box_ = centered(area, 72, 7);
    let lines = vec![
        Line::from(vec![
            Span::raw("client id      "),
            Span::raw(issued.client_id.clone()),
        ]),
        Line::from(vec![
            Span::raw("client secret  "),
            Span::styled(
                issued.secret.reveal().to_string(),
                Style::new().add_modifier(Modifier::BOLD).fg(Color::Yellow),
            ),
        ]),
        Line::default(),
        Line::styled(
            "This secret will not be shown again: store it now. If it is lost, R rotates the app's secret.",
            Style::new().add_modifier(Modifier::BOLD),
        ),
    ];
    frame.render_widget(Clear, box_);
    frame.render_widget(
        Paragraph::new(lines).wrap(Wrap { trim: false }).block(
            Block::default()
                .borders(Borders::ALL)
                .title(format!(" secret of {} (shown once) ", issued.app)),
        ),
        box_,
    );
}

/// The new-app form: each field with every issue the server had with it under it.
fn new_app(frame: &mut Frame, area: Rect, form: &AppForm) {
    let fields = AppField::ALL.iter().map(|f| {
        let value = match f {
            AppField::Public => format!("{} (←→ or y/n)", form.value(*f)),
            _ => form.value(*f),
        };
        (f.label().to_string(), value, form.issues_of(*f))
    });
    let whose = form
        .owner
        .as_deref()
        .map(|o| format!(" for {o}"))
        .unwrap_or_default();
    let lines = form_lines(FormView {
        fields: fields.collect(),
        focus: form.focus,
        label_width: 32,
        busy: form.busy.then_some("creating…"),
        errors: &form.errors,
        hints: &[],
    });
    form_popup(frame, area, 96, &format!(" new app{whose} "), lines);
}

/// The webhook form: each field with every issue the server had with it beside it, all at once.
fn webhook_form(frame: &mut Frame, area: Rect, form: &WebhookForm) {
    let editing = form.id.is_some();
    let fields = HookField::ALL.iter().map(|f| {
        (
            f.label(editing).to_string(),
            form.shown(*f),
            form.issues_of(*f),
        )
    });
    let lines = form_lines(FormView {
        fields: fields.collect(),
        focus: form.focus,
        label_width: 28,
        busy: form.busy.then_some("saving…"),
        errors: &form.errors,
        hints: &["watched: user:NAME org:NAME model:AUTHOR/MODEL · domains: repo endpoint"],
    });
    let title = if editing {
        " edit webhook "
    } else {
        " new webhook "
    };
    form_popup(frame, area, 100, title, lines);
}

/// What a form popup shows: each field (label, value, its issues), the focused one, and the lines
/// under them.
struct FormView<'a, I> {
    fields: Vec<(String, String, I)>,
    focus: usize,
    label_width: usize,
    /// Shown while the form is with the server.
    busy: Option<&'a str>,
    errors: &'a [String],
    hints: &'a [&'a str],
}

/// A form's lines: each field with every issue beside it, all at once, then errors and hints (the keys are
/// in the footer).
fn form_lines<'a, I, S>(view: FormView<'_, I>) -> Vec<Line<'a>>
where
    I: IntoIterator<Item = S>,
    S: std::fmt::Display,
{
    let mut lines = Vec::new();
    for (i, (label, value, issues)) in view.fields.into_iter().enumerate() {
        let focused = i == view.focus;
        let marker = if focused { "▸" } else { " " };
        let style = match focused {
            true => Style::new().add_modifier(Modifier::BOLD),
            false => Style::new(),
        };
        lines.push(Line::from(vec![
            Span::raw(format!(
                "{marker} {label:<width$}",
                width = view.label_width
            )),
            Span::styled(format!("{value}{}", if focused { "▏" } else { "" }), style),
        ]));
        for issue in issues {
            lines.push(Line::styled(
                format!("    ← {issue}"),
                Style::new().fg(Color::Red),
            ));
        }
    }
    lines.push(Line::default());
    if let Some(busy) = view.busy {
        lines.push(Line::styled(
            busy.to_string(),
            Style::new().fg(Color::Yellow),
        ));
    }
    for e in view.errors {
        lines.push(Line::styled(e.clone(), Style::new().fg(Color::Red)));
    }
    for hint in view.hints {
        lines.push(Line::styled(
            hint.to_string(),
            Style::new().fg(Color::DarkGray),
        ));
    }
    lines
}

/// A bordered popup of `lines`, `width` wide, over the middle of `area`.
fn form_popup(frame: &mut Frame, area: Rect, width: u16, title: &str, lines: Vec<Line>) {
    let box_ = centered(area, width, lines.len() as u16 + 2);
    frame.render_widget(Clear, box_);
    frame.render_widget(
        Paragraph::new(lines).wrap(Wrap { trim: false }).block(
            Block::default()
                .borders(Borders::ALL)
                .title(title.to_string()),
        ),
        box_,
    );
}
