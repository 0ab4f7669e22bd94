//! Calendar windows: days from midnight and weeks from Monday 00:00, in UTC or a fixed offset,
//! on real files, with a [`ManualClock`] whose Unix time the test fixes by writing the file's
//! wall offset (header word 16) before the handle attaches.

mod common;

use std::path::Path;

use common::words::write_word;
use common::SEC;
use shmlimit::{Alignment, FixedWindow, IntoAlgorithm, Limiter, ManualClock, Rate, TokenBucket};

const HOUR: u64 = 3_600 * SEC;
const DAY: u64 = 24 * HOUR;
const WORD_WALL_OFFSET: u64 = 16;
/// The handle's clock starts at 10 days of uptime.
const T0: u64 = 10 * DAY;

/// A limiter whose clock reads `T0` at the Unix time `unix`.
fn at_unix(
    path: &Path,
    builder: impl Fn() -> shmlimit::Builder,
    unix: u64,
) -> (Limiter<ManualClock>, ManualClock) {
    drop(builder().create_or_open(path).unwrap());
    write_word(path, WORD_WALL_OFFSET, unix - T0);
    let clock = ManualClock::new(T0);
    let l = builder().clock(clock.clone()).open(path).unwrap();
    (l, clock)
}

/// Unix ns of 00:00 UTC on the first Monday at or after day `day` since the epoch.
fn monday_on_or_after(day: u64) -> u64 {
    // 1970-01-05 (day 4) was a Monday.
    let d = day + (7 - (day + 7 - 4) % 7) % 7;
    d * DAY
}

#[test]
fn a_weekly_window_starts_on_monday_midnight_utc() {
    let (dir, _) = common::temp_path("unused");
    let path = dir.path().join("weekly.shm");
    let monday = monday_on_or_after(20_000);
    assert_eq!((monday / DAY + 3) % 7, 0, "a Monday");
    let build = || Limiter::builder().limit("week", FixedWindow::weekly(3));
    // Sunday 23:00 UTC.
    let (l, clock) = at_unix(&path, build, monday - HOUR);
    let week = l.window("week").unwrap();
    assert!(week.try_acquire(3).unwrap().is_allowed());
    let d = week.try_acquire(1).unwrap();
    assert!(d.is_denied());
    assert_eq!(d.retry_after_ns(), HOUR, "until Monday 00:00 UTC");
    clock.advance(HOUR);
    assert!(
        week.try_acquire(3).unwrap().is_allowed(),
        "Monday: a new week"
    );
    let d = week.try_acquire(1).unwrap();
    assert_eq!(d.retry_after_ns(), 7 * DAY, "the whole week");
    // A plain 7-day window aligned to Unix time starts on Thursdays instead.
    let plain = dir.path().join("plain.shm");
    let build = || {
        Limiter::builder().limit(
            "week",
            FixedWindow::new(3, std::time::Duration::from_secs(7 * 86_400)),
        )
    };
    let (l, _) = at_unix(&plain, build, monday - HOUR);
    let week = l.window("week").unwrap();
    assert!(week.try_acquire(3).unwrap().is_allowed());
    assert_eq!(
        week.try_acquire(1).unwrap().retry_after_ns(),
        3 * DAY + HOUR,
        "Thursday 00:00 UTC"
    );
}

#[test]
fn a_daily_window_in_a_fixed_offset_starts_at_its_midnight() {
    let (dir, _) = common::temp_path("unused");
    let path = dir.path().join("daily.shm");
    // UTC+05:30: local midnight is 18:30 UTC the day before.
    let offset = 5 * 3_600 + 30 * 60;
    let build = || Limiter::builder().limit("day", FixedWindow::daily(10).utc_offset(offset));
    let midnight_utc = 20_000 * DAY;
    // 18:00 UTC = 23:30 local.
    let (l, clock) = at_unix(&path, build, midnight_utc - 6 * HOUR);
    let day = l.window("day").unwrap();
    assert_eq!(
        day.algorithm(),
        &shmlimit::Algorithm::FixedWindow {
            limit: 10,
            window_ns: DAY,
            alignment: Alignment::Calendar {
                utc_offset_s: offset
            }
        }
    );
    assert!(day.try_acquire(10).unwrap().is_allowed());
    assert_eq!(day.try_acquire(1).unwrap().retry_after_ns(), 30 * 60 * SEC);
    clock.advance(30 * 60 * SEC);
    assert!(day.try_acquire(10).unwrap().is_allowed(), "local midnight");
    // The definition round-trips through the file.
    let again = Limiter::open(&path).unwrap();
    assert_eq!(again.definitions()[0].algorithm, *day.algorithm());
    // An offset beyond 18 h is refused.
    let bad = Limiter::builder()
        .limit("day", FixedWindow::daily(1).utc_offset(19 * 3_600))
        .create_or_open(dir.path().join("bad.shm"));
    assert!(matches!(bad, Err(shmlimit::Error::InvalidParameter { .. })));
}

