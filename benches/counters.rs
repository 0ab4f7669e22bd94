//! Counters limits (keyed counters whose window and limit come with each call, the storage of
//! Python's `limits`): `counters/<call>` is one call of the Rust API on 1,024 keys in turn,
//! every call admitted (windows and limits no run reaches), single thread:
//!
//! - `incr`: `incr(key, 1 h, 1)` (the fixed window as `limits` counts);
//! - `acquire_fixed`, `acquire_sliding`: a limit of 65,535 per hour;
//! - `acquire_moving_100`: a moving window of 100 per 1 ms (each key is called about every
//!   100 us, so at most a few entries of its log are live);
//! - `keyed_window`: a keyed fixed window's `try_acquire_key(key, 1)`, the keyed kind with its
//!   window in the file, for reference.

use std::time::Duration;

use criterion::{Criterion, Throughput};
use shmlimit::{Counters, FixedWindow, Keyed, Limiter};

const KEYS: usize = 1024;

pub fn bench(c: &mut Criterion) {
    let dir = tempfile::tempdir_in(if std::path::Path::new("/dev/shm").is_dir() {
        "/dev/shm"
    } else {
        "/tmp"
    })
    .expect("a temporary directory");
    let limiter = Limiter::builder()
        .keyed_limit(
            "limits",
            Counters::new().moving_window(128),
            Keyed::new(4 * KEYS as u64),
        )
        .keyed_limit(
            "window",
            FixedWindow::new(u32::MAX as u64, Duration::from_secs(3_600)),
            Keyed::new(4 * KEYS as u64),
        )
        .create_or_open(dir.path().join("counters.shm"))
        .expect("the bench file");
    let store = limiter.counters("limits").expect("counters");
    let window = limiter.keyed_window("window").expect("keyed window");
    let keys: Vec<Vec<u8>> = (0..KEYS)
        .map(|i| format!("LIMITER/client-{i}/route").into_bytes())
        .collect();
    let hour = Duration::from_secs(3_600);
    let ms = Duration::from_millis(1);
    let mut g = c.benchmark_group("counters");
    g.throughput(Throughput::Elements(1));
    let mut i = 0usize;
    let mut next = || {
        i = (i + 1) % KEYS;
        &keys[i]
    };
    g.bench_function("incr", |b| {
        b.iter(|| store.incr(next(), hour, 1).expect("incr"))
    });
    g.bench_function("acquire_fixed", |b| {
        b.iter(|| store.acquire_fixed(next(), 65_535, hour, 1).expect("fixed"))
    });
    g.bench_function("acquire_sliding", |b| {
        b.iter(|| {
            store
                .acquire_sliding(next(), 65_535, hour, 1)
                .expect("sliding")
        })
    });
    g.bench_function("acquire_moving_100", |b| {
        b.iter(|| store.acquire_moving(next(), 100, ms, 1).expect("moving"))
    });
    g.bench_function("keyed_window", |b| {
        b.iter(|| window.try_acquire_key(next(), 1).expect("keyed window"))
    });
    g.finish();
}
