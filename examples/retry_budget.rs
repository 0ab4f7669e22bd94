//! A retry budget: 240 sends per second to one dependency, of which at most 200 are first
//! attempts and at most 40 are retries, so a storm of retries can never crowd out new work and
//! never push the total past what the dependency accepts.
//!
//! Each send checks two limits at once, all or nothing: its own class (normal or retry) and the
//! shared total. Run it with `cargo run --release --example retry_budget`.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use shmlimit::{try_acquire_all, Check, Limiter, TokenBucket};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile_dir()?;
    let path = dir.join("retry-budget.shm");
    let limiter = Limiter::builder()
        .limit("total", TokenBucket::per_second(240).burst(24))
        .limit("normal", TokenBucket::per_second(200).burst(20))
        .limit("retry", TokenBucket::per_second(40).burst(4))
        .create_or_open(&path)?;
    let seconds = 3.0;
    let counts = Arc::new([AtomicU64::new(0), AtomicU64::new(0)]);
    let start = Instant::now();
    let workers: Vec<_> = (0..4)
        .map(|worker| {
            let limiter = limiter.clone();
            let counts = Arc::clone(&counts);
            std::thread::spawn(move || -> Result<(), shmlimit::Error> {
                let total = limiter.token_bucket("total")?;
                // Two workers send first attempts, two send retries: both far above their budget.
                let (class, name) = if worker % 2 == 0 {
                    (0, "normal")
                } else {
                    (1, "retry")
                };
                let own = limiter.token_bucket(name)?;
                let checks = [Check::new(&own, 1), Check::new(&total, 1)];
                while start.elapsed().as_secs_f64() < seconds {
                    let decision = try_acquire_all(&checks)?;
                    if decision.is_allowed() {
                        counts[class].fetch_add(1, Ordering::Relaxed);
                    } else {
                        std::thread::sleep(Duration::from_nanos(decision.retry_after_ns()));
                    }
                }
                Ok(())
            })
        })
        .collect();
    for w in workers {
        w.join().expect("worker thread")?;
    }
    let elapsed = start.elapsed().as_secs_f64();
    let normal = counts[0].load(Ordering::Relaxed);
    let retry = counts[1].load(Ordering::Relaxed);
    println!("over {elapsed:.2} s:");
    println!(
        "  first attempts {normal:>5}  (bound {:.0})",
        20.0 + 200.0 * elapsed
    );
    println!(
        "  retries        {retry:>5}  (bound {:.0})",
        4.0 + 40.0 * elapsed
    );
    println!(
        "  total sends    {:>5}  (bound {:.0})",
        normal + retry,
        24.0 + 240.0 * elapsed
    );
    assert!(retry as f64 <= 4.0 + 40.0 * elapsed);
    assert!((normal + retry) as f64 <= 24.0 + 240.0 * elapsed);
    std::fs::remove_dir_all(&dir)?;
    Ok(())
}

/// A private directory for the example's limiter file.
fn tempfile_dir() -> std::io::Result<std::path::PathBuf> {
    let base = if std::path::Path::new("/dev/shm").is_dir() {
        std::path::PathBuf::from("/dev/shm")
    } else {
        std::env::temp_dir()
    };
    let dir = base.join(format!("shmlimit-retry-budget-{}", std::process::id()));
    std::fs::create_dir(&dir)?;
    Ok(dir)
}
