//! Typed handles: each kind of limit resolves to a handle with exactly its operations, a name
//! resolved with the wrong accessor is an `Error::WrongKind` that names the right one, and the
//! handles decide across real processes on one real file.

mod common;

use std::path::Path;
use std::time::Duration;

use common::{fork_lock, fork_workers, temp_path, Active, SharedWords, SEC};
use shmlimit::{
    try_acquire_all, Alignment, Check, Clock, Concurrency, Error, FixedWindow, Keyed, Limit,
    LimitKind, Limiter, ManualClock, Policy, Rate, RateLimitHeaders, SlidingLog, SlidingWindow,
    TokenBucket,
};

/// Every kind once, with a budget no test lasts long enough to see refill: `N` per limit.
const N: u64 = 50;
const ENDLESS: Duration = Duration::from_nanos(1 << 60);

fn slow() -> Rate {
    Rate::new(1, Duration::from_secs(1_000)).unwrap()
}

/// (name, kind) of the limits `all_kinds` defines.
const KINDS: [(&str, LimitKind); 8] = [
    ("bucket", LimitKind::TokenBucket),
    ("fixed", LimitKind::Window),
    ("sliding", LimitKind::Window),
    ("log", LimitKind::SlidingLog),
    ("permits", LimitKind::Concurrency),
    ("keyed_bucket", LimitKind::KeyedTokenBucket),
    ("keyed_window", LimitKind::KeyedWindow),
    ("keyed_permits", LimitKind::KeyedConcurrency),
];

fn all_kinds(path: &Path) -> Limiter {
    Limiter::builder()
        .limit("bucket", TokenBucket::new(N, slow()))
        .limit(
            "fixed",
            FixedWindow::new(N, ENDLESS).aligned(Alignment::Monotonic),
        )
        .limit(
            "sliding",
            SlidingWindow {
                limit: N,
                window: ENDLESS,
                alignment: Alignment::Monotonic,
            },
        )
        .limit("log", SlidingLog::new(N, ENDLESS))
        .limit("permits", Concurrency::new(3))
        .keyed_limit("keyed_bucket", TokenBucket::new(N, slow()), Keyed::new(64))
        .keyed_limit(
            "keyed_window",
            FixedWindow::new(N, ENDLESS).aligned(Alignment::Monotonic),
            Keyed::new(64),
        )
        .keyed_limit("keyed_permits", Concurrency::new(3), Keyed::new(64))
        .create_or_open(path)
        .unwrap()
}

type Resolve = fn(&Limiter, &str) -> shmlimit::Result<LimitKind>;

/// Every accessor, with the kind it resolves.
const ACCESSORS: [(LimitKind, Resolve); 7] = [
    (LimitKind::TokenBucket, |l, n| {
        l.token_bucket(n).map(|h| h.kind())
    }),
    (LimitKind::Window, |l, n| l.window(n).map(|h| h.kind())),
    (LimitKind::SlidingLog, |l, n| {
        l.sliding_log(n).map(|h| h.kind())
    }),
    (LimitKind::Concurrency, |l, n| {
        l.concurrency(n).map(|h| h.kind())
    }),
    (LimitKind::KeyedTokenBucket, |l, n| {
        l.keyed_token_bucket(n).map(|h| h.kind())
    }),
    (LimitKind::KeyedWindow, |l, n| {
        l.keyed_window(n).map(|h| h.kind())
    }),
    (LimitKind::KeyedConcurrency, |l, n| {
        l.keyed_concurrency(n).map(|h| h.kind())
    }),
];

