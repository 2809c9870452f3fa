//! Misuse of the allocator's public methods that the other bad-input
//! tests do not try: a planned move of another allocator carrying one of
//! this allocator's allocations. Each gets a typed error (or a documented
//! no-op), no panic (these run in debug), and leaves the allocator as it
//! was: its figures unchanged, a normal allocate and free working after.

use vk_suballoc::device::fake::{FakeDevice, FakeLayout};
use vk_suballoc::Usage;
use vk_suballoc::{Allocation, DefragmentationLimits, DefragmentationMove, Movable, ResourceKind};

use super::{allocator_with, buffer, finish, free, without_runs, FakeAllocator};

/// An allocator of `layout` with a plan under way that empties a
/// device-local block: its first block holds a hole, an allocation and a
/// filler to its end, and the allocation in its second block moves into
/// the hole. Returns the allocator, its device, its allocations and the
/// move.
fn retiring(
    layout: FakeLayout,
) -> (
    FakeAllocator,
    FakeDevice,
    Vec<Allocation>,
    DefragmentationMove,
) {
    let r = super::requirements(1 << 20, 256);
    let request = buffer(1 << 20, 256, Usage::DEVICE_LOCAL);
    let (allocator, device) = allocator_with(layout, without_runs());
    let hole = allocator.allocate(&request).unwrap();
    let kept = vec![
        allocator.allocate(&request).unwrap(),
        allocator
            .allocate(&buffer(30 << 20, 256, Usage::DEVICE_LOCAL))
            .unwrap(),
        allocator.allocate(&request).unwrap(),
    ];
    free(&allocator, hole);
    let movables = [Movable::new(&kept[2], r, ResourceKind::Buffer)];
    let limits = DefragmentationLimits::default().max_used_percent(100);
    let mut plan = allocator.plan_defragmentation(&movables, &limits).unwrap();
    assert_eq!((plan.moves.len(), plan.blocks_released), (1, 1));
    let planned = plan.moves.pop().unwrap();
    assert_eq!(retiring_blocks(&allocator), 1);
    (allocator, device, kept, planned)
}

/// The blocks being emptied, over every memory type.
fn retiring_blocks(allocator: &FakeAllocator) -> u64 {
    let stats = allocator.stats();
    stats.memory_types.iter().map(|t| t.retiring_blocks).sum()
}

/// A move planned by another allocator whose public `destination` the
/// engine swapped for an allocation of this allocator: giving it up here
/// frees that allocation (after the frame, as for any move given up), and
/// must neither index this allocator's pools by the other's memory type
/// (a panic where this device has fewer types) nor stop emptying the
/// block of this allocator that the other's block key happens to name
/// (the same key, where both made the same blocks).
#[test]
fn another_allocators_move_carrying_this_allocators_destination() {
    for layout in [FakeLayout::lavapipe(), FakeLayout::discrete()] {
        let name = layout.name;
        let (other, other_device, other_kept, mut foreign) = retiring(FakeLayout::discrete());
        assert_eq!(foreign.destination.memory_type(), 1);
        let (allocator, device, kept, own) = if name == "discrete" {
            let (a, d, kept, own) = retiring(layout);
            (a, d, kept, Some(own))
        } else {
            let (a, d) = allocator_with(layout, without_runs());
            (a, d, Vec::new(), None)
        };
        let mut swapped = allocator
            .allocate(&buffer(4096, 256, Usage::DEVICE_LOCAL))
            .unwrap();
        std::mem::swap(&mut foreign.destination, &mut swapped);
        let (allocations, emptying) =
            (allocator.stats().allocations(), retiring_blocks(&allocator));
        assert_eq!(allocator.give_up_move(foreign), Ok(()), "{name}");
        // SAFETY: nothing was submitted.
        unsafe { allocator.collect_idle() };
        assert_eq!(allocator.stats().allocations(), allocations - 1, "{name}");
        assert_eq!(
            retiring_blocks(&allocator),
            emptying,
            "{name}: still emptied"
        );
        assert_eq!(retiring_blocks(&other), 1, "{name}: the other's plan");

        // Both allocators go on: the moves of their own plans given up,
        // a normal allocate and free, everything freed.
        if let Some(own) = own {
            allocator.give_up_move(own).unwrap();
        }
        let again = allocator
            .allocate(&buffer(4096, 256, Usage::UPLOAD))
            .unwrap();
        free(&allocator, again);
        // SAFETY: nothing was submitted.
        unsafe { other.free(swapped) }.unwrap();
        for a in kept {
            free(&allocator, a);
        }
        for a in other_kept {
            free(&other, a);
        }
        // SAFETY: nothing was submitted.
        unsafe { allocator.collect_idle() };
        // SAFETY: as above.
        unsafe { other.collect_idle() };
        finish(allocator, &device);
        finish(other, &other_device);
    }
}
