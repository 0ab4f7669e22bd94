//! Time sources.
//!
//! Every process attached to a file must read the same timeline: absolute `CLOCK_MONOTONIC`
//! nanoseconds, which the kernel keeps identical for all processes of one time namespace on one
//! boot. The file records the boot id and the creator's time-namespace offset, and refuses
//! processes whose clock would disagree (see [`crate::Limiter`]).
//!
//! A process may read `now` a little before another process that has already committed a later
//! time. The algorithms clamp (`now = max(now, stored)` in effect), so the state never moves
//! backwards; the stale reader's decision is only stricter.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// How far ahead of the limit's clock a dated call ([`TokenBucketLimit::try_acquire_at`](crate::TokenBucketLimit::try_acquire_at),
/// [`KeyedTokenBucketLimit::try_acquire_key_at`](crate::KeyedTokenBucketLimit::try_acquire_key_at), and the C and Python equivalents) may be: 1 ms. A date read
/// from the same clock is never ahead; a later one could let its caller take tomorrow's budget
/// today, or move a window's or a log's state past every other process's clock. Dates in the
/// past are always accepted (the state never moves back: they only see less).
pub const DATE_TOLERANCE: Duration = Duration::from_millis(1);
pub(crate) const DATE_TOLERANCE_NS: u64 = 1_000_000;

/// The latest date any state encodes: 2^61 ns (73 years of uptime). A token bucket's TAT runs
/// at most 2^62 ns ahead of its date and must stay below bit 63 (its parameter tag); the
/// windows and the log have room to spare. Dated calls beyond it are refused with
/// [`Error::ClockOutOfRange`](crate::Error::ClockOutOfRange).
pub const MAX_DATE_NS: u64 = 1 << 61;

/// A source of monotonic nanoseconds shared by every process using a limiter file.
///
/// # Example
///
/// ```
/// use shmlimit::{Clock, MonotonicClock};
/// let a = MonotonicClock.now_ns();
/// let b = MonotonicClock.now_ns();
/// assert!(b >= a);
/// ```
pub trait Clock: Clone + Send + Sync + 'static {
    /// Nanoseconds on the host's monotonic timeline.
    fn now_ns(&self) -> u64;
}

#[inline(always)]
fn clock_gettime_ns(id: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; clock_gettime only writes it. With a clock id the
    // kernel supports it cannot fail, and CLOCK_MONOTONIC(_COARSE) exist on every Linux we run on.
    let rc = unsafe { libc::clock_gettime(id, &mut ts) };
    debug_assert_eq!(rc, 0);
    (ts.tv_sec as u64)
        .wrapping_mul(1_000_000_000)
        .wrapping_add(ts.tv_nsec as u64)
}

/// `CLOCK_MONOTONIC`, read through the vDSO (no system call). The default clock.
#[derive(Clone, Copy, Debug, Default)]
pub struct MonotonicClock;

impl Clock for MonotonicClock {
    #[inline(always)]
    fn now_ns(&self) -> u64 {
        clock_gettime_ns(libc::CLOCK_MONOTONIC)
    }
}

/// `CLOCK_MONOTONIC_COARSE`: the same timeline, updated by the kernel's timer tick (its
/// resolution, [`CoarseMonotonicClock::resolution_ns`], is typically 1-4 ms), several times
/// cheaper to read.
///
/// A coarse read returns the time of the kernel's last update: it lags the precise clock by
/// the time since that update, one to two ticks, and more when timer interrupts are delayed
/// (in virtual machines 2 x the 4 ms resolution has been measured here). A lagging read is a
/// stale read: decisions stay within every bound, stated over the times the decisions were
/// dated, but a date can be that lag early. Over an interval of length T of wall time, a token
/// bucket of rate r can therefore admit up to `floor(B + r (T + lag))`: the error is lag x rate
/// tokens (about 2 x resolution x rate in practice).
#[derive(Clone, Copy, Debug, Default)]
pub struct CoarseMonotonicClock;

