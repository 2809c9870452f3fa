//! Allocations that share blocks keep their bytes apart on the GPU:
//! hundreds of buffers and images, each filled with its own pattern by the
//! GPU and read back, through frees in random order; and buffers never share
//! a `bufferImageGranularity` page with optimal images, even where images
//! are aligned below the granularity.

use ash::vk;
use vk_suballoc::{Allocation, AllocationDesc, Usage};

use super::super::allocator_setup::{
    allocator_for, assert_no_page_shared, buffer_info, check_pattern, image_info, memory_barrier,
    transition, TRANSFER_TO_HOST, TRANSFER_TO_TRANSFER,
};
use crate::seeded_rng::Rng;
use crate::support::{test_each_fake_profile, test_each_profile, ContextOptions, VulkanContext};

use super::buffer;

/// A buffer the GPU fills with `pattern`, read back by the host directly or
/// through `staging` when it is not host-visible.
struct FilledBuffer {
    handle: vk::Buffer,
    /// The buffer's size (its allocation can be longer).
    size: u64,
    allocation: Allocation,
    pattern: u32,
}

/// An image the GPU clears to `color`, read back through a staging buffer.
struct ClearedImage {
    handle: vk::Image,
    allocation: Allocation,
    extent: (u32, u32),
    color: [u8; 4],
}

test_each_fake_profile!(
    /// Small buffers and small optimal images, interleaved in one memory
    /// type, share blocks but never a page. Real drivers align optimal
    /// images to at least the granularity, which would keep them off shared
    /// pages by itself; here images are aligned to 16 only, and their odd
    /// extents give sizes (lavapipe's are multiples of 512 bytes) that end
    /// inside a page, so only the allocator's padding keeps buffers off
    /// their pages wherever the granularity exceeds 512 (discrete, rebar,
    /// mobile, mali; on the others, whose granularity is 64 or less,
    /// lavapipe's image sizes and alignment share no page even without
    /// it). With square
    /// sides of 16, 32 and 64 texels and an alignment of 256, every image
    /// filled whole 1024-byte pages, and dropping the padding failed only
    /// mobile and mali.
    fn buffers_never_share_a_page_with_optimal_images(profile) {
        let options = ContextOptions::default().image_alignment(16);
        let context = VulkanContext::with_options(profile, options);
        let allocator = allocator_for(&context);
        let desc = AllocationDesc::new(Usage::DEVICE_LOCAL);
        let mut buffers = Vec::new();
        let mut images = Vec::new();
        for i in 0..64u32 {
            let side = 5 + 11 * (i % 5);
            // SAFETY: valid create infos.
            unsafe {
                images.push(allocator.create_image(&image_info(side, side), &desc).unwrap());
                buffers.push(allocator.create_buffer(&buffer_info(256 << (i % 4)), &desc).unwrap());
            }
        }
        assert_no_page_shared(
            &context,
            buffers.iter().map(|(_, a)| a),
            images.iter().map(|(_, a)| a),
            &profile.to_string(),
        );
        let shared = buffers
            .iter()
            .any(|(_, b)| images.iter().any(|(_, i)| i.memory() == b.memory()));
        assert!(shared, "{profile}: no block held both kinds");
        // SAFETY: never used by the GPU.
        unsafe {
            for (handle, allocation) in buffers {
                allocator.destroy_buffer(handle, allocation).unwrap();
            }
            for (handle, allocation) in images {
                allocator.destroy_image(handle, allocation).unwrap();
            }
        }
    }
);

