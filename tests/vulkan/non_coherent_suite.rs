//! Host access to non-coherent memory under the validation layer: every
//! flush and invalidate the allocator makes is a valid `VkMappedMemoryRange`
//! (offset on a `nonCoherentAtomSize` boundary, size a multiple of it or
//! reaching the end of the memory), and its widening to atoms stays off the
//! neighbours packed beside it in the same memory object. The fake-memory
//! layer's host cache loses host writes that are not flushed and GPU writes
//! that are not invalidated, and an invalidate refills exactly the bytes it
//! names, so a range that reached a neighbour shows in its bytes.

use ash::vk;
use vk_suballoc::device::AshMemoryDevice;
use vk_suballoc::{Allocation, AllocationDesc, Allocator, DedicatedPolicy, PoolDesc, Usage};

use super::allocator_setup::{allocator_for, buffer_info, memory_barrier, TRANSFER_TO_HOST};
use crate::support::{test_profiles, Advice, VulkanContext};

/// Buffer sizes (multiples of 4, for `vkCmdFillBuffer`): small buffers in
/// run slots, sizes off every profile's atom, ranges of their own.
const SIZES: [u64; 10] = [4, 12, 20, 100, 252, 260, 1000, 5000, 20_000, 70_000];

/// The first host-visible memory type that is not host-coherent.
fn non_coherent_type(context: &VulkanContext) -> u32 {
    let properties = context.memory_properties();
    let types = &properties.memory_types[..properties.memory_type_count as usize];
    let flags = |t: &vk::MemoryType| t.property_flags;
    types
        .iter()
        .position(|t| {
            flags(t).contains(vk::MemoryPropertyFlags::HOST_VISIBLE)
                && !flags(t).contains(vk::MemoryPropertyFlags::HOST_COHERENT)
        })
        .expect("the profile has a non-coherent host-visible type") as u32
}

/// The GPU fills buffer `i` of `buffers` with `value(i)` where `which(i)`.
fn gpu_fill(
    context: &VulkanContext,
    buffers: &[(vk::Buffer, Allocation, u64)],
    which: impl Fn(usize) -> bool,
    value: impl Fn(usize) -> u8,
) {
    context.run_one_time_commands(|device, cmd| {
        // SAFETY: the buffers belong to `device` and are bound, with
        // TRANSFER_DST usage; the barrier orders the fills before the host
        // reads.
        unsafe {
            for (i, (buffer, _, _)) in buffers.iter().enumerate().filter(|(i, _)| which(*i)) {
                let word = u32::from_ne_bytes([value(i); 4]);
                device.cmd_fill_buffer(cmd, *buffer, 0, vk::WHOLE_SIZE, word);
            }
            let (src, dst) = TRANSFER_TO_HOST;
            memory_barrier(device, cmd, src, dst);
        }
    });
}

/// The first `len` bytes of `allocation` as the host sees them now.
fn host_bytes<'a>(
    allocator: &'a Allocator<AshMemoryDevice>,
    allocation: &'a Allocation,
    len: u64,
) -> &'a [u8] {
    &allocator.mapped_slice(allocation).unwrap()[..len as usize]
}

