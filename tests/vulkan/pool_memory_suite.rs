//! What custom pools do with the memory of their type, on a real driver,
//! under the validation layer: host-visible pools hand out mapped slices
//! whose bytes reach the GPU through `flush` and come back through
//! `invalidate` (the fake-memory layer hides unflushed bytes of its
//! non-coherent types); dedicated memory, where the driver or a lazily
//! allocated type requires it, is made in the pool's type and counted in
//! the pool, and a preference for it is not followed there; when the
//! driver cannot make a pool's blocks, nothing is left behind; the blocks
//! carry the pool's name. Any validation message fails a test, a leaked
//! buffer or image included.

use ash::vk;
use vk_suballoc::device::AshMemoryDevice;
use vk_suballoc::{
    Allocation, AllocationDesc, Allocator, Config, DedicatedPolicy, Error, PoolDesc, Usage,
};

use super::allocator_setup::{
    allocator_configured, allocator_for, buffer_info, check_pattern, image_info, memory_barrier,
    IdleOnDrop, TRANSFER_TO_HOST, TRANSFER_TO_TRANSFER,
};
use crate::support::{
    on_custom_device, test_each_fake_profile, test_each_profile, transient_attachment_info, Advice,
    ContextOptions, Profile, VulkanContext,
};

const MIB: u64 = 1 << 20;
/// The fixed block size of the device-local pools.
const BLOCK: u64 = 4 * MIB;

/// Creates a buffer with the helper; panics on error.
fn buffer(
    allocator: &Allocator<AshMemoryDevice>,
    size: u64,
    desc: AllocationDesc<'_>,
) -> (vk::Buffer, Allocation) {
    // SAFETY: a valid create info (non-zero size, transfer usage).
    unsafe { allocator.create_buffer(&buffer_info(size), &desc) }.unwrap()
}

/// A buffer of a host-visible pool and the bytes the host wrote into it.
struct Written {
    handle: vk::Buffer,
    allocation: Allocation,
    bytes: Vec<u8>,
}

