//! Where a ring's chunks lie in their memory objects: at a multiple of
//! `UploadRingDesc::min_alignment`, and aligned and sized as the driver
//! answers their buffers' usage.

use ash::vk;
use vk_suballoc::device::fake::FakeLayout;
use vk_suballoc::{DedicatedPolicy, Error, UploadRingDesc, Usage};

use crate::frames::finish_after_frame;
use crate::{allocator, buffer};

use super::a_ring_is_refused;

/// `UploadRingDesc::min_alignment` puts each chunk of the ring at a
/// multiple of it in its memory object, after allocations that leave the
/// block's next offset unaligned, so that a ring allocation aligned to it
/// in its buffer is aligned in the memory object too; a growing ring's
/// later chunks as well. One that is no power of two is refused before
/// anything is made.
#[test]
fn a_ring_s_min_alignment_aligns_its_chunks_in_memory() {
    let (allocator, device) = allocator(FakeLayout::discrete());
    let small = |kib: u64| {
        let request = buffer(kib << 10, 256, Usage::DEVICE_LOCAL);
        allocator
            .allocate(&request.dedicated(DedicatedPolicy::Never))
            .unwrap()
    };
    let alignment = 64 << 10;
    let mut held = vec![small(20)];
    let ring = allocator
        .create_upload_ring(&UploadRingDesc {
            size: 100 << 10,
            usage: Usage::DEVICE_LOCAL,
            buffer_usage: vk::BufferUsageFlags::STORAGE_BUFFER,
            grow: true,
            min_alignment: alignment,
            ..UploadRingDesc::default()
        })
        .unwrap();
    let first = allocator.ring_allocate(ring, 1000, 1).unwrap();
    assert_eq!(
        first.memory(),
        held[0].memory(),
        "in the block the small one is in"
    );
    let chunk_start = first.memory_offset() - first.buffer_offset();
    assert_eq!(chunk_start % alignment, 0, "{chunk_start:#x}");
    let aligned = allocator.ring_allocate(ring, 1000, alignment).unwrap();
    assert_eq!(aligned.memory_offset() % alignment, 0);
    // A second chunk, after another unaligned allocation.
    held.push(small(3));
    let grown = allocator.ring_allocate(ring, 99 << 10, 1).unwrap();
    assert_ne!(grown.buffer(), first.buffer());
    assert_eq!(
        (grown.memory_offset() - grown.buffer_offset()) % alignment,
        0
    );
    allocator.destroy_upload_ring(ring).unwrap();
    let odd = UploadRingDesc {
        min_alignment: 48,
        ..UploadRingDesc::default()
    };
    a_ring_is_refused(&allocator, &device, &odd, Error::AlignmentNotPowerOfTwo(48));
    for a in held {
        crate::free(&allocator, a);
    }
    finish_after_frame(allocator, &device);
}

/// A ring's chunks take the requirements their buffers' usage gets from
/// the driver, through the allocator: on RADV (`amd`) a ring for
/// acceleration-structure storage (made with `create_upload_ring_unchecked`)
/// puts its chunks at 64 bytes and rounds their size to 64, where other
/// buffers there align to 16; on ANV (`integrated`, `intel_arc`) a ring of
/// uniform or storage buffers (the default buffer usage) takes its size
/// rounded to 4, one of transfer buffers alone the size as asked. Each
/// chunk follows a buffer whose end is off 64 in the same block. No test
/// made a ring with such a usage on these layouts before (the fake
/// device's own test asks the device, not the allocator).
#[test]
fn a_ring_s_chunks_take_the_requirements_of_their_buffer_usage() {
    use vk::BufferUsageFlags as B;
    let structure = B::ACCELERATION_STRUCTURE_STORAGE_KHR;
    let default = UploadRingDesc::default().buffer_usage;
    let size = (40 << 10) + 1;
    // (layout, the ring's buffer usage, its chunks' alignment, their size)
    let cases = [
        (FakeLayout::amd(), structure, 64, (40 << 10) + 64),
        (FakeLayout::amd(), B::TRANSFER_SRC, 16, (40 << 10) + 16),
        (FakeLayout::integrated(), default, 64, (40 << 10) + 4),
        (FakeLayout::integrated(), B::TRANSFER_SRC, 64, size),
        (
            FakeLayout::intel_arc(),
            B::STORAGE_BUFFER,
            64,
            (40 << 10) + 4,
        ),
    ];
    for (layout, buffer_usage, alignment, chunk_bytes) in cases {
        let name = layout.name;
        let (allocator, device) = allocator(layout);
        // A buffer first whose end is 16 bytes past a multiple of 64; past
        // 32 KiB, as the chunk, so that neither takes a slot of a run.
        let request = buffer((40 << 10) + 16, 16, Usage::UPLOAD).dedicated(DedicatedPolicy::Never);
        let held = allocator.allocate(&request).unwrap();
        let before = allocator.stats().live_bytes();
        let desc = UploadRingDesc {
            size,
            usage: Usage::UPLOAD,
            buffer_usage,
            ..UploadRingDesc::default()
        };
        // SAFETY: the fake device takes every usage.
        let ring = unsafe { allocator.create_upload_ring_unchecked(&desc) }.unwrap();
        assert_eq!(
            allocator.stats().live_bytes() - before,
            chunk_bytes,
            "{name}, {buffer_usage:?}: the chunk's size"
        );
        let a = allocator.ring_allocate(ring, 1000, 1).unwrap();
        assert_eq!(a.memory(), held.memory(), "{name}: one block");
        let chunk = a.memory_offset() - a.buffer_offset();
        assert_eq!(
            chunk % alignment,
            0,
            "{name}, {buffer_usage:?}: a chunk at {chunk:#x}"
        );
        allocator.destroy_upload_ring(ring).unwrap();
        crate::free(&allocator, held);
        finish_after_frame(allocator, &device);
    }
}
