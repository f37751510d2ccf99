-- The same schema as SQLite's migrations 1 to 3, in PostgreSQL's types. Names and keys that lists are
-- sorted by compare bytewise (COLLATE "C"), as SQLite's do, whatever locale the cluster was made with. Timestamps are RFC 3339 text
-- in UTC with milliseconds (text order is time order), JSON documents are text: the store's SQL is
-- written once for both backends.

-- Accounts: users and organizations share one namespace of names.
CREATE TABLE accounts (
    id          TEXT PRIMARY KEY,
    kind        TEXT NOT NULL CHECK (kind IN ('user', 'org')),
    name        TEXT COLLATE "C" NOT NULL UNIQUE,
    fullname    TEXT NOT NULL,
    email       TEXT,
    is_admin    BIGINT NOT NULL DEFAULT 0,
    created_at  TEXT NOT NULL,
    -- Names are unique without regard to case: the key is the name in lowercase (names are ASCII).
    name_key    TEXT NOT NULL,
    -- A disabled account cannot sign in: every credential of it is refused.
    disabled_at TEXT
);
CREATE UNIQUE INDEX accounts_name_nocase ON accounts(name_key);

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

CREATE TABLE catalog_items (
    repo_id     TEXT COLLATE "C" PRIMARY KEY,
    item        TEXT NOT NULL,      -- JSON of the catalog entry, recipes with memoryGb
    updated_at  TEXT NOT NULL
);

-- A recipe's public id names one recipe across the whole catalog.
CREATE TABLE catalog_recipes (
    public_id  TEXT PRIMARY KEY,
    repo_id    TEXT NOT NULL REFERENCES catalog_items(repo_id) ON DELETE CASCADE
);
CREATE INDEX catalog_recipes_by_repo ON catalog_recipes(repo_id);

CREATE TABLE endpoints (
    id              TEXT PRIMARY KEY,
    namespace       TEXT COLLATE "C" NOT NULL,
    name            TEXT COLLATE "C" NOT NULL,
    spec            TEXT NOT NULL,  -- JSON; secret values encrypted
    state           TEXT NOT NULL,
    message         TEXT,
    url             TEXT,
    ready_replica   BIGINT NOT NULL DEFAULT 0,
    target_replica  BIGINT NOT NULL DEFAULT 0,
    created_at      TEXT NOT NULL,
    updated_at      TEXT NOT NULL,
    created_by      TEXT NOT NULL,  -- JSON {id, name}
    updated_by      TEXT NOT NULL,
    version         BIGINT NOT NULL DEFAULT 1,
    route_host      TEXT,           -- custom domain, lowercase, no trailing dot
    route_path      TEXT,           -- its path prefix without trailing slashes
    UNIQUE (namespace, name)
);
CREATE UNIQUE INDEX endpoints_route_unique ON endpoints(route_host, route_path);

-- Small key/value facts about the store itself (e.g. whether the catalog was seeded).
CREATE TABLE meta (
    key    TEXT PRIMARY KEY,
    value  TEXT NOT NULL
);

-- The outbox (see SQLite's migration 2).
CREATE TABLE events (
    seq         BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    id          TEXT NOT NULL UNIQUE,
    kind        TEXT NOT NULL,
    namespace   TEXT NOT NULL,
    subject     TEXT NOT NULL,
    payload     TEXT NOT NULL,   -- JSON
    created_at  TEXT NOT NULL
);
CREATE INDEX events_by_subject ON events(namespace, subject, seq);

-- Per-namespace overrides of the configured quotas; NULL keeps the default.
CREATE TABLE namespace_quotas (
    namespace   TEXT COLLATE "C" PRIMARY KEY,
    endpoints   BIGINT,
    replicas    BIGINT,
    updated_at  TEXT NOT NULL
);
