//! An experimental keyed hash of the key bytes built from AES rounds, measured against
//! SipHash-1-3 (docs/performance.md, "An AES-round keyed hash, measured"). It is not the
//! format's hash: [`super::hash::key_hash`] uses it only in a build made with the environment
//! variable `SHMLIMIT_EXPERIMENT_AES_HASH=aes`, for the benchmark.
//!
//! # Implementation details
//!
//! The 16-byte seed is the whitening key `K0` (its two words little-endian); the round keys are
//! `K1 = K0 ^ C1`, `K2 = K0 ^ C2`, `K3 = K0 ^ C3` with `C1..C3` fixed words (digits of pi). The
//! state starts as `K0` with the key's length XORed into its low word. The key is read in
//! 16-byte blocks, the last one padded with zeros (the length in the state tells paddings
//! apart); each block is XORed into the state and followed by two AES rounds, keyed `K1` and
//! `K2`. One last round keyed `K3` ends it, and the hash is the state's low word XOR its high
//! word. A key of up to 16 bytes (the common case: addresses, ids) is three rounds of AES under
//! a secret whitening key, a permutation of the block for a given seed and length, so two such
//! keys of one length can only share a hash through the final fold to 64 bits.
//!
//! An AES round here is `aesenc`'s: ShiftRows, SubBytes, MixColumns, then XOR of the round key
//! (FIPS-197, sections 5.1.1 to 5.1.4). On x86_64 with AES-NI it is the instruction
//! (`_mm_aesenc_si128`, detected at run time); elsewhere it is [`aesenc_soft`], written from the
//! standard and tested against its AES-128 vector and against the instruction. The software
//! round reads a table indexed by secret-dependent bytes, so unlike the instruction it is not
//! constant-time.

/// The round constants: `K(i) = K0 ^ C(i)` (hexadecimal digits of pi, as ahash's).
const C: [[u64; 2]; 3] = [
    [0x243f_6a88_85a3_08d3, 0x1319_8a2e_0370_7344],
    [0xa409_3822_299f_31d0, 0x082e_fa98_ec4e_6c89],
    [0x4528_21e6_38d0_1377, 0xbe54_66cf_34e9_0c6c],
];

/// Multiplication by `x` in GF(2^8) modulo the AES polynomial `x^8 + x^4 + x^3 + x + 1`.
const fn xtime(a: u8) -> u8 {
    (a << 1) ^ (((a >> 7) & 1) * 0x1b)
}

/// Multiplication in GF(2^8).
const fn gf_mul(mut a: u8, mut b: u8) -> u8 {
    let mut p = 0;
    while b != 0 {
        if b & 1 != 0 {
            p ^= a;
        }
        a = xtime(a);
        b >>= 1;
    }
    p
}

/// The AES S-box (FIPS-197 5.1.1): the multiplicative inverse (0 for 0), then the affine map.
const SBOX: [u8; 256] = {
    let mut table = [0u8; 256];
    let mut x = 0;
    while x < 256 {
        // x^254 is x's inverse in GF(2^8) (and 0 for 0).
        let mut inv = 1u8;
        let mut i = 0;
        while i < 254 {
            inv = gf_mul(inv, x as u8);
            i += 1;
        }
        let b = inv;
        table[x] =
            b ^ b.rotate_left(1) ^ b.rotate_left(2) ^ b.rotate_left(3) ^ b.rotate_left(4) ^ 0x63;
        x += 1;
    }
    table
};

/// One AES encryption round as `aesenc` computes it, on the state and round key as 16 bytes
/// in column order (byte `r + 4c` is row `r`, column `c`).
pub(crate) fn aesenc_soft(s: [u8; 16], key: [u8; 16]) -> [u8; 16] {
    // SubBytes and ShiftRows: row r moves r columns to the left.
    let mut t = [0u8; 16];
    for c in 0..4 {
        for r in 0..4 {
            t[r + 4 * c] = SBOX[usize::from(s[r + 4 * ((c + r) % 4)])];
        }
    }
    // MixColumns: each column times the matrix circulant(2, 3, 1, 1), then AddRoundKey.
    let mut out = [0u8; 16];
    for c in 0..4 {
        let a = [t[4 * c], t[4 * c + 1], t[4 * c + 2], t[4 * c + 3]];
        let x = [xtime(a[0]), xtime(a[1]), xtime(a[2]), xtime(a[3])];
        out[4 * c] = x[0] ^ x[1] ^ a[1] ^ a[2] ^ a[3];
        out[4 * c + 1] = a[0] ^ x[1] ^ x[2] ^ a[2] ^ a[3];
        out[4 * c + 2] = a[0] ^ a[1] ^ x[2] ^ x[3] ^ a[3];
        out[4 * c + 3] = x[0] ^ a[0] ^ a[1] ^ a[2] ^ x[3];
    }
    for (o, k) in out.iter_mut().zip(key) {
        *o ^= k;
    }
    out
}

