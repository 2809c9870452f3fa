//! Writer threads racing a frame thread over shared upload rings
//! (`ring_writes_on_threads_keep_their_bytes_while_frames_are_collected`):
//! each write must be carried out or refused as stale, and keep its bytes
//! for as long as its frame is not collected.
//!
//! The writer threads themselves are in `ring_stress/writers.rs`; this file
//! holds the test, the frame thread and what the threads share.

use std::collections::VecDeque;
use std::sync::Mutex;

use ash::vk;
use vk_suballoc::device::fake::{FakeDevice, FakeLayout};
use vk_suballoc::{Config, Error, RingAllocation, UploadRing, UploadRingDesc, Usage};

use super::super::seeded_rng::Rng;
use super::super::FakeAllocator;

use super::{end_frame, finish_after_frame};

#[path = "ring_stress/writers.rs"]
mod writers;

use writers::{ring_stress_late_writer, ring_stress_writer};

/// Steps of each writer thread of
/// [`ring_writes_on_threads_keep_their_bytes_while_frames_are_collected`]:
/// a few under Miri, which runs ~1000x slower.
const RING_STRESS_STEPS: u64 = if cfg!(miri) { 12 } else { 3000 };

/// A ring allocation [`ring_stress`] made: its memory, its range in it,
/// its frame.
type Handed = (vk::DeviceMemory, std::ops::Range<u64>, u64);

/// Every ring allocation of the running [`ring_stress`]. Its own lock, which
/// no thread holds while it calls the allocator: the flush hook, which runs
/// under a pool's lock, takes it.
static HANDED: Mutex<Vec<Handed>> = Mutex::new(Vec::new());

/// [`HANDED`], locked.
fn handed() -> std::sync::MutexGuard<'static, Vec<Handed>> {
    HANDED
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Set when a thread of the running [`ring_stress`] panics: the others
/// stop, and the panic reaches the test instead of a hang.
static RING_STRESS_ABORT: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Sets [`RING_STRESS_ABORT`] when dropped by a panic.
struct AbortOnPanic;

impl Drop for AbortOnPanic {
    fn drop(&mut self) {
        if std::thread::panicking() {
            RING_STRESS_ABORT.store(true, std::sync::atomic::Ordering::SeqCst);
        }
    }
}

/// Whether a thread of the running [`ring_stress`] panicked.
fn ring_stress_aborted() -> bool {
    RING_STRESS_ABORT.load(std::sync::atomic::Ordering::SeqCst)
}

std::thread_local! {
    /// Set on a thread of [`ring_stress`] over its loose writes: their
    /// flushes sleep (`FakeDevice::set_flush_hook`), pinned, then note in
    /// `HANDED_WHILE_PINNED` how many allocations were made by then.
    static SLOW_FLUSH: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    /// The length of [`HANDED`] at the end of the last slow flush on this
    /// thread, with the write's pin held.
    static HANDED_WHILE_PINNED: std::cell::Cell<Option<usize>> =
        const { std::cell::Cell::new(None) };
}

/// What the threads of [`ring_stress`] share, behind one lock.
struct RingStress {
    /// The rings the writers allocate from; the frame thread destroys one
    /// and puts a new one in its slot under this lock, so a ring absent
    /// from here was destroyed before the lock was taken.
    rings: Vec<UploadRing>,
    /// Per writer: the oldest frame it may still read its bytes in (`None`:
    /// none). No fence of a frame at or past the oldest hold is signalled
    /// (so no such frame is collected), and `collect_idle` waits for every
    /// hold to be `None`.
    holds: Vec<Option<u64>>,
    /// Sealed frames whose fence the test has not signalled, oldest first.
    unsignalled: VecDeque<(u64, vk::Fence)>,
    /// The frame thread waits to call `collect_idle`: writers give up
    /// their holds and take none until it is over.
    want_idle: bool,
    /// Allocations whose owner no longer checks their bytes, for the late
    /// writer (`ring_stress_late_writer`), newest last.
    released: VecDeque<RingAllocation>,
}

/// A ring allocation a writer checks, and the tag of its last write.
struct Written {
    ring: UploadRing,
    allocation: RingAllocation,
    tag: u64,
}