test_profiles!(
    [discrete => Discrete, mobile => Mobile, apple => Apple]
    /// Buffers pinned to the profile's non-coherent type (apple's managed
    /// storage, listed before its coherent type; the cached types of the
    /// discrete and mobile profiles), packed into one block (run slots and
    /// ranges) and one dedicated, are written by the host and the GPU in
    /// turn: an invalidate of one keeps its neighbours' unflushed host
    /// writes, a flush of one does not write its neighbours' stale host
    /// bytes over what the GPU wrote there, and what is flushed and
    /// invalidated arrives. No range breaks a `VkMappedMemoryRange` rule.
    fn non_coherent_neighbours_keep_their_bytes(profile) {
        let context = VulkanContext::new(profile);
        let allocator = allocator_for(&context);
        let memory_type = non_coherent_type(&context);
        let mut buffers = Vec::new();
        for (i, &len) in SIZES.iter().cycle().take(24).enumerate() {
            let policy = if i == 7 { DedicatedPolicy::Always } else { DedicatedPolicy::Auto };
            let desc = AllocationDesc::new(Usage::READBACK)
                .memory_type_bits(1 << memory_type)
                .dedicated(policy);
            // One KiB-sized buffer gets dedicated memory on purpose: small
            // memory allowed for that call alone, not for the block.
            let small: &[Advice] = if i == 7 { &[Advice::SmallMemory] } else { &[] };
            // SAFETY: a valid create info.
            let (buffer, allocation) =
                context.allowing(small, || unsafe { allocator.create_buffer(&buffer_info(len), &desc) }).unwrap();
            assert_eq!(allocation.memory_type(), memory_type, "{profile}");
            buffers.push((buffer, allocation, len));
        }
        let shared = buffers.iter().filter(|(_, a, _)| a.memory() == buffers[0].1.memory()).count();
        assert!(shared > SIZES.len(), "{profile}: {shared} buffers in the first block");
        assert!(buffers[7].1.is_dedicated(), "{profile}");

        let even = |i: usize| i % 2 == 0;
        let odd = |i: usize| i % 2 == 1;
        // The GPU writes every buffer; the host writes the odd ones and
        // flushes nothing yet.
        gpu_fill(&context, &buffers, |_| true, |i| 0x80 + i as u8);
        for (i, (_, allocation, len)) in buffers.iter_mut().enumerate().filter(|(i, _)| odd(*i)) {
            allocator.mapped_slice_mut(allocation).unwrap()[..*len as usize].fill(i as u8);
        }
        // Invalidating the even ones (whole, or short of both ends) shows
        // the GPU's bytes there and keeps the odd ones' host writes.
        for (i, (_, allocation, len)) in buffers.iter_mut().enumerate().filter(|(i, _)| even(*i)) {
            let range = if i % 4 == 0 || *len < 3 { 0..*len } else { 1..*len - 1 };
            allocator.invalidate(allocation, range.clone()).unwrap();
            let bytes = &host_bytes(&allocator, allocation, *len)[range.start as usize..range.end as usize];
            assert!(bytes.iter().all(|&b| b == 0x80 + i as u8), "{profile}: buffer {i} missed the GPU's bytes");
        }
        for (i, (_, allocation, len)) in buffers.iter().enumerate().filter(|(i, _)| odd(*i)) {
            let bytes = host_bytes(&allocator, allocation, *len);
            assert!(bytes.iter().all(|&b| b == i as u8), "{profile}: buffer {i} lost host writes to a neighbour's invalidate");
        }
        // The GPU writes the even ones again (their host view is stale now),
        // then the odd ones are flushed: no flush may write a stale view
        // over an even neighbour.
        gpu_fill(&context, &buffers, even, |i| 0xc0 + i as u8);
        allocator
            .flush_allocations(buffers.iter().enumerate().filter(|(i, _)| odd(*i)).map(|(_, (_, a, len))| (a, 0..*len)))
            .unwrap();
        for (i, (_, allocation, len)) in buffers.iter_mut().enumerate() {
            allocator.invalidate(allocation, 0..*len).unwrap();
            let want = if odd(i) { i as u8 } else { 0xc0 + i as u8 };
            let bytes = host_bytes(&allocator, allocation, *len);
            assert!(bytes.iter().all(|&b| b == want), "{profile}: buffer {i}: {:?}, want {want}", &bytes[..4]);
        }
        // SAFETY: the fills completed (run_one_time_commands waits).
        unsafe {
            for (buffer, allocation, _) in buffers {
                allocator.destroy_buffer(buffer, allocation).unwrap();
            }
        }
        context.assert_no_validation_messages();
    }
);

test_profiles!(
    [discrete => Discrete, mobile => Mobile, apple => Apple]
    /// `copy_to_allocation` and `copy_from_allocation` flush and invalidate
    /// for the caller in the non-coherent type (apple's READBACK takes its
    /// coherent type, so only pinned buffers reach its managed storage),
    /// for pieces that start and end off the atom.
    fn copies_flush_and_invalidate_non_coherent_memory(profile) {
        let context = VulkanContext::new(profile);
        let allocator = allocator_for(&context);
        let memory_type = non_coherent_type(&context);
        let desc = AllocationDesc::new(Usage::READBACK).memory_type_bits(1 << memory_type);
        let len = 1000u64;
        let bytes: Vec<u8> = (0..len).map(|i| (i * 7 + 3) as u8).collect();
        // SAFETY: valid create infos.
        let (source, mut source_memory) = unsafe { allocator.create_buffer(&buffer_info(len), &desc) }.unwrap();
        // SAFETY: as above.
        let (target, mut target_memory) = unsafe { allocator.create_buffer(&buffer_info(len), &desc) }.unwrap();
        assert_eq!(source_memory.memory_type(), memory_type, "{profile}");
        // Written in three pieces, none starting on an atom but the first.
        for piece in [0..333usize, 333..334, 334..1000] {
            allocator.copy_to_allocation(&mut source_memory, piece.start as u64, &bytes[piece]).unwrap();
        }
        context.run_one_time_commands(|device, cmd| {
            // SAFETY: both buffers belong to `device` and are bound; the
            // barrier orders the copy before the host read.
            unsafe {
                let region = [vk::BufferCopy { src_offset: 0, dst_offset: 0, size: len }];
                device.cmd_copy_buffer(cmd, source, target, &region);
                let (src, dst) = TRANSFER_TO_HOST;
                memory_barrier(device, cmd, src, dst);
            }
        });
        let mut out = vec![0u8; len as usize];
        allocator.copy_from_allocation(&mut target_memory, 0, &mut out[..17]).unwrap();
        allocator.copy_from_allocation(&mut target_memory, 17, &mut out[17..]).unwrap();
        assert_eq!(out, bytes, "{profile}");
        // SAFETY: the copy completed (run_one_time_commands waits).
        unsafe {
            allocator.destroy_buffer(source, source_memory).unwrap();
            allocator.destroy_buffer(target, target_memory).unwrap();
        }
        context.assert_no_validation_messages();
    }
);

