//! The Redis servers the scenarios run against: a server on a free loopback port (stopped,
//! restarted, made a replica), a TCP proxy that can be cut, and Sentinels.

use super::*;

// ---------------------------------------------------------------------------------------------
// Redis on loopback, and a TCP proxy that can be cut.

fn redis_binary() -> Option<PathBuf> {
    let mut dirs: Vec<PathBuf> = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).collect())
        .unwrap_or_default();
    dirs.push("/usr/bin".into());
    dirs.push("/usr/local/bin".into());
    dirs.into_iter()
        .map(|d| d.join("redis-server"))
        .find(|p| p.is_file())
}

pub(crate) fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

pub(crate) struct Redis {
    pub(crate) bin: PathBuf,
    pub(crate) port: u16,
    pub(crate) child: Option<Child>,
    /// More `redis-server` arguments (`--replicaof HOST PORT`).
    extra: Vec<String>,
    /// Its working directory: a replica writes the primary's snapshot there (`dump.rdb`), which
    /// a server started later in the same directory would load.
    pub(crate) dir: tempfile::TempDir,
}

impl Redis {
    pub(crate) fn start(bin: &Path, port: u16) -> Redis {
        Redis::start_with(bin, port, &[])
    }

    pub(crate) fn start_with(bin: &Path, port: u16, extra: &[&str]) -> Redis {
        let mut r = Redis {
            bin: bin.to_path_buf(),
            port,
            child: None,
            extra: extra.iter().map(|s| s.to_string()).collect(),
            dir: tempfile::tempdir().unwrap(),
        };
        r.restart();
        r
    }

