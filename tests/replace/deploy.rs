//! `create_or_open` over an existing file: a difference is an error naming every field, or
//! under `OnConflict::Adopt` a live retune that keeps the usage or a new file that replaces the
//! old one; a fleet-managed bucket is compared with its stored definition and never adopted
//! from its agent.

use super::*;

#[test]
fn a_conflict_names_every_differing_field_in_user_terms() {
    let (_dir, path) = temp_path("conflict.shm");
    Limiter::builder()
        .limit("api", bucket(200, 20))
        .limit("search", FixedWindow::new(100, Duration::from_secs(60)))
        .create_or_open(&path)
        .unwrap();
    let err = Limiter::builder()
        .limit("api", bucket(300, 20))
        .limit("search", FixedWindow::new(100, Duration::from_secs(60)))
        .create_or_open(&path)
        .unwrap_err();
    assert!(matches!(err, Error::DefinitionConflict { .. }), "{err:?}");
    let text = err.to_string();
    assert!(
        text.ends_with("`api`: rate 200/s in the file, 300/s requested; burst 20 in both"),
        "{text}"
    );
    assert!(!text.contains("TokenBucket {"), "no Debug dump: {text}");
    let err = Limiter::builder()
        .limit("api", SlidingLog::new(20, Duration::from_secs(1)))
        .limit("extra", bucket(1, 1))
        .create_or_open(&path)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains(
            "`api`: token bucket, rate 200/s, burst 20 in the file, sliding log, limit 20, \
             window 1s requested"
        ) && err.contains("`extra`: not in the file, requested as token bucket, rate 1/s, burst 1")
            && err.contains("`search`: in the file (fixed window, limit 100, window 1min"),
        "{err}"
    );
    // Nothing changed in the file.
    let l = Limiter::open(&path).unwrap();
    assert_eq!(
        l.limit("api").unwrap().live_algorithm().unwrap(),
        *l.limit("api").unwrap().algorithm()
    );
}

#[test]
fn comparisons_use_the_live_parameters() {
    let (_dir, path) = temp_path("live.shm");
    let limiter = Limiter::builder()
        .limit("api", bucket(200, 20))
        .create_or_open(&path)
        .unwrap();
    limiter
        .token_bucket("api")
        .unwrap()
        .set_token_bucket(20, Rate::per_second(300).unwrap())
        .unwrap();
    // The retuned file matches a request for 300/s, and no longer one for 200/s.
    Limiter::builder()
        .limit("api", bucket(300, 20))
        .create_or_open(&path)
        .expect("a file retuned to 300/s matches 300/s");
    let err = Limiter::builder()
        .limit("api", bucket(200, 20))
        .create_or_open(&path)
        .unwrap_err()
        .to_string();
    assert!(
        err.ends_with("`api`: rate 300/s in the file, 200/s requested; burst 20 in both"),
        "{err}"
    );
    // Builder::open compares the same way.
    Limiter::builder()
        .limit("api", bucket(300, 20))
        .open(&path)
        .unwrap();
}

#[test]
fn adopting_a_rate_or_limit_change_is_a_live_retune_that_keeps_the_usage() {
    let (_dir, path) = temp_path("retune.shm");
    let slow = Rate::new(1, Duration::from_secs(3600)).unwrap();
    let old = Limiter::builder()
        .limit("api", TokenBucket::new(20, slow))
        .limit("win", FixedWindow::new(10, Duration::from_secs(3600)))
        .create_or_open(&path)
        .unwrap();
    let id = old.file_info().file_id;
    let (api, win) = (old.token_bucket("api").unwrap(), old.window("win").unwrap());
    assert!(api.try_acquire(15).unwrap().is_allowed());
    assert!(win.try_acquire(8).unwrap().is_allowed());
    let slower = Rate::new(1, Duration::from_secs(7200)).unwrap();
    let new = Limiter::builder()
        .limit("api", TokenBucket::new(40, slower))
        .limit("win", FixedWindow::new(12, Duration::from_secs(3600)))
        .on_conflict(OnConflict::Adopt)
        .create_or_open(&path)
        .unwrap();
    assert_eq!(new.file_info().file_id, id, "a retune keeps the file");
    // The old handles see the new parameters at once, with the usage kept: 15 of 20 used
    // becomes 30 of 40 (15 tokens at the old rate are 15 tokens at the new one).
    assert_eq!(
        api.live_algorithm().unwrap(),
        Algorithm::TokenBucket {
            capacity: 40,
            emission_ns: slower.emission_ns()
        }
    );
    assert!(api.try_acquire(25).unwrap().is_allowed());
    assert!(
        api.try_acquire(1).unwrap().is_denied(),
        "the usage was kept"
    );
    assert!(win.try_acquire(4).unwrap().is_allowed());
    assert!(win.try_acquire(1).unwrap().is_denied(), "8 + 4 of 12");
}

