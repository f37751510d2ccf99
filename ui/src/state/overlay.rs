//! What covers the view: help, the confirm dialog, the command line, a pane or an editor.

use crate::effects::EndpointAction;
use crate::form::DeployForm;
use crate::pager::Pager;
use crate::schedule::ScheduleEditor;
use crate::spec::SpecEditor;

/// What covers the view, if anything. `Esc` closes it.
#[derive(Debug, Clone, PartialEq)]
pub enum Overlay {
    None,
    Help,
    /// A catalog item's recipes or an endpoint's whole resource.
    Describe(Pager),
    /// Cancel is the default button (`yes` false).
    Confirm {
        action: EndpointAction,
        namespace: String,
        name: String,
        yes: bool,
    },
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
            Overlay::Spec(_) | Overlay::Schedule(_) | Overlay::Deploy(_)
        )
    }
}
