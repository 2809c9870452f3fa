//! Debug fills and the placements a defragmentation plan undoes: a source
//! block's moves are placed one by one, and given up together when the
//! last ones find no room. Those destinations were handed to nobody, nor
//! checked: their bytes are checked before their free fills them again
//! (it erased a write after free there unseen), and a backend panicking
//! in that work leaves nothing live.

use std::panic::{self, AssertUnwindSafe};

use vk_suballoc::device::fake::FakeLayout;
use vk_suballoc::{
    Allocation, AllocationDesc, Config, DefragmentationLimits, PoolDesc, Request, ResourceKind,
    Usage,
};

use super::defragment::movables;
use super::frames::end_frame;
use super::{allocator_with, assert_panicked_with, finish, free, requirements, FakeAllocator};

const KIB: u64 = 1 << 10;
const MIB: u64 = 1 << 20;

fn with_fill() -> Config {
    Config {
        debug_fill: true,
        ..Config::default()
    }
}

/// A `size`-byte buffer request in `pool`.
fn in_pool(size: u64, usage: Usage, pool: vk_suballoc::Pool) -> Request<'static> {
    Request::with_desc(
        requirements(size, 16),
        ResourceKind::Buffer,
        AllocationDesc::new(usage).pool(pool),
    )
}

/// Makes `sizes` (in KiB) in `pool`, whose blocks are 1 MiB, asserting
/// that each starts a new block where `new_block` says.
fn make(
    allocator: &FakeAllocator,
    pool: vk_suballoc::Pool,
    usage: Usage,
    sizes: &[(u64, bool)],
) -> Vec<Allocation> {
    let mut made: Vec<Allocation> = Vec::new();
    for &(size, new_block) in sizes {
        let a = allocator
            .allocate(&in_pool(size * KIB, usage, pool))
            .unwrap();
        if let Some(last) = made.last() {
            assert_eq!(a.memory() != last.memory(), new_block, "{size} KiB");
        }
        made.push(a);
    }
    made
}

/// A write after free lands in a custom pool's free bytes; a plan places
/// the first move of a block there, then gives it up (the block's second
/// move finds no room): the write is found, logged and counted. Before,
/// the undo's free filled those bytes `0xEF` again, unchecked, and no
/// check could find the write any more.
#[test]
fn a_write_after_free_in_a_destination_the_plan_undoes_is_caught() {
    super::leak_log::install();
    // The discrete layout's host-visible coherent type.
    let host = 2;
    let (allocator, device) = allocator_with(FakeLayout::discrete(), with_fill());
    let pool = allocator
        .create_pool(&PoolDesc::new(host).block_size(MIB))
        .unwrap();
    // Block A: 600 KiB kept, 400 KiB freed; block B: two of 300 KiB.
    let made = make(
        &allocator,
        pool,
        Usage::UPLOAD,
        &[(600, false), (400, false), (300, true), (300, false)],
    );
    let [kept, freed, b1, b2] = <[Allocation; 4]>::try_from(made).unwrap();
    let (memory, start) = (freed.memory(), freed.offset());
    free(&allocator, freed);
    // The middle of A's free range (`start` to its end): any 300 KiB
    // placed in it holds this byte. (An odd offset, so that other tests'
    // lines, logged to the same capture, do not match.)
    let at = start + (MIB - start) / 2 + 3;
    // SAFETY: no slice of these bytes is alive across the call.
    assert!(unsafe { device.write(memory, at, &[0x42]) });

    let live = [b1, b2];
    let limits = DefragmentationLimits::default().max_used_percent(100);
    let plan = allocator
        .plan_defragmentation(&movables(&live), &limits)
        .unwrap();
    assert!(plan.moves.is_empty(), "{plan:?}");
    assert_eq!(plan.blocks_released, 0);
    assert_eq!(allocator.corruptions_detected(), 1);
    let needle = format!("byte {at} of memory {memory:?} ");
    let lines = super::leak_log::lines();
    assert!(
        lines
            .iter()
            .any(|line| line.contains(&needle) && line.contains("gave it up")),
        "{lines:?}"
    );
    // Found once: the undo filled the bytes again.
    assert!(allocator.check_corruption(!0).unwrap().is_clean());
    assert_eq!(allocator.corruptions_detected(), 1);
    // The plan left nothing live behind.
    for a in live.into_iter().chain([kept]) {
        free(&allocator, a);
    }
    assert_eq!(allocator.pool_stats(&pool).unwrap().allocations(), 0);
    allocator.destroy_pool(pool).unwrap();
    finish(allocator, &device);
}

/// A backend panicking in the flush of an undone destination's fill (a
/// non-coherent type): the pool finishes the undo, the plan's earlier
/// moves are given up, and the panic reaches the caller. Before, the
/// panic left the pool's plan with the earlier moves' destinations live,
/// handed to nobody, until the allocator's drop.
#[test]
fn a_backend_panicking_as_a_plan_undoes_a_destination_leaks_nothing() {
    // Mobile's host-visible cached, non-coherent type.
    let cached = 2;
    let (allocator, device) = allocator_with(FakeLayout::mobile(), with_fill());
    let pool = allocator
        .create_pool(&PoolDesc::new(cached).block_size(MIB))
        .unwrap();
    // A: 600 KiB kept, 400 KiB freed; B: 100 KiB, then 900 KiB freed;
    // C: two of 200 KiB, then 600 KiB freed.
    let made = make(
        &allocator,
        pool,
        Usage::READBACK,
        &[
            (600, false),
            (400, false),
            (100, true),
            (900, false),
            (200, true),
            (200, false),
            (600, false),
        ],
    );
    let [kept, t, s1, fb, c1, c2, fc] = <[Allocation; 7]>::try_from(made).unwrap();
    for a in [t, fb, fc] {
        free(&allocator, a);
    }
    let live = [s1, c1, c2];
    let live_bytes = allocator.stats().live_bytes();
    // B empties into A; C's first move goes to A too, its second finds no
    // room, and the first is undone: its fill's flush is the plan's first.
    let mut flushes = 0;
    device.set_flush_hook(Some(Box::new(move || {
        flushes += 1;
        if flushes == 1 {
            panic!("the backend's flush panics");
        }
    })));
    let planned = panic::catch_unwind(AssertUnwindSafe(|| {
        allocator.plan_defragmentation(&movables(&live), &DefragmentationLimits::default())
    }));
    device.set_flush_hook(None);
    let flush = "the backend's flush panics";
    assert_panicked_with(planned, flush, "the backend's panic reaches the caller");
    device.signal_fence(end_frame(&allocator, &device));
    allocator.collect().unwrap();
    assert_eq!(allocator.stats().live_bytes(), live_bytes);
    // B is no longer being emptied: the same plan, run again, moves s1.
    let plan = allocator
        .plan_defragmentation(&movables(&live), &DefragmentationLimits::default())
        .unwrap();
    assert_eq!(plan.blocks_released, 1, "{plan:?}");
    for planned in plan.moves {
        allocator.give_up_move(planned).unwrap();
    }
    device.signal_fence(end_frame(&allocator, &device));
    allocator.collect().unwrap();
    assert_eq!(allocator.stats().live_bytes(), live_bytes);
    for a in live.into_iter().chain([kept]) {
        free(&allocator, a);
    }
    allocator.destroy_pool(pool).unwrap();
    finish(allocator, &device);
}
