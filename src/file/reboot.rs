//! Reboots: what the first open after a boot-id change does to the stored times.
//!
//! Every stored time is absolute `CLOCK_MONOTONIC` nanoseconds of the boot that wrote it, and
//! that clock restarts at boot. The first open that finds another boot's id in the header (under
//! an exclusive `flock`, so exactly once) either **translates** every stored time onto this
//! boot's timeline through the wall clock (the default, [`OnReboot::Translate`]), or **resets**
//! every state to fresh ([`OnReboot::Reset`], the behaviour of format versions 1 and 2).
//!
//! # Implementation details
//!
//! **What the header keeps per boot.** Word 16 is the wall offset (`CLOCK_REALTIME -
//! CLOCK_MONOTONIC`) taken when the boot first opened the file: the phase of wall-aligned
//! windows. Word 21 is the *highest* wall offset any open (or [`note_alive`], which the sync
//! helper calls) saw during the boot, word 22 the latest Unix time it saw. A wall clock stepped
//! forward during the boot raises the offset; taking the highest one maps the boot's times to
//! the latest Unix times they can have been, which is the strict side.
//!
//! **The shift.** An old-boot time `t` is the Unix time `t + P_old` (`P_old` = word 21); this
//! boot's time for that Unix time is `t + P_old - P_new`, with `P_new` measured at the
//! translation. So the down time counts as elapsed exactly as far as the wall clock says it
//! elapsed, and a wall clock that went backwards across the reboot puts the translated states
//! in this boot's future: a bucket emptier, a window still current, log entries younger. Nothing
//! is ever granted that the old boot would not have granted by the same Unix time.
//!
//! * Token bucket (and split sub-buckets, keyed bucket states): `tat + D`; a TAT before this
//!   boot's origin is a full bucket (0).
//! * Sliding log entries: their times `+ D`, rounded up to the 1024 ns unit. An entry whose window
//!   ended before this boot's origin is marked freed; one still in its window but dated before
//!   the origin is dated at the origin (one unit): it expires up to that much later than it
//!   should, never earlier. The shift is one constant, so dates stay in commit order.
//! * Fixed and sliding windows move to the window of this boot that holds their last instant
//!   after the shift (later, never earlier). For windows aligned to the wall clock, whose phase
//!   is word 16, that is exactly their *calendar* window (the same UTC day) when the old boot
//!   kept one wall offset; windows aligned to the monotonic clock can land one window later
//!   than their admissions. A sliding window whose two windows land in one merges their counts
//!   into the current one.
//! * Window indices are stored truncated (32 and 24 bits). The full index is recovered nearest to
//!   a reference: the old boot's time of `max(Unix now, word 22)`.
//! * Permits (concurrency limits, keyed or not) are released: their holders died with the boot.
//!   Decision counters are kept.
//! * Counters (keyed, window with each call): every counter word, log deadline and log entry
//!   moves by `D`.
//!
//! What each kind's words become is its engine's: the `reboot` module of each engine, listed
//! in one table by `engine::reboot::translate_limit`, which whoever opens a file passes down
//! with the engines' reset ([`EngineHooks`]). This module keeps the protocol: the lock, the
//! marker, the order.
//!
//! **What cannot be translated fails closed.** A TAT past 2^63 - 1 ns, a log time past the
//! 48-bit unit range, or a window further ahead than its encoding tells from a stale read
//! (2^30 fixed windows, 2^22 sliding ones) is stored as the farthest state the encoding holds
//! with its count full: the limit denies until that state expires or an operator resets the
//! limit. The limit's bit in the header bitmap (words 64..128) says so, for `shmlimit inspect`;
//! a reset of the limit clears it.
//!
//! **Interrupted translation.** Words 23-24 hold the boot id a translation is for, written before
//! the first state is changed. An opener that finds them equal to its own boot while the boot id
//! still differs knows a translating process died part way: each word may already be translated
//! or not. It then stores the stricter reading of every word (the later TAT, the later log
//! dates, the window that stays current longer), which is never looser than either.

use std::sync::atomic::Ordering;

use super::layout::{self, word};
use super::lock::FileLock;
use super::Mapped;
use crate::clock::{self, Clock};
use crate::error::{Error, Result};

mod shift;

#[cfg(test)]
pub(crate) use shift::tests;
pub(crate) use shift::{ok, Moved, Shift};

/// What the first open after a reboot needs from the engines (`engine::reboot::HOOKS`), passed
/// down by whoever opens a file: `file/` imports no engine.
pub(crate) struct EngineHooks {
    /// Move limit `index`'s states onto this boot's timeline by the shift; true if a state
    /// could not be translated and was stored failing closed.
    pub translate: fn(&Mapped, usize, &Shift) -> bool,
    /// Return limit `index`'s states to fresh, keeping its live parameters.
    pub reset: fn(&Mapped, usize),
}

