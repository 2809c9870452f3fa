//! Allocating from an upload ring: frames reclaimed once collected and never
//! overwritten while in flight, the free bytes a full ring reports, a
//! request larger than a ring that does not grow, the 64 sealed frames a
//! ring tracks (and `collect_idle` on a ring at that limit), and
//! `ring_allocate`'s refusals in their documented order.

use vk_suballoc::device::fake::FakeLayout;
use vk_suballoc::{Error, UploadRingDesc};

use super::super::{allocator, finish};

use super::{end_frame, finish_after_frame};

#[test]
fn upload_ring_reclaims_frames_and_never_overwrites_frames_in_flight() {
    let (allocator, device) = allocator(FakeLayout::discrete());
    let desc = UploadRingDesc {
        size: 4096,
        ..UploadRingDesc::default()
    };
    let ring = allocator.create_upload_ring(&desc).unwrap();
    let first = allocator.ring_allocate(ring, 1000, 256).unwrap();
    assert_eq!(first.buffer_offset(), 0);
    allocator.ring_write(&first, 0, &[1; 1000]).unwrap();
    let second = allocator.ring_allocate(ring, 1000, 256).unwrap();
    assert_eq!(second.buffer_offset(), 1024);
    let f0 = end_frame(&allocator, &device);
    let third = allocator.ring_allocate(ring, 2000, 256).unwrap();
    assert_eq!(third.frame(), 1);
    // Frames 0 and 1 hold the ring: 2000 more bytes would overwrite frame 0.
    assert!(matches!(
        allocator.ring_allocate(ring, 2000, 256),
        Err(Error::UploadRingFull { size: 2000, .. })
    ));
    // SAFETY: ring allocations hand out no slices.
    let bytes = unsafe { device.read(first.memory(), first.memory_offset(), 1000) }.unwrap();
    assert!(bytes.iter().all(|&b| b == 1));
    device.signal_fence(f0);
    allocator.collect().unwrap();
    // Frame 0 is collected: its allocations are stale, its space is back.
    assert_eq!(
        allocator.ring_write(&first, 0, &[2]),
        Err(Error::StaleAllocation)
    );
    let wrapped = allocator.ring_allocate(ring, 2000, 256).unwrap();
    assert_eq!(wrapped.buffer_offset(), 0);
    allocator.ring_write(&wrapped, 0, &[3; 2000]).unwrap();
    assert_eq!(
        allocator.ring_write(&wrapped, 1999, &[0, 0]),
        Err(Error::RangeOutOfBounds {
            start: 1999,
            end: 2001,
            size: 2000
        })
    );
    allocator.destroy_upload_ring(ring).unwrap();
    assert_eq!(
        allocator.ring_allocate(ring, 1, 1).map(|_| ()),
        Err(Error::StaleAllocation)
    );
    finish_after_frame(allocator, &device);
}

/// A full ring reports how many bytes it has free: those left between the
/// head and the oldest frame in flight.
#[test]
fn a_full_ring_reports_its_free_bytes() {
    let (allocator, device) = allocator(FakeLayout::discrete());
    let desc = UploadRingDesc {
        size: 4096,
        ..UploadRingDesc::default()
    };
    let ring = allocator.create_upload_ring(&desc).unwrap();
    // Frame 0: [0, 3000); frame 1: [3072, 4072). 24 bytes are left at the end
    // and frame 0 holds the start.
    allocator.ring_allocate(ring, 3000, 256).unwrap();
    let f0 = end_frame(&allocator, &device);
    allocator.ring_allocate(ring, 1000, 256).unwrap();
    assert_eq!(
        allocator.ring_allocate(ring, 100, 1).map(|_| ()),
        Err(Error::UploadRingFull {
            size: 100,
            free: 24
        })
    );
    // Frame 0 reclaimed: 3024 bytes free in two pieces (24 at the end, 3000
    // at the start); the free count covers both.
    device.signal_fence(f0);
    allocator.collect().unwrap();
    assert_eq!(
        allocator.ring_allocate(ring, 3050, 1).map(|_| ()),
        Err(Error::UploadRingFull {
            size: 3050,
            free: 3024
        })
    );
    allocator.destroy_upload_ring(ring).unwrap();
    finish_after_frame(allocator, &device);
}

