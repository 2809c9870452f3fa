//! `maxMemoryAllocationCount` and dedicated memory the driver prefers:
//! the object limit is never passed, and when dedicated memory cannot be
//! made (the object limit, a full heap, its budget or size limit, host
//! memory, a failed map) or past 3/4 of the limit, an existing block or
//! another memory type with room takes the request.

use ash::vk;
use vk_suballoc::device::fake::FakeLayout;
use vk_suballoc::device::{DedicatedTarget, DeviceError};
use vk_suballoc::{Config, DedicatedHint, DedicatedPolicy, Error, Usage};

use super::MIB;
use crate::FakeTarget;
use crate::{allocator, allocator_with, buffer, finish, free};

#[test]
fn max_memory_allocation_count_is_never_exceeded() {
    let (allocator, device) = allocator(FakeLayout::integrated().with_max_allocation_count(3));
    let dedicated = |size| buffer(size, 1, Usage::DEVICE_LOCAL).dedicated(DedicatedPolicy::Always);
    let live: Vec<_> = (0..3)
        .map(|_| allocator.allocate(&dedicated(4096)).unwrap())
        .collect();
    let calls = device.counters().allocate_calls;
    assert_eq!(
        allocator.allocate(&dedicated(4096)),
        Err(Error::TooManyObjects(3))
    );
    // Refused before the driver was asked: no VUID-...-04101 violation.
    assert_eq!(device.counters().allocate_calls, calls);
    let mut live = live.into_iter();
    free(&allocator, live.next().unwrap());
    let again = allocator.allocate(&dedicated(4096)).unwrap();
    for a in live.chain([again]) {
        free(&allocator, a);
    }
    finish(allocator, &device);
}

/// When the memory a driver prefers dedicated cannot be made (the heap is
/// full, the object limit is reached, the driver is out of host memory) or
/// mapped, an existing block with room takes the request instead of the
/// error coming back (VMA too falls back to its blocks on any failure of
/// dedicated memory tried first).
#[test]
fn a_failed_preferred_dedicated_request_takes_an_existing_block() {
    let preferred = |usage| {
        buffer(MIB, 256, usage).driver_dedicated(DedicatedHint {
            required: false,
            preferred: true,
        })
    };
    for (usage, fault) in [
        (Usage::DEVICE_LOCAL, Some(DeviceError::OutOfDeviceMemory)),
        (Usage::DEVICE_LOCAL, Some(DeviceError::TooManyObjects)),
        (Usage::DEVICE_LOCAL, Some(DeviceError::OutOfHostMemory)),
        (Usage::UPLOAD, None),
    ] {
        let (allocator, device) = allocator(FakeLayout::discrete());
        let plain = allocator.allocate(&buffer(MIB, 256, usage)).unwrap();
        match fault {
            Some(error) => device.fail_allocation(1, error),
            None => device.fail_map(1),
        }
        let placed = allocator.allocate(&preferred(usage)).unwrap();
        assert!(!placed.is_dedicated(), "{usage:?} {fault:?}");
        assert_eq!(placed.memory(), plain.memory(), "{usage:?} {fault:?}");
        assert_eq!(allocator.stats().memory_objects, 1, "{usage:?} {fault:?}");
        free(&allocator, placed);
        free(&allocator, plain);
        finish(allocator, &device);
    }
}

