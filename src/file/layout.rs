//! The on-disk layout of a limiter file. This module is the only one that knows offsets.
//!
//! # Layout (format version 7)
//!
//! All integers are native-endian (the file never leaves its host); every field is an aligned
//! 64-bit word, read and written only through atomics once the file is mapped.
//!
//! ```text
//! offset        size                 content
//! 0             4096                 header (words below; the rest reserved, zero)
//! 4096          N x 128, to 4096     limit definitions, one 128-byte record each
//! slots_offset  sum of slot lines    per-limit state, each limit on its own 128-byte lines
//! stats_offset  LANES x lane_stride  decision counters: per lane an owner line, then the limits' counters
//! ```
//!
//! Header words (index x 8 = byte offset):
//!
//! | word | field | notes |
//! |---|---|---|
//! | 0 | magic `b"SHMLIMIT"` | a foreign or other-endian file fails here |
//! | 1 | format version (low 32) / header size (high 32) | |
//! | 2 | init state | [`READY`] once complete; files are published complete, so anything else is foreign |
//! | 3 | file size | must equal the size on disk |
//! | 4 | slot line size (low 32) / limit count (high 32) | |
//! | 5, 6 | definitions offset, length | |
//! | 7, 8 | slots offset, length | |
//! | 9, 10 | stats offset, length | |
//! | 11 | checksum | FNV-1a 64 over words 1, 3..=10, 19..=20, 25, 28 and the definitions |
//! | 12, 13 | boot id (16 bytes) | a mismatch on open translates or resets the state (not in the checksum; see `reboot`) |
//! | 14 | clock id | 1 = `CLOCK_MONOTONIC` |
//! | 15 | creator's time-namespace monotonic offset, ns (i64) | |
//! | 16 | wall offset: realtime - monotonic, ns, at the boot's first open | aligns windows (their phase) |
//! | 17 | creation time, Unix ns | informational |
//! | 18 | reset count | incremented by each boot-id reset |
//! | 19, 20 | keyed-hash seed | reserved for keyed limits |
//! | 21 | highest wall offset seen in this boot (opens, `sync`), ns | maps this boot's times to Unix time at the next boot |
//! | 22 | latest Unix time seen in this boot (opens, `sync`), ns | the reference of the next boot's translation |
//! | 23, 24 | boot id of a translation under way | tells an interrupted translation |
//! | 25 | on reboot: 0 translate, 1 reset | in the checksum |
//! | 26 | translations done | informational |
//! | 27 | wall time elapsed across the last translated reboot, ns (i64) | informational |
//! | 28 | file id | random, non-zero, written at creation: attached handles compare it (with the path's device and inode) to notice a file replaced under them |
//! | 64..128 | bitmap of limits whose state failed closed at a translation | cleared by a reset of the limit |
//! | 128..192 | bitmap of limits the translation under way has finished | read only after an interrupted translation |
//!
//! Definition record (16 words): name (words 0..8, NUL-padded, at most 63 bytes); word 8: kind
//! (low 32) and flags (high 32: bit 0 monotonic alignment, bit 1 shadow, bits 2-3 full policy,
//! bit 4 keyed, bit 5 fleet share, bit 6 calendar alignment (windows; the UTC offset in seconds,
//! i64, in word 14), bits 8-15 split - 1, bits 16-31 near-limit fraction / 65536); parameters `a`, `b`
//! (words 9, 10); key slots (word 11); slot offset and length in bytes (words 12, 13); fleet
//! total as an emission interval and fleet weight (words 14, 15).
//!
//! Slot region of one limit: a 128-byte control line, then its state area.
//!
//! | limit | control line | state area |
//! |---|---|---|
//! | split token bucket (k) | as a token bucket; its state is sub-bucket 0's | k - 1 lines, sub-bucket i's state in word 0 of line i |
//! | token bucket | w0 state (bit 63: active parameter slot, bits 0-62: TAT), w1-3 parameter slot 0 (emission ns, capacity, check), w4-6 parameter slot 1, w7 fleet lease deadline (monotonic ns), w8 `ACTIVE`: bit 0 the active slot, bits 1-62 the generation of the parameter slots (random at creation, bumped after every write of a slot, see `engine::bucket`), w9-11 fleet fence slot (emission ns, capacity, check) | - |
//! | fixed / sliding window | w0 state, w1 live limit `L` | - |
//! | sliding log | w0 ring head | `L` entries, to a whole line |
//! | concurrency | w0 release sequence (futex on its low 32 bits), w1 waiter count, w2-15 reserved | per permit: owner word (pid 22 bits, start-time low 24 bits, generation 18 bits) and stamp word (generation, acquired-at ms), to a whole line |
//! | adaptive concurrency | as concurrency, and w2 sample accumulator, w3 limit and window start, w4 RTTs (see `algo::adaptive`) | `max` permit entries, as concurrency |
//! | keyed | as the unkeyed algorithm (w0 unused) | key slots x 16 bytes: (tag, state); tags are 63 bits, bit 63 marks a pending claim (see the keyed module) |
//! | counters (kind 6, always keyed) | unused | a counter table of `K` key slots x 16 bytes (tag, a word of `algo::counters`), to a whole line; a log table of `K` key slots (tag, deadline ns), to a whole line; then `K x M` log entries of 16 bytes (tag, monotonic ns), to a whole line (`M` = parameter `a`) |
//! | keyed concurrency | w0-15: eight (release sequence, waiter count) pairs, a key's waiters on pair `tag mod 8` | key slots x 16 bytes (tag, bit `i` set while permit `i` of the key is held), to a whole line; then per key slot, `C` permit entries as above, to a whole line |
//! | keyed adaptive concurrency (kind 8, keyed) | as keyed concurrency | as keyed concurrency with `C = max`; then per key slot 4 words (accumulator, limit and window start, RTTs, as the unkeyed control words 2-4, and the tag of the key they learn for), to a whole line |
//!
//! Counters: [`LANES`] lanes of `lane_stride` bytes. A lane starts with an owner line (word 0:
//! the owner word, pid 22 bits / start time 24 bits / generation 18 bits as a permit's, naming
//! the *thread* that owns the lane by its tid; the rest reserved), then per limit [`COUNTERS`]
//! words: allowed, denied, shadow-denied, near-limit, refunded, three reserved (zero); to a
//! whole line. Lane 0 is never owned: threads without a lane of their own add to it atomically.
//! An owned lane is written only by its owner, with plain stores (see the `tally` module).
//!
//! **Versioning.** Any change to an offset, a record, a state-word encoding or the meaning of a
//! field bumps [`FORMAT_VERSION`]; readers refuse other versions. New fields go in reserved
//! words, which are zero in files of the current version, and still bump the version.
//! Version 2: key tags became 63 bits with bit 63 marking a pending claim (version 1 used the
//! full 64-bit hash and merged duplicate slots). Version 3: fleet-managed token buckets: a
//! parameter slot's check word may carry [`bucket::FLEET`] (the share of a fleet agent), the
//! lease deadline took word 7 (on the first 64 bytes of the control line, which every decision
//! fetches) and the active-slot word moved to word 8; words 9-11 hold the fence slot. Version 4:
//! header word 28 holds a random file id (earlier versions left it zero), so that a file copied
//! over another in place is told apart; the reboot words 21-27 and the failed-closed bitmap
//! (words 64..128): a reboot translates the stored times unless word 25 says reset. Version 5:
//! counter lanes are owned by one thread each and written with plain stores (an owner line at
//! the start of each lane; lane 0 shared), 64 lanes of eight words per limit, a `refunded`
//! counter; header words 128..192 mark the limits a reboot translation has finished. Version 6:
//! a token bucket's `ACTIVE` word counts the generations of its parameter slots above its bit 0
//! (a retune bumps it after staging and after activating, a reset after copying); decisions
//! cache parameters per generation and check it after their CAS, so a version-5 process, which
//! rewrites a slot without bumping it, must never share a file with this one. Version 7: kind 6,
//! keyed counters whose window comes with each call (their state area above), and the adaptive
//! concurrency kind (kind 8): `a` its maximum, `b` its lease, word 14 its minimum
//! (bits 0-19), initial limit (bits 20-39) and window in ms (bits 40-63), word 15 its
//! smoothing, backoff, headroom (1/65536 each) and tolerance (1/4096), 16 bits each from bit 0;
//! its control line words 2-4 hold the pooled state. A version-6 reader would refuse both kinds.
//! The keyed adaptive concurrency limit (kind 8 with the keyed flag) was added in version 7
//! without a bump: no existing kind's layout changed, and a version-7 reader without it refuses
//! the definition when it validates it ("a keyed adaptive concurrency limit is not supported"),
//! before it sizes or touches any slot.
//!
//! **Fleet-managed buckets.** A decision whose parameter slot is marked [`bucket::FLEET`] reads
//! the deadline word `d` too, and decides with the fence slot (the host's reserved minimum, or
//! the floor) unless `0 < d - now <= `[`bucket::MAX_LEASE_NS`] (wrapping): a deadline that has
//! passed, a zero one (never leased, or reset) and a damaged one (anything further ahead than
//! the longest lease) all fence. Unmarked slots never read it.

