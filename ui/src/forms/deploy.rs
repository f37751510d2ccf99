//! The deploy form: a catalog model (its first recipe that fits) or one of its recipes, into a namespace,
//! with the deploy `config` the API takes, and the endpoint's two notification switches (`notifications.push`
//! and `.email` of its spec, which a deploy body does not take: they are set by an update once the endpoint
//! is made). Every issue of the server's answer is shown at once, each beside its field.

use serde_json::{json, Map, Value};

use super::input::{step, type_into, Form, FormState};
use crate::effects::DeployRequest;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Field {
    Namespace,
    Recipe,
    Name,
    Type,
    MinReplica,
    MaxReplica,
    ScaleToZeroTimeout,
    PrivateAccount,
    PrivateRegion,
    NotifyPush,
    NotifyEmail,
}

impl Field {
    pub const ALL: [Field; 11] = [
        Field::Namespace,
        Field::Recipe,
        Field::Name,
        Field::Type,
        Field::MinReplica,
        Field::MaxReplica,
        Field::ScaleToZeroTimeout,
        Field::PrivateAccount,
        Field::PrivateRegion,
        Field::NotifyPush,
        Field::NotifyEmail,
    ];

    pub fn label(self) -> &'static str {
        match self {
            Field::Namespace => "namespace",
            Field::Recipe => "recipe",
            Field::Name => "name",
            Field::Type => "type",
            Field::MinReplica => "min replicas",
            Field::MaxReplica => "max replicas",
            Field::ScaleToZeroTimeout => "scale to zero after (min)",
            Field::PrivateAccount => "private: account id",
            Field::PrivateRegion => "private: region",
            Field::NotifyPush => "notify me here (push)",
            Field::NotifyEmail => "notify me by mail",
        }
    }

    /// A yes/no switch: `space` flips it, `y` and `n` set it.
    pub fn switch(self) -> bool {
        matches!(self, Field::NotifyPush | Field::NotifyEmail)
    }

    /// The body path the server names in its issues for this field (`recipe` is the one its messages name).
    fn path(self) -> &'static str {
        match self {
            Field::Namespace => "namespace",
            Field::Recipe => "recipe",
            Field::Name => "config.name",
            Field::Type => "config.type",
            Field::MinReplica => "config.scaling.minReplica",
            Field::MaxReplica => "config.scaling.maxReplica",
            Field::ScaleToZeroTimeout => "config.scaling.scaleToZeroTimeout",
            Field::PrivateAccount => "config.privateService.accountId",
            Field::PrivateRegion => "config.privateService.region",
            Field::NotifyPush => "notifications.push",
            Field::NotifyEmail => "notifications.email",
        }
    }

    fn numeric(self) -> bool {
        matches!(
            self,
            Field::MinReplica | Field::MaxReplica | Field::ScaleToZeroTimeout
        )
    }
}

fn yes_no(on: bool) -> String {
    if on { "yes" } else { "no" }.to_string()
}

const TYPES: [&str; 3] = ["authenticated", "public", "private"];
const REGIONS: [&str; 2] = ["us-east-1", "eu-west-1"];

#[derive(Debug, Clone, PartialEq)]
pub struct DeployForm {
    pub repo_id: String,
    /// Recipe ids to choose from; index 0 means "the model's first recipe that fits".
    pub recipes: Vec<String>,
    pub recipe: usize,
    pub namespace: String,
    pub name: String,
    pub kind: usize,
    pub min: String,
    pub max: String,
    pub timeout: String,
    pub account: String,
    pub region: usize,
    /// The endpoint's `notifications`: pushed to the owner (the console's status line and `:notifications`),
    /// and mailed. Push is on by default: it is how the console tells of the endpoint's progress.
    pub push: bool,
    pub email: bool,
    /// The focused field, the send under way, the server's issues.
    pub state: FormState<Field>,
}

impl DeployForm {
    pub fn new(repo_id: &str, recipes: Vec<String>, namespace: &str) -> DeployForm {
        DeployForm {
            repo_id: repo_id.to_string(),
            recipes,
            recipe: 0,
            namespace: namespace.to_string(),
            name: String::new(),
            kind: 0,
            min: String::new(),
            max: String::new(),
            timeout: String::new(),
            account: String::new(),
            region: 0,
            push: true,
            email: false,
            state: FormState::default(),
        }
    }

