//! Frees and destructions deferred to the end of a frame: a range freed
//! after a frame is not handed out again before the frame's fence signals,
//! engine loops with two or three frames in flight, frames sealed with
//! timeline semaphores, buffers and images destroyed once after their frame,
//! and a lost device, which stops collection but still drops cleanly.

use std::collections::VecDeque;

use ash::vk;
use vk_suballoc::device::fake::FakeLayout;
use vk_suballoc::{Allocation, Collected, Error, Usage};

use super::super::seeded_rng::Rng;
use super::super::{allocator, buffer, finish};

use super::{end_frame, finish_after_frame};

/// (32 KiB: a range of its own, not a run slot, so that "comes back" is the
/// offset allocator's choice; `frame_loop` covers slots.)
#[test]
fn a_deferred_free_is_not_reused_before_its_fence_signals() {
    let (allocator, device) = allocator(FakeLayout::integrated());
    let a = allocator
        .allocate(&buffer(32 << 10, 256, Usage::DEVICE_LOCAL))
        .unwrap();
    let (memory, offset) = (a.memory(), a.offset());
    allocator.free_after_frame(a).unwrap();
    let fence = end_frame(&allocator, &device);
    let b = allocator
        .allocate(&buffer(32 << 10, 256, Usage::DEVICE_LOCAL))
        .unwrap();
    assert!(
        b.memory() != memory || b.offset() != offset,
        "reused before the fence"
    );
    assert_eq!(
        allocator.collect(),
        Ok(Collected {
            frames: 0,
            frees: 0
        })
    );
    device.signal_fence(fence);
    assert_eq!(
        allocator.collect(),
        Ok(Collected {
            frames: 1,
            frees: 1
        })
    );
    let c = allocator
        .allocate(&buffer(32 << 10, 256, Usage::DEVICE_LOCAL))
        .unwrap();
    assert_eq!(
        (c.memory(), c.offset()),
        (memory, offset),
        "freed range comes back"
    );
    allocator.free_after_frame(b).unwrap();
    allocator.free_after_frame(c).unwrap();
    finish_after_frame(allocator, &device);
}

/// Memory, offset and size of a range freed after a frame.
type FreedRange = (vk::DeviceMemory, u64, u64);

/// An engine loop with `in_flight` frames: each frame allocates, frees some
/// older allocations after the frame, and "the GPU" finishes frame `n -
/// in_flight + 1` before frame `n + 1` starts. No range freed in a frame whose
/// fence has not signalled may be handed out again.
fn frame_loop(in_flight: usize) {
    let mut rng = Rng::from_env(&format!("frame_loop::{in_flight}"));
    let (allocator, device) = allocator(FakeLayout::discrete());
    let mut live: Vec<Allocation> = Vec::new();
    // Per sealed, unsignalled frame: its fence and the ranges it freed.
    let mut pending: VecDeque<(vk::Fence, Vec<FreedRange>)> = VecDeque::new();
    let mut freed_now = Vec::new();
    for frame in 0..200 {
        for _ in 0..rng.below(20) {
            let a = allocator
                .allocate(&buffer(256 + rng.below(64 << 10), 256, Usage::DEVICE_LOCAL))
                .unwrap();
            let (start, end) = (a.offset(), a.offset() + a.size());
            for (_, ranges) in &pending {
                for &(memory, offset, size) in ranges {
                    assert!(
                        memory != a.memory() || end <= offset || offset + size <= start,
                        "frame {frame}: reused a range whose frame is in flight"
                    );
                }
            }
            live.push(a);
        }
        for _ in 0..rng.below(15).min(live.len() as u64) {
            let a = live.swap_remove(rng.below(live.len() as u64) as usize);
            freed_now.push((a.memory(), a.offset(), a.size()));
            allocator.free_after_frame(a).unwrap();
        }
        let fence = end_frame(&allocator, &device);
        pending.push_back((fence, std::mem::take(&mut freed_now)));
        if pending.len() >= in_flight {
            let (oldest, _) = pending.pop_front().unwrap();
            device.signal_fence(oldest);
            allocator.collect().unwrap();
        }
        assert!(allocator.frames_in_flight() < in_flight);
    }
    for a in live {
        allocator.free_after_frame(a).unwrap();
    }
    let last = end_frame(&allocator, &device);
    for (fence, _) in pending {
        device.signal_fence(fence);
    }
    device.signal_fence(last);
    allocator.wait_and_collect(u64::MAX).unwrap();
    assert_eq!(allocator.stats().allocations(), 0);
    allocator.trim();
    assert_eq!(allocator.stats().reserved_bytes(), 0);
    finish(allocator, &device);
}

