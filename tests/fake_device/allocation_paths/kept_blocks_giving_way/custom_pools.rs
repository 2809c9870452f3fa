//! Kept empty blocks giving way to custom pools: to a pool's `min_blocks`
//! and its new blocks, and a pool's own kept block giving way to a request
//! of its heap.

use vk_suballoc::device::fake::FakeLayout;
use vk_suballoc::{
    AllocationDesc, Config, DedicatedPolicy, Error, PoolDesc, Request, ResourceKind, Usage,
};

use super::super::super::frames::free_all_and_finish;
use super::super::super::{
    allocator, allocator_with, buffer, finish, free, requirements, FakeAllocator,
};

use super::super::{free_all, twenty_mib_buffers, MIB};
use super::kept_upload_blocks;

/// A custom pool's `min_blocks` blocks, made by `create_pool`, are memory
/// a request asks for too: kept empty blocks give way to them as they do
/// to an allocation (before, the pool failed with `TooManyObjects` where
/// VMA's rule, keeping one empty block, left room for its block).
#[test]
fn kept_empty_blocks_give_way_to_a_pool_s_min_blocks() {
    for reserve in [1.0, 0.0] {
        let config = Config {
            empty_block_reserve: reserve,
            ..Config::default()
        };
        let (allocator, device) =
            allocator_with(FakeLayout::discrete().with_max_allocation_count(5), config);
        // Blocks of 64, 128 and 256 MiB in use; two more of 256 emptied.
        let long_lived = twenty_mib_buffers(&allocator, 15);
        let transient = twenty_mib_buffers(&allocator, 30);
        free_all(&allocator, transient);
        let pool = allocator
            .create_pool(&PoolDesc::new(1).block_size(16 * MIB).min_blocks(1))
            .unwrap_or_else(|error| panic!("reserve {reserve}: {error}"));
        let stats = allocator.stats();
        assert_eq!(stats.memory_types[1].empty_blocks, 2, "reserve {reserve}");
        assert_eq!(device.live_allocations().len(), 5, "reserve {reserve}");
        allocator.destroy_pool(pool).unwrap();
        free_all(&allocator, long_lived);
        finish(allocator, &device);
    }
}

/// When releasing the kept empty blocks but the largest leaves a custom
/// pool's new block still short of memory, the largest goes too and the
/// block is tried again: the request does not fail.
#[test]
fn every_kept_empty_block_gives_way_to_a_pool_s_block_when_needed() {
    let (allocator, device) = allocator(FakeLayout::discrete());
    let long_lived = kept_upload_blocks(&allocator);
    let pool = allocator
        .create_pool(&PoolDesc::new(2).block_size(300 * MIB))
        .unwrap();
    // A 300 MiB block fits beside the blocks in use (448 MiB), not beside
    // one kept block more (704).
    device.cap_heap(1, 800 * MIB);
    let desc = AllocationDesc::new(Usage::UPLOAD).pool(pool);
    let in_pool = allocator
        .allocate(&Request::with_desc(
            requirements(MIB, 256),
            ResourceKind::Buffer,
            desc,
        ))
        .unwrap_or_else(|error| panic!("{error}"));
    assert_eq!(allocator.stats().memory_types[2].empty_blocks, 0);
    free(&allocator, in_pool);
    allocator.destroy_pool(pool).unwrap();
    free_all_and_finish(allocator, &device, long_lived);
}