use crate::spec::{Algorithm, Alignment, FleetShare, FullPolicy, Keyed, LimitDef, Rate};

/// `b"SHMLIMIT"` as a native-endian word.
pub(crate) const MAGIC: u64 = u64::from_ne_bytes(*b"SHMLIMIT");
/// The format version this build reads and writes.
pub(crate) const FORMAT_VERSION: u32 = 7;
/// The init-state word of a complete file.
pub(crate) const READY: u64 = 0x5245_4144_5931_0001;
pub(crate) const HEADER_SIZE: usize = 4096;
pub(crate) const PAGE: usize = 4096;
/// One slot line: 128 bytes, so that two limits never share a cache line nor an adjacent-line
/// prefetch pair on x86_64.
pub(crate) const LINE: usize = 128;
pub(crate) const DEF_SIZE: usize = 128;
/// Most limits in one file.
pub const MAX_LIMITS: usize = 4096;
/// Counter lanes: lane 0 is shared (atomic adds), lanes 1.. are each owned by one thread.
pub(crate) const LANES: usize = 64;
pub(crate) const CLOCK_MONOTONIC_ID: u64 = 1;

/// Header word indices.
pub(crate) mod word {
    pub const MAGIC: usize = 0;
    pub const VERSION: usize = 1;
    pub const INIT: usize = 2;
    pub const FILE_SIZE: usize = 3;
    pub const COUNTS: usize = 4;
    pub const DEFS_OFFSET: usize = 5;
    pub const DEFS_LEN: usize = 6;
    pub const SLOTS_OFFSET: usize = 7;
    pub const SLOTS_LEN: usize = 8;
    pub const STATS_OFFSET: usize = 9;
    pub const STATS_LEN: usize = 10;
    pub const CHECKSUM: usize = 11;
    pub const BOOT_ID: usize = 12;
    pub const CLOCK_ID: usize = 14;
    pub const TIMENS_OFFSET: usize = 15;
    pub const WALL_OFFSET: usize = 16;
    pub const CREATED: usize = 17;
    pub const RESET_COUNT: usize = 18;
    pub const HASH_SEED: usize = 19;
    pub const WALL_MAX: usize = 21;
    pub const LAST_UNIX: usize = 22;
    pub const TRANSLATING: usize = 23;
    pub const ON_REBOOT: usize = 25;
    pub const TRANSLATIONS: usize = 26;
    pub const LAST_ELAPSED: usize = 27;
    pub const FILE_ID: usize = 28;
}

