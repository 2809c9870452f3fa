//! Collecting finished frames: what `wait_and_collect` counts and which
//! frames it waits for (those sealed before the call, not the current one
//! nor those sealed during its wait), a fence the render loop reset, and
//! `collect_idle`, which on an idle device releases every queued frame and
//! gives the upload rings their space back (a ring destroyed after the last
//! `end_frame` included).

use vk_suballoc::device::fake::FakeLayout;
use vk_suballoc::{Collected, DedicatedPolicy, Error, UploadRingDesc, Usage};

use super::super::{allocator, buffer, finish, FakeAllocator};

use super::{end_frame, finish_after_frame};

const MIB: u64 = 1 << 20;

/// Allocates a 32 KiB buffer and frees it after the current frame: one
/// free waiting in the frame queue.
fn queue_one_free(allocator: &FakeAllocator) {
    let a = allocator
        .allocate(&buffer(32 * 1024, 256, Usage::DEVICE_LOCAL))
        .unwrap();
    allocator.free_after_frame(a).unwrap();
}

/// `wait_and_collect` reports what it released, summed over the frames it
/// waited for: shutdown code checks that every deferred free was carried out.
#[test]
fn wait_and_collect_counts_frames_and_frees() {
    let (allocator, device) = allocator(FakeLayout::integrated());
    let mut fences = Vec::new();
    for frees in [2, 0, 1] {
        for _ in 0..frees {
            queue_one_free(&allocator);
        }
        fences.push(end_frame(&allocator, &device));
    }
    for fence in fences {
        device.signal_fence(fence);
    }
    assert_eq!(
        allocator.wait_and_collect(u64::MAX),
        Ok(Collected {
            frames: 3,
            frees: 3
        })
    );
    assert_eq!(
        allocator.wait_and_collect(u64::MAX),
        Ok(Collected::default())
    );
    assert_eq!(allocator.stats().allocations(), 0);
    finish(allocator, &device);
}

/// Frees queued in the current frame wait for that frame's signal, even in
/// `wait_and_collect`: it waits for sealed frames only, as its docs say, so
/// shutdown or level-change code seals the frame first.
#[test]
fn wait_and_collect_leaves_the_current_frames_frees_queued() {
    let (allocator, device) = allocator(FakeLayout::integrated());
    queue_one_free(&allocator);
    assert_eq!(
        allocator.wait_and_collect(u64::MAX),
        Ok(Collected::default())
    );
    assert_eq!(allocator.stats().allocations(), 1);
    device.signal_fence(end_frame(&allocator, &device));
    assert_eq!(
        allocator.wait_and_collect(u64::MAX),
        Ok(Collected {
            frames: 1,
            frees: 1
        })
    );
    assert_eq!(allocator.stats().allocations(), 0);
    finish(allocator, &device);
}

/// `wait_and_collect` about to wait on a frame's fence while the render
/// loop on another thread waits for it itself, collects the frame and
/// resets the fence for its next submission (here in the wait hook): the
/// reset fence reads as unsignalled, but its frame is gone from the queue,
/// so the call returns without `Timeout`. Before, it failed with `Timeout`
/// (on a real device, after waiting its whole timeout for the fence's next
/// signal).
#[test]
fn wait_and_collect_is_no_timeout_when_another_thread_collects_and_resets_the_fence() {
    let (allocator, device) = allocator(FakeLayout::integrated());
    let allocator = std::sync::Arc::new(allocator);
    queue_one_free(&allocator);
    let fence = end_frame(&allocator, &device);
    let (render, gpu) = (std::sync::Arc::clone(&allocator), device.clone());
    device.set_wait_hook(Some(Box::new(move || {
        gpu.signal_fence(fence);
        render.collect().unwrap();
        gpu.reset_fence(fence);
    })));
    assert_eq!(
        allocator.wait_and_collect(1_000_000),
        Ok(Collected::default())
    );
    device.set_wait_hook(None);
    assert_eq!(allocator.frames_in_flight(), 0);
    assert_eq!(allocator.stats().live_bytes(), 0);
    let Ok(allocator) = std::sync::Arc::try_unwrap(allocator) else {
        panic!("the hook's clone of the allocator was dropped with it");
    };
    finish(allocator, &device);
}

