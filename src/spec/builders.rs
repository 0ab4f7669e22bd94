//! The builders of each algorithm's parameters: what `Builder::limit` takes.

use std::time::Duration;

use super::Rate;
use crate::error::Result;

/// A token bucket of `capacity` tokens refilled at `rate`; starts full.
///
/// Admissions of cost 1 in any interval of length `T` never exceed `floor(capacity + rate x T)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TokenBucket {
    /// Burst size `B`.
    pub capacity: u64,
    /// Refill rate `r`.
    pub rate: Rate,
}

impl TokenBucket {
    /// A bucket of `capacity` refilled at `rate`.
    pub fn new(capacity: u64, rate: Rate) -> TokenBucket {
        TokenBucket { capacity, rate }
    }

    /// `per_second` tokens per second, with a burst of one second's worth; use
    /// [`TokenBucketSpec::burst`] to change it.
    pub fn per_second(per_second: u64) -> TokenBucketSpec {
        TokenBucketSpec {
            rate: Rate::per_second(per_second),
            capacity: per_second,
        }
    }
}

/// A token bucket being defined; a rate error is reported when the limit is added.
#[derive(Debug)]
pub struct TokenBucketSpec {
    pub(super) rate: Result<Rate>,
    pub(super) capacity: u64,
}

impl TokenBucketSpec {
    /// Set the capacity (burst size).
    pub fn burst(mut self, capacity: u64) -> TokenBucketSpec {
        self.capacity = capacity;
        self
    }
}

/// How window boundaries are placed on the timeline.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Alignment {
    /// Boundaries at multiples of the window in Unix time ("each clock-aligned minute"),
    /// through the realtime-minus-monotonic offset captured when the file was created.
    #[default]
    WallClock,
    /// Boundaries at multiples of the window on `CLOCK_MONOTONIC`.
    Monotonic,
    /// Calendar boundaries in a fixed offset from UTC (`utc_offset_s` seconds east, at most
    /// 18 h either way): windows of whole weeks start on Monday 00:00 of that offset, windows of
    /// whole days at its midnight, other lengths at multiples of the window in its local time.
    /// [`FixedWindow::daily`] and [`FixedWindow::weekly`] use it with offset 0 (UTC); in
    /// [`Alignment::WallClock`] a week starts on Thursday, as the Unix epoch did.
    Calendar {
        /// Seconds east of UTC (`-5 * 3600` for UTC-05:00).
        utc_offset_s: i32,
    },
}

impl Alignment {
    /// Calendar boundaries in UTC.
    pub const UTC: Alignment = Alignment::Calendar { utc_offset_s: 0 };
    /// The largest UTC offset a calendar alignment takes, in seconds (18 h).
    pub const MAX_UTC_OFFSET_S: i32 = 18 * 3_600;

    /// A calendar-aligned window of one average month ([`Rate::MONTH_NS`]) is the calendar
    /// month (fixed windows only).
    pub(crate) fn is_months(self, window_ns: u64) -> bool {
        matches!(self, Alignment::Calendar { .. }) && window_ns == Rate::MONTH_NS
    }

    /// Where window boundaries fall: what to add to a monotonic time so that boundaries are at
    /// multiples of the window, given the wall offset (realtime - monotonic) of this boot.
    pub(crate) fn phase_ns(self, window_ns: u64, wall_offset: u64) -> u64 {
        const DAY: i128 = 86_400_000_000_000;
        if let (Alignment::Calendar { utc_offset_s }, true) = (self, self.is_months(window_ns)) {
            // Months are found from the local time itself: the whole shift.
            return (wall_offset as i64 as i128 + utc_offset_s as i128 * 1_000_000_000)
                .clamp(0, u64::MAX as i128) as u64;
        }
        match self {
            Alignment::WallClock => wall_offset % window_ns,
            Alignment::Monotonic => 0,
            Alignment::Calendar { utc_offset_s } => {
                // 1970-01-05, the first Monday, is day 4: shift weeks by 3 days.
                let monday = if window_ns as i128 % (7 * DAY) == 0 {
                    3 * DAY
                } else {
                    0
                };
                let shift = utc_offset_s as i128 * 1_000_000_000 + monday;
                (wall_offset as i128 + shift).rem_euclid(window_ns as i128) as u64
            }
        }
    }
}

/// At most `limit` per clock-aligned window of length `window`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FixedWindow {
    /// `L`.
    pub limit: u64,
    /// `W`.
    pub window: Duration,
    /// Boundary placement.
    pub alignment: Alignment,
}

