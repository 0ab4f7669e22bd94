//! The plain C structs of the ABI: limit definitions, open options, decisions, statistics,
//! composed checks and permit holders.
//!
//! Enumerations that the caller writes (the kind and alignment of a definition) travel as
//! `uint32_t` fields and are checked here: a value the library does not know is an
//! `SHMLIMIT_INVALID_PARAMETER`, never undefined behaviour. `reserved` fields must be zero;
//! later versions may give them a meaning without changing the struct's size or layout.

mod convert;

pub(crate) use convert::*;

use std::ffi::c_char;
use std::time::Duration;

use shmlimit::Decision;
use shmlimit::Stats;
use shmlimit::{
    consts::DEFAULT_NEAR_LIMIT, Algorithm, Alignment, FleetShare, FullPolicy, IntoAlgorithm, Keyed,
    LimitDef, Rate,
};

use super::status::{shmlimit_status, Failure};

/// The algorithm of a limit (the `kind` field of `shmlimit_def`).
///
/// Values are never reused; new kinds get new numbers.
#[allow(non_camel_case_types)]
#[repr(u32)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum shmlimit_kind {
    /// A token bucket (GCRA): `limit` is the capacity (burst), refilled at `rate` tokens per
    /// `period_ns`. At most `floor(limit + rate * T / period_ns)` admissions in any interval `T`.
    SHMLIMIT_TOKEN_BUCKET = 1,
    /// At most `limit` per aligned window of `period_ns`.
    SHMLIMIT_FIXED_WINDOW = 2,
    /// The weighted sliding-window counter: about `limit` per `period_ns` (`limit` < 2^20).
    SHMLIMIT_SLIDING_WINDOW = 3,
    /// The exact sliding log: at most `limit` in every interval of `period_ns`.
    SHMLIMIT_SLIDING_LOG = 4,
    /// A concurrency limit: at most `limit` permits held at once; `period_ns` is the lease after
    /// which a held permit becomes reclaimable (0: no lease). Rate decisions on it return
    /// `SHMLIMIT_WRONG_KIND`.
    SHMLIMIT_CONCURRENCY = 5,
    /// An adaptive concurrency limit: at most `L` permits held at once, `L` moving within
    /// [`rate`, `limit`] (minimum, maximum) with the outcome and latency every release reports
    /// (see `shmlimit_adaptive_acquire`); it starts at the minimum, with the default tuning.
    /// `period_ns` is the lease (0: none).
    SHMLIMIT_ADAPTIVE_CONCURRENCY = 8,
    /// Keyed counters whose window and limit come with each call (the `shmlimit_counters_*`
    /// calls): `limit` is the entries of each key's moving-window log (0: no moving windows),
    /// `period_ns`, `rate` and `alignment` are 0, and `key_capacity` must be set.
    SHMLIMIT_COUNTERS = 6,
}

/// How window boundaries are placed (the `alignment` field of `shmlimit_def`).
#[allow(non_camel_case_types)]
#[repr(u32)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum shmlimit_alignment {
    /// Boundaries at multiples of the window in Unix time (the default, value 0).
    SHMLIMIT_ALIGN_WALL_CLOCK = 0,
    /// Boundaries at multiples of the window on `CLOCK_MONOTONIC`.
    SHMLIMIT_ALIGN_MONOTONIC = 1,
    /// Calendar boundaries in a fixed offset from UTC: days from that offset's midnight, weeks
    /// from its Monday 00:00. The definition's `rate` field (otherwise 0 for windows) holds the
    /// offset in seconds east of UTC as a two's-complement `int64_t` (at most 18 h either way):
    /// `(uint64_t)(int64_t)(-5 * 3600)` for UTC-05:00, 0 for UTC.
    SHMLIMIT_ALIGN_CALENDAR = 2,
}