/// The body of `host_writes_to_a_pools_mapped_memory_reach_the_gpu`.
fn host_visible_pools(profile: Profile) {
    let context = VulkanContext::new(profile);
    let allocator = allocator_for(&context);
    let _idle = IdleOnDrop(&context.device);
    // A pool per usage, each destroyed at the end: one destroyed before
    // the next is made would have the next one's block take the memory
    // just freed (in one memory type), which NVIDIA's advice reports.
    let mut pools = Vec::new();
    for usage in [Usage::UPLOAD, Usage::READBACK] {
        let memory_type = allocator.memory_type_for(!0, usage).unwrap();
        let flags = context.memory_properties().memory_types[memory_type as usize].property_flags;
        let what = format!("{profile} {usage:?} pool (type {memory_type}, {flags:?})");
        assert!(
            flags.contains(vk::MemoryPropertyFlags::HOST_VISIBLE),
            "{what}"
        );
        // These profiles' cached types are not coherent: the fake-memory
        // layer keeps host writes from the GPU until they are flushed, and
        // GPU writes from the host until they are invalidated.
        let non_coherent = matches!(profile, Profile::Discrete | Profile::Mobile);
        if usage == Usage::READBACK && non_coherent && !on_custom_device() {
            assert!(
                !flags.contains(vk::MemoryPropertyFlags::HOST_COHERENT),
                "{what}"
            );
        }
        // One 1 MiB block at most, made for the first request.
        let desc = PoolDesc::new(memory_type)
            .block_size(MIB)
            .max_blocks(1)
            .name("host pool");
        let pool = allocator.create_pool(&desc).unwrap();
        assert_eq!(allocator.pool_stats(&pool).unwrap().blocks, 0, "{what}");
        let in_pool = AllocationDesc::new(usage).pool(pool);
        // Sizes that are no multiple of the atom: run slots and a range.
        let mut written: Vec<Written> = [100u32, 5000, 70_000]
            .into_iter()
            .enumerate()
            .map(|(k, size)| {
                let (handle, mut allocation) = buffer(&allocator, u64::from(size), in_pool);
                assert!(allocation.is_in_custom_pool(), "{what}");
                let bytes: Vec<u8> = (0..size)
                    .map(|i| (i * 7 + k as u32 * 13 + 1) as u8)
                    .collect();
                let slice = allocator.mapped_slice_mut(&mut allocation).unwrap();
                slice[..bytes.len()].copy_from_slice(&bytes);
                allocator.flush(&allocation, ..).unwrap();
                Written {
                    handle,
                    allocation,
                    bytes,
                }
            })
            .collect();
        let stats = allocator.pool_stats(&pool).unwrap();
        assert_eq!((stats.blocks, stats.block_allocations), (1, 3), "{what}");

        // The GPU copies each into device-local memory and on to a
        // readback buffer, then fills the pool's buffers.
        let mut copies: Vec<[(vk::Buffer, Allocation); 2]> = written
            .iter()
            .map(|w| {
                let len = w.bytes.len() as u64;
                [Usage::DEVICE_LOCAL, Usage::READBACK]
                    .map(|usage| buffer(&allocator, len, AllocationDesc::new(usage)))
            })
            .collect();
        let pattern = 0xC0DE_0000 | memory_type;
        context.run_one_time_commands(|device, cmd| {
            // SAFETY: every buffer belongs to `device` and is bound; the
            // barriers order the first copies before the second ones and
            // the fills (which overwrite what the first copies read), and
            // all of them before host reads.
            unsafe {
                for (w, [local, _]) in written.iter().zip(&copies) {
                    let region = [vk::BufferCopy {
                        src_offset: 0,
                        dst_offset: 0,
                        size: w.bytes.len() as u64,
                    }];
                    device.cmd_copy_buffer(cmd, w.handle, local.0, &region);
                }
                let (src, dst) = TRANSFER_TO_TRANSFER;
                memory_barrier(device, cmd, src, dst);
                for (w, [local, readback]) in written.iter().zip(&copies) {
                    let region = [vk::BufferCopy {
                        src_offset: 0,
                        dst_offset: 0,
                        size: w.bytes.len() as u64,
                    }];
                    device.cmd_copy_buffer(cmd, local.0, readback.0, &region);
                    device.cmd_fill_buffer(cmd, w.handle, 0, vk::WHOLE_SIZE, pattern);
                }
                let (src, dst) = TRANSFER_TO_HOST;
                memory_barrier(device, cmd, src, dst);
            }
        });
        for (i, (w, [_, readback])) in written.iter_mut().zip(&mut copies).enumerate() {
            let len = w.bytes.len();
            allocator.invalidate(&mut readback.1, ..).unwrap();
            let read = &allocator.mapped_slice(&readback.1).unwrap()[..len];
            assert!(
                read == &w.bytes[..],
                "{what}: buffer {i}: the host's bytes did not reach the GPU"
            );
            // The fill reaches the host through the pool's invalidate.
            let what = format!("{what}: buffer {i} filled");
            let expected = pattern.to_le_bytes();
            check_pattern(&allocator, &mut w.allocation, len as u64, &expected, &what);
        }
        // SAFETY: the GPU is idle (run_one_time_commands waits).
        unsafe {
            for (w, pair) in written.into_iter().zip(copies) {
                allocator.destroy_buffer(w.handle, w.allocation).unwrap();
                for (handle, allocation) in pair {
                    allocator.destroy_buffer(handle, allocation).unwrap();
                }
            }
        }
        pools.push((pool, what));
    }
    for (pool, what) in pools {
        assert_eq!(allocator.destroy_pool(pool), Ok(()), "{what}");
    }
    context.assert_no_validation_messages();
}

test_each_profile!(
    /// Host-visible pools (of the types `Usage::UPLOAD` and
    /// `Usage::READBACK` pick: not coherent on the discrete and mobile
    /// profiles) hand out mapped slices; what the host writes and flushes
    /// there reaches the GPU, which copies it into device-local memory and
    /// back to the host, and what the GPU then fills into the pool's
    /// buffers reaches the host after `invalidate`.
    fn host_writes_to_a_pools_mapped_memory_reach_the_gpu(profile) {
        host_visible_pools(profile);
    }
);

