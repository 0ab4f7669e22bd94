//! Keyed counters whose window comes with each call: the state words of a counters limit (see
//! [`crate::engine::counters`]), for storage adapters such as Python's `limits` package, whose
//! callers name a key, an amount and a window with every call.
//!
//! # Implementation details
//!
//! One state word per key, in the key table of the limit. Bit 63 says which of two encodings a
//! word has, and every word carries the time at which it becomes *fresh* (counts nothing), so
//! that the key table can judge another key's word without knowing that key's window:
//!
//! ```text
//!  63  62                         24 23                     0
//! +---+-----------------------------+------------------------+
//! | 0 | deadline / 2^21 ns (39 bits)|  count (24 bits)       |   fixed window (a counter)
//! +---+-----------------------------+------------------------+
//!  63  62             35 34   32 31          16 15          0
//! +---+-----------------+-------+--------------+-------------+
//! | 1 | fresh / 2^30 ns | k % 8 |  prev (16)   |  cur (16)   |   sliding window counter
//! +---+-----------------+-------+--------------+-------------+
//! ```
//!
//! **Fixed window** (a counter with an expiry, as `limits` counts): the first increment after
//! the deadline starts a window of `W` at that instant (`deadline = now + W`, rounded *up* to
//! 2^21 ns, so a window is never shorter than asked); each increment adds its amount until the
//! deadline. `acquire` admits `n` iff `count + n <= L`. Deadlines reach 2^60 ns (36 years of
//! uptime); counts reach 2^24 - 1, and an increment past that is refused, never wrapped.
//!
//! **Sliding window counter** (the weighted estimate, `limits`' semantics): windows are aligned
//! on Unix time, window `k = floor((now + wall) / W)` where `wall` is realtime - monotonic (the
//! file's wall offset), and the estimate at elapsed `e` into window `k` is
//! `floor(prev (W - e) / W) + cur`; `n` is admitted iff `estimate + n <= L`, and then added to
//! `cur`. The word keeps `k mod 8` and the monotonic time at which both windows are over,
//! `(k + 2) W - wall`, rounded up to 2^30 ns (so a word is fresh only once it truly counts
//! nothing). While a word is not fresh, the clock is at most `2 + 2^30 / W` windows past the
//! stored one; with `W >= 2^28` ns ([`MIN_SLIDING_WINDOW_NS`]) that is at most 6, and a word
//! written by a process whose clock read was a little newer is at most one window ahead: the
//! eight values of `k mod 8` tell every case apart. Limits reach 2^16 - 1.

use crate::error::{Error, Result};

/// Bit 63: the word is a sliding-window counter's.
const SLIDING: u64 = 1 << 63;

const FIXED_UNIT_SHIFT: u32 = 21;
const FIXED_COUNT_BITS: u32 = 24;
const FIXED_DEADLINE_MASK: u64 = (1 << 39) - 1;
/// The largest count of a fixed window (an increment past it is refused).
pub const MAX_COUNT: u64 = (1 << FIXED_COUNT_BITS) - 1;

const SLIDING_UNIT_SHIFT: u32 = 30;
const SLIDING_FRESH_MASK: u64 = (1 << 28) - 1;
/// The largest limit of a sliding window counter (16-bit counts).
pub const MAX_SLIDING_LIMIT: u64 = (1 << 16) - 1;
/// The shortest window of a sliding window counter: `2^28` ns (about 268 ms; see the module
/// docs).
pub const MIN_SLIDING_WINDOW_NS: u64 = 1 << 28;
/// The shortest window of any call: 1 ms.
pub const MIN_WINDOW_NS: u64 = 1_000_000;
/// The longest window of any call: 2^55 ns (about 417 days), so that every deadline of a
/// process whose clock is below [`MAX_NOW_NS`] fits its word.
pub const MAX_WINDOW_NS: u64 = 1 << 55;
/// The latest clock reading the words can date: 2^57 ns (about 4.5 years of uptime; a
/// translated reboot keeps the timeline of the first boot).
pub const MAX_NOW_NS: u64 = 1 << 57;

