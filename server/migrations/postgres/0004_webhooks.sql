-- Webhooks: what each one watches, the deliveries the outbox fans out to them (the queue and the
-- activity view in one), and every attempt made.

CREATE TABLE webhooks (
    id               TEXT COLLATE "C" PRIMARY KEY,
    owner_id         TEXT NOT NULL REFERENCES accounts(id) ON DELETE CASCADE,
    url              TEXT NOT NULL,
    watched          TEXT NOT NULL,     -- JSON array of {type, name}
    domains          TEXT NOT NULL,     -- JSON array of domain names
    secret           TEXT,              -- sealed; sent as X-Webhook-Secret
    signing_keys     TEXT NOT NULL,     -- sealed JSON array of {secret, expiresAt}, current first
    disabled         BIGINT NOT NULL DEFAULT 0,
    disabled_reason  TEXT,
    held_until       TEXT,              -- the circuit breaker or a Retry-After holds deliveries until then
    failing_since    TEXT,              -- first failure since the last success
    created_by       TEXT NOT NULL,
    created_at       TEXT NOT NULL,
    updated_at       TEXT NOT NULL
);
CREATE INDEX webhooks_by_owner ON webhooks(owner_id);

-- One row per (watched item, domain): the outbox's fan-out looks events up here.
CREATE TABLE webhook_watches (
    webhook_id  TEXT NOT NULL REFERENCES webhooks(id) ON DELETE CASCADE,
    kind        TEXT NOT NULL,          -- user, org or model
    name        TEXT NOT NULL,
    domain      TEXT NOT NULL,          -- repo or endpoint
    PRIMARY KEY (domain, name, kind, webhook_id)
);
CREATE INDEX webhook_watches_by_webhook ON webhook_watches(webhook_id);

-- The JSON body every webhook gets for an event, but for its `webhook` member.
ALTER TABLE events ADD COLUMN hook_payload TEXT;
CREATE INDEX events_by_time ON events(created_at);

CREATE TABLE deliveries (
    id               TEXT COLLATE "C" PRIMARY KEY,
    webhook_id       TEXT NOT NULL REFERENCES webhooks(id) ON DELETE CASCADE,
    event_seq        BIGINT NOT NULL,
    state            TEXT NOT NULL,     -- pending, sending, succeeded, failed, cancelled
    attempts         BIGINT NOT NULL DEFAULT 0,
    next_attempt_at  TEXT,              -- when pending: due time; else NULL
    lease_until      TEXT,
    claim_token      TEXT,
    manual           BIGINT NOT NULL DEFAULT 0,
    created_at       TEXT NOT NULL,
    updated_at       TEXT NOT NULL
);
CREATE INDEX deliveries_due ON deliveries(next_attempt_at) WHERE state = 'pending';
CREATE INDEX deliveries_pending_by_webhook ON deliveries(webhook_id, next_attempt_at) WHERE state = 'pending';
CREATE INDEX deliveries_leased ON deliveries(lease_until) WHERE state = 'sending';
CREATE INDEX deliveries_by_webhook ON deliveries(webhook_id, created_at);
CREATE INDEX deliveries_by_event ON deliveries(event_seq);
CREATE INDEX deliveries_by_claim ON deliveries(claim_token) WHERE state = 'sending';
CREATE INDEX deliveries_done ON deliveries(updated_at) WHERE state IN ('succeeded', 'failed', 'cancelled');

CREATE TABLE delivery_attempts (
    seq              BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    delivery_id      TEXT NOT NULL REFERENCES deliveries(id) ON DELETE CASCADE,
    webhook_id       TEXT NOT NULL,
    number           BIGINT NOT NULL,
    started_at       TEXT NOT NULL,
    duration_ms      BIGINT NOT NULL,
    status_code      BIGINT,
    error_class      TEXT,
    error            TEXT,
    response         TEXT,              -- the first KiB of the answer
    next_attempt_at  TEXT,
    manual           BIGINT NOT NULL DEFAULT 0
);
CREATE INDEX delivery_attempts_by_webhook ON delivery_attempts(webhook_id, seq);
CREATE INDEX delivery_attempts_by_delivery ON delivery_attempts(delivery_id);