/// What a keyed limit does when its table has no slot for a new key (the `on_full` field of
/// `shmlimit_def`).
#[allow(non_camel_case_types)]
#[repr(u32)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum shmlimit_full_policy {
    /// Deny the request (fail closed); the default, value 0.
    SHMLIMIT_FULL_DENY = 0,
    /// Admit the request without limiting it (fail open).
    SHMLIMIT_FULL_ALLOW = 1,
    /// Fail the call with `SHMLIMIT_TABLE_FULL`.
    SHMLIMIT_FULL_ERROR = 2,
}

/// `shmlimit_def.flags`: shadow (dry-run) mode. Decisions are computed and counted but never
/// deny; a decision the limit would have denied is allowed with `shadow_denied` set.
pub const SHMLIMIT_DEF_SHADOW: u32 = 1;
/// `shmlimit_def.flags`: `near_limit` holds the near-limit fraction (without it, the default
/// of about 10%, 6554 / 65536, applies). Definitions the library reports always have it set.
pub const SHMLIMIT_DEF_NEAR_LIMIT: u32 = 2;
/// The default near-limit fraction, in 1/65536 of the capacity (about 10%).
pub const SHMLIMIT_DEFAULT_NEAR_LIMIT: u16 = 6554;
/// Most sub-buckets a split token bucket may have.
pub const SHMLIMIT_MAX_SPLIT: u16 = 64;
/// Most key slots one keyed limit may have (2^26).
pub const SHMLIMIT_MAX_KEYS: u64 = 1 << 26;
/// Most permits per key of a keyed concurrency limit; its key slots times permits per key may
/// not exceed 2^26 either.
pub const SHMLIMIT_MAX_KEY_PERMITS: u64 = 64;

const _: () = assert!(SHMLIMIT_DEFAULT_NEAR_LIMIT == DEFAULT_NEAR_LIMIT);
const _: () = assert!(SHMLIMIT_MAX_SPLIT as usize == shmlimit::consts::MAX_SPLIT);
const _: () = assert!(SHMLIMIT_MAX_KEYS == shmlimit::consts::MAX_KEYS);
const _: () = assert!(SHMLIMIT_MAX_KEY_PERMITS == shmlimit::consts::MAX_KEY_PERMITS);

