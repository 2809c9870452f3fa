//! Debug margins and corruption detection on a real driver, under the
//! validation layer, on every profile: buffers the helpers make in
//! host-visible coherent memory, filled by the GPU to exactly their size,
//! leave every margin intact; a host write one word past an allocation's
//! end is reported by `check_corruption`, and counted when the buffer is
//! destroyed. Types without detection are refused. With debug fills,
//! new buffers read `0xDC`, and the GPU's writes into a buffer freed and
//! made again are no write after free; in an upload ring, the GPU's write
//! into a ring allocation of its own frame is none either, and one into
//! ring space whose frame was collected is caught.

use ash::vk;
use vk_suballoc::device::AshMemoryDevice;
use vk_suballoc::{Allocation, AllocationDesc, Allocator, Config, Error, UploadRingDesc, Usage};

use super::allocator_setup::{
    allocator_configured, buffer_info, check_pattern, memory_barrier, IdleOnDrop, TRANSFER_TO_HOST,
};
use crate::support::{test_each_profile, Profile, VulkanContext};

const MARGIN: u64 = 64;

/// Buffer sizes, multiples of 4 as `vkCmdFillBuffer` needs: run slots, a
/// range, and a size no alignment divides.
const SIZES: [u64; 4] = [100, 4096, 70_000, 1_000];

fn config() -> Config {
    Config {
        debug_margin: MARGIN,
        detect_corruption: true,
        ..Config::default()
    }
}

/// Creates a buffer of `size` bytes for `usage`; panics on error.
fn buffer(
    allocator: &Allocator<AshMemoryDevice>,
    size: u64,
    usage: Usage,
) -> (vk::Buffer, Allocation) {
    // SAFETY: a valid create info (non-zero size, transfer usage).
    unsafe { allocator.create_buffer(&buffer_info(size), &AllocationDesc::new(usage)) }.unwrap()
}

/// The GPU fills each of `buffers` (one of each of [`SIZES`], in order)
/// with `0xA5`, to exactly its size, and the host reads that back.
fn fill_on_gpu(
    context: &VulkanContext,
    allocator: &Allocator<AshMemoryDevice>,
    buffers: &mut [(vk::Buffer, Allocation)],
    what: &str,
) {
    context.run_one_time_commands(|device, cmd| {
        // SAFETY: every buffer belongs to `device`, is bound, and has
        // TRANSFER_DST usage; the barrier orders the fills before host reads.
        unsafe {
            for (&size, (handle, _)) in SIZES.iter().zip(buffers.iter()) {
                device.cmd_fill_buffer(cmd, *handle, 0, size, 0xA5A5_A5A5);
            }
            let (src, dst) = TRANSFER_TO_HOST;
            memory_barrier(device, cmd, src, dst);
        }
    });
    for (&size, (_, allocation)) in SIZES.iter().zip(buffers) {
        check_pattern(allocator, allocation, size, &[0xA5; 4], what);
    }
}

/// The body of `gpu_fills_leave_margins_intact_and_overruns_are_reported`.
fn fills_and_overruns(profile: Profile) {
    let context = VulkanContext::new(profile);
    let allocator = allocator_configured(&context, config());
    let _idle = IdleOnDrop(&context.device);
    let memory_type = allocator.memory_type_for(!0, Usage::UPLOAD).unwrap();
    let flags = context.memory_properties().memory_types[memory_type as usize].property_flags;
    let what = format!("{profile}: UPLOAD type {memory_type} ({flags:?})");
    let coherent = vk::MemoryPropertyFlags::HOST_VISIBLE | vk::MemoryPropertyFlags::HOST_COHERENT;
    assert!(flags.contains(coherent), "{what}");

    let mut buffers: Vec<(vk::Buffer, Allocation)> = SIZES
        .iter()
        .map(|&size| buffer(&allocator, size, Usage::UPLOAD))
        .collect();
    assert!(buffers.iter().all(|(_, a)| !a.is_dedicated()), "{what}");
    assert!(
        buffers.iter().all(|(_, a)| a.memory_type() == memory_type),
        "{what}"
    );
    let report = allocator.check_corruption(!0).unwrap();
    assert!(report.is_clean(), "{what}: {report:?}");
    assert_eq!(report.checked, SIZES.len() as u64, "{what}");

    // The GPU fills each buffer, to exactly its size.
    fill_on_gpu(&context, &allocator, &mut buffers, &what);
    let report = allocator.check_corruption(1 << memory_type).unwrap();
    assert!(report.is_clean(), "{what}: after the fills: {report:?}");

    // The host writes one word past the end of the second allocation: in
    // its margin, inside its block.
    // Through the allocation's pointer: one from `mapped_slice_mut` may
    // reach only its slice's bytes.
    let (_, victim) = &buffers[1];
    let len = victim.size() as usize;
    let start = victim.mapped_ptr().unwrap().as_ptr();
    // SAFETY: the allocation is followed by at least MARGIN (64) bytes of
    // its block's persistent mapping that no other allocation overlaps
    // (Config::debug_margin); nothing else reads or writes them now.
    unsafe { start.add(len).cast::<u32>().write_unaligned(0xDEAD_BEEF) };
    let report = allocator.check_corruption(!0).unwrap();
    let found: Vec<_> = report
        .damaged
        .iter()
        .map(|d| (d.memory_type, d.memory, d.offset, d.size))
        .collect();
    let victim = &buffers[1].1;
    let want = (memory_type, victim.memory(), victim.offset(), victim.size());
    assert_eq!(found, [want], "{what}");
    assert!(report.damaged[0].margin >= MARGIN, "{what}");
    assert_eq!(allocator.corruptions_detected(), 0, "{what}");

    for (handle, allocation) in buffers {
        // SAFETY: the one-time commands waited for the GPU.
        unsafe { allocator.destroy_buffer(handle, allocation) }.unwrap();
    }
    assert_eq!(allocator.corruptions_detected(), 1, "{what}");
    assert!(allocator.check_corruption(!0).unwrap().is_clean(), "{what}");
    context.assert_no_validation_messages();
}

