//! A logger that calls back into the allocator on the error line of a
//! write after free or a damaged margin (to read its stats, say): every
//! such line is logged once the pool's lock is released, so the call goes
//! through. Before, the lines found as a block was released (`trim`,
//! `end_frame`'s aged blocks, `destroy_pool`, a free that empties a block,
//! the kept blocks a request releases) and as a damaged allocation was
//! freed were logged under the pool's lock: the logger's call waited for
//! that lock forever (a debug build's lock check panicked instead).
//!
//! Each step runs on a thread of its own, and the test fails when it has
//! not returned in 20 seconds (a deadlock) rather than hanging.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::Duration;

use ash::vk;
use vk_suballoc::device::fake::{FakeDevice, FakeLayout};
use vk_suballoc::{
    Allocation, AllocationDesc, Config, Pool, PoolDesc, Request, ResourceKind, Usage,
};

use super::frames::end_frame;
use super::{allocator_with, buffer, finish, free, requirements, FakeAllocator};

const MIB: u64 = 1 << 20;

/// The discrete layout's host-visible coherent type, where `UPLOAD` lands.
const HOST: u32 = 2;

const WRITTEN_AFTER_FREE: &str = "written after it was freed";
const DAMAGED_MARGIN: &str = "memory corruption";
const FAILED_INVALIDATE: &str = "debug fill: the invalidate of bytes";

/// Debug fills on, with 4 MiB blocks (the first ones smaller).
fn with_fill() -> Config {
    Config {
        debug_fill: true,
        large_heap_block_size: 4 * MIB,
        ..Config::default()
    }
}

/// An allocator over a new fake device of `layout`, shared with the
/// steps' threads, and the device.
fn shared_allocator(layout: FakeLayout, config: Config) -> (Arc<FakeAllocator>, FakeDevice) {
    let (allocator, device) = allocator_with(layout, config);
    (Arc::new(allocator), device)
}

/// Writes a byte at `offset` in `memory`, as a write after free would.
fn write_byte(device: &FakeDevice, memory: vk::DeviceMemory, offset: u64) {
    // SAFETY: no slice of these bytes is alive across the call.
    assert!(unsafe { device.write(memory, offset, &[0x42]) });
}

/// A custom pool of 1 MiB blocks in the host-visible type, and a request
/// of `size` bytes in it.
fn host_pool(allocator: &FakeAllocator, size: u64) -> (Pool, Request<'static>) {
    let pool = allocator
        .create_pool(&PoolDesc::new(HOST).block_size(MIB))
        .unwrap();
    let request = Request::with_desc(
        requirements(size, 16),
        ResourceKind::Buffer,
        AllocationDesc::new(Usage::UPLOAD).pool(pool),
    );
    (pool, request)
}

/// Margins of 16 bytes checked (`Config::detect_corruption`), and an
/// allocation whose margin's first byte was written over.
fn a_damaged_margin() -> (Arc<FakeAllocator>, FakeDevice, Allocation) {
    let config = Config {
        debug_margin: 16,
        detect_corruption: true,
        ..Config::default()
    };
    let (allocator, device) = shared_allocator(FakeLayout::discrete(), config);
    let victim = allocator
        .allocate(&buffer(1000, 16, Usage::UPLOAD))
        .unwrap();
    // SAFETY: no slice of the allocation is alive across the call.
    assert!(unsafe { device.write(victim.memory(), victim.offset() + 1000, &[0xAB]) });
    (allocator, device, victim)
}

/// What the logger's hook calls back into the allocator for.
#[derive(Clone, Copy)]
enum CallBack {
    /// `stats`.
    Stats,
    /// `stats`, then `collect` (which waits for a `collect` holding its
    /// lock to carry out its frees).
    StatsAndCollect,
}

