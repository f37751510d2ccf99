-- An endpoint's analytics: what each server recorded of it in each time bucket (10 s and 1 min), kept for
-- `analytics.keep_10s_s` and `analytics.keep_1m_s`; and the runtime's decisions about it, with their reasons.
CREATE TABLE endpoint_series (
    endpoint_id TEXT COLLATE "C" NOT NULL,
    step        BIGINT NOT NULL,     -- the bucket's length in seconds: 10 or 60
    bucket      BIGINT NOT NULL,     -- its start, Unix seconds
    server_id   TEXT COLLATE "C" NOT NULL,       -- the server that recorded it: each writes only its own rows
    sample      TEXT NOT NULL,       -- JSON: counters and gauge readings (see `model::analytics::Sample`)
    PRIMARY KEY (endpoint_id, step, bucket, server_id)
);
CREATE INDEX endpoint_series_age ON endpoint_series (step, bucket);

CREATE TABLE endpoint_decisions (
    seq         BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    endpoint_id TEXT COLLATE "C" NOT NULL,
    at          TEXT NOT NULL,
    kind        TEXT NOT NULL,       -- `model::analytics::DecisionKind`
    reason      TEXT NOT NULL,
    detail      TEXT NOT NULL        -- JSON: replicas from and to, the measure
);
CREATE INDEX endpoint_decisions_by_endpoint ON endpoint_decisions (endpoint_id, seq);
CREATE INDEX endpoint_decisions_age ON endpoint_decisions (at);
