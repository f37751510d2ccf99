-- See SQLite's migration 3: names unique without regard to case, disabled accounts, quota overrides.
ALTER TABLE accounts ADD COLUMN name_key TEXT;
UPDATE accounts SET name_key = lower(name);
UPDATE accounts SET name_key = lower(name) || '#' || id
WHERE id <> (
    SELECT a2.id FROM accounts a2 WHERE lower(a2.name) = lower(accounts.name)
    ORDER BY a2.created_at, a2.id LIMIT 1
);
CREATE UNIQUE INDEX accounts_name_nocase ON accounts(name_key);

ALTER TABLE accounts ADD COLUMN disabled_at TEXT;

CREATE TABLE namespace_quotas (
    namespace   TEXT PRIMARY KEY,
    endpoints   BIGINT,
    replicas    BIGINT,
    updated_at  TEXT NOT NULL
);
