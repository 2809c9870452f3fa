//! Movables `plan_defragmentation` refuses, before anything changes: another
//! allocator's allocation, a zero size, an alignment not a power of two, and
//! a stale handle, in the documented order.

use vk_suballoc::device::fake::FakeLayout;
use vk_suballoc::{DefragmentationLimits, Error, Movable, ResourceKind, Usage};

use super::super::{allocator_with, buffer, finish, free, requirements, without_runs};

use super::{movables, two_fragmented_blocks, MIB};

/// Bad movables are refused before anything changes: another allocator's
/// allocation, a zero size, an alignment not a power of two.
#[test]
fn bad_movables_are_refused_and_change_nothing() {
    let (allocator, device) = allocator_with(FakeLayout::discrete(), without_runs());
    let (other, other_device) = super::super::allocator(FakeLayout::discrete());
    let live = two_fragmented_blocks(&allocator);
    let foreign = other
        .allocate(&buffer(MIB, 256, Usage::DEVICE_LOCAL))
        .unwrap();
    let before = allocator.stats();
    let good = movables(&live);
    let bad = |movable: Movable<'_>| {
        let list = [&good[..], &[movable]].concat();
        allocator
            .plan_defragmentation(&list, &DefragmentationLimits::default())
            .unwrap_err()
    };
    assert_eq!(
        bad(Movable::new(
            &foreign,
            requirements(MIB, 256),
            ResourceKind::Buffer
        )),
        Error::ForeignAllocation
    );
    assert_eq!(
        bad(Movable::new(
            &live[0],
            requirements(0, 256),
            ResourceKind::Buffer
        )),
        Error::ZeroSize
    );
    assert_eq!(
        bad(Movable::new(
            &live[0],
            requirements(MIB, 3),
            ResourceKind::Buffer
        )),
        Error::AlignmentNotPowerOfTwo(3)
    );
    assert_eq!(allocator.stats(), before);
    drop(good);
    for a in live {
        free(&allocator, a);
    }
    free(&other, foreign);
    finish(allocator, &device);
    finish(other, &other_device);
}

/// `plan_defragmentation`'s documented order: each movable's owner and
/// requirements first, staleness of a freed one only once every movable
/// passed those. A handle that outlived its free (copied out with
/// `ptr::read`, as only unsafe code can) is stale; listed after a movable
/// with bad requirements, the requirements' error wins, wherever it is
/// listed.
#[test]
fn bad_requirements_are_refused_before_a_stale_movable() {
    let (allocator, device) = allocator_with(FakeLayout::discrete(), without_runs());
    let (other, other_device) = super::super::allocator(FakeLayout::discrete());
    let mut live = two_fragmented_blocks(&allocator);
    let freed = live.pop().unwrap();
    // SAFETY: `Allocation` owns nothing on the heap and has no `Drop`; the
    // copy only names the freed range (refused as stale below), and is
    // never freed.
    let stale = unsafe { std::ptr::read(&freed) };
    free(&allocator, freed);
    let foreign = other
        .allocate(&buffer(MIB, 256, Usage::DEVICE_LOCAL))
        .unwrap();
    let before = allocator.stats();
    let good = movables(&live);
    let stale_movable = Movable::new(&stale, requirements(MIB, 256), ResourceKind::Buffer);
    let plan = |list: &[Movable<'_>]| {
        allocator
            .plan_defragmentation(list, &DefragmentationLimits::default())
            .unwrap_err()
    };
    assert_eq!(
        plan(&[&good[..], &[stale_movable]].concat()),
        Error::StaleAllocation
    );
    let zero = Movable::new(&live[0], requirements(0, 256), ResourceKind::Buffer);
    let odd = Movable::new(&live[0], requirements(MIB, 3), ResourceKind::Buffer);
    let theirs = Movable::new(&foreign, requirements(MIB, 256), ResourceKind::Buffer);
    for (bad, expected) in [
        (zero, Error::ZeroSize),
        (odd, Error::AlignmentNotPowerOfTwo(3)),
        (theirs, Error::ForeignAllocation),
    ] {
        assert_eq!(plan(&[stale_movable, bad]), expected);
        assert_eq!(plan(&[bad, stale_movable]), expected);
    }
    // Each movable's owner before its requirements.
    let foreign_zero = Movable::new(&foreign, requirements(0, 3), ResourceKind::Buffer);
    assert_eq!(plan(&[foreign_zero]), Error::ForeignAllocation);
    assert_eq!(allocator.stats(), before);
    drop(good);
    // The stale copy is never freed: it names nothing live.
    let _ = stale;
    for a in live {
        free(&allocator, a);
    }
    free(&other, foreign);
    finish(allocator, &device);
    finish(other, &other_device);
}

