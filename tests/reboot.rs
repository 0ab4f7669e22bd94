//! Reboots keep the quota: files on a disk-backed directory (`/var/tmp`), a simulated reboot
//! (the boot id words rewritten, the old boot's wall offset and last Unix time set to a stated
//! story), and the first open after it translating every stored time through the wall clock.
//!
//! The story of each test: the old boot's `CLOCK_MONOTONIC` read `OLD_UPTIME` (400 days) at the
//! Unix time `u0`, 20:00 UTC on a day after today (in the future, so that the story's times on
//! this boot's clock are never earlier than the real clock the translation read); the host is down for a stated amount of wall time; the new
//! boot's offset is this host's real one (the open measures it), and the new handle's
//! [`ManualClock`] is set to the monotonic time of the story's Unix time. A daily fixed window
//! aligned to the wall clock is the UTC day.

mod common;

use std::fs;
use std::path::{Path, PathBuf};
use std::time::Duration;

use common::words::{read_word, write_word};
use common::{fork_lock, spawn, use_up, SEC};
use shmlimit::{
    Alignment, Clock, Concurrency, FixedWindow, Keyed, Limiter, ManualClock, OnReboot, Rate,
    SlidingLog, SlidingWindow, TokenBucket,
};

const HOUR: u64 = 3_600 * SEC;
const DAY: u64 = 24 * HOUR;
/// The old boot's uptime at the story's start: longer than this host's, so that the old boot's
/// monotonic times are later than this boot's, as after a real reboot.
const OLD_UPTIME: u64 = 400 * DAY;

const WORD_BOOT_ID: u64 = 12;
const WORD_WALL_OFFSET: u64 = 16;
const WORD_WALL_MAX: u64 = 21;
const WORD_LAST_UNIX: u64 = 22;
const WORD_TRANSLATING: u64 = 23;

/// A file in a fresh directory under `/var/tmp` (disk-backed, not tmpfs: checked).
fn disk_path(name: &str) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir_in("/var/tmp").expect("a directory under /var/tmp");
    // SAFETY: a zeroed statfs is a valid out-parameter; the path is NUL-terminated.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    let c = std::ffi::CString::new(dir.path().to_str().unwrap()).unwrap();
    // SAFETY: as above.
    assert_eq!(unsafe { libc::statfs(c.as_ptr(), &mut st) }, 0);
    assert_ne!(
        st.f_type as i64,
        libc::TMPFS_MAGIC,
        "/var/tmp must be disk-backed for these tests"
    );
    let path = dir.path().join(name);
    (dir, path)
}

fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64
}

/// 20:00 UTC `days` days from today, in Unix ns.
fn story_start(days: u64) -> u64 {
    (unix_now() / DAY + days) * DAY + 20 * HOUR
}

/// The old boot of a story: its wall offset makes `OLD_UPTIME` on its monotonic clock the Unix
/// time `u0`. Written into the file (phase and highest offset) before the old boot's handle
/// attaches, so its wall-aligned windows are the story's UTC days.
struct Story {
    old_offset: u64,
    clock: ManualClock,
}

impl Story {
    fn begin(
        path: &Path,
        builder: impl Fn() -> shmlimit::Builder,
    ) -> (Story, Limiter<ManualClock>) {
        Story::begin_on(1, path, builder)
    }

    fn begin_on(
        days: u64,
        path: &Path,
        builder: impl Fn() -> shmlimit::Builder,
    ) -> (Story, Limiter<ManualClock>) {
        drop(builder().create_or_open(path).unwrap());
        let u0 = story_start(days);
        let old_offset = u0 - OLD_UPTIME;
        write_word(path, WORD_WALL_OFFSET, old_offset);
        write_word(path, WORD_WALL_MAX, old_offset);
        let clock = ManualClock::new(OLD_UPTIME);
        let limiter = builder().clock(clock.clone()).open(path).unwrap();
        (Story { old_offset, clock }, limiter)
    }

