//! What an HTTP client is told about a limit: the IETF `RateLimit` and `RateLimit-Policy` header
//! fields (draft-ietf-httpapi-ratelimit-headers) and `Retry-After` (RFC 9110), rendered from a
//! [`Decision`] and the limit's live [`Policy`].
//!
//! Every binding (Rust, C through `shmlimit_ratelimit_headers`, Python, Node) renders through
//! this module, so a client sees the same numbers whatever language the worker is written in.
//!
//! # Implementation details
//!
//! ```text
//! RateLimit-Policy: "api";q=300;w=1, "per_user";q=20;w=12
//! RateLimit:        "api";r=299;t=1, "per_user";r=0;t=12
//! Retry-After:      3                      (only when some limit denied)
//! ```
//!
//! * `q` and `w` ([`Policy`]): the quota per window in whole seconds. A window (fixed, sliding,
//!   log) of `L` per `W` is `q = L`, `w = ceil(W)`; a window shorter than a second is scaled to
//!   one second (`q = floor(L x 1 s / W)`). A token bucket of burst `B` refilled every `T` ns has
//!   `w = ceil(B T)` (the time it takes to refill from empty, at least one second) and `q =
//!   w / T` rounded to the nearest unit (what the refill rate grants over `w`): `300/s` with a burst of 30 is
//!   `q=300;w=1`, `10000/day` with a burst of 10000 is `q=10000;w=86400`. Rounding `w` up only
//!   ever states a slower rate than the limit allows, so a client that paces itself by it is
//!   never refused for it.
//! * `r` is [`Decision::remaining`]; `t` is [`Decision::reset_after_secs_ceil`], the time until
//!   the limit is whole again.
//! * `Retry-After` is the largest [`Decision::retry_after_secs_ceil`] of the denials (at least
//!   one second: a denial has something to wait for), absent when every limit admitted.
//! * An adaptive concurrency limit ([`ConcurrentQuota`]) bounds requests in flight, not a rate:
//!   `"name";q=LIMIT;qu="concurrent-requests"` in `RateLimit-Policy` (the draft's quota unit;
//!   no `w`, there is no window) and `"name";r=LIMIT-IN_FLIGHT` in `RateLimit` (no `t`: a
//!   permit comes back when a request ends, not at a time), `LIMIT` its current permits.
//!   A fixed concurrency limit stays out of both fields.

use crate::limiter::Limit;

use crate::algo::Decision;
use crate::clock::Clock;
use crate::error::Result;

use crate::spec::Algorithm;

const NS_PER_SEC: u64 = 1_000_000_000;

/// A limit's quota per window, in the terms of the IETF `RateLimit-Policy` field.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Policy {
    /// `q`: how many units the limit grants per window.
    pub quota: u64,
    /// `w`: the window in whole seconds, at least 1.
    pub window_secs: u64,
}

impl Policy {
    /// The policy of a limit with these (live) parameters; `None` for a concurrency limit,
    /// which bounds work in flight, not a rate.
    pub fn of(algorithm: &Algorithm) -> Option<Policy> {
        match *algorithm {
            Algorithm::TokenBucket {
                capacity,
                emission_ns,
            } => {
                let emission_ns = emission_ns.max(1);
                // `T` was rounded up from the user's rate by less than 1 ns per token, so `B T`
                // passes the refill time the user meant by less than `B` ns: 60/s with a burst
                // of 60 refills in 1.00000002 s, which is one second, not two.
                let refill_ns = capacity
                    .saturating_mul(emission_ns)
                    .saturating_sub(capacity);
                let window_secs = refill_ns.div_ceil(NS_PER_SEC).max(1);
                // Rounded to nearest: `T` was rounded up from the rate the user gave (300/s is
                // T = 3,333,334 ns), and the nearest count recovers it.
                let window = window_secs as u128 * NS_PER_SEC as u128;
                let quota = ((window + emission_ns as u128 / 2) / emission_ns as u128)
                    .min(u64::MAX as u128) as u64;
                Some(Policy { quota, window_secs })
            }
            Algorithm::FixedWindow {
                limit, window_ns, ..
            }
            | Algorithm::SlidingWindow {
                limit, window_ns, ..
            }
            | Algorithm::SlidingLog { limit, window_ns } => {
                let window_ns = window_ns.max(1);
                if window_ns >= NS_PER_SEC {
                    Some(Policy {
                        quota: limit,
                        window_secs: window_ns.div_ceil(NS_PER_SEC),
                    })
                } else {
                    let quota = (limit as u128 * NS_PER_SEC as u128 / window_ns as u128)
                        .min(u64::MAX as u128) as u64;
                    Some(Policy {
                        quota,
                        window_secs: 1,
                    })
                }
            }
            Algorithm::Concurrency { .. }
            | Algorithm::AdaptiveConcurrency(_)
            | Algorithm::Counters { .. } => None,
        }
    }
}

