//! What a handle carries across a replacement: the reboot choice and the mode, permits released
//! in the file that issued them, `sync`, the management calls, and a permit wait.

use super::*;

/// A new file made by Adopt keeps the old file's reboot choice and permission bits: workers
/// created with `OnReboot::Reset` and a group-shared mode re-attach to it.
#[test]
fn a_replacement_keeps_the_reboot_choice_and_the_mode() {
    use std::os::unix::fs::PermissionsExt;
    let (_dir, path) = temp_path("keep.shm");
    let worker = Limiter::builder()
        .limit("api", bucket(1000, 1000))
        .on_reboot(OnReboot::Reset)
        .mode(0o660)
        .create_or_open(&path)
        .unwrap();
    let api = worker.token_bucket("api").unwrap();
    assert!(api.try_acquire(1).unwrap().is_allowed());
    // The deploy tool asks for neither.
    let deployed = Limiter::builder()
        .limit("api", bucket(1000, 1000))
        .limit("b", bucket(1, 1))
        .on_conflict(OnConflict::Adopt)
        .mode(0o660)
        .create_or_open(&path)
        .unwrap();
    assert_eq!(deployed.reboot_info().on_reboot, OnReboot::Reset);
    assert_eq!(
        fs::metadata(&path).unwrap().permissions().mode() & 0o777,
        0o660
    );
    std::thread::sleep(REPLACEMENT_CHECK + Duration::from_millis(100));
    let _ = api.peek(1);
    assert!(api.try_acquire(1).expect("re-attached").is_allowed());
    // A worker restarting with its options starts too.
    Limiter::builder()
        .limit("api", bucket(1000, 1000))
        .limit("b", bucket(1, 1))
        .on_reboot(OnReboot::Reset)
        .mode(0o660)
        .create_or_open(&path)
        .expect("a restarted worker attaches");
}

/// Permits acquired by id (the C ABI's way) through a handle that moved to a new file are
/// released in the file that issued them, and an old file's permit in the old file: the id
/// names its file, so a release never frees another permit with the same index.
#[test]
fn permit_ids_are_released_in_the_file_that_issued_them() {
    use shmlimit::Concurrency;
    let (_dir, path) = temp_path("permit-ids.shm");
    let first = Limiter::builder()
        .limit("jobs", Concurrency::new(2))
        .create_or_open(&path)
        .unwrap();
    let jobs = first.concurrency("jobs").unwrap();
    // A second name for the first file, to inspect it after the replacement (handles opened
    // by `path` follow the replacement, inspection included).
    let keep = path.with_extension("keep");
    fs::hard_link(&path, &keep).unwrap();
    let kept = Limiter::open(&keep).unwrap();
    let old = jobs.try_acquire_permit().unwrap().unwrap().into_id();
    let _deploy = Limiter::builder()
        .limit("jobs", Concurrency::new(2))
        .limit("other", bucket(1, 1))
        .on_conflict(OnConflict::Adopt)
        .create_or_open(&path)
        .unwrap();
    std::thread::sleep(REPLACEMENT_CHECK + Duration::from_millis(100));
    // An acquisition runs the check, and moves the handle to the new file.
    let _ = jobs.try_acquire_permit().unwrap().map(|p| p.release());
    let now = Limiter::open(&path).unwrap();
    let fresh = now.limit("jobs").unwrap();
    let a = jobs
        .try_acquire_permit()
        .unwrap()
        .expect("a permit")
        .into_id();
    let b = jobs
        .try_acquire_permit()
        .unwrap()
        .expect("a permit")
        .into_id();
    assert_eq!(fresh.permit_holders().len(), 2, "both held in the new file");
    assert!(
        jobs.try_acquire_permit().unwrap().is_none(),
        "the new file is full"
    );
    assert!(jobs.release_permit(a).unwrap());
    assert!(jobs.release_permit(b).unwrap());
    assert!(
        fresh.permit_holders().is_empty(),
        "both released in the new file"
    );
    assert_eq!(
        kept.limit("jobs").unwrap().permit_holders().len(),
        1,
        "the old one untouched"
    );
    assert!(
        jobs.release_permit(old).unwrap(),
        "released in the old file"
    );
    assert!(kept.limit("jobs").unwrap().permit_holders().is_empty());
    assert!(!jobs.release_permit(old).unwrap(), "only once");
}

