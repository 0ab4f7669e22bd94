//! A file whose contents are wrong is refused with its own error: truncated, extended, foreign,
//! empty, of another format version, with a damaged definition, an unfinished init state or
//! another time namespace; unknown limits and long inputs in messages.

use super::*;

#[test]
fn unknown_limit() {
    let (_dir, path) = valid_file();
    let limiter = Limiter::open(&path).unwrap();
    match limiter.limit("nope") {
        Err(Error::UnknownLimit(name)) => assert_eq!(name, "nope"),
        other => panic!("expected UnknownLimit, got {other:?}"),
    }
}

#[test]
fn truncated_files_are_refused() {
    let (_dir, path) = valid_file();
    let full = file_len(&path);
    let original = fs::read(&path).unwrap();
    // Inside the header, inside the definitions, and inside the state.
    for len in [
        0,
        8,
        100,
        4095,
        4096,
        DEFS_OFFSET + 200,
        full - 4096,
        full - 1,
    ] {
        fs::write(&path, &original[..len as usize]).unwrap();
        for e in open_both(&path) {
            match e {
                Error::Size {
                    expected, actual, ..
                } => {
                    assert_eq!(actual, len, "{e}");
                    assert!(expected > len, "{e}");
                }
                Error::Corrupt { .. } if (DEFS_OFFSET..DEFS_OFFSET + 4 * 128).contains(&len) => {}
                other => panic!("truncated to {len}: expected Size, got {other:?}"),
            }
        }
    }
    fs::write(&path, &original).unwrap();
    assert!(Limiter::open(&path).is_ok(), "restored");
}

#[test]
fn extended_files_are_refused() {
    let (_dir, path) = valid_file();
    let full = file_len(&path);
    for extra in [1, 4096, 1 << 20] {
        let f = fs::OpenOptions::new().write(true).open(&path).unwrap();
        f.set_len(full + extra).unwrap();
        for e in open_both(&path) {
            match e {
                Error::Size {
                    expected, actual, ..
                } => assert_eq!((expected, actual), (full, full + extra)),
                other => panic!("extended by {extra}: expected Size, got {other:?}"),
            }
        }
        f.set_len(full).unwrap();
    }
    assert!(Limiter::open(&path).is_ok());
}

#[test]
fn foreign_files_are_refused() {
    let (_dir, path) = temp_path("foreign.shm");
    let mut rng = common::XorShift::new(17);
    for len in [9usize, 100, 4096, 8192, 65536] {
        let bytes: Vec<u8> = (0..len).map(|_| rng.next_u64() as u8).collect();
        fs::write(&path, &bytes).unwrap();
        fs::set_permissions(&path, fs::Permissions::from_mode(0o600)).unwrap();
        for e in open_both(&path) {
            assert!(matches!(e, Error::Foreign(_)), "{len} random bytes: {e:?}");
        }
        assert_eq!(
            fs::read(&path).unwrap(),
            bytes,
            "a foreign file is never written"
        );
    }
    // Text is foreign too.
    fs::write(&path, "[limits]\napi = 100\n".repeat(300)).unwrap();
    for e in open_both(&path) {
        assert!(matches!(e, Error::Foreign(_)), "{e:?}");
    }
}

#[test]
fn an_empty_file_is_refused() {
    let (_dir, path) = temp_path("empty.shm");
    fs::write(&path, b"").unwrap();
    fs::set_permissions(&path, fs::Permissions::from_mode(0o600)).unwrap();
    for e in open_both(&path) {
        assert!(matches!(e, Error::Size { actual: 0, .. }), "{e:?}");
        // Says what the user needs: the file is empty, so it is no limiter file.
        let message = e.to_string();
        assert!(
            message.ends_with("empty file: not a limiter file"),
            "{message}"
        );
        assert!(!message.contains("requires"), "{message}");
    }
    assert_eq!(file_len(&path), 0);
}

