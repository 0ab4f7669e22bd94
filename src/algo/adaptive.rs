//! The adaptive concurrency limit's pooled update, as pure functions of the three words every
//! process shares (no clock, no atomics).
//!
//! # Implementation details
//!
//! Three words in the limit's control line, each changed only through the mutation loop
//! ([`super::mutate`]):
//!
//! | word | bits | content |
//! |---|---|---|
//! | sample accumulator | 0-35 / 36-51 / 52-63 | sum of the window's ok RTTs in µs (saturating) / ok count (saturating) / error-or-timeout count (saturating) |
//! | limit | 0-24 / 25-63 | limit in 1/256 permit (0: fresh, the initial limit) / when the window started, ms of the limit's clock |
//! | RTT | 0-31 / 32-63 | long RTT, µs (`f32`) / the last window's mean RTT, µs (`f32`) |
//!
//! Every release with a measured outcome adds itself to the accumulator (one CAS). The first
//! release after a window of `W` ms has passed closes it: it takes the accumulator (swaps it to
//! zero), computes the next limit from what it took, the RTT word and the in-flight count, and
//! commits it with the new window start by one CAS on the limit word, from a word still due —
//! the winner of that CAS is the only one to close this window; a closer that lost adds what it
//! took back to the accumulator. Then the winner moves the long RTT. So every sample is used by
//! one window at most; a closer killed between its take and its CAS loses that window's
//! samples, which only leaves the limit where it was.
//!
//! One update, from limit `L` (clamped to `[min, max]`), the window's mean ok RTT `r` and the
//! long RTT `R`:
//!
//! - a window with an error or a timeout (AIMD): `L' = b x L`;
//! - else a window with ok samples (Gradient2): `g = max(0.5, min(1, t x R / r))`,
//!   `q = max(1, h x L)`, `target = L x g + q` (no growth while in flight `< L / 2`, the
//!   request whose release closes the window counted: the limit is not what holds the callers
//!   back), `L' = (1 - s) x L + s x target`;
//! - else (no samples): `L' = L`;
//!
//! then `L' = clamp(L', min, max)`. Defaults `s = 0.2`, `t = 1.0`, `h = 0.1`, `b = 0.9`,
//! `W = 20 ms`. The long RTT follows the window means, down fast and up slowly:
//! `R' = R + (r - R) / 2` when `r < R`, else `R + (r - R) / 8192` (with 20 ms windows, a time
//! constant of about 160 s: sustained queueing does not pass for the dependency's own
//! latency), except when the window closed with the limit at its minimum: then
//! `R + (r - R) / 16`, so a dependency that became slower for good (which drives the limit to
//! its minimum, the gradient staying at 0.5) has its new latency learnt within about 16
//! windows there. A damaged or absent `R` takes `r`.
//!
//! **Re-measuring the long RTT.** The long RTT only learns a higher latency slowly (above),
//! so a dependency that became slower for good would hold the limit near its minimum for
//! minutes. So the RTT is re-measured on a schedule every process reads from the shared
//! clock: window number `k = floor(now_ms / W)`, and in each run of `E = 1000` windows the
//! last `M = 8` (`k mod E >= E - M`) grant at most `min` permits; the windows that close in
//! the last `S = 4` of them (`k mod E >= E - S`, after `M - S` windows for the requests of
//! before to drain) set the long RTT from their mean: `R' = r` for the first of them in a
//! re-measure, `R' = min(R, r)` for the next. A window that closes anywhere in the re-measure
//! leaves the limit as it was (`L' = L`). With `W = 20 ms`: 160 ms at the minimum every 20 s
//! (0.8% of the time), and a dependency that became slower for good has its new latency learnt
//! within 20 s, after which the gradient is about 1 again and the limit grows back at its
//! usual pace.
//!
//! **Bound.** Whatever the samples (any RTT, any count, a lying or stopped process) and
//! whatever the three words hold, one update moves the limit from `L` to within
//! `[min(b, 1 - s/2) x L, L + s x max(1, h x L)]`, and never outside `[min, max]`; and the
//! limit changes at most once per window. With the defaults: at most -10% or +2% (+0.2 below
//! 10 permits) per 20 ms.
//!
//! The equilibrium of a dependency whose latency is flat up to a knee `K` and grows as
//! `in flight / K` past it (a queue) is `L = t x K / (1 - h)` when the long RTT is the flat
//! latency: 1.11 K with the defaults.

