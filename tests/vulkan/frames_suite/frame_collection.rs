//! When frames are collected on a real driver: a deferred free waits for
//! its fence, timeline semaphores seal frames, `collect_idle` after
//! `vkDeviceWaitIdle`, and `wait_and_collect` timing out.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::Duration;

use ash::vk;
use vk_suballoc::{AllocationDesc, Collected, Error, Request, ResourceKind, Usage};

use super::super::allocator_setup::{allocator_for, buffer_info};
use crate::support::{Profile, VulkanContext};

/// Real requirements of a 32 KiB transfer buffer, for raw allocations: a
/// range of its own, not a slot of a run (`Config::small_buffer_limit`), so
/// that where a freed one comes back is the offset allocator's choice.
fn requirements(context: &VulkanContext) -> vk::MemoryRequirements {
    // SAFETY: a probe buffer, destroyed at once.
    unsafe {
        let probe = context
            .device
            .create_buffer(&buffer_info(32 << 10), None)
            .unwrap();
        let requirements = context.device.get_buffer_memory_requirements(probe);
        context.device.destroy_buffer(probe, None);
        requirements
    }
}

/// Signals `fence`, unsignalled and not in use, with an empty submission,
/// and waits for it.
fn signal_fence(context: &VulkanContext, fence: vk::Fence) {
    // SAFETY: an empty submission that signals a fence no pending work
    // uses (the caller's); then a wait for it.
    unsafe {
        context
            .device
            .queue_submit(context.queue, &[], fence)
            .unwrap();
        context
            .device
            .wait_for_fences(&[fence], true, u64::MAX)
            .unwrap();
    }
}

/// A new timeline semaphore at 0.
fn timeline_semaphore(context: &VulkanContext) -> vk::Semaphore {
    let mut type_info = vk::SemaphoreTypeCreateInfo::default()
        .semaphore_type(vk::SemaphoreType::TIMELINE)
        .initial_value(0);
    let info = vk::SemaphoreCreateInfo::default().push_next(&mut type_info);
    // SAFETY: timeline semaphores are enabled by the harness.
    unsafe { context.device.create_semaphore(&info, None) }.unwrap()
}

/// Signals `timeline` to `value`, larger than its value now, from the host.
fn signal_timeline(context: &VulkanContext, timeline: vk::Semaphore, value: u64) {
    let signal = vk::SemaphoreSignalInfo::default()
        .semaphore(timeline)
        .value(value);
    // SAFETY: a host signal of a larger value (the caller's).
    unsafe { context.device.signal_semaphore(&signal) }.unwrap();
}

#[test]
fn a_deferred_free_waits_for_a_late_fence() {
    let context = VulkanContext::new(Profile::Lavapipe);
    let allocator = allocator_for(&context);
    let request = Request::new(
        requirements(&context),
        Usage::DEVICE_LOCAL,
        ResourceKind::Buffer,
    );
    let first = allocator.allocate(&request).unwrap();
    let place = (first.memory(), first.offset());
    allocator.free_after_frame(first).unwrap();
    // SAFETY: valid create info; the fence is submitted below.
    let fence = unsafe {
        context
            .device
            .create_fence(&vk::FenceCreateInfo::default(), None)
    }
    .unwrap();
    // SAFETY: `fence` is signalled (late) by the only later submission.
    unsafe { allocator.end_frame(fence) }.unwrap();
    let second = allocator.allocate(&request).unwrap();
    assert_ne!(
        (second.memory(), second.offset()),
        place,
        "reused before the fence"
    );
    assert_eq!(
        allocator.collect(),
        Ok(Collected {
            frames: 0,
            frees: 0
        })
    );
    signal_fence(&context, fence);
    assert_eq!(
        allocator.collect(),
        Ok(Collected {
            frames: 1,
            frees: 1
        })
    );
    let third = allocator.allocate(&request).unwrap();
    assert_eq!(
        (third.memory(), third.offset()),
        place,
        "the range comes back after the fence"
    );
    // SAFETY: never used by the GPU.
    unsafe {
        allocator.free(second).unwrap();
        allocator.free(third).unwrap();
        context.device.destroy_fence(fence, None);
    }
}

