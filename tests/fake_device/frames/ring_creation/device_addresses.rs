//! Rings whose buffers take their device address: buffer device address
//! needed, each ring allocation carrying its address, and chunks aligned
//! to 256 in memory where the driver aligns buffers to less.

use ash::vk;
use vk_suballoc::device::fake::FakeLayout;
use vk_suballoc::{DedicatedPolicy, Error, UploadRingDesc, Usage};

use crate::frames::finish_after_frame;
use crate::{allocator, buffer, finish};

/// A ring whose buffers take their device address (`SHADER_DEVICE_ADDRESS`
/// usage) needs memory allocated for it
/// (VUID-vkBindBufferMemory-bufferDeviceAddress-03339), as `create_buffer`
/// asks for: without buffer device address the ring is refused, as such a
/// buffer is, and nothing is left behind; with it, the ring works.
#[test]
fn a_device_address_ring_needs_buffer_device_address() {
    let desc = UploadRingDesc {
        buffer_usage: vk::BufferUsageFlags::UNIFORM_BUFFER
            | vk::BufferUsageFlags::SHADER_DEVICE_ADDRESS,
        grow: true,
        ..UploadRingDesc::default()
    };
    // The mobile layout has no buffer device address.
    let (allocator, device) = allocator(FakeLayout::mobile());
    let before = allocator.stats();
    assert_eq!(
        allocator.create_upload_ring(&desc).map(|_| ()),
        Err(Error::DeviceAddressNotEnabled)
    );
    assert_eq!(allocator.stats(), before);
    assert_eq!(device.live_resources(), 0);
    finish(allocator, &device);

    let (allocator, device) = crate::allocator(FakeLayout::discrete());
    let ring = allocator.create_upload_ring(&desc).unwrap();
    // A second chunk, made by growth, is allocated for addresses too.
    allocator.ring_allocate(ring, desc.size, 256).unwrap();
    let grown = allocator.ring_allocate(ring, 256, 256).unwrap();
    allocator.ring_write(&grown, 0, &[1; 256]).unwrap();
    let chunks: Vec<_> = device.live_allocations();
    assert!(!chunks.is_empty() && chunks.iter().all(|m| m.device_address));
    allocator.destroy_upload_ring(ring).unwrap();
    finish_after_frame(allocator, &device);
}

/// A ring allocation of a ring whose buffers take their device address
/// carries it: its chunk's buffer's address (read once, when the chunk
/// was made and bound) plus its offset in the buffer, which is the address
/// of its byte in the memory object: the memory object's address plus its
/// `memory_offset`, in the first chunk and in one a growing ring added.
/// A ring of other usages has none, and asks the device for none (the
/// fake device reports a query for a buffer without
/// `SHADER_DEVICE_ADDRESS`, or before its bind, as a violation).
#[test]
fn ring_allocations_carry_their_device_address() {
    for layout in [FakeLayout::discrete(), FakeLayout::integrated()] {
        let name = layout.name;
        let (allocator, device) = allocator(layout);
        let desc = UploadRingDesc {
            size: 64 << 10,
            usage: Usage::DEVICE_LOCAL,
            buffer_usage: vk::BufferUsageFlags::STORAGE_BUFFER
                | vk::BufferUsageFlags::SHADER_DEVICE_ADDRESS,
            grow: true,
            ..UploadRingDesc::default()
        };
        let ring = allocator.create_upload_ring(&desc).unwrap();
        let mut allocations = Vec::new();
        for (size, align) in [(100, 4), (4000, 256), (60 << 10, 1024), (300, 64)] {
            allocations.push(allocator.ring_allocate(ring, size, align).unwrap());
        }
        let chunks: std::collections::HashSet<_> = allocations.iter().map(|a| a.buffer()).collect();
        assert_eq!(chunks.len(), 2, "{name}: the ring grew");
        for allocation in &allocations {
            let memory = device.memory_address(allocation.memory()).unwrap();
            assert_eq!(
                allocation.device_address(),
                Some(memory + allocation.memory_offset()),
                "{name}: {allocation:?}"
            );
        }
        let plain = allocator
            .create_upload_ring(&UploadRingDesc {
                buffer_usage: vk::BufferUsageFlags::STORAGE_BUFFER,
                ..desc
            })
            .unwrap();
        let without = allocator.ring_allocate(plain, 100, 4).unwrap();
        assert_eq!(without.device_address(), None, "{name}");
        allocator.destroy_upload_ring(ring).unwrap();
        allocator.destroy_upload_ring(plain).unwrap();
        finish_after_frame(allocator, &device);
    }
}

/// A ring whose buffers take their device address (`SHADER_DEVICE_ADDRESS`,
/// `min_alignment` 0) puts each chunk at a multiple of 256 in its memory
/// object, so that an allocation aligned to 256 in its buffer has a device
/// address aligned to 256, on GPUs whose buffers align to less: RADV's 16,
/// MoltenVK's 16 on Apple GPUs, ANV's 64. The fake device answered every
/// buffer with an alignment of 256 until session 51, so no fake-device
/// test failed without `DEVICE_ADDRESS_CHUNK_ALIGNMENT` (commit a6390a3,
/// seen on lavapipe alone); this one does: 'amd: a chunk at 0xa010, an
/// allocation aligned to 256 in its buffer at device address 0x10000a010'.
#[test]
fn a_device_address_ring_s_chunks_align_to_256_where_buffers_align_to_less() {
    for layout in [
        FakeLayout::amd(),
        FakeLayout::apple(),
        FakeLayout::integrated(),
        FakeLayout::intel_arc(),
    ] {
        let name = layout.name;
        let (allocator, device) = allocator(layout);
        // A buffer in the ring's block first, whose end is off 256 (at 16
        // bytes, which every one of these GPUs takes); past 32 KiB, as the
        // chunks, so that none takes a slot of a run.
        let small = |bytes: u64| {
            let request = buffer(bytes, 16, Usage::UPLOAD | Usage::DEVICE_ADDRESS);
            allocator
                .allocate(&request.dedicated(DedicatedPolicy::Never))
                .unwrap()
        };
        let mut held = vec![small((40 << 10) + 16)];
        let ring = allocator
            .create_upload_ring(&UploadRingDesc {
                size: 64 << 10,
                usage: Usage::UPLOAD,
                buffer_usage: vk::BufferUsageFlags::STORAGE_BUFFER
                    | vk::BufferUsageFlags::SHADER_DEVICE_ADDRESS,
                grow: true,
                ..UploadRingDesc::default()
            })
            .unwrap();
        let check = |a: &vk_suballoc::RingAllocation| {
            let chunk = a.memory_offset() - a.buffer_offset();
            let address = a.device_address().expect("a device address");
            assert_eq!(
                (chunk % 256, address % 256),
                (0, 0),
                "{name}: a chunk at {chunk:#x}, an allocation aligned to 256 in its buffer \
                 at device address {address:#x}"
            );
        };
        let first = allocator.ring_allocate(ring, 1000, 256).unwrap();
        assert_eq!(first.memory(), held[0].memory(), "{name}: one block");
        check(&first);
        // A second chunk, after another buffer whose end is off 256.
        held.push(small((33 << 10) + 48));
        let grown = allocator.ring_allocate(ring, 64 << 10, 256).unwrap();
        assert_ne!(grown.buffer(), first.buffer(), "{name}");
        check(&grown);
        allocator.destroy_upload_ring(ring).unwrap();
        for a in held {
            crate::free(&allocator, a);
        }
        finish_after_frame(allocator, &device);
    }
}