/// How a request under a permit ended, as its release reports it.
#[repr(u32)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Outcome {
    /// Completed normally: its latency is a sample of the dependency's RTT.
    Ok = 0,
    /// Failed from overload (a 503, a refused connection): the limit backs off.
    Error = 1,
    /// Timed out: the limit backs off.
    Timeout = 2,
    /// Abandoned or not measured (a guard dropped without an outcome, a cancelled request):
    /// the permit comes back, the limit learns nothing.
    Dropped = 3,
}

impl Outcome {
    /// The outcome with C-ABI code `code`, if there is one.
    pub fn from_code(code: u32) -> Option<Outcome> {
        Some(match code {
            0 => Outcome::Ok,
            1 => Outcome::Error,
            2 => Outcome::Timeout,
            3 => Outcome::Dropped,
            _ => return None,
        })
    }
}

const SUM_BITS: u32 = 36;
const SUM_MAX: u64 = (1 << SUM_BITS) - 1;
const OK_SHIFT: u32 = 36;
const OK_MAX: u64 = (1 << 16) - 1;
const ERR_SHIFT: u32 = 52;
const ERR_MAX: u64 = (1 << 12) - 1;

/// Fixed point of the limit word: 1/256 permit.
pub(crate) const LIMIT_ONE: f64 = 256.0;
const LIMIT_BITS: u32 = 25;
const LIMIT_MASK: u64 = (1 << LIMIT_BITS) - 1;
const AT_MASK: u64 = (1 << (64 - LIMIT_BITS)) - 1;

/// The re-measure schedule (see the module docs): `E` windows a run, the last `M` at the
/// minimum, the last `S` of those sampled.
pub(crate) const REMEASURE_EVERY: u64 = 1000;
pub(crate) const REMEASURE_WINDOWS: u64 = 8;
pub(crate) const REMEASURE_SAMPLED: u64 = 4;

/// How fast the long RTT follows a window mean below it, above it, and above it while the
/// limit is at its minimum.
const LONG_DOWN: f64 = 0.5;
const LONG_UP: f64 = 1.0 / 8192.0;
const LONG_UP_AT_MIN: f64 = 1.0 / 16.0;

/// One window's samples, as the accumulator word holds them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Window {
    /// Sum of the ok RTTs, µs.
    pub sum_us: u64,
    /// Ok samples.
    pub ok: u64,
    /// Errors and timeouts.
    pub errors: u64,
}

impl Window {
    pub(crate) fn of(word: u64) -> Window {
        Window {
            sum_us: word & SUM_MAX,
            ok: (word >> OK_SHIFT) & OK_MAX,
            errors: word >> ERR_SHIFT,
        }
    }

    pub(crate) fn word(self) -> u64 {
        self.sum_us.min(SUM_MAX)
            | (self.ok.min(OK_MAX) << OK_SHIFT)
            | (self.errors.min(ERR_MAX) << ERR_SHIFT)
    }

    /// The accumulator after one more sample (saturating: a full field stays full).
    pub(crate) fn record(word: u64, outcome: Outcome, rtt_us: u64) -> u64 {
        let mut w = Window::of(word);
        match outcome {
            Outcome::Ok => {
                w.sum_us = w.sum_us.saturating_add(rtt_us).min(SUM_MAX);
                w.ok = (w.ok + 1).min(OK_MAX);
            }
            Outcome::Error | Outcome::Timeout => w.errors = (w.errors + 1).min(ERR_MAX),
            Outcome::Dropped => {}
        }
        w.word()
    }

