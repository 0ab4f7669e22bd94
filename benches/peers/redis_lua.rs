//! A token bucket in Redis, as a Lua script called with EVALSHA over loopback: the networked
//! design. Every decision is a round trip.
//!
//! The server is `SHMLIMIT_REDIS_URL` (default `redis://127.0.0.1:6379`) if one answers there;
//! otherwise, if a `redis-server` binary is on the `PATH`, a private instance is started on a free
//! loopback port with persistence off and killed when the benchmarks end; otherwise the Redis
//! benchmarks are skipped with a notice.

use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use redis::{Connection, Script};

use super::{Contender, Workload};

/// GCRA in Lua, dated by the server's clock in microseconds (exact in a Lua double).
const SCRIPT: &str = r"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local tat = tonumber(redis.call('GET', KEYS[1])) or 0
local new_tat = math.max(tat, now) + tonumber(ARGV[1])
if new_tat - now > tonumber(ARGV[2]) then
  return 0
end
redis.call('SET', KEYS[1], new_tat)
return 1
";

static ENDPOINT: OnceLock<Option<String>> = OnceLock::new();
static PRIVATE_SERVER: Mutex<Option<Child>> = Mutex::new(None);

/// Kills the private `redis-server`, if one was started, when dropped (also on unwind).
pub struct ServerGuard;

impl Drop for ServerGuard {
    fn drop(&mut self) {
        kill_private();
    }
}

fn kill_private() {
    let Ok(mut server) = PRIVATE_SERVER.lock() else {
        return;
    };
    if let Some(mut child) = server.take() {
        let _ = child.kill();
        let _ = child.wait();
    }
}

fn answers(url: &str) -> bool {
    let Ok(client) = redis::Client::open(url) else {
        return false;
    };
    let Ok(mut con) = client.get_connection_with_timeout(Duration::from_millis(300)) else {
        return false;
    };
    redis::cmd("PING").query::<String>(&mut con).is_ok()
}

fn start_private() -> Option<String> {
    let port = TcpListener::bind("127.0.0.1:0")
        .ok()?
        .local_addr()
        .ok()?
        .port();
    let child = Command::new("redis-server")
        .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
        .args(["--save", "", "--appendonly", "no", "--daemonize", "no"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .ok()?;
    *PRIVATE_SERVER.lock().ok()? = Some(child);
    let url = format!("redis://127.0.0.1:{port}");
    let deadline = Instant::now() + Duration::from_secs(5);
    while Instant::now() < deadline {
        if answers(&url) {
            eprintln!("redis_lua: started a private redis-server at {url}");
            return Some(url);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    kill_private();
    None
}

/// The Redis URL to benchmark against, found (or started) once; `None` means skip.
pub fn endpoint() -> Option<&'static str> {
    ENDPOINT
        .get_or_init(|| {
            let url = std::env::var("SHMLIMIT_REDIS_URL")
                .unwrap_or_else(|_| "redis://127.0.0.1:6379".to_owned());
            if answers(&url) {
                eprintln!("redis_lua: using the server at {url}");
                return Some(url);
            }
            start_private().or_else(|| {
                eprintln!(
                    "redis_lua: SKIPPED: no Redis answers at {url} (set SHMLIMIT_REDIS_URL) and no \
                     redis-server could be started (apt-get install redis-server)"
                );
                None
            })
        })
        .as_deref()
}

/// One bucket (one key) on the server.
pub struct RedisLua {
    url: String,
    key: String,
    script: Script,
    emission_us: u64,
    tolerance_us: u64,
}

impl RedisLua {
    /// A fresh key holding a full bucket of `workload`; `None` when no server is available.
    pub fn new(workload: Workload) -> Option<Self> {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let url = endpoint()?.to_owned();
        // Relaxed: a unique number is all that is needed.
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let key = format!("shmlimit-bench:{}:{n}", std::process::id());
        let p = workload.bucket();
        // The server's clock has microseconds: round the interval up, never below one.
        let emission_us = p.emission_ns.div_ceil(1_000).max(1);
        let bucket = RedisLua {
            url,
            key,
            script: Script::new(SCRIPT),
            emission_us,
            tolerance_us: p.capacity * emission_us,
        };
        let mut con = bucket.connect();
        redis::cmd("DEL")
            .arg(&bucket.key)
            .query::<i64>(&mut con)
            .expect("DEL the bench key");
        Some(bucket)
    }

    fn connect(&self) -> Connection {
        redis::Client::open(self.url.as_str())
            .and_then(|c| c.get_connection())
            .expect("connect to Redis")
    }
}

/// One client connection and the invocation it repeats.
pub struct Client {
    con: Connection,
    script: Script,
    key: String,
    emission_us: u64,
    tolerance_us: u64,
}

impl Contender for RedisLua {
    type Worker = Client;

    fn worker(&self) -> Client {
        Client {
            con: self.connect(),
            script: self.script.clone(),
            key: self.key.clone(),
            emission_us: self.emission_us,
            tolerance_us: self.tolerance_us,
        }
    }

    fn decide(w: &mut Client) -> bool {
        w.script
            .key(&w.key)
            .arg(w.emission_us)
            .arg(w.tolerance_us)
            .invoke::<i64>(&mut w.con)
            .expect("EVALSHA the bucket script")
            == 1
    }
}
