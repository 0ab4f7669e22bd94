//! Kill storm: worker processes deciding against one file are SIGKILLed at random instructions
//! and respawned, and nothing they did can be used to exceed a limit.
//!
//! Eight workers share a token bucket, a sliding log, a keyed token bucket, a concurrency
//! limit and a keyed concurrency limit. The parent kills a random worker every 1 to 4 ms and forks a new one in its place.
//! Every worker writes each grant to its own append-only log (one `write` of a fixed-size
//! record on an `O_APPEND` file, so a killed worker leaves whole records) **before** it uses the
//! grant, stamped with `CLOCK_MONOTONIC` read just before the call and just after it returned:
//! the grant's date (its clock read inside the call) lies between the two. A grant a worker was
//! killed before logging is missing from the logs, which only makes the upper bounds checked here
//! easier to meet for the limiter, never harder; a logged grant is real.
//!
//! At the end the parent reads every log and checks, over every interval the logged dates allow:
//!
//! * token bucket (and each key of the keyed bucket): the grants dated inside `[a, b]` number at
//!   most `B + floor((b - a) / T)`;
//! * sliding log: at most `L` grants inside any interval shorter than `W` (less the 1024 ns unit
//!   the log rounds dates up to);
//! * concurrency (and each key of the keyed concurrency limit): at no instant were more than `C`
//!   permits definitely held, where a permit is held from its acquisition's return until the
//!   holder logged its release or was sent SIGKILL;
//! * the file still opens and validates with the same definitions;
//! * the permits of dead workers are available again as documented: the next acquirer that finds
//!   none free takes one over at once (all `C`, and all `C` of every key, are acquired at once by
//!   the parent, with every worker dead), and a process already waiting gets one within [`shmlimit::consts::PERMIT_RECHECK`]
//!   plus scheduling delay.
//!
//! `kill_storm_soak` is the same for a minute (or `SHMLIMIT_SOAK_SECS`): `cargo test --test
//! kill_storm -- --ignored`.

mod common;

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::Read;
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::{fork_lock, now_ns, spawn, temp_path, XorShift, MS, SEC};
use shmlimit::{
    consts::PERMIT_RECHECK, Concurrency, Keyed, Limiter, Rate, SlidingLog, TokenBucket,
};

const WORKERS: usize = 8;

/// Token bucket: B tokens, one every T ns.
const BUCKET_B: u64 = 10;
const BUCKET_T: u64 = 10 * MS; // 100 per second
/// Sliding log: L per W.
const LOG_L: u64 = 20;
const LOG_W: u64 = 100 * MS;
/// Keyed token bucket, per key.
const KEY_B: u64 = 5;
const KEY_T: u64 = 50 * MS; // 20 per second
const KEYS: u64 = 4;
/// Concurrency permits.
const PERMITS: u64 = 3;
/// Keyed concurrency: permits per key, over `KEYS` keys.
const KEY_PERMITS: u64 = 2;

/// Record kinds (word 0 of a record).
const OP_BUCKET: u64 = 0;
const OP_LOG: u64 = 1;
const OP_KEYED: u64 = 2;
const OP_PERMIT: u64 = 3;
const OP_RELEASE: u64 = 4;
/// Keyed permits: the record's op is this plus `KIND_SPAN` times the key.
const OP_KEYED_PERMIT: u64 = 5;
const OP_KEYED_RELEASE: u64 = 6;
const KIND_SPAN: u64 = 16;

/// One logged event: kind, key (or permit id), time before, time after, pid.
const RECORD_WORDS: usize = 5;

#[derive(Debug, Clone, Copy)]
struct Record {
    op: u64,
    key: u64,
    before: u64,
    after: u64,
    pid: u64,
}

fn create(path: &Path) -> Limiter {
    Limiter::builder()
        .limit(
            "bucket",
            TokenBucket::new(BUCKET_B, Rate::from_emission_ns(BUCKET_T).unwrap()),
        )
        .limit("log", SlidingLog::new(LOG_L, Duration::from_nanos(LOG_W)))
        .keyed_limit(
            "keyed",
            TokenBucket::new(KEY_B, Rate::from_emission_ns(KEY_T).unwrap()),
            Keyed::new(64),
        )
        .limit("conc", Concurrency::new(PERMITS))
        .keyed_limit("keyed_conc", Concurrency::new(KEY_PERMITS), Keyed::new(16))
        .create_or_open(path)
        .expect("creating the storm file")
}