#[test]
fn two_frames_in_flight() {
    frame_loop(2);
}

#[test]
fn three_frames_in_flight() {
    frame_loop(3);
}

#[test]
fn frames_without_frees_and_timeline_semaphores() {
    let (allocator, device) = allocator(FakeLayout::integrated());
    let timeline = device.create_timeline_semaphore();
    for value in 1..=5 {
        // SAFETY: fake semaphore, advanced below.
        let frame = unsafe { allocator.end_frame_timeline(timeline, value) }.unwrap();
        assert_eq!(frame, value - 1);
    }
    device.signal_timeline(timeline, 3);
    assert_eq!(allocator.collect().unwrap().frames, 3);
    assert_eq!(allocator.frames_in_flight(), 2);
    device.signal_timeline(timeline, 5);
    assert_eq!(allocator.collect().unwrap().frames, 2);
    // SAFETY: null handles are rejected before anything else.
    unsafe {
        assert_eq!(
            allocator.end_frame(vk::Fence::null()),
            Err(Error::NullFrameSignal)
        );
        assert_eq!(
            allocator.end_frame_timeline(vk::Semaphore::null(), 1),
            Err(Error::NullFrameSignal)
        );
    }
    // Value 0: every timeline semaphore is there from its creation, so the
    // frame would count as done at once and its frees go back to the
    // allocator while the GPU may still use them. Refused; nothing sealed.
    let fresh = device.create_timeline_semaphore();
    let queued = allocator
        .allocate(&buffer(4096, 256, Usage::DEVICE_LOCAL))
        .unwrap();
    allocator.free_after_frame(queued).unwrap();
    // SAFETY: fake semaphore; the call is refused before anything else.
    let sealed = unsafe { allocator.end_frame_timeline(fresh, 0) };
    assert_eq!(sealed, Err(Error::NullFrameSignal));
    assert_eq!(allocator.frames_in_flight(), 0);
    assert_eq!(allocator.collect().unwrap().frees, 0);
    assert_eq!(allocator.stats().allocations(), 1);
    finish_after_frame(allocator, &device);
}

