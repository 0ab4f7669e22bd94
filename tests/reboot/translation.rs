//! The first open after a reboot translates every kind of state; a state it cannot translate
//! fails closed until reset, and an interrupted translation keeps the stricter reading.

use super::*;

#[test]
fn every_kind_of_state_is_translated_and_permits_are_released() {
    let (_dir, path) = disk_path("every.shm");
    let (story, old) = Story::begin(&path, every_kind);
    assert!(use_up(&old, 8, b"tenant").iter().all(|(_, n)| *n == 4));
    drop(old);
    // Down 10 minutes (20:10 UTC): nothing daily comes back but the permits.
    let (new, clock) = story.reboot(&path, 10 * 60 * SEC as i64, every_kind);
    let after = use_up(&new, 8, b"tenant");
    for (name, n) in &after {
        let want = if name == "conc" { 4 } else { 0 };
        assert_eq!(*n, want, "{name} after the reboot: {after:?}");
    }
    // Three days later everything is back, to its capacity and no more. (Two would not do for
    // the windows aligned to the monotonic clock: their counts move to the window holding the
    // old window's last instant, up to a window later than the admissions.)
    clock.advance(3 * DAY);
    for (name, n) in use_up(&new, 8, b"tenant") {
        let want = if name == "conc" { 0 } else { 4 };
        assert_eq!(
            n, want,
            "{name} three days later (the permits are still held)"
        );
    }
    assert!(new.reboot_info().failed_closed.is_empty());
}

#[test]
fn a_state_that_cannot_be_translated_fails_closed_until_reset() {
    let build = || {
        Limiter::builder()
            .limit("sw", SlidingWindow::new(5, Duration::from_secs(1)))
            .limit("daily", FixedWindow::new(10, Duration::from_secs(86_400)))
    };
    let (_dir, path) = disk_path("fail-closed.shm");
    let (story, old) = Story::begin_on(101, &path, build);
    assert!(old
        .window("sw")
        .unwrap()
        .try_acquire(5)
        .unwrap()
        .is_allowed());
    assert!(old
        .window("daily")
        .unwrap()
        .try_acquire(1)
        .unwrap()
        .is_allowed());
    drop(old);
    // The wall clock reads 100 days earlier after the reboot: the 1 s sliding window would be
    // 8.6 million windows ahead, beyond the 2^22 its 24-bit index tells from a stale read.
    let (new, clock) = story.reboot(&path, -100 * DAY as i64, build);
    let sw = new.window("sw").unwrap();
    assert_eq!(new.reboot_info().failed_closed, vec![0]);
    assert!(sw.try_acquire(1).unwrap().is_denied());
    clock.advance(30 * DAY);
    assert!(sw.try_acquire(1).unwrap().is_denied(), "fails closed");
    // The daily window is 100 days ahead: denied too, within its encoding.
    assert!(new
        .window("daily")
        .unwrap()
        .try_acquire(10)
        .unwrap()
        .is_denied());
    sw.reset().unwrap();
    assert!(
        new.reboot_info().failed_closed.is_empty(),
        "a reset clears the mark"
    );
    assert!(sw.try_acquire(5).unwrap().is_allowed());
}

#[test]
fn an_interrupted_translation_keeps_the_stricter_reading() {
    let (_dir, path) = disk_path("interrupted.shm");
    let (story, old) = Story::begin(&path, per_day_bucket);
    assert!(old
        .token_bucket("tb")
        .unwrap()
        .try_acquire(10_000)
        .unwrap()
        .is_allowed());
    drop(old);
    // A translator of this boot died part way: its marker names this boot. Each word may or
    // may not have moved, so each keeps the stricter of the two readings: here the
    // untranslated one (the old boot's times are later on this clock).
    let boot = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").unwrap();
    let hex: Vec<u8> = boot.trim().bytes().filter(u8::is_ascii_hexdigit).collect();
    let bytes: Vec<u8> = hex
        .chunks(2)
        .map(|p| u8::from_str_radix(std::str::from_utf8(p).unwrap(), 16).unwrap())
        .collect();
    write_word(
        &path,
        WORD_TRANSLATING,
        u64::from_ne_bytes(bytes[..8].try_into().unwrap()),
    );
    write_word(
        &path,
        WORD_TRANSLATING + 1,
        u64::from_ne_bytes(bytes[8..].try_into().unwrap()),
    );
    let (new, _clock) = story.reboot(&path, 3 * HOUR as i64, per_day_bucket);
    let tb = new.token_bucket("tb").unwrap();
    assert_eq!(
        tb.peek(1).unwrap().remaining(),
        0,
        "no refill for the down time: the word may not have been translated"
    );
    // Limits are marked done one by one (header words 128..192): with none marked, `tb` (the
    // first) is the one that may be half translated, and `inspect` names it; `daily` was
    // never touched and is translated exactly.
    assert_eq!(new.reboot_info().failed_closed, vec![0]);
}

