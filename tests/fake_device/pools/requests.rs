//! What a request to a pool gets: typed errors for bad requests,
//! dedicated memory only where required, a request larger than the
//! pool's blocks refused unless dedicated, the budget kept for
//! `within_budget` requests (a growing pool's block halved to keep it), whole atoms flushed in non-coherent pools,
//! the exclusive (`_mut`) methods, and buffers beside images in a
//! one-block pool at any granularity.

use ash::vk;
use vk_suballoc::device::fake::FakeLayout;
use vk_suballoc::{
    AllocationDesc, Config, DedicatedPolicy, Error, PoolDesc, Request, ResourceKind, Usage,
};

use super::super::{allocator, allocator_with, finish, free, requirements};

use super::{in_pool, MIB, VRAM};

#[test]
fn bad_requests_to_a_pool_are_typed_errors() {
    let (allocator, device) = allocator(FakeLayout::discrete());
    let pool = allocator
        .create_pool(&PoolDesc::new(VRAM).block_size(4 * MIB))
        .unwrap();
    let desc = AllocationDesc::new(Usage::DEVICE_LOCAL).pool(pool);
    let request = |size, alignment, bits| {
        let requirements = vk::MemoryRequirements {
            size,
            alignment,
            memory_type_bits: bits,
        };
        allocator.allocate(&Request::with_desc(
            requirements,
            ResourceKind::Buffer,
            desc,
        ))
    };
    assert_eq!(request(0, 256, !0), Err(Error::ZeroSize));
    assert_eq!(request(MIB, 3, !0), Err(Error::AlignmentNotPowerOfTwo(3)));
    assert_eq!(
        request(MIB, 256, 0b1_0101),
        Err(Error::PoolTypeNotAllowed {
            memory_type: VRAM,
            memory_type_bits: 0b1_0101
        })
    );
    // The host cannot reach plain device-local memory.
    let upload = AllocationDesc::new(Usage::UPLOAD).pool(pool);
    let upload = Request::with_desc(requirements(MIB, 256), ResourceKind::Buffer, upload);
    // The error names the pool's type, the one the request could take.
    assert_eq!(
        allocator.allocate(&upload).map(|_| ()),
        Err(Error::NoSuitableMemoryType {
            memory_type_bits: 1 << VRAM,
            usage: Usage::UPLOAD
        })
    );
    assert_eq!(
        request(5 << 30, 256, !0),
        Err(Error::SizeExceedsMaxAllocation {
            size: 5 << 30,
            max: 4 << 30
        })
    );
    // Beyond the pool's heap (8 GiB) whatever else is larger.
    assert_eq!(
        request(9 << 30, 256, !0),
        Err(Error::SizeExceedsHeaps {
            size: 9 << 30,
            largest_heap: 8 << 30
        })
    );
    assert_eq!(device.counters().allocate_calls, 0);
    allocator.destroy_pool(pool).unwrap();
    finish(allocator, &device);
}

#[test]
fn a_pool_makes_dedicated_memory_only_when_required() {
    let (allocator, device) = allocator(FakeLayout::discrete());
    let pool = allocator
        .create_pool(&PoolDesc::new(VRAM).block_size(64 * MIB))
        .unwrap();
    // Larger than half a block: a default pool would make it dedicated.
    let large = allocator.allocate(&in_pool(pool, 40 * MIB)).unwrap();
    assert!(!large.is_dedicated());
    let always = AllocationDesc::new(Usage::DEVICE_LOCAL)
        .pool(pool)
        .dedicated(DedicatedPolicy::Always);
    let dedicated = allocator
        .allocate(&Request::with_desc(
            requirements(MIB, 256),
            ResourceKind::Buffer,
            always,
        ))
        .unwrap();
    assert!(dedicated.is_dedicated() && dedicated.is_in_custom_pool());
    let stats = allocator.pool_stats(&pool).unwrap();
    assert_eq!(
        (stats.dedicated_allocations, stats.dedicated_bytes),
        (1, MIB)
    );
    assert_eq!(
        allocator.destroy_pool(pool),
        Err(Error::PoolNotEmpty { allocations: 2 })
    );
    free(&allocator, dedicated);
    free(&allocator, large);
    allocator.destroy_pool(pool).unwrap();
    finish(allocator, &device);
}