/// What an adaptive concurrency limit tells a client: its current permits (`q`) and the
/// permits held now (`r = q - in_flight`), with `qu="concurrent-requests"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConcurrentQuota {
    /// The permits granted at once now (the current limit, rounded down).
    pub permits: u64,
    /// The permits held now.
    pub in_flight: u64,
}

impl<C: Clock> Limit<C> {
    /// An adaptive concurrency limit's current permits and permits in flight, for the
    /// `RateLimit` fields with `qu="concurrent-requests"`; `None` for any other kind.
    ///
    /// # Errors
    ///
    /// [`crate::Error::WrongKind`] if the file was replaced by one where this name is another
    /// kind.
    pub fn concurrent_quota(&self) -> Result<Option<ConcurrentQuota>> {
        if self.kind() != crate::spec::LimitKind::AdaptiveConcurrency {
            return Ok(None);
        }
        let s = crate::engine::adaptive::Adaptive(self.site().current()?).status()?;
        Ok(Some(ConcurrentQuota {
            permits: s.permits,
            in_flight: s.in_flight,
        }))
    }

    /// This limit's quota per window from its live parameters (a retuned rate shows), for the
    /// `RateLimit-Policy` header; `None` for a concurrency limit.
    ///
    /// ```
    /// # fn main() -> Result<(), shmlimit::Error> {
    /// # let dir = tempfile::tempdir().unwrap();
    /// use shmlimit::{Limiter, Policy, TokenBucket};
    /// let limiter = Limiter::builder()
    ///     .limit("api", TokenBucket::per_second(300).burst(30))
    ///     .create_or_open(dir.path().join("p.shm"))?;
    /// let policy = limiter.limit("api")?.policy()?;
    /// assert_eq!(policy, Some(Policy { quota: 300, window_secs: 1 }));
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// [`crate::Error::CorruptState`] if the live parameters in the file are damaged.
    pub fn policy(&self) -> Result<Option<Policy>> {
        Ok(Policy::of(&self.live_algorithm()?))
    }
}

/// The `RateLimit`, `RateLimit-Policy` and `Retry-After` header values for one response, built
/// from one or more (limit name, policy, decision) triples.
///
/// ```
/// # fn main() -> Result<(), shmlimit::Error> {
/// # let dir = tempfile::tempdir().unwrap();
/// use shmlimit::{Limiter, RateLimitHeaders, TokenBucket};
/// let limiter = Limiter::builder()
///     .limit("api", TokenBucket::per_second(10).burst(2))
///     .create_or_open(dir.path().join("h.shm"))?;
/// let api = limiter.token_bucket("api")?;
/// let _ = api.try_acquire(2)?;
/// let decision = api.try_acquire(1)?;
/// assert!(decision.is_denied());
/// let headers = RateLimitHeaders::for_decisions(&[(api.as_limit(), &decision)])?;
/// assert_eq!(headers.rate_limit_policy, "\"api\";q=10;w=1");
/// assert_eq!(headers.rate_limit, "\"api\";r=0;t=1");
/// assert_eq!(headers.retry_after.as_deref(), Some("1"));
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RateLimitHeaders {
    /// The `RateLimit` field value: `"name";r=REMAINING;t=RESET_SECONDS` per limit.
    pub rate_limit: String,
    /// The `RateLimit-Policy` field value: `"name";q=QUOTA;w=WINDOW_SECONDS` per limit.
    pub rate_limit_policy: String,
    /// The `Retry-After` field value in whole seconds when some limit denied, else `None`.
    pub retry_after: Option<String>,
}

