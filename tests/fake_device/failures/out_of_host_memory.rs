//! The driver out of host memory (`VK_ERROR_OUT_OF_HOST_MEMORY`) when a
//! new memory object is made (or a new block mapped): no other memory
//! object is asked for (host memory would fail it again), but the
//! existing blocks of the memory types still to be tried may take the
//! request, as they need no host memory (VMA tries the next types on any
//! failure). With no room in them the request ends with
//! `OutOfHostMemory`.

use ash::vk;
use vk_suballoc::device::fake::{FakeDevice, FakeLayout};
use vk_suballoc::device::DeviceError;
use vk_suballoc::{DedicatedHint, DedicatedPolicy, Error, Request, ResourceKind, Usage};

use super::MIB;
use crate::{allocator, buffer, finish, free, FakeAllocator};

/// A buffer request on the discrete layout for the memory types `bits`.
fn in_types(bits: u32) -> Request<'static> {
    let requirements = vk::MemoryRequirements {
        size: MIB,
        alignment: 256,
        memory_type_bits: bits,
    };
    Request::new(requirements, Usage::DEVICE_LOCAL, ResourceKind::Buffer)
}

/// VRAM (type 1) needs a new block and the driver is out of host memory:
/// system memory (type 0, next for GPU-only data in these types) has a
/// block with room, which takes the request without another
/// `vkAllocateMemory`.
#[test]
fn the_next_types_existing_block_takes_the_request() {
    let (allocator, device) = allocator(FakeLayout::discrete());
    let system = allocator.allocate(&in_types(1 << 0)).unwrap();
    device.fail_allocation(1, DeviceError::OutOfHostMemory);
    let calls = device.counters().allocate_calls;
    let placed = allocator.allocate(&in_types(1 << 1 | 1 << 0)).unwrap();
    assert_eq!(placed.memory_type(), 0);
    assert_eq!(placed.memory(), system.memory());
    assert_eq!(device.counters().allocate_calls, calls + 1);
    assert_eq!(allocator.stats().memory_objects, 1);
    free(&allocator, placed);
    free(&allocator, system);
    finish(allocator, &device);
}

/// The same from the second type tried: full VRAM sends the request on,
/// the BAR (type 4) fails for want of host memory, and system memory's
/// block takes it.
#[test]
fn also_after_the_second_type() {
    let (allocator, device) = allocator(FakeLayout::discrete());
    let system = allocator.allocate(&in_types(1 << 0)).unwrap();
    device.cap_heap(0, 0);
    // How many calls full VRAM takes once it refused a request.
    let vram_calls = vram_calls_once_full(&allocator, &device);
    device.fail_allocation(vram_calls + 1, DeviceError::OutOfHostMemory);
    let calls = device.counters().allocate_calls;
    let placed = allocator
        .allocate(&in_types(1 << 1 | 1 << 4 | 1 << 0))
        .unwrap();
    assert_eq!(placed.memory(), system.memory());
    assert_eq!(device.counters().allocate_calls - calls, vram_calls + 1);
    free(&allocator, placed);
    free(&allocator, system);
    finish(allocator, &device);
}

/// The type that ran out of host memory is named in the fallback's
/// warning, once, as for any failure that sends a request on: the BAR
/// (type 4) here, the second type tried, not VRAM (type 1), whose
/// warning came with its first refusal.
#[test]
fn the_warning_names_the_type_out_of_host_memory() {
    let (allocator, device) = allocator(FakeLayout::discrete());
    let system = allocator.allocate(&in_types(1 << 0)).unwrap();
    device.cap_heap(0, 0);
    let vram_calls = vram_calls_once_full(&allocator, &device);
    let mut placed = Vec::new();
    crate::leak_log::record_thread_lines();
    for _ in 0..2 {
        device.fail_allocation(vram_calls + 1, DeviceError::OutOfHostMemory);
        let request = in_types(1 << 1 | 1 << 4 | 1 << 0);
        placed.push(allocator.allocate(&request).unwrap());
    }
    let warnings: Vec<String> = crate::leak_log::take_thread_warnings();
    assert_eq!(
        warnings,
        ["WARN: vk-suballoc: memory type 4 failed (out of host memory); trying the next one"]
    );
    for allocation in placed {
        assert_eq!(allocation.memory(), system.memory());
        free(&allocator, allocation);
    }
    free(&allocator, system);
    finish(allocator, &device);
}

