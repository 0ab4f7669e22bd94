//! One key slot, `[tag, state]`, read and replaced as one 16-byte unit.
//!
//! # Implementation details
//!
//! The table code is written against [`PairWord`]: an atomic 16-byte load and an atomic 16-byte
//! compare-and-swap. On x86_64 the slot in the mapped file is a [`KeySlot`] (16-byte aligned) and
//!
//! * the compare-and-swap is `lock cmpxchg16b`, a locked read-modify-write: atomic with respect to
//!   every other access by every core, and a full barrier (sequentially consistent);
//! * the load is `vmovdqa` on processors with AVX, which Intel's and AMD's manuals guarantee to
//!   be one atomic 16-byte access when aligned; without AVX it is a `lock cmpxchg16b` that
//!   compares with zero and stores back what it read, which is atomic too (and writes the line).
//!
//! So every reader sees a tag and a state that were in the slot together at one instant: a
//! decision for a key is never computed from another key's state. In the loom models the slot is a
//! loom mutex around the pair, which is exactly this: a linearizable load and compare-and-swap.
//!
//! Other targets have no implementation; keyed limits report [`crate::Error::WrongKind`] there.

#[cfg(target_arch = "x86_64")]
use std::sync::atomic::AtomicU64;

/// A `(tag, state)` pair updated as one unit.
pub(crate) trait PairWord {
    /// The pair, read atomically.
    fn load(&self) -> (u64, u64);
    /// Replace the pair by `new` if it is `current`; otherwise return what it is. Sequentially
    /// consistent either way.
    fn cas(&self, current: (u64, u64), new: (u64, u64)) -> Result<(), (u64, u64)>;
}

/// One key slot of a table in the mapped file.
///
/// # Layout
///
/// 16 bytes, 16-byte aligned (what `cmpxchg16b` requires): the tag in the low word, the state in
/// the high word, matching [`crate::file::layout::KEY_SLOT`]. The two words are atomics, so the
/// slot is only ever accessed atomically, by this process and by every other.
#[cfg(target_arch = "x86_64")]
#[repr(C, align(16))]
pub(crate) struct KeySlot {
    tag: AtomicU64,
    state: AtomicU64,
}

#[cfg(target_arch = "x86_64")]
const _: () = {
    assert!(std::mem::size_of::<KeySlot>() == crate::file::layout::KEY_SLOT);
    assert!(std::mem::align_of::<KeySlot>() == 16);
};

/// What this processor has, detected once: [`DETECTED`] and the feature bits below. A plain
/// byte that every keyed decision tests (one load and a bit test, where
/// `is_x86_feature_detected!` reads and shifts a 128-bit cache at each use).
#[cfg(target_arch = "x86_64")]
static FEATURES: std::sync::atomic::AtomicU8 = std::sync::atomic::AtomicU8::new(0);
/// [`FEATURES`] has been filled in.
#[cfg(target_arch = "x86_64")]
const DETECTED: u8 = 1;
/// The processor has `cmpxchg16b`.
#[cfg(target_arch = "x86_64")]
const CMPXCHG16B: u8 = 2;
/// The processor has AVX (aligned 16-byte loads are atomic).
#[cfg(target_arch = "x86_64")]
const AVX: u8 = 4;

/// The feature bits of this processor.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn features() -> u8 {
    // Relaxed: the byte is a pure function of the processor; any thread may store it.
    match FEATURES.load(std::sync::atomic::Ordering::Relaxed) {
        0 => detect(),
        f => f,
    }
}

#[cfg(target_arch = "x86_64")]
#[cold]
#[inline(never)]
fn detect() -> u8 {
    let f = DETECTED
        | if std::is_x86_feature_detected!("cmpxchg16b") {
            CMPXCHG16B
        } else {
            0
        }
        | if std::is_x86_feature_detected!("avx") {
            AVX
        } else {
            0
        };
    // Relaxed: as in `features`.
    FEATURES.store(f, std::sync::atomic::Ordering::Relaxed);
    f
}

/// Whether this processor has the 16-byte compare-and-swap keyed tables need.
#[inline]
pub(crate) fn supported() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        features() & CMPXCHG16B != 0
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

#[cfg(target_arch = "x86_64")]
impl KeySlot {
    /// View a key table (`2 x n` words, starting 16-byte aligned) as its `n` slots; `None` if the
    /// words are misaligned or odd in number, or if this processor lacks `cmpxchg16b`.
    #[inline]
    pub(crate) fn table(words: &[AtomicU64]) -> Option<&[KeySlot]> {
        if words.as_ptr() as usize % 16 != 0 || words.len() % 2 != 0 || !supported() {
            return None;
        }
        // SAFETY: [1] `KeySlot` is `repr(C)` over two `AtomicU64`, so `n` slots have the layout
        // of `2 n` words; [2] the start is 16-byte aligned (checked above) and the length is the
        // words' own; [3] the words are atomics (interior mutability), so shared references to
        // them as slots allow the same atomic accesses; [4] the lifetime is the words' lifetime.
        Some(unsafe {
            std::slice::from_raw_parts(words.as_ptr().cast::<KeySlot>(), words.len() / 2)
        })
    }

