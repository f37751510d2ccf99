-- (PostgreSQL) Keyless sign-in from CI: the workflows a namespace trusts, and the id tokens already exchanged.

-- A trusted publisher: a CI provider's id tokens (issuer, audience, exact claim values) that may sign in
-- to a namespace as the user who registered it, with these scopes.
CREATE TABLE trusted_publishers (
    id              TEXT COLLATE "C" PRIMARY KEY,
    namespace_id    TEXT NOT NULL REFERENCES accounts(id) ON DELETE CASCADE,
    issuer          TEXT NOT NULL,
    audience        TEXT NOT NULL,
    claims          TEXT NOT NULL,      -- JSON object of claim name to exact string value
    scopes          TEXT NOT NULL,      -- JSON array of scope names
    created_by      TEXT NOT NULL REFERENCES accounts(id) ON DELETE CASCADE,
    created_at      TEXT NOT NULL
);
CREATE INDEX trusted_publishers_by_namespace ON trusted_publishers(namespace_id);

-- The `jti` of every id token exchanged, until the token expires: a replay is refused, across restarts
-- and replicas. Expired rows are pruned as new ones come.
CREATE TABLE ci_token_ids (
    issuer      TEXT COLLATE "C" NOT NULL,
    jti         TEXT COLLATE "C" NOT NULL,
    expires_at  TEXT NOT NULL,
    PRIMARY KEY (issuer, jti)
);
CREATE INDEX ci_token_ids_by_expiry ON ci_token_ids(expires_at);
