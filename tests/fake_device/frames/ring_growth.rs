//! A growing upload ring's new chunks: a request past the full chunk adds
//! one, which is made (a buffer and a memory object, slow on some drivers)
//! with no lock of the allocator held, so another thread's `end_frame`,
//! `collect` and `destroy_upload_ring` do not wait for it, and two threads
//! growing one ring at once keep one new chunk, and a grown ring reuses its
//! chunks frame after frame. `StalledGrow` holds the grow in the memory
//! callback.

use vk_suballoc::device::fake::{FakeDevice, FakeLayout};
use vk_suballoc::{Error, RingAllocation, UploadRing, UploadRingDesc};

use super::super::{allocator, finish, FakeAllocator};

use super::{end_frame, finish_after_frame};

#[test]
fn a_growing_ring_adds_chunks() {
    let (allocator, device) = allocator(FakeLayout::integrated());
    let desc = UploadRingDesc {
        size: 4096,
        grow: true,
        ..UploadRingDesc::default()
    };
    let ring = allocator.create_upload_ring(&desc).unwrap();
    let a = allocator.ring_allocate(ring, 3000, 16).unwrap();
    let b = allocator.ring_allocate(ring, 3000, 16).unwrap();
    assert_ne!(a.buffer(), b.buffer());
    let c = allocator.ring_allocate(ring, 10_000, 16).unwrap();
    assert_eq!(c.size(), 10_000);
    allocator.ring_write(&a, 0, &[5; 3000]).unwrap();
    allocator.ring_write(&b, 0, &[6; 3000]).unwrap();
    // SAFETY: ring allocations hand out no slices.
    let bytes = unsafe { device.read(a.memory(), a.memory_offset(), 3000) }.unwrap();
    assert!(bytes.iter().all(|&x| x == 5));
    // Dropping the allocator destroys the ring's buffers and memory.
    finish(allocator, &device);
}

/// Bytes of each chunk of the rings the tests of a growing ring's new
/// chunk use: every chunk takes a memory object of its own (the BAR heap's
/// blocks are smaller), so a grow calls the memory callback.
const GROWING_CHUNK: u64 = 48 << 20;