test_each_profile!(
    /// GPU fills of exactly each buffer's size leave its margin intact;
    /// a host write one word past an allocation's end is reported with
    /// its memory, offset and size, then counted when it is freed.
    fn gpu_fills_leave_margins_intact_and_overruns_are_reported(profile) {
        fills_and_overruns(profile);
    }
);

test_each_profile!(
    /// Memory types that are not host-visible and coherent have no
    /// detection: asking about them alone is an error, and their buffers
    /// still keep their margins.
    fn types_without_detection_are_refused(profile) {
        let context = VulkanContext::new(profile);
        let allocator = allocator_configured(&context, config());
        let properties = context.memory_properties();
        let count = properties.memory_type_count as usize;
        let coherent = vk::MemoryPropertyFlags::HOST_VISIBLE | vk::MemoryPropertyFlags::HOST_COHERENT;
        let usable = allocator.memory_type_for(!0, Usage::DEVICE_LOCAL).unwrap();
        for (memory_type, ty) in properties.memory_types[..count].iter().enumerate() {
            let bit = 1u32 << memory_type;
            let result = allocator.check_corruption(bit);
            // AMD's device-coherent types are never used without their
            // feature, which these devices never enable.
            let amd = vk::MemoryPropertyFlags::DEVICE_COHERENT_AMD;
            if ty.property_flags.contains(coherent) && !ty.property_flags.contains(amd) {
                assert!(result.is_ok(), "{profile}: type {memory_type}: {result:?}");
            } else {
                let off = Err(Error::CorruptionDetectionOff { memory_type_bits: bit });
                assert_eq!(result, off, "{profile}: type {memory_type}");
            }
        }
        let (first, a) = buffer(&allocator, 4096, Usage::DEVICE_LOCAL);
        let (second, b) = buffer(&allocator, 4096, Usage::DEVICE_LOCAL);
        assert_eq!(a.memory_type(), usable, "{profile}");
        if a.memory() == b.memory() {
            let (low, high) = if a.offset() < b.offset() { (&a, &b) } else { (&b, &a) };
            assert!(low.offset() + low.size() + MARGIN <= high.offset(), "{profile}: {low:?} {high:?}");
        }
        // SAFETY: nothing was submitted.
        unsafe {
            allocator.destroy_buffer(first, a).unwrap();
            allocator.destroy_buffer(second, b).unwrap();
        }
        context.assert_no_validation_messages();
    }
);

/// The body of `debug_fills_reach_new_buffers_and_freed_ones_stay_clean`.
fn debug_fills(profile: Profile) {
    let context = VulkanContext::new(profile);
    let config = Config {
        debug_fill: true,
        large_heap_block_size: 4 << 20,
        ..Config::default()
    };
    let allocator = allocator_configured(&context, config);
    let _idle = IdleOnDrop(&context.device);
    let what = format!("{profile}");
    let mut buffers: Vec<(vk::Buffer, Allocation)> = SIZES
        .iter()
        .map(|&size| buffer(&allocator, size, Usage::UPLOAD))
        .collect();
    for (_, allocation) in &buffers {
        let bytes = allocator.mapped_slice(allocation).unwrap();
        assert!(bytes.iter().all(|&b| b == 0xDC), "{what}: {allocation:?}");
    }
    // The GPU writes each buffer whole, then the buffers are destroyed
    // and made again: the same bytes, refilled, and nothing written after
    // its free.
    fill_on_gpu(&context, &allocator, &mut buffers, &what);
    for (handle, allocation) in buffers.drain(..) {
        // SAFETY: the one-time commands waited for the GPU.
        unsafe { allocator.destroy_buffer(handle, allocation) }.unwrap();
    }
    let report = allocator.check_corruption(!0).unwrap();
    assert!(
        report.is_clean() && report.free_checked > 0,
        "{what}: {report:?}"
    );
    buffers.extend(
        SIZES
            .iter()
            .map(|&size| buffer(&allocator, size, Usage::UPLOAD)),
    );
    for (_, allocation) in &buffers {
        let bytes = allocator.mapped_slice(allocation).unwrap();
        assert!(
            bytes.iter().all(|&b| b == 0xDC),
            "{what}: again: {allocation:?}"
        );
    }
    assert_eq!(allocator.corruptions_detected(), 0, "{what}");
    for (handle, allocation) in buffers {
        // SAFETY: nothing was submitted with the new buffers.
        unsafe { allocator.destroy_buffer(handle, allocation) }.unwrap();
    }
    assert!(allocator.check_corruption(!0).unwrap().is_clean(), "{what}");
    context.assert_no_validation_messages();
}

