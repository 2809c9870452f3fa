//! `DefragmentationLimits`: a block is emptied whole or not at all, or over
//! several plans with `split_blocks` (a block a split plan started staying
//! retiring until a plan empties it), and a block with nowhere to go is not
//! counted over the limits.

use vk_suballoc::device::fake::FakeLayout;
use vk_suballoc::DefragmentationLimits;

use super::super::{allocator_with, finish, free, without_runs};

use super::{
    blocks, carry_out, custom_pool_with_a_sparse_block, keep_where, mib_buffers, movables,
    two_fragmented_blocks, MIB,
};

/// A block is emptied whole or not at all: limits below its 8 moves or
/// 8 MiB plan nothing, and change nothing.
#[test]
fn limits_stop_a_plan_short_of_a_block() {
    let (allocator, device) = allocator_with(FakeLayout::discrete(), without_runs());
    let mut live = two_fragmented_blocks(&allocator);
    let before = allocator.stats();
    for limits in [
        DefragmentationLimits::default().max_moves(7),
        DefragmentationLimits::default().max_bytes(8 * MIB - 1),
        DefragmentationLimits::default().max_moves(0),
    ] {
        let plan = allocator
            .plan_defragmentation(&movables(&live), &limits)
            .unwrap();
        assert!(plan.moves.is_empty(), "{limits:?}");
        // Both blocks (8 and 16 moves, 8 and 16 MiB) are over the limits.
        assert_eq!(plan.blocks_over_limits, 2, "{limits:?}");
        assert_eq!(allocator.stats(), before, "{limits:?}");
    }
    let limits = DefragmentationLimits::default()
        .max_moves(8)
        .max_bytes(8 * MIB);
    let plan = allocator
        .plan_defragmentation(&movables(&live), &limits)
        .unwrap();
    assert_eq!((plan.moves.len(), plan.blocks_released), (8, 1));
    assert_eq!((plan.bytes_moved, plan.blocks_over_limits), (8 * MIB, 0));
    carry_out(&allocator, &mut live, plan);
    for a in live {
        free(&allocator, a);
    }
    finish(allocator, &device);
}

/// With `split_blocks`, limits below a block's moves empty it over several
/// plans: each moves what the limits allow out of the emptiest block over
/// them, which retires at once; the plan that moves the last ones counts
/// it released. The 64 MiB block's 8 buffers go 3, 3 and 2 at a time
/// (or 2 by 2 under a 2.5 MiB limit, and under a 2 MiB one, which two
/// moves reach exactly).
#[test]
fn split_blocks_empty_a_block_over_several_plans() {
    for (limits, per_plan) in [
        (DefragmentationLimits::default().max_moves(3), 3),
        (DefragmentationLimits::default().max_bytes(5 * MIB / 2), 2),
        (DefragmentationLimits::default().max_bytes(2 * MIB), 2),
    ] {
        let limits = limits.split_blocks(true);
        let (allocator, device) = allocator_with(FakeLayout::discrete(), without_runs());
        let mut live = two_fragmented_blocks(&allocator);
        let memory_type = live[0].memory_type();
        let second = live[16].memory();
        let mut left = 8;
        while left > per_plan {
            let plan = allocator
                .plan_defragmentation(&movables(&live), &limits)
                .unwrap();
            assert_eq!(plan.moves.len(), per_plan, "{limits:?}");
            assert_eq!((plan.blocks_started, plan.blocks_released), (1, 0));
            // The first block, half full, is over the limits as a whole,
            // until the moves fill it past half.
            let first_plan = left == 8;
            assert_eq!(plan.blocks_over_limits, usize::from(first_plan));
            assert!(plan
                .moves
                .iter()
                .all(|m| live[m.movable].memory() == second));
            let map = allocator.memory_map();
            let retiring: Vec<_> = map.memory_types[memory_type as usize]
                .blocks
                .iter()
                .filter(|b| b.retiring)
                .map(|b| b.memory)
                .collect();
            assert_eq!(retiring, [second], "{limits:?}");
            carry_out(&allocator, &mut live, plan);
            left -= per_plan;
            assert_eq!(live.iter().filter(|a| a.memory() == second).count(), left);
            assert_eq!(blocks(&allocator, memory_type).0, 2, "not yet empty");
        }
        let plan = allocator
            .plan_defragmentation(&movables(&live), &limits)
            .unwrap();
        assert_eq!((plan.moves.len(), plan.blocks_released), (left, 1));
        assert_eq!(plan.blocks_started, 0);
        carry_out(&allocator, &mut live, plan);
        assert_eq!(blocks(&allocator, memory_type).0, 1, "released");
        // Without splitting the same limits plan nothing at all.
        let whole = DefragmentationLimits {
            split_blocks: false,
            ..limits
        };
        assert!(allocator
            .plan_defragmentation(&movables(&live), &whole)
            .unwrap()
            .moves
            .is_empty());
        for a in live {
            free(&allocator, a);
        }
        finish(allocator, &device);
    }
}

