//! Out of memory, object limits, map failures, lost devices: the fallbacks
//! run in order, nothing leaks, and a request that fails changes no figure.

use ash::vk;
use vk_suballoc::device::fake::FakeLayout;
use vk_suballoc::device::DeviceError;
use vk_suballoc::{Config, DedicatedPolicy, Error, Request, ResourceKind, Usage};

use super::{allocator, allocator_with, assert_panicked_with, buffer, finish, free};

#[path = "failures/object_limit.rs"]
mod object_limit;
#[path = "failures/out_of_host_memory.rs"]
mod out_of_host_memory;
#[path = "failures/remembered_refusals.rs"]
mod remembered_refusals;

const MIB: u64 = 1 << 20;

#[test]
fn out_of_memory_retries_with_smaller_blocks() {
    let (allocator, device) = allocator(FakeLayout::discrete());
    // A 20 MiB request wants a 64 MiB first block; the driver fails it.
    device.fail_allocations_from(Some(64 * MIB));
    let a = allocator
        .allocate(&buffer(20 * MIB, 256, Usage::DEVICE_LOCAL))
        .unwrap();
    assert!(!a.is_dedicated());
    let sizes: Vec<u64> = device.live_allocations().iter().map(|m| m.size).collect();
    assert_eq!(sizes, vec![32 * MIB]);
    let counters = device.counters();
    assert_eq!(counters.allocate_calls, 2);
    free(&allocator, a);
    finish(allocator, &device);
}

/// A first block already at 1/8 of the preferred size (32 MiB of 256) that
/// the driver refuses is retried at 16 MiB, which then holds the next
/// requests too. VMA stops halving at 1/8, so it would give each of them
/// dedicated memory of its own size (README, "How it is built").
#[test]
fn a_refused_first_block_at_an_eighth_is_still_retried_smaller() {
    let (allocator, device) = allocator(FakeLayout::discrete());
    device.fail_allocations_from(Some(32 * MIB));
    let request = buffer(MIB, 256, Usage::DEVICE_LOCAL);
    let a = allocator.allocate(&request).unwrap();
    let b = allocator.allocate(&request).unwrap();
    assert!(!a.is_dedicated() && !b.is_dedicated());
    assert_eq!(a.memory(), b.memory());
    let sizes: Vec<u64> = device.live_allocations().iter().map(|m| m.size).collect();
    assert_eq!(sizes, vec![16 * MIB]);
    free(&allocator, a);
    free(&allocator, b);
    finish(allocator, &device);
}

#[test]
fn then_dedicated_memory() {
    let (allocator, device) = allocator(FakeLayout::discrete());
    // 40 MiB wants a 128 MiB block; 64 fails too, 32 cannot hold it: the
    // request gets exactly its own 40 MiB.
    device.fail_allocations_from(Some(64 * MIB));
    let a = allocator
        .allocate(&buffer(40 * MIB, 256, Usage::DEVICE_LOCAL))
        .unwrap();
    assert!(a.is_dedicated());
    assert_eq!(a.memory_type(), 1);
    assert_eq!(device.counters().allocate_calls, 3);
    free(&allocator, a);
    finish(allocator, &device);
}

#[test]
fn then_the_next_memory_type() {
    let (allocator, device) = allocator(FakeLayout::discrete());
    device.cap_heap(0, 0);
    let a = allocator
        .allocate(&buffer(MIB, 256, Usage::DEVICE_LOCAL))
        .unwrap();
    // Type 1 (VRAM) is full: the BAR type 4 is next for GPU-only data.
    assert_eq!(a.memory_type(), 4);
    device.cap_heap(2, 0);
    // The BAR block that exists (4 MiB: small heaps start at 1/64) still
    // takes small requests; a larger one needs a new block and moves on to
    // plain system memory, type 0.
    let b = allocator
        .allocate(&buffer(MIB, 256, Usage::DEVICE_LOCAL))
        .unwrap();
    assert_eq!(b.memory_type(), 4);
    let c = allocator
        .allocate(&buffer(5 * MIB, 256, Usage::DEVICE_LOCAL))
        .unwrap();
    assert_eq!(c.memory_type(), 0);
    for x in [a, b, c] {
        free(&allocator, x);
    }
    finish(allocator, &device);
}

