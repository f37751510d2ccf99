//! An endpoint's charts at the top of its describe: requests per second, p95 latency, errors and ready
//! replicas over the range shown, one band each (a line chart where a band has the rows for one, else a
//! sparkline), the range's decisions marked on the time axis under them with the marks the list below uses.
//! Every band shares one time axis, and nothing depends on colour: the marks and the bars read alike in
//! black and white.

use ratatui::layout::Rect;
use ratatui::style::{Color, Modifier, Style};
use ratatui::symbols::Marker;
use ratatui::text::{Line, Span};
use ratatui::widgets::{Axis, Chart, Dataset, GraphType, Paragraph, Sparkline};
use ratatui::Frame;

use crate::columns::fit;
use crate::state::{Analytics, ChartRange, State};

/// Columns left of the plots: a band's name and its scale.
const LABEL: u16 = 16;

/// Rows a band needs to be drawn as a line chart rather than a sparkline.
const CHART_ROWS: u16 = 3;

/// One band: its name, colour, unit and points (`None` where nothing was recorded).
struct Band {
    name: &'static str,
    colour: Color,
    points: Vec<Option<f64>>,
    format: fn(f64) -> String,
}

fn rate(v: f64) -> String {
    match v {
        v if v >= 100.0 => format!("{v:.0}/s"),
        v if v >= 10.0 => format!("{v:.1}/s"),
        v => format!("{v:.2}/s"),
    }
}

fn millis(v: f64) -> String {
    match v {
        v if v >= 10_000.0 => format!("{:.0}s", v / 1000.0),
        v if v >= 1000.0 => format!("{:.1}s", v / 1000.0),
        v => format!("{v:.0}ms"),
    }
}

/// A count, or a mean of counts over time (a replica for part of an interval: `0.4`).
fn count(v: f64) -> String {
    match (v - v.round()).abs() < 0.05 {
        true => format!("{v:.0}"),
        false => format!("{v:.1}"),
    }
}

fn bands(a: &Analytics) -> [Band; 4] {
    let s = &a.series;
    [
        Band {
            name: "requests",
            colour: Color::Cyan,
            points: s.requests_per_second.iter().map(|v| Some(*v)).collect(),
            format: rate,
        },
        Band {
            name: "p95",
            colour: Color::Yellow,
            points: s.p95_ms.clone(),
            format: millis,
        },
        Band {
            name: "errors",
            colour: Color::Red,
            points: s.errors.iter().map(|v| Some(*v)).collect(),
            format: count,
        },
        Band {
            name: "replicas",
            colour: Color::Green,
            points: s.replicas.clone(),
            format: count,
        },
    ]
}

/// `points` as `width` columns, each the largest of the points it covers (a spike stays in sight).
fn resample(points: &[Option<f64>], width: usize) -> Vec<Option<f64>> {
    if points.is_empty() || width == 0 {
        return Vec::new();
    }
    (0..width)
        .map(|c| {
            let from = c * points.len() / width;
            let to = ((c + 1) * points.len() / width).max(from + 1);
            points[from..to.min(points.len())]
                .iter()
                .flatten()
                .copied()
                .reduce(f64::max)
        })
        .collect()
}

/// The header: what the bands are, the range shown among the others, and the key that cycles them.
fn header(range: ChartRange, width: u16) -> Line<'static> {
    let mut spans = vec![Span::styled(
        "traffic ",
        Style::new().add_modifier(Modifier::BOLD),
    )];
    for r in ChartRange::ALL {
        let label = r.label();
        spans.push(match r == range {
            true => Span::styled(
                format!("[{label}]"),
                Style::new().add_modifier(Modifier::BOLD),
            ),
            false => Span::raw(format!(" {label} ")),
        });
    }
    spans.push(Span::raw(
        "  t: range · ↑↓ scaled 0 to zero W woken S schedule Q quota X exited U updated F failed",
    ));
    let text: String = spans.iter().map(|s| s.content.as_ref()).collect();
    if text.chars().count() > usize::from(width) {
        // Only the ranges and the key, when the legend does not fit.
        spans.pop();
        spans.push(Span::raw("  t: range · marks as in the decisions below"));
    }
    Line::from(spans)
}

