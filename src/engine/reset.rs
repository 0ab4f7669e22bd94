//! A reset: one limit's states back to fresh (a full bucket, empty windows, log and table, no
//! permits), its live parameters kept, each kind's words as its engine lays them out. Called by
//! `Limit::reset` under the retune lock, and through [`super::reboot::HOOKS`] by the first open
//! after a reboot of a file that resets then (or for permits, which die with their holders).

use std::sync::atomic::Ordering;

use super::bucket;
use crate::file::{layout, reboot, Mapped};
use crate::spec::Algorithm;

/// Return limit `index`'s state to fresh, keeping its live parameters (moved to parameter slot
/// 0 for a bucket). A reset races with decisions by design: they retry on the new words.
pub(crate) fn reset_limit(mapped: &Mapped, index: usize) {
    let def = &mapped.defs[index];
    let (offset, len) = mapped.geometry.slots[index];
    if let Algorithm::TokenBucket { .. } = def.algorithm {
        bucket::reset_params(mapped.words(offset, layout::LINE / 8));
    }
    match def.algorithm {
        Algorithm::Concurrency { .. } | Algorithm::AdaptiveConcurrency(_) => {
            for w in mapped.words(offset, len / 8) {
                w.store(0, Ordering::Relaxed);
            }
        }
        _ => {
            // Release: after the parameter slot a bucket's fresh word names (above), so that a
            // decision that loads it (Acquire) sees the copied slot, never the slot's contents
            // from before the last retune. The boot-id path publishes a reboot's reset with a
            // Release store afterwards.
            mapped.word(offset).store(0, Ordering::Release);
            for w in mapped.words(offset + layout::LINE, (len - layout::LINE) / 8) {
                w.store(0, Ordering::Relaxed);
            }
        }
    }
    reboot::clear_failed(mapped, index);
}
