//! Upload rings and the device's `maxBufferSize`
//! (`VkPhysicalDeviceMaintenance4Properties`): each chunk is one buffer,
//! and a buffer past that size is invalid (VUID-VkBufferCreateInfo-size-06409,
//! which the fake device reports as a validation layer would). A chunk past
//! it is refused with `Error::SizeExceedsMaxBuffer` before its buffer is
//! made, after the heap and `maxMemoryAllocationSize` checks; a device that
//! does not say (`u64::MAX`) has no such limit.

use vk_suballoc::device::fake::{FakeDevice, FakeLayout};
use vk_suballoc::{Error, UploadRingDesc};

use super::super::{allocator, finish, FakeAllocator};
use super::finish_after_frame;
use super::ring_creation::{a_growing_ring_refuses, makes_nothing};

const MIB: u64 = 1 << 20;
const GIB: u64 = 1 << 30;

/// A ring is refused with `expected`, a size error naming the ring's size,
/// with no buffer or memory made and no figure changed.
fn refuses(allocator: &FakeAllocator, device: &FakeDevice, expected: Error) {
    let size = match expected {
        Error::SizeExceedsHeaps { size, .. }
        | Error::SizeExceedsMaxAllocation { size, .. }
        | Error::SizeExceedsMaxBuffer { size, .. } => size,
        other => panic!("not a size error: {other:?}"),
    };
    let before = allocator.stats();
    let memory = device.live_allocations();
    let desc = UploadRingDesc {
        size,
        ..UploadRingDesc::default()
    };
    assert!(
        makes_nothing(device, || assert_eq!(
            allocator.create_upload_ring(&desc).map(|_| ()),
            Err(expected),
            "{size}"
        )),
        "{size}: a buffer was made"
    );
    assert_eq!(allocator.stats(), before, "{size}");
    assert_eq!(device.live_allocations(), memory, "{size}");
}

/// A ring of `size` bytes is made, takes an allocation and a write, and is
/// destroyed (its chunk goes after the frame).
fn makes_and_writes(allocator: &FakeAllocator, size: u64) {
    let desc = UploadRingDesc {
        size,
        ..UploadRingDesc::default()
    };
    let ring = allocator.create_upload_ring(&desc).unwrap();
    let bytes = allocator.ring_allocate(ring, 256, 256).unwrap();
    allocator.ring_write(&bytes, 0, &[1; 256]).unwrap();
    allocator.destroy_upload_ring(ring).unwrap();
}

/// A ring whose chunk is larger than `maxBufferSize`, though within its
/// heap and `maxMemoryAllocationSize`, is refused with the typed error
/// before its buffer is made: nothing is created or left behind (the fake
/// device, which reports VUID-VkBufferCreateInfo-size-06409, sees no
/// buffer). So is a growing ring's new chunk that size. A ring of exactly
/// `maxBufferSize` on the same allocator is made and written. Before, the
/// buffer was made, past the limit.
#[test]
fn a_ring_past_max_buffer_size_is_refused_and_a_smaller_one_works() {
    let max = 64 * MIB;
    let (allocator, device) = allocator(FakeLayout::lavapipe().with_max_buffer_size(max));
    let size = max + 1;
    let expected = Error::SizeExceedsMaxBuffer { size, max };
    refuses(&allocator, &device, expected);
    a_growing_ring_refuses(&allocator, &device, size, expected);
    makes_and_writes(&allocator, max);
    finish_after_frame(allocator, &device);
}

/// RADV lets one memory object be 4 GiB but no buffer be more than
/// 2^32 - 4 bytes: on the AMD layout a 4 GiB ring passes the heap and
/// `maxMemoryAllocationSize` checks and is refused for `maxBufferSize`,
/// with nothing made.
#[test]
fn a_ring_of_amd_s_largest_memory_object_is_past_its_max_buffer_size() {
    let (allocator, device) = allocator(FakeLayout::amd());
    let layout = device.layout();
    let (size, max) = (layout.max_memory_allocation_size, layout.max_buffer_size);
    assert_eq!((size, max), (4 * GIB, 0xFFFF_FFFC));
    let expected = Error::SizeExceedsMaxBuffer { size, max };
    refuses(&allocator, &device, expected);
    finish(allocator, &device);
}

