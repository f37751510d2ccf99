//! The servers on the store, as operators see them: where each listens, its version, when it started and
//! last said it was alive, and which one leads.

use chrono::{DateTime, Utc};
use serde::Serialize;

use super::{Context, Result};
use crate::store::cluster::ServerRow;

/// How recent a heartbeat must be for a server to count as answering (they beat every 2 s).
pub const ALIVE: std::time::Duration = std::time::Duration::from_secs(10);

/// How long a server that stopped or stopped answering stays listed.
const LISTED_FOR: std::time::Duration = std::time::Duration::from_secs(24 * 3600);

/// How a server is, by its last heartbeat.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub enum ServerState {
    /// It beat within the last 10 s.
    Running,
    /// Its last heartbeat is older than 10 s, and it did not say it stopped (killed, hung, cut off).
    NotAnswering,
    /// It stopped cleanly.
    Stopped,
}

/// A server as the admin API shows it.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ServerOut {
    /// The server's id (its data dir's `node-id`).
    pub id: String,
    /// Where it listens.
    pub address: String,
    /// The public URL it announces (`runtime.public_url`).
    pub public_url: String,
    pub version: String,
    pub started_at: DateTime<Utc>,
    pub last_heartbeat: DateTime<Utc>,
    pub state: ServerState,
    /// Whether it holds the leader's lease: it runs the replicas, the scaler and the schedules.
    pub leader: bool,
}

impl ServerOut {
    fn of(row: ServerRow, now: DateTime<Utc>) -> ServerOut {
        let alive = chrono::Duration::from_std(ALIVE).unwrap_or(chrono::Duration::MAX);
        let state = match row.stopped_at {
            Some(_) => ServerState::Stopped,
            None if now - row.heartbeat_at > alive => ServerState::NotAnswering,
            None => ServerState::Running,
        };
        ServerOut {
            id: row.info.id,
            address: row.info.address,
            public_url: row.info.public_url,
            version: row.info.version,
            started_at: row.started_at,
            last_heartbeat: row.heartbeat_at,
            state,
            leader: row.leader,
        }
    }
}

/// The servers seen in the last day, in the order they started.
pub async fn list(ctx: &Context) -> Result<Vec<ServerOut>> {
    let (rows, now) = ctx.store.servers(LISTED_FOR).await?;
    Ok(rows.into_iter().map(|r| ServerOut::of(r, now)).collect())
}