impl RateLimitHeaders {
    /// Empty headers; add limits with [`RateLimitHeaders::add`].
    pub fn new() -> RateLimitHeaders {
        RateLimitHeaders::default()
    }

    /// Add one limit's item to both fields (skipped in them when `policy` is `None`, a
    /// concurrency limit) and fold its retry-after into `Retry-After`. `name` is rendered as a
    /// structured-field string: characters outside printable ASCII are dropped, `"` and `\`
    /// escaped.
    pub fn add(&mut self, name: &str, policy: Option<Policy>, decision: &Decision) -> &mut Self {
        self.push(name, policy, decision, true)
    }

    /// [`RateLimitHeaders::add`] without the `RateLimit-Policy` item (that field stays as it
    /// is): for a caller that renders the policy once per set of limits, since it changes only
    /// when a limit is retuned, and the per-response state each time. `policy` still decides
    /// whether the limit is in `RateLimit` at all (`None`, a concurrency limit, is not).
    ///
    /// ```
    /// # fn main() -> Result<(), shmlimit::Error> {
    /// # let dir = tempfile::tempdir().unwrap();
    /// use shmlimit::{Limiter, RateLimitHeaders, TokenBucket};
    /// let limiter = Limiter::builder()
    ///     .limit("api", TokenBucket::per_second(10).burst(2))
    ///     .create_or_open(dir.path().join("s.shm"))?;
    /// let api = limiter.token_bucket("api")?;
    /// let decision = api.try_acquire(1)?;
    /// let mut headers = RateLimitHeaders::new();
    /// headers.add_state("api", api.as_limit().policy()?, &decision);
    /// assert_eq!(headers.rate_limit, "\"api\";r=1;t=1");
    /// assert_eq!(headers.rate_limit_policy, "");
    /// # Ok(()) }
    /// ```
    pub fn add_state(
        &mut self,
        name: &str,
        policy: Option<Policy>,
        decision: &Decision,
    ) -> &mut Self {
        self.push(name, policy, decision, false)
    }

    fn push(
        &mut self,
        name: &str,
        policy: Option<Policy>,
        decision: &Decision,
        with_policy: bool,
    ) -> &mut Self {
        if let Some(policy) = policy {
            // Rendered by hand, not with `write!`: this runs per response, and the formatting
            // machinery cost about 1,200 instructions per item where this costs a few dozen.
            let out = &mut self.rate_limit;
            // The name, its quotes, separators and two numbers: one allocation, not several.
            out.reserve(name.len() + 48);
            if !out.is_empty() {
                out.push_str(", ");
            }
            push_sf_string(out, name);
            out.push_str(";r=");
            push_state(out, decision);
            if with_policy {
                let out = &mut self.rate_limit_policy;
                out.reserve(name.len() + 48);
                if !out.is_empty() {
                    out.push_str(", ");
                }
                push_sf_string(out, name);
                out.push_str(";q=");
                push_decimal(out, policy.quota);
                out.push_str(";w=");
                push_decimal(out, policy.window_secs);
            }
        }
        if decision.is_denied() {
            let secs = decision.retry_after_secs_ceil().max(1);
            let larger = match &self.retry_after {
                Some(current) => current.parse::<u64>().map_or(true, |c| secs > c),
                None => true,
            };
            if larger {
                self.retry_after = Some(secs.to_string());
            }
        }
        self
    }