const KIND_TOKEN_BUCKET: u64 = 1;
const KIND_FIXED_WINDOW: u64 = 2;
const KIND_SLIDING_WINDOW: u64 = 3;
const KIND_SLIDING_LOG: u64 = 4;
const KIND_CONCURRENCY: u64 = 5;
const KIND_ADAPTIVE_CONCURRENCY: u64 = 8;
/// Keyed counters whose window comes with each call (`engine::counters`).
const KIND_COUNTERS: u64 = 6;
const FLAG_MONOTONIC_ALIGNED: u64 = 1;
const FLAG_SHADOW: u64 = 1 << 1;
const FLAG_POLICY: u64 = 3 << 2;
const FLAG_KEYED: u64 = 1 << 4;
const FLAG_FLEET: u64 = 1 << 5;
/// Windows: calendar alignment, its UTC offset in seconds (i64) in word 14.
const FLAG_CALENDAR: u64 = 1 << 6;
const FLAG_SPLIT: u64 = 0xFF << 8;
const FLAG_NEAR: u64 = 0xFFFF << 16;
const KNOWN_FLAGS: u64 = FLAG_MONOTONIC_ALIGNED
    | FLAG_SHADOW
    | FLAG_POLICY
    | FLAG_KEYED
    | FLAG_FLEET
    | FLAG_CALENDAR
    | FLAG_SPLIT
    | FLAG_NEAR;