test_profiles!(
    [discrete => Discrete, mobile => Mobile]
    /// An upload ring in the profile's non-coherent type (`READBACK`
    /// takes it on these two), its allocations packed off the atom: bytes
    /// copied in by `ring_write`, and bytes written in place through
    /// `mapped_ptr` and flushed by `ring_flush`, reach the GPU, which copies
    /// them into a buffer the host reads back; the flushes are valid
    /// `VkMappedMemoryRange`s. (The layer's host cache drops bytes that are
    /// not flushed.)
    fn ring_writes_and_ring_flushes_reach_the_gpu(profile) {
        let context = VulkanContext::new(profile);
        let allocator = allocator_for(&context);
        let memory_type = non_coherent_type(&context);
        let ring = allocator
            .create_upload_ring(&vk_suballoc::UploadRingDesc {
                size: 256 << 10,
                usage: Usage::READBACK,
                ..vk_suballoc::UploadRingDesc::default()
            })
            .unwrap();
        let mut pieces = Vec::new();
        for (i, &len) in SIZES.iter().enumerate() {
            let piece = allocator.ring_allocate(ring, len, 4).unwrap();
            let bytes: Vec<u8> = (0..len).map(|b| (b as u8).wrapping_mul(3) ^ i as u8).collect();
            if i % 2 == 0 {
                allocator.ring_write(&piece, 0, &bytes).unwrap();
            } else {
                // SAFETY: inside the allocation, whose frame is live.
                unsafe {
                    std::ptr::copy_nonoverlapping(bytes.as_ptr(), piece.mapped_ptr().unwrap().as_ptr(), bytes.len());
                }
                allocator.ring_flush(&piece, ..).unwrap();
            }
            pieces.push((piece, bytes));
        }
        let total: u64 = SIZES.iter().sum();
        let desc = AllocationDesc::new(Usage::READBACK);
        // SAFETY: a valid create info.
        let (target, mut target_memory) = unsafe { allocator.create_buffer(&buffer_info(total), &desc) }.unwrap();
        context.run_one_time_commands(|device, cmd| {
            // SAFETY: the ring's buffer and the target belong to `device`
            // and are bound; the barrier orders the copies before the host
            // read.
            unsafe {
                let mut at = 0;
                for (piece, bytes) in &pieces {
                    let region = [vk::BufferCopy {
                        src_offset: piece.buffer_offset(),
                        dst_offset: at,
                        size: bytes.len() as u64,
                    }];
                    device.cmd_copy_buffer(cmd, piece.buffer(), target, &region);
                    at += bytes.len() as u64;
                }
                let (src, dst) = TRANSFER_TO_HOST;
                memory_barrier(device, cmd, src, dst);
            }
        });
        let mut out = vec![0u8; total as usize];
        allocator.copy_from_allocation(&mut target_memory, 0, &mut out).unwrap();
        let want: Vec<u8> = pieces.iter().flat_map(|(_, bytes)| bytes.iter().copied()).collect();
        assert_eq!(out, want, "{profile}: type {memory_type}");
        // SAFETY: the copies completed (run_one_time_commands waits).
        unsafe {
            allocator.destroy_buffer(target, target_memory).unwrap();
            allocator.collect_idle();
        }
        allocator.destroy_upload_ring(ring).unwrap();
        context.assert_no_validation_messages();
    }
);

