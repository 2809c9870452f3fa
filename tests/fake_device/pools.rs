//! Custom pools: blocks of one memory type set apart, with a fixed block
//! size and limits on their number. Checked against the fake device's own
//! count of memory objects and against `stats()`.
//!
//! The tests sit in the files below by what they check: a pool's capacity,
//! the requests it takes, its life from description to destruction, its
//! priority and the moves planned in it. This file holds the helpers they
//! share: MIB, the discrete layout's device-local type, a request from a
//! pool and the count of the fake device's memory objects.

use vk_suballoc::{AllocationDesc, Pool, Request, ResourceKind, Usage};

use super::requirements;
use super::FakeDevice;

#[path = "pools/capacity.rs"]
mod capacity;
#[path = "pools/lifecycle.rs"]
mod lifecycle;
#[path = "pools/min_alignment.rs"]
mod min_alignment;
#[path = "pools/planned_moves.rs"]
mod planned_moves;
#[path = "pools/priorities.rs"]
mod priorities;
#[path = "pools/requests.rs"]
mod requests;

const MIB: u64 = 1 << 20;

/// The discrete layout's device-local type.
const VRAM: u32 = 1;

/// A device-local buffer request from `pool`.
fn in_pool(pool: Pool, size: u64) -> Request<'static> {
    let desc = AllocationDesc::new(Usage::DEVICE_LOCAL).pool(pool);
    Request::with_desc(requirements(size, 256), ResourceKind::Buffer, desc)
}

/// Memory objects the fake device holds now.
fn objects(device: &FakeDevice) -> usize {
    device.live_allocations().len()
}
