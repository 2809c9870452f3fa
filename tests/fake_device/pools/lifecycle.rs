//! A pool from its description to its end: bad descriptions refused
//! with typed errors and making nothing, another allocator's pool
//! refused, a pool destroyed only once its allocations and frames are
//! gone, and the pools an allocator's drop releases.

use vk_suballoc::device::fake::FakeLayout;
use vk_suballoc::{Error, PoolDesc};

use super::super::frames::end_frame;
use super::super::{allocator, finish, free};

use super::{in_pool, objects, MIB, VRAM};

#[test]
fn destroying_a_pool_waits_for_its_allocations_and_frames() {
    let (allocator, device) = allocator(FakeLayout::discrete());
    let pool = allocator
        .create_pool(&PoolDesc::new(VRAM).block_size(4 * MIB))
        .unwrap();
    let a = allocator.allocate(&in_pool(pool, MIB)).unwrap();
    let b = allocator.allocate(&in_pool(pool, MIB)).unwrap();
    assert_eq!(
        allocator.destroy_pool(pool),
        Err(Error::PoolNotEmpty { allocations: 2 })
    );
    free(&allocator, a);
    allocator.free_after_frame(b).unwrap();
    // The free waits for its frame: the pool still holds it.
    assert_eq!(
        allocator.destroy_pool(pool),
        Err(Error::PoolNotEmpty { allocations: 1 })
    );
    device.signal_fence(end_frame(&allocator, &device));
    allocator.collect().unwrap();
    allocator.destroy_pool(pool).unwrap();
    assert_eq!(objects(&device), 0);

    // The handle is stale now, for every call that takes it.
    assert_eq!(allocator.destroy_pool(pool), Err(Error::StalePool));
    assert_eq!(allocator.pool_stats(&pool), Err(Error::StalePool));
    assert_eq!(
        allocator.allocate(&in_pool(pool, MIB)),
        Err(Error::StalePool)
    );
    // A new pool may take the same slot: the old handle still names nothing.
    let next = allocator
        .create_pool(&PoolDesc::new(VRAM).block_size(4 * MIB))
        .unwrap();
    assert_ne!(next, pool);
    assert_eq!(
        allocator.allocate(&in_pool(pool, MIB)),
        Err(Error::StalePool)
    );
    let c = allocator.allocate(&in_pool(next, MIB)).unwrap();
    free(&allocator, c);
    // A free of the current frame, never sealed: `collect_idle` releases
    // it, and the pool can go (README, "Custom pools").
    let d = allocator.allocate(&in_pool(next, MIB)).unwrap();
    allocator.free_after_frame(d).unwrap();
    assert_eq!(
        allocator.destroy_pool(next),
        Err(Error::PoolNotEmpty { allocations: 1 })
    );
    // SAFETY: the fake device runs no GPU work.
    unsafe { allocator.collect_idle() };
    allocator.destroy_pool(next).unwrap();
    finish(allocator, &device);
}

#[test]
fn another_allocators_pool_is_refused() {
    let (allocator, device) = allocator(FakeLayout::discrete());
    let (other, other_device) = super::super::allocator(FakeLayout::discrete());
    let theirs = other.create_pool(&PoolDesc::new(VRAM)).unwrap();
    assert_eq!(
        allocator.allocate(&in_pool(theirs, MIB)),
        Err(Error::ForeignPool)
    );
    assert_eq!(allocator.destroy_pool(theirs), Err(Error::ForeignPool));
    assert_eq!(allocator.pool_stats(&theirs), Err(Error::ForeignPool));
    other.destroy_pool(theirs).unwrap();
    finish(other, &other_device);
    finish(allocator, &device);
}

#[test]
fn bad_pool_descriptions_are_typed_errors_and_make_nothing() {
    let (allocator, device) = allocator(FakeLayout::discrete());
    // Each refused with the text of the rule it breaks, not merely some
    // `InvalidConfig`.
    let invalid = |desc: PoolDesc<'_>, text| {
        assert_eq!(
            allocator.create_pool(&desc).err(),
            Some(Error::InvalidConfig(text)),
            "{desc:?}"
        );
    };
    const TYPE: &str = "PoolDesc::memory_type is not a memory type this allocator uses";
    const BLOCK_SIZE: &str = "PoolDesc::block_size exceeds the heap or maxMemoryAllocationSize";
    const MAX_BLOCKS: &str = "PoolDesc::max_blocks must be at least 1 and at least min_blocks";
    invalid(PoolDesc::new(5), TYPE); // the layout has types 0..5
    invalid(PoolDesc::new(32), TYPE);
    invalid(PoolDesc::new(u32::MAX), TYPE);
    // Larger than the 8 GiB heap, then than maxMemoryAllocationSize (4 GiB).
    invalid(PoolDesc::new(VRAM).block_size(9 << 30), BLOCK_SIZE);
    invalid(PoolDesc::new(VRAM).block_size((4 << 30) + 1), BLOCK_SIZE);
    invalid(PoolDesc::new(VRAM).max_blocks(0), MAX_BLOCKS);
    invalid(PoolDesc::new(VRAM).min_blocks(3).max_blocks(2), MAX_BLOCKS);
    assert_eq!(device.counters().allocate_calls, 0);
    finish(allocator, &device);
}

#[test]
fn dropping_the_allocator_releases_its_pools() {
    let (allocator, device) = allocator(FakeLayout::discrete());
    let pool = allocator
        .create_pool(&PoolDesc::new(VRAM).block_size(4 * MIB).min_blocks(2))
        .unwrap();
    // Leaked on purpose: the allocator logs it and frees the block.
    let _leaked = allocator.allocate(&in_pool(pool, MIB)).unwrap();
    assert_eq!(objects(&device), 2);
    finish(allocator, &device);
}