/// `len` bytes of the pattern of `tag`: its 8 bytes over and over.
fn ring_pattern(tag: u64, len: u64) -> Vec<u8> {
    let mut bytes = tag.to_le_bytes().repeat(len.div_ceil(8) as usize);
    bytes.truncate(len as usize);
    bytes
}

/// Panics unless the device sees `written`'s last pattern in its bytes.
fn assert_ring_bytes(device: &FakeDevice, written: &Written, when: &str) {
    let a = &written.allocation;
    // SAFETY: ring allocations hand out no slices.
    let bytes = unsafe { device.read(a.memory(), a.memory_offset(), a.size() as usize) }
        .unwrap_or_else(|| panic!("{when}: the memory of {a:?} is gone"));
    let expected = ring_pattern(written.tag, a.size());
    if bytes == expected {
        return;
    }
    if let Some(at) = (0..bytes.len()).find(|&i| bytes[i] != expected[i]) {
        let word = at - at % 8;
        let end = (word + 8).min(bytes.len());
        panic!(
            "{when}: {a:?} (tag {:#018x}) holds {:02x?} at bytes {word}..{end}, \
             another write's bytes",
            written.tag,
            &bytes[word..end]
        );
    }
}

/// Allocates (and writes nothing into) what is free in `ring`, which does
/// not grow, down to 256 bytes, logging the allocations in [`HANDED`]: space
/// a collect gives back goes to the frame thread at once, so a reclaim that
/// did not wait for a write's pin shows in that write's `loose_write`
/// check.
fn fill_ring(allocator: &FakeAllocator, ring: UploadRing) {
    let mut size = 256 << 10;
    while size >= 256 {
        match allocator.ring_allocate(ring, size, 256) {
            Ok(a) => handed().push((
                a.memory(),
                a.memory_offset()..a.memory_offset() + size,
                a.frame(),
            )),
            Err(Error::UploadRingFull { size: asked, .. }) if asked == size => size /= 4,
            Err(error) => panic!("fill: {error:?}"),
        }
    }
}

/// A ring of the frame thread: slot 0 non-coherent where the layout has
/// such memory (`READBACK`: host-cached), the others coherent; growing or
/// not, of 512 KiB to 2 MiB chunks.
fn ring_stress_ring(allocator: &FakeAllocator, rng: &mut Rng, slot: usize) -> UploadRing {
    let desc = UploadRingDesc {
        // Slot 0 small, to be full often: space a collect gives back goes
        // to the next allocation.
        size: if slot == 0 {
            512 << 10
        } else {
            (512 << 10) << rng.below(3)
        },
        usage: if slot == 0 {
            Usage::READBACK
        } else {
            UploadRingDesc::default().usage
        },
        grow: slot != 0 && rng.below(2) == 0,
        ..UploadRingDesc::default()
    };
    allocator.create_upload_ring(&desc).unwrap()
}