/// A custom pool's block, tried again once the kept empty blocks but the
/// largest are released, that then cannot be mapped fails the request with
/// `MapFailed`: the largest kept block stays, as no want of memory asked
/// for it.
#[test]
fn a_pool_s_block_that_fails_otherwise_once_kept_blocks_went_leaves_the_largest() {
    let (allocator, device) = allocator(FakeLayout::discrete());
    let long_lived = kept_upload_blocks(&allocator);
    let pool = allocator
        .create_pool(&PoolDesc::new(2).block_size(200 * MIB))
        .unwrap();
    // A 200 MiB block fits beside one kept block (704 MiB), not beside two
    // (960).
    device.cap_heap(1, 1000 * MIB);
    device.fail_map(1);
    let desc = AllocationDesc::new(Usage::UPLOAD).pool(pool);
    let result = allocator.allocate(&Request::with_desc(
        requirements(MIB, 256),
        ResourceKind::Buffer,
        desc,
    ));
    assert_eq!(result.err(), Some(Error::MapFailed));
    assert_eq!(allocator.stats().memory_types[2].empty_blocks, 1);
    allocator.destroy_pool(pool).unwrap();
    free_all_and_finish(allocator, &device, long_lived);
}

/// A custom pool's kept empty block (one beyond its `min_blocks`, VMA's
/// rule) gives way too, in the second step, to a request of its heap short
/// of memory, as the default pools' kept blocks do: it stood in the way of
/// a dedicated buffer the heap had room for without it. Its `min_blocks`
/// blocks stay, and the request fails then.
#[test]
fn a_custom_pool_s_kept_empty_block_gives_way_to_a_request_short_of_memory() {
    for min_blocks in [0, 1] {
        let case = format!("min_blocks {min_blocks}");
        let (allocator, device) = allocator(FakeLayout::discrete());
        let pool = allocator
            .create_pool(&PoolDesc::new(1).block_size(64 * MIB).min_blocks(min_blocks))
            .unwrap();
        let desc = AllocationDesc::new(Usage::DEVICE_LOCAL).pool(pool);
        let in_pool = allocator
            .allocate(&Request::with_desc(
                requirements(40 * MIB, 256),
                ResourceKind::Buffer,
                desc,
            ))
            .unwrap();
        free(&allocator, in_pool);
        let kept = allocator.pool_stats(&pool).unwrap();
        assert_eq!((kept.blocks, kept.empty_blocks), (1, 1), "{case}");
        // VRAM (heap 0) has 32 MiB left: an 80 MiB buffer fits only
        // without the pool's block.
        device.cap_heap(0, device.heap_usage()[0] + 32 * MIB);
        let mut request =
            buffer(80 * MIB, 256, Usage::DEVICE_LOCAL).dedicated(DedicatedPolicy::Always);
        request.desc = request.desc.memory_type_bits(1 << 1);
        let result = allocator.allocate(&request);
        let stats = allocator.pool_stats(&pool).unwrap();
        if min_blocks == 0 {
            let large = result.unwrap_or_else(|error| panic!("{case}: {error}"));
            assert_eq!(large.memory_type(), 1, "{case}");
            assert_eq!(stats.blocks, 0, "{case}");
            free(&allocator, large);
        } else {
            assert_eq!(result.map(|_| ()), Err(Error::OutOfDeviceMemory), "{case}");
            assert_eq!((stats.blocks, stats.empty_blocks), (1, 1), "{case}");
        }
        allocator.destroy_pool(pool).unwrap();
        finish(allocator, &device);
    }
}

