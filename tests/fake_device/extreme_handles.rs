//! Handles and allocators at their extremes: an allocation listed twice
//! in one defragmentation plan, another allocator's and destroyed rings,
//! ring allocations and pools on every entry point, and the `offset`
//! module's public allocators at `MAX_CAPACITY`. Each gets a typed error
//! (or a correct result), no panic (these run in debug), and leaves the
//! allocator as it was.

use vk_suballoc::device::fake::FakeLayout;
use vk_suballoc::offset::{LinearAllocator, OffsetAllocator, OffsetError, MAX_CAPACITY, MAX_SLOTS};
use vk_suballoc::{
    AllocationDesc, DefragmentationLimits, Error, Movable, PoolDesc, Request, ResourceKind, Usage,
};

use super::{allocator, allocator_with, buffer, finish, free, requirements};

fn with_desc<'a>(size: u64, alignment: u64, desc: AllocationDesc<'a>) -> Request<'a> {
    Request::with_desc(requirements(size, alignment), ResourceKind::Buffer, desc)
}

/// The `offset` module's allocators at their extremes.
#[test]
fn offset_allocators_at_their_extremes() {
    let mut heap = OffsetAllocator::<3>::new(MAX_CAPACITY, 4).unwrap();
    assert!(matches!(
        heap.allocate(u64::MAX, 1),
        Err(OffsetError::SizeExceedsCapacity { .. })
    ));
    let a = heap.allocate(MAX_CAPACITY, 1 << 63).unwrap();
    assert_eq!(a.offset, 0);
    assert_eq!(
        heap.allocate(1, 1),
        Err(OffsetError::OutOfSpace { size: 1, free: 0 })
    );
    assert_eq!(heap.allocation_at(u64::MAX), None);
    assert_eq!(
        heap.allocation_at(MAX_CAPACITY - 1).map(|x| x.offset),
        Some(0)
    );
    assert_eq!(
        heap.grow(u64::MAX),
        Err(OffsetError::CapacityTooLarge {
            requested: u64::MAX,
            max: MAX_CAPACITY
        })
    );
    assert_eq!(
        heap.grow(1),
        Err(OffsetError::CapacityTooLarge {
            requested: MAX_CAPACITY + 1,
            max: MAX_CAPACITY
        })
    );
    assert_eq!(
        heap.reserve_slots(u32::MAX),
        Err(OffsetError::TooManySlots {
            requested: u64::from(u32::MAX) + 4,
            max: u64::from(MAX_SLOTS)
        })
    );
    heap.free(a.id).unwrap();
    assert_eq!(heap.free(a.id), Err(OffsetError::StaleId));
    assert_eq!(
        heap.allocate_below(1, 1 << 63, u64::MAX)
            .unwrap()
            .map(|x| x.offset),
        Some(0)
    );
    assert_eq!(heap.allocate_below(u64::MAX, 1, u64::MAX).unwrap(), None);
    assert_eq!(heap.allocate_below(1, 1, 0).unwrap(), None);
    assert_eq!(heap.allocate_in_gap(None, u64::MAX, 1 << 63).unwrap(), None);
    assert_eq!(
        heap.allocate_in_gap(None, MAX_CAPACITY, 1 << 63).unwrap(),
        None
    );
    // Offset 0 is taken: no free range precedes every allocation.
    assert_eq!(heap.allocate_in_gap(None, 1, 1 << 63), Ok(None));

    let mut empty = OffsetAllocator::<3>::new(0, 0).unwrap();
    assert_eq!(
        empty.allocate(1, 1),
        Err(OffsetError::SizeExceedsCapacity {
            size: 1,
            capacity: 0
        })
    );
    assert_eq!(empty.allocation_at(0), None);
    assert_eq!(
        empty.allocate_below(1, 1, u64::MAX),
        Err(OffsetError::OutOfSlots(0))
    );

    let mut ring = LinearAllocator::new(0, 0).unwrap();
    assert_eq!(
        ring.allocate(1, 1),
        Err(OffsetError::SizeExceedsCapacity {
            size: 1,
            capacity: 0
        })
    );
    assert_eq!(ring.finish_frame(), Ok(0));
    assert_eq!(
        ring.finish_frame(),
        Err(OffsetError::TooManyFramesInFlight(1))
    );
    assert_eq!(ring.reclaim_through(u64::MAX), 1);
    let mut ring = LinearAllocator::new(MAX_CAPACITY, 1).unwrap();
    assert_eq!(
        ring.allocate(MAX_CAPACITY, 1 << 63).map(|a| a.offset),
        Ok(0)
    );
    assert_eq!(
        ring.allocate(1, 1 << 63),
        Err(OffsetError::OutOfSpace { size: 1, free: 0 })
    );
    ring.finish_frame().unwrap();
    ring.reclaim_through(u64::MAX);
    assert_eq!(ring.allocate(1, 1 << 63).map(|a| a.offset), Ok(0));
    // The next 2^63-aligned offset is past the end: enough bytes free,
    // no piece that holds the aligned byte.
    assert_eq!(
        ring.allocate(1, 1 << 63).map(|a| a.offset),
        Err(OffsetError::TooFragmented {
            size: 1,
            align: 1 << 63,
            free: MAX_CAPACITY - 1
        })
    );
}