/// The GPU copies the first `len` bytes of `source` into `target`, and the
/// host reads them back from `target`.
fn gpu_round_trip(
    context: &VulkanContext,
    allocator: &Allocator<AshMemoryDevice>,
    source: vk::Buffer,
    target: &mut (vk::Buffer, Allocation),
    len: u64,
) -> Vec<u8> {
    let target_buffer = target.0;
    context.run_one_time_commands(|device, cmd| {
        // SAFETY: both buffers belong to `device` and are bound, with
        // TRANSFER_SRC and TRANSFER_DST usage; the barrier orders the copy
        // before the host read.
        unsafe {
            let region = [vk::BufferCopy {
                src_offset: 0,
                dst_offset: 0,
                size: len,
            }];
            device.cmd_copy_buffer(cmd, source, target_buffer, &region);
            let (src, dst) = TRANSFER_TO_HOST;
            memory_barrier(device, cmd, src, dst);
        }
    });
    let mut out = vec![0u8; len as usize];
    allocator
        .copy_from_allocation(&mut target.1, 0, &mut out)
        .unwrap();
    out
}

test_profiles!(
    [discrete => Discrete, mobile => Mobile, apple => Apple]
    /// In a custom pool whose block size is not a multiple of
    /// `nonCoherentAtomSize`, a request whose size rounded to atoms passes
    /// the block size takes a whole block (`fit_to_block_size`), so the
    /// block's last allocation ends inside the memory's last, partial atom:
    /// `flush`, `invalidate` and `copy_to_allocation` of all of it widen the
    /// range to atoms and clamp it to the memory's end (else a
    /// `VkMappedMemoryRange` past the memory,
    /// VUID-VkMappedMemoryRange-size-00685), and the bytes arrive both ways.
    fn the_last_allocation_of_an_odd_sized_block_flushes_to_the_memory_end(profile) {
        let context = VulkanContext::new(profile);
        let allocator = allocator_for(&context);
        let memory_type = non_coherent_type(&context);
        let atom = context.properties().limits.non_coherent_atom_size;
        const BLOCK: u64 = (1 << 20) + 100;
        let pool = allocator.create_pool(&PoolDesc::new(memory_type).block_size(BLOCK)).unwrap();
        let desc = AllocationDesc::new(Usage::READBACK).pool(pool);
        // The longest buffer a block holds, as the profile's size granule
        // (and vkCmdFillBuffer's 4 bytes) let it be: longer ones are
        // refused as too large for the pool.
        let mut len = BLOCK / 4 * 4;
        let (buffer, mut last) = loop {
            // SAFETY: a valid create info; the buffer is destroyed below.
            match unsafe { allocator.create_buffer(&buffer_info(len), &desc) } {
                Ok(made) => break made,
                Err(error) => assert!(len > BLOCK - 256, "{profile}: {error:?}"),
            }
            len -= 4;
        };
        assert_eq!(allocator.memory_size(&last).unwrap(), BLOCK, "{profile}");
        assert!(!last.is_dedicated(), "{profile}");
        let end = last.offset() + last.size();
        assert!(
            end % atom != 0 && end.next_multiple_of(atom) > BLOCK,
            "{profile}: the allocation [{}, {end}) does not end in the block's last partial atom",
            last.offset()
        );
        let readback = AllocationDesc::new(Usage::READBACK);
        // SAFETY: a valid create info; the buffer is destroyed below.
        let mut target = unsafe { allocator.create_buffer(&buffer_info(len), &readback) }.unwrap();

        let bytes: Vec<u8> = (0..len).map(|i| (i * 13 + 5) as u8).collect();
        allocator.copy_to_allocation(&mut last, 0, &bytes).unwrap();
        assert!(gpu_round_trip(&context, &allocator, buffer, &mut target, len) == bytes, "{profile}: copy_to_allocation");

        allocator.mapped_slice_mut(&mut last).unwrap()[..len as usize].fill(0x5a);
        allocator.flush(&last, ..).unwrap();
        let out = gpu_round_trip(&context, &allocator, buffer, &mut target, len);
        assert!(out.iter().all(|&b| b == 0x5a), "{profile}: flush");

        let mut filled = vec![(buffer, last, len)];
        gpu_fill(&context, &filled, |_| true, |_| 0xa7);
        let (buffer, mut last, _) = filled.pop().unwrap();
        allocator.invalidate(&mut last, ..).unwrap();
        let bytes = host_bytes(&allocator, &last, len);
        assert!(bytes.iter().all(|&b| b == 0xa7), "{profile}: invalidate");
        // SAFETY: the GPU work completed (run_one_time_commands waits).
        unsafe {
            allocator.destroy_buffer(buffer, last).unwrap();
            allocator.destroy_buffer(target.0, target.1).unwrap();
        }
        allocator.destroy_pool(pool).unwrap();
        context.assert_no_validation_messages();
    }
);
