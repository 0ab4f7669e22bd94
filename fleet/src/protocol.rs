//! The fleet's state in Redis and the one Lua script that changes it.
//!
//! Keys (one hash tag, so a Redis Cluster keeps them in one slot):
//!
//! | key | type | content |
//! |---|---|---|
//! | `{fleet:NAME}:members` | hash | member id -> `"weight grant min lease_expiry_ms joined_ms instance demand applied"` |
//! | `{fleet:NAME}:config` | hash | `epoch`, `total` (units), `ttl` (ms), `quiet_until` (ms) |
//!
//! Shares are integers in [`UNITS_PER_TOKEN`] units per second (micro-tokens per second), so the
//! server does exact integer arithmetic (Lua numbers are doubles, exact below 2^53; totals are
//! capped at [`MAX_TOTAL_UNITS`]). Times are the server's `TIME` in milliseconds.
//!
//! The script runs atomically on the server and keeps the invariant
//! `sum over all records of grant <= total`: a grant only grows into `free = total - sum of the
//! other records' grants - own grant`, and every other change lowers a grant.

use std::time::Duration;

use redis::{ConnectionLike, Script, Value};

/// Share units per token per second: shares are kept in micro-tokens per second.
pub const UNITS_PER_TOKEN: u64 = 1_000_000;

/// The largest fleet total in units (about 2^50, so that the server's double arithmetic on
/// `total x weight` stays exact for weights up to [`MAX_WEIGHT`]).
pub const MAX_TOTAL_UNITS: u64 = 1 << 40;

/// The largest weight a member may have.
pub const MAX_WEIGHT: u32 = 1 << 12;

/// The script (`fleet.lua` beside this file): `renew` and `leave`.
const SCRIPT: &str = include_str!("fleet.lua");

/// What one renewal answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Renewal {
    /// The state's epoch (a new one after the server lost its state).
    pub epoch: String,
    /// The share granted to this member (units), including its minimum.
    pub granted: u64,
    /// The share this member converges to (units).
    pub target: u64,
    /// The server's time (ms).
    pub server_now_ms: u64,
    /// When the lease ends on the server (server ms).
    pub lease_expiry_ms: u64,
    /// Live members, this one included.
    pub live: u64,
    /// Sum of the live members' weights.
    pub weights: u64,
}

/// The member's request to the script.
#[derive(Debug, Clone)]
pub struct Request<'a> {
    /// The fleet's name.
    pub fleet: &'a str,
    /// This member's id.
    pub member: &'a str,
    /// Its weight.
    pub weight: u32,
    /// Its reserved minimum (units).
    pub min: u64,
    /// The share it applies locally right now (units); the server lowers the grant to it.
    pub held: u64,
    /// The lease.
    pub ttl: Duration,
    /// The fleet total (units).
    pub total: u64,
    /// The epoch this member's last grant came from (empty if none).
    pub epoch: &'a str,
    /// This agent process's instance id (alphanumeric): a second agent with the same member
    /// id is refused while the first one's lease runs.
    pub instance: &'a str,
    /// The host's demand (units: decisions per second on the limit, admitted or denied,
    /// smoothed; the total when not yet known): shares follow demand, max-min fair by weight.
    pub demand: u64,
    /// The agent has seen `epoch` for one lease or longer on its own monotonic clock: every
    /// lease of any earlier state has ended on its holder by then, and the epoch may grant
    /// more than what its members re-assert (see docs/fleet.md).
    pub opens: bool,
}

/// The members hash of fleet `name`.
pub fn members_key(name: &str) -> String {
    format!("{{fleet:{name}}}:members")
}

/// The config hash of fleet `name`.
pub fn config_key(name: &str) -> String {
    format!("{{fleet:{name}}}:config")
}

fn script() -> Script {
    Script::new(SCRIPT)
}

fn invoke(con: &mut dyn ConnectionLike, op: &str, r: &Request<'_>) -> redis::RedisResult<Value> {
    script()
        .key(members_key(r.fleet))
        .key(config_key(r.fleet))
        .arg(op)
        .arg(r.member)
        .arg(r.weight)
        .arg(r.min)
        .arg(r.held)
        .arg(r.ttl.as_millis() as u64)
        .arg(r.total)
        .arg(r.epoch)
        .arg(r.instance)
        .arg(r.demand)
        .arg(if r.opens { "1" } else { "0" })
        .invoke(con)
}

