//! Token bucket, as GCRA (the generic cell rate algorithm).
//!
//! # Implementation details
//!
//! A bucket of capacity `B` tokens refilled at `r` tokens per second is kept as one `u64`: the
//! theoretical arrival time `tat`, in absolute `CLOCK_MONOTONIC` nanoseconds. With the emission
//! interval `T = ceil(1e9 / r)` ns and the tolerance `tau = B * T`:
//!
//! ```text
//! new_tat = max(tat, now) + n * T
//! admit   iff new_tat - now <= tau          (then store new_tat)
//! retry   =   new_tat - now - tau           (when denied)
//! tokens  =   floor((tau - (max(tat, now) - now)) / T)
//! ```
//!
//! A fresh state (`tat = 0`) is a full bucket. `tat` only ever grows, so a process that reads an
//! older `now` than the one a newer decision used cannot move the state backwards: its decision
//! is simply stricter (it sees less refill).
//!
//! **Bound.** Starting full, the admissions of cost 1 dated in any interval of length `D` number
//! at most `B + floor(D / T)`, and because `T` is rounded *up*, `D / T <= r D`: never more than
//! `floor(B + r D)`. Rounding can only make the limiter stricter, never looser. For `B = 20`,
//! `r = 100/min` (`T = 600 ms` exactly) that is 23 over 2 s and 120 over 60 s.

use super::{Decision, Step};

/// Parameters of one GCRA, copied into process memory at attach.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Gcra {
    /// Nanoseconds per token (`T`), at least 1.
    pub emission_ns: u64,
    /// `B * T`: how far `tat` may run ahead of `now`.
    pub tolerance_ns: u64,
    /// `B`.
    pub capacity: u64,
}

impl Gcra {
    /// The pure decision for cost `n` at `now` given the stored `tat`.
    ///
    /// `n * emission_ns` must not overflow; the limit validated `n <= capacity` and
    /// `capacity * emission_ns <= u64::MAX / 2` before calling.
    #[inline(always)]
    pub fn step(&self, now: u64, tat: u64, n: u64) -> Step {
        let base = tat.max(now);
        // Saturating: a damaged `tat` near u64::MAX must deny, not wrap into an admission.
        let new_tat = base.saturating_add(n * self.emission_ns);
        let used = new_tat - now;
        if used <= self.tolerance_ns {
            Step::Admit {
                new: new_tat,
                decision: Decision::allowed(self.tolerance_ns - used, self.emission_ns)
                    .of(self.tolerance_ns)
                    .resetting(used),
            }
        } else {
            Step::Deny(
                Decision::denied(
                    used - self.tolerance_ns,
                    self.tolerance_ns.saturating_sub(base - now),
                    self.emission_ns,
                )
                .resetting(base - now),
            )
        }
    }

    /// The state word after giving back `n` tokens admitted earlier: `tat` moves back by `n * T`,
    /// but never below `now` (a refund cannot make the bucket fuller than full).
    #[inline]
    pub fn refund(&self, now: u64, tat: u64, n: u64) -> u64 {
        tat.saturating_sub(n.saturating_mul(self.emission_ns))
            .max(now.min(tat))
    }

    /// The pure reservation step (see the `wait` module): `n` tokens at `now` from `tat`,
    /// granted if the caller may proceed within `max_delay`, the new `tat` then
    /// `max(tat, now) + n T` and the delay `max(0, new_tat - now - tau)`.
    pub fn book(&self, now: u64, tat: u64, n: u64, max_delay: u64) -> Booking {
        let base = tat.max(now);
        // Saturating: a damaged `tat` near u64::MAX must refuse, not wrap into a grant.
        let new_tat = base.saturating_add(n.saturating_mul(self.emission_ns));
        let used = new_tat - now;
        let delay = used.saturating_sub(self.tolerance_ns);
        // A TAT must fit the 63 bits a tagged state word keeps for it.
        if delay <= max_delay && new_tat >> 63 == 0 {
            Booking::Granted { new_tat, delay }
        } else {
            Booking::Refused {
                delay: delay.max(1),
            }
        }
    }
}

