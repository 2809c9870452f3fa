//! What the allocator's Vulkan tests share: an allocator over a test context,
//! a seeded random source, and resource descriptions.

use ash::vk;
use vk_suballoc::device::{AshMemoryDevice, DeviceFeatures};
use vk_suballoc::{Allocation, Allocator, Config};

use crate::support::{rgba8_image_info, VulkanContext};

/// An allocator over `context`'s device with everything the harness enables
/// (buffer device address, the budget and priority extensions when present,
/// debug names).
/// Declare it after the context so that it is dropped first.
pub fn allocator_for(context: &VulkanContext) -> Allocator<AshMemoryDevice> {
    allocator_configured(context, Config::default())
}

/// [`allocator_for`] with `config` instead of the default configuration.
pub fn allocator_configured(context: &VulkanContext, config: Config) -> Allocator<AshMemoryDevice> {
    build_allocator(context, context_features(context), config)
}

/// Everything the harness enables on `context`'s device and instance, as
/// the allocator is told of it: buffer device address (but under a Vulkan
/// 1.1 instance), the budget and priority extensions when present, debug
/// names, maintenance4's requirement queries (core in Vulkan 1.3).
pub fn context_features(context: &VulkanContext) -> DeviceFeatures {
    DeviceFeatures {
        buffer_device_address: context.vulkan_1_2_features_enabled,
        memory_budget: context.memory_budget_enabled,
        memory_priority: context.memory_priority_enabled,
        debug_utils: true,
        amd_device_coherent_memory: false,
        protected_memory: false,
        maintenance4: context.api_version >= vk::API_VERSION_1_3,
    }
}

/// An allocator over `context`'s device told of `features` only: each must
/// be enabled on the device (a feature left out is only left unused).
pub fn allocator_with(
    context: &VulkanContext,
    features: DeviceFeatures,
) -> Allocator<AshMemoryDevice> {
    build_allocator(context, features, Config::default())
}

fn build_allocator(
    context: &VulkanContext,
    features: DeviceFeatures,
    config: Config,
) -> Allocator<AshMemoryDevice> {
    // SAFETY: the harness creates an instance of Vulkan 1.1 or later with
    // VK_EXT_debug_utils and a device from `physical_device` (lavapipe, 1.3)
    // with bufferDeviceAddress when `vulkan_1_2_features_enabled` (and the
    // budget extension when `memory_budget_enabled`, the priority extension
    // and feature when `memory_priority_enabled`), so `features` names
    // nothing the device lacks (`allocator_configured`'s do not, and callers
    // of `allocator_with` pass a subset); the context outlives the allocator
    // (callers declare the allocator after it).
    let device = unsafe {
        AshMemoryDevice::new(
            &context.instance,
            &context.device,
            context.physical_device,
            features,
        )
    };
    Allocator::new(device, config).unwrap()
}

/// A transfer source and destination buffer of `size` bytes.
pub fn buffer_info(size: u64) -> vk::BufferCreateInfo<'static> {
    vk::BufferCreateInfo::default()
        .size(size)
        .usage(vk::BufferUsageFlags::TRANSFER_SRC | vk::BufferUsageFlags::TRANSFER_DST)
}

/// A 2D RGBA8 optimal-tiling image that transfers can clear and copy.
pub fn image_info(width: u32, height: u32) -> vk::ImageCreateInfo<'static> {
    let usage = vk::ImageUsageFlags::TRANSFER_SRC | vk::ImageUsageFlags::TRANSFER_DST;
    rgba8_image_info(width, height, usage)
}

/// Reads the first `len` bytes of a host-visible allocation (after
/// invalidating them) and checks that every byte repeats `expected`.
///
/// `len` is the buffer's size: the allocation can be longer, as drivers round
/// the required size up (NVIDIA to 16 bytes), and those bytes are not the
/// buffer's.
pub fn check_pattern(
    allocator: &Allocator<AshMemoryDevice>,
    allocation: &mut Allocation,
    len: u64,
    expected: &[u8],
    what: &str,
) {
    allocator.invalidate(allocation, 0..len).unwrap();
    let bytes = &allocator.mapped_slice(allocation).unwrap()[..len as usize];
    // `chunks_exact` would leave a partial pattern at the end unchecked.
    assert_eq!(
        len % expected.len() as u64,
        0,
        "{what}: {len} bytes are no whole number of patterns"
    );
    for (i, chunk) in bytes.chunks_exact(expected.len()).enumerate() {
        assert_eq!(
            chunk,
            expected,
            "{what}: byte {} was overwritten",
            i * expected.len()
        );
    }
}