#[test]
fn each_name_resolves_with_its_accessor_only_and_the_error_names_the_right_one() {
    let (_dir, path) = temp_path("kinds.shm");
    let limiter = all_kinds(&path);
    for (name, kind) in KINDS {
        assert_eq!(limiter.limit(name).unwrap().kind(), kind, "{name}");
        for (resolves, resolve) in ACCESSORS {
            match resolve(&limiter, name) {
                Ok(got) => {
                    assert_eq!(resolves, kind, "{name} resolved as a {resolves}");
                    assert_eq!(got, kind);
                }
                Err(Error::WrongKind { limit, reason }) => {
                    assert_ne!(resolves, kind, "{name}: its own accessor refused: {reason}");
                    assert_eq!(limit, name);
                    let right = format!("Limiter::{}", kind.accessor());
                    assert!(
                        reason.contains(&format!("is a {kind},")) && reason.contains(&right),
                        "{name} as a {resolves}: {reason}"
                    );
                }
                Err(e) => panic!("{name} as a {resolves}: {e}"),
            }
        }
        // Unknown names stay unknown, whatever the accessor.
        for (_, resolve) in ACCESSORS {
            assert!(matches!(
                resolve(&limiter, "nope"),
                Err(Error::UnknownLimit(n)) if n == "nope"
            ));
        }
    }
    // The message reads as a sentence naming all three.
    let e = limiter.token_bucket("permits").unwrap_err().to_string();
    assert_eq!(
        e,
        "limit `permits`: this limit is a concurrency limit, not a token bucket: resolve it \
         with Limiter::concurrency"
    );
    // The untyped view converts, with the same check.
    let untyped: Limit = limiter.limit("keyed_window").unwrap();
    assert!(shmlimit::WindowLimit::try_from(untyped.clone()).is_err());
    let typed = shmlimit::KeyedWindowLimit::try_from(untyped).unwrap();
    assert_eq!(Limit::from(typed).name(), "keyed_window");
}

#[test]
fn a_token_bucket_admits_refunds_reserves_and_retunes() {
    let (_dir, path) = temp_path("bucket.shm");
    let clock = ManualClock::new(1_000 * SEC);
    let limiter = Limiter::builder()
        .limit("api", TokenBucket::new(4, Rate::per_second(2).unwrap()))
        .clock(clock)
        .create_or_open(&path)
        .unwrap();
    let api = limiter.token_bucket("api").unwrap();
    assert_eq!((api.name(), api.capacity()), ("api", 4));
    assert_eq!(
        api.policy().unwrap(),
        Some(Policy {
            quota: 4,
            window_secs: 2
        })
    );
    assert_eq!(api.peek(4).unwrap().remaining(), 0);
    let grant = api.try_acquire(3).unwrap();
    assert!(grant.is_allowed());
    assert!(api.try_acquire(2).unwrap().is_denied());
    api.refund_units(&grant, 1).unwrap();
    assert!(api.try_acquire(2).unwrap().is_allowed());
    assert!(api.try_acquire(1).unwrap().is_denied());
    assert!(matches!(
        api.try_acquire(5),
        Err(Error::CostExceedsCapacity {
            cost: 5,
            capacity: 4
        })
    ));
    // A booking past the burst waits its turn: one token every 500 ms.
    let booked = api.reserve(1, Duration::from_secs(1)).unwrap();
    assert!(booked.is_granted());
    assert_eq!(booked.delay(), Duration::from_millis(500));
    assert!(api.reserve(4, Duration::from_secs(1)).unwrap().is_refused());
    assert!(booked.cancel().unwrap());
    // Retune live, in the file: another handle sees it.
    api.set_rate(Rate::per_second(10).unwrap()).unwrap();
    api.set_token_bucket(8, Rate::per_second(10).unwrap())
        .unwrap();
    let other = limiter.token_bucket("api").unwrap();
    assert_eq!(other.capacity(), 8);
    assert_eq!(
        other.live_algorithm().unwrap(),
        shmlimit::Algorithm::TokenBucket {
            capacity: 8,
            emission_ns: 100_000_000
        }
    );
    // Fleet management: fenced until a deadline is set, a plain rate again after.
    assert_eq!(api.fleet_lease().unwrap(), None);
    api.fleet_manage(1, Rate::per_second(1).unwrap()).unwrap();
    let lease = api.fleet_lease().unwrap().expect("fleet-managed");
    assert!(!lease.leased);
    let now = limiter.clock().now_ns();
    api.set_fleet_deadline(now + SEC).unwrap();
    assert!(api.fleet_lease().unwrap().unwrap().leased);
    api.end_fleet_management().unwrap();
    assert_eq!(api.fleet_lease().unwrap(), None);
    assert!(matches!(
        api.set_fleet_deadline(now),
        Err(Error::WrongKind { .. })
    ));
    // The fence became the plain rate; a reset refills it.
    assert_eq!(api.capacity(), 1);
    api.set_token_bucket(8, Rate::per_second(10).unwrap())
        .unwrap();
    api.reset().unwrap();
    assert_eq!(api.peek(8).unwrap().remaining(), 0);
    assert!(api.peek(8).unwrap().is_allowed());
    // Dated decisions and statistics.
    assert!(api.try_acquire_at(1, now).unwrap().is_allowed());
    assert!(matches!(
        api.try_acquire_at(1, now + SEC),
        Err(Error::ClockOutOfRange(_))
    ));
    let stats = api.stats();
    assert_eq!((stats.allowed, stats.denied), (4, 3), "{stats:?}");
}

