//! Frames in flight on a real driver: a render loop of real submissions with
//! 2 and 3 frames in flight, deferred frees, upload rings and a GPU-only
//! scratch ring, checked byte for byte; and ring buffer usages under the
//! validation layer. When frames are collected (the proof that a deferred
//! free waits for its fence among it) is in `frames_suite/frame_collection.rs`.

use ash::vk;
use vk_suballoc::device::AshMemoryDevice;
use vk_suballoc::{Allocation, AllocationDesc, Allocator, UploadRingDesc, Usage};

use super::allocator_setup::{
    allocator_for, buffer_info, memory_barrier, IdleOnDrop, TRANSFER_TO_HOST, TRANSFER_TO_TRANSFER,
};
use crate::seeded_rng::Rng;
use crate::support::{test_each_profile, Profile, VulkanContext};

#[path = "frames_suite/frame_collection.rs"]
mod frame_collection;

/// Per-slot objects of a frame in flight.
struct FrameSlot {
    /// The slot's own pool, reset whole when the slot comes round again
    /// (what best practices advise over resetting command buffers).
    pool: vk::CommandPool,
    command_buffer: vk::CommandBuffer,
    fence: vk::Fence,
    submitted: bool,
    /// What the frame wrote, checked once its fence has signalled.
    checks: Vec<Check>,
}

/// A host-visible buffer whose bytes must equal `expected` after the frame.
struct Check {
    buffer: vk::Buffer,
    allocation: Allocation,
    expected: Vec<u8>,
    what: String,
}

fn verify(allocator: &Allocator<AshMemoryDevice>, check: &mut Check) {
    let len = check.expected.len() as u64;
    allocator.invalidate(&mut check.allocation, 0..len).unwrap();
    // The allocation can be longer than the buffer (drivers round the
    // required size up; NVIDIA to 16 bytes): only the buffer's bytes count.
    let bytes = &allocator.mapped_slice(&check.allocation).unwrap()[..check.expected.len()];
    assert!(
        bytes == check.expected.as_slice(),
        "{}: contents differ",
        check.what
    );
}

/// Creates a host-readable buffer of `size` bytes.
fn readback(allocator: &Allocator<AshMemoryDevice>, size: u64) -> (vk::Buffer, Allocation) {
    // SAFETY: a valid create info.
    unsafe { allocator.create_buffer(&buffer_info(size), &AllocationDesc::new(Usage::READBACK)) }
        .unwrap()
}