/// No buffer shares a `bufferImageGranularity` page of one memory object
/// with an optimal image. Lavapipe has no real pages and the validation
/// layer does not check this rule, so it is checked here from the offsets.
pub fn assert_no_page_shared<'a>(
    context: &VulkanContext,
    buffers: impl IntoIterator<Item = &'a Allocation>,
    images: impl IntoIterator<Item = &'a Allocation> + Clone,
    what: &str,
) {
    let page = context.properties().limits.buffer_image_granularity.max(1);
    let pages = |a: &Allocation| a.offset() / page..=(a.offset() + a.size() - 1) / page;
    for buffer in buffers {
        for image in images.clone() {
            if buffer.memory() != image.memory() {
                continue;
            }
            let (p, q) = (pages(buffer), pages(image));
            assert!(
                p.end() < q.start() || q.end() < p.start(),
                "{what}: a buffer at {}+{} and an optimal image at {}+{} share a {page}-byte page",
                buffer.offset(),
                buffer.size(),
                image.offset(),
                image.size()
            );
        }
    }
}

/// The colour subresource of a single-level, single-layer image.
pub const COLOR: vk::ImageSubresourceRange = vk::ImageSubresourceRange {
    aspect_mask: vk::ImageAspectFlags::COLOR,
    base_mip_level: 0,
    level_count: 1,
    base_array_layer: 0,
    layer_count: 1,
};

/// Records a global memory barrier between two stages.
///
/// # Safety
/// `command_buffer` is recording on `device`.
pub unsafe fn memory_barrier(
    device: &ash::Device,
    command_buffer: vk::CommandBuffer,
    (src_stage, src_access): (vk::PipelineStageFlags, vk::AccessFlags),
    (dst_stage, dst_access): (vk::PipelineStageFlags, vk::AccessFlags),
) {
    let barrier = [vk::MemoryBarrier::default()
        .src_access_mask(src_access)
        .dst_access_mask(dst_access)];
    // SAFETY: the caller's contract.
    unsafe {
        device.cmd_pipeline_barrier(
            command_buffer,
            src_stage,
            dst_stage,
            vk::DependencyFlags::empty(),
            &barrier,
            &[],
            &[],
        )
    };
}

/// Records a layout transition of a whole colour image.
///
/// # Safety
/// `command_buffer` is recording on `device`; `image` belongs to it.
pub unsafe fn transition(
    device: &ash::Device,
    command_buffer: vk::CommandBuffer,
    image: vk::Image,
    (old, src_access): (vk::ImageLayout, vk::AccessFlags),
    (new, dst_access): (vk::ImageLayout, vk::AccessFlags),
) {
    let barrier = [vk::ImageMemoryBarrier::default()
        .src_access_mask(src_access)
        .dst_access_mask(dst_access)
        .old_layout(old)
        .new_layout(new)
        .src_queue_family_index(vk::QUEUE_FAMILY_IGNORED)
        .dst_queue_family_index(vk::QUEUE_FAMILY_IGNORED)
        .image(image)
        .subresource_range(COLOR)];
    // SAFETY: the caller's contract.
    unsafe {
        device.cmd_pipeline_barrier(
            command_buffer,
            vk::PipelineStageFlags::TRANSFER,
            vk::PipelineStageFlags::TRANSFER,
            vk::DependencyFlags::empty(),
            &[],
            &[],
            &barrier,
        )
    };
}

/// Transfer writes made visible to the host.
pub const TRANSFER_TO_HOST: (
    (vk::PipelineStageFlags, vk::AccessFlags),
    (vk::PipelineStageFlags, vk::AccessFlags),
) = (
    (
        vk::PipelineStageFlags::TRANSFER,
        vk::AccessFlags::TRANSFER_WRITE,
    ),
    (vk::PipelineStageFlags::HOST, vk::AccessFlags::HOST_READ),
);

/// Transfer writes made visible to later transfers.
pub const TRANSFER_TO_TRANSFER: (
    (vk::PipelineStageFlags, vk::AccessFlags),
    (vk::PipelineStageFlags, vk::AccessFlags),
) = (
    (
        vk::PipelineStageFlags::TRANSFER,
        vk::AccessFlags::TRANSFER_WRITE,
    ),
    (
        vk::PipelineStageFlags::TRANSFER,
        vk::AccessFlags::from_raw(
            vk::AccessFlags::TRANSFER_READ.as_raw() | vk::AccessFlags::TRANSFER_WRITE.as_raw(),
        ),
    ),
);

/// Waits for the device to go idle when dropped. Declared after the
/// allocator, it runs before the allocator frees memory, so a test that
/// panics with GPU work in flight fails with its message, not a crash.
pub struct IdleOnDrop<'a>(pub &'a ash::Device);

impl Drop for IdleOnDrop<'_> {
    fn drop(&mut self) {
        // SAFETY: waiting for idle is always valid on a live device.
        let _ = unsafe { self.0.device_wait_idle() };
    }
}
