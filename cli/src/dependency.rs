//! `demo-dependency`: a stand-in for a shared downstream dependency, run as its own process.
//!
//! It listens on a Unix socket; each connection sends one call at a time as one text line,
//! `call <kind> <instance> <t0> <t1>` (`kind` is `f` for a first attempt and `r` for a retry; `t0`
//! and `t1` are the caller's `CLOCK_MONOTONIC` readings just before and after the limiter
//! admitted the call, 0 when it sent without a limiter), and waits for the answer line: `ok`,
//! `fail` (a configurable fraction of calls, so that callers retry) or `busy` (the dependency is
//! past its own capacity: more than `--capacity` accepted calls in the trailing second).
//!
//! Every arrival is recorded with its monotonic time, the caller's admission readings and the
//! number of calls in flight at that moment (this one included). A call stops being in flight
//! just before its answer is written, or when its caller hangs up (a killed caller's call is
//! abandoned, as a server cancels the work of a client that went away): each arrival counts the
//! calls in flight whose callers' sockets are still open at that instant, so a killed caller's
//! call stops counting when the kernel closed its socket, before its permit can be reclaimed.
//!
//! With `--knee K`, it serves at most `K` calls at once: a call past them waits its turn, so its
//! latency is flat up to `K` in flight and grows with the queue past it (`in flight / K` times
//! the service time): a dependency with a concurrency knee.
//!
//! It runs until its standard input closes (or `--seconds`); standard input also takes
//! commands, one a line: `fail <percent>` changes the failure fraction, `knee <K>` the knee. At the end it writes the
//! arrivals to `--record` and prints arrivals per second and the most in any sliding 1 s window.

use std::collections::{HashMap, VecDeque};
use std::io::{BufRead, BufReader, Write};
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use clap::Args;
use shmlimit::{Clock, MonotonicClock};

use crate::Failure;

const SECOND_NS: u64 = 1_000_000_000;

#[derive(Args, Debug, Clone)]
#[command(
    about = "Run a stand-in shared dependency on a Unix socket and count every call that arrives",
    after_help = concat!(
        "The dependency of `shmlimit demo --scenario dependency`, usable alone:\n",
        "  shmlimit demo-dependency --socket /tmp/dep.sock --service-ms 40 --fail-percent 20\n\n",
        "Protocol: one line per call, `call <f|r> <instance> <t0> <t1>`, answered `ok`, `fail` or\n",
        "`busy`. It runs until standard input closes (Ctrl-D) or --seconds pass; a line\n",
        "`fail <percent>` on standard input changes the failure fraction while it runs. At the end\n",
        "it prints arrivals per second, the most in any sliding 1 s window and the most calls in\n",
        "flight, and writes every arrival to --record.\n\n",
        exit_codes!()
    )
)]
pub struct DependencyArgs {
    /// Listen on this Unix socket (created; removed at the end)
    #[arg(long)]
    pub socket: PathBuf,
    /// Time each call takes, in milliseconds (a slow dependency)
    #[arg(long, default_value_t = 40)]
    pub service_ms: u64,
    /// Percent of calls that fail, so that callers retry
    #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u32).range(0..=100))]
    pub fail_percent: u32,
    /// Calls accepted in any sliding 1 s; calls past it are refused at once with `busy`
    #[arg(long, default_value_t = 300)]
    pub capacity: u64,
    /// Write every arrival here at the end, one line each
    #[arg(long)]
    pub record: Option<PathBuf>,
    /// Stop after this many seconds instead of when standard input closes
    #[arg(long)]
    pub seconds: Option<f64>,
    /// Serve at most this many calls at once; the others wait their turn (0: no knee)
    #[arg(long, default_value_t = 0)]
    pub knee: u32,
}

/// What the dependency answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Ok,
    Fail,
    Busy,
}

impl Outcome {
    fn word(self) -> &'static str {
        match self {
            Outcome::Ok => "ok",
            Outcome::Fail => "fail",
            Outcome::Busy => "busy",
        }
    }
}