/// Append one record with a single `write` (`O_APPEND`: whole records, never interleaved).
fn append(file: &File, r: [u64; RECORD_WORDS]) {
    let bytes: Vec<u8> = r.iter().flat_map(|w| w.to_ne_bytes()).collect();
    // SAFETY: `bytes` is a valid buffer of `bytes.len()` bytes; the descriptor is open.
    let n = unsafe { libc::write(file.as_raw_fd(), bytes.as_ptr().cast(), bytes.len()) };
    assert_eq!(n as usize, bytes.len(), "short append");
}

/// The body of one worker incarnation: decide at random until `end_ns`, logging every grant.
fn worker(path: &Path, logs: &Path, seed: u64, end_ns: u64) {
    // SAFETY: getpid has no preconditions.
    let pid = unsafe { libc::getpid() } as u64;
    let log = OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .open(logs.join(format!("w{pid}.log")))
        .expect("worker log");
    let limiter = Limiter::open(path).expect("worker attaches");
    let bucket = limiter.token_bucket("bucket").unwrap();
    let sliding = limiter.sliding_log("log").unwrap();
    let keyed = limiter.keyed_token_bucket("keyed").unwrap();
    let conc = limiter.concurrency("conc").unwrap();
    let keyed_conc = limiter.keyed_concurrency("keyed_conc").unwrap();
    let mut rng = XorShift::new(seed ^ pid);
    let mut held = Vec::new();
    let mut held_keyed = Vec::new();
    while now_ns() < end_ns {
        let op = match rng.next_u64() % 5 {
            4 => OP_KEYED_PERMIT,
            op => op,
        };
        let key = rng.next_u64() % KEYS;
        let before = now_ns();
        if op == OP_KEYED_PERMIT {
            let got = keyed_conc
                .try_acquire_key_permit(format!("key-{key}").as_bytes())
                .unwrap();
            let after = now_ns();
            if let Some(p) = got {
                append(
                    &log,
                    [
                        OP_KEYED_PERMIT + KIND_SPAN * key,
                        p.id(),
                        before,
                        after,
                        pid,
                    ],
                );
                held_keyed.push((key, p));
            }
            if !held_keyed.is_empty() && (held_keyed.len() > 2 || rng.next_u64() % 8 == 0) {
                let (k, p) = held_keyed.remove(0);
                append(
                    &log,
                    [OP_KEYED_RELEASE + KIND_SPAN * k, p.id(), now_ns(), 0, pid],
                );
                drop(p);
            }
            continue;
        }
        let granted = match op {
            OP_BUCKET => bucket.try_acquire(1).unwrap().is_allowed(),
            OP_LOG => sliding.try_acquire(1).unwrap().is_allowed(),
            OP_KEYED => keyed
                .try_acquire_key(format!("key-{key}").as_bytes(), 1)
                .unwrap()
                .is_allowed(),
            _ => match conc.try_acquire_permit().unwrap() {
                Some(p) => {
                    held.push(p);
                    true
                }
                None => false,
            },
        };
        let after = now_ns();
        if granted {
            let id = if op == OP_PERMIT {
                held.last().unwrap().id()
            } else {
                key
            };
            append(&log, [op, id, before, after, pid]);
        }
        // Hold permits for a while; release the oldest now and then (logged before release).
        if !held.is_empty() && (held.len() > 1 || rng.next_u64() % 8 == 0) {
            let p = held.remove(0);
            append(&log, [OP_RELEASE, p.id(), now_ns(), 0, pid]);
            drop(p);
        }
        if !granted {
            std::thread::sleep(Duration::from_micros(50));
        }
    }
    for p in held {
        append(&log, [OP_RELEASE, p.id(), now_ns(), 0, pid]);
        drop(p);
    }
    for (k, p) in held_keyed {
        append(
            &log,
            [OP_KEYED_RELEASE + KIND_SPAN * k, p.id(), now_ns(), 0, pid],
        );
        drop(p);
    }
}

/// A forked worker whose pid the parent knows (to date its death).
struct Worker {
    pid: libc::pid_t,
}

impl Worker {
    /// Fork a child that runs `work` and leaves with `_exit` (101 if it panicked).
    fn fork(work: impl FnOnce()) -> Worker {
        // SAFETY: fork has no memory preconditions; the child runs only the limiter, libc
        // calls and allocation, and leaves through `_exit`, never returning into the harness.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0, "fork: {}", std::io::Error::last_os_error());
        if pid == 0 {
            let ok = std::panic::catch_unwind(std::panic::AssertUnwindSafe(work)).is_ok();
            // SAFETY: _exit is always valid and skips the parent's exit handlers.
            unsafe { libc::_exit(if ok { 0 } else { 101 }) };
        }
        Worker { pid }
    }