/// A request with no type left to try after the one out of host memory
/// (here its `memoryTypeBits` name VRAM alone) ends with
/// `OutOfHostMemory` and no "trying the next one" warning: there is none.
#[test]
fn no_warning_when_no_type_is_left_to_try() {
    let (allocator, device) = allocator(FakeLayout::discrete());
    device.fail_allocation(1, DeviceError::OutOfHostMemory);
    crate::leak_log::record_thread_lines();
    assert_eq!(
        allocator.allocate(&in_types(1 << 1)),
        Err(Error::OutOfHostMemory)
    );
    let warnings: Vec<String> = crate::leak_log::take_thread_warnings();
    assert_eq!(warnings, Vec::<String>::new());
    finish(allocator, &device);
}

/// Dedicated memory tried first that the driver refuses for want of host
/// memory, with no existing block to take the request, ends the request
/// with `OutOfHostMemory`: no block is made (another `vkAllocateMemory`,
/// which host memory would fail again) and no other memory type has a
/// block.
#[test]
fn a_preferred_dedicated_request_with_no_block_makes_none() {
    let (allocator, device) = allocator(FakeLayout::discrete());
    let preferred = buffer(MIB, 256, Usage::DEVICE_LOCAL).driver_dedicated(DedicatedHint {
        required: false,
        preferred: true,
    });
    device.fail_allocation(1, DeviceError::OutOfHostMemory);
    let calls = device.counters().allocate_calls;
    assert_eq!(
        allocator.allocate(&preferred).err(),
        Some(Error::OutOfHostMemory)
    );
    assert_eq!(device.counters().allocate_calls, calls + 1);
    assert_eq!(allocator.stats().memory_objects, 0);
    finish(allocator, &device);
}

/// With no room in a later type's existing blocks the request ends with
/// `OutOfHostMemory` from the second type tried: system memory (type 0,
/// after the BAR) has heap room, and no block or a full one, and gets no
/// `vkAllocateMemory`.
#[test]
fn with_no_room_in_existing_blocks_the_request_ends() {
    for full_block in [false, true] {
        let (allocator, device) = allocator(FakeLayout::discrete());
        // System memory's one block, filled up, when asked for.
        let system = full_block.then(|| {
            let first = allocator.allocate(&in_types(1 << 0)).unwrap();
            let block = device.live_allocations()[0].size;
            let mut request = in_types(1 << 0).dedicated(DedicatedPolicy::Never);
            request.requirements.size = block - MIB;
            let rest = allocator.allocate(&request).unwrap();
            assert_eq!(rest.memory(), first.memory());
            [first, rest]
        });
        let objects = allocator.stats().memory_objects;
        device.cap_heap(0, 0);
        let vram_calls = vram_calls_once_full(&allocator, &device);
        device.fail_allocation(vram_calls + 1, DeviceError::OutOfHostMemory);
        let calls = device.counters().allocate_calls;
        assert_eq!(
            allocator.allocate(&in_types(1 << 1 | 1 << 4 | 1 << 0)),
            Err(Error::OutOfHostMemory),
            "full block {full_block}"
        );
        assert_eq!(
            device.counters().allocate_calls - calls,
            vram_calls + 1,
            "full block {full_block}"
        );
        assert_eq!(allocator.stats().memory_objects, objects);
        for allocation in system.into_iter().flatten() {
            free(&allocator, allocation);
        }
        finish(allocator, &device);
    }
}

