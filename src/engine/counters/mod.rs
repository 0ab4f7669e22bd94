//! The counters engine: keyed counters whose window (and limit) comes with each call, for
//! storage adapters of libraries that declare their limits at run time (Python's `limits`,
//! under flask-limiter and slowapi). A view of the site, `Counters(site)`, like the other
//! engines: the limit's words, clock and hash seed are all a site holds; the decisions skip
//! the site's straight loop and tally (their parameters come with the call, not the file).
//!
//! # Implementation details
//!
//! The limit's state area holds two key tables of the key-table engine ([`crate::engine::keys`]:
//! 16-byte key slots, a keyed hash of the key under the file's secret seed, claims, reclaim of
//! idle keys, the definition's table-full policy), then the moving-window logs:
//!
//! | part | size | holds |
//! |---|---|---|
//! | counter table | `K` key slots | per key, one word of [`crate::algo::counters`]: a fixed window's count and deadline, or a sliding window counter's two counts |
//! | log table | `K` key slots | per key, the deadline of its moving-window log (the latest `t + W` it admitted at) |
//! | logs | `K x M` entries of 16 bytes | the log of the key in log slot `i` at entries `i M ..`, see [`log`] |
//!
//! Fixed-window counters, sliding-window counters and logs are three name spaces: a key's tag in
//! each is the keyed hash under the seed with its first word XORed with the name space's
//! constant, so the same key string used with two strategies holds two states.
//!
//! Every word says when it counts nothing (its *fresh* time) without the window of the call
//! that wrote it, so a table can reclaim any idle key for any other; a decision reads its
//! key's pair, then the clock, then commits with one CAS of the pair (fixed and sliding
//! windows: exact per key under every race, as the keyed windows), or raises the log's
//! deadline with one CAS and claims entries ([`log`]). A process killed anywhere leaves every
//! word whole; no call holds anything a crash could leave held.

pub(crate) mod log;
#[cfg(test)]
mod loom_models;
pub(crate) mod reboot;

use crate::algo::counters::{self as algo, MAX_NOW_NS};
use crate::algo::{Decision, Step};
use crate::clock::Clock;
use crate::engine::keyed::{check_key, hash};
use crate::engine::keys::table::{tag_of, Located, Table};
use crate::engine::keys::template::Template;
use crate::engine::keys::Slot;
use crate::engine::site::Site;
use crate::engine::Params;
use crate::error::{Error, Result};
use crate::file::layout;
use crate::spec::FullPolicy;

/// The engine of a counters limit: a view of its site.
pub(crate) struct Counters<'a, C: Clock>(pub(crate) &'a Site<C>);
site_view!(Counters);

/// The name spaces of keys (XORed into the first word of the hash seed).
const FIXED: u64 = 0x6669_7865_645f_7769;
const SLIDING: u64 = 0x736c_6964_696e_6777;
const MOVING: u64 = 0x6d6f_7669_6e67_7769;

/// The freshness the key table needs of a counter word.
struct CounterWords;
/// The freshness the key table needs of a log's deadline word.
struct LogDeadlines;

impl Template for CounterWords {
    fn step(&self, _: u64, _: u64, _: u64) -> Result<Step> {
        unreachable!("counter words are updated by the counters engine, not stepped")
    }
    fn refund(&self, _: u64, state: u64, _: &Decision, _: u64) -> Result<u64> {
        Ok(state)
    }
    fn is_fresh(&self, now: u64, state: u64) -> bool {
        algo::is_fresh(now, state)
    }
    fn fresh_in(&self, now: u64, state: u64) -> u64 {
        algo::fresh_at(state).saturating_sub(now)
    }
    fn blank(&self, _: u64) -> u64 {
        0
    }
}

impl Template for LogDeadlines {
    fn step(&self, _: u64, _: u64, _: u64) -> Result<Step> {
        unreachable!("log deadlines are raised by the counters engine, not stepped")
    }
    fn refund(&self, _: u64, state: u64, _: &Decision, _: u64) -> Result<u64> {
        Ok(state)
    }
    fn is_fresh(&self, now: u64, state: u64) -> bool {
        state <= now
    }
    fn fresh_in(&self, now: u64, state: u64) -> u64 {
        state.saturating_sub(now)
    }
    fn blank(&self, _: u64) -> u64 {
        0
    }
}

