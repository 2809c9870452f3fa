//! Defragmentation on a real driver, under the validation layer, once per
//! memory architecture: an engine's whole pass. Buffers and an optimal
//! image spread over several blocks are filled on the GPU; frees leave the
//! image's block holding the image and a few small buffers, and holes in
//! every other block;
//! `plan_defragmentation` moves the survivors of the emptiest blocks into
//! the holes. The test carries the plan out as an engine would: new
//! resources bound to the destinations, `vkCmdCopyBuffer` and
//! `vkCmdCopyImage` in one submission, the old resources retired through
//! the frame queue with that submission's fence. Then every byte is read
//! back, the emptied blocks are gone (released as they emptied), and the
//! validation layer has said nothing.
//!
//! The tests sit in the files below, one pass each: the pass that empties
//! blocks (`emptying_pass.rs`) and the compaction pass that moves each
//! allocation lower in its own block (`compaction_pass.rs`). This file holds
//! what both share: the filled buffers and image, the holes punched among
//! them, the engine's carrying out of a plan (`carry_out`) and the checks
//! of every byte after it.

use std::collections::HashSet;

use ash::vk;
use vk_suballoc::device::AshMemoryDevice;
use vk_suballoc::{
    Allocation, AllocationDesc, Allocator, Collected, Config, DefragmentationPlan, Movable,
    ResourceKind, Usage,
};

use super::allocator_setup::{
    buffer_info, check_pattern, image_info, memory_barrier, transition, COLOR, TRANSFER_TO_HOST,
    TRANSFER_TO_TRANSFER,
};
use crate::support::{Profile, VulkanContext};

#[path = "defragment_suite/compaction_pass.rs"]
mod compaction_pass;
#[path = "defragment_suite/emptying_pass.rs"]
mod emptying_pass;

const MIB: u64 = 1 << 20;
/// Large buffers made, of [`MIB`] bytes each.
const BUFFERS: u32 = 24;
/// Small buffers made, of [`SMALL_SIZE`] bytes each: slots of a run
/// (`Config::small_buffer_limit`), which move as slots of a run in
/// another block.
const SMALL_BUFFERS: u32 = 8;
/// The size of a small buffer.
const SMALL_SIZE: u64 = 4096;
/// The image's width and height: 256 KiB of RGBA8.
const IMAGE_EXTENT: u32 = 256;
/// The colour the image is cleared to.
const IMAGE_COLOR: [u8; 4] = [0x12, 0x34, 0x56, 0x78];
/// The image's only subresource, as copies name it.
const IMAGE_LAYERS: vk::ImageSubresourceLayers = vk::ImageSubresourceLayers {
    aspect_mask: vk::ImageAspectFlags::COLOR,
    mip_level: 0,
    base_array_layer: 0,
    layer_count: 1,
};
/// The image's extent, as copies name it.
const IMAGE_EXTENT_3D: vk::Extent3D = vk::Extent3D {
    width: IMAGE_EXTENT,
    height: IMAGE_EXTENT,
    depth: 1,
};
/// An image's layout and access before its first use (contents undefined).
const FRESH: (vk::ImageLayout, vk::AccessFlags) =
    (vk::ImageLayout::UNDEFINED, vk::AccessFlags::empty());
/// An image being written by transfers.
const WRITABLE: (vk::ImageLayout, vk::AccessFlags) = (
    vk::ImageLayout::TRANSFER_DST_OPTIMAL,
    vk::AccessFlags::TRANSFER_WRITE,
);
/// An image read by transfers: the layout between submissions.
const READABLE: (vk::ImageLayout, vk::AccessFlags) = (
    vk::ImageLayout::TRANSFER_SRC_OPTIMAL,
    vk::AccessFlags::TRANSFER_READ,
);
/// How long the test waits for its copies: a hang fails, it does not stall.
const TIMEOUT_NS: u64 = 10_000_000_000;

