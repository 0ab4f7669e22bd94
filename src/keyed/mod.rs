//! Keyed limits: one state per key in a lock-free open-addressing table in the file.

use std::sync::atomic::Ordering;

use crate::algo::gcra::Gcra;
use crate::clock::Clock;
use crate::error::Result;
use crate::file::layout::KEY_SLOT;
use crate::limiter::Limit;

/// Move every key's bucket state to parameter slot `tag` (a live retune of a keyed bucket).
/// Runs under the retune lock, so no other retune overwrites the old slot meanwhile.
pub(crate) fn rescale_all<C: Clock>(
    limit: &Limit<C>,
    old: Gcra,
    new: Gcra,
    tag: usize,
) -> Result<()> {
    let table = limit.area();
    for slot in table.chunks_exact(KEY_SLOT / 8) {
        // Acquire: pairs with the CAS that claimed the slot for its key.
        if slot[0].load(Ordering::Acquire) != 0 {
            limit.rescale_in(&slot[1], old, new, tag)?;
        }
    }
    Ok(())
}