    /// The accumulator with `back` added again (a close that lost its race returns what it
    /// took; saturating).
    pub(crate) fn plus(word: u64, back: Window) -> u64 {
        let w = Window::of(word);
        Window {
            sum_us: w.sum_us.saturating_add(back.sum_us),
            ok: w.ok.saturating_add(back.ok),
            errors: w.errors.saturating_add(back.errors),
        }
        .word()
    }

    /// The mean ok RTT, µs; None without ok samples.
    pub(crate) fn mean_us(self) -> Option<f64> {
        (self.ok > 0).then(|| self.sum_us as f64 / self.ok as f64)
    }
}

/// The parameters of an update, as numbers (from the definition's integers).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Tuning {
    pub min: f64,
    pub max: f64,
    pub initial: f64,
    pub window_ms: u64,
    pub smoothing: f64,
    pub tolerance: f64,
    pub headroom: f64,
    pub backoff: f64,
}

impl Tuning {
    /// The limit a word holds: its value clamped to `[min, max]`; the initial limit for a fresh
    /// word (0).
    pub(crate) fn limit_of(&self, word: u64) -> f64 {
        let fp = word & LIMIT_MASK;
        if fp == 0 {
            return self.initial;
        }
        (fp as f64 / LIMIT_ONE).clamp(self.min, self.max)
    }

    /// The permits the limit word grants at once: its limit rounded down (at least `min`).
    pub(crate) fn permits_of(&self, word: u64) -> u64 {
        (self.limit_of(word).floor() as u64).max(self.min as u64)
    }

    /// Where `now_ms` is in the re-measure schedule: `k mod E`.
    fn phase(&self, now_ms: u64) -> u64 {
        (now_ms / self.window_ms.max(1)) % REMEASURE_EVERY
    }

    /// Whether `now_ms` is in a re-measure (at most `min` granted, the limit kept).
    pub(crate) fn remeasuring(&self, now_ms: u64) -> bool {
        self.phase(now_ms) >= REMEASURE_EVERY - REMEASURE_WINDOWS
    }

    /// Whether a window closing at `now_ms` sets the long RTT (the re-measure's last windows).
    pub(crate) fn sampling(&self, now_ms: u64) -> bool {
        self.phase(now_ms) >= REMEASURE_EVERY - REMEASURE_SAMPLED
    }

    /// Whether a window closing at `now_ms`, started at `started_ms`, is the first of its
    /// re-measure to set the long RTT (the one before it started outside the sampled windows,
    /// or in another run of `E`).
    pub(crate) fn first_sample(&self, started_ms: u64, now_ms: u64) -> bool {
        let run = |ms: u64| ms / self.window_ms.max(1) / REMEASURE_EVERY;
        !self.sampling(started_ms) || run(started_ms) != run(now_ms)
    }

    /// The permits granted at once at `now_ms`: `min` in a re-measure, else the limit word's.
    pub(crate) fn allowed(&self, word: u64, now_ms: u64) -> u64 {
        if self.remeasuring(now_ms) {
            self.min as u64
        } else {
            self.permits_of(word)
        }
    }

    /// When the window of a limit word started, ms of the limit's clock (its low 39 bits).
    pub(crate) fn started_ms(&self, word: u64) -> u64 {
        word >> LIMIT_BITS
    }

    /// The next limit after one window (see the module docs).
    pub(crate) fn next_limit(
        &self,
        limit: f64,
        w: Window,
        long_us: Option<f64>,
        in_flight: u64,
    ) -> f64 {
        let l = limit.clamp(self.min, self.max);
        let next = if w.errors > 0 {
            l * self.backoff
        } else if let Some(short) = w.mean_us() {
            let long = long_us
                .filter(|r| r.is_finite() && *r > 0.0)
                .unwrap_or(short);
            let g = if short > 0.0 {
                (self.tolerance * long / short).clamp(0.5, 1.0)
            } else {
                1.0
            };
            let mut target = l * g + (self.headroom * l).max(1.0);
            if (in_flight as f64) * 2.0 < l {
                target = target.min(l);
            }
            (1.0 - self.smoothing) * l + self.smoothing * target
        } else {
            l
        };
        if !next.is_finite() {
            return l;
        }
        // Quantized to the word's 1/256 toward `l`, so that the stored limit keeps the bound.
        let q = if next > l {
            (next * LIMIT_ONE).floor()
        } else {
            (next * LIMIT_ONE).ceil()
        } / LIMIT_ONE;
        q.clamp(self.min, self.max)
    }

