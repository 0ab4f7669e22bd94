//! The engines: each state machine's words in the file, and the code that reads and writes
//! them, written against [`AtomicWord`](crate::sync::AtomicWord) so that the loom models run it
//! unchanged.
//!
//! # Implementation details
//!
//! The pure decisions live in [`crate::algo`] (`step(now, word, cost)`), and every change of
//! one state word goes through its one mutation loop, [`crate::algo::mutate`]. What is here is
//! one engine per kind, each owning its words and the protocol around them, and the site they
//! decide on:
//!
//! | engine | its words and decisions |
//! |---|---|
//! | [`bucket`] (`Bucket(site)`) | the token bucket's two parameter slots, their check words, the `ACTIVE` word with the generation of the slots (checked after a CAS that admitted: an admission decided with replaced parameters is given back), the fence slot, the bit-63 tag of its state words (a live retune, the rescale of a state to the new slot); its decisions, retunes, split sub-buckets, fleet shares and reservations |
//! | [`window`] (`Window(site)`) | a fixed or sliding window's state word and packed live limit; its decisions and retune |
//! | [`log`] (`Log(site)`) | a sliding log's head word and entries |
//! | [`permits`] (`Permits(site)`) | a concurrency limit's owner words (keyed: permit blocks per key), futex waits, reclaiming the dead's permits |
//! | [`adaptive`] (`Adaptive(site)`, `KeyedAdaptive(site)`) | an adaptive concurrency limit's pooled words (keyed: four words per key slot) and its grants within the current limit, over the permits' entries |
//! | [`keyed`] (`Keyed(site)`) | a keyed limit's decisions, over [`keys`], the table of 16-byte key slots (lookup, claims, reclaim, retune) over any word algorithm |
//! | [`counters`] (`Counters(site)`) | a counters limit's two key tables (fixed and sliding window counters; moving-window log deadlines) and its per-key logs: keyed counters whose window and limit come with each call |
//! | [`reboot`] | the table of the engines' hooks (each engine's `reboot` module, and [`reset`]: a limit back to fresh), which opening a file passes down to `file::reboot` |
//! | [`site`] | one limit's words, clock and counters as this process holds them, the file that replaced its file, and what every decision shares (the straight loop, the refund of a grant, then shadow mode, near-limit and counters) |
//!
//! Each engine is a view of the limit's site, one reference; the typed handles call the engine
//! of their kind on it, and so does the binding dispatch (`handle::dispatch`: a composed check,
//! a guarded handle, the C ABI's composed check), once it has matched the kind. An engine
//! never tests the kind it was given: each unkeyed rate engine has the same calls (`run` for a
//! committed, peeked or dated decision, `refund_units`, `acquire_timeout`) behind its straight
//! `try_acquire`.
//!
//! [`Params`] is what a handle keeps in process memory per limit: which engine decides, with the
//! parameters that never change live.
//!
//! # One token-bucket decision, file by file
//!
//! `TokenBucketLimit::try_acquire(cost)`, uncontended, as it runs today:
//!
//! 1. `handle/rate.rs`: `Handle::try_acquire` asks its kind (`handle/kind.rs`, a sealed
//!    trait, resolved at compile time) for the kind's call: the bucket engine on the handle's
//!    site, `Bucket(site).try_acquire_bucket(cost)`;
//! 2. `engine/bucket/decide.rs`: `bucket_fast` reads `ACTIVE` (the [`bucket`] generation, the
//!    witness) and runs the straight path every engine shares, `Site::decide_fast`
//!    (`engine/site/finish.rs`): the one mutation loop, `algo::try_decide` (`algo/mod.rs`:
//!    load the word, read the clock, step, CAS), whose step (back in `decide.rs`) matches this
//!    thread's hot entry (`tally/hot.rs`: the parameters of the slot the word's tag names,
//!    cached per generation) and applies [`bucket::step`] (the tag kept around `Gcra::step`,
//!    `algo/gcra.rs`);
//! 3. after the CAS: `ACTIVE` again, in `decide.rs` (an admission whose parameters were
//!    replaced meanwhile is given back, [`bucket::give_back`], and decided again), then the
//!    counters (`finish.rs` `finish_counted`, `tally/mod.rs` `Tally::after_owned`).
//!
//! Five files from the handle to the CAS (`handle/rate.rs`, `handle/kind.rs`,
//! `engine/bucket/decide.rs`, `engine/site/finish.rs`, `algo/mod.rs`), every call inlined into
//! one function. Every case the straight path leaves (no hot entry, a fleet share past its
//! lease, a shadow limit, an error, a replaced file) gives up having written nothing and
//! decides again out of line (`Bucket::run`: the general loop `Bucket::bucket_run`, or the
//! sub-buckets of a split bucket), which handles them all.
//!
//! Each engine is a view of the limit's site (`Bucket(site)`, `Window(site)`, `Log(site)`,
//! `Permits(site)`, `Keyed(site)`): one reference, inlined away; its out-of-line methods take
//! the view by value (by reference, the caller would store it on its stack for the call).
//!
//! # What a new kind adds
//!
//! Its pure step under `algo/` (a function of `(now, word, parameters)`, with a reference model
//! test and a loom model through the shared mutation loop), its engine here (a view of the
//! site, `Engine(site)`, in a file or directory of its own, owning its words and decisions,
//! with a `reboot` module moving its stored times, one row in [`reboot`]'s table), a
//! kind marker and its traits in `handle/kind.rs` (with a [`LimitKind`](crate::LimitKind)
//! variant in `spec/kind.rs`), its arms in the binding dispatch (`handle/dispatch.rs`) for the
//! calls untyped holders may make of it, its record in the file layout (`file/layout.rs`, with
//! a format version), and its rows in the binding tables (the C status and kind enums, then
//! the Python and Node packages).
//!
//! The keyed adaptive concurrency limit, added that way, touched: `engine/adaptive/keyed.rs`
//! (its protocols over any word type, with the invariant argument) and `keyed_loom_models.rs`,
//! `engine/adaptive/per_key.rs` (the engine on the site), `engine/permits/keyed.rs` (a grant
//! within a cap per key, checked by the bit's CAS; a release that reports before clearing its
//! bit), `engine/permits/{protocol,calls,mod}.rs` (a release carrying its sample, the keyed
//! concurrency calls refusing it), `handle/keyed_adaptive.rs`, `handle/{kind,resolve,dispatch,
//! mod}.rs`, `spec/{kind,def}.rs`, `file/layout.rs` (its slot, no version bump) and the C ABI
//! (`ffi/src/keyed_adaptive.rs`, `ffi/bindings/src/handle.rs`). Its algorithm is the unkeyed
//! one's (`algo/adaptive.rs`, unchanged), its reboot hook and reset the unkeyed one's (permits
//! die with their holders, the whole slot region back to zero), its key table every keyed
//! limit's.

