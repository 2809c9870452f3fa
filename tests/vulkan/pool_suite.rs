//! Custom pools on a real driver, under the validation layer, once per
//! memory architecture: buffers and an optimal image made in a pool through
//! `create_buffer` / `create_image` live in the pool's blocks, never in the
//! default pool's, hold what the GPU wrote into them, and count in
//! `pool_stats` and `stats`; a full pool refuses with `PoolFull` (and the
//! helpers destroy the resource they made); frees through the frame queue
//! keep the pool from being destroyed until their frame is collected, after
//! which its handle is stale. Any validation message fails a test, a leaked
//! buffer or image included (the layer reports it when the device is
//! destroyed). Pools of host-visible, dedicated and lazily allocated
//! memory, and pools the driver cannot serve: `pool_memory_suite.rs`.

use ash::vk;
use vk_suballoc::device::AshMemoryDevice;
use vk_suballoc::report::TypeStats;
use vk_suballoc::{Allocation, AllocationDesc, Allocator, Collected, Error, Pool, PoolDesc, Usage};

use super::allocator_setup::{
    allocator_for, assert_no_page_shared, buffer_info, check_pattern, image_info, memory_barrier,
    transition, IdleOnDrop, COLOR, TRANSFER_TO_HOST, TRANSFER_TO_TRANSFER,
};
use crate::support::{on_custom_device, test_each_profile, Advice, Profile, VulkanContext};

const MIB: u64 = 1 << 20;
/// The fixed block size of the device-local pools.
const BLOCK: u64 = 4 * MIB;
/// How long a test waits for its frame: a hang fails, it does not stall.
const TIMEOUT_NS: u64 = 10_000_000_000;
/// An image's layout and access before its first use (contents undefined).
const FRESH: (vk::ImageLayout, vk::AccessFlags) =
    (vk::ImageLayout::UNDEFINED, vk::AccessFlags::empty());
/// An image being written by transfers.
const WRITABLE: (vk::ImageLayout, vk::AccessFlags) = (
    vk::ImageLayout::TRANSFER_DST_OPTIMAL,
    vk::AccessFlags::TRANSFER_WRITE,
);
/// An image read by transfers: the layout after its clear.
const READABLE: (vk::ImageLayout, vk::AccessFlags) = (
    vk::ImageLayout::TRANSFER_SRC_OPTIMAL,
    vk::AccessFlags::TRANSFER_READ,
);

/// A buffer and the pattern the GPU fills it with.
struct Filled {
    handle: vk::Buffer,
    allocation: Allocation,
    /// The buffer's size (its allocation can be longer).
    size: u64,
    pattern: u32,
}

/// An optimal image and the colour the GPU clears it to.
struct Cleared {
    handle: vk::Image,
    allocation: Allocation,
    extent: u32,
    color: [u8; 4],
}

impl Cleared {
    /// Its bytes in a tightly packed copy.
    fn bytes(&self) -> u64 {
        u64::from(self.extent * self.extent * 4)
    }
}

/// The device-local pool of the tests: 4 MiB blocks, one made at once, two
/// at most.
fn device_local_pool(context: &VulkanContext, allocator: &Allocator<AshMemoryDevice>) -> Pool {
    let profile = context.profile;
    let memory_type = allocator.memory_type_for(!0, Usage::DEVICE_LOCAL).unwrap();
    let flags = context.memory_properties().memory_types[memory_type as usize].property_flags;
    assert!(
        flags.contains(vk::MemoryPropertyFlags::DEVICE_LOCAL),
        "{profile}: type {memory_type} is {flags:?}"
    );
    // Every profile's first type is its plain device-local one.
    if !on_custom_device() {
        assert_eq!(memory_type, 0, "{profile}");
    }
    let desc = PoolDesc::new(memory_type)
        .block_size(BLOCK)
        .min_blocks(1)
        .max_blocks(2)
        .name("pool suite");
    let pool = allocator.create_pool(&desc).unwrap();
    assert_eq!(pool.memory_type(), memory_type);
    pool
}

