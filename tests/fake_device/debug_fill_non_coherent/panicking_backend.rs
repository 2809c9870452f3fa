//! A backend panicking in the flush or invalidate of a debug fill, or in a
//! defragmentation plan's: nothing is left behind, and the allocator
//! carries on.

use std::panic::{self, AssertUnwindSafe};

use vk_suballoc::device::fake::{FakeCall, FakeDevice, FakeLayout};
use vk_suballoc::{Allocation, Config};

use super::super::debug_fill::{all, compacting, keep_every_third, NEW};
use super::super::defragment::movables;
use super::super::frames::end_frame;
use super::super::{
    allocator_with, assert_panicked_with, finish, free, injected_panic, FakeAllocator,
};
use super::{readback, views, with_fill, CACHED};

/// Live allocations in every heap.
fn live(allocator: &FakeAllocator) -> u64 {
    allocator
        .stats()
        .heaps
        .iter()
        .map(|heap| heap.allocations)
        .sum()
}

/// The message of the flush hooks' panics below.
const FLUSH_PANIC: &str = "the backend's flush panics";

/// A backend panicking in the flush of a debug fill (a bug, caught by the
/// engine) leaves nothing behind: the new block whose fill it flushed
/// stays in its pool, empty, and is freed with the allocator; an
/// allocation whose fill it flushed, handed to nobody, is freed before
/// the panic goes on; one being freed is freed all the same. The
/// allocator carries on, with fills the device never saw: the next checks
/// report them as writes after free.
#[test]
fn a_backend_panicking_in_a_fill_s_flush_leaves_nothing_behind() {
    let (allocator, device) = allocator_with(FakeLayout::mobile(), with_fill());
    let panic_in_next_flush = || {
        device.set_flush_hook(Some(Box::new(|| panic!("{FLUSH_PANIC}"))));
    };
    // The new block's fill.
    panic_in_next_flush();
    let caught = panic::catch_unwind(AssertUnwindSafe(|| {
        allocator.allocate(&readback(50_000, None))
    }));
    assert_panicked_with(caught, FLUSH_PANIC, "the new block's fill");
    assert_eq!(live(&allocator), 0);
    assert_eq!(
        allocator.stats().memory_objects as usize,
        device.live_allocations().len()
    );
    let kept = allocator.allocate(&readback(50_000, None)).unwrap();
    // A new allocation's fill.
    panic_in_next_flush();
    let caught = panic::catch_unwind(AssertUnwindSafe(|| {
        allocator.allocate(&readback(3000, None))
    }));
    assert_panicked_with(caught, FLUSH_PANIC, "the new allocation's fill");
    assert_eq!(live(&allocator), 1);
    // A freed allocation's fill.
    panic_in_next_flush();
    let caught = panic::catch_unwind(AssertUnwindSafe(|| free(&allocator, kept)));
    assert_panicked_with(caught, FLUSH_PANIC, "the freed allocation's fill");
    assert_eq!(live(&allocator), 0);
    let again = allocator.allocate(&readback(50_000, None)).unwrap();
    let (host, gpu) = views(&device, &again);
    assert!(all(&host, NEW) && all(&gpu, NEW));
    free(&allocator, again);
    // The fills whose flush panicked never reached the device's view: the
    // checks that invalidate it found them missing, as writes after free
    // (the cost of a backend that fails its flushes, documented).
    assert!(allocator.corruptions_detected() > 0);
    finish(allocator, &device);
}

/// A backend panicking in the invalidate that checks an empty block as
/// it is released (`trim` here) leaves nothing behind: the block, out of
/// its pool already, is freed before the panic goes on.
#[test]
fn a_backend_panicking_in_a_released_block_s_invalidate_leaves_nothing_behind() {
    let (allocator, device) = allocator_with(FakeLayout::mobile(), with_fill());
    let a = allocator.allocate(&readback(50_000, None)).unwrap();
    assert_eq!(a.memory_type(), CACHED);
    free(&allocator, a);
    assert_eq!(allocator.stats().memory_objects, 1);
    device.panic_on(FakeCall::Invalidate, 1);
    let caught = panic::catch_unwind(AssertUnwindSafe(|| allocator.trim()));
    let invalidate = injected_panic(FakeCall::Invalidate);
    assert_panicked_with(caught, &invalidate, "the released block's check");
    assert_eq!(allocator.stats().memory_objects, 0);
    assert!(device.live_allocations().is_empty());
    assert_eq!(allocator.corruptions_detected(), 0);
    finish(allocator, &device);
}