test_each_fake_profile!(
    /// A driver that prefers dedicated memory gets a pool's block (the
    /// pool is what the caller asked for), unless the caller says
    /// `DedicatedPolicy::Always`; one that requires it gets dedicated memory
    /// of the pool's type, counted in the pool (and in `stats`), which
    /// keeps the pool from being destroyed. The validation layer checks
    /// every bind against what the driver reported.
    fn dedicated_memory_in_a_pool_only_when_required(profile) {
        for (mode, required) in [("prefer", false), ("require", true)] {
            let options = ContextOptions::default().dedicated(mode);
            let context = VulkanContext::with_options(profile, options);
            let allocator = allocator_for(&context);
            let memory_type = allocator.memory_type_for(!0, Usage::DEVICE_LOCAL).unwrap();
            let desc = PoolDesc::new(memory_type).block_size(BLOCK).max_blocks(1);
            let pool = allocator.create_pool(&desc).unwrap();
            let in_pool = AllocationDesc::new(Usage::DEVICE_LOCAL).pool(pool);
            let always = in_pool.dedicated(DedicatedPolicy::Always);
            // Dedicated memory for KiB-sized resources, on purpose: asked
            // for (`Always`), or required by the fake driver. Allowed for
            // those calls alone: where the driver only prefers it, the
            // pool's block, which may not be small, takes them.
            let small = [Advice::SmallMemory];
            let small_if_required = if required { &small[..] } else { &[] };
            // SAFETY: valid create infos; nothing is used by the GPU.
            unsafe {
                let (a, a_memory) =
                    context.allowing(small_if_required, || allocator.create_buffer(&buffer_info(4096), &in_pool)).unwrap();
                let (b, b_memory) =
                    context.allowing(small_if_required, || allocator.create_image(&image_info(16, 16), &in_pool)).unwrap();
                let (c, c_memory) =
                    context.allowing(&small, || allocator.create_buffer(&buffer_info(4096), &always)).unwrap();
                for (what, allocation) in [("buffer", &a_memory), ("image", &b_memory)] {
                    assert_eq!(allocation.is_dedicated(), required, "{profile} {mode} {what}");
                }
                assert!(c_memory.is_dedicated(), "{profile} {mode}");
                for allocation in [&a_memory, &b_memory, &c_memory] {
                    assert!(allocation.is_in_custom_pool(), "{profile} {mode}");
                    assert_eq!(allocation.memory_type(), memory_type, "{profile} {mode}");
                }
                let dedicated = if required { 3 } else { 1 };
                let stats = allocator.pool_stats(&pool).unwrap();
                let expected = (u64::from(!required), 3 - dedicated, dedicated);
                let seen = (stats.blocks, stats.block_allocations, stats.dedicated_allocations);
                assert_eq!(seen, expected, "{profile} {mode}");
                let total = &allocator.stats().memory_types[memory_type as usize];
                assert_eq!(total.dedicated_allocations, dedicated, "{profile} {mode}");
                let not_empty = Err(Error::PoolNotEmpty { allocations: 3 });
                assert_eq!(allocator.destroy_pool(pool), not_empty, "{profile} {mode}");
                allocator.destroy_buffer(a, a_memory).unwrap();
                allocator.destroy_image(b, b_memory).unwrap();
                allocator.destroy_buffer(c, c_memory).unwrap();
            }
            assert_eq!(allocator.destroy_pool(pool), Ok(()), "{profile} {mode}");
            assert_eq!(allocator.stats().memory_objects, 0, "{profile} {mode}");
            context.assert_no_validation_messages();
        }
    }
);

/// A pool of the mobile profile's lazily allocated type, picked by
/// `memory_type_for_image` for a transient attachment: the attachment gets
/// dedicated memory there (the type requires it), counted in the pool, and
/// a render pass clears it; a buffer, whose bits exclude the type, is
/// refused with `PoolTypeNotAllowed` and not left behind.
#[test]
fn a_lazily_allocated_pool_takes_transient_attachments_only() {
    let context = VulkanContext::new(Profile::Mobile);
    // A small attachment gets dedicated lazily allocated memory.
    context.allow(Advice::SmallMemory);
    let allocator = allocator_for(&context);
    let extent = (64, 48);
    let info = transient_attachment_info(extent.0, extent.1);
    // SAFETY: a valid create info.
    let memory_type = unsafe { allocator.memory_type_for_image(&info, Usage::TRANSIENT) }.unwrap();
    let flags = context.memory_properties().memory_types[memory_type as usize].property_flags;
    assert!(
        flags.contains(vk::MemoryPropertyFlags::LAZILY_ALLOCATED),
        "type {memory_type}: {flags:?}"
    );
    let pool = allocator.create_pool(&PoolDesc::new(memory_type)).unwrap();
    let in_pool = AllocationDesc::new(Usage::TRANSIENT).pool(pool);
    // SAFETY: a valid create info for a colour attachment.
    let (image, allocation) = unsafe { allocator.create_image(&info, &in_pool) }.unwrap();
    assert!(allocation.is_dedicated() && allocation.is_in_custom_pool());
    assert_eq!(allocation.memory_type(), memory_type);
    let stats = allocator.pool_stats(&pool).unwrap();
    assert_eq!((stats.blocks, stats.dedicated_allocations), (0, 1));
    context.clear_transient_attachment(image, extent);
    // SAFETY: a valid create info; refused before it is bound.
    let refused = unsafe { allocator.create_buffer(&buffer_info(4096), &in_pool) };
    assert!(
        matches!(refused, Err(Error::PoolTypeNotAllowed { memory_type: t, .. }) if t == memory_type),
        "{refused:?}"
    );
    // SAFETY: the render pass completed (it is waited for).
    unsafe { allocator.destroy_image(image, allocation) }.unwrap();
    assert_eq!(allocator.destroy_pool(pool), Ok(()));
    assert_eq!(allocator.stats().memory_objects, 0);
    context.assert_no_validation_messages();
}

