//! A read-only text pane that scrolls and searches: describe and logs. Lines are not wrapped, so a line on
//! screen is a line of the text and a search match is always in sight.

#[derive(Debug, Clone, PartialEq, Default)]
pub struct Pager {
    pub title: String,
    pub lines: Vec<String>,
    /// The first line shown, unless `tail`.
    pub top: usize,
    /// Show the end of the text, like `tail -f` (logs while following).
    pub tail: bool,
    /// The search text; `typing` while it is being entered after `/`.
    pub query: String,
    pub typing: bool,
    /// The line of the current match.
    pub current: Option<usize>,
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

    /// The first line shown when the end is in sight, in a pane of `height` lines.
    fn last_top(&self, height: usize) -> usize {
        self.lines.len().saturating_sub(height.max(1))
    }

    /// The first line shown in a pane of `height` lines.
    pub fn first_line(&self, height: usize) -> usize {
        if self.tail {
            self.last_top(height)
        } else {
            self.top.min(self.last_top(height))
        }
    }

    /// Scrolls by `delta` lines (negative: up). Scrolling leaves the tail; reaching the end does not join it.
    pub fn scroll(&mut self, delta: isize, height: usize) {
        let from = self.first_line(height);
        self.tail = false;
        self.top = from.saturating_add_signed(delta).min(self.last_top(height));
    }

    pub fn to_top(&mut self) {
        self.tail = false;
        self.top = 0;
    }

    pub fn to_end(&mut self, height: usize) {
        self.tail = false;
        self.top = self.last_top(height);
    }

    /// Moves to the next (or previous) line matching the query, wrapping around; the match is brought into
    /// sight. Case-insensitive. Returns whether there is a match at all.
    pub fn find(&mut self, forward: bool, height: usize) -> bool {
        let query = self.query.to_lowercase();
        let n = self.lines.len();
        if query.is_empty() || n == 0 {
            self.current = None;
            return false;
        }
        let start = self.current.unwrap_or(if forward {
            self.first_line(height).wrapping_sub(1)
        } else {
            self.first_line(height)
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
            let first = self.first_line(height);
            if line < first || line >= first + height {
                self.tail = false;
                self.top = line.saturating_sub(height / 3);
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

    #[test]
    fn scrolling_is_bounded_and_leaves_the_tail() {
        let mut p = Pager::new("t".into(), &text(100), true);
        assert_eq!(p.first_line(10), 90);
        p.scroll(-5, 10);
        assert!(!p.tail);
        assert_eq!(p.first_line(10), 85);
        p.scroll(1000, 10);
        assert_eq!(p.first_line(10), 90);
        p.scroll(-1000, 10);
        assert_eq!(p.first_line(10), 0);
        p.to_end(10);
        assert_eq!(p.first_line(10), 90);
        // Short texts never scroll.
        let mut short = Pager::new("t".into(), "a\nb", false);
        short.scroll(5, 10);
        assert_eq!(short.first_line(10), 0);
    }

    #[test]
    fn search_moves_between_matches_and_wraps() {
        let mut p = Pager::new("t".into(), &text(100), false);
        p.query = "error".into();
        assert!(p.find(true, 10));
        assert_eq!(p.current, Some(7));
        assert!(p.find(true, 10));
        assert_eq!(p.current, Some(17));
        assert!(p.first_line(10) <= 17 && 17 < p.first_line(10) + 10);
        assert!(p.find(false, 10));
        assert_eq!(p.current, Some(7));
        assert!(p.find(false, 10));
        assert_eq!(p.current, Some(97), "wraps to the last match");
        let first = p.first_line(10);
        assert!(first <= 97 && 97 < first + 10, "97 in sight from {first}");
        p.query = "nowhere".into();
        assert!(!p.find(true, 10));
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
        assert!(p.find(true, 10));
    }
}