/// The 1 to 16 bytes `rest` padded with zeros to a block, as its two little-endian words.
#[inline(always)]
fn last_block(rest: &[u8]) -> [u64; 2] {
    let r = rest.len();
    let u64_at = |i: usize| u64::from_le_bytes(rest[i..i + 8].try_into().expect("8 bytes"));
    if r >= 8 {
        // The bytes after the first word are the top ones of the 8 that end `rest`: the first
        // shift keeps the second below 64 when there are 8 of them.
        [u64_at(0), (u64_at(r - 8) >> 8) >> (8 * (16 - r) - 8)]
    } else {
        [super::hash::tail(rest), 0]
    }
}

/// Call `f` with each 16-byte block of `key` (the last padded with zeros) as two words.
#[inline(always)]
pub(super) fn for_each_block(key: &[u8], mut f: impl FnMut([u64; 2])) {
    let mut blocks = key.chunks_exact(16);
    for b in &mut blocks {
        f([
            u64::from_le_bytes(b[..8].try_into().expect("8 bytes")),
            u64::from_le_bytes(b[8..].try_into().expect("8 bytes")),
        ]);
    }
    let rest = blocks.remainder();
    if !rest.is_empty() {
        f(last_block(rest));
    }
}

fn to_bytes(w: [u64; 2]) -> [u8; 16] {
    let mut b = [0u8; 16];
    b[..8].copy_from_slice(&w[0].to_le_bytes());
    b[8..].copy_from_slice(&w[1].to_le_bytes());
    b
}

fn to_words(b: [u8; 16]) -> [u64; 2] {
    [
        u64::from_le_bytes(b[..8].try_into().expect("8 bytes")),
        u64::from_le_bytes(b[8..].try_into().expect("8 bytes")),
    ]
}

/// The hash with the software round: the definition, and the fallback.
pub(crate) fn aes_hash_soft(seed: [u64; 2], key: &[u8]) -> u64 {
    let round_key = |i: usize| to_bytes([seed[0] ^ C[i][0], seed[1] ^ C[i][1]]);
    let (k1, k2, k3) = (round_key(0), round_key(1), round_key(2));
    let mut s = [seed[0] ^ key.len() as u64, seed[1]];
    for_each_block(key, |m| {
        let x = to_bytes([s[0] ^ m[0], s[1] ^ m[1]]);
        s = to_words(aesenc_soft(aesenc_soft(x, k1), k2));
    });
    let s = to_words(aesenc_soft(to_bytes(s), k3));
    s[0] ^ s[1]
}

/// The hash with AES-NI's round.
///
/// # Safety
///
/// The processor must have AES-NI (`is_x86_feature_detected!("aes")`).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "aes")]
pub(crate) unsafe fn aes_hash_ni(seed: [u64; 2], key: &[u8]) -> u64 {
    use core::arch::x86_64::{
        __m128i, _mm_aesenc_si128, _mm_cvtsi128_si64, _mm_set_epi64x, _mm_unpackhi_epi64,
        _mm_xor_si128,
    };
    let block = |w: [u64; 2]| -> __m128i {
        // SAFETY: SSE2, part of x86_64's baseline (the intrinsics are safe on newer compilers
        // in a function with the target feature; the block keeps older ones compiling).
        #[allow(unused_unsafe)]
        unsafe {
            _mm_set_epi64x(w[1] as i64, w[0] as i64)
        }
    };
    let k1 = block([seed[0] ^ C[0][0], seed[1] ^ C[0][1]]);
    let k2 = block([seed[0] ^ C[1][0], seed[1] ^ C[1][1]]);
    let k3 = block([seed[0] ^ C[2][0], seed[1] ^ C[2][1]]);
    let mut s = block([seed[0] ^ key.len() as u64, seed[1]]);
    for_each_block(key, |m| {
        // SAFETY: this function runs only where the processor has AES-NI (its contract).
        #[allow(unused_unsafe)]
        unsafe {
            s = _mm_aesenc_si128(_mm_aesenc_si128(_mm_xor_si128(s, block(m)), k1), k2);
        }
    });
    // SAFETY: as above: AES-NI is present and SSE2 is baseline.
    #[allow(unused_unsafe)]
    unsafe {
        let s = _mm_aesenc_si128(s, k3);
        (_mm_cvtsi128_si64(s) ^ _mm_cvtsi128_si64(_mm_unpackhi_epi64(s, s))) as u64
    }
}

/// The AES-round hash of `key` under `seed`: AES-NI where the processor has it, the software
/// round elsewhere (the same values).
#[inline]
pub(crate) fn aes_hash(seed: [u64; 2], key: &[u8]) -> u64 {
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("aes") {
            // SAFETY: the processor has AES-NI, checked just above.
            return unsafe { aes_hash_ni(seed, key) };
        }
    }
    aes_hash_soft(seed, key)
}

#[cfg(test)]
#[path = "aes_tests.rs"]
mod tests;
