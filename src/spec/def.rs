//! [`LimitDef`]: one named limit and its options, and the name rules.

use super::*;
#[cfg(doc)]
use crate::error::Error;
use crate::error::{invalid, Result};

/// Check a limit name: 1 to 63 bytes of ASCII letters, digits and `_ - . : /`.
pub(crate) fn validate_name(name: &str) -> Result<()> {
    if name.is_empty() || name.len() > MAX_NAME_LEN {
        return Err(invalid(
            name,
            format!("name must be 1..={MAX_NAME_LEN} bytes"),
        ));
    }
    if !name
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b"_-.:/".contains(&b))
    {
        return Err(invalid(
            name,
            "name may hold only ASCII letters, digits and _ - . : /",
        ));
    }
    Ok(())
}

/// This limit is this host's share of a budget shared by a fleet of hosts.
///
/// Informational for the workers (they decide on the local rate); the fleet agent reads it to
/// know the fleet total and this host's weight, and retunes the local rate with `set_rate`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FleetShare {
    /// The fleet-wide rate, as an emission interval.
    pub total: Rate,
    /// This host's weight among the live members (at least 1).
    pub weight: u32,
}

/// One named limit and its options.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LimitDef {
    /// The name handles are resolved by.
    pub name: String,
    /// What it limits and how.
    pub algorithm: Algorithm,
    /// `Some` for a per-key limit.
    pub keyed: Option<Keyed>,
    /// Shadow (dry-run) mode: decisions are computed and counted, but never deny.
    pub shadow: bool,
    /// Remaining budget under this fraction of the capacity counts as a near-limit decision,
    /// in 1/65536 units (default 6554, about 10%).
    pub near_limit: u16,
    /// `Some` when the limit is a per-host share of a fleet budget.
    pub fleet: Option<FleetShare>,
    /// A hot token bucket split into this many sub-buckets on separate cache lines (1 = not
    /// split); see [`LimitDef::split`].
    pub split: u16,
}

impl LimitDef {
    /// A plain (unkeyed, enforced) limit.
    pub fn new(name: impl Into<String>, algorithm: Algorithm) -> LimitDef {
        LimitDef {
            name: name.into(),
            algorithm,
            keyed: None,
            shadow: false,
            near_limit: DEFAULT_NEAR_LIMIT,
            fleet: None,
            split: 1,
        }
    }

    /// Split a hot token bucket into `k` sub-buckets (at most [`MAX_SPLIT`]), each on its own
    /// cache line, so that processes on different CPUs do not fight over one line.
    ///
    /// The budget is *partitioned*, never copied: sub-bucket `i` gets capacity `B / k` (the
    /// remainder spread over the first ones) and rate `r / k`, so the sum of the sub-buckets'
    /// bounds is the bucket's bound, `floor(B + r T)`: as strict as the unsplit bucket. A
    /// process decides on the sub-bucket of the CPU it runs on and, when that one is empty,
    /// borrows from its siblings in turn before denying, so utilisation stays close to the
    /// unsplit bucket's; the price is a few more CAS attempts on a denial, a retry-after that is
    /// the earliest of all sub-buckets, and a largest single cost of `B / k`.
    pub fn split(mut self, k: u16) -> LimitDef {
        self.split = k;
        self
    }

    /// Check the whole definition (name, parameters, options) as creating a file would,
    /// without creating anything.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidParameter`] naming the limit and the field.
    pub fn validate(&self) -> Result<()> {
        validate_name(&self.name)?;
        self.algorithm.validate(&self.name)?;
        self.validate_options()
    }

    /// Check the options against the algorithm.
    pub(crate) fn validate_options(&self) -> Result<()> {
        if self.split == 0 || self.split as usize > MAX_SPLIT {
            return Err(invalid(
                &self.name,
                format!("split {}: must be 1..={MAX_SPLIT}", self.split),
            ));
        }
        if self.split > 1 {
            match self.algorithm {
                Algorithm::TokenBucket {
                    capacity,
                    emission_ns,
                } if self.keyed.is_none() => {
                    let k = self.split as u64;
                    let sub_tau = emission_ns
                        .checked_mul(k)
                        .and_then(|e| e.checked_mul(capacity / k + 1));
                    if sub_tau.is_none_or(|t| t > 1 << 62) {
                        return Err(invalid(
                            &self.name,
                            "split: the sub-buckets' rate is too slow to represent",
                        ));
                    }
                    if capacity < k {
                        return Err(invalid(
                            &self.name,
                            format!(
                                "split {}: the capacity {capacity} leaves a sub-bucket empty",
                                self.split
                            ),
                        ));
                    }
                }
                _ => {
                    return Err(invalid(
                        &self.name,
                        "only an unkeyed token bucket can be split",
                    ))
                }
            }
        }
        if let (Algorithm::Counters { log_entries }, keyed) = (self.algorithm, self.keyed) {
            let Some(k) = keyed else {
                return Err(invalid(
                    &self.name,
                    "a counters limit is keyed: define it with a key capacity (keyed_limit)",
                ));
            };
            if k.slots().saturating_mul(log_entries) > MAX_COUNTER_LOG_ENTRIES {
                return Err(invalid(
                    &self.name,
                    format!(
                        "{} key slots x {log_entries} log entries: at most 2^26 log entries",
                        k.slots()
                    ),
                ));
            }
        }
        if let Some(k) = self.keyed {
            if k.capacity == 0 || k.capacity > MAX_KEYS {
                return Err(invalid(
                    &self.name,
                    format!("key capacity {}: must be 1..=2^26", k.capacity),
                ));
            }
            if matches!(self.algorithm, Algorithm::SlidingLog { .. }) {
                return Err(invalid(
                    &self.name,
                    "a keyed sliding log is not supported; key a token bucket, a window or a \
                     concurrency limit",
                ));
            }
            if let Algorithm::AdaptiveConcurrency(a) = self.algorithm {
                if a.max > MAX_KEY_PERMITS {
                    return Err(invalid(
                        &self.name,
                        format!(
                            "max {}: a keyed adaptive concurrency limit has at most 64 \
                             permits per key",
                            a.max
                        ),
                    ));
                }
            }
            if let Algorithm::Concurrency { permits, .. }
            | Algorithm::AdaptiveConcurrency(crate::spec::Adaptive { max: permits, .. }) =
                self.algorithm
            {
                if permits > MAX_KEY_PERMITS {
                    return Err(invalid(
                        &self.name,
                        format!("permits {permits}: a keyed concurrency limit has 1..=64 per key"),
                    ));
                }
                if k.slots().saturating_mul(permits) > MAX_KEY_PERMIT_ENTRIES {
                    return Err(invalid(
                        &self.name,
                        format!(
                            "{} key slots x {permits} permits: at most 2^26 permit entries",
                            k.slots()
                        ),
                    ));
                }
            }
        }
        if let Some(f) = self.fleet {
            if f.weight == 0 {
                return Err(invalid(&self.name, "fleet weight must be at least 1"));
            }
            if !matches!(self.algorithm, Algorithm::TokenBucket { .. }) {
                return Err(invalid(&self.name, "a fleet share must be a token bucket"));
            }
        }
        Ok(())
    }
}
