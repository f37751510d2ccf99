//! The help screen and the panes (describe, logs).

use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Borders, Clear, Paragraph, Wrap};
use ratatui::Frame;

use super::centered;
use crate::columns::fit;
use crate::keymap::{Command, Context, Keymap, HELP_COLUMNS};
use crate::pager::{Pager, Piece};
use crate::state::layout::{charts_height, help_columns, help_height, pager_window, HELP_WIDTH};
use crate::state::State;

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

/// The help's title: the keys that scroll it (when there is more than fits) and close it, as the keymap in
/// use binds them.
fn help_title(keymap: &Keymap, scrolls: bool) -> String {
    let keys = |command| keymap.keys_for(Context::Help, command);
    let mut says = Vec::new();
    if let (true, Some(down), Some(up)) = (scrolls, keys(Command::Down), keys(Command::Up)) {
        says.push(format!("{down} {up} scroll"));
    }
    if let Some(close) = keys(Command::Back) {
        says.push(format!("{close} to close"));
    }
    match says.is_empty() {
        true => " help ".to_string(),
        false => format!(" help ({}) ", says.join(", ")),
    }
}

/// A context's name and bindings, each line cut to `width` with `…`.
fn help_column(
    keymap: &Keymap,
    ctxs: &[Context],
    read_only: bool,
    width: u16,
) -> Vec<Line<'static>> {
    let mut lines = Vec::new();
    for ctx in ctxs {
        lines.push(Line::styled(
            ctx.as_str().to_string(),
            Style::new().add_modifier(Modifier::BOLD),
        ));
        for b in keymap.own(*ctx, read_only) {
            let text = format!("  {:<18} {}", b.keys.join(" "), b.description);
            lines.push(Line::from(fit(&text, width)));
        }
    }
    lines
}

/// Every binding in two columns (`HELP_COLUMNS`), or one on a narrow terminal, under the `:` commands;
/// scrolled when it does not fit.
pub(super) fn help(frame: &mut Frame, area: Rect, state: &State, keymap: &Keymap, scroll: usize) {
    let box_ = centered(area, HELP_WIDTH, area.height);
    let size = (frame.area().width, frame.area().height);
    // The same numbers the keys scroll by: the box's inside, less the commands.
    let (height, columns) = (help_height(size), help_columns(size));
    let last = keymap
        .help_length(state.read_only, columns)
        .saturating_sub(height);
    let scroll = scroll.min(last) as u16;
    let title = fit(&help_title(keymap, last > 0), box_.width.saturating_sub(2));
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
    let log = format!(" console log: {} ", state.log_file);
    let block = Block::default()
        .borders(Borders::ALL)
        .title(title)
        .title_bottom(fit(&log, box_.width.saturating_sub(2)));
    let inner = block.inner(box_);
    frame.render_widget(block, box_);
    let [top, body] = Layout::vertical([Constraint::Length(2), Constraint::Min(1)]).areas(inner);
    frame.render_widget(
        Paragraph::new(Line::from(commands)).wrap(Wrap { trim: true }),
        top,
    );
    let read_only = state.read_only;
    if columns == 1 {
        let all: Vec<Context> = HELP_COLUMNS
            .iter()
            .flat_map(|c| c.iter().copied())
            .collect();
        let lines = help_column(keymap, &all, read_only, body.width);
        frame.render_widget(Paragraph::new(lines).scroll((scroll, 0)), body);
        return;
    }
    // A gap between the columns, so a long line of the left one never runs into the right one.
    let [l, _, r] = Layout::horizontal([
        Constraint::Percentage(45),
        Constraint::Length(2),
        Constraint::Fill(1),
    ])
    .areas(body);
    for (column, at) in [(HELP_COLUMNS[0], l), (HELP_COLUMNS[1], r)] {
        let lines = help_column(keymap, column, read_only, at.width);
        frame.render_widget(Paragraph::new(lines).scroll((scroll, 0)), at);
    }
}

