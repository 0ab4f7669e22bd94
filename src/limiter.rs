//! The public handles: [`Limiter`] (one attached file) and [`Limit`] (one limit in it).

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use crate::algo::fixed_window::FixedWindow;
use crate::algo::gcra::Gcra;
use crate::algo::sliding_log::SlidingLog;
use crate::algo::sliding_window::SlidingWindow;
use crate::algo::{decide, Decision, Fault};
use crate::clock::{Clock, MonotonicClock};
use crate::error::{Error, Result};
use crate::file::layout::{self, word, LANES};
use crate::file::{self, Access, Mapped};
use crate::spec::{Algorithm, Alignment, IntoAlgorithm, LimitDef};

/// Defines limits and creates or attaches to a limiter file.
///
/// # Example
///
/// ```
/// # fn main() -> Result<(), shmlimit::Error> {
/// # let dir = tempfile::tempdir().unwrap();
/// # let path = dir.path().join("builder.shm");
/// use std::time::Duration;
/// use shmlimit::{Limiter, SlidingLog, TokenBucket};
///
/// let limiter = Limiter::builder()
///     .limit("downstream", TokenBucket::per_second(300).burst(30))
///     .limit("search", SlidingLog::new(100, Duration::from_secs(60)))
///     .create_or_open(&path)?;
/// // Any other process attaches by path alone and sees the same definitions.
/// let other = Limiter::open(&path)?;
/// assert_eq!(other.definitions().len(), 2);
/// assert!(limiter.limit("search")?.try_acquire(1)?.is_allowed());
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct Builder<C: Clock = MonotonicClock> {
    defs: Vec<LimitDef>,
    error: Option<Error>,
    access: Access,
    clock: C,
}

impl Builder<MonotonicClock> {
    fn new() -> Self {
        Builder {
            defs: Vec::new(),
            error: None,
            access: Access::default(),
            clock: MonotonicClock,
        }
    }
}

impl<C: Clock> Builder<C> {
    /// Add a limit named `name`. A bad name or parameter is reported by `create_or_open`.
    pub fn limit(mut self, name: &str, algorithm: impl IntoAlgorithm) -> Self {
        match algorithm.into_algorithm(name) {
            Ok(algorithm) => self.defs.push(LimitDef {
                name: name.to_owned(),
                algorithm,
            }),
            Err(e) => {
                self.error.get_or_insert(e);
            }
        }
        self
    }

    /// Permission bits for a created file (default `0o600`; `0o660` shares it with the group).
    /// An opened file may not be writable by more users than these bits allow.
    pub fn mode(mut self, mode: u32) -> Self {
        self.access.mode = mode & 0o777;
        self
    }

    /// Accept a file owned by another user (refused by default).
    pub fn allow_other_owner(mut self, allow: bool) -> Self {
        self.access.allow_other_owner = allow;
        self
    }

    /// Use another clock (for example [`crate::CoarseMonotonicClock`], or a
    /// [`crate::ManualClock`] in tests).
    pub fn clock<D: Clock>(self, clock: D) -> Builder<D> {
        Builder {
            defs: self.defs,
            error: self.error,
            access: self.access,
            clock,
        }
    }

    /// Create the file with these definitions, or attach to it if it exists with the same ones.
    ///
    /// # Errors
    ///
    /// A bad definition ([`Error::InvalidParameter`]); an existing file with other definitions
    /// ([`Error::DefinitionConflict`]); any open or validation error of [`Limiter::open`].
    pub fn create_or_open(self, path: impl AsRef<Path>) -> Result<Limiter<C>> {
        if let Some(e) = self.error {
            return Err(e);
        }
        let mapped = file::create_or_open(path.as_ref(), &self.defs, &self.access)?;
        Ok(Limiter::from_mapped(mapped, self.clock))
    }

    /// Attach to an existing file; if limits were added, they must match the file's.
    ///
    /// # Errors
    ///
    /// As [`Limiter::open`], plus [`Error::DefinitionConflict`].
    pub fn open(self, path: impl AsRef<Path>) -> Result<Limiter<C>> {
        if let Some(e) = self.error {
            return Err(e);
        }
        let expected = (!self.defs.is_empty()).then_some(self.defs.as_slice());
        let mapped = file::open(path.as_ref(), expected, &self.access)?;
        Ok(Limiter::from_mapped(mapped, self.clock))
    }
}

