//! A counters limit across a reboot: the next boot translates every key's fixed-window
//! deadline, sliding counts and moving-window entries onto its own clock (by the wall time
//! that passed), so a quota used before the reboot stays used for exactly the rest of its
//! window.

mod common;

use std::time::Duration;

use common::words::{read_word, write_word};
use common::SEC;
use shmlimit::{Clock, Counters, Keyed, Limiter, ManualClock};

const MINUTE: u64 = 60 * SEC;
const HOUR: u64 = 60 * MINUTE;
const OLD_UPTIME: u64 = 400 * 24 * HOUR;
const WORD_BOOT_ID: u64 = 12;
const WORD_WALL_OFFSET: u64 = 16;
const WORD_WALL_MAX: u64 = 21;
const WORD_LAST_UNIX: u64 = 22;
const WORD_TRANSLATING: u64 = 23;

fn builder() -> shmlimit::Builder {
    Limiter::builder().keyed_limit("limits", Counters::new().moving_window(4), Keyed::new(64))
}

#[test]
fn counts_and_logs_used_before_a_reboot_stay_used_for_the_rest_of_their_window() {
    let dir = tempfile::tempdir_in("/var/tmp").expect("a directory under /var/tmp");
    let path = dir.path().join("counters.shm");
    drop(builder().create_or_open(&path).unwrap());
    // The old boot: up for 400 days, at a wall offset of its own.
    let unix = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64;
    let old_offset = unix - OLD_UPTIME;
    write_word(&path, WORD_WALL_OFFSET, old_offset);
    write_word(&path, WORD_WALL_MAX, old_offset);
    let clock = ManualClock::new(OLD_UPTIME);
    let old = builder().clock(clock.clone()).open(&path).unwrap();
    let c = old.counters("limits").unwrap();
    let hour = Duration::from_secs(3_600);
    assert_eq!(c.incr(b"fixed", hour, 3).unwrap(), 3);
    assert!(c
        .acquire_moving(b"moving", 2, hour, 2)
        .unwrap()
        .is_allowed());
    clock.advance(10 * MINUTE);
    drop((c, old));

    // The reboot: the boot id changes; the new boot opens 5 minutes of wall time later.
    let last_unix = clock.now_ns() + old_offset;
    write_word(&path, WORD_WALL_MAX, old_offset);
    write_word(&path, WORD_LAST_UNIX, last_unix);
    write_word(
        &path,
        WORD_BOOT_ID,
        read_word(&path, WORD_BOOT_ID) ^ 0x5A5A_5A5A,
    );
    let new_clock = ManualClock::new(0);
    let new = builder().clock(new_clock.clone()).open(&path).unwrap();
    assert_eq!(new.reboot_info().translations, 1);
    let new_offset = read_word(&path, WORD_WALL_OFFSET);
    new_clock.set(last_unix + 5 * MINUTE - new_offset);
    let c = new.counters("limits").unwrap();

    // 15 minutes of the hour are gone: 45 left, and at most two of the word's units (about
    // 2 ms each: the deadline and its translation round up) more.
    let (count, left) = c.count(b"fixed").unwrap();
    assert_eq!(count, 3);
    let left = left.as_nanos() as u64;
    assert!(
        (45 * MINUTE..45 * MINUTE + (2 << 21)).contains(&left),
        "{left}"
    );
    let d = c.acquire_moving(b"moving", 2, hour, 1).unwrap();
    assert!(d.is_denied());
    assert_eq!(d.retry_after(), Duration::from_nanos(45 * MINUTE));
    assert_eq!(c.moving_window(b"moving", 2, hour).unwrap().0, 2);
    new_clock.advance(45 * MINUTE - 1);
    assert!(c.acquire_moving(b"moving", 2, hour, 1).unwrap().is_denied());
    new_clock.advance(1);
    assert!(c
        .acquire_moving(b"moving", 2, hour, 2)
        .unwrap()
        .is_allowed());
    new_clock.advance(2 << 21);
    assert_eq!(c.count(b"fixed").unwrap().0, 0);
}

/// A translation of this boot interrupted part way (its marker names this boot) may have moved
/// a word already: run again, it must not move any time earlier a second time, or the rest of
/// a window would be given back.
#[test]
fn an_interrupted_translation_never_moves_a_counter_earlier_twice() {
    let dir = tempfile::tempdir_in("/var/tmp").expect("a directory under /var/tmp");
    let path = dir.path().join("counters-interrupted.shm");
    drop(builder().create_or_open(&path).unwrap());
    let boot = (
        read_word(&path, WORD_BOOT_ID),
        read_word(&path, WORD_BOOT_ID + 1),
    );
    let clock = ManualClock::new(0);
    let this = builder().clock(clock.clone()).open(&path).unwrap();
    clock.set(read_word(&path, WORD_LAST_UNIX) - read_word(&path, WORD_WALL_OFFSET));
    let c = this.counters("limits").unwrap();
    let hour = Duration::from_secs(3_600);
    assert_eq!(c.incr(b"fixed", hour, 3).unwrap(), 3);
    assert!(c
        .acquire_moving(b"moving", 2, hour, 2)
        .unwrap()
        .is_allowed());
    drop((c, this));

    // The marker names this boot and no limit is marked done: the words may have moved once
    // already. The highest wall offset recorded is an hour below this boot's, so moving the
    // times again would take an hour off them: the whole window.
    write_word(&path, WORD_TRANSLATING, boot.0);
    write_word(&path, WORD_TRANSLATING + 1, boot.1);
    let offset = read_word(&path, WORD_WALL_OFFSET);
    write_word(&path, WORD_WALL_MAX, offset - HOUR);
    write_word(&path, WORD_BOOT_ID, boot.0 ^ 0x5A5A_5A5A);
    let again = builder().clock(clock.clone()).open(&path).unwrap();
    assert_eq!(again.reboot_info().translations, 1);
    assert_eq!(again.reboot_info().failed_closed, vec![0], "under way");
    let c = again.counters("limits").unwrap();
    assert_eq!(
        c.count(b"fixed").unwrap().0,
        3,
        "the fixed window still counts"
    );
    assert!(
        c.acquire_moving(b"moving", 2, hour, 1).unwrap().is_denied(),
        "the moving window's entries still count"
    );
}
