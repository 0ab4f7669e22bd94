use super::*;

/// splitmix64: reproducible test inputs.
fn next(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// A 128-bit value written most significant byte first, as a block of bytes in memory order
/// (byte 0 is the least significant), as Intel's documentation prints XMM registers.
fn xmm(hex: u128) -> [u8; 16] {
    hex.to_le_bytes()
}

/// A block written in FIPS-197's byte order (byte 0 first).
fn fips(hex: u128) -> [u8; 16] {
    hex.to_be_bytes()
}

#[test]
fn the_sbox_is_the_standards() {
    // FIPS-197, figure 7.
    assert_eq!(SBOX[0x00], 0x63);
    assert_eq!(SBOX[0x01], 0x7c);
    assert_eq!(SBOX[0x53], 0xed);
    assert_eq!(SBOX[0x9a], 0xb8);
    assert_eq!(SBOX[0xff], 0x16);
    let mut seen = [false; 256];
    for &s in &SBOX {
        assert!(!seen[usize::from(s)], "not a permutation");
        seen[usize::from(s)] = true;
    }
}

/// AES-128 from the software round (key expansion of FIPS-197 5.2; the last round has no
/// MixColumns).
fn aes128(key: [u8; 16], block: [u8; 16]) -> [u8; 16] {
    let mut w = [[0u8; 4]; 44];
    for (i, word) in w.iter_mut().take(4).enumerate() {
        word.copy_from_slice(&key[4 * i..4 * i + 4]);
    }
    let mut rcon = 1u8;
    for i in 4..44 {
        let mut t = w[i - 1];
        if i % 4 == 0 {
            t = [
                SBOX[usize::from(t[1])] ^ rcon,
                SBOX[usize::from(t[2])],
                SBOX[usize::from(t[3])],
                SBOX[usize::from(t[0])],
            ];
            rcon = xtime(rcon);
        }
        for j in 0..4 {
            w[i][j] = w[i - 4][j] ^ t[j];
        }
    }
    let round_key = |r: usize| {
        let mut k = [0u8; 16];
        for c in 0..4 {
            k[4 * c..4 * c + 4].copy_from_slice(&w[4 * r + c]);
        }
        k
    };
    let mut s = block;
    for (b, k) in s.iter_mut().zip(round_key(0)) {
        *b ^= k;
    }
    for r in 1..10 {
        s = aesenc_soft(s, round_key(r));
    }
    let mut out = [0u8; 16];
    for c in 0..4 {
        for r in 0..4 {
            out[r + 4 * c] = SBOX[usize::from(s[r + 4 * ((c + r) % 4)])] ^ round_key(10)[r + 4 * c];
        }
    }
    out
}

#[test]
fn the_software_round_gives_the_aes128_test_vector() {
    // FIPS-197, appendix C.1.
    let key = fips(0x0001_0203_0405_0607_0809_0a0b_0c0d_0e0f);
    let plain = fips(0x0011_2233_4455_6677_8899_aabb_ccdd_eeff);
    assert_eq!(
        aes128(key, plain),
        fips(0x69c4_e0d8_6a7b_0430_d8cd_b780_70b4_c55a)
    );
    // FIPS-197, appendix B.
    let key = fips(0x2b7e_1516_28ae_d2a6_abf7_1588_09cf_4f3c);
    let plain = fips(0x3243_f6a8_885a_308d_3131_98a2_e037_0734);
    assert_eq!(
        aes128(key, plain),
        fips(0x3925_841d_02dc_09fb_dc11_8597_196a_0b32)
    );
}

#[test]
fn the_software_round_gives_intels_aesenc_example() {
    // Intel's AES-NI white paper (Gueron), the AESENC example.
    let state = xmm(0x7b5b_5465_7374_5665_6374_6f72_5d53_475d);
    let key = xmm(0x4869_2853_6861_7929_5b47_7565_726f_6e5d);
    assert_eq!(
        aesenc_soft(state, key),
        xmm(0xa831_1c2f_9fdb_a3c5_8b10_4b58_ded7_e595)
    );
}

#[cfg(target_arch = "x86_64")]
#[test]
fn the_instruction_and_the_software_round_agree_on_random_keys_and_seeds() {
    if !std::arch::is_x86_feature_detected!("aes") {
        eprintln!("no AES-NI on this processor: only the software round runs");
        return;
    }
    let mut rng = 0x5eed_u64;
    let mut key = [0u8; 1024];
    for round in 0..200_000 {
        let seed = [next(&mut rng), next(&mut rng)];
        // Mostly short keys (every length up to 64), now and then a long one.
        let len = if round % 64 == 0 {
            1 + (next(&mut rng) % 1024) as usize
        } else {
            1 + round % 64
        };
        for chunk in key[..len].chunks_mut(8) {
            let w = next(&mut rng).to_le_bytes();
            chunk.copy_from_slice(&w[..chunk.len()]);
        }
        // SAFETY: the processor has AES-NI, checked above.
        let ni = unsafe { aes_hash_ni(seed, &key[..len]) };
        assert_eq!(
            ni,
            aes_hash_soft(seed, &key[..len]),
            "seed {seed:x?}, len {len}"
        );
    }
}

#[test]
fn seed_length_and_every_byte_change_the_hash() {
    let a = aes_hash([1, 2], b"user:42");
    assert_eq!(a, aes_hash([1, 2], b"user:42"));
    assert_ne!(a, aes_hash([1, 3], b"user:42"));
    assert_ne!(a, aes_hash([3, 2], b"user:42"));
    assert_ne!(a, aes_hash([1, 2], b"user:43"));
    assert_ne!(a, aes_hash([1, 2], b"user:42\0"));
    assert_ne!(aes_hash([1, 2], &[0; 16]), aes_hash([1, 2], &[0; 32]));
    let long: Vec<u8> = (0..100u8).collect();
    let h = aes_hash([5, 6], &long);
    for i in 0..long.len() {
        let mut other = long.clone();
        other[i] ^= 1;
        assert_ne!(h, aes_hash([5, 6], &other), "byte {i}");
    }
}

/// 2^20 sequential 12-byte keys (`key:` and a counter): no two share a 63-bit tag, and the
/// low 16 bits (a table's index bits) and the top 16 of the 63 fall evenly into 2^16 buckets.
#[test]
fn sequential_keys_neither_collide_nor_crowd_buckets() {
    const N: usize = 1 << 20;
    let seed = [0x0123_4567_89ab_cdef, 0xfedc_ba98_7654_3210];
    let mut tags: Vec<u64> = (0..N as u64)
        .map(|i| {
            let mut key = *b"key:\0\0\0\0\0\0\0\0";
            key[4..].copy_from_slice(&i.to_le_bytes());
            crate::engine::keys::table::tag_of(aes_hash(seed, &key))
        })
        .collect();
    for (name, bucket) in [
        (
            "low 16 bits",
            Box::new(|t: u64| t & 0xffff) as Box<dyn Fn(u64) -> u64>,
        ),
        ("bits 47 to 62", Box::new(|t: u64| t >> 47)),
    ] {
        let mut counts = vec![0u32; 1 << 16];
        for &t in &tags {
            counts[bucket(t) as usize] += 1;
        }
        // Chi-square with 2^16 - 1 degrees of freedom: mean 65,535, deviation 362.
        let expected = (N >> 16) as f64;
        let chi: f64 = counts
            .iter()
            .map(|&c| (f64::from(c) - expected).powi(2) / expected)
            .sum();
        assert!(
            (65_535.0 - chi).abs() < 6.0 * 362.0,
            "{name}: chi-square {chi}"
        );
    }
    tags.sort_unstable();
    tags.dedup();
    assert_eq!(tags.len(), N, "two sequential keys share a tag");
}
