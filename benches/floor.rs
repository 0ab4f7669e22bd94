//! The floor: what a decision cannot go below on this machine.
//!
//! `floor/clock_monotonic` and `floor/cas_local` are the two parts of a decision, `floor/clock_and_cas`
//! both together, and `floor/c_reference` the whole GCRA in plain C. The multi-process C floor
//! runs in the contention groups, next to shmlimit.
//!
//! `floor/keyed_slot_cas_<keys>` is the memory floor of a keyed decision: one 16-byte atomic load
//! and one `lock cmpxchg16b` of a random slot of a file mapping (in `/dev/shm`, like a limiter
//! file) the size of the key table `keyed_token_bucket_*/keyed/<keys>` decides in
//! (`Keyed::new(2 x keys)` slots of 16 bytes), with the instructions the table uses (`vmovdqa`,
//! `lock cmpxchg16b`). The slot indices are uniform, computed before measuring as the keyed
//! group's are, and each step's address depends on the previous step's CAS result, so the
//! figure is the latency of one cache (and TLB) miss plus one locked 16-byte CAS, not the
//! throughput of overlapped misses. No clock read, no hashing, no algorithm. As in the keyed
//! group (whose worker is made per sample), the walk through the sequence restarts at each
//! sample: both see the same first indices, and both have cache-warm short samples.

use std::hint::black_box;
use std::sync::atomic::{AtomicU64, Ordering};

use criterion::{BenchmarkGroup, Criterion};
use shmlimit::{Clock, CoarseMonotonicClock, MonotonicClock};

use crate::peers::c_reference::CReference;
use crate::peers::{prime, Contender, Workload};

/// Register the group.
pub fn bench(c: &mut Criterion) {
    let mut group = c.benchmark_group("floor");
    group.bench_function("clock_monotonic", |b| b.iter(|| MonotonicClock.now_ns()));
    group.bench_function("clock_monotonic_coarse", |b| {
        b.iter(|| CoarseMonotonicClock.now_ns())
    });
    let word = AtomicU64::new(0);
    group.bench_function("cas_local", |b| {
        b.iter(|| {
            // Acquire load, AcqRel CAS: the orderings a decision uses, on a private word.
            let current = black_box(&word).load(Ordering::Acquire);
            word.compare_exchange(current, current + 1, Ordering::AcqRel, Ordering::Acquire)
        })
    });
    group.bench_function("clock_and_cas", |b| {
        b.iter(|| {
            let current = black_box(&word).load(Ordering::Acquire);
            let now = MonotonicClock.now_ns();
            word.compare_exchange(current, now, Ordering::AcqRel, Ordering::Acquire)
        })
    });
    let mut reference = None;
    group.bench_function("c_reference", |b| {
        let reference = reference.get_or_insert_with(|| {
            let r = CReference::new(Workload::Admit);
            prime("c_reference", &r, Workload::Admit, 0);
            r
        });
        let mut worker = reference.worker();
        b.iter(|| CReference::decide(&mut worker))
    });
    #[cfg(target_arch = "x86_64")]
    slot::bench(&mut group, 1_000_000);
    group.finish();
}

/// `floor/keyed_slot_cas_<keys>`: see the module docs.
#[cfg(target_arch = "x86_64")]
mod slot {
    use std::fs::OpenOptions;
    use std::hint::black_box;

    use criterion::measurement::WallTime;
    use memmap2::MmapRaw;
    use shmlimit::Keyed;
    use tempfile::TempDir;

    use super::BenchmarkGroup;
    use crate::peers::keyed::{splitmix, SEQUENCE_LEN};
    use crate::peers::{file_in, scratch_dir};

    /// Bytes of one key slot, `[tag, state]`.
    const SLOT: usize = 16;

    /// The pair at `slot`, read with one aligned 16-byte `vmovdqa` (atomic on processors with
    /// AVX), as the key table reads a slot.
    ///
    /// # Safety
    ///
    /// `slot` is 16-byte aligned and points to 16 bytes of mapped memory only accessed
    /// atomically; the processor has AVX.
    #[inline(always)]
    unsafe fn load(slot: *const u8) -> (u64, u64) {
        let (lo, hi): (u64, u64);
        // SAFETY: the caller's contract: an aligned, live, atomically accessed 16-byte slot on a
        // processor with AVX; the asm only reads.
        unsafe {
            std::arch::asm!(
                "vmovdqa {pair}, xmmword ptr [{slot}]",
                "vmovq {lo}, {pair}",
                "vpextrq {hi}, {pair}, 1",
                slot = in(reg) slot,
                pair = out(xmm_reg) _,
                lo = out(reg) lo,
                hi = out(reg) hi,
                options(nostack, preserves_flags),
            );
        }
        (lo, hi)
    }