/// Creates a buffer with the helper; panics on error.
fn buffer(
    allocator: &Allocator<AshMemoryDevice>,
    size: u64,
    desc: AllocationDesc<'_>,
) -> (vk::Buffer, Allocation) {
    // SAFETY: a valid create info (non-zero size, transfer usage).
    unsafe { allocator.create_buffer(&buffer_info(size), &desc) }.unwrap()
}

/// A buffer of `size` bytes in `desc`'s memory, to fill with `pattern`.
fn filled(
    allocator: &Allocator<AshMemoryDevice>,
    size: u64,
    desc: AllocationDesc<'_>,
    pattern: u32,
) -> Filled {
    let (handle, allocation) = buffer(allocator, size, desc);
    Filled {
        handle,
        allocation,
        size,
        pattern,
    }
}

/// Fills every buffer and clears every image on the GPU, copies each into a
/// readback buffer of the default pools, and checks that each holds its own
/// pattern: no two of them alias. The images stay in
/// `TRANSFER_SRC_OPTIMAL`.
fn fill_and_check(
    context: &VulkanContext,
    allocator: &Allocator<AshMemoryDevice>,
    buffers: &[Filled],
    images: &[Cleared],
) {
    let profile = context.profile;
    let readback = AllocationDesc::new(Usage::READBACK).name("readback");
    let sizes = buffers.iter().map(|b| b.size);
    let mut staging: Vec<(vk::Buffer, Allocation)> = sizes
        .chain(images.iter().map(Cleared::bytes))
        .map(|size| buffer(allocator, size, readback))
        .collect();
    context.run_one_time_commands(|device, cmd| {
        // SAFETY: every handle belongs to `device` and is bound; the
        // barriers order the fills and clears before the copies, and the
        // copies before host reads.
        unsafe {
            for b in buffers {
                device.cmd_fill_buffer(cmd, b.handle, 0, vk::WHOLE_SIZE, b.pattern);
            }
            for image in images {
                transition(device, cmd, image.handle, FRESH, WRITABLE);
                let clear = vk::ClearColorValue {
                    float32: image.color.map(|c| f32::from(c) / 255.0),
                };
                let layout = vk::ImageLayout::TRANSFER_DST_OPTIMAL;
                device.cmd_clear_color_image(cmd, image.handle, layout, &clear, &[COLOR]);
                transition(device, cmd, image.handle, WRITABLE, READABLE);
            }
            let (src, dst) = TRANSFER_TO_TRANSFER;
            memory_barrier(device, cmd, src, dst);
            let mut targets = staging.iter().map(|(target, _)| *target);
            for b in buffers {
                let region = [vk::BufferCopy {
                    src_offset: 0,
                    dst_offset: 0,
                    size: b.size,
                }];
                let target = targets.next().unwrap();
                device.cmd_copy_buffer(cmd, b.handle, target, &region);
            }
            for image in images {
                let region = [vk::BufferImageCopy::default()
                    .image_subresource(vk::ImageSubresourceLayers {
                        aspect_mask: vk::ImageAspectFlags::COLOR,
                        mip_level: 0,
                        base_array_layer: 0,
                        layer_count: 1,
                    })
                    .image_extent(vk::Extent3D {
                        width: image.extent,
                        height: image.extent,
                        depth: 1,
                    })];
                let layout = vk::ImageLayout::TRANSFER_SRC_OPTIMAL;
                let target = targets.next().unwrap();
                device.cmd_copy_image_to_buffer(cmd, image.handle, layout, target, &region);
            }
            let (src, dst) = TRANSFER_TO_HOST;
            memory_barrier(device, cmd, src, dst);
        }
    });
    let mut readable = staging.iter_mut().map(|(_, allocation)| allocation);
    for (i, b) in buffers.iter().enumerate() {
        let what = format!("{profile} buffer {i}");
        let pattern = b.pattern.to_le_bytes();
        check_pattern(allocator, readable.next().unwrap(), b.size, &pattern, &what);
    }
    for (i, image) in images.iter().enumerate() {
        let what = format!("{profile} image {i}");
        let target = readable.next().unwrap();
        check_pattern(allocator, target, image.bytes(), &image.color, &what);
    }
    // SAFETY: the copies completed (run_one_time_commands waits).
    unsafe {
        for (handle, allocation) in staging {
            allocator.destroy_buffer(handle, allocation).unwrap();
        }
    }
}

