//! A pool's blocks at its limits: a retiring block kept for `min_blocks`
//! serves requests again, small buffers do not make a capped pool full, a
//! request that fits a fixed-size block only unrounded is placed, a request
//! of exactly the block size reuses the emptied block, and a pool of 2000
//! blocks is released whole. Apart because each checks how
//! a pool's fixed block size, its cap or its `min_blocks` decide where a
//! request goes and which blocks stay.

use ash::vk;
use vk_suballoc::device::fake::FakeLayout;
use vk_suballoc::device::DedicatedTarget;
use vk_suballoc::{
    AllocationDesc, DedicatedHint, DedicatedPolicy, Error, PoolDesc, Request, ResourceKind, Usage,
};

use super::super::{allocator, finish, free, requirements};
use super::{upload_in, vram_in, MIB};
use crate::FakeTarget;

/// A block a plan is emptying, that empties once the pool is down to its
/// `min_blocks`, stays (not retiring any more) and takes requests again;
/// `stats()`, `pool_stats()` and the memory map agree on the pool.
#[test]
fn a_retiring_block_kept_for_min_blocks_serves_requests_again() {
    use vk_suballoc::{DefragmentationLimits, Movable};
    let (allocator, device) = allocator(FakeLayout::discrete());
    let pool = allocator
        .create_pool(&PoolDesc::new(1).block_size(4 * MIB).min_blocks(2))
        .unwrap();
    let all: Vec<_> = (0..12)
        .map(|_| allocator.allocate(&vram_in(pool)).unwrap())
        .collect();
    // Block 0 keeps one buffer (the one to move), block 1 three (the
    // destination, fullest), block 2 two.
    let mut live = Vec::new();
    for (i, allocation) in all.into_iter().enumerate() {
        if [0, 4, 5, 6, 8, 9].contains(&i) {
            live.push(allocation);
        } else {
            free(&allocator, allocation);
        }
    }
    let movables: Vec<_> = live[..1]
        .iter()
        .map(|a| Movable::new(a, requirements(MIB, 256), ResourceKind::Buffer))
        .collect();
    let plan = allocator
        .plan_defragmentation(&movables, &DefragmentationLimits::default())
        .unwrap();
    drop(movables);
    assert_eq!(plan.blocks_released, 1, "{plan:?}");
    assert_eq!(allocator.pool_stats(&pool).unwrap().retiring_blocks, 1);
    // The memory type's figures count the pool's retiring block too.
    assert_eq!(allocator.stats().memory_types[1].retiring_blocks, 1);
    let planned = plan.moves.into_iter().next().unwrap();
    // Meanwhile block 2 empties and trim takes it: the pool is at min_blocks.
    let third_block: Vec<_> = live.drain(4..).collect();
    for allocation in third_block {
        free(&allocator, allocation);
    }
    assert_eq!(allocator.trim(), 4 * MIB);
    let old = std::mem::replace(&mut live[planned.movable], planned.destination);
    free(&allocator, old);
    let stats = allocator.pool_stats(&pool).unwrap();
    assert_eq!(
        (stats.blocks, stats.retiring_blocks, stats.empty_blocks),
        (2, 0, 1)
    );
    // The kept block takes requests again: four more fit in the two blocks.
    let more: Vec<_> = (0..4)
        .map(|_| allocator.allocate(&vram_in(pool)).unwrap())
        .collect();
    assert_eq!(allocator.pool_stats(&pool).unwrap().blocks, 2);
    let map = allocator.memory_map();
    let pool_map = map.custom_pools().next().unwrap();
    assert_eq!(pool_map.blocks.len(), 2);
    assert_eq!(
        allocator.stats().memory_types[1].block_allocations,
        allocator.pool_stats(&pool).unwrap().block_allocations
    );
    for allocation in more.into_iter().chain(live) {
        free(&allocator, allocation);
    }
    allocator.destroy_pool(pool).unwrap();
    finish(allocator, &device);
}

