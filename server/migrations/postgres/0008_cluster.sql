-- Several servers on one store. Each server's row (its heartbeat), the leader's lease (its epoch is the
-- fencing token every write made as leader checks), the replicas the leader runs (so every server routes to
-- them and a new leader adopts them), and what each server saw of each endpoint's traffic (so the leader
-- scales on the sum). Times are written by the database's clock, as RFC 3339 text like every other column.
CREATE TABLE servers (
    id           TEXT PRIMARY KEY,   -- the server's node id (its data dir's `node-id`)
    address      TEXT NOT NULL,      -- where it listens
    public_url   TEXT NOT NULL,      -- what it announces as `runtime.public_url`
    version      TEXT NOT NULL,
    started_at   TEXT NOT NULL,
    heartbeat_at TEXT NOT NULL,
    stopped_at   TEXT                -- set by a clean stop
);

CREATE TABLE leases (
    name        TEXT PRIMARY KEY,    -- 'leader'
    holder      TEXT NOT NULL,       -- a server id
    epoch       BIGINT NOT NULL,     -- bumped each time the lease changes hands (or lapses and is taken again)
    acquired_at TEXT NOT NULL,
    expires_at  TEXT NOT NULL
);

CREATE TABLE replicas (
    endpoint_id TEXT NOT NULL,
    replica_id  TEXT NOT NULL,
    role        TEXT NOT NULL,       -- 'replica' or 'router'
    url         TEXT NOT NULL,       -- where it answers
    handle      TEXT NOT NULL,       -- the provider's name for it (a pid, a container id)
    generation  TEXT NOT NULL,       -- the spec generation it runs
    state       TEXT NOT NULL,       -- 'starting', 'ready', 'draining'
    epoch       BIGINT NOT NULL,     -- the leader's epoch that wrote it
    updated_at  TEXT NOT NULL,
    PRIMARY KEY (endpoint_id, replica_id)
);

CREATE TABLE endpoint_traffic (
    server_id       TEXT NOT NULL,
    endpoint_id     TEXT NOT NULL,
    last_request_ms BIGINT NOT NULL, -- Unix milliseconds of the last request it saw (0: none)
    in_flight       BIGINT NOT NULL,
    wake            BIGINT NOT NULL, -- 1: a request asks the endpoint to wake up
    updated_at      TEXT NOT NULL,
    PRIMARY KEY (server_id, endpoint_id)
);

-- The store's own id, the same for every server on it: the containers the leader starts carry it, so the
-- next leader, whichever server that is, adopts them.
CREATE TABLE store_meta (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
INSERT INTO store_meta (key, value) VALUES ('store_id', substr(md5(random()::text || clock_timestamp()::text), 1, 16));

-- Webhook sends in progress across servers: each send holds a slot (up to the webhook concurrency) until it
-- ends or its claim's lease does; and the next start the rate limit allows, booked by whichever server sends.
CREATE TABLE webhook_sends (
    webhook_id  TEXT NOT NULL,
    delivery_id TEXT NOT NULL,
    held_until  TEXT NOT NULL,
    PRIMARY KEY (webhook_id, delivery_id)
);
CREATE TABLE webhook_pace (
    webhook_id TEXT PRIMARY KEY,
    next_start TEXT NOT NULL
);