    /// Add one adaptive concurrency limit's items (`qu="concurrent-requests"`, see the module
    /// docs; `RateLimit-Policy` only when `with_policy`) and fold `decision`'s retry-after into
    /// `Retry-After` when it denied (a request refused a permit).
    ///
    /// ```
    /// use shmlimit::{ConcurrentQuota, RateLimitHeaders};
    /// // What the caller was told: a permit granted (any allowed decision), or refused with
    /// // a wait of 30 ms (rounded up to whole seconds in `Retry-After`).
    /// let granted = shmlimit::c_abi::view(true, 0, 0, 0);
    /// let refused = shmlimit::c_abi::view(false, 0, 30_000_000, 0);
    /// let mut h = RateLimitHeaders::new();
    /// h.add_concurrent("db", ConcurrentQuota { permits: 12, in_flight: 5 }, &granted, true);
    /// assert_eq!(h.rate_limit_policy, "\"db\";q=12;qu=\"concurrent-requests\"");
    /// assert_eq!(h.rate_limit, "\"db\";r=7");
    /// assert_eq!(h.retry_after, None);
    /// let mut h = RateLimitHeaders::new();
    /// h.add_concurrent("db", ConcurrentQuota { permits: 12, in_flight: 12 }, &refused, false);
    /// assert_eq!((h.rate_limit.as_str(), h.rate_limit_policy.as_str()), ("\"db\";r=0", ""));
    /// assert_eq!(h.retry_after.as_deref(), Some("1"));
    /// ```
    pub fn add_concurrent(
        &mut self,
        name: &str,
        quota: ConcurrentQuota,
        decision: &Decision,
        with_policy: bool,
    ) -> &mut Self {
        let out = &mut self.rate_limit;
        if !out.is_empty() {
            out.push_str(", ");
        }
        push_sf_string(out, name);
        out.push_str(";r=");
        push_decimal(out, quota.permits.saturating_sub(quota.in_flight));
        if with_policy {
            let out = &mut self.rate_limit_policy;
            if !out.is_empty() {
                out.push_str(", ");
            }
            push_sf_string(out, name);
            out.push_str(";q=");
            push_decimal(out, quota.permits);
            out.push_str(";qu=\"concurrent-requests\"");
        }
        self.push("", None, decision, false)
    }

    /// Add `limit`'s items for `decision` whatever its kind: a rate policy's
    /// ([`RateLimitHeaders::add`], or [`RateLimitHeaders::add_state`] without `with_policy`),
    /// an adaptive concurrency limit's ([`RateLimitHeaders::add_concurrent`]), none for a
    /// fixed concurrency limit (whose denial still sets `Retry-After`).
    ///
    /// # Errors
    ///
    /// [`crate::Error::CorruptState`] if the limit's live parameters are damaged.
    pub fn add_limit<C: Clock>(
        &mut self,
        limit: &Limit<C>,
        decision: &Decision,
        with_policy: bool,
    ) -> Result<&mut Self> {
        if let Some(quota) = limit.concurrent_quota()? {
            return Ok(self.add_concurrent(limit.name(), quota, decision, with_policy));
        }
        let policy = limit.policy()?;
        Ok(self.push(limit.name(), policy, decision, with_policy))
    }

    /// The headers for decisions made on these limits (for example the checks of a composed
    /// decision, with [`crate::Composed::decision`]), each limit under its own name and live
    /// policy.
    ///
    /// # Errors
    ///
    /// [`crate::Error::CorruptState`] if a limit's live parameters are damaged.
    pub fn for_decisions<C: Clock>(
        decisions: &[(&Limit<C>, &Decision)],
    ) -> Result<RateLimitHeaders> {
        let mut headers = RateLimitHeaders::new();
        for (limit, decision) in decisions {
            headers.add_limit(limit, decision, true)?;
        }
        Ok(headers)
    }
}

/// One limit's item of the `RateLimit` field with its name rendered once, for a caller that
/// renders the field for every response of a fixed set of limits (a web middleware): per
/// response it writes the two numbers of a decision, reading nothing else (not the limit's
/// live policy, which decides only whether a rate limit has an item, and it always has).
/// The item is the one [`RateLimitHeaders::add_state`] renders.
///
/// ```
/// # fn main() -> Result<(), shmlimit::Error> {
/// # let dir = tempfile::tempdir().unwrap();
/// use shmlimit::{Limiter, RateLimitHeaders, StateItem, TokenBucket};
/// let limiter = Limiter::builder()
///     .limit("api", TokenBucket::per_second(10).burst(2))
///     .create_or_open(dir.path().join("i.shm"))?;
/// let api = limiter.token_bucket("api")?;
/// let item = StateItem::of(api.as_limit()).expect("a rate limit has an item");
/// let decision = api.try_acquire(1)?;
/// let mut field = String::new();
/// item.push(&mut field, &decision);
/// let mut headers = RateLimitHeaders::new();
/// headers.add_state("api", api.as_limit().policy()?, &decision);
/// assert_eq!(field, headers.rate_limit);
/// assert_eq!(field, "\"api\";r=1;t=1");
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StateItem {
    /// `"name";r=`
    prefix: Box<str>,
}

