//! `create_buffer` and `create_image` refuse a description they can judge
//! alone (another allocator's pool, a `min_alignment` that is no power of
//! two) before they create anything: no `vkCreateBuffer` / `vkCreateImage`
//! call is made only to destroy its object again. The allocator runs over
//! a copy of the test device whose create calls count themselves, then go
//! on to the validation layer and lavapipe.

use std::cell::Cell;

use ash::vk;
use vk_suballoc::device::AshMemoryDevice;
use vk_suballoc::{AllocationDesc, Allocator, Config, Error, PoolDesc, Usage};

use super::allocator_setup::{allocator_for, buffer_info, context_features, image_info};
use crate::support::{Profile, VulkanContext};

/// The device's own create calls, and the creates counted, per thread (the
/// allocator calls them on the test's thread).
type CreateCalls = (vk::PFN_vkCreateBuffer, vk::PFN_vkCreateImage);

thread_local! {
    static NEXT: Cell<Option<CreateCalls>> = const { Cell::new(None) };
    static CREATES: Cell<u32> = const { Cell::new(0) };
}

/// `vkCreateBuffer`, counted.
unsafe extern "system" fn counted_create_buffer(
    device: vk::Device,
    info: *const vk::BufferCreateInfo<'_>,
    allocator: *const vk::AllocationCallbacks<'_>,
    buffer: *mut vk::Buffer,
) -> vk::Result {
    CREATES.with(|creates| creates.set(creates.get() + 1));
    match NEXT.with(Cell::get) {
        // SAFETY: the caller's arguments, passed on to the device's own call.
        Some((create_buffer, _)) => unsafe { create_buffer(device, info, allocator, buffer) },
        None => vk::Result::ERROR_INITIALIZATION_FAILED,
    }
}

/// `vkCreateImage`, counted.
unsafe extern "system" fn counted_create_image(
    device: vk::Device,
    info: *const vk::ImageCreateInfo<'_>,
    allocator: *const vk::AllocationCallbacks<'_>,
    image: *mut vk::Image,
) -> vk::Result {
    CREATES.with(|creates| creates.set(creates.get() + 1));
    match NEXT.with(Cell::get) {
        // SAFETY: the caller's arguments, passed on to the device's own call.
        Some((_, create_image)) => unsafe { create_image(device, info, allocator, image) },
        None => vk::Result::ERROR_INITIALIZATION_FAILED,
    }
}

/// Creates counted (on this thread) since the last call.
fn take_creates() -> u32 {
    CREATES.with(|creates| creates.replace(0))
}

/// `context.device`, but for its create calls, which count themselves.
fn counting_device(context: &VulkanContext) -> ash::Device {
    let device = &context.device;
    let mut fp_v1_0 = device.fp_v1_0().clone();
    NEXT.with(|next| next.set(Some((fp_v1_0.create_buffer, fp_v1_0.create_image))));
    fp_v1_0.create_buffer = counted_create_buffer;
    fp_v1_0.create_image = counted_create_image;
    ash::Device::from_parts_1_3(
        device.handle(),
        fp_v1_0,
        device.fp_v1_1().clone(),
        device.fp_v1_2().clone(),
        device.fp_v1_3().clone(),
    )
}

/// Another allocator's pool, and a `min_alignment` that is no power of two,
/// are refused with the error `allocate` gives them, before `vkCreateBuffer`
/// or `vkCreateImage`; a request that passes creates one of each.
#[test]
fn a_description_refused_alone_creates_nothing() {
    let context = VulkanContext::new(Profile::Lavapipe);
    let device = counting_device(&context);
    // SAFETY: `device` is the context's device (with the same functions,
    // two of them counted), created with bufferDeviceAddress, the budget
    // extension when `memory_budget_enabled`, on an instance with
    // VK_EXT_debug_utils; the context outlives the allocator.
    let ash_device = unsafe {
        AshMemoryDevice::new(
            &context.instance,
            &device,
            context.physical_device,
            context_features(&context),
        )
    };
    let allocator = Allocator::new(ash_device, Config::default()).unwrap();
    let other = allocator_for(&context);
    // SAFETY: a valid create info.
    let memory_type =
        unsafe { other.memory_type_for_buffer(&buffer_info(1 << 20), Usage::DEVICE_LOCAL) }
            .unwrap();
    let foreign = other.create_pool(&PoolDesc::new(memory_type)).unwrap();
    let plain = AllocationDesc::new(Usage::DEVICE_LOCAL);
    let refusals = [
        (plain.pool(foreign), Error::ForeignPool),
        (plain.min_alignment(3), Error::AlignmentNotPowerOfTwo(3)),
        // In `allocate`'s order.
        (plain.pool(foreign).min_alignment(3), Error::ForeignPool),
    ];
    take_creates();
    for (desc, expected) in refusals {
        // SAFETY: valid create infos.
        unsafe {
            let result = allocator.create_buffer(&buffer_info(1 << 20), &desc);
            assert_eq!(result.err(), Some(expected));
            let result = allocator.create_image(&image_info(64, 64), &desc);
            assert_eq!(result.err(), Some(expected));
        }
        assert_eq!(take_creates(), 0, "{expected:?}: nothing created");
    }
    // The count sees the helpers' creates.
    // SAFETY: valid create infos; nothing uses the resources.
    unsafe {
        let (buffer, memory) = allocator
            .create_buffer(&buffer_info(1 << 20), &plain)
            .unwrap();
        let (image, image_memory) = allocator.create_image(&image_info(64, 64), &plain).unwrap();
        assert_eq!(take_creates(), 2);
        allocator.destroy_buffer(buffer, memory).unwrap();
        allocator.destroy_image(image, image_memory).unwrap();
    }
    assert_eq!(other.destroy_pool(foreign), Ok(()));
    context.assert_no_validation_messages();
}
