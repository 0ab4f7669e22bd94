//! The two lock-free protocols of an adaptive limit, over any [`PermitAtomic`] so that the loom
//! models run them unchanged: granting an entry within the current limit, and closing a window
//! of pooled samples.
//!
//! # Implementation details
//!
//! **Granting within the limit.** The permit entries are a concurrency limit's `max` entries
//! ([`Table`]); the limit `L` is a number in a word, and a claim alone could exceed it. So an
//! acquirer claims a free entry (one CAS, as a fixed permit), then a `SeqCst` fence, then counts
//! the held entries; if it counts more than `L`, it gives its entry back (one CAS) and is
//! refused. Why no two acquirers both keep an entry past `L`: of any set of holders granted
//! at once, take the one whose claim came last; its fence follows every other claim of the set
//! in the single total order of `SeqCst` fences (each claimer's own fence follows its claim),
//! so its count reads all of them, and it would have given back. The race costs the other
//! direction only: two acquirers that both count each other may both give back (transiently
//! strict, never over-admitting); a count before the claim keeps acquirers that find the limit
//! reached from claiming at all, so that waiters do not refuse each other in a storm of
//! transient claims. The same count makes a shrinking limit bite at once: while
//! `in flight >= L`, every new claim counts more than `L` and is given back, so in-flight
//! drains to the new limit as holders release (no holder is revoked).
//!
//! **Closing a window.** See [`crate::algo::adaptive`]: take the accumulator (swap to zero),
//! then the limit word's update in the mutation loop from a word still due; the winner of that
//! CAS alone moves the RTT word, a loser adds what it took back (each in the mutation loop).
//! In a re-measure the winner's CAS keeps the limit (it restarts the window) and, in the
//! re-measure's last windows, sets the long RTT from the samples it took.

use std::sync::atomic::Ordering;

use crate::algo::adaptive::{Outcome, Rtt, Tuning, Window};
use crate::algo::{mutate, Change};
use crate::engine::permits::slot::{OwnerWord, Table};
use crate::sync::{AtomicWord, PermitAtomic};

/// What one attempt to grant an entry concluded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Admit {
    /// Granted: this entry, committed with this owner word.
    Granted(usize, OwnerWord),
    /// At the limit: nothing claimed (the count before claiming), or an entry claimed and
    /// given back (the count after it).
    AtLimit,
    /// No free entry at all (every one of the `max` is held).
    Full,
}

/// Held entries of `table` (stops counting past `stop`).
pub(crate) fn count_held<A: PermitAtomic>(table: &Table<'_, A>, stop: usize) -> usize {
    let mut held = 0;
    for index in 0..table.permits() {
        // `read` loads with Acquire; after the caller's SeqCst fence that is enough for the
        // argument in the module docs (fence-to-fence order, then read-from).
        if !table.read(index).0.is_free() {
            held += 1;
            if held > stop {
                break;
            }
        }
    }
    held
}

/// Claim a free entry of `table` for `me` (scanning from `start`), then keep it only if at most
/// `allowed` entries are held with it.
pub(crate) fn admit<A: PermitAtomic>(
    table: &Table<'_, A>,
    start: usize,
    me: u64,
    allowed: usize,
    now_ns: impl FnOnce() -> u64,
) -> Admit {
    // Acquire loads: the count before claiming keeps acquirers that cannot be granted from
    // claiming at all, so that many waiters at the limit do not refuse each other by their
    // transient claims. Only the count after the fence decides.
    if count_held(table, allowed) >= allowed {
        return Admit::AtLimit;
    }
    let Some((index, word)) = table.claim(start, me, now_ns) else {
        return Admit::Full;
    };
    // SeqCst: orders our claim before our count against every other acquirer's claim-fence-count
    // (see the module docs); without it two acquirers could each miss the other's claim.
    A::fence_seq_cst();
    if count_held(table, allowed) > allowed {
        // Give back exactly the word we committed; nobody else changes a live holder's word.
        table.release(index, word);
        return Admit::AtLimit;
    }
    Admit::Granted(index, word)
}

