//! Drawing, from the state only: the status line, the view's table, the footer hints and the overlays.
//!
//! No popup covers the status line or the footer: popups are drawn inside the body between them.
//!
//! Every text cut to fit ends with `…`; popups wrap theirs.
//!
//! Here: the frame, the status line, the footer, what a list and a popup look like. The parts: `lists` (the
//! views' tables), `endpoints` (the endpoints' table), `deliveries` (a webhook's attempts), `panes` (help,
//! describe, logs), `editors` (spec, schedule), `forms`, `dialogs`, `text` (fitting and wrapping).

use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Borders, Cell, Paragraph, Row, Table, TableState, Wrap};
use ratatui::Frame;

mod deliveries;
mod dialogs;
mod editors;
mod endpoints;
mod forms;
mod lists;
mod panes;
mod text;

use deliveries::{deliveries, standing};
use dialogs::{confirm, question, secret};
use editors::{schedule, spec};
use endpoints::{endpoints, why};
use forms::{deploy, new_app, webhook_form};
use lists::{apps, audit, catalog, notifications, recipes, webhooks};
use panes::{help, pane};
use text::{fit_spans, footer_spans};

use crate::columns::fit;
use crate::keymap::{Command, Keymap};
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
        (View::Deliveries, Some(detail)) => standing(frame, detail, state),
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
        Overlay::Secret(issued) => secret(frame, body, issued, keymap),
        Overlay::NewApp(form) => new_app(frame, body, form, keymap),
        Overlay::Webhook(form) => webhook_form(frame, body, form),
    }
}

/// The status line: the server, the connection, the user, the clock, and the newest notification. When it
/// does not fit, the notification goes first, then the connection's reason is cut (with `…`; the view says
/// it whole), so the user and the clock stay.
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
    let brand = Style::new()
        .add_modifier(Modifier::BOLD)
        .fg(Color::Black)
        .bg(Color::Cyan);
    let width = usize::from(area.width);
    // The date only where there is room for it.
    let clock = match width >= 100 {
        true => "%Y-%m-%d %H:%M",
        false => "%H:%M",
    };
    let mut tail = vec![Span::raw(format!(
        "  user {}",
        state.user.as_deref().unwrap_or("-")
    ))];
    if state.read_only {
        tail.push(Span::styled("  read-only", Style::new().fg(Color::Yellow)));
    }
    tail.push(Span::raw(format!("  {} UTC", state.now.format(clock))));
    let count = |spans: &[Span]| -> usize { spans.iter().map(|s| s.content.chars().count()).sum() };
    // A long server URL gives way so that the connection keeps some room.
    let conn_room = conn.chars().count().min(28);
    let server_room = width.saturating_sub(12 + 2 + count(&tail) + conn_room);
    let server = fit(&state.server, u16::try_from(server_room).unwrap_or(0));
    let head = vec![
        Span::styled(" switchyard ", brand),
        Span::raw(format!(" {server} ")),
    ];
    let used = count(&head) + count(&tail);
    let room = u16::try_from(width.saturating_sub(used)).unwrap_or(0);
    let mut spans = head;
    spans.push(Span::styled(fit(&conn, room), Style::new().fg(colour)));
    spans.extend(tail);
    // The newest notification, until the next one.
    if let Some((notice, bad)) = &state.notice {
        let colour = if *bad { Color::Red } else { Color::Cyan };
        spans.push(Span::styled(
            format!("  ● {notice}"),
            Style::new().fg(colour),
        ));
    }
    let spans = fit_spans(spans, width);
    frame.render_widget(Paragraph::new(Line::from(spans)), area);
}

fn footer(frame: &mut Frame, area: Rect, state: &State, keymap: &Keymap) {
    let [message, hints] =
        Layout::vertical([Constraint::Length(1), Constraint::Length(1)]).areas(area);
    let width = usize::from(area.width);
    let line = match (&state.overlay, &state.message) {
        // The end of a long command, where it is typed.
        (Overlay::Command(text), _) => {
            let typed = format!(":{}▏", shown_command(text));
            let n = typed.chars().count();
            match n > width {
                true => Line::from(format!(
                    "…{}",
                    typed.chars().skip(n + 1 - width).collect::<String>()
                )),
                false => Line::from(typed),
            }
        }
        (_, Some((m, true))) => Line::styled(fit(m, area.width), Style::new().fg(Color::Red)),
        (_, Some((m, false))) => Line::styled(fit(m, area.width), Style::new().fg(Color::Green)),
        _ => match state.keymap_problems.first() {
            Some(p) => Line::styled(fit(p, area.width), Style::new().fg(Color::Yellow)),
            None => Line::default(),
        },
    };
    frame.render_widget(Paragraph::new(line), message);
    let keys = match state.typing_keys() {
        Some(keys) => keys
            .iter()
            .map(|(k, d)| (k.to_string(), d.to_string()))
            .collect(),
        None => keymap.offered_hints(state.context(), state.read_only, state.offered()),
    };
    let help = keymap.keys_for(state.context(), Command::Help);
    let spans = footer_spans(keys, width, help);
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
    columns: &[(String, Constraint)],
    row: impl Fn(usize) -> Row<'a>,
) {
    let header: Vec<&str> = columns.iter().map(|c| c.0.as_str()).collect();
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
    let title = fit(&title, area.width.saturating_sub(2));
    let table = Table::new(rows, widths)
        .header(Row::new(header).style(Style::new().add_modifier(Modifier::BOLD)))
        .block(Block::default().borders(Borders::ALL).title(title))
        .row_highlight_style(Style::new().add_modifier(Modifier::REVERSED));
    let mut selection = TableState::default().with_selected(Some(selected - offset));
    frame.render_stateful_widget(table, area, &mut selection);
}

/// The heads of the columns shown (`widths`: `None` for one left out), each at its width, cut to it.
fn shown<'h>(
    heads: impl IntoIterator<Item = &'h str>,
    widths: &[Option<u16>],
) -> Vec<(String, Constraint)> {
    let shown = heads.into_iter().zip(widths);
    shown
        .filter_map(|(head, w)| w.map(|w| (fit(head, w), Constraint::Length(w))))
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
                .title(fit(&format!(" {title} "), area.width.saturating_sub(2))),
        ),
        area,
    );
}