test_each_profile!(
    /// Hundreds of live buffers and images share blocks; the GPU writes a
    /// distinct pattern into each, the host reads every one back and finds
    /// its own pattern (no two allocations alias), then frees in random order
    /// and does it again.
    fn gpu_data_integrity(profile) {
        let context = VulkanContext::new(profile);
        let allocator = allocator_for(&context);
        let mut rng = Rng::from_env(&format!("gpu_data_integrity::{profile}"));
        let mut buffers: Vec<FilledBuffer> = Vec::new();
        let mut images: Vec<ClearedImage> = Vec::new();
        for round in 0..3 {
            while buffers.len() < 300 {
                let usage = if rng.below(3) == 0 { Usage::DEVICE_LOCAL } else { Usage::READBACK };
                let size = 4 * (16 + rng.below(16 << 10));
                let (handle, allocation) = buffer(&allocator, size, AllocationDesc::new(usage));
                buffers.push(FilledBuffer { handle, size, allocation, pattern: rng.next() as u32 });
            }
            while images.len() < 60 {
                let extent = (4 + rng.below(124) as u32, 4 + rng.below(124) as u32);
                let desc = AllocationDesc::new(Usage::DEVICE_LOCAL);
                // SAFETY: a valid image create info.
                let (handle, allocation) =
                    unsafe { allocator.create_image(&image_info(extent.0, extent.1), &desc) }.unwrap();
                let color = (rng.next() as u32).to_le_bytes();
                images.push(ClearedImage { handle, allocation, extent, color });
            }
            assert_no_page_shared(
                &context,
                buffers.iter().map(|b| &b.allocation),
                images.iter().map(|i| &i.allocation),
                &format!("{profile} round {round}"),
            );
            // Staging for what the host cannot read directly.
            let mut staging = Vec::new();
            for b in buffers.iter().filter(|b| b.allocation.mapped_ptr().is_none()) {
                staging.push(buffer(&allocator, b.size, AllocationDesc::new(Usage::READBACK)));
            }
            for image in &images {
                let bytes = u64::from(image.extent.0 * image.extent.1 * 4);
                staging.push(buffer(&allocator, bytes, AllocationDesc::new(Usage::READBACK)));
            }
            context.run_one_time_commands(|device, cmd| {
                // SAFETY: every handle belongs to `device` and is bound; the
                // barriers order fills and clears before the copies and the
                // copies before host reads.
                unsafe {
                    for b in &buffers {
                        device.cmd_fill_buffer(cmd, b.handle, 0, vk::WHOLE_SIZE, b.pattern);
                    }
                    for image in &images {
                        let clear = vk::ClearColorValue {
                            float32: image.color.map(|c| f32::from(c) / 255.0),
                        };
                        transition(device, cmd, image.handle,
                            (vk::ImageLayout::UNDEFINED, vk::AccessFlags::empty()),
                            (vk::ImageLayout::TRANSFER_DST_OPTIMAL, vk::AccessFlags::TRANSFER_WRITE));
                        device.cmd_clear_color_image(cmd, image.handle, vk::ImageLayout::TRANSFER_DST_OPTIMAL,
                            &clear, &[crate::allocator_setup::COLOR]);
                        transition(device, cmd, image.handle,
                            (vk::ImageLayout::TRANSFER_DST_OPTIMAL, vk::AccessFlags::TRANSFER_WRITE),
                            (vk::ImageLayout::TRANSFER_SRC_OPTIMAL, vk::AccessFlags::TRANSFER_READ));
                    }
                    let (src, dst) = TRANSFER_TO_TRANSFER;
                    memory_barrier(device, cmd, src, dst);
                    let mut next = staging.iter();
                    for b in buffers.iter().filter(|b| b.allocation.mapped_ptr().is_none()) {
                        let (target, _) = next.next().unwrap();
                        let region = [vk::BufferCopy { src_offset: 0, dst_offset: 0, size: b.size }];
                        device.cmd_copy_buffer(cmd, b.handle, *target, &region);
                    }
                    for image in &images {
                        let (target, _) = next.next().unwrap();
                        let region = [vk::BufferImageCopy::default()
                            .image_subresource(vk::ImageSubresourceLayers {
                                aspect_mask: vk::ImageAspectFlags::COLOR,
                                mip_level: 0,
                                base_array_layer: 0,
                                layer_count: 1,
                            })
                            .image_extent(vk::Extent3D { width: image.extent.0, height: image.extent.1, depth: 1 })];
                        device.cmd_copy_image_to_buffer(cmd, image.handle, vk::ImageLayout::TRANSFER_SRC_OPTIMAL, *target, &region);
                    }
                    let (src, dst) = TRANSFER_TO_HOST;
                    memory_barrier(device, cmd, src, dst);
                }
            });
            let mut next = staging.iter_mut();
            for (i, b) in buffers.iter_mut().enumerate() {
                let what = format!("{profile} round {round} buffer {i}");
                let readable = match b.allocation.mapped_ptr() {
                    Some(_) => &mut b.allocation,
                    None => &mut next.next().unwrap().1,
                };
                check_pattern(&allocator, readable, b.size, &b.pattern.to_le_bytes(), &what);
            }
            for (i, image) in images.iter().enumerate() {
                let (_, readback) = next.next().unwrap();
                let bytes = u64::from(image.extent.0 * image.extent.1 * 4);
                let what = format!("{profile} round {round} image {i}");
                check_pattern(&allocator, readback, bytes, &image.color, &what);
            }
            // SAFETY: the commands completed (run_one_time_commands waits).
            unsafe {
                for (handle, allocation) in staging {
                    allocator.destroy_buffer(handle, allocation).unwrap();
                }
                for _ in 0..buffers.len() / 2 {
                    let b = buffers.swap_remove(rng.below(buffers.len() as u64) as usize);
                    allocator.destroy_buffer(b.handle, b.allocation).unwrap();
                }
                for _ in 0..images.len() / 2 {
                    let image = images.swap_remove(rng.below(images.len() as u64) as usize);
                    allocator.destroy_image(image.handle, image.allocation).unwrap();
                }
            }
        }
        let stats = allocator.stats();
        assert_eq!(stats.allocations(), (buffers.len() + images.len()) as u64);
        // SAFETY: the GPU is idle.
        unsafe {
            for b in buffers {
                allocator.destroy_buffer(b.handle, b.allocation).unwrap();
            }
            for image in images {
                allocator.destroy_image(image.handle, image.allocation).unwrap();
            }
        }
        let reserved = allocator.stats().reserved_bytes();
        assert_eq!(allocator.trim(), reserved);
        assert_eq!(allocator.stats().memory_objects, 0);
    }
);