/// One row of a pane: its piece of a line (a wrapped line's, or what is in sight of a cut one, with `…`
/// where it goes on), search matches highlighted.
fn pane_row<'a>(pager: &'a Pager, piece: Piece, width: usize) -> Line<'a> {
    let line = &pager.lines[piece.line];
    let (mut start, mut end) = (piece.start, piece.end);
    let (mut before, mut after) = ("", "");
    if !pager.wrap {
        let byte = |n: usize| line.char_indices().nth(n).map_or(line.len(), |(i, _)| i);
        let total = line.chars().count();
        let left = pager.left.min(total);
        let cut_left = left > 0;
        let cut_right = total > left + width;
        start = byte(left + usize::from(cut_left));
        end = byte(
            (left + width)
                .saturating_sub(usize::from(cut_right))
                .max(left),
        );
        end = end.max(start);
        if cut_left {
            before = "…";
        }
        if cut_right {
            after = "…";
        }
    }
    let hit = Style::new().fg(Color::Black).bg(Color::Yellow);
    let mut spans = vec![Span::raw(before)];
    let mut at = start;
    for (s, e) in pager.matches_in(line) {
        let (s, e) = (s.max(start), e.min(end));
        if s >= e || s < at {
            continue;
        }
        spans.push(Span::raw(&line[at..s]));
        spans.push(Span::styled(&line[s..e], hit));
        at = e;
    }
    spans.push(Span::raw(&line[at..end]));
    spans.push(Span::raw(after));
    Line::from(spans)
}

/// Describe and logs (`mode`: following or paused): the rows in the window, long lines wrapped or cut, search
/// matches highlighted, the current match's line marked; below the rows its charts take, when it has them.
/// Returns those rows (none when it has no charts).
pub(super) fn pane(frame: &mut Frame, area: Rect, pager: &Pager, mode: Option<&str>) -> Rect {
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
    // The same window the keys scroll by: the box's inside.
    let size = (frame.area().width, frame.area().height);
    let window = pager_window(size, pager.charts);
    let first = pager.first_row(window);
    let rows = pager.rows(window.width);
    let lines: Vec<Line> = rows
        .iter()
        .skip(first)
        .take(window.height)
        .map(|piece| {
            let l = pane_row(pager, *piece, window.width);
            match pager.current == Some(piece.line) {
                true => l.style(Style::new().add_modifier(Modifier::BOLD | Modifier::UNDERLINED)),
                false => l,
            }
        })
        .collect();
    let title = pane_title(pager, mode, first, (window.height, rows.len()));
    let title = fit(&title, box_.width.saturating_sub(2));
    frame.render_widget(Clear, box_);
    let block = Block::default().borders(Borders::ALL).title(title);
    let inside = block.inner(box_);
    frame.render_widget(block, box_);
    // The charts' rows at the top of the inside, the text below them.
    let charts = match pager.charts {
        true => (charts_height(size) as u16).min(inside.height),
        false => 0,
    };
    let [charts, text] =
        Layout::vertical([Constraint::Length(charts), Constraint::Fill(1)]).areas(inside);
    frame.render_widget(Paragraph::new(lines), text);
    charts
}

/// A pane's title: what it shows, following or paused (logs), whether long lines are cut, the rows in the
/// window when they are not all, and the search.
fn pane_title(
    pager: &Pager,
    mode: Option<&str>,
    first: usize,
    (height, total): (usize, usize),
) -> String {
    let mut modes: Vec<&str> = mode.into_iter().collect();
    if !pager.wrap {
        modes.push("long lines cut");
    }
    let mode = match modes.is_empty() {
        true => String::new(),
        false => format!(" ({})", modes.join(", ")),
    };
    let search = if pager.typing {
        format!(" /{}▏", pager.query)
    } else if !pager.query.is_empty() {
        format!(" /{} (n next, N previous)", pager.query)
    } else {
        String::new()
    };
    let position = match total > height {
        true => format!(" {}-{}/{total}", first + 1, (first + height).min(total)),
        false => String::new(),
    };
    format!(" {}{mode}{position}{search} ", pager.title)
}