const fn round_up(n: usize, to: usize) -> usize {
    n.div_ceil(to) * to
}

/// Where everything is, computed from the definitions alone. A file whose stored geometry differs
/// from the one recomputed from its own definitions is corrupt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Geometry {
    pub file_size: usize,
    pub defs_offset: usize,
    pub defs_len: usize,
    pub slots_offset: usize,
    pub slots_len: usize,
    pub stats_offset: usize,
    pub stats_len: usize,
    pub lane_stride: usize,
    /// Per limit: (byte offset of its first line, length in bytes).
    pub slots: Vec<(usize, usize)>,
}

/// Bytes of slot state one limit needs: its control line, then its state area.
pub(crate) fn slot_bytes(def: &LimitDef) -> usize {
    if let Some(k) = def.keyed {
        let keys = LINE + key_table_words(k.slots() as usize) * 8;
        return match def.algorithm {
            Algorithm::Counters { log_entries } => {
                keys + key_table_words(k.slots() as usize) * 8
                    + round_up(k.slots() as usize * log_entries as usize * KEY_SLOT, LINE)
            }
            Algorithm::Concurrency { permits, .. } => {
                keys + round_up(k.slots() as usize * permits as usize * PERMIT_SLOT, LINE)
            }
            Algorithm::AdaptiveConcurrency(a) => {
                LINE + keyed_adaptive_words(k.slots() as usize, a.max as usize) * 8
                    + round_up(k.slots() as usize * KEY_ADAPTIVE_WORDS * 8, LINE)
            }
            _ => keys,
        };
    }
    match def.algorithm {
        Algorithm::SlidingLog { limit, .. } => LINE + round_up(limit as usize * 8, LINE),
        Algorithm::Concurrency { permits, .. } => {
            LINE + round_up(permits as usize * PERMIT_SLOT, LINE)
        }
        Algorithm::AdaptiveConcurrency(a) => LINE + round_up(a.max as usize * PERMIT_SLOT, LINE),
        _ => LINE * def.split.max(1) as usize,
    }
}

/// Words of a keyed limit's key table in its state area (after its control line): 16 bytes per
/// key slot, to a whole line. A keyed concurrency limit's permit entries follow them.
pub(crate) fn key_table_words(slots: usize) -> usize {
    round_up(slots * KEY_SLOT, LINE) / 8
}

/// Where a keyed adaptive limit's words per key slot start in its state area, in words: after
/// its key table and its `slots x max` permit entries (each to a whole line).
pub(crate) fn keyed_adaptive_words(slots: usize, max: usize) -> usize {
    key_table_words(slots) + round_up(slots * max * PERMIT_SLOT, LINE) / 8
}

/// Words per key slot of a keyed adaptive limit: accumulator, limit word, RTT word, owner tag
/// (see `engine::adaptive::keyed`).
pub(crate) const KEY_ADAPTIVE_WORDS: usize = 4;

/// Bytes per key slot in a keyed table: a tag word and a state word.
pub(crate) const KEY_SLOT: usize = 16;
/// The tag word of a key slot never used since its table was created or reset (a zero-filled
/// file's tables are all empty).
pub(crate) const KEY_EMPTY: u64 = 0;
/// Bytes per permit in a concurrency limit.
pub(crate) const PERMIT_SLOT: usize = 16;
/// Counter words per limit per lane (allowed, denied, shadow-denied, near-limit, refunded, and
/// three reserved).
pub(crate) const COUNTERS: usize = 8;

