//! The read-only queries over live allocations: `allocation_at` finds the
//! allocation covering an offset, `gaps_around` reads the free bytes on
//! either side of one (what defragmentation weighs a move by), and the
//! byte counters saturate instead of overflowing. They are apart because
//! they check what the allocator reports, not how it allocates.

use super::super::*;

#[test]
fn allocation_at_finds_the_covering_allocation() {
    let mut heap = OffsetAllocator::<3>::new(1000, 4).unwrap();
    let a = heap.allocate(100, 1).unwrap();
    let b = heap.allocate(100, 256).unwrap();
    assert_eq!(heap.allocation_at(99), Some(a));
    assert_eq!(heap.allocation_at(100), None);
    assert_eq!(heap.allocation_at(256), Some(b));
    assert_eq!(heap.allocation_at(355), Some(b));
    assert_eq!(heap.allocation_at(356), None);
}

/// `gaps_around` gives the free bytes right before and right after a live
/// allocation (what defragmentation weighs a move by), the range at offset 0
/// and the one up to the capacity included, and nothing for a freed id.
#[test]
fn gaps_around_reads_the_free_bytes_on_either_side() {
    let mut heap = OffsetAllocator::<3>::new(1000, 4).unwrap();
    let a = heap.allocate(100, 1).unwrap();
    let b = heap.allocate(50, 1).unwrap();
    let c = heap.allocate(200, 1).unwrap();
    let d = heap.allocate(30, 1).unwrap();
    assert_eq!(heap.gaps_around(c.id), Some((0, 0)));
    assert_eq!(heap.gaps_around(d.id), Some((0, 620)));
    heap.free(b.id).unwrap();
    heap.free(d.id).unwrap();
    assert_eq!(heap.gaps_around(a.id), Some((0, 50)));
    assert_eq!(heap.gaps_around(c.id), Some((50, 650)));
    heap.free(a.id).unwrap();
    assert_eq!(heap.gaps_around(c.id), Some((150, 650)));
    assert_eq!(heap.gaps_around(a.id), None);
}

#[test]
fn byte_counters_saturate_instead_of_overflowing() {
    // 2^16 + 1 allocations of 2^48 - 1 bytes request more than 2^64 bytes.
    let mut heap = OffsetAllocator::<3>::new(MAX_CAPACITY, 1).unwrap();
    let rounds = if cfg!(miri) { 4 } else { (1 << 16) + 1 };
    for _ in 0..rounds {
        let whole = heap.allocate(MAX_CAPACITY, 1).unwrap();
        heap.free(whole.id).unwrap();
    }
    let counters = heap.counters();
    assert_eq!(counters.allocations, rounds);
    if !cfg!(miri) {
        assert_eq!(counters.requested_bytes, u64::MAX);
    }
    assert_eq!(counters.live_bytes, 0);
}

/// Both byte counters the docs call saturating saturate, under Miri too
/// (where the test above stops short of 2^64 requested bytes): failed
/// requests of `u64::MAX` bytes (larger than the capacity, so counted as
/// failures) push `failed_bytes` past 2^64 in two calls, and
/// `requested_bytes` starts near the top, where 2^16 allocations of
/// `MAX_CAPACITY` bytes would leave it.
#[test]
fn failed_and_requested_bytes_saturate_in_a_few_calls() {
    let mut heap = OffsetAllocator::<3>::new(1000, 1).unwrap();
    for _ in 0..2 {
        assert_eq!(
            heap.allocate(u64::MAX, 1),
            Err(OffsetError::SizeExceedsCapacity {
                size: u64::MAX,
                capacity: 1000
            })
        );
    }
    assert_eq!(heap.counters().failed_allocations, 2);
    assert_eq!(heap.counters().failed_bytes, u64::MAX);

    heap.counters.requested_bytes = u64::MAX - 5;
    let a = heap.allocate(10, 1).unwrap();
    heap.free(a.id).unwrap();
    let counters = heap.counters();
    assert_eq!(counters.requested_bytes, u64::MAX);
    assert_eq!((counters.allocations, counters.live_bytes), (1, 0));
}