    /// The host reboots: this story's boot ends at the Unix time of its clock, the boot id
    /// changes, and the new boot opens the file `down` ns of wall time later (negative: the
    /// wall clock went backwards). Returns the new boot's handle, its clock set to the story's
    /// time on the new timeline.
    fn reboot(
        &self,
        path: &Path,
        down: i64,
        builder: impl Fn() -> shmlimit::Builder,
    ) -> (Limiter<ManualClock>, ManualClock) {
        let last_unix = self.clock.now_ns() + self.old_offset;
        // The old boot's words as its last open or sync left them (this process's own opens in
        // the story raised them to this host's real offset).
        write_word(path, WORD_WALL_MAX, self.old_offset);
        write_word(path, WORD_LAST_UNIX, last_unix);
        write_word(
            path,
            WORD_BOOT_ID,
            read_word(path, WORD_BOOT_ID) ^ 0x5A5A_5A5A,
        );
        write_word(path, WORD_BOOT_ID + 1, !read_word(path, WORD_BOOT_ID + 1));
        let clock = ManualClock::new(0);
        let limiter = builder().clock(clock.clone()).open(path).unwrap();
        let new_offset = read_word(path, WORD_WALL_OFFSET);
        assert_ne!(
            new_offset, self.old_offset,
            "the open took this boot's offset"
        );
        let unix = (last_unix as i64 + down) as u64;
        clock.set(unix - new_offset);
        assert_eq!(limiter.reboot_info().translations, 1);
        assert_eq!(limiter.reset_count(), 0);
        (limiter, clock)
    }
}

fn daily() -> shmlimit::Builder {
    Limiter::builder().limit("daily", FixedWindow::new(10, Duration::from_secs(86_400)))
}

#[test]
fn a_daily_quota_used_before_a_reboot_stays_used_until_the_next_utc_midnight() {
    let (_dir, path) = disk_path("daily.shm");
    let (story, old) = Story::begin(&path, daily);
    let quota = old.window("daily").unwrap();
    assert!(quota.try_acquire(10).unwrap().is_allowed());
    let d = quota.try_acquire(1).unwrap();
    assert!(d.is_denied());
    assert_eq!(d.retry_after_ns(), 4 * HOUR, "20:00 UTC: 4 h to midnight");
    drop((quota, old));

    // Down for one hour of wall time: the new boot opens at 21:00 UTC.
    let (new, clock) = story.reboot(&path, HOUR as i64, daily);
    let quota = new.window("daily").unwrap();
    let d = quota.try_acquire(1).unwrap();
    assert!(
        d.is_denied(),
        "the 11th call after the reboot is still denied"
    );
    assert_eq!(d.retry_after_ns(), 3 * HOUR, "21:00 UTC: 3 h to midnight");
    clock.advance(3 * HOUR - 1);
    assert!(
        quota.try_acquire(1).unwrap().is_denied(),
        "23:59:59.999999999"
    );
    clock.advance(1);
    assert!(
        quota.try_acquire(10).unwrap().is_allowed(),
        "UTC midnight: the next day's 10"
    );
    assert!(quota.try_acquire(1).unwrap().is_denied());
    assert!(new.reboot_info().failed_closed.is_empty());
}

#[test]
fn a_reboot_past_midnight_gives_the_next_day_exactly() {
    let (_dir, path) = disk_path("past-midnight.shm");
    let (story, old) = Story::begin(&path, daily);
    assert!(old
        .window("daily")
        .unwrap()
        .try_acquire(10)
        .unwrap()
        .is_allowed());
    drop(old);
    // Down for 5 h: 01:00 UTC the next day.
    let (new, _clock) = story.reboot(&path, 5 * HOUR as i64, daily);
    let quota = new.window("daily").unwrap();
    assert!(quota.try_acquire(10).unwrap().is_allowed());
    let d = quota.try_acquire(1).unwrap();
    assert!(d.is_denied());
    assert_eq!(d.retry_after_ns(), 23 * HOUR);
}