/// Word indices of a limit's counters in a lane.
pub(crate) mod counter {
    pub const ALLOWED: usize = 0;
    pub const DENIED: usize = 1;
    pub const SHADOW_DENIED: usize = 2;
    pub const NEAR_LIMIT: usize = 3;
    pub const REFUNDED: usize = 4;
}

/// Token-bucket control-line word indices.
pub(crate) mod bucket {
    /// Bit 63 of a token-bucket state word: which parameter slot it was computed with.
    pub const PARAM_TAG: u64 = 1 << 63;
    pub const PARAMS: [usize; 2] = [1, 4];
    /// The first word of the parameter slot a state word's tag (`word & PARAM_TAG`) names
    /// (emission, then capacity, then the check word): a product, not a load from [`PARAMS`].
    #[inline(always)]
    pub const fn slot_of(tag: u64) -> usize {
        PARAMS[0] + (PARAMS[1] - PARAMS[0]) * (tag >> 63) as usize
    }
    const _: () = assert!(slot_of(0) == PARAMS[0] && slot_of(PARAM_TAG) == PARAMS[1]);
    /// The fleet lease deadline (monotonic ns on the file's clock), on the decisions' 64 bytes.
    pub const DEADLINE: usize = 7;
    pub const ACTIVE: usize = 8;
    /// A fresh `ACTIVE` word: slot 0 active, the generation of the parameter slots starting
    /// at `random` (a new file's generations differ from every other file's).
    pub const fn first_active(random: u64) -> u64 {
        (random << 1) & !PARAM_TAG
    }
    /// The fence slot (emission ns, capacity, check): what a fleet-managed bucket decides with
    /// once its lease deadline has passed.
    pub const FENCE: usize = 9;
    /// XORed into a parameter slot's check word: the slot is a fleet share, valid only until the
    /// deadline word.
    pub const FLEET: u64 = 0x0F1E_E7F1_EE70_F1EE;
    /// The longest lease a deadline may be ahead of a decision's clock: a deadline further ahead
    /// is damage, and fences.
    pub const MAX_LEASE_NS: u64 = 1 << 40;
    /// The check word of a parameter slot, so a torn read is detected.
    pub fn check(emission_ns: u64, capacity: u64) -> u64 {
        emission_ns.rotate_left(17) ^ capacity ^ 0x5A17_C0DE_5A17_C0DE
    }
    /// Whether a deadline word still covers a decision at `now`: one subtraction and one
    /// compare (a deadline in the past, zero, or further ahead than [`MAX_LEASE_NS`] does not).
    #[inline(always)]
    pub fn leased(deadline: u64, now: u64) -> bool {
        deadline.wrapping_sub(now).wrapping_sub(1) < MAX_LEASE_NS
    }
}

/// Adaptive concurrency control-line word indices (after the futex words 0 and 1); all zero
/// is a fresh state (the initial limit, no samples).
pub(crate) mod adaptive {
    /// The window's sample accumulator.
    pub const ACC: usize = 2;
    /// The limit (1/256 permit) and the start of its window (ms).
    pub const LIMIT: usize = 3;
    /// The long RTT and the last window's mean (µs, `f32` each).
    pub const RTT: usize = 4;
}

/// Window control-line word index of the live limit.
pub(crate) const WINDOW_LIMIT: usize = 1;

/// A window limit and its check, packed into one control word so it is read and written whole.
pub(crate) fn pack_window_limit(limit: u64) -> u64 {
    let check = (limit.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 32) as u32 ^ 0xC0DE_5A17;
    (limit & 0xFFFF_FFFF) | ((check as u64) << 32)
}

/// The limit in a packed window word, if its check holds.
pub(crate) fn unpack_window_limit(word: u64) -> Option<u64> {
    let limit = word & 0xFFFF_FFFF;
    (limit > 0 && pack_window_limit(limit) == word).then_some(limit)
}