/// A preferred block size of 16 MiB on every heap (`small_heap_limit: 0`
/// makes every heap "large"). The first blocks of a memory type are
/// smaller (2, 4, then 8 MiB; see `memory/block_size.rs`), so the image and
/// [`BUFFERS`] large buffers span four blocks on every profile while the test
/// fills and copies only a few MiB.
fn config() -> Config {
    Config {
        large_heap_block_size: 16 * MIB,
        small_heap_limit: 0,
        ..Config::default()
    }
}

/// A buffer and the pattern the GPU filled it with.
struct Filled {
    handle: vk::Buffer,
    allocation: Allocation,
    /// The buffer's size (its allocation can be longer).
    size: u64,
    pattern: u32,
}

/// The image, cleared to [`IMAGE_COLOR`]; between submissions it is in
/// `TRANSFER_SRC_OPTIMAL` layout.
struct Cleared {
    handle: vk::Image,
    allocation: Allocation,
}

/// Memory requirements as a comparable tuple: (size, alignment, type bits).
fn figures(requirements: vk::MemoryRequirements) -> (u64, u64, u32) {
    (
        requirements.size,
        requirements.alignment,
        requirements.memory_type_bits,
    )
}

/// Block figures summed over memory types: (blocks, bytes, empty blocks).
fn block_totals(allocator: &Allocator<AshMemoryDevice>) -> (u64, u64, u64) {
    let stats = allocator.stats();
    stats.memory_types.iter().fold((0, 0, 0), |sum, t| {
        (
            sum.0 + t.blocks,
            sum.1 + t.block_bytes,
            sum.2 + t.empty_blocks,
        )
    })
}

/// The memory objects of the allocator's blocks, all types.
fn block_memories(allocator: &Allocator<AshMemoryDevice>) -> HashSet<vk::DeviceMemory> {
    allocator
        .memory_map()
        .memory_types
        .iter()
        .flat_map(|t| t.blocks.iter().map(|block| block.memory))
        .collect()
}

/// Creates the image first (it opens the first block), then the buffers,
/// and fills them all on the GPU.
fn create_filled(
    context: &VulkanContext,
    allocator: &Allocator<AshMemoryDevice>,
) -> (Cleared, Vec<Filled>) {
    let desc = AllocationDesc::new(Usage::DEVICE_LOCAL);
    // SAFETY: a valid create info (2D RGBA8, transfer usage).
    let (handle, allocation) =
        unsafe { allocator.create_image(&image_info(IMAGE_EXTENT, IMAGE_EXTENT), &desc) }.unwrap();
    let image = Cleared { handle, allocation };
    let sizes = (0..SMALL_BUFFERS).map(|_| SMALL_SIZE);
    let buffers: Vec<Filled> = (0..)
        .zip(sizes.chain((0..BUFFERS).map(|_| MIB)))
        .map(|(i, size)| {
            // SAFETY: a valid create info (non-zero size, transfer usage).
            let (handle, allocation) =
                unsafe { allocator.create_buffer(&buffer_info(size), &desc) }.unwrap();
            Filled {
                handle,
                allocation,
                size,
                pattern: 0xD0F0_0000 | i,
            }
        })
        .collect();
    context.run_one_time_commands(|device, cmd| {
        // SAFETY: every handle belongs to `device` and is bound; the last
        // barrier orders the writes before later submissions' transfers.
        unsafe {
            for b in &buffers {
                device.cmd_fill_buffer(cmd, b.handle, 0, vk::WHOLE_SIZE, b.pattern);
            }
            transition(device, cmd, image.handle, FRESH, WRITABLE);
            let clear = vk::ClearColorValue {
                float32: IMAGE_COLOR.map(|c| f32::from(c) / 255.0),
            };
            device.cmd_clear_color_image(
                cmd,
                image.handle,
                vk::ImageLayout::TRANSFER_DST_OPTIMAL,
                &clear,
                &[COLOR],
            );
            transition(device, cmd, image.handle, WRITABLE, READABLE);
            let (src, dst) = TRANSFER_TO_TRANSFER;
            memory_barrier(device, cmd, src, dst);
        }
    });
    (image, buffers)
}

