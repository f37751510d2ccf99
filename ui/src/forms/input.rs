//! What the forms (deploy, new app, webhook) share: the edits a key asks for, moving between fields, typing
//! into one, sending (once at a time) and taking the server's refusal. Which key asks for which edit is the
//! keymap's (the `form` context); a key it does not bind is typed into the focused field.
//!
//! Imports `forms::issues`.

use super::issues::{FormField, Issues};

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

/// What every form keeps besides its values: the focused field, whether it is with the server, and the
/// server's issues with what it sent.
#[derive(Debug, Clone, PartialEq)]
pub struct FormState<F> {
    pub focus: usize,
    /// Sent, waiting for the server: the form is not sent again.
    pub busy: bool,
    /// Every issue of the server's last answer (and of the form's own checks), each with its field.
    pub issues: Issues<F>,
}

impl<F> Default for FormState<F> {
    fn default() -> Self {
        FormState {
            focus: 0,
            busy: false,
            issues: Issues::default(),
        }
    }
}

/// A form: its fields, what typing and choosing do, what it sends, and its [`FormState`].
pub trait Form {
    /// What the form sends when submitted.
    type Sent;
    type Field: FormField;
    fn state(&self) -> &FormState<Self::Field>;
    fn state_mut(&mut self) -> &mut FormState<Self::Field>;
    /// Steps the focused field's value, when it has a choice of values.
    fn choose(&mut self, _forward: bool) {}
    fn type_key(&mut self, key: &str);
    /// What to send; `None` when the form finds its values wrong itself (its issues say why).
    fn to_send(&mut self) -> Option<Self::Sent>;

    /// The focused field.
    fn field(&self) -> Self::Field {
        Self::Field::ALL[self.state().focus]
    }

    /// Applies `edit`; what to send when it submits the form (not while a send is under way).
    fn edit(&mut self, edit: FormEdit) -> Option<Self::Sent> {
        let n = Self::Field::ALL.len();
        let state = self.state_mut();
        match edit {
            FormEdit::NextField => state.focus = step(state.focus, n, true),
            FormEdit::PrevField => state.focus = step(state.focus, n, false),
            FormEdit::NextChoice => self.choose(true),
            FormEdit::PrevChoice => self.choose(false),
            FormEdit::Submit if !state.busy => {
                state.issues.clear();
                let sent = self.to_send();
                self.state_mut().busy = sent.is_some();
                return sent;
            }
            FormEdit::Submit => {}
            FormEdit::Type(key) => self.type_key(key),
        }
        None
    }

    /// The server refused what was sent: the form is open again, with every issue of the answer.
    fn refused(&mut self, message: String, issues: &[(String, String)]) {
        let state = self.state_mut();
        state.busy = false;
        state.issues.sort(message, issues);
    }

    /// The issues about one field.
    fn issues_of(&self, f: Self::Field) -> impl Iterator<Item = &str> {
        self.state().issues.of(f)
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