    /// The bound on one update from `limit` (module docs): `(lowest, highest)` next limit.
    #[cfg(test)]
    pub(crate) fn step_bound(&self, limit: f64) -> (f64, f64) {
        let l = limit.clamp(self.min, self.max);
        let lo = l * self.backoff.min(1.0 - self.smoothing / 2.0);
        let hi = l + self.smoothing * (self.headroom * l).max(1.0);
        (lo.clamp(self.min, self.max), hi.clamp(self.min, self.max))
    }

    /// The limit word after an update to `limit`, its window started at `now_ms`.
    pub(crate) fn limit_word(&self, limit: f64, now_ms: u64) -> u64 {
        let fp =
            ((limit.clamp(self.min, self.max) * LIMIT_ONE).round() as u64).clamp(1, LIMIT_MASK);
        fp | ((now_ms & AT_MASK) << LIMIT_BITS)
    }

    /// Whether the window the limit word started is over at `now_ms`: `W` ms later, or a start
    /// that is not in the past (a damaged word, or a clock from another boot) by more than `W`.
    pub(crate) fn due(&self, word: u64, now_ms: u64) -> bool {
        let at = word >> LIMIT_BITS;
        let now = now_ms & AT_MASK;
        let since = now.wrapping_sub(at) & AT_MASK;
        since >= self.window_ms && since < AT_MASK - self.window_ms || word & LIMIT_MASK == 0
    }
}

/// The RTT word: long RTT and the last window's mean, µs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Rtt {
    pub long_us: Option<f64>,
    pub short_us: Option<f64>,
}

impl Rtt {
    pub(crate) fn of(word: u64) -> Rtt {
        let valid = |bits: u32| {
            let x = f32::from_bits(bits) as f64;
            (x.is_finite() && x > 0.0).then_some(x)
        };
        Rtt {
            long_us: valid(word as u32),
            short_us: valid((word >> 32) as u32),
        }
    }

    pub(crate) fn word(self) -> u64 {
        let bits = |x: Option<f64>| x.map_or(0, |x| (x as f32).to_bits()) as u64;
        bits(self.long_us) | (bits(self.short_us) << 32)
    }

    /// The RTT word after a window whose mean ok RTT was `short_us`, closed with the limit at
    /// its minimum or not.
    pub(crate) fn next(word: u64, short_us: f64, at_min: bool) -> u64 {
        if !(short_us.is_finite() && short_us >= 0.0) {
            return word;
        }
        let short = short_us.max(f32::MIN_POSITIVE as f64);
        let long = match Rtt::of(word).long_us {
            None => short,
            Some(r) if short < r => r + (short - r) * LONG_DOWN,
            Some(r) if at_min => r + (short - r) * LONG_UP_AT_MIN,
            Some(r) => r + (short - r) * LONG_UP,
        };
        Rtt {
            long_us: Some(long),
            short_us: Some(short),
        }
        .word()
    }
}