impl StateItem {
    /// The item of `limit`; `None` for a limit that has none by a rate policy: a concurrency
    /// limit or counters (in no field), or an adaptive concurrency limit, whose item states
    /// its live permits ([`RateLimitHeaders::add_concurrent`]).
    pub fn of<C: Clock>(limit: &Limit<C>) -> Option<StateItem> {
        Policy::of(limit.algorithm())?;
        let mut prefix = String::with_capacity(limit.name().len() + 5);
        push_sf_string(&mut prefix, limit.name());
        prefix.push_str(";r=");
        Some(StateItem {
            prefix: prefix.into_boxed_str(),
        })
    }

    /// The most bytes [`StateItem::push`] appends: a caller that renders a field of several
    /// items allocates their sum once.
    pub fn max_len(&self) -> usize {
        // ", " before, two numbers of at most 20 digits with ";t=" between.
        2 + self.prefix.len() + 20 + 3 + 20
    }

    /// Append this limit's item for `decision` to the `RateLimit` field `out` (after `", "`
    /// when `out` already holds items).
    pub fn push(&self, out: &mut String, decision: &Decision) {
        out.reserve(self.max_len());
        if !out.is_empty() {
            out.push_str(", ");
        }
        out.push_str(&self.prefix);
        push_state(out, decision);
    }
}

/// Append an item's state after its `r=`: `REMAINING;t=RESET_SECONDS`.
fn push_state(out: &mut String, decision: &Decision) {
    push_decimal(out, decision.remaining());
    out.push_str(";t=");
    push_decimal(out, decision.reset_after_secs_ceil());
}

/// `s` as a structured-field string (RFC 8941 section 3.3.3): printable ASCII only, with `"` and
/// `\` escaped.
#[cfg(test)]
fn sf_string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    push_sf_string(&mut out, s);
    out
}

/// Append `s` as a structured-field string (RFC 8941 section 3.3.3): printable ASCII only, with
/// `"` and `\` escaped.
fn push_sf_string(out: &mut String, s: &str) {
    out.reserve(s.len() + 2);
    out.push('"');
    for c in s.chars().filter(|c| (' '..='~').contains(c)) {
        if c == '"' || c == '\\' {
            out.push('\\');
        }
        out.push(c);
    }
    out.push('"');
}

/// The two digits of 0 to 99.
const PAIRS: &[u8; 200] =
    b"00010203040506070809101112131415161718192021222324252627282930313233343536373839\
      40414243444546474849505152535455565758596061626364656667686970717273747576777879\
      8081828384858687888990919293949596979899";