/// The older size checks come first: a ring past a heap and past
/// `maxBufferSize` is refused as past the heap, one past
/// `maxMemoryAllocationSize` and `maxBufferSize` as past the former, as
/// before; only one within both gets the new error.
#[test]
fn the_heap_and_memory_object_checks_come_before_max_buffer_size() {
    let mut layout = FakeLayout::lavapipe()
        .with_heap_size(0, 4 * GIB)
        .with_max_buffer_size(MIB);
    layout.max_memory_allocation_size = 2 * GIB;
    let (allocator, device) = allocator(layout);
    for expected in [
        Error::SizeExceedsHeaps {
            size: 5 * GIB,
            largest_heap: 4 * GIB,
        },
        Error::SizeExceedsMaxAllocation {
            size: 3 * GIB,
            max: 2 * GIB,
        },
        Error::SizeExceedsMaxBuffer {
            size: 2 * MIB,
            max: MIB,
        },
    ] {
        refuses(&allocator, &device, expected);
    }
    finish(allocator, &device);
}

/// A device that does not say its `maxBufferSize` (no Vulkan 1.3 nor
/// VK_KHR_maintenance4: `u64::MAX`) imposes no limit: a 5 GiB ring, past
/// what lavapipe, RADV or ANV allow, is made where the heap and
/// `maxMemoryAllocationSize` allow it, while the same layout with
/// lavapipe's limit refuses it. Sizes past the heap still get the heap's
/// error, a growing ring's too, never `SizeExceedsMaxBuffer`. 64-bit
/// targets only: a 32-bit process cannot map a 5 GiB ring (there the ring
/// is `OutOfHostMemory`, and `maxBufferSize` cannot pass 4 GiB anyway).
#[cfg(target_pointer_width = "64")]
#[test]
fn an_unknown_max_buffer_size_imposes_nothing() {
    let size = 5 * GIB;
    let layout = || {
        let mut layout = FakeLayout::lavapipe().with_heap_size(0, 8 * GIB);
        layout.max_memory_allocation_size = 8 * GIB;
        layout
    };
    let max = u64::from(u32::MAX);
    let (known, device) = allocator(layout().with_max_buffer_size(max));
    refuses(&known, &device, Error::SizeExceedsMaxBuffer { size, max });
    finish(known, &device);

    let (unknown, device) = allocator(layout().with_max_buffer_size(u64::MAX));
    makes_and_writes(&unknown, size);
    let largest_heap = 8 * GIB;
    for size in [largest_heap + 1, u64::MAX] {
        let expected = Error::SizeExceedsHeaps { size, largest_heap };
        refuses(&unknown, &device, expected);
        a_growing_ring_refuses(&unknown, &device, size, expected);
    }
    finish_after_frame(unknown, &device);
}

/// A growing ring's new chunk past `maxMemoryAllocationSize`, though
/// within its heap, is refused with `SizeExceedsMaxAllocation` before its
/// buffer is made, with nothing made or counted, as `ring_allocate`'s
/// `# Errors` says.
#[test]
fn a_growing_ring_s_chunk_past_max_memory_allocation_size_is_refused() {
    let mut layout = FakeLayout::lavapipe().with_heap_size(0, 4 * GIB);
    layout.max_memory_allocation_size = 2 * GIB;
    let (allocator, device) = allocator(layout);
    let size = 3 * GIB;
    let expected = Error::SizeExceedsMaxAllocation { size, max: 2 * GIB };
    a_growing_ring_refuses(&allocator, &device, size, expected);
    finish_after_frame(allocator, &device);
}