fn per_day_bucket() -> shmlimit::Builder {
    let rate = Rate::per_day(10_000).unwrap();
    assert_eq!(rate.emission_ns(), 8_640_000_000);
    assert_eq!(Rate::per_week(7).unwrap().emission_ns(), DAY);
    assert_eq!(
        Rate::per_month(10_000).unwrap().emission_ns(),
        262_974_600_000
    );
    Limiter::builder()
        .limit("tb", TokenBucket::new(10_000, rate))
        .limit("daily", FixedWindow::new(10, Duration::from_secs(86_400)))
}

#[test]
fn a_wall_clock_moved_backwards_across_the_reboot_grants_nothing_extra() {
    let (_dir, path) = disk_path("backwards.shm");
    let (story, old) = Story::begin(&path, per_day_bucket);
    let (tb, daily) = (
        old.token_bucket("tb").unwrap(),
        old.window("daily").unwrap(),
    );
    assert!(tb.try_acquire(10_000).unwrap().is_allowed());
    assert!(daily.try_acquire(10).unwrap().is_allowed());
    let before = tb.try_acquire(1).unwrap().retry_after_ns();
    drop((tb, daily, old));

    // The new boot's wall clock reads 6 h earlier than the old boot's last reading.
    let (new, clock) = story.reboot(&path, -6 * HOUR as i64, per_day_bucket);
    let (tb, daily) = (
        new.token_bucket("tb").unwrap(),
        new.window("daily").unwrap(),
    );
    let d = tb.try_acquire(1).unwrap();
    assert!(d.is_denied());
    assert_eq!(
        d.retry_after_ns(),
        before + 6 * HOUR,
        "the bucket refills from the old boot's last time, 6 h ahead on this clock"
    );
    let w = daily.try_acquire(1).unwrap();
    assert!(w.is_denied(), "14:00 UTC on the same day as the admissions");
    assert_eq!(w.retry_after_ns(), 10 * HOUR, "until the next UTC midnight");
    clock.advance(6 * HOUR);
    let d = tb.peek(1).unwrap();
    assert_eq!(
        d.retry_after_ns(),
        before,
        "back at the old boot's last time: still empty"
    );
    assert!(new.reboot_info().last_wall_elapsed_ns < 0);
}

#[test]
fn a_token_bucket_of_10000_a_day_refills_for_the_down_time_the_wall_clock_proves() {
    let (_dir, path) = disk_path("bucket.shm");
    let (story, old) = Story::begin(&path, per_day_bucket);
    let tb = old.token_bucket("tb").unwrap();
    assert!(tb.try_acquire(10_000).unwrap().is_allowed());
    assert!(tb.try_acquire(1).unwrap().is_denied());
    drop((tb, old));
    // Down 3 h: 10,800 s at 8.64 s a token is 1,250 tokens.
    let (new, clock) = story.reboot(&path, 3 * HOUR as i64, per_day_bucket);
    let tb = new.token_bucket("tb").unwrap();
    assert_eq!(tb.peek(1).unwrap().remaining(), 1_249);
    assert!(tb.try_acquire(1_250).unwrap().is_allowed());
    let d = tb.try_acquire(1).unwrap();
    assert!(d.is_denied());
    assert_eq!(d.retry_after_ns(), 8_640_000_000);
    clock.advance(8_640_000_000);
    assert!(tb.try_acquire(1).unwrap().is_allowed());
}

#[test]
fn a_reset_file_keeps_todays_behaviour() {
    let (_dir, path) = disk_path("reset.shm");
    let reset = || daily().on_reboot(OnReboot::Reset);
    drop(reset().create_or_open(&path).unwrap());
    let l = Limiter::open(&path).unwrap();
    assert!(l
        .window("daily")
        .unwrap()
        .try_acquire(10)
        .unwrap()
        .is_allowed());
    assert_eq!(l.reboot_info().on_reboot, OnReboot::Reset);
    drop(l);
    write_word(&path, WORD_BOOT_ID, !read_word(&path, WORD_BOOT_ID));
    let l = Limiter::open(&path).unwrap();
    assert_eq!((l.reset_count(), l.reboot_info().translations), (1, 0));
    assert!(l
        .window("daily")
        .unwrap()
        .try_acquire(10)
        .unwrap()
        .is_allowed());
    // Asking for the other choice on an existing file is a conflict, not a silent change.
    assert!(matches!(
        daily().on_reboot(OnReboot::Translate).open(&path),
        Err(shmlimit::Error::DefinitionConflict { .. })
    ));
}