/// The deadline (monotonic ns) of a fixed-window word; 0 for the zero word.
#[inline]
pub(crate) fn fixed_deadline(word: u64) -> u64 {
    ((word >> FIXED_COUNT_BITS) & FIXED_DEADLINE_MASK) << FIXED_UNIT_SHIFT
}

/// The count a fixed-window word holds (whatever its deadline).
#[inline]
pub(crate) fn fixed_count(word: u64) -> u64 {
    word & MAX_COUNT
}

/// A fixed-window word of `count` until `deadline_ns` (rounded up to the word's unit).
#[inline]
pub(crate) fn fixed_word(deadline_ns: u64, count: u64) -> u64 {
    let units = deadline_ns.div_ceil(1 << FIXED_UNIT_SHIFT) & FIXED_DEADLINE_MASK;
    (units << FIXED_COUNT_BITS) | (count & MAX_COUNT)
}

/// The monotonic time at which `word` counts nothing any more (0: already fresh).
#[inline]
pub(crate) fn fresh_at(word: u64) -> u64 {
    if word & SLIDING != 0 {
        ((word >> 35) & SLIDING_FRESH_MASK) << SLIDING_UNIT_SHIFT
    } else {
        fixed_deadline(word)
    }
}

/// Whether `word` counts nothing at `now`.
#[inline]
pub(crate) fn is_fresh(now: u64, word: u64) -> bool {
    fresh_at(word) <= now
}

/// What a fixed-window word counts at `now`: `(count, deadline)`, zero once over.
#[inline]
pub(crate) fn fixed_view(now: u64, word: u64) -> Result<(u64, u64)> {
    if word & SLIDING != 0 {
        return Err(corrupt());
    }
    Ok(if is_fresh(now, word) {
        (0, 0)
    } else {
        (fixed_count(word), fixed_deadline(word))
    })
}

fn corrupt() -> Error {
    Error::CorruptState {
        limit: String::new(),
    }
}

/// The word after adding `amount` at `now` to a fixed window of `window_ns`, and the count it
/// holds then. A fresh word starts a window at `now`.
///
/// # Errors
///
/// [`Error::CostExceedsCapacity`] when the count would pass [`MAX_COUNT`] (nothing added).
#[inline]
pub(crate) fn incr(now: u64, word: u64, window_ns: u64, amount: u64) -> Result<(u64, u64)> {
    let (count, deadline) = fixed_view(now, word)?;
    let deadline = if deadline == 0 {
        now + window_ns
    } else {
        deadline
    };
    let new = count
        .checked_add(amount)
        .filter(|&c| c <= MAX_COUNT)
        .ok_or(Error::CostExceedsCapacity {
            cost: amount,
            capacity: MAX_COUNT - count,
        })?;
    Ok((fixed_word(deadline, new), new))
}

/// The word after taking `amount` at `now` from a fixed window (never below zero; the window
/// keeps its deadline), and the count it holds then; `None` when the window counts nothing
/// (a fresh word stays as it is).
#[inline]
pub(crate) fn decr(now: u64, word: u64, amount: u64) -> Result<Option<(u64, u64)>> {
    let (count, deadline) = fixed_view(now, word)?;
    if deadline == 0 {
        return Ok(None);
    }
    let new = count.saturating_sub(amount);
    Ok(Some((fixed_word(deadline, new), new)))
}

/// A fixed-window word holding `count` in a window of `window_ns` that starts at `now`,
/// whatever the word held before.
///
/// # Errors
///
/// [`Error::CostExceedsCapacity`] when `count` passes [`MAX_COUNT`].
#[inline]
pub(crate) fn set(now: u64, window_ns: u64, count: u64) -> Result<u64> {
    if count > MAX_COUNT {
        return Err(Error::CostExceedsCapacity {
            cost: count,
            capacity: MAX_COUNT,
        });
    }
    Ok(fixed_word(now + window_ns, count))
}

/// The elapsed time in the Unix-aligned window of `window_ns` holding `now`, and its index.
#[inline]
pub(crate) fn sliding_position(now: u64, wall: u64, window_ns: u64) -> (u64, u64) {
    let t = now as u128 + wall as u128;
    let k = t / window_ns as u128;
    (k as u64, (t % window_ns as u128) as u64)
}

