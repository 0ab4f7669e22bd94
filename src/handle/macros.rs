//! The macros that give each typed handle its methods: one per group of operations, each
//! method forwarding to the untyped [`Limit`](crate::Limit) with no check added (see the module
//! docs of `handle`).

/// The type, its `Clone`/`Debug`, its conversions and the methods every kind shares.
macro_rules! typed_handle {
    ($name:ident, $kind:expr, $accessor:ident) => {
        impl<C: Clock> Clone for $name<C> {
            fn clone(&self) -> Self {
                $name(self.0.clone())
            }
        }

        impl<C: Clock> std::fmt::Debug for $name<C> {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.debug_struct(stringify!($name))
                    .field("name", &self.name())
                    .field("algorithm", self.algorithm())
                    .finish()
            }
        }

        impl<C: Clock> TryFrom<Limit<C>> for $name<C> {
            type Error = Error;
            /// The typed handle of `limit`, or [`Error::WrongKind`] if it is of another kind.
            fn try_from(limit: Limit<C>) -> Result<Self> {
                limit.typed($kind).map($name)
            }
        }

        impl<C: Clock> From<$name<C>> for Limit<C> {
            fn from(handle: $name<C>) -> Limit<C> {
                handle.0
            }
        }

        impl<C: Clock> AsRef<Limit<C>> for $name<C> {
            fn as_ref(&self) -> &Limit<C> {
                &self.0
            }
        }

        impl<C: Clock> $crate::handle::sealed::Sealed for $name<C> {}

        impl<C: Clock> TypedLimit<C> for $name<C> {
            fn as_limit(&self) -> &Limit<C> {
                &self.0
            }
        }

        impl<C: Clock> Limiter<C> {
            #[doc = concat!(
                "Resolve the limit `name` as a [`", stringify!($name), "`], once; the handle is ",
                "what the hot path uses.\n\n# Errors\n\n[`Error::UnknownLimit`]; ",
                "[`Error::WrongKind`] if the limit is of another kind (the error names the ",
                "accessor that resolves it)."
            )]
            pub fn $accessor(&self, name: &str) -> Result<$name<C>> {
                self.limit(name)?.try_into()
            }
        }

        impl<C: Clock> $name<C> {
            /// The limit's name.
            pub fn name(&self) -> &str {
                self.0.name()
            }

            /// Its definition as stored in the file.
            pub fn def(&self) -> &crate::spec::LimitDef {
                self.0.def()
            }

            /// Its algorithm and parameters as defined at creation.
            pub fn algorithm(&self) -> &Algorithm {
                self.0.algorithm()
            }

            /// The most one decision can grant under the current (possibly retuned) parameters.
            pub fn capacity(&self) -> u64 {
                self.0.capacity()
            }

            /// The clock this handle decides with.
            pub fn clock(&self) -> &C {
                self.0.clock()
            }

            /// Decisions of this limit so far, summed over all processes.
            pub fn stats(&self) -> crate::limiter::Stats {
                self.0.stats()
            }

            /// The algorithm with its live parameters (after any retune).
            ///
            /// # Errors
            ///
            /// [`Error::CorruptState`] when the live parameters are damaged.
            pub fn live_algorithm(&self) -> Result<Algorithm> {
                self.0.live_algorithm()
            }

            /// This limit's quota per window from its live parameters, for the
            /// `RateLimit-Policy` header; `None` for a concurrency limit.
            ///
            /// # Errors
            ///
            /// [`Error::CorruptState`] if the live parameters in the file are damaged.
            pub fn policy(&self) -> Result<Option<crate::headers::Policy>> {
                self.0.policy()
            }

            /// Return the limit's state to fresh (full bucket, empty windows, log and table, no
            /// permits), keeping its live parameters. What this grants: the whole capacity, at
            /// once.
            ///
            /// # Errors
            ///
            /// [`Error::Io`] if the retune lock cannot be taken.
            pub fn reset(&self) -> Result<()> {
                self.0.reset()
            }

            /// The kind of this limit.
            pub fn kind(&self) -> LimitKind {
                $kind
            }

            /// The untyped inspection view of this limit (for
            /// [`RateLimitHeaders::for_decisions`](crate::RateLimitHeaders::for_decisions),
            /// listings, ...).
            pub fn as_limit(&self) -> &Limit<C> {
                &self.0
            }
        }
    };
}
pub(super) use typed_handle;

