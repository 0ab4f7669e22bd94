//! Keyed limits in real files: eight forked processes over more than ten thousand keys, each
//! table-full policy, and the single-process behaviour of refunds, peeks, shadow mode, idle
//! reclaim and live retuning of a keyed bucket.
//!
//! # How the multi-process bounds are checked
//!
//! Each key's budget is a burst that cannot refill during a test (a token bucket refilling one
//! token per 1000 s, or a fixed window of 2^60 ns), so the bound per key is exact: `B`
//! admissions. Workers offer every key many more requests than that, in their own orders, and
//! report per key how many admissions they got and, for each admission, the `remaining()` it
//! reported. The parent checks per key: exactly `B` admissions over all workers (never more:
//! the bound; never fewer: no admission lost), and the remaining values are exactly
//! `B - 1, ..., 0`, once each: a key that saw another key's admissions would report a value
//! twice or skip one.

mod common;

use std::time::Duration;

use common::{fork_lock, fork_workers, keyed_rate, temp_path, XorShift, SEC};
use shmlimit::{
    consts::MAX_KEY_LEN, Alignment, Error, FixedWindow, FullPolicy, Keyed, KeyedRateLimit,
    KeyedTokenBucketLimit, KeyedWindowLimit, Limit, LimitDef, Limiter, ManualClock, MonotonicClock,
    Rate, SlidingWindow, TokenBucket,
};

const WORKERS: usize = 8;
const KEYS: usize = 12_000;
/// Table slots: under 40% load, far from the load at which a probe window first fills.
const SLOTS: usize = 1 << 15;
/// Requests each worker offers each key.
const ROUNDS: usize = 4;
/// A key's budget: its burst.
const BURST: u64 = 3;

fn key(i: usize) -> Vec<u8> {
    format!("tenant-{i:05}").into_bytes()
}

/// A burst of `BURST` that no test lasts long enough to see refill.
fn slow_bucket() -> TokenBucket {
    TokenBucket::new(BURST, Rate::new(1, Duration::from_secs(1_000)).unwrap())
}

/// `BURST` per window, in one window that never ends (2^60 ns, monotonic alignment).
fn endless_window() -> FixedWindow {
    FixedWindow::new(BURST, Duration::from_nanos(1 << 60)).aligned(Alignment::Monotonic)
}

/// Per key: admissions in the low 16 bits, then one byte per remaining value 0..BURST.
fn worker_counts(limit: &dyn KeyedRateLimit<MonotonicClock>, worker: usize) -> Vec<u64> {
    let mut counts = vec![0u64; KEYS];
    let mut order: Vec<usize> = (0..KEYS).collect();
    let mut rng = XorShift::new(0xC0FFEE + worker as u64);
    let keys: Vec<Vec<u8>> = (0..KEYS).map(key).collect();
    for _ in 0..ROUNDS {
        for i in (1..order.len()).rev() {
            order.swap(i, (rng.next_u64() % (i as u64 + 1)) as usize);
        }
        for &k in &order {
            let d = limit.try_acquire_key(&keys[k], 1).expect("decision");
            if d.is_allowed() {
                let r = d.remaining();
                assert!(r < BURST, "remaining {r}");
                counts[k] += 1 + (1 << (16 + 8 * r));
            } else {
                assert!(d.retry_after_ns() > 0);
            }
        }
    }
    counts
}

fn check_per_key(results: &[Vec<u64>]) {
    let expected_seen: u64 = (0..BURST).map(|r| 1 << (16 + 8 * r)).sum();
    let mut total = 0;
    for k in 0..KEYS {
        let sum: u64 = results.iter().map(|w| w[k]).sum();
        let admitted = sum & 0xFFFF;
        assert_eq!(
            admitted, BURST,
            "key {k}: {admitted} admissions, bound {BURST}"
        );
        assert_eq!(
            sum & !0xFFFF,
            expected_seen,
            "key {k}: the remaining values it reported are not {}..0 once each",
            BURST - 1
        );
        total += admitted;
    }
    assert_eq!(total, BURST * KEYS as u64, "aggregate bound");
}