/// One call as it arrived.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Arrival {
    /// `CLOCK_MONOTONIC` ns when its line was read.
    pub at_ns: u64,
    /// A retry (not a first attempt).
    pub retry: bool,
    /// The caller's instance number.
    pub instance: u32,
    /// The caller's readings around the limiter's admission (0 without a limiter).
    pub t0_ns: u64,
    pub t1_ns: u64,
    /// Calls in flight at the dependency when it arrived, this one included.
    pub in_flight: u32,
    pub outcome: Outcome,
}

impl Arrival {
    /// The record line (see [`Arrival::parse`]).
    pub fn line(&self) -> String {
        format!(
            "{} {} {} {} {} {} {}\n",
            self.at_ns,
            if self.retry { 'r' } else { 'f' },
            self.instance,
            self.t0_ns,
            self.t1_ns,
            self.in_flight,
            self.outcome.word()
        )
    }

    /// Parse a record line: `at kind instance t0 t1 in_flight outcome`.
    pub fn parse(line: &str) -> Option<Arrival> {
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() != 7 {
            return None;
        }
        Some(Arrival {
            at_ns: f[0].parse().ok()?,
            retry: match f[1] {
                "f" => false,
                "r" => true,
                _ => return None,
            },
            instance: f[2].parse().ok()?,
            t0_ns: f[3].parse().ok()?,
            t1_ns: f[4].parse().ok()?,
            in_flight: f[5].parse().ok()?,
            outcome: match f[6] {
                "ok" => Outcome::Ok,
                "fail" => Outcome::Fail,
                "busy" => Outcome::Busy,
                _ => return None,
            },
        })
    }
}

/// Read a record file written by the dependency.
pub fn read_record(path: &Path) -> Result<Vec<Arrival>, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .map(|l| {
            Arrival::parse(l).ok_or_else(|| format!("{}: bad record line {l:?}", path.display()))
        })
        .collect()
}

/// The most arrivals (of those `pick` selects) in any window `(t - width, t]`: two pointers
/// over arrival times in order.
pub fn most_in_window(arrivals: &[Arrival], width_ns: u64, pick: impl Fn(&Arrival) -> bool) -> u64 {
    let times: Vec<u64> = arrivals
        .iter()
        .filter(|a| pick(a))
        .map(|a| a.at_ns)
        .collect();
    let mut most = 0;
    let mut lo = 0;
    for hi in 0..times.len() {
        while times[hi] - times[lo] >= width_ns {
            lo += 1;
        }
        most = most.max(hi - lo + 1);
    }
    most as u64
}

struct State {
    arrivals: Vec<Arrival>,
    /// Times of accepted (not busy) arrivals in the trailing second.
    recent: VecDeque<u64>,
    /// The calls in flight: connection number -> its socket. Entries are removed (under the
    /// lock) before their socket can close, so every descriptor here is open.
    in_flight: HashMap<u64, RawFd>,
}

impl State {
    /// Calls in flight whose callers are still connected. A caller sends nothing while it
    /// waits, so a readable socket is one whose caller hung up: a killed caller's call stops
    /// counting the moment its socket closed, even if the thread serving it has not run yet
    /// (its permit can only be reclaimed after that, once the process is dead).
    fn connected_in_flight(&self) -> usize {
        let mut fds: Vec<libc::pollfd> = self
            .in_flight
            .values()
            .map(|&fd| libc::pollfd {
                fd,
                events: libc::POLLIN | libc::POLLRDHUP,
                revents: 0,
            })
            .collect();
        if fds.is_empty() {
            return 0;
        }
        // SAFETY: `fds` is a valid array of `fds.len()` pollfds for the call; every descriptor
        // is open (see `in_flight`); a zero timeout returns at once.
        let rc = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, 0) };
        if rc < 0 {
            return fds.len();
        }
        fds.iter().filter(|p| p.revents == 0).count()
    }
}

