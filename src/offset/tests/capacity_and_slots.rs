//! The capacity and the slot table, and their host memory: `grow` extends
//! the last free range, slot counts past `MAX_SLOTS` are refused,
//! `metadata_bytes` counts the nodes, the bin tables and the struct, and
//! metadata the host cannot allocate is a typed error that leaves the
//! allocator as it was. They are apart because they check what the
//! allocator is sized with, not what it hands out.

use super::super::*;

/// Slot counts past [`MAX_SLOTS`] (`u32::MAX - 2`: two ids are reserved)
/// are refused before any node table is allocated, and the error names the
/// limit.
#[test]
fn slot_counts_past_the_limit_are_refused() {
    let limit = u64::from(u32::MAX - 2);
    assert_eq!(
        OffsetAllocator::<3>::new(1000, u32::MAX - 1).map(|_| ()),
        Err(OffsetError::TooManySlots {
            requested: limit + 1,
            max: limit
        })
    );
    let mut heap = OffsetAllocator::<3>::new(1000, 1).unwrap();
    assert!(matches!(
        heap.reserve_slots(u32::MAX - 2),
        Err(OffsetError::TooManySlots { max, .. }) if max == limit
    ));
}

#[test]
fn grow_extends_the_last_free_range() {
    let mut heap = OffsetAllocator::<3>::new(100, 4).unwrap();
    let a = heap.allocate(60, 1).unwrap();
    heap.grow(100).unwrap();
    assert_eq!(heap.storage_report().largest_free_range, 140);
    let b = heap.allocate(140, 1).unwrap();
    assert_eq!(b.offset, 60);
    heap.free(a.id).unwrap();
    heap.free(b.id).unwrap();
    assert_eq!(heap.free_ranges().count(), 1);
    assert_eq!(heap.allocation_at(0), None);
}

/// `metadata_bytes` is the host memory figure users budget with, and its
/// docs give it: 32 bytes per slot plus the sentinel, 6 KiB of bin tables
/// for `M = 3` (a `u32` head and a `u64` bound per bin), and the struct
/// itself; `reserve_slots` adds 32 bytes per slot.
#[test]
fn metadata_bytes_counts_nodes_bin_tables_and_the_struct() {
    let fixed = 6 * 1024 + std::mem::size_of::<OffsetAllocator<3>>();
    let mut heap = OffsetAllocator::<3>::new(1 << 20, 10).unwrap();
    assert_eq!(heap.metadata_bytes(), 11 * 32 + fixed);
    heap.reserve_slots(5).unwrap();
    assert_eq!(heap.slot_count(), 15);
    assert_eq!(heap.metadata_bytes(), 16 * 32 + fixed);
}

/// Metadata the host cannot allocate is a typed error, not an abort, and
/// leaves the allocator as it was. `MAX_SLOTS` slots take 128 GiB and a
/// `u32::MAX`-frame table 64 GiB: above what the unit tests' global
/// allocator grants (`host_memory_cap`), whatever the machine.
#[test]
fn metadata_the_host_cannot_allocate_is_a_typed_error() {
    assert_eq!(
        OffsetAllocator::<3>::new(1 << 20, MAX_SLOTS).err(),
        Some(OffsetError::OutOfHostMemory)
    );
    assert_eq!(
        LinearAllocator::new(1 << 20, u32::MAX).err(),
        Some(OffsetError::OutOfHostMemory)
    );

    let mut heap = OffsetAllocator::<3>::new(1 << 20, 2).unwrap();
    let kept = heap.allocate(100, 1).unwrap();
    assert_eq!(
        heap.reserve_slots(MAX_SLOTS - 2),
        Err(OffsetError::OutOfHostMemory)
    );
    assert_eq!(heap.slot_count(), 2);
    let second = heap.allocate(200, 1).unwrap();
    assert_eq!(heap.allocate(1, 1), Err(OffsetError::OutOfSlots(2)));
    heap.free(kept.id).unwrap();
    heap.free(second.id).unwrap();
    assert_eq!(heap.free_bytes(), 1 << 20);
}