/// What a change of one key's word decided.
pub(crate) enum Change<R> {
    /// Replace the word by this one (one CAS), and report `R`.
    Write(u64, R),
    /// Write nothing, and report `R`.
    Keep(R),
}

/// Where an update of a key's word ended.
pub(crate) enum Updated<R> {
    /// Decided, in this slot (`None`: the key has none and nothing was written).
    Done(R, Option<usize>),
    /// No slot for the key in its probe window; one turns free in this long.
    Full { fresh_in_ns: u64 },
}

/// Find the key `tag` in `table` (claiming a slot when `insert`), then apply `f(now, word)`
/// with one CAS loop on its pair; `now` is read after the pair, on every attempt. A key
/// without a slot is decided on the zero word (and claims a slot only if `f` writes).
pub(crate) fn update<R, T: Template, P: crate::engine::keys::pair::PairWord>(
    table: &Table<'_, P>,
    t: &T,
    tag: u64,
    insert: bool,
    now: &mut impl FnMut() -> u64,
    mut f: impl FnMut(u64, u64) -> Result<Change<R>>,
) -> Result<Updated<R>> {
    'probe: loop {
        let (found, mut time) = table.locate(t, tag, insert, now)?;
        let (at, mut pair) = match found {
            Located::Live(at, pair) | Located::Empty(at, pair) => (at, pair),
            Located::Full { fresh_in_ns } => return Ok(Updated::Full { fresh_in_ns }),
            Located::Absent(state) => {
                return Ok(match f(time, state)? {
                    Change::Write(_, r) | Change::Keep(r) => Updated::Done(r, None),
                })
            }
        };
        loop {
            // The pair was read whole: its word is this key's (or an empty slot's zero word).
            let (new, r) = match f(time, pair.1)? {
                Change::Keep(r) => return Ok(Updated::Done(r, Some(at))),
                Change::Write(new, r) => (new, r),
            };
            // A live slot is the key's; an empty one is claimed live by this CAS (as a keyed
            // decision claims one, see the key-table engine).
            match table.cas(at, pair, (tag, new)) {
                Ok(()) => return Ok(Updated::Done(r, Some(at))),
                Err(found) if found.0 == tag && pair.0 == tag => {
                    pair = found;
                    time = now();
                }
                Err(_) => continue 'probe,
            }
        }
    }
}

/// The parts of a counters limit's state area.
struct Parts<'a> {
    counters: &'a [Slot],
    logs: &'a [Slot],
    entries: &'a [Slot],
    per_key: usize,
}

