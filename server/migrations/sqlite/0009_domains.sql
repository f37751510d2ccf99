-- Custom domains and the namespace each belongs to: the first endpoint that routes a domain claims it for
-- its namespace, or an administrator assigns it; only that namespace's endpoints may route under it.
CREATE TABLE domains (
    domain      TEXT PRIMARY KEY,   -- lowercase, no trailing dot (as endpoints.route_host)
    namespace   TEXT NOT NULL,
    assigned_by TEXT,               -- the administrator who assigned it; NULL when an endpoint claimed it
    created_at  TEXT NOT NULL
);

-- The domains routed so far belong to the namespace of the first endpoint that routed each.
INSERT INTO domains (domain, namespace, assigned_by, created_at)
SELECT e.route_host, e.namespace, NULL, e.created_at FROM endpoints e
WHERE e.route_host IS NOT NULL AND NOT EXISTS (
    SELECT 1 FROM endpoints o WHERE o.route_host = e.route_host
    AND (o.created_at < e.created_at OR (o.created_at = e.created_at AND o.id < e.id)));
