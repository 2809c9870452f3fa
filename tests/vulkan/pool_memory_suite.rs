//! What custom pools do with the memory of their type, on a real driver,
//! under the validation layer: host-visible pools hand out mapped slices
//! whose bytes reach the GPU through `flush` and come back through
//! `invalidate` (the fake-memory layer hides unflushed bytes of its
//! non-coherent types). Any validation message fails a test.

use ash::vk;
use vk_suballoc::device::AshMemoryDevice;
use vk_suballoc::{Allocation, AllocationDesc, Allocator, PoolDesc, Usage};

use super::allocator_setup::{
    allocator_for, buffer_info, check_pattern, memory_barrier, IdleOnDrop, TRANSFER_TO_HOST,
    TRANSFER_TO_TRANSFER,
};
use crate::support::{on_custom_device, test_each_profile, Profile, VulkanContext};

const MIB: u64 = 1 << 20;

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
