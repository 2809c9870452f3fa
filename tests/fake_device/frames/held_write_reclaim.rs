//! A ring's space held back by a write in progress: a frame collected (or
//! finished by `collect_idle`) while a write copies into it is stale at
//! once, but its space comes back only after the write, at the next ring
//! call; the write holds back its own frame and later ones, not earlier
//! ones; a grown ring does not lose the reclaim it owes; and a flush that
//! panics leaves no pin behind.

use ash::vk;
use vk_suballoc::device::fake::{FakeDevice, FakeLayout};
use vk_suballoc::{Error, RingAllocation, UploadRing, UploadRingDesc, Usage};

use super::super::{allocator, assert_panicked_with, FakeAllocator};

use super::{
    end_frame, finish_after_frame, non_coherent_ring, while_a_ring_write_flushes, HeldWrite,
};

/// How a test finishes the frames a held ring write writes into.
#[derive(Clone, Copy, Debug)]
enum Finish {
    /// Seal the frame, signal its fence, `collect`.
    Collect,
    /// `collect_idle`, which finishes the current frame too.
    CollectIdle,
}

/// A frame finished (by `collect` or `collect_idle`) while a write copies
/// into it: its allocations are stale at once, but its space comes back
/// only once the write is over, so no later allocation can be handed the
/// bytes being written; the first ring call after the write reclaims it
/// (`ring_allocate_mut` too when `through_mut`).
fn a_frame_finished_while_a_write_copies_into_it(finish_with: Finish, through_mut: bool) {
    let (mut allocator, device) = allocator(FakeLayout::mobile());
    let (ring, target) = non_coherent_ring(&allocator, 4096, 2048);
    let (written, during) = while_a_ring_write_flushes(&allocator, &device, &target, || {
        match finish_with {
            Finish::Collect => {
                device.signal_fence(end_frame(&allocator, &device));
                assert_eq!(allocator.collect().unwrap().frames, 1);
            }
            // SAFETY: nothing was submitted.
            Finish::CollectIdle => assert_eq!(unsafe { allocator.collect_idle() }.frames, 1),
        }
        (
            allocator.ring_write(&target, 0, &[1; 16]),
            allocator.ring_allocate(ring, 4096, 256),
            device.signal_fence(end_frame(&allocator, &device)),
        )
    });
    let (stale, full, ()) = during.expect("finishing the frame waited for the ring write");
    assert_eq!(stale, Err(Error::StaleAllocation));
    assert!(
        matches!(full, Err(Error::UploadRingFull { free: 2048, .. })),
        "the written frame's space came back during the write: {full:?}"
    );
    written.unwrap();
    // SAFETY: ring allocations hand out no slices.
    let bytes = unsafe { device.read(target.memory(), target.memory_offset(), 1024) };
    assert_eq!(bytes, Some(vec![0x5a; 1024]));
    // The next ring call reclaims it: the whole ring is free again.
    let whole = if through_mut {
        allocator.ring_allocate_mut(ring, 4096, 256)
    } else {
        allocator.ring_allocate(ring, 4096, 256)
    };
    assert_eq!(whole.unwrap().buffer_offset(), 0);
    assert!(device.violations().is_empty(), "{:?}", device.violations());
    allocator.destroy_upload_ring(ring).unwrap();
    finish_after_frame(allocator, &device);
}

#[test]
fn a_frame_collected_while_a_write_copies_into_it_comes_back_after_the_write() {
    a_frame_finished_while_a_write_copies_into_it(Finish::Collect, false);
}

#[test]
fn a_frame_collected_idle_while_a_write_copies_into_it_comes_back_after_the_write() {
    a_frame_finished_while_a_write_copies_into_it(Finish::CollectIdle, false);
}

/// `ring_allocate_mut` retries the reclaim a write held up, as
/// `ring_allocate` does: an engine that allocates through `&mut self`
/// once its loading thread's write is over gets the space back.
#[test]
fn a_frame_collected_while_a_write_copies_into_it_comes_back_to_ring_allocate_mut() {
    a_frame_finished_while_a_write_copies_into_it(Finish::Collect, true);
}