/// A request larger than a ring that does not grow can never fit: it is
/// refused as too small for the ring (not as "full", which `collect` would
/// cure), on an empty ring too; a growing ring makes a chunk large enough.
#[test]
fn a_request_larger_than_the_ring_is_refused_as_such() {
    let (allocator, device) = allocator(FakeLayout::discrete());
    let fixed = allocator
        .create_upload_ring(&UploadRingDesc {
            size: 4096,
            ..UploadRingDesc::default()
        })
        .unwrap();
    assert_eq!(
        allocator.ring_allocate(fixed, 5000, 1).map(|_| ()),
        Err(Error::UploadRingTooSmall {
            size: 5000,
            capacity: 4096
        })
    );
    let growing = allocator
        .create_upload_ring(&UploadRingDesc {
            size: 4096,
            grow: true,
            ..UploadRingDesc::default()
        })
        .unwrap();
    let big = allocator.ring_allocate(growing, 5000, 1).unwrap();
    assert_eq!(big.size(), 5000);
    allocator.destroy_upload_ring(fixed).unwrap();
    allocator.destroy_upload_ring(growing).unwrap();
    finish_after_frame(allocator, &device);
}

/// A ring tracks 64 sealed frames: the 65th `end_frame` without `collect`
/// fails and changes nothing; after `collect`, frames seal again and the
/// ring's space comes back.
#[test]
fn a_ring_limits_frames_in_flight_until_collect() {
    let (allocator, device) = allocator(FakeLayout::integrated());
    let desc = UploadRingDesc {
        size: 64 << 10,
        ..UploadRingDesc::default()
    };
    let ring = allocator.create_upload_ring(&desc).unwrap();
    let mut fences = Vec::new();
    for frame in 0..64u64 {
        let a = allocator.ring_allocate(ring, 1000, 1024).unwrap();
        assert_eq!((a.frame(), a.buffer_offset()), (frame, frame * 1024));
        fences.push(end_frame(&allocator, &device));
    }
    let fence = device.create_fence();
    // SAFETY: fake fences; this one is never signalled (the seal fails).
    let sealed = unsafe { allocator.end_frame(fence) };
    assert_eq!(sealed, Err(Error::TooManyFramesInFlight));
    assert_eq!(allocator.current_frame(), 64);
    assert_eq!(allocator.frames_in_flight(), 64);
    // The ring is full: 64 frames of 1 KiB each (the last 24 bytes unused).
    assert!(matches!(
        allocator.ring_allocate(ring, 1000, 1024),
        Err(Error::UploadRingFull { free: 24, .. })
    ));
    // The first frame's fence signals: one frame is reclaimed, one seal is
    // possible again, and its kilobyte is back.
    device.signal_fence(fences[0]);
    assert_eq!(allocator.collect().unwrap().frames, 1);
    let a = allocator.ring_allocate(ring, 1000, 1024).unwrap();
    assert_eq!((a.frame(), a.buffer_offset()), (64, 0));
    fences.push(end_frame(&allocator, &device));
    // SAFETY: as above.
    let sealed = unsafe { allocator.end_frame(fence) };
    assert_eq!(sealed, Err(Error::TooManyFramesInFlight));
    for &fence in &fences {
        device.signal_fence(fence);
    }
    assert_eq!(allocator.collect().unwrap().frames, 64);
    let a = allocator.ring_allocate(ring, 64 << 10, 1).unwrap();
    assert_eq!(a.buffer_offset(), 0);
    allocator.destroy_upload_ring(ring).unwrap();
    finish_after_frame(allocator, &device);
}