/// A pool capped at one block takes a request that fits beside its live
/// allocations: 32 KiB live and 200 KiB asked of a 256 KiB pool. With run
/// slots, the small buffers carved a 64 KiB run of 16 KiB slots (runs.rs),
/// whose free slots no other size can take, and the pool answered
/// `PoolFull`; capped pools take no runs (as VMA's pools have none).
#[test]
fn small_buffer_runs_do_not_make_a_capped_pool_full() {
    const KIB: u64 = 1 << 10;
    let (allocator, device) = allocator(FakeLayout::discrete());
    let pool = allocator
        .create_pool(&PoolDesc::new(1).block_size(256 * KIB).max_blocks(1))
        .unwrap();
    let request = |size| {
        let desc = AllocationDesc::new(Usage::DEVICE_LOCAL).pool(pool);
        Request::with_desc(requirements(size, 256), ResourceKind::Buffer, desc)
    };
    let small: Vec<_> = (0..2)
        .map(|_| allocator.allocate(&request(16 * KIB)).unwrap())
        .collect();
    let large = allocator.allocate(&request(200 * KIB));
    let stats = allocator.pool_stats(&pool).unwrap();
    let large = large.unwrap_or_else(|error| {
        panic!(
            "{error:?} with {} of {} bytes allocated in the pool's one block",
            stats.block_allocated_bytes, stats.block_bytes
        )
    });
    free(&allocator, large);
    for allocation in small {
        free(&allocator, allocation);
    }
    allocator.destroy_pool(pool).unwrap();
    finish(allocator, &device);
}

/// A request whose bytes fit a fixed-size pool's block, but whose rounding
/// (to the non-coherent atom here, or its alignment, or a granularity page)
/// passes the block's end, takes a block from its start to its end. Before,
/// it was refused as `TooLargeForPool` (1024 bytes for a 1000-byte block),
/// where VMA places it. Its flushes stay within the memory object, smaller
/// requests share blocks as before, and a byte more than a block is still
/// refused.
#[test]
fn a_request_that_fits_a_fixed_block_only_unrounded_is_placed() {
    const CACHED: u32 = 2; // mobile: HOST_VISIBLE | HOST_CACHED, atom 256
    let (allocator, device) = allocator(FakeLayout::mobile());
    let pool = allocator
        .create_pool(&PoolDesc::new(CACHED).block_size(1000))
        .unwrap();
    let whole = [
        allocator.allocate(&upload_in(pool, 1000, CACHED)).unwrap(),
        allocator.allocate(&upload_in(pool, 900, CACHED)).unwrap(),
    ];
    for allocation in &whole {
        assert_eq!(allocation.offset(), 0);
        allocator.flush(allocation, ..).unwrap();
    }
    assert_ne!(whole[0].memory(), whole[1].memory());
    // Smaller requests share blocks as before: 256 placed bytes each
    // (rounded to the atom). Only a request that takes a whole block may
    // pass the last multiple of its rounding: a fourth one, at 768, would
    // end at 1024 and goes to another block.
    let shared = [
        allocator.allocate(&upload_in(pool, 200, CACHED)).unwrap(),
        allocator.allocate(&upload_in(pool, 200, CACHED)).unwrap(),
    ];
    assert_eq!(shared[0].memory(), shared[1].memory());
    // An optimal image takes whole 4096-byte granularity pages in blocks it
    // shares with buffers: in blocks smaller than a page, a block of its own.
    let image = {
        let desc = AllocationDesc::new(Usage::DEVICE_LOCAL).pool(pool);
        let requirements = vk::MemoryRequirements {
            size: 512,
            alignment: 256,
            memory_type_bits: 1 << CACHED,
        };
        let request = Request::with_desc(requirements, ResourceKind::OptimalImage, desc);
        allocator.allocate(&request).unwrap()
    };
    assert_eq!(image.offset(), 0);
    assert_eq!(allocator.pool_stats(&pool).unwrap().blocks, 4);
    let too_large = Err(Error::TooLargeForPool {
        size: 1024,
        block_size: 1000,
    });
    assert_eq!(
        allocator.allocate(&upload_in(pool, 1001, CACHED)),
        too_large
    );
    // `allocate_many` checks each request against the block size before it
    // places any, with the same rule: a request that fits a block only
    // unrounded passes, a byte more than a block does not (and makes
    // nothing), and dedicated memory the driver requires is no block.
    let calls = allocator.stats().memory_objects;
    let batch = [upload_in(pool, 1000, CACHED), upload_in(pool, 1001, CACHED)];
    assert_eq!(
        allocator.allocate_many(&batch).map(|_| ()),
        too_large.map(drop)
    );
    assert_eq!(allocator.stats().memory_objects, calls, "nothing made");
    let required = DedicatedHint {
        required: true,
        preferred: true,
    };
    let resource = device.create_resource();
    let dedicated = upload_in(pool, 4096, CACHED)
        .driver_dedicated(required)
        .fake_target(DedicatedTarget::Buffer(vk::Handle::from_raw(resource)));
    // Dedicated memory the caller requires (`DedicatedPolicy::Always`) is
    // no block either: larger than a block, it passes the check too.
    let always = upload_in(pool, 4096, CACHED).dedicated(DedicatedPolicy::Always);
    let placed = allocator
        .allocate_many(&[upload_in(pool, 1000, CACHED), dedicated, always])
        .unwrap();
    assert_eq!(placed[0].offset(), 0);
    assert!(placed[1].is_dedicated());
    assert!(placed[2].is_dedicated());
    assert_eq!(placed[2].size(), 4096);
    assert_eq!(device.violations(), Vec::<String>::new());
    for allocation in whole.into_iter().chain(shared).chain([image]).chain(placed) {
        free(&allocator, allocation);
    }
    device.destroy_resource(resource);
    allocator.destroy_pool(pool).unwrap();
    finish(allocator, &device);
}

