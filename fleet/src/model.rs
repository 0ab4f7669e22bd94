//! An exhaustive model of the fleet protocol across state losses (restarts, flushes,
//! failovers), run by plain `cargo test`: every interleaving of renewals (sent, run by the
//! server, answered; requests and answers lost), watchdog fences, clock ticks and state losses,
//! for two hosts sharing a total of 2 units with leases of 3 ticks (fence point 2 ticks after a
//! renewal was sent), up to two state losses, time without end (times are kept relative).
//!
//! The model is the script's and the agent's logic, reduced: every member wants the whole total
//! (the targets that press hardest), no reserved minimums (fences at 0), one clock for the hosts
//! and the server (the clock-rate margin is argued in docs/fleet.md). The first epoch is that of a
//! fleet that never had state (open at once); an epoch begun after a state loss is closed until
//! an agent has seen it for one lease on its own clock.
//!
//! What is checked, in every reachable state: the shares the hosts' decisions use (the share
//! before the deadline in the file, the fence after it) add up to at most the total, and so do
//! the server's grants. The same search with the opening not waiting, or with a host
//! re-asserting a share whose lease has ended, finds an overlap: the check is not vacuous.

use std::collections::HashSet;

const TOTAL: u8 = 2;
const TTL: u8 = 3;
/// `ttl - margin`: a host fences this long after it sent the renewal that gave its deadline.
const FENCE_AFTER: u8 = 2;
const HOSTS: usize = 2;
const MAX_LOSSES: u8 = 2;

/// What the model leaves out on purpose, to show that the search finds the overlap then.
#[derive(Clone, Copy, Debug)]
struct Rules {
    /// A new epoch opens only once an agent has seen it for one lease (else at once).
    opening_waits: bool,
    /// A host re-asserts its share only while its lease runs, and keeps a re-asserted share only
    /// if the answer came before its old fence point (else its share whatever its lease).
    claims_running_leases: bool,
}