/// `collect_idle` with a ring at its limit of 64 sealed frames: every one is
/// reclaimed before the current frame is sealed in the ring too, so the
/// ring's frames stay in step with the allocator's, its new allocations can
/// be written, and frames seal again.
#[test]
fn collect_idle_frees_a_ring_with_64_frames_in_flight() {
    let (allocator, device) = allocator(FakeLayout::integrated());
    let desc = UploadRingDesc {
        size: 64 << 10,
        ..UploadRingDesc::default()
    };
    let ring = allocator.create_upload_ring(&desc).unwrap();
    for _ in 0..64 {
        allocator.ring_allocate(ring, 1000, 1024).unwrap();
        // Its fence is never signalled.
        end_frame(&allocator, &device);
    }
    let current = allocator.ring_allocate(ring, 24, 1).unwrap();
    assert_eq!(allocator.frames_in_flight(), 64);

    // SAFETY: the fake device runs no GPU work.
    let collected = unsafe { allocator.collect_idle() };
    assert_eq!(collected.frames, 65);
    assert_eq!(
        allocator.ring_write(&current, 0, &[1]),
        Err(Error::StaleAllocation)
    );
    let whole = allocator.ring_allocate(ring, 64 << 10, 1).unwrap();
    assert_eq!((whole.frame(), whole.buffer_offset()), (65, 0));
    allocator.ring_write(&whole, 0, &[2; 64]).unwrap();
    device.signal_fence(end_frame(&allocator, &device));
    assert_eq!(allocator.collect().unwrap().frames, 1);
    let next = allocator.ring_allocate(ring, 64 << 10, 1).unwrap();
    assert_eq!(next.frame(), 66);
    allocator.ring_write(&next, 0, &[3; 64]).unwrap();
    allocator.destroy_upload_ring(ring).unwrap();
    finish_after_frame(allocator, &device);
}

/// `ring_allocate`'s documented order, on requests that fail several
/// checks: the ring's owner, then whether it lives, then the size and
/// alignment, then a size past a ring that does not grow, then the space
/// frames in flight hold. A growing ring asked for more than every heap
/// says so, and keeps nothing.
#[test]
fn ring_allocate_refuses_in_the_documented_order() {
    let (other, other_device) = allocator(FakeLayout::integrated());
    let (allocator, device) = allocator(FakeLayout::integrated());
    let desc = UploadRingDesc {
        size: 4096,
        ..UploadRingDesc::default()
    };
    let ring = allocator.create_upload_ring(&desc).unwrap();
    let theirs = other.create_upload_ring(&desc).unwrap();
    let gone = allocator.create_upload_ring(&desc).unwrap();
    allocator.destroy_upload_ring(gone).unwrap();
    let refused = |ring, size, align| allocator.ring_allocate(ring, size, align).map(|a| a.size());
    assert_eq!(refused(theirs, 0, 3), Err(Error::ForeignAllocation));
    assert_eq!(refused(gone, 0, 3), Err(Error::StaleAllocation));
    assert_eq!(refused(ring, 0, 3), Err(Error::ZeroSize));
    assert_eq!(
        refused(ring, 8192, 3),
        Err(Error::AlignmentNotPowerOfTwo(3))
    );
    // Fill the frame: a request past the ring is still too small for it,
    // one within it finds the ring full.
    allocator.ring_allocate(ring, 4096, 1).unwrap();
    assert_eq!(
        refused(ring, 8192, 1),
        Err(Error::UploadRingTooSmall {
            size: 8192,
            capacity: 4096
        })
    );
    assert_eq!(
        refused(ring, 1, 1),
        Err(Error::UploadRingFull { size: 1, free: 0 })
    );
    // A growing ring: more than every heap (the integrated layout's
    // largest) is refused as such, with no chunk made.
    let growing = allocator
        .create_upload_ring(&UploadRingDesc { grow: true, ..desc })
        .unwrap();
    let before = (allocator.stats(), device.live_resources());
    assert!(matches!(
        refused(growing, u64::MAX, 1),
        Err(Error::SizeExceedsHeaps { size: u64::MAX, .. })
    ));
    assert_eq!((allocator.stats(), device.live_resources()), before);
    allocator.destroy_upload_ring(ring).unwrap();
    allocator.destroy_upload_ring(growing).unwrap();
    other.destroy_upload_ring(theirs).unwrap();
    finish(allocator, &device);
    finish(other, &other_device);
}
