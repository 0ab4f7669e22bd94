//! Daily, monthly and keyed quotas across a reboot: what was used stays used until the next
//! boundary of the wall clock, and the down time refills a bucket only as far as the wall clock
//! proves it.

use super::*;

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
