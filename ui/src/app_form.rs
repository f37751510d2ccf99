//! The new-app form: an OAuth app's name, redirect URIs, scopes and whether it is public, as the create body
//! the API takes. Every issue of the server's answer is shown at once, each under its field.
//!
//! Imports nothing of the crate.

use serde_json::{json, Map, Value};

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

    /// The field a server path or message is about, if any.
    fn of(text: &str) -> Option<AppField> {
        AppField::ALL.into_iter().find(|f| {
            text.strip_prefix(f.path())
                .is_some_and(|rest| rest.is_empty() || rest.starts_with(['.', '[', ':', ' ']))
        })
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
    pub focus: usize,
    /// Every issue of the server's last answer, with the field it is about.
    pub issues: Vec<(AppField, String)>,
    /// What the server said that is about no one field.
    pub errors: Vec<String>,
    /// Sent, waiting for the server.
    pub busy: bool,
}

impl AppForm {
    pub fn new(owner: Option<String>) -> AppForm {
        AppForm {
            owner,
            name: String::new(),
            redirect_uris: String::new(),
            scopes: "openid profile".to_string(),
            public: false,
            focus: 0,
            issues: Vec::new(),
            errors: Vec::new(),
            busy: false,
        }
    }

    pub fn field(&self) -> AppField {
        AppField::ALL[self.focus]
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

    /// A key while the form is open. `Some(body)` when the form is submitted.
    pub fn on_key(&mut self, key: &str) -> Option<Value> {
        let f = self.field();
        let n = AppField::ALL.len();
        match key {
            "down" | "tab" => self.focus = (self.focus + 1) % n,
            "up" | "backtab" => self.focus = (self.focus + n - 1) % n,
            "left" | "right" | "space" | "y" | "n" if f == AppField::Public => {
                self.public = match key {
                    "y" => true,
                    "n" => false,
                    _ => !self.public,
                }
            }
            "backspace" => {
                if let Some(t) = self.text(f) {
                    t.pop();
                }
            }
            "enter" if !self.busy => {
                self.busy = true;
                self.issues.clear();
                self.errors.clear();
                return Some(self.body());
            }
            k if k.chars().count() == 1 || k == "space" => {
                let c = if k == "space" {
                    ' '
                } else {
                    k.chars().next().unwrap_or(' ')
                };
                if let Some(t) = self.text(f) {
                    if t.len() < MAX_TEXT {
                        t.push(c);
                    }
                }
            }
            _ => {}
        }
        None
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

    /// The server refused the app: each of its issues goes under its field (a path with an index keeps it,
    /// `redirectUris[1]: …`), and a bare message naming a field goes under that field too.
    pub fn refused(&mut self, message: String, issues: &[(String, String)]) {
        self.busy = false;
        crate::form_issues::sort(message, issues, &mut self.issues, &mut self.errors);
    }

    /// The issues about a field.
    pub fn issues_of(&self, f: AppField) -> impl Iterator<Item = &str> {
        crate::form_issues::of(&self.issues, f)
    }
}

impl crate::form_issues::FormField for AppField {
    fn of(text: &str) -> Option<Self> {
        Self::of(text)
    }

    fn path(self) -> &'static str {
        Self::path(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn type_in(form: &mut AppForm, text: &str) {
        for c in text.chars() {
            form.on_key(&if c == ' ' {
                "space".to_string()
            } else {
                c.to_string()
            });
        }
    }

    #[test]
    fn the_form_builds_the_create_body() {
        let mut f = AppForm::new(Some("acme".into()));
        type_in(&mut f, "Web app");
        f.on_key("tab");
        type_in(&mut f, "https://app.example/cb  http://127.0.0.1/cb");
        f.on_key("tab");
        type_in(&mut f, " email");
        f.on_key("tab");
        f.on_key("space");
        let body = f.on_key("enter").unwrap();
        assert_eq!(
            body,
            json!({"owner": "acme", "name": "Web app",
                   "redirectUris": ["https://app.example/cb", "http://127.0.0.1/cb"],
                   "scopes": ["openid", "profile", "email"], "public": true})
        );
        assert!(f.busy);
        assert!(
            f.on_key("enter").is_none(),
            "no second submit while one is under way"
        );
        // The caller's own app names no owner.
        let body = AppForm::new(None).body();
        assert!(body.get("owner").is_none(), "{body}");
    }

    #[test]
    fn every_issue_is_kept_under_its_field() {
        let mut f = AppForm::new(None);
        f.busy = true;
        f.refused(
            "invalid request body".into(),
            &[
                ("name".into(), "must be 1 to 100 characters".into()),
                ("redirectUris[1]".into(), "has no host".into()),
                ("scopes[0]".into(), "unknown scope \"everything\"".into()),
                ("homepageUrl".into(), "not a URL".into()),
            ],
        );
        assert!(!f.busy);
        assert_eq!(
            f.issues_of(AppField::Name).collect::<Vec<_>>(),
            ["must be 1 to 100 characters"]
        );
        assert_eq!(
            f.issues_of(AppField::RedirectUris).collect::<Vec<_>>(),
            ["redirectUris[1]: has no host"]
        );
        assert_eq!(f.issues_of(AppField::Scopes).count(), 1);
        assert_eq!(f.errors, ["homepageUrl: not a URL"]);
        // A bare message that names a field goes under it; any other is the form's.
        f.refused("scopes: an app needs at least one scope".into(), &[]);
        assert_eq!(f.issues_of(AppField::Scopes).count(), 1);
        assert!(f.errors.is_empty());
        f.refused("you may not manage the apps of \"acme\"".into(), &[]);
        assert_eq!(f.errors, ["you may not manage the apps of \"acme\""]);
        assert!(f.issues.is_empty());
    }
}