/// A pool of 2000 blocks (its `min_blocks`) goes whole, by `destroy_pool`
/// and by the allocator's drop: every memory object freed, none twice
/// (the fake device checks both). Both were quadratic in the pool's
/// blocks (each block unlinked from the first-fit order in turn); this
/// checks that the batch release still frees each block once.
#[test]
fn a_pool_of_many_blocks_is_released_whole() {
    let (allocator, device) = allocator(FakeLayout::discrete());
    let many = PoolDesc::new(1).block_size(64 << 10).min_blocks(2000);
    let destroyed = allocator.create_pool(&many).unwrap();
    assert_eq!(device.live_allocations().len(), 2000);
    allocator.destroy_pool(destroyed).unwrap();
    assert!(device.live_allocations().is_empty());
    let dropped = allocator.create_pool(&many).unwrap();
    let desc = AllocationDesc::new(Usage::DEVICE_LOCAL).pool(dropped);
    let small = Request::with_desc(requirements(4096, 256), ResourceKind::Buffer, desc);
    let a = allocator.allocate(&small).unwrap();
    assert_eq!(device.live_allocations().len(), 2000);
    free(&allocator, a);
    finish(allocator, &device);
}

/// Vulkan-Samples PR #248: a buffer pool compared a request with its
/// blocks' size by `>` where `>=` was meant, so a request of exactly the
/// block size never reused an inactive block and took a new one each time.
/// Here a request of exactly a pool's block size (buffer, optimal image,
/// with a margin-free default config) fills a block, and once freed its
/// kept block takes the same request again, in a pool that may grow and
/// in one capped at that block: no memory object is made for it, and none
/// is dedicated.
#[test]
fn a_request_of_exactly_the_block_size_reuses_the_emptied_block() {
    const BLOCK: u64 = 4 * MIB;
    let (allocator, device) = allocator(FakeLayout::discrete());
    for max_blocks in [None, Some(1)] {
        let mut desc = PoolDesc::new(1).block_size(BLOCK);
        if let Some(max) = max_blocks {
            desc = desc.max_blocks(max);
        }
        let pool = allocator.create_pool(&desc).unwrap();
        for kind in [ResourceKind::Buffer, ResourceKind::OptimalImage] {
            let request = Request::with_desc(
                requirements(BLOCK, 256),
                kind,
                AllocationDesc::new(Usage::DEVICE_LOCAL).pool(pool),
            );
            let first = allocator.allocate(&request).unwrap();
            assert!(!first.is_dedicated(), "{max_blocks:?} {kind:?}");
            let memory = first.memory();
            let made = device.counters().allocate_calls;
            free(&allocator, first);
            for round in 0..3 {
                let again = allocator.allocate(&request).unwrap();
                assert_eq!(
                    (again.memory(), again.offset(), again.is_dedicated()),
                    (memory, 0, false),
                    "{max_blocks:?} {kind:?} round {round}"
                );
                free(&allocator, again);
            }
            assert_eq!(
                device.counters().allocate_calls,
                made,
                "{max_blocks:?} {kind:?}: memory made for a request the kept block holds"
            );
        }
        allocator.destroy_pool(pool).unwrap();
    }
    finish(allocator, &device);
}
