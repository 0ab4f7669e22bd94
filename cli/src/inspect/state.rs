//! What each limit of a file holds now: the rows `inspect`, `stats` and `watch` show, as a table
//! and as JSON.

use super::*;

/// What one limit holds right now.
pub struct LimitState {
    pub name: String,
    /// The algorithm and parameters the file was created with.
    pub algorithm: Algorithm,
    pub stats: Stats,
    /// What a request could get now (a peek of cost 1, or the free permits of a concurrency
    /// limit), or why it cannot be read (a damaged state word).
    /// `Ok(None)` for a keyed limit: its budget is per key.
    pub peek: Result<Option<Now>, String>,
    /// The live parameters, when a retune (`set-rate`, an adopt) made them differ from the
    /// definition the file was created with (`algorithm`).
    pub live: Option<Algorithm>,
    /// A keyed limit's table: (keys in use, slots).
    pub keys: Option<(usize, usize)>,
    /// A concurrency limit's permit holders.
    pub holders: Option<Vec<PermitHolder>>,
    /// An adaptive concurrency limit's current limit, round trips and permits held.
    pub adaptive: Option<shmlimit::AdaptiveStatus>,
    /// A keyed adaptive concurrency limit's keys: each key with a slot, by its tag, with its
    /// limit, round trips and permits held.
    pub adaptive_keys: Option<Vec<(u64, shmlimit::AdaptiveStatus)>>,
    /// A fleet-managed token bucket's lease: its share, fence, deadline and whether fenced.
    pub fleet: Option<shmlimit::FleetLease>,
}

/// The lowest, mean and highest current limit over a keyed adaptive limit's keys (None when no
/// key has a slot).
pub fn key_limits(keys: &[(u64, shmlimit::AdaptiveStatus)]) -> Option<(f64, f64, f64)> {
    if keys.is_empty() {
        return None;
    }
    let limits = keys.iter().map(|(_, a)| a.limit);
    let low = limits.clone().fold(f64::INFINITY, f64::min);
    let high = limits.clone().fold(f64::NEG_INFINITY, f64::max);
    Some((low, limits.sum::<f64>() / keys.len() as f64, high))
}

/// The rate (tokens per second) an algorithm refills or admits at: a token bucket's refill
/// rate, a window's limit per window; none for logs' and concurrency limits' capacities.
pub fn rate_per_s(a: &Algorithm) -> Option<f64> {
    match *a {
        Algorithm::TokenBucket { emission_ns, .. } => Some(1e9 / emission_ns as f64),
        Algorithm::FixedWindow {
            limit, window_ns, ..
        }
        | Algorithm::SlidingWindow {
            limit, window_ns, ..
        }
        | Algorithm::SlidingLog { limit, window_ns } => Some(limit as f64 * 1e9 / window_ns as f64),
        Algorithm::Concurrency { .. }
        | Algorithm::AdaptiveConcurrency(_)
        | Algorithm::Counters { .. } => None,
    }
}

impl LimitState {
    /// The live parameters: retuned ones when a retune made them differ, else the definition
    /// the file was created with.
    pub fn live_algorithm(&self) -> Algorithm {
        self.live.unwrap_or(self.algorithm)
    }

    /// The parameters decisions use right now: a fleet share's fence once its lease has
    /// passed, else the live (possibly retuned) parameters.
    pub fn applied(&self) -> Algorithm {
        match &self.fleet {
            Some(f) => f.applied(),
            None => self.live_algorithm(),
        }
    }
}

/// What a request could get from a limit right now.
#[derive(Debug, Clone, Copy)]
pub struct Now {
    admits: bool,
    available: u64,
    retry_after_ns: u64,
}

impl Now {
    /// From a cost-1 peek: the peek's `remaining` is what would be left after admitting that
    /// one unit.
    fn of_peek(peek: &Decision) -> Now {
        Now {
            admits: peek.is_allowed(),
            available: peek.remaining() + u64::from(peek.is_allowed()),
            retry_after_ns: peek.retry_after_ns(),
        }
    }

    pub fn is_allowed(&self) -> bool {
        self.admits
    }

    /// When a unit would be admitted; 0 now (a permit's release cannot be foreseen: 0).
    pub fn retry_after_ns(&self) -> u64 {
        self.retry_after_ns
    }
}

/// Units (or permits) a request could take now.
pub fn available(now: &Now) -> u64 {
    now.available
}

/// What a decision of cost 1 on the unkeyed rate limit `limit` would be now.
pub(super) fn peek(limit: &Limit) -> shmlimit::Result<Decision> {
    match limit.kind() {
        LimitKind::TokenBucket => TokenBucketLimit::try_from(limit.clone())?.peek(1),
        LimitKind::Window => WindowLimit::try_from(limit.clone())?.peek(1),
        _ => SlidingLogLimit::try_from(limit.clone())?.peek(1),
    }
}

