//! Impossible slot words fail closed: state words of every kind, counters at their maximum,
//! garbage permit words and a damaged fleet deadline.

use super::*;

#[test]
fn damaged_state_words_fail_closed() {
    let (_dir, path) = temp_path("state.shm");
    drop(create(&path));
    let pristine = fs::read(&path).unwrap();
    let now = now_ns();
    let fresh = |path: &Path| {
        fs::write(path, &pristine).unwrap();
    };
    let open = || Limiter::open(&path).unwrap();
    let admitted = |l: &dyn RateLimit<MonotonicClock>| {
        (0..2 * CAP)
            .filter(|_| matches!(l.try_acquire_at(1, now), Ok(d) if d.is_allowed()))
            .count() as u64
    };

    // Token bucket: a TAT far in the future (but below the tag bit) denies, with a retry.
    for tat in [now + 1_000 * 3_600_000 * MS, (1 << 62) + now, (1 << 63) - 1] {
        fresh(&path);
        write_word(&path, slot_of(&path, TB).0, tat);
        let limiter = open();
        let tb = limiter.token_bucket("tb").unwrap();
        assert_eq!(admitted(&tb), 0, "TAT {tat} admitted");
        assert!(tb.peek(1).unwrap().retry_after_ns() > 0);
    }
    // Token bucket: the parameter slot damaged (check fails) is CorruptState.
    fresh(&path);
    write_word(&path, slot_of(&path, TB).0 + 2, CAP * 1000);
    let limiter = open();
    assert!(matches!(
        limiter.token_bucket("tb").unwrap().try_acquire_at(1, now),
        Err(Error::CorruptState { .. })
    ));
    // Token bucket: the state word tagged with the unused parameter slot (all zero) is corrupt.
    fresh(&path);
    write_word(&path, slot_of(&path, TB).0, 1 << 63);
    let limiter = open();
    assert!(matches!(
        limiter.token_bucket("tb").unwrap().try_acquire_at(1, now),
        Err(Error::CorruptState { .. })
    ));

    // Fixed window: a count above the limit in the current window denies.
    let window = now / 60_000_000_000;
    for count in [CAP + 1, 1 << 31, u32::MAX as u64] {
        fresh(&path);
        write_word(&path, slot_of(&path, FW).0, (window << 32) | count);
        let limiter = open();
        assert_eq!(admitted(&rate(&limiter, "fw").unwrap()), 0, "count {count}");
    }
    // Fixed window: a stored window far ahead of now (damage, not a stale read) starts fresh:
    // at most L.
    fresh(&path);
    write_word(
        &path,
        slot_of(&path, FW).0,
        (window.wrapping_add(1 << 31) << 32) | 5,
    );
    let limiter = open();
    assert!(admitted(&rate(&limiter, "fw").unwrap()) <= CAP);
    // Fixed window: its live limit word damaged is CorruptState.
    fresh(&path);
    write_word(&path, slot_of(&path, FW).0 + 1, 1_000_000);
    let limiter = open();
    assert!(matches!(
        limiter.window("fw").unwrap().try_acquire_at(1, now),
        Err(Error::CorruptState { .. })
    ));

    // Sliding window: counts at their 20-bit maximum, in any window, never admit beyond L.
    for stored in [0u64, 1, (1 << 24) - 1] {
        fresh(&path);
        let word = (stored << 40) | ((1 << 20) - 1) << 20 | ((1 << 20) - 1);
        write_word(&path, slot_of(&path, SW).0, word);
        let limiter = open();
        assert!(admitted(&rate(&limiter, "sw").unwrap()) <= CAP);
    }

    // Sliding log: a head index out of range is CorruptState.
    for head in [CAP, CAP + 1, u32::MAX as u64, u64::MAX] {
        fresh(&path);
        write_word(&path, slot_of(&path, LOG).0, head);
        let limiter = open();
        let log = limiter.sliding_log("log").unwrap();
        assert!(
            matches!(log.try_acquire_at(1, now), Err(Error::CorruptState { .. })),
            "head {head:#x}"
        );
        assert!(matches!(log.peek(1), Err(Error::CorruptState { .. })));
    }
    // Sliding log: entries with impossible laps (neither this lap nor the next) are corrupt.
    fresh(&path);
    let (log_at, _) = slot_of(&path, LOG);
    for i in 0..CAP {
        write_word(&path, log_at + 16 + i, (7u64 << 49) | 12345);
    }
    let limiter = open();
    let log = limiter.sliding_log("log").unwrap();
    assert!(matches!(
        log.try_acquire_at(1, now),
        Err(Error::CorruptState { .. })
    ));
    // Sliding log: entries dated far in the future at the right lap deny.
    fresh(&path);
    for i in 0..CAP {
        write_word(&path, log_at + 16 + i, ((1u64 << 48) - 1) & !(1 << 48));
    }
    let limiter = open();
    assert_eq!(admitted(&rate(&limiter, "log").unwrap()), 0);

    // Keyed: every slot holding a random tag and a far-future TAT: the key is denied or gets a
    // fresh slot; never more than its capacity.
    fresh(&path);
    let (kat, klen) = slot_of(&path, KEYED);
    for i in 0..(klen - 16) / 2 {
        write_word(&path, kat + 16 + i * 2, 0x1234_5678 + i);
        write_word(&path, kat + 16 + i * 2 + 1, (1 << 62) + i);
    }
    let limiter = open();
    let keyed = limiter.keyed_token_bucket("keyed").unwrap();
    let n = (0..3 * KEY_CAP)
        .filter(|_| matches!(keyed.try_acquire_key_at(b"k", 1, now), Ok(d) if d.is_allowed()))
        .count() as u64;
    assert!(n <= KEY_CAP);
}

