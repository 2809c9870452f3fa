//! `memory_type_for_buffer` and `memory_type_for_image` on a device with
//! maintenance4's requirement queries (`DeviceFeatures::maintenance4`, core
//! in Vulkan 1.3) read a create info's requirements from the driver: no
//! buffer or image is made (counted by a device table whose
//! `vkCreateBuffer` and `vkCreateImage` count their calls), and the type
//! named is the one a resource made from the same create info takes, on
//! every profile (the fake-memory layer answers the queries in its own
//! terms). Without the feature each call makes one resource and destroys
//! it. Which image create infos the query may not take is a unit test of
//! the backend (`takes_image_info`).

use std::cell::Cell;
use std::ffi::c_void;
use std::ptr;

use ash::vk;
use vk_suballoc::device::{AshMemoryDevice, DeviceFeatures};
use vk_suballoc::{AllocationDesc, Allocator, Config, Usage};

use super::super::allocator_setup::{buffer_info, context_features, image_info};
use crate::support::{test_each_profile, VulkanContext};

thread_local! {
    /// The driver's `vkCreateBuffer` and `vkCreateImage` behind the counting
    /// ones (tests take turns on the Vulkan stack, each on its thread).
    static DRIVER: Cell<Option<(vk::PFN_vkCreateBuffer, vk::PFN_vkCreateImage)>> =
        const { Cell::new(None) };
    /// Buffers and images made through the counting table on this thread.
    static MADE: Cell<u32> = const { Cell::new(0) };
}

fn driver() -> (vk::PFN_vkCreateBuffer, vk::PFN_vkCreateImage) {
    DRIVER
        .get()
        .expect("the counting table was loaded on this thread")
}

unsafe extern "system" fn counting_create_buffer(
    device: vk::Device,
    info: *const vk::BufferCreateInfo<'_>,
    callbacks: *const vk::AllocationCallbacks<'_>,
    buffer: *mut vk::Buffer,
) -> vk::Result {
    MADE.set(MADE.get() + 1);
    // SAFETY: the caller's arguments, forwarded to the driver's command.
    unsafe { (driver().0)(device, info, callbacks, buffer) }
}

unsafe extern "system" fn counting_create_image(
    device: vk::Device,
    info: *const vk::ImageCreateInfo<'_>,
    callbacks: *const vk::AllocationCallbacks<'_>,
    image: *mut vk::Image,
) -> vk::Result {
    MADE.set(MADE.get() + 1);
    // SAFETY: as above.
    unsafe { (driver().1)(device, info, callbacks, image) }
}

/// `context`'s device with the counting `vkCreateBuffer` and
/// `vkCreateImage` in its table, every other command the driver's.
fn counting_device(context: &VulkanContext) -> ash::Device {
    let handle = context.device.handle();
    let driver = context.device.fp_v1_0();
    let real = (driver.create_buffer, driver.create_image);
    DRIVER.set(Some(real));
    // SAFETY: every command is the device's own but the two counting ones,
    // which forward to the device's own.
    unsafe {
        ash::Device::load_with(
            |name| match name.to_bytes() {
                b"vkCreateBuffer" => counting_create_buffer as *const c_void,
                b"vkCreateImage" => counting_create_image as *const c_void,
                _ => context
                    .instance
                    .get_device_proc_addr(handle, name.as_ptr())
                    .map_or(ptr::null(), |command| command as *const c_void),
            },
            handle,
        )
    }
}

test_each_profile!(
    /// With maintenance4 the queries make no buffer or image and name the
    /// type a buffer or image made from the same create info takes;
    /// without it each makes one (and names the same type).
    fn memory_type_queries_make_no_resource_with_maintenance4(profile) {
        let context = VulkanContext::new(profile);
        assert!(
            context.api_version >= vk::API_VERSION_1_3,
            "{profile}: the harness's device is Vulkan 1.3 (maintenance4 core)"
        );
        let device = counting_device(&context);
        // Each allocator lives to the end: one dropped before the next made
        // its blocks would have those take the memory just freed, which
        // NVIDIA's advice reports (on the allocator's own calls too).
        let mut allocators = Vec::new();
        for maintenance4 in [true, false] {
            let features = DeviceFeatures {
                maintenance4,
                ..context_features(&context)
            };
            // SAFETY: as `allocator_setup`'s allocators, over the same
            // device with the counting table; Vulkan 1.3, so maintenance4's
            // commands are core. The allocator drops before the context.
            let memory_device = unsafe {
                AshMemoryDevice::new(&context.instance, &device, context.physical_device, features)
            };
            let allocator = Allocator::new(memory_device, Config::default()).unwrap();
            let per_query = u32::from(!maintenance4);
            for usage in [Usage::DEVICE_LOCAL, Usage::UPLOAD, Usage::READBACK] {
                MADE.set(0);
                // SAFETY: a valid create info.
                let named = unsafe { allocator.memory_type_for_buffer(&buffer_info(4096), usage) };
                assert_eq!(MADE.get(), per_query, "{profile} maintenance4 {maintenance4} {usage:?}");
                // SAFETY: as above; never used by the GPU.
                let (buffer, allocation) = unsafe {
                    allocator.create_buffer(&buffer_info(4096), &AllocationDesc::new(usage))
                }
                .unwrap();
                assert_eq!(named, Ok(allocation.memory_type()), "{profile} {usage:?}");
                // SAFETY: never used by the GPU.
                unsafe { allocator.destroy_buffer(buffer, allocation) }.unwrap();
            }
            MADE.set(0);
            // SAFETY: a valid create info.
            let named = unsafe { allocator.memory_type_for_image(&image_info(16, 16), Usage::DEVICE_LOCAL) };
            assert_eq!(MADE.get(), per_query, "{profile} maintenance4 {maintenance4}: image");
            let desc = AllocationDesc::new(Usage::DEVICE_LOCAL);
            // SAFETY: as above; never used by the GPU.
            let (image, allocation) = unsafe { allocator.create_image(&image_info(16, 16), &desc) }.unwrap();
            assert_eq!(named, Ok(allocation.memory_type()), "{profile}: image");
            // SAFETY: never used by the GPU.
            unsafe { allocator.destroy_image(image, allocation) }.unwrap();
            allocators.push(allocator);
        }
        context.assert_no_validation_messages();
        drop(allocators);
    }
);
