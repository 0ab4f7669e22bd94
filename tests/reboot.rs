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

#[path = "reboot/quotas.rs"]
mod quotas;

#[path = "reboot/translation.rs"]
mod translation;

#[path = "reboot/restarts.rs"]
mod restarts;

use std::fs;
use std::path::{Path, PathBuf};
use std::time::Duration;

use common::words::{read_word, write_word};
use common::{fork_lock, spawn, use_up, MS, SEC};
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
