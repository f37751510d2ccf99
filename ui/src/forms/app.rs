//! The new-app form: an OAuth app's name, redirect URIs, scopes and whether it is public, as the create body
//! the API takes. Every issue of the server's answer is shown at once, each under its field.
//!
//! Imports `forms::input` and `forms::issues`.

use serde_json::{json, Map, Value};

use super::input::{type_into, Form, FormState};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AppField {
    Name,
    RedirectUris,
    Scopes,
    Public,
}

impl AppField {
    pub const ALL: [AppField; 4] = [
        AppField::Name,
        AppField::RedirectUris,
        AppField::Scopes,
        AppField::Public,
    ];

    pub fn label(self) -> &'static str {
        match self {
            AppField::Name => "name",
            AppField::RedirectUris => "redirect URIs (space-separated)",
            AppField::Scopes => "scopes (space-separated)",
            AppField::Public => "public (no secret, PKCE only)",
        }
    }

    /// The body field the server names in its issues (`redirectUris[1]`) and in its messages
    /// (`scopes: an app needs at least one scope`).
    fn path(self) -> &'static str {
        match self {
            AppField::Name => "name",
            AppField::RedirectUris => "redirectUris",
            AppField::Scopes => "scopes",
            AppField::Public => "public",
        }
    }
}

/// Longest text a field takes: the server's own limits are far below it.
const MAX_TEXT: usize = 4096;

#[derive(Debug, Clone, PartialEq)]
pub struct AppForm {
    /// The namespace the app is for (`None`: the signed-in user).
    pub owner: Option<String>,
    pub name: String,
    pub redirect_uris: String,
    pub scopes: String,
    pub public: bool,
    /// The focused field, the send under way, the server's issues.
    pub state: FormState<AppField>,
}

impl AppForm {
    pub fn new(owner: Option<String>) -> AppForm {
        AppForm {
            owner,
            name: String::new(),
            redirect_uris: String::new(),
            scopes: "openid profile".to_string(),
            public: false,
            state: FormState::default(),
        }
    }

    /// The value shown for a field.
    pub fn value(&self, f: AppField) -> String {
        match f {
            AppField::Name => self.name.clone(),
            AppField::RedirectUris => self.redirect_uris.clone(),
            AppField::Scopes => self.scopes.clone(),
            AppField::Public => if self.public { "yes" } else { "no" }.to_string(),
        }
    }

    fn text(&mut self, f: AppField) -> Option<&mut String> {
        match f {
            AppField::Name => Some(&mut self.name),
            AppField::RedirectUris => Some(&mut self.redirect_uris),
            AppField::Scopes => Some(&mut self.scopes),
            AppField::Public => None,
        }
    }

    /// The create body: the lists split on spaces; the owner only when it is not the caller.
    pub fn body(&self) -> Value {
        let words = |s: &str| -> Vec<String> { s.split_whitespace().map(str::to_string).collect() };
        let mut body = Map::new();
        if let Some(owner) = &self.owner {
            body.insert("owner".into(), json!(owner));
        }
        body.insert("name".into(), json!(self.name.trim()));
        body.insert("redirectUris".into(), json!(words(&self.redirect_uris)));
        body.insert("scopes".into(), json!(words(&self.scopes)));
        body.insert("public".into(), json!(self.public));
        Value::Object(body)
    }
}

impl Form for AppForm {
    type Sent = Value;
    type Field = AppField;

    fn state(&self) -> &FormState<AppField> {
        &self.state
    }

    fn state_mut(&mut self) -> &mut FormState<AppField> {
        &mut self.state
    }

    fn choose(&mut self, _forward: bool) {
        if self.field() == AppField::Public {
            self.public = !self.public;
        }
    }

    /// Into a text field; on `public`, `space` switches it and `y` or `n` sets it.
    fn type_key(&mut self, key: &str) {
        match (self.field(), key) {
            (AppField::Public, "space") => self.choose(true),
            (AppField::Public, "y" | "n") => self.public = key == "y",
            (f, key) => {
                if let Some(t) = self.text(f) {
                    type_into(t, key, MAX_TEXT, |_| true);
                }
            }
        }
    }

    fn to_send(&mut self) -> Option<Value> {
        Some(self.body())
    }
}

impl super::issues::FormField for AppField {
    const ALL: &'static [Self] = &AppField::ALL;

    fn path(self) -> &'static str {
        Self::path(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::forms::input::FormEdit;

    fn type_in(form: &mut AppForm, text: &str) {
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
    fn the_form_builds_the_create_body() {
        let mut f = AppForm::new(Some("acme".into()));
        type_in(&mut f, "Web app");
        f.edit(FormEdit::NextField);
        type_in(&mut f, "https://app.example/cb  http://127.0.0.1/cb");
        f.edit(FormEdit::NextField);
        type_in(&mut f, " email");
        f.edit(FormEdit::NextField);
        f.edit(FormEdit::Type("space"));
        let body = f.edit(FormEdit::Submit).unwrap();
        assert_eq!(
            body,
            json!({"owner": "acme", "name": "Web app",
                   "redirectUris": ["https://app.example/cb", "http://127.0.0.1/cb"],
                   "scopes": ["openid", "profile", "email"], "public": true})
        );
        assert!(f.state.busy);
        assert!(
            f.edit(FormEdit::Submit).is_none(),
            "no second submit while one is under way"
        );
        // The caller's own app names no owner.
        let body = AppForm::new(None).body();
        assert!(body.get("owner").is_none(), "{body}");
    }

    #[test]
    fn every_issue_is_kept_under_its_field() {
        let mut f = AppForm::new(None);
        f.state.busy = true;
        f.refused(
            "invalid request body".into(),
            &[
                ("name".into(), "must be 1 to 100 characters".into()),
                ("redirectUris[1]".into(), "has no host".into()),
                ("scopes[0]".into(), "unknown scope \"everything\"".into()),
                ("homepageUrl".into(), "not a URL".into()),
            ],
        );
        assert!(!f.state.busy);
        assert_eq!(
            f.issues_of(AppField::Name).collect::<Vec<_>>(),
            ["must be 1 to 100 characters"]
        );
        assert_eq!(
            f.issues_of(AppField::RedirectUris).collect::<Vec<_>>(),
            ["redirectUris[1]: has no host"]
        );
        assert_eq!(f.issues_of(AppField::Scopes).count(), 1);
        assert_eq!(f.state.issues.errors, ["homepageUrl: not a URL"]);
        // A bare message that names a field goes under it; any other is the form's.
        f.refused("scopes: an app needs at least one scope".into(), &[]);
        assert_eq!(f.issues_of(AppField::Scopes).count(), 1);
        assert!(f.state.issues.errors.is_empty());
        f.refused("you may not manage the apps of \"acme\"".into(), &[]);
        assert_eq!(
            f.state.issues.errors,
            ["you may not manage the apps of \"acme\""]
        );
        assert!(f.state.issues.by_field.is_empty());
    }
}