/// The decisions of an unkeyed rate limit (token bucket, window, sliding log).
macro_rules! unkeyed_rate {
    ($name:ident, $try_acquire:ident) => {
        impl<C: Clock> RateLimit<C> for $name<C> {
            #[inline(always)]
            fn try_acquire(&self, cost: u64) -> Result<Decision> {
                self.0.$try_acquire(cost)
            }
            #[inline(always)]
            fn peek(&self, cost: u64) -> Result<Decision> {
                self.0.peek(cost)
            }
            fn try_acquire_at(&self, cost: u64, now_ns: u64) -> Result<Decision> {
                self.0.try_acquire_at(cost, now_ns)
            }
            fn refund(&self, grant: &Decision) -> Result<()> {
                self.0.refund(grant)
            }
            fn refund_units(&self, grant: &Decision, units: u64) -> Result<()> {
                self.0.refund_units(grant, units)
            }
            fn acquire_timeout(&self, cost: u64, timeout: Duration) -> Result<Decision> {
                self.0.acquire_timeout(cost, timeout)
            }
        }

        impl<C: Clock> $name<C> {
            /// Admit `cost` units now, or deny and consume nothing.
            ///
            /// # Errors
            ///
            /// [`Error::ZeroCost`]; [`Error::CostExceedsCapacity`] when `cost` can never be
            /// granted; [`Error::CorruptState`] when the shared state is damaged (fail closed).
            #[inline(always)]
            pub fn try_acquire(&self, cost: u64) -> Result<Decision> {
                self.0.$try_acquire(cost)
            }

            /// The decision [`Self::try_acquire`] would make now, consuming nothing.
            ///
            /// # Errors
            ///
            /// As [`Self::try_acquire`].
            #[inline(always)]
            pub fn peek(&self, cost: u64) -> Result<Decision> {
                self.0.peek(cost)
            }

            /// [`Self::try_acquire`] dated at `now_ns` on the monotonic timeline instead of the
            /// clock (for replaying traces and for tests). A `now_ns` older than the stored
            /// state is clamped as any stale read is.
            ///
            /// A date is checked against the limit's clock (one clock read, on this dated path
            /// only): a date ahead of it by more than
            /// [`DATE_TOLERANCE`](crate::consts::DATE_TOLERANCE), or beyond what the state can
            /// encode ([`MAX_DATE_NS`](crate::consts::MAX_DATE_NS)), is
            /// refused, so that no date can leave a state that locks other processes out, opens
            /// the limit to them, or fails their decisions.
            ///
            /// A window (fixed, sliding, or a sliding log) decides a date ahead of the clock at the
            /// clock's time: a window's state names the window it counts, and moving it into a window
            /// the clock has not reached would count every other caller's decisions against the next
            /// window. A bucket decides at the date.
            ///
            /// # Errors
            ///
            /// As [`Self::try_acquire`]; [`Error::ClockOutOfRange`] for a date ahead of the
            /// clock by more than [`DATE_TOLERANCE`](crate::consts::DATE_TOLERANCE) or beyond
            /// [`MAX_DATE_NS`](crate::consts::MAX_DATE_NS), consuming nothing.
            pub fn try_acquire_at(&self, cost: u64, now_ns: u64) -> Result<Decision> {
                self.0.try_acquire_at(cost, now_ns)
            }

            /// Give back what `grant` admitted, for work that was admitted but never done.
            ///
            /// A refund can never create more budget than the grant took: a bucket never fills
            /// past full, a window refund only applies while the grant's window is still
            /// counted, and a log refund frees entries dated no later than the grant. Refunding
            /// a denied (or shadow-denied) decision is a no-op. Refund each grant at most once:
            /// a second refund of the same grant gives its cost back again, which is budget no
            /// request returned.
            ///
            /// # Errors
            ///
            /// [`Error::CorruptState`]; [`Error::WrongKind`] for a grant another limit made.
            pub fn refund(&self, grant: &Decision) -> Result<()> {
                self.0.refund(grant)
            }

            /// Give back `units` of what `grant` admitted (at most its cost).
            ///
            /// # Errors
            ///
            /// As [`Self::refund`].
            pub fn refund_units(&self, grant: &Decision, units: u64) -> Result<()> {
                self.0.refund_units(grant, units)
            }
        }
    };
}
pub(super) use unkeyed_rate;