/// Every limit's state, read now.
pub fn states(limiter: &Limiter) -> Vec<LimitState> {
    limiter
        .limits()
        .into_iter()
        .map(|limit| {
            let stats = limit.stats();
            let holders = matches!(
                limit.algorithm(),
                Algorithm::Concurrency { .. } | Algorithm::AdaptiveConcurrency(_)
            )
            .then(|| limit.permit_holders());
            // An adaptive limit grants its current limit, not its capacity.
            let adaptive = shmlimit::AdaptiveConcurrencyLimit::try_from(limit.clone())
                .ok()
                .and_then(|a| a.status().ok());
            let adaptive_keys = shmlimit::KeyedAdaptiveConcurrencyLimit::try_from(limit.clone())
                .ok()
                .and_then(|a| a.key_statuses().ok());
            let peek = match &holders {
                // A keyed limit's budget is per key.
                Some(_) if limit.def().keyed.is_some() => Ok(None),
                Some(h) => {
                    let granted = adaptive.map_or(limit.capacity(), |a| a.permits);
                    let free = granted.saturating_sub(h.len() as u64);
                    Ok(Some(Now {
                        admits: free > 0,
                        available: free,
                        retry_after_ns: 0,
                    }))
                }
                None if limit.def().keyed.is_some() => Ok(None),
                None => peek(&limit)
                    .map(|d| Some(Now::of_peek(&d)))
                    .map_err(|e| e.to_string()),
            };
            let live = limit
                .live_algorithm()
                .ok()
                .filter(|live| live != limit.algorithm());
            let keys = limit.def().keyed.map(|_| limit.key_occupancy());
            let fleet = limit.fleet_lease().ok().flatten();
            LimitState {
                name: limit.name().to_owned(),
                algorithm: *limit.algorithm(),
                stats,
                peek,
                live,
                keys,
                holders,
                fleet,
                adaptive,
                adaptive_keys,
            }
        })
        .collect()
}

pub(super) fn named(defs: &[Definition]) -> impl Iterator<Item = (&str, &Algorithm)> {
    defs.iter().map(|d| (d.name.as_str(), &d.algorithm))
}

/// Denied decisions as a share of all decisions, in percent (0 when none).
pub fn denial_percent(allowed: u64, denied: u64) -> f64 {
    // In floating point: counters read from a damaged file can sum past u64::MAX.
    let total = allowed as f64 + denied as f64;
    if total == 0.0 {
        0.0
    } else {
        denied as f64 * 100.0 / total
    }
}

#[derive(Serialize)]
pub struct KeysJson {
    used: usize,
    slots: usize,
}

#[derive(Serialize)]
pub struct HolderJson {
    id: u64,
    pid: u32,
    /// A keyed limit's key, by its tag (`Limit::key_tag`).
    #[serde(skip_serializing_if = "Option::is_none")]
    key_tag: Option<u64>,
    since_ns: Option<u64>,
    lease_expiry_ns: Option<u64>,
    reclaimable: bool,
}

/// One limit in `inspect --json` and `stats --json`: its live definition at the top level (the
/// parameters decisions use, after any retune by `set-rate` or an adopt), then its state; the
/// definition the file was created with under `created` when a retune made them differ.
#[derive(Serialize)]
pub struct LimitJson {
    /// The live definition (after any retune).
    #[serde(flatten)]
    definition: DefinitionJson,
    /// Whether a decision of cost 1 would be admitted now.
    #[serde(skip_serializing_if = "Option::is_none")]
    admits_now: Option<bool>,
    /// Units a request could take now.
    #[serde(skip_serializing_if = "Option::is_none")]
    remaining: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    retry_after_ns: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    state_error: Option<String>,
    allowed: u64,
    denied: u64,
    /// Decisions a shadow limit would have denied (they were admitted).
    shadow_denied: u64,
    /// Admissions that left less than the near-limit fraction of the capacity.
    near_limit: u64,
    /// Grants given back whole (refunds, composed roll-backs): `allowed - refunded` passed.
    refunded: u64,
    /// The definition the file was created with, present when a retune (`set-rate`, an adopt)
    /// made the live one (the top-level fields) differ from it.
    #[serde(skip_serializing_if = "Option::is_none")]
    created: Option<DefinitionJson>,
    #[serde(skip_serializing_if = "Option::is_none")]
    keys: Option<KeysJson>,
    #[serde(skip_serializing_if = "Option::is_none")]
    holders: Option<Vec<HolderJson>>,
    /// The rate decisions use now (tokens per second): the live (retuned) rate, or a fleet
    /// share's fence once its lease has passed; absent for concurrency limits.
    #[serde(skip_serializing_if = "Option::is_none")]
    live_rate_per_s: Option<f64>,
    /// A fleet-managed token bucket's lease.
    #[serde(skip_serializing_if = "Option::is_none")]
    fleet: Option<FleetJson>,
    /// An adaptive concurrency limit's current limit, round trips and permits held.
    #[serde(skip_serializing_if = "Option::is_none")]
    adaptive: Option<AdaptiveJson>,
    /// A keyed adaptive concurrency limit's keys with a slot, each by its tag.
    #[serde(skip_serializing_if = "Option::is_none")]
    adaptive_keys: Option<Vec<AdaptiveKeyJson>>,
}

