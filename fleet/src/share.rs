//! A share in units, and the token bucket it maps to on the host.
//!
//! A share of `u` units (micro-tokens per second) of a fleet total of `U` units with fleet
//! burst `B` is the local token bucket
//!
//! - rate: `u / 10^6` tokens per second, as the emission interval `ceil(10^15 / u)` ns (rounded
//!   so the local rate is never above the share);
//! - capacity: `max(1, floor(B u / U))`, so that the hosts' capacities add up to at most
//!   `B + hosts` (`B` plus the at most one token each that the rounding up to 1 adds).
//!
//! A rate of 0 is not representable. A share of 0 (the **floor**, where a host without a grant
//! or reserved minimum sits) is the bucket of capacity 1 and emission interval [`FLOOR_EMISSION_NS`]
//! (2^42 ns, about 73 minutes): over any interval of length `T` it admits at most
//! `1 + T / 2^42 ns` sends, that is one send in practice (the one token a full bucket holds),
//! then one per 73 minutes.

use std::fmt;

use super::protocol::UNITS_PER_TOKEN;
use shmlimit::{
    Algorithm, KeyedTokenBucketLimit, Limit, LimitKind, Limiter, Rate, TokenBucketLimit,
};

/// The emission interval of the floor (a share of 0): 2^42 ns, about 73 minutes.
pub const FLOOR_EMISSION_NS: u64 = 1 << 42;

/// Units (micro-tokens per second) per nanosecond of period: `10^6 x 10^9`.
const UNIT_NS: u128 = UNITS_PER_TOKEN as u128 * 1_000_000_000;

/// The share (units) that a rate is, rounded down.
///
/// ```
/// use shmlimit::Rate;
/// use shmlimit_fleet::share::units_of;
/// assert_eq!(units_of(Rate::per_second(1000).unwrap()), 1_000_000_000);
/// // 300/s is one token every 3333334 ns (rounded up): a little under 300/s.
/// assert_eq!(units_of(Rate::per_second(300).unwrap()), 299_999_940);
/// ```
pub fn units_of(rate: Rate) -> u64 {
    (UNIT_NS / rate.emission_ns() as u128).min(u64::MAX as u128) as u64
}

/// The share (units) that a live token bucket applies: 0 at the floor (or slower), and not for
/// other algorithms.
pub fn applied_units(algorithm: &Algorithm) -> Option<u64> {
    match *algorithm {
        Algorithm::TokenBucket { emission_ns, .. } => Some(if emission_ns >= FLOOR_EMISSION_NS {
            0
        } else {
            (UNIT_NS / emission_ns.max(1) as u128) as u64
        }),
        _ => None,
    }
}

/// `units` as tokens per second, for messages (`12.5/s`).
pub fn fmt_units(units: u64) -> String {
    let whole = units / UNITS_PER_TOKEN;
    let frac = units % UNITS_PER_TOKEN;
    if frac == 0 {
        format!("{whole}/s")
    } else {
        let s = format!("{frac:06}");
        format!("{whole}.{}/s", s.trim_end_matches('0'))
    }
}

/// The local token bucket of one share.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LocalShare {
    /// The share (units).
    pub units: u64,
    /// Bucket capacity.
    pub capacity: u64,
    /// Emission interval (ns).
    pub emission_ns: u64,
}

impl LocalShare {
    /// The bucket for `units` of a fleet total of `total` units with fleet burst `burst`.
    ///
    /// ```
    /// use shmlimit_fleet::{share::FLOOR_EMISSION_NS, LocalShare};
    /// let total = 1000 * 1_000_000; // 1000/s
    /// let quarter = LocalShare::of(total / 4, total, 20);
    /// assert_eq!((quarter.capacity, quarter.emission_ns), (5, 4_000_000)); // 250/s, burst 5
    /// let floor = LocalShare::of(0, total, 20);
    /// assert_eq!((floor.capacity, floor.emission_ns), (1, FLOOR_EMISSION_NS));
    /// ```
    pub fn of(units: u64, total: u64, burst: u64) -> LocalShare {
        if units == 0 {
            return LocalShare {
                units: 0,
                capacity: 1,
                emission_ns: FLOOR_EMISSION_NS,
            };
        }
        let emission_ns = UNIT_NS.div_ceil(units as u128).min(1 << 62) as u64;
        let mut capacity =
            ((burst as u128 * units as u128) / total.max(1) as u128).clamp(1, 1 << 40) as u64;
        // capacity x emission must stay within 2^62 ns: lower the capacity, never the rate.
        capacity = capacity.min(((1u64 << 62) / emission_ns).max(1));
        LocalShare {
            units,
            capacity,
            emission_ns,
        }
    }