fn per_key_bounds_under_eight_processes(name: &str, define: impl FnOnce(&str) -> LimitDef) {
    let _guard = fork_lock();
    let (_dir, path) = temp_path(&format!("{name}.shm"));
    let limiter = Limiter::builder()
        .define(define(name))
        .create_or_open(&path)
        .unwrap();
    let limit = keyed_rate(&limiter, name).unwrap();
    let results = fork_workers(WORKERS, |w| {
        if w % 2 == 0 {
            // Half the workers attach by path alone.
            let own = Limiter::open(&path).unwrap();
            worker_counts(&*keyed_rate(&own, name).unwrap(), w)
        } else {
            worker_counts(&*limit, w)
        }
    });
    check_per_key(&results);
    let stats = limiter.limit(name).unwrap().stats();
    assert_eq!(stats.allowed, BURST * KEYS as u64);
    assert_eq!(
        stats.allowed + stats.denied,
        (WORKERS * ROUNDS * KEYS) as u64
    );
    assert_eq!(limit.key_occupancy(), (KEYS, SLOTS));
}

#[test]
fn eight_processes_keyed_token_bucket_per_key_and_aggregate_bounds() {
    per_key_bounds_under_eight_processes("bucket", |name| {
        let mut d = LimitDef::new(name, slow_bucket().into_algorithm_checked());
        d.keyed = Some(Keyed::new(SLOTS as u64));
        d
    });
}

#[test]
fn eight_processes_keyed_fixed_window_per_key_and_aggregate_bounds() {
    per_key_bounds_under_eight_processes("window", |name| {
        let mut d = LimitDef::new(name, endless_window().into_algorithm_checked());
        d.keyed = Some(Keyed::new(SLOTS as u64));
        d
    });
}

#[test]
fn eight_processes_keyed_sliding_window_per_key_and_aggregate_bounds() {
    per_key_bounds_under_eight_processes("sliding", |name| {
        // One window that never ends: the weighted estimate is the current count, exactly.
        let sw = SlidingWindow {
            limit: BURST,
            window: Duration::from_nanos(1 << 60),
            alignment: Alignment::Monotonic,
        };
        let mut d = LimitDef::new(name, sw.into_algorithm_checked());
        d.keyed = Some(Keyed::new(SLOTS as u64));
        d
    });
}

#[test]
fn a_keyed_sliding_window_frees_a_key_two_windows_on() {
    let sw = SlidingWindow {
        limit: 2,
        window: Duration::from_millis(100),
        alignment: Alignment::Monotonic,
    };
    let (_d, l, k) = manual::<Kw>("sw", keyed_def("sw", sw, Keyed::new(1)));
    // T0 is a multiple of the window: the count is in the current window.
    assert!(k.try_acquire_key(b"a", 2).unwrap().is_allowed());
    let d = k.try_acquire_key(b"b", 1).unwrap();
    assert!(d.is_denied(), "one slot, held by a");
    assert_eq!(
        d.retry_after_ns(),
        200 * MS,
        "a's count weighs until two windows on"
    );
    l.clock().advance(150 * MS);
    assert!(k.try_acquire_key(b"b", 1).unwrap().is_denied());
    assert!(
        k.try_acquire_key(b"a", 1).unwrap().is_allowed(),
        "half of a's 2 weighs 1"
    );
    l.clock().advance(250 * MS);
    assert!(
        k.try_acquire_key(b"b", 2).unwrap().is_allowed(),
        "a was idle: b took the slot"
    );
    assert_eq!(k.key_occupancy(), (1, 1));
}

/// `IntoAlgorithm` for the definitions above, panicking on a bad parameter.
trait Checked {
    fn into_algorithm_checked(self) -> shmlimit::Algorithm;
}

impl<T: shmlimit::IntoAlgorithm> Checked for T {
    fn into_algorithm_checked(self) -> shmlimit::Algorithm {
        self.into_algorithm("test").unwrap()
    }
}

