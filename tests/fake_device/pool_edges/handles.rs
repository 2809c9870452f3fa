//! Pool handles and slots: a destroyed pool's handle stays stale after its
//! slot's 16-bit generation wraps, the handles keep their sizes, and the
//! last of the 2047 slots works while the next pool is `TooManyPools`.
//! Apart because a handle's staleness is the pool table's own rule, which
//! no other test of the pools reaches across 65,536 lifetimes.

use vk_suballoc::device::fake::FakeLayout;
use vk_suballoc::{AllocationDesc, Error, Pool, PoolDesc, Request, ResourceKind, Usage};

use super::super::{allocator, finish, free, requirements};
use super::{upload_in, MIB};

/// A pool's slot generation is 16 bits: after 65,536 pools made and
/// destroyed in one slot, the slot retires instead of naming a new pool
/// with a destroyed pool's tag. (When it wrapped, the stale handle was
/// served from the new pool whatever its memory type, and the allocation
/// reported the old handle's type: on the mobile layout, memory of the
/// non-coherent type 2 passed for the coherent type 1, so `flush` skipped
/// the flush and the GPU never saw the host's bytes.) No handle of the
/// pools destroyed on the way names the new pool either: the slot's last
/// generation is used once, not by every pool made in the slot after it.
#[test]
fn a_destroyed_pools_handle_stays_stale_after_its_generation_wraps() {
    const COHERENT: u32 = 1;
    const NON_COHERENT: u32 = 2;
    let (allocator, device) = allocator(FakeLayout::mobile());
    let old = allocator.create_pool(&PoolDesc::new(COHERENT)).unwrap();
    allocator.destroy_pool(old).unwrap();
    let destroyed: Vec<Pool> = (0..u16::MAX)
        .map(|_| {
            let pool = allocator.create_pool(&PoolDesc::new(COHERENT)).unwrap();
            allocator.destroy_pool(pool).unwrap();
            pool
        })
        .collect();
    let new = allocator
        .create_pool(&PoolDesc::new(NON_COHERENT).block_size(MIB))
        .unwrap();

    let result = allocator.allocate(&upload_in(old, 100, COHERENT));
    if let Ok(mut allocation) = result {
        let memory = allocation.memory();
        let block_type = device
            .live_allocations()
            .into_iter()
            .find(|m| m.memory == memory)
            .map(|m| m.memory_type);
        allocator
            .mapped_slice_mut(&mut allocation)
            .unwrap()
            .fill(0xAB);
        allocator.flush(&allocation, ..).unwrap();
        // SAFETY: no slice of the allocation is alive.
        let seen = unsafe { device.read(memory, allocation.offset(), 100) }.unwrap();
        let reported = allocation.memory_type();
        free(&allocator, allocation);
        panic!(
            "the destroyed pool's handle was served by the new pool: the allocation \
             says memory type {reported}, its block is of type {block_type:?}; \
             flushes recorded: {}; the GPU sees {:#x} where the host wrote 0xab",
            device.flushed_ranges().len(),
            seen[0]
        );
    }
    assert_eq!(result.err(), Some(Error::StalePool));
    // Nor may the old handle destroy (or read) the new pool.
    assert_eq!(allocator.pool_stats(&old).err(), Some(Error::StalePool));
    assert_eq!(allocator.destroy_pool(old), Err(Error::StalePool));
    for (i, pool) in destroyed.iter().enumerate() {
        assert_eq!(
            allocator.pool_stats(pool).err(),
            Some(Error::StalePool),
            "pool {} of those destroyed after the first: {pool:?}, the new pool {new:?}",
            i + 1
        );
    }
    allocator.destroy_pool(new).unwrap();
    finish(allocator, &device);
}

/// `Allocation` stays 64 bytes (commit 68a371b measured 9-11 ns per
/// allocation when it grew to 72; allocation.rs asserts it at build time
/// too), `Pool` and `Option<Pool>` 8.
#[test]
fn pool_handles_keep_their_sizes() {
    // 60 on 32-bit targets (a 4-byte mapped pointer), where allocation.rs
    // asserts nothing.
    let expected = if cfg!(target_pointer_width = "64") {
        64
    } else {
        60
    };
    assert_eq!(std::mem::size_of::<vk_suballoc::Allocation>(), expected);
    assert_eq!(std::mem::size_of::<Pool>(), 8);
    assert_eq!(std::mem::size_of::<Option<Pool>>(), 8);
}

/// 2047 pools at once, the last slot's tag included; the 2048th is
/// `TooManyPools`, refused before its `min_blocks` block is made: no
/// `vkAllocateMemory` for a pool that cannot be kept (which, short of
/// memory, would fail as out of memory instead, after releasing the
/// default pools' kept empty blocks for it).
#[test]
fn the_last_pool_slot_works_and_the_next_is_too_many_pools() {
    let (allocator, device) = allocator(FakeLayout::discrete());
    let pools: Vec<Pool> = (0..2047)
        .map(|_| allocator.create_pool(&PoolDesc::new(1)).unwrap())
        .collect();
    let last = *pools.last().unwrap();
    let desc = AllocationDesc::new(Usage::DEVICE_LOCAL).pool(last);
    let request = Request::with_desc(requirements(MIB, 256), ResourceKind::Buffer, desc);
    let allocation = allocator.allocate(&request).unwrap();
    assert!(allocator.owns(&allocation));
    assert_eq!(allocator.pool_stats(&last).unwrap().block_allocations, 1);
    let calls = device.counters().allocate_calls;
    assert_eq!(
        allocator.create_pool(&PoolDesc::new(1).block_size(MIB).min_blocks(1)),
        Err(Error::TooManyPools)
    );
    assert_eq!(device.counters().allocate_calls, calls);
    assert_eq!(
        device.live_allocations().len(),
        1,
        "the refused pool's block"
    );
    free(&allocator, allocation);
    for pool in pools {
        allocator.destroy_pool(pool).unwrap();
    }
    finish(allocator, &device);
}