struct Shared {
    state: Mutex<State>,
    fail_percent: AtomicU32,
    service: Duration,
    capacity: u64,
    servers: Servers,
}

/// The knee: calls being served and the most served at once (0: no knee).
struct Servers {
    busy: Mutex<(u32, u32)>,
    freed: Condvar,
}

impl Servers {
    /// Wait for a free server (none to wait for without a knee).
    fn enter(&self) {
        let Ok(mut b) = self.busy.lock() else { return };
        while b.1 > 0 && b.0 >= b.1 {
            b = match self.freed.wait(b) {
                Ok(b) => b,
                Err(_) => return,
            };
        }
        b.0 += 1;
    }

    fn leave(&self) {
        if let Ok(mut b) = self.busy.lock() {
            b.0 = b.0.saturating_sub(1);
        }
        self.freed.notify_one();
    }

    fn set_knee(&self, knee: u32) {
        if let Ok(mut b) = self.busy.lock() {
            b.1 = knee;
        }
        self.freed.notify_all();
    }
}

pub fn run(args: DependencyArgs) -> Result<(), Failure> {
    if let Some(s) = args.seconds {
        if !(s > 0.0 && s <= 3600.0) {
            return Err(Failure::config(format!(
                "--seconds: must be more than 0 and at most 3600 (got {s})"
            )));
        }
    }
    if args.capacity == 0 {
        return Err(Failure::config("--capacity: must be at least 1"));
    }
    let listener = UnixListener::bind(&args.socket).map_err(|e| {
        Failure::file(format!(
            "{}: cannot listen on this socket: {e}; remove a stale socket or choose another path",
            args.socket.display()
        ))
    })?;
    let shared = Arc::new(Shared {
        state: Mutex::new(State {
            arrivals: Vec::new(),
            recent: VecDeque::new(),
            in_flight: HashMap::new(),
        }),
        fail_percent: AtomicU32::new(args.fail_percent),
        service: Duration::from_millis(args.service_ms),
        capacity: args.capacity,
        servers: Servers {
            busy: Mutex::new((0, args.knee)),
            freed: Condvar::new(),
        },
    });
    {
        let shared = Arc::clone(&shared);
        std::thread::spawn(move || accept(listener, shared));
    }
    let started = MonotonicClock.now_ns();
    println!("listening {}", args.socket.display());
    let _ = std::io::stdout().flush();

    match args.seconds {
        Some(s) => std::thread::sleep(Duration::from_secs_f64(s)),
        None => {
            for line in std::io::stdin().lock().lines() {
                let Ok(line) = line else { break };
                let words: Vec<&str> = line.split_whitespace().collect();
                match words.as_slice() {
                    ["fail", pct] => match pct.parse::<u32>() {
                        Ok(p) if p <= 100 => shared.fail_percent.store(p, Ordering::Relaxed),
                        _ => eprintln!("demo-dependency: fail takes a percent 0..100, not {pct:?}"),
                    },
                    ["knee", k] => match k.parse::<u32>() {
                        Ok(k) => shared.servers.set_knee(k),
                        _ => eprintln!("demo-dependency: knee takes a count, not {k:?}"),
                    },
                    ["stop"] => break,
                    [] => {}
                    _ => eprintln!(
                        "demo-dependency: unknown command {line:?} (fail <percent>, knee <K>, stop)"
                    ),
                }
            }
        }
    }
    let ended = MonotonicClock.now_ns();
    let _ = std::fs::remove_file(&args.socket);
    let arrivals = shared
        .state
        .lock()
        .map(|s| s.arrivals.clone())
        .unwrap_or_default();
    if let Some(path) = &args.record {
        let mut text = String::from("# at_ns kind instance t0_ns t1_ns in_flight outcome\n");
        for a in &arrivals {
            text.push_str(&a.line());
        }
        std::fs::write(path, text).map_err(|e| {
            Failure::file(format!("{}: cannot write the record: {e}", path.display()))
        })?;
    }
    print!("{}", summary(&arrivals, started, ended));
    Ok(())
}

