//! The keyed adaptive concurrency engine on a limit's site: acquiring, waiting, releasing with
//! a sample, and the status of one key, over the protocols of [`super::keyed`].

use std::sync::atomic::AtomicU64;
use std::time::Duration;

use super::keyed::KeyedGate;
use super::{sweep_due, tuning, Adaptive, AdaptivePermit, AdaptiveStatus};
use crate::algo::adaptive::{Outcome, Rtt, Tuning};
use crate::clock::Clock;
use crate::engine::keyed::Keyed;
use crate::engine::keys::table::{EMPTY, PENDING};
use crate::engine::keys::Slot;
use crate::engine::permits::keyed::{KeyAcquire, KeyedPermits};
use crate::engine::permits::slot::OwnerWord;
use crate::engine::permits::{Judge, Permits, Waited};
use crate::engine::site::Site;
use crate::error::Result;
use crate::file::layout;
use crate::spec::{Adaptive as Spec, Algorithm};

/// The status of the key `tag` in its slot `slot` (state word `state`), its words read without
/// adopting them (another key's words read as fresh).
fn key_status<P: crate::engine::keys::pair::PairWord>(
    spec: &Spec,
    gate: &KeyedGate<'_, P, AtomicU64>,
    slot: usize,
    tag: u64,
    state: u64,
) -> AdaptiveStatus {
    let (limit_word, rtt_word) = gate.peek(slot, tag);
    let in_flight = gate.permits.held_bits(state).count_ones() as u64;
    key_status_of(spec, limit_word, rtt_word, in_flight)
}

fn key_status_of(spec: &Spec, limit_word: u64, rtt_word: u64, in_flight: u64) -> AdaptiveStatus {
    let t = tuning(spec);
    let rtt = Rtt::of(rtt_word);
    AdaptiveStatus {
        limit: t.limit_of(limit_word),
        permits: t.permits_of(limit_word),
        min: spec.min,
        max: spec.max,
        rtt_long_us: rtt.long_us,
        rtt_recent_us: rtt.short_us,
        in_flight,
    }
}

/// A keyed adaptive concurrency limit's engine, on the limit's site.
pub(crate) struct KeyedAdaptive<'a, C: Clock>(pub(crate) &'a Site<C>);

site_view!(KeyedAdaptive);

impl<'a, C: Clock> KeyedAdaptive<'a, C> {
    fn spec(&self) -> Result<Spec> {
        match self.def().algorithm {
            Algorithm::AdaptiveConcurrency(a) if self.def().keyed.is_some() => Ok(a),
            _ => Err(self.misdirected()),
        }
    }