#[test]
fn adopting_a_change_the_layout_cannot_hold_replaces_the_file_and_handles_follow() {
    let (_dir, path) = temp_path("grow.shm");
    let old = Limiter::builder()
        .limit("api", bucket(1, 5))
        .create_or_open(&path)
        .unwrap();
    let api = old.token_bucket("api").unwrap();
    assert!(api.try_acquire(5).unwrap().is_allowed());
    let before = ino(&path);
    // `api` changes too, so it starts fresh in the new file (unchanged limits keep their state,
    // see `a_deploy_that_adds_a_limit_keeps_the_quotas_of_the_others`).
    let new = Limiter::builder()
        .limit("api", bucket(2, 5))
        .limit("log", SlidingLog::new(3, Duration::from_secs(60)))
        .on_conflict(OnConflict::Adopt)
        .create_or_open(&path)
        .unwrap();
    assert_ne!(ino(&path), before, "a new file at the path");
    assert_ne!(new.file_info().file_id, old.file_info().file_id);
    assert_eq!(new.definitions().len(), 2);
    // No temporary file is left in the directory.
    let names: Vec<_> = fs::read_dir(path.parent().unwrap())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names.len(), 1, "{names:?}");
    // Within the check interval the old handle moves to the new (full) bucket: the decision
    // that runs the check (here a peek) is still made on the old file, the next on the new.
    std::thread::sleep(REPLACEMENT_CHECK + Duration::from_millis(100));
    assert!(!api.peek(5).unwrap().is_allowed(), "the old, empty bucket");
    let d = api.try_acquire(5).unwrap();
    assert!(d.is_allowed(), "decided on the new file's full bucket");
    assert_eq!(new.limit("api").unwrap().stats().allowed, 1, "one decision");
    // A grant made on the new file is refunded there through the old handle.
    api.refund(&d).unwrap();
    assert!(new
        .token_bucket("api")
        .unwrap()
        .peek(5)
        .unwrap()
        .is_allowed());
    // A limit removed by a later replacement is an error for its handles, not a silent
    // decision on the old file.
    let log = new.sliding_log("log").unwrap();
    assert!(log.try_acquire(1).unwrap().is_allowed());
    Limiter::builder()
        .limit("api", bucket(2, 5))
        .on_conflict(OnConflict::Adopt)
        .create_or_open(&path)
        .unwrap();
    std::thread::sleep(REPLACEMENT_CHECK + Duration::from_millis(100));
    assert!(
        log.peek(1).unwrap().is_allowed(),
        "the check runs after this decision"
    );
    let err = log.try_acquire(1).unwrap_err().to_string();
    assert!(err.contains("has no limit `log`"), "{err}");
}

#[test]
fn shmlimit_create_refuses_or_adopts() {
    let (_dir, path) = temp_path("cli.shm");
    let create = |rate: &str, extra: &[&str]| {
        std::process::Command::new(env!("CARGO_BIN_EXE_shmlimit"))
            .arg("create")
            .arg(&path)
            .args([
                "--name",
                "api",
                "--algorithm",
                "token_bucket",
                "--rate",
                rate,
            ])
            .args(["--burst", "20"])
            .args(extra)
            .output()
            .unwrap()
    };
    assert!(create("200/s", &[]).status.success());
    let out = create("300/s", &[]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("`api`: rate 200/s in the file, 300/s requested; burst 20 in both"),
        "{err}"
    );
    let out = create("300/s", &["--on-conflict", "adopt"]);
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("existed with other definitions; adopted these"),
        "{text}"
    );
    let l = Limiter::open(&path).unwrap();
    assert_eq!(
        l.limit("api").unwrap().live_algorithm().unwrap(),
        Algorithm::TokenBucket {
            capacity: 20,
            emission_ns: Rate::per_second(300).unwrap().emission_ns()
        }
    );
    // Now the same request is left as it is.
    let out = create("300/s", &[]);
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains("left as it is"));
}

/// A bucket its fleet agent manages (here without a fleet share in its definition, as
/// `fleet run --total` does) matches its own definition: a worker restarting with the same
/// definitions is not refused because the agent changed the live rate.
#[test]
fn a_fleet_managed_bucket_matches_its_stored_definition() {
    let (_dir, path) = temp_path("managed.shm");
    let limiter = Limiter::builder()
        .limit("api", bucket(100, 10))
        .create_or_open(&path)
        .unwrap();
    let api = limiter.token_bucket("api").unwrap();
    api.fleet_manage(1, Rate::per_second(1).unwrap()).unwrap();
    api.set_fleet_deadline(0).unwrap();
    Limiter::builder()
        .limit("api", bucket(100, 10))
        .create_or_open(&path)
        .expect("the same definitions match");
}