    /// The value shown for a field.
    pub fn value(&self, f: Field) -> String {
        match f {
            Field::Namespace => self.namespace.clone(),
            Field::Recipe => match self.recipe {
                0 => "(first that fits)".to_string(),
                i => self.recipes.get(i - 1).cloned().unwrap_or_default(),
            },
            Field::Name => self.name.clone(),
            Field::Type => TYPES[self.kind].to_string(),
            Field::MinReplica => self.min.clone(),
            Field::MaxReplica => self.max.clone(),
            Field::ScaleToZeroTimeout => self.timeout.clone(),
            Field::PrivateAccount => self.account.clone(),
            Field::PrivateRegion => REGIONS[self.region].to_string(),
            Field::NotifyPush => yes_no(self.push),
            Field::NotifyEmail => yes_no(self.email),
        }
    }

    /// The switch of a yes/no field.
    fn switch(&mut self, f: Field) -> Option<&mut bool> {
        match f {
            Field::NotifyPush => Some(&mut self.push),
            Field::NotifyEmail => Some(&mut self.email),
            _ => None,
        }
    }

    fn text(&mut self, f: Field) -> Option<&mut String> {
        match f {
            Field::Namespace => Some(&mut self.namespace),
            Field::Name => Some(&mut self.name),
            Field::MinReplica => Some(&mut self.min),
            Field::MaxReplica => Some(&mut self.max),
            Field::ScaleToZeroTimeout => Some(&mut self.timeout),
            Field::PrivateAccount => Some(&mut self.account),
            _ => None,
        }
    }

    pub fn request(&self) -> DeployRequest {
        let mut config = Map::new();
        if !self.name.is_empty() {
            config.insert("name".into(), json!(self.name));
        }
        config.insert("type".into(), json!(TYPES[self.kind]));
        let mut scaling = Map::new();
        for (key, text) in [
            ("minReplica", &self.min),
            ("maxReplica", &self.max),
            ("scaleToZeroTimeout", &self.timeout),
        ] {
            if let Ok(n) = text.parse::<u64>() {
                scaling.insert(key.into(), json!(n));
            }
        }
        if !scaling.is_empty() {
            config.insert("scaling".into(), Value::Object(scaling));
        }
        if TYPES[self.kind] == "private" {
            config.insert(
                "privateService".into(),
                json!({"accountId": self.account, "region": REGIONS[self.region]}),
            );
        }
        let body = json!({"namespace": self.namespace, "config": config});
        let target = match self.recipe {
            0 => Ok(self.repo_id.clone()),
            i => Err(self.recipes.get(i - 1).cloned().unwrap_or_default()),
        };
        let notifications = (self.push || self.email)
            .then(|| json!({"notifications": {"push": self.push, "email": self.email}}));
        DeployRequest {
            target,
            body,
            notifications,
        }
    }
}

impl Form for DeployForm {
    type Sent = DeployRequest;
    type Field = Field;

    fn state(&self) -> &FormState<Field> {
        &self.state
    }

    fn state_mut(&mut self) -> &mut FormState<Field> {
        &mut self.state
    }

    fn choose(&mut self, forward: bool) {
        match self.field() {
            Field::Recipe => self.recipe = step(self.recipe, self.recipes.len() + 1, forward),
            Field::Type => self.kind = step(self.kind, TYPES.len(), forward),
            Field::PrivateRegion => self.region = step(self.region, REGIONS.len(), forward),
            f => {
                if let Some(on) = self.switch(f) {
                    *on = !*on;
                }
            }
        }
    }

    /// Counts take digits only: what cannot be valid is not typed. A switch takes `space`, `y` and `n`.
    fn type_key(&mut self, key: &str) {
        let field = self.field();
        if let Some(on) = self.switch(field) {
            match key {
                "space" => *on = !*on,
                "y" | "n" => *on = key == "y",
                _ => {}
            }
            return;
        }
        let numeric = self.field().numeric();
        if let Some(t) = self.text(self.field()) {
            type_into(t, key, 128, |c| !numeric || c.is_ascii_digit());
        }
    }

    fn to_send(&mut self) -> Option<DeployRequest> {
        Some(self.request())
    }
}

impl super::issues::FormField for Field {
    const ALL: &'static [Self] = &Field::ALL;

