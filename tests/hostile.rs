//! Hostile and damaged files: every header word corrupted in turn, random bytes anywhere
//! (proptest), impossible slot words, and a file truncated or extended under a process that has
//! it mapped.
//!
//! What is shown:
//!
//! * every header word that the format validates refuses the file with a typed error when it is
//!   flipped, zeroed or set to all ones; the words that are not validated (the boot id, which
//!   resets the state; the wall offset, creation time, reset count and reserved words, which are
//!   informational) open, and then every limit still decides within its bound;
//! * random bytes written over random parts of a valid file: opening errors cleanly or succeeds,
//!   and then no decision panics and, at one instant, no limit admits more than its definition's
//!   capacity whatever its state words hold (fail closed: a deny or [`Error::CorruptState`]);
//! * each kind of impossible slot word (a TAT far in the future, counts above the limit, a log
//!   head out of range, log entries with impossible laps, garbage permit owner words) is denied
//!   or reported as `CorruptState`, never admitted beyond the capacity;
//! * a file truncated while another process has it mapped kills that process with SIGBUS when
//!   it touches a page past the new end (shown in a forked child), and no new open accepts the
//!   truncated or extended file.

mod common;

use std::fs;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::time::Duration;

use common::words::{read_word, write_word};
use common::{fork_lock, keyed_rate, now_ns, rate, spawn, temp_path, MS};
use proptest::prelude::*;
use shmlimit::{
    Alignment, Concurrency, Error, FixedWindow, Keyed, Limit, Limiter, MonotonicClock, Rate,
    RateLimit, SlidingLog, SlidingWindow, TokenBucket,
};

/// Header words of format version 7 (see the layout table of the file format): 0..=28 (word 28
/// is the file id); words 64..128 are the failed-closed bitmap.
const HEADER_WORDS: u64 = 29;
const DEFS_OFFSET: u64 = 4096;
const DEF_SIZE: u64 = 128;
const CAP: u64 = 10;
const PERMITS: u64 = 3;
const KEY_CAP: u64 = 5;

/// One limit of every kind, none of them refilling during a test.
fn create(path: &Path) -> Limiter {
    let slow = Rate::new(1, Duration::from_secs(3_600)).unwrap();
    Limiter::builder()
        .limit("tb", TokenBucket::new(CAP, slow))
        .limit(
            "fw",
            FixedWindow::new(CAP, Duration::from_secs(60)).aligned(Alignment::Monotonic),
        )
        .limit("sw", SlidingWindow::new(CAP, Duration::from_secs(60)))
        .limit("log", SlidingLog::new(CAP, Duration::from_secs(60)))
        .limit("conc", Concurrency::new(PERMITS))
        .keyed_limit("keyed", TokenBucket::new(KEY_CAP, slow), Keyed::new(16))
        .keyed_limit("keyed_conc", Concurrency::new(PERMITS), Keyed::new(8))
        .create_or_open(path)
        .expect("creating the test file")
}

fn write_at(path: &Path, byte_offset: u64, bytes: &[u8]) {
    fs::OpenOptions::new()
        .write(true)
        .open(path)
        .unwrap()
        .write_all_at(bytes, byte_offset)
        .unwrap();
}

/// The slot region of definition `i` in words (its first word, its length), from its record's
/// words 12 and 13 (which give them in bytes).
fn slot_of(path: &Path, i: u64) -> (u64, u64) {
    let rec = (DEFS_OFFSET + i * DEF_SIZE) / 8;
    (read_word(path, rec + 12) / 8, read_word(path, rec + 13) / 8)
}

/// Limit indices in definition order.
const TB: u64 = 0;
const FW: u64 = 1;
const SW: u64 = 2;
const LOG: u64 = 3;
const CONC: u64 = 4;
const KEYED: u64 = 5;
const KEYED_CONC: u64 = 6;