/// The render loop: `frames` frames with `in_flight` frames in flight. Each
/// frame
/// - fills the first third of a few new buffers with a pattern on the GPU,
///   copies bytes the host wrote into the upload ring into the second, and
///   into the last copies a range of a GPU-only scratch ring (a ring whose
///   usage has no host access) that the GPU filled with another pattern
///   first: ring space reused while an earlier frame still runs would hold
///   that frame's pattern;
/// - writes a canary into a new host-visible buffer from the host, *while
///   earlier frames may still run*: a range reused too early would be
///   overwritten by their GPU writes;
/// - fills a scratch buffer on the GPU and retires it with
///   `destroy_buffer_after_frame` right after recording.
///
/// When a slot comes round again, its fence is waited for, every byte the
/// frame wrote is checked, and its buffers are retired after the frame.
fn render_loop(profile: Profile, in_flight: usize, frames: u64) {
    let context = VulkanContext::new(profile);
    let allocator = allocator_for(&context);
    let device = &context.device;
    let _idle = IdleOnDrop(device);
    let mut rng = Rng::from_env(&format!("render_loop::{profile}::{in_flight}"));
    let ring = allocator
        .create_upload_ring(&UploadRingDesc {
            size: 1 << 20,
            ..UploadRingDesc::default()
        })
        .unwrap();
    let scratch_ring = allocator
        .create_upload_ring(&UploadRingDesc {
            size: 1 << 20,
            usage: Usage::DEVICE_LOCAL,
            buffer_usage: vk::BufferUsageFlags::TRANSFER_SRC | vk::BufferUsageFlags::TRANSFER_DST,
            ..UploadRingDesc::default()
        })
        .unwrap();
    let pool_info = vk::CommandPoolCreateInfo::default()
        .flags(vk::CommandPoolCreateFlags::TRANSIENT)
        .queue_family_index(context.queue_family_index);
    let mut slots: Vec<FrameSlot> = (0..in_flight)
        .map(|_| {
            // SAFETY: valid create info on a live device.
            let pool = unsafe { device.create_command_pool(&pool_info, None) }.unwrap();
            let alloc_info = vk::CommandBufferAllocateInfo::default()
                .command_pool(pool)
                .level(vk::CommandBufferLevel::PRIMARY)
                .command_buffer_count(1);
            // SAFETY: `pool` belongs to `device`.
            let command_buffers = unsafe { device.allocate_command_buffers(&alloc_info) }.unwrap();
            FrameSlot {
                pool,
                command_buffer: command_buffers[0],
                // SAFETY: valid create info.
                fence: unsafe { device.create_fence(&vk::FenceCreateInfo::default(), None) }
                    .unwrap(),
                submitted: false,
                checks: Vec::new(),
            }
        })
        .collect();

    for frame in 0..frames {
        let slot = &mut slots[(frame % in_flight as u64) as usize];
        if slot.submitted {
            // SAFETY: the fence belongs to `device` and was submitted.
            unsafe { device.wait_for_fences(&[slot.fence], true, u64::MAX) }.unwrap();
            // Collect before resetting the fence: the allocator reads it.
            allocator.collect().unwrap();
            // SAFETY: the fence is signalled, so the slot's command buffer
            // is no longer in use; neither is the fence.
            unsafe {
                device.reset_fences(&[slot.fence]).unwrap();
                device
                    .reset_command_pool(slot.pool, vk::CommandPoolResetFlags::empty())
                    .unwrap();
            }
            for mut check in slot.checks.drain(..) {
                verify(&allocator, &mut check);
                // SAFETY: the harness's buffer, destroyed only here.
                unsafe { allocator.destroy_buffer_after_frame(check.buffer, check.allocation) }
                    .unwrap();
            }
        }

        // The frame's work.
        let mut fills = Vec::new();
        let mut copies = Vec::new();
        let mut scratch_fills = Vec::new();
        for i in 0..1 + rng.below(4) {
            let half = 4 * (1 + rng.below(2048));
            let (buffer, allocation) = readback(&allocator, 3 * half);
            let pattern = rng.next() as u32;
            let payload: Vec<u8> = (0..half).map(|_| rng.next() as u8).collect();
            let staged = allocator.ring_allocate(ring, half, 4).unwrap();
            if i % 2 == 0 {
                allocator.ring_write(&staged, 0, &payload).unwrap();
            } else {
                // Built in place, then flushed (`ring_flush`).
                // SAFETY: inside the allocation, whose frame is live.
                unsafe {
                    std::ptr::copy_nonoverlapping(
                        payload.as_ptr(),
                        staged.mapped_ptr().unwrap().as_ptr(),
                        payload.len(),
                    );
                }
                allocator.ring_flush(&staged, ..).unwrap();
            }
            let mut expected: Vec<u8> = pattern.to_le_bytes().repeat(half as usize / 4);
            expected.extend_from_slice(&payload);
            fills.push((buffer, half, pattern));
            copies.push((staged.buffer(), staged.buffer_offset(), buffer, half));
            // GPU scratch: filled on the GPU, then copied out.
            let scratch = allocator.ring_allocate(scratch_ring, half, 4).unwrap();
            let scratch_pattern = rng.next() as u32;
            expected.extend(scratch_pattern.to_le_bytes().repeat(half as usize / 4));
            scratch_fills.push((scratch, scratch_pattern, buffer, half));
            slot.checks.push(Check {
                buffer,
                allocation,
                expected,
                what: format!("{profile} frame {frame} buffer {i}"),
            });
        }
        let canary_size = 4 * (1 + rng.below(1024));
        // SAFETY: a valid create info.
        let (canary_buffer, mut canary) = unsafe {
            allocator.create_buffer(
                &buffer_info(canary_size),
                &AllocationDesc::new(Usage::UPLOAD),
            )
        }
        .unwrap();
        let canary_bytes: Vec<u8> = (0..canary_size).map(|_| rng.next() as u8).collect();
        allocator.mapped_slice_mut(&mut canary).unwrap()[..canary_bytes.len()]
            .copy_from_slice(&canary_bytes);
        allocator.flush(&canary, 0..canary_size).unwrap();
        slot.checks.push(Check {
            buffer: canary_buffer,
            allocation: canary,
            expected: canary_bytes,
            what: format!("{profile} frame {frame} canary"),
        });
        let scratch_size = 4 * (1 + rng.below(16 << 10));
        // SAFETY: a valid create info.
        let (scratch, scratch_allocation) = unsafe {
            allocator.create_buffer(
                &buffer_info(scratch_size),
                &AllocationDesc::new(Usage::DEVICE_LOCAL),
            )
        }
        .unwrap();

        let cmd = slot.command_buffer;
        // SAFETY: the slot's command buffer is not in use (its fence was
        // waited for); every handle belongs to `device` and is bound; the
        // barrier orders the transfers before host reads.
        unsafe {
            device
                .begin_command_buffer(
                    cmd,
                    &vk::CommandBufferBeginInfo::default()
                        .flags(vk::CommandBufferUsageFlags::ONE_TIME_SUBMIT),
                )
                .unwrap();
            for &(buffer, half, pattern) in &fills {
                device.cmd_fill_buffer(cmd, buffer, 0, half, pattern);
            }
            for &(ring_buffer, ring_offset, buffer, half) in &copies {
                let region = [vk::BufferCopy {
                    src_offset: ring_offset,
                    dst_offset: half,
                    size: half,
                }];
                device.cmd_copy_buffer(cmd, ring_buffer, buffer, &region);
            }
            for &(scratch, pattern, _, half) in &scratch_fills {
                let at = scratch.buffer_offset();
                device.cmd_fill_buffer(cmd, scratch.buffer(), at, half, pattern);
            }
            let (src, dst) = TRANSFER_TO_TRANSFER;
            memory_barrier(device, cmd, src, dst);
            for &(scratch, _, buffer, half) in &scratch_fills {
                let region = [vk::BufferCopy {
                    src_offset: scratch.buffer_offset(),
                    dst_offset: 2 * half,
                    size: half,
                }];
                device.cmd_copy_buffer(cmd, scratch.buffer(), buffer, &region);
            }
            device.cmd_fill_buffer(cmd, scratch, 0, vk::WHOLE_SIZE, frame as u32);
            let (src, dst) = TRANSFER_TO_HOST;
            memory_barrier(device, cmd, src, dst);
            device.end_command_buffer(cmd).unwrap();
        }
        // Retired while the GPU may still write it: freed after this frame.
        // SAFETY: the harness's buffer, destroyed only here.
        unsafe { allocator.destroy_buffer_after_frame(scratch, scratch_allocation) }.unwrap();
        let command_buffers = [cmd];
        let submit = [vk::SubmitInfo::default().command_buffers(&command_buffers)];
        // SAFETY: a recorded command buffer; this test is the queue's only user.
        unsafe { device.queue_submit(context.queue, &submit, slot.fence) }.unwrap();
        slot.submitted = true;
        // SAFETY: the fence is signalled by this frame's only submission.
        let sealed = unsafe { allocator.end_frame(slot.fence) }.unwrap();
        assert_eq!(sealed, frame);
        assert!(allocator.frames_in_flight() <= in_flight, "frame {frame}");
    }

    // Shutdown: wait for every frame, check it, retire everything.
    // SAFETY: the device is idle after this.
    unsafe { device.device_wait_idle() }.unwrap();
    for slot in &mut slots {
        for mut check in slot.checks.drain(..) {
            verify(&allocator, &mut check);
            // SAFETY: the harness's buffer, destroyed only here.
            unsafe { allocator.destroy_buffer_after_frame(check.buffer, check.allocation) }
                .unwrap();
        }
    }
    allocator.destroy_upload_ring(ring).unwrap();
    allocator.destroy_upload_ring(scratch_ring).unwrap();
    // SAFETY: valid create info.
    let last = unsafe { device.create_fence(&vk::FenceCreateInfo::default(), None) }.unwrap();
    // SAFETY: an empty submission that signals `last`.
    unsafe { device.queue_submit(context.queue, &[], last) }.unwrap();
    // SAFETY: `last` follows all earlier work on the only queue.
    unsafe { allocator.end_frame(last) }.unwrap();
    allocator.wait_and_collect(u64::MAX).unwrap();
    let stats = allocator.stats();
    assert_eq!(stats.allocations(), 0, "{stats}");
    assert!(stats
        .memory_types
        .iter()
        .all(|t| t.blocks == t.empty_blocks));
    assert_eq!(allocator.trim(), stats.reserved_bytes());
    assert_eq!(allocator.stats().memory_objects, 0);
    // SAFETY: idle; everything made here is destroyed once.
    unsafe {
        for slot in &slots {
            device.destroy_fence(slot.fence, None);
            device.destroy_command_pool(slot.pool, None);
        }
        device.destroy_fence(last, None);
    }
}

