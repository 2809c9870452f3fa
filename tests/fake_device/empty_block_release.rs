//! Releases of many empty blocks at once (`trim`, `end_frame`'s aged
//! blocks, a request short of memory objects): each unlinked its block
//! from the first-fit order with a pass over it, O(released × blocks);
//! now one pass unlinks them all. These check that the pool stays as it
//! was: the blocks that stay keep their order (new requests fill them
//! first to last, as first fit does, making no block), every released
//! memory object is freed once, and none leaks.

use std::collections::HashSet;

use ash::vk;
use vk_suballoc::device::fake::{FakeDevice, FakeLayout};
use vk_suballoc::{Allocation, Config, Usage};

use super::frames::end_frame;
use super::{allocator_with, buffer, finish, free, FakeAllocator};

const KIB: u64 = 1 << 10;

/// Blocks made, each holding one allocation.
const BLOCKS: usize = 2000;

/// Every `KEEP_EVERY`-th allocation stays; the others' blocks empty.
const KEEP_EVERY: usize = 100;

/// 1 MiB blocks, no small-buffer runs, and empty blocks kept without
/// limit while any block holds an allocation.
fn config() -> Config {
    Config {
        large_heap_block_size: 1024 * KIB,
        small_buffer_limit: 0,
        empty_block_reserve: 1e9,
        ..Config::default()
    }
}

/// Makes `BLOCKS` blocks of 1 MiB, two 512 KiB allocations in each (no
/// larger request takes a block rather than dedicated memory), then frees
/// both of each but every `KEEP_EVERY`-th block's second: the others
/// stay, empty. Returns the kept allocations' memory objects, in the
/// order their blocks were made, and the allocations.
fn many_empty_blocks(
    allocator: &FakeAllocator,
    device: &FakeDevice,
) -> (Vec<vk::DeviceMemory>, Vec<Allocation>) {
    let made: Vec<Allocation> = (0..2 * BLOCKS)
        .map(|_| {
            allocator
                .allocate(&buffer(512 * KIB, 256, Usage::DEVICE_LOCAL))
                .unwrap()
        })
        .collect();
    let memory_type = made[0].memory_type() as usize;
    let distinct: HashSet<vk::DeviceMemory> = made.iter().map(Allocation::memory).collect();
    assert_eq!(distinct.len(), BLOCKS);
    let mut kept = Vec::new();
    for (i, a) in made.into_iter().enumerate() {
        if i % (2 * KEEP_EVERY) == 0 {
            kept.push(a);
        } else {
            free(allocator, a);
        }
    }
    let stats = allocator.stats().memory_types[memory_type];
    assert_eq!(stats.blocks as usize, BLOCKS);
    assert_eq!(stats.empty_blocks as usize, BLOCKS - kept.len());
    assert_eq!(device.live_allocations().len(), BLOCKS);
    (kept.iter().map(Allocation::memory).collect(), kept)
}

/// Once the empty blocks are released: 100 KiB requests fill the kept
/// blocks' room first to last, in the order they were made, and make no
/// block; then everything is freed and the device reports no leak.
fn requests_fill_the_kept_blocks_in_order(
    allocator: FakeAllocator,
    device: &FakeDevice,
    memories: &[vk::DeviceMemory],
    kept: Vec<Allocation>,
) {
    let live = device.live_allocations().len();
    let mut last = 0;
    let mut small = Vec::new();
    // Each kept block has room for five.
    for _ in 0..memories.len() * 5 {
        let a = allocator
            .allocate(&buffer(100 * KIB, 256, Usage::DEVICE_LOCAL))
            .unwrap();
        let at = memories
            .iter()
            .position(|&memory| memory == a.memory())
            .expect("a request lands in a kept block");
        assert!(
            at >= last,
            "block {at} after block {last}: first fit out of order"
        );
        last = at;
        small.push(a);
    }
    assert_eq!(last, memories.len() - 1);
    assert_eq!(device.live_allocations().len(), live);
    for a in small.into_iter().chain(kept) {
        free(&allocator, a);
    }
    finish(allocator, device);
}

/// `trim` releases the 1980 empty blocks at once.
#[test]
fn trim_releases_many_empty_blocks() {
    let (allocator, device) = allocator_with(FakeLayout::discrete(), config());
    let (memories, kept) = many_empty_blocks(&allocator, &device);
    let released = allocator.trim();
    assert_eq!(released, ((BLOCKS - kept.len()) as u64) * 1024 * KIB);
    assert_eq!(device.live_allocations().len(), kept.len());
    let memory_type = kept[0].memory_type() as usize;
    let stats = allocator.stats().memory_types[memory_type];
    assert_eq!((stats.blocks as usize, stats.empty_blocks), (kept.len(), 0));
    requests_fill_the_kept_blocks_in_order(allocator, &device, &memories, kept);
}

/// `end_frame` releases the empty blocks aged `empty_block_frames`
/// frames at once, all but the largest (the last emptied of its size).
#[test]
fn end_frame_releases_many_aged_blocks() {
    let config = Config {
        empty_block_frames: 1,
        ..config()
    };
    let (allocator, device) = allocator_with(FakeLayout::discrete(), config);
    let (memories, kept) = many_empty_blocks(&allocator, &device);
    for _ in 0..2 {
        device.signal_fence(end_frame(&allocator, &device));
    }
    allocator.collect().unwrap();
    assert_eq!(device.live_allocations().len(), kept.len() + 1);
    let memory_type = kept[0].memory_type() as usize;
    let stats = allocator.stats().memory_types[memory_type];
    assert_eq!(
        (stats.blocks as usize, stats.empty_blocks),
        (kept.len() + 1, 1)
    );
    requests_fill_the_kept_blocks_in_order(allocator, &device, &memories, kept);
}

/// A request that needs a block when the device allows no more memory
/// objects releases the kept empty blocks, all but the largest, at once,
/// then makes its block.
#[test]
fn a_request_short_of_memory_objects_releases_many_empty_blocks() {
    let layout = FakeLayout::discrete().with_max_allocation_count(BLOCKS as u32);
    let (allocator, device) = allocator_with(layout, config());
    let (memories, kept) = many_empty_blocks(&allocator, &device);
    // Fits no block: needs a memory object of its own.
    let big = allocator
        .allocate(&buffer(2048 * KIB, 256, Usage::DEVICE_LOCAL))
        .unwrap();
    assert!(!memories.contains(&big.memory()));
    assert_eq!(device.live_allocations().len(), kept.len() + 2);
    free(&allocator, big);
    allocator.trim();
    assert_eq!(device.live_allocations().len(), kept.len());
    requests_fill_the_kept_blocks_in_order(allocator, &device, &memories, kept);
}