/// 2 to 4 writer threads and a frame thread over three upload rings of
/// `layout`, allocator configured by `config`; see
/// [`ring_writes_on_threads_keep_their_bytes_while_frames_are_collected`].
/// With `Config::debug_fill`, no write into freed memory may be found.
fn ring_stress(seed: u64, layout: FakeLayout, config: Config) {
    let mut rng = Rng(seed);
    let (allocator, device) = super::super::allocator_with(layout, config);
    // And the late writer.
    let writers = 2 + rng.below(2) as usize;
    let rings = (0..3)
        .map(|slot| ring_stress_ring(&allocator, &mut rng, slot))
        .collect();
    let shared = Mutex::new(RingStress {
        rings,
        holds: vec![None; writers],
        unsignalled: VecDeque::new(),
        want_idle: false,
        released: VecDeque::new(),
    });
    // A loose write's flush (into the non-coherent ring) sleeps, pinned,
    // after its copy: collects, the frame thread's `fill_ring` and other
    // threads' ring calls go on meanwhile.
    handed().clear();
    RING_STRESS_ABORT.store(false, std::sync::atomic::Ordering::SeqCst);
    device.set_flush_hook(Some(Box::new(|| {
        if SLOW_FLUSH.get() {
            std::thread::sleep(std::time::Duration::from_millis(1));
            HANDED_WHILE_PINNED.set(Some(handed().len()));
        }
    })));
    let finished = std::sync::atomic::AtomicUsize::new(0);
    let lock = || {
        shared
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    };
    std::thread::scope(|scope| {
        for me in 0..writers {
            let (allocator, device, shared, finished) = (&allocator, &device, &shared, &finished);
            let seed = rng.next();
            scope.spawn(move || {
                ring_stress_writer(allocator, device, shared, me, seed);
                finished.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            });
        }
        let (allocator_ref, shared_ref, finished_ref) = (&allocator, &shared, &finished);
        let seed = rng.next();
        scope.spawn(move || {
            ring_stress_late_writer(allocator_ref, shared_ref, finished_ref, writers, seed);
        });
        let _abort = AbortOnPanic;
        let mut step = 0u64;
        while finished.load(std::sync::atomic::Ordering::SeqCst) < writers && !ring_stress_aborted()
        {
            step += 1;
            {
                let mut shared = lock();
                if shared.unsignalled.len() < 48 && rng.below(3) != 0 {
                    let fence = device.create_fence();
                    // SAFETY: fake fences, signalled only by the test.
                    match unsafe { allocator.end_frame(fence) } {
                        Ok(frame) => {
                            shared.unsignalled.push_back((frame, fence));
                            if rng.below(16) == 0 {
                                let slot = rng.below(shared.rings.len() as u64) as usize;
                                allocator.destroy_upload_ring(shared.rings[slot]).unwrap();
                                shared.rings[slot] = ring_stress_ring(&allocator, &mut rng, slot);
                            }
                            shared.want_idle |= rng.below(64) == 0;
                        }
                        Err(Error::TooManyFramesInFlight) => {}
                        Err(error) => panic!("frame step {step}: end_frame: {error:?}"),
                    }
                }
                // "The GPU" finishes every frame before the oldest one a
                // writer still reads.
                let oldest_held = shared.holds.iter().flatten().min().copied();
                while let Some(&(frame, fence)) = shared.unsignalled.front() {
                    if oldest_held.is_some_and(|held| frame >= held) {
                        break;
                    }
                    device.signal_fence(fence);
                    shared.unsignalled.pop_front();
                }
                if rng.below(4) == 0 {
                    let ring = shared.rings[0];
                    fill_ring(&allocator, ring);
                }
                if shared.want_idle && oldest_held.is_none() {
                    if rng.below(2) == 0 {
                        // Destroyed and freed at once, but for a chunk the
                        // late writer is copying into.
                        allocator.destroy_upload_ring(shared.rings[0]).unwrap();
                        shared.rings[0] = ring_stress_ring(&allocator, &mut rng, 0);
                    }
                    // SAFETY: the fake device runs no GPU work; and no
                    // writer reads its bytes until it takes a hold, under
                    // this lock, after the call.
                    unsafe { allocator.collect_idle() };
                    shared.unsignalled.clear();
                    shared.want_idle = false;
                }
            }
            match rng.below(4) {
                0 => match allocator.wait_and_collect(0) {
                    Ok(_) | Err(Error::Timeout) => {}
                    Err(error) => panic!("frame step {step}: wait_and_collect: {error:?}"),
                },
                _ => {
                    allocator.collect().unwrap();
                }
            }
            std::thread::yield_now();
        }
    });
    device.set_flush_hook(None);
    let shared = shared.into_inner().unwrap();
    for (_, fence) in shared.unsignalled {
        device.signal_fence(fence);
    }
    for ring in shared.rings {
        allocator.destroy_upload_ring(ring).unwrap();
    }
    device.signal_fence(end_frame(&allocator, &device));
    allocator.collect().unwrap();
    assert_eq!(
        allocator.corruptions_detected(),
        0,
        "writes into freed memory"
    );
    if config.debug_fill {
        let report = allocator.check_corruption(!0).unwrap();
        assert!(report.is_clean(), "writes into freed memory: {report:?}");
    }
    finish_after_frame(allocator, &device);
}