/// The per-limit parameters a decision needs, in process memory.
#[derive(Debug, Clone, Copy)]
enum Params {
    TokenBucket(Gcra),
    FixedWindow(FixedWindow),
    SlidingWindow(SlidingWindow),
    SlidingLog(SlidingLog),
}

struct Shared {
    mapped: Mapped,
    params: Vec<Params>,
}

/// One attached limiter file. Cheap to clone; every clone shares the mapping.
///
/// See [`Builder`] for an example.
pub struct Limiter<C: Clock = MonotonicClock> {
    shared: Arc<Shared>,
    clock: C,
}

impl<C: Clock> Clone for Limiter<C> {
    fn clone(&self) -> Self {
        Limiter {
            shared: Arc::clone(&self.shared),
            clock: self.clock.clone(),
        }
    }
}

impl<C: Clock> std::fmt::Debug for Limiter<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Limiter")
            .field("path", &self.shared.mapped.path)
            .field("limits", &self.shared.mapped.defs)
            .finish()
    }
}

impl Limiter<MonotonicClock> {
    /// Start defining limits.
    pub fn builder() -> Builder<MonotonicClock> {
        Builder::new()
    }

    /// Attach to an existing file by path alone, with the default access checks.
    ///
    /// # Errors
    ///
    /// [`Error::Io`] (missing file, no permission), [`Error::Symlink`],
    /// [`Error::NotRegularFile`], [`Error::Permission`], [`Error::Foreign`], [`Error::Version`],
    /// [`Error::Size`], [`Error::Corrupt`], [`Error::NotInitialized`], [`Error::ClockMismatch`].
    pub fn open(path: impl AsRef<Path>) -> Result<Limiter> {
        Builder::new().open(path)
    }
}

impl<C: Clock> Limiter<C> {
    fn from_mapped(mapped: Mapped, clock: C) -> Limiter<C> {
        let wall = mapped.header(word::WALL_OFFSET);
        let params = mapped
            .defs
            .iter()
            .map(|def| params_of(&def.algorithm, wall))
            .collect();
        Limiter {
            shared: Arc::new(Shared { mapped, params }),
            clock,
        }
    }

    /// The limit definitions stored in the file.
    pub fn definitions(&self) -> &[LimitDef] {
        &self.shared.mapped.defs
    }

    /// The file's path as it was opened.
    pub fn path(&self) -> &Path {
        &self.shared.mapped.path
    }

    /// How many times the state was reset because the host rebooted.
    pub fn reset_count(&self) -> u64 {
        self.shared.mapped.header(word::RESET_COUNT)
    }

    /// Resolve a limit by name, once; the handle is what the hot path uses.
    ///
    /// # Errors
    ///
    /// [`Error::UnknownLimit`].
    pub fn limit(&self, name: &str) -> Result<Limit<C>> {
        let index = self
            .shared
            .mapped
            .defs
            .iter()
            .position(|d| d.name == name)
            .ok_or_else(|| Error::UnknownLimit(name.to_owned()))?;
        Ok(self.limit_at(index))
    }

    /// Handles for every limit, in definition order.
    pub fn limits(&self) -> Vec<Limit<C>> {
        (0..self.shared.params.len())
            .map(|i| self.limit_at(i))
            .collect()
    }

    fn limit_at(&self, index: usize) -> Limit<C> {
        let m = &self.shared.mapped;
        let (offset, len) = m.geometry.slots[index];
        let state = m.word(offset) as *const AtomicU64;
        let entries = match self.shared.params[index] {
            Params::SlidingLog(log) => {
                let ring = m.words(offset + layout::LINE, log.limit as usize);
                debug_assert!(layout::LINE + ring.len() * 8 <= len);
                ring.as_ptr()
            }
            _ => std::ptr::null(),
        };
        let lane = lane_of(std::process::id());
        let stats = m.word(m.geometry.stats_at(lane, index)) as *const AtomicU64;
        Limit {
            shared: Arc::clone(&self.shared),
            clock: self.clock.clone(),
            params: self.shared.params[index],
            capacity: m.defs[index].algorithm.capacity(),
            index,
            state,
            entries,
            stats,
        }
    }

