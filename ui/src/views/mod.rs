//! Drawing, from the state only: the status line, the view's table, the footer hints and the overlays.
//!
//! No popup covers the status line or the footer: popups are drawn inside the body between them.
//!
//! Here: the frame, the status line, the footer, what a list and a popup look like. The parts: `lists` (the
//! views' tables), `endpoints` (the endpoints' table), `panes` (help, describe, logs), `editors` (spec, schedule), `forms`, `dialogs`.

use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Borders, Cell, Paragraph, Row, Table, TableState, Wrap};
use ratatui::Frame;

mod dialogs;
mod editors;
mod endpoints;
mod forms;
mod lists;
mod panes;

use dialogs::{confirm, question, secret};
use editors::{schedule, spec};
use endpoints::{endpoints, why};
use forms::{deploy, new_app, webhook_form};
use lists::{apps, audit, catalog, deliveries, notifications, recipes, webhooks};
use panes::{help, pane};

use crate::keymap::Keymap;
/// The heights the keys page by, which are also the rows drawn.
pub use crate::state::layout::{list_height, pager_height};
use crate::state::layout::{list_offset, screen, table_rows};
use crate::state::{shown_command, Connection, Overlay, State, View};

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
    match (state.view, screen.detail) {
        (View::Catalog, Some(detail)) => recipes(frame, detail, state, &visible),
        (View::Endpoints, Some(detail)) => why(frame, detail, state, &visible),
        _ => {}
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
        Overlay::Deploy(form) => deploy(frame, body, form, keymap),
        Overlay::Schedule(editor) => schedule(frame, body, editor, state.now, keymap),
        Overlay::Spec(editor) => spec(frame, body, editor),
        Overlay::Logs { pager, follow, .. } => {
            let mode = if *follow { "following" } else { "paused" };
            pane(frame, body, pager, Some(mode))
        }
        Overlay::Confirm { asked, yes } => confirm(frame, body, &question(asked, state), *yes),
        Overlay::Secret(issued) => secret(frame, body, issued),
        Overlay::NewApp(form) => new_app(frame, body, form, keymap),
        Overlay::Webhook(form) => webhook_form(frame, body, form),
    }
}

fn status_line(frame: &mut Frame, area: Rect, state: &State) {
    let (conn, colour) = match &state.connection {
        Connection::Connecting => ("connecting".to_string(), Color::Yellow),
        Connection::Connected => ("connected".to_string(), Color::Green),
        Connection::Unreachable(why) => (format!("unreachable ({why}); retrying"), Color::Red),
        Connection::Unauthorized(why) => (
            format!("sign-in failed ({why}); showing what is public"),
            Color::Red,
        ),
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
    let keys = match state.typing_keys() {
        Some(keys) => keys
            .iter()
            .map(|(k, d)| (k.to_string(), d.to_string()))
            .collect(),
        None => keymap.hints(state.context(), state.read_only),
    };
    let spans: Vec<Span> = keys
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

/// The heads of the columns shown (`widths`: `None` for one left out), each at its width.
fn shown<'h>(
    heads: impl IntoIterator<Item = &'h str>,
    widths: &[Option<u16>],
) -> Vec<(&'h str, Constraint)> {
    let shown = heads.into_iter().zip(widths);
    shown
        .filter_map(|(head, w)| w.map(|w| (head, Constraint::Length(w))))
        .collect()
}

/// A table row: for each column shown (`widths`), the cell `cell(column, text, width)` makes of its text.
fn cells<'a, T>(
    texts: impl IntoIterator<Item = T>,
    widths: &[Option<u16>],
    cell: impl Fn(usize, T, u16) -> Cell<'a>,
) -> Row<'a> {
    let texts = texts.into_iter().zip(widths).enumerate();
    let cells = texts.filter_map(|(k, (text, w))| w.map(|w| cell(k, text, w)));
    Row::new(cells.collect::<Vec<_>>())
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
