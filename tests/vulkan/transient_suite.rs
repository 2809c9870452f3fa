//! `Usage::TRANSIENT` on a real driver, under the validation layer: transient
//! attachments go to lazily allocated memory where the device has some (the
//! mobile profile) and to device-local memory elsewhere, are used in a render
//! pass, and nothing else ever lands in a lazily allocated type. The layer
//! offers such a type only to transient-attachment images, as drivers must,
//! so the validation layer checks every bind against the real rule.

use ash::vk;
use vk_suballoc::{AllocationDesc, Usage};

use super::allocator_setup::{allocator_for, buffer_info, image_info};
use crate::support::{
    on_custom_device, test_each_profile, transient_attachment_info, Advice, Profile, VulkanContext,
};

const LAZY: vk::MemoryPropertyFlags = vk::MemoryPropertyFlags::LAZILY_ALLOCATED;

/// The property flags of memory type `index`.
fn type_flags(context: &VulkanContext, index: u32) -> vk::MemoryPropertyFlags {
    context.memory_properties().memory_types[index as usize].property_flags
}

test_each_profile!(
    /// A transient colour attachment created with `Usage::TRANSIENT` lands
    /// in the lazily allocated type on the mobile and mali profiles and in a
    /// device-local type elsewhere, and a render pass clears it without a
    /// validation message.
    fn transient_attachments_prefer_lazily_allocated_memory(profile) {
        let context = VulkanContext::new(profile);
        let allocator = allocator_for(&context);
        let extent = (64, 48);
        let info = transient_attachment_info(extent.0, extent.1);
        // A small attachment gets dedicated lazily allocated memory, on
        // purpose, where the device has such a type; elsewhere it takes a
        // block, which may not be small.
        let properties = context.memory_properties();
        let types = &properties.memory_types[..properties.memory_type_count as usize];
        let small: &[Advice] = if types.iter().any(|t| t.property_flags.contains(LAZY)) {
            &[Advice::SmallMemory]
        } else {
            &[]
        };
        // SAFETY: a valid create info for a colour attachment.
        let (image, allocation) = context
            .allowing(small, || unsafe { allocator.create_image(&info, &AllocationDesc::new(Usage::TRANSIENT)) })
            .unwrap();
        let index = allocation.memory_type();
        let flags = type_flags(&context, index);
        match profile {
            // 0 DL, 1 DL|HV|cached, 2 DL|HV|HC, 3 DL|lazily allocated.
            Profile::Mobile => assert_eq!((index, flags), (3, vk::MemoryPropertyFlags::DEVICE_LOCAL | LAZY)),
            // 0 DL|HV|HC, 1 DL|HV|HC|cached, 2 DL|lazily allocated.
            Profile::Mali => assert_eq!((index, flags), (2, vk::MemoryPropertyFlags::DEVICE_LOCAL | LAZY)),
            // Another device: device-local memory, lazily allocated or not.
            Profile::Lavapipe if on_custom_device() => {
                assert!(flags.contains(vk::MemoryPropertyFlags::DEVICE_LOCAL), "{profile}: {flags:?}");
            }
            // No lazily allocated type: the first, device-local one
            // (lavapipe's only type, also host-visible).
            _ => assert_eq!(index, 0, "{profile}: {flags:?}"),
        }
        if flags.contains(LAZY) {
            assert!(allocation.mapped_ptr().is_none(), "{profile}: lazily allocated memory is never mapped");
            assert!(allocation.is_dedicated(), "{profile}: lazily allocated memory is always dedicated");
        }
        context.clear_transient_attachment(image, extent);
        // SAFETY: the render pass completed (it is waited for).
        unsafe { allocator.destroy_image(image, allocation) }.unwrap();
        context.assert_no_validation_messages();
    }
);

test_each_profile!(
    /// A buffer, or an image without `TRANSIENT_ATTACHMENT` usage, asked for
    /// with `Usage::TRANSIENT` never lands in a lazily allocated type (the
    /// spec keeps them out, and the validation layer would report the bind):
    /// it falls back to device-local memory.
    fn only_transient_attachments_take_lazily_allocated_memory(profile) {
        let context = VulkanContext::new(profile);
        let allocator = allocator_for(&context);
        let desc = AllocationDesc::new(Usage::TRANSIENT);
        let attachment = image_info(64, 64)
            .usage(vk::ImageUsageFlags::COLOR_ATTACHMENT | vk::ImageUsageFlags::TRANSFER_SRC);
        // SAFETY: valid create infos; nothing is used by the GPU.
        unsafe {
            let (buffer, buffer_memory) = allocator.create_buffer(&buffer_info(64 << 10), &desc).unwrap();
            let (image, image_memory) = allocator.create_image(&attachment, &desc).unwrap();
            for (what, allocation) in [("buffer", &buffer_memory), ("image", &image_memory)] {
                let flags = type_flags(&context, allocation.memory_type());
                assert!(!flags.contains(LAZY), "{profile} {what}: {flags:?}");
                assert!(flags.contains(vk::MemoryPropertyFlags::DEVICE_LOCAL), "{profile} {what}: {flags:?}");
            }
            allocator.destroy_buffer(buffer, buffer_memory).unwrap();
            allocator.destroy_image(image, image_memory).unwrap();
        }
        context.assert_no_validation_messages();
    }
);
