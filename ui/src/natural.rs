//! Names in natural order: a run of digits compares as the number it is, so `a-2` comes before `a-10`.
//!
//! Imports nothing of the crate.

use std::cmp::Ordering;

/// `a` against `b` in natural order: digit runs by their value, the rest character by character ignoring
/// case; names equal that way are ordered by their plain text, so the order is total.
pub fn natural_cmp(a: &str, b: &str) -> Ordering {
    let (mut x, mut y) = (a, b);
    loop {
        let (Some(c), Some(d)) = (x.chars().next(), y.chars().next()) else {
            return x.len().cmp(&y.len()).then_with(|| a.cmp(b));
        };
        let order = if c.is_ascii_digit() && d.is_ascii_digit() {
            let (m, rest_x) = digits(x);
            let (n, rest_y) = digits(y);
            (x, y) = (rest_x, rest_y);
            number_cmp(m, n)
        } else {
            (x, y) = (&x[c.len_utf8()..], &y[d.len_utf8()..]);
            c.to_lowercase().cmp(d.to_lowercase())
        };
        if order != Ordering::Equal {
            return order;
        }
    }
}

/// The run of digits `text` starts with, and what follows it.
fn digits(text: &str) -> (&str, &str) {
    let end = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    text.split_at(end)
}

/// Two runs of digits by their value, however long (leading zeros do not count).
fn number_cmp(m: &str, n: &str) -> Ordering {
    let (m, n) = (m.trim_start_matches('0'), n.trim_start_matches('0'));
    m.len().cmp(&n.len()).then_with(|| m.cmp(n))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_in_names_sort_by_value() {
        let mut names = vec![
            "a-10",
            "a-2",
            "b",
            "a-1",
            "A-3",
            "a",
            "a-02",
            "x99999999999999999999",
            "x100000000000000000000",
        ];
        names.sort_by(|a, b| natural_cmp(a, b));
        assert_eq!(
            names,
            [
                "a",
                "a-1",
                "a-02",
                "a-2",
                "A-3",
                "a-10",
                "b",
                "x99999999999999999999",
                "x100000000000000000000"
            ]
        );
        assert_eq!(natural_cmp("e1", "e1"), Ordering::Equal);
        assert_eq!(natural_cmp("endpoint-9", "endpoint-10"), Ordering::Less);
    }
}