/// What a booking concluded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Booking {
    /// Store `new_tat`; proceed after `delay`.
    Granted { new_tat: u64, delay: u64 },
    /// Nothing stored; the booking would have needed `delay`.
    Refused { delay: u64 },
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bucket(capacity: u64, emission_ns: u64) -> Gcra {
        Gcra {
            emission_ns,
            tolerance_ns: capacity * emission_ns,
            capacity,
        }
    }

    fn run(g: &Gcra, tat: &mut u64, now: u64, n: u64) -> Decision {
        match g.step(now, *tat, n) {
            Step::Admit { new, decision } => {
                *tat = new;
                decision
            }
            Step::Deny(d) => d,
        }
    }

    #[test]
    fn starts_full_and_drains() {
        let g = bucket(3, 1_000);
        let mut tat = 0;
        let now = 1_000_000;
        assert_eq!(run(&g, &mut tat, now, 1).remaining(), 2);
        assert_eq!(run(&g, &mut tat, now, 1).remaining(), 1);
        assert_eq!(run(&g, &mut tat, now, 1).remaining(), 0);
        let d = run(&g, &mut tat, now, 1);
        assert!(d.is_denied());
        assert_eq!(d.retry_after_ns(), 1_000);
        assert_eq!(d.remaining(), 0);
    }

    #[test]
    fn retry_after_is_exact() {
        let g = bucket(2, 500);
        let mut tat = 0;
        let now = 10_000;
        assert!(run(&g, &mut tat, now, 2).is_allowed());
        let d = run(&g, &mut tat, now + 100, 1);
        assert_eq!(d.retry_after_ns(), 400);
        assert!(run(&g, &mut tat, now + 499, 1).is_denied());
        assert!(run(&g, &mut tat, now + 500, 1).is_allowed());
    }

    #[test]
    fn stale_now_never_moves_state_back() {
        let g = bucket(2, 1_000);
        let mut tat = 0;
        assert!(run(&g, &mut tat, 50_000, 1).is_allowed());
        let before = tat;
        // A process with an older clock read decides: tat must not decrease.
        let _ = run(&g, &mut tat, 10_000, 1);
        assert!(tat >= before);
    }

    #[test]
    fn damaged_far_future_tat_denies() {
        let g = bucket(5, 1_000);
        let mut tat = u64::MAX - 10;
        let d = run(&g, &mut tat, 1_000, 5);
        assert!(d.is_denied());
        assert_eq!(tat, u64::MAX - 10);
    }

    #[test]
    fn refund_never_overfills() {
        let g = bucket(4, 100);
        let now = 10_000;
        let tat = now + 200; // two tokens used
        assert_eq!(g.refund(now, tat, 1), now + 100);
        assert_eq!(g.refund(now, tat, 10), now);
        assert_eq!(g.refund(now, 0, 1), 0);
    }

    #[test]
    fn bookings_within_the_tolerance_have_no_delay() {
        let g = bucket(3, 100);
        assert_eq!(
            g.book(1_000, 0, 3, 0),
            Booking::Granted {
                new_tat: 1_300,
                delay: 0
            }
        );
    }

    #[test]
    fn bookings_past_the_tolerance_wait_in_order_and_refuse_past_the_maximum() {
        let g = bucket(2, 100);
        let now = 10_000;
        let mut tat = now + 200; // bucket empty
        let mut ready = Vec::new();
        for _ in 0..3 {
            match g.book(now, tat, 1, 300) {
                Booking::Granted { new_tat, delay } => {
                    assert_eq!(new_tat - now - g.tolerance_ns, delay);
                    ready.push(now + delay);
                    tat = new_tat;
                }
                Booking::Refused { .. } => panic!("fits"),
            }
        }
        assert_eq!(ready, vec![now + 100, now + 200, now + 300]);
        assert_eq!(g.book(now, tat, 1, 300), Booking::Refused { delay: 400 });
    }

    #[test]
    fn a_damaged_state_refuses() {
        let g = bucket(2, 100);
        assert!(matches!(
            g.book(0, u64::MAX - 5, 1, u64::MAX),
            Booking::Refused { .. }
        ));
    }
}
