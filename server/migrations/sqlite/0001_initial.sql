-- Accounts: users and organizations share one namespace of names.
CREATE TABLE accounts (
    id          TEXT PRIMARY KEY,
    kind        TEXT NOT NULL CHECK (kind IN ('user', 'org')),
    name        TEXT NOT NULL UNIQUE,
    fullname    TEXT NOT NULL,
    email       TEXT,
    is_admin    INTEGER NOT NULL DEFAULT 0,
    created_at  TEXT NOT NULL
);

CREATE TABLE memberships (
    org_id      TEXT NOT NULL REFERENCES accounts(id) ON DELETE CASCADE,
    user_id     TEXT NOT NULL REFERENCES accounts(id) ON DELETE CASCADE,
    role        TEXT NOT NULL CHECK (role IN ('admin', 'write', 'contributor', 'read')),
    created_at  TEXT NOT NULL,
    PRIMARY KEY (org_id, user_id)
);
CREATE INDEX memberships_by_user ON memberships(user_id);

-- Only the SHA-256 of a token is kept; the token itself is shown once.
CREATE TABLE tokens (
    id            TEXT PRIMARY KEY,
    user_id       TEXT NOT NULL REFERENCES accounts(id) ON DELETE CASCADE,
    token_hash    TEXT NOT NULL UNIQUE,
    display_name  TEXT NOT NULL,
    scopes        TEXT,            -- JSON array, NULL = unrestricted
    expires_at    TEXT,
    created_at    TEXT NOT NULL
);
CREATE INDEX tokens_by_user ON tokens(user_id);

-- Catalog items keep their public JSON and the internal memory need of each recipe.
CREATE TABLE catalog_items (
    repo_id     TEXT PRIMARY KEY,
    item        TEXT NOT NULL,      -- JSON of the catalog entry, recipes with memoryGb
    updated_at  TEXT NOT NULL
);

CREATE TABLE endpoints (
    id              TEXT PRIMARY KEY,
    namespace       TEXT NOT NULL,
    name            TEXT NOT NULL,
    spec            TEXT NOT NULL,  -- JSON; secret values encrypted
    state           TEXT NOT NULL,
    message         TEXT,
    url             TEXT,
    ready_replica   INTEGER NOT NULL DEFAULT 0,
    target_replica  INTEGER NOT NULL DEFAULT 0,
    created_at      TEXT NOT NULL,
    updated_at      TEXT NOT NULL,
    created_by      TEXT NOT NULL,  -- JSON {id, name}
    updated_by      TEXT NOT NULL,
    version         INTEGER NOT NULL DEFAULT 1,
    UNIQUE (namespace, name)
);

-- Small key/value facts about the store itself (e.g. whether the catalog was seeded).
CREATE TABLE meta (
    key    TEXT PRIMARY KEY,
    value  TEXT NOT NULL
);