    /// Retune `limit` (a token bucket) to this share.
    ///
    /// # Errors
    ///
    /// As [`shmlimit::TokenBucketLimit::set_token_bucket`].
    pub fn apply(&self, limit: &Bucket) -> shmlimit::Result<()> {
        limit.set_token_bucket(self.capacity, Rate::from_emission_ns(self.emission_ns)?)
    }
}

/// The token bucket a share is applied to: unkeyed, or keyed (where the share retunes the
/// bucket every key has). Both typed handles have the retunes and fleet calls an agent makes.
#[derive(Debug, Clone)]
pub enum Bucket {
    /// A token bucket (split or not).
    Plain(TokenBucketLimit),
    /// A keyed token bucket.
    Keyed(KeyedTokenBucketLimit),
}

impl Bucket {
    /// The limit `name` of `limiter` as a token bucket, keyed or not; `Ok(None)` for a limit of
    /// another kind.
    ///
    /// # Errors
    ///
    /// As [`Limiter::limit`].
    pub fn resolve(limiter: &Limiter, name: &str) -> shmlimit::Result<Option<Bucket>> {
        let limit = limiter.limit(name)?;
        Ok(match limit.kind() {
            LimitKind::TokenBucket => Some(Bucket::Plain(TokenBucketLimit::try_from(limit)?)),
            LimitKind::KeyedTokenBucket => {
                Some(Bucket::Keyed(KeyedTokenBucketLimit::try_from(limit)?))
            }
            _ => None,
        })
    }

    /// The untyped view, for inspection (definition, live parameters, statistics, clock).
    pub fn as_limit(&self) -> &Limit {
        match self {
            Bucket::Plain(b) => b.as_limit(),
            Bucket::Keyed(b) => b.as_limit(),
        }
    }

    /// As [`TokenBucketLimit::set_token_bucket`].
    ///
    /// # Errors
    ///
    /// As [`TokenBucketLimit::set_token_bucket`].
    pub fn set_token_bucket(&self, capacity: u64, rate: Rate) -> shmlimit::Result<()> {
        match self {
            Bucket::Plain(b) => b.set_token_bucket(capacity, rate),
            Bucket::Keyed(b) => b.set_token_bucket(capacity, rate),
        }
    }

    /// As [`TokenBucketLimit::fleet_manage`].
    ///
    /// # Errors
    ///
    /// As [`TokenBucketLimit::fleet_manage`].
    pub fn fleet_manage(&self, fence_capacity: u64, fence_rate: Rate) -> shmlimit::Result<()> {
        match self {
            Bucket::Plain(b) => b.fleet_manage(fence_capacity, fence_rate),
            Bucket::Keyed(b) => b.fleet_manage(fence_capacity, fence_rate),
        }
    }

    /// As [`TokenBucketLimit::set_fleet_deadline`].
    ///
    /// # Errors
    ///
    /// As [`TokenBucketLimit::set_fleet_deadline`].
    pub fn set_fleet_deadline(&self, deadline_ns: u64) -> shmlimit::Result<()> {
        match self {
            Bucket::Plain(b) => b.set_fleet_deadline(deadline_ns),
            Bucket::Keyed(b) => b.set_fleet_deadline(deadline_ns),
        }
    }
}

impl fmt::Display for LocalShare {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.units == 0 {
            write!(f, "floor(cap 1, 1 per 2^42 ns)")
        } else {
            write!(f, "{}(cap {})", fmt_units(self.units), self.capacity)
        }
    }
}
