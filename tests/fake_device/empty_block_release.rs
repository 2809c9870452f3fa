//! Releases of many empty blocks at once (`trim`, `end_frame`'s aged
//! blocks, a request short of memory objects): each unlinked its block
//! from the first-fit order with a pass over it, O(released × blocks);
//! now one pass unlinks them all. These check that the pool stays as it
//! was: the blocks that stay keep their order (new requests fill them
//! first to last, as first fit does, making no block), every released
//! memory object is freed once, and none leaks.
//!
//! Then VMA's `budgetExceeded` rule: a block that empties while its heap
//! is at or over budget takes every empty block of its pool with it (but
//! a custom pool's `min_blocks`), on the cached budget figures.

use std::collections::HashSet;

use ash::vk;
use vk_suballoc::device::fake::{FakeDevice, FakeLayout};
use vk_suballoc::{
    Allocation, AllocationDesc, Config, Pool, PoolDesc, Request, ResourceKind, Usage,
};

use super::frames::end_frame;
use super::{allocator_with, buffer, finish, free, requirements, FakeAllocator};

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

const MIB: u64 = 1 << 20;

/// The discrete layout's device-local type, alone in heap 0 (VRAM); in
/// the integrated layout, a host-visible type of its one heap.
const VRAM: u32 = 1;

/// A 512 KiB device-local buffer, in `pool` when given (whose blocks are
/// 1 MiB, as `config`'s default pools'): two fill a block.
fn half_block(pool: Option<Pool>) -> Request<'static> {
    let mut desc = AllocationDesc::new(Usage::DEVICE_LOCAL);
    if let Some(pool) = pool {
        desc = desc.pool(pool);
    }
    let mut request = Request::with_desc(requirements(512 * KIB, 256), ResourceKind::Buffer, desc);
    request.requirements.memory_type_bits = 1 << VRAM;
    request
}

/// `blocks` blocks of VRAM, each holding two 512 KiB allocations: the
/// allocations, by block.
fn full_blocks(
    allocator: &FakeAllocator,
    pool: Option<Pool>,
    blocks: usize,
) -> Vec<[Allocation; 2]> {
    (0..blocks)
        .map(|_| {
            let pair = [(); 2].map(|()| allocator.allocate(&half_block(pool)).unwrap());
            assert_eq!(pair[0].memory(), pair[1].memory(), "two in a block");
            assert_eq!(pair[0].memory_type(), VRAM);
            pair
        })
        .collect()
}

/// Frees both allocations of a block, emptying it.
fn empty_block(allocator: &FakeAllocator, pair: [Allocation; 2]) {
    for allocation in pair {
        free(allocator, allocation);
    }
}

/// VRAM's blocks and empty blocks in the default pool, or in `pool`.
fn vram_blocks(allocator: &FakeAllocator, pool: Option<Pool>) -> (u64, u64) {
    let stats = match pool {
        Some(pool) => allocator.pool_stats(&pool).unwrap(),
        None => allocator.stats().memory_types[VRAM as usize],
    };
    (stats.blocks, stats.empty_blocks)
}

/// Puts VRAM over its budget (others use 1 GiB of a 64 MiB budget) and
/// has the allocator read that (`budgets` reads the driver).
fn over_budget(allocator: &FakeAllocator, device: &FakeDevice) {
    device.set_heap_budget(0, 64 * MIB, 1 << 30);
    let vram = allocator.budgets()[0];
    assert!(vram.usage >= vram.budget);
}

/// Under budget, a default pool keeps its empty blocks (`config`'s
/// reserve keeps all while a block is in use); over it, the next block to
/// empty takes them all, and the last block goes as it empties. The budget
/// is the cached figure: no driver query on the frees (`stats` would make
/// one: the blocks are counted as the device's memory objects).
#[test]
fn a_default_pool_releases_its_empty_blocks_when_one_empties_over_budget() {
    let (allocator, device) = allocator_with(FakeLayout::discrete(), config());
    let objects = || device.live_allocations().len();
    let mut blocks = full_blocks(&allocator, None, 4).into_iter();
    empty_block(&allocator, blocks.next().unwrap());
    empty_block(&allocator, blocks.next().unwrap());
    assert_eq!(vram_blocks(&allocator, None), (4, 2), "kept under budget");
    over_budget(&allocator, &device);
    let queries = device.counters().budget_queries;
    let [first, second] = blocks.next().unwrap();
    free(&allocator, first);
    assert_eq!(objects(), 4, "no block emptied");
    free(&allocator, second);
    assert_eq!(objects(), 1, "all three empty blocks released");
    empty_block(&allocator, blocks.next().unwrap());
    assert_eq!(objects(), 0);
    assert_eq!(
        device.counters().budget_queries,
        queries,
        "no driver query on a free"
    );
    assert_eq!(vram_blocks(&allocator, None), (0, 0));
    finish(allocator, &device);
}