    /// The limit's words per key slot, in its state area after the permit blocks.
    fn key_words(&self, spec: &Spec) -> Result<&'a [AtomicU64]> {
        let slots = self.def().keyed.map_or(0, |k| k.slots() as usize);
        let at = layout::keyed_adaptive_words(slots, spec.max as usize);
        self.0
            .area()
            .get(at..at + slots * super::keyed::KEY_WORDS)
            .ok_or_else(|| self.misdirected())
    }

    /// The key table, permit blocks and words of the limit, with its lease.
    fn gate(&self, spec: &Spec) -> Result<(KeyedGate<'a, Slot, AtomicU64>, u64)> {
        let (kp, lease_ns) = Permits(self.0).keyed_entries()?;
        Ok((KeyedGate::new(kp, self.key_words(spec)?), lease_ns))
    }

    /// Take a permit of `key` if fewer than its current limit are held (taking over the
    /// entries of dead holders when the key is at its limit), without waiting.
    pub(crate) fn try_acquire(&self, key: &[u8]) -> Result<Option<AdaptivePermit<C>>> {
        let this = self.current()?;
        if !std::ptr::eq(this, self.0) {
            return KeyedAdaptive(this).try_acquire(key);
        }
        let tag = Keyed(self.0).key_tag(key)?;
        let spec = self.spec()?;
        let t = tuning(&spec);
        let (gate, lease_ns) = self.gate(&spec)?;
        let permits = Permits(self.0);
        let me = permits.own_identity()?;
        let got = self.grab(&gate, &t, tag, lease_ns, me)?;
        let permit = match permits.key_outcome(&gate.permits, got)? {
            Some(entry) => permits.permit_outcome(true, entry),
            None => permits.permit_outcome(false, None),
        };
        Ok(Adaptive(self.0).guard(permit))
    }

    /// [`KeyedAdaptive::try_acquire`], waiting up to `timeout` on the futex of the key's
    /// bucket (woken by every release of a key of the bucket, which also closes the windows
    /// that raise a limit; at least every [`PERMIT_RECHECK`](crate::consts::PERMIT_RECHECK)).
    pub(crate) fn acquire_timeout(
        &self,
        key: &[u8],
        timeout: Duration,
    ) -> Result<Option<AdaptivePermit<C>>> {
        let this = self.current()?;
        if !std::ptr::eq(this, self.0) {
            return KeyedAdaptive(this).acquire_timeout(key, timeout);
        }
        let tag = Keyed(self.0).key_tag(key)?;
        let spec = self.spec()?;
        let t = tuning(&spec);
        let (gate, lease_ns) = self.gate(&spec)?;
        let permits = Permits(self.0);
        let me = permits.own_identity()?;
        match permits.wait_for_permit(tag, timeout, || {
            let got = self.grab(&gate, &t, tag, lease_ns, me)?;
            permits.key_outcome(&gate.permits, got)
        })? {
            Waited::Done(permit) => Ok(Adaptive(self.0).guard(permit)),
            Waited::Moved(next, left) => KeyedAdaptive(next).acquire_timeout(key, left),
        }
    }

    /// One attempt: a permit within the key's limit; at the limit, the entries of dead
    /// holders (or past their lease) are taken over, at most once per 10 ms in this process
    /// (as the unkeyed limit's slow path: at a limit below `max` every refused attempt would
    /// otherwise read every holder's `/proc` entry).
    fn grab(
        &self,
        gate: &KeyedGate<'_, Slot, AtomicU64>,
        t: &Tuning,
        tag: u64,
        lease_ns: u64,
        me: u64,
    ) -> Result<KeyAcquire> {
        // One clock read for the schedule and the stamps.
        let now_ns = self.clock().now_ns();
        let mut judge = Judge::new(me, lease_ns);
        let mut sweeping = None;
        gate.acquire(
            self.0,
            t,
            tag,
            me,
            Permits::<C>::scan_start(me, gate.permits.permits()),
            now_ns / 1_000_000,
            &mut || now_ns,
            &mut |w, since| {
                *sweeping.get_or_insert_with(sweep_due) && judge.reclaimable(w, since, self.clock())
            },
        )
    }

    /// Release the permit of entry `entry` of key slot `slot` (held with `word`), reporting
    /// `sample` (outcome, latency ns) into the key's words before its bit is cleared: the
    /// permit engine's release of a keyed adaptive permit (it wakes the waiters).
    pub(crate) fn release_reporting(
        &self,
        kp: KeyedPermits<'a, Slot, AtomicU64>,
        slot: usize,
        entry: usize,
        word: OwnerWord,
        (outcome, rtt_ns): (Outcome, u64),
    ) -> bool {
        let (Ok(spec), Ok(words)) = (self.spec(), self.spec().and_then(|s| self.key_words(&s)))
        else {
            return kp.release(slot, entry, word);
        };
        let gate = KeyedGate::new(kp, words);
        let rtt_us = rtt_ns.saturating_add(500) / 1000;
        let (held, _closed) = gate.release(
            &tuning(&spec),
            slot,
            entry,
            word,
            Some((outcome, rtt_us)),
            || self.clock().now_ns() / 1_000_000,
        );
        held
    }

    /// The current limit of `key`, its range, its RTTs and its permits held (a key without a
    /// slot, or whose words are not yet its own, is fresh: the initial limit, nothing held).
    pub(crate) fn status(&self, key: &[u8]) -> Result<AdaptiveStatus> {
        let tag = Keyed(self.0).key_tag(key)?;
        let spec = self.spec()?;
        let (gate, _) = self.gate(&spec)?;
        Ok(match gate.permits.live_slot(self.0, tag)? {
            Some((slot, (_, state))) => key_status(&spec, &gate, slot, tag, state),
            None => key_status_of(&spec, 0, 0, 0),
        })
    }

    /// The status of every key that has a slot now, with its tag, in slot order.
    pub(crate) fn key_statuses(&self) -> Result<Vec<(u64, AdaptiveStatus)>> {
        let spec = self.spec()?;
        let (gate, _) = self.gate(&spec)?;
        Ok((0..gate.permits.slots())
            .filter_map(|slot| {
                let (tag, state) = gate.permits.key_pair(slot);
                // Live tags only: not an empty slot, a pending claim or a retired one.
                (tag != EMPTY && tag & PENDING == 0)
                    .then(|| (tag, key_status(&spec, &gate, slot, tag, state)))
            })
            .collect())
    }

    /// Whether `now_ns` falls in a re-measure of the RTT (every key's, on one schedule).
    pub(crate) fn remeasuring_at(&self, now_ns: u64) -> Result<bool> {
        Ok(tuning(&self.spec()?).remeasuring(now_ns / 1_000_000))
    }

    /// Release the permit `id` reporting `outcome` and the latency the caller measured (the C
    /// ABI's path). False if this process did not hold it.
    pub(crate) fn release_id(&self, id: u64, outcome: Outcome, rtt_ns: u64) -> Result<bool> {
        self.spec()?;
        Permits(self.0).release_permit_sampled(id, Some((outcome, rtt_ns)))
    }
}