    pub(crate) fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    pub(crate) fn restart(&mut self) {
        assert!(self.child.is_none());
        let child = Command::new(&self.bin)
            .args(["--port", &self.port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no", "--loglevel", "warning"])
            .args(&self.extra)
            .arg("--dir")
            .arg(self.dir.path())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .spawn()
            .unwrap();
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Ok(c) = redis::Client::open(self.url()) {
                if let Ok(mut con) = c.get_connection_with_timeout(Duration::from_millis(200)) {
                    if redis::cmd("PING").query::<String>(&mut con).is_ok() {
                        return;
                    }
                }
            }
            assert!(Instant::now() < deadline, "redis-server did not start");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Wait until the server's uptime, as the fleet's script reads it, covers `d`:
    /// `uptime_in_seconds` is a difference of whole seconds (the current one and the start's),
    /// so the script counts one second less.
    pub(crate) fn await_uptime(&self, d: Duration) {
        let c = redis::Client::open(self.url()).unwrap();
        let mut con = c
            .get_connection_with_timeout(Duration::from_secs(2))
            .unwrap();
        let deadline = Instant::now() + GIVE_UP;
        loop {
            let info: String = redis::cmd("INFO").arg("server").query(&mut con).unwrap();
            let up: u64 = info
                .lines()
                .find_map(|l| l.strip_prefix("uptime_in_seconds:")?.trim().parse().ok())
                .expect("INFO server has uptime_in_seconds");
            if Duration::from_secs(up.saturating_sub(1)) >= d {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "redis-server up only {up} s after {GIVE_UP:?}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// `CLIENT PAUSE for_ms WRITE`: the server answers reads, and holds every command that
    /// writes (scripts that write included) for `for_ms` milliseconds.
    pub(crate) fn pause_writes(&self, for_ms: u64) {
        let c = redis::Client::open(self.url()).unwrap();
        let mut con = c
            .get_connection_with_timeout(Duration::from_secs(2))
            .unwrap();
        redis::cmd("CLIENT")
            .arg("PAUSE")
            .arg(for_ms)
            .arg("WRITE")
            .query::<()>(&mut con)
            .unwrap();
    }

    pub(crate) fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for Redis {
    fn drop(&mut self) {
        self.stop();
    }
}

pub(crate) struct Proxy {
    pub(crate) port: u16,
    /// The server it forwards new connections to.
    upstream: Arc<std::sync::atomic::AtomicU16>,
    pub(crate) cut: Arc<AtomicBool>,
    pub(crate) stop: Arc<AtomicBool>,
    conns: Arc<Mutex<Vec<TcpStream>>>,
    pub(crate) thread: Option<std::thread::JoinHandle<()>>,
}

impl Proxy {
    pub(crate) fn start(upstream: u16) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let port = listener.local_addr().unwrap().port();
        let cut = Arc::new(AtomicBool::new(false));
        let stop = Arc::new(AtomicBool::new(false));
        let conns = Arc::new(Mutex::new(Vec::<TcpStream>::new()));
        let upstream = Arc::new(std::sync::atomic::AtomicU16::new(upstream));
        let (c2, s2, k2, u2) = (cut.clone(), stop.clone(), conns.clone(), upstream.clone());
        let thread = std::thread::spawn(move || {
            while !s2.load(Ordering::SeqCst) {
                match listener.accept() {
                    Ok((down, _)) => {
                        if c2.load(Ordering::SeqCst) {
                            drop(down);
                            continue;
                        }
                        down.set_nonblocking(false).unwrap();
                        let Ok(up) = TcpStream::connect(("127.0.0.1", u2.load(Ordering::SeqCst)))
                        else {
                            continue;
                        };
                        let mut k = k2.lock().unwrap();
                        k.push(down.try_clone().unwrap());
                        k.push(up.try_clone().unwrap());
                        for (mut a, mut b) in [
                            (down.try_clone().unwrap(), up.try_clone().unwrap()),
                            (up, down),
                        ] {
                            std::thread::spawn(move || {
                                let mut buf = [0u8; 16 * 1024];
                                while let Ok(n) = a.read(&mut buf) {
                                    if n == 0 || b.write_all(&buf[..n]).is_err() {
                                        break;
                                    }
                                }
                                let _ = a.shutdown(Shutdown::Both);
                                let _ = b.shutdown(Shutdown::Both);
                            });
                        }
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(5)),
                }
            }
        });
        Proxy {
            port,
            upstream,
            cut,
            stop,
            conns,
            thread: Some(thread),
        }
    }

    pub(crate) fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    /// The partition: close every proxied connection and refuse new ones.
    pub(crate) fn cut(&self) {
        self.cut.store(true, Ordering::SeqCst);
        for c in self.conns.lock().unwrap().drain(..) {
            let _ = c.shutdown(Shutdown::Both);
        }
    }

    pub(crate) fn heal(&self) {
        self.cut.store(false, Ordering::SeqCst);
    }

    /// A failover as clients see it: every connection closed, new ones go to `port`.
    pub(crate) fn retarget(&self, port: u16) {
        self.upstream.store(port, Ordering::SeqCst);
        for c in self.conns.lock().unwrap().drain(..) {
            let _ = c.shutdown(Shutdown::Both);
        }
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.cut();
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

// ---------------------------------------------------------------------------------------------

/// The `redis-server` binary; a test that needs it and runs without it fails (it is ignored by
/// default, so it only runs when asked to: `--include-ignored`, as `.ci/run` does).
pub(crate) fn need_redis() -> PathBuf {
    redis_binary().expect(
        "redis-server not found: install it (apt-get install redis-server) to run the fleet tests",
    )
}

/// A `redis-server --sentinel` process, killed when dropped.
pub(crate) struct Sentinel {
    pub(crate) port: u16,
    pub(crate) child: Child,
    _dir: tempfile::TempDir,
}

impl Sentinel {
    /// Monitor `primary` as `m` (quorum 1, down after 100 ms).
    pub(crate) fn start(bin: &Path, primary: u16) -> Sentinel {
        let dir = tempfile::tempdir().unwrap();
        let port = free_port();
        let conf = dir.path().join("sentinel.conf");
        std::fs::write(
            &conf,
            format!(
                "port {port}\nbind 127.0.0.1\ndir {}\nsentinel monitor m 127.0.0.1 {primary} 1\nsentinel down-after-milliseconds m 100\nsentinel failover-timeout m 2000\n",
                dir.path().display()
            ),
        )
        .unwrap();
        let child = Command::new(bin)
            .arg(&conf)
            .arg("--sentinel")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .spawn()
            .unwrap();
        Sentinel {
            port,
            child,
            _dir: dir,
        }
    }

    /// The primary's port as the sentinel names it (None while it does not answer).
    pub(crate) fn primary(&self) -> Option<u16> {
        let c = redis::Client::open(format!("redis://127.0.0.1:{}/", self.port)).ok()?;
        let mut con = c
            .get_connection_with_timeout(Duration::from_millis(200))
            .ok()?;
        let addr: Vec<String> = redis::cmd("SENTINEL")
            .arg("get-master-addr-by-name")
            .arg("m")
            .query(&mut con)
            .ok()?;
        addr.get(1)?.parse().ok()
    }

    /// The replicas the sentinel knows of the primary.
    pub(crate) fn replicas(&self) -> usize {
        let Ok(c) = redis::Client::open(format!("redis://127.0.0.1:{}/", self.port)) else {
            return 0;
        };
        let Ok(mut con) = c.get_connection_with_timeout(Duration::from_millis(200)) else {
            return 0;
        };
        redis::cmd("SENTINEL")
            .arg("replicas")
            .arg("m")
            .query::<Vec<redis::Value>>(&mut con)
            .map_or(0, |v| v.len())
    }
}

impl Drop for Sentinel {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