/// A sliding-window word as seen at `now`: `(k, prev, cur, elapsed)` of the window holding
/// the counts (the stored window if it is one ahead of `now`, with no time elapsed in it).
#[inline]
pub(crate) fn sliding_view(
    now: u64,
    word: u64,
    wall: u64,
    window_ns: u64,
) -> Result<(u64, u64, u64, u64)> {
    let (k, elapsed) = sliding_position(now, wall, window_ns);
    if word == 0 || is_fresh(now, word) {
        return Ok((k, 0, 0, elapsed));
    }
    if word & SLIDING == 0 {
        return Err(corrupt());
    }
    let (stored, prev, cur) = ((word >> 32) & 7, (word >> 16) & 0xFFFF, word & 0xFFFF);
    Ok(match (k.wrapping_sub(stored)) & 7 {
        0 => (k, prev, cur, elapsed),
        1 => (k, cur, 0, elapsed),
        // Written by a process whose clock read was in the next window: count against it.
        7 => (k + 1, prev, cur, 0),
        _ => (k, 0, 0, elapsed),
    })
}

/// The sliding-window word of window `k` holding `prev` and `cur`.
#[inline]
pub(crate) fn sliding_word(k: u64, prev: u64, cur: u64, wall: u64, window_ns: u64) -> u64 {
    // Both windows are over at the start of window k + 2, on the monotonic clock.
    let end = ((k as u128 + 2) * window_ns as u128).saturating_sub(wall as u128);
    let units = (end.div_ceil(1 << SLIDING_UNIT_SHIFT) as u64).min(SLIDING_FRESH_MASK);
    SLIDING | (units << 35) | ((k & 7) << 32) | ((prev & 0xFFFF) << 16) | (cur & 0xFFFF)
}

/// The weighted estimate `floor(prev (W - e) / W) + cur`.
#[inline]
pub(crate) fn estimate(prev: u64, cur: u64, elapsed: u64, window_ns: u64) -> u64 {
    (prev as u128 * (window_ns - elapsed.min(window_ns)) as u128 / window_ns as u128) as u64 + cur
}

/// One sliding-window-counter decision: `Ok(Some(new word))` admits `n` of `limit` at `now`,
/// `Ok(None)` denies.
#[inline]
pub(crate) fn sliding_acquire(
    now: u64,
    word: u64,
    wall: u64,
    window_ns: u64,
    limit: u64,
    n: u64,
) -> Result<Option<u64>> {
    let (k, prev, cur, elapsed) = sliding_view(now, word, wall, window_ns)?;
    if estimate(prev, cur, elapsed, window_ns) + n > limit {
        return Ok(None);
    }
    Ok(Some(sliding_word(k, prev, cur + n, wall, window_ns)))
}

