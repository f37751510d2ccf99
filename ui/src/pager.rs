//! A read-only text pane that scrolls and searches: describe and logs. Long lines wrap at the pane's width
//! (between words where they can), or, with wrapping off, are cut with `…` and scroll sideways. The window
//! counts rows on screen; a search finds lines, and brings its match's line into sight.
//!
//! Imports `columns`.

use crate::columns::breaks;

/// The pane's inside: `width` columns, `height` rows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Window {
    pub width: usize,
    pub height: usize,
}

/// A row on screen: the bytes `start..end` of line `line`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Piece {
    pub line: usize,
    pub start: usize,
    pub end: usize,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Pager {
    pub title: String,
    pub lines: Vec<String>,
    /// The first row shown, unless `tail`.
    pub top: usize,
    /// Show the end of the text, like `tail -f` (logs while following).
    pub tail: bool,
    /// The search text; `typing` while it is being entered after `/`.
    pub query: String,
    pub typing: bool,
    /// The line of the current match.
    pub current: Option<usize>,
    /// Long lines wrap; off, they are cut and `left` scrolls them sideways.
    pub wrap: bool,
    /// Characters scrolled past on the left while not wrapping.
    pub left: usize,
    /// An endpoint's describe: its charts take the top of the pane (see `layout::charts_height`).
    pub charts: bool,
}

impl Default for Pager {
    fn default() -> Self {
        Pager {
            title: String::new(),
            lines: Vec::new(),
            top: 0,
            tail: false,
            query: String::new(),
            typing: false,
            current: None,
            wrap: true,
            left: 0,
            charts: false,
        }
    }
}

impl Pager {
    pub fn new(title: String, text: &str, tail: bool) -> Pager {
        let mut pager = Pager {
            title,
            tail,
            ..Pager::default()
        };
        pager.set_text(text);
        pager
    }

    pub fn set_text(&mut self, text: &str) {
        self.lines = text.lines().map(str::to_string).collect();
        if self.current.is_some_and(|c| c >= self.lines.len()) {
            self.current = None;
        }
    }

    /// The rows of the text in a pane `width` wide: a line each when not wrapping.
    pub fn rows(&self, width: usize) -> Vec<Piece> {
        let mut rows = Vec::with_capacity(self.lines.len());
        for (line, text) in self.lines.iter().enumerate() {
            if !self.wrap {
                rows.push(Piece {
                    line,
                    start: 0,
                    end: text.len(),
                });
                continue;
            }
            let mut start = 0;
            for end in breaks(text, width) {
                rows.push(Piece { line, start, end });
                start = end;
            }
        }
        rows
    }

    /// The first row shown when the end is in sight.
    fn last_top(&self, w: Window) -> usize {
        self.rows(w.width).len().saturating_sub(w.height.max(1))
    }

    /// The first row shown in the window `w`.
    pub fn first_row(&self, w: Window) -> usize {
        if self.tail {
            self.last_top(w)
        } else {
            self.top.min(self.last_top(w))
        }
    }

    /// Whether the window shows the last row.
    pub fn at_end(&self, w: Window) -> bool {
        self.first_row(w) + w.height >= self.rows(w.width).len()
    }

    /// Scrolls by `delta` rows (negative: up). Scrolling leaves the tail; reaching the end does not join it.
    pub fn scroll(&mut self, delta: isize, w: Window) {
        let from = self.first_row(w);
        self.tail = false;
        self.top = from.saturating_add_signed(delta).min(self.last_top(w));
    }

    pub fn to_top(&mut self) {
        self.tail = false;
        self.top = 0;
    }

    pub fn to_end(&mut self, w: Window) {
        self.tail = false;
        self.top = self.last_top(w);
    }

    /// Wrapping on or off; the line at the top stays at the top (the end stays in sight when followed).
    pub fn toggle_wrap(&mut self, w: Window) {
        let line = self.rows(w.width).get(self.first_row(w)).map(|p| p.line);
        self.wrap = !self.wrap;
        self.left = 0;
        if let Some(line) = line {
            self.top = self.first_row_of(line, w.width);
        }
    }

    /// Scrolls sideways by `delta` characters while not wrapping, as far as the longest line goes.
    pub fn sideways(&mut self, delta: isize, w: Window) {
        if self.wrap {
            return;
        }
        let longest = self.lines.iter().map(|l| l.chars().count()).max();
        let most = longest
            .unwrap_or(0)
            .saturating_sub(w.width.saturating_sub(2));
        self.left = self.left.saturating_add_signed(delta).min(most);
    }

    /// The row `line` starts on.
    fn first_row_of(&self, line: usize, width: usize) -> usize {
        let rows = self.rows(width);
        rows.iter().position(|p| p.line == line).unwrap_or(0)
    }

    /// Moves to the next (or previous) line matching the query, wrapping around; the match is brought into
    /// sight. Case-insensitive. Returns whether there is a match at all.
    pub fn find(&mut self, forward: bool, w: Window) -> bool {
        let query = self.query.to_lowercase();
        let n = self.lines.len();
        if query.is_empty() || n == 0 {
            self.current = None;
            return false;
        }
        let first = self.first_row(w);
        let shown_line = self.rows(w.width).get(first).map_or(0, |p| p.line);
        let start = self.current.unwrap_or(if forward {
            shown_line.wrapping_sub(1)
        } else {
            shown_line
        });
        let found = (1..=n)
            .map(|step| {
                if forward {
                    start.wrapping_add(step) % n
                } else {
                    (start % n + n * 2 - step) % n
                }
            })
            .find(|&i| self.lines[i].to_lowercase().contains(&query));
        self.current = found;
        if let Some(line) = found {
            let row = self.first_row_of(line, w.width);
            if row < first || row >= first + w.height {
                self.tail = false;
                self.top = row.saturating_sub(w.height / 3);
            }
        }
        found.is_some()
    }

