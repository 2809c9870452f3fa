//! Memory-type choice, blocks, dedicated memory, empty blocks and trim, and
//! the entry points that place and free memory agreeing on all of them.
//!
//! The tests sit in the files below, one concept each. This file holds what
//! the tests of kept empty blocks share: 20 MiB device-local buffers, which
//! fill the discrete layout's blocks of 64, 128 and 256 MiB, and a free of
//! them all.

use vk_suballoc::{Allocation, Request, Usage};

use super::{buffer, free, FakeAllocator};

#[path = "allocation_paths/allocate_many.rs"]
mod allocate_many;
#[path = "allocation_paths/blocks.rs"]
mod blocks;
#[path = "allocation_paths/dedicated_memory.rs"]
mod dedicated_memory;
#[path = "allocation_paths/entry_points.rs"]
mod entry_points;
#[path = "allocation_paths/existing_memory_only.rs"]
mod existing_memory_only;
#[path = "allocation_paths/fake_device_rules.rs"]
mod fake_device_rules;
#[path = "allocation_paths/kept_blocks_giving_way.rs"]
mod kept_blocks_giving_way;
#[path = "allocation_paths/kept_empty_blocks.rs"]
mod kept_empty_blocks;
#[path = "allocation_paths/memory_type_choice.rs"]
mod memory_type_choice;
#[path = "allocation_paths/min_alignment.rs"]
mod min_alignment;
#[path = "allocation_paths/property_flags.rs"]
mod property_flags;
#[path = "allocation_paths/strategy.rs"]
mod strategy;

const MIB: u64 = 1 << 20;

/// A 20 MiB buffer for the discrete layout's device-local type (1).
fn twenty_mib() -> Request<'static> {
    buffer(20 * MIB, 256, Usage::DEVICE_LOCAL)
}

/// `count` 20 MiB device-local buffers.
fn twenty_mib_buffers(allocator: &FakeAllocator, count: usize) -> Vec<Allocation> {
    (0..count)
        .map(|_| allocator.allocate(&twenty_mib()).unwrap())
        .collect()
}

/// Frees every allocation of `allocations`.
fn free_all(allocator: &FakeAllocator, allocations: Vec<Allocation>) {
    for allocation in allocations {
        free(allocator, allocation);
    }
}
