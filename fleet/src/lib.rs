//! Fleet budgets: per-host shares of one fleet-wide budget, allocated through Redis.
//!
//! Each host runs one [`Agent`] beside its workers. The workers decide on the host's limiter
//! file as always (never talking to Redis); the agent retunes the host's token bucket
//! ([`shmlimit::TokenBucketLimit::set_token_bucket`]) to the share that Redis granted it. Redis is the only
//! authority on allocations; there is no consensus protocol.
//!
//! ## Protocol
//!
//! Every `ttl / 5` the agent runs one Lua script ([`protocol`]) on the keys under the hash tag
//! `{fleet:NAME}`. Atomically, the script
//!
//! 1. expires the leases that ended (server `TIME`): a dead member keeps only its reserved
//!    minimum, or disappears;
//! 2. renews this member's lease (`now + ttl`), records its weight;
//! 3. lowers its grant to what the agent reports it applies (`held`): released budget;
//! 4. computes its target `min + floor((total - reserved) x weight / live weights)`;
//! 5. grows its grant toward the target, only into `free = total - the other grants`.
//!
//! So `sum of grants <= total` always holds on the server. The agent raises its local share only
//! after the server recorded the grant, and lowers it before it reports the lower `held`: so on
//! every host `local share <= granted share` while its lease runs. When a host joins, the others
//! see a lower target at their next renewal, lower locally, release; the newcomer grows into the
//! released budget. When a host leaves cleanly it sets its floor, then deletes its record. When it
//! dies, its grant stays counted until its lease expires on the server.
//!
//! ## Fencing
//!
//! The lease on the server starts when the script runs, after the agent sent the request at
//! `sent` (its monotonic clock). A renewal that succeeded gives the lease deadline
//! `sent + ttl - margin` (margin `ttl / 4` by default), which the agent writes into the limiter
//! file next to the share ([`shmlimit::TokenBucketLimit::set_fleet_deadline`]; the bucket is made
//! fleet-managed with [`shmlimit::TokenBucketLimit::fleet_manage`]). Every decision on the bucket compares
//! its clock read with the deadline and past it decides with the fence (the part of the
//! reserved minimum the server holds for the host, or the floor): no stall or death of the
//! agent or of its [`Guard`] keeps a share past its lease. The share and the deadline are
//! written in a safe order: a lowered share before the new deadline, a raised one after it.
//! The deadline ends the share before the lease can end on the server if the host's clock runs
//! no more than `margin / ttl` (25%) slower than the server's over one lease. A watchdog thread
//! also retunes the share to the fence at that point (for observers), and a guard process sets
//! the floor when the agent dies.
//!
//! ## States of one host
//!
//! ```text
//!               start: floor applied
//!                      |
//!                      v
//!   +-------------> UNLEASED (floor / reserved min) <-------------------+
//!   |                  | renewal ok (epoch learnt, then grants)         |
//!   |                  v                                                |
//!   |   +---------> LEASED (local = min(granted, target)) ---+          |
//!   |   | renewal ok   |  |  renewal fails: keep the share   |          |
//!   |   +--------------+  |  until the fence point           |          |
//!   |                     |                                  | sent + ttl - margin passes
//!   |  new epoch (server  |                                  v          |
//!   +-- lost its state) --+                              FENCED (min) --+
//!                         | SIGTERM: floor, release      (renewal ok: LEASED)
//!                         v
//!                       LEFT (floor)
//! ```
//!
//! ## Unavailability
//!
//! Redis unreachable at start: the host stays at its floor. Later: it keeps the last granted
//! share until the fence point, then holds its minimum; never an unrestricted fallback.
//! A server whose state is not its own (restart, flush, reload, failover: no epoch, or another
//! process's `run_id`) begins a new epoch: every agent re-asserts the share whose lease still
//! runs on its host, admitted up to the total, and keeps deciding at it; nothing more is granted
//! until an agent has seen the epoch for one lease on its own monotonic clock, by which time
//! every lease of the lost state has fenced on its holder. See `docs/fleet.md`.

#![warn(missing_docs, clippy::undocumented_unsafe_blocks)]

mod agent;
pub mod cli;
#[cfg(test)]
mod loom_models;
#[cfg(test)]
mod model;
pub mod protocol;
pub mod share;

pub use agent::{
    default_member, host_name, run, spawn_guard, status, Agent, AgentConfig, AgentSnapshot,
    FleetError, Guard, DEFAULT_TTL,
};
pub use protocol::{FleetStatus, MemberStatus, Renewal};
pub use share::LocalShare;
