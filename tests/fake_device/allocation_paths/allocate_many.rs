//! `allocate_many`: one allocation per request, in their order, or none:
//! when a request fails, what the call made before it is freed, a custom
//! pool's allocation too.

use vk_suballoc::device::fake::FakeLayout;
use vk_suballoc::{
    Allocation, AllocationDesc, DedicatedPolicy, Error, PoolDesc, Request, ResourceKind, Usage,
};

use super::super::{allocator, buffer, finish, free, requirements};

/// `allocate_many` makes one allocation per request, in their order, or
/// none: when a request fails, those made before it (a block range and
/// dedicated memory here) are freed and its error returned.
#[test]
fn allocate_many_is_all_or_nothing() {
    let (allocator, device) = allocator(FakeLayout::discrete());
    let requests = [
        buffer(4096, 256, Usage::DEVICE_LOCAL),
        buffer(1 << 20, 256, Usage::UPLOAD).dedicated(DedicatedPolicy::Always),
        buffer(100, 16, Usage::READBACK),
    ];
    let made = allocator.allocate_many(&requests).unwrap();
    let sizes: Vec<u64> = made.iter().map(Allocation::size).collect();
    assert_eq!(sizes, [4096, 1 << 20, 100]);
    assert!(made[1].is_dedicated());
    for allocation in made {
        free(&allocator, allocation);
    }

    let objects = device.live_allocations().len();
    let failing = [
        buffer(4096, 256, Usage::DEVICE_LOCAL),
        buffer(1 << 20, 256, Usage::UPLOAD).dedicated(DedicatedPolicy::Always),
        buffer(0, 16, Usage::READBACK),
        buffer(100, 16, Usage::READBACK),
    ];
    assert_eq!(allocator.allocate_many(&failing), Err(Error::ZeroSize));
    assert_eq!(allocator.stats().live_bytes(), 0);
    assert_eq!(allocator.stats().allocations(), 0);
    assert_eq!(
        device.live_allocations().len(),
        objects,
        "the dedicated memory is freed"
    );
    assert_eq!(allocator.allocate_many(&[]), Ok(Vec::new()));
    finish(allocator, &device);
}

/// A block made for a request before the failing one stays, empty and
/// kept, as `allocate_many`'s docs and the README's exceptions say; `trim`
/// releases it.
#[test]
fn a_block_made_before_the_failing_request_is_kept_empty() {
    let (allocator, device) = allocator(FakeLayout::discrete());
    let failing = [
        buffer(4096, 256, Usage::DEVICE_LOCAL),
        buffer(0, 16, Usage::DEVICE_LOCAL),
    ];
    assert_eq!(allocator.allocate_many(&failing), Err(Error::ZeroSize));
    let stats = allocator.stats();
    assert_eq!((stats.allocations(), stats.memory_objects), (0, 1));
    assert_eq!(device.live_allocations().len(), 1);
    let reserved: u64 = stats.memory_types.iter().map(|t| t.block_bytes).sum();
    assert!(reserved > 0);
    assert_eq!(allocator.trim(), reserved);
    assert!(device.live_allocations().is_empty());
    finish(allocator, &device);
}

/// `allocate_many` over requests that name a custom pool: one naming
/// another allocator's pool, or asking for existing memory only where
/// there is none, fails the call, and the pool's allocation made before it
/// is freed with the others (the pool is then empty and may be destroyed).
#[test]
fn allocate_many_frees_a_custom_pool_s_allocation_on_failure() {
    let (allocator, device) = allocator(FakeLayout::discrete());
    let (other, other_device) = super::super::allocator(FakeLayout::discrete());
    let pool = allocator.create_pool(&PoolDesc::new(1)).unwrap();
    let foreign = other.create_pool(&PoolDesc::new(1)).unwrap();
    let in_pool = |pool| {
        let desc = AllocationDesc::new(Usage::DEVICE_LOCAL).pool(pool);
        Request::with_desc(requirements(4096, 256), ResourceKind::Buffer, desc)
    };
    let existing_only = buffer(4096, 256, Usage::UPLOAD).existing_memory_only();
    for (last, error) in [
        (in_pool(foreign), Error::ForeignPool),
        (existing_only, Error::NoRoomInExistingMemory),
    ] {
        let requests = [buffer(4096, 256, Usage::DEVICE_LOCAL), in_pool(pool), last];
        assert_eq!(allocator.allocate_many(&requests), Err(error));
        assert_eq!(allocator.stats().allocations(), 0, "{error:?}");
        assert_eq!(allocator.pool_stats(&pool).unwrap().allocations(), 0);
    }
    allocator.destroy_pool(pool).unwrap();
    other.destroy_pool(foreign).unwrap();
    finish(allocator, &device);
    finish(other, &other_device);
}
