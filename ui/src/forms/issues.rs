//! How a form takes the server's refusal: each issue beside the field its path names (a path with an
//! index keeps it, `watched[1].name: …`), a bare message that names a field beside that field, the
//! rest under the form.

/// A form's fields, as the server's issue paths name them.
pub trait FormField: Copy + PartialEq + 'static {
    /// Every field, in the form's order.
    const ALL: &'static [Self];
    /// The field's own path.
    fn path(self) -> &'static str;

    /// The field a path (or a message) is about: the field's own path or something inside it
    /// (`watched[1].name`, `scopes: …`), else the first field inside the object it names
    /// (`config.privateService` for `config.privateService.accountId`).
    fn of(text: &str) -> Option<Self> {
        let inside = |f: &&Self| {
            text.strip_prefix(f.path())
                .is_some_and(|rest| rest.is_empty() || rest.starts_with(['.', '[', ':', ' ']))
        };
        let around = |f: &&Self| {
            f.path()
                .strip_prefix(text)
                .is_some_and(|rest| rest.starts_with('.'))
        };
        let all = Self::ALL.iter();
        all.clone()
            .find(inside)
            .or_else(|| all.clone().find(around))
            .copied()
    }
}

/// Every issue of the server's last answer: each with the field it is about, and what is about no one
/// field.
#[derive(Debug, Clone, PartialEq)]
pub struct Issues<F> {
    pub by_field: Vec<(F, String)>,
    pub errors: Vec<String>,
}

impl<F> Default for Issues<F> {
    fn default() -> Self {
        Issues {
            by_field: Vec::new(),
            errors: Vec::new(),
        }
    }
}

impl<F: FormField> Issues<F> {
    /// The refusal `message` and its `issues` (path, message), in place of what was here: each issue beside
    /// the field its path names (keeping the path when it goes inside the field), a bare message that names
    /// a field beside it, the rest under the form.
    pub fn sort(&mut self, message: String, issues: &[(String, String)]) {
        self.clear();
        for (path, m) in issues {
            match F::of(path) {
                Some(f) if path == f.path() => self.by_field.push((f, m.clone())),
                Some(f) => self.by_field.push((f, format!("{path}: {m}"))),
                None if path.is_empty() => self.errors.push(m.clone()),
                None => self.errors.push(format!("{path}: {m}")),
            }
        }
        if issues.is_empty() {
            match F::of(&message) {
                Some(f) => self.by_field.push((f, message)),
                None => self.errors.push(message),
            }
        } else if self.by_field.is_empty() && self.errors.is_empty() {
            self.errors.push(message);
        }
    }

    /// The issues about one field.
    pub fn of(&self, f: F) -> impl Iterator<Item = &str> {
        self.by_field
            .iter()
            .filter(move |(g, _)| *g == f)
            .map(|(_, m)| m.as_str())
    }

    pub fn clear(&mut self) {
        self.by_field.clear();
        self.errors.clear();
    }
}
