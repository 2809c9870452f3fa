//! Remainder blocks past the budget and after: requests not held to the
//! budget (a limited heap's too), a budget that grows again, a least
//! block the driver refused, and an empty remainder block that gives way.

use vk_suballoc::device::fake::{FakeDevice, FakeLayout};
use vk_suballoc::{Allocation, Config, DedicatedPolicy, DefragmentationLimits};

use super::{device_local, memory_objects, three_and_a_half_mib_of_budget, GIB, KIB, MIB};
use crate::defragment::movables;
use crate::frames::{end_frame, free_all_and_finish};
use crate::{allocator_with, free};

/// A request not held to the budget, over it in every type it may take
/// (others use all of VRAM's budget), goes on past the budget: a
/// `DedicatedPolicy::Never` request there takes a block, and where the
/// driver grants 3.5 MiB, less than the ladder's 4 MiB, a remainder block
/// sized by the heap's room (its size less this allocator's memory), not
/// by the budget's, which has none: one 2 MiB block (below the 4 MiB the
/// driver refused) for 2000 buffers of 256 bytes. Sized by the budget's
/// room, each took the least block, 256 bytes, a memory object each.
#[test]
fn past_the_budget_remainder_blocks_are_sized_by_the_heaps_room() {
    let (allocator, device) = allocator_with(FakeLayout::discrete(), Config::default());
    device.set_heap_budget(0, 100 * MIB, 100 * MIB);
    device.cap_heap(0, 3 * MIB + 512 * KIB);
    let mut small = device_local(256).dedicated(DedicatedPolicy::Never);
    small.requirements.memory_type_bits = 1 << 1;
    let mut live = Vec::new();
    for i in 0..2000 {
        let allocation = allocator
            .allocate(&small)
            .unwrap_or_else(|error| panic!("request {i}: {error:?}"));
        assert_eq!(allocation.memory_type(), 1, "request {i}");
        live.push(allocation);
    }
    // 32, 16, 8 and 4 MiB refused by the driver, then 2 MiB.
    assert_eq!(
        (memory_objects(&device, 0), device.counters().allocate_calls),
        ((1, 2 * MIB), 5)
    );
    free_all_and_finish(allocator, &device, live);
}

/// Past the budget in a heap with a `Config::heap_size_limits` entry
/// (VRAM limited to 1 GiB, whose ladder ends at 2 MiB, this allocator
/// using all but 1.5 MiB of it, others all of the budget): a
/// `DedicatedPolicy::Never` request not held to the budget takes a
/// remainder block sized by the limit's room less this allocator's
/// memory, 512 KiB (half of 1.5 MiB, rounded down to a halving), and 2000
/// buffers of 256 bytes share it. Sized by the heap's size without the
/// limit, or without this allocator's memory taken off, the block was
/// 1 MiB, all but half a MiB of the room; sized by the budget's room,
/// which has none, each request took the least block, 256 bytes, a memory
/// object each.
#[test]
fn past_the_budget_a_limited_heaps_remainder_blocks_fit_the_limit() {
    let mut config = Config::default();
    config.heap_size_limits[0] = GIB;
    let (allocator, device) = allocator_with(FakeLayout::discrete(), config);
    device.set_heap_budget(0, 100 * MIB, 100 * MIB);
    let mut fill = device_local(GIB - 3 * MIB / 2).dedicated(DedicatedPolicy::Always);
    fill.requirements.memory_type_bits = 1 << 1;
    let mut live = vec![allocator.allocate(&fill).unwrap()];
    let calls = device.counters().allocate_calls;
    let mut small = device_local(256).dedicated(DedicatedPolicy::Never);
    small.requirements.memory_type_bits = 1 << 1;
    for i in 0..2000 {
        let allocation = allocator
            .allocate(&small)
            .unwrap_or_else(|error| panic!("request {i}: {error:?}"));
        live.push(allocation);
    }
    // One block (the fill left out).
    assert_eq!(
        (
            memory_objects(&device, fill.requirements.size),
            device.counters().allocate_calls - calls
        ),
        ((1, 512 * KIB), 1)
    );
    free_all_and_finish(allocator, &device, live);
}

