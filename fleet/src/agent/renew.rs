//! The renewal loop: one script call every `ttl / 5`, the answer applied to the limit in a
//! safe order, and the clean leave at the end.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use super::local::Shared;
use super::meter::Meter;
use crate::protocol;
use crate::share;
use shmlimit::Clock;

pub(super) fn connect(
    client: &redis::Client,
    io: Duration,
) -> redis::RedisResult<redis::Connection> {
    let con = client.get_connection_with_timeout(io)?;
    con.set_read_timeout(Some(io))?;
    con.set_write_timeout(Some(io))?;
    Ok(con)
}

pub(super) fn renew_loop(s: &Shared, client: &redis::Client, stop: &AtomicBool) {
    let io = s.cfg.renew_every;
    let mut con: Option<redis::Connection> = None;
    let mut failing = false;
    let mut meter = Meter::default();
    // Relaxed: polled flag.
    while !stop.load(Ordering::Relaxed) {
        let tick = Instant::now();
        let again = renew_once(s, client, io, &mut con, &mut failing, &mut meter);
        if s.fatal.lock().unwrap_or_else(|p| p.into_inner()).is_some() {
            break;
        }
        if again {
            continue;
        }
        let next = tick + s.cfg.renew_every;
        // Relaxed: polled flag.
        while !stop.load(Ordering::Relaxed) {
            let now = Instant::now();
            if now >= next {
                break;
            }
            std::thread::sleep((next - now).min(Duration::from_millis(10)));
        }
    }
    // Leave: the minimum first, then release on the server (best effort: if the server is
    // unreachable, the grant returns when the lease expires).
    let epoch = {
        let mut l = s.lock();
        // The reserved minimum returns to the fleet with the record: share and fence at the
        // floor first (the fence before the share), and no lease.
        s.apply(&mut l, 0, "leave");
        s.set_deadline(0);
        l.fence_at = None;
        l.epoch.clone()
    };
    let con = match con.take() {
        Some(c) => Ok(c),
        None => connect(client, io),
    };
    let done = con.and_then(|mut c| protocol::leave(&mut c, &s.request(0, &epoch, 0, false)));
    match done {
        Ok(()) => eprintln!("fleet[{}/{}] left", s.cfg.fleet, s.cfg.member),
        Err(e) => eprintln!(
            "fleet[{}/{}] leaving: {e}; the grant returns when the lease expires",
            s.cfg.fleet, s.cfg.member
        ),
    }
}

