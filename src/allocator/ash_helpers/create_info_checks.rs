//! What the create-and-bind helpers read from a caller's create info before
//! anything is made: a buffer's usage (a chained
//! `VkBufferUsageFlags2CreateInfoKHR` replacing `usage`), and the buffers
//! and images they refuse by their create flags, external handle types or
//! swapchain.

use std::ffi::c_void;

use ash::vk;

use crate::device::chain_structures;
use crate::Error;

/// The structure of type `T` in the chain that starts at `p_next`, if any
/// (a valid chain holds at most one of each type:
/// VUID-VkImageCreateInfo-sType-unique, and so for buffers).
///
/// # Safety
/// `p_next` is null or the start of a valid chain (each structure starts
/// with `sType` and `pNext`) that outlives `'a`.
unsafe fn chained<'a, T: vk::TaggedStructure>(p_next: *const c_void) -> Option<&'a T> {
    // SAFETY: a valid chain (the contract).
    let (_, found) =
        unsafe { chain_structures(p_next) }.find(|&(s_type, _)| s_type == T::STRUCTURE_TYPE)?;
    // SAFETY: its `sType` says it is a `T`, alive for `'a` (the contract).
    Some(unsafe { &*found.cast::<T>() })
}

/// The usage of a buffer made from `info`: that of a chained
/// `VkBufferUsageFlags2CreateInfoKHR` (`VK_KHR_maintenance5`, core in
/// Vulkan 1.4), which replaces `info.usage` when present, in the bits the
/// two flag types share (the spec gives the 64-bit flags the 32-bit ones'
/// values); else `info.usage`.
///
/// # Safety
/// `info`'s `pNext` chain is valid (VUID-VkBufferCreateInfo-pNext-pNext).
pub(in crate::allocator) unsafe fn buffer_usage(
    info: &vk::BufferCreateInfo<'_>,
) -> vk::BufferUsageFlags {
    // SAFETY: a valid chain (the contract), read within this call.
    let usage2 = unsafe { chained::<vk::BufferUsageFlags2CreateInfoKHR<'_>>(info.p_next) };
    let Some(usage2) = usage2 else {
        return info.usage;
    };
    // The low 32 bits: the flags the 32-bit type has (truncating drops
    // only bits it cannot name).
    vk::BufferUsageFlags::from_raw(usage2.usage.as_raw() as u32)
}

/// [`Error::UnsupportedResource`] for a buffer the helpers cannot bind,
/// from its create flags alone (before it is made): a sparse one, bound
/// with `vkQueueBindSparse`; one made for capture and replay
/// (`DEVICE_ADDRESS_CAPTURE_REPLAY`, `DESCRIPTOR_BUFFER_CAPTURE_REPLAY_EXT`),
/// which binds only to memory allocated with
/// `VK_MEMORY_ALLOCATE_DEVICE_ADDRESS_CAPTURE_REPLAY_BIT`
/// (VUID-vkBindBufferMemory-bufferDeviceAddressCaptureReplay-09200,
/// -buffer-09201), which the allocator never sets.
pub(super) fn check_buffer_flags(flags: vk::BufferCreateFlags) -> Result<(), Error> {
    let refused = [
        (
            vk::BufferCreateFlags::SPARSE_BINDING,
            "BufferCreateFlags::SPARSE_BINDING",
        ),
        (
            vk::BufferCreateFlags::DEVICE_ADDRESS_CAPTURE_REPLAY,
            "BufferCreateFlags::DEVICE_ADDRESS_CAPTURE_REPLAY",
        ),
        (
            vk::BufferCreateFlags::DESCRIPTOR_BUFFER_CAPTURE_REPLAY_EXT,
            "BufferCreateFlags::DESCRIPTOR_BUFFER_CAPTURE_REPLAY_EXT",
        ),
    ];
    match refused.iter().find(|(flag, _)| flags.contains(*flag)) {
        Some(&(_, name)) => Err(Error::UnsupportedResource(name)),
        None => Ok(()),
    }
}

/// [`check_buffer_flags`] for images: sparse ones, disjoint multi-planar
/// ones (whose planes take requirements and binds of their own), and
/// those made for capture and replay (`DESCRIPTOR_BUFFER_CAPTURE_REPLAY_EXT`,
/// VUID-vkBindImageMemory-image-09202).
pub(in crate::allocator) fn check_image_flags(flags: vk::ImageCreateFlags) -> Result<(), Error> {
    let refused = [
        (
            vk::ImageCreateFlags::SPARSE_BINDING,
            "ImageCreateFlags::SPARSE_BINDING",
        ),
        (vk::ImageCreateFlags::DISJOINT, "ImageCreateFlags::DISJOINT"),
        (
            vk::ImageCreateFlags::DESCRIPTOR_BUFFER_CAPTURE_REPLAY_EXT,
            "ImageCreateFlags::DESCRIPTOR_BUFFER_CAPTURE_REPLAY_EXT",
        ),
    ];
    match refused.iter().find(|(flag, _)| flags.contains(*flag)) {
        Some(&(_, name)) => Err(Error::UnsupportedResource(name)),
        None => Ok(()),
    }
}

/// [`Error::UnsupportedResource`] for an image made for Android hardware
/// buffers or QNX screen buffers (`VkExternalMemoryImageCreateInfo` naming
/// `ANDROID_HARDWARE_BUFFER_ANDROID` or `SCREEN_BUFFER_QNX`), before it is
/// made: such an image's memory requirements may not be asked for before
/// it is bound (VUID-VkImageMemoryRequirementsInfo2-image-01897,
/// VUID-vkGetImageMemoryRequirements-image-04004, -08960), as its memory
/// is imported from the buffer, never suballocated.
///
/// # Safety
/// `info`'s `pNext` chain is valid: each structure starts with `sType`
/// and `pNext`.
pub(in crate::allocator) unsafe fn check_image_handle_types(
    info: &vk::ImageCreateInfo<'_>,
) -> Result<(), Error> {
    let refused = [
        (
            vk::ExternalMemoryHandleTypeFlags::ANDROID_HARDWARE_BUFFER_ANDROID,
            "ExternalMemoryHandleTypeFlags::ANDROID_HARDWARE_BUFFER_ANDROID",
        ),
        (
            vk::ExternalMemoryHandleTypeFlags::SCREEN_BUFFER_QNX,
            "ExternalMemoryHandleTypeFlags::SCREEN_BUFFER_QNX",
        ),
    ];
    // SAFETY: a valid chain (the contract), read within this call.
    let external = unsafe { chained::<vk::ExternalMemoryImageCreateInfo<'_>>(info.p_next) };
    let Some(external) = external else {
        return Ok(());
    };
    match refused
        .iter()
        .find(|(handle_type, _)| external.handle_types.intersects(*handle_type))
    {
        Some(&(_, name)) => Err(Error::UnsupportedResource(name)),
        None => Ok(()),
    }
}

/// [`Error::UnsupportedResource`] for an image made to be bound to a
/// swapchain's memory (`VkImageSwapchainCreateInfoKHR` naming a swapchain,
/// "a swapchain that the image will be bound to"), before it is made: such
/// an image is bound with `VkBindImageMemorySwapchainInfoKHR`, to memory the
/// swapchain owns, never to the allocator's (and
/// `vkGetDeviceImageMemoryRequirements` refuses its create info,
/// VUID-VkDeviceImageMemoryRequirements-pCreateInfo-06416). The structure
/// with a null swapchain names none, and is not refused.
///
/// # Safety
/// `info`'s `pNext` chain is valid: each structure starts with `sType`
/// and `pNext`.
pub(in crate::allocator) unsafe fn check_image_swapchain(
    info: &vk::ImageCreateInfo<'_>,
) -> Result<(), Error> {
    // SAFETY: a valid chain (the contract), read within this call.
    let swapchain = unsafe { chained::<vk::ImageSwapchainCreateInfoKHR<'_>>(info.p_next) };
    let Some(swapchain) = swapchain else {
        return Ok(());
    };
    if swapchain.swapchain == vk::SwapchainKHR::null() {
        return Ok(());
    }
    Err(Error::UnsupportedResource(
        "ImageSwapchainCreateInfoKHR::swapchain",
    ))
}
