//! Endpoint states, what user actions do to them, and which moves the runtime may make.

use std::fmt;

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// State of an endpoint, spelled as the Python client knows them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub enum EndpointState {
    /// Accepted, waiting for the runtime to start it.
    Pending,
    /// Replicas are starting.
    Initializing,
    /// A spec change is rolling out.
    Updating,
    /// The last spec change did not roll out.
    UpdateFailed,
    Running,
    /// Stopped by its owner; only `resume` starts it again.
    Paused,
    Failed,
    /// No replicas; a request or a schedule entry wakes it.
    ScaledToZero,
}

impl EndpointState {
    pub const ALL: [EndpointState; 8] = [
        EndpointState::Pending,
        EndpointState::Initializing,
        EndpointState::Updating,
        EndpointState::UpdateFailed,
        EndpointState::Running,
        EndpointState::Paused,
        EndpointState::Failed,
        EndpointState::ScaledToZero,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            EndpointState::Pending => "pending",
            EndpointState::Initializing => "initializing",
            EndpointState::Updating => "updating",
            EndpointState::UpdateFailed => "updateFailed",
            EndpointState::Running => "running",
            EndpointState::Paused => "paused",
            EndpointState::Failed => "failed",
            EndpointState::ScaledToZero => "scaledToZero",
        }
    }

    /// States in which the runtime keeps (or is bringing up) replicas.
    pub fn is_active(self) -> bool {
        matches!(
            self,
            EndpointState::Pending
                | EndpointState::Initializing
                | EndpointState::Running
                | EndpointState::Updating
                | EndpointState::UpdateFailed
        )
    }

    /// What a user action does, or why it is refused.
    ///
    /// | action        | from                                                   | to / error                 |
    /// |---------------|--------------------------------------------------------|----------------------------|
    /// | pause         | any                                                    | paused                     |
    /// | resume        | paused, scaledToZero, failed, updateFailed             | pending                    |
    /// | resume        | running                                                | error "already running"    |
    /// | resume        | pending, initializing, updating                        | unchanged (already starting) |
    /// | scale-to-zero | running, pending, initializing, updating, updateFailed | scaledToZero               |
    /// | scale-to-zero | scaledToZero                                           | scaledToZero (idempotent)  |
    /// | scale-to-zero | paused, failed                                         | error: resume it first     |
    /// | update        | running                                                | updating                   |
    /// | update        | any other                                              | unchanged                  |
    ///
    /// `resume` from updateFailed restarts the endpoint, as from failed. `scale-to-zero` refuses failed
    /// because waking it on the next request would silently retry a failed deployment.
    pub fn on_action(self, action: LifecycleAction) -> Result<EndpointState, TransitionError> {
        use EndpointState as S;
        use LifecycleAction as A;
        match (action, self) {
            (A::Pause, _) => Ok(S::Paused),
            (A::Resume, S::Paused | S::ScaledToZero | S::Failed | S::UpdateFailed) => {
                Ok(S::Pending)
            }
            (A::Resume, S::Running) => Err(TransitionError::AlreadyRunning),
            // Already on its way up: resuming asks for nothing new, so it is answered, not refused.
            (A::Resume, S::Pending | S::Initializing | S::Updating) => Ok(self),
            (A::ScaleToZero, S::Paused | S::Failed) => Err(TransitionError::ResumeFirst(self)),
            (A::ScaleToZero, _) => Ok(S::ScaledToZero),
            (A::Update, S::Running) => Ok(S::Updating),
            (A::Update, _) => Ok(self),
        }
    }
}

impl fmt::Display for EndpointState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A user action on an endpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LifecycleAction {
    Pause,
    Resume,
    ScaleToZero,
    /// The spec changed.
    Update,
}

/// Why an action is refused. The messages reach the caller (400): the Python client looks for
/// "already running" to treat a resume of a running endpoint as success.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum TransitionError {
    #[error("endpoint is already running")]
    AlreadyRunning,
    #[error("endpoint is {0}; resume it first")]
    ResumeFirst(EndpointState),
}