/// Frees every large buffer in the image's block, which then holds the
/// image and the small buffers' run (some 320 KiB: the least used block),
/// and every other large buffer of each other block, its first kept (so
/// none empties): 1 MiB holes. Returns the survivors.
fn punch_holes(
    allocator: &Allocator<AshMemoryDevice>,
    image: &Cleared,
    buffers: Vec<Filled>,
) -> Vec<Filled> {
    let image_block = image.allocation.memory();
    // Each block's large buffers so far.
    let mut seen_in_block: Vec<(vk::DeviceMemory, usize)> = Vec::new();
    let mut holes = 0;
    let mut survivors = Vec::new();
    for b in buffers {
        let memory = b.allocation.memory();
        // Small buffers all stay: on these profiles their run follows the
        // image (a granularity above `max_padded_granularity` would keep
        // them apart, and the image would not move).
        if b.size == SMALL_SIZE {
            survivors.push(b);
            continue;
        }
        let position = match seen_in_block.iter_mut().find(|(m, _)| *m == memory) {
            Some((_, count)) => {
                *count += 1;
                *count
            }
            None => {
                seen_in_block.push((memory, 0));
                0
            }
        };
        if memory == image_block || position % 2 == 1 {
            holes += usize::from(memory != image_block);
            // SAFETY: the fills completed (run_one_time_commands waits).
            unsafe { allocator.destroy_buffer(b.handle, b.allocation) }.unwrap();
        } else {
            survivors.push(b);
        }
    }
    assert!(
        seen_in_block.len() >= 2 && holes > 0,
        "the large buffers span {} block(s) with {holes} hole(s); the test \
         needs holes in a block besides the image's",
        seen_in_block.len()
    );
    survivors
}