/// Block figures to compare: (blocks, block bytes, empty blocks,
/// allocations in blocks, their bytes, dedicated allocations).
fn figures(stats: &TypeStats) -> [u64; 6] {
    [
        stats.blocks,
        stats.block_bytes,
        stats.empty_blocks,
        stats.block_allocations,
        stats.block_allocated_bytes,
        stats.dedicated_allocations,
    ]
}

/// What `total`'s figures hold besides `pool`'s: the default pool's.
fn without(total: &TypeStats, pool: &TypeStats) -> [u64; 6] {
    let (total, pool) = (figures(total), figures(pool));
    std::array::from_fn(|i| total[i] - pool[i])
}

/// The body of `pool_allocations_live_in_the_pools_blocks`.
fn pooled_resources_on_the_gpu(profile: Profile) {
    let context = VulkanContext::new(profile);
    let allocator = allocator_for(&context);
    let _idle = IdleOnDrop(&context.device);
    let pool = device_local_pool(&context, &allocator);
    let memory_type = pool.memory_type() as usize;
    // The first block is made with the pool, and counts in `stats`.
    let empty = allocator.pool_stats(&pool).unwrap();
    assert_eq!(figures(&empty), [1, BLOCK, 1, 0, 0, 0], "{profile}");
    let stats = allocator.stats();
    assert_eq!(stats.memory_objects, 1, "{profile}");
    assert_eq!(figures(&stats.memory_types[memory_type]), figures(&empty));

    // A buffer in the default pool of the same type, then the pool's.
    let outside = filled(
        &allocator,
        256 << 10,
        AllocationDesc::new(Usage::DEVICE_LOCAL),
        0x0D0D_0D0D,
    );
    assert_eq!(outside.allocation.memory_type() as usize, memory_type);
    assert!(!outside.allocation.is_in_custom_pool());
    let default_pool = without(&allocator.stats().memory_types[memory_type], &empty);
    let in_pool = AllocationDesc::new(Usage::DEVICE_LOCAL)
        .pool(pool)
        .name("in pool");
    // Run slots (4 and 12 KiB), ranges of their own, and two 3 MiB
    // buffers that no 4 MiB block holds together: both blocks are used.
    let sizes = [4 << 10, 12 << 10, 256 << 10, 3 * MIB, 3 * MIB];
    let mut buffers: Vec<Filled> = (0..)
        .zip(sizes)
        .map(|(i, size)| filled(&allocator, size, in_pool, 0x5000_0000 | i))
        .collect();
    let extent = 256;
    // SAFETY: a valid create info (2D RGBA8, transfer usage).
    let (handle, allocation) =
        unsafe { allocator.create_image(&image_info(extent, extent), &in_pool) }.unwrap();
    let image = Cleared {
        handle,
        allocation,
        extent,
        color: [0x9A, 0xBC, 0xDE, 0xF0],
    };
    let pooled: Vec<&Allocation> = buffers
        .iter()
        .map(|b| &b.allocation)
        .chain([&image.allocation])
        .collect();
    let mut pool_memories: Vec<vk::DeviceMemory> = pooled.iter().map(|a| a.memory()).collect();
    pool_memories.sort();
    pool_memories.dedup();
    assert_eq!(pool_memories.len(), 2, "{profile}: the pool's two blocks");
    for a in &pooled {
        assert!(a.is_in_custom_pool(), "{profile}");
        assert!(!a.is_dedicated(), "{profile}");
        assert_eq!(a.memory_type() as usize, memory_type, "{profile}");
        assert_ne!(
            a.memory(),
            outside.allocation.memory(),
            "{profile}: a pool allocation in the default pool's block"
        );
        assert!(a.offset() + a.size() <= BLOCK, "{profile}: past its block");
    }
    let what = format!("{profile} pool");
    let pooled_buffers = buffers.iter().map(|b| &b.allocation);
    assert_no_page_shared(&context, pooled_buffers, [&image.allocation], &what);

    // `pool_stats` counts the pool's allocations; `stats` counts them with
    // the default pool's, which did not change.
    let stats = allocator.pool_stats(&pool).unwrap();
    let bytes: u64 = pooled.iter().map(|a| a.size()).sum();
    let count = pooled.len() as u64;
    assert_eq!(figures(&stats), [2, 2 * BLOCK, 0, count, bytes, 0]);
    let total = allocator.stats();
    assert_eq!(
        without(&total.memory_types[memory_type], &stats),
        default_pool
    );
    assert_eq!(total.allocations(), count + 1, "{profile}");
    // The pool's two blocks and the default pool's one.
    assert_eq!(total.memory_objects, 3, "{profile}");
    // The memory map shows the pool's blocks apart from the default pool's.
    let map = allocator.memory_map();
    let type_map = &map.memory_types[memory_type];
    let [shown] = &type_map.custom_pools[..] else {
        panic!("{profile}: {:?}", type_map.custom_pools);
    };
    assert_eq!(shown.name.as_deref(), Some("pool suite"));
    let limits = (shown.block_size, shown.min_blocks, shown.max_blocks);
    assert_eq!(limits, (Some(BLOCK), 1, Some(2)), "{profile}");
    let mut shown_memories: Vec<_> = shown.blocks.iter().map(|b| b.memory).collect();
    shown_memories.sort();
    assert_eq!(shown_memories, pool_memories, "{profile}");
    let default_memories: Vec<_> = type_map.blocks.iter().map(|b| b.memory).collect();
    assert_eq!(default_memories, [outside.allocation.memory()], "{profile}");
    assert_eq!(map.allocation_count() as u64, count + 1, "{profile}");

    buffers.push(outside);
    fill_and_check(&context, &allocator, &buffers, std::slice::from_ref(&image));

    // Emptied, the pool keeps its `min_blocks` block, through `trim` too.
    // SAFETY: the GPU is idle (every submission was waited for).
    unsafe {
        for b in buffers {
            allocator.destroy_buffer(b.handle, b.allocation).unwrap();
        }
        allocator
            .destroy_image(image.handle, image.allocation)
            .unwrap();
    }
    let emptied = allocator.pool_stats(&pool).unwrap();
    assert_eq!(figures(&emptied), [1, BLOCK, 1, 0, 0, 0], "{profile}");
    allocator.trim();
    assert_eq!(allocator.stats().memory_objects, 1, "{profile}");
    assert_eq!(allocator.destroy_pool(pool), Ok(()));
    assert_eq!(allocator.stats().memory_objects, 0, "{profile}");
    context.assert_no_validation_messages();
}

