//! Every header word corrupted in turn refuses the file with a typed error or is harmless, and
//! damaged reboot words at a reboot keep every limit within its bound.

use super::*;

#[test]
fn every_header_word_corrupted_in_turn_is_refused_or_harmless() {
    let (_dir, path) = temp_path("header.shm");
    drop(create(&path));
    let pristine = fs::read(&path).unwrap();
    let mut refused = 0;
    // The validated words, and the reserved words after them (a sample).
    let words = (0..HEADER_WORDS).chain([63, 64, 100, 127, 128, 511]);
    for w in words {
        let original = u64::from_ne_bytes(pristine[w as usize * 8..][..8].try_into().unwrap());
        for (how, value) in [
            ("flip bit 0", original ^ 1),
            ("flip bit 63", original ^ (1 << 63)),
            ("zero", 0),
            ("all ones", u64::MAX),
        ] {
            if value == original {
                continue;
            }
            fs::write(&path, &pristine).unwrap();
            write_word(&path, w, value);
            let result = Limiter::open(&path);
            // Informational or reboot words: the boot id (a reboot), the wall offsets and
            // times, the translation marker and counters, the failed-closed bitmap.
            let expect_error =
                !matches!(w, 12 | 13 | 16 | 17 | 18 | 21..=24 | 26 | 27) && w < HEADER_WORDS;
            match (result, expect_error) {
                (Err(e), true) => {
                    refused += 1;
                    let ok = match w {
                        0 => matches!(e, Error::Foreign(_)),
                        1 if how == "flip bit 63" => matches!(e, Error::Corrupt { .. }),
                        1 => matches!(e, Error::Version { .. }),
                        2 => matches!(e, Error::NotInitialized(_)),
                        15 => matches!(e, Error::ClockMismatch { .. }),
                        _ => matches!(e, Error::Corrupt { .. } | Error::Size { .. }),
                    };
                    assert!(ok, "word {w} ({how}): unexpected error {e:?}");
                    assert!(!e.to_string().is_empty());
                }
                (Ok(l), false) => {
                    if matches!(w, 12 | 13) {
                        assert_eq!(
                            l.reboot_info().translations,
                            1,
                            "a boot id change translates once"
                        );
                        assert_eq!(l.reset_count(), 0);
                    }
                    decide_at_one_instant(&l, 2 * CAP as usize);
                }
                (Err(e), false) => panic!("word {w} ({how}) should be harmless: {e:?}"),
                (Ok(_), true) => panic!("word {w} ({how}) was accepted"),
            }
        }
    }
    println!("{refused} corrupted header words refused with a typed error");
}

/// The reboot words are read at a reboot: each of them damaged, together with a boot id change,
/// still opens, translates once, and every limit stays within its capacity (at the instant of
/// the test, and a day later).
#[test]
fn damaged_reboot_words_at_a_reboot_stay_within_bounds() {
    let (_dir, path) = temp_path("reboot-words.shm");
    {
        let l = create(&path);
        decide_at_one_instant(&l, 2 * CAP as usize);
    }
    let pristine = fs::read(&path).unwrap();
    for w in [16u64, 21, 22, 23, 24, 26, 27, 64] {
        let original = read_word(&path, w);
        for value in [0, u64::MAX, original ^ (1 << 63), original ^ 1, 1 << 62] {
            fs::write(&path, &pristine).unwrap();
            write_word(&path, w, value);
            write_word(&path, 12, read_word(&path, 12) ^ 0xFF);
            let l = Limiter::open(&path).unwrap_or_else(|e| panic!("word {w} = {value:#x}: {e}"));
            let before = if w == 26 { value } else { 0 };
            assert_eq!(l.reboot_info().translations, before.wrapping_add(1));
            decide_at_one_instant(&l, 2 * CAP as usize);
        }
    }
}
