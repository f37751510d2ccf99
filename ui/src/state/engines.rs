//! What the server can run: loading its answer (which catalog recipes run here), offering to install the
//! built-in engine a deploy needs, and following an install in the status line until it ends.

use super::model::State;
use super::overlay::Overlay;
use super::rows::{EngineInstall, EngineMarks, Recipe};
use crate::effects::{DeployRequest, Effect};

/// Asks what the server can run, when someone is signed in (the answer needs a token).
pub(super) fn load(state: &State) -> Vec<Effect> {
    if state.user.is_none() {
        return Vec::new();
    }
    vec![Effect::LoadEngines {
        delay: 0,
        polled: false,
    }]
}

/// The next poll of an install being followed.
fn poll() -> Effect {
    Effect::LoadEngines {
        delay: 1,
        polled: true,
    }
}

/// The server's answer: the marks, and an install's progress or end in the status line. A server that does
/// not say (older, or refusing) leaves the marks as they were.
pub(super) fn on_loaded(
    state: &mut State,
    polled: bool,
    result: Result<EngineMarks, String>,
) -> Vec<Effect> {
    let Ok(marks) = result else {
        if polled {
            state.engines_followed = false;
        }
        return Vec::new();
    };
    // The last install that ended since the previous answer says so.
    let was_running = state.engines.installs.iter().filter(|was| was.running);
    let mut ended = was_running.filter_map(|was| {
        marks
            .installs
            .iter()
            .find(|now| now.name == was.name && !now.running)
    });
    if let Some(done) = ended.next_back().cloned() {
        state.message = Some(match done.error {
            Some(e) => (format!("installing {} failed: {e}", done.name), true),
            None => (
                format!(
                    "{} is installed: endpoints waiting for it start now",
                    done.name
                ),
                false,
            ),
        });
    }
    let running = marks.installs.iter().find(|i| i.running).cloned();
    state.engines = marks;
    match running {
        Some(i) => {
            state.message = Some((
                format!("installing {}: {}% {}", i.name, i.percent, i.step),
                false,
            ));
            if polled || !state.engines_followed {
                state.engines_followed = true;
                return vec![poll()];
            }
            Vec::new()
        }
        None => {
            if polled {
                state.engines_followed = false;
            }
            Vec::new()
        }
    }
}

/// The built-in engine a deploy needs first: the recipe's, or for a model (its accelerator, if the form
/// names one) the first recipe's that would run once installed, when none of them runs here already.
pub(super) fn needed_for(state: &State, request: &DeployRequest) -> Option<String> {
    let recipes: Vec<&Recipe> = match &request.target {
        Err(public_id) => state
            .catalog
            .iter()
            .flat_map(|c| &c.recipes)
            .filter(|r| r.id == *public_id)
            .collect(),
        Ok(repo_id) => {
            let accelerator = request.body["accelerator"].as_str();
            state
                .catalog
                .iter()
                .filter(|c| c.repo_id == *repo_id)
                .flat_map(|c| &c.recipes)
                .filter(|r| accelerator.is_none_or(|a| r.accelerator == a))
                .collect()
        }
    };
    state.engines.needed(&recipes)
}

/// After a deploy whose engine is missing: the dialog that offers to install it (cancel by default).
pub(super) fn offer_install(state: &mut State, endpoint: &str) {
    if let Some(name) = state.install_after_deploy.take() {
        state.overlay = Overlay::Confirm {
            asked: Effect::InstallEngine {
                name,
                endpoint: endpoint.to_string(),
            },
            yes: false,
        };
    }
}

/// The server took the install (followed from now on) or refused it.
pub(super) fn on_install_started(state: &mut State, result: Result<String, String>) -> Vec<Effect> {
    match result {
        Ok(name) => {
            state.message = Some((format!("installing {name}…"), false));
            // Running from now on, as far as the console knows: an install that ends before the first
            // poll is still told.
            state.engines.installs.retain(|i| i.name != name);
            state.engines.installs.push(EngineInstall {
                name,
                running: true,
                ..Default::default()
            });
            if state.engines_followed {
                return Vec::new();
            }
            state.engines_followed = true;
            vec![poll()]
        }
        Err(e) => {
            state.message = Some((format!("install: {e}"), true));
            Vec::new()
        }
    }
}
