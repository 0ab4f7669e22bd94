//! Clock reads older than the state (another process decided later) never grant more.

use super::*;

#[test]
fn a_clock_read_older_than_the_state_never_grants_more() {
    let w = MINUTE;
    let now = 1_200 * SEC + 30 * SEC;
    // How far back the stale reads are: within the window, at the previous boundary, one
    // window, many windows and a long time back.
    for back in [
        1,
        1024,
        30 * SEC,
        30 * SEC + 1,
        60 * SEC,
        600 * SEC,
        now - SEC,
    ] {
        let f = fixture(
            vec![
                ("bucket", bucket(20, 100, w)),
                ("fw", fixed(100, w)),
                ("sw", sliding_window(100, w)),
                ("log", log(100, w)),
            ],
            now,
        );
        for (name, capacity) in [("bucket", 20), ("fw", 100), ("sw", 100), ("log", 100)] {
            let limit = f.limit(name);
            f.clock.set(now);
            // One admission at `now` stores a state that knows `now`.
            assert!(limit.try_acquire(1).unwrap().is_allowed());
            f.clock.set(now - back);
            let stale = until_denied(&limit, 1_000);
            f.clock.set(now);
            let current = until_denied(&limit, 1_000);
            assert!(
                stale < capacity,
                "{name}, {back} ns back: stale reads admitted {stale}"
            );
            assert_eq!(
                stale + current,
                capacity - 1,
                "{name}, {back} ns back: stale reads must not add budget"
            );
            // The state did not move back: still empty at `now` and just before.
            f.clock.set(now - back);
            assert!(limit.try_acquire(1).unwrap().is_denied(), "{name}");
            f.clock.set(now);
            assert!(limit.try_acquire(1).unwrap().is_denied(), "{name}");
        }
    }
}

#[test]
fn stale_reads_mixed_into_a_run_keep_the_bucket_within_its_bound() {
    // Demand at every millisecond, but every third read is up to 50 ms stale: the admissions
    // in [0, t] still never exceed floor(B + r t), where t is the newest time read so far.
    let f = fixture(vec![("b", bucket(20, 100, Duration::from_secs(1)))], BASE);
    let b = f.limit("b");
    let mut rng = XorShift::new(99);
    let mut admitted = 0u64;
    for ms in 0..5_000u64 {
        let t = BASE + ms * MS;
        let read = if ms % 3 == 0 {
            t.saturating_sub(rng.next_u64() % (50 * MS))
        } else {
            t
        };
        f.clock.set(read.max(BASE));
        admitted += until_denied(&b, 1_000);
        // T = 10 ms exactly: floor(20 + 100/s x ms).
        assert!(
            admitted <= 20 + ms / 10,
            "{admitted} admitted by {ms} ms, bound {}",
            20 + ms / 10
        );
    }
    assert!(
        admitted >= 20 + 4_990 / 10,
        "demand was saturating: {admitted}"
    );
}