/// Eight processes over 2,000 keys in a 64-slot table of a 50 ms fixed window: at every window
/// boundary every slot turns idle and new keys reclaim them while their old keys' processes
/// update them. For every key and window, the admissions certainly dated in that window (both
/// clock reads around the call in it) never exceed the limit, and report distinct remaining
/// values (two admissions computed from one state, or a key charged on another's state, would
/// repeat one).
#[test]
fn eight_processes_reclaiming_idle_slots_keep_every_keys_window_bound() {
    let _guard = fork_lock();
    const LIMIT: u64 = 2;
    const W: u64 = 50 * MS;
    const KEYS: u64 = 2_000;
    let (_dir, path) = temp_path("churn.shm");
    let window = FixedWindow::new(LIMIT, Duration::from_nanos(W)).aligned(Alignment::Monotonic);
    let limiter = Limiter::builder()
        .keyed_limit("churn", window, Keyed::new(64).on_full(FullPolicy::Deny))
        .create_or_open(&path)
        .unwrap();
    let limit = limiter.keyed_window("churn").unwrap();
    let deadline = common::now_ns() + 800 * MS;
    let results = fork_workers(WORKERS, |w| {
        let mut rng = XorShift::new(77 + w as u64);
        let mut seen = std::collections::HashMap::<(u64, u64), (u64, u64)>::new();
        while common::now_ns() < deadline {
            // A few hot keys and a long tail, so that slots change hands all the time.
            let k = if rng.next_u64() % 2 == 0 {
                rng.next_u64() % 32
            } else {
                rng.next_u64() % KEYS
            };
            let lo = common::now_ns();
            let d = limit.try_acquire_key(&key(k as usize), 1).unwrap();
            let hi = common::now_ns();
            if d.is_allowed() && lo / W == hi / W {
                let e = seen.entry((k, lo / W)).or_default();
                e.0 += 1;
                e.1 |= 1 << d.remaining();
            }
        }
        seen.into_iter()
            .flat_map(|((k, win), (n, mask))| [k, win, n, mask])
            .collect()
    });
    let mut merged = std::collections::HashMap::<(u64, u64), (u64, u64)>::new();
    for r in &results {
        for e in r.chunks_exact(4) {
            let m = merged.entry((e[0], e[1])).or_default();
            assert_eq!(
                m.1 & e[3],
                0,
                "key {} window {}: a remaining value twice",
                e[0],
                e[1]
            );
            m.0 += e[2];
            m.1 |= e[3];
        }
    }
    let mut full_windows = 0;
    for (&(k, win), &(n, mask)) in &merged {
        assert!(n <= LIMIT, "key {k} window {win}: {n} admissions > {LIMIT}");
        assert_eq!(mask.count_ones() as u64, n);
        full_windows += (n == LIMIT) as u32;
    }
    assert!(
        full_windows > 100,
        "the load reached the per-key limit: {full_windows}"
    );
    let keys: std::collections::HashSet<u64> = merged.keys().map(|&(k, _)| k).collect();
    assert!(
        keys.len() > 4 * 64,
        "slots changed hands: {} keys admitted",
        keys.len()
    );
    assert!(limit.stats().denied > 0);
}

/// A 16-slot table and 8 processes offering 200 new keys each: exactly 16 keys get a slot (no
/// key is ever idle during the test); what happens to the others is the policy.
fn tiny_table(policy: FullPolicy) -> (Vec<Vec<u64>>, KeyedTokenBucketLimit) {
    let (_dir, path) = temp_path("tiny.shm");
    let limiter = Limiter::builder()
        .keyed_limit("tiny", slow_bucket(), Keyed::new(16).on_full(policy))
        .create_or_open(&path)
        .unwrap();
    let limit = limiter.keyed_token_bucket("tiny").unwrap();
    const PER_WORKER: usize = 200;
    let results = fork_workers(WORKERS, |w| {
        // Per key: recorded admissions, fail-open admissions, denials, table-full errors, and
        // the smallest retry-after of a denial (ns).
        let mut out = Vec::with_capacity(PER_WORKER * 5);
        for round in 0..2 {
            for i in 0..PER_WORKER {
                // Keys shared by workers in pairs, so that some new keys race.
                let k = key((w / 2) * PER_WORKER + i);
                let slot = if round == 0 {
                    out.extend_from_slice(&[0, 0, 0, 0, u64::MAX]);
                    out.len() - 5
                } else {
                    i * 5
                };
                for _ in 0..4 {
                    match limit.try_acquire_key(&k, 1) {
                        Ok(d) if d.is_allowed() && d.cost() == 1 => out[slot] += 1,
                        Ok(d) if d.is_allowed() => out[slot + 1] += 1,
                        Ok(d) => {
                            out[slot + 2] += 1;
                            out[slot + 4] = out[slot + 4].min(d.retry_after_ns());
                        }
                        Err(Error::TableFull { limit }) => {
                            assert_eq!(limit, "tiny");
                            out[slot + 3] += 1;
                        }
                        Err(e) => panic!("{e}"),
                    }
                }
            }
        }
        out
    });
    (results, limit)
}

