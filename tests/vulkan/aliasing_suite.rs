//! Aliasing helpers on a real driver, under the validation layer, on every
//! profile: buffers and images bound into the memory of an allocation made
//! for another resource (`create_aliasing_buffer`, `create_aliasing_image`),
//! GPU writes through one alias seen through another, and the misfits
//! refused with nothing created left behind (the layer reports a resource
//! leaked at device destruction).

use ash::vk;
use vk_suballoc::{AllocationDesc, DedicatedPolicy, Error, Usage};

use super::allocator_setup::{
    allocator_for, buffer_info, check_pattern, image_info, memory_barrier, transition, COLOR,
    TRANSFER_TO_HOST, TRANSFER_TO_TRANSFER,
};
use crate::support::{test_each_profile, Advice, Profile, VulkanContext};

test_each_profile!(
    /// Two buffers alias an image's memory, the second overlapping the
    /// second half of the first: what the GPU fills through the second is
    /// read back through the first. A second image aliases the first
    /// image and is cleared. Buffers take an image's memory on every
    /// profile, whose optimal images take whole granularity pages.
    fn buffers_and_images_alias_an_images_memory(profile) {
        let context = VulkanContext::new(profile);
        let allocator = allocator_for(&context);
        let device = &context.device;
        let desc = AllocationDesc::new(Usage::DEVICE_LOCAL);
        // SAFETY: valid create infos; the aliases are destroyed before the
        // image's allocation is freed, after the GPU is done with them.
        unsafe {
            let (image, allocation) = allocator.create_image(&image_info(64, 64), &desc).unwrap();
            assert!(allocation.size() >= 8192, "{profile}: {}", allocation.size());
            let whole = allocator.create_aliasing_buffer(&allocation, 0, &buffer_info(8192)).unwrap();
            let half = allocator.create_aliasing_buffer(&allocation, 4096, &buffer_info(4096)).unwrap();
            let second_image = allocator.create_aliasing_image(&allocation, 0, &image_info(32, 32)).unwrap();
            let (readback, mut readback_memory) =
                allocator.create_buffer(&buffer_info(8192), &AllocationDesc::new(Usage::READBACK)).unwrap();
            context.run_one_time_commands(|device, cmd| {
                device.cmd_fill_buffer(cmd, whole, 0, 8192, 0x1111_1111);
                let (src, dst) = TRANSFER_TO_TRANSFER;
                memory_barrier(device, cmd, src, dst);
                device.cmd_fill_buffer(cmd, half, 0, 4096, 0x2222_2222);
                memory_barrier(device, cmd, src, dst);
                let region = [vk::BufferCopy { src_offset: 0, dst_offset: 0, size: 8192 }];
                device.cmd_copy_buffer(cmd, whole, readback, &region);
                let (src, dst) = TRANSFER_TO_HOST;
                memory_barrier(device, cmd, src, dst);
            });
            check_pattern(&allocator, &mut readback_memory, 4096, &[0x11; 4], &format!("{profile}: first half"));
            allocator.invalidate(&mut readback_memory, ..).unwrap();
            let back = &allocator.mapped_slice(&readback_memory).unwrap()[4096..8192];
            assert!(back.iter().all(|&b| b == 0x22), "{profile}: the alias's fill is not seen");
            // The image aliases are usable too: the second is cleared.
            context.run_one_time_commands(|device, cmd| {
                let undefined = (vk::ImageLayout::UNDEFINED, vk::AccessFlags::empty());
                let dst = (vk::ImageLayout::TRANSFER_DST_OPTIMAL, vk::AccessFlags::TRANSFER_WRITE);
                transition(device, cmd, second_image, undefined, dst);
                let color = vk::ClearColorValue { float32: [0.25, 0.5, 0.75, 1.0] };
                device.cmd_clear_color_image(cmd, second_image, dst.0, &color, &[COLOR]);
            });
            device.destroy_buffer(whole, None);
            device.destroy_buffer(half, None);
            device.destroy_image(second_image, None);
            allocator.destroy_buffer(readback, readback_memory).unwrap();
            allocator.destroy_image(image, allocation).unwrap();
        }
        context.assert_no_validation_messages();
    }
);

