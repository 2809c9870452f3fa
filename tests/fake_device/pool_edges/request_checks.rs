//! The order of a pool request's checks: a host-access request larger than
//! the pool's heap, one exactly the heap's size or the allocation limit,
//! and one for existing memory only that no block of a fixed-size pool
//! could hold, each get the error the default path's documented order
//! gives. Apart because they check which error a caller sees, not where
//! memory goes.

use ash::vk;
use vk_suballoc::device::fake::FakeLayout;
use vk_suballoc::{AllocationDesc, Error, PoolDesc, Request, ResourceKind, Usage};

use super::super::{allocator, finish, free, requirements};
use super::MIB;

/// A pool request is checked in the default path's order: a host-access
/// request larger than the pool's heap is `SizeExceedsHeaps` on both
/// paths, before the pool's type is found not host-visible.
#[test]
fn a_pool_request_checks_in_the_documented_order() {
    let (allocator, device) = allocator(FakeLayout::discrete());
    let pool = allocator.create_pool(&PoolDesc::new(1)).unwrap();
    let huge = vk::MemoryRequirements {
        size: 9 << 30,
        alignment: 256,
        memory_type_bits: 1 << 1,
    };
    // Type 1's heap (VRAM, 8 GiB) is the only one allowed; it suits no
    // host access, so it is the largest among all the allowed ones. The
    // pool's request takes 9 GiB in a block too (no margin, aligned).
    let too_large = Err(Error::SizeExceedsHeaps {
        size: 9 << 30,
        largest_heap: 8 << 30,
    });
    let default = allocator.allocate(&Request::new(huge, Usage::UPLOAD, ResourceKind::Buffer));
    assert_eq!(default.map(|_| ()), too_large);
    let desc = AllocationDesc::new(Usage::UPLOAD).pool(pool);
    let pooled = allocator.allocate(&Request::with_desc(huge, ResourceKind::Buffer, desc));
    assert_eq!(pooled.map(|_| ()), too_large);
    allocator.destroy_pool(pool).unwrap();
    finish(allocator, &device);
}

/// A pool request exactly as large as its heap, or as
/// `maxMemoryAllocationSize`, passes those checks, as on the default
/// path: the heap's size is refused for its usage instead (the VRAM type
/// is not host-visible), and the limit itself takes a block of its size.
#[test]
fn a_pool_request_at_the_heap_size_or_the_allocation_limit_passes_them() {
    const GIB: u64 = 1 << 30;
    let (allocator, device) = allocator(FakeLayout::discrete());
    let pool = allocator.create_pool(&PoolDesc::new(1)).unwrap();
    let in_pool = |size, usage| {
        let desc = AllocationDesc::new(usage).pool(pool);
        Request::with_desc(requirements(size, 256), ResourceKind::Buffer, desc)
    };
    // The VRAM heap: 8 GiB.
    let heap_sized = allocator.allocate(&in_pool(8 * GIB, Usage::READBACK));
    assert_eq!(
        heap_sized.map(|_| ()),
        Err(Error::NoSuitableMemoryType {
            memory_type_bits: 1 << 1,
            usage: Usage::READBACK,
        })
    );
    let largest = allocator
        .allocate(&in_pool(4 * GIB, Usage::DEVICE_LOCAL))
        .unwrap_or_else(|error| panic!("{error}"));
    assert_eq!(largest.size(), 4 * GIB);
    assert_eq!(allocator.pool_stats(&pool).unwrap().block_bytes, 4 * GIB);
    free(&allocator, largest);
    allocator.destroy_pool(pool).unwrap();
    finish(allocator, &device);
}

/// A request for existing memory only that no block of a fixed-size pool
/// could hold is refused with `TooLargeForPool`, as any other request is:
/// the documented order puts the pool's block size before exhaustion, and
/// no freeing would help, whereas `NoRoomInExistingMemory` says to retry
/// without the flag (which would get `TooLargeForPool`). Before, it got
/// `NoRoomInExistingMemory`. One the pool's blocks could hold still gets
/// that error when they have no room.
#[test]
fn existing_memory_only_too_large_for_a_pool_says_so() {
    let (allocator, device) = allocator(FakeLayout::discrete());
    for min_blocks in [0, 1] {
        let desc = PoolDesc::new(1).block_size(MIB).min_blocks(min_blocks);
        let pool = allocator.create_pool(&desc).unwrap();
        let only = |size: u64| {
            let desc = AllocationDesc::new(Usage::DEVICE_LOCAL)
                .pool(pool)
                .existing_memory_only();
            Request::with_desc(requirements(size, 256), ResourceKind::Buffer, desc)
        };
        let calls = device.counters().allocate_calls;
        assert_eq!(
            allocator.allocate(&only(MIB + 1)),
            Err(Error::TooLargeForPool {
                size: MIB + 256,
                block_size: MIB
            })
        );
        if min_blocks == 0 {
            assert_eq!(
                allocator.allocate(&only(MIB)),
                Err(Error::NoRoomInExistingMemory)
            );
        } else {
            let whole = allocator.allocate(&only(MIB)).unwrap();
            assert_eq!(
                allocator.allocate(&only(256)),
                Err(Error::NoRoomInExistingMemory)
            );
            free(&allocator, whole);
        }
        assert_eq!(device.counters().allocate_calls, calls);
        allocator.destroy_pool(pool).unwrap();
    }
    finish(allocator, &device);
}