/// A render loop that seals each frame after its submission, while
/// another thread collects: the allocator reads a fence only once
/// `end_frame` has it, and a frame's fence no longer once its frame is
/// collected, so the loop's `vkQueueSubmit` and `vkResetFences`, which take
/// the fence externally synchronized, overlap none of the other thread's
/// reads, and the validation layer's thread checks stay quiet. (Sealed
/// before its submission, the same loop has the layer report the fence in
/// use on two threads at once: `end_frame`'s safety section.)
#[test]
fn frames_sealed_after_their_submission_are_collected_on_another_thread() {
    const FRAMES: usize = 40;
    let context = VulkanContext::new(Profile::Lavapipe);
    let allocator = allocator_for(&context);
    let device = &context.device;
    let request = Request::new(
        requirements(&context),
        Usage::DEVICE_LOCAL,
        ResourceKind::Buffer,
    );
    let fences: Vec<vk::Fence> = (0..2)
        // SAFETY: a valid create info.
        .map(|_| unsafe { device.create_fence(&vk::FenceCreateInfo::default(), None) }.unwrap())
        .collect();
    let done = AtomicBool::new(false);
    std::thread::scope(|scope| {
        let collector = scope.spawn(|| {
            while !done.load(Ordering::Acquire) {
                allocator.collect().unwrap();
            }
        });
        for frame in 0..FRAMES {
            let fence = fences[frame % fences.len()];
            // SAFETY: the fence is this device's; once it has signalled,
            // and its frame is collected (here, or on the other thread
            // under the lock this `collect` waits for), nothing reads it.
            unsafe {
                if frame >= fences.len() {
                    device.wait_for_fences(&[fence], true, u64::MAX).unwrap();
                }
                allocator.collect().unwrap();
                device.reset_fences(&[fence]).unwrap();
            }
            allocator
                .free_after_frame(allocator.allocate(&request).unwrap())
                .unwrap();
            // SAFETY: an empty submission on the queue only this thread
            // uses signals the fence; then the frame is sealed on it.
            unsafe {
                device.queue_submit(context.queue, &[], fence).unwrap();
                allocator.end_frame(fence).unwrap();
            }
        }
        done.store(true, Ordering::Release);
        collector.join().unwrap();
    });
    allocator.wait_and_collect(u64::MAX).unwrap();
    assert_eq!(allocator.stats().allocations(), 0);
    context.assert_no_validation_messages();
    // SAFETY: every frame is collected: nothing reads the fences.
    unsafe {
        fences
            .iter()
            .for_each(|&fence| device.destroy_fence(fence, None))
    };
}

/// A level change: a buffer the GPU used is retired with
/// `destroy_buffer_after_frame` in a frame that is never sealed, and the
/// last sealed frame's fence was never submitted. After `vkDeviceWaitIdle`,
/// `collect_idle` destroys and frees everything without a validation
/// message, and frames go on.
#[test]
fn collect_idle_after_device_wait_idle_releases_everything() {
    let context = VulkanContext::new(Profile::Lavapipe);
    let allocator = allocator_for(&context);
    let desc = AllocationDesc::new(Usage::DEVICE_LOCAL);
    // SAFETY: valid create infos; the fence is never submitted, and the
    // buffers are used only by the submission waited for below.
    unsafe {
        let (sealed, a) = allocator.create_buffer(&buffer_info(4096), &desc).unwrap();
        allocator.destroy_buffer_after_frame(sealed, a).unwrap();
        let fence = context
            .device
            .create_fence(&vk::FenceCreateInfo::default(), None)
            .unwrap();
        allocator.end_frame(fence).unwrap();
        let (used, b) = allocator.create_buffer(&buffer_info(4096), &desc).unwrap();
        context.run_one_time_commands(|device, cmd| {
            device.cmd_fill_buffer(cmd, used, 0, vk::WHOLE_SIZE, 7);
        });
        allocator.destroy_buffer_after_frame(used, b).unwrap();
        context.device.device_wait_idle().unwrap();
        assert_eq!(
            allocator.collect_idle(),
            Collected {
                frames: 2,
                frees: 2
            }
        );
        assert_eq!(allocator.stats().allocations(), 0);
        assert_eq!(allocator.frames_in_flight(), 0);
        context.device.destroy_fence(fence, None);
    }
    assert_eq!(allocator.current_frame(), 2);
}