/// Counters are words any process can write: all of them at `u64::MAX` sum to `u64::MAX`
/// (saturating), not to an overflow panic, and decisions go on deciding and counting from there
/// (a counter of the deciding thread's own lane wraps; the sum stays saturated).
#[test]
fn counters_at_their_maximum_saturate() {
    let (_dir, path) = temp_path("counters.shm");
    drop(create(&path));
    let stats_at = read_word(&path, 9);
    let stats_len = read_word(&path, 10);
    write_at(&path, stats_at, &vec![0xFF; stats_len as usize]);
    let limiter = Limiter::open(&path).expect("counters are not validated");
    for l in limiter.limits() {
        let s = l.stats();
        assert_eq!(
            (s.allowed, s.denied, s.shadow_denied, s.near_limit),
            (u64::MAX, u64::MAX, u64::MAX, u64::MAX),
            "{}",
            l.name()
        );
    }
    decide_at_one_instant(&limiter, CAP as usize);
    for l in limiter.limits() {
        let s = l.stats();
        assert_eq!((s.allowed, s.denied), (u64::MAX, u64::MAX), "{}", l.name());
    }
}

/// Garbage permit owner and stamp words: words naming no live process are taken over
/// (reclaimed), words naming a live process with another start time too, and words naming
/// this live process count as held: never more than C held, never a panic.
#[test]
fn garbage_permit_words_fail_closed() {
    let (_dir, path) = temp_path("permits.shm");
    drop(create(&path));
    let pristine = fs::read(&path).unwrap();
    let fresh = |path: &Path| {
        fs::write(path, &pristine).unwrap();
    };
    let open = || Limiter::open(&path).unwrap();
    for garbage in [u64::MAX, 0x3F_FFFF, 1, (1 << 46) | 1, 0xDEAD_BEEF_DEAD_BEEF] {
        fresh(&path);
        let (at, _) = slot_of(&path, CONC);
        for i in 0..PERMITS {
            write_word(&path, at + 16 + i * 2, garbage);
            write_word(&path, at + 16 + i * 2 + 1, u64::MAX);
        }
        let limiter = open();
        let conc = limiter.concurrency("conc").unwrap();
        let held: Vec<_> = (0..2 * PERMITS)
            .filter_map(|_| conc.try_acquire_permit().unwrap())
            .collect();
        assert!(held.len() as u64 <= PERMITS, "garbage {garbage:#x}");
        let _ = conc.permit_holders();
        let _ = conc.reclaim_dead_permits();
    }
    // Keyed permits: every key slot holding a random tag or the key's own, with every bit set
    // (and bits beyond C), over entries of garbage owners: a key never gets more than C.
    for (garbage, own_tag) in [(u64::MAX, false), (0x3F_FFFF, true), (1, true), (0, true)] {
        fresh(&path);
        let (at, len) = slot_of(&path, KEYED_CONC);
        let tag = Limiter::open(&path)
            .unwrap()
            .keyed_concurrency("keyed_conc")
            .unwrap()
            .key_tag(b"k")
            .unwrap();
        let slots = 8;
        fill_key_slots(&path, at, slots, own_tag.then_some(tag));
        let blocks = at + 16 + slots * 2;
        for w in 0..len - 16 - slots * 2 {
            write_word(&path, blocks + w, garbage);
        }
        let limiter = open();
        let kc = limiter.keyed_concurrency("keyed_conc").unwrap();
        let held: Vec<_> = (0..2 * PERMITS)
            .filter_map(|_| kc.try_acquire_key_permit(b"k").unwrap())
            .collect();
        assert!(
            held.len() as u64 <= PERMITS,
            "garbage {garbage:#x}: {}",
            held.len()
        );
        assert!(kc.key_permits_held(b"k").unwrap() as u64 <= PERMITS);
        let _ = kc.permit_holders();
        let _ = kc.reclaim_dead_permits();
        let _ = kc.reclaim_idle_keys();
    }
    // Keyed adaptive permits: the key's slot with every bit set over garbage entries, and its
    // words per key (accumulator, limit, RTT, owner tag) garbage or the key's own tag: a key
    // never gets more than its maximum, and its limit reads within [min, max].
    for (garbage, own_tag) in [
        (u64::MAX, false),
        (u64::MAX, true),
        (0x3F_FFFF, true),
        (1, true),
    ] {
        fresh(&path);
        let (at, len) = slot_of(&path, KEYED_ADAPTIVE);
        let tag = Limiter::open(&path)
            .unwrap()
            .keyed_adaptive_concurrency("keyed_adaptive")
            .unwrap()
            .key_tag(b"k")
            .unwrap();
        let slots = 8;
        fill_key_slots(&path, at, slots, own_tag.then_some(tag));
        let rest = at + 16 + slots * 2;
        for w in 0..len - 16 - slots * 2 {
            // Owner words (every fourth of the words per key, at the end) name the key.
            let last = w + 4 * slots >= len - 16 - slots * 2;
            let v = if own_tag && last && w % 4 == 3 {
                tag
            } else {
                garbage
            };
            write_word(&path, rest + w, v);
        }
        let limiter = open();
        let ka = limiter
            .keyed_adaptive_concurrency("keyed_adaptive")
            .unwrap();
        let held: Vec<_> = (0..2 * PERMITS)
            .filter_map(|_| ka.try_acquire(b"k").unwrap())
            .collect();
        assert!(held.len() as u64 <= PERMITS, "garbage {garbage:#x}");
        let s = ka.status(b"k").unwrap();
        assert!((1.0..=PERMITS as f64).contains(&s.limit), "{s:?}");
        assert!(s.in_flight <= PERMITS);
        for p in held {
            p.release(shmlimit::Outcome::Error);
        }
        let _ = ka.permit_holders();
        let _ = ka.reclaim_dead_permits();
        let _ = ka.reclaim_idle_keys();
    }
    // Permits: owner words naming this live process (pid and start time) but never acquired
    // through a handle: they count as held, nothing is admitted beyond C.
    fresh(&path);
    {
        let limiter = open();
        let conc = limiter.concurrency("conc").unwrap();
        let held: Vec<_> = (0..PERMITS)
            .map(|_| conc.try_acquire_permit().unwrap().unwrap())
            .collect();
        // Forget the handles: the words stay held by this (live) process.
        held.into_iter().for_each(std::mem::forget);
        assert!(conc.try_acquire_permit().unwrap().is_none());
        assert_eq!(conc.reclaim_dead_permits(), 0);
    }
}