#[test]
fn a_full_heap_moves_uploads_to_the_next_heap() {
    let (allocator, device) = allocator(FakeLayout::discrete());
    device.cap_heap(1, 40 * MIB);
    let mut live = Vec::new();
    let mut types = Vec::new();
    for _ in 0..30 {
        let a = allocator
            .allocate(&buffer(4 * MIB, 256, Usage::UPLOAD))
            .unwrap();
        types.push(a.memory_type());
        live.push(a);
    }
    // System memory (types 2 and 3, heap 1) fills up; then the BAR (type 4).
    assert_eq!(types[0], 2);
    assert_eq!(*types.last().unwrap(), 4);
    assert!(device.heap_usage()[1] <= 40 * MIB);
    for a in live {
        free(&allocator, a);
    }
    finish(allocator, &device);
}

#[test]
fn out_of_device_memory_when_every_type_is_full() {
    let (allocator, device) = allocator(FakeLayout::discrete());
    for heap in 0..3 {
        device.cap_heap(heap, 0);
    }
    assert_eq!(
        allocator.allocate(&buffer(MIB, 256, Usage::DEVICE_LOCAL)),
        Err(Error::OutOfDeviceMemory)
    );
    assert_eq!(allocator.stats().memory_objects, 0);
    assert!(device.counters().allocate_calls > 0);
    finish(allocator, &device);
}

#[test]
fn driver_errors_are_typed_and_leak_nothing() {
    let (allocator, device) = allocator(FakeLayout::integrated());
    // The driver's own TooManyObjects moves on to the next memory type...
    device.fail_allocation(1, DeviceError::TooManyObjects);
    let a = allocator
        .allocate(&buffer(4096, 1, Usage::DEVICE_LOCAL))
        .unwrap();
    assert_eq!(a.memory_type(), 1);
    free(&allocator, a);
    allocator.trim();
    // ...and is the answer when all three types give it.
    for nth in 1..=3 {
        device.fail_allocation(nth, DeviceError::TooManyObjects);
    }
    assert_eq!(
        allocator.allocate(&buffer(4096, 1, Usage::DEVICE_LOCAL)),
        Err(Error::TooManyObjects(4096))
    );
    device.fail_allocation(1, DeviceError::OutOfHostMemory);
    assert_eq!(
        allocator.allocate(&buffer(4096, 1, Usage::DEVICE_LOCAL)),
        Err(Error::OutOfHostMemory)
    );
    assert_eq!(allocator.stats().memory_objects, 0);
    let a = allocator
        .allocate(&buffer(4096, 1, Usage::DEVICE_LOCAL))
        .unwrap();
    free(&allocator, a);
    finish(allocator, &device);
}

/// `VK_ERROR_TOO_MANY_OBJECTS` from a call other than `vkAllocateMemory`
/// (`vkCreateBuffer`, `vkCreateImage`, a bind, a flush or a fence poll,
/// converted as the ash helpers, upload rings and frames convert them:
/// `DeviceError::from(vk::Result)`, then `Error::from`) says what the
/// driver returned and claims no memory-object count: it was
/// `TooManyObjects(0)`, "maxMemoryAllocationCount (0) memory objects
/// exist". `vkAllocateMemory`'s own (above) names the real limit.
#[test]
fn too_many_objects_from_other_calls_claims_no_object_count() {
    let error = Error::from(DeviceError::from(vk::Result::ERROR_TOO_MANY_OBJECTS));
    assert_eq!(error, Error::Device(DeviceError::TooManyObjects));
    let message = error.to_string();
    assert!(message.contains("VK_ERROR_TOO_MANY_OBJECTS"), "{message}");
    assert!(!message.contains("maxMemoryAllocationCount"), "{message}");
    assert!(!message.contains("memory objects"), "{message}");
    // Through `vkAllocateMemory`, the limit the message names is the
    // device's.
    let (allocator, device) = allocator(FakeLayout::integrated());
    for nth in 1..=3 {
        device.fail_allocation(nth, DeviceError::TooManyObjects);
    }
    let message = allocator
        .allocate(&buffer(4096, 1, Usage::DEVICE_LOCAL))
        .unwrap_err()
        .to_string();
    assert_eq!(
        message,
        "maxMemoryAllocationCount (4096) memory objects exist"
    );
    finish(allocator, &device);
}

