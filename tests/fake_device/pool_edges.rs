//! Custom pools at their edges: handles after many pool lifetimes, the
//! last slot, pools made and destroyed while others allocate or wait for
//! the driver, small buffers in a capped pool, error order, lazily
//! allocated and protected types.
//!
//! The tests sit in the files below by what they check: pool handles and
//! slots (`handles.rs`), pools made, used and destroyed by several threads
//! at once (`concurrent_calls.rs`), a pool's blocks at its caps, its
//! `min_blocks` and its fixed block size (`sizes_and_capacity.rs`), the
//! order of a pool request's checks (`request_checks.rs`), and pools on
//! lazily allocated and protected memory types
//! (`lazy_and_protected_types.rs`). This file holds what several of them
//! share: `MIB`, `upload_in` and `vram_in`.

use ash::vk;
use vk_suballoc::{AllocationDesc, Pool, Request, ResourceKind, Usage};

use super::requirements;

#[path = "pool_edges/concurrent_calls.rs"]
mod concurrent_calls;
#[path = "pool_edges/handles.rs"]
mod handles;
#[path = "pool_edges/lazy_and_protected_types.rs"]
mod lazy_and_protected_types;
#[path = "pool_edges/request_checks.rs"]
mod request_checks;
#[path = "pool_edges/sizes_and_capacity.rs"]
mod sizes_and_capacity;

const MIB: u64 = 1 << 20;

/// An upload (host-written) buffer request from `pool`, for a buffer whose
/// `memoryTypeBits` allow `memory_type` only.
fn upload_in(pool: Pool, size: u64, memory_type: u32) -> Request<'static> {
    let desc = AllocationDesc::new(Usage::UPLOAD).pool(pool);
    let requirements = vk::MemoryRequirements {
        size,
        alignment: 4,
        memory_type_bits: 1 << memory_type,
    };
    Request::with_desc(requirements, ResourceKind::Buffer, desc)
}

/// A device-local 1 MiB buffer request from `pool`.
fn vram_in(pool: Pool) -> Request<'static> {
    let desc = AllocationDesc::new(Usage::DEVICE_LOCAL).pool(pool);
    Request::with_desc(requirements(MIB, 256), ResourceKind::Buffer, desc)
}