fn every_kind() -> shmlimit::Builder {
    let daily_rate = Rate::new(4, Duration::from_secs(86_400)).unwrap();
    let day = Duration::from_secs(86_400);
    Limiter::builder()
        .limit("tb", TokenBucket::new(4, daily_rate))
        .limit_with("split", TokenBucket::new(4, daily_rate), |mut d| {
            d.split = 2;
            d
        })
        .limit("fw", FixedWindow::new(4, day))
        .limit(
            "fw_mono",
            FixedWindow::new(4, day).aligned(Alignment::Monotonic),
        )
        .limit("sw", SlidingWindow::new(4, day))
        .limit(
            "sw_mono",
            SlidingWindow {
                limit: 4,
                window: day,
                alignment: Alignment::Monotonic,
            },
        )
        .limit("log", SlidingLog::new(4, day))
        .limit("conc", Concurrency::new(4))
        .keyed_limit("keyed_tb", TokenBucket::new(4, daily_rate), Keyed::new(8))
        .keyed_limit("keyed_fw", FixedWindow::new(4, day), Keyed::new(8))
        .keyed_limit("keyed_sw", SlidingWindow::new(4, day), Keyed::new(8))
}

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
fn a_keyed_daily_quota_survives_a_reboot() {
    let build = || {
        Limiter::builder().keyed_limit(
            "tenants",
            FixedWindow::new(10, Duration::from_secs(86_400)),
            Keyed::new(64),
        )
    };
    let (_dir, path) = disk_path("keyed.shm");
    let (story, old) = Story::begin(&path, build);
    let t = old.keyed_window("tenants").unwrap();
    assert!(t.try_acquire_key(b"tenant-a", 10).unwrap().is_allowed());
    assert!(t.try_acquire_key(b"tenant-b", 3).unwrap().is_allowed());
    drop((t, old));
    let (new, clock) = story.reboot(&path, 2 * HOUR as i64, build);
    let t = new.keyed_window("tenants").unwrap();
    let d = t.try_acquire_key(b"tenant-a", 1).unwrap();
    assert!(d.is_denied(), "tenant-a used its 10 before the reboot");
    assert_eq!(d.retry_after_ns(), 2 * HOUR, "22:00 UTC: 2 h to midnight");
    assert!(t.try_acquire_key(b"tenant-b", 7).unwrap().is_allowed());
    assert!(t.try_acquire_key(b"tenant-b", 1).unwrap().is_denied());
    assert!(t.try_acquire_key(b"tenant-c", 10).unwrap().is_allowed());
    clock.advance(2 * HOUR);
    assert!(t.try_acquire_key(b"tenant-a", 10).unwrap().is_allowed());
    assert!(t.try_acquire_key(b"tenant-b", 10).unwrap().is_allowed());
}