/// So too when what refuses the dedicated memory is the heap's budget (a
/// request held to it or not: the first pass keeps within it) or its
/// `Config::heap_size_limits` entry, neither of which asks the driver.
#[test]
fn a_preferred_dedicated_request_past_a_budget_or_limit_takes_an_existing_block() {
    let preferred = |size| {
        buffer(size, 256, Usage::DEVICE_LOCAL).driver_dedicated(DedicatedHint {
            required: false,
            preferred: true,
        })
    };
    for within_budget in [false, true] {
        let (allocator, device) = allocator(FakeLayout::discrete());
        let plain = allocator
            .allocate(&buffer(MIB, 256, Usage::DEVICE_LOCAL))
            .unwrap();
        // The budget is what the block takes: no room for another object.
        device.set_heap_budget(0, device.heap_usage()[0], 0);
        allocator.budgets();
        let request = match within_budget {
            true => preferred(MIB).within_budget(),
            false => preferred(MIB),
        };
        let placed = allocator.allocate(&request).unwrap();
        assert!(!placed.is_dedicated(), "within budget: {within_budget}");
        assert_eq!(placed.memory(), plain.memory());
        free(&allocator, placed);
        free(&allocator, plain);
        finish(allocator, &device);
    }
    // VRAM limited to 32 MiB: a 512 KiB first block, and dedicated memory
    // taking the rest of the limit.
    let mut config = Config::default();
    config.heap_size_limits[0] = 32 * MIB;
    let (allocator, device) = allocator_with(FakeLayout::discrete(), config);
    let plain = allocator
        .allocate(&buffer(64 << 10, 256, Usage::DEVICE_LOCAL))
        .unwrap();
    let rest =
        buffer(32 * MIB - (512 << 10), 256, Usage::DEVICE_LOCAL).dedicated(DedicatedPolicy::Always);
    let rest = allocator.allocate(&rest).unwrap();
    assert_eq!(device.heap_usage()[0], 32 * MIB);
    let placed = allocator.allocate(&preferred(64 << 10)).unwrap();
    assert!(!placed.is_dedicated());
    assert_eq!(placed.memory(), plain.memory());
    for allocation in [placed, rest, plain] {
        free(&allocator, allocation);
    }
    finish(allocator, &device);
}

/// At `maxMemoryAllocationCount`, a request the driver merely prefers in
/// dedicated memory takes an existing block that has room (before, the
/// dedicated attempt's `TooManyObjects` was the answer).
#[test]
fn prefer_dedicated_at_the_object_limit_takes_an_existing_block() {
    let (allocator, device) = allocator(FakeLayout::integrated().with_max_allocation_count(1));
    let plain = allocator
        .allocate(&buffer(MIB, 256, Usage::DEVICE_LOCAL))
        .unwrap();
    assert_eq!(allocator.stats().memory_objects, 1);
    let preferred = buffer(MIB, 256, Usage::DEVICE_LOCAL).driver_dedicated(DedicatedHint {
        required: false,
        preferred: true,
    });
    let placed = allocator.allocate(&preferred).unwrap();
    assert_eq!(placed.memory(), plain.memory());
    assert!(!placed.is_dedicated());
    // A driver requirement is not bent: that request fails.
    let target = device.create_resource();
    let required = buffer(MIB, 256, Usage::DEVICE_LOCAL)
        .driver_dedicated(DedicatedHint {
            required: true,
            preferred: true,
        })
        .fake_target(DedicatedTarget::Buffer(vk::Handle::from_raw(target)));
    assert_eq!(allocator.allocate(&required), Err(Error::TooManyObjects(1)));
    device.destroy_resource(target);
    free(&allocator, placed);
    free(&allocator, plain);
    finish(allocator, &device);
}

/// The same for a request over half a block, which tries dedicated memory
/// first under the default policy.
#[test]
fn a_large_request_at_the_object_limit_takes_an_existing_block() {
    let (allocator, device) = allocator(FakeLayout::integrated().with_max_allocation_count(1));
    // One 256 MiB block, then kept empty; a small buffer takes it.
    let big = allocator
        .allocate(&buffer(129 * MIB, 256, Usage::DEVICE_LOCAL).dedicated(DedicatedPolicy::Never))
        .unwrap();
    assert_eq!(device.live_allocations()[0].size, 256 * MIB);
    free(&allocator, big);
    let small = allocator
        .allocate(&buffer(MIB, 256, Usage::DEVICE_LOCAL))
        .unwrap();
    let big = allocator
        .allocate(&buffer(129 * MIB, 256, Usage::DEVICE_LOCAL))
        .unwrap();
    assert_eq!(big.memory(), small.memory());
    assert_eq!(allocator.stats().memory_objects, 1);
    free(&allocator, big);
    free(&allocator, small);
    finish(allocator, &device);
}