/// Writer threads (2 or 3) allocate from shared upload rings, write each
/// allocation with a pattern of their own, write some again frames later,
/// some of hundreds of KiB (long copies that other threads' collects
/// overlap); a late writer writes again what they gave up; a frame thread
/// seals frames, signals their fences, collects (`collect`,
/// `wait_and_collect`, `collect_idle`), fills a ring with what a collect
/// gave back, and destroys and recreates rings (growing or not;
/// non-coherent on the mobile layout, whose flushes copy whole atoms, and
/// coherent). A late write must be carried out or be refused as stale,
/// nothing else; an allocation's bytes hold its owner's last pattern for
/// as long as its frame is not collected; and no allocation is made over
/// bytes a write is still copying into.
///
/// Why the checks are sound. A writer reads an allocation's bytes only
/// under a hold (`RingStress::holds`), taken (as the current frame, under
/// the shared lock) before it makes the allocation, so the allocation's
/// frame is no older than the hold, and given up only after its last read.
/// The frame thread signals (under the same lock) only fences of frames
/// older than every hold, and calls `collect_idle` only with no hold, so
/// no frame a writer reads in is collected, and its bytes are its owner's
/// alone: no other allocation is handed them, and no other write is let
/// into them, but a late write into a collected frame that the allocator
/// let through wrongly. A held allocation's write is refused as stale only
/// when its ring was destroyed (checked against the rings, which the frame
/// thread swaps under the lock), whose memory stays until that frame is
/// collected. Writes of bytes no one checks any more (`loose`, and the
/// late writer's, which targets the oldest frame not yet signalled) go on
/// while frames are collected: on non-coherent memory their flush sleeps,
/// pinned, and notes how many allocations were made by then ([`HANDED`]);
/// none of a later frame may overlap the write's bytes, since its frame was
/// live when the write pinned it (else the write is stale) and its space
/// comes back only once the write is over. Each writer checks right after
/// each write and again before giving up its hold, so a write that landed
/// late (after waiting for its chunk's turn) shows too.
///
/// With `ChunkPins::is_pinned` made to answer `false` (a reclaim that does
/// not wait for writes), 20 of 20 seeds failed, on the overlap check:
/// writes into one chunk take turns, so the bytes mostly stay right (the
/// late write copies before the next owner's). With `any_pinned` made to
/// answer `false` (a destroyed ring's chunk freed under a write), 20 seeds
/// passed: the free waits for the flush on the pool's lock, so only the
/// copy runs on freed memory, which the fake device does not notice
/// (Miri or a sanitizer would). Both runs have `Config::debug_fill` on, so
/// that a copy landing in a freed chunk is caught (`corruptions_detected`
/// when the bytes are allocated again, `check_corruption` at the end); the
/// discrete run alone had it when it still passed 20 of 20 seeds with
/// `any_pinned` answering `false`: every chunk freed under a pin (0 to 3 a
/// seed) was the mobile run's non-coherent ring 0, whose flush sleeps
/// pinned, after its copy; on coherent memory a write is pinned only while
/// it copies (tens of microseconds), and no seed freed a chunk then. With
/// fills in the mobile run too (non-coherent memory has them since), 6 of
/// 6 seeds still passed: its chunk is freed after the copy, so the free's
/// fill overwrites the copy and nothing writes after it; only the flush
/// runs on freed memory, unseen. Three tests catch that
/// bug: the two held-flush tests of a destroyed ring (non-coherent) and
/// `a_coherent_ring_destroyed_while_a_long_write_copies_into_it_is_not_freed_under_it`.
///
/// The seed fixes each thread's choices, not how they interleave.
#[test]
fn ring_writes_on_threads_keep_their_bytes_while_frames_are_collected() {
    let mut rng =
        Rng::from_env("ring_writes_on_threads_keep_their_bytes_while_frames_are_collected");
    // Freed chunks are filled, and checked when their bytes are allocated
    // again: in non-coherent memory (mobile) as in coherent memory.
    let fill = Config {
        debug_fill: true,
        ..Config::default()
    };
    ring_stress(rng.next(), FakeLayout::mobile(), fill);
    ring_stress(rng.next(), FakeLayout::discrete(), fill);
}