    /// Atomic 16-byte compare-and-swap; returns the pair found and whether it was replaced.
    #[inline(always)]
    fn cmpxchg16b(&self, current: (u64, u64), new: (u64, u64)) -> ((u64, u64), bool) {
        let (lo, hi): (u64, u64);
        let ok: u8;
        // SAFETY: [1] `self` is a live, 16-byte aligned `KeySlot` (its type's alignment; slots
        // are only made by `table`, which checks the mapping's alignment), 16 bytes of writable
        // mapped memory; [2] that memory is only ever accessed atomically (two `AtomicU64` or
        // this 16-byte instruction, in every process), so the locked write races with nothing
        // non-atomic; [3] `supported()` was checked when the slots were made; [4] `rbx` (reserved
        // by the compiler, the instruction's implicit low new word) is swapped in from `rdi` and
        // restored after; the address and every other operand are pinned to registers the swap
        // does not touch, so the compiler cannot place any of them in `rbx`.
        unsafe {
            std::arch::asm!(
                "xchg rdi, rbx",
                "lock cmpxchg16b xmmword ptr [rsi]",
                "setz r8b",
                "mov rbx, rdi",
                in("rsi") self as *const KeySlot,
                inout("rdi") new.0 => _,
                out("r8b") ok,
                inout("rax") current.0 => lo,
                inout("rdx") current.1 => hi,
                in("rcx") new.1,
                options(nostack),
            );
        }
        ((lo, hi), ok != 0)
    }
}

#[cfg(target_arch = "x86_64")]
impl PairWord for KeySlot {
    #[inline(always)]
    fn load(&self) -> (u64, u64) {
        if features() & AVX != 0 {
            let (lo, hi): (u64, u64);
            // SAFETY: [1] as in `cmpxchg16b`: a live, 16-byte aligned slot of mapped memory only
            // accessed atomically; [2] the processor has AVX (checked just above), on which an
            // aligned 16-byte `vmovdqa` load is one atomic access; [3] the asm only reads.
            unsafe {
                std::arch::asm!(
                    "vmovdqa {pair}, xmmword ptr [{slot}]",
                    "vmovq {lo}, {pair}",
                    "vpextrq {hi}, {pair}, 1",
                    slot = in(reg) self as *const KeySlot,
                    pair = out(xmm_reg) _,
                    lo = out(reg) lo,
                    hi = out(reg) hi,
                    options(nostack, preserves_flags),
                );
            }
            (lo, hi)
        } else {
            // Compare with (0, 0): either the slot is (0, 0) and is rewritten unchanged, or the
            // compare fails and returns the pair; both atomically.
            self.cmpxchg16b((0, 0), (0, 0)).0
        }
    }

    #[inline(always)]
    fn cas(&self, current: (u64, u64), new: (u64, u64)) -> Result<(), (u64, u64)> {
        match self.cmpxchg16b(current, new) {
            (_, true) => Ok(()),
            (found, false) => Err(found),
        }
    }
}

/// The loom model of a slot: a mutex around the pair, i.e. a linearizable 16-byte load and
/// compare-and-swap, as the hardware provides.
#[cfg(test)]
pub(crate) struct LoomSlot(loom::sync::Mutex<(u64, u64)>);

#[cfg(test)]
impl LoomSlot {
    pub(crate) fn new(pair: (u64, u64)) -> LoomSlot {
        LoomSlot(loom::sync::Mutex::new(pair))
    }
}

#[cfg(test)]
impl PairWord for LoomSlot {
    fn load(&self) -> (u64, u64) {
        *self.0.lock().unwrap()
    }
    fn cas(&self, current: (u64, u64), new: (u64, u64)) -> Result<(), (u64, u64)> {
        let mut pair = self.0.lock().unwrap();
        if *pair == current {
            *pair = new;
            Ok(())
        } else {
            Err(*pair)
        }
    }
}

#[cfg(all(test, target_arch = "x86_64"))]
mod tests {
    use super::*;

    #[repr(C, align(16))]
    struct Words([AtomicU64; 4]);

    #[test]
    fn cas_replaces_the_whole_pair_or_reports_it() {
        let words = Words([
            AtomicU64::new(0),
            AtomicU64::new(0),
            AtomicU64::new(7),
            AtomicU64::new(9),
        ]);
        let slots = KeySlot::table(&words.0).expect("aligned, and cmpxchg16b on x86_64 hosts");
        assert_eq!(slots.len(), 2);
        assert_eq!(slots[1].load(), (7, 9));
        assert_eq!(slots[1].cas((7, 8), (1, 2)), Err((7, 9)));
        assert_eq!(slots[1].cas((6, 9), (1, 2)), Err((7, 9)));
        assert_eq!(slots[1].cas((7, 9), (u64::MAX, 1 << 63)), Ok(()));
        assert_eq!(slots[1].load(), (u64::MAX, 1 << 63));
        assert_eq!(slots[0].load(), (0, 0));
        assert_eq!(slots[0].cmpxchg16b((0, 0), (0, 0)), ((0, 0), true));
        assert!(KeySlot::table(&words.0[1..3]).is_none(), "misaligned");
    }

    #[test]
    fn concurrent_cas_increments_are_never_lost() {
        let words = std::sync::Arc::new(Words([
            AtomicU64::new(5),
            AtomicU64::new(0),
            AtomicU64::new(0),
            AtomicU64::new(0),
        ]));
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let words = std::sync::Arc::clone(&words);
                std::thread::spawn(move || {
                    let slot = &KeySlot::table(&words.0).unwrap()[0];
                    for _ in 0..20_000 {
                        let mut pair = slot.load();
                        // Both halves move together: a torn read would break `hi == lo - 5`.
                        while let Err(now) = slot.cas(pair, (pair.0 + 1, pair.1 + 1)) {
                            assert_eq!(now.1 + 5, now.0);
                            pair = now;
                        }
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        let slot = &KeySlot::table(&words.0).unwrap()[0];
        assert_eq!(slot.load(), (80_005, 80_000));
    }
}
