//! The allocator on a real driver, under the validation layer, once per
//! memory architecture: memory-type choice, GPU data integrity across shared
//! blocks, out-of-memory fallbacks, object limits, budgets, images in the
//! types their bits allow, debug names. Any validation message fails a test.

use ash::vk;
use vk_suballoc::device::{AshMemoryDevice, DeviceFeatures};
use vk_suballoc::report::{GpuInfo, RangeKind};
use vk_suballoc::{
    Allocation, AllocationDesc, Allocator, DedicatedPolicy, Error, Request, ResourceKind,
    UploadRingDesc, Usage,
};

use super::allocator_setup::{
    allocator_for, allocator_with, assert_no_page_shared, buffer_info, check_pattern, image_info,
    memory_barrier, transition, TRANSFER_TO_HOST, TRANSFER_TO_TRANSFER,
};
use crate::seeded_rng::Rng;
use crate::support::{
    on_custom_device, test_each_fake_profile, test_each_profile, Advice, ContextOptions, Profile,
    VulkanContext,
};

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

/// The memory type each usage lands in, per profile (see the layer's profiles).
fn expected_types(profile: Profile) -> [(Usage, u32); 4] {
    let dynamic = Usage::UPLOAD | Usage::DEVICE_LOCAL;
    match profile {
        Profile::Lavapipe => [
            (Usage::DEVICE_LOCAL, 0),
            (Usage::UPLOAD, 0),
            (Usage::READBACK, 0),
            (dynamic, 0),
        ],
        // 0 DL, 1 HV|HC, 2 HV|cached (non-coherent), 3 DL|HV|HC (BAR)
        Profile::Discrete => [
            (Usage::DEVICE_LOCAL, 0),
            (Usage::UPLOAD, 1),
            (Usage::READBACK, 2),
            (dynamic, 3),
        ],
        // 0 DL, 1 DL|HV|HC, 2 DL|HV|HC|cached
        Profile::Integrated => [
            (Usage::DEVICE_LOCAL, 0),
            (Usage::UPLOAD, 1),
            (Usage::READBACK, 2),
            (dynamic, 1),
        ],
        // 0 DL, 1 DL|HV|cached (non-coherent), 2 DL|HV|HC, 3 DL|lazily
        // allocated (transient attachments only: transient_suite.rs)
        Profile::Mobile => [
            (Usage::DEVICE_LOCAL, 0),
            (Usage::UPLOAD, 2),
            (Usage::READBACK, 1),
            (dynamic, 2),
        ],
        // 0 DL, 1 HV|HC, 2 DL|HV|HC (BAR), 3 HV|HC|cached; 4-7 the same
        // with AMD's device-coherent flags, never used without their feature.
        Profile::Amd => [
            (Usage::DEVICE_LOCAL, 0),
            (Usage::UPLOAD, 1),
            (Usage::READBACK, 3),
            (dynamic, 2),
        ],
        // 0 DL, 1 HV|HC, 2 HV|HC|cached, 3 DL|HV|HC (all of VRAM)
        Profile::Rebar => [
            (Usage::DEVICE_LOCAL, 0),
            (Usage::UPLOAD, 1),
            (Usage::READBACK, 2),
            (dynamic, 3),
        ],
        // 0 DL, 1 HV|HC|cached (the only system-memory type), 2 DL|HV|HC
        // (the 256 MiB BAR): staging and readback in system memory, never
        // the BAR; only what the GPU reads often and the host writes goes
        // there.
        Profile::Arc => [
            (Usage::DEVICE_LOCAL, 0),
            (Usage::UPLOAD, 1),
            (Usage::READBACK, 1),
            (dynamic, 2),
        ],
        // 0 DL, 1 DL|HV|cached (non-coherent, listed first), 2
        // DL|HV|HC|cached: host access takes the coherent type.
        Profile::Apple => [
            (Usage::DEVICE_LOCAL, 0),
            (Usage::UPLOAD, 2),
            (Usage::READBACK, 2),
            (dynamic, 2),
        ],
        // 0 DL|HV|HC, 1 DL|HV|HC|cached, 2 DL|lazily allocated: GPU-only
        // data in the uncached host-visible type, readback in the cached one.
        Profile::Mali => [
            (Usage::DEVICE_LOCAL, 0),
            (Usage::UPLOAD, 0),
            (Usage::READBACK, 1),
            (dynamic, 0),
        ],
    }
}

