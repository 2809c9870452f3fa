//! The allocator on a real driver, under the validation layer, once per
//! memory architecture: memory-type choice, GPU data integrity across shared
//! blocks, out-of-memory fallbacks, object limits, budgets, images in the
//! types their bits allow, debug names. Any validation message fails a test.
//!
//! The tests sit in the files below, one concept each. This file holds what
//! several of them share: `buffer`, a buffer made by the create-and-bind
//! helper, and `MIB`.

use ash::vk;
use vk_suballoc::device::AshMemoryDevice;
use vk_suballoc::{Allocation, AllocationDesc, Allocator};

use super::allocator_setup::buffer_info;

#[path = "allocator_suite/allocation_callbacks.rs"]
mod allocation_callbacks;
#[path = "allocator_suite/driver_dedicated_memory.rs"]
mod driver_dedicated_memory;
#[path = "allocator_suite/existing_memory_only.rs"]
mod existing_memory_only;
#[path = "allocator_suite/failing_resource_calls.rs"]
mod failing_resource_calls;
#[path = "allocator_suite/gpu_data_integrity.rs"]
mod gpu_data_integrity;
#[path = "allocator_suite/host_transfers.rs"]
mod host_transfers;
#[path = "allocator_suite/memory_limits.rs"]
mod memory_limits;
#[path = "allocator_suite/memory_type_choice.rs"]
mod memory_type_choice;
#[path = "allocator_suite/min_alignment.rs"]
mod min_alignment;
#[path = "allocator_suite/refused_resources.rs"]
mod refused_resources;
#[path = "allocator_suite/reporting.rs"]
mod reporting;
#[path = "allocator_suite/requirements_from_create_info.rs"]
mod requirements_from_create_info;
#[path = "allocator_suite/shader_device_addresses.rs"]
mod shader_device_addresses;
#[path = "allocator_suite/strategy.rs"]
mod strategy;

const MIB: u64 = 1 << 20;

/// Creates a buffer with the helper; panics on error.
fn buffer(
    allocator: &Allocator<AshMemoryDevice>,
    size: u64,
    desc: AllocationDesc<'_>,
) -> (vk::Buffer, Allocation) {
    // SAFETY: a valid create info (non-zero size, transfer usage).
    unsafe { allocator.create_buffer(&buffer_info(size), &desc) }.unwrap()
}