/// Blocks over the limits are split only once no block of any pool fits
/// whole, not pool by pool: the default pool's 64 MiB block (8 moves, over
/// a limit of 3), planned first, leaves two of the moves to the custom
/// pool's sparse block, which they empty whole, and gets the third.
/// (Before, the default pool's split took all three, and the custom pool's
/// block, which fit whole, was not emptied.)
#[test]
fn split_blocks_wait_for_whole_blocks_of_every_pool() {
    let (allocator, device) = allocator_with(FakeLayout::discrete(), without_runs());
    let mut live = two_fragmented_blocks(&allocator);
    let second = live[16].memory();
    let (pool, in_pool, sparse) =
        custom_pool_with_a_sparse_block(&allocator, live[0].memory_type());
    let first_in_pool = live.len();
    live.extend(in_pool);
    let limits = DefragmentationLimits::default()
        .max_moves(3)
        .split_blocks(true);
    let plan = allocator
        .plan_defragmentation(&movables(&live), &limits)
        .unwrap();
    let moved_from = |memory| {
        plan.moves
            .iter()
            .filter(|m| live[m.movable].memory() == memory)
            .count()
    };
    assert_eq!(
        (moved_from(sparse), moved_from(second)),
        (2, 1),
        "{:?}",
        plan.moves
    );
    assert_eq!((plan.blocks_released, plan.blocks_started), (1, 1));
    // The default pool's first block, half full, stays over the limits.
    assert_eq!(plan.blocks_over_limits, 1);
    assert!(plan
        .moves
        .iter()
        .filter(|m| m.movable >= first_in_pool)
        .all(|m| m.destination.memory() == live[first_in_pool].memory()));
    carry_out(&allocator, &mut live, plan);
    for a in live {
        free(&allocator, a);
    }
    allocator.destroy_pool(pool).unwrap();
    finish(allocator, &device);
}

/// A block a split plan started stays retiring (it takes no new requests)
/// until a plan empties it, so a later plan goes on with it whatever its
/// `max_used_percent`: the percent chooses which blocks to start. Before,
/// a plan with a lower percent than the block's use passed it over, and
/// the block stayed retiring, holding its memory out of use.
#[test]
fn a_retiring_block_goes_on_under_a_lower_used_percent() {
    let (allocator, device) = allocator_with(FakeLayout::discrete(), without_runs());
    let mut live = two_fragmented_blocks(&allocator);
    let second = live[16].memory();
    let split = DefragmentationLimits::default()
        .max_moves(3)
        .split_blocks(true);
    let plan = allocator
        .plan_defragmentation(&movables(&live), &split)
        .unwrap();
    assert_eq!((plan.moves.len(), plan.blocks_started), (3, 1));
    carry_out(&allocator, &mut live, plan);
    // 5 MiB of the 64 MiB block left: under 8 %, above 5 %.
    let lower = split.max_used_percent(5);
    let plan = allocator
        .plan_defragmentation(&movables(&live), &lower)
        .unwrap();
    assert_eq!(plan.moves.len(), 3, "the retiring block goes on");
    assert!(plan
        .moves
        .iter()
        .all(|m| live[m.movable].memory() == second));
    carry_out(&allocator, &mut live, plan);
    let plan = allocator
        .plan_defragmentation(&movables(&live), &lower)
        .unwrap();
    assert_eq!((plan.moves.len(), plan.blocks_released), (2, 1));
    carry_out(&allocator, &mut live, plan);
    for a in live {
        free(&allocator, a);
    }
    finish(allocator, &device);
}

/// A block over the limits that no other block could take moves from is
/// not counted over them: no limit would let it empty. Alone in its
/// memory type, or beside an empty block kept for reuse (moving into it
/// would only swap one block for another).
#[test]
fn a_block_over_the_limits_with_nowhere_to_go_is_not_counted() {
    let (allocator, device) = allocator_with(FakeLayout::discrete(), without_runs());
    let mut live = mib_buffers(&allocator, 33);
    let memory_type = live[0].memory_type();
    let limits = DefragmentationLimits::default().max_moves(1);
    for a in live.drain(4..32) {
        free(&allocator, a);
    }
    let plan = allocator
        .plan_defragmentation(&movables(&live[..4]), &limits)
        .unwrap();
    assert_eq!(plan.blocks_over_limits, 1, "the second block takes them");
    free(&allocator, live.pop().unwrap());
    assert_eq!(blocks(&allocator, memory_type).2, 1, "an empty block kept");
    let plan = allocator
        .plan_defragmentation(&movables(&live), &limits)
        .unwrap();
    assert_eq!((plan.moves.len(), plan.blocks_over_limits), (0, 0));
    for a in live {
        free(&allocator, a);
    }
    finish(allocator, &device);
}

/// A lone fragmented block has nowhere to go: no limit would empty it, so
/// a plan under limits does not count it over them (the newcomer's plan
/// said "over the limits" and raising them did nothing). With a second
/// block holding something, it is over them.
#[test]
fn a_block_with_nowhere_to_go_is_not_over_the_limits() {
    let (allocator, device) = allocator_with(FakeLayout::discrete(), without_runs());
    // The first block (32 MiB) alone, a quarter in use.
    let all = mib_buffers(&allocator, 32);
    let live = keep_where(&allocator, all, |i| i % 4 == 0);
    let limits = DefragmentationLimits::default().max_moves(2);
    for split in [false, true] {
        let plan = allocator
            .plan_defragmentation(&movables(&live), &limits.split_blocks(split))
            .unwrap();
        assert!(plan.moves.is_empty());
        assert_eq!(plan.blocks_over_limits, 0, "split {split}");
    }
    // A second block, holding one buffer the plan may not move: the first
    // could go there.
    let mut others = mib_buffers(&allocator, 25);
    let anchor = others.pop().unwrap();
    assert_ne!(anchor.memory(), live[0].memory());
    for a in others {
        free(&allocator, a);
    }
    let plan = allocator
        .plan_defragmentation(&movables(&live), &limits)
        .unwrap();
    assert_eq!((plan.moves.len(), plan.blocks_over_limits), (0, 1));
    for a in live.into_iter().chain([anchor]) {
        free(&allocator, a);
    }
    finish(allocator, &device);
}