/// A request larger than a pool's fixed blocks is refused, unless it takes
/// dedicated memory (here the caller requires it), which has its own size:
/// as `PoolDesc::block_size` says.
#[test]
fn a_request_larger_than_a_pools_blocks_is_refused_unless_it_is_dedicated() {
    let (allocator, device) = allocator(FakeLayout::discrete());
    let pool = allocator
        .create_pool(&PoolDesc::new(VRAM).block_size(4 * MIB))
        .unwrap();
    assert_eq!(
        allocator.allocate(&in_pool(pool, 8 * MIB)).unwrap_err(),
        Error::TooLargeForPool {
            size: 8 * MIB,
            block_size: 4 * MIB
        }
    );
    let always = AllocationDesc::new(Usage::DEVICE_LOCAL)
        .pool(pool)
        .dedicated(DedicatedPolicy::Always);
    let request = Request::with_desc(requirements(8 * MIB, 256), ResourceKind::Buffer, always);
    let dedicated = allocator.allocate(&request).unwrap();
    assert!(dedicated.is_dedicated() && dedicated.is_in_custom_pool());
    assert_eq!(allocator.memory_size(&dedicated).unwrap(), 8 * MIB);
    free(&allocator, dedicated);
    allocator.destroy_pool(pool).unwrap();
    finish(allocator, &device);
}

/// `max_blocks` caps blocks: a pool whose blocks are all made and full
/// refuses a request that would need another, but still makes dedicated
/// memory a request requires, counted in the pool (as `PoolDesc::max_blocks`
/// says, and as VMA's `maxBlockCount`).
#[test]
fn a_full_pool_at_its_block_cap_still_makes_required_dedicated_memory() {
    let (allocator, device) = allocator(FakeLayout::discrete());
    let pool = allocator
        .create_pool(&PoolDesc::new(VRAM).block_size(4 * MIB).max_blocks(1))
        .unwrap();
    let filling = allocator.allocate(&in_pool(pool, 4 * MIB)).unwrap();
    assert_eq!(
        allocator.allocate(&in_pool(pool, MIB)).err(),
        Some(Error::PoolFull { max_blocks: 1 })
    );
    let always = AllocationDesc::new(Usage::DEVICE_LOCAL)
        .pool(pool)
        .dedicated(DedicatedPolicy::Always);
    let request = Request::with_desc(requirements(MIB, 256), ResourceKind::Buffer, always);
    let dedicated = allocator.allocate(&request).unwrap();
    assert!(dedicated.is_dedicated() && dedicated.is_in_custom_pool());
    let stats = allocator.pool_stats(&pool).unwrap();
    assert_eq!((stats.blocks, stats.dedicated_allocations), (1, 1));
    free(&allocator, dedicated);
    free(&allocator, filling);
    allocator.destroy_pool(pool).unwrap();
    finish(allocator, &device);
}

#[test]
fn within_budget_requests_to_a_pool_respect_the_budget() {
    let (allocator, device) = allocator(FakeLayout::discrete());
    device.set_heap_budget(0, 20 * MIB, 10 * MIB);
    let pool = allocator
        .create_pool(&PoolDesc::new(VRAM).block_size(16 * MIB))
        .unwrap();
    let desc = AllocationDesc::new(Usage::DEVICE_LOCAL)
        .pool(pool)
        .within_budget();
    let request = Request::with_desc(requirements(MIB, 256), ResourceKind::Buffer, desc);
    assert!(matches!(
        allocator.allocate(&request),
        Err(Error::OverBudget { heap: 0, .. })
    ));
    // Without within_budget the block is made over the budget, as a default
    // pool's last candidate is.
    let over = allocator.allocate(&in_pool(pool, MIB)).unwrap();
    free(&allocator, over);
    allocator.destroy_pool(pool).unwrap();
    finish(allocator, &device);
}

/// Over budget, a `within_budget` request's new block in a pool of
/// growing blocks is retried at half the size, as the default pools' are:
/// the first block (32 MiB, 1/8 of the preferred 256 MiB) passes a 20 MiB
/// budget, its half fits. A fixed block size is not retried.
#[test]
fn over_budget_a_growing_pools_new_block_is_retried_at_half_the_size() {
    let (allocator, device) = allocator(FakeLayout::discrete());
    device.set_heap_budget(0, 20 * MIB, 0);
    let within = |pool| {
        let desc = AllocationDesc::new(Usage::DEVICE_LOCAL)
            .pool(pool)
            .within_budget();
        Request::with_desc(requirements(MIB, 256), ResourceKind::Buffer, desc)
    };
    let fixed = allocator
        .create_pool(&PoolDesc::new(VRAM).block_size(32 * MIB))
        .unwrap();
    assert!(matches!(
        allocator.allocate(&within(fixed)),
        Err(Error::OverBudget { heap: 0, .. })
    ));
    assert_eq!(device.counters().allocate_calls, 0);

    let growing = allocator.create_pool(&PoolDesc::new(VRAM)).unwrap();
    let allocation = allocator.allocate(&within(growing)).unwrap();
    let stats = allocator.pool_stats(&growing).unwrap();
    assert_eq!((stats.blocks, stats.block_bytes), (1, 16 * MIB));
    free(&allocator, allocation);
    allocator.destroy_pool(fixed).unwrap();
    allocator.destroy_pool(growing).unwrap();
    finish(allocator, &device);
}