/// A heap whose budget grows again: the remainder block made at the edge
/// stays while it holds allocations, and a defragmentation plan empties
/// it into a block of the ladder made once the room came back. Ten
/// buffers of 4 KiB take a 1 MiB remainder block with 3.5 MiB of budget
/// left; the budget grows, a 2 MiB buffer takes a 32 MiB block; the plan
/// moves the ten into that block and releases the remainder block, and
/// the heap is left with the one block of the ladder.
#[test]
fn once_the_budget_grows_a_defragmentation_empties_remainder_blocks() {
    let (allocator, device) = allocator_with(FakeLayout::discrete(), Config::default());
    three_and_a_half_mib_of_budget(&allocator, &device);
    let mut live: Vec<Allocation> = (0..10)
        .map(|_| allocator.allocate(&device_local(4 * KIB)).unwrap())
        .collect();
    let sizes = |device: &FakeDevice| -> Vec<u64> {
        let mut sizes: Vec<u64> = device.live_allocations().iter().map(|m| m.size).collect();
        sizes.sort_unstable();
        sizes
    };
    assert_eq!(sizes(&device), [MIB]);
    device.set_heap_budget(0, 4 * GIB, 0);
    device.signal_fence(end_frame(&allocator, &device));
    allocator.collect().unwrap();
    live.push(allocator.allocate(&device_local(2 * MIB)).unwrap());
    assert_eq!(sizes(&device), [MIB, 32 * MIB]);
    let plan = allocator
        .plan_defragmentation(&movables(&live), &DefragmentationLimits::default())
        .unwrap();
    assert_eq!(
        (plan.moves.len(), plan.blocks_released, plan.bytes_released),
        (10, 1, MIB)
    );
    for planned in plan.moves.into_iter().rev() {
        let old = std::mem::replace(&mut live[planned.movable], planned.destination);
        free(&allocator, old);
    }
    assert_eq!(sizes(&device), [32 * MIB]);
    free_all_and_finish(allocator, &device, live);
}

/// A block-only request (`DedicatedPolicy::Never`) whose remainder block
/// is its least block asks the driver for it once: with 768 bytes of
/// VRAM budget left the remainder block of a 256-byte buffer is 256 bytes,
/// its least; the driver, with less than that, refuses it, and the
/// request goes on to system memory. One refused call, not that block
/// asked for twice (a refused call can be slow).
#[test]
fn a_least_block_the_driver_refused_is_not_asked_for_again() {
    let (allocator, device) = allocator_with(FakeLayout::discrete(), Config::default());
    device.set_heap_budget(0, 100 * MIB, 100 * MIB - 768);
    device.cap_heap(0, 128);
    let request = device_local(256).dedicated(DedicatedPolicy::Never);
    let allocation = allocator.allocate(&request).unwrap();
    assert_ne!(allocation.memory_type(), 1);
    let counters = device.counters();
    // The refused 256-byte block in VRAM, the block in system memory.
    assert_eq!((counters.allocate_calls, counters.allocations), (2, 1));
    free_all_and_finish(allocator, &device, vec![allocation]);
}

/// An empty remainder block, kept for reuse as any block that empties,
/// gives way to a request that needs its room: with 3.5 MiB of VRAM
/// budget left, a buffer of 256 bytes takes a 1 MiB block and is freed;
/// a 3 MiB buffer held to the budget then finds only 2.5 MiB beside the
/// kept block, which is released for it, and it takes VRAM.
#[test]
fn an_empty_remainder_block_gives_way_to_a_larger_request() {
    let (allocator, device) = allocator_with(FakeLayout::discrete(), Config::default());
    three_and_a_half_mib_of_budget(&allocator, &device);
    let small = allocator.allocate(&device_local(256)).unwrap();
    assert_eq!(memory_objects(&device, 0), (1, MIB));
    free(&allocator, small);
    assert_eq!(memory_objects(&device, 0), (1, MIB), "kept");
    let large = allocator
        .allocate(&device_local(3 * MIB).within_budget())
        .unwrap();
    assert_eq!(large.memory_type(), 1);
    assert_eq!(memory_objects(&device, 0), (1, 3 * MIB));
    free_all_and_finish(allocator, &device, vec![large]);
}
