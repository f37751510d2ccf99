//! One attempt of a webhook's delivery, as the live deliveries view shows it: what its event is about and
//! what changed (read off the payload sent), its details (the request sent and the answer), and what it
//! stands for now (superseded by a later attempt, due, held by the circuit breaker).

use chrono::{DateTime, Utc};
use serde_json::Value;

use super::rows::{clock, instant, plain, search_text, time, WebhookRow};

/// One attempt, as parsed from `GET …/deliveries`.
#[derive(Debug, Clone, PartialEq)]
pub struct DeliveryRow {
    /// Orders attempts: the newest seen is where following resumes.
    pub seq: i64,
    pub delivery_id: String,
    /// The event's id: the `webhook-id` header of every attempt of it.
    pub event_id: String,
    /// `2026-11-22 11:31:00` (UTC), and the instant itself.
    pub at: String,
    pub started: Option<DateTime<Utc>>,
    /// `scope/action`, as the payload's `event` says.
    pub event: String,
    /// What the event is about: `endpoint admin/e1`, `model acme/m`.
    pub subject: String,
    /// What changed: `pending → running`, `created`, `changed: license`.
    pub change: String,
    pub attempt: i64,
    pub status_code: Option<i64>,
    pub duration_ms: i64,
    /// Empty when the attempt succeeded.
    pub error_class: String,
    pub error: String,
    pub response: String,
    /// When the next attempt was due after this one, as planned then.
    pub next_attempt: Option<DateTime<Utc>>,
    /// A replay, not a scheduled attempt.
    pub manual: bool,
    /// The delivery's state when this row was read (pending, sending, succeeded, failed, cancelled).
    pub state: String,
    /// The body sent (null from a server that does not say).
    pub payload: Value,
    /// What `/` searches, lowercased once.
    search: String,
}

/// What a row says of its attempt now: the state shown, and the next attempt's time when one is planned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Standing {
    pub state: String,
    pub next: String,
}

/// What an event is about, from the event's namespace and subject (the payload's, from a server that does not
/// send them).
fn subject_of(attempt: &Value, scope: &str) -> String {
    let (namespace, subject) = (plain(&attempt["namespace"]), plain(&attempt["subject"]));
    let payload = &attempt["payload"];
    let named = match scope.split('.').next().unwrap_or_default() {
        "endpoint" if !subject.is_empty() => format!("endpoint {namespace}/{subject}"),
        "endpoint" => format!("endpoint {}", plain(&payload["endpoint"]["name"])),
        "repo" if !subject.is_empty() => format!("model {subject}"),
        "repo" => format!("model {}", plain(&payload["repo"]["name"])),
        _ => scope.to_string(),
    };
    named.trim_end().to_string()
}

/// What changed, as the payload says it.
fn change_of(payload: &Value, scope: &str, action: &str) -> String {
    match (scope, action) {
        ("endpoint.status", _) => {
            let state = |k: &str| plain(&payload["status"][k]);
            match state("previousState") {
                before if before.is_empty() => format!("now {}", state("state")),
                before => format!("{before} → {}", state("state")),
            }
        }
        ("endpoint", "create") => "created".into(),
        ("endpoint", "delete") => "deleted".into(),
        ("endpoint", _) => "spec changed".into(),
        ("repo", "create") => "added to the catalog".into(),
        ("repo", "delete") => "removed from the catalog".into(),
        ("repo.content", _) => match payload["updatedRefs"].as_array().map_or(0, Vec::len) {
            1 => "a recipe's revision moved".into(),
            n => format!("{n} recipes' revisions moved"),
        },
        ("repo.config", _) => {
            let keys: Vec<String> = payload["updatedConfig"]
                .as_object()
                .map(|m| m.keys().map(|k| plain(&Value::String(k.clone()))).collect())
                .unwrap_or_default();
            match keys.is_empty() {
                true => "changed".into(),
                false => format!("changed: {}", keys.join(", ")),
            }
        }
        (_, action) => action.to_string(),
    }
}

