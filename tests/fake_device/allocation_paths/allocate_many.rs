//! `allocate_many`: one allocation per request, in their order, or none:
//! a bad request fails the call before any is placed, and when one fails
//! as it is placed, what the call made before it is freed, a custom pool's
//! allocation too.

use ash::vk::{self, Handle};
use gpu_alloc_types::MemoryPropertyFlags;
use vk_suballoc::device::fake::FakeLayout;
use vk_suballoc::device::DedicatedTarget;
use vk_suballoc::{
    Allocation, AllocationDesc, DedicatedHint, DedicatedPolicy, Error, PoolDesc, Request,
    ResourceKind, Usage,
};

use super::super::{allocator, buffer, finish, free, requirements};
use crate::FakeTarget;

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
/// releases it. The failure is one found as the request is placed (no
/// existing memory of its type has room): a bad request fails the call
/// before anything is placed.
#[test]
fn a_block_made_before_the_failing_request_is_kept_empty() {
    let (allocator, device) = allocator(FakeLayout::discrete());
    let failing = [
        buffer(4096, 256, Usage::DEVICE_LOCAL),
        buffer(4096, 256, Usage::UPLOAD).existing_memory_only(),
    ];
    assert_eq!(
        allocator.allocate_many(&failing),
        Err(Error::NoRoomInExistingMemory)
    );
    let stats = allocator.stats();
    assert_eq!((stats.allocations(), stats.memory_objects), (0, 1));
    assert_eq!(device.live_allocations().len(), 1);
    let reserved: u64 = stats.memory_types.iter().map(|t| t.block_bytes).sum();
    assert!(reserved > 0);
    assert_eq!(allocator.trim(), reserved);
    assert!(device.live_allocations().is_empty());
    finish(allocator, &device);
}