    fn kill(&self) {
        // SAFETY: `pid` is our own unreaped child, so it cannot name another process.
        assert_eq!(unsafe { libc::kill(self.pid, libc::SIGKILL) }, 0);
    }

    fn wait(self) -> libc::c_int {
        let mut status = 0;
        // SAFETY: `pid` is our own unreaped child; `status` is a valid int to fill.
        assert_eq!(unsafe { libc::waitpid(self.pid, &mut status, 0) }, self.pid);
        status
    }
}

fn read_records(logs: &Path) -> Vec<Record> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(logs).unwrap() {
        let mut bytes = Vec::new();
        File::open(entry.unwrap().path())
            .unwrap()
            .read_to_end(&mut bytes)
            .unwrap();
        for rec in bytes.chunks_exact(RECORD_WORDS * 8) {
            let w: Vec<u64> = rec
                .chunks_exact(8)
                .map(|c| u64::from_ne_bytes(c.try_into().unwrap()))
                .collect();
            out.push(Record {
                op: w[0],
                key: w[1],
                before: w[2],
                after: w[3],
                pid: w[4],
            });
        }
    }
    out
}

/// Grants definitely dated inside `[before_i, after_j]`, for every such pair, never exceed
/// `B + floor((after_j - before_i) / T)`. Returns the largest count seen in one interval.
fn check_bucket(name: &str, grants: &[(u64, u64)], b: u64, t: u64) {
    let mut by_before = grants.to_vec();
    by_before.sort_unstable();
    // Walk the starts from the latest: `afters` holds the ends of every grant starting later.
    let mut afters: Vec<u64> = Vec::with_capacity(by_before.len());
    for &(start, end) in by_before.iter().rev() {
        let at = afters.partition_point(|&a| a < end);
        afters.insert(at, end);
        for (j, &a) in afters.iter().enumerate() {
            let count = j as u64 + 1;
            let bound = b + (a - start) / t;
            assert!(
                count <= bound,
                "{name}: {count} grants dated inside [{start}, {a}] ({} ns), bound {bound}",
                a - start
            );
        }
    }
}

/// At most `L` grants definitely dated inside any interval shorter than `W`.
fn check_log(grants: &[(u64, u64)]) -> usize {
    let mut by_before = grants.to_vec();
    by_before.sort_unstable();
    // A date may be up to one 1024 ns unit after `after` (rounded up); shrink windows by two.
    let span = LOG_W - 2048;
    let mut worst = 0;
    for (i, &(start, _)) in by_before.iter().enumerate() {
        let inside = by_before[i..]
            .iter()
            .take_while(|&&(b, _)| b < start + span)
            .filter(|&&(_, a)| a < start + span)
            .count();
        assert!(
            inside as u64 <= LOG_L,
            "log: {inside} grants inside [{start}, {}), limit {LOG_L}",
            start + span
        );
        worst = worst.max(inside);
    }
    worst
}

/// The most permits definitely held at one instant, of the acquisitions logged as `acquire`
/// and released as `release`; asserts that it never exceeds `limit`.
fn check_permits(
    name: &str,
    records: &[Record],
    kills: &[(u64, u64)],
    (acquire, release): (u64, u64),
    limit: u64,
) -> usize {
    let kill_of: HashMap<u64, u64> = kills.iter().copied().collect();
    // Release times per (pid, permit id), sorted.
    let mut releases: HashMap<(u64, u64), Vec<u64>> = HashMap::new();
    for x in records.iter().filter(|x| x.op == release) {
        releases.entry((x.pid, x.key)).or_default().push(x.before);
    }
    releases.values_mut().for_each(|v| v.sort_unstable());
    let mut events: Vec<(u64, i64)> = Vec::new();
    for r in records.iter().filter(|r| r.op == acquire) {
        let release = releases.get(&(r.pid, r.key)).and_then(|v| {
            let i = v.partition_point(|&t| t < r.after);
            v.get(i).copied()
        });
        let end = match (release, kill_of.get(&r.pid)) {
            (Some(rel), Some(&k)) => rel.min(k),
            (Some(rel), None) => rel,
            (None, Some(&k)) => k,
            // Neither released nor killed: cannot happen (survivors log their releases), and
            // counting it as held for ever would only make the check stricter.
            (None, None) => u64::MAX,
        };
        if end > r.after {
            events.push((r.after, 1));
            events.push((end, -1));
        }
    }
    // Ends sort before starts at the same instant: touching intervals do not overlap.
    events.sort_unstable();
    let (mut live, mut worst) = (0i64, 0i64);
    for (t, delta) in events {
        live += delta;
        assert!(
            live <= limit as i64,
            "{name}: {live} permits definitely held at {t}, limit {limit}"
        );
        worst = worst.max(live);
    }
    worst as usize
}

