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

use std::os::fd::AsRawFd;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use super::layout::{self, word};
use super::{reset_limit, Mapped};
use crate::algo::fixed_window::{self, FixedWindow};
use crate::algo::sliding_log;
use crate::algo::sliding_window::{self, SlidingWindow};
use crate::clock::{self, Clock};
use crate::error::{Error, Result};
use crate::keyed::template::{fixed_fresh_in, sliding_fresh_in};
use crate::spec::{Algorithm, Alignment};

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
pub(crate) fn on_open(mapped: &Mapped) -> Result<()> {
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
    let fd = mapped.file.as_raw_fd();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        // SAFETY: `fd` is the open file descriptor owned by `mapped.file`; flock has no memory
        // preconditions.
        if unsafe { libc::flock(fd, libc::LOCK_EX | libc::LOCK_NB) } == 0 {
            break;
        }
        if Instant::now() > deadline {
            return Err(Error::NotInitialized(mapped.path.clone()));
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    if current() != ours {
        let policy = OnReboot::from_code(mapped.header(word::ON_REBOOT)).unwrap_or_default();
        // One reading of this boot's offset: the shift and the new windows' phase agree.
        let offset = clock::wall_offset_ns();
        match policy {
            OnReboot::Reset => reset_all(mapped),
            OnReboot::Translate => translate_all(mapped, ours, offset),
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
    // SAFETY: as above.
    unsafe { libc::flock(fd, libc::LOCK_UN) };
    note_alive(mapped);
    Ok(())
}

/// Today's reset: every state fresh, counters zero, `reset_count` + 1.
fn reset_all(mapped: &Mapped) {
    for index in 0..mapped.defs.len() {
        reset_limit(mapped, index);
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

/// How to move one old-boot state onto this boot's timeline.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Shift {
    /// Nanoseconds to add to an old-boot time: `P_old (highest) - P_new`.
    pub d: i128,
    /// The old boot's phase offset (word 16) and this boot's wall offset.
    pub phase_old: u64,
    pub phase_new: u64,
    /// The reference on the old timeline for recovering truncated window indices.
    pub reference: i128,
    /// This boot's monotonic now at the translation.
    pub now: u64,
    /// A translation of this boot was interrupted: store the stricter reading of every word.
    pub interrupted: bool,
}

/// What one translated word came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Moved {
    pub word: u64,
    /// The state could not be represented and was stored failing closed.
    pub failed: bool,
}

fn ok(word: u64) -> Moved {
    Moved {
        word,
        failed: false,
    }
}

fn floor_div(a: i128, b: u64) -> i128 {
    a.div_euclid(b as i128)
}

const TAT_MAX: u64 = (1 << 63) - 1;

/// The full index of the window holding `t` (`now + phase`): calendar months or `t / W`.
fn index_of(t: i128, window_ns: u64, alignment: Alignment) -> i128 {
    if alignment.is_months(window_ns) {
        if t < 0 {
            floor_div(t, window_ns)
        } else {
            crate::algo::calendar::month_index(t.min(u64::MAX as i128) as u64) as i128
        }
    } else {
        floor_div(t, window_ns)
    }
}

/// Where window `k` starts, in the units of `now + phase`.
fn start_of(k: i128, window_ns: u64, alignment: Alignment) -> i128 {
    if alignment.is_months(window_ns) && k >= 0 {
        crate::algo::calendar::month_start(k.min(u64::MAX as i128) as u64) as i128
    } else {
        k * window_ns as i128
    }
}

impl Shift {
    /// A token-bucket state word (bit 63: parameter-slot tag).
    pub fn bucket(&self, w: u64) -> Moved {
        let tag = w & layout::bucket::PARAM_TAG;
        let tat = w & !layout::bucket::PARAM_TAG;
        if tat == 0 {
            return ok(w);
        }
        let moved = tat as i128 + self.d;
        let (mut new, failed) = if moved <= 0 {
            (0, false)
        } else if moved > TAT_MAX as i128 {
            (TAT_MAX, true)
        } else {
            (moved as u64, false)
        };
        if self.interrupted {
            new = new.max(tat);
        }
        Moved {
            word: tag | new,
            failed,
        }
    }

    /// A sliding-log entry of a log with window `window_ns`.
    pub fn log_entry(&self, e: u64, window_ns: u64) -> Moved {
        let (units, flags) = sliding_log::split_entry(e);
        if units == 0 {
            return ok(e);
        }
        let t = (units as i128) << sliding_log::TIME_SHIFT;
        let mut moved = t + self.d;
        if self.interrupted {
            moved = moved.max(t);
        }
        let max = (sliding_log::TIME_MASK as i128) << sliding_log::TIME_SHIFT;
        if moved > max {
            return Moved {
                word: sliding_log::join_entry(sliding_log::TIME_MASK, flags),
                failed: true,
            };
        }
        if moved + window_ns as i128 <= 0 {
            // Its window ended before this boot began: expired, kept only for dating.
            return ok(sliding_log::join_entry(1, flags | sliding_log::FREED));
        }
        let unit = 1i128 << sliding_log::TIME_SHIFT;
        let units = ((moved + unit - 1).div_euclid(unit)).max(1);
        ok(sliding_log::join_entry(units as u64, flags))
    }

    fn phase(&self, old: bool, window_ns: u64, alignment: Alignment) -> u64 {
        let wall = if old { self.phase_old } else { self.phase_new };
        alignment.phase_ns(window_ns, wall)
    }

    /// The new full index of old window `k`: the window of this boot that holds the old
    /// window's last instant after the shift. For wall-aligned windows whose boot kept one wall
    /// offset this is exactly the same calendar window; a wall clock stepped forward during the
    /// old boot (a highest offset above the phase word) moves it later, never earlier.
    fn window(&self, k: i128, window_ns: u64, alignment: Alignment) -> i128 {
        let last = start_of(k + 1, window_ns, alignment)
            - self.phase(true, window_ns, alignment) as i128
            - 1;
        index_of(
            last + self.d + self.phase(false, window_ns, alignment) as i128,
            window_ns,
            alignment,
        )
    }

    /// The index of this boot's now, with this boot's phase.
    fn now_window(&self, window_ns: u64, alignment: Alignment) -> i128 {
        index_of(
            self.now as i128 + self.phase(false, window_ns, alignment) as i128,
            window_ns,
            alignment,
        )
    }

    /// A fixed-window state word.
    pub fn fixed(&self, w: u64, limit: u64, window_ns: u64, alignment: Alignment) -> Moved {
        let moved = self.fixed_translated(w, window_ns, alignment);
        if !self.interrupted || moved.failed {
            return moved;
        }
        let fw = FixedWindow {
            limit,
            window_ns: if alignment.is_months(window_ns) {
                fixed_window::MONTHS
            } else {
                window_ns
            },
            phase_ns: self.phase(false, window_ns, alignment),
        };
        let keep = fixed_fresh_in(&fw, self.now, w) > fixed_fresh_in(&fw, self.now, moved.word);
        if keep {
            ok(w)
        } else {
            moved
        }
    }

    fn fixed_translated(&self, w: u64, window_ns: u64, alignment: Alignment) -> Moved {
        const STALE: i128 = 1 << 30;
        let (stored, count) = fixed_window::unpack(w);
        if count == 0 {
            return ok(0);
        }
        let full_ref = index_of(
            self.reference + self.phase(true, window_ns, alignment) as i128,
            window_ns,
            alignment,
        );
        let diff = (full_ref as u64 as u32).wrapping_sub(stored) as i32 as i128;
        let k = self.window(full_ref - diff, window_ns, alignment);
        let n = self.now_window(window_ns, alignment);
        if k < 0 || k < n - STALE / 2 {
            return ok(0);
        }
        if k - n >= STALE - 1 {
            return Moved {
                word: fixed_window::pack((n + STALE - 2) as u64, 0xFFFF_FFFF),
                failed: true,
            };
        }
        ok(fixed_window::pack(k as u64, count))
    }

    /// A sliding-window state word.
    pub fn sliding(&self, w: u64, limit: u64, window_ns: u64, alignment: Alignment) -> Moved {
        let moved = self.sliding_translated(w, window_ns, alignment);
        if !self.interrupted || moved.failed {
            return moved;
        }
        let sw = SlidingWindow {
            limit,
            window_ns,
            phase_ns: self.phase(false, window_ns, alignment),
        };
        let keep = sliding_fresh_in(&sw, self.now, w) > sliding_fresh_in(&sw, self.now, moved.word);
        if keep {
            ok(w)
        } else {
            moved
        }
    }

    fn sliding_translated(&self, w: u64, window_ns: u64, alignment: Alignment) -> Moved {
        const STALE: i128 = 1 << 22;
        const MASK: u64 = sliding_window::MAX_LIMIT;
        let (stored, prev, cur) = sliding_window::unpack(w);
        if prev == 0 && cur == 0 {
            return ok(0);
        }
        let full_ref = index_of(
            self.reference + self.phase(true, window_ns, alignment) as i128,
            window_ns,
            alignment,
        );
        let raw = (full_ref as u64).wrapping_sub(stored) & ((1 << 24) - 1);
        let diff = (((raw << 40) as i64) >> 40) as i128;
        let k_old = full_ref - diff;
        let kc = self.window(k_old, window_ns, alignment);
        let kp = self.window(k_old - 1, window_ns, alignment);
        let (mut prev, mut cur) = if kp == kc {
            (0, (prev + cur).min(MASK))
        } else {
            (prev, cur)
        };
        let mut kc = kc;
        if kc < 0 {
            if kc == -1 {
                // The current count is window 0's previous one.
                (prev, cur, kc) = (cur, 0, 0);
            } else {
                return ok(0);
            }
        }
        let n = self.now_window(window_ns, alignment);
        if kc < n - STALE / 2 || (prev == 0 && cur == 0) {
            return ok(0);
        }
        if kc - n >= STALE - 1 {
            return Moved {
                word: sliding_window::pack((n + STALE - 2) as u64, MASK, MASK),
                failed: true,
            };
        }
        ok(sliding_window::pack(kc as u64, prev, cur))
    }
}

/// Every state onto this boot's timeline (see the module docs).
fn translate_all(mapped: &Mapped, ours: [u64; 2], p_new: u64) {
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
        if translate_limit(mapped, index, &this) || ambiguous {
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

/// Translate one limit's states; true if one of them failed closed.
fn translate_limit(mapped: &Mapped, index: usize, shift: &Shift) -> bool {
    let def = &mapped.defs[index];
    let (offset, _) = mapped.geometry.slots[index];
    let word_of = |w: u64| -> Moved {
        match def.algorithm {
            Algorithm::TokenBucket { .. } => shift.bucket(w),
            Algorithm::FixedWindow {
                limit,
                window_ns,
                alignment,
            } => shift.fixed(w, limit, window_ns, alignment),
            Algorithm::SlidingWindow {
                limit,
                window_ns,
                alignment,
            } => shift.sliding(w, limit, window_ns, alignment),
            Algorithm::SlidingLog { .. } | Algorithm::Concurrency { .. } => ok(w),
        }
    };
    let mut failed = false;
    let mut apply = |cell: &std::sync::atomic::AtomicU64, f: &dyn Fn(u64) -> Moved| {
        // Relaxed: under the flock, before the Release store of the boot id publishes it.
        let m = f(cell.load(Ordering::Relaxed));
        failed |= m.failed;
        cell.store(m.word, Ordering::Relaxed);
    };
    if let Algorithm::TokenBucket { .. } = def.algorithm {
        // A fleet share's lease deadline is a time of the dead boot's clock: the share is fenced
        // (the host's reserved minimum) until its agent renews the lease in this boot.
        // Relaxed: as above.
        mapped
            .word(offset + layout::bucket::DEADLINE * 8)
            .store(0, Ordering::Relaxed);
    }
    match (def.algorithm, def.keyed) {
        (Algorithm::Concurrency { .. }, _) => {
            // Permits die with their holders.
            reset_limit(mapped, index);
        }
        (_, Some(k)) => {
            let words = mapped.words(
                offset + layout::LINE,
                layout::key_table_words(k.slots() as usize),
            );
            for pair in words.chunks_exact(2) {
                // Relaxed: as above.
                let tag = pair[0].load(Ordering::Relaxed);
                if tag != crate::keyed::table::EMPTY {
                    apply(&pair[1], &word_of);
                }
            }
        }
        (Algorithm::SlidingLog { limit, window_ns }, None) => {
            let entries = mapped.words(offset + layout::LINE, limit as usize);
            for e in entries {
                apply(e, &|w| shift.log_entry(w, window_ns));
            }
        }
        (_, None) => {
            for line in 0..def.split.max(1) as usize {
                apply(mapped.word(offset + line * layout::LINE), &word_of);
            }
        }
    }
    failed
}

#[cfg(test)]
mod tests {
    use super::*;

    const DAY: u64 = 86_400_000_000_000;

    fn shift(d: i128) -> Shift {
        Shift {
            d,
            phase_old: 0,
            phase_new: 0,
            reference: 0,
            now: 0,
            interrupted: false,
        }
    }

    #[test]
    fn bucket_moves_by_the_wall_clock_and_keeps_its_tag() {
        let s = shift(-1_000);
        let tag = layout::bucket::PARAM_TAG;
        assert_eq!(s.bucket(tag | 5_000).word, tag | 4_000);
        assert_eq!(s.bucket(500).word, 0, "before the origin: full");
        assert_eq!(s.bucket(tag).word, tag, "fresh stays fresh");
        let far = shift(i64::MAX as i128);
        assert!(far.bucket(TAT_MAX - 5).failed);
        let mut again = shift(-1_000);
        again.interrupted = true;
        assert_eq!(again.bucket(5_000).word, 5_000, "the stricter reading");
    }

    #[test]
    fn log_entries_expire_or_are_dated_at_the_origin() {
        let s = shift(-10 * DAY as i128);
        let w = DAY;
        let entry = |t_ns: u64| sliding_log::join_entry(t_ns >> sliding_log::TIME_SHIFT, 0);
        // 9.5 days old boot time -> half a day before the origin: still in a 1-day window.
        let m = s.log_entry(entry(19 * DAY / 2 + 1024 * 7), w);
        assert_eq!(sliding_log::split_entry(m.word).0, 1);
        assert_eq!(m.word & sliding_log::FREED, 0);
        // Two days before the origin: expired.
        let m = s.log_entry(entry(8 * DAY), w);
        assert_ne!(m.word & sliding_log::FREED, 0);
        // After the origin: moved exactly.
        let m = s.log_entry(entry(11 * DAY), w);
        assert_eq!(
            sliding_log::split_entry(m.word).0,
            DAY >> sliding_log::TIME_SHIFT
        );
    }

    #[test]
    fn wall_aligned_windows_keep_their_calendar_window() {
        // Old boot: offset 100 days + 3 h; new boot: offset 103 days; the same Unix day.
        let h = 3_600_000_000_000u64;
        let s = Shift {
            d: (100 * DAY + 3 * h) as i128 - (103 * DAY) as i128,
            phase_old: 100 * DAY + 3 * h,
            phase_new: 103 * DAY,
            reference: (5 * DAY) as i128,
            now: 2 * h,
            interrupted: false,
        };
        // Old mono 4 days + 22 h: Unix day 105 (100 d 3 h + 4 d 22 h = 105 d 1 h).
        let old = FixedWindow {
            limit: 10,
            window_ns: DAY,
            phase_ns: 3 * h,
        };
        let k = old.window_of(4 * DAY + 22 * h);
        let m = s.fixed(fixed_window::pack(k, 10), 10, DAY, Alignment::WallClock);
        let new = FixedWindow {
            limit: 10,
            window_ns: DAY,
            phase_ns: 0,
        };
        // New mono 2 h is Unix day 103 + 2 h: two days before the old admissions' day.
        assert_eq!(fixed_window::unpack(m.word), (2, 10));
        assert!(!new.is_fresh(2 * h, m.word));
        assert!(new.is_fresh(3 * DAY, m.word));
    }
}
