//! One frame of the window example (`Renderer::draw`): the slot's fence
//! waited on and its command pool reset, the finished frames collected, a
//! swapchain image acquired, the picture computed on the host and uploaded
//! through the upload ring, GPU scratch from the GPU-only ring and from a
//! buffer retired with `destroy_buffer_after_frame`, the copy into the
//! swapchain image recorded and submitted, and the image presented.

use ash::vk;
use vk_suballoc::{AllocationDesc, Usage};

use super::{Renderer, FRAMES_IN_FLIGHT};

impl Renderer {
    /// Renders and presents one frame.
    pub(super) fn draw(&mut self) {
        if self.swapchain.extent.width == 0 || self.swapchain.extent.height == 0 {
            // Minimized: nothing to present to.
            return;
        }
        let slot_index = (self.frame % FRAMES_IN_FLIGHT as u64) as usize;
        let slot = &self.slots[slot_index];
        if slot.submitted {
            // SAFETY: the fence was submitted with this slot's last frame;
            // once it has signalled, that frame's command buffer is no
            // longer in use and its pool can be reset.
            unsafe {
                self.device
                    .wait_for_fences(&[slot.fence], true, u64::MAX)
                    .unwrap();
                self.device
                    .reset_command_pool(slot.pool, vk::CommandPoolResetFlags::empty())
                    .unwrap();
            }
        }
        // Release what finished frames freed. The allocator reads the frame
        // fences, so this comes before the fence is reset.
        self.allocator().collect().unwrap();
        // SAFETY: the acquire semaphore of this slot is unsignalled (its last
        // use was waited on by the slot's previous submission).
        let acquired = unsafe {
            self.swapchain_loader.acquire_next_image(
                self.swapchain.handle,
                u64::MAX,
                slot.image_available,
                vk::Fence::null(),
            )
        };
        let image_index = match acquired {
            Ok((index, _)) => index,
            Err(vk::Result::ERROR_OUT_OF_DATE_KHR) => {
                let extent = self.swapchain.extent;
                self.recreate_swapchain(extent.width, extent.height);
                return;
            }
            Err(error) => panic!("vkAcquireNextImageKHR failed: {error}"),
        };
        let slot = &mut self.slots[slot_index];
        // Reset the fence only now that this frame will be submitted: had
        // acquiring failed, the next attempt waits on it again.
        if slot.submitted {
            // SAFETY: signalled (waited above) and collected.
            unsafe { self.device.reset_fences(&[slot.fence]) }.unwrap();
        }

        // This frame's picture, uploaded through the ring.
        let vk::Extent2D { width, height } = self.swapchain.extent;
        let bytes = u64::from(width) * u64::from(height) * 4;
        self.pixels.resize(bytes as usize, 0);
        let t = self.frame as u32;
        for (i, pixel) in self.pixels.chunks_exact_mut(4).enumerate() {
            let (x, y) = (i as u32 % width, i as u32 / width);
            pixel.copy_from_slice(&[(x + t) as u8, (y + 2 * t) as u8, (x ^ y) as u8, 255]);
        }
        let allocator = self.allocator.as_ref().expect("allocator lives until drop");
        let upload = allocator.ring_allocate(self.ring, bytes, 16).unwrap();
        allocator.ring_write(&upload, 0, &self.pixels).unwrap();
        // GPU scratch from the GPU-only ring: its space comes back once
        // this frame's fence signals.
        let ring_scratch = allocator
            .ring_allocate(self.scratch_ring, 64 << 10, 256)
            .unwrap();
        // A per-frame scratch buffer, retired after the frame.
        let scratch_info = vk::BufferCreateInfo::default()
            .size(64 << 10)
            .usage(vk::BufferUsageFlags::TRANSFER_DST);
        // SAFETY: a valid create info.
        let (scratch, scratch_memory) = unsafe {
            allocator.create_buffer(&scratch_info, &AllocationDesc::new(Usage::DEVICE_LOCAL))
        }
        .unwrap();

        let image = self.swapchain.images[image_index as usize];
        let range = vk::ImageSubresourceRange {
            aspect_mask: vk::ImageAspectFlags::COLOR,
            base_mip_level: 0,
            level_count: 1,
            base_array_layer: 0,
            layer_count: 1,
        };
        let barrier = |old, new, src, dst| {
            vk::ImageMemoryBarrier::default()
                .old_layout(old)
                .new_layout(new)
                .src_access_mask(src)
                .dst_access_mask(dst)
                .src_queue_family_index(vk::QUEUE_FAMILY_IGNORED)
                .dst_queue_family_index(vk::QUEUE_FAMILY_IGNORED)
                .image(image)
                .subresource_range(range)
        };
        let to_transfer = [barrier(
            vk::ImageLayout::UNDEFINED,
            vk::ImageLayout::TRANSFER_DST_OPTIMAL,
            vk::AccessFlags::empty(),
            vk::AccessFlags::TRANSFER_WRITE,
        )];
        let to_present = [barrier(
            vk::ImageLayout::TRANSFER_DST_OPTIMAL,
            vk::ImageLayout::PRESENT_SRC_KHR,
            vk::AccessFlags::TRANSFER_WRITE,
            vk::AccessFlags::empty(),
        )];
        let region = [vk::BufferImageCopy::default()
            .buffer_offset(upload.buffer_offset())
            .image_subresource(vk::ImageSubresourceLayers {
                aspect_mask: vk::ImageAspectFlags::COLOR,
                mip_level: 0,
                base_array_layer: 0,
                layer_count: 1,
            })
            .image_extent(vk::Extent3D {
                width,
                height,
                depth: 1,
            })];
        let cmd = slot.command_buffer;
        // SAFETY: the slot's command buffer is idle (its fence was waited
        // for); every handle belongs to this device.
        unsafe {
            self.device
                .begin_command_buffer(
                    cmd,
                    &vk::CommandBufferBeginInfo::default()
                        .flags(vk::CommandBufferUsageFlags::ONE_TIME_SUBMIT),
                )
                .unwrap();
            self.device.cmd_pipeline_barrier(
                cmd,
                vk::PipelineStageFlags::TRANSFER,
                vk::PipelineStageFlags::TRANSFER,
                vk::DependencyFlags::empty(),
                &[],
                &[],
                &to_transfer,
            );
            self.device.cmd_copy_buffer_to_image(
                cmd,
                upload.buffer(),
                image,
                vk::ImageLayout::TRANSFER_DST_OPTIMAL,
                &region,
            );
            self.device
                .cmd_fill_buffer(cmd, scratch, 0, vk::WHOLE_SIZE, t);
            self.device.cmd_fill_buffer(
                cmd,
                ring_scratch.buffer(),
                ring_scratch.buffer_offset(),
                ring_scratch.size(),
                t,
            );
            self.device.cmd_pipeline_barrier(
                cmd,
                vk::PipelineStageFlags::TRANSFER,
                vk::PipelineStageFlags::BOTTOM_OF_PIPE,
                vk::DependencyFlags::empty(),
                &[],
                &[],
                &to_present,
            );
            self.device.end_command_buffer(cmd).unwrap();
        }
        // SAFETY: `scratch` was created by this device, and only the
        // allocator destroys it.
        unsafe { allocator.destroy_buffer_after_frame(scratch, scratch_memory) }.unwrap();

        let wait = [slot.image_available];
        let stages = [vk::PipelineStageFlags::TRANSFER];
        let signal = [self.swapchain.render_finished[image_index as usize]];
        let cmds = [cmd];
        let submit = [vk::SubmitInfo::default()
            .wait_semaphores(&wait)
            .wait_dst_stage_mask(&stages)
            .command_buffers(&cmds)
            .signal_semaphores(&signal)];
        // SAFETY: recorded command buffer; the fence is unsignalled.
        unsafe { self.device.queue_submit(self.queue, &submit, slot.fence) }.unwrap();
        slot.submitted = true;
        // SAFETY: the fence is signalled by this frame's only submission.
        unsafe { allocator.end_frame(slot.fence) }.unwrap();
        let swapchains = [self.swapchain.handle];
        let indices = [image_index];
        let present = vk::PresentInfoKHR::default()
            .wait_semaphores(&signal)
            .swapchains(&swapchains)
            .image_indices(&indices);
        // SAFETY: the image was acquired and is transitioned for presenting.
        match unsafe { self.swapchain_loader.queue_present(self.queue, &present) } {
            Ok(false) => {}
            Ok(true) | Err(vk::Result::ERROR_OUT_OF_DATE_KHR) => {
                let extent = self.swapchain.extent;
                self.recreate_swapchain(extent.width, extent.height);
            }
            Err(error) => panic!("vkQueuePresentKHR failed: {error}"),
        }
        self.frame += 1;
    }
}
