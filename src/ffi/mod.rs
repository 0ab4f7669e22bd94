//! The C ABI (`ffi/include/shmlimit.h`).