#[test]
fn a_token_bucket_waits_for_its_tokens() {
    let (_dir, path) = temp_path("wait.shm");
    let limiter = Limiter::builder()
        .limit("api", TokenBucket::new(1, Rate::per_second(100).unwrap()))
        .create_or_open(&path)
        .unwrap();
    let api = limiter.token_bucket("api").unwrap();
    assert!(api.try_acquire(1).unwrap().is_allowed());
    assert!(api
        .acquire_timeout(1, Duration::from_secs(5))
        .unwrap()
        .is_allowed());
    // A split bucket cannot book in one order: it still waits, by retrying.
    let (_dir2, path2) = temp_path("split.shm");
    let split = Limiter::builder()
        .limit_with(
            "s",
            TokenBucket::new(4, Rate::per_second(100).unwrap()),
            |d| d.split(2),
        )
        .create_or_open(&path2)
        .unwrap()
        .token_bucket("s")
        .unwrap();
    assert!(matches!(
        split.reserve(1, Duration::ZERO),
        Err(Error::WrongKind { .. })
    ));
    for _ in 0..4 {
        let _ = split.try_acquire(1).unwrap();
    }
    assert!(split
        .acquire_timeout(1, Duration::from_secs(5))
        .unwrap()
        .is_allowed());
}

#[test]
fn windows_and_the_log_admit_refund_and_retune() {
    let (_dir, path) = temp_path("windows.shm");
    let limiter = all_kinds(&path);
    for name in ["fixed", "sliding"] {
        let w = limiter.window(name).unwrap();
        let grant = w.try_acquire(N).unwrap();
        assert!(grant.is_allowed(), "{name}");
        assert!(w.peek(1).unwrap().is_denied(), "{name}");
        w.refund_units(&grant, 2).unwrap();
        assert_eq!(w.peek(1).unwrap().remaining(), 1, "{name}");
        w.set_limit(N + 3).unwrap();
        assert_eq!(w.capacity(), N + 3, "{name}");
        assert!(w.try_acquire(5).unwrap().is_allowed(), "{name}");
        assert!(w.try_acquire(1).unwrap().is_denied(), "{name}");
        // A rate means its count per window, rounded down: 2^60 ns at 1 per 2^50 ns.
        w.set_rate(Rate::from_emission_ns(1 << 50).unwrap())
            .unwrap();
        assert_eq!(w.capacity(), 1 << 10, "{name}");
        assert!(matches!(
            w.set_limit(0),
            Err(Error::InvalidParameter { .. })
        ));
        assert!(w
            .acquire_timeout(1, Duration::from_millis(10))
            .unwrap()
            .is_allowed());
        w.reset().unwrap();
        assert_eq!(w.peek(1).unwrap().remaining(), (1 << 10) - 1, "{name}");
    }
    let log = limiter.sliding_log("log").unwrap();
    let grant = log.try_acquire(N).unwrap();
    assert!(grant.is_allowed());
    let denied = log.try_acquire(1).unwrap();
    assert!(denied.is_denied());
    // Nothing comes back within the deadline: refused, nothing taken.
    assert!(log
        .acquire_timeout(1, Duration::from_millis(10))
        .unwrap()
        .is_denied());
    log.refund(&grant).unwrap();
    assert!(log.try_acquire(N).unwrap().is_allowed());
    // Counted per decision: two grants, the denial and the refusal at the deadline.
    let stats = log.stats();
    assert_eq!((stats.allowed, stats.denied), (2, 2));
}