/// Per distinct key (workers share keys in pairs): summed counters.
fn by_key(results: &[Vec<u64>]) -> Vec<[u64; 5]> {
    let mut keys = Vec::new();
    for pair in results.chunks(2) {
        for i in 0..pair[0].len() / 5 {
            let mut c = [0, 0, 0, 0, u64::MAX];
            for w in pair {
                for j in 0..4 {
                    c[j] += w[i * 5 + j];
                }
                c[4] = c[4].min(w[i * 5 + 4]);
            }
            keys.push(c);
        }
    }
    keys
}

#[test]
fn table_full_policy_deny() {
    let _guard = fork_lock();
    let (results, limit) = tiny_table(FullPolicy::Deny);
    let keys = by_key(&results);
    let in_table: Vec<_> = keys.iter().filter(|c| c[0] > 0).collect();
    assert_eq!(in_table.len(), 16, "exactly the table's slots hold keys");
    for c in &keys {
        assert!(c[0] <= BURST, "per-key bound: {c:?}");
        assert_eq!(c[1] + c[3], 0, "no fail-open, no error under Deny: {c:?}");
        if c[0] == 0 {
            // Denied for want of a slot: a retry-after of when the first slot turns idle (each
            // key in the table has used one to three tokens, one back per 1000 s).
            assert!(c[4] > 990 * SEC && c[4] <= 3_000 * SEC, "{c:?}");
        }
    }
    assert_eq!(limit.key_occupancy(), (16, 16));
    let s = limit.stats();
    assert_eq!(s.allowed, keys.iter().map(|c| c[0]).sum::<u64>());
    assert_eq!(s.denied, keys.iter().map(|c| c[2]).sum::<u64>());
}

#[test]
fn table_full_policy_allow() {
    let _guard = fork_lock();
    let (results, limit) = tiny_table(FullPolicy::Allow);
    let keys = by_key(&results);
    assert_eq!(keys.iter().filter(|c| c[0] > 0).count(), 16);
    for c in &keys {
        assert!(c[0] <= BURST, "{c:?}");
        assert_eq!(c[3], 0, "{c:?}");
        if c[0] == 0 {
            // Never in the table: every request admitted, failing open.
            assert_eq!((c[1], c[2]), (16, 0), "{c:?}");
        }
    }
    assert_eq!(limit.key_occupancy(), (16, 16));
    let s = limit.stats();
    assert_eq!(s.allowed, keys.iter().map(|c| c[0] + c[1]).sum::<u64>());
}

#[test]
fn table_full_policy_error() {
    let _guard = fork_lock();
    let (results, limit) = tiny_table(FullPolicy::Error);
    let keys = by_key(&results);
    assert_eq!(keys.iter().filter(|c| c[0] > 0).count(), 16);
    for c in &keys {
        assert!(c[0] <= BURST, "{c:?}");
        assert_eq!(c[1], 0, "{c:?}");
        if c[0] == 0 {
            assert_eq!((c[2], c[3]), (0, 16), "every request an error: {c:?}");
        }
    }
    let s = limit.stats();
    assert_eq!(s.allowed, keys.iter().map(|c| c[0]).sum::<u64>());
    assert_eq!(s.denied, keys.iter().map(|c| c[2]).sum::<u64>());
}

// --- single process ---

const T0: u64 = 1_000_000_000_000;
use common::MS;

type Kb = KeyedTokenBucketLimit<ManualClock>;
type Kw = KeyedWindowLimit<ManualClock>;