    fn path(self) -> &'static str {
        Self::path(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::forms::input::FormEdit;

    fn type_in(form: &mut DeployForm, text: &str) {
        for c in text.chars() {
            form.edit(FormEdit::Type(&c.to_string()));
        }
    }

    #[test]
    fn the_form_builds_the_deploy_body() {
        let mut f = DeployForm::new(
            "Qwen/Qwen2.5-7B",
            vec!["qwen-gpu-vllm".into(), "qwen-cpu-llamacpp".into()],
            "alice",
        );
        let r = f.request();
        assert_eq!(r.target, Ok("Qwen/Qwen2.5-7B".to_string()));
        assert_eq!(
            r.body,
            json!({"namespace": "alice", "config": {"type": "authenticated"}})
        );
        // Pushed notifications by default; set by an update once the endpoint is made.
        assert_eq!(
            r.notifications,
            Some(json!({"notifications": {"push": true, "email": false}}))
        );
        f.edit(FormEdit::NextField);
        f.edit(FormEdit::NextChoice);
        f.edit(FormEdit::NextChoice);
        f.edit(FormEdit::NextField);
        type_in(&mut f, "qwen-1");
        f.edit(FormEdit::NextField);
        f.edit(FormEdit::PrevChoice);
        f.edit(FormEdit::NextField);
        type_in(&mut f, "1x");
        f.edit(FormEdit::NextField);
        type_in(&mut f, "3");
        f.edit(FormEdit::NextField);
        f.edit(FormEdit::NextField);
        type_in(&mut f, "123456789012");
        // Both switches: `n` turns push off, `space` turns mail on.
        f.edit(FormEdit::NextField);
        f.edit(FormEdit::NextField);
        type_in(&mut f, "n");
        f.edit(FormEdit::NextField);
        f.edit(FormEdit::Type("space"));
        assert_eq!(
            (f.value(Field::NotifyPush), f.value(Field::NotifyEmail)),
            ("no".into(), "yes".into())
        );
        let r = f.edit(FormEdit::Submit).unwrap();
        assert_eq!(r.target, Err("qwen-cpu-llamacpp".to_string()));
        assert_eq!(
            r.body,
            json!({"namespace": "alice", "config": {"name": "qwen-1", "type": "private",
                   "scaling": {"minReplica": 1, "maxReplica": 3},
                   "privateService": {"accountId": "123456789012", "region": "us-east-1"}}})
        );
        assert_eq!(
            r.notifications,
            Some(json!({"notifications": {"push": false, "email": true}}))
        );
        assert!(f.state.busy);
        assert!(
            f.edit(FormEdit::Submit).is_none(),
            "no second submit while one is under way"
        );
    }

    #[test]
    fn every_issue_of_the_answer_goes_beside_its_field() {
        let mut f = DeployForm::new("a/b", vec![], "alice");
        f.state.busy = true;
        f.refused(
            "invalid request body: config.name: … (and 3 more)".into(),
            &[
                (
                    "config.name".into(),
                    "lowercase letters, digits and '-' only".into(),
                ),
                (
                    "config.scaling.maxReplica".into(),
                    "must be a whole number".into(),
                ),
                (
                    "config.privateService".into(),
                    "is required when type is `private`".into(),
                ),
                ("ggufFile".into(), "unknown field".into()),
            ],
        );
        assert!(!f.state.busy);
        assert_eq!(
            f.issues_of(Field::Name).collect::<Vec<_>>(),
            ["lowercase letters, digits and '-' only"]
        );
        assert_eq!(
            f.issues_of(Field::MaxReplica).collect::<Vec<_>>(),
            ["must be a whole number"]
        );
        assert_eq!(
            f.issues_of(Field::PrivateAccount).collect::<Vec<_>>(),
            ["config.privateService: is required when type is `private`"]
        );
        assert_eq!(f.state.issues.errors, ["ggufFile: unknown field"]);
        f.refused("no compatible compute found".into(), &[]);
        assert!(f.state.issues.by_field.is_empty());
        assert_eq!(f.state.issues.errors, ["no compatible compute found"]);
        f.refused("recipe \"x\" not found".into(), &[]);
        assert_eq!(
            f.issues_of(Field::Recipe).collect::<Vec<_>>(),
            ["recipe \"x\" not found"]
        );
    }
}
