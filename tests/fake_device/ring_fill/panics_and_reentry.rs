//! The ring fills under a backend or a logger that misbehaves: a backend
//! panicking in a fill's flush or a check's invalidate leaves no buffer or
//! memory behind, and the ring serves on with no false report; a logger
//! panicking on the line of a write after free reaches the caller with
//! the rings' lock released; a logger calling back into the allocator on
//! that line finds its locks free.

use std::panic::{self, AssertUnwindSafe};
use std::sync::atomic::{AtomicU64, Ordering};

use vk_suballoc::device::fake::{FakeCall, FakeDevice, FakeLayout};
use vk_suballoc::{DedicatedPolicy, Usage};

use super::super::debug_fill::{all, bytes_at, write_at, FREED, NEW};
use super::super::frames::end_frame;
use super::super::{allocator_with, assert_panicked_with, buffer, finish, injected_panic};

use super::{finish_frame, ring, with_fill};

/// The message of [`panic_in_flush`]'s panic.
const FLUSH_PANIC: &str = "the backend panics in a flush";

/// Arms the fake device to panic in its `nth` flush from now (1: the
/// next); returns how many flushes are left before it does (0 once it
/// has).
fn panic_in_flush(device: &FakeDevice, nth: u64) -> std::sync::Arc<AtomicU64> {
    let left = std::sync::Arc::new(AtomicU64::new(nth));
    let counter = std::sync::Arc::clone(&left);
    device.set_flush_hook(Some(Box::new(move || {
        let before = counter.load(Ordering::SeqCst);
        if before > 0 {
            counter.store(before - 1, Ordering::SeqCst);
            assert!(before != 1, "{FLUSH_PANIC}");
        }
    })));
    left
}

/// A backend panicking in the flush of a new chunk's fill (the third
/// flush `create_upload_ring` makes in non-coherent memory, after the
/// new block's fill and the chunk allocation's) leaves no buffer or
/// memory behind: the chunk is freed before the panic goes on.
#[test]
fn a_backend_panicking_in_a_new_chunk_s_fill_leaves_nothing_behind() {
    let (allocator, device) = allocator_with(FakeLayout::mobile(), with_fill());
    let left = panic_in_flush(&device, 3);
    let caught = panic::catch_unwind(AssertUnwindSafe(|| {
        ring(&allocator, 64 << 10, Usage::READBACK, false)
    }));
    assert_panicked_with(caught, FLUSH_PANIC, "the chunk's fill's flush");
    assert_eq!(left.load(Ordering::SeqCst), 0);
    device.set_flush_hook(None);
    assert_eq!(device.live_resources(), 0, "the chunk's buffer");
    assert_eq!(allocator.stats().allocations(), 0, "the chunk's memory");
    let ring = ring(&allocator, 64 << 10, Usage::READBACK, false);
    let a = allocator.ring_allocate(ring, 1000, 256).unwrap();
    assert!(all(&bytes_at(a.mapped_ptr().unwrap(), 1000), NEW));
    allocator.destroy_upload_ring(ring).unwrap();
    finish_frame(&allocator, &device);
    finish(allocator, &device);
}

/// A backend panicking in the invalidate of a ring allocation's check,
/// or in the flush of a reclaimed frame's fill (in `collect`, which took
/// a deferred free out of the frame queue), leaves nothing behind: the
/// panic reaches the caller once the call's work is done (the deferred
/// free is carried out), and the ring goes on serving, with no false
/// report.
#[test]
fn a_backend_panicking_in_the_ring_fills_leaves_nothing_behind() {
    let (allocator, device) = allocator_with(FakeLayout::mobile(), with_fill());
    let ring = ring(&allocator, 64 << 10, Usage::READBACK, false);
    let request = buffer(1 << 20, 256, Usage::DEVICE_LOCAL).dedicated(DedicatedPolicy::Always);
    let queued = allocator.allocate(&request).unwrap();
    let first = allocator.ring_allocate(ring, 1000, 256).unwrap();
    allocator.free_after_frame(queued).unwrap();
    let live = device.live_allocations().len();
    device.signal_fence(end_frame(&allocator, &device));
    let left = panic_in_flush(&device, 1);
    let caught = panic::catch_unwind(AssertUnwindSafe(|| allocator.collect()));
    assert_panicked_with(caught, FLUSH_PANIC, "the reclaimed frame's fill's flush");
    assert_eq!(left.load(Ordering::SeqCst), 0);
    device.set_flush_hook(None);
    assert_eq!(
        device.live_allocations().len(),
        live - 1,
        "the free was made"
    );
    assert!(all(&bytes_at(first.mapped_ptr().unwrap(), 1000), FREED));
    device.panic_on(FakeCall::Invalidate, 1);
    let caught = panic::catch_unwind(AssertUnwindSafe(|| {
        allocator.ring_allocate(ring, 1000, 256)
    }));
    let invalidate = injected_panic(FakeCall::Invalidate);
    assert_panicked_with(caught, &invalidate, "the check's invalidate");
    let next = allocator.ring_allocate(ring, 1000, 256).unwrap();
    assert!(all(&bytes_at(next.mapped_ptr().unwrap(), 1000), NEW));
    finish_frame(&allocator, &device);
    let again = allocator.ring_allocate(ring, 3000, 256).unwrap();
    assert!(all(&bytes_at(again.mapped_ptr().unwrap(), 3000), NEW));
    assert_eq!(allocator.corruptions_detected(), 0);
    allocator.destroy_upload_ring(ring).unwrap();
    finish_frame(&allocator, &device);
    finish(allocator, &device);
}