/// A fence reset after it signalled (`vkResetFences`, as a render loop
/// reuses it) reads as unsignalled again: its frame stays in flight until
/// it signals anew. The test above resets a fence whose frame is gone
/// already, so it passes whether or not the fake device resets it.
#[test]
fn a_reset_fence_holds_its_frame_until_it_signals_again() {
    let (allocator, device) = allocator(FakeLayout::integrated());
    queue_one_free(&allocator);
    let fence = end_frame(&allocator, &device);
    device.signal_fence(fence);
    device.reset_fence(fence);
    assert_eq!(allocator.collect(), Ok(Collected::default()));
    assert_eq!(allocator.frames_in_flight(), 1);
    device.signal_fence(fence);
    assert_eq!(
        allocator.collect(),
        Ok(Collected {
            frames: 1,
            frees: 1
        })
    );
    finish(allocator, &device);
}

/// `wait_and_collect` waits for the frames sealed before the call, not for
/// those other threads seal while it waits: a loading thread waiting there
/// while the render thread goes on sealing frames returns. Here a frame is
/// sealed during the wait (the device's wait hook stands in for the render
/// thread), with a fence that has not signalled; before, the call went on
/// to wait for it (on a real device, for every frame the render loop
/// sealed, for as long as it ran; the fake device answers at once, so the
/// call failed with `Timeout`).
#[test]
fn wait_and_collect_does_not_wait_for_frames_sealed_meanwhile() {
    use std::sync::{Arc, Mutex};

    let (allocator, device) = allocator(FakeLayout::integrated());
    let allocator = Arc::new(allocator);
    queue_one_free(&allocator);
    device.signal_fence(end_frame(&allocator, &device));

    let sealed_meanwhile = Arc::new(Mutex::new(None));
    let (render, gpu, sealed) = (
        Arc::clone(&allocator),
        device.clone(),
        Arc::clone(&sealed_meanwhile),
    );
    device.set_wait_hook(Some(Box::new(move || {
        let mut sealed = sealed.lock().unwrap();
        if sealed.is_none() {
            queue_one_free(&render);
            *sealed = Some(end_frame(&render, &gpu));
        }
    })));
    assert_eq!(
        allocator.wait_and_collect(u64::MAX),
        Ok(Collected {
            frames: 1,
            frees: 1
        })
    );
    device.set_wait_hook(None);
    let fence = sealed_meanwhile.lock().unwrap().expect("the hook ran");
    assert_eq!(allocator.frames_in_flight(), 1);

    // Once its fence signals, the next call collects it.
    device.signal_fence(fence);
    assert_eq!(
        allocator.wait_and_collect(u64::MAX),
        Ok(Collected {
            frames: 1,
            frees: 1
        })
    );
    let Ok(allocator) = Arc::try_unwrap(allocator) else {
        panic!("the hook's clone of the allocator was dropped with it");
    };
    finish(allocator, &device);
}

/// On an idle device, `collect_idle` releases the frees of sealed frames
/// whose fences never signalled and of the current frame, and gives the
/// upload rings all their space back; the frame it ends is over, so its
/// ring allocations are stale, and frames go on from the next index.
#[test]
fn collect_idle_releases_every_queued_frame_and_ring() {
    let (allocator, device) = allocator(FakeLayout::integrated());
    let desc = UploadRingDesc {
        size: 64 << 10,
        ..UploadRingDesc::default()
    };
    let ring = allocator.create_upload_ring(&desc).unwrap();
    let allocate = || {
        allocator
            .allocate(&buffer(32 << 10, 256, Usage::DEVICE_LOCAL))
            .unwrap()
    };
    let (sealed, current, kept) = (allocate(), allocate(), allocate());
    allocator.free_after_frame(sealed).unwrap();
    let old = allocator.ring_allocate(ring, 40 << 10, 256).unwrap();
    // Its fence is never signalled.
    let _fence = end_frame(&allocator, &device);
    allocator.free_after_frame(current).unwrap();
    let current_ring = allocator.ring_allocate(ring, 20 << 10, 256).unwrap();
    let before = allocator.stats().allocations();

    // SAFETY: the fake device runs no GPU work.
    let collected = unsafe { allocator.collect_idle() };
    assert_eq!(
        collected,
        Collected {
            frames: 2,
            frees: 2
        }
    );
    assert_eq!(allocator.stats().allocations(), before - 2);
    assert_eq!(allocator.frames_in_flight(), 0);
    assert_eq!(allocator.current_frame(), 2);
    for stale in [&old, &current_ring] {
        assert_eq!(
            allocator.ring_write(stale, 0, &[1]),
            Err(Error::StaleAllocation)
        );
    }
    // The whole ring is free again, in the new frame.
    let whole = allocator.ring_allocate(ring, 64 << 10, 1).unwrap();
    assert_eq!((whole.frame(), whole.size()), (2, 64 << 10));

    allocator.free_after_frame(kept).unwrap();
    allocator.destroy_upload_ring(ring).unwrap();
    finish_after_frame(allocator, &device);
}

