//! Random bytes anywhere and random state words (proptest): a clean error or decisions within
//! every capacity.

use super::*;

fn region() -> impl Strategy<Value = (u8, u64)> {
    // Which region (0 header words, 1 definitions, 2 slot state, 3 anywhere) and an offset seed.
    (0u8..4, any::<u64>())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, failure_persistence: None, ..ProptestConfig::default() })]

    /// Random bytes over random parts of a valid file: a clean error or a file whose decisions
    /// stay within every capacity.
    #[test]
    fn random_bytes_anywhere_error_cleanly_or_stay_within_bounds(
        patches in prop::collection::vec((region(), prop::collection::vec(any::<u8>(), 1..24)), 1..6)
    ) {
        thread_local!(static FILE: (tempfile::TempDir, std::path::PathBuf, Vec<u8>, (u64, u64)) = pristine());
        FILE.with(|(_dir, path, bytes, (slots_at, slots_len))| {
            let mut damaged = bytes.clone();
            for ((region, seed), patch) in &patches {
                let (base, span) = match region {
                    0 => (0, HEADER_WORDS * 8),
                    1 => (DEFS_OFFSET, LIMITS * DEF_SIZE),
                    2 => (*slots_at, *slots_len),
                    _ => (0, damaged.len() as u64),
                };
                let at = (base + seed % span) as usize;
                let end = (at + patch.len()).min(damaged.len());
                damaged[at..end].copy_from_slice(&patch[..end - at]);
            }
            fs::write(path, &damaged).unwrap();
            if let Ok(limiter) = Limiter::open(path) {
                decide_at_one_instant(&limiter, 2 * CAP as usize);
            }
        });
    }

    /// Random words written over the slot state only (the definitions intact, so the file
    /// always opens): at one instant no limit admits more than its capacity.
    #[test]
    fn random_state_words_never_admit_beyond_capacity(
        writes in prop::collection::vec((any::<u64>(), prop_oneof![
            any::<u64>(),
            Just(0u64),
            Just(u64::MAX),
            0u64..64,
            (0u64..1 << 24).prop_map(|x| x << 40 | 0xFFFFF),
            (0u64..0x7FFF, 0u64..1 << 48).prop_map(|(lap, t)| lap << 49 | t),
        ]), 1..12)
    ) {
        thread_local!(static FILE: (tempfile::TempDir, std::path::PathBuf, Vec<u8>, (u64, u64)) = pristine());
        FILE.with(|(_dir, path, bytes, (slots_at, slots_len))| {
            let mut damaged = bytes.clone();
            for (seed, value) in &writes {
                let at = (*slots_at + (seed % (slots_len / 8)) * 8) as usize;
                damaged[at..at + 8].copy_from_slice(&value.to_ne_bytes());
            }
            fs::write(path, &damaged).unwrap();
            let limiter = Limiter::open(path).expect("state damage does not affect opening");
            decide_at_one_instant(&limiter, 2 * CAP as usize);
        });
    }
}
