//! The guard process that sets the minimum when its agent dies, however it dies.

use super::{AgentConfig, FleetError};
use crate::share::{Bucket, LocalShare};
use shmlimit::Rate;

/// A guard process: it waits for its agent to exit (its pipe closes, however the agent died)
/// and then sets the limit to the minimum, so that workers never keep a dead agent's grant.
///
/// Dropping it closes the pipe: the guard sets the minimum (again) and exits, and is reaped.
#[derive(Debug)]
pub struct Guard {
    write: Option<std::os::fd::OwnedFd>,
    pid: nix::unistd::Pid,
}

impl Guard {
    /// The guard's process id.
    pub fn pid(&self) -> i32 {
        self.pid.as_raw()
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        drop(self.write.take());
        // The guard exits right after the pipe closes (one retune, one write).
        let _ = nix::sys::wait::waitpid(self.pid, None);
    }
}

/// Fork the guard of `limit`: when this process exits (or is killed), the guard applies
/// `floor` to the limit and exits.
///
/// Call it while the process has no other thread that could hold a lock the guard needs: the
/// guard only reads a pipe, retunes the already mapped limit (an `flock`) and exits.
///
/// # Errors
///
/// [`FleetError::Config`] if the pipe or the fork fails.
pub fn spawn_guard(
    limit: &Bucket,
    floor: LocalShare,
    cfg: &AgentConfig,
) -> Result<Guard, FleetError> {
    spawn_guard_closing(limit, floor, cfg, None)
}

/// [`spawn_guard`], the guard closing its copy of `close` (the agent's lock: a lock the guard
/// held would outlive the agent by the guard's own exit).
pub(super) fn spawn_guard_closing(
    limit: &Bucket,
    floor: LocalShare,
    cfg: &AgentConfig,
    close: Option<std::os::fd::RawFd>,
) -> Result<Guard, FleetError> {
    use nix::unistd::{fork, ForkResult};
    use std::os::fd::AsRawFd;
    let (read, write) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)
        .map_err(|e| FleetError::Config(format!("guard pipe: {e}")))?;
    // The guard says on this pipe that it has closed `close`: until then (a guard not yet
    // scheduled after the fork, or stopped), its copy would hold the agent's lock.
    let (ready_r, ready_w) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)
        .map_err(|e| FleetError::Config(format!("guard pipe: {e}")))?;
    let message = format!(
        "fleet[{}/{}] guard: the agent is gone; share set to {floor}\n",
        cfg.fleet, cfg.member
    );
    let limit = limit.clone();
    // SAFETY: after the fork the child closes descriptors and writes one byte (close(2) and
    // write(2), async-signal-safe), then runs only `guard_main`, which makes no allocation (but
    // on an error path it ignores) and takes no lock that another thread of the parent could
    // hold at the fork: it blocks in read(2), retunes the limit's share and fence (its own
    // process-local retune mutex, cloned unlocked: the parent took no retune after opening
    // it, and an flock), writes a preformatted message with write(2) and calls _exit(2).
    match unsafe { fork() } {
        Ok(ForkResult::Child) => {
            drop(write);
            drop(ready_r);
            if let Some(fd) = close {
                // SAFETY: closes the child's copy of a descriptor the parent keeps open (the
                // flock stays with the parent's copy); close(2) is async-signal-safe.
                unsafe {
                    libc::close(fd);
                }
            }
            // SAFETY: a 1-byte buffer to an open pipe we own; write(2) is async-signal-safe.
            unsafe {
                libc::write(ready_w.as_raw_fd(), [1u8].as_ptr().cast(), 1);
            }
            drop(ready_w);
            guard_main(read, &limit, floor, message.as_bytes())
        }
        Ok(ForkResult::Parent { child }) => {
            drop(read);
            drop(ready_w);
            // Until the guard has closed its copy of the lock (one byte), or died (end of file).
            let mut byte = [0u8; 1];
            loop {
                // SAFETY: a valid 1-byte buffer; `ready_r` is an open descriptor we own.
                let n = unsafe { libc::read(ready_r.as_raw_fd(), byte.as_mut_ptr().cast(), 1) };
                if n < 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::EINTR) {
                    continue;
                }
                break;
            }
            Ok(Guard {
                write: Some(write),
                pid: child,
            })
        }
        Err(e) => Err(FleetError::Config(format!("guard fork: {e}"))),
    }
}

fn guard_main(read: std::os::fd::OwnedFd, limit: &Bucket, floor: LocalShare, message: &[u8]) -> ! {
    use nix::sys::signal::{signal, SigHandler, Signal};
    use std::os::fd::AsRawFd;
    for sig in [Signal::SIGINT, Signal::SIGTERM, Signal::SIGHUP] {
        // SAFETY: SIG_IGN installs no handler code.
        unsafe {
            let _ = signal(sig, SigHandler::SigIgn);
        }
    }
    let mut byte = [0u8; 1];
    loop {
        // SAFETY: `byte` is a valid 1-byte buffer; `read` is an open descriptor we own.
        let n = unsafe { libc::read(read.as_raw_fd(), byte.as_mut_ptr().cast(), 1) };
        if n < 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::EINTR) {
            continue;
        }
        break;
    }
    let _ = floor.apply(limit);
    // The fence too: a dead agent's host spends nothing past its lease (its reserved minimum
    // stays reserved on the server until the member rejoins, unused).
    if let Ok(rate) = Rate::from_emission_ns(floor.emission_ns) {
        let _ = limit.fleet_manage(floor.capacity, rate);
    }
    // SAFETY: `message` is a valid buffer of its length; fd 2 may be closed (write fails).
    unsafe {
        libc::write(2, message.as_ptr().cast(), message.len());
        libc::_exit(0)
    }
}
