//! Bytes the host writes reaching the GPU and coming back: VMA's upload
//! pattern with `ALLOW_TRANSFER_INSTEAD` (direct or through a staging
//! copy), the README's upload for a size the driver rounds up, and
//! `copy_to_allocation` / `copy_from_allocation` and the batched
//! `flush_allocations` / `invalidate_allocations`, which must flush and
//! invalidate for the caller on the profiles' non-coherent types, where the
//! layer's host cache loses what is not flushed.

use ash::vk;
use vk_suballoc::device::AshMemoryDevice;
use vk_suballoc::{
    Allocation, AllocationDesc, Allocator, Config, Error, Request, ResourceKind, Usage,
};

use super::super::allocator_setup::{
    allocator_configured, allocator_for, buffer_info, memory_barrier, TRANSFER_TO_HOST,
    TRANSFER_TO_TRANSFER,
};
use crate::support::{on_custom_device, test_each_profile, Profile, VulkanContext};

use super::buffer;

test_each_profile!(
    /// VMA's upload pattern with `UPLOAD | ALLOW_TRANSFER_INSTEAD`: the
    /// buffer lands in device-local memory; the host writes it directly when
    /// that memory is mapped, else through a staging buffer and a copy. Either
    /// way the GPU sees the bytes, with no validation message. A second buffer
    /// whose allowed types are not host-visible (where the profile has such
    /// types a buffer may use: mali's only one is lazily allocated, for
    /// transient images alone) takes the copy. With
    /// `Config::strict_host_access`, both take the copy (and a
    /// `DEVICE_LOCAL` buffer refuses host writes), whatever the profile's
    /// memory: the path a discrete GPU whose BAR is full takes.
    fn allow_transfer_instead_uploads_directly_or_with_a_copy(profile) {
        let context = VulkanContext::new(profile);
        // Both live to the end: memory one frees and the next allocates
        // draws best practices' warning to reuse allocations.
        let allocators = [false, true].map(|strict_host_access| {
            allocator_configured(&context, Config { strict_host_access, ..Config::default() })
        });
        for allocator in &allocators {
            allow_transfer_instead_upload(profile, &context, allocator);
        }
    }
);

/// One allocator's round of `allow_transfer_instead_uploads_directly_or_with_a_copy`.
fn allow_transfer_instead_upload(
    profile: Profile,
    context: &VulkanContext,
    allocator: &Allocator<AshMemoryDevice>,
) {
    let strict = allocator.config().strict_host_access;
    if strict {
        let (gpu_only, mut gpu_memory) =
            buffer(allocator, 256, AllocationDesc::new(Usage::DEVICE_LOCAL));
        assert_eq!(gpu_memory.mapped_ptr(), None, "{profile}");
        assert_eq!(
            allocator.copy_to_allocation(&mut gpu_memory, 0, &[1; 256]),
            Err(Error::NotHostVisible),
            "{profile}"
        );
        // SAFETY: no GPU work used it.
        unsafe { allocator.destroy_buffer(gpu_only, gpu_memory) }.unwrap();
    }
    let memory = context.memory_properties();
    let flags_of = |a: &Allocation| memory.memory_types[a.memory_type() as usize].property_flags;
    let usage = Usage::UPLOAD | Usage::ALLOW_TRANSFER_INSTEAD;
    let len = 4096;
    let (direct, direct_memory) = buffer(allocator, len, AllocationDesc::new(usage));
    let mut targets = vec![(direct, direct_memory)];
    // Not host-visible: the memory types the profile has without it.
    let unmappable = (0..memory.memory_type_count)
        .filter(|&t| {
            !memory.memory_types[t as usize]
                .property_flags
                .contains(vk::MemoryPropertyFlags::HOST_VISIBLE)
        })
        .fold(0u32, |bits, t| bits | 1 << t);
    // SAFETY: a valid create info; the buffer is bound once, below, to
    // memory allocated for it in a type its requirements allow, or
    // destroyed unbound.
    unsafe {
        let buffer = context
            .device
            .create_buffer(&buffer_info(len), None)
            .unwrap();
        let mut requirements = context.device.get_buffer_memory_requirements(buffer);
        requirements.memory_type_bits &= unmappable;
        if requirements.memory_type_bits != 0 {
            let request = Request::new(requirements, usage, ResourceKind::Buffer);
            let allocation = allocator.allocate(&request).unwrap();
            assert_eq!(allocation.mapped_ptr(), None, "{profile}");
            context
                .device
                .bind_buffer_memory(buffer, allocation.memory(), allocation.offset())
                .unwrap();
            targets.push((buffer, allocation));
        } else {
            context.device.destroy_buffer(buffer, None);
        }
    }
    for (round, (target, mut target_memory)) in targets.into_iter().enumerate() {
        let what = format!("{profile} buffer {round}, strict_host_access {strict}");
        let flags = flags_of(&target_memory);
        assert!(
            flags.contains(vk::MemoryPropertyFlags::DEVICE_LOCAL),
            "{what}: {flags:?}"
        );
        let mapped = flags.contains(vk::MemoryPropertyFlags::HOST_VISIBLE) && !strict;
        assert_eq!(target_memory.mapped_ptr().is_some(), mapped, "{what}");
        let bytes: Vec<u8> = (0..len as u32)
            .map(|i| (i * 7 + round as u32) as u8)
            .collect();
        let staging = if mapped {
            allocator.mapped_slice_mut(&mut target_memory).unwrap()[..bytes.len()]
                .copy_from_slice(&bytes);
            allocator.flush(&target_memory, 0..len).unwrap();
            None
        } else {
            let (staging, mut staging_memory) =
                buffer(allocator, len, AllocationDesc::new(Usage::UPLOAD));
            allocator.mapped_slice_mut(&mut staging_memory).unwrap()[..bytes.len()]
                .copy_from_slice(&bytes);
            allocator.flush(&staging_memory, 0..len).unwrap();
            Some((staging, staging_memory))
        };
        let (readback, mut readback_memory) =
            buffer(allocator, len, AllocationDesc::new(Usage::READBACK));
        context.run_one_time_commands(|device, cmd| {
            let region = [vk::BufferCopy {
                src_offset: 0,
                dst_offset: 0,
                size: len,
            }];
            // SAFETY: the buffers belong to `device` and are bound; the
            // barriers order the copies and the host read.
            unsafe {
                if let Some((staging, _)) = &staging {
                    device.cmd_copy_buffer(cmd, *staging, target, &region);
                    let (src, dst) = TRANSFER_TO_TRANSFER;
                    memory_barrier(device, cmd, src, dst);
                }
                device.cmd_copy_buffer(cmd, target, readback, &region);
                let (src, dst) = TRANSFER_TO_HOST;
                memory_barrier(device, cmd, src, dst);
            }
        });
        allocator.invalidate(&mut readback_memory, 0..len).unwrap();
        assert_eq!(
            &allocator.mapped_slice(&readback_memory).unwrap()[..bytes.len()],
            &bytes[..],
            "{what}"
        );
        // SAFETY: the copies completed (run_one_time_commands waits).
        unsafe {
            if let Some((staging, staging_memory)) = staging {
                allocator.destroy_buffer(staging, staging_memory).unwrap();
            }
            allocator.destroy_buffer(target, target_memory).unwrap();
            allocator.destroy_buffer(readback, readback_memory).unwrap();
        }
    }
}

