//! The webhook form, new or edited: URL, watched items (`type:name`), domains and secret, as the body the API
//! takes. Every issue of the server's 400 is shown at once, each beside its field.
//!
//! Imports `forms::input` and `forms::issues`.

use serde_json::{json, Map, Value};

use super::input::{type_into, Form, FormState};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HookField {
    Url,
    Watched,
    Domains,
    Secret,
}

impl HookField {
    pub const ALL: [HookField; 4] = [
        HookField::Url,
        HookField::Watched,
        HookField::Domains,
        HookField::Secret,
    ];

    /// The label; an edit leaves a blank secret as it is.
    pub fn label(self, editing: bool) -> &'static str {
        match self {
            HookField::Url => "url",
            HookField::Watched => "watched (type:name …)",
            HookField::Domains => "domains (repo endpoint)",
            HookField::Secret if editing => "secret (blank: unchanged)",
            HookField::Secret => "secret (optional)",
        }
    }

    /// The body field the server names in its issues (`watched[1].name`).
    fn path(self) -> &'static str {
        match self {
            HookField::Url => "url",
            HookField::Watched => "watched",
            HookField::Domains => "domains",
            HookField::Secret => "secret",
        }
    }
}

/// Longest text a field takes: the server's own limits are below it.
const MAX_TEXT: usize = 4096;

#[derive(Clone, PartialEq)]
pub struct WebhookForm {
    /// The webhook edited; `None` for a new one.
    pub id: Option<String>,
    pub url: String,
    pub watched: String,
    pub domains: String,
    /// Typed by the user, never filled from the server; masked on screen and in the form's `Debug`.
    pub secret: String,
    /// The focused field, the send under way, the server's issues.
    pub state: FormState<HookField>,
}

impl std::fmt::Debug for WebhookForm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WebhookForm")
            .field("id", &self.id)
            .field("url", &self.url)
            .field("watched", &self.watched)
            .field("domains", &self.domains)
            .field("secret", &"…")
            .field("state", &self.state)
            .finish()
    }
}

impl WebhookForm {
    /// A new webhook: watching the signed-in user's endpoints by default.
    pub fn new(user: Option<&str>) -> WebhookForm {
        WebhookForm {
            id: None,
            url: String::new(),
            watched: user.map(|u| format!("user:{u}")).unwrap_or_default(),
            domains: "endpoint".to_string(),
            secret: String::new(),
            state: FormState::default(),
        }
    }

    /// An existing webhook, its fields as they are (but the secret).
    pub fn edit(id: &str, url: &str, watched: &[String], domains: &[String]) -> WebhookForm {
        WebhookForm {
            id: Some(id.to_string()),
            url: url.to_string(),
            watched: watched.join(" "),
            domains: domains.join(" "),
            ..WebhookForm::new(None)
        }
    }

    /// The value shown for a field: the secret masked.
    pub fn shown(&self, f: HookField) -> String {
        match f {
            HookField::Url => self.url.clone(),
            HookField::Watched => self.watched.clone(),
            HookField::Domains => self.domains.clone(),
            HookField::Secret => "•".repeat(self.secret.chars().count()),
        }
    }

    fn text(&mut self, f: HookField) -> &mut String {
        match f {
            HookField::Url => &mut self.url,
            HookField::Watched => &mut self.watched,
            HookField::Domains => &mut self.domains,
            HookField::Secret => &mut self.secret,
        }
    }

    /// The create or update body; an item of the watched list that is not `type:name` is an issue of its
    /// own, found before anything is sent. An edit sends the secret only when one is typed.
    pub fn body(&self) -> Result<Value, Vec<(HookField, String)>> {
        let mut watched = Vec::new();
        let mut issues = Vec::new();
        for (i, item) in self.watched.split_whitespace().enumerate() {
            match item.split_once(':') {
                Some((kind, name)) if !kind.is_empty() && !name.is_empty() => {
                    watched.push(json!({"type": kind, "name": name}))
                }
                _ => issues.push((
                    HookField::Watched,
                    format!("watched[{i}]: {item:?} is not type:name (user:NAME, org:NAME, model:AUTHOR/MODEL)"),
                )),
            }
        }
        if !issues.is_empty() {
            return Err(issues);
        }
        let domains: Vec<&str> = self.domains.split_whitespace().collect();
        let mut body = Map::new();
        body.insert("url".into(), json!(self.url.trim()));
        body.insert("watched".into(), json!(watched));
        body.insert("domains".into(), json!(domains));
        // Blank: none for a new webhook, unchanged for an edit.
        if !self.secret.is_empty() {
            body.insert("secret".into(), json!(self.secret));
        }
        Ok(Value::Object(body))
    }
}

