//! A fleet-managed token bucket's lease, as a C caller reads it: the share it was granted, the
//! fence it falls back to, the lease deadline, and which of the two its decisions use now
//! (`docs/fleet.md`).

use shmlimit::{Algorithm, FleetLease};

use super::boundary::{arg_out, arg_ref, ffi_boundary};
use super::{shmlimit_limit, shmlimit_status};

/// The lease of a fleet-managed token bucket at one instant (`shmlimit_limit_fleet_lease`).
///
/// A bucket that is not a fleet share (any other limit) reads as all zeros: `managed == 0`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
#[allow(non_camel_case_types)]
pub struct shmlimit_fleet_lease {
    /// 1: a fleet-managed token bucket (the other fields are its lease); 0: not one.
    pub managed: u32,
    /// 1: the lease deadline covers `now_ns`, decisions use the share; 0: they use the fence
    /// (the lease ran out, or was never granted, or the file was reset).
    pub leased: u32,
    /// The lease deadline, nanoseconds on the host's `CLOCK_MONOTONIC` (0: never leased, or
    /// reset).
    pub deadline_ns: u64,
    /// When this was read, nanoseconds on the host's `CLOCK_MONOTONIC`.
    pub now_ns: u64,
    /// The share this host was granted: capacity (tokens) and emission interval (ns per token).
    pub share_capacity: u64,
    /// See `share_capacity`.
    pub share_emission_ns: u64,
    /// The fence (the host's reserved minimum, or the floor): what decisions use once the
    /// deadline has passed.
    pub fence_capacity: u64,
    /// See `fence_capacity`.
    pub fence_emission_ns: u64,
    /// What a decision at `now_ns` used: the share while leased, else the fence.
    pub applied_capacity: u64,
    /// See `applied_capacity`.
    pub applied_emission_ns: u64,
}

/// A token bucket's capacity and emission interval (0, 0 for any other algorithm, which a fleet
/// lease never holds).
fn bucket(algorithm: Algorithm) -> (u64, u64) {
    match algorithm {
        Algorithm::TokenBucket {
            capacity,
            emission_ns,
        } => (capacity, emission_ns),
        _ => (0, 0),
    }
}

impl From<Option<FleetLease>> for shmlimit_fleet_lease {
    fn from(lease: Option<FleetLease>) -> Self {
        let Some(lease) = lease else {
            return shmlimit_fleet_lease::default();
        };
        let (share_capacity, share_emission_ns) = bucket(lease.share);
        let (fence_capacity, fence_emission_ns) = bucket(lease.fence);
        let (applied_capacity, applied_emission_ns) = bucket(lease.applied());
        shmlimit_fleet_lease {
            managed: 1,
            leased: u32::from(lease.leased),
            deadline_ns: lease.deadline_ns,
            now_ns: lease.now_ns,
            share_capacity,
            share_emission_ns,
            fence_capacity,
            fence_emission_ns,
            applied_capacity,
            applied_emission_ns,
        }
    }
}

/// Read the lease of a fleet-managed token bucket into `lease_out`: its share, its fence, the
/// lease deadline, and whether decisions now use the share (`leased == 1`) or the fence. Any
/// other limit (not a token bucket, or a bucket that is not a fleet share) reads as
/// `managed == 0` and zeros: not an error.
///
/// Errors: `SHMLIMIT_NULL_POINTER`, `SHMLIMIT_MISALIGNED_POINTER`, `SHMLIMIT_CORRUPT_STATE`
/// (a damaged parameter or fence slot), `SHMLIMIT_IO` (the fence was being rewritten and the
/// retune lock, taken to read it whole, could not be had).
///
/// Thread-safety: may be called concurrently with decisions, retunes and the fleet agent.
///
/// # Safety
///
/// `limit` must be NULL or a live handle; `lease_out` NULL or valid for one write.
#[no_mangle]
pub unsafe extern "C" fn shmlimit_limit_fleet_lease(
    limit: *const shmlimit_limit,
    lease_out: *mut shmlimit_fleet_lease,
) -> shmlimit_status {
    ffi_boundary!("shmlimit_limit_fleet_lease", {
        let out = arg_out("lease_out", lease_out)?;
        // SAFETY: a live handle (the caller's contract).
        let limit = unsafe { arg_ref("limit", limit) }?;
        let lease = shmlimit_fleet_lease::from(limit.inner.as_limit().fleet_lease()?);
        // SAFETY: `lease_out` is valid for one write (the caller's contract).
        unsafe { out.write(lease) };
        Ok(())
    })
}