/// A logger panicking on the line of a write after free (one that fails a
/// test on an error) reaches `ring_allocate`'s caller with the rings'
/// lock released and the write counted; the ring goes on serving.
#[test]
fn a_logger_panicking_on_the_line_leaves_the_ring_working() {
    let (allocator, device) = allocator_with(FakeLayout::discrete(), with_fill());
    let ring = ring(&allocator, 64 << 10, Usage::UPLOAD, false);
    let first = allocator.ring_allocate(ring, 1000, 256).unwrap();
    finish_frame(&allocator, &device);
    write_at(first.mapped_ptr().unwrap(), 5, &[0x42]);
    super::super::leak_log::panic_on_line_with("before a ring allocation");
    let caught = panic::catch_unwind(AssertUnwindSafe(|| {
        allocator.ring_allocate(ring, 1000, 256)
    }));
    assert_panicked_with(
        caught,
        "the test's logger panics on \"before a ring allocation\"",
        "the logger",
    );
    assert_eq!(allocator.corruptions_detected(), 1);
    let next = allocator.ring_allocate(ring, 1000, 256).unwrap();
    assert!(all(&bytes_at(next.mapped_ptr().unwrap(), 1000), NEW));
    assert_eq!(allocator.corruptions_detected(), 1);
    allocator.destroy_upload_ring(ring).unwrap();
    finish_frame(&allocator, &device);
    finish(allocator, &device);
}

/// A logger that calls back into the allocator on the line of a write
/// after free (to dump its state) finds its locks free: the line is
/// logged once `ring_allocate` has released the rings' lock. (Logged
/// under it, debug builds panic on the lock taken again; release builds
/// deadlock.)
#[test]
fn a_logger_calling_back_into_the_allocator_on_the_line_does_not_deadlock() {
    let (allocator, device) = allocator_with(FakeLayout::discrete(), with_fill());
    let allocator = std::sync::Arc::new(allocator);
    let ring = ring(&allocator, 64 << 10, Usage::UPLOAD, false);
    let first = allocator.ring_allocate(ring, 1000, 256).unwrap();
    finish_frame(&allocator, &device);
    write_at(first.mapped_ptr().unwrap(), 5, &[0x42]);
    let inner = std::sync::Arc::new(std::sync::Mutex::new(None));
    let (from_logger, result) = (
        std::sync::Arc::clone(&allocator),
        std::sync::Arc::clone(&inner),
    );
    super::super::leak_log::on_line_with("before a ring allocation", move || {
        let allocated = from_logger.ring_allocate(ring, 16, 16).map(|a| a.size());
        let report = from_logger.check_corruption(!0).map(|r| r.free_checked);
        *result.lock().unwrap() = Some((allocated, report.is_ok()));
    });
    let again = allocator.ring_allocate(ring, 1000, 256).unwrap();
    assert_eq!(allocator.corruptions_detected(), 1);
    assert!(all(&bytes_at(again.mapped_ptr().unwrap(), 1000), NEW));
    assert_eq!(*inner.lock().unwrap(), Some((Ok(16), true)));
    allocator.destroy_upload_ring(ring).unwrap();
    finish_frame(&allocator, &device);
    let allocator = std::sync::Arc::into_inner(allocator).unwrap();
    finish(allocator, &device);
}
