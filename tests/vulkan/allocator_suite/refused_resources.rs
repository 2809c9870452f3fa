//! Resources the allocator refuses with a typed error before anything is
//! bound: a device-address buffer (made, allocated for, or aliased) on an
//! allocator not told of buffer device address, whose memory would lack the
//! device-address flag, sparse, disjoint and capture-replay resources,
//! which the create-and-bind helpers cannot bind, and images for imported
//! platform buffers or for a swapchain's memory.

use ash::vk::{self, Handle};
use vk_suballoc::device::{AshMemoryDevice, DeviceFeatures, MemoryDeviceExt};
use vk_suballoc::{Allocation, AllocationDesc, Allocator, Error, Usage};

use super::super::allocator_setup::{allocator_for, allocator_with, buffer_info, image_info};
use crate::support::{Profile, VulkanContext};

/// A device-address buffer on a device whose allocator was not told of
/// buffer device address: its memory would lack
/// `VK_MEMORY_ALLOCATE_DEVICE_ADDRESS_BIT` (binding it breaks
/// VUID-vkBindBufferMemory-bufferDeviceAddress-03339), so `create_buffer`
/// and `allocate_for_buffer` refuse it, from the buffer's usage alone; and
/// `memory_type_for_buffer` names no type for such buffers (a custom pool
/// of the type it named would hold memory they cannot bind to).
#[test]
fn a_device_address_buffer_needs_buffer_device_address() {
    let context = VulkanContext::new(Profile::Lavapipe);
    // Buffer device address, enabled on the device, is only left unused.
    let features = DeviceFeatures {
        debug_utils: true,
        ..DeviceFeatures::default()
    };
    let allocator = allocator_with(&context, features);
    let info = buffer_info(4096).usage(vk::BufferUsageFlags::SHADER_DEVICE_ADDRESS);
    let desc = AllocationDesc::new(Usage::DEVICE_LOCAL);
    // SAFETY: a valid create info; the buffer is never bound or used.
    unsafe {
        let created = allocator.create_buffer(&info, &desc);
        assert!(
            matches!(created, Err(Error::DeviceAddressNotEnabled)),
            "{created:?}"
        );
        let buffer = context.device.create_buffer(&info, None).unwrap();
        let allocated = allocator.allocate_for_buffer(buffer, info.usage, &desc);
        assert!(
            matches!(allocated, Err(Error::DeviceAddressNotEnabled)),
            "{allocated:?}"
        );
        context.device.destroy_buffer(buffer, None);
        let for_pool = allocator.memory_type_for_buffer(&info, Usage::DEVICE_LOCAL);
        assert!(
            matches!(for_pool, Err(Error::DeviceAddressNotEnabled)),
            "{for_pool:?}"
        );
        let plain = allocator.memory_type_for_buffer(&buffer_info(4096), Usage::DEVICE_LOCAL);
        assert!(plain.is_ok(), "{plain:?}");
    }
    assert_eq!(allocator.stats().allocations(), 0);
}

/// An aliasing buffer with `SHADER_DEVICE_ADDRESS` usage, on an allocator
/// not told of buffer device address (enabled on the device): the
/// allocation's memory lacks `VK_MEMORY_ALLOCATE_DEVICE_ADDRESS_BIT`, so
/// binding the alias would break
/// VUID-vkBindBufferMemory-bufferDeviceAddress-03339; it is refused with
/// the error `create_buffer` gives such a buffer, and the buffer
/// destroyed. A plain alias of the same allocation is made.
#[test]
fn a_device_address_alias_needs_buffer_device_address() {
    let context = VulkanContext::new(Profile::Lavapipe);
    let features = DeviceFeatures {
        debug_utils: true,
        ..DeviceFeatures::default()
    };
    let allocator = allocator_with(&context, features);
    let desc = AllocationDesc::new(Usage::DEVICE_LOCAL);
    let address_info = buffer_info(4096)
        .usage(vk::BufferUsageFlags::STORAGE_BUFFER | vk::BufferUsageFlags::SHADER_DEVICE_ADDRESS);
    // SAFETY: valid create infos; nothing is used by the GPU, and the alias
    // is destroyed before the allocation is freed.
    unsafe {
        let (buffer, allocation) = allocator.create_buffer(&buffer_info(4096), &desc).unwrap();
        let refused = allocator.create_aliasing_buffer(&allocation, 0, &address_info);
        assert!(
            matches!(refused, Err(Error::DeviceAddressNotEnabled)),
            "{refused:?}"
        );
        let plain = allocator
            .create_aliasing_buffer(&allocation, 0, &buffer_info(4096))
            .unwrap();
        context.device.destroy_buffer(plain, None);
        allocator.destroy_buffer(buffer, allocation).unwrap();
    }
}