/// Run `n` decisions of cost 1 on every limit at one instant (permits are held, not released)
/// and check that none admits more than its capacity; errors must be `CorruptState` (or a clock
/// out of range from a damaged date). Returns the admissions per limit.
fn decide_at_one_instant(limiter: &Limiter, n: usize) -> Vec<u64> {
    let now = now_ns();
    let fail_closed = |e: Error, l: &Limit| match e {
        Error::CorruptState { .. } | Error::ClockOutOfRange(_) => {}
        other => panic!("limit {}: unexpected error {other:?}", l.name()),
    };
    let mut out = Vec::new();
    for l in limiter.limits() {
        let mut admitted = 0u64;
        let mut permits = Vec::new();
        for _ in 0..n {
            match l.name() {
                "conc" => match limiter
                    .concurrency("conc")
                    .and_then(|c| c.try_acquire_permit())
                {
                    Ok(Some(p)) => permits.push(p),
                    Ok(None) => {}
                    Err(e) => fail_closed(e, &l),
                },
                // One key's permits: at most C of them.
                "keyed_conc" => match limiter
                    .keyed_concurrency("keyed_conc")
                    .and_then(|c| c.try_acquire_key_permit(b"k"))
                {
                    Ok(Some(p)) => permits.push(p),
                    Ok(None) => {}
                    Err(e) => fail_closed(e, &l),
                },
                "keyed" => match keyed_rate(limiter, "keyed")
                    .and_then(|k| k.try_acquire_key_at(b"k", 1, now))
                {
                    Ok(d) if d.is_allowed() => admitted += 1,
                    Ok(_) => {}
                    Err(e) => fail_closed(e, &l),
                },
                name => match rate(limiter, name).and_then(|r| r.try_acquire_at(1, now)) {
                    Ok(d) if d.is_allowed() => admitted += 1,
                    Ok(_) => {}
                    Err(e) => fail_closed(e, &l),
                },
            }
        }
        admitted += permits.len() as u64;
        let cap = l.algorithm().capacity();
        assert!(
            admitted <= cap,
            "limit {} admitted {admitted} at one instant, capacity {cap}",
            l.name()
        );
        // Peeks, stats, holders and refunds of a damaged state do not panic either.
        let _ = rate(limiter, l.name()).map(|r| r.peek(1));
        let _ = l.stats();
        let _ = l.live_algorithm();
        let _ = l.permit_holders();
        let _ = l.key_occupancy();
        out.push(admitted);
    }
    out
}

#[test]
fn every_header_word_corrupted_in_turn_is_refused_or_harmless() {
    let (_dir, path) = temp_path("header.shm");
    drop(create(&path));
    let pristine = fs::read(&path).unwrap();
    let mut refused = 0;
    // The validated words, and the reserved words after them (a sample).
    let words = (0..HEADER_WORDS).chain([63, 64, 100, 127, 128, 511]);
    for w in words {
        let original = u64::from_ne_bytes(pristine[w as usize * 8..][..8].try_into().unwrap());
        for (how, value) in [
            ("flip bit 0", original ^ 1),
            ("flip bit 63", original ^ (1 << 63)),
            ("zero", 0),
            ("all ones", u64::MAX),
        ] {
            if value == original {
                continue;
            }
            fs::write(&path, &pristine).unwrap();
            write_word(&path, w, value);
            let result = Limiter::open(&path);
            // Informational or reboot words: the boot id (a reboot), the wall offsets and
            // times, the translation marker and counters, the failed-closed bitmap.
            let expect_error =
                !matches!(w, 12 | 13 | 16 | 17 | 18 | 21..=24 | 26 | 27) && w < HEADER_WORDS;
            match (result, expect_error) {
                (Err(e), true) => {
                    refused += 1;
                    let ok = match w {
                        0 => matches!(e, Error::Foreign(_)),
                        1 if how == "flip bit 63" => matches!(e, Error::Corrupt { .. }),
                        1 => matches!(e, Error::Version { .. }),
                        2 => matches!(e, Error::NotInitialized(_)),
                        15 => matches!(e, Error::ClockMismatch { .. }),
                        _ => matches!(e, Error::Corrupt { .. } | Error::Size { .. }),
                    };
                    assert!(ok, "word {w} ({how}): unexpected error {e:?}");
                    assert!(!e.to_string().is_empty());
                }
                (Ok(l), false) => {
                    if matches!(w, 12 | 13) {
                        assert_eq!(
                            l.reboot_info().translations,
                            1,
                            "a boot id change translates once"
                        );
                        assert_eq!(l.reset_count(), 0);
                    }
                    decide_at_one_instant(&l, 2 * CAP as usize);
                }
                (Err(e), false) => panic!("word {w} ({how}) should be harmless: {e:?}"),
                (Ok(_), true) => panic!("word {w} ({how}) was accepted"),
            }
        }
    }
    println!("{refused} corrupted header words refused with a typed error");
}

