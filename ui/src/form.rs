//! The deploy form: a catalog model (its first recipe that fits) or one of its recipes, into a namespace,
//! with the deploy `config` the API takes. The server's validation issues are shown beside their fields.

use serde_json::{json, Map, Value};

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

    /// The body path the server names in its issues for this field.
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
    pub focus: usize,
    /// Issues from the server's last answer: (field, message); a message without a field goes to `error`.
    pub issues: Vec<(Field, String)>,
    pub error: Option<String>,
    pub busy: bool,
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
            focus: 0,
            issues: Vec::new(),
            error: None,
            busy: false,
        }
    }

    pub fn field(&self) -> Field {
        Field::ALL[self.focus]
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

    /// A key while the form is open. `Some(request)` when the form is submitted.
    pub fn on_key(&mut self, key: &str) -> Option<DeployRequest> {
        let f = self.field();
        match key {
            "down" | "tab" => self.focus = (self.focus + 1) % Field::ALL.len(),
            "up" | "backtab" => self.focus = (self.focus + Field::ALL.len() - 1) % Field::ALL.len(),
            "left" | "right" => {
                let step = |i: usize, n: usize| {
                    if key == "right" {
                        (i + 1) % n
                    } else {
                        (i + n - 1) % n
                    }
                };
                match f {
                    Field::Recipe => self.recipe = step(self.recipe, self.recipes.len() + 1),
                    Field::Type => self.kind = step(self.kind, TYPES.len()),
                    Field::PrivateRegion => self.region = step(self.region, REGIONS.len()),
                    _ => {}
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
                self.error = None;
                return Some(self.request());
            }
            k if k.chars().count() == 1 || k == "space" => {
                let c = if k == "space" {
                    ' '
                } else {
                    k.chars().next().unwrap_or(' ')
                };
                // Counts take digits only: what cannot be valid is not typed.
                if f.numeric() && !c.is_ascii_digit() {
                    return None;
                }
                if let Some(t) = self.text(f) {
                    if t.len() < 128 {
                        t.push(c);
                    }
                }
            }
            _ => {}
        }
        None
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

    /// The server refused the deploy: its issues go beside their fields.
    pub fn refused(&mut self, message: String, issues: &[(String, String)]) {
        self.busy = false;
        self.issues = issues
            .iter()
            .filter_map(|(path, m)| {
                Field::ALL
                    .iter()
                    .find(|f| path == f.path() || path.starts_with(&format!("{}.", f.path())))
                    .map(|f| (*f, m.clone()))
            })
            .collect();
        if self.issues.len() < issues.len() || issues.is_empty() {
            self.error = Some(message);
        }
    }

    pub fn issue(&self, f: Field) -> Option<&str> {
        self.issues
            .iter()
            .find(|(g, _)| *g == f)
            .map(|(_, m)| m.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn type_in(form: &mut DeployForm, text: &str) {
        for c in text.chars() {
            form.on_key(&c.to_string());
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
        f.on_key("down");
        f.on_key("right");
        f.on_key("right");
        f.on_key("down");
        type_in(&mut f, "qwen-1");
        f.on_key("down");
        f.on_key("left");
        f.on_key("down");
        type_in(&mut f, "1x");
        f.on_key("down");
        type_in(&mut f, "3");
        f.on_key("down");
        f.on_key("down");
        type_in(&mut f, "123456789012");
        let r = f.on_key("enter").unwrap();
        assert_eq!(r.target, Err("qwen-cpu-llamacpp".to_string()));
        assert_eq!(
            r.body,
            json!({"namespace": "alice", "config": {"name": "qwen-1", "type": "private",
                   "scaling": {"minReplica": 1, "maxReplica": 3},
                   "privateService": {"accountId": "123456789012", "region": "us-east-1"}}})
        );
        assert!(f.busy);
        assert!(
            f.on_key("enter").is_none(),
            "no second submit while one is under way"
        );
    }

    #[test]
    fn server_issues_land_beside_their_fields() {
        let mut f = DeployForm::new("a/b", vec![], "alice");
        f.busy = true;
        f.refused(
            "invalid request body".into(),
            &[
                (
                    "config.name".into(),
                    "lowercase letters, digits and '-' only".into(),
                ),
                (
                    "config.scaling.maxReplica".into(),
                    "must be at least minReplica".into(),
                ),
            ],
        );
        assert!(!f.busy);
        assert_eq!(
            f.issue(Field::Name),
            Some("lowercase letters, digits and '-' only")
        );
        assert_eq!(
            f.issue(Field::MaxReplica),
            Some("must be at least minReplica")
        );
        assert_eq!(f.error, None);
        f.refused("no compatible compute found".into(), &[]);
        assert_eq!(f.error.as_deref(), Some("no compatible compute found"));
    }
}