/// `Limiter::sync` (and so `sync_every` and `shmlimit sync --every`) writes the file that
/// replaced the one it opened too, and records that file's boot as alive: the bound on what a
/// power loss forgets holds across a deploy that replaced the file.
#[test]
fn sync_reaches_the_file_that_replaced_the_one_opened() {
    let (_dir, path) = temp_path("sync.shm");
    let limiter = Limiter::builder()
        .limit("api", bucket(1000, 1000))
        .create_or_open(&path)
        .unwrap();
    let _deploy = Limiter::builder()
        .limit("api", bucket(1000, 1000))
        .limit("b", bucket(1, 1))
        .on_conflict(OnConflict::Adopt)
        .create_or_open(&path)
        .unwrap();
    // Header word 22: the latest Unix time this boot was seen alive (written by a sync).
    let f = fs::OpenOptions::new().write(true).open(&path).unwrap();
    f.write_all_at(&1u64.to_ne_bytes(), 22 * 8).unwrap();
    std::thread::sleep(REPLACEMENT_CHECK + Duration::from_millis(100));
    limiter.sync().unwrap();
    let mut word = [0u8; 8];
    fs::File::open(&path)
        .unwrap()
        .read_exact_at(&mut word, 22 * 8)
        .unwrap();
    assert!(u64::from_ne_bytes(word) > 1, "the new file was synced");
}

/// Management and inspection calls of a handle follow a replacement as its decisions do: a
/// retune, a reset and the statistics act on the file now at the path, not silently on the old
/// one.
#[test]
fn management_calls_follow_a_replacement() {
    let (_dir, path) = temp_path("manage.shm");
    let first = Limiter::builder()
        .limit("api", bucket(1, 5))
        .create_or_open(&path)
        .unwrap();
    let api = first.token_bucket("api").unwrap();
    assert!(api.try_acquire(5).unwrap().is_allowed());
    let deployed = Limiter::builder()
        .limit("api", bucket(1, 5))
        .limit("b", bucket(1, 1))
        .on_conflict(OnConflict::Adopt)
        .create_or_open(&path)
        .unwrap();
    std::thread::sleep(REPLACEMENT_CHECK + Duration::from_millis(100));
    api.set_token_bucket(50, Rate::per_second(1000).unwrap())
        .unwrap();
    let now = deployed.token_bucket("api").unwrap();
    match now.live_algorithm().unwrap() {
        Algorithm::TokenBucket { capacity, .. } => assert_eq!(capacity, 50, "retuned the new file"),
        other => panic!("{other:?}"),
    }
    assert!(now.try_acquire(1).unwrap().is_allowed());
    assert_eq!(api.stats().allowed, 1, "the new file's statistics");
    api.reset().unwrap();
    assert!(
        now.peek(50).unwrap().is_allowed(),
        "reset the new file: full again"
    );
}

/// A wait for a permit goes on in the file that replaced the one it started in: it is granted
/// there (the new file's permits are free), instead of waiting out its timeout on the old file.
#[test]
fn a_permit_wait_moves_to_the_file_that_replaced_its_own() {
    use shmlimit::Concurrency;
    let (_dir, path) = temp_path("permit-wait.shm");
    let first = Limiter::builder()
        .limit("jobs", Concurrency::new(1))
        .create_or_open(&path)
        .unwrap();
    let jobs = first.concurrency("jobs").unwrap();
    let held = jobs.try_acquire_permit().unwrap().expect("the only permit");
    let waiter = {
        let jobs = jobs.clone();
        std::thread::spawn(move || {
            let start = std::time::Instant::now();
            let got = jobs.acquire_permit_timeout(Duration::from_secs(5)).unwrap();
            (got.map(|p| p.release()), start.elapsed())
        })
    };
    std::thread::sleep(Duration::from_millis(200));
    let _deploy = Limiter::builder()
        .limit("jobs", Concurrency::new(1))
        .limit("other", bucket(1, 1))
        .on_conflict(OnConflict::Adopt)
        .create_or_open(&path)
        .unwrap();
    let (released, waited) = waiter.join().unwrap();
    assert_eq!(
        released,
        Some(true),
        "granted in the new file, after {waited:?}"
    );
    assert!(waited < Duration::from_secs(4), "it waited {waited:?}");
    drop(held);
}
