//! Text fitted to the screen: styled lines cut with `…` where they end, or wrapped between words (popups),
//! and the footer's keys, as many as fit and then `? more`.

use ratatui::style::{Color, Style};
use ratatui::text::{Line, Span};

use crate::columns::breaks;

/// `spans` in at most `width` characters: as they are when they fit, else cut with `…` at the end.
pub(super) fn fit_spans<'a>(spans: Vec<Span<'a>>, width: usize) -> Vec<Span<'a>> {
    let total: usize = spans.iter().map(|s| s.content.chars().count()).sum();
    if total <= width {
        return spans;
    }
    let mut left = width.saturating_sub(1);
    let mut out = Vec::new();
    let mut last_style = Style::new();
    for span in spans {
        if left == 0 {
            break;
        }
        let n = span.content.chars().count();
        last_style = span.style;
        if n <= left {
            left -= n;
            out.push(span);
        } else {
            let kept: String = span.content.chars().take(left).collect();
            out.push(Span::styled(kept, span.style));
            left = 0;
        }
    }
    if width > 0 {
        out.push(Span::styled("…", last_style));
    }
    out
}

/// `line` broken between words into lines of at most `width` characters, each keeping its spans' styles.
pub(super) fn wrap_line(line: Line<'_>, width: usize) -> Vec<Line<'static>> {
    let text: String = line.spans.iter().map(|s| s.content.as_ref()).collect();
    // Each span's byte range in `text`, with its style.
    let mut at = 0;
    let styled: Vec<(usize, usize, Style)> = line
        .spans
        .iter()
        .map(|s| {
            let start = at;
            at += s.content.len();
            (start, at, s.style)
        })
        .collect();
    let mut start = 0;
    let mut out = Vec::new();
    for end in breaks(&text, width) {
        let spans: Vec<Span<'static>> = styled
            .iter()
            .filter(|(s, e, _)| *s < end && *e > start)
            .map(|(s, e, style)| {
                let piece = &text[(*s).max(start)..(*e).min(end)];
                Span::styled(piece.to_string(), *style)
            })
            .collect();
        out.push(Line::from(spans).style(line.style));
        start = end;
    }
    out
}

/// Every line of `lines` wrapped at `width` (see [`wrap_line`]): what a popup that wraps shows, so its
/// height can be known before it is drawn.
pub(super) fn wrap_lines(lines: Vec<Line<'_>>, width: usize) -> Vec<Line<'static>> {
    lines
        .into_iter()
        .flat_map(|l| wrap_line(l, width))
        .collect()
}

/// The footer's keys: as many `key description` pairs as fit in `width`, in order; when some do not, the
/// last place says so (`? more`, with the help's key when there is one, else `…`).
pub(super) fn footer_spans(
    keys: Vec<(String, String)>,
    width: usize,
    help: Option<String>,
) -> Vec<Span<'static>> {
    let shown = |(k, d): &(String, String)| 3 + k.chars().count() + d.chars().count();
    let all: usize = keys.iter().map(shown).sum();
    let more = match help {
        Some(k) => format!(" {k} more "),
        None => " … ".to_string(),
    };
    let room = match all <= width {
        true => width,
        false => width.saturating_sub(more.chars().count()),
    };
    let mut used = 0;
    let mut spans = Vec::new();
    for pair in &keys {
        if used + shown(pair) > room {
            break;
        }
        used += shown(pair);
        spans.push(Span::styled(
            format!(" {}", pair.0),
            Style::new().fg(Color::Cyan),
        ));
        spans.push(Span::raw(format!(" {} ", pair.1)));
    }
    if all > width {
        spans.push(Span::styled(more, Style::new().fg(Color::DarkGray)));
    }
    spans
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(spans: &[Span]) -> String {
        spans.iter().map(|s| s.content.as_ref()).collect()
    }

    #[test]
    fn cut_text_ends_with_a_marker_and_wrapped_text_keeps_its_styles() {
        let red = Style::new().fg(Color::Red);
        let spans = vec![Span::raw("unreachable "), Span::styled("(refused)", red)];
        assert_eq!(text(&fit_spans(spans.clone(), 40)), "unreachable (refused)");
        let cut = fit_spans(spans.clone(), 15);
        assert_eq!(text(&cut), "unreachable (r…");
        assert_eq!(cut[1].style, red);
        let lines = wrap_line(Line::from(spans), 14);
        let shown: Vec<String> = lines.iter().map(|l| text(&l.spans)).collect();
        assert_eq!(shown, ["unreachable ", "(refused)"]);
        assert_eq!(lines[1].spans[0].style, red);
    }

    #[test]
    fn the_footer_shows_what_fits_then_more() {
        let keys: Vec<(String, String)> = ["enter describe", "l logs", "e edit spec", "q quit"]
            .iter()
            .map(|p| {
                let (k, d) = p.split_once(' ').unwrap_or_default();
                (k.to_string(), d.to_string())
            })
            .collect();
        let all = text(&footer_spans(keys.clone(), 80, Some("?".into())));
        assert_eq!(all, " enter describe  l logs  e edit spec  q quit ");
        let some = text(&footer_spans(keys.clone(), 30, Some("?".into())));
        assert_eq!(some, " enter describe  ? more ");
        let some = text(&footer_spans(keys, 32, None));
        assert_eq!(some, " enter describe  l logs  … ");
    }
}
