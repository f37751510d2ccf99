-- Notifications for people: each user's stream (endpoint state changes that need someone, webhooks the
-- server disabled) and the mail queue, both written in the unit of work of the change that caused them.

CREATE TABLE notifications (
    seq         INTEGER PRIMARY KEY AUTOINCREMENT,
    user_id     TEXT NOT NULL REFERENCES accounts(id) ON DELETE CASCADE,
    kind        TEXT NOT NULL,
    namespace   TEXT NOT NULL,
    subject     TEXT NOT NULL,
    title       TEXT NOT NULL,
    message     TEXT,
    created_at  TEXT NOT NULL
);
CREATE INDEX notifications_by_user ON notifications(user_id, seq);
CREATE INDEX notifications_by_time ON notifications(created_at);

CREATE TABLE emails (
    id               TEXT PRIMARY KEY,
    to_addr          TEXT NOT NULL,
    subject          TEXT NOT NULL,
    body             TEXT NOT NULL,
    state            TEXT NOT NULL,     -- pending, sending, sent, failed
    attempts         INTEGER NOT NULL DEFAULT 0,
    next_attempt_at  TEXT,
    lease_until      TEXT,
    claim_token      TEXT,
    last_error       TEXT,
    created_at       TEXT NOT NULL,
    updated_at       TEXT NOT NULL
);
CREATE INDEX emails_due ON emails(next_attempt_at) WHERE state = 'pending';
CREATE INDEX emails_done ON emails(updated_at) WHERE state IN ('sent', 'failed');