/// Resources the create-and-bind helpers cannot bind get a typed error
/// before anything is created, so the validation layer sees no call at
/// all: sparse and disjoint ones, bound by region or by plane, and those
/// made for capture and replay, which bind only to memory allocated with
/// `VK_MEMORY_ALLOCATE_DEVICE_ADDRESS_CAPTURE_REPLAY_BIT`
/// (VUID-vkBindBufferMemory-bufferDeviceAddressCaptureReplay-09200,
/// -buffer-09201, VUID-vkBindImageMemory-image-09202), which the allocator
/// never sets (the aliasing helpers refuse them too). Lavapipe's device
/// here has none of these features, so creating one would be reported.
#[test]
fn unbindable_resources_are_refused_up_front() {
    let context = VulkanContext::new(Profile::Lavapipe);
    let allocator = allocator_for(&context);
    let desc = AllocationDesc::new(Usage::DEVICE_LOCAL);
    for flags in [
        vk::BufferCreateFlags::SPARSE_BINDING,
        vk::BufferCreateFlags::DEVICE_ADDRESS_CAPTURE_REPLAY,
        vk::BufferCreateFlags::DESCRIPTOR_BUFFER_CAPTURE_REPLAY_EXT,
    ] {
        let info = buffer_info(4096).flags(flags);
        // SAFETY: refused before any Vulkan call.
        let result = unsafe { allocator.create_buffer(&info, &desc) };
        assert!(
            matches!(result, Err(Error::UnsupportedResource(_))),
            "{flags:?}: {result:?}"
        );
    }
    for flags in [
        vk::ImageCreateFlags::SPARSE_BINDING,
        vk::ImageCreateFlags::DISJOINT,
        vk::ImageCreateFlags::DESCRIPTOR_BUFFER_CAPTURE_REPLAY_EXT,
    ] {
        let info = image_info(64, 64).flags(flags);
        // SAFETY: refused before any Vulkan call.
        let result = unsafe { allocator.create_image(&info, &desc) };
        assert!(
            matches!(result, Err(Error::UnsupportedResource(_))),
            "{flags:?}: {result:?}"
        );
    }
    // The query of a disjoint image's memory type would read one set of
    // requirements for planes that have their own
    // (VUID-vkGetImageMemoryRequirements-image-01588).
    let disjoint = image_info(64, 64).flags(vk::ImageCreateFlags::DISJOINT);
    // SAFETY: refused before any Vulkan call.
    let for_image = unsafe { allocator.memory_type_for_image(&disjoint, Usage::DEVICE_LOCAL) };
    assert!(
        matches!(for_image, Err(Error::UnsupportedResource(_))),
        "{for_image:?}"
    );
    assert_eq!(allocator.stats().memory_objects, 0);
    context.assert_no_validation_messages();
}