/// Without `VK_EXT_memory_budget` the budget is `budget_fraction` of the
/// heap and the usage the allocator's own: the same rule, on those.
#[test]
fn without_the_budget_extension_the_rule_uses_the_budget_fraction() {
    let config = Config {
        // 3.2 MiB of a 64 MiB heap, in blocks of 1 MiB still.
        budget_fraction: 0.05,
        small_heap_limit: 0,
        ..config()
    };
    let layout = FakeLayout::integrated().with_heap_sizes(64 * MIB);
    let (allocator, device) = allocator_with(layout, config);
    let mut blocks = full_blocks(&allocator, None, 3).into_iter();
    // Past the budget, in memory of its own.
    let mut past = half_block(None);
    past.requirements.size = MIB;
    let past = allocator.allocate(&past).unwrap();
    assert!(allocator.budgets()[0].usage >= allocator.budgets()[0].budget);
    empty_block(&allocator, blocks.next().unwrap());
    assert_eq!(
        vram_blocks(&allocator, None),
        (2, 0),
        "4 MiB of 3.2: released"
    );
    empty_block(&allocator, blocks.next().unwrap());
    assert_eq!(vram_blocks(&allocator, None), (2, 1), "3 MiB of 3.2: kept");
    for pair in blocks {
        empty_block(&allocator, pair);
    }
    free(&allocator, past);
    assert_eq!(device.counters().budget_queries, 0);
    finish(allocator, &device);
}

/// The same blocks under budget all along: the last block to empty stays
/// (the largest empty block is kept), as before the budget rule.
#[test]
fn a_default_pool_keeps_an_empty_block_under_budget() {
    let (allocator, device) = allocator_with(FakeLayout::discrete(), config());
    for pair in full_blocks(&allocator, None, 4) {
        empty_block(&allocator, pair);
    }
    assert_eq!(vram_blocks(&allocator, None), (1, 1));
    assert_eq!(device.live_allocations().len(), 1);
    finish(allocator, &device);
}

/// A custom pool keeps one empty block under budget; over it, a block
/// that empties takes that one with it. The pool's requests for new
/// blocks read the budget (they try within it first, and pass it as
/// they are not held to it); the emptyings use that reading, and read
/// none of their own.
#[test]
fn a_custom_pool_releases_its_empty_blocks_when_one_empties_over_budget() {
    let (allocator, device) = allocator_with(FakeLayout::discrete(), config());
    let pool = allocator
        .create_pool(&PoolDesc::new(VRAM).block_size(MIB))
        .unwrap();
    device.set_heap_budget(0, 64 * MIB, 1 << 30);
    let mut blocks = full_blocks(&allocator, Some(pool), 4).into_iter();
    assert_eq!(
        vram_blocks(&allocator, Some(pool)),
        (4, 0),
        "past the budget"
    );
    let reads = device.counters().budget_queries;
    assert!(reads >= 1, "the new blocks read the budget");
    empty_block(&allocator, blocks.next().unwrap());
    assert_eq!(
        device.counters().budget_queries,
        reads,
        "no read of its own"
    );
    assert_eq!(vram_blocks(&allocator, Some(pool)), (3, 0));
    // Back under budget, unread: the cached figure still says over.
    device.set_heap_budget(0, 1 << 30, 0);
    empty_block(&allocator, blocks.next().unwrap());
    assert_eq!(vram_blocks(&allocator, Some(pool)), (2, 0));
    assert_eq!(device.counters().budget_queries, reads);
    // Read again: under budget, one empty block is kept.
    allocator.budgets();
    empty_block(&allocator, blocks.next().unwrap());
    assert_eq!(
        vram_blocks(&allocator, Some(pool)),
        (2, 1),
        "kept under budget"
    );
    over_budget(&allocator, &device);
    empty_block(&allocator, blocks.next().unwrap());
    assert_eq!(vram_blocks(&allocator, Some(pool)), (0, 0), "both released");
    allocator.destroy_pool(pool).unwrap();
    finish(allocator, &device);
}