/// An allocation listed twice in one plan gets one move at most, whether
/// its block is emptied or compacted.
#[test]
fn a_movable_listed_twice_moves_once() {
    let r = super::requirements(1 << 20, 256);
    let request = buffer(1 << 20, 256, Usage::DEVICE_LOCAL);
    for compact in [false, true] {
        let (allocator, device) = allocator_with(FakeLayout::discrete(), super::without_runs());
        // Block A: a hole, then `low`, then free bytes (or, to empty a
        // block, a filler up to its end and `high` in block B).
        let hole = allocator.allocate(&request).unwrap();
        let low = allocator.allocate(&request).unwrap();
        let mut others = Vec::new();
        let listed = if compact {
            low
        } else {
            others.push(low);
            others.push(
                allocator
                    .allocate(&buffer(30 << 20, 256, Usage::DEVICE_LOCAL))
                    .unwrap(),
            );
            allocator.allocate(&request).unwrap()
        };
        free(&allocator, hole);
        let movables = [
            Movable::new(&listed, r, ResourceKind::Buffer),
            Movable::new(&listed, r, ResourceKind::Buffer),
        ];
        let limits = DefragmentationLimits::default()
            .max_used_percent(100)
            .compact_blocks(compact);
        let plan = allocator.plan_defragmentation(&movables, &limits).unwrap();
        assert_eq!(plan.moves.len(), 1, "compact {compact}: {:?}", plan.moves);
        for planned in plan.moves {
            assert_ne!(
                (planned.destination.memory(), planned.destination.offset()),
                (listed.memory(), listed.offset())
            );
            allocator.give_up_move(planned).unwrap();
        }
        // SAFETY: nothing was submitted.
        unsafe { allocator.collect_idle() };
        for a in others.into_iter().chain([listed]) {
            free(&allocator, a);
        }
        finish(allocator, &device);
    }
}