/// The same when the driver runs out of host memory on the retry after
/// the kept empty blocks were released: system memory's cached type
/// (type 3) is over its heap's budget, a kept empty block of the
/// coherent type (type 2) in that heap gives way, the new block's
/// `vkAllocateMemory` fails for want of host memory, and type 2's
/// partly used block takes the request. Through `allocate` and
/// `allocate_mut` alike.
#[test]
fn also_on_the_retry_after_kept_blocks_are_released() {
    for exclusive in [false, true] {
        let (mut allocator, device) = allocator(FakeLayout::discrete());
        let readback = |bits: u32, size: u64| {
            let mut request = in_types(bits).dedicated(DedicatedPolicy::Never);
            request.desc.usage = Usage::READBACK;
            request.requirements.size = size;
            request
        };
        let first = allocator.allocate(&readback(1 << 2, MIB)).unwrap();
        // A second block of type 2, left empty and kept.
        let block = device.live_allocations()[0].size;
        let second = allocator.allocate(&readback(1 << 2, block)).unwrap();
        assert_ne!(second.memory(), first.memory());
        free(&allocator, second);
        assert_eq!(allocator.stats().memory_objects, 2);
        let usage = device.live_allocations().iter().map(|a| a.size).sum();
        device.set_heap_budget(1, usage, 0);
        assert_eq!(allocator.budgets()[1].budget, usage);
        device.fail_allocation(1, DeviceError::OutOfHostMemory);
        let calls = device.counters().allocate_calls;
        let request = readback(1 << 3 | 1 << 2, MIB);
        let placed = if exclusive {
            allocator.allocate_mut(&request)
        } else {
            allocator.allocate(&request)
        }
        .unwrap();
        assert_eq!(placed.memory(), first.memory(), "exclusive {exclusive}");
        // One vkAllocateMemory, the retry's; the kept block is gone.
        assert_eq!(device.counters().allocate_calls, calls + 1);
        assert_eq!(allocator.stats().memory_objects, 1);
        free(&allocator, placed);
        free(&allocator, first);
        finish(allocator, &device);
    }
}

/// AMD's device-coherent memory is no fallback for an ordinary request
/// after a want of host memory either: its block (type 4, the
/// device-coherent copy of type 0) with room does not take a request
/// whose first type (0) failed so; one that may only go there does.
#[test]
fn no_device_coherent_block_takes_an_ordinary_request() {
    let layout = FakeLayout::amd().with_amd_device_coherent_memory(true);
    let (allocator, device) = allocator(layout);
    let coherent = allocator.allocate(&in_types(1 << 4)).unwrap();
    assert_eq!(coherent.memory_type(), 4);
    device.fail_allocation(1, DeviceError::OutOfHostMemory);
    let calls = device.counters().allocate_calls;
    assert_eq!(
        allocator.allocate(&in_types(1 << 0 | 1 << 4)).err(),
        Some(Error::OutOfHostMemory)
    );
    assert_eq!(device.counters().allocate_calls, calls + 1);
    let only_there = allocator.allocate(&in_types(1 << 4)).unwrap();
    assert_eq!(only_there.memory(), coherent.memory());
    free(&allocator, only_there);
    free(&allocator, coherent);
    finish(allocator, &device);
}

/// How many `vkAllocateMemory` calls full VRAM (type 1, heap 0 capped at
/// 0) takes before it gives up, once it refused a request: the heap
/// remembers that refusal, and a later request asks it fewer times than
/// the first.
fn vram_calls_once_full(allocator: &FakeAllocator, device: &FakeDevice) -> u64 {
    let mut vram_calls = 0;
    for _ in 0..2 {
        let before = device.counters().allocate_calls;
        assert_eq!(
            allocator.allocate(&in_types(1 << 1)),
            Err(Error::OutOfDeviceMemory)
        );
        vram_calls = device.counters().allocate_calls - before;
    }
    vram_calls
}