/// Move a word of either kind by `d` ns onto another boot's timeline (see `file::reboot`):
/// its fresh time moves, its counts and window (a Unix-aligned index) stay. A word that would
/// be fresh before the new timeline starts is the zero word.
pub(crate) fn shift(word: u64, d: i128) -> u64 {
    let at = fresh_at(word);
    if at == 0 {
        return 0;
    }
    let moved = at as i128 + d;
    if moved <= 0 {
        return 0;
    }
    let moved = moved.min(MAX_NOW_NS as i128 * 2) as u64;
    if word & SLIDING != 0 {
        let units = moved
            .div_ceil(1 << SLIDING_UNIT_SHIFT)
            .min(SLIDING_FRESH_MASK);
        (word & !(SLIDING_FRESH_MASK << 35)) | (units << 35)
    } else {
        fixed_word(moved, fixed_count(word))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: u64 = 1_000_000_000;

    #[test]
    fn a_fixed_window_starts_at_its_first_increment_and_ends_after_it() {
        let w = 10 * S;
        let (word, c) = incr(5 * S, 0, w, 3).unwrap();
        assert_eq!(c, 3);
        let d = fixed_deadline(word);
        assert!((15 * S..15 * S + (1 << 21)).contains(&d), "{d}");
        let (word, c) = incr(14 * S, word, w, 2).unwrap();
        assert_eq!(c, 5);
        assert_eq!(fixed_view(d - 1, word).unwrap(), (5, d));
        assert_eq!(fixed_view(d, word).unwrap(), (0, 0));
        // Past the deadline: a new window from that instant.
        let (word, c) = incr(d + 7, word, w, 1).unwrap();
        assert_eq!(c, 1);
        assert!(fixed_deadline(word) >= d + 7 + w);
    }

    #[test]
    fn counts_never_wrap() {
        let (word, _) = incr(S, 0, S, MAX_COUNT).unwrap();
        assert!(matches!(
            incr(S, word, S, 1),
            Err(Error::CostExceedsCapacity { .. })
        ));
        assert!(incr(S, 0, S, MAX_COUNT + 1).is_err());
        assert!(incr(S, 0, S, u64::MAX).is_err());
    }

    #[test]
    fn a_decrement_keeps_the_window_and_stops_at_zero() {
        let w = 10 * S;
        assert_eq!(decr(S, 0, 1).unwrap(), None);
        let (word, _) = incr(S, 0, w, 5).unwrap();
        let (word2, c) = decr(2 * S, word, 2).unwrap().unwrap();
        assert_eq!(c, 3);
        assert_eq!(fixed_deadline(word2), fixed_deadline(word));
        let (word3, c) = decr(2 * S, word2, 9).unwrap().unwrap();
        assert_eq!((c, fixed_deadline(word3)), (0, fixed_deadline(word)));
        // Past the deadline nothing is counted: nothing to take.
        assert_eq!(decr(fixed_deadline(word), word, 1).unwrap(), None);
    }

    #[test]
    fn a_set_starts_a_window_now() {
        let (word, _) = incr(S, 0, 100 * S, 5).unwrap();
        let set_word = set(2 * S, 3 * S, 9).unwrap();
        assert_eq!(fixed_view(2 * S, set_word).unwrap().0, 9);
        assert!((5 * S..5 * S + (1 << 21)).contains(&fixed_deadline(set_word)));
        assert!(fixed_deadline(set_word) < fixed_deadline(word));
        assert!(set(S, S, MAX_COUNT + 1).is_err());
    }

    /// The sliding counter against a direct model: two maps of Unix window index to count.
    #[test]
    fn the_sliding_counter_matches_its_definition() {
        let wall = 1_733_000_000 * S + 123_456_789;
        let w = S / 2 + 12_345;
        let limit = 7;
        let mut word = 0;
        let mut counts = std::collections::HashMap::<u64, u64>::new();
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        let mut now = 10 * S;
        for _ in 0..20_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            now += x % (w / 3);
            if x % 97 == 0 {
                now += 5 * w;
            }
            let n = 1 + (x >> 20) % 3;
            let (k, e) = sliding_position(now, wall, w);
            let prev = k
                .checked_sub(1)
                .map_or(0, |p| counts.get(&p).copied().unwrap_or(0));
            let cur = counts.get(&k).copied().unwrap_or(0);
            let want = estimate(prev, cur, e, w) + n <= limit;
            let got = sliding_acquire(now, word, wall, w, limit, n).unwrap();
            assert_eq!(got.is_some(), want, "at {now}");
            if let Some(new) = got {
                word = new;
                *counts.entry(k).or_default() += n;
                // Fresh only once both windows are over.
                let over = ((k + 2) as u128 * w as u128 - wall as u128) as u64;
                assert!(fresh_at(word) >= over && fresh_at(word) < over + (1 << 30));
            }
        }
    }

    #[test]
    fn words_move_across_a_reboot() {
        let (word, _) = incr(100 * S, 0, 10 * S, 4).unwrap();
        let moved = shift(word, -(50 * S as i128));
        assert_eq!(fixed_count(moved), 4);
        assert!(fixed_deadline(moved) >= 60 * S);
        assert_eq!(shift(word, -(200 * S as i128)), 0);
        let s = sliding_word(9, 3, 4, 0, S);
        let m = shift(s, 5 * S as i128);
        assert_eq!(m & 0x7_FFFF_FFFF, s & 0x7_FFFF_FFFF);
        assert!(fresh_at(m) >= fresh_at(s) + 5 * S - (1 << 30));
    }
}