/// Runs `step` on a thread of its own, with the logger set to call back
/// as `call_back` says on this thread's next line containing `text`; returns `step`'s value once
/// the hook has run. Fails when the step panics, when it has not returned
/// in 20 seconds (the logger's call waits for a lock its caller holds), or
/// when no line had `text`.
fn with_reentrant_logger<T: Send + 'static>(
    allocator: &Arc<FakeAllocator>,
    text: &'static str,
    call_back: CallBack,
    step: impl FnOnce(&FakeAllocator) -> T + Send + 'static,
) -> T {
    let calls = Arc::new(AtomicU32::new(0));
    let (sender, receiver) = mpsc::channel();
    let (for_hook, for_step, hook_calls) = (
        Arc::clone(allocator),
        Arc::clone(allocator),
        Arc::clone(&calls),
    );
    // Detached: a deadlocked step never returns.
    std::thread::spawn(move || {
        super::leak_log::on_line_with(text, move || {
            let _ = for_hook.stats();
            if let CallBack::StatsAndCollect = call_back {
                for_hook.collect().unwrap();
            }
            hook_calls.fetch_add(1, Ordering::SeqCst);
        });
        let done = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| step(&for_step)));
        drop(for_step);
        let _ = sender.send(done);
    });
    let value = match receiver.recv_timeout(Duration::from_secs(20)) {
        Ok(Ok(value)) => value,
        Ok(Err(payload)) => std::panic::resume_unwind(payload),
        Err(_) => panic!("the step did not return: the logger's call waits for a lock"),
    };
    assert_eq!(calls.load(Ordering::SeqCst), 1, "no line had {text:?}");
    value
}

/// Drops the allocator, back from its `Arc` (every step's thread done
/// with it), and checks that the device is left clean.
fn finish_shared(allocator: Arc<FakeAllocator>, device: &FakeDevice) {
    let allocator = Arc::into_inner(allocator).expect("a step's thread still holds the allocator");
    finish(allocator, device);
}

/// `trim` releases the kept empty block, in which a byte was written
/// after free.
#[test]
fn trim() {
    let (allocator, device) = shared_allocator(FakeLayout::discrete(), with_fill());
    let a = allocator
        .allocate(&buffer(50_000, 16, Usage::UPLOAD))
        .unwrap();
    let (memory, offset) = (a.memory(), a.offset());
    free(&allocator, a);
    write_byte(&device, memory, offset + 9);
    let released = with_reentrant_logger(
        &allocator,
        WRITTEN_AFTER_FREE,
        CallBack::Stats,
        |allocator| allocator.trim(),
    );
    assert!(released > 0);
    assert_eq!(allocator.corruptions_detected(), 1);
    finish_shared(allocator, &device);
}

/// Makes a 64 KiB allocation in the host-visible type's first block,
/// which it returns, and two more 4 MiB blocks, which it empties again
/// (three allocations of 1.5 MiB: two in one block, one in the other),
/// then writes a byte into each freed range: whichever block goes is
/// caught. The blocks stay with an `empty_block_reserve` of 100.
fn two_written_empty_blocks(allocator: &FakeAllocator, device: &FakeDevice) -> Allocation {
    let keeper = allocator
        .allocate(&buffer(64 << 10, 16, Usage::UPLOAD))
        .unwrap();
    let freed: Vec<_> = (0..3)
        .map(|_| {
            let a = allocator
                .allocate(&buffer(1536 << 10, 16, Usage::UPLOAD))
                .unwrap();
            assert_ne!(a.memory(), keeper.memory());
            (a.memory(), a.offset(), a)
        })
        .collect();
    for (memory, offset, a) in freed {
        free(allocator, a);
        write_byte(device, memory, offset + 11);
    }
    assert_eq!(
        allocator.stats().memory_types[HOST as usize].empty_blocks,
        2
    );
    assert_eq!(device.live_allocations().len(), 3);
    keeper
}

/// An allocator at its last memory objects (`maxMemoryAllocationCount` 3)
/// with [`two_written_empty_blocks`] kept, and the allocation those made.
fn short_of_objects_with_written_kept_blocks() -> (Arc<FakeAllocator>, FakeDevice, Allocation) {
    let config = Config {
        empty_block_reserve: 100.0,
        ..with_fill()
    };
    let layout = FakeLayout::discrete().with_max_allocation_count(3);
    let (allocator, device) = shared_allocator(layout, config);
    let keeper = two_written_empty_blocks(&allocator, &device);
    (allocator, device, keeper)
}

/// `end_frame` releases an empty block kept beyond the largest once it
/// has stayed empty `Config::empty_block_frames` frames (under a lock
/// taken with `try_lock`, which a debug build's check does not see: this
/// one deadlocked).
#[test]
fn end_frame_releasing_an_aged_block() {
    let config = Config {
        empty_block_frames: 1,
        empty_block_reserve: 100.0,
        ..with_fill()
    };
    let (allocator, device) = shared_allocator(FakeLayout::discrete(), config);
    let keeper = two_written_empty_blocks(&allocator, &device);
    let step_device = device.clone();
    let fence = with_reentrant_logger(
        &allocator,
        WRITTEN_AFTER_FREE,
        CallBack::Stats,
        move |allocator| end_frame(allocator, &step_device),
    );
    assert_eq!(
        allocator.stats().memory_types[HOST as usize].empty_blocks,
        1
    );
    assert_eq!(allocator.corruptions_detected(), 1);
    device.signal_fence(fence);
    allocator.collect().unwrap();
    free(&allocator, keeper);
    finish_shared(allocator, &device);
}