/// What the first open after a reboot does with the stored state. Stored in the file at creation
/// (header word 25); openers use the file's choice.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OnReboot {
    /// Translate every stored time to the new boot's clock through the wall clock: a quota used
    /// before the reboot stays used (permits are still released). The default: it is never less
    /// strict than [`OnReboot::Reset`].
    #[default]
    Translate,
    /// Return every state to fresh, once: each limit grants its whole capacity after a reboot.
    Reset,
}

impl OnReboot {
    pub(crate) fn code(self) -> u64 {
        match self {
            OnReboot::Translate => 0,
            OnReboot::Reset => 1,
        }
    }

    pub(crate) fn describe(self) -> &'static str {
        match self {
            OnReboot::Translate => "translate its state",
            OnReboot::Reset => "reset its state",
        }
    }

    pub(crate) fn from_code(code: u64) -> Option<OnReboot> {
        match code {
            0 => Some(OnReboot::Translate),
            1 => Some(OnReboot::Reset),
            _ => None,
        }
    }
}

/// What the header says about reboots, for `shmlimit inspect`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RebootInfo {
    /// The file's choice.
    pub on_reboot: OnReboot,
    /// Reboots whose states were translated.
    pub translations: u64,
    /// At the last translation: how far the wall clock moved between the old boot's last
    /// recorded Unix time and the translation, in ns (negative: it went backwards).
    pub last_wall_elapsed_ns: i64,
    /// Indices of limits holding a state that could not be translated and fails closed until
    /// it expires or the limit is reset.
    pub failed_closed: Vec<usize>,
}

/// First word of the bitmap of limits that failed closed (one bit per limit, 4096 bits).
pub(crate) const FAILED_BITMAP: usize = 64;

fn boot_words() -> [u64; 2] {
    let boot = clock::boot_id();
    [
        u64::from_ne_bytes(boot[..8].try_into().expect("8 bytes")),
        u64::from_ne_bytes(boot[8..].try_into().expect("8 bytes")),
    ]
}

fn unix_now_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
}

/// Record that this boot is alive now: raise the highest wall offset and the latest Unix time
/// seen in this boot. Called at every open of the file in its own boot and by `sync`.
pub(crate) fn note_alive(mapped: &Mapped) {
    let offset = clock::wall_offset_ns() as i64;
    // Relaxed: informational words read under the flock at the next boot.
    let _ =
        mapped
            .word(word::WALL_MAX * 8)
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |w| {
                (offset > w as i64).then_some(offset as u64)
            });
    mapped
        .word(word::LAST_UNIX * 8)
        .fetch_max(unix_now_ns(), Ordering::Relaxed);
}

/// Write the file's dirty pages to its disk now (`msync(MS_SYNC)` of the whole mapping), after
/// recording this boot as alive. What a power loss can forget is what was decided since the
/// last sync, or since the kernel last wrote the pages back (`vm.dirty_expire_centisecs`,
/// 30 s by default, plus the flusher's period), whichever is later.
pub(crate) fn sync(mapped: &Mapped) -> std::io::Result<()> {
    note_alive(mapped);
    mapped.flush()
}

/// The reboot information in the header.
pub(crate) fn info(mapped: &Mapped) -> RebootInfo {
    let failed = (0..mapped.defs.len())
        .filter(|&i| is_failed(mapped, i))
        .collect();
    RebootInfo {
        on_reboot: OnReboot::from_code(mapped.header(word::ON_REBOOT)).unwrap_or_default(),
        translations: mapped.header(word::TRANSLATIONS),
        last_wall_elapsed_ns: mapped.header(word::LAST_ELAPSED) as i64,
        failed_closed: failed,
    }
}

/// Header words 128..192: the limits a translation has finished (see `translate_all`).
pub(crate) const DONE_BITMAP: usize = 128;

fn bit_of(mapped: &Mapped, base: usize, index: usize) -> (&std::sync::atomic::AtomicU64, u64) {
    (mapped.word((base + index / 64) * 8), 1 << (index % 64))
}

fn failed_word(mapped: &Mapped, index: usize) -> (&std::sync::atomic::AtomicU64, u64) {
    bit_of(mapped, FAILED_BITMAP, index)
}

fn is_failed(mapped: &Mapped, index: usize) -> bool {
    let (w, bit) = failed_word(mapped, index);
    // Relaxed: informational.
    w.load(Ordering::Relaxed) & bit != 0
}

/// Forget that limit `index` failed closed (it was reset).
pub(crate) fn clear_failed(mapped: &Mapped, index: usize) {
    let (w, bit) = failed_word(mapped, index);
    // Relaxed: informational.
    w.fetch_and(!bit, Ordering::Relaxed);
}

