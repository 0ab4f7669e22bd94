//! One agent per limit of a file: `PATH.LIMIT.agent.lock`.

use std::path::PathBuf;

use super::{AgentConfig, FleetError};

/// Hold `PATH.LIMIT.agent.lock` (an exclusive `flock`; the limit's name with every character
/// but ASCII letters, digits, `-` and `_` as `_`) for the agent's life: one agent per limit of a
/// file. `None` when the lock file cannot be created (a read-only directory: no protection
/// against a second agent then).
pub(super) fn agent_lock(cfg: &AgentConfig) -> Result<Option<std::fs::File>, FleetError> {
    use std::os::fd::AsRawFd;
    let limit: String = cfg
        .limit
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect();
    let path = PathBuf::from(format!("{}.{limit}.agent.lock", cfg.path.display()));
    let file = match std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
    {
        Ok(f) => f,
        Err(e) => {
            eprintln!(
                "fleet[{}/{}] no agent lock ({}: {e}); make sure one agent runs per file",
                cfg.fleet,
                cfg.member,
                path.display()
            );
            return Ok(None);
        }
    };
    // SAFETY: `file` is an open descriptor we own; flock has no memory preconditions.
    if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
        return Err(FleetError::Config(format!(
            "another fleet agent runs on limit `{}` of {} (it holds {})",
            cfg.limit,
            cfg.path.display(),
            path.display()
        )));
    }
    Ok(Some(file))
}