/// Adopt never takes a fleet-managed bucket's rate from its agent: neither a live retune (it
/// would overwrite the share under a running lease) nor a new file (it would start unmanaged,
/// at its configured rate, while the agent kept leasing the old file). Both are refused,
/// saying what to do, and the share and lease are untouched.
#[test]
fn adopt_refuses_to_take_a_fleet_managed_bucket_from_its_agent() {
    let (_dir, path) = temp_path("fleet-adopt.shm");
    let share = FleetShare {
        total: Rate::per_second(1000).unwrap(),
        weight: 1,
    };
    let with_share = |b: shmlimit::Builder, per_s: u64, burst: u64| {
        b.limit_with("api", bucket(per_s, burst), |mut d| {
            d.fleet = Some(share);
            d
        })
    };
    let limiter = with_share(Limiter::builder(), 1, 10)
        .create_or_open(&path)
        .unwrap();
    let api = limiter.token_bucket("api").unwrap();
    api.fleet_manage(1, Rate::per_second(1).unwrap()).unwrap();
    api.set_token_bucket(5, Rate::per_second(5).unwrap())
        .unwrap();
    api.set_fleet_deadline(shmlimit::Clock::now_ns(limiter.clock()) + 5 * SEC)
        .unwrap();
    let before = api.fleet_lease().unwrap().expect("leased");
    let ino_before = ino(&path);
    // A rate change (a live retune), then a new limit (a new file).
    for deploy in [
        with_share(Limiter::builder(), 500, 500),
        with_share(Limiter::builder(), 1, 10).limit("other", bucket(1, 1)),
    ] {
        let Err(err) = deploy.on_conflict(OnConflict::Adopt).create_or_open(&path) else {
            panic!("adopted a change to a fleet-managed bucket");
        };
        let text = err.to_string();
        assert!(matches!(err, Error::DefinitionConflict { .. }), "{err:?}");
        assert!(text.contains("`api` is fleet-managed"), "{text}");
        assert_eq!(ino(&path), ino_before, "no new file");
        let after = api.fleet_lease().unwrap().expect("still leased");
        assert_eq!(
            (after.share, after.fence, after.deadline_ns),
            (before.share, before.fence, before.deadline_ns),
            "the lease is untouched"
        );
    }
    let mut admitted = 0;
    for _ in 0..100 {
        admitted += api.try_acquire(1).unwrap().is_allowed() as u64;
    }
    assert!(
        admitted <= 5,
        "{admitted} admitted under a 5/s burst-5 share"
    );
}

/// A deploy that needs a new file (here: a limit added) carries the state of every limit it
/// leaves unchanged: a daily quota used up stays used up, in the new file, for the handles that
/// move and for new ones; a changed limit starts fresh.
#[test]
fn a_deploy_that_adds_a_limit_keeps_the_quotas_of_the_others() {
    let (_dir, path) = temp_path("carry.shm");
    let daily = || FixedWindow::new(10, Duration::from_secs(86_400));
    let first = Limiter::builder()
        .limit("daily", daily())
        .limit("log", SlidingLog::new(5, Duration::from_secs(3600)))
        .limit("api", bucket(1, 5))
        .create_or_open(&path)
        .unwrap();
    let quota = first.window("daily").unwrap();
    assert!(quota.try_acquire(10).unwrap().is_allowed());
    assert!(first
        .sliding_log("log")
        .unwrap()
        .try_acquire(5)
        .unwrap()
        .is_allowed());
    assert!(first
        .token_bucket("api")
        .unwrap()
        .try_acquire(5)
        .unwrap()
        .is_allowed());
    let before = ino(&path);
    let deployed = Limiter::builder()
        .limit("daily", daily())
        .limit("log", SlidingLog::new(5, Duration::from_secs(3600)))
        .limit("api", bucket(1, 50)) // changed: starts fresh
        .limit("new", bucket(1, 1))
        .on_conflict(OnConflict::Adopt)
        .create_or_open(&path)
        .unwrap();
    assert_ne!(ino(&path), before, "a new file");
    assert!(deployed
        .window("daily")
        .unwrap()
        .peek(1)
        .unwrap()
        .is_denied());
    assert!(deployed
        .sliding_log("log")
        .unwrap()
        .peek(1)
        .unwrap()
        .is_denied());
    assert!(deployed
        .token_bucket("api")
        .unwrap()
        .peek(50)
        .unwrap()
        .is_allowed());
    std::thread::sleep(REPLACEMENT_CHECK + Duration::from_millis(100));
    let _ = quota.peek(1); // runs the check
    assert!(
        quota.try_acquire(1).unwrap().is_denied(),
        "still used up after the move"
    );
    assert_eq!(
        deployed.limit("daily").unwrap().stats().denied,
        1,
        "decided on the new file"
    );
}