/// Arrivals per second, the most in any sliding second, the most in flight.
fn summary(arrivals: &[Arrival], started: u64, ended: u64) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    let secs = (ended.saturating_sub(started)) as f64 / 1e9;
    let count = |f: &dyn Fn(&Arrival) -> bool| arrivals.iter().filter(|a| f(a)).count();
    let _ = writeln!(
        out,
        "arrivals {} in {secs:.1} s ({:.0}/s): first attempts {}, retries {}; answered fail {}, busy {}",
        arrivals.len(),
        arrivals.len() as f64 / secs.max(1e-9),
        count(&|a| !a.retry),
        count(&|a| a.retry),
        count(&|a| a.outcome == Outcome::Fail),
        count(&|a| a.outcome == Outcome::Busy),
    );
    let _ = writeln!(
        out,
        "most in any sliding 1 s: {} (retries {}); most in flight: {}",
        most_in_window(arrivals, SECOND_NS, |_| true),
        most_in_window(arrivals, SECOND_NS, |a| a.retry),
        arrivals.iter().map(|a| a.in_flight).max().unwrap_or(0)
    );
    let _ = writeln!(out, "second  arrivals  retries  most in flight");
    let seconds = ended.saturating_sub(started).div_ceil(SECOND_NS);
    for s in 0..seconds {
        let (lo, hi) = (started + s * SECOND_NS, started + (s + 1) * SECOND_NS);
        let in_second: Vec<&Arrival> = arrivals
            .iter()
            .filter(|a| a.at_ns >= lo && a.at_ns < hi)
            .collect();
        let _ = writeln!(
            out,
            "{:>6}  {:>8}  {:>7}  {:>14}",
            s,
            in_second.len(),
            in_second.iter().filter(|a| a.retry).count(),
            in_second.iter().map(|a| a.in_flight).max().unwrap_or(0)
        );
    }
    out
}

fn accept(listener: UnixListener, shared: Arc<Shared>) {
    let mut n: u64 = 0;
    for stream in listener.incoming() {
        let Ok(stream) = stream else { continue };
        n += 1;
        let shared = Arc::clone(&shared);
        let seed = 0x9E37_79B9_7F4A_7C15_u64.wrapping_mul(n) | 1;
        let spawned = std::thread::Builder::new()
            .stack_size(128 * 1024)
            .spawn(move || serve(stream, &shared, n, seed));
        if spawned.is_err() {
            eprintln!("demo-dependency: cannot start a thread for connection {n}");
        }
    }
}

