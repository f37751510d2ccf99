-- Account names are unique without regard to case: `alice`, `Alice` and `ALICE` are one name. The key is
-- the name in lowercase (names are ASCII). Should a store already hold names that differ only in case,
-- the oldest account keeps the key and the others get one that cannot clash; the server reports them
-- at every start until they are renamed or deleted.
ALTER TABLE accounts ADD COLUMN name_key TEXT;
UPDATE accounts SET name_key = lower(name);
UPDATE accounts SET name_key = lower(name) || '#' || id
WHERE id <> (
    SELECT a2.id FROM accounts a2 WHERE lower(a2.name) = lower(accounts.name)
    ORDER BY a2.created_at, a2.id LIMIT 1
);
CREATE UNIQUE INDEX accounts_name_nocase ON accounts(name_key);

-- A disabled account cannot sign in: every credential of it is refused.
ALTER TABLE accounts ADD COLUMN disabled_at TEXT;

-- Per-namespace overrides of the configured quotas; NULL keeps the default.
CREATE TABLE namespace_quotas (
    namespace   TEXT PRIMARY KEY,
    endpoints   BIGINT,
    replicas    BIGINT,
    updated_at  TEXT NOT NULL
);