/// Another allocator's upload ring, ring allocation and pool, whose keys
/// (each allocator's first) name a live ring and pool of this allocator
/// too, and this allocator's destroyed ring and pool: refused on every
/// entry point, the exclusive ones included, and nothing changes (no byte
/// of this allocator's ring is written).
#[test]
fn foreign_and_destroyed_ring_and_pool_handles_are_refused() {
    use vk_suballoc::UploadRingDesc;

    let (mut mine, device) = allocator(FakeLayout::discrete());
    let (theirs, their_device) = allocator(FakeLayout::discrete());
    let desc = UploadRingDesc {
        size: 4096,
        ..UploadRingDesc::default()
    };
    let my_ring = mine.create_upload_ring(&desc).unwrap();
    let my_bytes = mine.ring_allocate(my_ring, 64, 1).unwrap();
    let my_pool = mine.create_pool(&PoolDesc::new(1)).unwrap();
    let their_ring = theirs.create_upload_ring(&desc).unwrap();
    let their_bytes = theirs.ring_allocate(their_ring, 64, 1).unwrap();
    let their_pool = theirs.create_pool(&PoolDesc::new(1)).unwrap();
    let my_ptr = my_bytes.mapped_ptr().unwrap().as_ptr();
    // SAFETY: the ring allocation's 64 bytes are mapped and not collected.
    let my_view = || unsafe { std::slice::from_raw_parts(my_ptr, 64) }.to_vec();
    let before = (mine.stats(), my_view());

    assert_eq!(
        mine.ring_write(&their_bytes, 0, &[7; 64]),
        Err(Error::ForeignAllocation)
    );
    assert_eq!(
        mine.ring_allocate(their_ring, 64, 1).map(|a| a.size()),
        Err(Error::ForeignAllocation)
    );
    assert_eq!(
        mine.destroy_upload_ring(their_ring),
        Err(Error::ForeignAllocation)
    );
    let in_pool = |pool| with_desc(64, 1, AllocationDesc::new(Usage::DEVICE_LOCAL).pool(pool));
    assert_eq!(
        mine.allocate(&in_pool(their_pool)).map(|a| a.size()),
        Err(Error::ForeignPool)
    );
    assert_eq!(
        mine.allocate_mut(&in_pool(their_pool)).map(|a| a.size()),
        Err(Error::ForeignPool)
    );
    assert_eq!(
        mine.pool_stats(&their_pool).map(|s| s.blocks),
        Err(Error::ForeignPool)
    );
    assert_eq!(mine.destroy_pool(their_pool), Err(Error::ForeignPool));
    assert_eq!((mine.stats(), my_view()), before);

    // Destroyed: stale on every entry point.
    mine.destroy_upload_ring(my_ring).unwrap();
    mine.destroy_pool(my_pool).unwrap();
    assert_eq!(
        mine.ring_write(&my_bytes, 0, &[7; 64]),
        Err(Error::StaleAllocation)
    );
    assert_eq!(
        mine.ring_allocate(my_ring, 64, 1).map(|a| a.size()),
        Err(Error::StaleAllocation)
    );
    assert_eq!(
        mine.destroy_upload_ring(my_ring),
        Err(Error::StaleAllocation)
    );
    assert_eq!(
        mine.allocate(&in_pool(my_pool)).map(|a| a.size()),
        Err(Error::StalePool)
    );
    assert_eq!(
        mine.allocate_mut(&in_pool(my_pool)).map(|a| a.size()),
        Err(Error::StalePool)
    );
    assert_eq!(
        mine.pool_stats(&my_pool).map(|s| s.blocks),
        Err(Error::StalePool)
    );
    assert_eq!(mine.destroy_pool(my_pool), Err(Error::StalePool));
    // A new ring and pool in the same slots: the old handles stay stale.
    let next_ring = mine.create_upload_ring(&desc).unwrap();
    let next_pool = mine.create_pool(&PoolDesc::new(1)).unwrap();
    assert_eq!(
        mine.ring_write(&my_bytes, 0, &[7; 64]),
        Err(Error::StaleAllocation)
    );
    assert_eq!(
        mine.destroy_upload_ring(my_ring),
        Err(Error::StaleAllocation)
    );
    assert_eq!(
        mine.allocate_mut(&in_pool(my_pool)).map(|a| a.size()),
        Err(Error::StalePool)
    );
    assert_eq!(mine.destroy_pool(my_pool), Err(Error::StalePool));
    mine.destroy_upload_ring(next_ring).unwrap();
    mine.destroy_pool(next_pool).unwrap();
    theirs.destroy_upload_ring(their_ring).unwrap();
    theirs.destroy_pool(their_pool).unwrap();
    finish(mine, &device);
    finish(theirs, &their_device);
}