/// A write held in its flush into the oldest of as many sealed frames as
/// a ring holds (64, each collected meanwhile but held back by the pin):
/// `end_frame` refuses a 65th, and `collect_idle` waits for the write
/// (with no lock held: the write's flush and other threads' ring calls go
/// on), then finishes every frame; the whole ring is free again.
#[test]
fn collect_idle_waits_for_a_write_into_the_oldest_of_a_full_ring_s_frames() {
    use std::sync::mpsc;
    use std::time::Duration;

    let (allocator, device) = allocator(FakeLayout::mobile());
    let (ring, target) = non_coherent_ring(&allocator, 4096, 1024);
    std::thread::scope(|scope| {
        let held = HeldWrite::start(scope, &allocator, &device, &target, &[0x5a; 1024]);
        for _ in 0..64 {
            device.signal_fence(end_frame(&allocator, &device));
            allocator.collect().unwrap();
        }
        let fence = device.create_fence();
        // SAFETY: a fake fence.
        let refused = unsafe { allocator.end_frame(fence) };
        assert_eq!(refused, Err(Error::TooManyFramesInFlight));
        let (done_tx, done) = mpsc::channel();
        let shared = &allocator;
        let idle = scope.spawn(move || {
            // SAFETY: nothing was submitted.
            let collected = unsafe { shared.collect_idle() };
            done_tx.send(()).unwrap();
            collected
        });
        assert!(
            done.recv_timeout(Duration::from_millis(300)).is_err(),
            "collect_idle did not wait for the write"
        );
        // Meanwhile other threads' ring calls go on: an allocation in the
        // current frame, next to the held frame's 1 KiB.
        let current = allocator.ring_allocate(ring, 1024, 256).unwrap();
        held.release().unwrap();
        let collected = idle.join().unwrap();
        assert_eq!(collected.frames, 1);
        assert_eq!(
            allocator.ring_write(&current, 0, &[1; 4]),
            Err(Error::StaleAllocation)
        );
    });
    let whole = allocator.ring_allocate(ring, 4096, 256).unwrap();
    assert_eq!(whole.buffer_offset(), 0);
    assert!(device.violations().is_empty(), "{:?}", device.violations());
    allocator.destroy_upload_ring(ring).unwrap();
    finish_after_frame(allocator, &device);
}

/// A growing 4 KiB ring on a non-coherent type whose first chunk holds
/// frame 0's 2 KiB `target`, frame 0 sealed (`sealed`, its fence), and a
/// second chunk made by a 4 KiB request in frame 1 (`grown`).
fn grown_ring(
    allocator: &FakeAllocator,
    device: &FakeDevice,
) -> (UploadRing, RingAllocation, vk::Fence, RingAllocation) {
    let desc = UploadRingDesc {
        size: 4096,
        usage: Usage::READBACK,
        grow: true,
        ..UploadRingDesc::default()
    };
    let ring = allocator.create_upload_ring(&desc).unwrap();
    let target = allocator.ring_allocate(ring, 2048, 256).unwrap();
    let sealed = end_frame(allocator, device);
    // Chunk 0 holds frame 0's 2 KiB: a 4 KiB request grows the ring, in
    // frame 1.
    let grown = allocator.ring_allocate(ring, 4096, 256).unwrap();
    assert_ne!(grown.buffer(), target.buffer());
    (ring, target, sealed, grown)
}

/// A growing ring's first chunk has a frame held by a write, and a second
/// chunk that began a frame after it (made before the write: making one
/// in the ring's memory type waits for the write's flush, under its pool's
/// lock); both frames are collected during the write. Once it is over,
/// both chunks' space comes back: the reclaim the first chunk owes is not
/// lost to the second one's later `first_frame`.
#[test]
fn a_held_write_s_reclaim_is_not_lost_in_a_grown_ring() {
    let (allocator, device) = allocator(FakeLayout::mobile());
    let (ring, target, sealed, grown) = grown_ring(&allocator, &device);
    let (written, during) = while_a_ring_write_flushes(&allocator, &device, &target, || {
        device.signal_fence(sealed);
        assert_eq!(allocator.collect().unwrap().frames, 1);
        device.signal_fence(end_frame(&allocator, &device));
        assert_eq!(allocator.collect().unwrap().frames, 1);
        // Chunk 0's frame 0 is held; chunk 1's frame came back. (Not a
        // request that grows the ring: it waits for the flush.)
        allocator.ring_allocate(ring, 4096, 256).unwrap()
    });
    let during = during.expect("the ring calls waited for the write");
    written.unwrap();
    assert_eq!(during.buffer(), grown.buffer());
    // Chunk 1 is full: the next ring call gets chunk 0 back whole.
    let back = allocator.ring_allocate(ring, 4096, 256).unwrap();
    assert_eq!(back.buffer(), target.buffer());
    allocator.destroy_upload_ring(ring).unwrap();
    finish_after_frame(allocator, &device);
}