impl Geometry {
    pub fn compute(defs: &[LimitDef]) -> Geometry {
        let n = defs.len();
        let defs_offset = HEADER_SIZE;
        let defs_len = n * DEF_SIZE;
        let slots_offset = defs_offset + round_up(defs_len.max(1), PAGE);
        let mut at = slots_offset;
        let mut slots = Vec::with_capacity(n);
        for def in defs {
            let len = slot_bytes(def);
            slots.push((at, len));
            at += len;
        }
        let slots_len = at - slots_offset;
        let stats_offset = slots_offset + round_up(slots_len.max(1), PAGE);
        // An owner line, then the counters.
        let lane_stride = LINE + round_up((n * COUNTERS * 8).max(1), LINE);
        let stats_len = LANES * lane_stride;
        let file_size = stats_offset + round_up(stats_len, PAGE);
        Geometry {
            file_size,
            defs_offset,
            defs_len,
            slots_offset,
            slots_len,
            stats_offset,
            stats_len,
            lane_stride,
            slots,
        }
    }

    /// Byte offset of limit `index`'s counters (see [`COUNTERS`]) in `lane`.
    pub fn stats_at(&self, lane: usize, index: usize) -> usize {
        self.lane_at(lane) + LINE + index * COUNTERS * 8
    }

    /// Byte offset of `lane`: its owner word, the first word of its owner line.
    pub fn lane_at(&self, lane: usize) -> usize {
        self.stats_offset + lane * self.lane_stride
    }
}

/// The non-zero words of a limit's control line when fresh: `(word index, value)`.
pub(crate) fn initial_control(def: &LimitDef) -> Vec<(usize, u64)> {
    match def.algorithm {
        Algorithm::TokenBucket {
            capacity,
            emission_ns,
        } => vec![
            (bucket::PARAMS[0], emission_ns),
            (bucket::PARAMS[0] + 1, capacity),
            (bucket::PARAMS[0] + 2, bucket::check(emission_ns, capacity)),
        ],
        Algorithm::FixedWindow { limit, .. } | Algorithm::SlidingWindow { limit, .. } => {
            vec![(WINDOW_LIMIT, pack_window_limit(limit))]
        }
        Algorithm::SlidingLog { .. }
        | Algorithm::Concurrency { .. }
        | Algorithm::AdaptiveConcurrency(_)
        | Algorithm::Counters { .. } => Vec::new(),
    }
}

