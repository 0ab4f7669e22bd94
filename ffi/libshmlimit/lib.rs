//! `libshmlimit.so` and `libshmlimit.a`: the C library.
//!
//! The exports are the `#[no_mangle] extern "C"` functions of the `shmlimit-ffi` crate
//! (`ffi/src/`, declared by `ffi/include/shmlimit.h`); linking that crate here makes them the
//! exported symbols of the shared library and puts them, with everything they call, in the
//! static one. Nothing else is defined here.

pub use shmlimit_ffi::*;
