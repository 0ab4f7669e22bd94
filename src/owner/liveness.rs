//! Whether the owner named by an owner word (a permit's process, a counter lane's thread) still
//! lives.
//!
//! A process is named by its pid and its start time (field 22 of `/proc/<pid>/stat`, clock
//! ticks since boot): a pid the kernel recycled for a later process has a later start time, so
//! it is not mistaken for the owner. The permit word keeps the low 24 bits of the start time
//! (46.6 hours at the usual 100 ticks per second), so a recycled pid is mistaken for a dead
//! owner only when it started a whole multiple of 2^24 ticks after it, in the same tick; the
//! permit then stays held until that process exits or the lease expires (never the other way:
//! a live owner is never judged dead by this truncation).
//!
//! Checks cost system calls and run only on the slow path (no permit free).

use std::sync::atomic::{AtomicU64, Ordering};

use super::{self as slot, OwnerWord, START_MASK};

/// This process's owner identity and the pid it was read for (`pid << 46 | identity`), or 0.
static OWN: AtomicU64 = AtomicU64::new(0);

/// This process's owner identity, read from `/proc/self/stat` once per process.
///
/// The cache is keyed by pid and checked against `getpid` (a system call: glibc no longer
/// caches it) on every call, so a child made by any kind of fork (`fork`, `vfork` + work, a raw
/// `syscall(SYS_fork)` or `clone`, none of which need run `pthread_atfork` handlers) reads its
/// own identity on its first acquisition. This is the permit path, not the rate hot path: an
/// acquisition already writes the owner word and may read `/proc`.
pub(crate) fn own_identity() -> std::io::Result<u64> {
    // SAFETY: getpid has no preconditions and cannot fail. The raw system call, not a wrapper
    // that might cache: the point is to see a pid changed by a fork no library saw.
    let pid = unsafe { libc::syscall(libc::SYS_getpid) } as u32;
    // Relaxed: the cached value is keyed by pid and idempotent to compute.
    let cached = OWN.load(Ordering::Relaxed);
    if cached != 0 && (cached >> 46) as u32 == pid {
        return Ok(cached & slot::OWNER_MASK);
    }
    if pid as u64 > slot::PID_MASK {
        return Err(std::io::Error::other(format!(
            "pid {pid} does not fit the permit word"
        )));
    }
    let start = read_stat(pid)?
        .ok_or_else(|| std::io::Error::other("/proc/self/stat is missing"))?
        .start_ticks;
    let identity = slot::owner(pid, start);
    // Relaxed: see above.
    OWN.store(((pid as u64) << 46) | identity, Ordering::Relaxed);
    Ok(identity)
}

/// What `/proc/<pid>/stat` says about a process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ProcStat {
    /// Field 3: `R`, `S`, `D`, `Z`, ...
    pub state: u8,
    /// Field 20: the threads of the process not yet released (a zombie leader counts itself
    /// until it is reaped, and each other thread until it has exited, its files closed).
    pub threads: u64,
    /// Field 22: start time in clock ticks after boot.
    pub start_ticks: u64,
}

/// Parse one `/proc/<pid>/stat` line. The command name (field 2) is in parentheses and may
/// itself hold spaces and parentheses, so fields are counted after its last `)`.
pub(crate) fn parse_stat(line: &str) -> Option<ProcStat> {
    let rest = &line[line.rfind(')')? + 1..];
    let mut fields = rest.split_ascii_whitespace();
    let state = *fields.next()?.as_bytes().first()?;
    // Fields 4..=19 lie between the state (3) and the thread count (20); field 21 between it
    // and the start time (22).
    let threads = fields.nth(16)?.parse().ok()?;
    let start_ticks = fields.nth(1)?.parse().ok()?;
    Some(ProcStat {
        state,
        threads,
        start_ticks,
    })
}

/// `/proc/<pid>/stat`, or None when there is no such entry.
pub(crate) fn read_stat(pid: u32) -> std::io::Result<Option<ProcStat>> {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(line) => parse_stat(&line)
            .map(Some)
            .ok_or_else(|| std::io::Error::other(format!("unparsable /proc/{pid}/stat"))),
        Err(e) if matches!(e.raw_os_error(), Some(libc::ENOENT) | Some(libc::ESRCH)) => Ok(None),
        Err(e) => Err(e),
    }
}