/// One limit definition: an input of `shmlimit_limiter_create_or_open`, and what
/// `shmlimit_limiter_definition` reports.
///
/// Zero-initialise it (`shmlimit_def d = {0};`) and set the fields the kind uses:
///
/// | kind | `limit` | `period_ns` | `rate` | `alignment` |
/// |---|---|---|---|---|
/// | `SHMLIMIT_TOKEN_BUCKET` | capacity (burst) | refill period | tokens per period | 0 |
/// | `SHMLIMIT_FIXED_WINDOW` | limit per window | window | 0 | a `shmlimit_alignment` |
/// | `SHMLIMIT_SLIDING_WINDOW` | limit per window | window | 0 | a `shmlimit_alignment` |
/// | `SHMLIMIT_SLIDING_LOG` | limit per window | window | 0 | 0 |
/// | `SHMLIMIT_CONCURRENCY` | permits held at once | lease (0: none) | 0 | 0 |
/// | `SHMLIMIT_ADAPTIVE_CONCURRENCY` | the maximum limit | lease (0: none) | the minimum limit | 0 |
/// | `SHMLIMIT_COUNTERS` | log entries per key (the largest moving-window limit) | 0 | 0 | 0 |
///
/// A token bucket's refill interval is `period_ns / rate` rounded up; the library reports a
/// stored token bucket as `rate = 1` per `period_ns` = that interval.
///
/// The option fields after `rate` (keys, shadow mode, near-limit fraction, split, fleet share)
/// all mean "the default" when zero, so a zero-initialised definition is a plain limit.
#[allow(non_camel_case_types)]
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct shmlimit_def {
    /// The limit's name: NUL-terminated, 1 to 63 bytes of ASCII letters, digits and `_-.:/`.
    /// As an input it is only read during the call; as an output it points into the handle
    /// that reported it and is valid as long as that handle.
    pub name: *const c_char,
    /// A `shmlimit_kind` value.
    pub kind: u32,
    /// A `shmlimit_alignment` value (windowed kinds), else 0.
    pub alignment: u32,
    /// The capacity (token bucket), the limit per window, or the permits (concurrency).
    pub limit: u64,
    /// The window (windowed kinds), the refill period (token bucket) or the lease
    /// (concurrency), in nanoseconds.
    pub period_ns: u64,
    /// Token bucket: tokens added per `period_ns` (at least 1). Other kinds: 0.
    pub rate: u64,
    /// Keyed limits: key slots (1 to `SHMLIMIT_MAX_KEYS`, rounded up to a power of two; the
    /// library reports the rounded value). 0: not keyed. Token buckets, fixed and sliding
    /// windows and concurrency limits, adaptive or not (at most `SHMLIMIT_MAX_KEY_PERMITS` per
    /// key, the maximum of an adaptive one), can be keyed.
    pub key_capacity: u64,
    /// Keyed limits: a `shmlimit_full_policy`. Unkeyed limits: 0.
    pub on_full: u32,
    /// `SHMLIMIT_DEF_SHADOW`, `SHMLIMIT_DEF_NEAR_LIMIT` (or 0). Other bits must be zero.
    pub flags: u32,
    /// With `SHMLIMIT_DEF_NEAR_LIMIT`: admissions leaving less than `near_limit / 65536` of
    /// the capacity count as near-limit (`shmlimit_stats.near_limit`). Else must be 0.
    pub near_limit: u16,
    /// Unkeyed token buckets: split into this many sub-buckets on their own cache lines (2 to
    /// `SHMLIMIT_MAX_SPLIT`), each with `limit / split` of the capacity and `1 / split` of the
    /// rate, for hot limits decided on by many CPUs. 0 or 1: not split.
    pub split: u16,
    /// Token buckets that are this host's share of a fleet-wide budget: this host's weight
    /// (at least 1). 0: not a fleet share (then `fleet_emission_ns` must be 0).
    pub fleet_weight: u32,
    /// With `fleet_weight`: the fleet-wide rate as nanoseconds per token (the fleet's period
    /// divided by its tokens, rounded up).
    pub fleet_emission_ns: u64,
}

/// Options of `shmlimit_limiter_create_or_open` and `shmlimit_limiter_open`; a NULL pointer
/// means all defaults, and so does a zero-initialised struct.
#[allow(non_camel_case_types)]
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct shmlimit_options {
    /// Permission bits of a created file (and the most an opened one may grant); 0 means the
    /// default `0600` (so that a zero-initialised struct is all defaults). `0660` shares the
    /// file with the group. Bits above `0777`, a mode without `0600` (owner read and write) and
    /// a world-writable mode (`0002`) are refused with `SHMLIMIT_INVALID_PARAMETER`.
    pub mode: u32,
    /// 1 accepts a file owned by another user; 0 (the default) refuses it.
    pub allow_other_owner: u32,
    /// What `shmlimit_limiter_create_or_open` does when the file exists with other
    /// definitions: `SHMLIMIT_ON_CONFLICT_REFUSE` (0, the default) fails with
    /// `SHMLIMIT_DEFINITION_CONFLICT`; `SHMLIMIT_ON_CONFLICT_ADOPT` retunes the file live when
    /// its layout can hold the new definitions, else atomically replaces it with a new file
    /// (attached processes move to it within about a second). Ignored by `shmlimit_limiter_open`.
    pub on_conflict: u32,
    /// What the file does with its state at a reboot: `SHMLIMIT_ON_REBOOT_DEFAULT` (0: a created
    /// file translates, an opened file keeps its own choice), `SHMLIMIT_ON_REBOOT_TRANSLATE` or
    /// `SHMLIMIT_ON_REBOOT_RESET` (stored at creation; an existing file must have made the same
    /// choice, else `SHMLIMIT_DEFINITION_CONFLICT`).
    pub on_reboot: u32,
    /// Must be zero.
    pub reserved: [u64; 3],
}