#[derive(Serialize)]
struct AdaptiveJson {
    /// The current limit (fractional: its floor is the permits granted at once).
    limit: f64,
    permits: u64,
    min: u64,
    max: u64,
    /// The last window's mean round trip, µs (absent before the first sample).
    rtt_recent_us: Option<f64>,
    /// The long (no-load) round trip, µs.
    rtt_long_us: Option<f64>,
    in_flight: u64,
}

impl AdaptiveJson {
    fn of(a: &shmlimit::AdaptiveStatus) -> AdaptiveJson {
        AdaptiveJson {
            limit: a.limit,
            permits: a.permits,
            min: a.min,
            max: a.max,
            rtt_recent_us: a.rtt_recent_us,
            rtt_long_us: a.rtt_long_us,
            in_flight: a.in_flight,
        }
    }
}

#[derive(Serialize)]
struct AdaptiveKeyJson {
    /// The key's tag (the table stores no key): what a binding's `key_tag(key)` returns.
    key_tag: u64,
    #[serde(flatten)]
    status: AdaptiveJson,
}

#[derive(Serialize)]
struct FleetJson {
    /// The share's rate (tokens per second), in force while the lease runs.
    share_per_s: f64,
    /// The fence's rate (the reserved minimum, or the floor), in force once it has passed.
    fence_per_s: f64,
    /// The rate decisions use now.
    applied_per_s: f64,
    /// The lease deadline, ns on the file's monotonic clock (0: never leased).
    deadline_ns: u64,
    /// Time left on the lease (negative once it has passed).
    deadline_in_ms: f64,
    /// Whether decisions use the fence now.
    fenced: bool,
}

impl LimitJson {
    pub fn of(state: &LimitState) -> LimitJson {
        let peek = state.peek.as_ref().ok().copied().flatten();
        LimitJson {
            definition: DefinitionJson::of(&state.name, &state.live_algorithm()),
            admits_now: peek.map(|d| d.is_allowed()),
            remaining: peek.as_ref().map(available),
            retry_after_ns: peek.map(|d| d.retry_after_ns()),
            state_error: state.peek.as_ref().err().cloned(),
            allowed: state.stats.allowed,
            denied: state.stats.denied,
            shadow_denied: state.stats.shadow_denied,
            near_limit: state.stats.near_limit,
            refunded: state.stats.refunded,
            created: state
                .live
                .is_some()
                .then(|| DefinitionJson::of(&state.name, &state.algorithm)),
            keys: state.keys.map(|(used, slots)| KeysJson { used, slots }),
            live_rate_per_s: rate_per_s(&state.applied()),
            fleet: state.fleet.map(|f| FleetJson {
                share_per_s: rate_per_s(&f.share).unwrap_or(0.0),
                fence_per_s: rate_per_s(&f.fence).unwrap_or(0.0),
                applied_per_s: rate_per_s(&f.applied()).unwrap_or(0.0),
                deadline_ns: f.deadline_ns,
                deadline_in_ms: (f.deadline_ns as f64 - f.now_ns as f64) / 1e6,
                fenced: !f.leased,
            }),
            adaptive: state.adaptive.as_ref().map(AdaptiveJson::of),
            adaptive_keys: state.adaptive_keys.as_ref().map(|keys| {
                keys.iter()
                    .map(|(tag, a)| AdaptiveKeyJson {
                        key_tag: *tag,
                        status: AdaptiveJson::of(a),
                    })
                    .collect()
            }),
            holders: state.holders.as_ref().map(|hs| {
                hs.iter()
                    .map(|h| HolderJson {
                        id: h.id,
                        pid: h.pid,
                        key_tag: h.key_tag,
                        since_ns: h.since_ns,
                        lease_expiry_ns: h.lease_expiry_ns,
                        reclaimable: h.reclaimable,
                    })
                    .collect()
            }),
        }
    }
}

/// The state table: remaining, retry after, allowed, denied, denied %.
pub fn state_table(states: &[LimitState]) -> String {
    let mut table = TextTable::new(
        &[
            "limit",
            "remaining",
            "retry after",
            "allowed",
            "denied",
            "denied %",
            "shadow denied",
            "near limit",
            "refunded",
        ],
        1,
    );
    for s in states {
        let (remaining, retry) = match &s.peek {
            Ok(Some(d)) => (
                available(d).to_string(),
                render::duration(d.retry_after_ns()),
            ),
            Ok(None) => ("per key".to_owned(), "-".to_owned()),
            Err(_) => ("damaged".to_owned(), "-".to_owned()),
        };
        table.row(vec![
            s.name.clone(),
            remaining,
            retry,
            s.stats.allowed.to_string(),
            s.stats.denied.to_string(),
            format!("{:.1}%", denial_percent(s.stats.allowed, s.stats.denied)),
            s.stats.shadow_denied.to_string(),
            s.stats.near_limit.to_string(),
            s.stats.refunded.to_string(),
        ]);
    }
    table.render()
}