test_each_profile!(
    /// Misfits are refused before anything is bound, and the resource
    /// made for the check is destroyed: out of the allocation, an offset
    /// off the resource's alignment, and an optimal image in a buffer's
    /// memory where the granularity makes them share a page with its
    /// neighbours (every profile but those whose granularity is 1).
    fn misfitting_aliases_are_refused_and_leave_nothing(profile) {
        let context = VulkanContext::new(profile);
        let allocator = allocator_for(&context);
        let desc = AllocationDesc::new(Usage::DEVICE_LOCAL);
        let granularity = context.properties().limits.buffer_image_granularity;
        // SAFETY: valid create infos; nothing is submitted.
        unsafe {
            let (buffer, allocation) = allocator.create_buffer(&buffer_info(65536), &desc).unwrap();
            let size = allocation.size();
            let past = allocator.create_aliasing_buffer(&allocation, size - 1024, &buffer_info(2048));
            assert!(matches!(past, Err(Error::RangeOutOfBounds { .. })), "{profile}: {past:?}");
            let image = allocator.create_aliasing_image(&allocation, 0, &image_info(16, 16));
            if granularity > 1 {
                assert!(matches!(image, Err(Error::CannotAlias(_))), "{profile}: {image:?}");
            } else {
                context.device.destroy_image(image.unwrap(), None);
            }
            // A uniform-buffer alias one byte off every alignment a driver
            // reports for it.
            let uniform = vk::BufferCreateInfo::default()
                .size(256)
                .usage(vk::BufferUsageFlags::UNIFORM_BUFFER);
            let off = allocator.create_aliasing_buffer(&allocation, 1, &uniform);
            assert!(matches!(off, Err(Error::CannotAlias(_))), "{profile}: {off:?}");
            allocator.destroy_buffer(buffer, allocation).unwrap();
        }
        context.assert_no_validation_messages();
    }
);

test_each_profile!(
    /// Dedicated memory the helpers make for a render target takes an
    /// alias only when asked for one (`can_alias`: no
    /// `VkMemoryDedicatedAllocateInfo`); the alias is then used on the GPU
    /// and destroyed after its frame, before the image and its memory.
    fn dedicated_render_targets_alias_with_can_alias(profile) {
        let context = VulkanContext::new(profile);
        let allocator = allocator_for(&context);
        let always = AllocationDesc::new(Usage::DEVICE_LOCAL).dedicated(DedicatedPolicy::Always);
        // Small render targets get dedicated memory on purpose: allowed for
        // those calls alone (the readback buffer's block may not be small).
        let small = [Advice::SmallMemory];
        // SAFETY: valid create infos; the GPU is done with everything (the
        // one-time commands wait) before the frame is collected.
        unsafe {
            let (plain, plain_memory) =
                context.allowing(&small, || allocator.create_image(&image_info(64, 64), &always)).unwrap();
            assert!(plain_memory.is_dedicated(), "{profile}");
            let refused = allocator.create_aliasing_buffer(&plain_memory, 0, &buffer_info(4096));
            assert!(matches!(refused, Err(Error::CannotAlias(_))), "{profile}: {refused:?}");
            let (image, memory) = context
                .allowing(&small, || allocator.create_image(&image_info(64, 64), &always.can_alias()))
                .unwrap();
            assert!(memory.is_dedicated(), "{profile}");
            let alias = allocator.create_aliasing_buffer(&memory, 0, &buffer_info(4096)).unwrap();
            let (readback, mut readback_memory) =
                allocator.create_buffer(&buffer_info(4096), &AllocationDesc::new(Usage::READBACK)).unwrap();
            context.run_one_time_commands(|device, cmd| {
                device.cmd_fill_buffer(cmd, alias, 0, 4096, 0x5a5a_5a5a);
                let (src, dst) = TRANSFER_TO_TRANSFER;
                memory_barrier(device, cmd, src, dst);
                let region = [vk::BufferCopy { src_offset: 0, dst_offset: 0, size: 4096 }];
                device.cmd_copy_buffer(cmd, alias, readback, &region);
                let (src, dst) = TRANSFER_TO_HOST;
                memory_barrier(device, cmd, src, dst);
            });
            check_pattern(&allocator, &mut readback_memory, 4096, &[0x5a; 4], &format!("{profile}: alias"));
            allocator.destroy_alias_buffer_after_frame(alias);
            allocator.destroy_image_after_frame(image, memory).unwrap();
            let fence = context.device.create_fence(&vk::FenceCreateInfo::default().flags(vk::FenceCreateFlags::SIGNALED), None).unwrap();
            allocator.end_frame(fence).unwrap();
            let collected = allocator.wait_and_collect(u64::MAX).unwrap();
            assert_eq!(collected.frees, 2, "{profile}");
            context.device.destroy_fence(fence, None);
            allocator.destroy_image(plain, plain_memory).unwrap();
            allocator.destroy_buffer(readback, readback_memory).unwrap();
        }
        context.assert_no_validation_messages();
    }
);

