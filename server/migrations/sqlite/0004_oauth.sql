-- The OAuth 2.0 / OpenID Connect provider. Every bearer string (tokens, codes, device codes, client
-- secrets, browser sessions) is kept only as its SHA-256; passwords as Argon2id PHC strings; signing keys
-- sealed with the secrets key.

-- A user's password (Argon2id PHC string); NULL = cannot sign in with a password.
ALTER TABLE accounts ADD COLUMN password_hash TEXT;
-- An organization's lifetime for exchanged tokens, in seconds; NULL = the default (8 hours).
ALTER TABLE accounts ADD COLUMN exchange_ttl_s BIGINT;

-- Third-party apps. The id is the client_id; a NULL secret_hash makes the app public.
CREATE TABLE oauth_apps (
    id              TEXT PRIMARY KEY,
    owner_id        TEXT NOT NULL REFERENCES accounts(id) ON DELETE CASCADE,
    name            TEXT NOT NULL,
    homepage_url    TEXT,
    logo_url        TEXT,
    redirect_uris   TEXT NOT NULL,      -- JSON array
    scopes          TEXT NOT NULL,      -- JSON array of scope names
    secret_hash     TEXT,
    token_exchange  INTEGER NOT NULL DEFAULT 0,
    created_at      TEXT NOT NULL,
    updated_at      TEXT NOT NULL
);
CREATE INDEX oauth_apps_by_owner ON oauth_apps(owner_id);

-- Apps are named by id without a foreign key: a client may also be a client metadata document (its URL).
-- Deleting an app deletes its grants, device authorizations and consents (the store does it).

-- A grant: what a user let one app do (scopes, organizations). Codes and tokens belong to one grant;
-- revoking the grant (a replayed code, a reused refresh token) ends all of them at once.
CREATE TABLE oauth_grants (
    id          TEXT PRIMARY KEY,
    app_id      TEXT,               -- a registered app's id or a client metadata document's URL
    user_id     TEXT NOT NULL REFERENCES accounts(id) ON DELETE CASCADE,
    kind        TEXT NOT NULL,      -- code | device | exchange | ci
    scopes      TEXT NOT NULL,      -- JSON array
    org_ids     TEXT NOT NULL,      -- JSON array of organization ids the grant reaches
    personal    INTEGER NOT NULL,   -- 1 when the grant reaches the user's own namespace
    nonce       TEXT,
    auth_time   TEXT NOT NULL,
    created_at  TEXT NOT NULL,
    revoked_at  TEXT
);
CREATE INDEX oauth_grants_by_user ON oauth_grants(user_id);
CREATE INDEX oauth_grants_by_app ON oauth_grants(app_id);

-- Access and refresh tokens. A used refresh token has been rotated: presenting it again revokes the grant.
CREATE TABLE oauth_tokens (
    token_hash  TEXT PRIMARY KEY,
    grant_id    TEXT NOT NULL REFERENCES oauth_grants(id) ON DELETE CASCADE,
    kind        TEXT NOT NULL CHECK (kind IN ('access', 'refresh')),
    expires_at  TEXT NOT NULL,
    used_at     TEXT,
    created_at  TEXT NOT NULL
);
CREATE INDEX oauth_tokens_by_grant ON oauth_tokens(grant_id);

-- Authorization codes, single use, bound to the redirect URI and the PKCE challenge.
CREATE TABLE oauth_codes (
    code_hash       TEXT PRIMARY KEY,
    grant_id        TEXT NOT NULL REFERENCES oauth_grants(id) ON DELETE CASCADE,
    redirect_uri    TEXT NOT NULL,
    code_challenge  TEXT,
    expires_at      TEXT NOT NULL,
    used_at         TEXT
);

-- Device authorizations (RFC 8628). The user code is kept as the hash of its normalized form.
CREATE TABLE oauth_devices (
    device_hash     TEXT PRIMARY KEY,
    user_code_hash  TEXT NOT NULL UNIQUE,
    app_id          TEXT NOT NULL,
    scopes          TEXT NOT NULL,
    status          TEXT NOT NULL CHECK (status IN ('pending', 'approved', 'denied', 'used')),
    user_id         TEXT REFERENCES accounts(id) ON DELETE CASCADE,
    org_ids         TEXT,
    interval_s      BIGINT NOT NULL,
    last_poll_at    TEXT,
    expires_at      TEXT NOT NULL,
    created_at      TEXT NOT NULL
);

-- A pending authorization request, between /oauth/authorize and the consent answer: immutable, single
-- use, bound to the browser session that saw it.
CREATE TABLE oauth_requests (
    id_hash     TEXT PRIMARY KEY,
    request     TEXT NOT NULL,      -- JSON of the validated request
    expires_at  TEXT NOT NULL
);

-- Browser sessions of the sign-in pages.
CREATE TABLE web_sessions (
    session_hash    TEXT PRIMARY KEY,
    user_id         TEXT REFERENCES accounts(id) ON DELETE CASCADE,
    csrf            TEXT NOT NULL,
    failed_codes    BIGINT NOT NULL DEFAULT 0,
    expires_at      TEXT NOT NULL,
    created_at      TEXT NOT NULL
);

-- What a user already consented to, per app: a returning user asking for no more is not asked again.
CREATE TABLE oauth_consents (
    user_id     TEXT NOT NULL REFERENCES accounts(id) ON DELETE CASCADE,
    app_id      TEXT NOT NULL,
    scopes      TEXT NOT NULL,
    org_ids     TEXT NOT NULL,
    updated_at  TEXT NOT NULL,
    PRIMARY KEY (user_id, app_id)
);

-- ID-token signing keys. The newest unretired key signs; retired keys stay published until their
-- tokens have expired.
CREATE TABLE signing_keys (
    kid         TEXT PRIMARY KEY,
    alg         TEXT NOT NULL,
    private_key TEXT NOT NULL,      -- sealed with the secrets key
    public_jwk  TEXT NOT NULL,      -- JSON
    created_at  TEXT NOT NULL,
    retired_at  TEXT
);

-- An organization's audit log (token exchanges, successful or not).
CREATE TABLE audit_log (
    id          TEXT PRIMARY KEY,
    org_id      TEXT NOT NULL REFERENCES accounts(id) ON DELETE CASCADE,
    at          TEXT NOT NULL,
    action      TEXT NOT NULL,
    outcome     TEXT NOT NULL,
    actor       TEXT NOT NULL,      -- JSON: the app and the subject
    detail      TEXT NOT NULL       -- JSON
);
CREATE INDEX audit_log_by_org ON audit_log(org_id, at);