test_each_fake_profile!(
    /// A pool whose `min_blocks` the driver cannot all make is not made,
    /// and gives back the blocks it made: the second `vkAllocateMemory`
    /// fails, or `maxMemoryAllocationCount` is reached (a typed error, no
    /// VUID-vkAllocateMemory-maxMemoryAllocationCount-04101). A request
    /// whose new block fails gets `OutOfDeviceMemory`: no smaller block
    /// (the size is fixed), no other memory, and the helper destroys its
    /// buffer; the next request makes the block.
    fn a_pool_the_driver_cannot_serve_leaves_nothing(profile) {
        let options = ContextOptions::default().fail_allocation(2).fail_allocation(3);
        let context = VulkanContext::with_options(profile, options);
        // The layer fails vkAllocateMemory on purpose.
        context.allow(Advice::FailingCalls);
        let allocator = allocator_for(&context);
        let memory_type = allocator.memory_type_for(!0, Usage::DEVICE_LOCAL).unwrap();
        let desc = PoolDesc::new(memory_type).block_size(BLOCK).min_blocks(2);
        assert_eq!(allocator.create_pool(&desc), Err(Error::OutOfDeviceMemory), "{profile}");
        assert_eq!(allocator.stats().memory_objects, 0, "{profile}");
        let pool = allocator.create_pool(&desc.min_blocks(0)).unwrap();
        let in_pool = AllocationDesc::new(Usage::DEVICE_LOCAL).pool(pool);
        // Both requests' blocks would take the memory the refused pool's
        // first block gave back: NVIDIA's advice on these calls, and on no
        // other.
        let reuse = [Advice::ReusedMemory];
        // SAFETY: a valid create info.
        let result = context.allowing(&reuse, || unsafe {
            allocator.create_buffer(&buffer_info(MIB), &in_pool)
        });
        assert!(matches!(result, Err(Error::OutOfDeviceMemory)), "{profile}: {result:?}");
        assert_eq!(allocator.stats().memory_objects, 0, "{profile}");
        let (handle, allocation) = context.allowing(&reuse, || buffer(&allocator, MIB, in_pool));
        let stats = allocator.pool_stats(&pool).unwrap();
        assert_eq!((stats.blocks, stats.block_bytes), (1, BLOCK), "{profile}");
        // SAFETY: never used by the GPU.
        unsafe { allocator.destroy_buffer(handle, allocation) }.unwrap();
        assert_eq!(allocator.destroy_pool(pool), Ok(()));
        context.assert_no_validation_messages();

        let options = ContextOptions::default().max_allocations(2);
        let context = VulkanContext::with_options(profile, options);
        let allocator = allocator_for(&context);
        let desc = PoolDesc::new(memory_type).block_size(BLOCK).min_blocks(3);
        assert_eq!(allocator.create_pool(&desc), Err(Error::TooManyObjects(2)), "{profile}");
        assert_eq!(allocator.stats().memory_objects, 0, "{profile}");
        // Its blocks take the memory of those the refused pool gave back.
        let pool = context
            .allowing(&[Advice::ReusedMemory], || allocator.create_pool(&desc.min_blocks(2)))
            .unwrap();
        assert_eq!(allocator.stats().memory_objects, 2, "{profile}");
        assert_eq!(allocator.destroy_pool(pool), Ok(()));
        context.assert_no_validation_messages();
    }
);

