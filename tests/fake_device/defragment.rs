//! Defragmentation: plans that empty whole blocks, carried out as an engine
//! would (new allocation in use, old one freed), checked against the blocks
//! the allocator reports.
//!
//! The tests sit in the files below by what they check. This file holds the
//! helpers they share, `movables` and `keep_where` used by other modules
//! too: buffers of 1 MiB that fill the first blocks, fragmented blocks,
//! allocations listed as movables, a plan carried out as an engine would,
//! and the checks of what is left.

use std::collections::HashMap;

use ash::vk;
use vk_suballoc::device::fake::{FakeDevice, FakeLayout};
use vk_suballoc::{
    Allocation, AllocationDesc, Config, DefragmentationPlan, Movable, Pool, PoolDesc, Request,
    ResourceKind, Usage,
};

use super::FakeAllocator;
use super::{allocator_with, buffer, free, requirements};

#[path = "defragment/bad_movables.rs"]
mod bad_movables;
#[path = "defragment/compaction.rs"]
mod compaction;
#[path = "defragment/emptying_choice.rs"]
mod emptying_choice;
#[path = "defragment/limits.rs"]
mod limits;
#[path = "defragment/move_placement.rs"]
mod move_placement;
#[path = "defragment/pending_moves.rs"]
mod pending_moves;
#[path = "defragment/random_plans.rs"]
mod random_plans;
#[path = "defragment/retirement.rs"]
mod retirement;
#[path = "defragment/retiring_reuse.rs"]
mod retiring_reuse;
#[path = "defragment/run_slots.rs"]
mod run_slots;

const MIB: u64 = 1 << 20;

/// An allocator over `layout` whose large heaps take blocks of 16 MiB, and
/// its device.
fn allocator_with_16_mib_blocks(layout: FakeLayout) -> (FakeAllocator, FakeDevice) {
    let config = Config {
        large_heap_block_size: 16 * MIB,
        ..Config::default()
    };
    allocator_with(layout, config)
}

/// Every allocation of `live` as a movable buffer of its own size,
/// aligned to 256.
pub(super) fn movables(live: &[Allocation]) -> Vec<Movable<'_>> {
    live.iter()
        .map(|a| Movable::new(a, requirements(a.size(), 256), ResourceKind::Buffer))
        .collect()
}

/// Carries `plan` out over `live`: each moved allocation is replaced by its
/// destination and freed, as an engine does once its copy finished.
/// Returns the memory objects the moves left.
fn carry_out(
    allocator: &FakeAllocator,
    live: &mut [Allocation],
    plan: DefragmentationPlan,
) -> Vec<vk::DeviceMemory> {
    let mut sources = Vec::new();
    for planned in plan.moves.into_iter().rev() {
        let old = std::mem::replace(&mut live[planned.movable], planned.destination);
        sources.push(old.memory());
        free(allocator, old);
    }
    sources
}

/// `count` device-local buffers of 1 MiB, aligned to 256, in allocation
/// order: the first 32 fill a 32 MiB first block, the next 64 a 64 MiB one.
fn mib_buffers(allocator: &FakeAllocator, count: usize) -> Vec<Allocation> {
    (0..count)
        .map(|_| {
            allocator
                .allocate(&buffer(MIB, 256, Usage::DEVICE_LOCAL))
                .unwrap()
        })
        .collect()
}

/// The allocations of `all` whose index `keep` accepts; the others freed.
pub(super) fn keep_where(
    allocator: &FakeAllocator,
    all: Vec<Allocation>,
    keep: impl Fn(usize) -> bool,
) -> Vec<Allocation> {
    let mut kept = Vec::new();
    for (i, a) in all.into_iter().enumerate() {
        if keep(i) {
            kept.push(a);
        } else {
            free(allocator, a);
        }
    }
    kept
}

