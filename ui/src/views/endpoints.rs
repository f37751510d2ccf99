//! The endpoints table. Its columns share the width by importance: the name and the model get room first,
//! then state and readiness; then the namespace, the URL (cut from the left so that the endpoint's name
//! stays; left out where even that does not fit), the type and the last update, which shrink or go first.
//! Under it, a line says why the selected endpoint is in its state.

use ratatui::layout::Rect;
use ratatui::style::{Color, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Cell, Paragraph, Row};
use ratatui::Frame;

use super::charts::sparkline_text;
use super::lists::state_colour;
use super::{cells, list, note, shown};
use crate::columns::{chars, fit, fit_end, share, Column};
use crate::state::{Connection, EndpointRow, State, SPARKLINE_MIN_WIDTH};

/// The columns' heads, in the order shown.
const HEADS: [&str; 9] = [
    "NAME",
    "NAMESPACE",
    "STATE",
    "READY",
    "MODEL",
    "TYPE",
    "URL",
    "UPDATED",
    "REQUESTS 30M",
];

const NAME: usize = 0;
const NAMESPACE: usize = 1;
const URL: usize = 6;
const UPDATED: usize = 7;
/// Requests per second over the last half hour, as a sparkline: on a terminal wide enough
/// ([`SPARKLINE_MIN_WIDTH`]), once they are loaded.
const REQUESTS: usize = 8;
const REQUESTS_WIDTH: u16 = 12;

/// `2026-11-22 11:58:00` in `width`: whole, without the seconds, or as `11-22 11:58`.
fn updated(text: &str, width: u16) -> String {
    let (from, to) = match width {
        19.. => (0, 19),
        16..=18 => (0, 16),
        _ => (5, 16),
    };
    text.chars().take(to).skip(from).collect()
}

/// The texts of a row's cells, in the order shown (the sparkline is drawn to its width: see [`row`]).
fn texts(e: &EndpointRow) -> [String; 9] {
    [
        e.name.clone(),
        e.namespace.clone(),
        e.state.clone(),
        format!("{}/{}", e.ready, e.target),
        e.model.clone(),
        e.kind.clone(),
        e.url.clone(),
        e.updated.clone(),
        String::new(),
    ]
}

/// The widths of a row's cells (what `texts` makes, without making it: every row, every frame). The fields
/// are ASCII by the API's rules, so a byte is a cell; anything else would only make its column wider.
fn cell_widths(e: &EndpointRow) -> [u16; 9] {
    let digits = |n: u64| n.checked_ilog10().map_or(1, |d| d + 1) as usize;
    [
        e.name.len(),
        e.namespace.len(),
        e.state.len(),
        digits(e.ready) + 1 + digits(e.target),
        e.model.len(),
        e.kind.len(),
        e.url.len(),
        e.updated.len(),
        usize::from(REQUESTS_WIDTH),
    ]
    .map(|n| u16::try_from(n).unwrap_or(u16::MAX))
}

/// A URL's path, shortened as the URL column shows it at its ideal: `…/endpoints/admin/e1`.
fn path_width(url: &str) -> u16 {
    let after_scheme = url.find("://").map_or(0, |i| i + 3);
    let width = match url[after_scheme..].find('/') {
        Some(at) => 1 + url.len() - after_scheme - at,
        None => url.len(),
    };
    u16::try_from(width).unwrap_or(u16::MAX)
}

