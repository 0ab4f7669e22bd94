//! Waiting for a grant with a deadline: reservations on token buckets, exact sleeps on windows.
