//! The atomic facade every algorithm is written against.
//!
//! Algorithms never name `std::sync::atomic` directly: they take `&A where A: AtomicWord`. In
//! production `A` is [`std::sync::atomic::AtomicU64`] living in the mapped file; in the loom models
//! (which run in plain `cargo test`) it is `loom::sync::atomic::AtomicU64`, so the exact code that
//! runs on the mapping is the code that is model-checked.

use std::sync::atomic::{AtomicU64, Ordering};

/// A 64-bit word that supports the operations the algorithms need.
pub trait AtomicWord {
    /// Atomic load.
    fn load(&self, order: Ordering) -> u64;
    /// Atomic store.
    fn store(&self, value: u64, order: Ordering);
    /// Strong compare-and-swap.
    fn compare_exchange(
        &self,
        current: u64,
        new: u64,
        success: Ordering,
        failure: Ordering,
    ) -> Result<u64, u64>;
}

impl AtomicWord for AtomicU64 {
    #[inline(always)]
    fn load(&self, order: Ordering) -> u64 {
        AtomicU64::load(self, order)
    }
    #[inline(always)]
    fn store(&self, value: u64, order: Ordering) {
        AtomicU64::store(self, value, order)
    }
    #[inline(always)]
    fn compare_exchange(
        &self,
        current: u64,
        new: u64,
        success: Ordering,
        failure: Ordering,
    ) -> Result<u64, u64> {
        AtomicU64::compare_exchange(self, current, new, success, failure)
    }
}

#[cfg(test)]
impl AtomicWord for loom::sync::atomic::AtomicU64 {
    fn load(&self, order: Ordering) -> u64 {
        loom::sync::atomic::AtomicU64::load(self, order)
    }
    fn store(&self, value: u64, order: Ordering) {
        loom::sync::atomic::AtomicU64::store(self, value, order)
    }
    fn compare_exchange(
        &self,
        current: u64,
        new: u64,
        success: Ordering,
        failure: Ordering,
    ) -> Result<u64, u64> {
        loom::sync::atomic::AtomicU64::compare_exchange(self, current, new, success, failure)
    }
}

/// The atomic operations the permit table and the shared counter lane need beyond
/// [`AtomicWord`].
pub(crate) trait PermitAtomic: AtomicWord {
    /// Atomic wrapping add; returns the previous value.
    fn fetch_add(&self, value: u64, order: Ordering) -> u64;
    /// A sequentially consistent fence (the loom models' own under loom).
    fn fence_seq_cst();
}

impl PermitAtomic for std::sync::atomic::AtomicU64 {
    #[inline(always)]
    fn fetch_add(&self, value: u64, order: Ordering) -> u64 {
        std::sync::atomic::AtomicU64::fetch_add(self, value, order)
    }
    #[inline(always)]
    fn fence_seq_cst() {
        std::sync::atomic::fence(Ordering::SeqCst)
    }
}

#[cfg(test)]
impl PermitAtomic for loom::sync::atomic::AtomicU64 {
    fn fetch_add(&self, value: u64, order: Ordering) -> u64 {
        loom::sync::atomic::AtomicU64::fetch_add(self, value, order)
    }
    fn fence_seq_cst() {
        loom::sync::atomic::fence(Ordering::SeqCst)
    }
}

/// The one runner of the loom models (the `loom_models.rs` files and the composition's), so that
/// every model is explored the same way.
#[cfg(test)]
pub(crate) mod loom_runner {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    use std::time::Instant;

    /// Run `f` under every interleaving loom explores with at most `preemptions` forced switches
    /// (`LOOM_MAX_PREEMPTIONS` overrides it, to explore deeper by hand), and print how many
    /// executions that took and how long.
    pub(crate) fn model<F>(name: &str, preemptions: usize, f: F)
    where
        F: Fn() + Sync + Send + 'static,
    {
        let mut builder = loom::model::Builder::new();
        if std::env::var_os("LOOM_MAX_PREEMPTIONS").is_none() {
            builder.preemption_bound = Some(preemptions);
        }
        // A model explores everything within its bound: no cut-off by time or by count, whatever
        // the environment says.
        builder.max_duration = None;
        builder.max_permutations = None;
        let executions = Arc::new(AtomicUsize::new(0));
        let counter = Arc::clone(&executions);
        let start = Instant::now();
        builder.check(move || {
            // Relaxed: a statistic printed after the model; it orders nothing.
            counter.fetch_add(1, Ordering::Relaxed);
            f();
        });
        eprintln!(
            "loom model {name}: {} executions in {:.2?}",
            executions.load(Ordering::Relaxed),
            start.elapsed()
        );
    }
}
