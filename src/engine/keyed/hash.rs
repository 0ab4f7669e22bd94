//! The keyed hash that turns a caller's key bytes into a table tag: SipHash-1-3 with the file's
//! 128-bit seed.
//!
//! # Implementation details
//!
//! SipHash (Aumasson and Bernstein) with `c` compression and `d` finalization rounds over the key
//! bytes read as little-endian 64-bit words, the last word padded with the message length in its
//! top byte. SipHash-1-3 is the variant Rust's standard library uses for its hash maps: a keyed
//! pseudo-random function fast on short inputs, so that a caller who does not know the file's seed
//! cannot choose keys that collide (no hash flooding of one probe window). The rounds are a const
//! parameter only so that the tests can check the code against the SipHash-2-4 test vector and
//! against the standard library's SipHash-2-4.

/// One SipRound on the four state words.
#[inline(always)]
fn round(v: &mut [u64; 4]) {
    v[0] = v[0].wrapping_add(v[1]);
    v[1] = v[1].rotate_left(13);
    v[1] ^= v[0];
    v[0] = v[0].rotate_left(32);
    v[2] = v[2].wrapping_add(v[3]);
    v[3] = v[3].rotate_left(16);
    v[3] ^= v[2];
    v[0] = v[0].wrapping_add(v[3]);
    v[3] = v[3].rotate_left(21);
    v[3] ^= v[0];
    v[2] = v[2].wrapping_add(v[1]);
    v[1] = v[1].rotate_left(17);
    v[1] ^= v[2];
    v[2] = v[2].rotate_left(32);
}

/// SipHash-`C`-`D` of `msg` under the key `(k0, k1)`.
#[inline]
pub(crate) fn siphash<const C: usize, const D: usize>(k0: u64, k1: u64, msg: &[u8]) -> u64 {
    // The initialisation constants of the specification ("somepseudorandomlygeneratedbytes").
    let mut v = [
        k0 ^ 0x736f_6d65_7073_6575,
        k1 ^ 0x646f_7261_6e64_6f6d,
        k0 ^ 0x6c79_6765_6e65_7261,
        k1 ^ 0x7465_6462_7974_6573,
    ];
    let compress = |v: &mut [u64; 4], m: u64| {
        v[3] ^= m;
        for _ in 0..C {
            round(v);
        }
        v[0] ^= m;
    };
    let mut words = msg.chunks_exact(8);
    for word in &mut words {
        compress(
            &mut v,
            u64::from_le_bytes(word.try_into().expect("8-byte chunk")),
        );
    }
    let len = msg.len();
    let rest = if len >= 8 {
        // The 0 to 7 bytes after the last whole word are the top bytes of the 8 that end the
        // message: one load and two shifts (the first keeps the shift below 64 when there are
        // none), where `tail` branches on their number.
        let end = u64::from_le_bytes(msg[len - 8..].try_into().expect("8 bytes"));
        (end >> 8) >> (56 - 8 * (len & 7))
    } else {
        tail(words.remainder())
    };
    compress(&mut v, (len as u64) << 56 | rest);
    v[2] ^= 0xff;
    for _ in 0..D {
        round(&mut v);
    }
    v[0] ^ v[1] ^ v[2] ^ v[3]
}

/// The 0 to 7 bytes `rest` as a little-endian word, read with at most two loads (overlapping
/// reads of the same bytes OR to the same bits) instead of one load and shift per byte.
#[inline(always)]
pub(super) fn tail(rest: &[u8]) -> u64 {
    let r = rest.len();
    let u32_at = |i: usize| {
        u64::from(u32::from_le_bytes([
            rest[i],
            rest[i + 1],
            rest[i + 2],
            rest[i + 3],
        ]))
    };
    match r {
        0 => 0,
        1..=3 => {
            u64::from(rest[0])
                | u64::from(rest[r / 2]) << (8 * (r / 2))
                | u64::from(rest[r - 1]) << (8 * (r - 1))
        }
        _ => u32_at(0) | u32_at(r - 4) << (8 * (r - 4)),
    }
}

/// SipHash-1-3 of `key` under the file's seed: the format's key hash.
#[inline]
pub(crate) fn key_hash(seed: [u64; 2], key: &[u8]) -> u64 {
    siphash::<1, 3>(seed[0], seed[1], key)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn siphash24_matches_the_reference_vector() {
        // The specification's test: key 00..0f, message 00..0e (15 bytes).
        let k0 = u64::from_le_bytes([0, 1, 2, 3, 4, 5, 6, 7]);
        let k1 = u64::from_le_bytes([8, 9, 10, 11, 12, 13, 14, 15]);
        let msg: Vec<u8> = (0..15).collect();
        assert_eq!(siphash::<2, 4>(k0, k1, &msg), 0xa129_ca61_49be_45e5);
    }

    #[test]
    #[allow(deprecated)]
    fn siphash24_matches_the_standard_library_at_every_length() {
        use std::hash::Hasher;
        let (k0, k1) = (0x0123_4567_89ab_cdef, 0xfedc_ba98_7654_3210);
        let msg: Vec<u8> = (0..64u8).map(|i| i.wrapping_mul(37) ^ 0x5a).collect();
        for len in 0..=msg.len() {
            let mut std = std::hash::SipHasher::new_with_keys(k0, k1);
            std.write(&msg[..len]);
            assert_eq!(
                siphash::<2, 4>(k0, k1, &msg[..len]),
                std.finish(),
                "len {len}"
            );
        }
    }

    #[test]
    fn seed_and_every_byte_change_the_hash() {
        let a = key_hash([1, 2], b"user:42");
        assert_ne!(a, key_hash([1, 3], b"user:42"));
        assert_ne!(a, key_hash([1, 2], b"user:43"));
        assert_ne!(a, key_hash([1, 2], b"user:42\0"));
        assert_eq!(a, key_hash([1, 2], b"user:42"));
    }
}