/// One band in `area`: its name and scale on the left, the plot on the right.
fn band(frame: &mut Frame, area: Rect, b: &Band) {
    let top = b.points.iter().flatten().copied().fold(0.0_f64, f64::max);
    let latest = b.points.iter().rev().flatten().next().copied();
    let label = format!(
        "{:<8}{:>7}",
        b.name,
        latest.map_or("-".to_string(), |v| (b.format)(v))
    );
    let (label_area, plot) = (
        Rect {
            width: LABEL.min(area.width),
            ..area
        },
        Rect {
            x: area.x + LABEL,
            width: area.width.saturating_sub(LABEL),
            ..area
        },
    );
    let mut lines = vec![Line::from(fit(&label, LABEL - 1))];
    if area.height >= 2 {
        lines.push(Line::styled(
            fit(
                &format!("{:>15}", format!("top {}", (b.format)(top))),
                LABEL - 1,
            ),
            Style::new().add_modifier(Modifier::DIM),
        ));
    }
    frame.render_widget(Paragraph::new(lines), label_area);
    let style = Style::new().fg(b.colour);
    if area.height >= CHART_ROWS {
        let data: Vec<(f64, f64)> = b
            .points
            .iter()
            .enumerate()
            .filter_map(|(i, v)| Some((i as f64, (*v)?)))
            .collect();
        let span = (b.points.len().max(2) - 1) as f64;
        let dataset = Dataset::default()
            .marker(Marker::Braille)
            .graph_type(GraphType::Line)
            .style(style)
            .data(&data);
        let chart = Chart::new(vec![dataset])
            .x_axis(Axis::default().bounds([0.0, span]))
            .y_axis(Axis::default().bounds([0.0, if top > 0.0 { top } else { 1.0 }]));
        frame.render_widget(chart, plot);
    } else {
        // Scaled so the largest is a whole bar: hundredths keep small rates apart.
        let bars: Vec<Option<u64>> = resample(&b.points, usize::from(plot.width))
            .into_iter()
            .map(|v| v.map(|v| (v * 100.0).round().max(0.0) as u64))
            .collect();
        let sparkline = Sparkline::default()
            .data(bars)
            .max(((top * 100.0).round() as u64).max(1))
            .absent_value_symbol("·")
            .style(style);
        frame.render_widget(sparkline, plot);
    }
}

/// The time axis: the range's ends, and each decision's mark at its time (the newest on top of an older one
/// in the same column).
fn axis(a: &Analytics, width: u16) -> Line<'static> {
    let plot = usize::from(width.saturating_sub(LABEL));
    let mut cells: Vec<char> = vec!['─'; plot];
    let span = (a.to - a.from).num_seconds().max(1) as f64;
    for d in a.in_range().collect::<Vec<_>>().into_iter().rev() {
        let at = (d.at - a.from).num_seconds() as f64 / span;
        let col = ((at * plot as f64) as usize).min(plot.saturating_sub(1));
        if let Some(c) = cells.get_mut(col) {
            *c = d.mark();
        }
    }
    let label = format!("-{} → now", a.range.label());
    Line::from(vec![
        Span::raw(format!(
            "{:<w$}",
            fit(&label, LABEL - 1),
            w = usize::from(LABEL)
        )),
        Span::raw(cells.into_iter().collect::<String>()),
    ])
}

/// The charts of the endpoint `title` names (`namespace/name`) in `area`.
pub(super) fn charts(frame: &mut Frame, area: Rect, state: &State, title: &str) {
    let Some((namespace, name)) = title.split_once('/') else {
        return;
    };
    let a = match state.charts.of(namespace, name) {
        Some(Ok(a)) => a,
        other => {
            let why = match other {
                Some(Err(e)) => format!("traffic: not read: {e}"),
                _ => "traffic: reading…".to_string(),
            };
            frame.render_widget(Paragraph::new(fit(&why, area.width)), area);
            return;
        }
    };
    let head = Rect { height: 1, ..area };
    frame.render_widget(Paragraph::new(header(a.range, area.width)), head);
    // The bands share the rows between the header and the axis, a row each at least; the first takes what
    // is left over.
    let rows = area.height.saturating_sub(2);
    if rows < 4 {
        return;
    }
    let each = rows / 4;
    let mut y = area.y + 1;
    for (i, b) in bands(a).iter().enumerate() {
        let height = if i == 0 { rows - each * 3 } else { each };
        band(frame, Rect { y, height, ..area }, b);
        y += height;
    }
    let bottom = Rect {
        y: area.y + area.height - 1,
        height: 1,
        ..area
    };
    frame.render_widget(Paragraph::new(axis(a, area.width)), bottom);
}

/// A requests sparkline in `width` cells, for the endpoints list.
pub(super) fn sparkline_text(points: &[f64], width: usize) -> String {
    const BARS: [char; 8] = ['▁', '▂', '▃', '▄', '▅', '▆', '▇', '█'];
    let points: Vec<Option<f64>> = points.iter().map(|v| Some(*v)).collect();
    let cols = resample(&points, width);
    let top = cols.iter().flatten().copied().fold(0.0_f64, f64::max);
    cols.iter()
        .map(|v| match v {
            Some(v) if top > 0.0 && *v > 0.0 => {
                let i = ((v / top) * (BARS.len() - 1) as f64).round() as usize;
                BARS[i.min(BARS.len() - 1)]
            }
            Some(_) => '▁',
            None => ' ',
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resampling_keeps_the_spikes() {
        let points = [Some(1.0), Some(9.0), None, Some(2.0)];
        assert_eq!(resample(&points, 2), [Some(9.0), Some(2.0)]);
        assert_eq!(resample(&points, 8).len(), 8);
        assert_eq!(sparkline_text(&[0.0, 5.0, 10.0], 3), "▁▅█");
        assert_eq!(
            (count(2.0), count(0.36), count(1.98)),
            ("2".into(), "0.4".into(), "2".into())
        );
    }
}
