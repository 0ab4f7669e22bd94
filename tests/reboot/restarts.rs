//! Without a reboot: a reset file, every process restarted, copies taken while workers run,
//! and `sync`.

use super::*;

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