/// A remainder block (below the ladder's smallest block, at a heap's
/// budget edge) that the driver refuses for want of host memory ends the
/// request in its memory type as any other block's refusal of that kind
/// does: the least block, which follows a remainder block refused for
/// want of room when no dedicated memory comes after it, is not asked
/// for. With 3.5 MiB of VRAM's budget left, a 256-byte buffer that may
/// not take dedicated memory (VRAM alone allowed) tries a 1 MiB remainder
/// block: refused so, the request ends with `OutOfHostMemory` after that
/// one call; the next request, with host memory, takes the 1 MiB block.
#[test]
fn a_remainder_block_out_of_host_memory_asks_for_no_least_block() {
    let (allocator, device) = allocator(FakeLayout::discrete());
    device.set_heap_budget(0, 100 * MIB, 100 * MIB - 7 * MIB / 2);
    let mut request = in_types(1 << 1).dedicated(DedicatedPolicy::Never);
    request.requirements.size = 256;
    device.fail_allocation(1, DeviceError::OutOfHostMemory);
    let calls = device.counters().allocate_calls;
    assert_eq!(
        allocator.allocate(&request).err(),
        Some(Error::OutOfHostMemory)
    );
    assert_eq!(device.counters().allocate_calls, calls + 1);
    assert_eq!(allocator.stats().memory_objects, 0);
    let placed = allocator.allocate(&request).unwrap();
    assert_eq!(device.counters().allocate_calls, calls + 2);
    let sizes: Vec<u64> = device.live_allocations().iter().map(|m| m.size).collect();
    assert_eq!(sizes, [MIB]);
    free(&allocator, placed);
    finish(allocator, &device);
}

/// A new block whose `vkMapMemory` fails out of host memory
/// (`FakeDevice::fail_map_with`) ends the request as a `vkAllocateMemory`
/// out of host memory does: the block is freed and the caller gets
/// `OutOfHostMemory`, with no other memory object asked for (the next
/// host-visible type, 3, has no block to take it). The map's other two
/// results go on as they always did: out of device memory, a smaller
/// block of the same type (16 MiB after 32); `VK_ERROR_MEMORY_MAP_FAILED`,
/// the next type's block. Nothing is left behind in any.
#[test]
fn a_new_block_whose_map_is_out_of_host_memory_ends_the_request() {
    let cases = [
        (DeviceError::OutOfHostMemory, None),
        (DeviceError::OutOfDeviceMemory, Some((2, 16 * MIB))),
        (DeviceError::MapFailed, Some((3, 32 * MIB))),
    ];
    for (error, placed) in cases {
        let (allocator, device) = allocator(FakeLayout::discrete());
        device.fail_map_with(1, error);
        let result = allocator.allocate(&buffer(4096, 1, Usage::UPLOAD));
        let blocks: Vec<(u32, u64)> = device
            .live_allocations()
            .iter()
            .map(|m| (m.memory_type, m.size))
            .collect();
        let counters = device.counters();
        let what = format!(
            "{error:?}: {:?}, {blocks:?}, {counters:?}",
            result.as_ref().err()
        );
        match placed {
            None => {
                assert_eq!(
                    result.as_ref().err(),
                    Some(&Error::OutOfHostMemory),
                    "{what}"
                );
                assert_eq!(counters.allocate_calls, 1, "{what}");
                assert_eq!(blocks, [], "{what}");
                assert_eq!(allocator.stats().memory_objects, 0, "{what}");
            }
            Some(block) => {
                let a = result.as_ref().unwrap_or_else(|e| panic!("{what}: {e:?}"));
                assert_eq!(a.memory_type(), block.0, "{what}");
                assert_eq!(blocks, [block], "{what}");
                assert_eq!(counters.allocate_calls, 2, "{what}");
            }
        }
        if let Ok(a) = result {
            free(&allocator, a);
        }
        finish(allocator, &device);
    }
}
