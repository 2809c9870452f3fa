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
