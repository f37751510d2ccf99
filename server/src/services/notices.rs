//! Which changes need a person, and what they are told: an endpoint with `notifications.push` or
//! `notifications.email` tells its owner (the user, or the organization's admins) when it runs after
//! a deploy or an update, fails, fails to update, scales to zero or is deleted; a webhook the server
//! disabled tells its owner why. The notices are written in the change's own unit of work.

use crate::model::EndpointState;
use crate::store::{EndpointRecord, NewNotice};

/// The notice an endpoint's move from `before` asks for (`None` before: it was deleted).
pub fn endpoint_notice(
    before: EndpointState,
    rec: &EndpointRecord,
    deleted: bool,
    base: &str,
) -> Option<NewNotice> {
    use EndpointState::*;
    let wants = rec.spec.notifications;
    if !wants.push && !wants.email {
        return None;
    }
    let after = rec.state;
    let (kind, what) = match (before, after) {
        _ if deleted => ("endpoint.deleted", "was deleted"),
        (Pending | Initializing | Updating, Running) => ("endpoint.running", "is running"),
        (b, Failed) if b != Failed => ("endpoint.failed", "failed"),
        (b, UpdateFailed) if b != UpdateFailed => ("endpoint.updateFailed", "could not be updated"),
        (b, ScaledToZero) if b != ScaledToZero => ("endpoint.scaledToZero", "scaled to zero"),
        _ => return None,
    };
    let name = format!("{}/{}", rec.namespace, rec.spec.name);
    let title = format!("Endpoint {name} {what}");
    // A deleted endpoint's last status message says why it was in its last state, not why it is gone.
    let message = rec.message.clone().filter(|_| !deleted);
    let mut body = match deleted {
        true => format!("{title}.\n\nIts last state: {}\n", after.as_str()),
        false => format!("{title}.\n\nState: {}\n", after.as_str()),
    };
    if let Some(m) = &message {
        body.push_str(&format!("Why: {m}\n"));
    }
    if let Some(u) = rec.url.as_ref().filter(|_| !deleted) {
        body.push_str(&format!("URL: {u}\n"));
    }
    body.push_str(&format!("\nSwitchyard at {base}\n"));
    Some(NewNotice {
        kind: kind.into(),
        namespace: rec.namespace.clone(),
        subject: rec.spec.name.clone(),
        message,
        push: wants.push,
        email: wants
            .email
            .then(|| (format!("[Switchyard] {name} {what}"), body)),
        title,
    })
}

/// What the owners of a webhook the server disabled are told, pushed and mailed.
pub fn webhook_disabled(owner: &str, webhook_id: &str, url: &str, reason: &str) -> NewNotice {
    let title = format!("Webhook {webhook_id} was disabled");
    let body = format!(
        "{title}: {reason}.\n\nURL: {url}\nEnable it again once the receiver answers \
         (switchyard webhooks enable {webhook_id}), and replay what it missed \
         (switchyard webhooks replay {webhook_id} --failed-since …).\n"
    );
    NewNotice {
        kind: "webhook.disabled".into(),
        namespace: owner.into(),
        subject: webhook_id.into(),
        message: Some(reason.into()),
        push: true,
        email: Some((format!("[Switchyard] {title}"), body)),
        title,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::endpoint::tests::client_body;
    use crate::model::EndpointSpec;
    use crate::store::Actor;

    fn failed() -> EndpointRecord {
        let mut spec = EndpointSpec::parse(&client_body()).expect("spec");
        spec.notifications.push = true;
        spec.notifications.email = true;
        let at = chrono::Utc::now();
        let actor = Actor {
            id: "u1".into(),
            name: "alice".into(),
        };
        EndpointRecord {
            id: "e1".into(),
            namespace: "alice".into(),
            spec,
            state: EndpointState::Failed,
            message: Some("no engine for this image".into()),
            url: Some("http://127.0.0.1/endpoints/alice/e1".into()),
            ready_replica: 0,
            target_replica: 1,
            created_at: at,
            updated_at: at,
            created_by: actor.clone(),
            updated_by: actor,
            version: 1,
        }
    }

    #[test]
    fn a_failure_says_why_and_a_deletion_does_not_repeat_it() {
        let rec = failed();
        let fail =
            endpoint_notice(EndpointState::Running, &rec, false, "http://sy").expect("notice");
        assert_eq!(fail.kind, "endpoint.failed");
        assert_eq!(fail.message.as_deref(), Some("no engine for this image"));
        let (_, mail) = fail.email.expect("mail");
        assert!(mail.contains("Why: no engine for this image"), "{mail}");

        let gone = endpoint_notice(rec.state, &rec, true, "http://sy").expect("notice");
        assert_eq!(gone.kind, "endpoint.deleted");
        assert_eq!(gone.title, "Endpoint alice/finbert-classifier was deleted");
        assert_eq!(gone.message, None);
        let (subject, mail) = gone.email.expect("mail");
        assert_eq!(subject, "[Switchyard] alice/finbert-classifier was deleted");
        assert!(mail.contains("Its last state: failed"), "{mail}");
        assert!(!mail.contains("Why:") && !mail.contains("URL:"), "{mail}");
    }
}