/// Append `n` in decimal, two digits per division, the digits appended at once.
fn push_decimal(out: &mut String, n: u64) {
    let mut buf = [0u8; 20]; // u64::MAX has 20 digits
    let mut i = buf.len();
    let mut rest = n;
    while rest >= 100 {
        let pair = (rest % 100) as usize * 2;
        rest /= 100;
        i -= 2;
        buf[i..i + 2].copy_from_slice(&PAIRS[pair..pair + 2]);
    }
    if rest >= 10 {
        let pair = rest as usize * 2;
        i -= 2;
        buf[i..i + 2].copy_from_slice(&PAIRS[pair..pair + 2]);
    } else {
        i -= 1;
        buf[i] = b'0' + rest as u8;
    }
    // SAFETY: the bytes appended are ASCII digits, so the String stays UTF-8.
    unsafe { out.as_mut_vec() }.extend_from_slice(&buf[i..]);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decimals_render_as_format_does() {
        let powers = (0..20).flat_map(|e| {
            let p = 10u64.pow(e);
            [p - 1, p, p + 1]
        });
        for n in (0..=10_000)
            .chain(powers)
            .chain([1_000_000_007, u64::MAX - 1, u64::MAX])
        {
            let mut out = String::from("x");
            push_decimal(&mut out, n);
            assert_eq!(out, format!("x{n}"));
        }
    }

    #[test]
    fn bucket_policies_state_the_refill_rate_over_the_refill_time() {
        let bucket = |capacity, per_sec: u64| Algorithm::TokenBucket {
            capacity,
            emission_ns: NS_PER_SEC.div_ceil(per_sec),
        };
        assert_eq!(
            Policy::of(&bucket(30, 300)),
            Some(Policy {
                quota: 300,
                window_secs: 1
            })
        );
        // 100/min with a burst of 20: refills in 12 s, 20 per 12 s.
        let per_min = Algorithm::TokenBucket {
            capacity: 20,
            emission_ns: 600_000_000,
        };
        assert_eq!(
            Policy::of(&per_min),
            Some(Policy {
                quota: 20,
                window_secs: 12
            })
        );
        let daily = Algorithm::TokenBucket {
            capacity: 10_000,
            emission_ns: 86_400 * NS_PER_SEC / 10_000,
        };
        assert_eq!(
            Policy::of(&daily),
            Some(Policy {
                quota: 10_000,
                window_secs: 86_400
            })
        );
    }

    #[test]
    fn a_rounded_up_emission_interval_does_not_add_a_second() {
        let bucket = |capacity, per_sec: u64| Algorithm::TokenBucket {
            capacity,
            emission_ns: NS_PER_SEC.div_ceil(per_sec),
        };
        // (At rates where `T` is a few ns, its rounding is a real difference and shows: 999,999/s
        // is T = 1,001 ns, which the bucket enforces as 999,001/s.)
        for (burst, rate) in [(60, 60), (7, 7), (3, 3), (1_000, 1_000), (100_000, 100_000)] {
            assert_eq!(
                Policy::of(&bucket(burst, rate)),
                Some(Policy {
                    quota: rate,
                    window_secs: 1
                }),
                "{burst} at {rate}/s"
            );
        }
    }

    #[test]
    fn window_policies_round_the_window_up_or_scale_to_a_second() {
        let log = |limit, window_ns| Algorithm::SlidingLog { limit, window_ns };
        assert_eq!(
            Policy::of(&log(100, 60 * NS_PER_SEC)),
            Some(Policy {
                quota: 100,
                window_secs: 60
            })
        );
        assert_eq!(
            Policy::of(&log(13, 1_500_000_000)),
            Some(Policy {
                quota: 13,
                window_secs: 2
            })
        );
        assert_eq!(
            Policy::of(&log(10, 100_000_000)),
            Some(Policy {
                quota: 100,
                window_secs: 1
            })
        );
        assert_eq!(
            Policy::of(&Algorithm::Concurrency {
                permits: 3,
                lease_ns: 0
            }),
            None
        );
    }

    #[test]
    fn a_state_item_renders_what_add_state_renders_within_its_length() {
        let dir = tempfile::tempdir().unwrap();
        // The longest name, of every character a name may hold.
        let name = &"api.v1:users/x-y_Z09".repeat(4)[..crate::spec::MAX_NAME_LEN];
        let limiter = crate::Limiter::builder()
            .limit(name, crate::TokenBucket::per_second(10).burst(2))
            .limit("permits", crate::Concurrency::new(2))
            .create_or_open(dir.path().join("items.shm"))
            .unwrap();
        let limit = limiter.token_bucket(name).unwrap();
        let item = StateItem::of(limit.as_limit()).unwrap();
        let permits = limiter.limit("permits").unwrap();
        assert_eq!(
            StateItem::of(&permits),
            None,
            "a concurrency limit has no item"
        );
        for (remaining, reset_ns) in [(0, 0), (1, 1), (7, 999_999_999), (u64::MAX, u64::MAX)] {
            for allowed in [true, false] {
                let d = if allowed {
                    Decision::allowed(remaining, 1)
                } else {
                    Decision::denied(5, remaining, 1)
                }
                .resetting(reset_ns);
                let mut headers = RateLimitHeaders::new();
                headers.add_state("api", None, &d); // no policy: no item
                headers.add_state(name, limit.as_limit().policy().unwrap(), &d);
                let mut field = String::from("\"api\";r=1;t=1");
                let before = field.len();
                item.push(&mut field, &d);
                assert_eq!(field[before + 2..], headers.rate_limit[..]);
                assert!(field.len() - before <= item.max_len(), "{field}");
            }
        }
    }

    #[test]
    fn names_are_structured_field_strings() {
        assert_eq!(sf_string("api"), "\"api\"");
        assert_eq!(sf_string("a\"b\\c\u{7f}\n"), "\"a\\\"b\\\\c\"");
    }
}