/// Carries `plan` out as an engine does in one frame: creates each moved
/// resource again, binds it to its destination, copies the old contents
/// into it in one submission, and retires the old resources and
/// allocations through the frame queue with that submission's fence.
/// Returns the moved allocations' memory objects.
fn carry_out(
    context: &VulkanContext,
    allocator: &Allocator<AshMemoryDevice>,
    plan: DefragmentationPlan,
    buffers: &mut [Filled],
    image: &mut Cleared,
) -> HashSet<vk::DeviceMemory> {
    let device = &context.device;
    let mut sources = HashSet::new();
    // (old, new, size, old allocation)
    let mut buffer_copies: Vec<(vk::Buffer, vk::Buffer, u64, Allocation)> = Vec::new();
    let mut image_copy: Option<(vk::Image, vk::Image, Allocation)> = None;
    for planned in plan.moves {
        let destination = planned.destination;
        if let Some(b) = buffers.get_mut(planned.movable) {
            // SAFETY: the same valid create info as the old buffer's; the
            // destination is a live allocation of the memory type and size
            // the old buffer's requirements asked for, aligned to them
            // (VUID-vkBindBufferMemory-memoryOffset-01036, -size-01037).
            let new = unsafe {
                let new = device.create_buffer(&buffer_info(b.size), None).unwrap();
                assert_eq!(
                    figures(device.get_buffer_memory_requirements(new)),
                    figures(device.get_buffer_memory_requirements(b.handle)),
                    "a buffer made again has the same requirements"
                );
                device
                    .bind_buffer_memory(new, destination.memory(), destination.offset())
                    .unwrap();
                new
            };
            let old = std::mem::replace(&mut b.handle, new);
            let old_allocation = std::mem::replace(&mut b.allocation, destination);
            sources.insert(old_allocation.memory());
            buffer_copies.push((old, new, b.size, old_allocation));
        } else {
            assert_eq!(planned.movable, buffers.len(), "the image's index");
            // SAFETY: as for buffers (VUID-vkBindImageMemory-memoryOffset-01048,
            // -size-01049); the plan kept the granularity rule, checked by
            // `assert_no_page_shared` after the moves.
            let new = unsafe {
                let new = device
                    .create_image(&image_info(IMAGE_EXTENT, IMAGE_EXTENT), None)
                    .unwrap();
                assert_eq!(
                    figures(device.get_image_memory_requirements(new)),
                    figures(device.get_image_memory_requirements(image.handle)),
                    "an image made again has the same requirements"
                );
                device
                    .bind_image_memory(new, destination.memory(), destination.offset())
                    .unwrap();
                new
            };
            let old = std::mem::replace(&mut image.handle, new);
            let old_allocation = std::mem::replace(&mut image.allocation, destination);
            sources.insert(old_allocation.memory());
            image_copy = Some((old, new, old_allocation));
        }
    }

    let (pool, fence) = context.submit_in_a_new_pool(|device, cmd| {
        // SAFETY: a recording command buffer; every handle belongs to
        // `device` and is bound; the old image is in TRANSFER_SRC_OPTIMAL
        // since its clear, the new one moves from UNDEFINED to
        // TRANSFER_DST_OPTIMAL for the copy and then to
        // TRANSFER_SRC_OPTIMAL; the final barriers order the copies before
        // later transfers and host reads.
        unsafe {
            for &(old, new, size, _) in &buffer_copies {
                let region = [vk::BufferCopy {
                    src_offset: 0,
                    dst_offset: 0,
                    size,
                }];
                device.cmd_copy_buffer(cmd, old, new, &region);
            }
            if let Some((old, new, _)) = &image_copy {
                transition(device, cmd, *new, FRESH, WRITABLE);
                let region = [vk::ImageCopy::default()
                    .src_subresource(IMAGE_LAYERS)
                    .dst_subresource(IMAGE_LAYERS)
                    .extent(IMAGE_EXTENT_3D)];
                device.cmd_copy_image(
                    cmd,
                    *old,
                    vk::ImageLayout::TRANSFER_SRC_OPTIMAL,
                    *new,
                    vk::ImageLayout::TRANSFER_DST_OPTIMAL,
                    &region,
                );
                transition(device, cmd, *new, WRITABLE, READABLE);
            }
            let (src, dst) = TRANSFER_TO_TRANSFER;
            memory_barrier(device, cmd, src, dst);
            let (src, dst) = TRANSFER_TO_HOST;
            memory_barrier(device, cmd, src, dst);
        }
    });

    // The copies may still run: the old resources are retired, not
    // destroyed, and stay allocated until the frame's fence signals.
    let moves = buffer_copies.len() + usize::from(image_copy.is_some());
    let live = allocator.stats().allocations();
    // SAFETY: the old resources were made on this allocator's device and
    // nothing else destroys them; `collect` does once the fence signals.
    unsafe {
        for (old, _, _, old_allocation) in buffer_copies {
            allocator
                .destroy_buffer_after_frame(old, old_allocation)
                .unwrap();
        }
        if let Some((old, _, old_allocation)) = image_copy {
            allocator
                .destroy_image_after_frame(old, old_allocation)
                .unwrap();
        }
    }
    assert_eq!(
        allocator.collect(),
        Ok(Collected {
            frames: 0,
            frees: 0
        }),
        "nothing is released before its frame is sealed"
    );
    assert_eq!(allocator.stats().allocations(), live);
    // SAFETY: `fence` belongs to the device, is signalled by the frame's
    // only submission (the copies), and is destroyed only after
    // `wait_and_collect` collected the frame.
    assert_eq!(unsafe { allocator.end_frame(fence) }, Ok(0));
    assert_eq!(
        allocator.wait_and_collect(TIMEOUT_NS),
        Ok(Collected {
            frames: 1,
            frees: moves
        })
    );
    // SAFETY: the submission completed (its fence signalled); both objects
    // were made here.
    unsafe {
        device.destroy_fence(fence, None);
        device.destroy_command_pool(pool, None);
    }
    sources
}