#[test]
fn timeline_semaphores_seal_frames() {
    let context = VulkanContext::new(Profile::Lavapipe);
    let allocator = allocator_for(&context);
    let timeline = timeline_semaphore(&context);
    let request = Request::new(
        requirements(&context),
        Usage::DEVICE_LOCAL,
        ResourceKind::Buffer,
    );
    for value in 1..=3 {
        let allocation = allocator.allocate(&request).unwrap();
        allocator.free_after_frame(allocation).unwrap();
        // SAFETY: the host signals each value below, after the "frame".
        unsafe { allocator.end_frame_timeline(timeline, value) }.unwrap();
    }
    assert_eq!(allocator.collect().unwrap().frames, 0);
    signal_timeline(&context, timeline, 2);
    assert_eq!(
        allocator.collect(),
        Ok(Collected {
            frames: 2,
            frees: 2
        })
    );
    signal_timeline(&context, timeline, 3);
    assert_eq!(allocator.wait_and_collect(u64::MAX).unwrap().frees, 1);
    assert_eq!(allocator.stats().allocations(), 0);
    drop(allocator);
    // SAFETY: no frame refers to it any more.
    unsafe { context.device.destroy_semaphore(timeline, None) };
}

/// `wait_and_collect` gives up on a frame whose fence, or timeline value,
/// has not signalled when its timeout passes: [`Error::Timeout`], with the
/// frames before it collected and the frame still queued; once it signals,
/// the next call collects it. A wait's `VK_TIMEOUT` taken for a signal
/// made the call loop for ever, waiting again and collecting nothing. Each
/// call runs on a thread of its own, which holds the context and the
/// allocator, and the test fails if it has not returned in 20 seconds.
#[test]
fn wait_and_collect_times_out_on_a_frame_that_has_not_signalled() {
    let context = Arc::new(VulkanContext::new(Profile::Lavapipe));
    let allocator = Arc::new(allocator_for(&context));
    let request = Request::new(
        requirements(&context),
        Usage::DEVICE_LOCAL,
        ResourceKind::Buffer,
    );
    // SAFETY: a valid create info; the fence is submitted below.
    let fence = unsafe {
        context
            .device
            .create_fence(&vk::FenceCreateInfo::default(), None)
    }
    .unwrap();
    let timeline = timeline_semaphore(&context);
    allocator
        .free_after_frame(allocator.allocate(&request).unwrap())
        .unwrap();
    // SAFETY: the fence is signalled by the empty submission below.
    unsafe { allocator.end_frame(fence) }.unwrap();
    allocator
        .free_after_frame(allocator.allocate(&request).unwrap())
        .unwrap();
    // SAFETY: the host signals the value below.
    unsafe { allocator.end_frame_timeline(timeline, 1) }.unwrap();

    let wait_and_collect = |timeout_ns: u64| {
        let (sender, receiver) = mpsc::channel();
        let (context, allocator) = (Arc::clone(&context), Arc::clone(&allocator));
        // Detached: a wait that never returns keeps the context and the
        // allocator alive, rather than see them destroyed under it.
        std::thread::spawn(move || {
            let result = allocator.wait_and_collect(timeout_ns);
            drop((allocator, context));
            let _ = sender.send(result);
        });
        receiver
            .recv_timeout(Duration::from_secs(20))
            .expect("wait_and_collect did not return within 20 s")
    };
    const MILLISECOND: u64 = 1_000_000;
    assert_eq!(wait_and_collect(MILLISECOND), Err(Error::Timeout));
    assert_eq!(allocator.frames_in_flight(), 2);
    assert_eq!(allocator.stats().allocations(), 2);
    signal_fence(&context, fence);
    // The fence's frame is collected; the timeline's times out.
    assert_eq!(wait_and_collect(MILLISECOND), Err(Error::Timeout));
    assert_eq!(allocator.frames_in_flight(), 1);
    assert_eq!(allocator.stats().allocations(), 1);
    signal_timeline(&context, timeline, 1);
    assert_eq!(
        wait_and_collect(MILLISECOND),
        Ok(Collected {
            frames: 1,
            frees: 1
        })
    );
    assert_eq!(allocator.frames_in_flight(), 0);
    assert_eq!(allocator.stats().allocations(), 0);
    drop(Arc::into_inner(allocator).expect("every wait's thread is done with it"));
    // SAFETY: no frame refers to them any more.
    unsafe {
        context.device.destroy_fence(fence, None);
        context.device.destroy_semaphore(timeline, None);
    }
}