/// Movables whose requirements no block can meet: a size at or near
/// `u64::MAX`, past every heap, and `memoryTypeBits` of 0 or without the
/// allocation's type; and 1 MiB aligned to 2^63, which only offset 0 of a
/// block meets. None is a documented error, so the plan is `Ok` and moves
/// none of the first (the last only to offset 0), in every pass (emptying
/// whole blocks, splitting them, compacting), never a panic or a wrapped
/// size; once the moves are given up and collected the allocator's figures
/// are as before, and the good movables still move after.
#[test]
fn movables_no_block_can_take_are_left_in_place() {
    let (allocator, device) = allocator_with(FakeLayout::discrete(), without_runs());
    let mut live = two_fragmented_blocks(&allocator);
    let before = allocator.stats();
    let memory_type = live[0].memory_type();
    let extreme = [
        (u64::MAX, 1, !0),
        (u64::MAX, 1 << 63, !0),
        (u64::MAX - 255, 256, !0),
        (1 << 48, 256, !0),
        (MIB, 1 << 63, !0),
        (MIB, 256, 0),
        (MIB, 256, !(1 << memory_type)),
    ];
    let passes = [
        DefragmentationLimits::default(),
        DefragmentationLimits::default().max_used_percent(100),
        DefragmentationLimits::default()
            .max_moves(3)
            .split_blocks(true),
        DefragmentationLimits::default().compact_blocks(true),
        DefragmentationLimits::default()
            .max_used_percent(100)
            .split_blocks(true)
            .compact_blocks(true),
    ];
    for (size, alignment, memory_type_bits) in extreme {
        let r = ash::vk::MemoryRequirements {
            size,
            alignment,
            memory_type_bits,
        };
        let list: Vec<Movable<'_>> = live
            .iter()
            .map(|a| Movable::new(a, r, ResourceKind::Buffer))
            .collect();
        for limits in &passes {
            let plan = allocator
                .plan_defragmentation(&list, limits)
                .unwrap_or_else(|e| panic!("{r:?} {limits:?}: {e:?}"));
            // Offset 0 of a block is a multiple of 2^63: a 1 MiB move may
            // go there, and only there.
            let placeable = size == MIB && memory_type_bits & (1 << memory_type) != 0;
            assert!(
                placeable || plan.moves.is_empty(),
                "{r:?} {limits:?}: {:?}",
                plan.moves
            );
            for planned in plan.moves {
                let destination = &planned.destination;
                assert_eq!(
                    (destination.offset() % alignment, destination.size()),
                    (0, size)
                );
                allocator.give_up_move(planned).unwrap();
            }
            // SAFETY: the fake device runs no GPU work.
            unsafe { allocator.collect_idle() };
            assert_eq!(allocator.stats(), before, "{r:?} {limits:?}");
        }
    }
    // The blocks take moves as before.
    let plan = allocator
        .plan_defragmentation(&movables(&live), &DefragmentationLimits::default())
        .unwrap();
    assert!(!plan.moves.is_empty());
    for planned in plan.moves.into_iter().rev() {
        let old = std::mem::replace(&mut live[planned.movable], planned.destination);
        free(&allocator, old);
    }
    for a in live {
        free(&allocator, a);
    }
    finish(allocator, &device);
}