/// A custom pool of `memory_type` with two 8 MiB blocks (at most): the
/// first full of 1 MiB buffers but for two holes, the second holding two
/// buffers, which fit in the holes. Returns the pool, its live buffers
/// (the first block's 6, then the second's 2) and its second block.
fn custom_pool_with_a_sparse_block(
    allocator: &FakeAllocator,
    memory_type: u32,
) -> (Pool, Vec<Allocation>, vk::DeviceMemory) {
    let pool = allocator
        .create_pool(&PoolDesc::new(memory_type).block_size(8 * MIB).max_blocks(2))
        .unwrap();
    let in_pool = || {
        let desc = AllocationDesc::new(Usage::DEVICE_LOCAL).pool(pool);
        Request::with_desc(requirements(MIB, 256), ResourceKind::Buffer, desc)
    };
    let all: Vec<Allocation> = (0..10)
        .map(|_| allocator.allocate(&in_pool()).unwrap())
        .collect();
    let sparse = all[8].memory();
    assert_ne!(sparse, all[0].memory());
    (
        pool,
        keep_where(allocator, all, |i| i != 2 && i != 5),
        sparse,
    )
}

/// No two live allocations of one memory object overlap.
fn assert_disjoint<'a>(live: impl IntoIterator<Item = &'a Allocation>, context: &str) {
    let mut by_memory: HashMap<vk::DeviceMemory, Vec<(u64, u64)>> = HashMap::new();
    for a in live {
        by_memory
            .entry(a.memory())
            .or_default()
            .push((a.offset(), a.offset() + a.size()));
    }
    for ranges in by_memory.values_mut() {
        ranges.sort_unstable();
        for pair in ranges.windows(2) {
            assert!(pair[0].1 <= pair[1].0, "{context}: {pair:?} overlap");
        }
    }
}

/// The device-local type's block figures: (blocks, bytes, empty blocks).
fn blocks(allocator: &FakeAllocator, memory_type: u32) -> (u64, u64, u64) {
    let stats = allocator.stats().memory_types[memory_type as usize];
    (stats.blocks, stats.block_bytes, stats.empty_blocks)
}

/// Two blocks of 1 MiB buffers with holes, as in
/// [`a_plan_empties_the_least_used_block`]: the live ones, the first
/// block's 16 and then the second's 8.
fn two_fragmented_blocks(allocator: &FakeAllocator) -> Vec<Allocation> {
    let all = mib_buffers(allocator, 64);
    keep_where(allocator, all, |i| (i < 32 && i % 2 == 0) || i >= 56)
}

/// Two fragmented blocks ([`two_fragmented_blocks`]), the second also
/// holding a run of 10 small buffers (100 bytes aligned to 16), listed
/// last: the first block's 16 1 MiB buffers, the second's 8, then the 10.
fn blocks_with_a_run(allocator: &FakeAllocator) -> Vec<Allocation> {
    let mut live = two_fragmented_blocks(allocator);
    // A run goes to the first block with room: fill the first block's
    // holes, so that the small buffers' run is carved from the second.
    let fillers = mib_buffers(allocator, 16);
    let (first, second) = (live[0].memory(), live[16].memory());
    assert!(fillers.iter().all(|a| a.memory() == first));
    let small: Vec<Allocation> = (0..10)
        .map(|_| {
            allocator
                .allocate(&buffer(100, 16, Usage::DEVICE_LOCAL))
                .unwrap()
        })
        .collect();
    assert!(small.iter().all(|a| a.memory() == second));
    // Holes in the first block again.
    for a in fillers {
        free(allocator, a);
    }
    live.extend(small);
    live
}

/// [`blocks_with_a_run`]'s allocations as movables.
fn movables_of_run_blocks(live: &[Allocation]) -> Vec<Movable<'_>> {
    live.iter()
        .map(|a| {
            let alignment = if a.size() == 100 { 16 } else { 256 };
            Movable::new(a, requirements(a.size(), alignment), ResourceKind::Buffer)
        })
        .collect()
}