/// A compacting plan over `live` whose backend panics in its second flush,
/// past the first destination's fill: the panic comes in the middle of
/// the plan, and must reach the caller.
fn plan_panicking_at_the_second_flush(
    allocator: &FakeAllocator,
    device: &FakeDevice,
    live: &[Allocation],
) {
    let mut flushes = 0;
    device.set_flush_hook(Some(Box::new(move || {
        flushes += 1;
        if flushes == 2 {
            panic!("{FLUSH_PANIC}");
        }
    })));
    let planned = panic::catch_unwind(AssertUnwindSafe(|| {
        allocator.plan_defragmentation(&movables(live), &compacting())
    }));
    device.set_flush_hook(None);
    assert_panicked_with(
        planned,
        FLUSH_PANIC,
        "the backend's panic reaches the caller",
    );
}

/// A write after free found in a plan's first destination, then a
/// backend panicking in the flush of the second's fill: the write is
/// logged before the panic goes on, as it is counted. Before, the lines
/// collected so far were dropped with the plan.
#[test]
fn a_write_after_free_found_before_a_backend_panic_in_a_plan_is_logged() {
    super::super::leak_log::install();
    let config = Config {
        small_buffer_limit: 0,
        ..with_fill()
    };
    let (allocator, device) = allocator_with(FakeLayout::mobile(), config);
    // Every freed range written by "the GPU": whichever the first
    // destination takes is caught. (An odd byte, so that the lines of
    // other tests, logged to the same capture, do not match.)
    let mut written = Vec::new();
    let live = keep_every_third(&allocator, &readback(200_000, None), |memory, offset| {
        // SAFETY: no slice of these bytes is alive across the call.
        assert!(unsafe { device.write(memory, offset + 4099, &[0x42]) });
        written.push(format!("byte {} of memory {memory:?} ", offset + 4099));
    });
    plan_panicking_at_the_second_flush(&allocator, &device, &live);
    assert!(allocator.corruptions_detected() >= 1);
    let lines = super::super::leak_log::lines();
    let logged = written
        .iter()
        .filter(|at| lines.iter().any(|line| line.contains(at.as_str())))
        .count();
    assert!(logged >= 1, "{lines:?}");
    device.signal_fence(end_frame(&allocator, &device));
    allocator.collect().unwrap();
    for a in live {
        free(&allocator, a);
    }
    finish(allocator, &device);
}

/// A backend panicking in the flush of a defragmentation destination's
/// fill: the plan's moves are given up before the panic goes on, so their
/// destinations, handed to nobody, are freed with the next collect, and
/// the blocks being emptied take requests again.
#[test]
fn a_backend_panicking_in_a_destination_s_fill_gives_up_the_plan() {
    let config = Config {
        small_buffer_limit: 0,
        ..with_fill()
    };
    let (allocator, device) = allocator_with(FakeLayout::mobile(), config);
    let mut live = keep_every_third(&allocator, &readback(200_000, None), |_, _| {});
    let live_bytes = allocator.stats().live_bytes();
    plan_panicking_at_the_second_flush(&allocator, &device, &live);
    let fence = end_frame(&allocator, &device);
    device.signal_fence(fence);
    allocator.collect().unwrap();
    assert_eq!(allocator.stats().live_bytes(), live_bytes);
    // Nothing is being emptied: a plan moves them again.
    let plan = allocator
        .plan_defragmentation(&movables(&live), &compacting())
        .unwrap();
    assert!(!plan.moves.is_empty());
    for planned in plan.moves {
        let (host, gpu) = views(&device, &planned.destination);
        assert!(all(&host, NEW) && all(&gpu, NEW));
        let old = std::mem::replace(&mut live[planned.movable], planned.destination);
        free(&allocator, old);
    }
    for a in live {
        free(&allocator, a);
    }
    finish(allocator, &device);
}