/// A free that empties a custom pool's second block, in whose free bytes
/// a byte was written: the pool keeps one empty block, and releases this
/// one.
#[test]
fn a_free_that_releases_a_block() {
    let (allocator, device) = shared_allocator(FakeLayout::discrete(), with_fill());
    let (pool, request) = host_pool(&allocator, 600 << 10);
    let a = allocator.allocate(&request).unwrap();
    let b = allocator.allocate(&request).unwrap();
    assert_ne!(a.memory(), b.memory());
    free(&allocator, a);
    // Past `b`, in bytes no allocation ever held.
    write_byte(&device, b.memory(), 900 << 10);
    with_reentrant_logger(
        &allocator,
        WRITTEN_AFTER_FREE,
        CallBack::Stats,
        move |allocator| {
            free(allocator, b);
        },
    );
    assert_eq!(allocator.corruptions_detected(), 1);
    assert_eq!(allocator.pool_stats(&pool).unwrap().blocks, 1);
    allocator.destroy_pool(pool).unwrap();
    finish_shared(allocator, &device);
}

/// `destroy_pool` releases the pool's empty block, in which a byte was
/// written after free.
#[test]
fn destroy_pool() {
    let (allocator, device) = shared_allocator(FakeLayout::discrete(), with_fill());
    let (pool, request) = host_pool(&allocator, 50_000);
    let a = allocator.allocate(&request).unwrap();
    let (memory, offset) = (a.memory(), a.offset());
    free(&allocator, a);
    write_byte(&device, memory, offset + 3);
    with_reentrant_logger(
        &allocator,
        WRITTEN_AFTER_FREE,
        CallBack::Stats,
        move |allocator| {
            allocator.destroy_pool(pool).unwrap();
        },
    );
    assert_eq!(allocator.corruptions_detected(), 1);
    finish_shared(allocator, &device);
}

/// A request short of memory objects (`maxMemoryAllocationCount`)
/// releases a kept empty block, in which a byte was written after free.
#[test]
fn a_request_releasing_kept_blocks() {
    let (allocator, device, keeper) = short_of_objects_with_written_kept_blocks();
    let big = with_reentrant_logger(
        &allocator,
        WRITTEN_AFTER_FREE,
        CallBack::Stats,
        |allocator| {
            allocator
                .allocate(&buffer(5 * MIB, 16, Usage::UPLOAD))
                .unwrap()
        },
    );
    assert!(allocator.corruptions_detected() >= 1);
    free(&allocator, big);
    free(&allocator, keeper);
    finish_shared(allocator, &device);
}

/// A custom pool's `min_blocks` block, short of memory objects
/// (`maxMemoryAllocationCount`), releases a kept empty block, in which a
/// byte was written after free. No allocation's deferral is around
/// `create_pool`: the release itself logs the line once the pool's lock
/// is released.
#[test]
fn a_pool_s_min_blocks_releasing_kept_blocks() {
    let (allocator, device, keeper) = short_of_objects_with_written_kept_blocks();
    let pool = with_reentrant_logger(
        &allocator,
        WRITTEN_AFTER_FREE,
        CallBack::Stats,
        |allocator| {
            allocator
                .create_pool(&PoolDesc::new(HOST).block_size(MIB).min_blocks(1))
                .unwrap()
        },
    );
    assert!(allocator.corruptions_detected() >= 1);
    allocator.destroy_pool(pool).unwrap();
    free(&allocator, keeper);
    finish_shared(allocator, &device);
}

/// Margins (`Config::detect_corruption`): a free through the frame
/// queue, by `collect`, of an allocation whose margin was written over.
/// The logger calls `collect` too, which waited for the call that logged
/// the line.
#[test]
fn a_collected_free_with_a_damaged_margin() {
    let (allocator, device, victim) = a_damaged_margin();
    allocator.free_after_frame(victim).unwrap();
    device.signal_fence(end_frame(&allocator, &device));
    with_reentrant_logger(
        &allocator,
        DAMAGED_MARGIN,
        CallBack::StatsAndCollect,
        |allocator| allocator.collect().unwrap(),
    );
    assert_eq!(allocator.corruptions_detected(), 1);
    assert_eq!(allocator.stats().live_bytes(), 0);
    finish_shared(allocator, &device);
}

