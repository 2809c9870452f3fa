//! Frames in flight on the fake device: deferred frees, fences, upload rings,
//! budgets and device loss.
//!
//! The tests sit in the files below, one concept each. This file holds the
//! helpers they share, some used by other modules of the binary too: ending
//! a frame on a new fake fence, finishing a test after a frame, and a ring
//! write held in its flush (`HeldWrite`, `while_a_ring_write_flushes`) while
//! another thread acts.

use std::sync::mpsc::Sender;

use ash::vk;
use vk_suballoc::device::fake::FakeDevice;
use vk_suballoc::{Allocation, Error, RingAllocation, UploadRing, UploadRingDesc, Usage};

use super::{finish, FakeAllocator};

#[path = "frames/collect_races.rs"]
mod collect_races;
#[path = "frames/collection.rs"]
mod collection;
#[path = "frames/concurrent_frame_calls.rs"]
mod concurrent_frame_calls;
#[path = "frames/deferred_frees.rs"]
mod deferred_frees;
#[path = "frames/device_loss.rs"]
mod device_loss;
#[path = "frames/held_write_reclaim.rs"]
mod held_write_reclaim;
#[path = "frames/ring_allocation.rs"]
mod ring_allocation;
#[path = "frames/ring_chunk_failures.rs"]
mod ring_chunk_failures;
#[path = "frames/ring_creation.rs"]
mod ring_creation;
#[path = "frames/ring_destroyed_under_a_write.rs"]
mod ring_destroyed_under_a_write;
#[path = "frames/ring_growth.rs"]
mod ring_growth;
#[path = "frames/ring_max_buffer.rs"]
mod ring_max_buffer;
#[path = "frames/ring_random_calls.rs"]
mod ring_random_calls;
#[path = "frames/ring_stress.rs"]
mod ring_stress;
#[path = "frames/ring_writes.rs"]
mod ring_writes;

/// Seals the current frame with a new fake fence; returns the fence.
pub(super) fn end_frame(allocator: &FakeAllocator, device: &FakeDevice) -> vk::Fence {
    let fence = device.create_fence();
    // SAFETY: fake fences; the test signals each only when "the GPU" is done.
    unsafe { allocator.end_frame(fence) }.unwrap();
    fence
}

/// Frees `allocations` after a frame, as an engine does, lets the fake GPU
/// finish that frame, and checks that the device is left clean.
pub(super) fn free_all_and_finish(
    allocator: FakeAllocator,
    device: &FakeDevice,
    allocations: impl IntoIterator<Item = Allocation>,
) {
    for allocation in allocations {
        allocator.free_after_frame(allocation).unwrap();
    }
    finish_after_frame(allocator, device);
}

/// Ends the frame, lets the fake GPU finish it, collects its frees and
/// checks that the device is left clean: the end of every test with frames.
pub(super) fn finish_after_frame(allocator: FakeAllocator, device: &FakeDevice) {
    device.signal_fence(end_frame(&allocator, device));
    allocator.collect().unwrap();
    finish(allocator, device);
}

/// A `ring_write` at offset 0 on a thread of `scope`'s, held in its flush
/// (`FakeDevice::set_flush_hook`) from `start`'s return until `release`;
/// later flushes go through. A safety net lets the write go on after 30
/// seconds should a test not release it.
struct HeldWrite<'scope> {
    device: &'scope FakeDevice,
    go: Sender<()>,
    writer: std::thread::ScopedJoinHandle<'scope, Result<(), Error>>,
}

impl<'scope> HeldWrite<'scope> {
    /// Starts writing `bytes` into `target` (in non-coherent memory, so that
    /// the write flushes) and returns once the write is held in its flush.
    fn start(
        scope: &'scope std::thread::Scope<'scope, '_>,
        allocator: &'scope FakeAllocator,
        device: &'scope FakeDevice,
        target: &'scope RingAllocation,
        bytes: &'scope [u8],
    ) -> Self {
        use std::sync::mpsc;
        use std::time::Duration;

        let (entered_tx, entered) = mpsc::channel::<()>();
        let (go, go_rx) = mpsc::channel::<()>();
        let mut armed = true;
        device.set_flush_hook(Some(Box::new(move || {
            if std::mem::take(&mut armed) {
                entered_tx.send(()).unwrap();
                let _ = go_rx.recv_timeout(Duration::from_secs(30));
            }
        })));
        let writer = scope.spawn(move || allocator.ring_write(target, 0, bytes));
        entered
            .recv_timeout(Duration::from_secs(10))
            .expect("the ring write flushed");
        Self { device, go, writer }
    }

    /// Lets the write go on, waits for it and clears the flush hook;
    /// returns the write's result.
    fn release(self) -> Result<(), Error> {
        self.go.send(()).unwrap();
        let result = self.writer.join().unwrap();
        self.device.set_flush_hook(None);
        result
    }
}

/// Runs `ring_write(target, 0, ..)` of 1 KiB of 0x5a on a thread of its
/// own, held in its flush (`FakeDevice::set_flush_hook`) while `during`
/// runs on a third thread; the write goes on once `during` has returned
/// or 10 seconds have passed. Returns the write's result and `during`'s,
/// `None` when it had not returned by then (it waited for the write).
/// `target` is in non-coherent memory, so that the write flushes.
pub(super) fn while_a_ring_write_flushes<R: Send>(
    allocator: &FakeAllocator,
    device: &FakeDevice,
    target: &RingAllocation,
    during: impl FnOnce() -> R + Send,
) -> (Result<(), Error>, Option<R>) {
    use std::sync::mpsc;
    use std::time::Duration;

    std::thread::scope(|scope| {
        let held = HeldWrite::start(scope, allocator, device, target, &[0x5a; 1024]);
        let (done_tx, done) = mpsc::channel();
        // Ignored when the test gave up on it already.
        scope.spawn(move || {
            let _ = done_tx.send(during());
        });
        let result = done.recv_timeout(Duration::from_secs(10)).ok();
        (held.release(), result)
    })
}

/// A non-coherent ring of `size` bytes (mobile's type 2) and one allocation
/// of `len` bytes in it.
fn non_coherent_ring(
    allocator: &FakeAllocator,
    size: u64,
    len: u64,
) -> (UploadRing, RingAllocation) {
    let desc = UploadRingDesc {
        size,
        usage: Usage::READBACK,
        ..UploadRingDesc::default()
    };
    let ring = allocator.create_upload_ring(&desc).unwrap();
    let allocation = allocator.ring_allocate(ring, len, 256).unwrap();
    (ring, allocation)
}