impl DeliveryRow {
    pub fn from_json(attempt: &Value) -> DeliveryRow {
        let (scope, action) = (
            plain(&attempt["event"]["scope"]),
            plain(&attempt["event"]["action"]),
        );
        let payload = attempt["payload"].clone();
        let mut row = DeliveryRow {
            search: String::new(),
            seq: attempt["seq"].as_i64().unwrap_or(0),
            delivery_id: plain(&attempt["deliveryId"]),
            event_id: plain(&attempt["eventId"]),
            at: time(&attempt["at"]),
            started: instant(&attempt["at"]),
            event: format!("{scope}/{action}"),
            subject: subject_of(attempt, &scope),
            change: change_of(&payload, &scope, &action),
            attempt: attempt["attempt"].as_i64().unwrap_or(0),
            status_code: attempt["statusCode"].as_i64(),
            duration_ms: attempt["durationMs"].as_i64().unwrap_or(0),
            error_class: plain(&attempt["errorClass"]),
            error: plain(&attempt["error"]),
            response: plain(&attempt["response"]),
            next_attempt: instant(&attempt["nextAttemptAt"]),
            manual: attempt["manual"] == true,
            state: plain(&attempt["state"]),
            payload,
        };
        row.search = search_text(&[
            &row.event,
            &row.subject,
            &row.change,
            &row.error_class,
            &row.state,
            &row.delivery_id,
        ]);
        row
    }

    /// Whether the attempt succeeded.
    pub fn ok(&self) -> bool {
        self.error_class.is_empty() && self.status_code.is_some_and(|c| (200..300).contains(&c))
    }

    /// What the row says of its attempt at `now`: `later` is the number of a later attempt of the same
    /// delivery, if one is known; `held` is until when the webhook's deliveries are held.
    pub fn standing(
        &self,
        later: Option<i64>,
        held: Option<DateTime<Utc>>,
        now: DateTime<Utc>,
    ) -> Standing {
        let shown = |state: String, next: Option<DateTime<Utc>>| Standing {
            state,
            next: next.map(|t| clock(t, now)).unwrap_or_default(),
        };
        if let Some(n) = later {
            return shown(format!("superseded by #{n}"), None);
        }
        match self.state.as_str() {
            "pending" => match (self.next_attempt.filter(|t| *t > now), held) {
                (Some(t), _) => shown("pending".into(), Some(t)),
                (None, Some(until)) => shown(format!("held until {}", clock(until, now)), None),
                (None, None) => shown("due now".into(), None),
            },
            // Read while it was done by another attempt than this failed one.
            "succeeded" if !self.ok() => shown("superseded".into(), None),
            state => shown(state.to_string(), self.next_attempt),
        }
    }

    /// The attempt's details, as `d` shows them: what it was about, the request sent and the answer.
    pub fn details(&self, url: &str, hook: Option<&WebhookRow>, standing: &Standing) -> String {
        let or_none = |s: &str| if s.is_empty() { "-" } else { s }.to_string();
        let next = match standing.next.as_str() {
            "" => String::new(),
            t => format!(" (next attempt at {t} UTC)"),
        };
        let mut text = format!(
            "attempt {} of delivery {}{}\n\nabout      {}: {}\nevent      {} (id {})\nat         {} UTC\n\
             now        {}{next}\n\n",
            self.attempt,
            self.delivery_id,
            if self.manual { " (a replay)" } else { "" },
            self.subject,
            self.change,
            self.event,
            self.event_id,
            self.at,
            standing.state,
        );
        text.push_str(&self.request(url, hook));
        text.push_str(&format!(
            "\nthe answer\nstatus     {}\nduration   {} ms\nerror      {}{}\nbody (its first KiB)\n{}\n",
            self.status_code
                .map_or_else(|| "- (no answer)".to_string(), |c| c.to_string()),
            self.duration_ms,
            or_none(&self.error_class),
            match self.error.as_str() {
                "" => String::new(),
                e => format!(": {e}"),
            },
            or_none(&self.response),
        ));
        text
    }

    /// The request as it was sent: the headers (their secrets not shown) and the body.
    fn request(&self, url: &str, hook: Option<&WebhookRow>) -> String {
        let timestamp = self.started.map_or(0, |t| t.timestamp());
        let mut text = format!(
            "the request sent\nPOST {url}\ncontent-type: application/json\nwebhook-id: {}\n\
             webhook-timestamp: {timestamp}\nwebhook-signature: v1,… (made with the webhook's signing secret)\n",
            self.event_id
        );
        if hook.is_some_and(|h| h.has_secret) {
            text.push_str("x-webhook-secret: … (the webhook's secret)\n");
        }
        let body = match &self.payload {
            Value::Null => "(this server does not say what it sent)".to_string(),
            payload => serde_json::to_string_pretty(payload).unwrap_or_default(),
        };
        text.push('\n');
        text.push_str(&body);
        text.push('\n');
        text
    }

    pub(super) fn matches(&self, filter: &str) -> bool {
        self.search.contains(filter)
    }
}
