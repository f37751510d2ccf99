//! The deploy form: a catalog model (its first recipe that fits) or one of its recipes, into a namespace,
//! with the deploy `config` the API takes. Every issue of the server's answer is shown at once, each beside
//! its field.

use serde_json::{json, Map, Value};

use crate::effects::DeployRequest;
use crate::form_input::{step, type_into, Form, FormState};

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
}

impl Field {
    pub const ALL: [Field; 9] = [
        Field::Namespace,
        Field::Recipe,
        Field::Name,
        Field::Type,
        Field::MinReplica,
        Field::MaxReplica,
        Field::ScaleToZeroTimeout,
        Field::PrivateAccount,
        Field::PrivateRegion,
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
        }
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
        }
    }

    fn numeric(self) -> bool {
        matches!(
            self,
            Field::MinReplica | Field::MaxReplica | Field::ScaleToZeroTimeout
        )
    }
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
        DeployRequest { target, body }
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
            _ => {}
        }
    }

    /// Counts take digits only: what cannot be valid is not typed.
    fn type_key(&mut self, key: &str) {
        let numeric = self.field().numeric();
        if let Some(t) = self.text(self.field()) {
            type_into(t, key, 128, |c| !numeric || c.is_ascii_digit());
        }
    }

    fn to_send(&mut self) -> Option<DeployRequest> {
        Some(self.request())
    }
}

impl crate::form_issues::FormField for Field {
    const ALL: &'static [Self] = &Field::ALL;

    fn path(self) -> &'static str {
        Self::path(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::form_input::FormEdit;

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
        let r = f.edit(FormEdit::Submit).unwrap();
        assert_eq!(r.target, Err("qwen-cpu-llamacpp".to_string()));
        assert_eq!(
            r.body,
            json!({"namespace": "alice", "config": {"name": "qwen-1", "type": "private",
                   "scaling": {"minReplica": 1, "maxReplica": 3},
                   "privateService": {"accountId": "123456789012", "region": "us-east-1"}}})
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