    /// Where `query` occurs in `line` (byte ranges), for highlighting.
    pub fn matches_in<'a>(&'a self, line: &'a str) -> impl Iterator<Item = (usize, usize)> + 'a {
        let query = self.query.to_lowercase();
        // Lowercasing can change a character's byte length (e.g. the Kelvin sign): highlight only when no
        // character's did, so offsets in `lower` are offsets in `line`. Without a search, nothing is done.
        let usable = !query.is_empty()
            && line
                .chars()
                .all(|c| c.to_lowercase().map(char::len_utf8).sum::<usize>() == c.len_utf8());
        let lower = if usable {
            line.to_lowercase()
        } else {
            String::new()
        };
        let mut at = 0;
        std::iter::from_fn(move || {
            if !usable {
                return None;
            }
            let i = lower[at..].find(&query)? + at;
            at = i + query.len();
            Some((i, at))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(n: usize) -> String {
        (0..n)
            .map(|i| format!("line {i}{}", if i % 10 == 7 { " ERROR" } else { "" }))
            .collect::<Vec<_>>()
            .join("\n")
    }

    const W: Window = Window {
        width: 80,
        height: 10,
    };

    #[test]
    fn scrolling_is_bounded_and_leaves_the_tail() {
        let mut p = Pager::new("t".into(), &text(100), true);
        assert_eq!(p.first_row(W), 90);
        p.scroll(-5, W);
        assert!(!p.tail);
        assert_eq!(p.first_row(W), 85);
        p.scroll(1000, W);
        assert_eq!(p.first_row(W), 90);
        p.scroll(-1000, W);
        assert_eq!(p.first_row(W), 0);
        p.to_end(W);
        assert_eq!(p.first_row(W), 90);
        // Short texts never scroll.
        let mut short = Pager::new("t".into(), "a\nb", false);
        short.scroll(5, W);
        assert_eq!(short.first_row(W), 0);
    }

    #[test]
    fn long_lines_wrap_between_words_or_scroll_sideways() {
        let line = "the minilm engine is not installed on this server: run `switchyard engines install minilm`";
        let mut p = Pager::new("t".into(), &format!("{line}\nshort"), false);
        let w = Window {
            width: 40,
            height: 10,
        };
        let pieces: Vec<&str> = p
            .rows(40)
            .iter()
            .map(|r| &p.lines[r.line][r.start..r.end])
            .collect();
        assert_eq!(
            pieces,
            [
                "the minilm engine is not installed on ",
                "this server: run `switchyard engines ",
                "install minilm`",
                "short"
            ]
        );
        assert!(pieces.iter().all(|r| r.chars().count() <= 40));
        // Off: a row a line, scrolled sideways as far as the longest line needs.
        p.toggle_wrap(w);
        assert_eq!(p.rows(40).len(), 2);
        p.sideways(1000, w);
        assert_eq!(p.left, line.chars().count() - 38);
        p.sideways(-1000, w);
        assert_eq!(p.left, 0);
        // A match on a wrapped line's third row brings that line into sight.
        let long = (0..30)
            .map(|i| format!("l{i} {}", "word ".repeat(20)))
            .collect::<Vec<_>>();
        let mut p = Pager::new("t".into(), &long.join("\n"), false);
        p.query = "l20 ".into();
        assert!(p.find(true, w));
        let first = p.first_row(w);
        let shown: Vec<usize> = p.rows(40)[first..first + 10]
            .iter()
            .map(|r| r.line)
            .collect();
        assert!(shown.contains(&20), "{shown:?}");
    }

    #[test]
    fn search_moves_between_matches_and_wraps() {
        let mut p = Pager::new("t".into(), &text(100), false);
        p.query = "error".into();
        assert!(p.find(true, W));
        assert_eq!(p.current, Some(7));
        assert!(p.find(true, W));
        assert_eq!(p.current, Some(17));
        assert!(p.first_row(W) <= 17 && 17 < p.first_row(W) + 10);
        assert!(p.find(false, W));
        assert_eq!(p.current, Some(7));
        assert!(p.find(false, W));
        assert_eq!(p.current, Some(97), "wraps to the last match");
        let first = p.first_row(W);
        assert!(first <= 97 && 97 < first + 10, "97 in sight from {first}");
        p.query = "nowhere".into();
        assert!(!p.find(true, W));
        assert_eq!(p.current, None);
        let line = "an Error and an error";
        p.query = "error".into();
        assert_eq!(
            p.matches_in(line).collect::<Vec<_>>(),
            vec![(3, 8), (16, 21)]
        );
        // Characters whose lowercase has another length: found, but not highlighted (no slicing mid-char).
        p.query = "k".into();
        assert_eq!(p.matches_in("ȺȺ\u{212A}").count(), 0);
        p.lines = vec!["ȺȺ\u{212A}".into()];
        p.current = None;
        assert!(p.find(true, W));
    }
}
