//! Recording and running a command buffer once, waiting for it to finish:
//! what tests need around `vkCmdFillBuffer`, copies and image clears.

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
        let allocate_info = vk::CommandBufferAllocateInfo::default()
            .command_pool(*pool)
            .level(vk::CommandBufferLevel::PRIMARY)
            .command_buffer_count(1);
        // SAFETY: the pool belongs to this device and is locked.
        let buffers = unsafe { device.allocate_command_buffers(&allocate_info) }
            .unwrap_or_else(|error| panic!("vkAllocateCommandBuffers failed: {error}"));
        let command_buffer = buffers[0];
        let begin_info = vk::CommandBufferBeginInfo::default()
            .flags(vk::CommandBufferUsageFlags::ONE_TIME_SUBMIT);
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
        // SAFETY: an executable command buffer; the queue is guarded by the
        // pool lock held here; the fence is unsignalled.
        unsafe {
            device
                .queue_submit(self.queue, &[submit], fence)
                .unwrap_or_else(|error| panic!("vkQueueSubmit failed: {error}"));
            device
                .wait_for_fences(&[fence], true, u64::MAX)
                .unwrap_or_else(|error| panic!("vkWaitForFences failed: {error}"));
            device.destroy_fence(fence, None);
            device.free_command_buffers(*pool, &buffers);
        }
        result
    }
}