/// Whether the runtime (reconciler, scaler) may move an endpoint from `from` to `to` on its own. User actions
/// go through [`EndpointState::on_action`] instead. Staying in the same state is always allowed.
///
/// - pending → initializing → running
/// - running → updating → running | updateFailed; updateFailed → updating (next attempt)
/// - running | updateFailed → scaledToZero (idle for scaleToZeroTimeout); any active state → scaledToZero when
///   the bounds in force allow no replica (maxReplica 0)
/// - scaledToZero → initializing (woken by a request or a schedule entry raising minReplica)
/// - any active state (pending, initializing, running, updating, updateFailed) → failed, and scaledToZero →
///   failed when a wake-up cannot start a replica
/// - failed → initializing when the endpoint failed for want of an engine that has been installed since
/// - paused is left only by user actions, and so is failed otherwise.
pub fn can_transition(from: EndpointState, to: EndpointState) -> bool {
    use EndpointState as S;
    if from == to {
        return true;
    }
    if to == S::Failed {
        return from.is_active() || from == S::ScaledToZero;
    }
    if to == S::ScaledToZero {
        return from.is_active();
    }
    matches!(
        (from, to),
        (S::Pending, S::Initializing)
            | (S::Initializing, S::Running)
            | (S::Running, S::Updating)
            | (S::Updating, S::Running | S::UpdateFailed)
            | (S::UpdateFailed, S::Updating)
            | (S::ScaledToZero, S::Initializing)
            | (S::Failed, S::Initializing)
            // Back to waiting, with no replica yet: the engine it needs is being installed.
            | (S::Failed | S::Initializing, S::Pending)
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use EndpointState as S;
    use LifecycleAction as A;

    #[test]
    fn serde_names_are_the_clients() {
        let names: Vec<_> = S::ALL
            .iter()
            .map(|s| serde_json::to_value(s).unwrap())
            .collect();
        assert_eq!(
            names,
            [
                "pending",
                "initializing",
                "updating",
                "updateFailed",
                "running",
                "paused",
                "failed",
                "scaledToZero"
            ]
        );
        for s in S::ALL {
            assert_eq!(serde_json::to_value(s).unwrap(), s.as_str());
        }
    }

    #[test]
    fn action_table() {
        use TransitionError as E;
        let table: [(S, [Result<S, E>; 4]); 8] = [
            // state            pause           resume                          scale-to-zero            update
            (
                S::Pending,
                [
                    Ok(S::Paused),
                    Ok(S::Pending),
                    Ok(S::ScaledToZero),
                    Ok(S::Pending),
                ],
            ),
            (
                S::Initializing,
                [
                    Ok(S::Paused),
                    Ok(S::Initializing),
                    Ok(S::ScaledToZero),
                    Ok(S::Initializing),
                ],
            ),
            (
                S::Updating,
                [
                    Ok(S::Paused),
                    Ok(S::Updating),
                    Ok(S::ScaledToZero),
                    Ok(S::Updating),
                ],
            ),
            (
                S::UpdateFailed,
                [
                    Ok(S::Paused),
                    Ok(S::Pending),
                    Ok(S::ScaledToZero),
                    Ok(S::UpdateFailed),
                ],
            ),
            (
                S::Running,
                [
                    Ok(S::Paused),
                    Err(E::AlreadyRunning),
                    Ok(S::ScaledToZero),
                    Ok(S::Updating),
                ],
            ),
            (
                S::Paused,
                [
                    Ok(S::Paused),
                    Ok(S::Pending),
                    Err(E::ResumeFirst(S::Paused)),
                    Ok(S::Paused),
                ],
            ),
            (
                S::Failed,
                [
                    Ok(S::Paused),
                    Ok(S::Pending),
                    Err(E::ResumeFirst(S::Failed)),
                    Ok(S::Failed),
                ],
            ),
            (
                S::ScaledToZero,
                [
                    Ok(S::Paused),
                    Ok(S::Pending),
                    Ok(S::ScaledToZero),
                    Ok(S::ScaledToZero),
                ],
            ),
        ];
        for (state, expected) in table {
            for (action, want) in [A::Pause, A::Resume, A::ScaleToZero, A::Update]
                .into_iter()
                .zip(expected)
            {
                assert_eq!(state.on_action(action), want, "{state} {action:?}");
            }
        }
    }

    #[test]
    fn refusal_messages() {
        assert!(S::Running
            .on_action(A::Resume)
            .unwrap_err()
            .to_string()
            .contains("already running"));
        assert_eq!(S::Initializing.on_action(A::Resume), Ok(S::Initializing));
        assert!(S::Paused
            .on_action(A::ScaleToZero)
            .unwrap_err()
            .to_string()
            .contains("resume it first"));
    }

    #[test]
    fn runtime_transitions() {
        let allowed = [
            (S::Pending, S::Initializing),
            (S::Initializing, S::Running),
            (S::Running, S::Updating),
            (S::Updating, S::Running),
            (S::Updating, S::UpdateFailed),
            (S::UpdateFailed, S::Updating),
            (S::Running, S::ScaledToZero),
            (S::UpdateFailed, S::ScaledToZero),
            (S::Pending, S::ScaledToZero),
            (S::Initializing, S::ScaledToZero),
            (S::Updating, S::ScaledToZero),
            (S::ScaledToZero, S::Initializing),
            (S::Failed, S::Initializing),
            (S::Failed, S::Pending),
            (S::Initializing, S::Pending),
            (S::ScaledToZero, S::Failed),
            (S::Pending, S::Failed),
            (S::Initializing, S::Failed),
            (S::Running, S::Failed),
            (S::Updating, S::Failed),
            (S::UpdateFailed, S::Failed),
        ];
        for from in S::ALL {
            for to in S::ALL {
                let expected = from == to || allowed.contains(&(from, to));
                assert_eq!(can_transition(from, to), expected, "{from} -> {to}");
            }
        }
    }
}
