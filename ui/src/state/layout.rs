//! Screen geometry: where the table, the panes and the rows are on a terminal of a given size.
//!
//! The main screen's parts (status line, the view's table, the detail under it, footer), a pager's
//! lines and the help screen's. Paging, scrolling and mouse clicks need them as much as drawing does: the
//! state pages and picks rows with them, and the views draw with the same numbers.

use ratatui::layout::{Constraint, Layout, Rect};

use super::model::{State, View};
use crate::pager::Window;

/// Rows of the body (between the status line and the footer) on a terminal of `size`.
fn body_rows(size: (u16, u16)) -> usize {
    body(Rect::new(0, 0, size.0, size.1)).height as usize
}

/// Lines of text a pager (describe, logs) shows on a terminal of `size`: its box is the body below the
/// list's title row, with a border.
pub fn pager_height(size: (u16, u16)) -> usize {
    body_rows(size).saturating_sub(3).max(1)
}

/// Rows at the top of an endpoint's describe that its charts take on a terminal of `size`: under half the
/// pane, eight at least (a header, four series and their time axis), sixteen at most; never more than half
/// (on the smallest terminal the console draws, 80×24, eight of its eighteen).
pub fn charts_height(size: (u16, u16)) -> usize {
    let pane = pager_height(size);
    (pane * 9 / 20).clamp(8, 16).min(pane / 2)
}

/// The text's part of a pager's box on a terminal of `size`: two columns in from the body on each side, and
/// a border; below the charts when it has them.
pub fn pager_window(size: (u16, u16), charts: bool) -> Window {
    let below = if charts { charts_height(size) } else { 0 };
    Window {
        width: usize::from(size.0).saturating_sub(6).max(1),
        height: pager_height(size).saturating_sub(below).max(1),
    }
}

/// Lines of the help screen's columns on a terminal of `size`: its box is the body's height, with a border
/// and the two lines of `:` commands (they wrap on a narrow terminal).
pub fn help_height(size: (u16, u16)) -> usize {
    body_rows(size).saturating_sub(4).max(1)
}

/// Widest the help's box is.
pub const HELP_WIDTH: u16 = 100;

/// The help's columns on a terminal of `size`: two side by side when its box is whole, else one (at 80
/// columns two would run into each other).
pub fn help_columns(size: (u16, u16)) -> usize {
    match size.0 >= HELP_WIDTH {
        true => 2,
        false => 1,
    }
}

/// Rows of the catalog's detail pane (the selected model's recipes), under the list.
const DETAIL_HEIGHT: u16 = 7;

/// Where the parts of the main screen go: the status line, the view's table, the detail under it (the
/// catalog's recipes, why the selected endpoint is in its state, how a webhook fares) and the footer. Drawing, paging and mouse clicks all take the table's place from here. `body` is all between
/// the status line and the footer: popups stay inside it.
pub struct Screen {
    pub top: Rect,
    pub body: Rect,
    pub table: Rect,
    pub detail: Option<Rect>,
    pub bottom: Rect,
}

/// The status line, the body and the footer (a message line and the keys).
fn parts(area: Rect) -> [Rect; 3] {
    Layout::vertical([
        Constraint::Length(1),
        Constraint::Min(3),
        Constraint::Length(2),
    ])
    .areas(area)
}

/// What lies between the status line and the footer.
pub fn body(area: Rect) -> Rect {
    parts(area)[1]
}

pub fn screen(view: View, area: Rect) -> Screen {
    let [top, main, bottom] = parts(area);
    let (table, detail) = match view {
        View::Catalog => {
            let [table, detail] =
                Layout::vertical([Constraint::Min(3), Constraint::Length(DETAIL_HEIGHT)])
                    .areas(main);
            (table, Some(detail))
        }
        // A line under the table says why the selected endpoint is in its state.
        View::Endpoints => {
            let [table, why] =
                Layout::vertical([Constraint::Min(3), Constraint::Length(1)]).areas(main);
            (table, Some(why))
        }
        // Lines under the attempts say how the webhook fares (held, why and until when), wrapped.
        View::Deliveries => {
            let lines = if main.width >= 120 { 2 } else { 3 };
            let [table, standing] =
                Layout::vertical([Constraint::Min(3), Constraint::Length(lines)]).areas(main);
            (table, Some(standing))
        }
        View::Apps | View::Audit | View::Webhooks | View::Notifications => (main, None),
    };
    Screen {
        top,
        body: main,
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