/// A fleet-managed token bucket (its rate a share under a lease): whatever its deadline word
/// holds, a decision outside `(now, now + 2^40 ns]` uses the fence (here the floor: one token),
/// and a damaged fence is `CorruptState`. A damaged deadline never opens the share.
#[test]
fn damaged_fleet_deadline_fails_closed() {
    const DEADLINE_WORD: u64 = 7;
    const FENCE_WORD: u64 = 9;
    let (_dir, path) = temp_path("fleet.shm");
    let floor = Rate::from_emission_ns(1 << 42).unwrap();
    let fast = Rate::per_second(1000).unwrap();
    let make = || {
        let _ = fs::remove_file(&path);
        let limiter = Limiter::builder()
            .limit("tb", TokenBucket::new(CAP, fast))
            .create_or_open(&path)
            .unwrap();
        let tb = limiter.token_bucket("tb").unwrap();
        tb.fleet_manage(1, floor).unwrap();
        tb.set_token_bucket(CAP, fast).unwrap();
        limiter
    };
    let now = now_ns();
    let admitted = |l: &dyn RateLimit<MonotonicClock>| {
        (0..2 * CAP)
            .filter(|_| matches!(l.try_acquire_at(1, now), Ok(d) if d.is_allowed()))
            .count() as u64
    };
    // Leased: the share (CAP at one instant).
    let limiter = make();
    let tb = limiter.token_bucket("tb").unwrap();
    tb.set_fleet_deadline(now + 1_000 * MS).unwrap();
    assert_eq!(admitted(&tb), CAP);
    // Every deadline that does not cover `now`: the floor, one token.
    let mut rng = 0x9E37_79B9_7F4A_7C15u64;
    let mut bad = vec![
        0,
        1,
        now - 1,
        now,
        now + (1 << 40) + 1,
        now.wrapping_add(1 << 63),
        u64::MAX,
        1 << 63,
    ];
    for _ in 0..64 {
        // xorshift: arbitrary words (a word in the 2^40-wide window has odds 2^-24).
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        if rng.wrapping_sub(now).wrapping_sub(1) >= 1 << 40 {
            bad.push(rng);
        }
    }
    for d in bad {
        let limiter = make();
        drop(limiter);
        let (at, _) = slot_of(&path, 0);
        write_word(&path, at + DEADLINE_WORD, d);
        let limiter = Limiter::open(&path).unwrap();
        let tb = limiter.token_bucket("tb").unwrap();
        assert!(
            admitted(&tb) <= 1,
            "deadline {d:#x} admitted beyond the fence"
        );
        let lease = tb.fleet_lease().unwrap().unwrap();
        let covers = d.wrapping_sub(lease.now_ns).wrapping_sub(1) < 1 << 40;
        assert_eq!(lease.leased, covers, "deadline {d:#x} at {}", lease.now_ns);
        // Reservations book nothing beyond the fence either.
        let booked = (0..CAP)
            .filter(|_| {
                tb.reserve(1, Duration::from_secs(1))
                    .is_ok_and(|r| r.is_granted())
            })
            .count();
        assert!(booked <= 1, "deadline {d:#x}: {booked} reservations");
    }
    // Past the deadline with the fence slot damaged: CorruptState, never the share.
    for (k, v) in [(0, 0), (1, 1_000_000), (2, 12345)] {
        let limiter = make();
        drop(limiter);
        let (at, _) = slot_of(&path, 0);
        write_word(&path, at + FENCE_WORD + k, v);
        let limiter = Limiter::open(&path).unwrap();
        let tb = limiter.token_bucket("tb").unwrap();
        assert!(matches!(
            tb.try_acquire_at(1, now),
            Err(Error::CorruptState { .. })
        ));
    }
    // A share's check word with the fleet mark damaged: CorruptState (never a plain share).
    let limiter = make();
    let active_slot_check = {
        let (at, _) = slot_of(&path, 0);
        let active = read_word(&path, at + 8) & 1;
        at + 1 + 3 * active + 2
    };
    drop(limiter);
    let c = read_word(&path, active_slot_check);
    write_word(&path, active_slot_check, c ^ 1);
    let limiter = Limiter::open(&path).unwrap();
    assert!(matches!(
        limiter.token_bucket("tb").unwrap().try_acquire_at(1, now),
        Err(Error::CorruptState { .. })
    ));
}

/// Every key slot of the key table at word `at + 16` (after the limit's control words) holding
/// a random tag, slot 0 the key's own `tag` when given, with every state bit set.
fn fill_key_slots(path: &std::path::Path, at: u64, slots: u64, tag: Option<u64>) {
    for i in 0..slots {
        let t = match tag {
            Some(tag) if i == 0 => tag,
            _ => 0x1234_5678 + i,
        };
        write_word(path, at + 16 + i * 2, t);
        write_word(path, at + 16 + i * 2 + 1, u64::MAX);
    }
}
