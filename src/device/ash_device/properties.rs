//! How the ash backend reads the physical device's memory properties:
//! Vulkan's property flags in `gpu-alloc-types`' form (which has no bits
//! for AMD's device-coherent memory, found apart), whether its Vulkan
//! version has maintenance4 (and its `maxBufferSize` limit) in core, and
//! that limit read as unknown where it is 0. Pure functions of what the
//! driver answered, apart from `ash_device.rs` so that the backend's calls
//! into the driver read without them.

use ash::vk;
use gpu_alloc_types::MemoryPropertyFlags;

/// Vulkan's property flags in gpu-alloc-types' form.
pub(super) fn memory_property_flags(flags: vk::MemoryPropertyFlags) -> MemoryPropertyFlags {
    let pairs = [
        (
            vk::MemoryPropertyFlags::DEVICE_LOCAL,
            MemoryPropertyFlags::DEVICE_LOCAL,
        ),
        (
            vk::MemoryPropertyFlags::HOST_VISIBLE,
            MemoryPropertyFlags::HOST_VISIBLE,
        ),
        (
            vk::MemoryPropertyFlags::HOST_COHERENT,
            MemoryPropertyFlags::HOST_COHERENT,
        ),
        (
            vk::MemoryPropertyFlags::HOST_CACHED,
            MemoryPropertyFlags::HOST_CACHED,
        ),
        (
            vk::MemoryPropertyFlags::LAZILY_ALLOCATED,
            MemoryPropertyFlags::LAZILY_ALLOCATED,
        ),
        (
            vk::MemoryPropertyFlags::PROTECTED,
            MemoryPropertyFlags::PROTECTED,
        ),
    ];
    pairs
        .into_iter()
        .filter(|(vk_flag, _)| flags.contains(*vk_flag))
        .fold(MemoryPropertyFlags::empty(), |acc, (_, flag)| acc | flag)
}

/// Whether `api_version` (`VkPhysicalDeviceProperties::apiVersion`) is
/// Vulkan 1.3 or later, where maintenance4 is core.
pub(super) fn is_vulkan_1_3(api_version: u32) -> bool {
    let version = (
        vk::api_version_major(api_version),
        vk::api_version_minor(api_version),
    );
    version >= (1, 3)
}

/// [`MemoryProperties::max_buffer_size`](crate::device::MemoryProperties::max_buffer_size) from the `maxBufferSize` the
/// device reported (`None`: not asked, the device has no maintenance4):
/// unknown, `u64::MAX`, when not asked or reported as 0 (below the 2^30
/// every conformant driver must report: a driver or layer that left the
/// struct unfilled).
pub(super) fn known_max_buffer_size(reported: Option<u64>) -> u64 {
    match reported {
        None | Some(0) => u64::MAX,
        Some(size) => size,
    }
}

/// One bit per memory type with `DEVICE_COHERENT_BIT_AMD` or
/// `DEVICE_UNCACHED_BIT_AMD` (the spec requires the first wherever the second
/// is set; either marks a type that needs `deviceCoherentMemory`).
pub(super) fn amd_device_coherent_types(types: &[vk::MemoryType]) -> u32 {
    let amd =
        vk::MemoryPropertyFlags::DEVICE_COHERENT_AMD | vk::MemoryPropertyFlags::DEVICE_UNCACHED_AMD;
    types
        .iter()
        .take(32)
        .enumerate()
        .filter(|(_, ty)| ty.property_flags.intersects(amd))
        .fold(0, |bits, (index, _)| bits | 1 << index)
}
