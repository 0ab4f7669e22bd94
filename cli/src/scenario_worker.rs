//! `demo-worker`: one service instance of `demo --scenario dependency`, as its own process.
//!
//! Its generator makes incoming requests (Poisson arrivals; each from a client, one client much
//! busier than the others; each with a number of items, a few of them oversized). Each request
//! goes through a chain that bounds the work each request creates, before any of it is sent:
//!
//! 1. validate: more than `--max-items` items is rejected (by contract, nothing is sent);
//! 2. the per-client keyed limit (`clients`, shared by every instance on the host);
//! 3. a reservation on `intake` for its items, waiting at most `--queue-ms`: a request whose
//!    first attempts cannot all start within that is rejected at once instead of queueing;
//! 4. one call per item (fan-out). Immediately before every outbound attempt, first or retry:
//!    a permit of `inflight` (calls in flight, across every process), then one all-or-nothing
//!    check of the attempt's class (`first` or `retry`) and `total`. A denied check returns the
//!    permit and puts the attempt back in the queue for its retry-after; a failed call is retried
//!    with exponential backoff and full jitter, up to `MAX_ATTEMPTS` attempts; an attempt still
//!    unsent `--deadline-ms` after its request arrived is dropped.
//!
//! Without `--file` (the budget off) steps 2 to 4's checks are skipped: every attempt is sent
//! as soon as a sender is free. It runs until standard input closes, then prints one line of
//! counters (`counters name=value ...`) and exits.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use clap::Args;
use shmlimit::{
    try_acquire_all, Check, Clock, ConcurrencyLimit, KeyedTokenBucketLimit, Limiter,
    MonotonicClock, TokenBucketLimit,
};

use crate::Failure;

/// Attempts per item: the first and up to three retries.
pub const MAX_ATTEMPTS: u32 = 4;
/// Clients sending requests; client 0 sends a quarter of them.
pub const CLIENTS: u64 = 40;

#[derive(Args, Debug, Clone)]
#[command(about = "One service instance of `demo --scenario dependency` (started by it)")]
pub struct WorkerArgs {
    /// The scenario's limiter file; without it the instance sends with no limiter
    #[arg(long)]
    pub file: Option<PathBuf>,
    /// The dependency's Unix socket
    #[arg(long)]
    pub socket: PathBuf,
    /// This instance's number (sent with every call)
    #[arg(long)]
    pub instance: u32,
    /// Incoming requests per second (Poisson)
    #[arg(long, default_value_t = 3.0)]
    pub requests_per_second: f64,
    /// Items per request above which a request is rejected as oversized
    #[arg(long, default_value_t = 16)]
    pub max_items: u64,
    /// How long a request's first attempts may queue before they start (the reservation)
    #[arg(long, default_value_t = 1000)]
    pub queue_ms: u64,
    /// Attempts still unsent this long after their request arrived are dropped
    #[arg(long, default_value_t = 2000)]
    pub deadline_ms: u64,
    /// Threads sending calls (each with its own connection)
    #[arg(long, default_value_t = 4)]
    pub senders: u32,
}

/// The counters a worker prints at the end, in this order.
const COUNTERS: [&str; 14] = [
    "requests",
    "oversized",
    "client_limited",
    "deadline_rejected",
    "deadline_rejected_items",
    "items",
    "sent_first",
    "sent_retry",
    "ok",
    "failed",
    "busy",
    "gave_up",
    "late",
    "abandoned",
];

#[derive(Default)]
struct Counters([AtomicU64; COUNTERS.len()]);

impl Counters {
    fn add(&self, name: &str, n: u64) {
        if let Some(i) = COUNTERS.iter().position(|c| *c == name) {
            self.0[i].fetch_add(n, Ordering::Relaxed);
        }
    }
    fn line(&self) -> String {
        let mut out = String::from("counters");
        for (name, v) in COUNTERS.iter().zip(&self.0) {
            out.push_str(&format!(" {name}={}", v.load(Ordering::Relaxed)));
        }
        out
    }
}

/// One attempt waiting to be sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct Attempt {
    /// When it may be sent.
    ready_ns: u64,
    /// Tie breaker, and its identity.
    seq: u64,
    /// Its request's deadline.
    deadline_ns: u64,
    /// 0 for the first attempt.
    attempt: u32,
}

struct Queue {
    heap: Mutex<BinaryHeap<Reverse<Attempt>>>,
    ready: Condvar,
    stop: AtomicBool,
}

impl Queue {
    fn push(&self, a: Attempt) {
        if let Ok(mut heap) = self.heap.lock() {
            heap.push(Reverse(a));
        }
        self.ready.notify_one();
    }