/// An average Gregorian month in nanoseconds (2,629,746 s): with `SHMLIMIT_ALIGN_CALENDAR`, a
/// fixed window of this `period_ns` is the calendar month (28 to 31 days, from the 1st 00:00 in
/// the offset); as a token bucket's `period_ns`, a rate per month.
pub const SHMLIMIT_MONTH_NS: u64 = 2_629_746_000_000_000;
const _: () = assert!(SHMLIMIT_MONTH_NS == shmlimit::Rate::MONTH_NS);

/// `shmlimit_options.on_reboot`: a created file translates its state at a reboot, an opened
/// file keeps the choice it was created with.
pub const SHMLIMIT_ON_REBOOT_DEFAULT: u32 = 0;
/// `shmlimit_options.on_reboot`: at a reboot every stored time is translated to the new boot's
/// clock through the wall clock: quotas used before the reboot stay used (permits are released).
pub const SHMLIMIT_ON_REBOOT_TRANSLATE: u32 = 1;
/// `shmlimit_options.on_reboot`: at a reboot every state is reset to fresh, once.
pub const SHMLIMIT_ON_REBOOT_RESET: u32 = 2;

/// `shmlimit_options.on_conflict`: refuse other definitions (the default).
pub const SHMLIMIT_ON_CONFLICT_REFUSE: u32 = 0;
/// `shmlimit_options.on_conflict`: adopt the requested definitions.
pub const SHMLIMIT_ON_CONFLICT_ADOPT: u32 = 1;

/// The outcome of one decision.
///
/// Callers allocate it (usually on the stack); the library writes the whole struct on success.
#[allow(non_camel_case_types)]
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct shmlimit_decision {
    /// True when admitted (and, except for `shmlimit_peek`, the cost consumed). When false
    /// nothing was consumed.
    pub allowed: bool,
    /// True when a shadow (dry-run) limit would have denied: `allowed` is true anyway and
    /// nothing was consumed.
    pub shadow_denied: bool,
    /// Units that could still be admitted right now after this decision, if no one else acts.
    pub remaining: u64,
    /// Nanoseconds until the same request could be admitted if nothing else is admitted
    /// meanwhile; 0 when allowed, at least 1 when denied.
    pub retry_after_ns: u64,
    /// The grant record: what `shmlimit_refund` needs to give this grant back (the cost
    /// admitted and where it was recorded). Zero for denials, shadow denials and peeks. Opaque:
    /// pass the decision back unchanged. A forged record cannot make a limit looser than a
    /// refund of a real grant could.
    pub grant: [u64; 2],
    /// `reserved[0]` is the decision's flags word: `SHMLIMIT_DECISION_UNAVAILABLE` for a guarded
    /// decision made by the fail-open / fail-closed policy, zero otherwise. `reserved[1]` is
    /// part of the grant record: it names the limit (and file) that made the grant, so that a
    /// refund on another limit is refused with `SHMLIMIT_WRONG_KIND`; zero when there is no
    /// grant. A record with `reserved[1]` zero is not checked.
    pub reserved: [u64; 2],
    /// Nanoseconds until the limit is back to its whole budget (a full bucket, an empty window
    /// or log) if nothing else is admitted meanwhile: the `t` of the `RateLimit` header. Zero
    /// for permits and for a limit already whole.
    pub reset_after_ns: u64,
}

/// Decision counters of one limit, summed over every process attached to the file.
#[allow(non_camel_case_types)]
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct shmlimit_stats {
    /// Decisions that admitted (including those a shadow limit would have denied).
    pub allowed: u64,
    /// Decisions that denied.
    pub denied: u64,
    /// Decisions a shadow (dry-run) limit would have denied.
    pub shadow_denied: u64,
    /// Admissions that left less than the near-limit fraction of the capacity.
    pub near_limit: u64,
    /// Grants given back whole: explicit refunds (`shmlimit_refund`, `shmlimit_refund_key`,
    /// `shmlimit_refund_all`), cancelled reservations, and the roll-backs of composed checks
    /// that denied (`shmlimit_acquire_all`). `allowed - refunded` is what passed.
    pub refunded: u64,
    /// Zero; room for later counters.
    pub reserved: [u64; 3],
}