/// Clone, Copy and Deref (to the site) for an engine's view, `struct Name<'a, C>(&'a Site<C>)`:
/// the view is a reference whatever the clock (a derive would require `C: Copy`), and an
/// engine reads its site's words and clock through it.
macro_rules! site_view {
    ($view:ident) => {
        impl<C: $crate::clock::Clock> Clone for $view<'_, C> {
            #[inline(always)]
            fn clone(&self) -> Self {
                *self
            }
        }

        impl<C: $crate::clock::Clock> Copy for $view<'_, C> {}

        impl<C: $crate::clock::Clock> std::ops::Deref for $view<'_, C> {
            type Target = $crate::engine::site::Site<C>;
            #[inline(always)]
            fn deref(&self) -> &$crate::engine::site::Site<C> {
                self.0
            }
        }
    };
}

pub(crate) mod adaptive;
pub(crate) mod bucket;
pub(crate) mod counters;
pub(crate) mod keyed;
pub(crate) mod keys;
pub(crate) mod log;
pub(crate) mod permits;
pub(crate) mod rate;
pub(crate) mod reboot;
pub(crate) mod reset;
pub(crate) mod site;
pub(crate) mod window;

#[cfg(test)]
mod loom_models;

use crate::algo::fixed_window::FixedWindow;
use crate::algo::sliding_log::SlidingLog;
use crate::algo::sliding_window::SlidingWindow;
use crate::spec::{Algorithm, Alignment};

