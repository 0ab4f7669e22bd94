//! Creating and attaching: processes creating or opening one file at once all attach to the same
//! state, racing creators with different definitions agree on one winner, conflicting
//! definitions are refused, and the file's permissions.

use super::*;

#[test]
fn eight_processes_creating_one_file_at_once_all_attach_to_the_same_state() {
    let _serial = fork_lock();
    for round in 0..5 {
        let (dir, path) = temp_path("race.shm");
        let expected = expected_pairs();
        let results = fork_workers(8, |_| {
            // All eight leave the barrier together and race to create the file.
            let limiter = builder().create_or_open(&path).expect("create_or_open");
            let same = pairs(&limiter) == expected;
            let d = limiter.token_bucket("api").unwrap().try_acquire(1).unwrap();
            let ino = fs::symlink_metadata(&path).unwrap().ino();
            vec![same as u64, d.is_allowed() as u64, d.remaining(), ino]
        });
        assert!(
            results.iter().all(|r| r[0] == 1),
            "round {round}: every process sees the definitions it asked for"
        );
        assert!(results.iter().all(|r| r[1] == 1), "round {round}");
        let inodes: Vec<u64> = results.iter().map(|r| r[3]).collect();
        assert!(
            inodes.iter().all(|&i| i == inodes[0]),
            "round {round}: one file: {inodes:?}"
        );
        // One decision each landed in one bucket of 100: remaining 99, 98, ..., 92, each once.
        let mut remaining: Vec<u64> = results.iter().map(|r| r[2]).collect();
        remaining.sort_unstable();
        assert_eq!(remaining, (92..=99).collect::<Vec<_>>(), "round {round}");
        let names: Vec<_> = fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(
            names,
            ["race.shm"],
            "round {round}: no temporary files left"
        );
        let limiter = Limiter::open(&path).unwrap();
        let api = limiter.token_bucket("api").unwrap();
        assert_eq!(api.stats().allowed, 8);
        assert_eq!(api.peek(1).unwrap().remaining(), 91);
        assert_eq!(fs::metadata(&path).unwrap().ino(), inodes[0]);
    }
}

#[test]
fn open_by_path_alone_sees_the_definitions() {
    let (_dir, path) = valid_file();
    let limiter = Limiter::open(&path).unwrap();
    assert_eq!(pairs(&limiter), expected_pairs());
    assert_eq!(limiter.path(), path);
    assert_eq!(limiter.limits().len(), 4);
    assert!(limiter
        .sliding_log("search")
        .unwrap()
        .try_acquire(1)
        .unwrap()
        .is_allowed());
    // The builder's open with the same definitions attaches too.
    assert!(builder().open(&path).is_ok());
}

#[test]
fn conflicting_definitions_are_refused() {
    let (_dir, path) = valid_file();
    let conflict = |b: shmlimit::Builder, what: &str| {
        for e in [
            b.create_or_open(&path).expect_err(what),
            // The same definitions through `Builder::open`.
            Limiter::builder()
                .limit("api", TokenBucket::per_second(5).burst(1))
                .open(&path)
                .expect_err(what),
        ] {
            assert!(
                matches!(e, Error::DefinitionConflict { .. }),
                "{what}: {e:?}"
            );
        }
    };
    let mut changed = definitions();
    changed[0].1 = TokenBucket::new(101, Rate::new(1, Duration::from_secs(3_600)).unwrap())
        .into_algorithm("api")
        .unwrap();
    conflict(
        changed
            .into_iter()
            .fold(Limiter::builder(), |b, (n, a)| b.limit(n, a)),
        "another capacity",
    );
    let mut realigned = definitions();
    realigned[2].1 = FixedWindow::new(30, Duration::from_secs(60))
        .into_algorithm("per-minute")
        .unwrap();
    conflict(
        realigned
            .into_iter()
            .fold(Limiter::builder(), |b, (n, a)| b.limit(n, a)),
        "another alignment",
    );
    conflict(
        builder().limit("extra", SlidingLog::new(1, Duration::from_secs(1))),
        "an extra limit",
    );
    conflict(
        Limiter::builder().limit("api", definitions()[0].1),
        "a subset of the limits",
    );
    // The file is unchanged and still attachable with its own definitions.
    assert!(builder().create_or_open(&path).is_ok());
}

