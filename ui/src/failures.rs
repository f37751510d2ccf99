//! A failed call as the state takes it: the message for the screen, a refusal with its issues, why a list or
//! the sign-in failed. Imports `state`.

use serde_json::Value;
use switchyard_server::client::ClientError;

use crate::state::{LoadFailure, Refusal, SignInFailure};

/// Whether the server refused the token (401 or 403), as opposed to failing in some other way.
fn refused_token(e: &ClientError) -> bool {
    matches!(e, ClientError::Api { status, .. } if status.as_u16() == 401 || status.as_u16() == 403)
}

/// Why signing in failed: the token refused, or the server not reached.
pub(crate) fn sign_in_failure(e: &ClientError) -> SignInFailure {
    match refused_token(e) {
        true => SignInFailure::Refused(message(e)),
        false => SignInFailure::Unreachable(message(e)),
    }
}

/// A client error for the screen; a refusal of the token starts with its status (`401 …`).
pub(crate) fn message(e: &ClientError) -> String {
    match e {
        ClientError::Api {
            status, message, ..
        } if refused_token(e) => format!("{} {message}", status.as_u16()),
        ClientError::Api { message, .. } => message.clone(),
        // Already says where and why (`nothing answers at URL (Connection refused…)`).
        ClientError::Transport(why) => why.clone(),
        other => other.to_string(),
    }
}

/// A refusal as the screen shows it: the message and every issue of the answer, the `{path, message}` items of
/// `issues` (an invalid body) and the `{field: why}` of `details` (invalid parameters).
pub(crate) fn refusal(e: &ClientError) -> Refusal {
    match e {
        ClientError::Api { message, body, .. } => {
            let text = |v: &Value| match v {
                Value::String(s) => s.clone(),
                Value::Null => String::new(),
                other => other.to_string(),
            };
            let listed = body["issues"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|i| (text(&i["path"]), text(&i["message"])));
            let detailed = body["details"]
                .as_object()
                .into_iter()
                .flatten()
                .map(|(field, why)| (field.clone(), text(why)));
            (message.clone(), listed.chain(detailed).collect())
        }
        other => (message(other), Vec::new()),
    }
}

/// Why a list could not be loaded; a 403 is the server not letting the user see it.
pub(crate) fn load_failure(e: &ClientError) -> LoadFailure {
    match e {
        ClientError::Api {
            status, message, ..
        } if status.as_u16() == 403 => LoadFailure::Forbidden(message.clone()),
        other => LoadFailure::Failed(message(other)),
    }
}

/// Why the servers on the store could not be read; a 401 or 403 is the user not being an instance
/// administrator (the console stops asking).
pub(crate) fn servers_failure(e: &ClientError) -> LoadFailure {
    match refused_token(e) {
        true => LoadFailure::Forbidden(message(e)),
        false => LoadFailure::Failed(message(e)),
    }
}
