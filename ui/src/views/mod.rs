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

mod charts;
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
        Overlay::Describe(pager) => {
            let area = pane(frame, body, pager, None);
            if area.height > 0 {
                charts::charts(frame, area, state, &pager.title);
            }
        }
        Overlay::Deploy(form) => deploy(frame, body, form, keymap),
        Overlay::Schedule(editor) => schedule(frame, body, editor, state.now, keymap),
        Overlay::Spec(editor) => spec(frame, body, editor),
        Overlay::Logs { pager, follow, .. } => {
            let mode = if *follow { "following" } else { "paused" };
            pane(frame, body, pager, Some(mode));
        }
        Overlay::Confirm { asked, yes } => confirm(frame, body, &question(asked, state), *yes),
        Overlay::Secret(issued) => secret(frame, body, issued, keymap),
        Overlay::NewApp(form) => new_app(frame, body, form, keymap),
        Overlay::Webhook(form) => webhook_form(frame, body, form),
    }
}

/// The status line: the server, the connection, the servers on the store (when there are several), the user,
/// the clock, and the newest notification.
fn status_line(frame: &mut Frame, area: Rect, state: &State) {
    let spans = status_spans(state, usize::from(area.width));
    frame.render_widget(Paragraph::new(Line::from(spans)), area);
}

/// Most of the status line a long server URL gives way to for the servers on the store.
const SERVERS_ROOM: usize = 24;

/// Less room than this and the servers on the store are left out of the status line.
const SERVERS_MIN: usize = 12;

/// The status line in `width` columns. When it does not fit, the notification goes first, then the servers
/// on the store are cut (with `…`; those not answering come first), then the connection's reason is cut
/// (the view says it whole), so the user and the clock stay. A long server URL gives way so that the
/// connection and the servers keep some room.
fn status_spans(state: &State, width: usize) -> Vec<Span<'static>> {
    let (conn, colour) = connection_text(&state.connection);
    let brand = Style::new()
        .add_modifier(Modifier::BOLD)
        .fg(Color::Black)
        .bg(Color::Cyan);
    let tail = status_tail(state, width);
    let servers = servers_spans(state);
    let count = |spans: &[Span]| -> usize { spans.iter().map(|s| s.content.chars().count()).sum() };
    let kept = conn.chars().count().min(28) + count(&servers).min(SERVERS_ROOM);
    let server_room = width.saturating_sub(12 + 2 + count(&tail) + kept);
    let server = fit(&state.server, u16::try_from(server_room).unwrap_or(0));
    let head = vec![
        Span::styled(" switchyard ", brand),
        Span::raw(format!(" {server} ")),
    ];
    let used = count(&head) + count(&tail);
    let room = u16::try_from(width.saturating_sub(used)).unwrap_or(0);
    let conn = fit(&conn, room);
    // The servers take what the connection leaves.
    let left = width.saturating_sub(used + conn.chars().count());
    let mut spans = head;
    spans.push(Span::styled(conn, Style::new().fg(colour)));
    if left >= SERVERS_MIN {
        spans.extend(fit_spans(servers, left));
    }
    spans.extend(tail);
    // The newest notification, until the next one.
    if let Some((notice, bad)) = &state.notice {
        let colour = if *bad { Color::Red } else { Color::Cyan };
        spans.push(Span::styled(
            format!("  ● {notice}"),
            Style::new().fg(colour),
        ));
    }
    fit_spans(spans, width)
}

/// The connection as the status line says it, and its colour.
fn connection_text(connection: &Connection) -> (String, Color) {
    match connection {
        Connection::Connecting => ("connecting".to_string(), Color::Yellow),
        Connection::Connected => ("connected".to_string(), Color::Green),
        Connection::Unreachable(why) => (format!("unreachable ({why}); retrying"), Color::Red),
        Connection::Unauthorized(why) => (
            format!("sign-in failed ({why}); showing what is public"),
            Color::Red,
        ),
    }
}

/// The end of the status line: the user, read-only, the clock (with the date where there is room for it).
fn status_tail(state: &State, width: usize) -> Vec<Span<'static>> {
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
    tail
}