/// A custom pool's request not within budget tries within the heap's
/// budget first, as a default pool's does: the heap's kept empty blocks
/// give way to its new block (all but the largest, then that one), and
/// only a request still short passes the budget (a pool is not held to
/// it, as VMA's are not); one within budget fails there. Before, the new
/// block passed the budget at once, the kept blocks staying beside it.
#[test]
fn a_custom_pool_s_new_block_goes_within_budget_once_kept_blocks_give_way() {
    let (allocator, device) = allocator(FakeLayout::discrete());
    // Blocks of 64, 128 and three of 256 MiB in VRAM, the last two empty
    // and kept: 960 MiB in all, 64 MiB under a budget of 1 GiB.
    let long_lived = twenty_mib_buffers(&allocator, 15);
    free_all(&allocator, twenty_mib_buffers(&allocator, 30));
    let vram = |allocator: &FakeAllocator| {
        let t = &allocator.stats().memory_types[1];
        (t.blocks, t.empty_blocks)
    };
    assert_eq!(vram(&allocator), (5, 2));
    device.set_heap_budget(0, 1024 * MIB, 0);
    allocator.budgets();
    let pool = allocator
        .create_pool(&PoolDesc::new(1).block_size(256 * MIB))
        .unwrap();
    let in_pool = |within_budget: bool| {
        let mut desc = AllocationDesc::new(Usage::DEVICE_LOCAL).pool(pool);
        desc.within_budget = within_budget;
        allocator.allocate(&Request::with_desc(
            requirements(200 * MIB, 256),
            ResourceKind::Buffer,
            desc,
        ))
    };
    let within = |allocator: &FakeAllocator| {
        let heap = allocator.budgets()[0];
        heap.usage <= heap.budget
    };
    // 960 + 256 MiB: one kept block goes, the largest stays (the type's
    // counts take in the pool's blocks).
    let first = in_pool(false).unwrap();
    assert_eq!(vram(&allocator), (5, 1));
    assert!(within(&allocator), "{:?}", allocator.budgets()[0]);
    // Again: the largest goes too.
    let second = in_pool(false).unwrap();
    assert_eq!(vram(&allocator), (5, 0));
    assert!(within(&allocator), "{:?}", allocator.budgets()[0]);
    // Nothing left to give way: within budget it fails, else it passes.
    // A third block of 256 MiB beside VRAM's five (64 + 128 + 3 * 256 MiB)
    // would pass the 1 GiB budget.
    let refused = in_pool(true).map(|_| ());
    assert_eq!(
        refused,
        Err(Error::OverBudget {
            heap: 0,
            size: 256 * MIB,
            usage: 960 * MIB,
            budget: 1024 * MIB,
        })
    );
    let third = in_pool(false).unwrap();
    assert!(!within(&allocator), "{:?}", allocator.budgets()[0]);
    assert_eq!(allocator.pool_stats(&pool).unwrap().blocks, 3);
    for a in [first, second, third] {
        free(&allocator, a);
    }
    allocator.destroy_pool(pool).unwrap();
    free_all(&allocator, long_lived);
    finish(allocator, &device);
}

/// A custom pool's request not within budget that, past the budget, meets
/// `maxMemoryAllocationCount` still makes the kept empty blocks of every
/// heap give way (objects are counted device-wide), as it did when it
/// passed the budget at once. Its first, within-budget try was refused
/// for the budget, which releases only its own heap's kept blocks (here
/// none): before, the request then failed with `TooManyObjects` while the
/// system heap kept two empty blocks.
#[test]
fn a_custom_pool_s_request_past_budget_at_the_object_limit_releases_every_heap_s_kept_blocks() {
    // 3 VRAM blocks (448 MiB) and 5 upload blocks, two empty and kept: 8
    // objects, the device's limit.
    let (allocator, device) = allocator(FakeLayout::discrete().with_max_allocation_count(8));
    let long_lived = twenty_mib_buffers(&allocator, 15);
    let long_lived_upload = kept_upload_blocks(&allocator);
    assert_eq!(device.live_allocations().len(), 8);
    assert_eq!(allocator.stats().memory_types[1].empty_blocks, 0);
    // The VRAM heap is at its budget: no new block fits within it.
    device.set_heap_budget(0, 448 * MIB, 0);
    allocator.budgets();
    let pool = allocator
        .create_pool(&PoolDesc::new(1).block_size(64 * MIB))
        .unwrap();
    let desc = AllocationDesc::new(Usage::DEVICE_LOCAL).pool(pool);
    let in_pool = allocator
        .allocate(&Request::with_desc(
            requirements(20 * MIB, 256),
            ResourceKind::Buffer,
            desc,
        ))
        .unwrap_or_else(|error| panic!("{error}"));
    assert_eq!(allocator.stats().memory_types[2].empty_blocks, 1);
    free(&allocator, in_pool);
    allocator.destroy_pool(pool).unwrap();
    free_all_and_finish(
        allocator,
        &device,
        long_lived.into_iter().chain(long_lived_upload),
    );
}