/// A growing ring whose first chunk is full, and a memory callback that,
/// on the next `Allocated` (the ring's next chunk), stands for the slow
/// `vkAllocateMemory` (milliseconds on some drivers): it says so on
/// `entered`, then waits for `go`, or 3 seconds, and sets `waited_out`
/// then.
struct StalledGrow {
    allocator: FakeAllocator,
    device: FakeDevice,
    ring: UploadRing,
    entered: std::sync::mpsc::Receiver<()>,
    go: std::sync::mpsc::Sender<()>,
    waited_out: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl StalledGrow {
    fn new() -> Self {
        use std::sync::atomic::{AtomicBool, Ordering};
        use std::sync::mpsc;
        use std::sync::{Arc, Mutex};
        use std::time::Duration;
        use vk_suballoc::MemoryEventKind;

        let (mut allocator, device) = allocator(FakeLayout::discrete());
        let (entered_tx, entered) = mpsc::channel::<()>();
        let (go, go_rx) = mpsc::channel::<()>();
        let (entered_tx, go_rx) = (Mutex::new(entered_tx), Mutex::new(go_rx));
        let waited_out = Arc::new(AtomicBool::new(false));
        let waited = Arc::clone(&waited_out);
        let armed = Arc::new(AtomicBool::new(false));
        let arm = Arc::clone(&armed);
        allocator.set_memory_callback(move |event| {
            if event.kind != MemoryEventKind::Allocated || !armed.swap(false, Ordering::SeqCst) {
                return;
            }
            entered_tx.lock().unwrap().send(()).unwrap();
            let go = go_rx.lock().unwrap().recv_timeout(Duration::from_secs(3));
            if go.is_err() {
                waited.store(true, Ordering::SeqCst);
            }
        });
        let desc = UploadRingDesc {
            size: GROWING_CHUNK,
            grow: true,
            ..UploadRingDesc::default()
        };
        let ring = allocator.create_upload_ring(&desc).unwrap();
        allocator.ring_allocate(ring, GROWING_CHUNK, 256).unwrap();
        arm.store(true, Ordering::SeqCst);
        Self {
            allocator,
            device,
            ring,
            entered,
            go,
            waited_out,
        }
    }

    /// Waits until the callback stands in the ring's new chunk.
    fn wait_for_the_grow(&self) {
        self.entered
            .recv_timeout(std::time::Duration::from_secs(10))
            .expect("the ring's new chunk made a memory object");
    }

    fn waited_out(&self) -> bool {
        self.waited_out.load(std::sync::atomic::Ordering::SeqCst)
    }
}

/// Fills a growing ring's first chunk, then has another thread allocate
/// from it, which makes a chunk, stalled in the memory callback
/// ([`StalledGrow`]) until `during` has returned on this thread. Returns
/// the grower's result, the ring, whether the callback waited the 3
/// seconds out (`during` waited for the grow), and the allocator and
/// device.
fn while_a_ring_grows(
    during: impl FnOnce(&FakeAllocator, &FakeDevice, UploadRing),
) -> (
    Result<RingAllocation, Error>,
    UploadRing,
    bool,
    FakeAllocator,
    FakeDevice,
) {
    let stall = StalledGrow::new();
    let grown = std::thread::scope(|scope| {
        let (allocator, ring) = (&stall.allocator, stall.ring);
        let grower = scope.spawn(move || allocator.ring_allocate(ring, 256, 256));
        stall.wait_for_the_grow();
        during(allocator, &stall.device, ring);
        stall.go.send(()).unwrap();
        grower.join().unwrap()
    });
    let waited = stall.waited_out();
    (grown, stall.ring, waited, stall.allocator, stall.device)
}

/// A growing ring makes its new chunk (a buffer and memory,
/// `vkAllocateMemory` taking milliseconds on some drivers) with no lock of
/// the allocator held: the render thread's `end_frame` and `collect` do not
/// wait for another thread's ring allocation. Before, `ring_allocate` held
/// the upload rings' lock, which `end_frame` takes, across the chunk's
/// creation. The allocation, made once the chunk is in, belongs to the
/// frame `end_frame` started.
#[test]
fn end_frame_does_not_wait_for_a_ring_making_a_chunk() {
    let fence = std::sync::Mutex::new(None);
    let (grown, ring, waited, allocator, device) = while_a_ring_grows(|allocator, device, _| {
        let sealed = end_frame(allocator, device);
        allocator.collect().unwrap();
        *fence.lock().unwrap() = Some(sealed);
    });
    assert!(
        !waited,
        "end_frame or collect waited for the ring's new chunk"
    );
    let grown = grown.unwrap();
    assert_eq!(grown.frame(), allocator.current_frame());
    allocator.ring_write(&grown, 0, &[7; 256]).unwrap();
    assert_eq!(allocator.stats().allocations(), 2);
    device.signal_fence(fence.lock().unwrap().take().unwrap());
    allocator.destroy_upload_ring(ring).unwrap();
    finish_after_frame(allocator, &device);
}

/// A ring destroyed while another thread makes a chunk for it: that
/// thread's `ring_allocate` fails as for any destroyed ring, and the chunk
/// it made is freed at once (nothing used it), not leaked.
#[test]
fn a_ring_destroyed_while_it_grows_frees_the_new_chunk() {
    let (grown, _, waited, allocator, device) = while_a_ring_grows(|allocator, _, ring| {
        allocator.destroy_upload_ring(ring).unwrap();
    });
    assert!(
        !waited,
        "destroy_upload_ring waited for the ring's new chunk"
    );
    assert_eq!(grown, Err(Error::StaleAllocation));
    // The first chunk waits for its frame; the new one is gone.
    assert_eq!(allocator.stats().allocations(), 1);
    finish_after_frame(allocator, &device);
}

/// Two threads growing one ring at once: the second, which found the ring
/// full too and made a chunk while the first made its own, finds room in
/// the first's chunk once it is in, allocates there and frees its chunk,
/// so the ring keeps one new chunk, not two. (The second thread is held
/// on the memory type's lock, which the first holds in the callback,
/// after it found the ring full: the rings' lock is not held meanwhile.)
#[test]
fn two_threads_growing_a_ring_at_once_keep_one_new_chunk() {
    use std::time::Duration;

    let stall = StalledGrow::new();
    let (first, second) = std::thread::scope(|scope| {
        let (allocator, ring) = (&stall.allocator, stall.ring);
        let first = scope.spawn(move || allocator.ring_allocate(ring, 256, 256));
        stall.wait_for_the_grow();
        let second = scope.spawn(move || allocator.ring_allocate(ring, 256, 256));
        // Time for the second to find the ring full and wait for the memory
        // type; later, it finds the first's chunk and the test passes too.
        std::thread::sleep(Duration::from_millis(200));
        stall.go.send(()).unwrap();
        (first.join().unwrap(), second.join().unwrap())
    });
    assert!(!stall.waited_out());
    let (first, second) = (first.unwrap(), second.unwrap());
    assert_eq!(first.buffer(), second.buffer());
    assert_ne!(first.buffer_offset(), second.buffer_offset());
    // The first chunk and the new one.
    assert_eq!(stall.allocator.stats().allocations(), 2);
    stall.allocator.destroy_upload_ring(stall.ring).unwrap();
    finish_after_frame(stall.allocator, &stall.device);
}

/// gfx-memory's linear allocator never reused its finished lines
/// (gfx-rs/gfx-extras PR #16, wgpu-rs #363): a frame loop took a new memory
/// object every few frames. A growing ring that reached the chunks its
/// frames in flight need keeps them: the same per-frame workload, with two
/// frames in flight, makes no chunk after the first frames, and every
/// later frame's allocations lie in the chunks made then.
#[test]
fn a_grown_ring_reuses_its_chunks_frame_after_frame() {
    let (allocator, device) = allocator(FakeLayout::integrated());
    let desc = UploadRingDesc {
        size: 64 << 10,
        grow: true,
        ..UploadRingDesc::default()
    };
    let ring = allocator.create_upload_ring(&desc).unwrap();
    // Each frame writes 1.5 chunks' worth, in pieces of 3 KiB.
    let per_frame = 32;
    let mut in_flight = std::collections::VecDeque::new();
    let mut after_warm_up = None;
    let mut buffers_seen = std::collections::HashSet::new();
    for frame in 0..40 {
        for _ in 0..per_frame {
            let a = allocator.ring_allocate(ring, 3 << 10, 256).unwrap();
            if frame >= 10 {
                assert!(
                    buffers_seen.contains(&a.buffer()),
                    "frame {frame}: an allocation in a chunk made after the warm-up"
                );
            } else {
                buffers_seen.insert(a.buffer());
            }
        }
        in_flight.push_back(end_frame(&allocator, &device));
        if in_flight.len() > 2 {
            device.signal_fence(in_flight.pop_front().unwrap());
        }
        allocator.collect().unwrap();
        if frame == 9 {
            after_warm_up = Some(device.counters().allocate_calls);
        }
    }
    assert_eq!(
        Some(device.counters().allocate_calls),
        after_warm_up,
        "the ring made memory after its warm-up"
    );
    for fence in in_flight {
        device.signal_fence(fence);
    }
    allocator.collect().unwrap();
    allocator.destroy_upload_ring(ring).unwrap();
    finish(allocator, &device);
}