/// An input echoed in a message is cut to a bounded length, in Rust `Display` and in the C
/// ABI's last-error message: a 10,000-byte name, key or path makes a message of a few hundred
/// bytes that still shows the start of the input and its length.
#[test]
fn long_inputs_are_cut_in_messages() {
    let (_dir, path) = valid_file();
    let limiter = Limiter::open(&path).unwrap();
    let long = "n".repeat(10_000);
    let bound = 4 * shmlimit::consts::MAX_ECHO + 200;
    let mut messages = vec![
        limiter.limit(&long).unwrap_err().to_string(),
        builder()
            .limit(&long, TokenBucket::per_second(1))
            .create_or_open(&path)
            .unwrap_err()
            .to_string(),
        Limiter::open(path.with_file_name(&long[..250]).join(&long[..250]))
            .unwrap_err()
            .to_string(),
    ];
    // The C ABI: the thread's last-error message.
    let c_name = std::ffi::CString::new(long.clone()).unwrap();
    let c_path = std::ffi::CString::new(path.to_str().unwrap()).unwrap();
    let mut handle = std::ptr::null_mut();
    // SAFETY: valid NUL-terminated strings and out-pointers that live across the calls; the
    // handle is freed once, and the last-error string is copied before any further call.
    unsafe {
        use shmlimit_ffi::*;
        assert_eq!(
            shmlimit_limiter_open(c_path.as_ptr(), std::ptr::null(), &mut handle) as i32,
            0
        );
        let mut limit = std::ptr::null_mut();
        assert_ne!(
            shmlimit_limiter_limit(handle, c_name.as_ptr(), &mut limit) as i32,
            0
        );
        messages.push(
            std::ffi::CStr::from_ptr(shmlimit_last_error())
                .to_string_lossy()
                .into_owned(),
        );
        shmlimit_limiter_free(handle);
    }
    for m in &messages {
        assert!(m.len() <= bound, "{} bytes: {m}", m.len());
        assert!(
            m.contains("nnnnnnnn"),
            "the start of the input is shown: {m}"
        );
        assert!(m.contains('…'), "the cut is marked: {m}");
    }
    assert!(messages[0].contains("(10000 bytes)"), "{}", messages[0]);
}

#[test]
fn another_format_version_is_refused() {
    let (_dir, path) = valid_file();
    let word = read_word(&path, WORD_VERSION);
    assert_eq!(word & 0xFFFF_FFFF, 7, "this build writes format version 7");
    // Version 1 (its key tags mean something else), version 2 (its word 7 is the active slot,
    // where version 3 keeps a fleet lease deadline), version 3 (no file id, no reboot words: its
    // zeros would read as a wall clock at the epoch), version 4 (its counter lanes are shared
    // and have no owner line), version 5 (its retunes rewrite a parameter slot without moving
    // the generation this build's decisions cache and check parameters by), version 6 (it
    // knows neither the adaptive kind nor counters limits) and a version from the future.
    for other in [1, 2, 3, 4, 5, 6, 8] {
        write_word(&path, WORD_VERSION, (word & !0xFFFF_FFFF) | other);
        for e in open_both(&path) {
            match e {
                Error::Version {
                    found, expected, ..
                } => assert_eq!((found, expected), (other as u32, 7)),
                other => panic!("expected Version, got {other:?}"),
            }
        }
    }
}

#[test]
fn a_damaged_definition_fails_its_checksum() {
    let (_dir, path) = valid_file();
    let original = fs::read(&path).unwrap();
    // A byte of the first record's name, of its parameters, of the third record's kind, and of
    // the header's file-size word: all covered by the checksum.
    for offset in [
        DEFS_OFFSET,
        DEFS_OFFSET + 9 * 8,
        DEFS_OFFSET + 2 * 128 + 8 * 8,
        3 * 8 + 1,
    ] {
        flip_byte(&path, offset);
        for e in open_both(&path) {
            assert!(
                matches!(&e, Error::Corrupt { reason, .. } if reason.contains("checksum")),
                "byte {offset} flipped: {e:?}"
            );
        }
        fs::write(&path, &original).unwrap();
    }
    // A layout word that is impossible on its face is refused before the checksum is read.
    flip_byte(&path, 4 * 8 + 1);
    for e in open_both(&path) {
        assert!(
            matches!(e, Error::Corrupt { .. }),
            "slot size damaged: {e:?}"
        );
    }
    fs::write(&path, &original).unwrap();
    assert!(Limiter::open(&path).is_ok());
}

#[test]
fn an_unfinished_init_state_is_refused() {
    let (_dir, path) = valid_file();
    write_word(&path, WORD_INIT, 0);
    for e in open_both(&path) {
        assert!(matches!(e, Error::NotInitialized(_)), "{e:?}");
    }
}

#[test]
fn a_file_from_another_time_namespace_is_refused() {
    let (_dir, path) = valid_file();
    let ours = read_word(&path, WORD_TIMENS_OFFSET);
    write_word(
        &path,
        WORD_TIMENS_OFFSET,
        ours.wrapping_add(3_600_000_000_000),
    );
    for e in open_both(&path) {
        assert!(matches!(e, Error::ClockMismatch { .. }), "{e:?}");
    }
}