    /// Decision counters of every lane, summed: `(allowed, denied)` for limit `index`.
    fn totals(shared: &Shared, index: usize) -> Stats {
        let m = &shared.mapped;
        let mut s = Stats::default();
        for lane in 0..LANES {
            let at = m.geometry.stats_at(lane, index);
            // Relaxed: statistics; no decision depends on them.
            s.allowed += m.word(at).load(Ordering::Relaxed);
            s.denied += m.word(at + 8).load(Ordering::Relaxed);
        }
        s
    }
}

fn lane_of(pid: u32) -> usize {
    (pid.wrapping_mul(0x9E37_79B9) >> 28) as usize % LANES
}

fn params_of(algorithm: &Algorithm, wall_offset: u64) -> Params {
    let phase = |window_ns: u64, alignment: Alignment| match alignment {
        Alignment::WallClock => wall_offset % window_ns,
        Alignment::Monotonic => 0,
    };
    match *algorithm {
        Algorithm::TokenBucket {
            capacity,
            emission_ns,
        } => Params::TokenBucket(Gcra {
            emission_ns,
            tolerance_ns: capacity * emission_ns,
        }),
        Algorithm::FixedWindow {
            limit,
            window_ns,
            alignment,
        } => Params::FixedWindow(FixedWindow {
            limit,
            window_ns,
            phase_ns: phase(window_ns, alignment),
        }),
        Algorithm::SlidingWindow {
            limit,
            window_ns,
            alignment,
        } => Params::SlidingWindow(SlidingWindow {
            limit,
            window_ns,
            phase_ns: phase(window_ns, alignment),
        }),
        Algorithm::SlidingLog { limit, window_ns } => {
            Params::SlidingLog(SlidingLog { limit, window_ns })
        }
    }
}

/// Decision counters of one limit, summed over every process.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stats {
    /// Decisions that admitted.
    pub allowed: u64,
    /// Decisions that denied.
    pub denied: u64,
}

/// A handle to one limit: resolved once by name, then `try_acquire` on the hot path.
///
/// A decision is one clock read, a few arithmetic operations and one CAS loop on the limit's
/// cache line (plus one uncontended counter increment): no allocation, no lock, no system call.
/// Handles are `Send + Sync` and cheap to clone.
///
/// # Example
///
/// ```
/// # fn main() -> Result<(), shmlimit::Error> {
/// # let dir = tempfile::tempdir().unwrap();
/// # let path = dir.path().join("limit.shm");
/// use std::time::Duration;
/// use shmlimit::{FixedWindow, Limiter};
/// let limiter = Limiter::builder()
///     .limit("per-minute", FixedWindow::new(2, Duration::from_secs(60)))
///     .create_or_open(&path)?;
/// let limit = limiter.limit("per-minute")?;
/// assert!(limit.peek(2)?.is_allowed());        // peeking consumes nothing
/// assert!(limit.try_acquire(2)?.is_allowed());
/// assert!(limit.try_acquire(1)?.is_denied());
/// assert!(limit.try_acquire(3).is_err());      // more than the limit can ever grant
/// assert_eq!(limit.stats().allowed, 1);
/// # Ok(()) }
/// ```
pub struct Limit<C: Clock = MonotonicClock> {
    shared: Arc<Shared>,
    clock: C,
    params: Params,
    capacity: u64,
    index: usize,
    state: *const AtomicU64,
    entries: *const AtomicU64,
    stats: *const AtomicU64,
}

// SAFETY: the raw pointers point into the mapping owned by `shared` (an Arc kept alive by every
// handle), at offsets validated at attach; they are only used to form `&AtomicU64`, which is Sync.
unsafe impl<C: Clock> Send for Limit<C> {}
// SAFETY: as for Send: all access through the pointers is atomic.
unsafe impl<C: Clock> Sync for Limit<C> {}

