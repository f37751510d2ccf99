//! The help screen and the panes (describe, logs).

use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Borders, Clear, Paragraph, Wrap};
use ratatui::Frame;

use super::centered;
use crate::keymap::{Command, Context, Keymap, HELP_COLUMNS};
use crate::pager::Pager;
use crate::state::layout::{help_height, pager_height};
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

/// Every binding in two columns (`HELP_COLUMNS`), under the `:` commands; scrolled when it does not fit.
pub(super) fn help(frame: &mut Frame, area: Rect, state: &State, keymap: &Keymap, scroll: usize) {
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
    // The same numbers the keys scroll by: the box's inside, less the commands.
    let height = help_height((frame.area().width, frame.area().height));
    let last = keymap.help_length(state.read_only).saturating_sub(height);
    let scroll = scroll.min(last) as u16;
    let title = help_title(keymap, last > 0);
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
pub(super) fn pane(frame: &mut Frame, area: Rect, pager: &Pager, mode: Option<&str>) {
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
    // The same count the keys scroll by: the box's inside.
    let height = pager_height((frame.area().width, frame.area().height));
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
    let title = pane_title(pager, mode, first, height);
    frame.render_widget(Clear, box_);
    frame.render_widget(
        Paragraph::new(lines).block(Block::default().borders(Borders::ALL).title(title)),
        box_,
    );
}

/// A pane's title: what it shows, following or paused (logs), the lines in the window when they are not
/// all, and the search.
fn pane_title(pager: &Pager, mode: Option<&str>, first: usize, height: usize) -> String {
    let mode = mode.map(|m| format!(" ({m})")).unwrap_or_default();
    let search = if pager.typing {
        format!(" /{}▏", pager.query)
    } else if !pager.query.is_empty() {
        format!(" /{} (n next, N previous)", pager.query)
    } else {
        String::new()
    };
    let total = pager.lines.len();
    let position = match total > height {
        true => format!(" {}-{}/{total}", first + 1, (first + height).min(total)),
        false => String::new(),
    };
    format!(" {}{mode}{position}{search} ", pager.title)
}