impl<C: Clock> Counters<'_, C> {
    fn parts(&self) -> Result<Parts<'_>> {
        let Params::Counters { log_entries, .. } = self.params() else {
            return Err(self.misdirected());
        };
        let keys = self.key_slots;
        let table = layout::key_table_words(keys);
        let area = self.area();
        let unsupported = || self.refused(crate::engine::keys::NO_PAIR_CAS);
        let counters = crate::engine::keys::table_in(area, keys).ok_or_else(unsupported)?;
        let logs = crate::engine::keys::table_in(area.get(table..).unwrap_or(&[]), keys)
            .ok_or_else(unsupported)?;
        let entries = if log_entries == 0 {
            &[][..]
        } else {
            crate::engine::keys::table_in(
                area.get(2 * table..).unwrap_or(&[]),
                keys * log_entries as usize,
            )
            .ok_or_else(unsupported)?
        };
        Ok(Parts {
            counters,
            logs,
            entries,
            per_key: log_entries as usize,
        })
    }

    fn wall(&self) -> u64 {
        match self.params() {
            Params::Counters { wall_offset, .. } => wall_offset,
            _ => 0,
        }
    }

    fn policy(&self) -> FullPolicy {
        self.def().keyed.map_or(FullPolicy::Deny, |k| k.on_full)
    }

    fn tag(&self, space: u64, key: &[u8]) -> Result<u64> {
        check_key(key)?;
        let [a, b] = self.hash_seed();
        Ok(tag_of(hash::key_hash([a ^ space, b], key)))
    }

    /// The clock, within the range the words can date.
    fn now(&self) -> Result<u64> {
        let t = self.clock.now_ns();
        if t > MAX_NOW_NS {
            return Err(Error::ClockOutOfRange(t));
        }
        Ok(t)
    }

    fn invalid(&self, reason: String) -> Error {
        Error::InvalidParameter {
            limit: self.name().to_owned(),
            reason,
        }
    }

    fn check_window(&self, window_ns: u64, least: u64) -> Result<()> {
        if window_ns < least || window_ns > algo::MAX_WINDOW_NS {
            return Err(self.invalid(format!(
                "window of {window_ns} ns: a counters limit takes windows of {least} to {} ns",
                algo::MAX_WINDOW_NS
            )));
        }
        Ok(())
    }

    fn check_cost(&self, limit: u64, cost: u64, most: u64, what: &str) -> Result<()> {
        if limit == 0 || limit > most {
            return Err(self.invalid(format!("limit {limit}: {what} takes limits of 1 to {most}")));
        }
        if cost == 0 {
            return Err(Error::ZeroCost);
        }
        if cost > limit {
            return Err(Error::CostExceedsCapacity {
                cost,
                capacity: limit,
            });
        }
        Ok(())
    }

    fn corrupt(&self, e: Error) -> Error {
        match e {
            Error::CorruptState { .. } => Error::CorruptState {
                limit: self.name().to_owned(),
            },
            e => e,
        }
    }

    /// [`update`] of the key `key` of name space `space` in the counter table (fixed and
    /// sliding windows).
    fn on_counter<R>(
        &self,
        space: u64,
        key: &[u8],
        insert: bool,
        f: impl FnMut(u64, u64) -> Result<Change<R>>,
    ) -> Result<Updated<R>> {
        let tag = self.tag(space, key)?;
        let p = self.parts()?;
        if insert {
            self.now()?;
        }
        let mut now = || self.clock.now_ns();
        update(
            &Table::new(p.counters),
            &CounterWords,
            tag,
            insert,
            &mut now,
            f,
        )
        .map_err(|e| self.corrupt(e))
    }

    /// A decision, or the table-full policy's answer.
    fn decided(&self, out: Updated<Decision>) -> Result<Decision> {
        match out {
            Updated::Done(d, _) => Ok(d),
            Updated::Full { fresh_in_ns } => self.full(fresh_in_ns),
        }
    }

    /// The table-full policy's answer, as a decision.
    fn full(&self, fresh_in_ns: u64) -> Result<Decision> {
        match self.policy() {
            FullPolicy::Deny => Ok(Decision::denied(fresh_in_ns, 0, 1)),
            FullPolicy::Allow => Ok(Decision::allowed(0, 1)),
            FullPolicy::Error => Err(Error::TableFull {
                limit: self.name().to_owned(),
            }),
        }
    }

    /// Add `amount` to the key's fixed-window counter (a window of `window_ns` starts at the
    /// first increment after the last one ended) and return its count. A full table answers by
    /// its policy: `u64::MAX` (deny), `0` (allow, nothing counted), or the error.
    pub(crate) fn incr(&self, key: &[u8], window_ns: u64, amount: u64) -> Result<u64> {
        self.check_window(window_ns, algo::MIN_WINDOW_NS)?;
        if amount == 0 {
            return Err(Error::ZeroCost);
        }
        let out = self.on_counter(FIXED, key, true, |t, w| {
            let (new, count) = algo::incr(t, w, window_ns, amount)?;
            Ok(Change::Write(new, count))
        })?;
        match out {
            Updated::Done(count, _) => Ok(count),
            Updated::Full { fresh_in_ns } => {
                self.full(fresh_in_ns)
                    .map(|d| if d.is_allowed() { 0 } else { u64::MAX })
            }
        }
    }

    /// Take `amount` from the key's fixed-window counter (never below zero; its window keeps
    /// its end) and return its count: 0 when the key counts nothing (no slot is claimed).
    pub(crate) fn decr(&self, key: &[u8], amount: u64) -> Result<u64> {
        if amount == 0 {
            return Err(Error::ZeroCost);
        }
        let out = self.on_counter(FIXED, key, false, |t, w| {
            Ok(match algo::decr(t, w, amount)? {
                Some((new, count)) if new != w => Change::Write(new, count),
                Some((_, count)) => Change::Keep(count),
                None => Change::Keep(0),
            })
        })?;
        Ok(match out {
            Updated::Done(count, _) => count,
            Updated::Full { .. } => 0,
        })
    }

    /// Make the key's fixed-window counter hold `count` in a window of `window_ns` starting
    /// now, whatever it held; returns `count`. A full table answers as for [`Self::incr`].
    pub(crate) fn set(&self, key: &[u8], window_ns: u64, count: u64) -> Result<u64> {
        self.check_window(window_ns, algo::MIN_WINDOW_NS)?;
        algo::set(0, window_ns, count)?;
        let out = self.on_counter(FIXED, key, true, |t, _| {
            Ok(Change::Write(algo::set(t, window_ns, count)?, count))
        })?;
        match out {
            Updated::Done(count, _) => Ok(count),
            Updated::Full { fresh_in_ns } => {
                self.full(fresh_in_ns)
                    .map(|d| if d.is_allowed() { 0 } else { u64::MAX })
            }
        }
    }

    /// Admit `cost` of `limit` in the key's fixed window of `window_ns` (started by its first
    /// admission): nothing is counted when denied.
    pub(crate) fn acquire_fixed(
        &self,
        key: &[u8],
        limit: u64,
        window_ns: u64,
        cost: u64,
    ) -> Result<Decision> {
        self.check_window(window_ns, algo::MIN_WINDOW_NS)?;
        self.check_cost(limit, cost, algo::MAX_COUNT, "a fixed window")?;
        let out = self.on_counter(FIXED, key, true, |t, w| {
            let (count, deadline) = algo::fixed_view(t, w)?;
            let ends_in = if deadline == 0 {
                window_ns
            } else {
                deadline - t
            };
            if count + cost > limit {
                return Ok(Change::Keep(
                    Decision::denied(ends_in, limit.saturating_sub(count), 1).resetting(ends_in),
                ));
            }
            let (new, _) = algo::incr(t, w, window_ns, cost)?;
            Ok(Change::Write(
                new,
                Decision::allowed(limit - count - cost, 1)
                    .of(limit)
                    .resetting(ends_in),
            ))
        })?;
        self.decided(out)
    }

    /// The key's fixed-window count and the nanoseconds until its window ends (0, 0 when it
    /// has none).
    pub(crate) fn fixed(&self, key: &[u8]) -> Result<(u64, u64)> {
        let out = self.on_counter(FIXED, key, false, |t, w| {
            let (count, deadline) = algo::fixed_view(t, w)?;
            Ok(Change::Keep((count, deadline.saturating_sub(t))))
        })?;
        Ok(match out {
            Updated::Done(r, _) => r,
            Updated::Full { .. } => (0, 0),
        })
    }

    /// Admit `cost` of `limit` by the key's sliding window counter over Unix-aligned windows of
    /// `window_ns` (`floor(prev (W - e) / W) + cur + cost <= limit`).
    pub(crate) fn acquire_sliding(
        &self,
        key: &[u8],
        limit: u64,
        window_ns: u64,
        cost: u64,
    ) -> Result<Decision> {
        self.check_window(window_ns, algo::MIN_SLIDING_WINDOW_NS)?;
        self.check_cost(
            limit,
            cost,
            algo::MAX_SLIDING_LIMIT,
            "a sliding window counter",
        )?;
        let wall = self.wall();
        let out = self.on_counter(SLIDING, key, true, |t, w| {
            let (_, e) = algo::sliding_position(t, wall, window_ns);
            let ends_in = window_ns - e;
            Ok(
                match algo::sliding_acquire(t, w, wall, window_ns, limit, cost)? {
                    Some(new) => {
                        let (_, prev, cur, e) = algo::sliding_view(t, new, wall, window_ns)?;
                        let left = limit.saturating_sub(algo::estimate(prev, cur, e, window_ns));
                        Change::Write(new, Decision::allowed(left, 1).of(limit))
                    }
                    None => Change::Keep(Decision::denied(ends_in, 0, 1)),
                },
            )
        })?;
        self.decided(out)
    }

    /// The key's sliding window counter: `(previous count, ns until the previous window stops
    /// weighing (0 if it is empty), current count, ns until the current count expires)`.
    pub(crate) fn sliding(&self, key: &[u8], window_ns: u64) -> Result<(u64, u64, u64, u64)> {
        self.check_window(window_ns, algo::MIN_SLIDING_WINDOW_NS)?;
        let wall = self.wall();
        let out = self.on_counter(SLIDING, key, false, |t, w| {
            let (_, prev, cur, e) = algo::sliding_view(t, w, wall, window_ns)?;
            let left = window_ns - e.min(window_ns);
            Ok(Change::Keep((
                prev,
                if prev == 0 { 0 } else { left },
                cur,
                left + window_ns,
            )))
        })?;
        Ok(match out {
            Updated::Done(r, _) => r,
            Updated::Full { .. } => (0, 0, 0, 0),
        })
    }

    /// The entries a moving window of `limit` uses, or the error naming the largest limit
    /// this file's logs hold.
    fn check_moving(&self, limit: u64, cost: u64, per_key: usize) -> Result<()> {
        if per_key == 0 || limit > per_key as u64 {
            return Err(self.invalid(format!(
                "a moving window of {limit}: this file's logs hold at most {per_key} entries per \
                 key, so the largest moving-window limit it supports is {per_key}"
            )));
        }
        self.check_cost(limit, cost, per_key as u64, "a moving window")
    }

    /// Admit `cost` of `limit` in the key's moving window of `window_ns`: exact, at most
    /// `limit` admissions in every window (see [`log`]).
    pub(crate) fn acquire_moving(
        &self,
        key: &[u8],
        limit: u64,
        window_ns: u64,
        cost: u64,
    ) -> Result<Decision> {
        self.check_window(window_ns, algo::MIN_WINDOW_NS)?;
        let p = self.parts()?;
        self.check_moving(limit, cost, p.per_key)?;
        let tag = self.tag(MOVING, key)?;
        let _ = self.now()?;
        let table = Table::new(p.logs);
        let mut now = || self.clock.now_ns();
        // Raise the key's deadline to cover what it is about to claim, with the same clock
        // reading as the entries (see `log`, "The key's slot").
        let out = update(&table, &LogDeadlines, tag, true, &mut now, |t, d| {
            let want = t + window_ns;
            Ok(if d >= want {
                Change::Keep(t)
            } else {
                Change::Write(want, t)
            })
        })?;
        let (t, at) = match out {
            Updated::Done(t, Some(at)) => (t, at),
            Updated::Done(..) => unreachable!("an inserting update has a slot"),
            Updated::Full { fresh_in_ns } => return self.full(fresh_in_ns),
        };
        let entries = &p.entries[at * p.per_key..][..limit as usize];
        Ok(match log::acquire(entries, tag, t, window_ns, cost) {
            log::Taken::Admitted { live } => Decision::allowed(limit - live, 1).of(limit),
            log::Taken::Denied {
                retry_after_ns,
                live,
            } => Decision::denied(retry_after_ns, limit.saturating_sub(live), 1),
        })
    }

    /// The key's moving window of `limit` entries: `(live entries, ns since the oldest of them
    /// was admitted)` (`(0, 0)` when empty).
    pub(crate) fn moving(&self, key: &[u8], limit: u64, window_ns: u64) -> Result<(u64, u64)> {
        self.check_window(window_ns, algo::MIN_WINDOW_NS)?;
        let p = self.parts()?;
        self.check_moving(limit, 1, p.per_key)?;
        let tag = self.tag(MOVING, key)?;
        let mut now = || self.clock.now_ns();
        let out = update(
            &Table::new(p.logs),
            &LogDeadlines,
            tag,
            false,
            &mut now,
            |t, _| Ok(Change::Keep(t)),
        )?;
        let Updated::Done(t, Some(at)) = out else {
            return Ok((0, 0));
        };
        let entries = &p.entries[at * p.per_key..][..limit as usize];
        let (n, oldest) = log::window(entries, tag, t, window_ns);
        Ok(if n == 0 {
            (0, 0)
        } else {
            (n, t.saturating_sub(oldest))
        })
    }

    /// Forget the key in every name space: its fixed-window count, its sliding window counter
    /// and its moving-window log.
    pub(crate) fn clear(&self, key: &[u8]) -> Result<()> {
        let p = self.parts()?;
        let mut now = || self.clock.now_ns();
        for space in [FIXED, SLIDING] {
            let tag = self.tag(space, key)?;
            update(
                &Table::new(p.counters),
                &CounterWords,
                tag,
                false,
                &mut now,
                |_, w| {
                    Ok(if w == 0 {
                        Change::Keep(())
                    } else {
                        Change::Write(0, ())
                    })
                },
            )?;
        }
        let tag = self.tag(MOVING, key)?;
        if let Updated::Done(_, Some(at)) = update(
            &Table::new(p.logs),
            &LogDeadlines,
            tag,
            false,
            &mut now,
            |_, _| Ok(Change::Keep(())),
        )? {
            log::clear(&p.entries[at * p.per_key..][..p.per_key], tag);
        }
        Ok(())
    }

    /// The slots of both key tables that hold a key, and how many slots both have: `(used,
    /// slots)`. A key used with a fixed or sliding window holds a slot of the counter table, one
    /// used with a moving window a slot of the log table: a key used with both holds two.
    pub(crate) fn key_occupancy(&self) -> (usize, usize) {
        match self.parts() {
            Ok(p) => (
                Table::new(p.counters).occupancy() + Table::new(p.logs).occupancy(),
                p.counters.len() + p.logs.len(),
            ),
            Err(_) => (0, 2 * self.key_slots),
        }
    }

    /// Retire every key of both tables whose word counts nothing any more (a fixed window
    /// ended, a sliding counter's windows both over, a log whose deadline passed: each of its
    /// entries expired), and any pending claim a killed process left; returns how many keys
    /// were retired. A retired log slot's entries stay in its block, foreign to the next key
    /// that claims the slot (see [`log`]), so nothing is written to them.
    pub(crate) fn reclaim_idle_keys(&self) -> usize {
        let Ok(p) = self.parts() else {
            return 0;
        };
        let mut now = || self.clock.now_ns();
        Table::new(p.counters).reclaim_idle(&CounterWords, &mut now)
            + Table::new(p.logs).reclaim_idle(&LogDeadlines, &mut now)
    }

    /// Forget every key (their slots stay theirs, with fresh words); returns how many keys
    /// held something.
    pub(crate) fn clear_all(&self) -> Result<usize> {
        let p = self.parts()?;
        let mut held = 0;
        for (table, entries) in [(p.counters, None), (p.logs, Some(p.entries))] {
            for (i, slot) in table.iter().enumerate() {
                use crate::engine::keys::pair::PairWord;
                let mut pair = slot.load();
                if pair.0 == 0 || pair.0 & crate::engine::keys::table::PENDING != 0 {
                    continue;
                }
                held += (pair.1 != 0) as usize;
                if let Some(entries) = entries {
                    log::clear(&entries[i * p.per_key..][..p.per_key], pair.0);
                }
                while pair.1 != 0 {
                    match slot.cas(pair, (pair.0, 0)) {
                        Ok(()) => break,
                        Err(found) => pair = found,
                    }
                }
            }
        }
        Ok(held)
    }
}
