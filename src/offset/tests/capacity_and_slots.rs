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
    assert_eq!(
        heap.reserve_slots(u32::MAX - 2),
        Err(OffsetError::TooManySlots {
            requested: limit + 1,
            max: limit
        })
    );
    assert_eq!(heap.slot_count(), 1);
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

/// What the docs give `metadata_bytes` as for `M` mantissa bits and
/// `slots` slots: 32 bytes per slot and the sentinel (README, "Metadata:
/// 32 bytes per allocation slot"), a bin table of `12 << (M + 6)` bytes
/// (`OffsetAllocator`'s docs: a `u32` head and a `u64` bound for each of
/// its `64 << M` bins) and the struct.
fn documented_metadata_bytes<const M: u32>(slots: u32) -> usize {
    32 * (slots as usize + 1) + (12 << (M + 6)) + std::mem::size_of::<OffsetAllocator<M>>()
}

/// The figure of every mantissa width, not only `M = 3`'s: on creation
/// (no slots too), unchanged by allocations, frees and `grow`, and 32
/// bytes more per slot `reserve_slots` adds (exactly, not a doubling of
/// the node table); a clone holds the same.
fn metadata_bytes_as_documented<const M: u32>() {
    assert_eq!(
        OffsetAllocator::<M>::new(1 << 20, 0)
            .unwrap()
            .metadata_bytes(),
        documented_metadata_bytes::<M>(0),
        "M = {M}, no slots"
    );
    let mut heap = OffsetAllocator::<M>::new(1 << 20, 10).unwrap();
    assert_eq!(heap.metadata_bytes(), documented_metadata_bytes::<M>(10));
    let ids: Vec<_> = (0..10)
        .map(|_| heap.allocate(100, 16).unwrap().id)
        .collect();
    heap.grow(1 << 10).unwrap();
    heap.free(ids[3]).unwrap();
    assert_eq!(
        heap.metadata_bytes(),
        documented_metadata_bytes::<M>(10),
        "M = {M}"
    );
    for (added, total) in [(1, 11), (5, 16), (0, 16), (17, 33)] {
        heap.reserve_slots(added).unwrap();
        assert_eq!(
            heap.metadata_bytes(),
            documented_metadata_bytes::<M>(total),
            "M = {M}, {total} slots"
        );
    }
    assert_eq!(heap.clone().metadata_bytes(), heap.metadata_bytes());
}

#[test]
fn metadata_bytes_is_the_documented_figure_for_every_mantissa_width() {
    metadata_bytes_as_documented::<2>();
    metadata_bytes_as_documented::<3>();
    metadata_bytes_as_documented::<4>();
    metadata_bytes_as_documented::<5>();
    metadata_bytes_as_documented::<6>();
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

/// What the module's and [`OffsetAllocator::new`]'s docs promise: all
/// metadata is allocated at construction, and no call after it touches the
/// heap but [`reserve_slots`](OffsetAllocator::reserve_slots): allocations
/// and frees with every strategy, the placement probes, `grow`, the
/// queries and iterators, their failures, and the linear allocator's
/// allocations, frames and reclaims. Counted in calls to the unit tests'
/// global allocator (`host_memory_cap`), so that a temporary freed again
/// counts too.
#[cfg(thread_counts)]
#[test]
fn no_call_after_construction_touches_the_heap() {
    use crate::host_memory_cap::thread_allocations;

    let mut heap = OffsetAllocator::<3>::new(1 << 20, 64).unwrap();
    let mut ring = LinearAllocator::new(1 << 16, 4).unwrap();
    let before = thread_allocations();
    let mut live = [None; 48];
    let mut seed = 0x5eed_u64;
    let strategies = [
        Strategy::MinTime,
        Strategy::MinMemory,
        Strategy::MinOffset,
        Strategy::MaxOffset,
    ];
    // Fewer under Miri, which runs the core's tests too (`.ci/run`).
    let rounds = if cfg!(miri) { 200 } else { 2000 };
    for round in 0..rounds {
        let draw = super::next(&mut seed);
        let index = (draw % live.len() as u64) as usize;
        match live[index].take() {
            Some(id) => {
                heap.free(id).unwrap();
            }
            None => {
                let size = 1 + (draw >> 8) % 40_000;
                let align = 1 << ((draw >> 24) % 10);
                let strategy = strategies[round % strategies.len()];
                live[index] = heap.allocate_with(size, align, strategy).ok().map(|a| a.id);
            }
        }
        // The probes, refused or placed, then freed again.
        let after = live.iter().flatten().next().copied();
        if let Ok(Some(placed)) = heap.allocate_in_gap(after, 64, 16) {
            heap.free(placed.id).unwrap();
        }
        if let Ok(Some(placed)) = heap.allocate_below(256, 64, 1 << 19) {
            heap.free(placed.id).unwrap();
        }
        // Failures: bad arguments, too large, a stale id.
        assert!(heap.allocate(0, 1).is_err() && heap.allocate(8, 3).is_err());
        assert!(heap.allocate(2 << 20, 1).is_err());
        // The queries and iterators.
        let report = heap.storage_report();
        assert!(report.largest_free_range <= report.free_bytes);
        assert!(heap.allocations().count() <= live.len());
        assert_eq!(heap.free_ranges().count() as u64, report.free_ranges);
        let _ = (
            heap.free_ranges_after().count(),
            heap.allocation_at(draw % (1 << 20)),
        );
        let _ = (heap.counters(), heap.search_stats(), heap.metadata_bytes());
        // A frame of the ring, reclaimed two frames later.
        let _ = ring.allocate(1 + draw % 4096, 1 << (draw % 8));
        if round % 7 == 0 {
            let frame = ring.finish_frame().unwrap_or(0);
            ring.reclaim_through(frame.saturating_sub(2));
        }
    }
    heap.grow(1 << 20).unwrap();
    assert!(heap.grow(u64::MAX).is_err());
    for id in live.into_iter().flatten() {
        heap.free(id).unwrap();
        assert!(heap.free(id).is_err());
    }
    assert_eq!(thread_allocations(), before, "a call allocated");
    // `reserve_slots` is the one call that does.
    heap.reserve_slots(64).unwrap();
    assert!(thread_allocations() > before);
}