/// An image made for Android hardware buffers or QNX screen buffers
/// (`VkExternalMemoryImageCreateInfo`) takes its memory from the imported
/// buffer, and its requirements may not be asked for before it is bound
/// (VUID-VkImageMemoryRequirementsInfo2-image-01897,
/// VUID-vkGetImageMemoryRequirements-image-04004, -08960): `create_image`,
/// `memory_type_for_image` and `create_aliasing_image` refuse it before
/// making it, naming the handle type, wherever the structure sits in the
/// chain. Lavapipe has neither extension, so making one would be reported.
/// An image for handle types the allocator's memory can be (opaque file
/// descriptors) is not refused.
#[test]
fn images_for_imported_platform_buffers_are_refused_up_front() {
    let context = VulkanContext::new(Profile::Lavapipe);
    let allocator = allocator_for(&context);
    let (desc, buffer, allocation) = aliasable_buffer(&allocator);
    let formats = [vk::Format::R8G8B8A8_UNORM];
    for (handle_type, name) in [
        (
            vk::ExternalMemoryHandleTypeFlags::ANDROID_HARDWARE_BUFFER_ANDROID,
            "ANDROID_HARDWARE_BUFFER_ANDROID",
        ),
        (
            vk::ExternalMemoryHandleTypeFlags::SCREEN_BUFFER_QNX,
            "SCREEN_BUFFER_QNX",
        ),
    ] {
        let mut external = vk::ExternalMemoryImageCreateInfo::default()
            .handle_types(handle_type | vk::ExternalMemoryHandleTypeFlags::OPAQUE_FD);
        let mut list = vk::ImageFormatListCreateInfo::default().view_formats(&formats);
        // push_next prepends: the external structure is second.
        let info = image_info(64, 64)
            .push_next(&mut external)
            .push_next(&mut list);
        // SAFETY: refused before any Vulkan call.
        let mut results = unsafe { image_helpers(&allocator, &allocation, &desc, &info) }.to_vec();
        // SAFETY: as above.
        let for_type = unsafe { allocator.memory_type_for_image(&info, Usage::DEVICE_LOCAL) };
        results.push(for_type.map(|_| ()));
        for result in results {
            match result {
                Err(Error::UnsupportedResource(text)) => assert!(text.ends_with(name), "{text}"),
                other => panic!("{name}: {other:?}"),
            }
        }
    }
    assert_eq!(allocator.stats().allocations(), 1, "the buffer's alone");
    // SAFETY: never used by the GPU.
    unsafe { allocator.destroy_buffer(buffer, allocation) }.unwrap();
    context.assert_no_validation_messages();
}

/// An image made to be bound to a swapchain's memory
/// (`VkImageSwapchainCreateInfoKHR` naming a swapchain) takes memory the
/// swapchain owns: `create_image` and `create_aliasing_image` refuse it
/// before making it, naming the structure, wherever it sits in the chain.
/// The swapchain's handle is never a real one here: nothing reaches the
/// driver or the validation layer (which would report the structure, as
/// the test device has no `VK_KHR_swapchain`).
#[test]
fn images_for_a_swapchain_are_refused_up_front() {
    let context = VulkanContext::new(Profile::Lavapipe);
    let allocator = allocator_for(&context);
    let (desc, buffer, allocation) = aliasable_buffer(&allocator);
    let formats = [vk::Format::R8G8B8A8_UNORM];
    let mut for_swapchain =
        vk::ImageSwapchainCreateInfoKHR::default().swapchain(vk::SwapchainKHR::from_raw(0x5a));
    let mut list = vk::ImageFormatListCreateInfo::default().view_formats(&formats);
    // push_next prepends: the swapchain's structure is second.
    let info = image_info(64, 64)
        .push_next(&mut for_swapchain)
        .push_next(&mut list);
    // SAFETY: refused before any Vulkan call.
    let results = unsafe { image_helpers(&allocator, &allocation, &desc, &info) };
    for result in results {
        assert_eq!(
            result,
            Err(Error::UnsupportedResource(
                "ImageSwapchainCreateInfoKHR::swapchain"
            ))
        );
    }
    assert_eq!(allocator.stats().allocations(), 1, "the buffer's alone");
    // SAFETY: never used by the GPU.
    unsafe { allocator.destroy_buffer(buffer, allocation) }.unwrap();
    context.assert_no_validation_messages();
}