/// Each column's needs, from the widest of its cells in `rows`.
fn columns(rows: &[&EndpointRow]) -> [Column; 9] {
    let mut widest = HEADS.map(chars);
    let mut values = [0u16; 9];
    let (mut path, mut short_url) = (0u16, 0u16);
    for e in rows {
        let widths = cell_widths(e);
        for (k, w) in widths.into_iter().enumerate() {
            values[k] = values[k].max(w);
            widest[k] = widest[k].max(w);
        }
        path = path.max(path_width(&e.url));
        // `…/name`: a URL column that cannot show the name is left out.
        short_url = short_url.max(2 + widths[NAME]);
    }
    // A minimum never above the ideal: a narrow column's cells are narrower than its usual minimum.
    let column = |importance, min: u16, ideal: u16, required| {
        Column::new(importance, min.min(ideal), ideal, required)
    };
    [
        column(0, 10, widest[NAME], true),
        column(4, values[NAMESPACE].clamp(2, 6), widest[NAMESPACE], false),
        column(2, widest[2], widest[2], true),
        column(3, widest[3], widest[3], true),
        column(1, 12, widest[4], true),
        column(6, 6, widest[5], false),
        column(5, short_url.max(3), path.max(3), false).up_to(widest[URL]),
        column(7, 11, 16, false).up_to(19),
        column(5, REQUESTS_WIDTH, widest[REQUESTS], false),
    ]
}

/// A row's cells for the columns shown (`widths`), each cut to its width; `requests` its sparkline's points.
fn row<'a>(e: &EndpointRow, widths: &[Option<u16>], requests: Option<&Vec<f64>>) -> Row<'a> {
    cells(texts(e), widths, |k, text, w| match k {
        REQUESTS => {
            let line = requests.map_or(String::new(), |p| sparkline_text(p, usize::from(w)));
            Cell::from(line).style(Style::new().fg(Color::Cyan))
        }
        2 => Cell::from(fit(&text, w)).style(Style::new().fg(state_colour(&e.state))),
        URL => Cell::from(fit_end(&text, w)),
        UPDATED => Cell::from(updated(&text, w)),
        _ => Cell::from(fit(&text, w)),
    })
}

pub(super) fn endpoints(frame: &mut Frame, area: Rect, state: &State, visible: &[usize]) {
    if let (Connection::Unauthorized(why), None) = (&state.connection, &state.user) {
        let text = format!(
            "sign-in failed: {why}. Endpoints need a token this server accepts (`:server URL TOKEN` signs in \
             with another); the catalog is public and still shown."
        );
        return note(frame, area, "endpoints", &text);
    }
    if let Some(why) = state.list_note() {
        return note(frame, area, "endpoints", &why);
    }
    let rows: Vec<&EndpointRow> = visible.iter().map(|i| &state.endpoints[*i]).collect();
    let columns = columns(&rows);
    let sparklines = &state.charts.sparklines;
    let with_requests = area.width >= SPARKLINE_MIN_WIDTH && !sparklines.is_empty();
    let shared = if with_requests {
        &columns[..]
    } else {
        &columns[..REQUESTS]
    };
    let mut widths = share(shared, area.width.saturating_sub(2));
    widths.resize(HEADS.len(), None);
    let shown = shown(HEADS, &widths);
    list(
        frame,
        area,
        state,
        visible,
        ("endpoints", state.endpoints.len()),
        &shown,
        |i| {
            let e = &state.endpoints[i];
            let key = (e.namespace.clone(), e.name.clone());
            row(e, &widths, sparklines.get(&key))
        },
    );
}

/// The line under the table: the selected endpoint, its state and why it is in it (`status.message`).
pub(super) fn why(frame: &mut Frame, area: Rect, state: &State, visible: &[usize]) {
    let selected = visible
        .get(state.selected.min(visible.len().saturating_sub(1)))
        .map(|i| &state.endpoints[*i]);
    let Some(e) = selected else {
        return;
    };
    let who = format!(" {}/{} ", e.namespace, e.name);
    let mut spans = vec![Span::styled(
        e.state.clone(),
        Style::new().fg(state_colour(&e.state)),
    )];
    if !e.message.is_empty() {
        // Cut with … where the line ends: describe (`enter`) has it whole.
        let room = area.width.saturating_sub(chars(&who) + chars(&e.state));
        spans.push(Span::raw(fit(&format!(": {}", e.message), room)));
    }
    spans.insert(0, Span::raw(who));
    frame.render_widget(Paragraph::new(Line::from(spans)), area);
}