test_each_profile!(
    /// The README's upload, for a buffer whose size the driver rounds up
    /// (the discrete profile to 16 bytes, as NVIDIA does): the mapped slice
    /// is the allocation's size, longer than the buffer, so the snippet
    /// copies into its front (`copy_from_slice` of the whole slice panicked
    /// there), and the bytes reach the GPU.
    fn an_upload_of_an_unrounded_size_fills_the_front_of_the_slice(profile) {
        let context = VulkanContext::new(profile);
        let allocator = allocator_for(&context);
        let bytes: Vec<u8> = (1..=100).collect();
        let len = bytes.len() as u64;
        let (staging, mut memory) =
            buffer(&allocator, len, AllocationDesc::new(Usage::UPLOAD).name("staging"));
        let mapped = allocator.mapped_slice_mut(&mut memory).unwrap().len() as u64;
        let granule = buffer_size_granule(profile);
        if on_custom_device() {
            // A real driver may round further than the profile (NVIDIA to
            // 16 bytes under every profile): the allocation is what it asks.
            // SAFETY: a live buffer of this device.
            let required = unsafe { context.device.get_buffer_memory_requirements(staging) }.size;
            assert_eq!(mapped, required, "{profile}");
            assert_eq!(mapped % granule, 0, "{profile}: {mapped} bytes mapped");
            assert!(mapped >= len, "{profile}: {mapped} bytes mapped");
        } else {
            assert_eq!(mapped, len.next_multiple_of(granule), "{profile}");
        }
        // As in the README's "Using it".
        allocator.mapped_slice_mut(&mut memory).unwrap()[..bytes.len()].copy_from_slice(&bytes);
        allocator.flush(&memory, 0..len).unwrap();
        let (readback, mut readback_memory) = buffer(&allocator, len, AllocationDesc::new(Usage::READBACK));
        context.run_one_time_commands(|device, cmd| {
            // SAFETY: both buffers belong to `device` and are bound; the
            // barrier orders the copy before the host read.
            unsafe {
                let region = [vk::BufferCopy { src_offset: 0, dst_offset: 0, size: len }];
                device.cmd_copy_buffer(cmd, staging, readback, &region);
                let (src, dst) = TRANSFER_TO_HOST;
                memory_barrier(device, cmd, src, dst);
            }
        });
        allocator.invalidate(&mut readback_memory, 0..len).unwrap();
        assert_eq!(&allocator.mapped_slice(&readback_memory).unwrap()[..bytes.len()], &bytes[..]);
        // SAFETY: the copy completed (run_one_time_commands waits).
        unsafe {
            allocator.destroy_buffer(staging, memory).unwrap();
            allocator.destroy_buffer(readback, readback_memory).unwrap();
        }
    }
);