#[test]
fn created_files_are_private_by_default_and_group_shared_on_request() {
    let (dir, path) = temp_path("private.shm");
    drop(builder().create_or_open(&path).unwrap());
    assert_eq!(fs::metadata(&path).unwrap().mode() & 0o777, 0o600);
    let shared = dir.path().join("shared.shm");
    drop(builder().mode(0o660).create_or_open(&shared).unwrap());
    assert_eq!(fs::metadata(&shared).unwrap().mode() & 0o777, 0o660);
    // A group-writable file is refused by a default (0600) opener, accepted by a 0660 one.
    assert!(matches!(
        Limiter::open(&shared),
        Err(Error::Permission { .. })
    ));
    assert!(Limiter::builder().mode(0o660).open(&shared).is_ok());
}

#[test]
fn racing_creators_with_different_definitions_agree_on_one_winner() {
    // Four processes create the file with the usual definitions, four with a bucket of 101:
    // whichever links its file first wins; every process with the winner's definitions attaches,
    // every other one gets DefinitionConflict, and the file holds exactly one of the two sets.
    let _serial = fork_lock();
    let other = || -> shmlimit::Builder {
        let mut defs = definitions();
        defs[0].1 = TokenBucket::new(101, Rate::new(1, Duration::from_secs(3_600)).unwrap())
            .into_algorithm("api")
            .unwrap();
        defs.into_iter()
            .fold(Limiter::builder(), |b, (n, a)| b.limit(n, a))
    };
    for round in 0..5 {
        let (_dir, path) = temp_path("race.shm");
        let results = fork_workers(8, |i| {
            let outcome = if i % 2 == 0 {
                builder().create_or_open(&path)
            } else {
                other().create_or_open(&path)
            };
            vec![match outcome {
                Ok(_) => 0,
                Err(Error::DefinitionConflict { .. }) => 1,
                Err(_) => 2,
            }]
        });
        let outcomes: Vec<u64> = results.iter().map(|r| r[0]).collect();
        let capacity = Limiter::open(&path)
            .unwrap()
            .limit("api")
            .unwrap()
            .capacity();
        let (winners, losers) = if capacity == 100 { (0, 1) } else { (1, 0) };
        for (i, &o) in outcomes.iter().enumerate() {
            let expected = if i % 2 == winners { 0 } else { 1 };
            assert_eq!(
                o, expected,
                "round {round}: process {i} (file has capacity {capacity}): {outcomes:?}"
            );
        }
        assert_ne!(winners, losers);
    }
}

#[test]
fn openers_racing_a_creator_never_see_a_half_made_file() {
    // Six processes poll `Limiter::open` while two create the file: an opener sees either no
    // file (NotFound) or a complete one, never a size, checksum or init-state error.
    let _serial = fork_lock();
    for round in 0..5 {
        let (_dir, path) = temp_path("race.shm");
        let results = fork_workers(8, |i| {
            if i < 2 {
                builder().create_or_open(&path).expect("create");
                return vec![0, 0];
            }
            let deadline = common::now_ns() + 10 * common::SEC;
            let mut polls = 0;
            loop {
                polls += 1;
                match Limiter::open(&path) {
                    Ok(limiter) => {
                        assert_eq!(limiter.definitions().len(), 4);
                        return vec![0, polls];
                    }
                    Err(Error::Io { source, .. })
                        if source.kind() == std::io::ErrorKind::NotFound
                            && common::now_ns() < deadline => {}
                    Err(_) => return vec![1, polls],
                }
            }
        });
        for (i, r) in results.iter().enumerate() {
            assert_eq!(
                r[0], 0,
                "round {round}: process {i} saw a bad file after {} polls",
                r[1]
            );
        }
    }
}
