//! The engines' reboot hooks, as the table `file::reboot` calls ([`HOOKS`]): the first open
//! after a boot-id change hands each limit to [`translate_limit`], which matches the limit's
//! kind once and runs its engine's hook over the limit's words (see the module docs of
//! `file::reboot` for the rules and the protocol around them), or, for a file that resets at a
//! reboot, to the engines' reset (`engine::reset`). `file/` does not import the engines; a
//! caller that opens a file passes [`HOOKS`] down.
//!
//! | kind | hook |
//! |---|---|
//! | token bucket (split, keyed) | [`bucket::reboot`](super::bucket::reboot): each state `tat + D`; the fleet lease forgotten ([`bucket::forget_lease`](super::bucket::forget_lease)) |
//! | fixed, sliding window (keyed) | [`window::reboot`](super::window::reboot): the window holding its last instant |
//! | sliding log | [`log::reboot`](super::log::reboot): each entry's time, expired ones freed |
//! | counters | [`counters::reboot`](super::counters::reboot): counter words, deadlines and log times |
//! | concurrency, adaptive concurrency | reset: permits die with their holders |

use std::sync::atomic::{AtomicU64, Ordering};

use super::reset::reset_limit;
use super::{bucket, counters, log, window};
use crate::file::reboot::{ok, EngineHooks, Moved, Shift};
use crate::file::{layout, Mapped};
use crate::spec::Algorithm;

/// The engines' hooks, as opening a file passes them to `file::reboot`.
pub(crate) static HOOKS: EngineHooks = EngineHooks {
    translate: translate_limit,
    reset: reset_limit,
};

/// Translate limit `index`'s states onto this boot's timeline; true if one of them could not
/// be translated and was stored failing closed. Runs under the file's exclusive lock, before
/// the boot id is published (so every access here is Relaxed).
pub(crate) fn translate_limit(mapped: &Mapped, index: usize, shift: &Shift) -> bool {
    let def = &mapped.defs[index];
    let (offset, _) = mapped.geometry.slots[index];
    let state = |w: u64| -> Moved {
        match def.algorithm {
            Algorithm::TokenBucket { .. } => bucket::reboot::state(shift, w),
            Algorithm::FixedWindow {
                limit,
                window_ns,
                alignment,
            } => window::reboot::fixed(shift, w, limit, window_ns, alignment),
            Algorithm::SlidingWindow {
                limit,
                window_ns,
                alignment,
            } => window::reboot::sliding(shift, w, limit, window_ns, alignment),
            Algorithm::SlidingLog { .. }
            | Algorithm::Counters { .. }
            | Algorithm::Concurrency { .. }
            | Algorithm::AdaptiveConcurrency(_) => ok(w),
        }
    };
    let mut failed = false;
    let mut apply = |cell: &AtomicU64, f: &dyn Fn(u64) -> Moved| {
        let m = f(cell.load(Ordering::Relaxed));
        failed |= m.failed;
        cell.store(m.word, Ordering::Relaxed);
    };
    if let Algorithm::TokenBucket { .. } = def.algorithm {
        bucket::forget_lease(mapped.words(offset, layout::LINE / 8));
    }
    match (def.algorithm, def.keyed) {
        (Algorithm::Concurrency { .. } | Algorithm::AdaptiveConcurrency(_), _) => {
            // Permits die with their holders; an adaptive limit's window start is a time of
            // the dead boot's clock, and it starts again from its initial limit.
            reset_limit(mapped, index);
        }
        (Algorithm::Counters { log_entries }, Some(k)) => {
            counters::reboot::translate(mapped, offset, k.slots() as usize, log_entries, shift);
        }
        (_, Some(k)) => {
            // A keyed limit: the state word of every claimed key slot.
            let words = mapped.words(
                offset + layout::LINE,
                layout::key_table_words(k.slots() as usize),
            );
            for pair in words.chunks_exact(2) {
                if pair[0].load(Ordering::Relaxed) != layout::KEY_EMPTY {
                    apply(&pair[1], &state);
                }
            }
        }
        (Algorithm::SlidingLog { limit, window_ns }, None) => {
            for e in mapped.words(offset + layout::LINE, limit as usize) {
                apply(e, &|w| log::reboot::entry(shift, w, window_ns));
            }
        }
        (_, None) => {
            // A bucket (each sub-bucket of a split one) or a window: the control line's words.
            for line in 0..def.split.max(1) as usize {
                apply(mapped.word(offset + line * layout::LINE), &state);
            }
        }
    }
    failed
}