/// Past 3/4 of `maxMemoryAllocationCount`, requests the driver merely
/// prefers in dedicated memory go to blocks, as in VMA
/// (`AllocateMemoryOfType`), so that the last objects are left for blocks:
/// before, preferred requests took every object as dedicated memory and
/// the next plain request failed with `TooManyObjects`.
#[test]
fn past_three_quarters_of_the_object_limit_preferred_requests_take_blocks() {
    let (allocator, device) = allocator(FakeLayout::integrated().with_max_allocation_count(8));
    let preferred = buffer(MIB, 256, Usage::DEVICE_LOCAL).driver_dedicated(DedicatedHint {
        required: false,
        preferred: true,
    });
    let mut live: Vec<_> = (0..8)
        .map(|_| allocator.allocate(&preferred).unwrap())
        .collect();
    // Dedicated up to 6 objects in use (3/4 of 8), and for the request
    // that found 6; the 8th request made a block.
    let dedicated = live.iter().filter(|a| a.is_dedicated()).count();
    assert_eq!(dedicated, 7);
    assert_eq!(allocator.stats().memory_objects, 8);
    let plain = allocator
        .allocate(&buffer(MIB, 256, Usage::DEVICE_LOCAL))
        .unwrap();
    assert_eq!(Some(plain.memory()), live.last().map(|a| a.memory()));
    live.push(plain);
    for a in live {
        free(&allocator, a);
    }
    finish(allocator, &device);
}

/// Requests larger than half a block try dedicated memory first, but past
/// 3/4 of `maxMemoryAllocationCount` take blocks first too (the README's
/// "How it is built"): 5 MiB buffers beside 8 MiB blocks, 8 objects.
#[test]
fn past_three_quarters_of_the_object_limit_large_requests_take_blocks() {
    let config = Config {
        small_heap_limit: 0,
        large_heap_block_size: 8 * MIB,
        ..Config::default()
    };
    let layout = FakeLayout::integrated().with_max_allocation_count(8);
    let (allocator, device) = allocator_with(layout, config);
    let large = buffer(5 * MIB, 256, Usage::DEVICE_LOCAL);
    let live: Vec<_> = (0..8)
        .map(|_| allocator.allocate(&large).unwrap())
        .collect();
    // Dedicated while at most 6 objects exist, then a block.
    let dedicated: Vec<_> = live.iter().map(|a| a.is_dedicated()).collect();
    assert_eq!(dedicated, [true, true, true, true, true, true, true, false]);
    for a in live {
        free(&allocator, a);
    }
    finish(allocator, &device);
}

/// At the object limit, the next memory type is tried: one of its blocks
/// may have room without a new memory object.
#[test]
fn at_the_object_limit_another_type_with_room_takes_the_request() {
    let (allocator, device) = allocator(FakeLayout::discrete().with_max_allocation_count(1));
    // A host-visible block (type 2), the device's only memory object.
    let upload = allocator
        .allocate(&buffer(MIB, 256, Usage::UPLOAD))
        .unwrap();
    assert_eq!(upload.memory_type(), 2);
    // Device-local types come first for this one, but none can have a
    // block; the host-visible block takes it.
    let fallback = allocator
        .allocate(&buffer(MIB, 256, Usage::DEVICE_LOCAL))
        .unwrap();
    assert_eq!(fallback.memory(), upload.memory());
    assert_eq!(allocator.stats().memory_objects, 1);
    free(&allocator, fallback);
    free(&allocator, upload);
    finish(allocator, &device);
}
