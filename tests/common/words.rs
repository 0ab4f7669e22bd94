//! A limiter file as the tests damage, age and inspect it: native-endian 64-bit words numbered
//! from the start of the file, word `i` being bytes `8 i .. 8 i + 8` (the header's words as
//! the layout's word table numbers them; a region the file records as a byte offset starts at
//! word `offset / 8`, every region being 8-byte aligned).

use std::os::unix::fs::FileExt;
use std::path::Path;

/// Word `word` of the file at `path`.
pub fn read_word(path: &Path, word: u64) -> u64 {
    let mut bytes = [0u8; 8];
    std::fs::File::open(path)
        .unwrap_or_else(|e| panic!("open {}: {e}", path.display()))
        .read_exact_at(&mut bytes, word * 8)
        .unwrap_or_else(|e| panic!("read word {word} of {}: {e}", path.display()));
    u64::from_ne_bytes(bytes)
}

/// Overwrite word `word` of the file at `path` with `value`.
pub fn write_word(path: &Path, word: u64, value: u64) {
    std::fs::OpenOptions::new()
        .write(true)
        .open(path)
        .unwrap_or_else(|e| panic!("open {}: {e}", path.display()))
        .write_all_at(&value.to_ne_bytes(), word * 8)
        .unwrap_or_else(|e| panic!("write word {word} of {}: {e}", path.display()));
}