/// The reboot words are read at a reboot: each of them damaged, together with a boot id change,
/// still opens, translates once, and every limit stays within its capacity (at the instant of
/// the test, and a day later).
#[test]
fn damaged_reboot_words_at_a_reboot_stay_within_bounds() {
    let (_dir, path) = temp_path("reboot-words.shm");
    {
        let l = create(&path);
        decide_at_one_instant(&l, 2 * CAP as usize);
    }
    let pristine = fs::read(&path).unwrap();
    for w in [16u64, 21, 22, 23, 24, 26, 27, 64] {
        let original = read_word(&path, w);
        for value in [0, u64::MAX, original ^ (1 << 63), original ^ 1, 1 << 62] {
            fs::write(&path, &pristine).unwrap();
            write_word(&path, w, value);
            write_word(&path, 12, read_word(&path, 12) ^ 0xFF);
            let l = Limiter::open(&path).unwrap_or_else(|e| panic!("word {w} = {value:#x}: {e}"));
            let before = if w == 26 { value } else { 0 };
            assert_eq!(l.reboot_info().translations, before.wrapping_add(1));
            decide_at_one_instant(&l, 2 * CAP as usize);
        }
    }
}

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
        for i in 0..slots {
            let t = if own_tag && i == 0 {
                tag
            } else {
                0x1234_5678 + i
            };
            write_word(&path, at + 16 + i * 2, t);
            write_word(&path, at + 16 + i * 2 + 1, u64::MAX);
        }
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

/// A pristine file's bytes and its slot region, built once for the property tests.
fn pristine() -> (tempfile::TempDir, std::path::PathBuf, Vec<u8>, (u64, u64)) {
    let (dir, path) = temp_path("prop.shm");
    drop(create(&path));
    let bytes = fs::read(&path).unwrap();
    let slots = (read_word(&path, 7), read_word(&path, 8));
    (dir, path, bytes, slots)
}

fn region() -> impl Strategy<Value = (u8, u64)> {
    // Which region (0 header words, 1 definitions, 2 slot state, 3 anywhere) and an offset seed.
    (0u8..4, any::<u64>())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, failure_persistence: None, ..ProptestConfig::default() })]

    /// Random bytes over random parts of a valid file: a clean error or a file whose decisions
    /// stay within every capacity.
    #[test]
    fn random_bytes_anywhere_error_cleanly_or_stay_within_bounds(
        patches in prop::collection::vec((region(), prop::collection::vec(any::<u8>(), 1..24)), 1..6)
    ) {
        thread_local!(static FILE: (tempfile::TempDir, std::path::PathBuf, Vec<u8>, (u64, u64)) = pristine());
        FILE.with(|(_dir, path, bytes, (slots_at, slots_len))| {
            let mut damaged = bytes.clone();
            for ((region, seed), patch) in &patches {
                let (base, span) = match region {
                    0 => (0, HEADER_WORDS * 8),
                    1 => (DEFS_OFFSET, 7 * DEF_SIZE),
                    2 => (*slots_at, *slots_len),
                    _ => (0, damaged.len() as u64),
                };
                let at = (base + seed % span) as usize;
                let end = (at + patch.len()).min(damaged.len());
                damaged[at..end].copy_from_slice(&patch[..end - at]);
            }
            fs::write(path, &damaged).unwrap();
            if let Ok(limiter) = Limiter::open(path) {
                decide_at_one_instant(&limiter, 2 * CAP as usize);
            }
        });
    }

    /// Random words written over the slot state only (the definitions intact, so the file
    /// always opens): at one instant no limit admits more than its capacity.
    #[test]
    fn random_state_words_never_admit_beyond_capacity(
        writes in prop::collection::vec((any::<u64>(), prop_oneof![
            any::<u64>(),
            Just(0u64),
            Just(u64::MAX),
            0u64..64,
            (0u64..1 << 24).prop_map(|x| x << 40 | 0xFFFFF),
            (0u64..0x7FFF, 0u64..1 << 48).prop_map(|(lap, t)| lap << 49 | t),
        ]), 1..12)
    ) {
        thread_local!(static FILE: (tempfile::TempDir, std::path::PathBuf, Vec<u8>, (u64, u64)) = pristine());
        FILE.with(|(_dir, path, bytes, (slots_at, slots_len))| {
            let mut damaged = bytes.clone();
            for (seed, value) in &writes {
                let at = (*slots_at + (seed % (slots_len / 8)) * 8) as usize;
                damaged[at..at + 8].copy_from_slice(&value.to_ne_bytes());
            }
            fs::write(path, &damaged).unwrap();
            let limiter = Limiter::open(path).expect("state damage does not affect opening");
            decide_at_one_instant(&limiter, 2 * CAP as usize);
        });
    }
}