    /// `lock cmpxchg16b` of the pair at `slot` from `current` to `new`: the pair found, and
    /// whether it was replaced.
    ///
    /// # Safety
    ///
    /// `slot` is 16-byte aligned and points to 16 bytes of writable mapped memory only accessed
    /// atomically; the processor has `cmpxchg16b`.
    #[inline(always)]
    unsafe fn cas(slot: *const u8, current: (u64, u64), new: (u64, u64)) -> ((u64, u64), bool) {
        let (lo, hi): (u64, u64);
        let ok: u8;
        // SAFETY: the caller's contract (aligned, writable, atomically accessed, cmpxchg16b
        // present); `rbx` (reserved by the compiler, the instruction's implicit low new word) is
        // swapped in from `rdi` and restored after, and every other operand is pinned to a
        // register the swap does not touch: the same sequence as the key table's.
        unsafe {
            std::arch::asm!(
                "xchg rdi, rbx",
                "lock cmpxchg16b xmmword ptr [rsi]",
                "setz r8b",
                "mov rbx, rdi",
                in("rsi") slot,
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

    /// The mapped slots of a table for `keys` keys, every slot holding a pair, and the indices
    /// decided on.
    struct Slots {
        map: MmapRaw,
        sequence: Vec<u32>,
        _dir: TempDir,
    }

    impl Slots {
        fn new(keys: usize) -> Slots {
            // The table the keyed group decides in: `Keyed::new(2 x keys)`, rounded up to a
            // power of two slots.
            let slots = Keyed::new(2 * keys as u64).slots() as usize;
            let dir = scratch_dir();
            let file = OpenOptions::new()
                .read(true)
                .write(true)
                .create_new(true)
                .open(file_in(&dir, "keyed_slot_floor"))
                .expect("create the slot file");
            file.set_len((slots * SLOT) as u64)
                .expect("size the slot file");
            let map = MmapRaw::map_raw(&file).expect("map the slot file");
            let base = map.as_mut_ptr();
            assert_eq!(base as usize % SLOT, 0, "a mapping is page-aligned");
            // Every slot holds a pair (every page allocated before measuring, as a populated
            // table's are).
            let mut rng = 0x5eed_u64;
            for i in 0..slots {
                // SAFETY: in bounds of the mapping (`slots * SLOT` bytes); nothing else maps the
                // file or touches the mapping yet, so plain writes race with nothing.
                unsafe {
                    let slot = base.add(i * SLOT).cast::<u64>();
                    slot.write(splitmix(&mut rng) | 1);
                    slot.add(1).write(splitmix(&mut rng));
                }
            }
            let sequence = (0..SEQUENCE_LEN)
                .map(|_| (splitmix(&mut rng) % slots as u64) as u32)
                .collect();
            Slots {
                map,
                sequence,
                _dir: dir,
            }
        }
    }

    /// Register `keyed_slot_cas_<keys>` in `group` (the mapping is made when it first runs).
    pub fn bench(group: &mut BenchmarkGroup<'_, WallTime>, keys: usize) {
        if !std::is_x86_feature_detected!("avx") || !std::is_x86_feature_detected!("cmpxchg16b") {
            eprintln!(
                "notice: floor/keyed_slot_cas skipped: the processor lacks AVX or cmpxchg16b"
            );
            return;
        }
        let mut slots: Option<Slots> = None;
        // Zero, but not known to be zero when compiled: ANDed with the CAS result, it makes
        // each index depend on the previous step without changing it.
        let zero = black_box(0usize);
        group.bench_function(format!("keyed_slot_cas_{keys}"), |b| {
            let slots = slots.get_or_insert_with(|| Slots::new(keys));
            let (base, sequence) = (slots.map.as_mut_ptr(), &slots.sequence);
            let mut next = 0usize;
            let mut carry = 0usize;
            b.iter(|| {
                let index = sequence[next] as usize ^ carry;
                next = (next + 1) & (SEQUENCE_LEN - 1);
                // SAFETY: `index` is below the slot count (the sequence's values are, and
                // `carry` is 0), so the slot is 16-byte aligned and in the mapping, which is only
                // accessed through these two atomic instructions from here on; AVX and
                // cmpxchg16b were checked.
                let (found, ok) = unsafe {
                    let slot = base.add(index * SLOT).cast_const();
                    let pair = load(slot);
                    cas(slot, pair, (pair.0, pair.1.wrapping_add(1)))
                };
                carry = (found.1 as usize ^ ok as usize) & zero;
                ok
            })
        });
    }
}