/// The accumulator after one sample (the mutation loop over [`Window::record`]).
pub(crate) fn record<A: AtomicWord>(acc: &A, outcome: Outcome, rtt_us: u64) {
    if outcome == Outcome::Dropped {
        return;
    }
    let _: Result<(), ()> = mutate(
        acc,
        || 0,
        |_, w| Ok(Change::Write(Window::record(w, outcome, rtt_us), ())),
    );
}

/// The pooled words of one adaptive limit.
pub(crate) struct Words<'a, A> {
    pub acc: &'a A,
    pub limit: &'a A,
    pub rtt: &'a A,
}

/// Where a window closed in the re-measure schedule ([`crate::algo::adaptive`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Remeasure {
    /// Outside a re-measure: the usual update.
    No,
    /// In a re-measure's first windows: the limit kept, the samples unused.
    Settling,
    /// In its last windows: the limit kept, the long RTT set (`first` of its re-measure).
    Sampled { first: bool },
}

/// A window this process closed: the limit before and after, the samples it used, and where
/// it closed in the re-measure schedule.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Closed {
    pub old: f64,
    pub new: f64,
    pub taken: Window,
    pub remeasure: Remeasure,
}

/// Close the window if it is over at `now_ms()`: what the process whose CAS closed it did,
/// None for everyone else. `in_flight` counts the held entries.
pub(crate) fn close_window<A: AtomicWord>(
    words: &Words<'_, A>,
    t: &Tuning,
    mut now_ms: impl FnMut() -> u64,
    mut in_flight: impl FnMut() -> u64,
) -> Option<Closed> {
    // Acquire: pairs with the AcqRel CAS of the window that last closed.
    if !t.due(words.limit.load(Ordering::Acquire), now_ms()) {
        return None;
    }
    // Take the samples: whoever closes this window uses them, nobody else.
    let taken: Result<Window, ()> =
        mutate(words.acc, || 0, |_, w| Ok(Change::Write(0, Window::of(w))));
    let taken = taken.ok()?;
    // Acquire: pairs with the AcqRel CAS of the RTT word.
    let long = Rtt::of(words.rtt.load(Ordering::Acquire)).long_us;
    type Outcome = Option<(f64, f64, Remeasure)>;
    let closed: Result<Outcome, ()> = mutate(words.limit, now_ms, |now, word| {
        // No longer due: another process closed this window first.
        if !t.due(word, now) {
            return Ok(Change::Keep(None));
        }
        let old = t.limit_of(word);
        // In a re-measure the limit is kept (the window restarts); its last windows set the
        // long RTT.
        if t.remeasuring(now) {
            let phase = if t.sampling(now) {
                Remeasure::Sampled {
                    first: t.first_sample(t.started_ms(word), now),
                }
            } else {
                Remeasure::Settling
            };
            return Ok(Change::Write(
                t.limit_word(old, now),
                Some((old, old, phase)),
            ));
        }
        let new = t.next_limit(old, taken, long, in_flight());
        Ok(Change::Write(
            t.limit_word(new, now),
            Some((old, new, Remeasure::No)),
        ))
    });
    let Some((old, new, remeasure)) = closed.ok().flatten() else {
        // Lost the race: the samples go back for the next window.
        let _: Result<(), ()> = mutate(
            words.acc,
            || 0,
            |_, w| Ok(Change::Write(Window::plus(w, taken), ())),
        );
        return None;
    };
    if let Some(mean) = taken.mean_us() {
        let at_min = old <= t.min;
        let next = |w: u64| match remeasure {
            Remeasure::Sampled { first } => Rtt::remeasured(w, mean, first),
            // Its samples mix requests granted before the re-measure: unused.
            Remeasure::Settling => w,
            Remeasure::No => Rtt::next(w, mean, at_min),
        };
        let _: Result<(), ()> = mutate(words.rtt, || 0, |_, w| Ok(Change::Write(next(w), ())));
    }
    Some(Closed {
        old,
        new,
        taken,
        remeasure,
    })
}