#[test]
fn rates_per_day_week_and_month() {
    assert_eq!(Rate::per_day(10_000).unwrap().emission_ns(), 8_640_000_000);
    assert_eq!(Rate::per_week(7).unwrap().emission_ns(), DAY);
    assert_eq!(
        Rate::per_month(10_000).unwrap().emission_ns(),
        262_974_600_000
    );
    let (dir, _) = common::temp_path("unused");
    let path = dir.path().join("monthly-rate.shm");
    let l = Limiter::builder()
        .limit(
            "exports",
            TokenBucket::new(10_000, Rate::per_month(10_000).unwrap()),
        )
        .clock(ManualClock::new(T0))
        .create_or_open(&path)
        .unwrap();
    let exports = l.token_bucket("exports").unwrap();
    assert!(exports.try_acquire(10_000).unwrap().is_allowed());
    assert_eq!(
        exports.try_acquire(1).unwrap().retry_after_ns(),
        262_974_600_000
    );
}

/// Unix ns of 00:00 UTC on `y-m-d`.
fn civil(y: i64, m: u32, d: u32) -> u64 {
    // Howard Hinnant's days_from_civil.
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = (y - era * 400) as u64;
    let mp = (m as u64 + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d as u64 - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    (era * 146_097 + doe as i64 - 719_468) as u64 * DAY
}

#[test]
fn a_monthly_window_follows_the_calendar_across_february() {
    let (dir, _) = common::temp_path("unused");
    let build = || Limiter::builder().limit("month", FixedWindow::monthly(100));
    // 2027: January 31 23:00 UTC.
    let path = dir.path().join("monthly-2027.shm");
    let (l, clock) = at_unix(&path, build, civil(2027, 1, 31) + 23 * HOUR);
    let month = l.window("month").unwrap();
    assert!(month.try_acquire(100).unwrap().is_allowed());
    let d = month.try_acquire(1).unwrap();
    assert_eq!(d.retry_after_ns(), HOUR, "to February 1st");
    clock.advance(HOUR);
    assert!(month.try_acquire(100).unwrap().is_allowed(), "February");
    let d = month.try_acquire(1).unwrap();
    assert_eq!(d.retry_after_ns(), 28 * DAY, "February 2027 has 28 days");
    clock.advance(28 * DAY - 1);
    assert!(
        month.try_acquire(1).unwrap().is_denied(),
        "February 28, 23:59:59.999999999"
    );
    clock.advance(1);
    assert!(month.try_acquire(100).unwrap().is_allowed(), "March 1st");
    assert_eq!(month.try_acquire(1).unwrap().retry_after_ns(), 31 * DAY);

    // 2028 is a leap year: February has 29 days; and a fixed offset (UTC+09:00) moves the
    // month's start to the 1st at 00:00 local, 15:00 UTC the day before.
    let path = dir.path().join("monthly-2028.shm");
    let build =
        || Limiter::builder().limit("month", FixedWindow::monthly(100).utc_offset(9 * 3_600));
    let (l, clock) = at_unix(&path, build, civil(2028, 1, 31) + 14 * HOUR);
    let month = l.window("month").unwrap();
    assert!(month.try_acquire(100).unwrap().is_allowed());
    assert_eq!(
        month.try_acquire(1).unwrap().retry_after_ns(),
        HOUR,
        "15:00 UTC = Feb 1st 00:00 +09:00"
    );
    clock.advance(HOUR);
    assert!(month.try_acquire(100).unwrap().is_allowed());
    assert_eq!(
        month.try_acquire(1).unwrap().retry_after_ns(),
        29 * DAY,
        "February 2028 has 29 days"
    );
    // The definition says what it is.
    assert_eq!(
        l.definitions()[0].algorithm,
        FixedWindow::monthly(100)
            .utc_offset(9 * 3_600)
            .into_algorithm("month")
            .unwrap()
    );
}