/// Blocks of a named pool carry its name in their debug names: the
/// validation layer, reporting a mapping of a block the allocator keeps
/// mapped, names it.
#[test]
fn a_pools_name_reaches_the_validation_layer() {
    let context = VulkanContext::new(Profile::Lavapipe);
    let allocator = allocator_for(&context);
    let memory_type = allocator.memory_type_for(!0, Usage::UPLOAD).unwrap();
    let desc = PoolDesc::new(memory_type).min_blocks(1).name("named pool");
    let pool = allocator.create_pool(&desc).unwrap();
    let in_pool = AllocationDesc::new(Usage::UPLOAD).pool(pool);
    let (handle, allocation) = buffer(&allocator, MIB, in_pool);
    assert!(allocation.mapped_ptr().is_some());
    // SAFETY: deliberately invalid (already mapped): the validation layer
    // reports it; lavapipe just returns the same pointer again.
    let _ = unsafe {
        context
            .device
            .map_memory(allocation.memory(), 0, 64, vk::MemoryMapFlags::empty())
    };
    let messages = context.expect_validation_messages(&["VUID-vkMapMemory-memory-00678"]);
    let all = messages.join("\n");
    let name = format!("vk-suballoc pool \"named pool\" block {memory_type}/0");
    assert!(all.contains(&name), "{all}");
    // SAFETY: never used by the GPU.
    unsafe { allocator.destroy_buffer(handle, allocation) }.unwrap();
}

/// The AMD profile's device-coherent types need a feature the device does
/// not enable: no pool is made of them (no block, so no
/// VUID-vkAllocateMemory-deviceCoherentMemory-02790), and
/// `memory_type_for` never picks them.
#[test]
fn no_pool_of_a_memory_type_the_allocator_may_not_use() {
    let context = VulkanContext::new(Profile::Amd);
    let allocator = allocator_for(&context);
    let types = context.memory_properties().memory_type_count;
    assert_eq!(types, 8, "the AMD profile's types");
    for memory_type in 4..types {
        let desc = PoolDesc::new(memory_type).min_blocks(1);
        let result = allocator.create_pool(&desc);
        assert!(
            matches!(result, Err(Error::InvalidConfig(_))),
            "type {memory_type}: {result:?}"
        );
        let picked = allocator.memory_type_for(1 << memory_type, Usage::DEVICE_LOCAL);
        assert!(
            matches!(picked, Err(Error::NoMemoryTypeBits(_))),
            "type {memory_type}: {picked:?}"
        );
    }
    assert_eq!(allocator.stats().memory_objects, 0);
    context.assert_no_validation_messages();
}

/// A pool's block holds buffers and optimal images together, also where
/// `bufferImageGranularity` exceeds `Config::max_padded_granularity` and
/// the default pools give each kind blocks of their own: a one-block pool
/// with an image in it takes a buffer (`PoolFull` says "none with room
/// for the request", and the block is nearly all free).
#[test]
fn a_one_block_pool_holds_buffers_beside_an_image() {
    let context = VulkanContext::new(Profile::Discrete);
    // Discrete granularity 1024: above 0, so the kinds are kept apart.
    let config = Config {
        max_padded_granularity: 0,
        ..Config::default()
    };
    let allocator = allocator_configured(&context, config);
    let memory_type = allocator.memory_type_for(!0, Usage::DEVICE_LOCAL).unwrap();
    let desc = PoolDesc::new(memory_type).block_size(BLOCK).max_blocks(1);
    let pool = allocator.create_pool(&desc).unwrap();
    let in_pool = AllocationDesc::new(Usage::DEVICE_LOCAL).pool(pool);
    // SAFETY: valid create infos; nothing is used by the GPU.
    unsafe {
        let (image, image_memory) = allocator
            .create_image(&image_info(64, 64), &in_pool)
            .unwrap();
        let result = allocator.create_buffer(&buffer_info(4096), &in_pool);
        allocator.destroy_image(image, image_memory).unwrap();
        let (buffer, buffer_memory) = result.unwrap();
        allocator.destroy_buffer(buffer, buffer_memory).unwrap();
    }
    context.assert_no_validation_messages();
}