#[test]
fn keyed_handles_decide_per_key() {
    let (_dir, path) = temp_path("keyed.shm");
    let limiter = all_kinds(&path);
    let bucket = limiter.keyed_token_bucket("keyed_bucket").unwrap();
    let grant = bucket.try_acquire_key(b"alice", N).unwrap();
    assert!(grant.is_allowed());
    assert!(bucket.try_acquire_key(b"alice", 1).unwrap().is_denied());
    assert!(bucket.peek_key(b"bob", N).unwrap().is_allowed());
    assert_eq!(bucket.key_occupancy(), (1, 64));
    bucket.refund_key(b"alice", &grant).unwrap();
    assert!(bucket.try_acquire_key(b"alice", 1).unwrap().is_allowed());
    bucket
        .set_token_bucket(N * 2, Rate::per_second(1).unwrap())
        .unwrap();
    assert_eq!(bucket.capacity(), N * 2);
    assert!(bucket.key_tag(b"alice").unwrap() > 0);
    assert!(matches!(
        bucket.try_acquire_key(b"", 1),
        Err(Error::InvalidKey { .. })
    ));

    let window = limiter.keyed_window("keyed_window").unwrap();
    assert!(window.try_acquire_key(b"a", N).unwrap().is_allowed());
    assert!(window.try_acquire_key(b"a", 1).unwrap().is_denied());
    window.set_limit(N + 1).unwrap();
    assert!(window.try_acquire_key(b"a", 1).unwrap().is_allowed());
    window.reset().unwrap();
    assert_eq!(window.key_occupancy(), (0, 64));
    assert_eq!(window.reclaim_idle_keys(), 0);

    let permits = limiter.keyed_concurrency("keyed_permits").unwrap();
    let mut held: Vec<_> = (0..3)
        .map(|_| permits.try_acquire_key_permit(b"job").unwrap().unwrap())
        .collect();
    assert!(permits.try_acquire_key_permit(b"job").unwrap().is_none());
    assert!(permits
        .acquire_key_permit_timeout(b"job", Duration::from_millis(5))
        .unwrap()
        .is_none());
    assert_eq!(permits.key_permits_held(b"job").unwrap(), 3);
    let tag = permits.key_tag(b"job").unwrap();
    assert!(permits
        .permit_holders()
        .iter()
        .all(|h| h.key_tag == Some(tag)));
    let id = held.pop().unwrap().into_id();
    assert!(permits.release_permit(id).unwrap());
    assert_eq!(permits.key_permits_held(b"job").unwrap(), 2);
    assert_eq!(permits.key_occupancy(), (1, 64));
}

#[test]
fn concurrency_handles_hand_out_permits() {
    let (_dir, path) = temp_path("permits.shm");
    let limiter = all_kinds(&path);
    let permits = limiter.concurrency("permits").unwrap();
    assert_eq!(permits.policy().unwrap(), None);
    let a = permits.try_acquire_permit().unwrap().unwrap();
    let b = permits
        .acquire_permit_timeout(Duration::from_millis(5))
        .unwrap()
        .unwrap();
    let c = permits.try_acquire_permit().unwrap().unwrap();
    assert!(permits.try_acquire_permit().unwrap().is_none());
    assert_eq!(permits.permit_holders().len(), 3);
    assert_eq!(permits.reclaim_dead_permits(), 0);
    drop(a);
    assert!(b.release());
    let id = c.into_id();
    assert!(permits.release_permit(id).unwrap());
    assert!(permits.permit_holders().is_empty());
    assert_eq!(permits.stats().allowed, 3);
}