impl Rtt {
    /// The RTT word after a re-measure's window whose mean ok RTT was `short_us`: the long RTT
    /// is that mean for the first such window, the smaller of the two after.
    pub(crate) fn remeasured(word: u64, short_us: f64, first: bool) -> u64 {
        if !(short_us.is_finite() && short_us >= 0.0) {
            return word;
        }
        let short = short_us.max(f32::MIN_POSITIVE as f64);
        let long = match Rtt::of(word).long_us {
            Some(r) if !first => r.min(short),
            _ => short,
        };
        Rtt {
            long_us: Some(long),
            short_us: Some(short),
        }
        .word()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn tuning() -> Tuning {
        Tuning {
            min: 2.0,
            max: 100.0,
            initial: 10.0,
            window_ms: 20,
            smoothing: 0.2,
            tolerance: 1.0,
            headroom: 0.1,
            backoff: 0.9,
        }
    }

    #[test]
    fn accumulator_counts_and_saturates() {
        let mut w = 0;
        w = Window::record(w, Outcome::Ok, 1500);
        w = Window::record(w, Outcome::Ok, 500);
        w = Window::record(w, Outcome::Timeout, 9_000_000);
        w = Window::record(w, Outcome::Dropped, 7);
        assert_eq!(
            Window::of(w),
            Window {
                sum_us: 2000,
                ok: 2,
                errors: 1
            }
        );
        assert_eq!(Window::of(w).mean_us(), Some(1000.0));
        let full = Window {
            sum_us: SUM_MAX,
            ok: OK_MAX,
            errors: ERR_MAX,
        }
        .word();
        assert_eq!(full, u64::MAX);
        assert_eq!(Window::record(full, Outcome::Ok, u64::MAX), full);
        let taken = Window::of(Window::record(0, Outcome::Ok, 1500));
        let rest = Window {
            sum_us: 500,
            ok: 1,
            errors: 1,
        }
        .word();
        assert_eq!(Window::plus(rest, taken), w);
        assert_eq!(Window::plus(full, taken), full);
    }

    #[test]
    fn gradient_finds_a_queueing_knee() {
        // latency = 1 ms up to a knee of 30, then in_flight / 30 ms: the limit settles near
        // t x K / (1 - h) = 33.3 from below and from above.
        let t = Tuning {
            max: 200.0,
            ..tuning()
        };
        // From below with nothing learnt; from above with the flat latency learnt (a knee
        // that fell): a state that starts above the knee learns queueing as its baseline,
        // which is why the initial limit defaults to the minimum.
        let learnt = Rtt::next(0, 1000.0, false);
        for (start, rtt0) in [(5.0f64, 0), (150.0, learnt)] {
            let (mut l, mut rtt) = (start, rtt0);
            for _ in 0..2000 {
                let in_flight = l.floor();
                let lat = 1000.0 * (in_flight / 30.0).max(1.0);
                let w = Window {
                    sum_us: lat as u64 * 10,
                    ok: 10,
                    errors: 0,
                };
                l = t.next_limit(l, w, Rtt::of(rtt).long_us, in_flight as u64);
                rtt = Rtt::next(rtt, lat, l <= t.min);
            }
            assert!((30.0..38.0).contains(&l), "from {start}: {l}");
        }
    }

    #[test]
    fn errors_back_off_and_idle_windows_hold() {
        let t = tuning();
        let w = Window {
            sum_us: 0,
            ok: 0,
            errors: 1,
        };
        assert_eq!(t.next_limit(50.0, w, Some(1000.0), 50), 45.0);
        assert_eq!(
            t.next_limit(2.0, w, Some(1000.0), 50),
            2.0,
            "never under min"
        );
        assert_eq!(t.next_limit(50.0, Window::default(), None, 50), 50.0);
        // App-limited: fast samples with few in flight do not grow it.
        let fast = Window {
            sum_us: 10,
            ok: 10,
            errors: 0,
        };
        assert_eq!(t.next_limit(50.0, fast, Some(1000.0), 10), 50.0);
    }

    #[test]
    fn fresh_and_damaged_limit_words_stay_in_range() {
        let t = tuning();
        assert_eq!(t.limit_of(0), 10.0);
        assert_eq!(t.limit_of(LIMIT_MASK), 100.0);
        assert_eq!(t.limit_of(1), 2.0);
        assert_eq!(t.permits_of(t.limit_word(33.9, 5)), 33);
        assert!(t.due(0, 0), "a fresh word is due");
        let w = t.limit_word(10.0, 1000);
        assert!(!t.due(w, 1000) && !t.due(w, 1019) && t.due(w, 1020));
        assert!(t.due(w, 1000 + (1 << 30)), "long after");
        assert!(
            !t.due(w, 990),
            "a start a little ahead (another process's clock read) waits"
        );
        let far = t.limit_word(10.0, 1000 + (1 << 35));
        assert!(t.due(far, 1000), "a start far ahead is damage: due");
        assert_eq!(
            Rtt::of(u64::MAX),
            Rtt {
                long_us: None,
                short_us: None
            },
            "NaN RTTs"
        );
        assert_eq!(Rtt::next(0, f64::NAN, false), 0);
        assert_eq!(Rtt::next(0, -1.0, true), 0);
        // Down fast, up slowly, re-learnt at the minimum.
        let r = Rtt::next(0, 1000.0, false);
        assert_eq!(Rtt::of(Rtt::next(r, 500.0, false)).long_us, Some(750.0));
        assert_eq!(Rtt::of(Rtt::next(r, 9192.0, false)).long_us, Some(1001.0));
        assert_eq!(Rtt::of(Rtt::next(r, 2600.0, true)).long_us, Some(1100.0));
    }

    #[test]
    fn the_remeasure_schedule() {
        let t = tuning(); // W = 20 ms: runs of 20 s, the last 160 ms at min, 80 ms sampled
        let run = 20_000 * 50;
        assert!(!t.remeasuring(run) && !t.remeasuring(run + 19_839));
        assert!(t.remeasuring(run + 19_840) && !t.sampling(run + 19_919));
        assert!(t.sampling(run + 19_920) && t.sampling(run + 19_999));
        assert!(!t.remeasuring(run + 20_000));
        let word = t.limit_word(33.0, 5);
        assert_eq!(
            (t.allowed(word, run), t.allowed(word, run + 19_850)),
            (33, 2)
        );
        assert!(t.first_sample(run + 19_900, run + 19_925));
        assert!(!t.first_sample(run + 19_925, run + 19_945));
        assert!(
            t.first_sample(run + 19_925 - 20_000, run + 19_925),
            "another run"
        );
        let r = Rtt::next(0, 1000.0, false);
        let first = Rtt::remeasured(r, 2500.0, true);
        assert_eq!(Rtt::of(first).long_us, Some(2500.0));
        assert_eq!(
            Rtt::of(Rtt::remeasured(first, 2100.0, false)).long_us,
            Some(2100.0)
        );
        assert_eq!(
            Rtt::of(Rtt::remeasured(first, 2900.0, false)).long_us,
            Some(2500.0)
        );
        assert_eq!(Rtt::remeasured(first, f64::NAN, true), first);
    }

    proptest! {
        /// A re-measure's sample: the long RTT becomes the mean (first) or no more than it was
        /// and the mean (after); never NaN, never zero.
        #[test]
        fn a_remeasure_sets_the_long_rtt_from_its_samples(
            rtt in any::<u64>(), short in 0.0f64..1e9, first in any::<bool>(),
        ) {
            let next = Rtt::of(Rtt::remeasured(rtt, short, first)).long_us.unwrap();
            let expect = (short as f32 as f64).max(f32::MIN_POSITIVE as f64);
            if first || Rtt::of(rtt).long_us.is_none() {
                prop_assert!((next - expect).abs() <= expect * 1e-6);
            } else {
                prop_assert!(next <= Rtt::of(rtt).long_us.unwrap() + 1e-9);
                prop_assert!(next <= expect * (1.0 + 1e-6));
            }
            prop_assert!(next > 0.0 && next.is_finite());
        }

        /// Any words, any samples: the next limit is within the bound of one update and in
        /// `[min, max]`.
        #[test]
        fn one_update_stays_within_its_bound(
            limit_word in any::<u64>(), acc in any::<u64>(), rtt in any::<u64>(),
            in_flight in any::<u64>(),
        ) {
            let t = tuning();
            let l = t.limit_of(limit_word);
            let next = t.next_limit(l, Window::of(acc), Rtt::of(rtt).long_us, in_flight);
            let (lo, hi) = t.step_bound(l);
            prop_assert!(next >= lo - 1e-9 && next <= hi + 1e-9, "{l} -> {next} not in [{lo}, {hi}]");
            prop_assert!((t.min..=t.max).contains(&next));
            prop_assert_eq!(t.limit_of(t.limit_word(next, 7)), next);
        }
    }
}