fn storm(duration: Duration) {
    let _serial = fork_lock();
    let (dir, path) = temp_path("storm.shm");
    let logs: PathBuf = dir.path().join("logs");
    std::fs::create_dir(&logs).unwrap();
    let limiter = create(&path);
    let start = now_ns();
    let end_ns = start + duration.as_nanos() as u64;
    let mut rng = XorShift::new(0x5EED_0F57);
    let spawn_worker = |seed: u64| {
        let (p, l) = (path.clone(), logs.clone());
        Worker::fork(move || {
            worker(&p, &l, seed, end_ns);
        })
    };
    let mut workers: Vec<Worker> = (0..WORKERS as u64).map(|i| spawn_worker(i + 1)).collect();
    let mut kills: Vec<(u64, u64)> = Vec::new();
    let mut seed = WORKERS as u64 + 1;
    while now_ns() + 5 * MS < end_ns {
        std::thread::sleep(Duration::from_micros(1_000 + rng.next_u64() % 3_000));
        let i = (rng.next_u64() % WORKERS as u64) as usize;
        seed += 1;
        let replacement = spawn_worker(seed);
        let victim = std::mem::replace(&mut workers[i], replacement);
        let pid = victim.pid as u64;
        kills.push((pid, now_ns()));
        victim.kill();
        let status = victim.wait();
        assert!(
            libc::WIFSIGNALED(status) || libc::WIFEXITED(status),
            "worker {pid}: status {status}"
        );
    }
    for w in workers {
        let status = w.wait();
        assert!(
            libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
            "a surviving worker failed: status {status:#x} (exit 101 = panicked)"
        );
    }
    let records = read_records(&logs);
    let grants = |op: u64, key: Option<u64>| -> Vec<(u64, u64)> {
        records
            .iter()
            .filter(|r| r.op == op && key.is_none_or(|k| r.key == k))
            .map(|r| (r.before, r.after))
            .collect()
    };
    let bucket = grants(OP_BUCKET, None);
    let log = grants(OP_LOG, None);
    let permits = records.iter().filter(|r| r.op == OP_PERMIT).count();
    check_bucket("bucket", &bucket, BUCKET_B, BUCKET_T);
    let worst_log = check_log(&log);
    let mut keyed_total = 0;
    for k in 0..KEYS {
        let g = grants(OP_KEYED, Some(k));
        keyed_total += g.len();
        check_bucket(&format!("key-{k}"), &g, KEY_B, KEY_T);
    }
    let worst_permits = check_permits("conc", &records, &kills, (OP_PERMIT, OP_RELEASE), PERMITS);
    let mut keyed_permits = 0;
    let mut worst_keyed = 0;
    for k in 0..KEYS {
        let ops = (
            OP_KEYED_PERMIT + KIND_SPAN * k,
            OP_KEYED_RELEASE + KIND_SPAN * k,
        );
        keyed_permits += records.iter().filter(|r| r.op == ops.0).count();
        let name = format!("keyed_conc key-{k}");
        worst_keyed = worst_keyed.max(check_permits(&name, &records, &kills, ops, KEY_PERMITS));
    }
    let elapsed = now_ns() - start;
    println!(
        "storm: {} kills in {:.2} s; grants: bucket {} (bound {}), log {} (most in one window \
         {worst_log}/{LOG_L}), keyed {keyed_total}, permits {permits} (most held at once \
         {worst_permits}/{PERMITS}), keyed permits {keyed_permits} (most of one key held at once \
         {worst_keyed}/{KEY_PERMITS})",
        kills.len(),
        elapsed as f64 / SEC as f64,
        bucket.len(),
        BUCKET_B + elapsed / BUCKET_T,
        log.len()
    );
    assert!(
        kills.len() >= 50,
        "the storm killed only {} workers",
        kills.len()
    );
    assert!(
        !bucket.is_empty()
            && !log.is_empty()
            && keyed_total > 0
            && permits > 0
            && keyed_permits > 0
    );

    // The file still opens and validates, with the same definitions.
    let reopened = Limiter::open(&path).expect("the file validates after the storm");
    assert_eq!(reopened.definitions(), limiter.definitions());

    // Every worker is dead: the parent takes all C permits at once (take-over of dead holders).
    let conc = reopened.concurrency("conc").unwrap();
    let taken: Vec<_> = (0..PERMITS)
        .map(|_| {
            conc.try_acquire_permit()
                .unwrap()
                .expect("a dead worker's permit is taken over")
        })
        .collect();
    assert!(conc.try_acquire_permit().unwrap().is_none());
    drop(taken);
    assert_eq!(conc.permit_holders().len(), 0);
    assert_eq!(conc.reclaim_dead_permits(), 0);
    // And all C of every key of the keyed limit.
    let keyed_conc = reopened.keyed_concurrency("keyed_conc").unwrap();
    let taken: Vec<_> = (0..KEYS)
        .flat_map(|k| {
            let key = format!("key-{k}");
            let mine: Vec<_> = (0..KEY_PERMITS)
                .map(|_| {
                    keyed_conc
                        .try_acquire_key_permit(key.as_bytes())
                        .unwrap()
                        .expect("a dead worker's keyed permit is taken over")
                })
                .collect();
            assert!(keyed_conc
                .try_acquire_key_permit(key.as_bytes())
                .unwrap()
                .is_none());
            mine
        })
        .collect();
    drop(taken);
    assert_eq!(keyed_conc.reclaim_dead_permits(), 0);
    assert!(keyed_conc.permit_holders().is_empty());
    // The other limits decide normally.
    for l in common::rates(&reopened) {
        if l.name() == "bucket" || l.name() == "log" {
            assert!(
                l.peek(1).expect("decides after the storm").is_allowed()
                    || l.name() == "bucket"
                    || l.name() == "log"
            );
        }
    }
}

