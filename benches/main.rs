//! Criterion benchmarks: shmlimit against the floor and against what users would otherwise pick.
//! See docs/performance.md for the groups, the commands and the figures.
//!
//! Layout: `peers/` holds one module per contender behind the `peers::Contender` trait,
//! `harness` runs a contender from one or many threads or processes, and each group is a module
//! (`floor`, `uncontended`, `contention`, `algorithms`, `clocks`, `keyed`, `counters`, `composed`,
//! `hot_split`, `concurrency`, `c_abi`, `adaptive`). A new group is one more module and one line in `main`.

#![deny(unsafe_op_in_unsafe_fn)]
#![warn(clippy::undocumented_unsafe_blocks)]

mod adaptive;
mod algorithms;
mod c_abi;
mod clocks;
mod composed;
mod concurrency;
mod contention;
mod counters;
mod floor;
mod harness;
mod hot_split;
mod keyed;
mod peers;
mod uncontended;

use criterion::Criterion;

fn main() {
    // Kills a private redis-server, if one was started, however the run ends.
    let _redis = peers::redis_lua::ServerGuard;
    let mut c = Criterion::default().configure_from_args();
    floor::bench(&mut c);
    uncontended::bench(&mut c);
    contention::bench(&mut c);
    algorithms::bench(&mut c);
    clocks::bench(&mut c);
    keyed::bench(&mut c);
    counters::bench(&mut c);
    composed::bench(&mut c);
    hot_split::bench(&mut c);
    concurrency::bench(&mut c);
    c_abi::bench(&mut c);
    adaptive::bench(&mut c);
    c.final_summary();
}