/// FNV-1a, 64-bit: a checksum against damage (not an authenticator).
pub(crate) fn fnv1a(state: u64, bytes: &[u8]) -> u64 {
    let mut h = state;
    for &b in bytes {
        h ^= b as u64;
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

pub(crate) const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;

/// The checksum over the layout words of `header` and the definition bytes.
pub(crate) fn checksum(header: &[u64], defs: &[u8]) -> u64 {
    let mut h = FNV_OFFSET;
    for &i in &[
        word::VERSION,
        word::FILE_SIZE,
        word::COUNTS,
        word::DEFS_OFFSET,
        word::DEFS_LEN,
        word::SLOTS_OFFSET,
        word::SLOTS_LEN,
        word::STATS_OFFSET,
        word::STATS_LEN,
        word::HASH_SEED,
        word::HASH_SEED + 1,
        word::ON_REBOOT,
        word::FILE_ID,
    ] {
        h = fnv1a(h, &header[i].to_ne_bytes());
    }
    fnv1a(h, defs)
}

/// Encode one definition record.
pub(crate) fn encode_def(def: &LimitDef, slot: (usize, usize)) -> [u64; 16] {
    let mut w = [0u64; 16];
    let mut name = [0u8; 64];
    name[..def.name.len()].copy_from_slice(def.name.as_bytes());
    for (i, chunk) in name.chunks(8).enumerate() {
        w[i] = u64::from_ne_bytes(chunk.try_into().expect("8-byte chunk"));
    }
    let (kind, mut flags, a, b) = match def.algorithm {
        Algorithm::TokenBucket {
            capacity,
            emission_ns,
        } => (KIND_TOKEN_BUCKET, 0, capacity, emission_ns),
        Algorithm::Concurrency { permits, lease_ns } => (KIND_CONCURRENCY, 0, permits, lease_ns),
        Algorithm::FixedWindow {
            limit,
            window_ns,
            alignment,
        } => (KIND_FIXED_WINDOW, align_flags(alignment), limit, window_ns),
        Algorithm::SlidingWindow {
            limit,
            window_ns,
            alignment,
        } => (
            KIND_SLIDING_WINDOW,
            align_flags(alignment),
            limit,
            window_ns,
        ),
        Algorithm::SlidingLog { limit, window_ns } => (KIND_SLIDING_LOG, 0, limit, window_ns),
        Algorithm::AdaptiveConcurrency(a) => {
            w[14] = a.min | (a.initial << 20) | (a.window_ms << 40);
            w[15] = a.smoothing as u64
                | (a.backoff as u64) << 16
                | (a.headroom as u64) << 32
                | (a.tolerance as u64) << 48;
            (KIND_ADAPTIVE_CONCURRENCY, 0, a.max, a.lease_ns)
        }
        Algorithm::Counters { log_entries } => (KIND_COUNTERS, 0, log_entries, 0),
    };
    if def.shadow {
        flags |= FLAG_SHADOW;
    }
    if let Some(k) = def.keyed {
        flags |= FLAG_KEYED | (policy_bits(k.on_full) << 2);
        w[11] = k.slots();
    }
    if let Some(f) = def.fleet {
        flags |= FLAG_FLEET;
        w[14] = f.total.emission_ns();
        w[15] = f.weight as u64;
    }
    if let Algorithm::FixedWindow {
        alignment: Alignment::Calendar { utc_offset_s },
        ..
    }
    | Algorithm::SlidingWindow {
        alignment: Alignment::Calendar { utc_offset_s },
        ..
    } = def.algorithm
    {
        w[14] = utc_offset_s as i64 as u64;
    }
    flags |= (def.near_limit as u64) << 16;
    flags |= ((def.split.clamp(1, 256) - 1) as u64) << 8;
    w[8] = kind | (flags << 32);
    w[9] = a;
    w[10] = b;
    w[12] = slot.0 as u64;
    w[13] = slot.1 as u64;
    w
}

fn policy_bits(p: FullPolicy) -> u64 {
    match p {
        FullPolicy::Deny => 0,
        FullPolicy::Allow => 1,
        FullPolicy::Error => 2,
    }
}

fn align_flags(alignment: Alignment) -> u64 {
    match alignment {
        Alignment::WallClock => 0,
        Alignment::Monotonic => FLAG_MONOTONIC_ALIGNED,
        Alignment::Calendar { .. } => FLAG_CALENDAR,
    }
}

/// Decode one definition record; `Err` says what is impossible about it. Parameters are only
/// decoded here; the caller validates them as it would a user's.
pub(crate) fn decode_def(w: &[u64]) -> Result<(LimitDef, (u64, u64)), String> {
    let mut name = Vec::with_capacity(64);
    for word in &w[..8] {
        name.extend_from_slice(&word.to_ne_bytes());
    }
    let len = name
        .iter()
        .position(|&b| b == 0)
        .ok_or("definition name is not terminated")?;
    if name[len..].iter().any(|&b| b != 0) {
        return Err("definition name has bytes after its end".into());
    }
    name.truncate(len);
    let name = String::from_utf8(name).map_err(|_| "definition name is not UTF-8".to_string())?;
    let (kind, flags) = (w[8] & 0xFFFF_FFFF, w[8] >> 32);
    if flags & !KNOWN_FLAGS != 0 {
        return Err(format!("definition `{name}` has unknown flags set"));
    }
    let calendar = flags & FLAG_CALENDAR != 0;
    let alignment = match (flags & FLAG_MONOTONIC_ALIGNED != 0, calendar) {
        (true, true) => {
            return Err(format!(
                "definition `{name}` is aligned both to the monotonic clock and the calendar"
            ))
        }
        (true, false) => Alignment::Monotonic,
        (false, true) => {
            let offset = w[14] as i64;
            if offset.unsigned_abs() > Alignment::MAX_UTC_OFFSET_S as u64 {
                return Err(format!(
                    "definition `{name}` has an impossible UTC offset {offset}"
                ));
            }
            Alignment::Calendar {
                utc_offset_s: offset as i32,
            }
        }
        (false, false) => Alignment::WallClock,
    };
    let no_alignment = flags & (FLAG_MONOTONIC_ALIGNED | FLAG_CALENDAR) == 0;
    let (a, b) = (w[9], w[10]);
    let algorithm = match kind {
        KIND_TOKEN_BUCKET if no_alignment => Algorithm::TokenBucket {
            capacity: a,
            emission_ns: b,
        },
        KIND_FIXED_WINDOW => Algorithm::FixedWindow {
            limit: a,
            window_ns: b,
            alignment,
        },
        KIND_SLIDING_WINDOW => Algorithm::SlidingWindow {
            limit: a,
            window_ns: b,
            alignment,
        },
        KIND_SLIDING_LOG if no_alignment => Algorithm::SlidingLog {
            limit: a,
            window_ns: b,
        },
        KIND_COUNTERS if no_alignment && b == 0 => Algorithm::Counters { log_entries: a },
        KIND_CONCURRENCY if no_alignment => Algorithm::Concurrency {
            permits: a,
            lease_ns: b,
        },
        KIND_ADAPTIVE_CONCURRENCY if no_alignment && flags & FLAG_FLEET == 0 => {
            let field = |word: u64, shift: u32, bits: u32| (word >> shift) & ((1 << bits) - 1);
            Algorithm::AdaptiveConcurrency(crate::spec::Adaptive {
                min: field(w[14], 0, 20),
                max: a,
                initial: field(w[14], 20, 20),
                lease_ns: b,
                window_ms: field(w[14], 40, 24),
                smoothing: field(w[15], 0, 16) as u16,
                backoff: field(w[15], 16, 16) as u16,
                headroom: field(w[15], 32, 16) as u16,
                tolerance: field(w[15], 48, 16) as u16,
            })
        }
        other => {
            return Err(format!(
                "definition `{name}` has unknown algorithm kind {other}"
            ))
        }
    };
    let keyed = if flags & FLAG_KEYED != 0 {
        let on_full = match (flags & FLAG_POLICY) >> 2 {
            0 => FullPolicy::Deny,
            1 => FullPolicy::Allow,
            2 => FullPolicy::Error,
            _ => {
                return Err(format!(
                    "definition `{name}` has an unknown table-full policy"
                ))
            }
        };
        if w[11] == 0 || !w[11].is_power_of_two() {
            return Err(format!(
                "definition `{name}` has an impossible key capacity {}",
                w[11]
            ));
        }
        Some(Keyed {
            capacity: w[11],
            on_full,
        })
    } else {
        if w[11] != 0 || flags & FLAG_POLICY != 0 {
            return Err(format!(
                "definition `{name}` has key fields but is not keyed"
            ));
        }
        None
    };
    let fleet = if flags & FLAG_FLEET != 0 {
        let total =
            Rate::from_emission_ns(w[14]).map_err(|e| format!("definition `{name}`: {e}"))?;
        let weight = u32::try_from(w[15])
            .map_err(|_| format!("definition `{name}`: fleet weight too large"))?;
        Some(FleetShare { total, weight })
    } else {
        let adaptive = matches!(algorithm, Algorithm::AdaptiveConcurrency(_));
        if ((w[14] != 0 && !calendar) || w[15] != 0) && !adaptive {
            return Err(format!(
                "definition `{name}` has fleet fields but no fleet share"
            ));
        }
        None
    };
    let def = LimitDef {
        name,
        algorithm,
        keyed,
        shadow: flags & FLAG_SHADOW != 0,
        near_limit: ((flags & FLAG_NEAR) >> 16) as u16,
        split: ((flags & FLAG_SPLIT) >> 8) as u16 + 1,
        fleet,
    };
    Ok((def, (w[12], w[13])))
}

#[cfg(test)]
#[path = "layout_tests.rs"]
mod tests;
