//! Self-test of the fake-memory layer: each profile presents the memory
//! architecture it promises, the fake limits bite (heap sizes, allocation
//! count, chosen failures), and the validation layer above it catches misuse
//! that lavapipe alone would let through, while a correct run stays silent.
//!
//! The tests sit in the files below, one concept each. This file holds what
//! several of them share: the memory property flags, `vkAllocateMemory` and
//! `vkFreeMemory` as the tests call them, a context with the budget
//! extension and the budget a heap should report, the first memory type
//! with given flags, and a test buffer and image.

use ash::vk;

use crate::support::{rgba8_image_info, Advice, ContextOptions, Profile, VulkanContext};

#[path = "layer_self_test/correct_use.rs"]
mod correct_use;
#[path = "layer_self_test/fake_limits.rs"]
mod fake_limits;
#[path = "layer_self_test/memory_architecture.rs"]
mod memory_architecture;
#[path = "layer_self_test/memory_priority.rs"]
mod memory_priority;
#[path = "layer_self_test/reported_misuse.rs"]
mod reported_misuse;

const MIB: u64 = 1024 * 1024;

const DL: vk::MemoryPropertyFlags = vk::MemoryPropertyFlags::DEVICE_LOCAL;
const HV: vk::MemoryPropertyFlags = vk::MemoryPropertyFlags::HOST_VISIBLE;
const HC: vk::MemoryPropertyFlags = vk::MemoryPropertyFlags::HOST_COHERENT;
const CACHED: vk::MemoryPropertyFlags = vk::MemoryPropertyFlags::HOST_CACHED;
const LAZY: vk::MemoryPropertyFlags = vk::MemoryPropertyFlags::LAZILY_ALLOCATED;

/// `vkAllocateMemory` of `size` bytes in `type_index`. The layer's tests
/// make KiB-sized memory objects and bind resources to their whole: the
/// context allows the best-practices advice against it, and NVIDIA's, which
/// the allocator heeds (`VulkanContext::allow_own_allocations`).
fn allocate(
    context: &VulkanContext,
    type_index: u32,
    size: u64,
) -> Result<vk::DeviceMemory, vk::Result> {
    context.allow(Advice::SmallMemory);
    context.allow_own_allocations();
    let info = vk::MemoryAllocateInfo::default()
        .allocation_size(size)
        .memory_type_index(type_index);
    // SAFETY: a valid allocate info on the context's live device.
    unsafe { context.device.allocate_memory(&info, None) }
}

fn free(context: &VulkanContext, memory: vk::DeviceMemory) {
    // SAFETY: memory allocated on this device, no longer in use.
    unsafe { context.device.free_memory(memory, None) };
}

/// A context for `profile` that offers `VK_EXT_memory_budget` whatever the
/// profile says, to read the layer's accounting as `heapUsage`.
fn budgeted(profile: Profile) -> VulkanContext {
    VulkanContext::with_options(profile, ContextOptions::default().memory_budget(true))
}

/// `heapBudget` of a fake heap of `size` bytes with `used` allocated: what
/// is used plus 90% of the rest, in whole MiBs, as Mesa's drivers report it.
fn expected_budget(size: u64, used: u64) -> u64 {
    (used + (size - used) / 10 * 9) & !(MIB - 1)
}

/// The first memory type whose flags are exactly, or include, `flags`.
fn type_index(context: &VulkanContext, exact: bool, flags: vk::MemoryPropertyFlags) -> u32 {
    let properties = context.memory_properties();
    (0..properties.memory_type_count)
        .find(|&i| {
            let have = properties.memory_types[i as usize].property_flags;
            if exact {
                have == flags
            } else {
                have.contains(flags)
            }
        })
        .unwrap_or_else(|| panic!("{}: no memory type with {flags:?}", context.profile))
}

fn create_buffer(context: &VulkanContext, size: u64) -> vk::Buffer {
    let info = vk::BufferCreateInfo::default()
        .size(size)
        .usage(vk::BufferUsageFlags::TRANSFER_SRC | vk::BufferUsageFlags::TRANSFER_DST);
    // SAFETY: a valid create info on a live device.
    unsafe { context.device.create_buffer(&info, None) }.unwrap()
}

fn image_info() -> vk::ImageCreateInfo<'static> {
    let usage = vk::ImageUsageFlags::TRANSFER_DST | vk::ImageUsageFlags::TRANSFER_SRC;
    rgba8_image_info(64, 64, usage)
}
