//! What covers the view: help, the confirm dialog, a secret shown once, the command line, a pane or an editor.
//!
//! Also [`Secret`], the one type a secret from the server is ever held in.

use crate::effects::Effect;
use crate::forms::app::AppForm;
use crate::forms::deploy::DeployForm;
use crate::forms::webhook::WebhookForm;
use crate::pager::Pager;
use crate::schedule::ScheduleEditor;
use crate::spec::SpecEditor;

/// What covers the view, if anything. `Esc` closes it.
#[derive(Debug, Clone, PartialEq)]
pub enum Overlay {
    None,
    /// Every binding; scrolled down this many lines when it does not fit.
    Help(usize),
    /// A catalog item's recipes or an endpoint's whole resource.
    Describe(Pager),
    /// Asks before `asked` runs (an endpoint's or an app's action). Cancel is the default button (`yes` false).
    Confirm {
        asked: Effect,
        yes: bool,
    },
    /// A client secret just made, shown this once until dismissed; dismissing drops it.
    Secret(IssuedSecret),
    /// The new-app form.
    NewApp(Box<AppForm>),
    /// The webhook form, new or edited.
    Webhook(Box<WebhookForm>),
    /// `:` command line.
    Command(String),
    /// The spec editor of an endpoint.
    Spec(Box<SpecEditor>),
    /// The schedule editor of an endpoint.
    Schedule(Box<ScheduleEditor>),
    /// The deploy form of a catalog item.
    Deploy(Box<DeployForm>),
    /// An endpoint's replica output; refreshed every tick while `follow`.
    Logs {
        namespace: String,
        name: String,
        pager: Pager,
        follow: bool,
    },
}

impl Overlay {
    /// The open pager (describe or logs) and, for logs, whether they follow.
    pub(super) fn pager(&mut self) -> Option<(&mut Pager, Option<&mut bool>)> {
        match self {
            Overlay::Describe(p) => Some((p, None)),
            Overlay::Logs { pager, follow, .. } => Some((pager, Some(follow))),
            _ => None,
        }
    }

    /// A form or an editor, which takes every key.
    pub(super) fn is_editor(&self) -> bool {
        matches!(
            self,
            Overlay::Spec(_)
                | Overlay::Schedule(_)
                | Overlay::Deploy(_)
                | Overlay::NewApp(_)
                | Overlay::Webhook(_)
        )
    }
}

/// A client secret as the server gave it. Its `Debug` does not show it, so no log or panic message that
/// formats the state, an action or an effect ever holds it; only the secret popup reads it, through
/// [`Secret::reveal`].
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    pub fn new(secret: String) -> Secret {
        Secret(secret)
    }

    /// The secret itself: for the popup only.
    pub fn reveal(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(…)")
    }
}

/// Whose secret a popup shows: an OAuth app's client secret, or a webhook's signing secret.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SecretKind {
    Client,
    Signing,
}

/// A secret the server just made (an app created or its secret rotated, a webhook created), with what it is
/// the secret of: its name (an app's name, a webhook's URL) and its id (client id, webhook id).
#[derive(Debug, Clone, PartialEq)]
pub struct IssuedSecret {
    pub kind: SecretKind,
    pub of: String,
    pub id: String,
    pub secret: Secret,
}

impl IssuedSecret {
    /// An app's client secret.
    pub fn client(app: String, client_id: String, secret: Secret) -> IssuedSecret {
        IssuedSecret {
            kind: SecretKind::Client,
            of: app,
            id: client_id,
            secret,
        }
    }

    /// A webhook's signing secret (`whsec_…`).
    pub fn signing(url: String, id: String, secret: Secret) -> IssuedSecret {
        IssuedSecret {
            kind: SecretKind::Signing,
            of: url,
            id,
            secret,
        }
    }
}