test_each_profile!(
    /// `copy_to_allocation` and `copy_from_allocation` flush and invalidate
    /// for the caller: bytes written at an offset that is not an atom's
    /// reach the GPU and come back, on the profiles' non-coherent types too.
    fn copies_reach_the_gpu_and_come_back(profile) {
        let context = VulkanContext::new(profile);
        let allocator = allocator_for(&context);
        let bytes: Vec<u8> = (0..=254).collect();
        let (offset, len) = (100u64, bytes.len() as u64);
        let size = offset + len;
        // Host-cached memory for both buffers: non-coherent on the mobile
        // profile, where the layer's host cache loses what is not flushed.
        let (staging, mut memory) = buffer(&allocator, size, AllocationDesc::new(Usage::READBACK));
        allocator.copy_to_allocation(&mut memory, offset, &bytes).unwrap();
        let (readback, mut readback_memory) = buffer(&allocator, size, AllocationDesc::new(Usage::READBACK));
        context.run_one_time_commands(|device, cmd| {
            // SAFETY: both buffers belong to `device` and are bound; the
            // barrier orders the copy before the host read.
            unsafe {
                let region = [vk::BufferCopy { src_offset: offset, dst_offset: offset, size: len }];
                device.cmd_copy_buffer(cmd, staging, readback, &region);
                let (src, dst) = TRANSFER_TO_HOST;
                memory_barrier(device, cmd, src, dst);
            }
        });
        let mut out = vec![0u8; bytes.len()];
        allocator.copy_from_allocation(&mut readback_memory, offset, &mut out).unwrap();
        assert_eq!(out, bytes, "{profile}");
        let end = readback_memory.size();
        let past_end = allocator.copy_from_allocation(&mut readback_memory, end, &mut [0]);
        assert!(matches!(past_end, Err(Error::RangeOutOfBounds { .. })), "{past_end:?}");
        // SAFETY: the copy completed (run_one_time_commands waits).
        unsafe {
            allocator.destroy_buffer(staging, memory).unwrap();
            allocator.destroy_buffer(readback, readback_memory).unwrap();
        }
    }
);

test_each_profile!(
    /// `flush_allocations` and `invalidate_allocations` in one call each:
    /// host writes to three buffers reach the GPU, its copies come back,
    /// on the profiles' non-coherent cached types too (the layer's host
    /// cache loses whatever is not flushed or invalidated).
    fn batched_flushes_reach_the_gpu_and_come_back(profile) {
        let context = VulkanContext::new(profile);
        let allocator = allocator_for(&context);
        let len = 300u64;
        let desc = AllocationDesc::new(Usage::READBACK);
        let mut sources: Vec<_> = (0..3).map(|_| buffer(&allocator, len, desc)).collect();
        let mut targets: Vec<_> = (0..3).map(|_| buffer(&allocator, len, desc)).collect();
        for (i, (_, memory)) in sources.iter_mut().enumerate() {
            allocator.mapped_slice_mut(memory).unwrap()[..len as usize].fill(i as u8 + 7);
        }
        allocator.flush_allocations(sources.iter().map(|(_, memory)| (memory, 0..len))).unwrap();
        context.run_one_time_commands(|device, cmd| {
            // SAFETY: the buffers belong to `device` and are bound; the
            // barrier orders the copies before the host reads.
            unsafe {
                let region = [vk::BufferCopy { src_offset: 0, dst_offset: 0, size: len }];
                for ((source, _), (target, _)) in sources.iter().zip(&targets) {
                    device.cmd_copy_buffer(cmd, *source, *target, &region);
                }
                let (src, dst) = TRANSFER_TO_HOST;
                memory_barrier(device, cmd, src, dst);
            }
        });
        allocator.invalidate_allocations(targets.iter_mut().map(|(_, memory)| (memory, 0..len))).unwrap();
        for (i, (_, memory)) in targets.iter().enumerate() {
            let bytes = &allocator.mapped_slice(memory).unwrap()[..len as usize];
            assert!(bytes.iter().all(|&b| b == i as u8 + 7), "{profile}: buffer {i}");
        }
        // SAFETY: the copies completed (run_one_time_commands waits).
        unsafe {
            for (handle, memory) in sources.into_iter().chain(targets) {
                allocator.destroy_buffer(handle, memory).unwrap();
            }
        }
    }
);

/// The granule the fake layer rounds buffer requirement sizes up to on
/// `profile` (its `buffer_size_granule`, modelled on the real drivers:
/// NVIDIA 16 bytes, RADV 16, ANV 4 for uniform and storage buffers,
/// Turnip 64); 1 on lavapipe, which keeps the buffer's size.
fn buffer_size_granule(profile: Profile) -> u64 {
    match profile {
        Profile::Lavapipe | Profile::Integrated | Profile::Apple | Profile::Mali => 1,
        Profile::Arc => 4,
        Profile::Amd | Profile::Discrete | Profile::Rebar => 16,
        Profile::Mobile => 64,
    }
}