    /// The next attempt whose time has come; None once stopped.
    fn pop(&self) -> Option<Attempt> {
        let mut heap = self.heap.lock().ok()?;
        loop {
            if self.stop.load(Ordering::Relaxed) {
                return None;
            }
            let now = MonotonicClock.now_ns();
            let wait = match heap.peek() {
                Some(Reverse(a)) if a.ready_ns <= now => return heap.pop().map(|r| r.0),
                Some(Reverse(a)) => Duration::from_nanos(a.ready_ns - now),
                None => Duration::from_millis(50),
            };
            heap = self
                .ready
                .wait_timeout(heap, wait.min(Duration::from_millis(50)))
                .ok()?
                .0;
        }
    }
}

/// A small deterministic generator (xorshift64*), seeded per instance.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    /// Uniform in [0, 1).
    pub fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
    /// Uniform in [lo, hi].
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next() % (hi - lo + 1)
    }
}

/// The limits one instance checks (None: the budget is off).
struct Limits {
    clients: KeyedTokenBucketLimit,
    intake: TokenBucketLimit,
    inflight: ConcurrencyLimit,
    first: TokenBucketLimit,
    retry: TokenBucketLimit,
    total: TokenBucketLimit,
}

pub fn run(args: WorkerArgs) -> Result<(), Failure> {
    let limits = match &args.file {
        Some(path) => {
            let limiter = Limiter::open(path).map_err(|e| Failure::library(e, path))?;
            let failed = |e| Failure::library(e, path);
            let bucket = |name: &str| limiter.token_bucket(name).map_err(failed);
            Some(Arc::new(Limits {
                clients: limiter.keyed_token_bucket("clients").map_err(failed)?,
                intake: bucket("intake")?,
                inflight: limiter.concurrency("inflight").map_err(failed)?,
                first: bucket("first")?,
                retry: bucket("retry")?,
                total: bucket("total")?,
            }))
        }
        None => None,
    };
    let counters = Arc::new(Counters::default());
    let queue = Arc::new(Queue {
        heap: Mutex::new(BinaryHeap::new()),
        ready: Condvar::new(),
        stop: AtomicBool::new(false),
    });
    let mut senders = Vec::new();
    for s in 0..args.senders.max(1) {
        let stream = UnixStream::connect(&args.socket).map_err(|e| {
            Failure::file(format!(
                "{}: cannot connect to the dependency: {e}",
                args.socket.display()
            ))
        })?;
        let (queue, counters, limits) = (Arc::clone(&queue), Arc::clone(&counters), limits.clone());
        let instance = args.instance;
        let seed = u64::from(args.instance) << 8 | u64::from(s);
        senders.push(std::thread::spawn(move || {
            send_loop(
                stream,
                &queue,
                &counters,
                limits.as_deref(),
                instance,
                Rng::new(seed ^ 0xABCD),
            )
        }));
    }

    // Standard input closing (the runner removing this instance) stops the generator.
    let stop = Arc::new(AtomicBool::new(false));
    {
        let stop = Arc::clone(&stop);
        std::thread::spawn(move || {
            let mut sink = Vec::new();
            let _ = std::io::stdin().lock().read_to_end(&mut sink);
            stop.store(true, Ordering::Relaxed);
        });
    }
    println!("ready {}", std::process::id());
    let _ = std::io::stdout().flush();

    let mut rng = Rng::new(u64::from(args.instance) + 1);
    let mut seq = 0u64;
    let rate = args.requests_per_second.max(0.001);
    let gap = |rng: &mut Rng| (-(1.0 - rng.unit()).ln() / rate * 1e9) as u64;
    let mut next = MonotonicClock.now_ns() + gap(&mut rng);
    while !stop.load(Ordering::Relaxed) {
        // Exponential gaps: a Poisson stream of requests.
        let now = MonotonicClock.now_ns();
        if now < next {
            std::thread::sleep(Duration::from_nanos((next - now).min(100_000_000)));
            continue;
        }
        next += gap(&mut rng);
        // One busy client sends a quarter of all requests.
        let client = if rng.next() % 4 == 0 {
            0
        } else {
            rng.range(1, CLIENTS - 1)
        };
        // One request in twenty is oversized.
        let items = if rng.next() % 20 == 0 {
            rng.range(40, 200)
        } else {
            rng.range(1, 13)
        };
        counters.add("requests", 1);
        let arrived = MonotonicClock.now_ns();
        if items > args.max_items {
            counters.add("oversized", 1);
            continue;
        }
        let mut ready_ns = arrived;
        if let Some(l) = &limits {
            let key = format!("client-{client}");
            if l.clients
                .try_acquire_key(key.as_bytes(), 1)
                .map_err(|e| Failure::file(format!("clients: {e}")))?
                .is_denied()
            {
                counters.add("client_limited", 1);
                continue;
            }
            let booking = l
                .intake
                .reserve(items, Duration::from_millis(args.queue_ms))
                .map_err(|e| Failure::file(format!("intake: {e}")))?;
            if booking.is_refused() {
                counters.add("deadline_rejected", 1);
                counters.add("deadline_rejected_items", items);
                continue;
            }
            ready_ns = booking.ready_at_ns();
        }
        counters.add("items", items);
        let deadline_ns = arrived + args.deadline_ms * 1_000_000;
        for _ in 0..items {
            seq += 1;
            queue.push(Attempt {
                ready_ns,
                seq: (u64::from(args.instance) << 40) | seq,
                deadline_ns,
                attempt: 0,
            });
        }
    }

    queue.stop.store(true, Ordering::Relaxed);
    queue.ready.notify_all();
    for s in senders {
        if let Ok(Err(e)) = s.join() {
            eprintln!("demo-worker {}: {e}", args.instance);
        }
    }
    let left = queue.heap.lock().map(|h| h.len()).unwrap_or(0);
    counters.add("abandoned", left as u64);
    println!(
        "{} rss_kib={}",
        counters.line(),
        rss_kib(std::process::id()).unwrap_or(0)
    );
    Ok(())
}

