//! Which database a store is on, and what differs by it at the start of a unit of work.

/// The database a store is on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Sqlite,
    Postgres,
}

impl Backend {
    pub fn as_str(self) -> &'static str {
        match self {
            Backend::Sqlite => "sqlite",
            Backend::Postgres => "postgres",
        }
    }
}

/// The statement that opens a unit of work on each backend.
pub(crate) fn begin_statement(backend: Backend) -> &'static str {
    match backend {
        // Take the write lock at once: a deferred transaction that reads and then writes can fail
        // with SQLITE_BUSY when another writer got in between, and busy_timeout does not help there.
        Backend::Sqlite => "BEGIN IMMEDIATE",
        Backend::Postgres => "BEGIN",
    }
}