test_each_profile!(
    /// Buffers (run slots among them) and an optimal image made through the
    /// helpers in a device-local pool live in the pool's two blocks, not in
    /// the default pool's memory; the GPU fills each (and a buffer of the
    /// default pool) with its own pattern and every byte reads back;
    /// `pool_stats` counts them, `stats` counts them with the default
    /// pool's; emptied, the pool keeps its `min_blocks` block until it is
    /// destroyed.
    fn pool_allocations_live_in_the_pools_blocks(profile) {
        pooled_resources_on_the_gpu(profile);
    }
);

/// Records fills of `buffers` into a command buffer of a new command pool
/// and submits it with a new fence, without waiting: a frame's work.
fn submit_fills(context: &VulkanContext, buffers: &[Filled]) -> (vk::CommandPool, vk::Fence) {
    context.submit_in_a_new_pool(|device, cmd| {
        for b in buffers {
            // SAFETY: a recording command buffer; every buffer belongs to
            // `device` and is bound.
            unsafe { device.cmd_fill_buffer(cmd, b.handle, 0, vk::WHOLE_SIZE, b.pattern) };
        }
    })
}

/// The body of `a_full_pool_is_destroyed_after_its_frees_frame`.
fn full_pool_through_a_frame(profile: Profile) {
    let context = VulkanContext::new(profile);
    let allocator = allocator_for(&context);
    let _idle = IdleOnDrop(&context.device);
    let pool = device_local_pool(&context, &allocator);
    let in_pool = AllocationDesc::new(Usage::DEVICE_LOCAL).pool(pool);
    // Every refused request below comes from a helper that made its buffer
    // or image first: it must destroy it (the validation layer reports a
    // leaked one when the device is destroyed).
    // SAFETY: a valid create info.
    let result = unsafe { allocator.create_buffer(&buffer_info(BLOCK + MIB), &in_pool) };
    assert!(
        matches!(result, Err(Error::TooLargeForPool { size, block_size: BLOCK }) if size >= BLOCK + MIB),
        "{profile}: {result:?}"
    );
    // Host access needs a host-visible pool: not the plain device-local
    // type of the fake profiles.
    let flags =
        context.memory_properties().memory_types[pool.memory_type() as usize].property_flags;
    if !flags.contains(vk::MemoryPropertyFlags::HOST_VISIBLE) {
        let upload = AllocationDesc::new(Usage::UPLOAD).pool(pool);
        // SAFETY: a valid create info.
        let result = unsafe { allocator.create_buffer(&buffer_info(4096), &upload) };
        assert!(
            matches!(result, Err(Error::NoSuitableMemoryType { .. })),
            "{profile}: {result:?}"
        );
    }

    let mut live = Vec::new();
    let error = loop {
        // SAFETY: a valid create info.
        match unsafe { allocator.create_buffer(&buffer_info(MIB), &in_pool) } {
            Ok((handle, allocation)) => live.push(Filled {
                handle,
                allocation,
                size: MIB,
                pattern: 0xF0F0_0000 | live.len() as u32,
            }),
            Err(error) => break error,
        }
        assert!(live.len() < 64, "{profile}: the pool never filled");
    };
    assert_eq!(error, Error::PoolFull { max_blocks: 2 }, "{profile}");
    let count = live.len() as u64;
    if !on_custom_device() {
        assert_eq!(
            count,
            2 * BLOCK / MIB,
            "{profile}: 1 MiB buffers fill both blocks"
        );
    }
    // SAFETY: a valid create info (2D RGBA8, transfer usage).
    let result = unsafe { allocator.create_image(&image_info(64, 64), &in_pool) };
    assert!(
        matches!(result, Err(Error::PoolFull { max_blocks: 2 })),
        "{profile}: {result:?}"
    );
    let full = allocator.pool_stats(&pool).unwrap();
    assert_eq!(
        (full.blocks, full.block_allocations),
        (2, count),
        "{profile}"
    );
    // The default pools serve requests that do not name the pool.
    let (outside, outside_memory) =
        buffer(&allocator, MIB, AllocationDesc::new(Usage::DEVICE_LOCAL));
    assert!(!outside_memory.is_in_custom_pool());

    // The GPU uses the buffers in a frame; they are retired with it.
    let (command_pool, fence) = submit_fills(&context, &live);
    // SAFETY: the buffers came from this allocator's device, and nothing
    // else destroys them.
    unsafe {
        for b in live {
            allocator
                .destroy_buffer_after_frame(b.handle, b.allocation)
                .unwrap();
        }
    }
    let not_empty = Err(Error::PoolNotEmpty { allocations: count });
    assert_eq!(allocator.destroy_pool(pool), not_empty, "{profile}");
    let nothing = Collected {
        frames: 0,
        frees: 0,
    };
    assert_eq!(
        allocator.collect(),
        Ok(nothing),
        "{profile}: frame not sealed"
    );
    // SAFETY: `fence` belongs to the device, is signalled by the frame's
    // only submission, and is destroyed after its frame is collected.
    assert_eq!(unsafe { allocator.end_frame(fence) }, Ok(0));
    assert_eq!(allocator.destroy_pool(pool), not_empty, "{profile}");
    let collected = Collected {
        frames: 1,
        frees: count as usize,
    };
    assert_eq!(allocator.wait_and_collect(TIMEOUT_NS), Ok(collected));
    let emptied = allocator.pool_stats(&pool).unwrap();
    assert_eq!(figures(&emptied), [1, BLOCK, 1, 0, 0, 0], "{profile}");
    assert_eq!(allocator.destroy_pool(pool), Ok(()), "{profile}");

    // The handle is stale now, also once a new pool takes its slot (and,
    // NVIDIA's advice says of this call alone, the memory just freed).
    let next = context.allowing(&[Advice::ReusedMemory], || {
        device_local_pool(&context, &allocator)
    });
    assert_ne!(next, pool);
    assert_eq!(allocator.pool_stats(&pool), Err(Error::StalePool));
    assert_eq!(allocator.destroy_pool(pool), Err(Error::StalePool));
    // SAFETY: valid create infos.
    unsafe {
        let result = allocator.create_buffer(&buffer_info(MIB), &in_pool);
        assert!(matches!(result, Err(Error::StalePool)), "{result:?}");
        let result = allocator.create_image(&image_info(64, 64), &in_pool);
        assert!(matches!(result, Err(Error::StalePool)), "{result:?}");
    }
    let (in_next, in_next_memory) = buffer(
        &allocator,
        MIB,
        AllocationDesc::new(Usage::DEVICE_LOCAL).pool(next),
    );
    assert!(in_next_memory.is_in_custom_pool());
    // Another allocator's pool is refused, with no change to it.
    let other = allocator_for(&context);
    let foreign = other
        .create_pool(&PoolDesc::new(next.memory_type()))
        .unwrap();
    let in_foreign = AllocationDesc::new(Usage::DEVICE_LOCAL).pool(foreign);
    // SAFETY: a valid create info.
    let result = unsafe { allocator.create_buffer(&buffer_info(MIB), &in_foreign) };
    assert!(matches!(result, Err(Error::ForeignPool)), "{result:?}");
    assert_eq!(allocator.pool_stats(&foreign), Err(Error::ForeignPool));
    assert_eq!(allocator.destroy_pool(foreign), Err(Error::ForeignPool));
    assert_eq!(other.destroy_pool(foreign), Ok(()));

    // SAFETY: the fence signalled (its frame was collected), so the GPU is
    // done with the command buffer; the last two buffers were never used.
    unsafe {
        context.device.destroy_fence(fence, None);
        context.device.destroy_command_pool(command_pool, None);
        allocator.destroy_buffer(outside, outside_memory).unwrap();
        allocator.destroy_buffer(in_next, in_next_memory).unwrap();
    }
    assert_eq!(allocator.destroy_pool(next), Ok(()));
    allocator.trim();
    assert_eq!(allocator.stats().memory_objects, 0, "{profile}");
    context.assert_no_validation_messages();
}