impl<C: Clock> Clone for Limit<C> {
    fn clone(&self) -> Self {
        Limit {
            shared: Arc::clone(&self.shared),
            clock: self.clock.clone(),
            params: self.params,
            capacity: self.capacity,
            index: self.index,
            state: self.state,
            entries: self.entries,
            stats: self.stats,
        }
    }
}

impl<C: Clock> std::fmt::Debug for Limit<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Limit")
            .field("name", &self.name())
            .field("algorithm", self.algorithm())
            .finish()
    }
}

impl<C: Clock> Limit<C> {
    /// The limit's name.
    pub fn name(&self) -> &str {
        &self.shared.mapped.defs[self.index].name
    }

    /// Its algorithm and parameters.
    pub fn algorithm(&self) -> &Algorithm {
        &self.shared.mapped.defs[self.index].algorithm
    }

    /// The most one decision can grant.
    pub fn capacity(&self) -> u64 {
        self.capacity
    }

    #[inline(always)]
    fn state(&self) -> &AtomicU64 {
        // SAFETY: see the Send impl: `state` points at an aligned word inside the live mapping.
        unsafe { &*self.state }
    }

    /// Admit `cost` units now, or deny and consume nothing.
    ///
    /// # Errors
    ///
    /// [`Error::ZeroCost`]; [`Error::CostExceedsCapacity`] when `cost` can never be granted;
    /// [`Error::CorruptState`] when the shared state is damaged (fail closed).
    #[inline]
    pub fn try_acquire(&self, cost: u64) -> Result<Decision> {
        self.run(cost, true, None)
    }

    /// The decision [`Limit::try_acquire`] would make now, consuming nothing.
    ///
    /// # Errors
    ///
    /// As [`Limit::try_acquire`].
    #[inline]
    pub fn peek(&self, cost: u64) -> Result<Decision> {
        self.run(cost, false, None)
    }

    /// [`Limit::try_acquire`] dated at `now_ns` on the monotonic timeline instead of the clock
    /// (for replaying traces and for tests). A `now_ns` older than the stored state is clamped
    /// as any stale read is.
    ///
    /// # Errors
    ///
    /// As [`Limit::try_acquire`].
    pub fn try_acquire_at(&self, cost: u64, now_ns: u64) -> Result<Decision> {
        self.run(cost, true, Some(now_ns))
    }

    #[inline(always)]
    fn run(&self, cost: u64, commit: bool, at: Option<u64>) -> Result<Decision> {
        if cost == 0 {
            return Err(Error::ZeroCost);
        }
        if cost > self.capacity {
            return Err(Error::CostExceedsCapacity {
                cost,
                capacity: self.capacity,
            });
        }
        let now = || at.unwrap_or_else(|| self.clock.now_ns());
        let decision = match self.params {
            Params::TokenBucket(g) => decide(self.state(), now, commit, |t, w| g.step(t, w, cost)),
            Params::FixedWindow(fw) => {
                decide(self.state(), now, commit, |t, w| fw.step(t, w, cost))
            }
            Params::SlidingWindow(sw) => {
                decide(self.state(), now, commit, |t, w| sw.step(t, w, cost))
            }
            Params::SlidingLog(log) => {
                // SAFETY: `entries` points at `log.limit` aligned words inside the live mapping,
                // established in `limit_at` from the validated geometry.
                let ring = unsafe { std::slice::from_raw_parts(self.entries, log.limit as usize) };
                log.acquire(self.state(), ring, now, cost, commit)
                    .map_err(|f| self.fault(f))?
            }
        };
        if commit {
            // SAFETY: `stats` points at this limit's (allowed, denied) pair in this process's lane.
            let counter = unsafe { &*self.stats.add(decision.is_denied() as usize) };
            // Relaxed: a statistic; it orders nothing.
            counter.fetch_add(1, Ordering::Relaxed);
        }
        Ok(decision)
    }

    #[cold]
    fn fault(&self, fault: Fault) -> Error {
        match fault {
            Fault::Corrupt => Error::CorruptState {
                limit: self.name().to_owned(),
            },
            Fault::ClockRange(ns) => Error::ClockOutOfRange(ns),
        }
    }

    /// Decisions of this limit so far, summed over all processes.
    pub fn stats(&self) -> Stats {
        Limiter::<C>::totals(&self.shared, self.index)
    }
}
