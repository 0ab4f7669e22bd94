//! What the bindings of shmlimit share, written once in Rust.
//!
//! The C ABI (`shmlimit-ffi`, `libshmlimit.so`) and the Python extension (`shmlimit-python`,
//! `shmlimit._native`) resolve a limit by name alone and let a caller try any operation on it:
//! [`handle::AnyHandle`] holds the library's typed handle of the limit's kind and answers an
//! operation of another kind with the library's own error and text. [`status`] is the one table
//! of status codes: the C header's enum, the Python exception classes and their codes come
//! from it.

#![deny(unsafe_op_in_unsafe_fn)]
#![warn(missing_docs, clippy::undocumented_unsafe_blocks)]

pub mod handle;
pub mod status;
