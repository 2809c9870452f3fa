//! Unit tests of the create-and-bind helpers that need no Vulkan driver:
//! the buffer usage read through a `pNext` chain, the images refused for
//! a swapchain named there, and the protection a request keeps. They are apart from `ash_helpers.rs` so that the helpers
//! read without them; the Vulkan suite (`tests/vulkan.rs`) runs the
//! helpers on a real device.

use ash::vk::{self, Handle};

use super::{buffer_usage, check_image_swapchain, keep_protection};
use crate::Error;
use crate::{Request, ResourceKind, Usage};

/// A buffer's usage is a chained `VkBufferUsageFlags2CreateInfoKHR`'s
/// when there is one (it replaces `usage`, which a maintenance5 caller
/// may leave empty), wherever it sits in the chain; else `usage`. A
/// device-address usage given there is seen, so the helpers ask for
/// device-address memory for it.
#[test]
fn a_chained_usage2_replaces_the_usage() {
    let address = vk::BufferUsageFlags::SHADER_DEVICE_ADDRESS;
    let plain = vk::BufferCreateInfo::default().usage(vk::BufferUsageFlags::TRANSFER_SRC);
    // SAFETY: no chain.
    let usage = unsafe { buffer_usage(&plain) };
    assert_eq!(usage, vk::BufferUsageFlags::TRANSFER_SRC);
    // The chain linked by hand, as C code links it: ash's `push_next`
    // keeps a pointer whose tag its own later borrows end (Miri).
    let usage2 = vk::BufferUsageFlags2CreateInfoKHR::default().usage(
        vk::BufferUsageFlags2KHR::SHADER_DEVICE_ADDRESS | vk::BufferUsageFlags2KHR::STORAGE_BUFFER,
    );
    let external = vk::ExternalMemoryBufferCreateInfo {
        p_next: std::ptr::addr_of!(usage2).cast(),
        ..Default::default()
    };
    let chained = vk::BufferCreateInfo {
        p_next: std::ptr::addr_of!(external).cast(),
        ..Default::default()
    };
    // SAFETY: a chain of two live structures, the usage second.
    let usage = unsafe { buffer_usage(&chained) };
    assert_eq!(usage, address | vk::BufferUsageFlags::STORAGE_BUFFER);
}

/// An image whose chain names a swapchain it will be bound to is refused,
/// wherever the structure sits in the chain; the structure with a null
/// swapchain names none, and an image without it is not refused.
#[test]
fn only_an_image_for_a_named_swapchain_is_refused() {
    let refused = Err(Error::UnsupportedResource(
        "ImageSwapchainCreateInfoKHR::swapchain",
    ));
    // SAFETY: no chain.
    let unchained = unsafe { check_image_swapchain(&vk::ImageCreateInfo::default()) };
    assert_eq!(unchained, Ok(()));
    for swapchain in [vk::SwapchainKHR::null(), vk::SwapchainKHR::from_raw(0x5a)] {
        // Linked by hand, second behind a format list (as in
        // `a_chained_usage2_replaces_the_usage`).
        let for_swapchain = vk::ImageSwapchainCreateInfoKHR::default().swapchain(swapchain);
        let list = vk::ImageFormatListCreateInfo {
            p_next: std::ptr::addr_of!(for_swapchain).cast(),
            ..Default::default()
        };
        let info = vk::ImageCreateInfo {
            p_next: std::ptr::addr_of!(list).cast(),
            ..Default::default()
        };
        // SAFETY: a chain of two live structures.
        let result = unsafe { check_image_swapchain(&info) };
        let expected = if swapchain == vk::SwapchainKHR::null() {
            Ok(())
        } else {
            refused
        };
        assert_eq!(result, expected, "{swapchain:?}");
    }
}

/// A protected resource may take only protected memory types, and any
/// other resource none of them, whatever its `memoryTypeBits` say:
/// Vulkan promises a protected type among a protected resource's bits,
/// not that they name no other (VUID-vkBindBufferMemory-None-01898,
/// -01899).
#[test]
fn resources_keep_to_memory_of_their_protection() {
    // Types: 0 device-local, 1 device-local protected, 2 host-visible.
    let protected_types = 0b010;
    let requirements = vk::MemoryRequirements {
        size: 256,
        alignment: 256,
        memory_type_bits: 0b111,
    };
    let mut request = Request::new(requirements, Usage::DEVICE_LOCAL, ResourceKind::Buffer);
    assert_eq!(
        keep_protection(request, protected_types, false).type_bits(),
        0b101
    );
    assert_eq!(
        keep_protection(request, protected_types, true).type_bits(),
        0b010
    );
    // What the caller ruled out stays out.
    request.desc = request.desc.memory_type_bits(0b101);
    assert_eq!(
        keep_protection(request, protected_types, false).type_bits(),
        0b101
    );
    assert_eq!(
        keep_protection(request, protected_types, true).type_bits(),
        0
    );
}