#[test]
fn composition_and_headers_take_typed_handles() {
    let (_dir, path) = temp_path("compose.shm");
    let limiter = all_kinds(&path);
    let bucket = limiter.token_bucket("bucket").unwrap();
    let window = limiter.window("fixed").unwrap();
    let log = limiter.sliding_log("log").unwrap();
    let per_user = limiter.keyed_token_bucket("keyed_bucket").unwrap();
    let checks = [
        Check::new(&bucket, N - 1),
        Check::new(&window, 1),
        Check::new(&log, 1),
        Check::keyed(&per_user, b"u", N),
    ];
    let first = try_acquire_all(&checks).unwrap();
    assert!(first.is_allowed());
    let second = try_acquire_all(&checks).unwrap();
    assert_eq!(second.denied_by(), Some(0));
    // The denial took nothing: the window and the log still have N - 1.
    assert_eq!(window.peek(1).unwrap().remaining(), N - 2);
    assert_eq!(log.peek(1).unwrap().remaining(), N - 2);
    first.refund(&checks).unwrap();
    assert!(per_user.peek_key(b"u", N).unwrap().is_allowed());
    let decision = bucket.try_acquire(1).unwrap();
    let headers = RateLimitHeaders::for_decisions(&[(bucket.as_limit(), &decision)]).unwrap();
    assert_eq!(headers.rate_limit, "\"bucket\";r=49;t=1000");
}

/// Eight processes, half attaching by path, half inheriting the parent's handles: each rate
/// kind admits exactly its budget in total, and no more than `C` permits are ever held.
#[test]
fn eight_processes_share_every_typed_handle() {
    let _g = fork_lock();
    const WORKERS: usize = 8;
    const TRIES: usize = 20;
    let (_dir, path) = temp_path("eight.shm");
    let limiter = all_kinds(&path);
    let shared = SharedWords::new(6);
    let (active, keyed_active) = (Active(&shared, 0), Active(&shared, 3));
    let reports = fork_workers(WORKERS, |w| {
        let own;
        let l = if w % 2 == 0 {
            own = Limiter::open(&path).unwrap();
            &own
        } else {
            &limiter
        };
        let bucket = l.token_bucket("bucket").unwrap();
        let fixed = l.window("fixed").unwrap();
        let sliding = l.window("sliding").unwrap();
        let log = l.sliding_log("log").unwrap();
        let keyed_bucket = l.keyed_token_bucket("keyed_bucket").unwrap();
        let keyed_window = l.keyed_window("keyed_window").unwrap();
        let permits = l.concurrency("permits").unwrap();
        let keyed_permits = l.keyed_concurrency("keyed_permits").unwrap();
        let mut admitted = [0u64; 6];
        for _ in 0..TRIES {
            let decisions = [
                bucket.try_acquire(1).unwrap(),
                fixed.try_acquire(1).unwrap(),
                sliding.try_acquire(1).unwrap(),
                log.try_acquire(1).unwrap(),
                keyed_bucket.try_acquire_key(b"shared", 1).unwrap(),
                keyed_window.try_acquire_key(b"shared", 1).unwrap(),
            ];
            for (count, d) in admitted.iter_mut().zip(decisions) {
                *count += d.is_allowed() as u64;
            }
            if let Some(p) = permits
                .acquire_permit_timeout(Duration::from_secs(30))
                .unwrap()
            {
                active.enter(3);
                std::thread::sleep(Duration::from_micros(100));
                active.leave();
                drop(p);
            }
            if let Some(p) = keyed_permits
                .acquire_key_permit_timeout(b"shared", Duration::from_secs(30))
                .unwrap()
            {
                keyed_active.enter(3);
                std::thread::sleep(Duration::from_micros(100));
                keyed_active.leave();
                drop(p);
            }
        }
        admitted.to_vec()
    });
    for (i, name) in [
        "bucket",
        "fixed",
        "sliding",
        "log",
        "keyed_bucket",
        "keyed_window",
    ]
    .iter()
    .enumerate()
    {
        let total: u64 = reports.iter().map(|r| r[i]).sum();
        assert_eq!(
            total, N,
            "{name}: exactly its budget over {WORKERS} processes"
        );
        let stats = limiter.limit(name).unwrap().stats();
        assert_eq!(stats.allowed, N, "{name}");
        assert_eq!(stats.denied, (WORKERS * TRIES) as u64 - N, "{name}");
    }
    for (a, name) in [(&active, "permits"), (&keyed_active, "keyed_permits")] {
        assert_eq!(a.violations(), 0, "{name}: more than 3 held at once");
        assert!(a.max() >= 1 && a.max() <= 3, "{name}");
        assert_eq!(
            limiter.limit(name).unwrap().stats().allowed,
            (WORKERS * TRIES) as u64,
            "{name}: every wait ended in a permit"
        );
    }
}