/// After an interruption, the limits the translation had finished are not translated again.
#[test]
fn an_interrupted_translation_skips_the_limits_it_finished() {
    let (_dir, path) = disk_path("interrupted-done.shm");
    let (story, old) = Story::begin(&path, per_day_bucket);
    assert!(old
        .token_bucket("tb")
        .unwrap()
        .try_acquire(10_000)
        .unwrap()
        .is_allowed());
    drop(old);
    // A complete translation first (a reboot 3 h later), then the same boot's marker with
    // `tb` (limit 0) marked done: a second translation must leave `tb` as the first left it.
    let (first, clock) = story.reboot(&path, 3 * HOUR as i64, per_day_bucket);
    let refilled = first
        .token_bucket("tb")
        .unwrap()
        .peek(1)
        .unwrap()
        .remaining();
    assert!(refilled > 1_000, "3 h of a 10,000/day bucket: {refilled}");
    let boot = (
        read_word(&path, WORD_BOOT_ID),
        read_word(&path, WORD_BOOT_ID + 1),
    );
    drop(first);
    write_word(&path, WORD_TRANSLATING, boot.0);
    write_word(&path, WORD_TRANSLATING + 1, boot.1);
    write_word(&path, 128, 1); // limit 0 done
    write_word(&path, WORD_BOOT_ID, boot.0 ^ 1); // the next open translates again
    let again = per_day_bucket().clock(clock.clone()).open(&path).unwrap();
    let tb = again.token_bucket("tb").unwrap();
    assert!(
        tb.peek(1).unwrap().remaining() >= refilled,
        "`tb` was not moved a second time"
    );
    assert_eq!(
        again.reboot_info().failed_closed,
        vec![1],
        "`daily` was under way"
    );
}

/// A keyed adaptive limit after a reboot: its permits die with their holders and every key
/// starts over at its initial limit (its window start was a time of the dead boot's clock);
/// windows then close on the new clock, and a key learns again from its own samples.
#[test]
fn a_keyed_adaptive_limit_starts_over_after_a_reboot() {
    let build = || {
        Limiter::builder().keyed_limit(
            "hosts",
            shmlimit::AdaptiveConcurrency::new(2, 16)
                .initial(8)
                .window(Duration::from_millis(10)),
            Keyed::new(8),
        )
    };
    let (_dir, path) = disk_path("keyed-adaptive.shm");
    let (story, old) = Story::begin(&path, build);
    let hosts = old.keyed_adaptive_concurrency("hosts").unwrap();
    for _ in 0..30 {
        if let Some(p) = hosts.try_acquire(b"db-1").unwrap() {
            p.release(shmlimit::Outcome::Error);
        }
        old.clock().advance(10 * MS);
    }
    assert_eq!(hosts.status(b"db-1").unwrap().limit, 2.0);
    // A permit of db-2 still held when the host goes down.
    std::mem::forget(hosts.try_acquire(b"db-2").unwrap().unwrap());
    drop(hosts);
    drop(old);
    let (new, clock) = story.reboot(&path, 10 * 60 * SEC as i64, build);
    let hosts = new.keyed_adaptive_concurrency("hosts").unwrap();
    for key in [&b"db-1"[..], b"db-2"] {
        let s = hosts.status(key).unwrap();
        assert_eq!(
            (s.limit, s.in_flight, s.rtt_long_us),
            (8.0, 0, None),
            "{s:?}"
        );
    }
    // Errors in one window of the new clock back db-1 off; db-2 is untouched.
    let held: Vec<_> = (0..8)
        .map(|_| hosts.try_acquire(b"db-1").unwrap().unwrap())
        .collect();
    assert!(hosts.try_acquire(b"db-1").unwrap().is_none());
    clock.advance(10 * MS);
    for p in held {
        p.release(shmlimit::Outcome::Error);
    }
    assert!(hosts.status(b"db-1").unwrap().limit < 8.0);
    assert_eq!(hosts.status(b"db-2").unwrap().limit, 8.0);
}