test_each_profile!(
    /// A device-local pool refuses a request larger than its blocks
    /// (`TooLargeForPool`), then takes 1 MiB buffers until `PoolFull`, for
    /// an image too; the helpers destroy what they made for refused
    /// requests. The buffers, used by a submission, are retired through the
    /// frame queue: `destroy_pool` is refused (`PoolNotEmpty`) until their
    /// frame is sealed and collected, then accepted, after which requests
    /// naming the pool fail with `StalePool`, also when a new pool took its
    /// slot; another allocator's pool is refused with `ForeignPool`.
    fn a_full_pool_is_destroyed_after_its_frees_frame(profile) {
        full_pool_through_a_frame(profile);
    }
);

/// A request larger than a pool's fixed block size gets `TooLargeForPool`
/// whether or not the pool is full: `PoolFull` would tell the caller to
/// free some of the pool's allocations, which cannot help it.
#[test]
fn a_request_no_block_can_hold_is_too_large_even_in_a_full_pool() {
    let context = VulkanContext::new(Profile::Lavapipe);
    let allocator = allocator_for(&context);
    let pool = device_local_pool(&context, &allocator);
    let in_pool = AllocationDesc::new(Usage::DEVICE_LOCAL).pool(pool);
    let live: Vec<_> = (0..2).map(|_| buffer(&allocator, BLOCK, in_pool)).collect();
    // SAFETY: a valid create info.
    let result = unsafe { allocator.create_buffer(&buffer_info(BLOCK + MIB), &in_pool) };
    // SAFETY: never used by the GPU.
    unsafe {
        for (handle, allocation) in live {
            allocator.destroy_buffer(handle, allocation).unwrap();
        }
    }
    assert!(
        matches!(
            result,
            Err(Error::TooLargeForPool {
                block_size: BLOCK,
                ..
            })
        ),
        "{result:?}"
    );
}