/// Truncating a file that another process has mapped: that process dies of SIGBUS on its next
/// access past the new end (the library sizes files only at creation and never remaps, so it
/// cannot prevent this; it is why files must be writable only by the processes that share
/// them). A new open refuses the truncated file. Extending is harmless to the mapped process
/// (the mapping keeps its length) but a new open refuses it too.
#[test]
fn truncated_or_extended_while_mapped() {
    let _serial = fork_lock();
    let (_dir, path) = temp_path("resize.shm");
    let limiter = create(&path);
    let size = limiter.file_size();
    drop(limiter);
    let pipe = || {
        let mut fds = [0; 2];
        // SAFETY: `fds` is a valid array of two ints for pipe to fill.
        assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
        (fds[0], fds[1])
    };
    let (go_r, go_w) = pipe();
    let (ready_r, ready_w) = pipe();
    let p = path.clone();
    let child = spawn(move || {
        let l = Limiter::open(&p).unwrap();
        let log = l.sliding_log("log").unwrap();
        assert!(log.try_acquire(1).unwrap().is_allowed());
        // SAFETY: `ready_w` is the pipe's open write end; one byte from a valid buffer.
        unsafe { libc::write(ready_w, b"r".as_ptr().cast(), 1) };
        let mut b = [0u8; 1];
        // SAFETY: `go_r` is the pipe's open read end; `b` is a valid one-byte buffer.
        unsafe { libc::read(go_r, b.as_mut_ptr().cast(), 1) };
        // The slot pages are gone now: this access raises SIGBUS.
        let _ = log.try_acquire(1);
        vec![1]
    });
    // Once the child has mapped the file and decided, truncate it under the child.
    let mut b = [0u8; 1];
    // SAFETY: `ready_r` is the pipe's open read end; `b` is a valid one-byte buffer.
    assert_eq!(unsafe { libc::read(ready_r, b.as_mut_ptr().cast(), 1) }, 1);
    fs::OpenOptions::new()
        .write(true)
        .open(&path)
        .unwrap()
        .set_len(4096)
        .unwrap();
    // SAFETY: `go_w` is the pipe's open write end; one byte from a valid buffer.
    unsafe { libc::write(go_w, b"x".as_ptr().cast(), 1) };
    let (status, words) = child.wait();
    assert!(
        libc::WIFSIGNALED(status) && libc::WTERMSIG(status) == libc::SIGBUS,
        "the child should die of SIGBUS, status {status:#x}, wrote {words:?}"
    );
    match Limiter::open(&path) {
        // The definitions are past the new end (Corrupt) or the size disagrees (Size).
        Err(Error::Size { .. } | Error::Corrupt { .. }) => {}
        other => panic!("truncated file accepted: {other:?}"),
    }

    // Extended while mapped: the mapped handle keeps working, a new open refuses the file.
    fs::remove_file(&path).unwrap();
    let limiter = create(&path);
    let log = limiter.sliding_log("log").unwrap();
    fs::OpenOptions::new()
        .write(true)
        .open(&path)
        .unwrap()
        .set_len(size + 4096)
        .unwrap();
    assert!(log.try_acquire(1).unwrap().is_allowed());
    match Limiter::open(&path) {
        Err(Error::Size {
            expected, actual, ..
        }) => assert_eq!((expected, actual), (size, size + 4096)),
        other => panic!("extended file accepted: {other:?}"),
    }
    // SAFETY: both descriptors are ours and open.
    unsafe {
        libc::close(go_r);
        libc::close(go_w);
        libc::close(ready_r);
        libc::close(ready_w);
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
