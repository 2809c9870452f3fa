//! Transient colour attachments: images created with
//! `VK_IMAGE_USAGE_TRANSIENT_ATTACHMENT_BIT`, the only resources a lazily
//! allocated memory type may hold, and a render pass that clears one, the
//! use such an image is made for (its contents never leave the render pass).

use ash::vk;

use super::image_info::{rgba8_image_info, IMAGE_FORMAT};
use super::VulkanContext;

/// The format of [`transient_attachment_info`] images.
pub const TRANSIENT_FORMAT: vk::Format = IMAGE_FORMAT;

/// A 2D RGBA8 optimal-tiling colour attachment of `width` × `height` that
/// lives only within render passes (`COLOR_ATTACHMENT | TRANSIENT_ATTACHMENT`).
pub fn transient_attachment_info(width: u32, height: u32) -> vk::ImageCreateInfo<'static> {
    let usage = vk::ImageUsageFlags::COLOR_ATTACHMENT | vk::ImageUsageFlags::TRANSIENT_ATTACHMENT;
    rgba8_image_info(width, height, usage)
}

impl VulkanContext {
    /// Runs a render pass whose one colour attachment is `image` (made from
    /// [`transient_attachment_info`] with this `extent`, bound to memory),
    /// loaded with `CLEAR` and stored with `DONT_CARE`, and waits for it.
    ///
    /// # Panics
    /// When a Vulkan call fails.
    pub fn clear_transient_attachment(&self, image: vk::Image, (width, height): (u32, u32)) {
        let device = &self.device;
        let attachments = [vk::AttachmentDescription::default()
            .format(TRANSIENT_FORMAT)
            .samples(vk::SampleCountFlags::TYPE_1)
            .load_op(vk::AttachmentLoadOp::CLEAR)
            .store_op(vk::AttachmentStoreOp::DONT_CARE)
            .stencil_load_op(vk::AttachmentLoadOp::DONT_CARE)
            .stencil_store_op(vk::AttachmentStoreOp::DONT_CARE)
            .initial_layout(vk::ImageLayout::UNDEFINED)
            .final_layout(vk::ImageLayout::COLOR_ATTACHMENT_OPTIMAL)];
        let color = [vk::AttachmentReference {
            attachment: 0,
            layout: vk::ImageLayout::COLOR_ATTACHMENT_OPTIMAL,
        }];
        let subpasses = [vk::SubpassDescription::default()
            .pipeline_bind_point(vk::PipelineBindPoint::GRAPHICS)
            .color_attachments(&color)];
        let render_pass_info = vk::RenderPassCreateInfo::default()
            .attachments(&attachments)
            .subpasses(&subpasses);
        let view_info = vk::ImageViewCreateInfo::default()
            .image(image)
            .view_type(vk::ImageViewType::TYPE_2D)
            .format(TRANSIENT_FORMAT)
            .subresource_range(vk::ImageSubresourceRange {
                aspect_mask: vk::ImageAspectFlags::COLOR,
                base_mip_level: 0,
                level_count: 1,
                base_array_layer: 0,
                layer_count: 1,
            });
        // SAFETY: valid create infos on a live device; `image` is a bound
        // colour attachment of the view's format (the caller's contract).
        let (render_pass, view) = unsafe {
            (
                device.create_render_pass(&render_pass_info, None).unwrap(),
                device.create_image_view(&view_info, None).unwrap(),
            )
        };
        let views = [view];
        let framebuffer_info = vk::FramebufferCreateInfo::default()
            .render_pass(render_pass)
            .attachments(&views)
            .width(width)
            .height(height)
            .layers(1);
        // SAFETY: the render pass and view were created above, the extent is
        // the image's.
        let framebuffer = unsafe { device.create_framebuffer(&framebuffer_info, None) }.unwrap();
        let clear = [vk::ClearValue {
            color: vk::ClearColorValue {
                float32: [0.25, 0.5, 0.75, 1.0],
            },
        }];
        let begin = vk::RenderPassBeginInfo::default()
            .render_pass(render_pass)
            .framebuffer(framebuffer)
            .render_area(vk::Rect2D {
                offset: vk::Offset2D { x: 0, y: 0 },
                extent: vk::Extent2D { width, height },
            })
            .clear_values(&clear);
        self.run_one_time_commands(|device, commands| {
            // SAFETY: a recording primary command buffer; the render pass
            // and framebuffer are compatible and cover the render area.
            unsafe {
                device.cmd_begin_render_pass(commands, &begin, vk::SubpassContents::INLINE);
                device.cmd_end_render_pass(commands);
            }
        });
        // SAFETY: the commands that used them completed (waited for above).
        unsafe {
            device.destroy_framebuffer(framebuffer, None);
            device.destroy_image_view(view, None);
            device.destroy_render_pass(render_pass, None);
        }
    }
}
