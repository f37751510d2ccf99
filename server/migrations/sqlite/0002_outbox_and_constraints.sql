-- A custom domain and path serve one endpoint: the rule is an index, not a scan.
-- The key is the domain in lowercase without a trailing dot, and the path without trailing slashes.
ALTER TABLE endpoints ADD COLUMN route_host TEXT;
ALTER TABLE endpoints ADD COLUMN route_path TEXT;
UPDATE endpoints SET
    route_host = lower(rtrim(json_extract(spec, '$.route.domain'), '.')),
    route_path = rtrim(json_extract(spec, '$.route.path'), '/')
WHERE json_extract(spec, '$.route.domain') IS NOT NULL
  -- Should two endpoints already share a route (a race the old check allowed), the oldest keeps it.
  AND id = (
    SELECT e2.id FROM endpoints e2
    WHERE lower(rtrim(json_extract(e2.spec, '$.route.domain'), '.'))
            = lower(rtrim(json_extract(endpoints.spec, '$.route.domain'), '.'))
      AND rtrim(json_extract(e2.spec, '$.route.path'), '/')
            = rtrim(json_extract(endpoints.spec, '$.route.path'), '/')
    ORDER BY e2.created_at, e2.id LIMIT 1
  );
CREATE UNIQUE INDEX endpoints_route_unique ON endpoints(route_host, route_path);

-- A recipe's public id names one recipe across the whole catalog.
CREATE TABLE catalog_recipes (
    public_id  TEXT PRIMARY KEY,
    repo_id    TEXT NOT NULL REFERENCES catalog_items(repo_id) ON DELETE CASCADE
);
CREATE INDEX catalog_recipes_by_repo ON catalog_recipes(repo_id);
INSERT INTO catalog_recipes (public_id, repo_id)
    SELECT json_extract(r.value, '$.publicId'), c.repo_id
    FROM catalog_items c, json_each(c.item, '$.recipes') r
    WHERE true
    ON CONFLICT DO NOTHING;

-- The outbox: every change to an endpoint or the catalog appends its event here in the same
-- transaction as the change itself. `seq` orders them; `id` is the event's stable public id.
CREATE TABLE events (
    seq         INTEGER PRIMARY KEY AUTOINCREMENT,
    id          TEXT NOT NULL UNIQUE,
    kind        TEXT NOT NULL,
    namespace   TEXT NOT NULL,
    subject     TEXT NOT NULL,
    payload     TEXT NOT NULL,   -- JSON
    created_at  TEXT NOT NULL
);
CREATE INDEX events_by_subject ON events(namespace, subject, seq);