/// Most limits one composed check may hold.
pub const SHMLIMIT_MAX_CHECKS: usize = 8;
const _: () = assert!(SHMLIMIT_MAX_CHECKS == shmlimit::consts::MAX_CHECKS);

/// One limit (and cost) of a composed check (`shmlimit_acquire_all`).
#[allow(non_camel_case_types)]
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct shmlimit_check {
    /// The limit (a live handle).
    pub limit: *const super::shmlimit_limit,
    /// Units to acquire on it (at least 1).
    pub cost: u64,
    /// For a keyed limit, the key: `key_len` bytes (1 to `SHMLIMIT_MAX_KEY_LEN`, any content,
    /// no NUL needed), only read during the call. NULL with `key_len` 0 (a zero-initialised
    /// check) checks an unkeyed limit, as `shmlimit_acquire` does.
    pub key: *const u8,
    /// The length of `key` in bytes.
    pub key_len: usize,
}

/// The outcome of a composed check: admitted by every limit (and the costs consumed), or by
/// none (and nothing consumed anywhere).
#[allow(non_camel_case_types)]
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct shmlimit_composed {
    /// True when every limit admitted.
    pub allowed: bool,
    /// The index (in the checks given) of the first limit that denied; -1 when allowed.
    pub denied_by: i32,
    /// The number of checks: `decisions[0 .. count]` are written, the rest zeroed.
    pub count: u32,
    /// The largest retry-after among the limits that would deny now (0 when allowed).
    pub retry_after_ns: u64,
    /// Check `i`'s decision: its grant when allowed (what `shmlimit_refund_all` gives back);
    /// when denied, the denial at `denied_by` and peeks after it. A grant refunded because a
    /// later limit denied, or a peek that failed, is all zero (`allowed` false with
    /// `retry_after_ns` 0, which no real denial has).
    pub decisions: [shmlimit_decision; SHMLIMIT_MAX_CHECKS],
    /// Written as zero.
    pub reserved: [u64; 2],
}

/// One held permit of a concurrency limit, as `shmlimit_permit_holders` lists it.
#[allow(non_camel_case_types)]
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct shmlimit_permit_holder {
    /// The permit's id (as `shmlimit_permit_acquire` returned it to its holder).
    pub id: u64,
    /// The holder's process id.
    pub pid: u32,
    /// True when the next acquirer finding no free permit may take it over: its holder is gone
    /// (exited, killed, a zombie) or its lease expired.
    pub reclaimable: bool,
    /// When it was acquired, in `CLOCK_MONOTONIC` nanoseconds (to the millisecond); 0 for a
    /// holder caught between its claim and its time stamp.
    pub since_ns: u64,
    /// When its lease expires; 0 without a lease (or a time stamp).
    pub lease_expiry_ns: u64,
    /// For a keyed limit, the tag of the key it is held for (as `shmlimit_key_tag` computes it
    /// from the key's bytes); 0 for an unkeyed limit.
    pub key_tag: u64,
    /// Written as zero.
    pub reserved: [u64; 1],
}

impl From<shmlimit::PermitHolder> for shmlimit_permit_holder {
    fn from(h: shmlimit::PermitHolder) -> Self {
        shmlimit_permit_holder {
            id: h.id,
            pid: h.pid,
            reclaimable: h.reclaimable,
            since_ns: h.since_ns.unwrap_or(0),
            lease_expiry_ns: h.lease_expiry_ns.unwrap_or(0),
            key_tag: h.key_tag.unwrap_or(0),
            reserved: [0; 1],
        }
    }
}