/// Why a single-word step could not decide (see [`Site::step_fast`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum StepError {
    /// Damaged live parameters.
    Corrupt,
    /// The cost exceeds this capacity.
    Cost(u64),
    /// The limit has no single-word state.
    NoWord,
    /// A fleet-managed bucket past its lease whose fence cannot grant the cost.
    Fenced,
    /// A fleet-managed bucket past its lease whose fence slot is being rewritten (see
    /// `Bucket::fence_params`): deny, and retry shortly.
    FenceRewrite,
    /// The state word names a parameter slot that a later retune is rewriting (the decision
    /// loaded the word before two retunes in a row): the word is stale, decide again from the
    /// live one.
    Stale,
}

/// The per-limit parameters a decision needs, in process memory. Live-tunable parameters (the
/// bucket's rate and capacity, a window's limit) are read from the control line instead.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Params {
    TokenBucket,
    FixedWindow(FixedWindow),
    SlidingWindow(SlidingWindow),
    SlidingLog(SlidingLog),
    Concurrency {
        permits: u64,
        lease_ns: u64,
    },
    /// Keyed counters: the file's wall offset (the phase of Unix-aligned sliding windows) and
    /// the entries of each key's moving-window log.
    Counters {
        wall_offset: u64,
        log_entries: u64,
    },
}

impl Params {
    /// Whether the state counts admissions per window of time (fixed window, sliding window
    /// counter, sliding log): such a state must never be dated ahead of the clock.
    #[inline(always)]
    pub(crate) fn counts_windows(&self) -> bool {
        matches!(
            self,
            Params::FixedWindow(_) | Params::SlidingWindow(_) | Params::SlidingLog(_)
        )
    }
}

/// The in-process parameters of a limit defined as `algorithm`, in a file whose wall-clock
/// offset is `wall_offset` (the phase of aligned windows).
pub(crate) fn params_of(algorithm: &Algorithm, wall_offset: u64) -> Params {
    let phase = |window_ns: u64, alignment: Alignment| alignment.phase_ns(window_ns, wall_offset);
    match *algorithm {
        Algorithm::TokenBucket { .. } => Params::TokenBucket,
        Algorithm::FixedWindow {
            limit,
            window_ns,
            alignment,
        } => Params::FixedWindow(FixedWindow {
            limit,
            window_ns: if alignment.is_months(window_ns) {
                crate::algo::fixed_window::MONTHS
            } else {
                window_ns
            },
            phase_ns: phase(window_ns, alignment),
        }),
        Algorithm::SlidingWindow {
            limit,
            window_ns,
            alignment,
        } => Params::SlidingWindow(SlidingWindow {
            limit,
            window_ns,
            phase_ns: phase(window_ns, alignment),
        }),
        Algorithm::SlidingLog { limit, window_ns } => {
            Params::SlidingLog(SlidingLog { limit, window_ns })
        }
        Algorithm::Concurrency { permits, lease_ns } => Params::Concurrency { permits, lease_ns },
        // An adaptive limit's permits are a concurrency limit's `max` entries; its pooled words
        // and the count it grants are the adaptive engine's.
        Algorithm::AdaptiveConcurrency(a) => Params::Concurrency {
            permits: a.max,
            lease_ns: a.lease_ns,
        },
        Algorithm::Counters { log_entries } => Params::Counters {
            wall_offset,
            log_entries,
        },
    }
}