/// Resident set size of a process, from `/proc/<pid>/status`.
pub fn rss_kib(pid: u32) -> Option<u64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    text.lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
}

fn send_loop(
    stream: UnixStream,
    queue: &Queue,
    counters: &Counters,
    limits: Option<&Limits>,
    instance: u32,
    mut rng: Rng,
) -> Result<(), String> {
    let mut writer = stream.try_clone().map_err(|e| e.to_string())?;
    let mut reader = BufReader::new(stream);
    let mut answer = String::new();
    while let Some(mut a) = queue.pop() {
        let now = MonotonicClock.now_ns();
        if now >= a.deadline_ns {
            counters.add("late", 1);
            continue;
        }
        let retry = a.attempt > 0;
        let (mut t0, mut t1) = (0, 0);
        // Held until the answer is read.
        let mut _permit = None;
        if let Some(l) = limits {
            let permit = l
                .inflight
                .acquire_permit_timeout(Duration::from_nanos(a.deadline_ns - now))
                .map_err(|e| format!("inflight: {e}"))?;
            let Some(permit) = permit else {
                counters.add("late", 1);
                continue;
            };
            let class = if retry { &l.retry } else { &l.first };
            let checks = [Check::new(class, 1), Check::new(&l.total, 1)];
            t0 = MonotonicClock.now_ns();
            let decision = try_acquire_all(&checks).map_err(|e| format!("budget: {e}"))?;
            t1 = MonotonicClock.now_ns();
            if decision.is_denied() {
                drop(permit);
                a.ready_ns = t1 + decision.retry_after_ns().max(1_000_000);
                if a.ready_ns >= a.deadline_ns {
                    counters.add("late", 1);
                } else {
                    queue.push(a);
                }
                continue;
            }
            _permit = Some(permit);
        }
        counters.add(if retry { "sent_retry" } else { "sent_first" }, 1);
        let line = format!(
            "call {} {instance} {t0} {t1}\n",
            if retry { 'r' } else { 'f' }
        );
        writer
            .write_all(line.as_bytes())
            .map_err(|e| format!("dependency: {e}"))?;
        answer.clear();
        match reader.read_line(&mut answer) {
            Ok(0) => return Err("dependency: closed the connection".to_owned()),
            Ok(_) => {}
            Err(e) => return Err(format!("dependency: {e}")),
        }
        drop(_permit);
        match answer.trim() {
            "ok" => {
                counters.add("ok", 1);
                continue;
            }
            "busy" => counters.add("busy", 1),
            _ => counters.add("failed", 1),
        }
        a.attempt += 1;
        if a.attempt >= MAX_ATTEMPTS {
            counters.add("gave_up", 1);
            continue;
        }
        // Exponential backoff with full jitter: up to 50 ms, 100 ms, 200 ms.
        let cap = 50_000_000u64 << (a.attempt - 1);
        a.ready_ns = MonotonicClock.now_ns() + rng.range(cap / 10, cap);
        if a.ready_ns >= a.deadline_ns {
            counters.add("gave_up", 1);
        } else {
            queue.push(a);
        }
    }
    Ok(())
}

/// Parse a worker's final line into (name, value) pairs.
pub fn parse_counters(line: &str) -> Option<Vec<(String, u64)>> {
    let rest = line.trim().strip_prefix("counters")?;
    rest.split_whitespace()
        .map(|kv| {
            let (k, v) = kv.split_once('=')?;
            Some((k.to_owned(), v.parse().ok()?))
        })
        .collect()
}
