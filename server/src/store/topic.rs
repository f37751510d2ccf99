//! The notifications servers on one PostgreSQL send each other (`LISTEN`/`NOTIFY`): one channel, and what
//! each says changed.

/// The channel every notification between servers goes on (PostgreSQL's `LISTEN`/`NOTIFY`).
pub const CHANNEL: &str = "switchyard";

/// What a notification says changed; its text is the payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Topic {
    /// Endpoints or their replicas changed: followers rebuild their routing table.
    Routes,
    /// A request asks a scaled-to-zero endpoint to wake up: the leader reads the wake-ups.
    Wake,
    /// A token, grant, membership or user was revoked or disabled: every token cache is dropped.
    Revoke,
    /// Webhook deliveries were queued: idle delivery workers look for work.
    Outbox,
    /// A delivery attempt was recorded: live views of the attempts read again.
    Attempts,
    /// Mail was queued.
    Mail,
    /// Notices were recorded.
    Notices,
    /// The lease changed hands or was given up: followers try for it now.
    Leader,
}

impl Topic {
    pub const ALL: [Topic; 8] = [
        Topic::Routes,
        Topic::Wake,
        Topic::Revoke,
        Topic::Outbox,
        Topic::Attempts,
        Topic::Mail,
        Topic::Notices,
        Topic::Leader,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Topic::Routes => "routes",
            Topic::Wake => "wake",
            Topic::Revoke => "revoke",
            Topic::Outbox => "outbox",
            Topic::Attempts => "attempts",
            Topic::Mail => "mail",
            Topic::Notices => "notices",
            Topic::Leader => "leader",
        }
    }

    pub fn parse(s: &str) -> Option<Topic> {
        Topic::ALL.into_iter().find(|t| t.as_str() == s)
    }
}