impl CoarseMonotonicClock {
    /// The clock's resolution as reported by `clock_getres`, in nanoseconds.
    pub fn resolution_ns() -> u64 {
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: `ts` is a valid, writable timespec; clock_getres only writes it.
        let rc = unsafe { libc::clock_getres(libc::CLOCK_MONOTONIC_COARSE, &mut ts) };
        if rc != 0 {
            return 0;
        }
        ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
    }
}

impl Clock for CoarseMonotonicClock {
    #[inline(always)]
    fn now_ns(&self) -> u64 {
        clock_gettime_ns(libc::CLOCK_MONOTONIC_COARSE)
    }
}

/// A clock that only moves when told to: for tests that drive exact boundaries.
///
/// Clones share the same time.
///
/// # Example
///
/// ```
/// use shmlimit::{Clock, ManualClock};
/// let clock = ManualClock::new(1_000);
/// clock.advance(500);
/// assert_eq!(clock.now_ns(), 1_500);
/// ```
#[derive(Clone, Debug, Default)]
pub struct ManualClock(Arc<AtomicU64>);

impl ManualClock {
    /// A clock reading `start_ns`.
    pub fn new(start_ns: u64) -> Self {
        ManualClock(Arc::new(AtomicU64::new(start_ns)))
    }
    /// Set the time (it may move backwards: the algorithms must cope).
    pub fn set(&self, ns: u64) {
        // Relaxed: the value is the whole message; no other memory is published with it.
        self.0.store(ns, Ordering::Relaxed)
    }
    /// Move the time forward by `ns`.
    pub fn advance(&self, ns: u64) {
        // Relaxed: as in `set`.
        self.0.fetch_add(ns, Ordering::Relaxed);
    }
}

impl Clock for ManualClock {
    fn now_ns(&self) -> u64 {
        // Relaxed: as in `set`.
        self.0.load(Ordering::Relaxed)
    }
}

/// The realtime clock minus the monotonic clock, in nanoseconds: what to add to a monotonic
/// reading to get Unix time. Used to align fixed windows with wall-clock minutes.
pub(crate) fn wall_offset_ns() -> u64 {
    let real = clock_gettime_ns(libc::CLOCK_REALTIME);
    let mono = clock_gettime_ns(libc::CLOCK_MONOTONIC);
    real.wrapping_sub(mono)
}

/// This host's boot id (`/proc/sys/kernel/random/boot_id`) as 16 bytes, or zeros if unreadable.
pub(crate) fn boot_id() -> [u8; 16] {
    let mut out = [0u8; 16];
    if let Ok(text) = std::fs::read_to_string("/proc/sys/kernel/random/boot_id") {
        let hex: Vec<u8> = text.bytes().filter(u8::is_ascii_hexdigit).collect();
        if hex.len() == 32 {
            for (i, pair) in hex.chunks(2).enumerate() {
                let s = std::str::from_utf8(pair).unwrap_or("00");
                out[i] = u8::from_str_radix(s, 16).unwrap_or(0);
            }
        }
    }
    out
}

/// The monotonic-clock offset of this process's time namespace, in nanoseconds
/// (`/proc/self/timens_offsets`; zero when the kernel has no time namespaces).
pub(crate) fn timens_monotonic_offset_ns() -> i64 {
    let Ok(text) = std::fs::read_to_string("/proc/self/timens_offsets") else {
        return 0;
    };
    for line in text.lines() {
        let mut parts = line.split_whitespace();
        let (Some(name), Some(secs), Some(nanos)) = (parts.next(), parts.next(), parts.next())
        else {
            continue;
        };
        if name == "monotonic" || name == "1" {
            let secs: i64 = secs.parse().unwrap_or(0);
            let nanos: i64 = nanos.parse().unwrap_or(0);
            return secs.saturating_mul(1_000_000_000).saturating_add(nanos);
        }
    }
    0
}
