//! A lost device and the frame queue, as the README's "A frame loop"
//! section tells it: `collect` reports `DeviceLost` while a sealed frame
//! is queued and `Ok` with none; the frames never complete, so an engine
//! that goes on ending frames fills its upload rings' 64 frames and gets
//! `TooManyFramesInFlight`; once the device is idle, `collect_idle`
//! releases every queued free (buffers and images destroyed with their
//! memory) and the rings' space, and frames seal again.

use ash::vk;
use vk_suballoc::device::fake::FakeLayout;
use vk_suballoc::{Collected, Error, UploadRingDesc, Usage};

use super::super::{allocator, buffer, finish};

#[test]
fn after_a_loss_frames_fill_the_rings_until_collect_idle_releases_them() {
    let (allocator, device) = allocator(FakeLayout::integrated());
    let ring = allocator
        .create_upload_ring(&UploadRingDesc {
            size: 64 << 10,
            ..UploadRingDesc::default()
        })
        .unwrap();
    let before = allocator.stats().allocations();
    let queued = allocator
        .allocate(&buffer(4096, 256, Usage::DEVICE_LOCAL))
        .unwrap();
    let resources = device.live_resources(); // the ring's buffer
    let resource: vk::Buffer = vk::Handle::from_raw(device.create_resource());
    // SAFETY: the fake device's own handle, destroyed only by the allocator.
    unsafe { allocator.destroy_buffer_after_frame(resource, queued) }.unwrap();
    // With no frame sealed, `collect` reads no signal: `Ok`, lost or not.
    device.lose_device();
    assert_eq!(allocator.collect(), Ok(Collected::default()));
    assert_eq!(allocator.wait_and_collect(1), Ok(Collected::default()));

    // The engine goes on ending frames on fences that never signal.
    let mut sealed = 0;
    let refused = loop {
        allocator.ring_allocate(ring, 256, 256).unwrap();
        // SAFETY: fake fences, never signalled (the device is lost).
        match unsafe { allocator.end_frame(device.create_fence()) } {
            Ok(frame) => {
                assert_eq!(frame, sealed);
                sealed += 1;
            }
            Err(error) => break error,
        }
        assert!(sealed <= 64, "no limit on frames that never complete");
    };
    assert_eq!((refused, sealed), (Error::TooManyFramesInFlight, 64));
    assert_eq!(allocator.frames_in_flight(), 64);
    assert_eq!(allocator.collect(), Err(Error::DeviceLost));
    assert_eq!(allocator.wait_and_collect(1), Err(Error::DeviceLost));
    assert_eq!(allocator.frames_in_flight(), 64);
    assert_eq!(device.live_resources(), resources + 1, "destroyed too soon");

    // `vkDeviceWaitIdle` has returned (`VK_ERROR_DEVICE_LOST`).
    // SAFETY: the fake device runs no GPU work.
    let collected = unsafe { allocator.collect_idle() };
    assert_eq!(
        collected,
        Collected {
            frames: 65,
            frees: 1
        }
    );
    assert_eq!(allocator.frames_in_flight(), 0);
    assert_eq!(allocator.stats().allocations(), before);
    assert_eq!(device.live_resources(), resources);
    assert_eq!(allocator.collect(), Ok(Collected::default()));
    // The ring's space is back, and a frame seals again.
    let whole = allocator.ring_allocate(ring, 64 << 10, 1).unwrap();
    assert_eq!(whole.frame(), 65);
    // SAFETY: a fake fence, never signalled.
    let sealed = unsafe { allocator.end_frame(device.create_fence()) };
    assert_eq!(sealed, Ok(65));
    allocator.destroy_upload_ring(ring).unwrap();
    // Dropping the allocator frees the ring queued in an unfinished frame.
    finish(allocator, &device);
}

/// On a lost device a wait for a frame's signal may return `VK_SUCCESS`
/// while the poll still reads it unreached (`vkGetSemaphoreCounterValue`
/// keeps the value it had; `vkGetFenceStatus` may answer `VK_NOT_READY`):
/// `wait_and_collect` reports `DeviceLost` and leaves the frame queued for
/// `collect_idle`. It waited, collected nothing and waited again for ever,
/// however short its timeout (each wait returned at once). The call runs
/// on a thread of its own; the test fails if it has not returned in 10 s.
#[test]
fn wait_and_collect_reports_a_lost_device_whose_waits_succeed_and_polls_do_not() {
    use std::sync::{mpsc, Arc};
    use std::time::Duration;

    for timeline in [false, true] {
        let (allocator, device) = allocator(FakeLayout::integrated());
        let allocator = Arc::new(allocator);
        let queued = allocator
            .allocate(&buffer(4096, 256, Usage::DEVICE_LOCAL))
            .unwrap();
        allocator.free_after_frame(queued).unwrap();
        // SAFETY: fake signals, never reached.
        unsafe {
            if timeline {
                let semaphore = device.create_timeline_semaphore();
                allocator.end_frame_timeline(semaphore, 1).unwrap();
            } else {
                allocator.end_frame(device.create_fence()).unwrap();
            }
        }
        device.lose_device_with_stale_signals();
        assert_eq!(allocator.collect(), Ok(Collected::default()));

        let (sender, receiver) = mpsc::channel();
        let waiting = Arc::clone(&allocator);
        // Detached: a call that never returns keeps its allocator.
        std::thread::spawn(move || {
            let result = waiting.wait_and_collect(1_000_000);
            drop(waiting);
            let _ = sender.send(result);
        });
        let result = receiver
            .recv_timeout(Duration::from_secs(10))
            .unwrap_or_else(|_| panic!("wait_and_collect spun (timeline: {timeline})"));
        assert_eq!(result, Err(Error::DeviceLost), "timeline: {timeline}");
        assert_eq!(allocator.frames_in_flight(), 1);

        // SAFETY: the fake device runs no GPU work.
        let collected = unsafe { allocator.collect_idle() };
        assert_eq!(
            collected,
            Collected {
                frames: 2,
                frees: 1
            }
        );
        let Ok(allocator) = Arc::try_unwrap(allocator) else {
            panic!("the waiting thread's clone was dropped when it returned");
        };
        finish(allocator, &device);
    }
}