test_each_profile!(
    /// Each usage lands in the memory type the ranking promises.
    fn memory_type_choice_per_usage(profile) {
        let context = VulkanContext::new(profile);
        let allocator = allocator_for(&context);
        let memory = context.memory_properties();
        for (usage, expected) in expected_types(profile) {
            let (handle, allocation) = buffer(&allocator, 4096, AllocationDesc::new(usage));
            if profile == Profile::Lavapipe && on_custom_device() {
                // An unknown device: the chosen type must have what the usage
                // needs; which of several such types is the ranking's choice.
                let flags = memory.memory_types[allocation.memory_type() as usize].property_flags;
                let needed = if usage.needs_host_access() {
                    vk::MemoryPropertyFlags::HOST_VISIBLE
                } else {
                    vk::MemoryPropertyFlags::DEVICE_LOCAL
                };
                assert!(flags.contains(needed), "{profile} {usage:?}: type {} is {flags:?}", allocation.memory_type());
            } else {
                assert_eq!(allocation.memory_type(), expected, "{profile} {usage:?}");
            }
            if usage.needs_host_access() {
                assert!(allocation.mapped_ptr().is_some(), "{profile} {usage:?}");
            }
            // What a custom pool for such buffers would be made of.
            // SAFETY: a valid create info.
            let for_buffer = unsafe { allocator.memory_type_for_buffer(&buffer_info(4096), usage) };
            assert_eq!(for_buffer, Ok(allocation.memory_type()), "{profile} {usage:?}");
            // SAFETY: never used by the GPU.
            unsafe { allocator.destroy_buffer(handle, allocation) }.unwrap();
        }
        // Images too: the type the query names is the one an image takes.
        let desc = AllocationDesc::new(Usage::DEVICE_LOCAL);
        // SAFETY: a valid create info.
        let (image, allocation) = unsafe { allocator.create_image(&image_info(16, 16), &desc) }.unwrap();
        // SAFETY: as above.
        let for_image = unsafe { allocator.memory_type_for_image(&image_info(16, 16), Usage::DEVICE_LOCAL) };
        assert_eq!(for_image, Ok(allocation.memory_type()), "{profile}");
        // SAFETY: never used by the GPU.
        unsafe { allocator.destroy_image(image, allocation) }.unwrap();
    }
);