#[test]
fn a_restart_of_every_process_without_a_reboot_keeps_everything() {
    let _serial = fork_lock();
    let (_dir, path) = disk_path("restart.shm");
    let build = || {
        Limiter::builder()
            .limit("daily", FixedWindow::new(10, Duration::from_secs(86_400)))
            .limit(
                "tb",
                TokenBucket::new(100, Rate::new(100, Duration::from_secs(86_400)).unwrap()),
            )
            .keyed_limit(
                "tenants",
                FixedWindow::new(5, Duration::from_secs(86_400)),
                Keyed::new(16),
            )
    };
    // Two worker processes use the quotas and exit; nothing else holds the file.
    for round in 0..2 {
        let p = path.clone();
        let (status, tenant) = spawn(move || {
            let l = build().create_or_open(&p).unwrap();
            assert!(l
                .window("daily")
                .unwrap()
                .try_acquire(5)
                .unwrap()
                .is_allowed());
            assert!(l
                .token_bucket("tb")
                .unwrap()
                .try_acquire(50)
                .unwrap()
                .is_allowed());
            vec![l
                .keyed_window("tenants")
                .unwrap()
                .try_acquire_key(b"t", 5)
                .unwrap()
                .is_allowed() as u64]
        })
        .wait();
        assert_eq!(status, 0);
        assert_eq!(
            tenant,
            vec![(round == 0) as u64],
            "the tenant's 5 once only"
        );
    }
    let p = path.clone();
    let (status, out) = spawn(move || {
        let l = build().open(&p).unwrap();
        vec![
            l.window("daily")
                .unwrap()
                .try_acquire(1)
                .unwrap()
                .is_allowed() as u64,
            l.token_bucket("tb").unwrap().peek(1).unwrap().remaining(),
            l.reboot_info().translations + l.reset_count(),
            l.keyed_window("tenants")
                .unwrap()
                .try_acquire_key(b"t", 1)
                .unwrap()
                .is_allowed() as u64,
        ]
    })
    .wait();
    assert_eq!(status, 0);
    assert_eq!(
        out[0], 0,
        "the daily 10 stay used after every process restarted"
    );
    assert!(out[1] <= 1, "the bucket stays drained: {} left", out[1]);
    assert_eq!(out[2], 0, "no reboot, no translation or reset");
    assert_eq!(out[3], 0, "the keyed quota stays used");
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

/// A power loss keeps the pages as the kernel last wrote them. Simulated by copies of the file
/// taken at random instants while two worker processes decide: every copy opens (as after a
/// reboot: its boot id rewritten, so its states are translated), holds at least what was used
/// when the copy began and at most what was used when it ended, and admits no more than the
/// rest of the quota.
#[test]
fn copies_taken_while_workers_run_open_and_keep_what_they_recorded() {
    let _serial = fork_lock();
    let (dir, path) = disk_path("live.shm");
    const QUOTA: u64 = 1_000_000;
    let build = || {
        Limiter::builder()
            .limit(
                "daily",
                FixedWindow::new(QUOTA, Duration::from_secs(86_400)),
            )
            .keyed_limit(
                "tenants",
                FixedWindow::new(QUOTA, Duration::from_secs(86_400)),
                Keyed::new(16),
            )
    };
    let live = build().create_or_open(&path).unwrap();
    let used = |l: &Limiter| -> [u64; 2] {
        [
            QUOTA - l.window("daily").unwrap().peek(1).unwrap().remaining() - 1,
            QUOTA
                - l.keyed_window("tenants")
                    .unwrap()
                    .peek_key(b"t", 1)
                    .unwrap()
                    .remaining()
                - 1,
        ]
    };
    let stop = dir.path().join("stop");
    let workers: Vec<_> = (0..2)
        .map(|_| {
            let (p, stop) = (path.clone(), stop.clone());
            spawn(move || {
                let l = build().open(&p).unwrap();
                let (daily, tenants) = (
                    l.window("daily").unwrap(),
                    l.keyed_window("tenants").unwrap(),
                );
                let mut n = 0;
                while !stop.exists() && n < 400_000 {
                    for _ in 0..100 {
                        assert!(daily.try_acquire(1).unwrap().is_allowed());
                        assert!(tenants.try_acquire_key(b"t", 1).unwrap().is_allowed());
                    }
                    n += 100;
                }
                vec![n]
            })
        })
        .collect();
    // Both workers are deciding before the first copy.
    while used(&live)[0] < 1_000 {
        std::thread::sleep(Duration::from_millis(1));
    }
    let mut seed = 0x9E37_79B9_7F4A_7C15u64;
    let mut copies = 0;
    for i in 0..8 {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        std::thread::sleep(Duration::from_micros(seed % 20_000));
        let before = used(&live);
        let copy = dir.path().join(format!("copy{i}.shm"));
        fs::copy(&path, &copy).unwrap();
        let after = used(&live);
        write_word(&copy, WORD_BOOT_ID, !read_word(&copy, WORD_BOOT_ID));
        let c = Limiter::open(&copy).unwrap();
        assert_eq!(c.reboot_info().translations, 1);
        let held = used(&c);
        for k in 0..2 {
            assert!(
                before[k] <= held[k] && held[k] <= after[k],
                "copy {i}, limit {k}: {} used before the copy, {} in it, {} after",
                before[k],
                held[k],
                after[k]
            );
        }
        // The copy grants exactly the rest of its quota.
        let daily = c.window("daily").unwrap();
        assert!(daily.try_acquire(QUOTA - held[0]).unwrap().is_allowed());
        assert!(daily.try_acquire(1).unwrap().is_denied());
        copies += 1;
    }
    fs::write(&stop, b"").unwrap();
    let mut total = 0;
    for w in workers {
        let (status, n) = w.wait();
        assert_eq!(status, 0);
        total += n[0];
    }
    assert_eq!(used(&live), [total, total]);
    assert_eq!(copies, 8);
}

#[test]
fn sync_writes_the_file_and_records_this_boot_as_alive() {
    let (_dir, path) = disk_path("sync.shm");
    let l = daily()
        .sync_every(Duration::from_millis(5))
        .create_or_open(&path)
        .unwrap();
    write_word(&path, WORD_LAST_UNIX, 1);
    l.sync().unwrap();
    let seen = read_word(&path, WORD_LAST_UNIX);
    assert!(
        seen > unix_now() - 60 * SEC,
        "sync records the latest Unix time"
    );
    // The helper thread does the same on its own.
    write_word(&path, WORD_LAST_UNIX, 1);
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while read_word(&path, WORD_LAST_UNIX) == 1 {
        assert!(
            std::time::Instant::now() < deadline,
            "the sync thread never ran"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn a_calendar_day_in_a_fixed_offset_is_kept_across_a_reboot() {
    // UTC+05:30: the story's 20:00 UTC is 01:30 local; local midnight is 18:30 UTC.
    let offset = 5 * 3_600 + 30 * 60;
    let build = || Limiter::builder().limit("day", FixedWindow::daily(10).utc_offset(offset));
    let (_dir, path) = disk_path("calendar.shm");
    let (story, old) = Story::begin(&path, build);
    assert!(old
        .window("day")
        .unwrap()
        .try_acquire(10)
        .unwrap()
        .is_allowed());
    drop(old);
    // Down 1 h: 21:00 UTC, 02:30 local: 21 h 30 min to local midnight.
    let (new, clock) = story.reboot(&path, HOUR as i64, build);
    let day = new.window("day").unwrap();
    let d = day.try_acquire(1).unwrap();
    assert!(d.is_denied());
    assert_eq!(d.retry_after_ns(), 21 * HOUR + 30 * 60 * SEC);
    clock.advance(d.retry_after_ns());
    assert!(day.try_acquire(10).unwrap().is_allowed());
}

#[test]
fn a_monthly_quota_is_kept_across_a_reboot() {
    let build = || Limiter::builder().limit("month", FixedWindow::monthly(1_000));
    let (_dir, path) = disk_path("monthly.shm");
    let (story, old) = Story::begin(&path, build);
    let month = old.window("month").unwrap();
    assert!(month.try_acquire(1_000).unwrap().is_allowed());
    // 20:00 UTC: the month ends at a midnight at least 4 h away.
    let before = month.try_acquire(1).unwrap().retry_after_ns();
    assert!((4 * HOUR..=31 * DAY).contains(&before));
    drop((month, old));
    let (new, clock) = story.reboot(&path, 2 * HOUR as i64, build);
    let month = new.window("month").unwrap();
    let d = month.try_acquire(1).unwrap();
    assert!(
        d.is_denied(),
        "the month's 1,000 stay used after the reboot"
    );
    assert_eq!(
        d.retry_after_ns(),
        before - 2 * HOUR,
        "until the next month's start"
    );
    clock.advance(d.retry_after_ns());
    assert!(
        month.try_acquire(1_000).unwrap().is_allowed(),
        "the next month"
    );
}
