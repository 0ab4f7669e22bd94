//! A file from another boot: reset once (or translated once) however many processes open it.

use super::*;

#[test]
fn a_boot_id_change_resets_the_state_once() {
    let (_dir, path) = reset_file();
    let limiter = Limiter::open(&path).unwrap();
    assert_eq!(limiter.reset_count(), 0);
    let api = limiter.token_bucket("api").unwrap();
    // Drain the bucket of 100 (one token an hour: no refill during the test).
    assert!(api.try_acquire(100).unwrap().is_allowed());
    assert!(api.try_acquire(1).unwrap().is_denied());
    let search = limiter.sliding_log("search").unwrap();
    assert!(search.try_acquire(10).unwrap().is_allowed());
    drop((api, search, limiter));

    // Another boot wrote this file: different bytes in the boot id words.
    let (a, b) = (
        read_word(&path, WORD_BOOT_ID),
        read_word(&path, WORD_BOOT_ID + 1),
    );
    write_word(&path, WORD_BOOT_ID, !a);
    write_word(&path, WORD_BOOT_ID + 1, b ^ 0x5a5a);

    let limiter = Limiter::open(&path).unwrap();
    assert_eq!(limiter.reset_count(), 1, "the open reset the state");
    assert_eq!(
        read_word(&path, WORD_BOOT_ID),
        a,
        "this boot's id is restored"
    );
    assert_eq!(read_word(&path, WORD_BOOT_ID + 1), b);
    let api = limiter.token_bucket("api").unwrap();
    assert_eq!(
        api.peek(1).unwrap().remaining(),
        99,
        "the bucket is full again"
    );
    assert!(api.try_acquire(100).unwrap().is_allowed());
    assert!(limiter
        .sliding_log("search")
        .unwrap()
        .try_acquire(10)
        .unwrap()
        .is_allowed());

    // The same boot opening again resets nothing.
    let again = Limiter::open(&path).unwrap();
    assert_eq!(again.reset_count(), 1);
    assert!(again
        .token_bucket("api")
        .unwrap()
        .try_acquire(1)
        .unwrap()
        .is_denied());

    // A second reboot, seen through create_or_open, counts again.
    write_word(&path, WORD_BOOT_ID, a ^ 1);
    let third = builder().create_or_open(&path).unwrap();
    assert_eq!(third.reset_count(), 2);
    assert!(third
        .token_bucket("api")
        .unwrap()
        .try_acquire(100)
        .unwrap()
        .is_allowed());
}

#[test]
fn eight_processes_opening_after_a_boot_id_change_reset_once() {
    // All eight see the foreign boot id at once; exactly one resets, and no decision a process
    // makes after attaching is wiped by another's reset.
    let _serial = fork_lock();
    for round in 0..5 {
        let (_dir, path) = reset_file();
        {
            let limiter = Limiter::open(&path).unwrap();
            assert!(limiter
                .token_bucket("api")
                .unwrap()
                .try_acquire(100)
                .unwrap()
                .is_allowed());
        }
        let a = read_word(&path, WORD_BOOT_ID);
        write_word(&path, WORD_BOOT_ID, !a);
        let results = fork_workers(8, |_| {
            let limiter = Limiter::open(&path).expect("open after the boot id change");
            let d = limiter.token_bucket("api").unwrap().try_acquire(1).unwrap();
            vec![d.is_allowed() as u64, limiter.reset_count()]
        });
        assert!(
            results.iter().all(|r| r == &[1, 1]),
            "round {round}: every process admitted after one reset: {results:?}"
        );
        let limiter = Limiter::open(&path).unwrap();
        assert_eq!(limiter.reset_count(), 1, "round {round}");
        let api = limiter.token_bucket("api").unwrap();
        assert_eq!(
            api.peek(1).unwrap().remaining(),
            91,
            "round {round}: the eight decisions all landed in the reset bucket"
        );
        assert_eq!(api.stats().allowed, 8, "round {round}");
    }
}

#[test]
fn eight_processes_opening_after_a_boot_id_change_translate_once() {
    // The default keeps what was used: exactly one process translates (a second translation
    // would move the times again), and the drained bucket stays drained for all eight.
    let _serial = fork_lock();
    for round in 0..5 {
        let (_dir, path) = valid_file();
        {
            let limiter = Limiter::open(&path).unwrap();
            let api = limiter.token_bucket("api").unwrap();
            assert!(api.try_acquire(100).unwrap().is_allowed());
        }
        let a = read_word(&path, WORD_BOOT_ID);
        write_word(&path, WORD_BOOT_ID, !a);
        let results = fork_workers(8, |_| {
            let limiter = Limiter::open(&path).expect("open after the boot id change");
            let d = limiter.token_bucket("api").unwrap().try_acquire(1).unwrap();
            vec![
                d.is_allowed() as u64,
                limiter.reboot_info().translations,
                limiter.reset_count(),
            ]
        });
        assert!(
            results.iter().all(|r| r == &[0, 1, 0]),
            "round {round}: every process denied after one translation: {results:?}"
        );
        let limiter = Limiter::open(&path).unwrap();
        assert_eq!(limiter.reboot_info().translations, 1, "round {round}");
        assert!(limiter.reboot_info().failed_closed.is_empty());
    }
}