// Times are relative and saturating, so that time runs without end and the states are finite:
// "left" counts the ticks until an instant (0: it has passed), "age" the ticks since one
// (capped where larger ages decide nothing more).

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Request {
    /// Ticks since it was sent (capped at `FENCE_AFTER`: an answer that late is not trusted).
    age: u8,
    held: u8,
    /// The agent's epoch (0: none yet).
    epoch: u8,
    opens: bool,
    /// `held` is the share of a lease that ran when it was sent (else the fence). That lease
    /// still runs while the host's deadline has not passed: the request is the host's only
    /// one, and only its answer moves the deadline.
    claimed: bool,
    /// The server's answer once the script ran: (epoch, grant); every target is the total.
    answer: Option<(u8, u8)>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
struct Host {
    applied: u8,
    /// Ticks left before the deadline in the file: decisions use `applied` while it is above
    /// 0, the fence (0 here) from then on. None: no deadline (the fence).
    deadline_left: Option<u8>,
    epoch: u8,
    /// Ticks since the first answer of `epoch` came (capped at `TTL`).
    seen_age: Option<u8>,
    inflight: Option<Request>,
}

impl Host {
    fn used(&self) -> u8 {
        match self.deadline_left {
            Some(left) if left > 0 => self.applied,
            _ => 0,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
struct Server {
    /// 0: no state (the next script run begins an epoch).
    epoch: u8,
    next_epoch: u8,
    open: bool,
    /// Per host: (grant, ticks until its lease has ended; 0: ended).
    records: [Option<(u8, u8)>; HOSTS],
    losses: u8,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
struct State {
    hosts: [Host; HOSTS],
    server: Server,
}

impl State {
    fn tick(&mut self) {
        for h in self.hosts.iter_mut() {
            if let Some(l) = h.deadline_left.as_mut() {
                *l = l.saturating_sub(1);
            }
            if let Some(a) = h.seen_age.as_mut() {
                *a = (*a + 1).min(TTL);
            }
            if let Some(r) = h.inflight.as_mut() {
                r.age = (r.age + 1).min(FENCE_AFTER);
            }
        }
        for (_, left) in self.server.records.iter_mut().flatten() {
            *left = left.saturating_sub(1);
        }
    }

    /// The script, for host `h`'s request.
    fn run_script(&mut self, h: usize, rules: Rules) {
        let req = self.hosts[h].inflight.expect("a request in flight");
        let s = &mut self.server;
        if s.epoch == 0 {
            s.next_epoch += 1;
            s.epoch = s.next_epoch;
            // The first epoch is a fleet that never had state: open at once (the server's
            // evidence); after a loss, closed until an agent opens it.
            s.open = s.losses == 0 || !rules.opening_waits;
            s.records = [None; HOSTS];
        }
        // Expire ended leases (no minimums: the record goes).
        for r in s.records.iter_mut() {
            if r.is_some_and(|(_, left)| left == 0) {
                *r = None;
            }
        }
        let mut g = match s.records[h] {
            Some((g, _)) if req.epoch == s.epoch => g,
            _ => 0,
        };
        let others: u8 = (0..HOSTS)
            .filter(|&o| o != h)
            .filter_map(|o| s.records[o].map(|(g, _)| g))
            .sum();
        if req.epoch != 0 && req.epoch != s.epoch {
            // Re-assertion, admitted up to the total.
            g = req.held.min(TOTAL - others);
        }
        if req.opens && req.epoch == s.epoch {
            s.open = true;
        }
        // The agent applies at most `held`: the rest is released.
        g = g.min(req.held);
        let target = TOTAL;
        if s.open && g < target {
            g += (target - g).min(TOTAL - others - g);
        }
        // `exp = now + ttl`, live while `exp >= now`: ended TTL + 1 ticks from now.
        s.records[h] = Some((g, TTL + 1));
        self.hosts[h].inflight.as_mut().unwrap().answer = Some((s.epoch, g));
    }

    /// The agent of host `h` receives the answer to its request.
    fn receive(&mut self, h: usize, rules: Rules) {
        let host = &mut self.hosts[h];
        let req = host.inflight.take().expect("a request in flight");
        let (epoch, granted) = req.answer.expect("an answer");
        if req.age >= FENCE_AFTER {
            // Too late to trust the lease: the fence.
            host.applied = 0;
            host.deadline_left = None;
            return;
        }
        let new_epoch = epoch != host.epoch;
        let reasserted = new_epoch && req.epoch != 0;
        if new_epoch {
            host.seen_age = Some(0);
        }
        host.epoch = epoch;
        let mut desired = granted;
        if reasserted
            && rules.claims_running_leases
            && !(req.claimed && host.deadline_left.is_some_and(|left| left > 0))
        {
            desired = 0;
        }
        host.applied = desired;
        host.deadline_left = Some(FENCE_AFTER - req.age);
    }

    /// The agent of host `h` sends a renewal.
    fn send(&mut self, h: usize, rules: Rules) {
        let host = &mut self.hosts[h];
        let running = host.deadline_left.filter(|&left| left > 0);
        let held = if running.is_some() || !rules.claims_running_leases {
            host.applied
        } else {
            0
        };
        let opens = host.seen_age.is_some_and(|a| a >= TTL);
        host.inflight = Some(Request {
            age: 0,
            held,
            epoch: host.epoch,
            opens,
            claimed: running.is_some(),
            answer: None,
        });
    }

    fn successors(&self, rules: Rules) -> Vec<State> {
        let mut out = Vec::new();
        let mut s = *self;
        s.tick();
        out.push(s);
        if self.server.losses < MAX_LOSSES && self.server.epoch != 0 {
            let mut s = *self;
            s.server.epoch = 0;
            s.server.open = false;
            s.server.records = [None; HOSTS];
            s.server.losses += 1;
            out.push(s);
        }
        for h in 0..HOSTS {
            let host = &self.hosts[h];
            match host.inflight {
                None => {
                    let mut s = *self;
                    s.send(h, rules);
                    out.push(s);
                }
                Some(req) => {
                    // Lost (request or answer): the agent sends again later.
                    let mut s = *self;
                    s.hosts[h].inflight = None;
                    out.push(s);
                    let mut s = *self;
                    if req.answer.is_none() {
                        s.run_script(h, rules);
                    } else {
                        s.receive(h, rules);
                    }
                    out.push(s);
                }
            }
            // The watchdog (any time after the deadline, or never: a stalled agent).
            if host.deadline_left == Some(0) {
                let mut s = *self;
                s.hosts[h].applied = 0;
                s.hosts[h].deadline_left = None;
                out.push(s);
            }
        }
        out
    }

    fn overlap(&self) -> Option<String> {
        let used: u8 = self.hosts.iter().map(Host::used).sum();
        let granted: u8 = self.server.records.iter().flatten().map(|r| r.0).sum();
        if used > TOTAL || granted > TOTAL {
            Some(format!(
                "shares in use {used}, grants {granted} (total {TOTAL}): {self:?}"
            ))
        } else {
            None
        }
    }
}

/// Every reachable state; the first overlap found, if any, and the number of states.
/// A state packed into 128 bits (every field is small, each at a fixed place: one-to-one),
/// for the set of states seen.
fn pack(s: &State, order: [usize; HOSTS]) -> u128 {
    let mut k: u128 = 0;
    let mut put = |v: u8, bits: u32| {
        debug_assert!(u32::from(v) < 1 << bits);
        k = (k << bits) | u128::from(v);
    };
    let opt = |v: Option<u8>| v.map_or(0, |x| x + 1);
    for &h in &order {
        let h = &s.hosts[h];
        put(h.applied, 2);
        put(opt(h.deadline_left), 3);
        put(h.epoch, 2);
        put(opt(h.seen_age), 3);
        // Fixed widths (an absent request as zeros): the packing is one-to-one.
        let r = h.inflight.unwrap_or(Request {
            age: 0,
            held: 0,
            epoch: 0,
            opens: false,
            claimed: false,
            answer: None,
        });
        let (e, g) = r.answer.unwrap_or((0, 0));
        put(u8::from(h.inflight.is_some()), 1);
        put(r.age, 2);
        put(r.held, 2);
        put(r.epoch, 2);
        put(u8::from(r.opens), 1);
        put(u8::from(r.claimed), 1);
        put(u8::from(r.answer.is_some()), 1);
        put(e, 2);
        put(g, 2);
    }
    let sv = &s.server;
    put(sv.epoch, 2);
    put(sv.next_epoch, 2);
    put(u8::from(sv.open), 1);
    put(sv.losses, 2);
    for &h in &order {
        let (g, left) = sv.records[h].unwrap_or((0, 0));
        put(u8::from(sv.records[h].is_some()), 1);
        put(g, 2);
        put(left, 3);
    }
    k
}

/// The hosts are interchangeable: a state and its mirror image are one (the smaller packing).
fn key(s: &State) -> u128 {
    pack(s, [0, 1]).min(pack(s, [1, 0]))
}

/// A hasher for the packed states (they are already well spread).
#[derive(Default)]
struct Mix(u64);

impl std::hash::Hasher for Mix {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(5) ^ u64::from(b)).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
        }
    }
    fn write_u128(&mut self, k: u128) {
        let x = (k as u64) ^ ((k >> 64) as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        self.0 = (x ^ (x >> 29)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    }
}

fn explore(rules: Rules) -> (Option<String>, usize) {
    let mut seen: HashSet<u128, std::hash::BuildHasherDefault<Mix>> = HashSet::default();
    let start = State::default();
    let mut stack = vec![start];
    seen.insert(key(&start));
    while let Some(s) = stack.pop() {
        if let Some(why) = s.overlap() {
            return (Some(why), seen.len());
        }
        for n in s.successors(rules) {
            if seen.insert(key(&n)) {
                assert!(seen.len() < 5_000_000, "runaway model");
                stack.push(n);
            }
        }
    }
    (None, seen.len())
}

const PROTOCOL: Rules = Rules {
    opening_waits: true,
    claims_running_leases: true,
};

#[test]
fn no_overlap_across_state_losses() {
    let (overlap, states) = explore(PROTOCOL);
    println!("model: {states} states");
    assert!(overlap.is_none(), "{}", overlap.unwrap());
    assert!(
        states > 10_000,
        "only {states} states: the model is too small"
    );
}

#[test]
fn an_epoch_open_at_once_overlaps() {
    let (overlap, _) = explore(Rules {
        opening_waits: false,
        ..PROTOCOL
    });
    assert!(
        overlap.is_some(),
        "the model finds no overlap without the opening's wait"
    );
}

#[test]
fn re_asserting_an_ended_lease_overlaps() {
    let (overlap, _) = explore(Rules {
        claims_running_leases: false,
        ..PROTOCOL
    });
    assert!(
        overlap.is_some(),
        "the model finds no overlap when ended leases are re-asserted"
    );
}