/// Whether the process that committed `word` is gone: no such pid, a zombie (`Z`) or dead
/// (`X`) one with no other thread left, or a pid now used by a process with another start
/// time.
///
/// A zombie leader is not enough: a process whose main thread exited (`pthread_exit`) shows
/// `Z` while its other threads run on, holding its permits; and a killed process's leader may
/// show `Z` while its other threads are still being torn down, their files (the sockets of
/// the work the permit was for) still open. Only when the thread count is down to the
/// leader's own has every other thread exited.
///
/// When the answer cannot be known (the pid exists but `/proc` hides it, as with `hidepid`, or
/// the entry cannot be read), the owner is taken to be alive: a permit is then held longer than
/// needed, never handed out twice.
pub(crate) fn owner_is_gone(word: OwnerWord) -> bool {
    let pid = word.pid();
    if pid == 0 || pid as u64 > i32::MAX as u64 {
        return false;
    }
    // SAFETY: kill with signal 0 sends nothing; it only checks that the pid exists (ESRCH if
    // not, EPERM if it exists but belongs to another user). No memory is involved.
    let rc = unsafe { libc::kill(pid as libc::pid_t, 0) };
    if rc != 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH) {
        return true;
    }
    match read_stat(pid) {
        Ok(Some(stat)) => {
            (matches!(stat.state, b'Z' | b'X') && stat.threads <= 1)
                || stat.start_ticks & START_MASK != word.start_low()
        }
        // kill saw the pid but /proc does not show it (hidepid), or it exited in between: only
        // the second is certain, and kill tells them apart.
        Ok(None) => {
            // SAFETY: as above.
            let rc = unsafe { libc::kill(pid as libc::pid_t, 0) };
            rc != 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH)
        }
        Err(_) => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_names_with_spaces_and_parentheses() {
        let line = "4242 (a (b) c) S 1 4242 4242 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 \
                    987654 1000 10 18446744073709551615\n";
        let s = parse_stat(line).unwrap();
        assert_eq!(s.state, b'S');
        assert_eq!(s.threads, 1);
        assert_eq!(s.start_ticks, 987654);
        assert_eq!(parse_stat("12 (x) R 1 2"), None);
    }

    #[test]
    fn this_process_is_alive_and_a_missing_pid_is_gone() {
        let me = own_identity().unwrap();
        let word = OwnerWord::held(1, me);
        assert_eq!(word.pid(), std::process::id());
        assert!(!owner_is_gone(word));
        // Same pid, another start time: a recycled pid.
        let other = slot::owner(std::process::id(), (word.start_low() + 1) & START_MASK);
        assert!(owner_is_gone(OwnerWord::held(1, other)));
        // A pid beyond any pid_max in use here (pid_max is at most 2^22).
        let max: u32 = std::fs::read_to_string("/proc/sys/kernel/pid_max")
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        if (max as u64) < slot::PID_MASK {
            assert!(owner_is_gone(OwnerWord::held(1, slot::owner(max + 1, 0))));
        }
    }

    /// A process whose main thread has exited while another thread runs on shows its leader
    /// as a zombie: it is alive (its permits held) until that thread ends too. The process is
    /// a small C program (`pthread_exit` from Rust's main thread would unwind through Rust
    /// frames), built with the system's `cc`.
    #[test]
    fn a_process_whose_main_thread_exited_lives_while_another_thread_runs() {
        let dir = tempfile::tempdir().unwrap();
        let (source, program) = (dir.path().join("z.c"), dir.path().join("z"));
        std::fs::write(
            &source,
            "#include <pthread.h>\n#include <stdio.h>\n#include <unistd.h>\n\
             static void *sleeper(void *a) { (void)a; usleep(800000); return 0; }\n\
             int main(void) { pthread_t t; pthread_create(&t, 0, sleeper, 0);\n\
             printf(\"%d\\n\", (int)getpid()); fflush(stdout); pthread_exit(0); }\n",
        )
        .unwrap();
        let built = std::process::Command::new("cc")
            .args(["-pthread", "-o"])
            .arg(&program)
            .arg(&source)
            .status()
            .expect("this test needs a C compiler (cc) on the PATH");
        assert!(built.success(), "cc failed");
        let mut child = std::process::Command::new(&program)
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        std::io::BufRead::read_line(
            &mut std::io::BufReader::new(child.stdout.take().unwrap()),
            &mut line,
        )
        .unwrap();
        let pid: u32 = line.trim().parse().unwrap();
        let start = read_stat(pid).unwrap().unwrap().start_ticks;
        let word = OwnerWord::held(1, slot::owner(pid, start));
        // Wait for the main thread to be a zombie, the other thread still sleeping.
        let deadline = std::time::Instant::now() + std::time::Duration::from_millis(600);
        loop {
            let stat = read_stat(pid).unwrap().unwrap();
            if stat.state == b'Z' {
                assert_eq!(stat.threads, 2, "{stat:?}");
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "the main thread never exited"
            );
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        assert!(
            !owner_is_gone(word),
            "a zombie leader whose other thread runs is alive"
        );
        child.wait().unwrap();
        assert!(owner_is_gone(word), "reaped: gone");
    }
}