/// A growing ring's first chunk has its frame held by a write when that
/// frame is collected, and a second chunk that began after that frame
/// (so the collect reaches nothing in it). Once the write is over, the
/// next ring call gets the first chunk's space back: the reclaim it owes
/// is not forgotten because the newer chunk owed none.
#[test]
fn a_held_write_s_reclaim_is_not_lost_to_a_chunk_made_after_its_frame() {
    let (allocator, device) = allocator(FakeLayout::mobile());
    let (ring, target, sealed, _) = grown_ring(&allocator, &device);
    let (written, during) = while_a_ring_write_flushes(&allocator, &device, &target, || {
        device.signal_fence(sealed);
        allocator.collect().unwrap()
    });
    assert_eq!(during.expect("collect waited for the write").frames, 1);
    written.unwrap();
    // Chunk 1 is full (frame 1 is current): the next ring call finds
    // chunk 0 whole again instead of growing the ring.
    let back = allocator.ring_allocate(ring, 4096, 256).unwrap();
    assert_eq!(back.buffer(), target.buffer());
    allocator.destroy_upload_ring(ring).unwrap();
    finish_after_frame(allocator, &device);
}

/// A growing ring that decides to grow while a write holds its full
/// chunk's frame (collected meanwhile) finds, once its new chunk is made,
/// that the write is over and the frame's space came back: the request
/// goes there and the new chunk is freed, as when another thread's
/// `collect` makes room meanwhile, instead of the ring keeping a chunk it
/// did not need for good.
#[test]
fn a_ring_growing_while_a_held_write_ends_takes_the_space_it_frees() {
    use std::time::Duration;

    let config = vk_suballoc::Config {
        large_heap_block_size: 1 << 20,
        ..vk_suballoc::Config::default()
    };
    let (allocator, device) = super::super::allocator_with(FakeLayout::mobile(), config);
    let desc = UploadRingDesc {
        size: 1 << 20,
        usage: Usage::READBACK,
        grow: true,
        ..UploadRingDesc::default()
    };
    let ring = allocator.create_upload_ring(&desc).unwrap();
    let target = allocator.ring_allocate(ring, 768 << 10, 256).unwrap();
    let grown = std::thread::scope(|scope| {
        let held = HeldWrite::start(scope, &allocator, &device, &target, &[0x5a; 1024]);
        device.signal_fence(end_frame(&allocator, &device));
        assert_eq!(allocator.collect().unwrap().frames, 1);
        // The new chunk's memory is made (under the pool's lock, which the
        // held flush holds until `go`) well after the write is over.
        device.slow_allocations(Some(Duration::from_millis(300)));
        let grower = scope.spawn(|| allocator.ring_allocate(ring, 768 << 10, 256));
        std::thread::sleep(Duration::from_millis(50));
        held.release().unwrap();
        grower.join().unwrap().unwrap()
    });
    device.slow_allocations(None);
    assert_eq!(
        grown.buffer(),
        target.buffer(),
        "the ring kept a new chunk though its old one had room again"
    );
    assert_eq!(device.live_resources(), 1);
    allocator.destroy_upload_ring(ring).unwrap();
    finish_after_frame(allocator, &device);
}