/// Margins: a plain free of an allocation whose margin was written over.
#[test]
fn a_free_with_a_damaged_margin() {
    let (allocator, device, victim) = a_damaged_margin();
    with_reentrant_logger(
        &allocator,
        DAMAGED_MARGIN,
        CallBack::Stats,
        move |allocator| {
            free(allocator, victim);
        },
    );
    assert_eq!(allocator.corruptions_detected(), 1);
    assert_eq!(allocator.stats().live_bytes(), 0);
    finish_shared(allocator, &device);
}

/// A defragmentation plan in a non-coherent type (mobile's cached type),
/// whose first invalidate (the check of a destination's bytes) fails: its
/// warning was logged under the pool's lock, as the plan's pool work ran
/// outside `deferred_log`.
#[test]
fn a_plan_s_failed_invalidate() {
    let config = Config {
        small_buffer_limit: 0,
        small_heap_limit: 0,
        ..with_fill()
    };
    let (allocator, device) = shared_allocator(FakeLayout::mobile(), config);
    let readback = buffer(200_000, 16, Usage::READBACK);
    let live = super::debug_fill::keep_every_third(&allocator, &readback, |_, _| {});
    assert_eq!(live[0].memory_type(), 2, "mobile's cached type");
    device.fail_invalidate(1);
    let (plan, live) = with_reentrant_logger(
        &allocator,
        FAILED_INVALIDATE,
        CallBack::Stats,
        move |allocator| {
            let plan = allocator
                .plan_defragmentation(
                    &super::defragment::movables(&live),
                    &super::debug_fill::compacting(),
                )
                .unwrap();
            (plan, live)
        },
    );
    assert!(!plan.moves.is_empty());
    for planned in plan.moves {
        allocator.give_up_move(planned).unwrap();
    }
    device.signal_fence(end_frame(&allocator, &device));
    allocator.collect().unwrap();
    for a in live {
        free(&allocator, a);
    }
    finish_shared(allocator, &device);
}

/// `check_corruption` in a non-coherent type (mobile's cached type),
/// whose first invalidate (of a free range's whole atoms) fails: its
/// warning was logged under the pool's lock, as `check_corruption` ran
/// outside `deferred_log`.
#[test]
fn check_corruption_s_failed_invalidate() {
    let (allocator, device) = shared_allocator(FakeLayout::mobile(), with_fill());
    let kept = allocator
        .allocate(&buffer(50_000, 16, Usage::READBACK))
        .unwrap();
    assert_eq!(kept.memory_type(), 2, "mobile's cached type");
    device.fail_invalidate(1);
    let report = with_reentrant_logger(
        &allocator,
        FAILED_INVALIDATE,
        CallBack::Stats,
        |allocator| allocator.check_corruption(!0).unwrap(),
    );
    assert!(report.is_clean() && report.free_checked > 0, "{report:?}");
    free(&allocator, kept);
    finish_shared(allocator, &device);
}

/// Upload rings (`ring_fill.rs`): the `collect` that frees a destroyed
/// ring's chunk, in whose free ring space a byte was written after its
/// frame was collected. The logger calls `collect` too, which waits for
/// the call that logs the line to carry out its frees.
#[test]
fn a_collect_freeing_a_destroyed_ring_s_chunk() {
    let (allocator, device) = shared_allocator(FakeLayout::discrete(), with_fill());
    let ring = allocator
        .create_upload_ring(&vk_suballoc::UploadRingDesc {
            size: 64 << 10,
            ..vk_suballoc::UploadRingDesc::default()
        })
        .unwrap();
    let stale = allocator.ring_allocate(ring, 1000, 256).unwrap();
    device.signal_fence(end_frame(&allocator, &device));
    allocator.collect().unwrap();
    write_byte(&device, stale.memory(), stale.memory_offset() + 7);
    allocator.destroy_upload_ring(ring).unwrap();
    device.signal_fence(end_frame(&allocator, &device));
    with_reentrant_logger(
        &allocator,
        WRITTEN_AFTER_FREE,
        CallBack::StatsAndCollect,
        |allocator| allocator.collect().unwrap(),
    );
    assert_eq!(allocator.corruptions_detected(), 1);
    assert_eq!(allocator.stats().allocations(), 0);
    finish_shared(allocator, &device);
}