impl Form for WebhookForm {
    type Sent = Value;
    type Field = HookField;

    fn state(&self) -> &FormState<HookField> {
        &self.state
    }

    fn state_mut(&mut self) -> &mut FormState<HookField> {
        &mut self.state
    }

    fn type_key(&mut self, key: &str) {
        type_into(self.text(self.field()), key, MAX_TEXT, |_| true);
    }

    /// The body, unless the watched list has an item that is not `type:name`.
    fn to_send(&mut self) -> Option<Value> {
        self.body()
            .map_err(|issues| self.state.issues.by_field = issues)
            .ok()
    }
}

impl super::issues::FormField for HookField {
    const ALL: &'static [Self] = &HookField::ALL;

    fn path(self) -> &'static str {
        Self::path(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::forms::input::FormEdit;

    fn type_in(form: &mut WebhookForm, text: &str) {
        for c in text.chars() {
            let key = if c == ' ' {
                "space".to_string()
            } else {
                c.to_string()
            };
            form.edit(FormEdit::Type(&key));
        }
    }

    #[test]
    fn the_form_builds_the_body_and_checks_type_name() {
        let mut f = WebhookForm::new(Some("admin"));
        type_in(&mut f, "http://127.0.0.1:9/hook");
        f.edit(FormEdit::NextField);
        type_in(&mut f, " org:acme model:acme/m");
        f.edit(FormEdit::NextField);
        type_in(&mut f, " repo");
        f.edit(FormEdit::NextField);
        type_in(&mut f, "s3cret");
        assert_eq!(f.shown(HookField::Secret), "••••••");
        let body = f.edit(FormEdit::Submit).unwrap();
        assert_eq!(
            body,
            json!({"url": "http://127.0.0.1:9/hook",
                   "watched": [{"type": "user", "name": "admin"}, {"type": "org", "name": "acme"},
                               {"type": "model", "name": "acme/m"}],
                   "domains": ["endpoint", "repo"], "secret": "s3cret"})
        );
        assert!(f.state.busy && f.edit(FormEdit::Submit).is_none());

        // An item without a type is caught before sending.
        let mut f = WebhookForm::new(None);
        type_in(&mut f, "http://x");
        f.edit(FormEdit::NextField);
        type_in(&mut f, "admin user:");
        assert!(f.edit(FormEdit::Submit).is_none());
        assert!(!f.state.busy);
        assert_eq!(f.issues_of(HookField::Watched).count(), 2);

        // An edit without a typed secret leaves it out (unchanged).
        let f = WebhookForm::edit("h1", "http://x", &["user:a".into()], &["repo".into()]);
        let body = f.body().unwrap();
        assert!(body.get("secret").is_none(), "{body}");
        let mut f = f;
        f.secret = "s3cret".into();
        assert!(!format!("{f:?}").contains("s3cret"));
    }

    #[test]
    fn every_issue_goes_beside_its_field() {
        let mut f = WebhookForm::new(None);
        f.state.busy = true;
        f.refused(
            "invalid request body".into(),
            &[
                ("url".into(), "not an http(s) URL".into()),
                ("watched[0].name".into(), "\"x y\" is not a user".into()),
                ("domains".into(), "name at least one domain".into()),
                ("secret".into(), "printable ASCII".into()),
                ("owner".into(), "unknown".into()),
            ],
        );
        assert!(!f.state.busy);
        for field in HookField::ALL {
            assert_eq!(f.issues_of(field).count(), 1, "{field:?}");
        }
        assert_eq!(
            f.issues_of(HookField::Watched).next(),
            Some("watched[0].name: \"x y\" is not a user")
        );
        assert_eq!(f.state.issues.errors, ["owner: unknown"]);
    }
}