/// A device-local request that aliases may take (`can_alias`), and a
/// 1 MiB buffer made with it, for the aliasing helper's refusals.
fn aliasable_buffer(
    allocator: &Allocator<AshMemoryDevice>,
) -> (AllocationDesc<'static>, vk::Buffer, Allocation) {
    let desc = AllocationDesc::new(Usage::DEVICE_LOCAL).can_alias();
    // SAFETY: a valid create info; the buffer is never used by the GPU.
    let (buffer, allocation) =
        unsafe { allocator.create_buffer(&buffer_info(1 << 20), &desc) }.unwrap();
    (desc, buffer, allocation)
}

/// `create_image` (with `desc`) and `create_aliasing_image` (into
/// `allocation`, at offset 0) on `info`, which both must refuse: their
/// results (an image either made would be leaked, and the test fail).
///
/// # Safety
/// `info` is a create info both refuse before any Vulkan call, or a valid
/// one.
unsafe fn image_helpers(
    allocator: &Allocator<AshMemoryDevice>,
    allocation: &Allocation,
    desc: &AllocationDesc<'_>,
    info: &vk::ImageCreateInfo<'_>,
) -> [Result<(), Error>; 2] {
    // SAFETY: the caller's contract.
    unsafe {
        [
            allocator.create_image(info, desc).map(|_| ()),
            allocator
                .create_aliasing_image(allocation, 0, info)
                .map(|_| ()),
        ]
    }
}

/// A buffer larger than the device's `maxBufferSize` is refused by the
/// create-and-bind and aliasing helpers, and by `memory_type_for_buffer`
/// (which makes one to read its requirements), before `vkCreateBuffer`
/// (which it would break: VUID-VkBufferCreateInfo-size-06409; lavapipe
/// answers `ERROR_OUT_OF_DEVICE_MEMORY`), with the size and the limit; a
/// buffer of exactly the limit is not refused for its size (its
/// memory then fails for lavapipe's 2 GiB heap, as any request that
/// large, with nothing made either).
#[test]
fn buffers_past_max_buffer_size_are_refused_up_front() {
    let context = VulkanContext::new(Profile::Lavapipe);
    let allocator = allocator_for(&context);
    let max = allocator.device().memory_properties().max_buffer_size;
    assert!(max < u64::MAX, "lavapipe reports maxBufferSize");
    let desc = AllocationDesc::new(Usage::DEVICE_LOCAL);
    let over = buffer_info(max + 1);
    // SAFETY: refused before any Vulkan call; the one buffer made is
    // destroyed before the allocation is freed.
    unsafe {
        let created = allocator.create_buffer(&over, &desc);
        assert!(
            matches!(created, Err(Error::SizeExceedsMaxBuffer { size, max: m }) if size == max + 1 && m == max),
            "{created:?}"
        );
        let for_buffer = allocator.memory_type_for_buffer(&over, Usage::DEVICE_LOCAL);
        assert!(
            matches!(for_buffer, Err(Error::SizeExceedsMaxBuffer { size, max: m }) if size == max + 1 && m == max),
            "{for_buffer:?}"
        );
        let (buffer, allocation) = allocator.create_buffer(&buffer_info(4096), &desc).unwrap();
        let alias = allocator.create_aliasing_buffer(&allocation, 0, &over);
        assert!(
            matches!(alias, Err(Error::SizeExceedsMaxBuffer { .. })),
            "{alias:?}"
        );
        allocator.destroy_buffer(buffer, allocation).unwrap();
        let at_limit = allocator.create_buffer(&buffer_info(max), &desc);
        assert!(
            !matches!(at_limit, Err(Error::SizeExceedsMaxBuffer { .. })),
            "{at_limit:?}"
        );
        if let Ok((buffer, allocation)) = at_limit {
            allocator.destroy_buffer(buffer, allocation).unwrap();
        }
    }
    assert_eq!(allocator.stats().allocations(), 0);
    context.assert_no_validation_messages();
}