fn manual<H>(name: &str, def: LimitDef) -> (tempfile::TempDir, Limiter<ManualClock>, H)
where
    H: TryFrom<Limit<ManualClock>, Error: std::fmt::Debug>,
{
    let (dir, path) = temp_path(&format!("{name}.shm"));
    let limiter = Limiter::builder()
        .define(def)
        .clock(ManualClock::new(T0))
        .create_or_open(&path)
        .unwrap();
    let limit = H::try_from(limiter.limit(&def_name(name)).unwrap()).unwrap();
    (dir, limiter, limit)
}

fn def_name(name: &str) -> String {
    name.to_owned()
}

fn keyed_def(name: &str, algorithm: impl shmlimit::IntoAlgorithm, keyed: Keyed) -> LimitDef {
    let mut d = LimitDef::new(name, algorithm.into_algorithm(name).unwrap());
    d.keyed = Some(keyed);
    d
}

#[test]
fn refund_key_gives_back_only_what_was_taken() {
    let bucket = TokenBucket::new(4, Rate::per_second(10).unwrap());
    let (_d, _l, k) = manual::<Kb>("refund", keyed_def("refund", bucket, Keyed::new(64)));
    let grant = k.try_acquire_key(b"u1", 3).unwrap();
    assert!(grant.is_allowed());
    assert!(k.try_acquire_key(b"u1", 2).unwrap().is_denied());
    k.refund_key(b"u1", &grant).unwrap();
    assert_eq!(
        k.peek_key(b"u1", 1).unwrap().remaining(),
        3,
        "back to full, not beyond"
    );
    // Refunding again cannot overfill; refunding a denial or another key changes nothing.
    k.refund_key(b"u1", &grant).unwrap();
    assert_eq!(k.peek_key(b"u1", 1).unwrap().remaining(), 3);
    let other = k.try_acquire_key(b"u2", 4).unwrap();
    let denied = k.try_acquire_key(b"u2", 1).unwrap();
    k.refund_key(b"u2", &denied).unwrap();
    assert!(k.peek_key(b"u2", 1).unwrap().is_denied());
    k.refund_key(b"u3", &other).unwrap(); // u3 has no slot: nothing to give back
    assert_eq!(k.key_occupancy().0, 2);
    assert!(k.peek_key(b"u2", 1).unwrap().is_denied(), "u2 untouched");
    // A window refund applies only in the grant's window.
    let fw = FixedWindow::new(2, Duration::from_secs(1)).aligned(Alignment::Monotonic);
    let (_d2, l2, w) = manual::<Kw>("wref", keyed_def("wref", fw, Keyed::new(16)));
    let g = w.try_acquire_key(b"x", 2).unwrap();
    l2.clock().advance(1_000 * MS);
    assert!(w.try_acquire_key(b"x", 2).unwrap().is_allowed());
    w.refund_key(b"x", &g).unwrap();
    assert!(
        w.peek_key(b"x", 1).unwrap().is_denied(),
        "no refund into a later window"
    );
}

#[test]
fn peek_key_consumes_and_inserts_nothing() {
    let (_d, _l, k) = manual::<Kb>(
        "peek",
        keyed_def(
            "peek",
            TokenBucket::new(2, Rate::per_second(1).unwrap()),
            Keyed::new(32),
        ),
    );
    for _ in 0..5 {
        assert_eq!(k.peek_key(b"p", 2).unwrap().remaining(), 0);
        assert!(k.peek_key(b"p", 2).unwrap().is_allowed());
    }
    assert_eq!(k.key_occupancy(), (0, 32));
    assert!(k.try_acquire_key(b"p", 2).unwrap().is_allowed());
    let d = k.peek_key(b"p", 1).unwrap();
    assert!(d.is_denied());
    assert_eq!(d.retry_after_ns(), 1_000 * MS);
    assert_eq!(k.stats().allowed, 1, "peeks are not counted");
}

