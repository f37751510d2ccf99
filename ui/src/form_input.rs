//! What the forms (deploy, new app, webhook) share: the edits a key asks for, moving between fields and
//! typing into one. Which key asks for which edit is the keymap's (the `form` context); a key it does not
//! bind is typed into the focused field.
//!
//! Imports nothing of the crate.

/// An edit of a form.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FormEdit<'a> {
    NextField,
    PrevField,
    /// The focused field's next or previous value, for a field with a choice of values.
    NextChoice,
    PrevChoice,
    Submit,
    /// A key typed into the focused field (`backspace`, `space`, a character); any other is ignored.
    Type(&'a str),
}

/// A form: its fields, the focused one, what typing and choosing do, and what it sends.
pub trait Form {
    /// What the form sends when submitted.
    type Sent;
    /// How many fields it has.
    const FIELDS: usize;
    fn focus_mut(&mut self) -> &mut usize;
    /// Steps the focused field's value, when it has a choice of values.
    fn choose(&mut self, _forward: bool) {}
    fn type_key(&mut self, key: &str);
    /// What to send; `None` while a send is under way, or when the form finds the values wrong itself.
    fn submit(&mut self) -> Option<Self::Sent>;

    /// Applies `edit`; what to send when it submits the form.
    fn edit(&mut self, edit: FormEdit) -> Option<Self::Sent> {
        let n = Self::FIELDS;
        match edit {
            FormEdit::NextField => *self.focus_mut() = (*self.focus_mut() + 1) % n,
            FormEdit::PrevField => *self.focus_mut() = (*self.focus_mut() + n - 1) % n,
            FormEdit::NextChoice => self.choose(true),
            FormEdit::PrevChoice => self.choose(false),
            FormEdit::Submit => return self.submit(),
            FormEdit::Type(key) => self.type_key(key),
        }
        None
    }
}

/// The character a key types: itself for a one-character key, a blank for `space`.
pub fn typed_char(key: &str) -> Option<char> {
    let mut chars = key.chars();
    match (key, chars.next(), chars.next()) {
        ("space", _, _) => Some(' '),
        (_, Some(c), None) => Some(c),
        _ => None,
    }
}

/// `key` typed into `text`: `backspace` deletes the last character; a character `takes` allows is added
/// while the text is under `max` bytes.
pub fn type_into(text: &mut String, key: &str, max: usize, takes: impl Fn(char) -> bool) {
    if key == "backspace" {
        text.pop();
    } else if let Some(c) = typed_char(key).filter(|c| takes(*c)) {
        if text.len() < max {
            text.push(c);
        }
    }
}

/// Steps `i` among `n` choices, wrapping.
pub fn step(i: usize, n: usize, forward: bool) -> usize {
    match forward {
        true => (i + 1) % n.max(1),
        false => (i + n.max(1) - 1) % n.max(1),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn typing_and_stepping() {
        let mut t = String::from("ab");
        type_into(&mut t, "backspace", 10, |_| true);
        type_into(&mut t, "space", 10, |_| true);
        type_into(&mut t, "x", 10, |c| c.is_ascii_digit());
        type_into(&mut t, "7", 10, |c| c.is_ascii_digit());
        type_into(&mut t, "enter", 10, |_| true);
        assert_eq!(t, "a 7");
        type_into(&mut t, "9", 3, |_| true);
        assert_eq!(t, "a 7");
        assert_eq!(step(0, 3, false), 2);
        assert_eq!(step(2, 3, true), 0);
    }
}