/// Buffers and images made for capture and replay
/// (`VK_BUFFER_CREATE_DEVICE_ADDRESS_CAPTURE_REPLAY_BIT`,
/// `VK_BUFFER_CREATE_DESCRIPTOR_BUFFER_CAPTURE_REPLAY_BIT_EXT`,
/// `VK_IMAGE_CREATE_DESCRIPTOR_BUFFER_CAPTURE_REPLAY_BIT_EXT`) bind only to
/// memory allocated with `VK_MEMORY_ALLOCATE_DEVICE_ADDRESS_CAPTURE_REPLAY_BIT`
/// (VUID-vkBindBufferMemory-bufferDeviceAddressCaptureReplay-09200,
/// -buffer-09201, VUID-vkBindImageMemory-image-09202), which the allocator
/// never sets: such an alias is refused before anything is created, so the
/// layer sees no call (lavapipe's device here has neither capture-replay
/// feature, so creating one would be reported too).
#[test]
fn capture_replay_aliases_are_refused_up_front() {
    let context = VulkanContext::new(Profile::Lavapipe);
    let allocator = allocator_for(&context);
    let desc = AllocationDesc::new(Usage::DEVICE_LOCAL);
    // SAFETY: valid create infos for the allocation's image; the refused
    // ones reach no Vulkan call; nothing is submitted.
    unsafe {
        let (image, allocation) = allocator.create_image(&image_info(64, 64), &desc).unwrap();
        for flags in [
            vk::BufferCreateFlags::DEVICE_ADDRESS_CAPTURE_REPLAY,
            vk::BufferCreateFlags::DESCRIPTOR_BUFFER_CAPTURE_REPLAY_EXT,
        ] {
            let info = buffer_info(4096).flags(flags);
            let result = allocator.create_aliasing_buffer(&allocation, 0, &info);
            assert!(
                matches!(result, Err(Error::UnsupportedResource(_))),
                "{flags:?}: {result:?}"
            );
        }
        let flags = vk::ImageCreateFlags::DESCRIPTOR_BUFFER_CAPTURE_REPLAY_EXT;
        let info = image_info(32, 32).flags(flags);
        let result = allocator.create_aliasing_image(&allocation, 0, &info);
        assert!(
            matches!(result, Err(Error::UnsupportedResource(_))),
            "{flags:?}: {result:?}"
        );
        allocator.destroy_image(image, allocation).unwrap();
    }
    context.assert_no_validation_messages();
}