/// Answer one connection's calls, one at a time, until it closes.
fn serve(stream: UnixStream, shared: &Shared, conn: u64, mut seed: u64) {
    let Ok(write_half) = stream.try_clone() else {
        return;
    };
    let mut writer = write_half;
    let mut reader = BufReader::new(stream);
    let mut line = String::new();
    loop {
        line.clear();
        match reader.read_line(&mut line) {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
        let f: Vec<&str> = line.split_whitespace().collect();
        let parsed = match f.as_slice() {
            ["call", kind, instance, t0, t1] => (|| {
                Some((
                    match *kind {
                        "f" => false,
                        "r" => true,
                        _ => return None,
                    },
                    instance.parse::<u32>().ok()?,
                    t0.parse::<u64>().ok()?,
                    t1.parse::<u64>().ok()?,
                ))
            })(),
            _ => None,
        };
        let Some((retry, instance, t0_ns, t1_ns)) = parsed else {
            let _ = writer.write_all(b"error expected: call <f|r> <instance> <t0> <t1>\n");
            return;
        };
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        let fails = (seed % 100) < u64::from(shared.fail_percent.load(Ordering::Relaxed));
        let outcome = {
            let Ok(mut state) = shared.state.lock() else {
                return;
            };
            // Read inside the lock: the record is in arrival order.
            let now = MonotonicClock.now_ns();
            while state.recent.front().is_some_and(|&t| now - t >= SECOND_NS) {
                state.recent.pop_front();
            }
            let outcome = if state.recent.len() as u64 >= shared.capacity {
                Outcome::Busy
            } else {
                state.recent.push_back(now);
                if fails {
                    Outcome::Fail
                } else {
                    Outcome::Ok
                }
            };
            let in_flight = state.connected_in_flight() + 1;
            state.in_flight.insert(conn, reader.get_ref().as_raw_fd());
            state.arrivals.push(Arrival {
                at_ns: now,
                retry,
                instance,
                t0_ns,
                t1_ns,
                in_flight: in_flight as u32,
                outcome,
            });
            outcome
        };
        let hung_up = outcome != Outcome::Busy && {
            // Past the knee, wait for a server: the queue is the latency past it.
            shared.servers.enter();
            let hung_up = hung_up_within(reader.get_ref(), shared.service);
            shared.servers.leave();
            hung_up
        };
        // No longer in flight before the answer leaves (a caller that reads it and starts
        // another call finds this one gone), and before the socket closes.
        if let Ok(mut state) = shared.state.lock() {
            state.in_flight.remove(&conn);
        }
        if hung_up {
            return;
        }
        let answer = format!("{}\n", outcome.word());
        if writer.write_all(answer.as_bytes()).is_err() {
            return;
        }
    }
}

/// Wait `service` for the call to be done; true when the caller hung up meanwhile (a caller
/// sends nothing while it waits for its answer, so any readiness is its end of file).
fn hung_up_within(stream: &UnixStream, service: Duration) -> bool {
    let deadline = MonotonicClock.now_ns() + service.as_nanos() as u64;
    loop {
        let now = MonotonicClock.now_ns();
        if now >= deadline {
            return false;
        }
        let mut fds = libc::pollfd {
            fd: stream.as_raw_fd(),
            events: libc::POLLIN | libc::POLLRDHUP,
            revents: 0,
        };
        let timeout = Duration::from_nanos(deadline - now);
        let ts = libc::timespec {
            tv_sec: timeout.as_secs() as libc::time_t,
            tv_nsec: timeout.subsec_nanos() as libc::c_long,
        };
        // SAFETY: `fds` is one valid pollfd for the duration of the call, `ts` a valid
        // timespec, and a null signal mask leaves the mask unchanged.
        let rc = unsafe { libc::ppoll(&mut fds, 1, &ts, std::ptr::null()) };
        if rc > 0 {
            return true;
        }
        if rc < 0 && std::io::Error::last_os_error().kind() != std::io::ErrorKind::Interrupted {
            return false;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn record_lines_round_trip() {
        let a = Arrival {
            at_ns: 42,
            retry: true,
            instance: 7,
            t0_ns: 30,
            t1_ns: 31,
            in_flight: 3,
            outcome: Outcome::Busy,
        };
        assert_eq!(Arrival::parse(a.line().trim()), Some(a));
        assert_eq!(Arrival::parse("42 x 7 30 31 3 ok"), None);
        assert_eq!(Arrival::parse("42 f 7 30 31 3"), None);
    }

    #[test]
    fn most_in_a_sliding_window() {
        let at = |t: u64| Arrival {
            at_ns: t,
            retry: t % 2 == 1,
            instance: 0,
            t0_ns: 0,
            t1_ns: 0,
            in_flight: 1,
            outcome: Outcome::Ok,
        };
        let arrivals: Vec<Arrival> = [0, 10, 999, 1000, 1001, 1500].map(at).to_vec();
        // (t - 1000, t]: {999, 1000, 1001, 1500} at t = 1500.
        assert_eq!(most_in_window(&arrivals, 1000, |_| true), 4);
        assert_eq!(most_in_window(&arrivals, 1000, |a| a.retry), 2);
        assert_eq!(most_in_window(&[], 1000, |_| true), 0);
    }
}