#[test]
fn shadow_mode_on_a_keyed_limit_counts_but_never_denies() {
    let mut def = keyed_def(
        "shadow",
        TokenBucket::new(1, Rate::per_second(1).unwrap()),
        Keyed::new(16).on_full(FullPolicy::Deny),
    );
    def.shadow = true;
    let (_d, _l, k) = manual::<Kb>("shadow", def);
    assert!(k.try_acquire_key(b"s", 1).unwrap().is_allowed());
    let d = k.try_acquire_key(b"s", 1).unwrap();
    assert!(d.is_allowed() && d.is_shadow_denied());
    assert_eq!(d.cost(), 0);
    // Fill the table: the shadow denials of the full table are admitted too.
    for i in 0..15 {
        assert!(k.try_acquire_key(&key(i), 1).unwrap().is_allowed());
    }
    let full = k.try_acquire_key(b"one too many", 1).unwrap();
    assert!(full.is_allowed() && full.is_shadow_denied());
    let s = k.stats();
    assert_eq!((s.allowed, s.denied, s.shadow_denied), (18, 0, 2));
    assert_eq!(k.key_occupancy(), (16, 16));
}

/// A keyed bucket's decisions are counted as an unkeyed bucket's are (the common case through
/// the deciding thread's own entry): admissions, denials, and near-limit admissions per key
/// (those that leave the key under 10% of the capacity), before and after a retune; a peek
/// counts nothing.
#[test]
fn keyed_bucket_decisions_are_counted_per_key_near_limit_included() {
    let bucket = TokenBucket::new(5, Rate::per_second(1).unwrap());
    let (_d, _l, k) = manual::<Kb>("count", keyed_def("count", bucket, Keyed::new(64)));
    for user in [&b"a"[..], b"b"] {
        for _ in 0..5 {
            assert!(k.try_acquire_key(user, 1).unwrap().is_allowed());
        }
        assert!(k.try_acquire_key(user, 1).unwrap().is_denied());
    }
    assert!(k.peek_key(b"c", 1).unwrap().is_allowed());
    let s = k.stats();
    // Per key, only the fifth admission leaves under 10% of 5 (0 left; the fourth leaves 1).
    assert_eq!((s.allowed, s.denied, s.near_limit), (10, 2, 2));

    k.set_token_bucket(40, Rate::per_second(1).unwrap())
        .unwrap();
    // The mark is 6554/65536 of 40 (4.0002 tokens): "c" starts full, so of its 40 admissions
    // the last 5 (leaving 4 to 0) are near; then it is denied.
    for i in 0..40 {
        let d = k.try_acquire_key(b"c", 1).unwrap();
        assert!(d.is_allowed(), "admission {i}");
    }
    assert!(k.try_acquire_key(b"c", 1).unwrap().is_denied());
    let s = k.stats();
    assert_eq!((s.allowed, s.denied, s.near_limit), (50, 3, 7));
}

#[test]
fn idle_keys_are_reclaimed_on_demand_and_by_the_gc_pass() {
    let bucket = TokenBucket::new(1, Rate::per_second(1).unwrap());
    let (_d, l, k) = manual::<Kb>("idle", keyed_def("idle", bucket, Keyed::new(16)));
    for i in 0..16 {
        assert!(k.try_acquire_key(&key(i), 1).unwrap().is_allowed());
    }
    // Full of keys that are not idle: a new key is denied until the first turns idle.
    l.clock().advance(300 * MS);
    let d = k.try_acquire_key(b"new", 1).unwrap();
    assert!(d.is_denied());
    assert_eq!(d.retry_after_ns(), 700 * MS);
    assert_eq!(k.reclaim_idle_keys(), 0);
    l.clock().advance(700 * MS);
    // Now every key's bucket is full again: the new key takes an idle slot.
    assert!(k.try_acquire_key(b"new", 1).unwrap().is_allowed());
    assert_eq!(k.key_occupancy(), (16, 16));
    // The GC pass retires the 15 idle keys; the new key still holds a used token.
    assert_eq!(k.reclaim_idle_keys(), 15);
    assert_eq!(k.key_occupancy(), (1, 16));
    assert!(
        k.try_acquire_key(b"new", 1).unwrap().is_denied(),
        "its state survived"
    );
    // A retired key comes back fresh, which is what its state said.
    assert!(k.try_acquire_key(&key(3), 1).unwrap().is_allowed());
    assert_eq!(k.key_occupancy(), (2, 16));
}