/// The README's frame loop: a ring destroyed after the last `end_frame`
/// (at shutdown) is a free of the current frame, so `wait_and_collect`
/// leaves its chunk counted in `stats()`; `collect_idle` (after
/// `vkDeviceWaitIdle`) releases it.
#[test]
fn a_ring_destroyed_after_the_last_end_frame_counts_in_stats_until_collect_idle() {
    let (allocator, device) = allocator(FakeLayout::integrated());
    let live = |allocator: &FakeAllocator| {
        let stats = allocator.stats();
        (stats.allocations(), stats.live_bytes())
    };
    let before = live(&allocator);
    let desc = UploadRingDesc {
        size: 64 << 10,
        ..UploadRingDesc::default()
    };
    let ring = allocator.create_upload_ring(&desc).unwrap();
    allocator.ring_allocate(ring, 256, 256).unwrap();
    device.signal_fence(end_frame(&allocator, &device));
    let with_ring = live(&allocator);
    assert!(with_ring.1 >= before.1 + (64 << 10), "{with_ring:?}");

    allocator.destroy_upload_ring(ring).unwrap();
    assert_eq!(
        allocator.wait_and_collect(u64::MAX),
        Ok(Collected {
            frames: 1,
            frees: 0
        })
    );
    assert_eq!(live(&allocator), with_ring);

    // SAFETY: the fake device runs no GPU work.
    unsafe { allocator.collect_idle() };
    assert_eq!(live(&allocator), before);
    finish(allocator, &device);
}

/// `collect_idle` ends the current frame as `end_frame` does (a level
/// change, after `vkDeviceWaitIdle`): a budget that shrank since the last
/// reading, another process having taken memory meanwhile, is read at the
/// next check. It kept the reading of before the level change, so
/// within-budget requests passed the budget until 30 memory objects later.
#[test]
fn collect_idle_makes_the_next_check_read_the_budget_again() {
    let (allocator, device) = allocator(FakeLayout::discrete());
    device.set_heap_budget(0, 100 * MIB, 0);
    // Dedicated memory in VRAM (type 1) alone, within its budget.
    let mut request = buffer(20 * MIB, 256, Usage::DEVICE_LOCAL)
        .dedicated(DedicatedPolicy::Always)
        .within_budget();
    request.requirements.memory_type_bits = 1 << 1;
    let first = allocator.allocate(&request).unwrap();
    // Another process takes 70 MiB: 20 + 20 + 70 would pass 100 MiB.
    device.set_heap_budget(0, 100 * MIB, 70 * MIB);
    // SAFETY: the fake device runs no GPU work.
    unsafe { allocator.collect_idle() };
    let queries = device.counters().budget_queries;
    assert_eq!(
        allocator.allocate(&request).map(|a| a.memory_type()),
        Err(Error::OverBudget {
            heap: 0,
            size: 20 * MIB,
            usage: 90 * MIB,
            budget: 100 * MIB
        })
    );
    assert_eq!(device.counters().budget_queries, queries + 1);
    allocator.free_after_frame(first).unwrap();
    finish_after_frame(allocator, &device);
}