test_each_profile!(
    /// VMA's upload pattern with `UPLOAD | ALLOW_TRANSFER_INSTEAD`: the
    /// buffer lands in device-local memory; the host writes it directly when
    /// that memory is mapped, else through a staging buffer and a copy. Either
    /// way the GPU sees the bytes, with no validation message. A second buffer
    /// whose allowed types are not host-visible (where the profile has such
    /// types a buffer may use: mali's only one is lazily allocated, for
    /// transient images alone) takes the copy.
    fn allow_transfer_instead_uploads_directly_or_with_a_copy(profile) {
        let context = VulkanContext::new(profile);
        let allocator = allocator_for(&context);
        let memory = context.memory_properties();
        let flags_of = |a: &Allocation| memory.memory_types[a.memory_type() as usize].property_flags;
        let usage = Usage::UPLOAD | Usage::ALLOW_TRANSFER_INSTEAD;
        let len = 4096;
        let (direct, direct_memory) = buffer(&allocator, len, AllocationDesc::new(usage));
        let mut targets = vec![(direct, direct_memory)];
        // Not host-visible: the memory types the profile has without it.
        let unmappable = (0..memory.memory_type_count)
            .filter(|&t| !memory.memory_types[t as usize].property_flags.contains(vk::MemoryPropertyFlags::HOST_VISIBLE))
            .fold(0u32, |bits, t| bits | 1 << t);
        // SAFETY: a valid create info; the buffer is bound once, below, to
        // memory allocated for it in a type its requirements allow, or
        // destroyed unbound.
        unsafe {
            let buffer = context.device.create_buffer(&buffer_info(len), None).unwrap();
            let mut requirements = context.device.get_buffer_memory_requirements(buffer);
            requirements.memory_type_bits &= unmappable;
            if requirements.memory_type_bits != 0 {
                let request = Request::new(requirements, usage, ResourceKind::Buffer);
                let allocation = allocator.allocate(&request).unwrap();
                assert_eq!(allocation.mapped_ptr(), None, "{profile}");
                context.device.bind_buffer_memory(buffer, allocation.memory(), allocation.offset()).unwrap();
                targets.push((buffer, allocation));
            } else {
                context.device.destroy_buffer(buffer, None);
            }
        }
        for (round, (target, mut target_memory)) in targets.into_iter().enumerate() {
            let what = format!("{profile} buffer {round}");
            let flags = flags_of(&target_memory);
            assert!(flags.contains(vk::MemoryPropertyFlags::DEVICE_LOCAL), "{what}: {flags:?}");
            let mapped = flags.contains(vk::MemoryPropertyFlags::HOST_VISIBLE);
            assert_eq!(target_memory.mapped_ptr().is_some(), mapped, "{what}");
            let bytes: Vec<u8> = (0..len as u32).map(|i| (i * 7 + round as u32) as u8).collect();
            let staging = if mapped {
                allocator.mapped_slice_mut(&mut target_memory).unwrap()[..bytes.len()].copy_from_slice(&bytes);
                allocator.flush(&target_memory, 0..len).unwrap();
                None
            } else {
                let (staging, mut staging_memory) = buffer(&allocator, len, AllocationDesc::new(Usage::UPLOAD));
                allocator.mapped_slice_mut(&mut staging_memory).unwrap()[..bytes.len()].copy_from_slice(&bytes);
                allocator.flush(&staging_memory, 0..len).unwrap();
                Some((staging, staging_memory))
            };
            let (readback, mut readback_memory) = buffer(&allocator, len, AllocationDesc::new(Usage::READBACK));
            context.run_one_time_commands(|device, cmd| {
                let region = [vk::BufferCopy { src_offset: 0, dst_offset: 0, size: len }];
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
            assert_eq!(&allocator.mapped_slice(&readback_memory).unwrap()[..bytes.len()], &bytes[..], "{what}");
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
);

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
    /// Buffers made with `existing_memory_only` bind into the block an
    /// ordinary buffer made, and fail with `NoRoomInExistingMemory` (the
    /// helper destroying the buffer it made) when nothing exists or the
    /// blocks are full: no memory object made, no validation message.
    fn existing_memory_only_binds_into_existing_blocks(profile) {
        let context = VulkanContext::new(profile);
        let allocator = allocator_for(&context);
        let only = AllocationDesc::new(Usage::DEVICE_LOCAL).existing_memory_only();
        let objects = || allocator.stats().memory_types.iter().map(|t| t.blocks + t.dedicated_allocations).sum::<u64>();
        // SAFETY: a valid create info.
        let refused = unsafe { allocator.create_buffer(&buffer_info(MIB), &only) };
        assert_eq!(refused.unwrap_err(), Error::NoRoomInExistingMemory, "{profile}");
        assert_eq!(objects(), 0, "{profile}");
        let (first, first_memory) = buffer(&allocator, MIB, AllocationDesc::new(Usage::DEVICE_LOCAL));
        let mut live = Vec::new();
        let error = loop {
            // SAFETY: a valid create info.
            match unsafe { allocator.create_buffer(&buffer_info(MIB), &only) } {
                Ok((handle, memory)) => {
                    assert_eq!(memory.memory(), first_memory.memory(), "{profile}");
                    live.push((handle, memory));
                }
                Err(error) => break error,
            }
        };
        assert_eq!(error, Error::NoRoomInExistingMemory, "{profile}");
        assert!(!live.is_empty(), "{profile}: the first block took nothing more");
        assert_eq!(objects(), 1, "{profile}");
        // SAFETY: the buffers were never used by the GPU.
        unsafe {
            allocator.destroy_buffer(first, first_memory).unwrap();
            for (handle, memory) in live {
                allocator.destroy_buffer(handle, memory).unwrap();
            }
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

test_each_profile!(
    /// `AllocationDesc::memory_type_bits` pins a buffer made by the helper
    /// to each memory type its requirements allow, in turn: the bind is
    /// valid in every one (the validation layer checks it).
    fn memory_type_bits_pin_buffers_to_each_allowed_type(profile) {
        let context = VulkanContext::new(profile);
        let allocator = allocator_for(&context);
        let info = buffer_info(4096);
        // SAFETY: a valid create info; the buffer is only queried.
        let allowed = unsafe {
            let probe = context.device.create_buffer(&info, None).unwrap();
            let bits = context.device.get_buffer_memory_requirements(probe).memory_type_bits;
            context.device.destroy_buffer(probe, None);
            bits
        };
        let types = allocator.stats().memory_types.len() as u32;
        let mut pinned = 0;
        for t in (0..types).filter(|t| allowed & (1 << t) != 0) {
            let desc = AllocationDesc::new(Usage::DEVICE_LOCAL).memory_type_bits(1 << t);
            // SAFETY: a valid create info; the buffer is never used.
            let created = unsafe { allocator.create_buffer(&info, &desc) };
            match created {
                Ok((buffer, allocation)) => {
                    assert_eq!(allocation.memory_type(), t, "{profile}");
                    pinned += 1;
                    // SAFETY: never used by the GPU.
                    unsafe { allocator.destroy_buffer(buffer, allocation).unwrap() };
                }
                // AMD's device-coherent types need a feature left off.
                Err(Error::NoMemoryTypeBits(bits)) => assert_eq!(bits, allowed & (1 << t), "{profile}"),
                Err(error) => panic!("{profile}: type {t}: {error}"),
            }
        }
        assert!(pinned > 0, "{profile}");
    }
);

/// The memory callback reports the driver's handles: the memory a buffer
/// was bound to is among the `Allocated` events, with the dedicated
/// memory's name, and every handle is `Freed` once by the time the
/// allocator is dropped.
#[test]
fn memory_events_name_the_drivers_handles() {
    use std::sync::{Arc, Mutex};
    use vk_suballoc::MemoryEventKind;
    let context = VulkanContext::new(Profile::Lavapipe);
    let mut allocator = allocator_for(&context);
    let events = Arc::new(Mutex::new(Vec::new()));
    let sink = Arc::clone(&events);
    allocator.set_memory_callback(move |event| {
        sink.lock().unwrap().push((
            event.kind,
            event.memory,
            event.size,
            event.name.map(str::to_owned),
        ));
    });
    let (small, small_memory) = buffer(&allocator, 4096, AllocationDesc::new(Usage::UPLOAD));
    let desc = AllocationDesc::new(Usage::DEVICE_LOCAL)
        .dedicated(DedicatedPolicy::Always)
        .name("target");
    let (large, large_memory) = buffer(&allocator, MIB, desc);
    {
        let events = events.lock().unwrap();
        let made = |memory: vk::DeviceMemory| {
            events
                .iter()
                .find(|(kind, m, ..)| *kind == MemoryEventKind::Allocated && *m == memory)
                .cloned()
        };
        assert!(made(small_memory.memory()).is_some());
        let (_, _, size, name) = made(large_memory.memory()).unwrap();
        assert_eq!(
            (size, name.as_deref()),
            (large_memory.size(), Some("target"))
        );
    }
    // SAFETY: never used by the GPU.
    unsafe {
        allocator.destroy_buffer(small, small_memory).unwrap();
        allocator.destroy_buffer(large, large_memory).unwrap();
    }
    drop(allocator);
    let events = events.lock().unwrap();
    for (kind, memory, ..) in events
        .iter()
        .filter(|(kind, ..)| *kind == MemoryEventKind::Allocated)
    {
        let freed = events
            .iter()
            .filter(|(k, m, ..)| *k == MemoryEventKind::Freed && m == memory)
            .count();
        assert_eq!(freed, 1, "{kind:?} {memory:?}");
    }
}

/// The granule the fake layer rounds buffer requirement sizes up to on
/// `profile` (its `buffer_size_granule`, modelled on the real drivers:
/// NVIDIA 16 bytes); 1 on lavapipe, which keeps the buffer's size.
fn buffer_size_granule(profile: Profile) -> u64 {
    match profile {
        Profile::Lavapipe | Profile::Integrated | Profile::Apple | Profile::Mali => 1,
        Profile::Amd | Profile::Arc => 4,
        Profile::Discrete | Profile::Rebar => 16,
        Profile::Mobile => 64,
    }
}

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
    /// A driver that prefers dedicated memory for a resource gets it from
    /// the create-and-bind helpers, unless the caller said `Never`; one that
    /// requires it always gets it. The validation layer checks every bind
    /// against what the driver reported.
    fn driver_dedicated_requirements_are_honoured(profile) {
        for (mode, required) in [("prefer", false), ("require", true)] {
            let options = ContextOptions::default().dedicated(mode);
            let context = VulkanContext::with_options(profile, options);
            // The fake driver prefers or requires dedicated memory for KiB-sized resources.
            context.allow(Advice::SmallMemory);
            let allocator = allocator_for(&context);
            let auto = AllocationDesc::new(Usage::DEVICE_LOCAL);
            let never = auto.dedicated(DedicatedPolicy::Never);
            // SAFETY: valid create infos; nothing is used by the GPU.
            unsafe {
                let (buffer, a) = allocator.create_buffer(&buffer_info(4096), &auto).unwrap();
                let (image, b) = allocator.create_image(&image_info(16, 16), &auto).unwrap();
                let (kept, c) = allocator.create_buffer(&buffer_info(4096), &never).unwrap();
                assert!(a.is_dedicated() && b.is_dedicated(), "{profile} {mode}");
                assert_eq!(c.is_dedicated(), required, "{profile} {mode}");
                allocator.destroy_buffer(buffer, a).unwrap();
                allocator.destroy_image(image, b).unwrap();
                allocator.destroy_buffer(kept, c).unwrap();
            }
            assert_eq!(allocator.stats().memory_objects, u32::from(!required));
            // Upload-ring chunks share blocks unless the driver requires
            // dedicated memory.
            let ring = allocator.create_upload_ring(&UploadRingDesc::default()).unwrap();
            let dedicated: u64 = allocator
                .stats()
                .memory_types
                .iter()
                .map(|t| t.dedicated_allocations)
                .sum();
            assert_eq!(dedicated, u64::from(required), "{profile} {mode}");
            allocator.destroy_upload_ring(ring).unwrap();
        }
    }
);

test_each_profile!(
    /// Engines that create their own resources: `allocate_for_buffer` and
    /// `allocate_for_image` request what `create_buffer` / `create_image`
    /// would (the driver's dedicated memory, made for that resource; device
    /// addresses), and the caller's own binds pass validation. On the fake
    /// profiles the driver also prefers, then requires, dedicated memory.
    fn memory_for_resources_the_caller_created(profile) {
        let modes: &[Option<&'static str>] = match profile {
            Profile::Lavapipe => &[None],
            _ => &[None, Some("prefer"), Some("require")],
        };
        for &mode in modes {
            let options = match mode {
                Some(mode) => ContextOptions::default().dedicated(mode),
                None => ContextOptions::default(),
            };
            let context = VulkanContext::with_options(profile, options);
            if mode.is_some() {
                // The fake driver's dedicated memory for KiB-sized resources.
                context.allow(Advice::SmallMemory);
            }
            let allocator = allocator_for(&context);
            let device = &context.device;
            let desc = AllocationDesc::new(Usage::DEVICE_LOCAL).name("own");
            let buffer_info = buffer_info(4096).usage(
                vk::BufferUsageFlags::STORAGE_BUFFER | vk::BufferUsageFlags::SHADER_DEVICE_ADDRESS,
            );
            let image_info = image_info(32, 32);
            let linear_info = image_info.tiling(vk::ImageTiling::LINEAR);
            // SAFETY: valid create infos; each resource is bound once, to
            // memory allocated for it, and never used by the GPU.
            unsafe {
                let buffer = device.create_buffer(&buffer_info, None).unwrap();
                let image = device.create_image(&image_info, None).unwrap();
                let linear = device.create_image(&linear_info, None).unwrap();
                let a = allocator.allocate_for_buffer(buffer, buffer_info.usage, &desc).unwrap();
                let b = allocator.allocate_for_image(image, image_info.tiling, &desc).unwrap();
                let c = allocator.allocate_for_image(linear, linear_info.tiling, &desc).unwrap();
                for allocation in [&a, &b, &c] {
                    assert_eq!(allocation.is_dedicated(), mode.is_some(), "{profile} {mode:?}");
                }
                // The tiling decides the kind, for bufferImageGranularity.
                let map = allocator.memory_map();
                let kind_of = |allocation: &Allocation| {
                    let memory_type = &map.memory_types[allocation.memory_type() as usize];
                    let in_blocks = memory_type.blocks.iter().filter(|block| block.memory == allocation.memory());
                    let ranges = in_blocks.flat_map(|block| &block.ranges).filter(|r| r.offset == allocation.offset());
                    let dedicated = memory_type.dedicated.iter().filter(|d| d.memory == allocation.memory());
                    ranges.map(|r| r.kind).chain(dedicated.map(|d| d.kind)).next()
                };
                assert_eq!(kind_of(&b), Some(RangeKind::ImageOptimal), "{profile} {mode:?}");
                assert_eq!(kind_of(&c), Some(RangeKind::ImageLinear), "{profile} {mode:?}");
                device.bind_buffer_memory(buffer, a.memory(), a.offset()).unwrap();
                device.bind_image_memory(image, b.memory(), b.offset()).unwrap();
                device.bind_image_memory(linear, c.memory(), c.offset()).unwrap();
                // Its memory was allocated with the device-address flag
                // (VUID-vkBindBufferMemory-bufferDeviceAddress-03339, which
                // the validation layer checked on the bind above).
                let address = device.get_buffer_device_address(
                    &vk::BufferDeviceAddressInfo::default().buffer(buffer),
                );
                assert_ne!(address, 0, "{profile} {mode:?}");
                allocator.destroy_buffer(buffer, a).unwrap();
                allocator.destroy_image(image, b).unwrap();
                allocator.destroy_image(linear, c).unwrap();
            }
            assert_eq!(allocator.stats().allocations(), 0);
        }
    }
);

test_each_profile!(
    /// `min_alignment` aligns the offset in the memory object: buffers made
    /// by `create_buffer` between small unaligned ones start on multiples of
    /// it, and so do their device addresses up to the alignment of the
    /// memory object's own address, which is the driver's (lavapipe's
    /// memory starts on 4 KiB host pages).
    fn min_alignment_aligns_device_addresses(profile) {
        let context = VulkanContext::new(profile);
        let allocator = allocator_for(&context);
        let device = &context.device;
        let info = buffer_info(1000).usage(
            vk::BufferUsageFlags::STORAGE_BUFFER | vk::BufferUsageFlags::SHADER_DEVICE_ADDRESS,
        );
        let plain = AllocationDesc::new(Usage::DEVICE_LOCAL | Usage::DEVICE_ADDRESS);
        let mut live = Vec::new();
        for shift in [8u32, 12, 16, 10, 14] {
            let alignment = 1u64 << shift;
            // SAFETY: valid create infos; the buffers are never used by the GPU.
            unsafe {
                live.push(allocator.create_buffer(&info, &plain).unwrap());
                let (buffer, allocation) =
                    allocator.create_buffer(&info, &plain.min_alignment(alignment)).unwrap();
                let address =
                    device.get_buffer_device_address(&vk::BufferDeviceAddressInfo::default().buffer(buffer));
                assert_eq!(allocation.offset() % alignment, 0, "{profile}");
                assert_eq!(address % alignment.min(4096), 0, "{profile}: address {address:#x}");
                live.push((buffer, allocation));
            }
        }
        // SAFETY: never used by the GPU.
        unsafe {
            for (buffer, allocation) in live {
                allocator.destroy_buffer(buffer, allocation).unwrap();
            }
        }
    }
);

/// A device-address buffer on a device whose allocator was not told of
/// buffer device address: its memory would lack
/// `VK_MEMORY_ALLOCATE_DEVICE_ADDRESS_BIT` (binding it breaks
/// VUID-vkBindBufferMemory-bufferDeviceAddress-03339), so `create_buffer`
/// and `allocate_for_buffer` refuse it, from the buffer's usage alone; and
/// `memory_type_for_buffer` names no type for such buffers (a custom pool
/// of the type it named would hold memory they cannot bind to).
#[test]
fn a_device_address_buffer_needs_buffer_device_address() {
    let context = VulkanContext::new(Profile::Lavapipe);
    // Buffer device address, enabled on the device, is only left unused.
    let features = DeviceFeatures {
        debug_utils: true,
        ..DeviceFeatures::default()
    };
    let allocator = allocator_with(&context, features);
    let info = buffer_info(4096).usage(vk::BufferUsageFlags::SHADER_DEVICE_ADDRESS);
    let desc = AllocationDesc::new(Usage::DEVICE_LOCAL);
    // SAFETY: a valid create info; the buffer is never bound or used.
    unsafe {
        let created = allocator.create_buffer(&info, &desc);
        assert!(
            matches!(created, Err(Error::NoSuitableMemoryType { .. })),
            "{created:?}"
        );
        let buffer = context.device.create_buffer(&info, None).unwrap();
        let allocated = allocator.allocate_for_buffer(buffer, info.usage, &desc);
        assert!(
            matches!(allocated, Err(Error::NoSuitableMemoryType { .. })),
            "{allocated:?}"
        );
        context.device.destroy_buffer(buffer, None);
        let for_pool = allocator.memory_type_for_buffer(&info, Usage::DEVICE_LOCAL);
        assert!(
            matches!(for_pool, Err(Error::NoSuitableMemoryType { .. })),
            "{for_pool:?}"
        );
        let plain = allocator.memory_type_for_buffer(&buffer_info(4096), Usage::DEVICE_LOCAL);
        assert!(plain.is_ok(), "{plain:?}");
    }
    assert_eq!(allocator.stats().allocations(), 0);
}

/// An aliasing buffer with `SHADER_DEVICE_ADDRESS` usage, on an allocator
/// not told of buffer device address (enabled on the device): the
/// allocation's memory lacks `VK_MEMORY_ALLOCATE_DEVICE_ADDRESS_BIT`, so
/// binding the alias would break
/// VUID-vkBindBufferMemory-bufferDeviceAddress-03339; it is refused, and
/// the buffer destroyed. A plain alias of the same allocation is made.
#[test]
fn a_device_address_alias_needs_buffer_device_address() {
    let context = VulkanContext::new(Profile::Lavapipe);
    let features = DeviceFeatures {
        debug_utils: true,
        ..DeviceFeatures::default()
    };
    let allocator = allocator_with(&context, features);
    let desc = AllocationDesc::new(Usage::DEVICE_LOCAL);
    let address_info = buffer_info(4096)
        .usage(vk::BufferUsageFlags::STORAGE_BUFFER | vk::BufferUsageFlags::SHADER_DEVICE_ADDRESS);
    // SAFETY: valid create infos; nothing is used by the GPU, and the alias
    // is destroyed before the allocation is freed.
    unsafe {
        let (buffer, allocation) = allocator.create_buffer(&buffer_info(4096), &desc).unwrap();
        let refused = allocator.create_aliasing_buffer(&allocation, 0, &address_info);
        assert!(matches!(refused, Err(Error::CannotAlias(_))), "{refused:?}");
        let plain = allocator
            .create_aliasing_buffer(&allocation, 0, &buffer_info(4096))
            .unwrap();
        context.device.destroy_buffer(plain, None);
        allocator.destroy_buffer(buffer, allocation).unwrap();
    }
}

test_each_fake_profile!(
    /// Small buffers and small optimal images, interleaved in one memory
    /// type, share blocks but never a page. Real drivers align optimal
    /// images to at least the granularity, which would keep them off shared
    /// pages by itself; here images are aligned to 256 only, below every
    /// profile's granularity but the integrated one's (64).
    fn buffers_never_share_a_page_with_optimal_images(profile) {
        let options = ContextOptions::default().image_alignment(256);
        let context = VulkanContext::with_options(profile, options);
        let allocator = allocator_for(&context);
        let desc = AllocationDesc::new(Usage::DEVICE_LOCAL);
        let mut buffers = Vec::new();
        let mut images = Vec::new();
        for i in 0..64u32 {
            let side = 16 << (i % 3);
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

test_each_fake_profile!(
    /// The driver fails the first `vkAllocateMemory`: the allocator retries
    /// with a smaller block, silently for the validation layer.
    fn a_failed_allocation_retries_smaller(profile) {
        let context = VulkanContext::with_options(profile, ContextOptions::default().fail_allocation(1));
        // The layer fails vkAllocateMemory on purpose.
        context.allow(Advice::FailingCalls);
        let allocator = allocator_for(&context);
        let (handle, allocation) = buffer(&allocator, 64 << 10, AllocationDesc::new(Usage::DEVICE_LOCAL));
        let stats = allocator.stats();
        assert_eq!(stats.memory_objects, 1);
        let block = stats.memory_types[allocation.memory_type() as usize].block_bytes;
        let heap = context.memory_properties().memory_heaps[0].size;
        let first_block = if heap > 1 << 30 { 32 * MIB } else { heap / 64 };
        assert_eq!(block, first_block / 2, "{profile}: retried at half the size");
        // SAFETY: never used by the GPU.
        unsafe { allocator.destroy_buffer(handle, allocation) }.unwrap();
    }
);

test_each_fake_profile!(
    /// Filling device-local memory moves on to smaller blocks, dedicated
    /// memory and the next memory type; when every type is full the error is
    /// typed. The validation layer sees nothing wrong on the way.
    fn exhausting_a_heap_falls_back_in_order(profile) {
        let context = VulkanContext::new(profile);
        // The heap runs out on purpose.
        context.allow(Advice::FailingCalls);
        let allocator = allocator_for(&context);
        let mut live = Vec::new();
        let mut types = Vec::new();
        let error = loop {
            // SAFETY: a valid create info.
            match unsafe { allocator.create_buffer(&buffer_info(24 * MIB), &AllocationDesc::new(Usage::DEVICE_LOCAL)) } {
                Ok((handle, allocation)) => {
                    if types.last() != Some(&allocation.memory_type()) {
                        types.push(allocation.memory_type());
                    }
                    live.push((handle, allocation));
                }
                Err(error) => break error,
            }
            assert!(live.len() < 1000, "{profile}: never ran out");
        };
        assert_eq!(error, Error::OutOfDeviceMemory, "{profile}");
        match profile {
            // VRAM, then the BAR, then system memory.
            // (Type 2 shares the system heap with type 1, so it is full too.)
            Profile::Discrete => assert_eq!(types, vec![0, 3, 1]),
            // The same, and never AMD's device-coherent duplicates (4-7),
            // which the validation layer would report.
            Profile::Amd => assert_eq!(types, vec![0, 2, 1]),
            // VRAM, then system memory: the host-visible VRAM type (3)
            // shares the full heap.
            Profile::Rebar => assert_eq!(types, vec![0, 1]),
            // VRAM, then the 256 MiB BAR, then (cached) system memory.
            Profile::Arc => assert_eq!(types, vec![0, 2, 1]),
            // One heap: every type shares it, so the first one fills it.
            _ => assert_eq!(types[0], 0),
        }
        // SAFETY: never used by the GPU.
        unsafe {
            for (handle, allocation) in live {
                allocator.destroy_buffer(handle, allocation).unwrap();
            }
        }
        allocator.trim();
        assert_eq!(allocator.stats().memory_objects, 0);
    }
);

test_each_fake_profile!(
    /// With `maxMemoryAllocationCount` at 8 the allocator refuses the 9th
    /// memory object itself: a typed error and no VUID-...-04101.
    fn too_many_objects_is_a_typed_error(profile) {
        let context = VulkanContext::with_options(profile, ContextOptions::default().max_allocations(8));
        // KiB-sized dedicated buffers count the memory objects.
        context.allow(Advice::SmallMemory);
        let allocator = allocator_for(&context);
        let desc = AllocationDesc::new(Usage::DEVICE_LOCAL).dedicated(DedicatedPolicy::Always);
        let mut live = Vec::new();
        let error = loop {
            // SAFETY: a valid create info.
            match unsafe { allocator.create_buffer(&buffer_info(4096), &desc) } {
                Ok(pair) => live.push(pair),
                Err(error) => break error,
            }
        };
        assert_eq!(error, Error::TooManyObjects(8));
        assert_eq!(live.len(), 8);
        // SAFETY: never used by the GPU.
        unsafe {
            for (handle, allocation) in live {
                allocator.destroy_buffer(handle, allocation).unwrap();
            }
        }
    }
);

test_each_fake_profile!(
    /// Budgets come from `VK_EXT_memory_budget` and follow the allocator.
    fn budgets_match_the_driver(profile) {
        let context = VulkanContext::new(profile);
        let allocator = allocator_for(&context);
        let (handle, allocation) = buffer(&allocator, MIB, AllocationDesc::new(Usage::DEVICE_LOCAL));
        let ours = allocator.budgets();
        match context.memory_budget() {
            Some(driver) => {
                assert_eq!(ours.len(), driver.len());
                for (heap, (a, b)) in ours.iter().zip(&driver).enumerate() {
                    assert_eq!((a.budget, a.usage), (b.budget, b.usage), "{profile} heap {heap}");
                }
                let heap = context.memory_properties().memory_types[allocation.memory_type() as usize].heap_index;
                assert!(ours[heap as usize].usage >= allocator.stats().heaps[heap as usize].reserved_bytes);
            }
            None => assert!(ours.iter().all(|b| b.budget > 0)),
        }
        // SAFETY: never used by the GPU.
        unsafe { allocator.destroy_buffer(handle, allocation) }.unwrap();
    }
);

test_each_profile!(
    /// Images land only in memory types their `memoryTypeBits` allow, for
    /// every usage that has such a type.
    fn images_stay_in_their_types(profile) {
        let context = VulkanContext::new(profile);
        let allocator = allocator_for(&context);
        let info = image_info(64, 64);
        // SAFETY: a valid create info; the probe image is destroyed below.
        let bits = unsafe {
            let probe = context.device.create_image(&info, None).unwrap();
            let requirements = context.device.get_image_memory_requirements(probe);
            context.device.destroy_image(probe, None);
            requirements.memory_type_bits
        };
        for usage in [Usage::DEVICE_LOCAL, Usage::READBACK, Usage::UPLOAD | Usage::DEVICE_LOCAL] {
            // SAFETY: a valid create info.
            match unsafe { allocator.create_image(&info, &AllocationDesc::new(usage)) } {
                Ok((image, allocation)) => {
                    assert!(bits & (1 << allocation.memory_type()) != 0, "{profile} {usage:?}");
                    // SAFETY: never used by the GPU.
                    unsafe { allocator.destroy_image(image, allocation) }.unwrap();
                }
                Err(error) => assert!(matches!(error, Error::NoSuitableMemoryType { .. }), "{error:?}"),
            }
        }
    }
);

/// Sparse and disjoint resources are bound by region or by plane, which the
/// create-and-bind helpers do not do: a typed error before anything is
/// created, so the validation layer sees no call at all.
#[test]
fn sparse_and_disjoint_resources_are_refused_up_front() {
    let context = VulkanContext::new(Profile::Lavapipe);
    let allocator = allocator_for(&context);
    let desc = AllocationDesc::new(Usage::DEVICE_LOCAL);
    let sparse_buffer = buffer_info(4096).flags(vk::BufferCreateFlags::SPARSE_BINDING);
    // SAFETY: refused before any Vulkan call (lavapipe has no sparse binding).
    let result = unsafe { allocator.create_buffer(&sparse_buffer, &desc) };
    assert!(
        matches!(result, Err(Error::UnsupportedResource(_))),
        "{result:?}"
    );
    for flags in [
        vk::ImageCreateFlags::SPARSE_BINDING,
        vk::ImageCreateFlags::DISJOINT,
    ] {
        let info = image_info(64, 64).flags(flags);
        // SAFETY: refused before any Vulkan call.
        let result = unsafe { allocator.create_image(&info, &desc) };
        assert!(
            matches!(result, Err(Error::UnsupportedResource(_))),
            "{flags:?}: {result:?}"
        );
    }
    assert_eq!(allocator.stats().memory_objects, 0);
}

#[test]
fn debug_names_reach_the_validation_layer() {
    let context = VulkanContext::new(Profile::Lavapipe);
    // A KiB-sized dedicated buffer carries a name.
    context.allow(Advice::SmallMemory);
    let allocator = allocator_for(&context);
    let (block_buffer, block_allocation) =
        buffer(&allocator, 4096, AllocationDesc::new(Usage::UPLOAD));
    let dedicated = AllocationDesc::new(Usage::UPLOAD)
        .name("hero texture")
        .dedicated(DedicatedPolicy::Always);
    let (own_buffer, own_allocation) = buffer(&allocator, 4096, dedicated);
    for memory in [block_allocation.memory(), own_allocation.memory()] {
        // Mapping memory the allocator keeps mapped is an error the layer
        // reports, naming the memory object.
        // SAFETY: deliberately invalid (already mapped): the validation layer
        // reports it; lavapipe just returns the same pointer again.
        let _ = unsafe {
            context
                .device
                .map_memory(memory, 0, 64, vk::MemoryMapFlags::empty())
        };
    }
    let messages = context.expect_validation_messages(&["VUID-vkMapMemory-memory-00678"]);
    let all = messages.join("\n");
    // Blocks are named "vk-suballoc block <memory type>/<index>".
    let block_name = format!("vk-suballoc block {}/0", block_allocation.memory_type());
    assert!(all.contains(&block_name), "{all}");
    assert!(all.contains("hero texture"), "{all}");
    // SAFETY: never used by the GPU.
    unsafe {
        allocator
            .destroy_buffer(block_buffer, block_allocation)
            .unwrap();
        allocator
            .destroy_buffer(own_buffer, own_allocation)
            .unwrap();
    }
}

/// `set_name` on dedicated memory renames the `VkDeviceMemory` for the
/// validation layer, without a message of its own: to the new name, then,
/// for `None`, to the name unnamed dedicated memory is made with.
#[test]
fn renamed_dedicated_memory_reaches_the_validation_layer() {
    let context = VulkanContext::new(Profile::Lavapipe);
    // A KiB-sized dedicated buffer carries a name.
    context.allow(Advice::SmallMemory);
    let allocator = allocator_for(&context);
    let dedicated = AllocationDesc::new(Usage::UPLOAD)
        .name("before rename")
        .dedicated(DedicatedPolicy::Always);
    let (handle, allocation) = buffer(&allocator, 4096, dedicated);
    // Mapping memory the allocator keeps mapped is an error the layer
    // reports, naming the memory object.
    let map_again = || {
        // SAFETY: deliberately invalid (already mapped): the validation
        // layer reports it; lavapipe just returns the same pointer again.
        let _ = unsafe {
            context
                .device
                .map_memory(allocation.memory(), 0, 64, vk::MemoryMapFlags::empty())
        };
        context
            .expect_validation_messages(&["VUID-vkMapMemory-memory-00678"])
            .join("\n")
    };

    allocator
        .set_name(&allocation, Some("after rename"))
        .unwrap();
    context.assert_no_validation_messages();
    let all = map_again();
    assert!(all.contains("after rename"), "{all}");
    assert!(!all.contains("before rename"), "{all}");

    allocator.set_name(&allocation, None).unwrap();
    context.assert_no_validation_messages();
    let all = map_again();
    let unnamed = format!("vk-suballoc dedicated {}/", allocation.memory_type());
    assert!(all.contains(&unnamed), "{all}");
    assert!(!all.contains("after rename"), "{all}");

    // A name with a NUL byte ends there, as a C string does.
    allocator
        .set_name(&allocation, Some("cut here\0not this"))
        .unwrap();
    let all = map_again();
    assert!(all.contains("cut here"), "{all}");
    assert!(
        !all.contains("not this") && !all.contains(&unnamed),
        "{all}"
    );
    // SAFETY: never used by the GPU.
    unsafe { allocator.destroy_buffer(handle, allocation).unwrap() };
}

/// With the ash backend, dumps name the GPU as
/// `vkGetPhysicalDeviceProperties` does, without `MemoryMap::with_gpu`.
#[test]
fn dumps_name_the_gpu() {
    let context = VulkanContext::new(Profile::Lavapipe);
    let allocator = allocator_for(&context);
    let expected = GpuInfo::from(&context.properties());
    assert!(!expected.name.is_empty());
    assert_eq!(allocator.memory_map().gpu.as_ref(), Some(&expected));
    let json = allocator.stats_json(false);
    let escaped = expected.name.replace('\\', "\\\\").replace('"', "\\\"");
    assert!(json.contains(&format!("\"GPU\": \"{escaped}\"")), "{json}");
    assert!(!json.contains("\"unknown\""), "{json}");
}

test_each_fake_profile!(
    /// The driver fails the block and its smaller retry: the request gets
    /// dedicated memory (or, where it is dedicated anyway, the next type).
    fn failed_blocks_fall_back_to_dedicated_memory(profile) {
        let options = ContextOptions::default().fail_allocation(1).fail_allocation(2);
        let context = VulkanContext::with_options(profile, options);
        // The layer fails vkAllocateMemory on purpose.
        context.allow(Advice::FailingCalls);
        let allocator = allocator_for(&context);
        let (handle, allocation) = buffer(&allocator, 20 * MIB, AllocationDesc::new(Usage::DEVICE_LOCAL));
        match profile {
            // 20 MiB wants a 64 MiB block; 64 and 32 fail; 16 is too small.
            Profile::Discrete
            | Profile::Integrated
            | Profile::Amd
            | Profile::Rebar
            | Profile::Arc
            | Profile::Apple
            | Profile::Mali => {
                assert!(allocation.is_dedicated(), "{profile}");
                assert_eq!(allocation.memory_type(), 0);
            }
            // Half the mobile heap's 32 MiB blocks: dedicated first (fails),
            // then a block (fails), then the next type.
            _ => assert_ne!(allocation.memory_type(), 0),
        }
        // SAFETY: never used by the GPU.
        unsafe { allocator.destroy_buffer(handle, allocation) }.unwrap();
    }
);
