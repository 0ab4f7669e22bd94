//! Concurrency (in-flight) limits with crash-safe permits.