/// Over budget, a custom pool still keeps its `min_blocks` blocks: the
/// blocks that empty go while the pool has more, then stay.
#[test]
fn a_pool_keeps_its_min_blocks_over_budget() {
    let (allocator, device) = allocator_with(FakeLayout::discrete(), config());
    let pool = allocator
        .create_pool(&PoolDesc::new(VRAM).block_size(MIB).min_blocks(2))
        .unwrap();
    let blocks = full_blocks(&allocator, Some(pool), 4);
    assert_eq!(vram_blocks(&allocator, Some(pool)), (4, 0));
    over_budget(&allocator, &device);
    let expected = [(3, 0), (2, 0), (2, 1), (2, 2)];
    for (pair, expected) in blocks.into_iter().zip(expected) {
        empty_block(&allocator, pair);
        assert_eq!(vram_blocks(&allocator, Some(pool)), expected);
    }
    allocator.destroy_pool(pool).unwrap();
    finish(allocator, &device);
}

/// Blocks kept empty under budget go back at the next frame's end once
/// other processes took their heap past its budget, in the default pool
/// and a custom pool alike (but the custom pool's `min_blocks`): the free
/// path read no figure (it never asks the driver), so only `end_frame`'s
/// reading sees it, as VMA sees it at `vmaSetCurrentFrameIndex`. They were
/// kept for as long as the heap stayed over budget, whatever the frames.
#[test]
fn a_frame_end_releases_the_kept_blocks_of_a_heap_others_took_past_its_budget() {
    let (allocator, device) = allocator_with(FakeLayout::discrete(), config());
    let objects = || device.live_allocations().len();
    let pool = allocator
        .create_pool(&PoolDesc::new(VRAM).block_size(MIB).min_blocks(1))
        .unwrap();
    let mut blocks = full_blocks(&allocator, None, 3).into_iter();
    let mut pooled = full_blocks(&allocator, Some(pool), 3).into_iter();
    empty_block(&allocator, blocks.next().unwrap());
    empty_block(&allocator, blocks.next().unwrap());
    empty_block(&allocator, pooled.next().unwrap());
    empty_block(&allocator, pooled.next().unwrap());
    assert_eq!(objects(), 5, "kept under budget: 3 + 2 blocks");
    // Other processes take VRAM past its budget; nothing reads it.
    device.set_heap_budget(0, 64 * MIB, 1 << 30);
    let queries = device.counters().budget_queries;
    device.signal_fence(end_frame(&allocator, &device));
    assert_eq!(device.counters().budget_queries, queries + 1, "one reading");
    assert_eq!(objects(), 2, "each pool's block in use stays, nothing else");
    // Back under budget: a frame end with nothing kept reads nothing.
    device.set_heap_budget(0, 1 << 30, 0);
    allocator.collect().unwrap();
    device.signal_fence(end_frame(&allocator, &device));
    assert_eq!(device.counters().budget_queries, queries + 1);
    for pair in [blocks.next().unwrap(), pooled.next().unwrap()] {
        empty_block(&allocator, pair);
    }
    allocator.collect().unwrap();
    allocator.destroy_pool(pool).unwrap();
    finish(allocator, &device);
}

/// `collect_idle` ends a frame as `end_frame` does for the kept blocks
/// too: over budget they go back (once its frees are carried out), and
/// with `empty_block_frames` 0 the aged ones do.
#[test]
fn collect_idle_releases_kept_blocks_as_a_frame_end_does() {
    for (aged, over) in [(false, true), (true, false)] {
        let config = Config {
            empty_block_frames: if aged { 0 } else { u64::MAX },
            ..config()
        };
        let (allocator, device) = allocator_with(FakeLayout::discrete(), config);
        let mut blocks = full_blocks(&allocator, None, 3).into_iter();
        empty_block(&allocator, blocks.next().unwrap());
        let [first, second] = blocks.next().unwrap();
        free(&allocator, first);
        allocator.free_after_frame(second).unwrap();
        if over {
            device.set_heap_budget(0, 64 * MIB, 1 << 30);
        }
        assert_eq!(device.live_allocations().len(), 3);
        // SAFETY: the fake device runs no GPU work.
        unsafe { allocator.collect_idle() };
        // Over budget both empty blocks go; aged, all but the largest
        // (the one its frees just emptied, kept as the type's largest).
        let left = if over { 1 } else { 2 };
        assert_eq!(
            device.live_allocations().len(),
            left,
            "aged {aged}, over {over}"
        );
        empty_block(&allocator, blocks.next().unwrap());
        finish(allocator, &device);
    }
}