/// If the file's boot id is not this boot's, translate or reset its state, once, under an
/// exclusive `flock`; then record this boot as alive.
pub(crate) fn on_open(mapped: &Mapped, hooks: &EngineHooks) -> Result<()> {
    let ours = boot_words();
    let current = || {
        [
            mapped.header(word::BOOT_ID),
            mapped.header(word::BOOT_ID + 1),
        ]
    };
    if current() == ours {
        note_alive(mapped);
        return Ok(());
    }
    let lock = FileLock::exclusive(&mapped.file)
        .map_err(|_| Error::NotInitialized(mapped.path.clone()))?;
    if current() != ours {
        let policy = OnReboot::from_code(mapped.header(word::ON_REBOOT)).unwrap_or_default();
        // One reading of this boot's offset: the shift and the new windows' phase agree.
        let offset = clock::wall_offset_ns();
        match policy {
            OnReboot::Reset => reset_all(mapped, hooks),
            OnReboot::Translate => translate_all(mapped, ours, offset, hooks),
        }
        // Relaxed: published by the Release stores of the boot id below.
        mapped
            .word(word::WALL_OFFSET * 8)
            .store(offset, Ordering::Relaxed);
        mapped
            .word(word::WALL_MAX * 8)
            .store(offset, Ordering::Relaxed);
        mapped
            .word(word::LAST_UNIX * 8)
            .store(unix_now_ns(), Ordering::Relaxed);
        // Release: whoever reads this boot id (Acquire) sees the new state.
        mapped
            .word(word::BOOT_ID * 8)
            .store(ours[0], Ordering::Release);
        mapped
            .word((word::BOOT_ID + 1) * 8)
            .store(ours[1], Ordering::Release);
    }
    drop(lock);
    note_alive(mapped);
    Ok(())
}

/// Today's reset: every state fresh, counters zero, `reset_count` + 1.
fn reset_all(mapped: &Mapped, hooks: &EngineHooks) {
    for index in 0..mapped.defs.len() {
        (hooks.reset)(mapped, index);
    }
    let g = &mapped.geometry;
    for w in mapped.words(g.stats_offset, g.stats_len / 8) {
        // Relaxed: published by the Release store of the boot id.
        w.store(0, Ordering::Relaxed);
    }
    mapped
        .word(word::RESET_COUNT * 8)
        .fetch_add(1, Ordering::Relaxed);
}

/// Every state onto this boot's timeline (see the module docs).
fn translate_all(mapped: &Mapped, ours: [u64; 2], p_new: u64, hooks: &EngineHooks) {
    let interrupted = [
        mapped.header(word::TRANSLATING),
        mapped.header(word::TRANSLATING + 1),
    ] == ours;
    // Relaxed + SeqCst fence: the marker is in the file before any state word changes.
    mapped
        .word(word::TRANSLATING * 8)
        .store(ours[0], Ordering::Relaxed);
    mapped
        .word((word::TRANSLATING + 1) * 8)
        .store(ours[1], Ordering::Relaxed);
    std::sync::atomic::fence(Ordering::SeqCst);

    let now = crate::MonotonicClock.now_ns();
    let unix = now.wrapping_add(p_new);
    let p_old = mapped.header(word::WALL_MAX);
    let last_unix = mapped.header(word::LAST_UNIX);
    let reference_unix = unix.max(last_unix) as i128;
    let shift = Shift {
        d: p_old as i64 as i128 - p_new as i64 as i128,
        phase_old: mapped.header(word::WALL_OFFSET),
        phase_new: p_new,
        reference: reference_unix - p_old as i64 as i128,
        now,
        interrupted,
    };
    if !interrupted {
        for i in FAILED_BITMAP..DONE_BITMAP + layout::MAX_LIMITS / 64 {
            mapped.word(i * 8).store(0, Ordering::Relaxed);
        }
    }
    // Limits are translated in order, each marked done after its last word: after an
    // interruption, the done ones are skipped, the first pending one is the only one that may
    // be half translated (it keeps the stricter reading of each word and is reported failed
    // closed), and the later ones were never touched (translated exactly).
    let mut under_way = interrupted;
    for index in 0..mapped.defs.len() {
        let (done, done_bit) = bit_of(mapped, DONE_BITMAP, index);
        if interrupted && done.load(Ordering::Relaxed) & done_bit != 0 {
            continue;
        }
        let ambiguous = std::mem::replace(&mut under_way, false);
        let this = Shift {
            interrupted: ambiguous,
            ..shift
        };
        if (hooks.translate)(mapped, index, &this) || ambiguous {
            let (w, bit) = failed_word(mapped, index);
            w.fetch_or(bit, Ordering::Relaxed);
        }
        // SeqCst fence: the limit's words are in the file before its done bit.
        std::sync::atomic::fence(Ordering::SeqCst);
        done.fetch_or(done_bit, Ordering::Relaxed);
    }
    let elapsed = if last_unix == 0 {
        0
    } else {
        (unix as i128 - last_unix as i128).clamp(i64::MIN as i128, i64::MAX as i128) as i64
    };
    mapped
        .word(word::LAST_ELAPSED * 8)
        .store(elapsed as u64, Ordering::Relaxed);
    mapped
        .word(word::TRANSLATIONS * 8)
        .fetch_add(1, Ordering::Relaxed);
}