/// Register or renew the member's lease, release what it does not hold and grow its grant into
/// free budget (atomically, on the server).
///
/// # Errors
///
/// Any Redis error, including the script's `FLEETCONFIG` (total or TTL differ from the live
/// members'), `FLEETMIN` (reserved minimums exceed the total) and `FLEETDUP` (another agent
/// holds this member id's lease).
pub fn renew(con: &mut dyn ConnectionLike, r: &Request<'_>) -> redis::RedisResult<Renewal> {
    let v = invoke(con, "renew", r)?;
    let (epoch, granted, target, server_now_ms, lease_expiry_ms, live, weights): (
        String,
        u64,
        u64,
        u64,
        u64,
        u64,
        u64,
    ) = redis::from_redis_value(&v)?;
    Ok(Renewal {
        epoch,
        granted,
        target,
        server_now_ms,
        lease_expiry_ms,
        live,
        weights,
    })
}

/// Remove the member (its grant and its reserved minimum return to the fleet at once), if
/// this agent instance holds it.
///
/// # Errors
///
/// Any Redis error.
pub fn leave(con: &mut dyn ConnectionLike, r: &Request<'_>) -> redis::RedisResult<()> {
    invoke(con, "leave", r).map(|_| ())
}

/// One member as the server records it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberStatus {
    /// Member id.
    pub id: String,
    /// Weight.
    pub weight: u64,
    /// Granted share (units).
    pub granted: u64,
    /// Reserved minimum (units).
    pub min: u64,
    /// The target share under the current membership (units; 0 for an expired member).
    pub target: u64,
    /// Whether its lease is still running.
    pub live: bool,
    /// Time since its last renewal (ms).
    pub lease_age_ms: i64,
    /// Time until its lease expires on the server (ms; negative once expired).
    pub expires_in_ms: i64,
    /// Server time of the lease's end (ms).
    pub lease_expiry_ms: u64,
    /// Time since it joined (ms).
    pub member_for_ms: i64,
    /// The demand it reported last (units; the total when unknown).
    pub demand: u64,
    /// The share its host applied when it last renewed (units; a host whose lease has
    /// ended is at its fence, at most its kept minimum).
    pub applied: u64,
}

/// The script's split of `avail` (units) among members `(weight, wanted above the minimum)`:
/// max-min fair by weight (water-filling). Members that want less than their weighted part of
/// what is left get what they want; the others share the rest by weight; what nobody wants is
/// spread by weight over everyone. The parts add up to at most `avail`.
///
/// ```
/// use shmlimit_fleet::protocol::fair_parts;
/// // Two busy members and an idle one: the busy ones share what the idle one leaves.
/// assert_eq!(fair_parts(1000, &[(1, 5000), (1, 5000), (1, 0)]), vec![500, 500, 0]);
/// // Nobody wants much: what is left is spread by weight.
/// assert_eq!(fair_parts(1000, &[(3, 100), (1, 100)]), vec![100 + 600, 100 + 200]);
/// ```
pub fn fair_parts(avail: u64, members: &[(u64, u64)]) -> Vec<u64> {
    let sum_w: u128 = members.iter().map(|m| m.0 as u128).sum();
    let mut done: Vec<Option<u64>> = vec![None; members.len()];
    let (mut rem, mut open_w) = (avail as u128, sum_w);
    let mut changed = true;
    while changed && open_w > 0 {
        changed = false;
        for (i, &(w, e)) in members.iter().enumerate() {
            if done[i].is_none() && e as u128 * open_w <= rem * w as u128 {
                done[i] = Some(e);
                rem -= e as u128;
                open_w -= w as u128;
                changed = true;
            }
        }
    }
    members
        .iter()
        .zip(done)
        .map(|(&(w, _), d)| match d {
            None => (rem * w as u128 / open_w) as u64,
            Some(e) if open_w == 0 => e + (rem * w as u128 / sum_w.max(1)) as u64,
            Some(e) => e,
        })
        .collect()
}