#[test]
fn allocations_in_non_coherent_pools_flush_whole_atoms() {
    let (allocator, device) = allocator(FakeLayout::mobile());
    // The mobile layout's cached, non-coherent type.
    let readback = allocator.memory_type_for(!0, Usage::READBACK).unwrap();
    assert_eq!(readback, 2);
    let pool = allocator
        .create_pool(&PoolDesc::new(readback).block_size(MIB))
        .unwrap();
    let desc = AllocationDesc::new(Usage::READBACK).pool(pool);
    let mut allocations = Vec::new();
    for _ in 0..3 {
        let request = Request::with_desc(requirements(100, 4), ResourceKind::Buffer, desc);
        allocations.push(allocator.allocate(&request).unwrap());
    }
    for allocation in &mut allocations {
        // Atom-aligned starts: each widened range stays off the others.
        assert_eq!(allocation.offset() % 256, 0);
        allocator.mapped_slice_mut(allocation).unwrap().fill(7);
        allocator.flush(allocation, ..).unwrap();
        allocator.invalidate(allocation, ..).unwrap();
    }
    assert_eq!(device.flushed_ranges().len(), 3);
    assert!(device
        .flushed_ranges()
        .iter()
        .all(|range| range.offset % 256 == 0 && range.size % 256 == 0));
    for allocation in allocations {
        free(&allocator, allocation);
    }
    allocator.destroy_pool(pool).unwrap();
    finish(allocator, &device);
}

#[test]
fn the_exclusive_methods_reach_custom_pools() {
    let (mut allocator, device) = allocator(FakeLayout::discrete());
    let pool = allocator
        .create_pool(&PoolDesc::new(VRAM).block_size(4 * MIB).max_blocks(1))
        .unwrap();
    let a = allocator.allocate_mut(&in_pool(pool, MIB)).unwrap();
    let b = allocator.allocate(&in_pool(pool, MIB)).unwrap();
    assert_eq!(a.memory(), b.memory());
    // SAFETY: the fake device runs no GPU work.
    unsafe { allocator.free_mut(a) }.unwrap();
    // SAFETY: as above.
    unsafe { allocator.free_mut(b) }.unwrap();
    assert_eq!(allocator.pool_stats(&pool).unwrap().block_allocations, 0);
    allocator.destroy_pool(pool).unwrap();
    assert_eq!(
        allocator.allocate_mut(&in_pool(pool, MIB)),
        Err(Error::StalePool)
    );
    finish(allocator, &device);
}

/// Where the default pools give optimal images blocks of their own (a
/// granularity above `max_padded_granularity`), a pool pads them to whole
/// pages instead: its one block holds a buffer beside an image, never on
/// the image's pages. (Found on lavapipe's discrete profile: the pool
/// refused the buffer with `PoolFull` and its block nearly empty.)
#[test]
fn a_one_block_pool_holds_buffers_beside_images_at_any_granularity() {
    const PAGE: u64 = 64 * 1024;
    let layout = FakeLayout::discrete().with_granularity(PAGE);
    let (allocator, device) = allocator_with(layout, Config::default());
    let pool = allocator
        .create_pool(&PoolDesc::new(VRAM).block_size(4 * MIB).max_blocks(1))
        .unwrap();
    let request = |size, kind| {
        let desc = AllocationDesc::new(Usage::DEVICE_LOCAL).pool(pool);
        allocator
            .allocate(&Request::with_desc(requirements(size, 256), kind, desc))
            .unwrap()
    };
    let image = request(16 * 1024, ResourceKind::OptimalImage);
    let buffer = request(4096, ResourceKind::Buffer);
    let second_image = request(100 * 1024, ResourceKind::OptimalImage);
    assert_eq!(image.memory(), buffer.memory());
    assert_eq!(image.memory(), second_image.memory());
    let pages =
        |a: &vk_suballoc::Allocation| a.offset() / PAGE..=(a.offset() + a.size() - 1) / PAGE;
    for image in [&image, &second_image] {
        assert_eq!(image.offset() % PAGE, 0);
        let (images, buffers) = (pages(image), pages(&buffer));
        assert!(
            images.end() < buffers.start() || buffers.end() < images.start(),
            "{image:?} and {buffer:?} share a page"
        );
    }
    // The default pools keep the two kinds in separate blocks here.
    let default_image = allocator
        .allocate(&Request::new(
            requirements(16 * 1024, 256),
            Usage::DEVICE_LOCAL,
            ResourceKind::OptimalImage,
        ))
        .unwrap();
    let default_buffer = allocator
        .allocate(&super::super::buffer(4096, 256, Usage::DEVICE_LOCAL))
        .unwrap();
    assert_ne!(default_image.memory(), default_buffer.memory());
    for allocation in [image, buffer, second_image, default_image, default_buffer] {
        free(&allocator, allocation);
    }
    allocator.destroy_pool(pool).unwrap();
    finish(allocator, &device);
}
