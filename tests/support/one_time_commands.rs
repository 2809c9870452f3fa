//! Recording and running a command buffer once, waiting for it to finish
//! or, as a frame's work, handing back its fence: what tests need around
//! `vkCmdFillBuffer`, copies and image clears.

use std::sync::PoisonError;

use ash::vk;

use super::VulkanContext;

impl VulkanContext {
    /// Allocates a primary command buffer, begins it (one-time submit), lets
    /// `record` record into it, submits it to [`VulkanContext::queue`] and
    /// waits for it to complete; returns what `record` returned.
    ///
    /// Submissions from several threads are serialised (the command pool and
    /// the queue need external synchronisation).
    ///
    /// # Panics
    /// When a Vulkan call fails.
    pub fn run_one_time_commands<R>(
        &self,
        record: impl FnOnce(&ash::Device, vk::CommandBuffer) -> R,
    ) -> R {
        let pool = self
            .command_pool
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let device = &self.device;
        // The pool is locked, and its lock guards the queue.
        let (buffers, fence, result) = record_and_submit(device, self.queue, *pool, record);
        // SAFETY: the fence belongs to this device and its submission was
        // made; the command buffers are the pool's, done once it signals.
        unsafe {
            device
                .wait_for_fences(&[fence], true, u64::MAX)
                .unwrap_or_else(|error| panic!("vkWaitForFences failed: {error}"));
            device.destroy_fence(fence, None);
            device.free_command_buffers(*pool, &buffers);
        }
        result
    }

    /// Makes a command pool and a primary command buffer in it, begins the
    /// buffer (one-time submit), lets `record` record into it, and submits
    /// it to [`VulkanContext::queue`] with a new fence, without waiting: a
    /// frame's work. Returns the pool and the fence, for the caller to
    /// destroy once the fence has signalled.
    ///
    /// # Panics
    /// When a Vulkan call fails.
    pub fn submit_in_a_new_pool(
        &self,
        record: impl FnOnce(&ash::Device, vk::CommandBuffer),
    ) -> (vk::CommandPool, vk::Fence) {
        let device = &self.device;
        let pool_info =
            vk::CommandPoolCreateInfo::default().queue_family_index(self.queue_family_index);
        // SAFETY: a valid create info on a live device.
        let pool = unsafe { device.create_command_pool(&pool_info, None) }
            .unwrap_or_else(|error| panic!("vkCreateCommandPool failed: {error}"));
        // The new pool is this thread's alone; the shared pool's lock guards
        // the queue.
        let _queue = self
            .command_pool
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let (_, fence, ()) = record_and_submit(device, self.queue, pool, record);
        (pool, fence)
    }
}

/// Allocates a primary command buffer from `pool`, begins it (one-time
/// submit), lets `record` record into it, ends it and submits it to `queue`
/// with a new fence. Returns the command buffers, the fence and what
/// `record` returned. The caller guards `pool` and `queue` (both need
/// external synchronisation).
///
/// # Panics
/// When a Vulkan call fails.
fn record_and_submit<R>(
    device: &ash::Device,
    queue: vk::Queue,
    pool: vk::CommandPool,
    record: impl FnOnce(&ash::Device, vk::CommandBuffer) -> R,
) -> (Vec<vk::CommandBuffer>, vk::Fence, R) {
    let allocate_info = vk::CommandBufferAllocateInfo::default()
        .command_pool(pool)
        .level(vk::CommandBufferLevel::PRIMARY)
        .command_buffer_count(1);
    // SAFETY: the pool belongs to this device and the caller guards it.
    let buffers = unsafe { device.allocate_command_buffers(&allocate_info) }
        .unwrap_or_else(|error| panic!("vkAllocateCommandBuffers failed: {error}"));
    let command_buffer = buffers[0];
    let begin_info =
        vk::CommandBufferBeginInfo::default().flags(vk::CommandBufferUsageFlags::ONE_TIME_SUBMIT);
    // SAFETY: a fresh command buffer in the initial state.
    unsafe { device.begin_command_buffer(command_buffer, &begin_info) }
        .unwrap_or_else(|error| panic!("vkBeginCommandBuffer failed: {error}"));
    let result = record(device, command_buffer);
    // SAFETY: the command buffer is recording.
    unsafe { device.end_command_buffer(command_buffer) }
        .unwrap_or_else(|error| panic!("vkEndCommandBuffer failed: {error}"));
    // SAFETY: a valid create info on a live device.
    let fence = unsafe { device.create_fence(&vk::FenceCreateInfo::default(), None) }
        .unwrap_or_else(|error| panic!("vkCreateFence failed: {error}"));
    let submit = vk::SubmitInfo::default().command_buffers(&buffers);
    // SAFETY: an executable command buffer; the caller guards the queue;
    // the fence is unsignalled.
    unsafe { device.queue_submit(queue, &[submit], fence) }
        .unwrap_or_else(|error| panic!("vkQueueSubmit failed: {error}"));
    (buffers, fence, result)
}
