//! `demo-adaptive-worker`: one worker process of `demo --scenario adaptive`.
//!
//! It calls the stand-in dependency (`demo-dependency --knee K`) from `--threads` threads, each
//! with its own connection, as fast as its limit permits: a permit of the limit `--limit` in
//! `--file` (an adaptive concurrency limit, shared by every worker or one per worker, or a fixed
//! concurrency limit), then one call, then the release, with the call's outcome and latency for
//! an adaptive limit. It runs until its standard input closes, then writes every call to
//! `--record` (`start_ns end_ns ok`, one line each, `CLOCK_MONOTONIC`) and exits.

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use clap::Args;
use shmlimit::{Clock, Limiter, MonotonicClock, Outcome};

use crate::Failure;

#[derive(Args, Debug, Clone)]
#[command(about = "One worker of `demo --scenario adaptive` (started by it)")]
pub struct AdaptiveWorkerArgs {
    /// The scenario's limiter file
    #[arg(long)]
    pub file: PathBuf,
    /// The limit to take permits of (adaptive or fixed concurrency)
    #[arg(long)]
    pub limit: String,
    /// The dependency's Unix socket
    #[arg(long)]
    pub socket: PathBuf,
    /// This worker's number (sent with every call)
    #[arg(long)]
    pub instance: u32,
    /// Calls this worker may have in flight at most, one thread each
    #[arg(long, default_value_t = 24)]
    pub threads: u32,
    /// Write every call here at the end
    #[arg(long)]
    pub record: PathBuf,
}

/// A permit of either kind, released with its call's outcome.
enum Gate {
    Adaptive(shmlimit::AdaptiveConcurrencyLimit),
    Fixed(shmlimit::ConcurrencyLimit),
}

pub fn run(args: AdaptiveWorkerArgs) -> Result<(), Failure> {
    let limiter = Limiter::open(&args.file).map_err(|e| Failure::library(e, &args.file))?;
    let gate = Arc::new(match limiter.adaptive_concurrency(&args.limit) {
        Ok(l) => Gate::Adaptive(l),
        Err(_) => Gate::Fixed(
            limiter
                .concurrency(&args.limit)
                .map_err(|e| Failure::library(e, &args.file))?,
        ),
    });
    let stop = Arc::new(AtomicBool::new(false));
    let threads: Vec<_> = (0..args.threads)
        .map(|_| {
            let (gate, stop, socket) = (Arc::clone(&gate), Arc::clone(&stop), args.socket.clone());
            let instance = args.instance;
            std::thread::spawn(move || caller(&gate, &stop, &socket, instance))
        })
        .collect();
    // Until standard input closes.
    let mut sink = Vec::new();
    let _ = std::io::stdin().lock().read_to_end(&mut sink);
    stop.store(true, Ordering::Relaxed);
    let mut text = String::new();
    for t in threads {
        for (start, end, ok) in t.join().unwrap_or_default() {
            text.push_str(&format!("{start} {end} {}\n", u8::from(ok)));
        }
    }
    std::fs::write(&args.record, text)
        .map_err(|e| Failure::file(format!("{}: {e}", args.record.display())))
}

/// One thread's calls until `stop`: `(start_ns, end_ns, ok)` each.
fn caller(
    gate: &Gate,
    stop: &AtomicBool,
    socket: &std::path::Path,
    instance: u32,
) -> Vec<(u64, u64, bool)> {
    let mut calls = Vec::new();
    let Ok(stream) = UnixStream::connect(socket) else {
        return calls;
    };
    let Ok(mut writer) = stream.try_clone() else {
        return calls;
    };
    let mut reader = BufReader::new(stream);
    let mut answer = String::new();
    let wait = Duration::from_millis(50);
    while !stop.load(Ordering::Relaxed) {
        let mut call = || -> Option<(u64, u64, bool)> {
            let start = MonotonicClock.now_ns();
            writer
                .write_all(format!("call f {instance} {start} {start}\n").as_bytes())
                .ok()?;
            answer.clear();
            reader.read_line(&mut answer).ok()?;
            Some((start, MonotonicClock.now_ns(), answer.trim() == "ok"))
        };
        let done = match gate {
            Gate::Adaptive(l) => match l.acquire_timeout(wait) {
                Ok(Some(permit)) => {
                    let done = call();
                    match done {
                        Some((s, e, true)) => {
                            permit.release_measured(Outcome::Ok, Duration::from_nanos(e - s))
                        }
                        Some((_, _, false)) => permit.release(Outcome::Error),
                        None => permit.release(Outcome::Dropped),
                    };
                    done
                }
                _ => continue,
            },
            Gate::Fixed(l) => match l.acquire_permit_timeout(wait) {
                Ok(Some(_permit)) => call(),
                _ => continue,
            },
        };
        match done {
            Some(c) => calls.push(c),
            None => break,
        }
    }
    calls
}