test_each_profile!(
    /// 300 frames, 2 in flight.
    fn render_loop_two_frames_in_flight(profile) {
        render_loop(profile, 2, 300);
    }
);

test_each_profile!(
    /// 300 frames, 3 in flight.
    fn render_loop_three_frames_in_flight(profile) {
        render_loop(profile, 3, 300);
    }
);

/// `create_upload_ring` is safe, and its buffer usage reaches
/// `vkCreateBuffer` and the chunks' memory: an empty usage is refused
/// before anything is made (it broke
/// VUID-VkBufferCreateInfo-usage-requiredbitmask), and a ring whose
/// buffers take their device address gets memory allocated for it (it
/// broke VUID-vkBindBufferMemory-bufferDeviceAddress-03339 where the
/// allocator was not told of buffer device address), or, without the
/// feature, is refused as such a buffer is; its allocations' device
/// addresses are the driver's. The validation layer checks each call.
#[test]
fn ring_buffer_usages_give_no_validation_message() {
    use vk_suballoc::device::DeviceFeatures;
    use vk_suballoc::Error;

    let context = VulkanContext::new(Profile::Lavapipe);
    let address_ring = UploadRingDesc {
        size: 4096,
        buffer_usage: vk::BufferUsageFlags::UNIFORM_BUFFER
            | vk::BufferUsageFlags::SHADER_DEVICE_ADDRESS,
        ..UploadRingDesc::default()
    };
    {
        let allocator = allocator_for(&context);
        let empty = UploadRingDesc {
            buffer_usage: vk::BufferUsageFlags::empty(),
            ..address_ring
        };
        let refused = allocator.create_upload_ring(&empty);
        assert!(
            matches!(refused, Err(Error::InvalidConfig(_))),
            "{refused:?}"
        );
        let ring = allocator.create_upload_ring(&address_ring).unwrap();
        let uniforms = allocator.ring_allocate(ring, 256, 256).unwrap();
        let info = vk::BufferDeviceAddressInfo::default().buffer(uniforms.buffer());
        // SAFETY: the ring's buffer, created with SHADER_DEVICE_ADDRESS
        // usage and bound to memory allocated for device addresses.
        let address = unsafe { context.device.get_buffer_device_address(&info) };
        assert_ne!(address, 0);
        // The ring's own, read once for its chunk, is the driver's.
        assert_eq!(
            uniforms.device_address(),
            Some(address + uniforms.buffer_offset())
        );
        allocator.destroy_upload_ring(ring).unwrap();
        // SAFETY: nothing was submitted.
        unsafe { allocator.collect_idle() };
    }
    // Buffer device address, enabled on the device, is only left unused.
    let features = DeviceFeatures {
        debug_utils: true,
        ..DeviceFeatures::default()
    };
    let allocator = super::allocator_setup::allocator_with(&context, features);
    let refused = allocator.create_upload_ring(&address_ring);
    assert!(
        matches!(refused, Err(Error::DeviceAddressNotEnabled)),
        "{refused:?}"
    );
    assert_eq!(allocator.stats().allocations(), 0);
}
