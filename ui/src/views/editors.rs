//! The spec and schedule editors.

use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Borders, Clear, Paragraph};
use ratatui::Frame;

use super::centered;
use super::text::wrap_lines;
use crate::columns::fit;
use crate::keymap::{Command, Context, Keymap};
use crate::schedule::{minute_of_day, Entry, ScheduleEditor, COLUMNS};
use crate::spec::SpecEditor;

/// The spec editor: the text with line numbers, and under it the issues (at most five) or a note.
pub(super) fn spec(frame: &mut Frame, area: Rect, editor: &SpecEditor) {
    let box_ = centered(area, area.width.saturating_sub(6), area.height);
    let title = format!(
        " spec {}/{} ({}) ",
        editor.edit.namespace,
        editor.edit.name,
        editor.edit.format.name(),
    );
    let title = fit(&title, box_.width.saturating_sub(2));
    let block = Block::default().borders(Borders::ALL).title(title);
    let inner = block.inner(box_);
    let lines = wrap_lines(spec_notes(editor), usize::from(inner.width));
    // The text keeps most of the box: at most six lines of issues, the last cut with `…` when more.
    let shown = lines.len().min(6);
    let [text, issues] =
        Layout::vertical([Constraint::Min(3), Constraint::Length(shown as u16)]).areas(inner);
    let mut textarea = editor.text.clone();
    textarea.set_line_number_style(Style::new().fg(Color::DarkGray));
    frame.render_widget(Clear, box_);
    frame.render_widget(block, box_);
    frame.render_widget(&textarea, text);
    let mut lines = lines;
    if lines.len() > shown {
        lines.truncate(shown);
        if let Some(last) = lines.last_mut() {
            last.spans.push(Span::raw(" …"));
        }
    }
    frame.render_widget(Paragraph::new(lines), issues);
}

/// Under the spec: the issues (at most five) at their lines, what is under way, or that it is valid.
fn spec_notes(editor: &SpecEditor) -> Vec<Line<'static>> {
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
    lines
}

/// The schedule editor: the day, then the entries, `▶` on the one edited and `● in effect now` beside the
/// one the time now falls in.
pub(super) fn schedule(
    frame: &mut Frame,
    area: Rect,
    editor: &ScheduleEditor,
    now: chrono::DateTime<chrono::Utc>,
    keymap: &Keymap,
) {
    let now_entry = editor.in_effect(minute_of_day(now));
    let mut lines = schedule_day(editor, now, keymap);
    for (i, e) in editor.entries.iter().enumerate() {
        lines.push(schedule_entry(editor, i, e, Some(i) == now_entry));
    }
    for (_, m) in editor.issues.iter().filter(|(n, _)| n.is_none()) {
        lines.push(Line::styled(m.clone(), Style::new().fg(Color::Red)));
    }
    if editor.busy {
        lines.push(Line::styled("saving…", Style::new().fg(Color::Yellow)));
    }
    let width = 100.min(area.width);
    let lines = wrap_lines(lines, usize::from(width.saturating_sub(2)));
    let box_ = centered(area, width, lines.len() as u16 + 2);
    let title = format!(" schedule {}/{} ", editor.namespace, editor.name);
    frame.render_widget(Clear, box_);
    frame.render_widget(
        Paragraph::new(lines).block(
            Block::default()
                .borders(Borders::ALL)
                .title(fit(&title, width.saturating_sub(2))),
        ),
        box_,
    );
}

/// The schedule editor's head: the endpoint's own values and what they mean now, the day's timeline with the
/// time now marked, and the entries' column heads (or, without entries, how to add one).
fn schedule_day(
    editor: &ScheduleEditor,
    now: chrono::DateTime<chrono::Utc>,
    keymap: &Keymap,
) -> Vec<Line<'static>> {
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
        true => Line::from(
            match keymap.keys_for(Context::Schedule, Command::AddEntry) {
                Some(keys) => format!("(the schedule is empty: `{keys}` adds an entry)"),
                None => "(the schedule is empty; no key adds an entry in this keymap)".to_string(),
            },
        ),
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
