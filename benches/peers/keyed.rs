//! shmlimit's keyed limit: one token bucket per key in a table of slots, decided with
//! [`Limit::try_acquire_key`] on keys drawn from a precomputed index sequence.
//!
//! The sequence of key indices is made before measuring; a decision reads the next index, makes
//! its key in registers (a service has the key of a request in hand: reading it from a buffer
//! of a million keys would add a cache miss of this benchmark's own) and decides.
//!
//! [`Keys`] and [`KeyCursor`] are shared with the keyed peers (`governor::GovernorKeyed`,
//! `pingora::PingoraRate`): the same key count and access make the same index sequence and the
//! same 12-byte keys, so every keyed contender decides on the same keys in the same order.

use std::sync::Arc;

use shmlimit::{Keyed, KeyedTokenBucketLimit, Limiter};
use tempfile::TempDir;

use super::shmlimit::token_bucket;
use super::{file_in, scratch_dir, Contender, Workload};

const NAME: &str = "keyed";

/// Bytes of every key: `k`, the index's four little-endian bytes, then `k` again to 12 bytes.
pub const KEY_LEN: usize = 12;

/// Indices in one sequence (a power of two, so the cursor wraps with a mask).
pub const SEQUENCE_LEN: usize = 1 << 22;

/// How keys are drawn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// Every key equally often.
    Uniform,
    /// Zipf-distributed: key `i` (1-based) with weight `1 / i^ZIPF_S`.
    Zipf,
}

/// The Zipf exponent.
pub const ZIPF_S: f64 = 1.1;

impl Access {
    /// `uniform` or `zipf`, as used in group names.
    pub fn name(self) -> &'static str {
        match self {
            Access::Uniform => "uniform",
            Access::Zipf => "zipf",
        }
    }
}

/// Keys and the order they are decided in, shared by every worker of a contender.
pub struct Keys {
    count: usize,
    sequence: Vec<u32>,
}

/// splitmix64: a fixed, seedable sequence of well-mixed 64-bit values.
pub fn splitmix(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// A uniform value in `[0, 1)`.
fn unit(state: &mut u64) -> f64 {
    (splitmix(state) >> 11) as f64 / (1u64 << 53) as f64
}

fn sequence(keys: usize, access: Access) -> Vec<u32> {
    let mut rng = 0x5eed_u64 ^ keys as u64;
    match access {
        Access::Uniform => (0..SEQUENCE_LEN)
            .map(|_| (splitmix(&mut rng) % keys as u64) as u32)
            .collect(),
        Access::Zipf => {
            // Inverse of the cumulative distribution, by binary search.
            let mut cdf = Vec::with_capacity(keys);
            let mut total = 0.0;
            for i in 1..=keys {
                total += 1.0 / (i as f64).powf(ZIPF_S);
                cdf.push(total);
            }
            (0..SEQUENCE_LEN)
                .map(|_| {
                    let u = unit(&mut rng) * total;
                    cdf.partition_point(|&c| c <= u).min(keys - 1) as u32
                })
                .collect()
        }
    }
}

impl Keys {
    /// `keys` distinct keys and a sequence of [`SEQUENCE_LEN`] indices drawn by `access` (the
    /// same for the same arguments, whichever contender asks).
    pub fn new(keys: usize, access: Access) -> Arc<Keys> {
        Arc::new(Keys {
            count: keys,
            sequence: sequence(keys, access),
        })
    }

    /// Every key, in index order (to insert them before measuring).
    pub fn all(&self) -> impl Iterator<Item = [u8; KEY_LEN]> {
        (0..self.count).map(|i| Keys::key(i as u32))
    }

    /// Key `index`: distinct for every index, made with one store.
    #[inline(always)]
    pub fn key(index: u32) -> [u8; KEY_LEN] {
        let mut key = [b'k'; KEY_LEN];
        key[1..5].copy_from_slice(&index.to_le_bytes());
        key
    }
}

/// Where one worker is in the sequence of its contender's [`Keys`].
pub struct KeyCursor {
    keys: Arc<Keys>,
    next: usize,
}

impl KeyCursor {
    /// At the start of the sequence.
    pub fn new(keys: &Arc<Keys>) -> KeyCursor {
        KeyCursor {
            keys: Arc::clone(keys),
            next: 0,
        }
    }

    /// The key of the next index of the sequence (wrapping at its end).
    #[inline(always)]
    pub fn next_key(&mut self) -> [u8; KEY_LEN] {
        let index = self.keys.sequence[self.next];
        self.next = (self.next + 1) & (SEQUENCE_LEN - 1);
        Keys::key(index)
    }
}

/// A keyed token bucket (the bucket of a [`Workload`] per key) with `keys` distinct keys in a
/// table of about twice as many slots, every key already inserted.
pub struct KeyedShmlimit {
    limit: KeyedTokenBucketLimit,
    keys: Arc<Keys>,
    _dir: TempDir,
}

impl KeyedShmlimit {
    /// A fresh file holding the keyed limit; every key is decided on once before returning, so
    /// the measured decisions find their key in the table rather than insert it.
    pub fn new(workload: Workload, keys: usize, access: Access) -> Self {
        let dir = scratch_dir();
        let path = file_in(&dir, "keyed");
        let limiter = Limiter::builder()
            .keyed_limit(NAME, token_bucket(workload), Keyed::new(2 * keys as u64))
            .create_or_open(&path)
            .expect("create the keyed limiter file");
        let limit = limiter
            .keyed_token_bucket(NAME)
            .expect("the limit just defined");
        let keys = Keys::new(keys, access);
        for key in keys.all() {
            let first = limit.try_acquire_key(&key, 1).expect("insert every key");
            assert!(first.is_allowed(), "a fresh key's first decision admits");
        }
        KeyedShmlimit {
            limit,
            keys,
            _dir: dir,
        }
    }
}

/// A handle and where in the sequence this worker is.
pub struct KeyedWorker {
    limit: KeyedTokenBucketLimit,
    keys: KeyCursor,
}

impl Contender for KeyedShmlimit {
    type Worker = KeyedWorker;

    fn worker(&self) -> KeyedWorker {
        KeyedWorker {
            limit: self.limit.clone(),
            keys: KeyCursor::new(&self.keys),
        }
    }

    #[inline(always)]
    fn decide(worker: &mut KeyedWorker) -> bool {
        worker
            .limit
            .try_acquire_key(&worker.keys.next_key(), 1)
            .expect("a cost of 1 on a healthy keyed file always decides")
            .is_allowed()
    }
}
