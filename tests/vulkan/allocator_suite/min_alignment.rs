//! `AllocationDesc::min_alignment` on a real driver: the offset in the
//! memory object is a multiple of it, and so is the buffer's device address
//! up to the alignment of the memory object's own address.

use ash::vk;
use vk_suballoc::{AllocationDesc, Usage};

use super::super::allocator_setup::{allocator_for, buffer_info};
use crate::support::{test_each_profile, VulkanContext};

test_each_profile!(
    /// `min_alignment` aligns the offset in the memory object: buffers made
    /// by `create_buffer` between small unaligned ones start on multiples of
    /// it, and so do their device addresses up to the alignment of the
    /// memory object's own address, which is the driver's (lavapipe's
    /// memory starts on 4 KiB host pages).
    fn min_alignment_aligns_device_addresses(profile) {
        let context = VulkanContext::new(profile);
        let allocator = allocator_for(&context);
        let device = &context.device;
        let info = buffer_info(1000).usage(
            vk::BufferUsageFlags::STORAGE_BUFFER | vk::BufferUsageFlags::SHADER_DEVICE_ADDRESS,
        );
        let plain = AllocationDesc::new(Usage::DEVICE_LOCAL | Usage::DEVICE_ADDRESS);
        let mut live = Vec::new();
        for shift in [8u32, 12, 16, 10, 14] {
            let alignment = 1u64 << shift;
            // SAFETY: valid create infos; the buffers are never used by the GPU.
            unsafe {
                live.push(allocator.create_buffer(&info, &plain).unwrap());
                let (buffer, allocation) =
                    allocator.create_buffer(&info, &plain.min_alignment(alignment)).unwrap();
                let address =
                    device.get_buffer_device_address(&vk::BufferDeviceAddressInfo::default().buffer(buffer));
                assert_eq!(allocation.offset() % alignment, 0, "{profile}");
                assert_eq!(address % alignment.min(4096), 0, "{profile}: address {address:#x}");
                live.push((buffer, allocation));
            }
        }
        // SAFETY: never used by the GPU.
        unsafe {
            for (buffer, allocation) in live {
                allocator.destroy_buffer(buffer, allocation).unwrap();
            }
        }
    }
);

test_each_profile!(
    /// `UploadRingDesc::min_alignment` on a real driver: a GPU-only ring
    /// for device-address scratch (an acceleration-structure build's),
    /// made between small unaligned buffers, has its chunk on a multiple of
    /// it in its memory object, so that a ring allocation aligned to it in
    /// its buffer has its device address aligned too (up to the memory
    /// object's own alignment); and that address, as the allocation's
    /// `device_address` gives it, is the driver's.
    fn a_ring_s_min_alignment_aligns_its_device_addresses(profile) {
        use vk_suballoc::UploadRingDesc;
        let context = VulkanContext::new(profile);
        let allocator = allocator_for(&context);
        let device = &context.device;
        let small = buffer_info(1000).usage(vk::BufferUsageFlags::STORAGE_BUFFER);
        let plain = AllocationDesc::new(Usage::DEVICE_LOCAL);
        let mut live = Vec::new();
        let mut rings = Vec::new();
        for shift in [8u32, 12, 10] {
            let alignment = 1u64 << shift;
            // SAFETY: a valid create info; never used by the GPU.
            live.push(unsafe { allocator.create_buffer(&small, &plain) }.unwrap());
            let ring = allocator
                .create_upload_ring(&UploadRingDesc {
                    size: 64 << 10,
                    usage: Usage::DEVICE_LOCAL,
                    buffer_usage: vk::BufferUsageFlags::STORAGE_BUFFER
                        | vk::BufferUsageFlags::SHADER_DEVICE_ADDRESS,
                    min_alignment: alignment,
                    ..UploadRingDesc::default()
                })
                .unwrap();
            let first = allocator.ring_allocate(ring, 100, 1).unwrap();
            let scratch = allocator.ring_allocate(ring, 4096, alignment).unwrap();
            assert_eq!((first.memory_offset() - first.buffer_offset()) % alignment, 0, "{profile}");
            let info = vk::BufferDeviceAddressInfo::default().buffer(scratch.buffer());
            // SAFETY: the ring's buffer, made with SHADER_DEVICE_ADDRESS and
            // bound to memory allocated for device addresses.
            let address = unsafe { device.get_buffer_device_address(&info) } + scratch.buffer_offset();
            assert_eq!(scratch.device_address(), Some(address), "{profile}");
            assert_eq!(scratch.memory_offset() % alignment, 0, "{profile}");
            assert_eq!(address % alignment.min(4096), 0, "{profile}: address {address:#x}");
            rings.push(ring);
        }
        for ring in rings {
            allocator.destroy_upload_ring(ring).unwrap();
        }
        // SAFETY: never used by the GPU.
        unsafe {
            for (buffer, allocation) in live {
                allocator.destroy_buffer(buffer, allocation).unwrap();
            }
            allocator.collect_idle();
        }
    }
);
