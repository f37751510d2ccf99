//! A table's columns sharing its width by importance, cells cut to the width they get (with `…`), and text
//! broken into lines of a width.
//!
//! Imports nothing of the crate.

/// What a column needs and what it is worth.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Column {
    /// 0 is the most important: it gets room first.
    pub importance: u8,
    /// Narrower than this it is no use.
    pub min: u16,
    /// What it takes before less important columns get any room.
    pub ideal: u16,
    /// What it takes, at most, of the room left when every column had its ideal.
    pub full: u16,
    /// Shown however narrow the table; one that is not is left out first, the least important first.
    pub required: bool,
}

impl Column {
    /// A column that takes at most its ideal width (`full` = `ideal`).
    pub const fn new(importance: u8, min: u16, ideal: u16, required: bool) -> Column {
        Column {
            importance,
            min,
            ideal,
            full: ideal,
            required,
        }
    }

    /// The same, taking up to `full` of the room left once every column had its ideal.
    pub const fn up_to(self, full: u16) -> Column {
        Column { full, ..self }
    }
}

/// The width of each column (`None`: left out) in a table `width` cells wide with a blank between
/// columns. In order of importance each column takes up to its ideal, keeping back the minimum of every
/// required column after it; what is left then goes up to each one's full width, in the same order.
pub fn share(columns: &[Column], width: u16) -> Vec<Option<u16>> {
    let mut order: Vec<usize> = (0..columns.len()).collect();
    order.sort_by_key(|&i| columns[i].importance);
    let mut widths: Vec<Option<u16>> = vec![None; columns.len()];
    let mut left = i32::from(width);
    for (n, &i) in order.iter().enumerate() {
        let gap = i32::from(widths.iter().any(Option::is_some));
        let kept: i32 = order[n + 1..]
            .iter()
            .filter(|&&j| columns[j].required)
            .map(|&j| i32::from(columns[j].min) + 1)
            .sum();
        let c = &columns[i];
        let room = (left - gap - kept).min(i32::from(c.ideal));
        if room >= i32::from(c.min) || c.required {
            let w = room.max(i32::from(c.min).min(left - gap)).max(1);
            widths[i] = Some(w as u16);
            left -= w + gap;
        }
    }
    for &i in &order {
        if let Some(w) = widths[i].as_mut() {
            let more = (i32::from(columns[i].full) - i32::from(*w)).clamp(0, left.max(0));
            *w += more as u16;
            left -= more;
        }
    }
    widths
}

/// `text` in `width` characters: as it is when it fits, else cut with `…` at the end.
pub fn fit(text: &str, width: u16) -> String {
    let width = usize::from(width);
    if text.chars().count() <= width {
        return text.to_string();
    }
    let kept: String = text.chars().take(width.saturating_sub(1)).collect();
    format!("{kept}…")
}

/// `text` in `width` characters, cut from the left so that its end stays (a URL's last parts: the endpoint's
/// namespace and name), at a `/` where one is near: `…/endpoints/admin/e1`.
pub fn fit_end(text: &str, width: u16) -> String {
    let width = usize::from(width);
    let count = text.chars().count();
    if count <= width {
        return text.to_string();
    }
    let tail: String = text.chars().skip(count - width.saturating_sub(1)).collect();
    let tail = match tail.find('/') {
        Some(at) if at > 0 && tail[at..].chars().count() > 1 => tail[at..].to_string(),
        _ => tail,
    };
    format!("…{tail}")
}

/// Byte ends of the pieces `line` breaks into at `width` characters: after the last blank that fits, else
/// mid-word (a word longer than the width).
pub fn breaks(line: &str, width: usize) -> Vec<usize> {
    let width = width.max(1);
    let mut ends = Vec::new();
    let mut start = 0;
    while line[start..].chars().count() > width {
        let rest = &line[start..];
        let cut = rest
            .char_indices()
            .nth(width)
            .map_or(rest.len(), |(i, _)| i);
        let blank = rest[..cut].rfind(' ').filter(|b| *b > 0);
        let end = start + blank.map_or(cut, |b| b + 1);
        ends.push(end);
        start = end;
    }
    ends.push(line.len());
    ends
}

/// Characters of `text` as the screen counts them (one a character).
pub fn chars(text: &str) -> u16 {
    u16::try_from(text.chars().count()).unwrap_or(u16::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    const fn column(importance: u8, min: u16, ideal: u16, required: bool) -> Column {
        Column::new(importance, min, ideal, required)
    }

    #[test]
    fn the_important_columns_get_room_first_and_the_others_go() {
        // Shown in this order: a name (first in importance), a date nobody needs, a model (second).
        let columns = [
            column(0, 8, 20, true),
            column(2, 10, 19, false),
            column(1, 12, 30, true),
        ];
        assert_eq!(share(&columns, 80), [Some(20), Some(19), Some(30)]);
        // Narrower: the model keeps its ideal, the date goes.
        assert_eq!(share(&columns, 52), [Some(20), None, Some(30)]);
        // Narrower still: the name shrinks to leave the model its minimum.
        assert_eq!(share(&columns, 25), [Some(12), None, Some(12)]);
        // What is left after every ideal goes up to the full width, in order of importance.
        let wide = [
            Column {
                full: 40,
                ..column(0, 8, 20, true)
            },
            column(1, 5, 5, true),
        ];
        assert_eq!(share(&wide, 100), [Some(40), Some(5)]);
    }

    #[test]
    fn cells_are_cut_to_fit() {
        assert_eq!(fit("Qwen/Qwen2.5-7B-Instruct", 12), "Qwen/Qwen2.…");
        assert_eq!(fit("qwen", 12), "qwen");
        let url = "http://127.0.0.1:8080/endpoints/admin/e1";
        assert_eq!(fit_end(url, 60), url);
        assert_eq!(fit_end(url, 21), "…/endpoints/admin/e1");
        assert_eq!(fit_end(url, 16), "…/admin/e1");
        assert_eq!(
            fit_end("http://x/endpoints/admin/a-very-long-name", 8),
            "…ng-name"
        );
    }

    #[test]
    fn text_breaks_between_words() {
        let text = "no engine for tei images: or set runtime.launchers.tei";
        let pieces: Vec<&str> = {
            let mut start = 0;
            breaks(text, 30)
                .into_iter()
                .map(|end| {
                    let piece = &text[start..end];
                    start = end;
                    piece
                })
                .collect()
        };
        assert_eq!(
            pieces,
            ["no engine for tei images: or ", "set runtime.launchers.tei"]
        );
        assert_eq!(breaks(&"x".repeat(90), 40), [40, 80, 90]);
        assert_eq!(breaks("", 10), [0]);
    }
}