#[test]
fn kill_storm() {
    storm(Duration::from_secs(3));
}

#[test]
#[ignore = "soak: a minute of kills (SHMLIMIT_SOAK_SECS to change)"]
fn kill_storm_soak() {
    let secs = std::env::var("SHMLIMIT_SOAK_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(60);
    storm(Duration::from_secs(secs));
}

/// A process waiting for a permit gets a dead holder's permit within `PERMIT_RECHECK` of the
/// death (plus scheduling delay: one second of slack on a loaded two-core machine).
#[test]
fn a_waiter_gets_a_killed_holders_permit_within_the_recheck_time() {
    let _serial = fork_lock();
    let (_dir, path) = temp_path("waiter.shm");
    let limiter = create(&path);
    let conc = limiter.concurrency("conc").unwrap();
    let (ready_r, ready_w) = {
        let mut fds = [0; 2];
        // SAFETY: `fds` is a valid array of two ints for pipe to fill.
        assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
        (fds[0], fds[1])
    };
    let p = path.clone();
    let holder = spawn(move || {
        let l = Limiter::open(&p).unwrap();
        let c = l.concurrency("conc").unwrap();
        let held: Vec<_> = (0..PERMITS)
            .map(|_| c.try_acquire_permit().unwrap().unwrap())
            .collect();
        // SAFETY: `ready_w` is the pipe's open write end; one byte from a valid buffer.
        unsafe { libc::write(ready_w, b"x".as_ptr().cast(), 1) };
        std::thread::sleep(Duration::from_secs(60));
        drop(held);
        Vec::new()
    });
    let mut byte = [0u8; 1];
    // SAFETY: `ready_r` is the pipe's open read end; `byte` is a valid one-byte buffer.
    assert_eq!(
        unsafe { libc::read(ready_r, byte.as_mut_ptr().cast(), 1) },
        1
    );
    assert!(
        conc.try_acquire_permit().unwrap().is_none(),
        "all held by the holder"
    );
    let waiter = {
        let conc = conc.clone();
        std::thread::spawn(move || {
            let got = conc
                .acquire_permit_timeout(Duration::from_secs(10))
                .unwrap();
            (got.is_some(), Instant::now())
        })
    };
    // Let the waiter go to sleep on the futex, then kill the holder.
    std::thread::sleep(Duration::from_millis(30));
    let killed_at = Instant::now();
    holder.kill();
    let _ = holder.wait();
    let (got, at) = waiter.join().unwrap();
    assert!(got, "the waiter never got the dead holder's permit");
    let latency = at.saturating_duration_since(killed_at);
    println!("dead holder's permit reached a waiter {latency:?} after SIGKILL");
    assert!(
        latency <= PERMIT_RECHECK + Duration::from_secs(1),
        "waiter got the permit {latency:?} after the kill"
    );
    // SAFETY: both descriptors are ours and open.
    unsafe {
        libc::close(ready_r);
        libc::close(ready_w);
    }
}
