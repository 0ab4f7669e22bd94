//! Waiting for a release without spinning: a futex on the release sequence in the mapping.
//!
//! # Implementation details
//!
//! Control line of a concurrency limit (word index: content):
//!
//! | word | content |
//! |---|---|
//! | 0 | release sequence: bumped by every release and reclaim; waiters sleep on its low 32 bits |
//! | 1 | waiters: how many processes are (or were, see below) asleep on word 0 |
//! | 2-15 | unkeyed: reserved, zero; keyed: seven more such pairs |
//!
//! A keyed limit's waiters for key tag `t` use pair `t mod 8` (words `2 (t mod 8)` and
//! `2 (t mod 8) + 1`), and its releases wake every sleeper of the pair, since waiters for
//! other keys may share it; an unkeyed limit's releases wake one.
//!
//! A waiter reads the sequence, tries for a permit, registers in word 1, re-reads the sequence
//! and sleeps (`FUTEX_WAIT`, shared: the key is the file page, so it works across processes)
//! only if the sequence is unchanged. A releaser frees its entry, bumps the sequence and, if
//! word 1 is non-zero, wakes one sleeper (`FUTEX_WAKE`). Both sides access the sequence and
//! the waiter count with read-modify-writes only, so either the releaser sees the waiter
//! registered or the waiter sees the new sequence (and the kernel re-checks the value under
//! its own lock before it sleeps): no wake-up is lost.
//!
//! A waiter killed while asleep leaves word 1 one too high: releases then make a `FUTEX_WAKE`
//! system call that finds no one, which costs time but blocks no one. Every waiter also wakes by
//! itself at least every [`RECHECK`], so a wake-up consumed by a waiter that then died, or a
//! permit freed by its owner's death (which releases nothing), is found within that period.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use super::slot::PermitAtomic;

/// Control word of the release sequence (the futex word is its low half).
pub(crate) const SEQ: usize = 0;
/// Control word of the waiter count.
pub(crate) const WAITERS: usize = 1;
/// The longest a waiter sleeps before it looks for dead owners again.
pub(crate) const RECHECK: Duration = Duration::from_millis(100);

/// The futex value of a sequence word: its low 32 bits.
pub(crate) fn futex_value(seq: u64) -> u32 {
    seq as u32
}

/// Announce a release on `seq` and wake up to `n` sleepers if any may be waiting (one for an
/// unkeyed limit; all for a keyed one, whose words waiters of several keys share).
pub(crate) fn announce_release(seq: &AtomicU64, waiters: &AtomicU64, n: i32) {
    if bump(seq, waiters) {
        wake(seq, n);
    }
}

/// The shared-memory half of a release announcement: bump the sequence; true if a sleeper may
/// be waiting (then the caller wakes it).
pub(crate) fn bump<A: PermitAtomic>(seq: &A, waiters: &A) -> bool {
    // Both sides are read-modify-writes (the reads too, as `fetch_add(0)`): each reads the
    // latest value of its word, and an RMW that reads another's writes synchronizes with it, so
    // the waiter's registration and this bump cannot both miss each other (no store-load
    // reordering to rely on, unlike plain SeqCst loads).
    // SeqCst: the strongest, for clarity; AcqRel RMWs already suffice by the argument above.
    seq.fetch_add(1, Ordering::SeqCst);
    // SeqCst: see above.
    waiters.fetch_add(0, Ordering::SeqCst) != 0
}

/// Register as a waiter, sleep on `seq` while it still reads `seen` (at most `timeout`), and
/// deregister.
pub(crate) fn wait(seq: &AtomicU64, waiters: &AtomicU64, seen: u32, timeout: Duration) {
    if register(seq, waiters, seen) {
        sleep(seq, seen, timeout);
    }
    deregister(waiters);
}