/// Through the `gpu-alloc` trait (`MemoryDevice::allocate_memory`), whose
/// error has two kinds only, a driver's `VK_ERROR_OUT_OF_HOST_MEMORY` stays
/// host memory, and every other failure reads as device memory.
#[test]
fn the_gpu_alloc_call_keeps_out_of_host_memory_apart() {
    use gpu_alloc_types::OutOfMemory;
    use vk_suballoc::device::fake::FakeDevice;
    use vk_suballoc::device::{AllocationFlags, MemoryDevice};
    let device = FakeDevice::new(FakeLayout::discrete());
    for (error, host) in [
        (DeviceError::OutOfHostMemory, true),
        (DeviceError::OutOfDeviceMemory, false),
        (DeviceError::TooManyObjects, false),
    ] {
        device.fail_allocation(1, error);
        // SAFETY: a fake device; the call fails, so there is nothing to free.
        let result = unsafe { device.allocate_memory(4096, 1, AllocationFlags::empty()) };
        match result {
            Err(OutOfMemory::OutOfHostMemory) => assert!(host, "{error:?}"),
            Err(OutOfMemory::OutOfDeviceMemory) => assert!(!host, "{error:?}"),
            Ok(_) => panic!("{error:?}: the failure was not injected"),
        }
    }
    device.assert_clean();
}

#[test]
fn a_failed_map_frees_the_block_and_tries_the_next_type() {
    let (allocator, device) = allocator(FakeLayout::discrete());
    device.fail_map(1);
    let a = allocator.allocate(&buffer(4096, 1, Usage::UPLOAD)).unwrap();
    // Type 2's new block could not be mapped; type 3 is next.
    assert_eq!(a.memory_type(), 3);
    assert_eq!(device.live_allocations().len(), 1);
    assert_eq!(device.counters().maps, 2);
    free(&allocator, a);
    finish(allocator, &device);

    // With a single host-visible type the map failure is the answer.
    let (lavapipe, device) = super::allocator(FakeLayout::lavapipe());
    device.fail_map(1);
    assert_eq!(
        lavapipe.allocate(&buffer(4096, 1, Usage::UPLOAD)),
        Err(Error::MapFailed)
    );
    finish(lavapipe, &device);
}

#[test]
fn a_lost_device_fails_allocations_but_drops_cleanly() {
    let (allocator, device) = allocator(FakeLayout::integrated());
    let a = allocator
        .allocate(&buffer(4096, 1, Usage::DEVICE_LOCAL))
        .unwrap();
    device.lose_device();
    let err = allocator
        .allocate(&buffer(512 << 20, 1, Usage::DEVICE_LOCAL))
        .unwrap_err();
    assert_eq!(err, Error::DeviceLost);
    free(&allocator, a);
    finish(allocator, &device);
}

/// A budget that stopped any candidate lets a request without
/// `within_budget` go over budget once every type failed within it, also
/// when the last type tried failed for another reason (a full heap): VRAM
/// over budget beats failing.
#[test]
fn over_budget_is_the_last_resort_after_a_full_heap() {
    let (allocator, device) = allocator(FakeLayout::discrete());
    // VRAM (type 1) is over its budget, the BAR (type 4) is full.
    device.set_heap_budget(0, 10 * MIB, 10 * MIB);
    device.cap_heap(2, 0);
    let requirements = vk::MemoryRequirements {
        size: MIB,
        alignment: 256,
        memory_type_bits: 1 << 1 | 1 << 4,
    };
    let request = Request::new(requirements, Usage::DEVICE_LOCAL, ResourceKind::Buffer);
    assert!(matches!(
        allocator.allocate(&request.within_budget()),
        Err(Error::OutOfDeviceMemory | Error::OverBudget { .. })
    ));
    let a = allocator.allocate(&request).unwrap();
    assert_eq!(a.memory_type(), 1);
    assert!(allocator.budgets()[0].usage > allocator.budgets()[0].budget);
    free(&allocator, a);
    finish(allocator, &device);
}

