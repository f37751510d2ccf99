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

/// Sorts the refusal `message` and its `issues` (path, message) into `by_field` and `errors`, which
/// are cleared first.
pub fn sort<F: FormField>(
    message: String,
    issues: &[(String, String)],
    by_field: &mut Vec<(F, String)>,
    errors: &mut Vec<String>,
) {
    by_field.clear();
    errors.clear();
    for (path, m) in issues {
        match F::of(path) {
            Some(f) if path == f.path() => by_field.push((f, m.clone())),
            Some(f) => by_field.push((f, format!("{path}: {m}"))),
            None if path.is_empty() => errors.push(m.clone()),
            None => errors.push(format!("{path}: {m}")),
        }
    }
    if issues.is_empty() {
        match F::of(&message) {
            Some(f) => by_field.push((f, message)),
            None => errors.push(message),
        }
    } else if by_field.is_empty() && errors.is_empty() {
        errors.push(message);
    }
}

/// The issues about one field.
pub fn of<F: FormField>(by_field: &[(F, String)], f: F) -> impl Iterator<Item = &str> {
    by_field
        .iter()
        .filter(move |(g, _)| *g == f)
        .map(|(_, m)| m.as_str())
}