impl FixedWindow {
    /// `limit` per `window`, wall-clock aligned.
    pub fn new(limit: u64, window: Duration) -> FixedWindow {
        FixedWindow {
            limit,
            window,
            alignment: Alignment::WallClock,
        }
    }
    /// Change the boundary placement.
    pub fn aligned(mut self, alignment: Alignment) -> FixedWindow {
        self.alignment = alignment;
        self
    }

    /// `limit` per calendar day, from midnight UTC (see [`FixedWindow::utc_offset`]).
    pub fn daily(limit: u64) -> FixedWindow {
        FixedWindow::new(limit, Duration::from_secs(86_400)).aligned(Alignment::UTC)
    }

    /// `limit` per calendar month, from the first of the month 00:00 UTC (see
    /// [`FixedWindow::utc_offset`]). Months have their calendar lengths (28 to 31 days); the
    /// retry-after of a full month is the time to the next month's start. Stored as a
    /// calendar-aligned window of one average month ([`Rate::MONTH_NS`]), which is what
    /// definitions and `inspect` show.
    pub fn monthly(limit: u64) -> FixedWindow {
        FixedWindow::new(limit, Duration::from_nanos(Rate::MONTH_NS)).aligned(Alignment::UTC)
    }

    /// `limit` per calendar week, from Monday 00:00 UTC (see [`FixedWindow::utc_offset`]).
    pub fn weekly(limit: u64) -> FixedWindow {
        FixedWindow::new(limit, Duration::from_secs(7 * 86_400)).aligned(Alignment::UTC)
    }

    /// Calendar boundaries in a fixed offset from UTC, `seconds` east (`-5 * 3600` for
    /// UTC-05:00): days start at that offset's midnight, weeks on its Monday. A fixed offset,
    /// not a time zone: daylight-saving changes are not followed.
    pub fn utc_offset(mut self, seconds: i32) -> FixedWindow {
        self.alignment = Alignment::Calendar {
            utc_offset_s: seconds,
        };
        self
    }
}

/// The weighted sliding-window counter: approximately `limit` per any `window` (see the module
/// docs of the algorithm for its error).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SlidingWindow {
    /// `L`, at most 2^20 - 1.
    pub limit: u64,
    /// `W`.
    pub window: Duration,
    /// Boundary placement of the two underlying windows.
    pub alignment: Alignment,
}

impl SlidingWindow {
    /// About `limit` per `window`.
    pub fn new(limit: u64, window: Duration) -> SlidingWindow {
        SlidingWindow {
            limit,
            window,
            alignment: Alignment::WallClock,
        }
    }
}

/// The exact sliding log: at most `limit` admissions in every interval `(t - window, t]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SlidingLog {
    /// `L`: also the number of 8-byte entries the log keeps.
    pub limit: u64,
    /// `W`.
    pub window: Duration,
}

impl SlidingLog {
    /// At most `limit` in any `window`.
    pub fn new(limit: u64, window: Duration) -> SlidingLog {
        SlidingLog { limit, window }
    }
}

/// At most `permits` held at once across every process (an in-flight limit).
///
/// A permit of a process that died is reclaimed; with a lease, so is one held longer than the
/// lease by a live process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Concurrency {
    /// `C`.
    pub permits: u64,
    /// Optional lease.
    pub lease: Option<Duration>,
}

impl Concurrency {
    /// At most `permits` at once, no lease.
    pub fn new(permits: u64) -> Concurrency {
        Concurrency {
            permits,
            lease: None,
        }
    }
    /// Permits held longer than `lease` become reclaimable.
    pub fn lease(mut self, lease: Duration) -> Concurrency {
        self.lease = Some(lease);
        self
    }
}

/// Keyed counters whose window and limit come with each call, for storage adapters of
/// libraries that declare their limits at run time (Python's `limits`, under flask-limiter
/// and slowapi): per key, a fixed-window counter, a sliding window counter and a moving-window
/// log of up to [`Counters::moving_window`] entries. Define it with
/// [`Builder::keyed_limit`](crate::Builder::keyed_limit) (the key capacity and table-full
/// policy are its [`Keyed`](crate::Keyed)); resolve it with
/// [`Limiter::counters`](crate::Limiter::counters).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Counters {
    /// Entries of each key's moving-window log (0: no moving windows).
    pub log_entries: u64,
}

impl Counters {
    /// Counters with no moving-window log.
    pub fn new() -> Counters {
        Counters::default()
    }

    /// Give each key a moving-window log of `entries` (16 bytes each): the largest
    /// moving-window limit the file supports.
    pub fn moving_window(mut self, entries: u64) -> Counters {
        self.log_entries = entries;
        self
    }
}