/// A block is never larger than its heap (VUID-vkAllocateMemory-pAllocateInfo-01713),
/// whatever the configuration: with every heap counted as large and 1 GiB
/// blocks, the 256 MiB BAR heap got a 512 MiB block attempt once the
/// within-budget pass had failed.
#[test]
fn blocks_never_exceed_their_heap() {
    let config = Config {
        small_heap_limit: 0,
        large_heap_block_size: 1 << 30,
        ..Config::default()
    };
    let (allocator, device) = allocator_with(FakeLayout::discrete(), config);
    // Only the BAR (type 4, heap 2: 256 MiB), with a budget too small for
    // the request, so the over-budget pass makes the block.
    device.set_heap_budget(2, 100 * MIB, 0);
    let requirements = vk::MemoryRequirements {
        size: 150 * MIB,
        alignment: 256,
        memory_type_bits: 1 << 4,
    };
    let request = Request::new(requirements, Usage::DEVICE_LOCAL, ResourceKind::Buffer)
        .dedicated(DedicatedPolicy::Never);
    let a = allocator.allocate(&request).unwrap();
    assert_eq!(a.memory_type(), 4);
    assert!(device.violations().is_empty(), "{:?}", device.violations());
    let sizes: Vec<u64> = device.live_allocations().iter().map(|m| m.size).collect();
    assert_eq!(sizes, vec![256 * MIB]);
    free(&allocator, a);
    finish(allocator, &device);

    // A request that fits its heap only before its alignment rounds it up
    // past the heap's end (a heap whose size the alignment does not divide)
    // cannot have a block there, not even in the over-budget pass (the
    // within-budget one stops at the budget first): it never fits, which
    // its error says (it said `OutOfDeviceMemory`, to free memory and
    // retry).
    let layout = FakeLayout::discrete().with_heap_size(2, 256 * MIB + 1000);
    let (allocator, device) = allocator_with(layout, Config::default());
    let requirements = vk::MemoryRequirements {
        size: 256 * MIB + 500,
        alignment: 4096,
        memory_type_bits: 1 << 4,
    };
    let request = Request::new(requirements, Usage::DEVICE_LOCAL, ResourceKind::Buffer)
        .dedicated(DedicatedPolicy::Never);
    assert_eq!(
        allocator.allocate(&request).err(),
        Some(Error::SizeExceedsHeaps {
            size: 256 * MIB + 4096,
            largest_heap: 256 * MIB + 1000
        })
    );
    assert!(device.violations().is_empty(), "{:?}", device.violations());
    finish(allocator, &device);
}

/// A request of exactly its heap's size is not past the heap: it gets a
/// block of the whole heap, even where dedicated memory is refused.
#[test]
fn a_request_of_the_whole_heap_gets_a_block_of_it() {
    let (allocator, device) = allocator(FakeLayout::discrete());
    // Only the BAR (type 4, heap 2: 256 MiB).
    let requirements = vk::MemoryRequirements {
        size: 256 * MIB,
        alignment: 256,
        memory_type_bits: 1 << 4,
    };
    let request = Request::new(requirements, Usage::DEVICE_LOCAL, ResourceKind::Buffer)
        .dedicated(DedicatedPolicy::Never);
    let a = allocator.allocate(&request).unwrap();
    assert_eq!((a.memory_type(), a.offset()), (4, 0));
    assert!(!a.is_dedicated());
    let sizes: Vec<u64> = device.live_allocations().iter().map(|m| m.size).collect();
    assert_eq!(sizes, vec![256 * MIB]);
    free(&allocator, a);
    finish(allocator, &device);
}

/// A backend that panics in `vkAllocateMemory` (a bug, caught by the
/// engine) leaves the allocator consistent: the memory object it never
/// made is not counted against `maxMemoryAllocationCount` (it was, for
/// good), and the next requests are served.
#[test]
fn a_panicking_backend_leaves_the_object_count_as_it_was() {
    let layout = FakeLayout::discrete().with_max_allocation_count(2);
    let (allocator, device) = allocator_with(layout, Config::default());
    device.panic_on_next_allocation();
    let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        allocator.allocate(&buffer(1 << 20, 256, Usage::DEVICE_LOCAL))
    }));
    assert_panicked_with(
        caught,
        "FakeDevice: vkAllocateMemory panicked (as asked)",
        "the backend's vkAllocateMemory",
    );
    assert_eq!(allocator.stats().memory_objects, 0);
    assert_eq!(allocator.stats().allocations(), 0);
    // Both objects the limit allows can still be made.
    let first = allocator
        .allocate(&buffer(1 << 20, 256, Usage::DEVICE_LOCAL))
        .unwrap();
    let second = allocator
        .allocate(&buffer(1 << 20, 256, Usage::UPLOAD))
        .unwrap();
    assert_ne!(first.memory(), second.memory());
    assert_eq!(allocator.stats().memory_objects, 2);
    free(&allocator, first);
    free(&allocator, second);
    finish(allocator, &device);
}

