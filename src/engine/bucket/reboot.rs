//! The token bucket's reboot hook: its state words (and a split bucket's sub-buckets, and the
//! states of a keyed bucket) move by the shift, keeping their parameter-slot tag.

use crate::file::layout::bucket::PARAM_TAG;
use crate::file::reboot::{ok, Moved, Shift};

/// The largest TAT a state word holds.
const TAT_MAX: u64 = (1 << 63) - 1;

/// A token-bucket state word (bit 63: parameter-slot tag): `tat + D`; a TAT before this boot's
/// origin is a full bucket (0); one past the word's range fails closed at the farthest TAT.
pub(crate) fn state(shift: &Shift, w: u64) -> Moved {
    let tag = w & PARAM_TAG;
    let tat = w & !PARAM_TAG;
    if tat == 0 {
        return ok(w);
    }
    let moved = shift.time(tat as i128);
    let (new, failed) = if moved <= 0 {
        (0, false)
    } else if moved > TAT_MAX as i128 {
        (TAT_MAX, true)
    } else {
        (moved as u64, false)
    };
    Moved {
        word: tag | new,
        failed,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::file::reboot::tests::shift;

    #[test]
    fn a_bucket_moves_by_the_wall_clock_and_keeps_its_tag() {
        let s = shift(-1_000);
        assert_eq!(state(&s, PARAM_TAG | 5_000).word, PARAM_TAG | 4_000);
        assert_eq!(state(&s, 500).word, 0, "before the origin: full");
        assert_eq!(state(&s, PARAM_TAG).word, PARAM_TAG, "fresh stays fresh");
        let far = shift(i64::MAX as i128);
        assert!(state(&far, TAT_MAX - 5).failed);
        let mut again = shift(-1_000);
        again.interrupted = true;
        assert_eq!(state(&again, 5_000).word, 5_000, "the stricter reading");
    }
}
