//! How far a reboot moves the stored times ([`Shift`]), and the clock arithmetic every engine's
//! translation shares: window indices on the old and the new timeline. What a state word
//! becomes is its engine's (the `reboot` module of each engine, listed by
//! `engine::reboot::translate_limit`); see the module docs of `file::reboot` for the rules.

use crate::spec::Alignment;

/// How to move one old-boot state onto this boot's timeline.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Shift {
    /// Nanoseconds to add to an old-boot time: `P_old (highest) - P_new`.
    pub d: i128,
    /// The old boot's phase offset (word 16) and this boot's wall offset.
    pub phase_old: u64,
    pub phase_new: u64,
    /// The reference on the old timeline for recovering truncated window indices.
    pub reference: i128,
    /// This boot's monotonic now at the translation.
    pub now: u64,
    /// A translation of this boot was interrupted: store the stricter reading of every word.
    pub interrupted: bool,
}

/// What one translated word came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Moved {
    pub word: u64,
    /// The state could not be represented and was stored failing closed.
    pub failed: bool,
}

/// A word moved (or left) as it is, not failed closed.
pub(crate) fn ok(word: u64) -> Moved {
    Moved {
        word,
        failed: false,
    }
}

fn floor_div(a: i128, b: u64) -> i128 {
    a.div_euclid(b as i128)
}

/// The full index of the window holding `t` (`now + phase`): calendar months or `t / W`.
pub(crate) fn index_of(t: i128, window_ns: u64, alignment: Alignment) -> i128 {
    if alignment.is_months(window_ns) {
        if t < 0 {
            floor_div(t, window_ns)
        } else {
            crate::algo::calendar::month_index(t.min(u64::MAX as i128) as u64) as i128
        }
    } else {
        floor_div(t, window_ns)
    }
}

/// Where window `k` starts, in the units of `now + phase`.
fn start_of(k: i128, window_ns: u64, alignment: Alignment) -> i128 {
    if alignment.is_months(window_ns) && k >= 0 {
        crate::algo::calendar::month_start(k.min(u64::MAX as i128) as u64) as i128
    } else {
        k * window_ns as i128
    }
}

impl Shift {
    /// What this translation adds to a stored time: `D`, or after an interrupted translation
    /// `max(D, 0)`, so that a time that may already have moved keeps the later (stricter) of
    /// its two readings and is never moved earlier twice.
    pub(crate) fn delta(&self) -> i128 {
        if self.interrupted {
            self.d.max(0)
        } else {
            self.d
        }
    }

    /// An old-boot time on this boot's timeline: `t + delta()`.
    pub(crate) fn time(&self, t: i128) -> i128 {
        t + self.delta()
    }

    /// The phase of a window of `window_ns` on the old (`old`) or this boot's timeline.
    pub(crate) fn phase(&self, old: bool, window_ns: u64, alignment: Alignment) -> u64 {
        let wall = if old { self.phase_old } else { self.phase_new };
        alignment.phase_ns(window_ns, wall)
    }

    /// The full index, on the old timeline, of the window holding the reference: a stored
    /// index truncated to its encoding's bits is recovered nearest to it.
    pub(crate) fn old_reference_window(&self, window_ns: u64, alignment: Alignment) -> i128 {
        index_of(
            self.reference + self.phase(true, window_ns, alignment) as i128,
            window_ns,
            alignment,
        )
    }

    /// The new full index of old window `k`: the window of this boot that holds the old
    /// window's last instant after the shift. For wall-aligned windows whose boot kept one wall
    /// offset this is exactly the same calendar window; a wall clock stepped forward during the
    /// old boot (a highest offset above the phase word) moves it later, never earlier.
    pub(crate) fn window(&self, k: i128, window_ns: u64, alignment: Alignment) -> i128 {
        let last = start_of(k + 1, window_ns, alignment)
            - self.phase(true, window_ns, alignment) as i128
            - 1;
        index_of(
            last + self.d + self.phase(false, window_ns, alignment) as i128,
            window_ns,
            alignment,
        )
    }

    /// The index of this boot's now, with this boot's phase.
    pub(crate) fn now_window(&self, window_ns: u64, alignment: Alignment) -> i128 {
        index_of(
            self.now as i128 + self.phase(false, window_ns, alignment) as i128,
            window_ns,
            alignment,
        )
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) const DAY: u64 = 86_400_000_000_000;

    /// A shift of `d` ns with both phases 0, the reference and now at 0.
    pub(crate) fn shift(d: i128) -> Shift {
        Shift {
            d,
            phase_old: 0,
            phase_new: 0,
            reference: 0,
            now: 0,
            interrupted: false,
        }
    }

    #[test]
    fn times_move_by_the_shift_or_keep_the_later_reading() {
        assert_eq!(shift(-1_000).time(5_000), 4_000);
        let mut again = shift(-1_000);
        again.interrupted = true;
        assert_eq!(again.time(5_000), 5_000, "the stricter reading");
    }

    #[test]
    fn a_window_moves_to_the_new_window_holding_its_last_instant() {
        let s = shift(-(DAY as i128) / 2);
        // Old window 10 (days 10..11) ends at day 11 - 1 ns; half a day earlier is in day 10.
        assert_eq!(s.window(10, DAY, Alignment::Monotonic), 10);
        let later = shift(DAY as i128 / 2);
        assert_eq!(later.window(10, DAY, Alignment::Monotonic), 11);
    }
}