test_each_profile!(
    /// With `Config::debug_fill`, buffers the helpers make read `0xDC`;
    /// written whole by the GPU, destroyed and made again, they read
    /// `0xDC` again, and no write after free is found.
    fn debug_fills_reach_new_buffers_and_freed_ones_stay_clean(profile) {
        debug_fills(profile);
    }
);

/// The GPU fills `size` bytes of `buffer` from `offset` with `0xA5`, and
/// the host may read them once the call returns.
fn fill_range_on_gpu(context: &VulkanContext, buffer: vk::Buffer, offset: u64, size: u64) {
    context.run_one_time_commands(|device, cmd| {
        // SAFETY: the buffer belongs to `device`, is bound, and has
        // TRANSFER_DST usage; `offset` and `size` are multiples of 4 inside
        // it; the barrier orders the fill before host reads.
        unsafe {
            device.cmd_fill_buffer(cmd, buffer, offset, size, 0xA5A5_A5A5);
            let (src, dst) = TRANSFER_TO_HOST;
            memory_barrier(device, cmd, src, dst);
        }
    });
}

/// The body of `gpu_writes_into_collected_ring_space_are_caught`.
fn ring_fills(profile: Profile) {
    let context = VulkanContext::new(profile);
    let config = Config {
        debug_fill: true,
        ..Config::default()
    };
    let allocator = allocator_configured(&context, config);
    let _idle = IdleOnDrop(&context.device);
    let what = format!("{profile}");
    let ring = allocator
        .create_upload_ring(&UploadRingDesc {
            size: 64 << 10,
            usage: Usage::UPLOAD,
            buffer_usage: vk::BufferUsageFlags::TRANSFER_SRC | vk::BufferUsageFlags::TRANSFER_DST,
            ..UploadRingDesc::default()
        })
        .unwrap();
    let first = allocator.ring_allocate(ring, 1024, 256).unwrap();
    // SAFETY: the ring allocation's bytes, which nothing writes meanwhile.
    let read = |a: &vk_suballoc::RingAllocation| unsafe {
        std::slice::from_raw_parts(a.mapped_ptr().unwrap().as_ptr(), a.size() as usize).to_vec()
    };
    assert!(read(&first).iter().all(|&b| b == 0xDC), "{what}");
    // The GPU writes the allocation in its own frame: no write after free.
    fill_range_on_gpu(&context, first.buffer(), first.buffer_offset(), 1024);
    assert!(read(&first).iter().all(|&b| b == 0xA5), "{what}");
    // SAFETY: the one-time commands waited for the GPU: it is idle.
    unsafe { allocator.collect_idle() };
    let second = allocator.ring_allocate(ring, 1024, 256).unwrap();
    assert_eq!(second.buffer_offset(), first.buffer_offset(), "{what}");
    assert!(read(&second).iter().all(|&b| b == 0xDC), "{what}");
    assert_eq!(allocator.corruptions_detected(), 0, "{what}");
    // SAFETY: as above.
    unsafe { allocator.collect_idle() };
    assert!(allocator.check_corruption(!0).unwrap().is_clean(), "{what}");
    // The bug: the GPU writes into ring space whose frame was collected.
    fill_range_on_gpu(&context, second.buffer(), second.buffer_offset() + 512, 4);
    let report = allocator.check_corruption(!0).unwrap();
    assert_eq!(report.written_after_free.len(), 1, "{what}: {report:?}");
    assert_eq!(
        report.written_after_free[0].first_changed,
        second.memory_offset() + 512,
        "{what}"
    );
    let third = allocator.ring_allocate(ring, 1024, 256).unwrap();
    assert_eq!(third.buffer_offset(), second.buffer_offset(), "{what}");
    assert_eq!(allocator.corruptions_detected(), 1, "{what}");
    assert!(read(&third).iter().all(|&b| b == 0xDC), "{what}");
    allocator.destroy_upload_ring(ring).unwrap();
    // SAFETY: as above.
    unsafe { allocator.collect_idle() };
    context.assert_no_validation_messages();
}

test_each_profile!(
    /// With `Config::debug_fill`, ring allocations read `0xDC`; the GPU's
    /// write into one in its frame is no write after free, and its write
    /// into ring space whose frame was collected is found by
    /// `check_corruption` and caught by the ring allocation that takes it.
    fn gpu_writes_into_collected_ring_space_are_caught(profile) {
        ring_fills(profile);
    }
);
