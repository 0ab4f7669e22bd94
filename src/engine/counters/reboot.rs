//! The counters' reboot hook: every live key's counter word and log deadline moves by the
//! shift, and so does every log entry's time (see `algo::counters::shift`; a time that would
//! fall before this boot's timeline starts is clamped to its start, which dates an admission
//! later, never earlier). After an interrupted translation nothing moves earlier
//! ([`Shift::delta`]): a word may already have moved once.

use std::sync::atomic::Ordering;

use crate::file::reboot::Shift;
use crate::file::{layout, Mapped};

/// Move the words of the counters limit at `offset` (its control line) with `slots` key slots
/// and `entries` log entries per key. Runs under the file lock, before the boot id is
/// published (so every access here is Relaxed).
pub(crate) fn translate(mapped: &Mapped, offset: usize, slots: usize, entries: u64, shift: &Shift) {
    let table = layout::key_table_words(slots);
    let area = offset + layout::LINE;
    let moved = |t: u64| -> u64 {
        if t == 0 {
            0
        } else {
            shift.time(t as i128).clamp(0, u64::MAX as i128 >> 1) as u64
        }
    };
    let counters = mapped.words(area, table);
    for pair in counters.chunks_exact(2) {
        if pair[0].load(Ordering::Relaxed) != layout::KEY_EMPTY {
            let w = pair[1].load(Ordering::Relaxed);
            pair[1].store(
                crate::algo::counters::shift(w, shift.delta()),
                Ordering::Relaxed,
            );
        }
    }
    let logs = mapped.words(area + table * 8, table);
    for pair in logs.chunks_exact(2) {
        if pair[0].load(Ordering::Relaxed) != layout::KEY_EMPTY {
            let d = pair[1].load(Ordering::Relaxed);
            pair[1].store(moved(d), Ordering::Relaxed);
        }
    }
    let log = mapped.words(area + 2 * table * 8, 2 * slots * entries as usize);
    for entry in log.chunks_exact(2) {
        if entry[0].load(Ordering::Relaxed) != 0 {
            let t = entry[1].load(Ordering::Relaxed);
            entry[1].store(moved(t), Ordering::Relaxed);
        }
    }
}