#[test]
fn set_rate_on_a_keyed_bucket_keeps_each_keys_tokens() {
    let bucket = TokenBucket::new(10, Rate::per_second(10).unwrap());
    let (_d, l, k) = manual::<Kb>("tune", keyed_def("tune", bucket, Keyed::new(256)));
    assert!(k.try_acquire_key(b"heavy", 6).unwrap().is_allowed());
    assert!(k.try_acquire_key(b"light", 1).unwrap().is_allowed());
    k.set_rate(Rate::per_second(20).unwrap()).unwrap();
    // The tokens in use are carried over, for every key; refill is at the new rate.
    assert_eq!(k.peek_key(b"heavy", 1).unwrap().remaining(), 3);
    assert_eq!(k.peek_key(b"light", 1).unwrap().remaining(), 8);
    assert_eq!(k.peek_key(b"unseen", 1).unwrap().remaining(), 9);
    l.clock().advance(50 * MS); // one token at 20/s
    assert_eq!(k.peek_key(b"heavy", 1).unwrap().remaining(), 4);
    // A new key after the retune decides on the new parameters.
    assert!(k.try_acquire_key(b"late", 10).unwrap().is_allowed());
    assert_eq!(
        k.try_acquire_key(b"late", 1).unwrap().retry_after_ns(),
        50 * MS
    );
    // And a second retune (back to the first parameter slot) moves everyone again.
    k.set_token_bucket(4, Rate::per_second(10).unwrap())
        .unwrap();
    assert_eq!(
        k.peek_key(b"heavy", 1).unwrap().remaining(),
        0,
        "5 in use > 4: capped"
    );
    assert_eq!(k.peek_key(b"unseen", 1).unwrap().remaining(), 3);
    assert!(
        k.try_acquire_key(b"light", 5).is_err(),
        "more than the new capacity"
    );
}

#[test]
fn keys_and_kinds_are_checked() {
    let (_d, l, k) = manual::<Kb>(
        "checks",
        keyed_def(
            "checks",
            TokenBucket::new(2, Rate::per_second(1).unwrap()),
            Keyed::new(8),
        ),
    );
    assert!(matches!(
        k.try_acquire_key(b"", 1),
        Err(Error::InvalidKey { .. })
    ));
    let long = vec![b'x'; MAX_KEY_LEN + 1];
    assert!(matches!(
        k.try_acquire_key(&long, 1),
        Err(Error::InvalidKey { .. })
    ));
    assert!(k.try_acquire_key(&long[..MAX_KEY_LEN], 1).is_ok());
    assert!(matches!(k.try_acquire_key(b"a", 0), Err(Error::ZeroCost)));
    assert!(matches!(
        k.try_acquire_key(b"a", 3),
        Err(Error::CostExceedsCapacity {
            cost: 3,
            capacity: 2
        })
    ));
    // A keyed limit has no unkeyed decisions: it does not resolve as one.
    assert!(matches!(
        l.token_bucket("checks"),
        Err(Error::WrongKind { .. })
    ));
    let (_d2, l2, plain) = manual::<Limit<ManualClock>>(
        "plain",
        LimitDef::new(
            "plain",
            shmlimit::IntoAlgorithm::into_algorithm(TokenBucket::per_second(5), "plain").unwrap(),
        ),
    );
    assert!(matches!(
        l2.keyed_token_bucket("plain"),
        Err(Error::WrongKind { .. })
    ));
    assert_eq!(plain.key_occupancy(), (0, 0));
    assert_eq!(plain.reclaim_idle_keys(), 0);
}

#[test]
fn memory_per_key_is_sixteen_bytes() {
    let size = |slots: u64| {
        let (_dir, path) = temp_path("size.shm");
        let l = Limiter::builder()
            .keyed_limit("k", slow_bucket(), Keyed::new(slots))
            .keyed_limit("w", endless_window(), Keyed::new(slots))
            .create_or_open(&path)
            .unwrap();
        l.file_size()
    };
    let (small, large) = (size(1 << 14), size(1 << 16));
    let per_key = (large - small) as f64 / (2.0 * ((1 << 16) - (1 << 14)) as f64);
    eprintln!("file bytes per key slot: {per_key}");
    assert_eq!(per_key, 16.0);
}
