//! [`Words`]: a run of words inside a mapping that a handle keeps without borrowing the mapping.
//!
//! A handle owns (through an `Arc`) the [`Mapped`] its limit lives in, and reaches its words on
//! every decision: a `&[AtomicU64]` into the mapping would borrow the very value the handle
//! owns, so it keeps the address instead. This module is the one place that does: a `Words`
//! is made only by [`Mapped::unbound_words`], an `unsafe fn` whose caller promises to keep the
//! mapping alive as long as the `Words` (by holding its owner beside it), and hands out only
//! `&AtomicU64`, which is `Sync`. So the handles need no `unsafe impl Send` / `Sync` of their
//! own.

use std::ptr::NonNull;
use std::sync::atomic::AtomicU64;

use super::Mapped;

/// `len` aligned words of a live mapping (see the module docs).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Words {
    first: NonNull<AtomicU64>,
    len: usize,
}

// SAFETY: a `Words` points into a mapping its maker keeps alive as long as every copy (the
// contract of `Mapped::unbound_words`), and only gives out `&AtomicU64`: every access through it
// is atomic, so sending it to or sharing it with another thread is as safe as sharing the slice.
unsafe impl Send for Words {}
// SAFETY: as for Send.
unsafe impl Sync for Words {}

impl Words {
    /// The words, as a slice.
    #[inline(always)]
    pub(crate) fn slice(&self) -> &[AtomicU64] {
        // SAFETY: `first` and `len` come from a bounds-checked, aligned slice of a mapping that
        // outlives `self` (the contract of `Mapped::unbound_words`).
        unsafe { std::slice::from_raw_parts(self.first.as_ptr(), self.len) }
    }

    /// Word `i` (`i < len`).
    #[inline(always)]
    pub(crate) fn word(&self, i: usize) -> &AtomicU64 {
        debug_assert!(i < self.len);
        // SAFETY: as in `slice`; every caller passes an index below `len` (the layout's
        // constants for a control line, validated offsets for a region), checked in debug builds.
        unsafe { &*self.first.as_ptr().add(i) }
    }

    /// The address of word `i`, for a thread-local cache of a position in the words (it is
    /// turned back into a reference only while the words are known to be live).
    #[inline(always)]
    pub(crate) fn addr_of(&self, i: usize) -> *const AtomicU64 {
        self.word(i) as *const AtomicU64
    }
}

impl Mapped {
    /// `count` words from byte `offset`, kept without borrowing the mapping.
    ///
    /// # Safety
    ///
    /// The returned [`Words`] (and its copies) must not be used after this mapping is dropped:
    /// keep it beside an owner of the mapping (the `Arc` that holds it), as the handles do.
    ///
    /// # Panics
    ///
    /// As [`Mapped::words`].
    pub(crate) unsafe fn unbound_words(&self, offset: usize, count: usize) -> Words {
        let words = self.words(offset, count);
        Words {
            first: NonNull::from(words).cast(),
            len: count,
        }
    }
}
