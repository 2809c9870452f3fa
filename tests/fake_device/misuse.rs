//! Misuse of the allocator's public methods that the other bad-input
//! tests do not try: a planned move of another allocator carrying one of
//! this allocator's allocations, and another allocator's allocations of a
//! memory type this device does not have, on every method that takes one.
//! Each gets a typed error (or a documented result), no panic (these run
//! in debug), and leaves the allocator as it was: its figures unchanged,
//! a normal allocate and free working after.

use ash::vk;
use ash::vk::Handle;
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

/// Another allocator's allocations, of a memory type past this device's
/// (type 4 of the discrete layout, on lavapipe's one type), from its
/// default blocks, a small-buffer run, a custom pool and dedicated memory,
/// on every method that takes an allocation: each is
/// `ForeignAllocation` (`owns` false), checked before the handle's memory
/// type indexes anything, and this allocator's figures do not change. A
/// normal allocate and free work after.
#[test]
fn another_allocators_allocations_of_a_type_past_this_device_s() {
    use vk_suballoc::{AllocationDesc, DedicatedPolicy, Error, PoolDesc, Request};

    let (mut allocator, device) = allocator_with(FakeLayout::lavapipe(), without_runs());
    let (other, other_device) = super::allocator(FakeLayout::discrete());
    let pool = other.create_pool(&PoolDesc::new(4)).unwrap();
    let bar = Usage::UPLOAD | Usage::DEVICE_LOCAL;
    let with = |desc| Request::with_desc(super::requirements(1000, 1), ResourceKind::Buffer, desc);
    let requests = [
        buffer(1000, 1, bar),
        buffer(64, 1, bar),
        with(AllocationDesc::new(Usage::UPLOAD).pool(pool)),
        with(AllocationDesc::new(bar).dedicated(DedicatedPolicy::Always)),
    ];
    let foreign = Some(Error::ForeignAllocation);
    for request in &requests {
        let mut theirs = other.allocate(request).unwrap();
        assert_eq!(theirs.memory_type(), 4);
        let before = allocator.stats();
        let r = super::requirements(1000, 1);
        let limits = DefragmentationLimits::default().compact_blocks(true);
        let listed = [Movable::new(&theirs, r, ResourceKind::Buffer)];
        assert_eq!(
            allocator.plan_defragmentation(&listed, &limits).err(),
            foreign
        );
        assert_eq!(allocator.mapped_slice(&theirs).err(), foreign);
        assert_eq!(allocator.mapped_slice_mut(&mut theirs).err(), foreign);
        assert_eq!(allocator.flush(&theirs, ..).err(), foreign);
        assert_eq!(allocator.invalidate(&mut theirs, ..).err(), foreign);
        assert_eq!(
            allocator.flush_allocations([(&theirs, 0..1)]).err(),
            foreign
        );
        assert_eq!(
            allocator
                .invalidate_allocations([(&mut theirs, 0..1)])
                .err(),
            foreign
        );
        assert_eq!(
            allocator.copy_to_allocation(&mut theirs, 0, &[1]).err(),
            foreign
        );
        assert_eq!(
            allocator
                .copy_from_allocation(&mut theirs, 0, &mut [0])
                .err(),
            foreign
        );
        assert_eq!(allocator.set_name(&theirs, Some("theirs")).err(), foreign);
        assert_eq!(allocator.name(&theirs).err(), foreign);
        assert_eq!(allocator.memory_size(&theirs).err(), foreign);
        assert_eq!(
            allocator
                .check_alias(&theirs, 0, &r, ResourceKind::Buffer)
                .err(),
            foreign
        );
        assert!(!allocator.owns(&theirs));
        // The consuming calls: each drops the handle, leaked in `other`
        // until its drop, as documented.
        let freed = allocator.free_after_frame(other.allocate(request).unwrap());
        assert_eq!(freed.err(), foreign);
        // SAFETY: refused before anything is freed; nothing was submitted.
        let freed = unsafe { allocator.free(other.allocate(request).unwrap()) };
        assert_eq!(freed.err(), foreign);
        // SAFETY: as above.
        let freed = unsafe { allocator.free_mut(other.allocate(request).unwrap()) };
        assert_eq!(freed.err(), foreign);
        // The deferred destructions queue nothing then (their docs): the
        // resource outlives a collect of every frame, this allocator's
        // figures do not change, and its device is not asked to destroy it.
        let buffer = vk::Buffer::from_raw(device.create_resource());
        let image = vk::Image::from_raw(device.create_resource());
        // SAFETY: the resources are this device's, destroyed by nothing
        // else but the calls below once these are refused.
        let queued = unsafe {
            allocator.destroy_buffer_after_frame(buffer, other.allocate(request).unwrap())
        };
        assert_eq!(queued.err(), foreign);
        // SAFETY: as above.
        let queued =
            unsafe { allocator.destroy_image_after_frame(image, other.allocate(request).unwrap()) };
        assert_eq!(queued.err(), foreign);
        // SAFETY: nothing was submitted.
        assert_eq!(unsafe { allocator.collect_idle() }.frees, 0);
        assert_eq!(device.live_resources(), 2, "{:?}", request.desc);
        device.destroy_resource(buffer.as_raw());
        device.destroy_resource(image.as_raw());
        assert_eq!(allocator.stats(), before, "{:?}", request.desc);
        free(&other, theirs);
    }
    let mine = allocator.allocate(&buffer(1000, 1, Usage::UPLOAD)).unwrap();
    free(&allocator, mine);
    finish(allocator, &device);
    drop(other);
    // The consumed handles were freed by the other allocator's drop.
    assert!(other_device.violations().is_empty());
}
