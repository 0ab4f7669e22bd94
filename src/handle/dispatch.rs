//! The binding dispatch: a decision, refund or permit on a limit held by name alone (the
//! untyped [`Limit`](crate::Limit) inside a composed [`Check`](crate::Check), a
//! [`GuardedLimit`](crate::GuardedLimit) or the C ABI's composed check), sent to the engine of
//! its kind: the same engine calls the typed handles make.
//!
//! # Implementation details
//!
//! The kind is read once per call, from the site the call runs on (after following a
//! replaced file: an untyped holder follows a name to a limit of any kind), and a call the
//! kind does not have is refused here with [`Error::WrongKind`]. This module and resolution
//! (`resolve.rs`) are the only places that check a kind: the engines decide with no test of
//! it (tests/structure.rs holds that).

use crate::algo::Decision;
use crate::clock::Clock;
use crate::engine::bucket::Bucket;
use crate::engine::keyed::Keyed;
use crate::engine::log::Log;
use crate::engine::permits::{Permit, Permits};
use crate::engine::rate::RateEngine;
use crate::engine::site::Site;
use crate::engine::window::Window;
use crate::error::{Error, Result};
use crate::spec::LimitKind;

/// Admit `cost` units on `site` now (`commit`), or peek: for `key` on a keyed rate limit, else
/// on an unkeyed one.
///
/// # Errors
///
/// As the kind's own call; [`Error::WrongKind`] for a call the kind does not have.
#[inline(always)]
pub(crate) fn decide<C: Clock>(
    site: &Site<C>,
    key: Option<&[u8]>,
    cost: u64,
    commit: bool,
) -> Result<Decision> {
    let site = site.follow()?;
    match (site.kind(), key) {
        (LimitKind::TokenBucket, None) if commit => Bucket(site).try_acquire(cost),
        (LimitKind::Window, None) if commit => Window(site).try_acquire(cost),
        (LimitKind::SlidingLog, None) if commit => Log(site).try_acquire(cost),
        (LimitKind::TokenBucket, None) => Bucket(site).run(cost, false, None),
        (LimitKind::Window, None) => Window(site).run(cost, false, None),
        (LimitKind::SlidingLog, None) => Log(site).run(cost, false, None),
        (LimitKind::KeyedTokenBucket | LimitKind::KeyedWindow, Some(key)) if commit => {
            Keyed(site).try_acquire_key(key, cost)
        }
        (LimitKind::KeyedTokenBucket | LimitKind::KeyedWindow, Some(key)) => {
            Keyed(site).peek_key(key, cost)
        }
        _ if cost == 0 => Err(Error::ZeroCost),
        (kind, key) => Err(refusal(site, kind, key.is_some())),
    }
}

/// Give back what `grant` admitted: for `key` on a keyed rate limit, else on an unkeyed one.
///
/// # Errors
///
/// As the kind's own refund; [`Error::WrongKind`] for a call the kind does not have.
pub(crate) fn refund<C: Clock>(site: &Site<C>, key: Option<&[u8]>, grant: &Decision) -> Result<()> {
    // The limit that made the grant decides how it is given back.
    let maker = site.maker_of(grant);
    match (maker.kind(), key) {
        (LimitKind::TokenBucket, None) => Bucket(maker).refund_units(grant, grant.cost),
        (LimitKind::Window, None) => Window(maker).refund_units(grant, grant.cost),
        (LimitKind::SlidingLog, None) => Log(maker).refund_units(grant, grant.cost),
        (LimitKind::KeyedTokenBucket | LimitKind::KeyedWindow, Some(key)) => {
            Keyed(site).refund_key(key, grant)
        }
        (LimitKind::Concurrency, None) => {
            Err(maker.wrong_kind("is a concurrency limit: drop the permit"))
        }
        (
            LimitKind::KeyedTokenBucket | LimitKind::KeyedWindow | LimitKind::KeyedConcurrency,
            None,
        ) => Err(maker.wrong_kind("is keyed: use refund_key")),
        (kind, None) => Err(refusal(maker, kind, false)),
        (kind, Some(_)) => Err(refusal(maker, kind, true)),
    }
}