/// Reads every buffer and the image back (host-visible buffers directly,
/// the rest through readback buffers) and checks their contents.
fn check_contents(
    context: &VulkanContext,
    allocator: &Allocator<AshMemoryDevice>,
    buffers: &mut [Filled],
    image: &Cleared,
    profile: Profile,
) {
    let readback = |size: u64| {
        // SAFETY: a valid create info (non-zero size, transfer usage).
        unsafe {
            allocator.create_buffer(&buffer_info(size), &AllocationDesc::new(Usage::READBACK))
        }
        .unwrap()
    };
    let image_bytes = u64::from(IMAGE_EXTENT * IMAGE_EXTENT * 4);
    let (image_staging, mut image_staging_memory) = readback(image_bytes);
    let mut staging: Vec<Option<(vk::Buffer, Allocation)>> = buffers
        .iter()
        .map(|b| {
            b.allocation
                .mapped_ptr()
                .is_none()
                .then(|| readback(b.size))
        })
        .collect();
    context.run_one_time_commands(|device, cmd| {
        // SAFETY: every handle belongs to `device` and is bound; the image
        // is in TRANSFER_SRC_OPTIMAL; the barrier orders the copies before
        // host reads.
        unsafe {
            for (b, target) in buffers.iter().zip(&staging) {
                if let Some((target, _)) = target {
                    let region = [vk::BufferCopy {
                        src_offset: 0,
                        dst_offset: 0,
                        size: b.size,
                    }];
                    device.cmd_copy_buffer(cmd, b.handle, *target, &region);
                }
            }
            let region = [vk::BufferImageCopy::default()
                .image_subresource(IMAGE_LAYERS)
                .image_extent(IMAGE_EXTENT_3D)];
            device.cmd_copy_image_to_buffer(
                cmd,
                image.handle,
                vk::ImageLayout::TRANSFER_SRC_OPTIMAL,
                image_staging,
                &region,
            );
            let (src, dst) = TRANSFER_TO_HOST;
            memory_barrier(device, cmd, src, dst);
        }
    });
    for (i, (b, target)) in buffers.iter_mut().zip(&mut staging).enumerate() {
        let readable = match target {
            Some((_, allocation)) => allocation,
            None => &mut b.allocation,
        };
        let what = format!("{profile} buffer {i}");
        check_pattern(allocator, readable, b.size, &b.pattern.to_le_bytes(), &what);
    }
    let what = format!("{profile} image");
    check_pattern(
        allocator,
        &mut image_staging_memory,
        image_bytes,
        &IMAGE_COLOR,
        &what,
    );
    // SAFETY: the copies completed (run_one_time_commands waits).
    unsafe {
        for (handle, allocation) in staging.into_iter().flatten() {
            allocator.destroy_buffer(handle, allocation).unwrap();
        }
        allocator
            .destroy_buffer(image_staging, image_staging_memory)
            .unwrap();
    }
}

/// Every buffer as a movable, with its requirements, then `image`.
fn movables_of<'a>(
    device: &ash::Device,
    buffers: &'a [Filled],
    image: Option<&'a Cleared>,
) -> Vec<Movable<'a>> {
    let mut movables: Vec<Movable<'a>> = buffers
        .iter()
        .map(|b| {
            // SAFETY: a live buffer of `device`.
            let requirements = unsafe { device.get_buffer_memory_requirements(b.handle) };
            Movable::new(&b.allocation, requirements, ResourceKind::Buffer)
        })
        .collect();
    if let Some(image) = image {
        // SAFETY: a live image of `device`.
        let requirements = unsafe { device.get_image_memory_requirements(image.handle) };
        let kind = ResourceKind::OptimalImage;
        movables.push(Movable::new(&image.allocation, requirements, kind));
    }
    movables
}

/// The end of a pass: reads every byte back ([`check_contents`]), destroys
/// every buffer and the image, all idle, and releases every block (nothing
/// is left live), under a validation layer that said nothing.
fn check_and_destroy_all(
    context: &VulkanContext,
    allocator: &Allocator<AshMemoryDevice>,
    mut buffers: Vec<Filled>,
    image: Cleared,
    profile: Profile,
) {
    check_contents(context, allocator, &mut buffers, &image, profile);
    // SAFETY: the GPU is idle (every submission was waited for).
    unsafe {
        for b in buffers {
            allocator.destroy_buffer(b.handle, b.allocation).unwrap();
        }
        allocator
            .destroy_image(image.handle, image.allocation)
            .unwrap();
    }
    let stats = allocator.stats();
    assert_eq!(stats.allocations(), 0, "{stats}");
    assert_eq!(allocator.trim(), stats.reserved_bytes());
    assert_eq!(allocator.stats().memory_objects, 0);
    context.assert_no_validation_messages();
}
