//! The routing table a data-plane worker holds for its requests (see [`table`]).

use std::sync::Arc;

use tokio::sync::watch;

use super::super::Proxy;
use crate::routing::{worker, RouteTable};

/// The routing table for a request. A data-plane worker keeps the latest one it has seen, taken anew only
/// when the runtime has published one since (and let go when the worker goes idle, see [`forget_table`]),
/// in a holder of its own: its requests look their routes up without the channel's lock, and count a
/// reference on that holder alone rather than on the table and the route. The channel's lock and those
/// counts would be written by every worker on every request, each write taking their cache line from the
/// other cores; the holder's count stays on its worker's. Elsewhere, the table as published.
pub(super) fn table(proxy: &Proxy) -> Arc<WorkerTable> {
    latest_table(&proxy.routing.table)
}

fn latest_table(published: &watch::Receiver<Arc<RouteTable>>) -> Arc<WorkerTable> {
    if !worker::on_worker() {
        return Arc::new(WorkerTable(published.borrow().clone()));
    }
    SEEN.with_borrow_mut(|seen| {
        let seen = match seen {
            Some(s) if s.published.same_channel(published) => s,
            _ => seen.insert(Seen {
                published: published.clone(),
                table: None,
            }),
        };
        match &seen.table {
            Some(table) if !seen.published.has_changed().unwrap_or(false) => table.clone(),
            _ => {
                let table = Arc::new(WorkerTable(seen.published.borrow_and_update().clone()));
                seen.table.insert(table).clone()
            }
        }
    })
}

/// Lets go of the table this worker saw last: called as the worker goes to sleep, so that an idle server
/// holds no table (nor the replicas and connections in it) after a newer one came.
pub(in crate::proxy) fn forget_table() {
    SEEN.with_borrow_mut(|seen| {
        if let Some(seen) = seen {
            seen.table = None;
        }
    });
}

/// A worker's latest routing table in its holder (see [`table`]), and the channel it came from.
struct Seen {
    published: watch::Receiver<Arc<RouteTable>>,
    table: Option<Arc<WorkerTable>>,
}

/// A routing table as a worker holds it (see [`table`]): a reference counted on this holder is one
/// counted on the worker's own cache line.
pub(in crate::proxy) struct WorkerTable(Arc<RouteTable>);

impl std::ops::Deref for WorkerTable {
    type Target = RouteTable;

    fn deref(&self) -> &RouteTable {
        &self.0
    }
}

thread_local! {
    static SEEN: std::cell::RefCell<Option<Seen>> = const { std::cell::RefCell::new(None) };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_worker_keeps_its_table_until_a_newer_one_comes_or_it_sleeps() {
        std::thread::spawn(|| {
            worker::enter_worker(0);
            let (tx, rx) = watch::channel(Arc::new(RouteTable::default()));
            let first = latest_table(&rx);
            let again = latest_table(&rx);
            assert!(
                Arc::ptr_eq(&first, &again),
                "the same holder while nothing was published"
            );
            assert!(Arc::ptr_eq(&first.0, &rx.borrow()));
            tx.send_replace(Arc::new(RouteTable::default()));
            let newer = latest_table(&rx);
            assert!(
                !Arc::ptr_eq(&first.0, &newer.0),
                "the table published since"
            );
            assert!(Arc::ptr_eq(&newer.0, &rx.borrow()));
            forget_table();
            assert_eq!(
                Arc::strong_count(&newer),
                1,
                "let go of as the worker sleeps"
            );
            let (_other_tx, other_rx) = watch::channel(Arc::new(RouteTable::default()));
            let other = latest_table(&other_rx);
            assert!(
                Arc::ptr_eq(&other.0, &other_rx.borrow()),
                "another server's channel"
            );
        })
        .join()
        .expect("worker thread");
    }
}