/// The fleet as the server records it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FleetStatus {
    /// The fleet's name.
    pub fleet: String,
    /// The state's epoch (empty if the fleet has no state).
    pub epoch: String,
    /// The fleet total (units; 0 if no state).
    pub total: u64,
    /// The lease (ms).
    pub ttl_ms: u64,
    /// Server time (ms).
    pub server_now_ms: u64,
    /// The server's estimate of the end of the quarantine after a new epoch (server ms): one
    /// lease after the epoch began, or its start for a fleet that never had state here.
    pub quiet_until_ms: u64,
    /// Whether the epoch grants more than what its members re-assert: from its start for a
    /// fleet that never had state on this server, else once an agent has seen the epoch for
    /// one lease on its own clock.
    pub open: bool,
    /// Members, sorted by id.
    pub members: Vec<MemberStatus>,
}

impl FleetStatus {
    /// Sum of the recorded grants (units), expired reservations included.
    pub fn granted(&self) -> u64 {
        self.members.iter().map(|m| m.granted).sum()
    }
}

/// Read the fleet's state (one `MULTI`/`EXEC`: a consistent snapshot). Read-only.
///
/// # Errors
///
/// Any Redis error.
pub fn status(con: &mut dyn ConnectionLike, fleet: &str) -> redis::RedisResult<FleetStatus> {
    type Fields = Vec<(String, String)>;
    let (time, config, raw): (Vec<u64>, Fields, Fields) = redis::pipe()
        .atomic()
        .cmd("TIME")
        .cmd("HGETALL")
        .arg(config_key(fleet))
        .cmd("HGETALL")
        .arg(members_key(fleet))
        .query(con)?;
    let now = time.first().copied().unwrap_or(0) * 1000 + time.get(1).copied().unwrap_or(0) / 1000;
    let get = |k: &str| config.iter().find(|(f, _)| f == k).map(|(_, v)| v.as_str());
    let num = |k: &str| get(k).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
    let total = num("total");
    let ttl = num("ttl");
    let mut members = Vec::new();
    for (id, rec) in raw {
        let fields: Vec<&str> = rec.split(' ').collect();
        let f: Vec<u64> = fields
            .iter()
            .take(5)
            .filter_map(|x| x.parse().ok())
            .collect();
        if f.len() != 5 {
            continue;
        }
        let demand = fields.get(6).and_then(|d| d.parse().ok()).unwrap_or(total);
        let applied: u64 = fields.get(7).and_then(|d| d.parse().ok()).unwrap_or(0);
        let (w, g, mn, exp, joined) = (f[0], f[1], f[2], f[3], f[4]);
        let live = exp >= now;
        members.push(MemberStatus {
            id,
            weight: w,
            granted: if live { g } else { g.min(mn) },
            min: mn,
            target: 0,
            live,
            lease_age_ms: now as i64 - (exp as i64 - ttl as i64),
            expires_in_ms: exp as i64 - now as i64,
            lease_expiry_ms: exp,
            member_for_ms: now as i64 - joined as i64,
            demand,
            applied: if live {
                applied
            } else {
                applied.min(g.min(mn))
            },
        });
    }
    members.sort_by(|a, b| a.id.cmp(&b.id));
    let reserved: u64 = members
        .iter()
        .map(|m| if m.live { m.min } else { m.granted })
        .sum();
    let avail = total.saturating_sub(reserved);
    let live: Vec<(u64, u64)> = members
        .iter()
        .filter(|m| m.live)
        .map(|m| (m.weight, (m.demand + m.demand / 4).saturating_sub(m.min)))
        .collect();
    let parts = fair_parts(avail, &live);
    for (m, part) in members.iter_mut().filter(|m| m.live).zip(parts) {
        m.target = m.min + part;
    }
    Ok(FleetStatus {
        fleet: fleet.to_string(),
        epoch: get("epoch").unwrap_or("").to_string(),
        total,
        ttl_ms: ttl,
        server_now_ms: now,
        quiet_until_ms: num("quiet_until"),
        open: get("open") == Some("1"),
        members,
    })
}