/// The decisions of a keyed rate limit (keyed token bucket or window).
macro_rules! keyed_rate {
    ($name:ident) => {
        impl<C: Clock> KeyedRateLimit<C> for $name<C> {
            #[inline(always)]
            fn try_acquire_key(&self, key: &[u8], cost: u64) -> Result<Decision> {
                self.0.try_acquire_key(key, cost)
            }
            #[inline(always)]
            fn peek_key(&self, key: &[u8], cost: u64) -> Result<Decision> {
                self.0.peek_key(key, cost)
            }
            fn try_acquire_key_at(&self, key: &[u8], cost: u64, now_ns: u64) -> Result<Decision> {
                self.0.try_acquire_key_at(key, cost, now_ns)
            }
            fn refund_key(&self, key: &[u8], grant: &Decision) -> Result<()> {
                self.0.refund_key(key, grant)
            }
            fn key_occupancy(&self) -> (usize, usize) {
                self.0.key_occupancy()
            }
        }

        impl<C: Clock> $name<C> {
            /// Admit `cost` units for `key` now, or deny and consume nothing.
            ///
            /// A key seen for the first time gets a fresh state (a full bucket, empty windows);
            /// a key whose state is back to fresh may lose its slot to another key, which loses
            /// it nothing. When the table has no slot for a new key, the limit's
            /// [`FullPolicy`](crate::FullPolicy) decides.
            ///
            /// # Errors
            ///
            /// [`Error::ZeroCost`]; [`Error::InvalidKey`] for an empty key or one longer than
            /// [`MAX_KEY_LEN`](crate::consts::MAX_KEY_LEN); [`Error::CostExceedsCapacity`];
            /// [`Error::TableFull`] under [`FullPolicy::Error`](crate::FullPolicy::Error);
            /// [`Error::CorruptState`]; [`Error::WrongKind`] on a target without a 16-byte
            /// compare-and-swap.
            #[inline(always)]
            pub fn try_acquire_key(&self, key: &[u8], cost: u64) -> Result<Decision> {
                self.0.try_acquire_key(key, cost)
            }

            /// The decision [`Self::try_acquire_key`] would make now, consuming nothing and
            /// inserting nothing.
            ///
            /// # Errors
            ///
            /// As [`Self::try_acquire_key`].
            #[inline(always)]
            pub fn peek_key(&self, key: &[u8], cost: u64) -> Result<Decision> {
                self.0.peek_key(key, cost)
            }

            /// [`Self::try_acquire_key`] dated at `now_ns` on the monotonic timeline instead of
            /// the clock (for replaying traces and for tests); dates are checked as by
            /// [`TokenBucketLimit::try_acquire_at`](crate::TokenBucketLimit::try_acquire_at): at
            /// most [`DATE_TOLERANCE`](crate::consts::DATE_TOLERANCE) ahead of the clock.
            ///
            /// # Errors
            ///
            /// As [`Self::try_acquire_key`]; [`Error::ClockOutOfRange`].
            pub fn try_acquire_key_at(
                &self,
                key: &[u8],
                cost: u64,
                now_ns: u64,
            ) -> Result<Decision> {
                self.0.try_acquire_key_at(key, cost, now_ns)
            }

            /// Give back what `grant` (a decision for the same `key`) admitted, for work that
            /// was admitted but never done. Refunding a denied, shadow-denied or fail-open
            /// decision is a no-op.
            ///
            /// # Errors
            ///
            /// [`Error::InvalidKey`]; [`Error::CorruptState`]; [`Error::WrongKind`] for a grant
            /// another limit made.
            pub fn refund_key(&self, key: &[u8], grant: &Decision) -> Result<()> {
                self.0.refund_key(key, grant)
            }

            /// How many of the table's slots hold a key, and how many slots it has.
            pub fn key_occupancy(&self) -> (usize, usize) {
                self.0.key_occupancy()
            }

            /// Retire every key whose state is back to fresh (bucket full, windows over), and
            /// any pending claim a killed process left behind; returns how many were retired.
            /// Decisions reclaim idle slots on demand, so this is never needed for correctness:
            /// it is an explicit garbage-collection pass (the CLI's `gc`) that reads every slot.
            pub fn reclaim_idle_keys(&self) -> usize {
                self.0.reclaim_idle_keys()
            }

            /// The tag this file's key tables know `key` by: a 63-bit keyed hash of its bytes
            /// under the file's secret seed (the same in every process and language).
            ///
            /// # Errors
            ///
            /// [`Error::InvalidKey`].
            pub fn key_tag(&self, key: &[u8]) -> Result<u64> {
                self.0.key_tag(key)
            }
        }
    };
}
pub(super) use keyed_rate;

