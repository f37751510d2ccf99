//! A webhook's attempts, live: each row names what its event is about and what changed, and says what the
//! attempt stands for now (superseded by a later one, due, held); under the list, how the webhook fares (held
//! by its circuit breaker, why and until when).

use ratatui::layout::Rect;
use ratatui::style::{Color, Style};
use ratatui::text::Line;
use ratatui::widgets::{Cell, Paragraph};
use ratatui::Frame;

use super::lists::tail;
use super::text::wrap_line;
use super::{cells, list, shown};
use crate::columns::{chars, fit, share, Column};
use crate::state::{clock, DeliveriesFeed, DeliveryRow, State};

/// The columns: what the event is about and what changed come first (as wide as their widest cell, up to
/// 40), then what the attempt stands for now (with its next attempt's time), the time and its result; the
/// error class and the duration shrink or go.
fn columns(d: &DeliveriesFeed, visible: &[usize]) -> [(&'static str, Column); 8] {
    let widest = |cell: fn(&DeliveryRow) -> &str| {
        let rows = visible.iter().map(|i| chars(cell(&d.rows[*i])));
        rows.max().unwrap_or(0).clamp(12, 40)
    };
    let (subject, change) = (widest(|r| &r.subject), widest(|r| &r.change));
    [
        ("AT (UTC)", Column::new(3, 8, 8, true)),
        ("SUBJECT", Column::new(0, 12, subject, true)),
        ("CHANGE", Column::new(1, 12, change, true)),
        // `1 (r)`: a replay's attempt keeps its mark.
        ("#", Column::new(5, 5, 5, true)),
        // The answer's status code.
        ("HTTP", Column::new(4, 4, 4, true)),
        ("DURATION", Column::new(7, 8, 9, false)),
        ("ERROR", Column::new(6, 7, 9, false)),
        ("STATE", Column::new(2, 14, 26, true).up_to(34)),
    ]
}

const STATUS: usize = 4;
const ERROR: usize = 6;
const STATE: usize = 7;

/// A webhook's attempts, newest at the top; a failed poll is said in the title until one succeeds.
pub(super) fn deliveries(frame: &mut Frame, area: Rect, state: &State, visible: &[usize]) {
    let d = &state.deliveries;
    let title = match &d.note {
        Some(why) => format!("deliveries of {} · {why}; retrying", d.url),
        None => format!("deliveries of {} · live", d.url),
    };
    let heads = columns(d, visible);
    let widths = share(&heads.map(|c| c.1), area.width.saturating_sub(2));
    let columns = shown(heads.map(|c| c.0), &widths);
    let row = |i: usize| {
        let a = &d.rows[i];
        let now = d.standing(a, state.now);
        let result = Style::new().fg(if a.ok() { Color::Green } else { Color::Red });
        let faded = now.state.starts_with("superseded");
        let shown = match now.next.as_str() {
            "" => now.state.clone(),
            next => format!("{}, next {next}", now.state),
        };
        let texts = [
            a.started
                .map_or_else(|| a.at.clone(), |t| clock(t, state.now)),
            a.subject.clone(),
            a.change.clone(),
            format!("{}{}", a.attempt, if a.manual { " (r)" } else { "" }),
            a.status_code.map_or_else(|| "-".into(), |c| c.to_string()),
            format!("{} ms", a.duration_ms),
            a.error_class.clone(),
            shown,
        ];
        cells(texts, &widths, move |k, text, w| match k {
            0 => Cell::from(tail(&text, w)),
            STATUS => Cell::from(fit(&text, w)).style(result),
            ERROR => Cell::from(fit(&text, w)).style(Style::new().fg(Color::Red)),
            STATE if faded => Cell::from(fit(&text, w)).style(Style::new().fg(Color::DarkGray)),
            _ => Cell::from(fit(&text, w)),
        })
    };
    let title = (title.as_str(), d.rows.len());
    list(frame, area, state, visible, title, &columns, row);
}

/// Under the list: how the webhook fares now (receiving, failing, held by its circuit breaker and until
/// when, disabled and why), wrapped; cut with `…` where it does not fit (`d` on the webhook has it whole).
pub(super) fn standing(frame: &mut Frame, area: Rect, state: &State) {
    let Some(hook) = &state.deliveries.hook else {
        return;
    };
    let text = format!(" webhook {}", hook.standing(state.now));
    let colour = match (hook.enabled, hook.held(state.now), hook.failing_since) {
        (false, _, _) | (_, Some(_), _) => Color::Yellow,
        (_, None, Some(_)) => Color::Red,
        _ => Color::Reset,
    };
    let mut lines = wrap_line(Line::from(text), usize::from(area.width));
    let room = usize::from(area.height);
    if lines.len() > room {
        lines.truncate(room);
        if let Some(last) = lines.last_mut() {
            let shown: String = last.spans.iter().map(|s| s.content.as_ref()).collect();
            *last = Line::from(fit(&format!("{shown} …"), area.width));
        }
    }
    let style = Style::new().fg(colour);
    frame.render_widget(Paragraph::new(lines).style(style), area);
}