/// A frame's end reads the driver's budgets only when some pool keeps an
/// empty block it could release: a custom pool's empty blocks held at its
/// `min_blocks` are not such blocks (no budget would release them), so
/// neither `end_frame` nor `collect_idle` asks the driver while they are
/// the only empty ones; one more empty block in the pool, and both do.
#[test]
fn a_frame_end_reads_no_budget_for_a_pool_held_at_its_min_blocks() {
    let (allocator, device) = allocator_with(FakeLayout::discrete(), config());
    let pool = allocator
        .create_pool(&PoolDesc::new(VRAM).block_size(MIB).min_blocks(2))
        .unwrap();
    assert_eq!(vram_blocks(&allocator, Some(pool)), (2, 2));
    let queries = || device.counters().budget_queries;
    let before = queries();
    device.signal_fence(end_frame(&allocator, &device));
    allocator.collect().unwrap();
    assert_eq!(queries(), before, "end_frame: only min_blocks are empty");
    // SAFETY: the fake device runs no GPU work.
    unsafe { allocator.collect_idle() };
    assert_eq!(queries(), before, "collect_idle: only min_blocks are empty");
    // A third block, emptied: the pool now keeps one it could release.
    let mut blocks = full_blocks(&allocator, Some(pool), 3);
    empty_block(&allocator, blocks.pop().unwrap());
    assert_eq!(vram_blocks(&allocator, Some(pool)), (3, 1));
    let before = queries();
    device.signal_fence(end_frame(&allocator, &device));
    assert_eq!(queries(), before + 1, "end_frame: one reading");
    // SAFETY: the fake device runs no GPU work.
    unsafe { allocator.collect_idle() };
    assert_eq!(queries(), before + 2, "collect_idle: one reading");
    assert_eq!(vram_blocks(&allocator, Some(pool)), (3, 1), "under budget");
    for pair in blocks {
        empty_block(&allocator, pair);
    }
    allocator.destroy_pool(pool).unwrap();
    finish(allocator, &device);
}

/// Without `VK_EXT_memory_budget` a frame's end releases kept blocks too
/// when the heap is at or over its budget (`budget_fraction` of it, the
/// usage the allocator's own). Here a custom pool keeps an empty block
/// under budget; then another custom pool, of another memory type of the
/// integrated GPU's one heap, is made with a `min_blocks` block that takes
/// the heap past its budget (a pool's `min_blocks` are made with no budget
/// check, so they release no kept block: a request, of a default pool or
/// a custom one, would first, and leave nothing to test), and no block of
/// the first pool empties since, which would release its kept one. The README
/// says a pool keeps its empty block until "a frame ends with it there";
/// the frame's end skipped every heap without the extension, so the block
/// stayed for as long as the heap stayed over its budget.
#[test]
fn without_the_budget_extension_a_frame_end_releases_kept_blocks_over_budget() {
    let config = Config {
        // 32 MiB of a 64 MiB heap.
        budget_fraction: 0.5,
        small_heap_limit: 0,
        ..config()
    };
    let layout = FakeLayout::integrated().with_heap_sizes(64 * MIB);
    let (allocator, device) = allocator_with(layout, config);
    let objects = || device.live_allocations().len();
    let pool = allocator
        .create_pool(&PoolDesc::new(VRAM).block_size(MIB))
        .unwrap();
    let mut pooled = full_blocks(&allocator, Some(pool), 2).into_iter();
    empty_block(&allocator, pooled.next().unwrap());
    assert_eq!(
        vram_blocks(&allocator, Some(pool)),
        (2, 1),
        "kept under budget"
    );
    // Type 0, device-local only, in the same heap: a 40 MiB block of
    // another pool takes the heap past its budget.
    let other = allocator
        .create_pool(&PoolDesc::new(0).block_size(40 * MIB).min_blocks(1))
        .unwrap();
    let heap = allocator.budgets()[0];
    assert!(heap.usage >= heap.budget, "{heap:?}");
    // The pool's kept block is still there: no request released it.
    assert_eq!(
        vram_blocks(&allocator, Some(pool)),
        (2, 1),
        "kept over budget until the frame ends"
    );
    device.signal_fence(end_frame(&allocator, &device));
    allocator.collect().unwrap();
    assert_eq!(
        vram_blocks(&allocator, Some(pool)),
        (1, 0),
        "over budget at the frame's end: no empty block kept"
    );
    assert_eq!(objects(), 2, "the pool's block in use and the 40 MiB");
    for pair in pooled {
        empty_block(&allocator, pair);
    }
    allocator.destroy_pool(other).unwrap();
    allocator.destroy_pool(pool).unwrap();
    finish(allocator, &device);
}