// The layout every C compiler must agree on (checked from C too, in ffi/tests/errors.c, and
// from Python in ffi/python/tests/test_core.py). Changing any of these breaks the ABI.
const _: () = {
    use std::mem::{offset_of, size_of};
    assert!(size_of::<shmlimit_def>() == 72);
    assert!(offset_of!(shmlimit_def, kind) == 8);
    assert!(offset_of!(shmlimit_def, limit) == 16);
    assert!(offset_of!(shmlimit_def, key_capacity) == 40);
    assert!(offset_of!(shmlimit_def, on_full) == 48);
    assert!(offset_of!(shmlimit_def, flags) == 52);
    assert!(offset_of!(shmlimit_def, near_limit) == 56);
    assert!(offset_of!(shmlimit_def, split) == 58);
    assert!(offset_of!(shmlimit_def, fleet_weight) == 60);
    assert!(offset_of!(shmlimit_def, fleet_emission_ns) == 64);
    assert!(size_of::<shmlimit_options>() == 40);
    assert!(size_of::<shmlimit_decision>() == 64);
    assert!(offset_of!(shmlimit_decision, reset_after_ns) == 56);
    assert!(offset_of!(shmlimit_decision, shadow_denied) == 1);
    assert!(offset_of!(shmlimit_decision, remaining) == 8);
    assert!(offset_of!(shmlimit_decision, grant) == 24);
    assert!(size_of::<shmlimit_stats>() == 64);
    assert!(size_of::<shmlimit_check>() == 32);
    assert!(offset_of!(shmlimit_check, cost) == 8);
    assert!(offset_of!(shmlimit_check, key) == 16);
    assert!(offset_of!(shmlimit_check, key_len) == 24);
    assert!(size_of::<shmlimit_composed>() == 24 + 64 * SHMLIMIT_MAX_CHECKS + 16);
    assert!(offset_of!(shmlimit_composed, denied_by) == 4);
    assert!(offset_of!(shmlimit_composed, count) == 8);
    assert!(offset_of!(shmlimit_composed, retry_after_ns) == 16);
    assert!(offset_of!(shmlimit_composed, decisions) == 24);
    assert!(size_of::<shmlimit_permit_holder>() == 48);
    assert!(offset_of!(shmlimit_permit_holder, pid) == 8);
    assert!(offset_of!(shmlimit_permit_holder, reclaimable) == 12);
    assert!(offset_of!(shmlimit_permit_holder, since_ns) == 16);
    assert!(offset_of!(shmlimit_permit_holder, key_tag) == 32);
};

impl From<Decision> for shmlimit_decision {
    fn from(d: Decision) -> Self {
        let (grant, origin) = shmlimit::c_abi::grant_record(&d);
        // The limit that made the grant, only where there is one.
        let origin = if grant == [0; 2] { 0 } else { origin };
        shmlimit_decision {
            allowed: d.is_allowed(),
            shadow_denied: d.is_shadow_denied(),
            remaining: d.remaining(),
            retry_after_ns: d.retry_after_ns(),
            grant,
            reserved: [0, origin],
            reset_after_ns: d.reset_after_ns(),
        }
    }
}

impl shmlimit_decision {
    /// The decision with its grant record cleared (a peek grants nothing to refund).
    pub(crate) fn without_grant(mut self) -> Self {
        self.grant = [0; 2];
        self.reserved[1] = 0;
        self
    }

    /// What the decision told its caller (allowed, remaining, retry-after, reset), for
    /// rendering; it carries no grant.
    pub(crate) fn to_view(self) -> Decision {
        shmlimit::c_abi::view(
            self.allowed,
            self.remaining,
            self.retry_after_ns,
            self.reset_after_ns,
        )
    }

    /// The grant this decision records, for a refund, with the limit that made it.
    pub(crate) fn to_grant(self) -> Decision {
        if !self.allowed {
            return shmlimit::c_abi::from_grant_record([0; 2], 0, false);
        }
        // A shadow-denied grant took nothing (cost 0) but was admitted: its refund counts.
        shmlimit::c_abi::from_grant_record(self.grant, self.reserved[1], self.shadow_denied)
    }
}

impl From<Stats> for shmlimit_stats {
    fn from(s: Stats) -> Self {
        shmlimit_stats {
            allowed: s.allowed,
            denied: s.denied,
            shadow_denied: s.shadow_denied,
            near_limit: s.near_limit,
            refunded: s.refunded,
            reserved: [0; 3],
        }
    }
}
