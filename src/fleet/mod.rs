//! Fleet budgets: per-host shares of one fleet-wide budget, allocated through Redis.