/// The servers on the store, when there are several: those not answering (`N not answering: ADDRESS, …`),
/// then the leader (`leader ADDRESS`, or `no leader` while none holds the lease). One server: nothing.
fn servers_spans(state: &State) -> Vec<Span<'static>> {
    let rows = &state.servers.rows;
    if rows.len() < 2 {
        return Vec::new();
    }
    let mut spans = Vec::new();
    let silent: Vec<&str> = rows
        .iter()
        .filter(|s| s.not_answering())
        .map(|s| s.address.as_str())
        .collect();
    if !silent.is_empty() {
        let text = format!("  {} not answering: {}", silent.len(), silent.join(", "));
        spans.push(Span::styled(text, Style::new().fg(Color::Red)));
    }
    let leader = match rows.iter().find(|s| s.leader) {
        Some(s) => format!("  leader {}", s.address),
        None => "  no leader".to_string(),
    };
    spans.push(Span::raw(leader));
    spans
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

#[cfg(test)]
mod tests {
    use chrono::TimeZone;
    use serde_json::json;

    use super::*;
    use crate::state::ServerRow;

    /// Signed in as admin on the in-process server at noon, with `servers` (address, state, leader) on the
    /// store.
    fn with_servers(servers: &[(&str, &str, bool)]) -> State {
        let now = chrono::Utc
            .with_ymd_and_hms(2026, 11, 22, 12, 0, 0)
            .unwrap();
        let mut state = State::new("in-process".into(), false, now, String::new());
        state.connection = Connection::Connected;
        state.user = Some("admin".into());
        state.servers.rows = servers
            .iter()
            .map(|(address, standing, leader)| {
                ServerRow::from_json(&json!({
                    "id": format!("node-{address}"), "address": address, "state": standing,
                    "leader": leader, "lastHeartbeat": "2026-11-22T11:59:58Z"
                }))
            })
            .collect();
        state
    }

    /// The status line's text in `width` columns.
    fn status(state: &State, width: usize) -> String {
        let spans = status_spans(state, width);
        spans.iter().map(|s| s.content.as_ref()).collect()
    }

    const LEADER: (&str, &str, bool) = ("127.0.0.1:8080", "running", true);
    const FOLLOWER: (&str, &str, bool) = ("127.0.0.1:8081", "running", false);
    const SILENT: (&str, &str, bool) = ("127.0.0.1:8082", "notAnswering", false);
    const SILENT_TOO: (&str, &str, bool) = ("127.0.0.1:8083", "notAnswering", false);

    #[test]
    fn one_server_changes_nothing_in_the_status_line() {
        let line = " switchyard  in-process connected  user admin  12:00 UTC";
        assert_eq!(status(&with_servers(&[]), 80), line);
        assert_eq!(status(&with_servers(&[LEADER]), 80), line);
        assert_eq!(status(&with_servers(&[SILENT]), 80), line);
    }

    #[test]
    fn several_servers_name_the_leader() {
        let three = with_servers(&[LEADER, FOLLOWER, ("127.0.0.1:8083", "stopped", false)]);
        assert_eq!(
            status(&three, 80),
            " switchyard  in-process connected  leader 127.0.0.1:8080  user admin  12:00 UTC"
        );
        let leaderless = with_servers(&[FOLLOWER, ("127.0.0.1:8083", "stopped", false)]);
        assert_eq!(
            status(&leaderless, 80),
            " switchyard  in-process connected  no leader  user admin  12:00 UTC"
        );
    }

    #[test]
    fn servers_not_answering_come_first_and_are_cut_to_fit() {
        let three = with_servers(&[LEADER, FOLLOWER, SILENT]);
        assert_eq!(
            status(&three, 140),
            " switchyard  in-process connected  1 not answering: 127.0.0.1:8082  leader 127.0.0.1:8080  \
             user admin  2026-11-22 12:00 UTC"
        );
        // At 80 columns the user and the clock stay; the words say it, whatever the colours.
        assert_eq!(
            status(&three, 80),
            " switchyard  in-process connected  1 not answering: 127.…  user admin  12:00 UTC"
        );
        let two_silent = with_servers(&[LEADER, SILENT, SILENT_TOO]);
        assert_eq!(
            status(&two_silent, 160),
            " switchyard  in-process connected  2 not answering: 127.0.0.1:8082, 127.0.0.1:8083  \
             leader 127.0.0.1:8080  user admin  2026-11-22 12:00 UTC"
        );
    }
}