/// One renewal. Returns true to renew again at once (a share to release, or a new epoch).
fn renew_once(
    s: &Shared,
    client: &redis::Client,
    io: Duration,
    con: &mut Option<redis::Connection>,
    failing: &mut bool,
    meter: &mut Meter,
) -> bool {
    let demand = meter.demand(s);
    // What this host holds: the share it applies while its lease runs here (`claimed_until`,
    // its fence point), else its fence. The server lowers the grant to it, and a new epoch
    // admits it as a re-assertion (see `reasserted` below).
    let (held, claimed_until, epoch, opens) = {
        let l = s.lock();
        let now = Instant::now();
        let (held, until) = match l.fence_at {
            Some(at) if now < at => (l.applied, Some(at)),
            // Past the deadline the file's fence decides (what the server holds for it).
            _ => (l.fence.min(l.applied), None),
        };
        // Seen for one lease on this clock: every lease of an earlier state has ended.
        let opens = l
            .epoch_seen
            .is_some_and(|seen| now.saturating_duration_since(seen) >= s.cfg.ttl);
        (held, until, l.epoch.clone(), opens)
    };
    // The lease runs on the server from the script's execution, which comes after this instant:
    // fencing at `sent + ttl - margin` on this host's monotonic clock is before it can expire.
    let sent = Instant::now();
    // The same instant on the file's clock (the clock its decisions compare the deadline with).
    let sent_file_ns = s.limit.as_limit().clock().now_ns();
    let result = match con.as_mut() {
        Some(c) => protocol::renew(c, &s.request(held, &epoch, demand, opens)),
        None => connect(client, io).and_then(|mut c| {
            let r = protocol::renew(&mut c, &s.request(held, &epoch, demand, opens));
            *con = Some(c);
            r
        }),
    };
    let r = match result {
        Ok(r) => r,
        Err(e) if matches!(e.code(), Some("FLEETDUP" | "FLEETCONFIG" | "FLEETMIN")) => {
            // Refused for good: renewing again cannot help. The floor, and stop.
            let why = format!("fleet {}: {}", s.cfg.fleet, e.detail().unwrap_or("refused"));
            eprintln!("fleet[{}/{}] {why}", s.cfg.fleet, s.cfg.member);
            let mut l = s.lock();
            s.apply(&mut l, 0, "refused");
            s.set_deadline(0);
            l.fence_at = None;
            *s.fatal.lock().unwrap_or_else(|p| p.into_inner()) = Some(why);
            return false;
        }
        Err(e) => {
            *con = None;
            if !*failing {
                eprintln!(
                    "fleet[{}/{}] renewal failed: {e}; keeping the share until the fence point",
                    s.cfg.fleet, s.cfg.member
                );
                *failing = true;
            }
            return false;
        }
    };
    if *failing {
        eprintln!(
            "fleet[{}/{}] renewal works again",
            s.cfg.fleet, s.cfg.member
        );
        *failing = false;
    }
    let received = Instant::now();
    let fence_at = sent + s.cfg.fence_after();
    let mut l = s.lock();
    let new_epoch = r.epoch != l.epoch;
    l.last = Some(r.clone());
    if received >= fence_at {
        // The answer came too late to trust the lease: at most the minimum.
        let floor = s.res.min.min(l.applied);
        s.apply(&mut l, floor, "fence");
        l.fence_at = None;
        return false;
    }
    // A new epoch (the server lost the state, was flushed, restarted or failed over): this
    // renewal re-asserted `held`, admitted up to the total.
    let reasserted = new_epoch && !epoch.is_empty();
    if new_epoch {
        l.epoch_seen = Some(received);
    }
    l.epoch = r.epoch.clone();
    // The fence never above what the server holds for this member once its lease ends.
    let held_on_server = s.res.min.min(r.granted);
    if l.fence > held_on_server && !s.set_fence(&mut l, held_on_server) {
        return false;
    }
    // Raising is covered by the grant just recorded; lowering is always safe.
    let mut desired = r.granted.min(r.target);
    if reasserted {
        // A re-asserted share is one of the lost state's disjoint grants only if its lease
        // still ran here when the answer came (so it ran when the state was lost, which was
        // before the script ran): otherwise at most the fence, which the lost state held too.
        if claimed_until.is_none_or(|until| received >= until) {
            desired = desired.min(l.fence);
        }
        eprintln!(
            "fleet[{}/{}] new epoch {} (the server lost the fleet's state): re-asserted {}, granted {}, keeping {}",
            s.cfg.fleet,
            s.cfg.member,
            r.epoch,
            share::fmt_units(held),
            share::fmt_units(r.granted),
            share::fmt_units(desired),
        );
    }
    let reason = if desired > l.applied {
        "grant"
    } else if new_epoch {
        "epoch"
    } else {
        "shrink"
    };
    // The pair (share, deadline) in the file is safe at every instant: the deadline of this
    // renewal covers a share at most `granted`, so it is written after a lowering and before
    // a raise (a decision sees the old share with the new deadline only when the old share is
    // the smaller one; see docs/fleet.md).
    let deadline = sent_file_ns.saturating_add(s.cfg.fence_after().as_nanos() as u64);
    let applied = if desired < l.applied {
        let ok = s.apply(&mut l, desired, reason);
        ok && s.set_deadline(deadline)
    } else {
        s.set_deadline(deadline) && s.apply(&mut l, desired, reason)
    };
    l.fence_at = Some(fence_at);
    // Release a grant above the target (after lowering locally) right away.
    applied && (r.granted > desired || new_epoch)
}