/// A backend that panics in a ring write's flush (a bug, caught by the
/// engine) leaves no pin behind: the frame written comes back at its
/// collect, and the next write into the chunk is not kept waiting for its
/// turn.
#[test]
fn a_ring_write_whose_flush_panics_leaves_no_pin_behind() {
    use std::panic::{self, AssertUnwindSafe};

    let (allocator, device) = allocator(FakeLayout::mobile());
    let (ring, target) = non_coherent_ring(&allocator, 4096, 4096);
    device.set_flush_hook(Some(Box::new(|| panic!("the backend's flush panics"))));
    let caught = panic::catch_unwind(AssertUnwindSafe(|| {
        allocator.ring_write(&target, 0, &[1; 64])
    }));
    let flush = "the backend's flush panics";
    assert_panicked_with(caught, flush, "the ring write's flush");
    // (The hook panicked while taken out: it is not put back.)
    device.signal_fence(end_frame(&allocator, &device));
    assert_eq!(allocator.collect().unwrap().frames, 1);
    let whole = allocator.ring_allocate(ring, 4096, 256).unwrap();
    allocator.ring_write(&whole, 0, &[2; 4096]).unwrap();
    allocator.destroy_upload_ring(ring).unwrap();
    finish_after_frame(allocator, &device);
}

/// A write held in the middle one of three collected frames: the oldest
/// frame's space comes back at the collect, the written frame's and the
/// later one's only after the write (a ring's frames come back in order).
#[test]
fn a_held_write_keeps_back_its_frame_and_later_ones_but_not_earlier_ones() {
    let (allocator, device) = allocator(FakeLayout::mobile());
    let (ring, _oldest) = non_coherent_ring(&allocator, 4096, 1024);
    let first = end_frame(&allocator, &device);
    let target = allocator.ring_allocate(ring, 1024, 256).unwrap();
    let second = end_frame(&allocator, &device);
    let _later = allocator.ring_allocate(ring, 1024, 256).unwrap();
    let third = end_frame(&allocator, &device);
    let (written, during) = while_a_ring_write_flushes(&allocator, &device, &target, || {
        for fence in [first, second, third] {
            device.signal_fence(fence);
        }
        assert_eq!(allocator.collect().unwrap().frames, 3);
        allocator.ring_allocate(ring, 2048, 256)
    });
    let during = during.expect("the ring calls waited for the write");
    written.unwrap();
    // 1 KiB at the ring's end and the oldest frame's 1 KiB at its start:
    // 2 KiB free, not in one piece.
    assert!(
        matches!(during, Err(Error::UploadRingFull { free: 2048, .. })),
        "{during:?}"
    );
    let whole = allocator.ring_allocate(ring, 4096, 256).unwrap();
    assert_eq!(whole.buffer_offset(), 0);
    allocator.destroy_upload_ring(ring).unwrap();
    finish_after_frame(allocator, &device);
}

/// A write held in the current frame of a ring that holds as many sealed
/// frames as it can (64, the oldest 64 frames before the written one):
/// collecting them gives all their space back at once. The write keeps
/// back its own frame only; a pin that also counted for a frame 64 or 63
/// frames older (too few pin slots) kept the whole ring full.
#[test]
fn a_held_write_into_the_current_frame_keeps_back_none_of_64_sealed_frames() {
    let (allocator, device) = allocator(FakeLayout::mobile());
    let desc = UploadRingDesc {
        size: 65 * 1024,
        usage: Usage::READBACK,
        ..UploadRingDesc::default()
    };
    let ring = allocator.create_upload_ring(&desc).unwrap();
    let mut fences = Vec::new();
    for _ in 0..64 {
        allocator.ring_allocate(ring, 1024, 256).unwrap();
        fences.push(end_frame(&allocator, &device));
    }
    let target = allocator.ring_allocate(ring, 1024, 256).unwrap();
    assert_eq!((target.frame(), target.buffer_offset()), (64, 64 * 1024));
    let (written, during) = while_a_ring_write_flushes(&allocator, &device, &target, || {
        for &fence in &fences {
            device.signal_fence(fence);
        }
        assert_eq!(allocator.collect().unwrap().frames, 64);
        allocator.ring_allocate(ring, 64 * 1024, 256)
    });
    let during = during.expect("the ring calls waited for the write");
    written.unwrap();
    let back = during.expect("the 64 collected frames' space came back");
    assert_eq!(back.buffer_offset(), 0);
    allocator.destroy_upload_ring(ring).unwrap();
    finish_after_frame(allocator, &device);
}
