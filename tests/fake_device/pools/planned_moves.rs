//! Defragmentation plans in a pool: moves stay in the pool and keep its
//! fewest blocks, and split plans finish a block in a pool with a
//! minimum. Apart from the pool's own rules because they go through the
//! planner.

use std::collections::HashSet;

use vk_suballoc::device::fake::FakeLayout;
use vk_suballoc::{Config, DefragmentationLimits, Movable, PoolDesc, ResourceKind, Usage};

use super::super::defragment::{keep_where, movables};
use super::super::{allocator, allocator_with, buffer, finish, free, requirements};

use super::{in_pool, MIB, VRAM};

/// Defragmentation moves allocations within their pool and never below its
/// `min_blocks`.
#[test]
fn defragmentation_stays_in_the_pool_and_keeps_min_blocks() {
    let (allocator, device) = allocator_with(FakeLayout::discrete(), Config::default());
    let pool = allocator
        .create_pool(&PoolDesc::new(VRAM).block_size(4 * MIB).min_blocks(2))
        .unwrap();
    // Four blocks of four 1 MiB buffers; keep one buffer in each.
    let all: Vec<_> = (0..16)
        .map(|_| allocator.allocate(&in_pool(pool, MIB)).unwrap())
        .collect();
    let mut live = keep_where(&allocator, all, |i| i % 4 == 0);
    // A default-pool block with room the moves must not use.
    let outside = allocator
        .allocate(&buffer(MIB, 256, Usage::DEVICE_LOCAL))
        .unwrap();
    assert_eq!(allocator.pool_stats(&pool).unwrap().blocks, 4);
    let plan = allocator
        .plan_defragmentation(&movables(&live), &DefragmentationLimits::default())
        .unwrap();
    // Four blocks, two kept: two emptied.
    assert_eq!(plan.blocks_released, 2, "{plan:?}");
    let pool_memory: HashSet<_> = live.iter().map(|a| a.memory()).collect();
    for planned in &plan.moves {
        let destination = &planned.destination;
        assert!(destination.is_in_custom_pool());
        assert!(pool_memory.contains(&destination.memory()));
        assert_ne!(destination.memory(), outside.memory());
    }
    for planned in plan.moves {
        let old = std::mem::replace(&mut live[planned.movable], planned.destination);
        free(&allocator, old);
    }
    let stats = allocator.pool_stats(&pool).unwrap();
    assert_eq!((stats.blocks, stats.block_allocations), (2, 4));
    for allocation in live {
        free(&allocator, allocation);
    }
    free(&allocator, outside);
    allocator.destroy_pool(pool).unwrap();
    finish(allocator, &device);
}

/// A split plan in a pool with `min_blocks` finishes the block it started:
/// the block already being emptied does not count again against the
/// blocks the pool may give up (the docs review's experiment: it stayed
/// half emptied, every later plan empty).
#[test]
fn split_plans_finish_a_block_in_a_pool_with_min_blocks() {
    let (allocator, device) = allocator(FakeLayout::discrete());
    let pool = allocator
        .create_pool(&PoolDesc::new(VRAM).block_size(8 * MIB).min_blocks(1))
        .unwrap();
    // Two blocks: the first full (8 buffers), the second holding 3.
    let all: Vec<_> = (0..11)
        .map(|_| allocator.allocate(&in_pool(pool, MIB)).unwrap())
        .collect();
    let mut live = Vec::new();
    for (i, allocation) in all.into_iter().enumerate() {
        // Room in the first block for the second's three.
        if matches!(i, 1 | 3 | 5) {
            free(&allocator, allocation);
        } else {
            live.push(allocation);
        }
    }
    let second = live.last().unwrap().memory();
    let limits = DefragmentationLimits::default()
        .max_moves(1)
        .split_blocks(true);
    let mut plans = 0;
    while live.iter().any(|a| a.memory() == second) {
        plans += 1;
        assert!(plans <= 3, "the block is not finished");
        let movables: Vec<_> = live
            .iter()
            .map(|a| Movable::new(a, requirements(MIB, 256), ResourceKind::Buffer))
            .collect();
        let plan = allocator.plan_defragmentation(&movables, &limits).unwrap();
        drop(movables);
        assert_eq!(plan.moves.len(), 1, "plan {plans}: {plan:?}");
        for planned in plan.moves {
            let old = std::mem::replace(&mut live[planned.movable], planned.destination);
            free(&allocator, old);
        }
    }
    assert_eq!(allocator.pool_stats(&pool).unwrap().blocks, 1);
    for allocation in live {
        free(&allocator, allocation);
    }
    allocator.destroy_pool(pool).unwrap();
    finish(allocator, &device);
}

/// A block a split plan started stops being emptied once `trim` leaves
/// the pool no block above its `min_blocks`: it could no longer be
/// released, so a later plan does not copy its allocations out (the pool
/// would keep it, empty) nor count it released.
#[test]
fn a_started_block_is_not_finished_once_trim_leaves_min_blocks() {
    let (allocator, device) = allocator(FakeLayout::discrete());
    let pool = allocator
        .create_pool(&PoolDesc::new(VRAM).block_size(4 * MIB).min_blocks(2))
        .unwrap();
    // Blocks A (two buffers kept), B (one kept) and E (emptied, kept as
    // the pool's empty block).
    let all: Vec<_> = (0..12)
        .map(|_| allocator.allocate(&in_pool(pool, MIB)).unwrap())
        .collect();
    let mut live = keep_where(&allocator, all, |i| matches!(i, 0 | 1 | 4));
    let stats = allocator.pool_stats(&pool).unwrap();
    assert_eq!((stats.blocks, stats.empty_blocks), (3, 1));
    let a = live[0].memory();
    // Plan 1 starts A: one of its two buffers moves to B.
    let limits = DefragmentationLimits::default()
        .max_moves(1)
        .split_blocks(true);
    let plan = allocator
        .plan_defragmentation(&movables(&live[..2]), &limits)
        .unwrap();
    assert_eq!((plan.moves.len(), plan.blocks_started), (1, 1), "{plan:?}");
    for planned in plan.moves {
        let old = std::mem::replace(&mut live[planned.movable], planned.destination);
        free(&allocator, old);
    }
    // `trim` releases E: the pool holds A and B, its `min_blocks`.
    allocator.trim();
    assert_eq!(allocator.pool_stats(&pool).unwrap().blocks, 2);
    let in_a: Vec<usize> = (0..live.len()).filter(|&i| live[i].memory() == a).collect();
    assert_eq!(in_a.len(), 1);
    let plan = allocator
        .plan_defragmentation(&movables(&live), &DefragmentationLimits::default())
        .unwrap();
    let (moves, released) = (plan.moves.len(), plan.blocks_released);
    for planned in plan.moves {
        let old = std::mem::replace(&mut live[planned.movable], planned.destination);
        free(&allocator, old);
    }
    let stats = allocator.pool_stats(&pool).unwrap();
    assert_eq!(
        (moves, released, stats.blocks, stats.retiring_blocks),
        (0, 0, 2, 0),
        "plan 2 emptied a block the pool keeps"
    );
    for allocation in live {
        free(&allocator, allocation);
    }
    allocator.destroy_pool(pool).unwrap();
    finish(allocator, &device);
}