/// A permit of a concurrency limit: for `key` on a keyed one, else on an unkeyed one; `None`
/// while every permit is held.
///
/// # Errors
///
/// As the kind's own call; [`Error::WrongKind`] for a limit that is not a concurrency limit of
/// that shape.
pub(crate) fn try_acquire_permit<C: Clock>(
    site: &Site<C>,
    key: Option<&[u8]>,
) -> Result<Option<Permit<C>>> {
    // A clock read: permits follow a replaced file on every call.
    let site = site.current()?;
    match (site.kind(), key) {
        (LimitKind::Concurrency, None) => Permits(site).try_acquire_permit(),
        (LimitKind::KeyedConcurrency, Some(key)) => Permits(site).try_acquire_key_permit(key),
        (LimitKind::KeyedConcurrency, None) => {
            Err(site.wrong_kind("is a keyed concurrency limit: use try_acquire_key_permit"))
        }
        (LimitKind::Concurrency, Some(_)) => {
            Err(site.wrong_kind("is not keyed: use try_acquire_permit"))
        }
        (
            kind @ (LimitKind::AdaptiveConcurrency
            | LimitKind::KeyedAdaptiveConcurrency
            | LimitKind::Counters),
            _,
        ) => Err(refusal(site, kind, false)),
        _ => Err(site.wrong_kind("is not a concurrency limit")),
    }
}

/// Why a rate call, keyed or not, is not one `kind` has.
#[cold]
fn refusal<C: Clock>(site: &Site<C>, kind: LimitKind, keyed_call: bool) -> Error {
    use LimitKind::*;
    site.wrong_kind(match (kind, keyed_call) {
        (Concurrency, false) => "is a concurrency limit: use try_acquire_permit",
        (KeyedConcurrency, true) => "is a keyed concurrency limit: use try_acquire_key_permit",
        (TokenBucket | Window | SlidingLog | Concurrency, true) => "is not keyed: use try_acquire",
        (KeyedTokenBucket | KeyedWindow | KeyedConcurrency, false) => {
            "is keyed: use try_acquire_key"
        }
        // A kind with calls of its own (adaptive concurrency, counters).
        (kind, _) => {
            return site.wrong_kind(&format!(
                "is {} {kind}: resolve it with Limiter::{}",
                kind.article(),
                kind.accessor()
            ))
        }
    })
}

/// The first half of a composed check's decision dated by one clock read for all its limits:
/// the site to decide on (following a replaced file) and its state word, loaded now. `None`
/// for a limit whose state is not one word (keyed, split, a sliding log, permits): it is
/// decided on its own.
#[inline(always)]
pub(crate) fn load_word<C: Clock>(site: &Site<C>) -> Result<Option<Loaded<'_, C>>> {
    let site = site.follow()?;
    match site.kind() {
        LimitKind::TokenBucket if site.plain_bucket => {}
        LimitKind::Window => {}
        _ => return Ok(None),
    }
    // Acquire: as in `try_decide`.
    let word = site.control(0).load(std::sync::atomic::Ordering::Acquire);
    Ok(Some(Loaded { site, word }))
}

/// A state word [`load_word`] loaded: an unsplit token bucket's or a window's.
pub(crate) struct Loaded<'a, C: Clock> {
    /// The site the word is on.
    pub(crate) site: &'a Site<C>,
    word: u64,
}

// A reference and a word whatever the clock (a derive would require `C: Copy`).
impl<C: Clock> Clone for Loaded<'_, C> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<C: Clock> Copy for Loaded<'_, C> {}

impl<C: Clock> Loaded<'_, C> {
    /// The second half: admit `cost` from the loaded word, dated `t` (a clock read after every
    /// load); a retry reads the clock again. The engine is the one [`load_word`] matched: an
    /// unsplit bucket (the only sites with `plain_bucket`) or a window (two words on the
    /// stack per check, not three: the kind kept beside the word cost 8 instructions per
    /// check, `benches/instructions.sh`).
    #[inline(always)]
    pub(crate) fn acquire(&self, t: u64, cost: u64) -> Result<Decision> {
        if self.site.plain_bucket {
            Bucket(self.site).acquire_loaded(self.word, t, cost)
        } else {
            Window(self.site).acquire_loaded(self.word, t, cost)
        }
    }
}
