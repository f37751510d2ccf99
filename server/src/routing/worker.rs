//! Which data-plane worker this thread is, if any: each worker's number is its slot in every per-worker
//! table (see [`super::per_worker`]), such as the replicas' connection pools.

thread_local! {
    /// This thread's slot in every pool: its data-plane worker's number (from 1), or 0.
    static SLOT: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// How many data-plane workers pools keep slots for: one per core.
pub fn worker_slots() -> usize {
    static SLOTS: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *SLOTS.get_or_init(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
}

/// This thread's slot: its data-plane worker's number from 1, or 0 (see [`enter_worker`]).
pub fn slot() -> usize {
    SLOT.get()
}

/// Whether this thread is a data-plane worker's (see [`enter_worker`]).
pub fn on_worker() -> bool {
    SLOT.get() != 0
}

/// Marks this thread as data-plane worker `worker` (from 0, below [`worker_slots`]): its connections to
/// replicas go in a slot of their own.
pub fn enter_worker(worker: usize) {
    SLOT.set((worker + 1).min(worker_slots()));
}