/// Every kind of bad request (a pool destroyed before the call included),
/// last in a batch whose requests before it
/// would each make a memory object (a block, dedicated memory, a custom
/// pool's block), fails the call before anything is placed: its error,
/// no `vkAllocateMemory`, the statistics as before (no block kept empty).
/// Before the requests were checked up front, those before it were placed
/// and freed again, and their blocks kept.
#[test]
fn a_bad_request_last_in_a_batch_makes_nothing() {
    const GIB: u64 = 1 << 30;
    let (allocator, device) = allocator(FakeLayout::discrete());
    let (other, other_device) = super::super::allocator(FakeLayout::discrete());
    let pool = allocator.create_pool(&PoolDesc::new(1)).unwrap();
    let foreign = other.create_pool(&PoolDesc::new(1)).unwrap();
    // Its blocks exist from the start, so a request past their size makes
    // nothing once placed either: only the check up front shows it.
    let fixed = allocator
        .create_pool(&PoolDesc::new(1).block_size(1 << 20).min_blocks(1))
        .unwrap();
    // Destroyed before the call: found up front too, not only as placed.
    let destroyed = allocator.create_pool(&PoolDesc::new(1)).unwrap();
    allocator.destroy_pool(destroyed).unwrap();
    let in_pool = |pool, bits| {
        let desc = AllocationDesc::new(Usage::DEVICE_LOCAL).pool(pool);
        let mut requirements = requirements(4096, 256);
        requirements.memory_type_bits = bits;
        Request::with_desc(requirements, ResourceKind::Buffer, desc)
    };
    let past_fixed_blocks = {
        let desc = AllocationDesc::new(Usage::DEVICE_LOCAL).pool(fixed);
        Request::with_desc(requirements((1 << 20) + 1, 256), ResourceKind::Buffer, desc)
    };
    let in_types = |bits, usage| {
        let mut requirements = requirements(4096, 256);
        requirements.memory_type_bits = bits;
        Request::new(requirements, usage, ResourceKind::Buffer)
    };
    let untargeted = buffer(4096, 256, Usage::DEVICE_LOCAL).driver_dedicated(DedicatedHint {
        required: true,
        preferred: true,
    });
    let bad = [
        (buffer(0, 16, Usage::READBACK), Error::ZeroSize),
        (
            buffer(64, 48, Usage::READBACK),
            Error::AlignmentNotPowerOfTwo(48),
        ),
        (
            buffer(64, 16, Usage::READBACK).min_alignment(24),
            Error::AlignmentNotPowerOfTwo(24),
        ),
        (untargeted, Error::MissingDedicatedTarget),
        (
            buffer(4096, 256, Usage::DEVICE_LOCAL)
                .fake_target(DedicatedTarget::Image(vk::Image::from_raw(1))),
            Error::DedicatedTargetMismatch,
        ),
        (in_types(0, Usage::DEVICE_LOCAL), Error::NoMemoryTypeBits(0)),
        (
            in_types(1 << 1, Usage::UPLOAD),
            Error::NoSuitableMemoryType {
                memory_type_bits: 1 << 1,
                usage: Usage::UPLOAD,
            },
        ),
        (
            buffer(100 * GIB, 1, Usage::DEVICE_LOCAL),
            Error::SizeExceedsHeaps {
                size: 100 * GIB,
                largest_heap: 16 * GIB,
            },
        ),
        (
            buffer(5 * GIB, 1, Usage::DEVICE_LOCAL),
            Error::SizeExceedsMaxAllocation {
                size: 5 * GIB,
                max: 4 * GIB,
            },
        ),
        (in_pool(foreign, !0), Error::ForeignPool),
        (in_pool(destroyed, !0), Error::StalePool),
        (
            past_fixed_blocks,
            Error::TooLargeForPool {
                size: (1 << 20) + 256,
                block_size: 1 << 20,
            },
        ),
        (
            in_pool(pool, 1 << 0),
            Error::PoolTypeNotAllowed {
                memory_type: 1,
                memory_type_bits: 1 << 0,
            },
        ),
    ];
    let stats = allocator.stats();
    let calls = device.counters().allocate_calls;
    for (last, error) in bad {
        let requests = [
            buffer(4096, 256, Usage::DEVICE_LOCAL),
            buffer(1 << 20, 256, Usage::UPLOAD).dedicated(DedicatedPolicy::Always),
            in_pool(pool, !0),
            last,
        ];
        assert_eq!(allocator.allocate_many(&requests), Err(error));
        assert_eq!(
            device.counters().allocate_calls,
            calls,
            "{error:?}: vkAllocateMemory called"
        );
        assert_eq!(allocator.stats(), stats, "{error:?}");
    }
    // The same requests but the bad one are placed.
    let requests = [
        buffer(4096, 256, Usage::DEVICE_LOCAL),
        buffer(1 << 20, 256, Usage::UPLOAD).dedicated(DedicatedPolicy::Always),
        in_pool(pool, !0),
    ];
    for allocation in allocator.allocate_many(&requests).unwrap() {
        free(&allocator, allocation);
    }
    allocator.destroy_pool(pool).unwrap();
    allocator.destroy_pool(fixed).unwrap();
    other.destroy_pool(foreign).unwrap();
    finish(allocator, &device);
    finish(other, &other_device);
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

/// A request with [`DedicatedPolicy::Never`] that no block of any memory
/// type it may take could hold (rounded up as a block places it, past
/// `maxMemoryAllocationSize`), which `allocate` refuses without a Vulkan
/// call whatever is allocated, is bad in a batch too: `allocate_many`
/// fails before placing the requests ahead of it (no `vkAllocateMemory`,
/// no block left kept empty), and with its error, not a later bad
/// request's.
#[test]
fn a_request_only_a_block_could_take_and_none_can_hold_is_bad_in_a_batch() {
    const MIB: u64 = 1 << 20;
    let mut layout = FakeLayout::discrete();
    layout.max_memory_allocation_size = 2 * MIB + 1000;
    let (allocator, device) = allocator(layout);
    let past_every_block =
        || buffer(2 * MIB + 900, 256, Usage::DEVICE_LOCAL).dedicated(DedicatedPolicy::Never);
    let error = Error::SizeExceedsMaxAllocation {
        size: 2 * MIB + 1024,
        max: 2 * MIB + 1000,
    };
    let (stats, calls) = (allocator.stats(), device.counters().allocate_calls);
    assert_eq!(allocator.allocate(&past_every_block()).err(), Some(error));
    assert_eq!(device.counters().allocate_calls, calls);
    let requests = [buffer(4096, 256, Usage::DEVICE_LOCAL), past_every_block()];
    assert_eq!(allocator.allocate_many(&requests).err(), Some(error));
    assert_eq!(
        device.counters().allocate_calls,
        calls,
        "vkAllocateMemory called"
    );
    assert_eq!(allocator.stats(), stats);
    let requests = [past_every_block(), buffer(0, 256, Usage::DEVICE_LOCAL)];
    assert_eq!(allocator.allocate_many(&requests).err(), Some(error));
    finish(allocator, &device);
}

/// A request for existing memory only that needs dedicated memory (the
/// caller's [`DedicatedPolicy::Always`], the driver's requirement, a custom
/// pool of a lazily allocated memory type, only such a type allowed), which
/// `allocate` refuses with
/// `NoRoomInExistingMemory` whatever is allocated, is bad in a batch too:
/// `allocate_many` fails before placing the requests ahead of it (no
/// `vkAllocateMemory`, no block left kept empty).
#[test]
fn a_request_for_existing_memory_that_needs_dedicated_memory_is_bad_in_a_batch() {
    let layout = FakeLayout::mobile();
    let lazy = layout
        .memory_types
        .iter()
        .position(|t| t.props.contains(MemoryPropertyFlags::LAZILY_ALLOCATED))
        .expect("the mobile layout has a lazily allocated type") as u32;
    let (allocator, device) = allocator(layout);
    let lazy_pool = allocator.create_pool(&PoolDesc::new(lazy)).unwrap();
    let resource = device.create_resource();
    let target = DedicatedTarget::Buffer(vk::Buffer::from_raw(resource));
    let needs_dedicated = [
        buffer(4096, 256, Usage::DEVICE_LOCAL).dedicated(DedicatedPolicy::Always),
        buffer(4096, 256, Usage::DEVICE_LOCAL)
            .driver_dedicated(DedicatedHint {
                required: true,
                preferred: true,
            })
            .fake_target(target),
        Request::with_desc(
            requirements(4096, 256),
            ResourceKind::OptimalImage,
            AllocationDesc::new(Usage::DEVICE_LOCAL).pool(lazy_pool),
        ),
        // Naming no pool, but allowed only the lazily allocated type.
        Request::new(
            vk::MemoryRequirements {
                memory_type_bits: 1 << lazy,
                ..requirements(4096, 256)
            },
            Usage::TRANSIENT,
            ResourceKind::OptimalImage,
        ),
    ];
    let (stats, calls) = (allocator.stats(), device.counters().allocate_calls);
    for (index, request) in needs_dedicated.iter().enumerate() {
        let request = request.existing_memory_only();
        assert_eq!(
            allocator.allocate(&request).err(),
            Some(Error::NoRoomInExistingMemory),
            "request {index}"
        );
        let requests = [buffer(4096, 256, Usage::DEVICE_LOCAL), request];
        assert_eq!(
            allocator.allocate_many(&requests).err(),
            Some(Error::NoRoomInExistingMemory),
            "request {index}"
        );
        assert_eq!(
            device.counters().allocate_calls,
            calls,
            "request {index}: vkAllocateMemory called"
        );
        assert_eq!(allocator.stats(), stats, "request {index}");
    }
    // Not for existing memory only, they are placed, in dedicated memory;
    // so is one with `DedicatedPolicy::Never` allowed only the lazily
    // allocated type (always dedicated, whatever the policy).
    let mut placed = needs_dedicated.to_vec();
    placed.push(needs_dedicated[3].dedicated(DedicatedPolicy::Never));
    let made = allocator.allocate_many(&placed).unwrap();
    assert!(made.iter().all(Allocation::is_dedicated));
    for allocation in made {
        free(&allocator, allocation);
    }
    allocator.destroy_pool(lazy_pool).unwrap();
    device.destroy_resource(resource);
    finish(allocator, &device);
}