/// The shared-memory half of going to sleep: register in the waiter count, then true if the
/// sequence still reads `seen` (no release since), so sleeping cannot miss one.
pub(crate) fn register<A: PermitAtomic>(seq: &A, waiters: &A, seen: u32) -> bool {
    // SeqCst read-modify-writes on both words: pairs with `bump` (see there).
    waiters.fetch_add(1, Ordering::SeqCst);
    // SeqCst: see above.
    futex_value(seq.fetch_add(0, Ordering::SeqCst)) == seen
}

/// Decrement the waiter count, never below zero (a reset may have zeroed it meanwhile).
pub(crate) fn deregister<A: PermitAtomic>(waiters: &A) {
    // Relaxed: a count that only decides whether a wake-up is worth a system call.
    let mut current = waiters.load(Ordering::Relaxed);
    while current != 0 {
        // Relaxed: see above.
        match waiters.compare_exchange(current, current - 1, Ordering::Relaxed, Ordering::Relaxed) {
            Ok(_) => return,
            Err(actual) => current = actual,
        }
    }
}

/// The address of the low 32 bits of `word`, the futex word.
fn futex_addr(word: &AtomicU64) -> *const u32 {
    let base = word.as_ptr() as *const u32;
    if cfg!(target_endian = "big") {
        base.wrapping_add(1)
    } else {
        base
    }
}

/// `FUTEX_WAIT` on the low half of `word` while it holds `seen`, for at most `timeout`. Returns
/// on a wake-up, a timeout, a signal, or at once if the value differs.
fn sleep(word: &AtomicU64, seen: u32, timeout: Duration) {
    let ts = libc::timespec {
        tv_sec: timeout.as_secs().min(i32::MAX as u64) as libc::time_t,
        tv_nsec: timeout.subsec_nanos() as libc::c_long,
    };
    // SAFETY: [1] the address is the 4-byte-aligned low half of an 8-aligned AtomicU64 in the
    // live mapping, which outlives the call (the caller holds the limit); [2] FUTEX_WAIT only
    // reads it atomically and compares; [3] `ts` is a valid relative timespec for the whole call.
    // FUTEX_WAIT without FUTEX_PRIVATE_FLAG: waiters and wakers are in other processes.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            futex_addr(word),
            libc::FUTEX_WAIT,
            seen,
            &ts as *const libc::timespec,
            std::ptr::null::<u32>(),
            0u32,
        );
    }
}

/// `FUTEX_WAKE` up to `n` sleepers on the low half of `word`.
fn wake(word: &AtomicU64, n: i32) {
    // SAFETY: as in `sleep` [1]; FUTEX_WAKE does not access the memory, only its key.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            futex_addr(word),
            libc::FUTEX_WAKE,
            n,
            std::ptr::null::<libc::timespec>(),
            std::ptr::null::<u32>(),
            0u32,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::time::Instant;

    #[test]
    fn a_sleeper_wakes_on_release_and_times_out_without_one() {
        let words = Arc::new([AtomicU64::new(0), AtomicU64::new(0)]);
        let start = Instant::now();
        wait(&words[0], &words[1], 0, Duration::from_millis(20));
        assert!(start.elapsed() >= Duration::from_millis(20));
        assert_eq!(words[1].load(Ordering::Relaxed), 0);
        // A changed value returns at once.
        words[0].store(1, Ordering::Relaxed);
        wait(&words[0], &words[1], 0, Duration::from_secs(60));
        let w = Arc::clone(&words);
        let sleeper = std::thread::spawn(move || {
            let start = Instant::now();
            wait(&w[0], &w[1], 1, Duration::from_secs(60));
            start.elapsed()
        });
        // Wake until the sleeper is gone (it may not be asleep yet when the first wake comes).
        while !sleeper.is_finished() {
            announce_release(&words[0], &words[1], 1);
            std::thread::sleep(Duration::from_millis(5));
        }
        assert!(sleeper.join().unwrap() < Duration::from_secs(60));
    }
}