/// VMA counts a block's bytes in its budget before `vkAllocateMemory` and
/// takes them out again when it fails; an allocator that forgets to on one
/// path reports memory it does not hold until it is dropped, and refuses
/// within-budget requests for it. Every way a request can fail here (the
/// driver out of memory for blocks and then dedicated memory, a map
/// failure, `allocate_many` failing at its third request, a full custom
/// pool, a within-budget refusal, `existing_memory_only` with no room) leaves
/// `stats()`, the budgets, the detailed totals and the JSON dump as they
/// were, and the device holding the same memory objects.
#[test]
fn a_failed_request_changes_no_figure() {
    use vk_suballoc::{AllocationDesc, PoolDesc};

    fn figures(
        allocator: &crate::FakeAllocator,
        device: &vk_suballoc::device::fake::FakeDevice,
    ) -> (
        vk_suballoc::report::Stats,
        Vec<vk_suballoc::device::HeapBudget>,
        String,
        usize,
    ) {
        (
            allocator.stats(),
            allocator.budgets(),
            allocator.stats_json(true),
            device.live_allocations().len(),
        )
    }

    for layout in [
        FakeLayout::discrete(),
        FakeLayout::lavapipe(),
        FakeLayout::mobile(),
    ] {
        let name = format!("{layout:?}").chars().take(40).collect::<String>();
        let (allocator, device) = allocator(layout);
        // Some memory in use first, with no empty block kept to release.
        let live: Vec<_> = [Usage::DEVICE_LOCAL, Usage::UPLOAD, Usage::READBACK]
            .into_iter()
            .flat_map(|usage| {
                [100, 5000, 3 * MIB]
                    .map(|size| allocator.allocate(&buffer(size, 256, usage)).unwrap())
            })
            .collect();
        let memory_type = live[0].memory_type();
        let pool = allocator
            .create_pool(&PoolDesc::new(memory_type).block_size(4 * MIB).max_blocks(1))
            .unwrap();
        let in_pool = |size: u64| {
            let desc = vk_suballoc::AllocationDesc::new(Usage::DEVICE_LOCAL).pool(pool);
            Request::with_desc(super::requirements(size, 256), ResourceKind::Buffer, desc)
        };
        let pooled = allocator.allocate(&in_pool(3 * MIB)).unwrap();
        let before = figures(&allocator, &device);
        let check = |what: &str, result: Result<Vec<vk_suballoc::Allocation>, Error>| {
            assert!(result.is_err(), "{name}: {what} succeeded");
            assert_eq!(figures(&allocator, &device), before, "{name}: {what}");
        };

        device.fail_allocations_from(Some(1));
        for usage in [Usage::DEVICE_LOCAL, Usage::UPLOAD] {
            check(
                "a block",
                allocator
                    .allocate(&buffer(120 * MIB, 256, usage))
                    .map(|a| vec![a]),
            );
            let dedicated = AllocationDesc::new(usage).dedicated(DedicatedPolicy::Always);
            let request = Request::with_desc(
                super::requirements(MIB, 256),
                ResourceKind::Buffer,
                dedicated,
            );
            check(
                "dedicated memory",
                allocator.allocate(&request).map(|a| vec![a]),
            );
        }
        device.fail_allocations_from(None);

        for nth in 1..=16 {
            device.fail_map(nth);
        }
        check(
            "a map",
            allocator
                .allocate(&buffer(40 * MIB, 256, Usage::READBACK))
                .map(|a| vec![a]),
        );
        device.fail_map(0);

        // The first two fit the blocks there are; the third fails.
        device.fail_allocations_from(Some(1));
        let many = [
            buffer(100, 16, Usage::UPLOAD),
            buffer(5000, 256, Usage::DEVICE_LOCAL),
            buffer(300 * MIB, 256, Usage::DEVICE_LOCAL),
        ];
        check("allocate_many", allocator.allocate_many(&many));
        device.fail_allocations_from(None);

        check(
            "a full pool",
            allocator.allocate(&in_pool(2 * MIB)).map(|a| vec![a]),
        );
        let huge = AllocationDesc::new(Usage::DEVICE_LOCAL).within_budget();
        let request = Request::with_desc(
            super::requirements(1 << 40, 256),
            ResourceKind::Buffer,
            huge,
        );
        check(
            "within budget",
            allocator.allocate(&request).map(|a| vec![a]),
        );
        let existing = AllocationDesc::new(Usage::DEVICE_LOCAL).existing_memory_only();
        let request = Request::with_desc(
            super::requirements(200 * MIB, 256),
            ResourceKind::Buffer,
            existing,
        );
        check(
            "existing memory only",
            allocator.allocate(&request).map(|a| vec![a]),
        );

        free(&allocator, pooled);
        allocator.destroy_pool(pool).unwrap();
        for a in live {
            free(&allocator, a);
        }
        finish(allocator, &device);
    }
}