/// The live retunes of a token bucket, keyed or not, and fleet management.
macro_rules! bucket_retune {
    ($name:ident) => {
        impl<C: Clock> $name<C> {
            /// Change the refill rate, live: every process attached picks it up on its next
            /// decision, without reopening.
            ///
            /// The tokens already used are carried over (the bucket's fill level in tokens is
            /// kept), so the transition never admits more than the larger of the old and new
            /// bounds over any interval. Retunes are serialised across processes by an
            /// exclusive `flock` on the file. A fleet-managed bucket stays fleet-managed: the
            /// new rate holds until its lease deadline, like the share it replaces.
            ///
            /// # Errors
            ///
            /// [`Error::InvalidParameter`] for a rate and capacity that do not fit;
            /// [`Error::CorruptState`]; [`Error::Io`] if the retune lock cannot be taken.
            pub fn set_rate(&self, rate: Rate) -> Result<()> {
                self.0.set_rate(rate)
            }

            /// Change the capacity and the rate together, live (see [`Self::set_rate`]).
            ///
            /// # Errors
            ///
            /// As [`Self::set_rate`].
            pub fn set_token_bucket(&self, capacity: u64, rate: Rate) -> Result<()> {
                self.0.set_token_bucket(capacity, rate)
            }

            /// Make this bucket fleet-managed (see `docs/fleet.md`): its rate becomes a share that
            /// holds only until the lease deadline ([`Self::set_fleet_deadline`]); a decision
            /// past it decides with the fence bucket `fence_capacity`, `fence_rate` (the host's
            /// reserved minimum, or the floor) instead. The share is set to the fence and the
            /// deadline to 0, so the bucket starts fenced. Calling it again changes the fence
            /// (the share and deadline are then left as they are); the fence must never be
            /// above what the host may spend without a lease.
            ///
            /// The cost on each decision: one compare, one load of the deadline on the 64 bytes
            /// the decision already reads, and one compare with its `now`.
            ///
            /// # Errors
            ///
            /// As [`Self::set_rate`].
            pub fn fleet_manage(&self, fence_capacity: u64, fence_rate: Rate) -> Result<()> {
                self.0.fleet_manage(fence_capacity, fence_rate)
            }

            /// Set a fleet-managed bucket's lease deadline, in nanoseconds on this limit's
            /// clock (its [`Clock::now_ns`]): its share holds for decisions dated before it. A
            /// deadline more than 2^40 ns (about 18 minutes) ahead of a decision is treated as
            /// damage, and fences.
            ///
            /// Keep the pair (share, deadline) safe at every instant: extend the deadline after
            /// a share is lowered, and before a share is raised.
            ///
            /// # Errors
            ///
            /// [`Error::WrongKind`] if the bucket is not fleet-managed.
            pub fn set_fleet_deadline(&self, deadline_ns: u64) -> Result<()> {
                self.0.set_fleet_deadline(deadline_ns)
            }

            /// End fleet management: the current share becomes a plain rate.
            ///
            /// # Errors
            ///
            /// As [`Self::set_rate`].
            pub fn end_fleet_management(&self) -> Result<()> {
                self.0.end_fleet_management()
            }

            /// The fleet lease at this instant, `None` if the bucket is not fleet-managed.
            ///
            /// # Errors
            ///
            /// [`Error::CorruptState`] when the parameters or the fence are damaged.
            pub fn fleet_lease(&self) -> Result<Option<crate::limiter::FleetLease>> {
                self.0.fleet_lease()
            }
        }
    };
}
pub(super) use bucket_retune;

/// The live retunes of a fixed or sliding window, keyed or not.
macro_rules! window_retune {
    ($name:ident) => {
        impl<C: Clock> $name<C> {
            /// Change the window's limit `L`, live: within the window in which it changes, at
            /// most the larger of the old and new limits is admitted.
            ///
            /// # Errors
            ///
            /// [`Error::InvalidParameter`] for a bad limit; [`Error::Io`] if the retune lock
            /// cannot be taken.
            pub fn set_limit(&self, limit: u64) -> Result<()> {
                self.0.set_limit(limit)
            }

            /// Change the limit to what `rate` means per window, rounded down (never looser).
            ///
            /// # Errors
            ///
            /// As [`Self::set_limit`].
            pub fn set_rate(&self, rate: Rate) -> Result<()> {
                self.0.set_rate(rate)
            }
        }
    };
}
pub(super) use window_retune;

/// The permit operations both concurrency kinds share.
macro_rules! permit_common {
    ($name:ident) => {
        impl<C: Clock> $name<C> {
            /// Release the permit named by `id` ([`Permit::id`](crate::Permit::id) /
            /// [`Permit::into_id`](crate::Permit::into_id)), if this process holds it.
            /// `Ok(false)` when it does not: already released, taken over after its lease, a
            /// reset, another process's permit, or an id that names nothing.
            ///
            /// # Errors
            ///
            /// [`Error::Io`] if this process's own `/proc/self/stat` cannot be read.
            pub fn release_permit(&self, id: u64) -> Result<bool> {
                self.0.release_permit(id)
            }

            /// Who holds this limit's permits now (see [`Limit::permit_holders`]).
            pub fn permit_holders(&self) -> Vec<crate::permit::PermitHolder> {
                self.0.permit_holders()
            }

            /// Free every permit whose owner is gone or whose lease expired, and wake waiters
            /// for them; returns how many. Acquirers do the same on their slow path, so this is
            /// never needed for correctness.
            pub fn reclaim_dead_permits(&self) -> usize {
                self.0.reclaim_dead_permits()
            }
        }
    };
}
pub(super) use permit_common;