/// A timeline value at or below the one a frame in flight waits for on
/// the same semaphore names a point the semaphore reaches no later than
/// that frame's, never the end of a later frame's work: refused, with
/// nothing sealed, as the walk back from the newest frame finds it past
/// frames sealed on fences and on other semaphores. Other semaphores keep
/// values of their own. Once the semaphore's frames are collected the
/// allocator has nothing to compare with (the handle may since name a new
/// semaphore, whose values start again at 0), and a lower value is taken.
#[test]
fn a_timeline_value_not_above_one_in_flight_is_refused() {
    let (allocator, device) = allocator(FakeLayout::integrated());
    let timeline = device.create_timeline_semaphore();
    let other = device.create_timeline_semaphore();
    let fence = device.create_fence();
    // SAFETY: fake semaphores and fence, signalled below.
    unsafe {
        assert_eq!(allocator.end_frame_timeline(timeline, 3), Ok(0));
        assert_eq!(allocator.end_frame_timeline(other, 1), Ok(1));
        assert_eq!(allocator.end_frame(fence), Ok(2));
    }
    let queued = allocator
        .allocate(&buffer(4096, 256, Usage::DEVICE_LOCAL))
        .unwrap();
    allocator.free_after_frame(queued).unwrap();
    for value in [1, 2, 3] {
        // SAFETY: refused before the semaphore is used.
        let sealed = unsafe { allocator.end_frame_timeline(timeline, value) };
        assert_eq!(
            sealed,
            Err(Error::TimelineValueNotAbove {
                value,
                in_flight: 3
            })
        );
    }
    assert_eq!(allocator.frames_in_flight(), 3, "nothing sealed");
    assert_eq!(allocator.current_frame(), 3);
    // The other semaphore's own value, and the frame with the free above.
    // SAFETY: fake semaphores, signalled below.
    unsafe {
        assert_eq!(
            allocator.end_frame_timeline(other, 1),
            Err(Error::TimelineValueNotAbove {
                value: 1,
                in_flight: 1
            })
        );
        assert_eq!(allocator.end_frame_timeline(timeline, 4), Ok(3));
    }
    // Reaching 3 releases frame 0 alone; the free waits for 4.
    device.signal_timeline(timeline, 3);
    assert_eq!(allocator.collect().unwrap().frames, 1);
    assert_eq!(allocator.stats().allocations(), 1);
    device.signal_timeline(other, 1);
    device.signal_timeline(timeline, 4);
    // The fence of frame 2 is not signalled: frames 2 and 3 wait for it.
    assert_eq!(allocator.collect().unwrap().frames, 1);
    assert_eq!(allocator.frames_in_flight(), 2);
    // SAFETY: as above; frame 3 on `timeline` is still in flight.
    let sealed = unsafe { allocator.end_frame_timeline(timeline, 2) };
    assert!(matches!(sealed, Err(Error::TimelineValueNotAbove { .. })));
    device.signal_fence(fence);
    let collected = allocator.collect().unwrap();
    assert_eq!((collected.frames, collected.frees), (2, 1));
    assert_eq!(allocator.stats().allocations(), 0);
    // Nothing in flight on it: a lower value is taken.
    // SAFETY: a fake semaphore, already past 2.
    assert_eq!(unsafe { allocator.end_frame_timeline(timeline, 2) }, Ok(4));
    finish_after_frame(allocator, &device);
}

#[test]
fn deferred_destruction_destroys_resources_once() {
    let (allocator, device) = allocator(FakeLayout::integrated());
    let buffer_handle = vk::Handle::from_raw(device.create_resource());
    let image_handle = vk::Handle::from_raw(device.create_resource());
    let a = allocator
        .allocate(&buffer(4096, 256, Usage::DEVICE_LOCAL))
        .unwrap();
    let b = allocator
        .allocate(&buffer(4096, 256, Usage::DEVICE_LOCAL))
        .unwrap();
    // SAFETY: the fake device's own handles, destroyed only by the allocator.
    unsafe {
        allocator
            .destroy_buffer_after_frame(buffer_handle, a)
            .unwrap();
        allocator
            .destroy_image_after_frame(image_handle, b)
            .unwrap();
    }
    let fence = end_frame(&allocator, &device);
    allocator.collect().unwrap();
    assert_eq!(device.live_resources(), 2);
    device.signal_fence(fence);
    assert_eq!(allocator.collect().unwrap().frees, 2);
    assert_eq!(device.live_resources(), 0);
    finish(allocator, &device);
}

#[test]
fn a_lost_device_stops_collection_but_drops_cleanly() {
    let (allocator, device) = allocator(FakeLayout::integrated());
    let a = allocator
        .allocate(&buffer(4096, 256, Usage::DEVICE_LOCAL))
        .unwrap();
    allocator.free_after_frame(a).unwrap();
    end_frame(&allocator, &device);
    device.lose_device();
    assert_eq!(allocator.collect(), Err(Error::DeviceLost));
    assert_eq!(allocator.wait_and_collect(1), Err(Error::DeviceLost));
    // Dropping frees the deferred allocation and every block: no leak.
    finish(allocator, &device);
}
