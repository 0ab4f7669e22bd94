//! Unit tests of the file layout: definition records round trip, slot geometry.

use super::*;
use crate::spec::Algorithm;

#[test]
fn records_round_trip() {
    let mut def = LimitDef::new(
        "search.v2",
        Algorithm::FixedWindow {
            limit: 100,
            window_ns: 60_000_000_000,
            alignment: Alignment::Monotonic,
        },
    );
    def.keyed = Some(Keyed::new(1024).on_full(FullPolicy::Error));
    def.shadow = true;
    def.near_limit = 777;
    let w = encode_def(&def, (8192, 128));
    let (back, slot) = decode_def(&w).unwrap();
    assert_eq!(back, def);
    assert_eq!(slot, (8192, 128));
}

#[test]
fn geometry_keeps_limits_on_their_own_lines() {
    let defs: Vec<LimitDef> = (0..3)
        .map(|i| {
            LimitDef::new(
                format!("l{i}"),
                Algorithm::SlidingLog {
                    limit: 17,
                    window_ns: 1_000_000,
                },
            )
        })
        .collect();
    let g = Geometry::compute(&defs);
    for &(off, len) in &g.slots {
        assert_eq!(off % LINE, 0);
        assert_eq!(len, LINE + 256);
    }
    assert_eq!(g.file_size % PAGE, 0);
    assert!(g.stats_offset >= g.slots_offset + g.slots_len);
}

/// A keyed adaptive limit's record round-trips, and its slot holds its control line, key
/// table, `slots x max` permit entries and four words per key slot, each to a whole line.
#[test]
fn keyed_adaptive_records_and_slots() {
    let spec = crate::spec::Adaptive {
        min: 2,
        max: 5,
        initial: 3,
        lease_ns: 0,
        window_ms: 20,
        smoothing: 13107,
        backoff: 58982,
        headroom: 6554,
        tolerance: 4096,
    };
    let mut def = LimitDef::new("per_host", Algorithm::AdaptiveConcurrency(spec));
    def.keyed = Some(Keyed::new(16));
    let (back, _) = decode_def(&encode_def(&def, (4096, 128))).unwrap();
    assert_eq!(back, def);
    let keys = 16 * KEY_SLOT;
    let entries = round_up(16 * 5 * PERMIT_SLOT, LINE);
    let words = round_up(16 * KEY_ADAPTIVE_WORDS * 8, LINE);
    assert_eq!(slot_bytes(&def), LINE + keys + entries + words);
    assert_eq!(keyed_adaptive_words(16, 5) * 8, keys + entries);
}
