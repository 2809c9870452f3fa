//! Ring sizes: a ring larger than any heap, than every heap it can use or
//! than one memory object is refused as such before its buffer is made,
//! and one exactly its heap's size and the largest memory object is
//! made.

use gpu_alloc_types::MemoryHeap;
use vk_suballoc::device::fake::FakeLayout;
use vk_suballoc::{Error, UploadRingDesc};

use crate::frames::finish_after_frame;
use crate::{allocator, finish};

use super::{a_growing_ring_refuses, a_ring_is_refused, makes_nothing};

/// A ring larger than any heap is refused as too large, never as a
/// shortage that freeing could cure: 2^40 bytes (which a linear allocator
/// could manage) and 2^50 (which it could not) alike, and a growing ring
/// asked for `u64::MAX` bytes. Nothing is left behind.
#[test]
fn a_ring_larger_than_any_heap_is_refused_as_too_large() {
    let (allocator, device) = allocator(FakeLayout::discrete());
    let largest_heap = device
        .layout()
        .memory_heaps
        .iter()
        .map(|h| h.size)
        .max()
        .unwrap();
    for size in [1u64 << 40, 1 << 50] {
        let desc = UploadRingDesc {
            size,
            ..UploadRingDesc::default()
        };
        assert!(
            makes_nothing(&device, || assert!(
                matches!(
                    allocator.create_upload_ring(&desc).map(|_| ()),
                    Err(Error::SizeExceedsHeaps { size: s, largest_heap: _ }) if s >= size
                ),
                "{size}"
            )),
            "{size}: a buffer was made"
        );
    }
    for size in [largest_heap + 1, u64::MAX] {
        let expected = Error::SizeExceedsHeaps { size, largest_heap };
        a_growing_ring_refuses(&allocator, &device, size, expected);
    }
    finish_after_frame(allocator, &device);
}

/// A ring past what a linear allocator manages (2^48 bytes) in a heap
/// larger still is refused as past what one memory object may be
/// (`maxMemoryAllocationSize` here), not as larger than every heap: also a
/// ring exactly the heap's size. One larger than the heap is refused as
/// such. Nothing is left behind.
#[test]
fn a_ring_too_large_for_one_memory_object_in_a_larger_heap_is_refused_as_such() {
    let heap = 1u64 << 50;
    let (allocator, device) = allocator(FakeLayout::discrete().with_heap_sizes(heap));
    let max = device.layout().max_memory_allocation_size;
    assert!(max < 1 << 48);
    for size in [(1u64 << 48) + 1, heap] {
        let desc = UploadRingDesc {
            size,
            ..UploadRingDesc::default()
        };
        assert_eq!(
            allocator.create_upload_ring(&desc).map(|_| ()),
            Err(Error::SizeExceedsMaxAllocation { size, max }),
            "{size}"
        );
    }
    let desc = UploadRingDesc {
        size: heap + 1,
        ..UploadRingDesc::default()
    };
    assert_eq!(
        allocator.create_upload_ring(&desc).map(|_| ()),
        Err(Error::SizeExceedsHeaps {
            size: heap + 1,
            largest_heap: heap
        })
    );
    finish_after_frame(allocator, &device);
}

/// A ring larger than the heap of every memory type a ring can use (those
/// the host sees), though smaller than a heap it cannot use, is refused
/// before its buffer is made, as the allocation path says it: 20 GiB on a
/// discrete GPU with 24 GiB of VRAM the host cannot see and a 16 GiB
/// system heap, where one memory object may be as large as any heap. A
/// buffer that size may pass the device's `maxBufferSize`. So is a growing
/// ring's new chunk that size.
#[test]
fn a_ring_larger_than_every_heap_the_host_sees_makes_no_buffer() {
    let mut layout = FakeLayout::discrete().with_heap_size(0, 24 << 30);
    layout.max_memory_allocation_size = 1 << 40;
    let (allocator, device) = allocator(layout);
    let (size, largest_heap) = (20u64 << 30, 16u64 << 30);
    assert_eq!(device.layout().memory_heaps[1].size, largest_heap);
    let desc = UploadRingDesc {
        size,
        ..UploadRingDesc::default()
    };
    let expected = Error::SizeExceedsHeaps { size, largest_heap };
    a_ring_is_refused(&allocator, &device, &desc, expected);
    a_growing_ring_refuses(&allocator, &device, size, expected);
    finish_after_frame(allocator, &device);
}

/// The heaps a ring can use are those of the memory types the allocator
/// may use: AMD's device-coherent types, ranked for a ring's usage but
/// never used without `deviceCoherentMemory`, do not count. Here their
/// host-visible ones are in a 32 GiB heap of their own, and a 20 GiB ring
/// is larger than every other heap the host sees (16 GiB): it is refused
/// before its buffer is made, naming the 16 GiB heap, as the allocation
/// path would. Counting the device-coherent types made its 20 GiB buffer
/// first.
#[test]
fn a_ring_larger_than_the_usable_heaps_makes_no_buffer_on_amd() {
    let mut layout = FakeLayout::amd();
    layout.memory_heaps.push(MemoryHeap { size: 32 << 30 });
    // Types 5 and 7 are the device-coherent duplicates of the host-visible
    // types 1 and 3 (heap 1).
    for memory_type in [5, 7] {
        layout.memory_types[memory_type].heap = 3;
    }
    layout.max_memory_allocation_size = 1 << 40;
    let (allocator, device) = allocator(layout);
    let (size, largest_heap) = (20u64 << 30, 16u64 << 30);
    let desc = UploadRingDesc {
        size,
        ..UploadRingDesc::default()
    };
    a_ring_is_refused(
        &allocator,
        &device,
        &desc,
        Error::SizeExceedsHeaps { size, largest_heap },
    );
    finish(allocator, &device);
}

/// The size checks refuse only what is past their limits: a ring exactly
/// the size of the one heap it can use, which is exactly
/// `maxMemoryAllocationSize` too, is made, and holds the whole heap. One a
/// byte past `maxMemoryAllocationSize` in a heap twice that size is refused
/// as such before its buffer is made.
#[test]
fn a_ring_exactly_its_heap_and_one_memory_object_is_made() {
    let size = 64u64 << 20;
    let mut layout = FakeLayout::lavapipe().with_heap_size(0, size);
    layout.max_memory_allocation_size = size;
    let (whole, device) = allocator(layout);
    let desc = UploadRingDesc {
        size,
        ..UploadRingDesc::default()
    };
    let ring = whole.create_upload_ring(&desc).unwrap();
    let bytes = whole.ring_allocate(ring, 256, 256).unwrap();
    whole.ring_write(&bytes, 0, &[1; 256]).unwrap();
    assert_eq!(whole.stats().heaps[0].reserved_bytes, size);
    whole.destroy_upload_ring(ring).unwrap();
    finish_after_frame(whole, &device);

    let mut layout = FakeLayout::lavapipe().with_heap_size(0, 2 * size);
    layout.max_memory_allocation_size = size;
    let (narrow, device) = allocator(layout);
    let desc = UploadRingDesc {
        size: size + 1,
        ..UploadRingDesc::default()
    };
    a_ring_is_refused(
        &narrow,
        &device,
        &desc,
        Error::SizeExceedsMaxAllocation {
            size: size + 1,
            max: size,
        },
    );
    finish(narrow, &device);
}
