//! Unit tests of the offset allocator that need its internals; the property
//! tests against a shadow model live in `tests/offset_model.rs`.

use super::*;

#[test]
fn offset_allocator_324_unit_regression() {
    // OffsetAllocator's round-up rule: after 255 of 324 units, 69 are free in
    // bin 32 (64..72) and a request of 67 looked only from bin 33 upwards.
    let mut heap = OffsetAllocator::<3>::new(256 + 68, 16).unwrap();
    let a = heap.allocate(255, 1).unwrap();
    assert_eq!(a.offset, 0);
    let b = heap.allocate(67, 1).unwrap();
    assert_eq!(b.offset, 255);
    assert_eq!(heap.free_bytes(), 2);
    // Found by the boundary search, in the one gap of bin 64..72.
    assert_eq!(
        heap.search_stats(),
        SearchStats {
            boundary_searches: 1,
            gaps_visited: 1
        }
    );
}

/// A boundary search that sees a whole bin without success makes the bin's
/// bound exact: the same failing request again looks at no gap, until a
/// larger gap enters the bin.
#[test]
fn a_repeated_failing_request_visits_no_gap_again() {
    let mut heap = OffsetAllocator::<3>::new(1 << 20, 64).unwrap();
    // Gaps of 65, 66, 67 and 71 bytes (all in bin 64..72), separated by
    // live bytes, the rest of the capacity held.
    let mut gaps = Vec::new();
    for size in [65, 66, 67, 71] {
        heap.allocate(1, 1).unwrap();
        gaps.push(heap.allocate(size, 1).unwrap());
    }
    heap.allocate(heap.free_bytes(), 1).unwrap();
    for gap in gaps {
        heap.free(gap.id).unwrap();
    }
    let visited = |heap: &OffsetAllocator<3>| heap.search_stats().gaps_visited;
    // 71 bytes: only the boundary bin can hold them; its head is the 71.
    let before = visited(&heap);
    let taken = heap.allocate(71, 1).unwrap();
    assert_eq!(visited(&heap), before + 1);
    // The bin's bound still says 71: a request of 70 walks its three gaps,
    // fails, and makes the bound exact (67).
    assert!(heap.allocate(70, 1).is_err());
    assert_eq!(visited(&heap), before + 4);
    let searches = heap.search_stats().boundary_searches;
    assert!(heap.allocate(70, 1).is_err());
    assert!(heap.allocate(68, 1).is_err());
    assert_eq!(visited(&heap), before + 4);
    assert_eq!(heap.search_stats().boundary_searches, searches + 2);
    // The 71-byte gap comes back: the next search finds it.
    let offset = taken.offset;
    heap.free(taken.id).unwrap();
    assert_eq!(heap.allocate(70, 1).unwrap().offset, offset);
}

#[test]
fn head_slack_of_aligned_placement_stays_free() {
    let mut heap = OffsetAllocator::<3>::new(4096, 16).unwrap();
    let small = heap.allocate(10, 1).unwrap();
    let aligned = heap.allocate(100, 1024).unwrap();
    assert_eq!(aligned.offset, 1024);
    // The 1014 bytes between them are a free range, not lost padding.
    let ranges: Vec<_> = heap.free_ranges().collect();
    assert_eq!(
        ranges,
        vec![
            FreeRange {
                offset: 10,
                size: 1014
            },
            FreeRange {
                offset: 1124,
                size: 4096 - 1124
            }
        ]
    );
    // Both exact-size requests succeed: every free byte is usable.
    let tail = heap.allocate(4096 - 1124, 1).unwrap();
    let filler = heap.allocate(1014, 1).unwrap();
    assert_eq!((tail.offset, filler.offset), (1124, 10));
    assert_eq!(heap.free_bytes(), 0);
    assert_eq!(heap.free_ranges().count(), 0);
    heap.free(tail.id).unwrap();
    for id in [small.id, aligned.id, filler.id] {
        heap.free(id).unwrap();
    }
    let report = heap.storage_report();
    assert_eq!(report.free_ranges, 1);
    assert_eq!(report.largest_free_range, 4096);
}

#[test]
fn stale_double_and_foreign_frees_change_nothing() {
    let mut heap = OffsetAllocator::<3>::new(1000, 4).unwrap();
    let mut other = OffsetAllocator::<3>::new(1000, 4).unwrap();
    let a = heap.allocate(100, 1).unwrap();
    let foreign = other.allocate(100, 1).unwrap();
    assert_eq!(heap.free(foreign.id), Err(OffsetError::ForeignId));
    heap.free(a.id).unwrap();
    assert_eq!(heap.free(a.id), Err(OffsetError::StaleId));
    // The slot is reused; the old id still fails and the new one works.
    let b = heap.allocate(50, 1).unwrap();
    assert_eq!(b.id.slot(), a.id.slot());
    assert_eq!(heap.free(a.id), Err(OffsetError::StaleId));
    assert_eq!(heap.get(b.id).map(|x| x.size), Some(50));
    heap.free(b.id).unwrap();
    assert!(heap.is_empty());
    assert_eq!(heap.storage_report().largest_free_range, 1000);
}

/// Live allocations never share a slot: the Vulkan pools key an
/// allocation's name and resource kind by [`AllocationId::slot`]. Slots are
/// `1..=slot_count` (0 is the sentinel).
#[test]
fn live_allocations_have_distinct_slots() {
    let mut heap = OffsetAllocator::<3>::new(1000, 6).unwrap();
    let mut live: Vec<_> = (0..6).map(|_| heap.allocate(10, 1).unwrap()).collect();
    let slots = |live: &[OffsetAllocation]| {
        let mut slots: Vec<u32> = live.iter().map(|a| a.id.slot()).collect();
        slots.sort_unstable();
        slots
    };
    assert_eq!(slots(&live), (1..=6).collect::<Vec<_>>());
    // Freed slots are taken again, next to reserved ones, by new
    // allocations only.
    for freed in live.drain(1..4) {
        heap.free(freed.id).unwrap();
    }
    heap.reserve_slots(2).unwrap();
    live.extend((0..5).map(|_| heap.allocate(10, 1).unwrap()));
    assert_eq!(slots(&live), (1..=8).collect::<Vec<_>>());
    for allocation in &live {
        assert_eq!(heap.get(allocation.id), Some(*allocation));
    }
}

#[test]
fn bad_requests_are_typed_errors() {
    let mut heap = OffsetAllocator::<3>::new(1000, 1).unwrap();
    assert_eq!(heap.allocate(0, 1), Err(OffsetError::ZeroSize));
    assert_eq!(
        heap.allocate(8, 48),
        Err(OffsetError::AlignmentNotPowerOfTwo(48))
    );
    assert_eq!(
        heap.allocate(1001, 1),
        Err(OffsetError::SizeExceedsCapacity {
            size: 1001,
            capacity: 1000
        })
    );
    heap.allocate(1, 1).unwrap();
    assert_eq!(heap.allocate(1, 1), Err(OffsetError::OutOfSlots(1)));
    heap.reserve_slots(1).unwrap();
    heap.allocate(1, 1).unwrap();
    assert!(OffsetAllocator::<3>::new(MAX_CAPACITY + 1, 1).is_err());
}

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

/// A small xorshift so this test needs no crate; the property tests use proptest.
fn next(state: &mut u64) -> u64 {
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    *state
}

fn random_model_run<const M: u32>(seed: u64) {
    let capacity = 1 << 16;
    let mut heap = OffsetAllocator::<M>::new(capacity, 512).unwrap();
    let mut live: Vec<OffsetAllocation> = Vec::new();
    let mut state = seed;
    // Miri interprets every step: fewer of them there, same coverage of paths.
    let steps = if cfg!(miri) { 150 } else { 4000 };
    for step in 0..steps {
        let r = next(&mut state);
        if r % 3 != 0 || live.is_empty() {
            let size = 1 + next(&mut state) % 3000;
            let align = 1 << (next(&mut state) % 11);
            match heap.allocate(size, align) {
                Ok(a) => {
                    assert_eq!(a.offset % align, 0);
                    assert!(a.end() <= capacity);
                    for b in &live {
                        assert!(a.end() <= b.offset || b.end() <= a.offset, "overlap");
                    }
                    live.push(a);
                }
                Err(e) => {
                    // No free range could have held it.
                    for range in heap.free_ranges() {
                        let start = range.offset.next_multiple_of(align);
                        assert!(
                            start + size > range.offset + range.size,
                            "seed {seed} step {step}: false {e:?} for {size}@{align} in {range:?}"
                        );
                    }
                }
            }
        } else {
            let victim = live.swap_remove((r as usize / 3) % live.len());
            heap.free(victim.id).unwrap();
        }
        let report = heap.storage_report();
        let used: u64 = live.iter().map(|a| a.size).sum();
        assert_eq!(report.free_bytes, capacity - used);
        let free: Vec<_> = heap.free_ranges().collect();
        assert_eq!(report.free_ranges, free.len() as u64);
        assert_eq!(
            report.largest_free_range,
            free.iter().map(|f| f.size).max().unwrap_or(0)
        );
    }
    for a in live {
        heap.free(a.id).unwrap();
    }
    assert_eq!(
        heap.free_ranges().collect::<Vec<_>>(),
        vec![FreeRange {
            offset: 0,
            size: capacity
        }]
    );
}

#[test]
fn random_runs_match_a_model() {
    let seeds = if cfg!(miri) { 1..2 } else { 1..6 };
    for seed in seeds {
        println!("seed {seed}");
        random_model_run::<2>(seed);
        random_model_run::<3>(seed);
        random_model_run::<4>(seed);
        random_model_run::<6>(seed);
    }
}

/// An aligned request whose size's bins hold only gaps that alignment
/// shifts it out of takes the first bin whose every gap holds it wherever
/// that gap starts (`size + align - 1` rounded up), not a larger one: the
/// smallest fit the O(1) search can promise.
#[test]
fn an_aligned_request_takes_the_first_bin_that_holds_it_anywhere() {
    let mut heap = OffsetAllocator::<3>::new(1 << 20, 16).unwrap();
    // Live separators around three gaps: 900 bytes at 1, 1024 at 1025 and
    // 4096 at 2050 (bins 896.., 1024.. and 4096..), then the tail.
    let mut gaps = Vec::new();
    for (separator, gap) in [(1, 900), (124, 1024), (1, 4096)] {
        heap.allocate(separator, 1).unwrap();
        gaps.push(heap.allocate(gap, 1).unwrap());
    }
    heap.allocate(1, 1).unwrap();
    assert_eq!(
        gaps.iter().map(|g| (g.offset, g.size)).collect::<Vec<_>>(),
        [(1, 900), (1025, 1024), (2050, 4096)]
    );
    for gap in gaps {
        heap.free(gap.id).unwrap();
    }
    // 769 at 256: the 900-byte gap cannot hold it (its first 256-aligned
    // offset is 256); 769 + 255 = 1024 is a bin bound, so the 1024-byte gap
    // holds it wherever it starts, here at 1280 exactly to its end.
    let placed = heap.allocate(769, 256).unwrap();
    assert_eq!(placed.offset, 1280);
    // And in O(1): no gap-by-gap search.
    assert_eq!(heap.search_stats(), SearchStats::default());
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

/// The exact result of each adversarial argument tried on the core's public
/// API, pinned so that no later change turns one into a panic, a wrapped
/// value or another error.
fn adversarial_arguments_get_these_errors<const M: u32>() {
    const TOP: u64 = 1 << 63;
    let max = MAX_CAPACITY;
    let too_large = |requested| OffsetError::CapacityTooLarge { requested, max };
    for (capacity, slots, expected) in [
        (max + 1, 1, Err(too_large(max + 1))),
        (u64::MAX, 1, Err(too_large(u64::MAX))),
        (
            0,
            MAX_SLOTS + 1,
            Err(OffsetError::TooManySlots {
                requested: u64::from(MAX_SLOTS) + 1,
                max: u64::from(MAX_SLOTS),
            }),
        ),
        (0, 0, Ok(0)),
        (max, 0, Ok(max)),
    ] {
        assert_eq!(
            OffsetAllocator::<M>::new(capacity, slots).map(|h| h.capacity()),
            expected
        );
    }

    let mut heap = OffsetAllocator::<M>::new(max, 2).unwrap();
    let exceeds = |size| OffsetError::SizeExceedsCapacity {
        size,
        capacity: max,
    };
    for (size, align, expected) in [
        (0, 1, Err(OffsetError::ZeroSize)),
        (0, 3, Err(OffsetError::ZeroSize)),
        (1, 0, Err(OffsetError::AlignmentNotPowerOfTwo(0))),
        (1, 3, Err(OffsetError::AlignmentNotPowerOfTwo(3))),
        (
            1,
            TOP + 1,
            Err(OffsetError::AlignmentNotPowerOfTwo(TOP + 1)),
        ),
        (
            1,
            u64::MAX,
            Err(OffsetError::AlignmentNotPowerOfTwo(u64::MAX)),
        ),
        (max + 1, 1, Err(exceeds(max + 1))),
        (u64::MAX, 1, Err(exceeds(u64::MAX))),
        (u64::MAX, TOP, Err(exceeds(u64::MAX))),
        (1, TOP, Ok(0)),
        (
            1,
            TOP,
            Err(OffsetError::TooFragmented {
                size: 1,
                align: TOP,
                free: max - 1,
            }),
        ),
        (
            max,
            1,
            Err(OffsetError::OutOfSpace {
                size: max,
                free: max - 1,
            }),
        ),
        // 2^48 - 2 bytes fit only at offset 1, no multiple of 2^47.
        (
            max - 1,
            1 << 47,
            Err(OffsetError::TooFragmented {
                size: max - 1,
                align: 1 << 47,
                free: max - 1,
            }),
        ),
    ] {
        assert_eq!(
            heap.allocate(size, align).map(|a| a.offset),
            expected,
            "M={M} size {size} align {align}"
        );
    }
    let last = heap.allocate(max - 1, 1).unwrap();
    assert_eq!(heap.allocate(1, 1), Err(OffsetError::OutOfSlots(2)));
    assert_eq!(heap.allocation_at(u64::MAX), None);
    assert_eq!(heap.allocation_at(max), None);
    assert_eq!(heap.allocation_at(max - 1).map(|a| a.id), Some(last.id));
    for extra in [1, u64::MAX, max] {
        assert_eq!(heap.grow(extra), Err(too_large(max.saturating_add(extra))));
    }
    assert_eq!(heap.grow(0), Ok(()));
    assert_eq!(
        heap.reserve_slots(u32::MAX),
        Err(OffsetError::TooManySlots {
            requested: u64::from(u32::MAX) + 2,
            max: u64::from(MAX_SLOTS),
        })
    );
    assert_eq!(heap.reserve_slots(0), Ok(()));
    assert_eq!(heap.slot_count(), 2);
    assert_eq!(heap.free_bytes(), 0);
}

#[test]
fn adversarial_arguments_get_these_errors_for_every_width() {
    adversarial_arguments_get_these_errors::<2>();
    adversarial_arguments_get_these_errors::<3>();
    adversarial_arguments_get_these_errors::<6>();
}

/// As above, for the ring.
#[test]
fn adversarial_ring_arguments_get_these_errors() {
    const TOP: u64 = 1 << 63;
    assert_eq!(
        LinearAllocator::new(u64::MAX, 1).map(|r| r.capacity()),
        Err(OffsetError::CapacityTooLarge {
            requested: u64::MAX,
            max: MAX_CAPACITY
        })
    );
    assert_eq!(LinearAllocator::new(0, 0).map(|r| r.capacity()), Ok(0));
    let mut empty = LinearAllocator::new(0, 0).unwrap();
    assert_eq!(
        empty.allocate(1, 1),
        Err(OffsetError::SizeExceedsCapacity {
            size: 1,
            capacity: 0
        })
    );
    // 0 frames in flight counts as 1.
    assert_eq!(empty.finish_frame(), Ok(0));
    assert_eq!(
        empty.finish_frame(),
        Err(OffsetError::TooManyFramesInFlight(1))
    );

    let mut ring = LinearAllocator::new(MAX_CAPACITY, 2).unwrap();
    for (size, align, expected) in [
        (0, 1, Err(OffsetError::ZeroSize)),
        (1, 0, Err(OffsetError::AlignmentNotPowerOfTwo(0))),
        (
            1,
            u64::MAX,
            Err(OffsetError::AlignmentNotPowerOfTwo(u64::MAX)),
        ),
        (
            u64::MAX,
            TOP,
            Err(OffsetError::SizeExceedsCapacity {
                size: u64::MAX,
                capacity: MAX_CAPACITY,
            }),
        ),
        (1, TOP, Ok(0)),
        (
            1,
            TOP,
            Err(OffsetError::TooFragmented {
                size: 1,
                align: TOP,
                free: MAX_CAPACITY - 1,
            }),
        ),
        (MAX_CAPACITY - 1, 1, Ok(1)),
        (1, 1, Err(OffsetError::OutOfSpace { size: 1, free: 0 })),
    ] {
        assert_eq!(
            ring.allocate(size, align).map(|a| a.offset),
            expected,
            "size {size} align {align}"
        );
    }
    assert_eq!(ring.reclaim_through(u64::MAX), 0);
    let frame = ring.finish_frame().unwrap();
    assert_eq!(ring.reclaim_through(u64::MAX), 1);
    assert_eq!((frame, ring.used()), (0, 0));
    assert_eq!(ring.failed_allocations(), 3);
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

/// The packed calls the Vulkan pools use run on one clone, the public calls
/// on another, over random requests (failing ones included): every result,
/// report, counter and listing stays the same, so the pools see exactly the
/// public API's behaviour.
fn random_packed_run<const M: u32>(seed: u64) {
    let capacity = 1 << 12;
    let mut packed = OffsetAllocator::<M>::new(capacity, 8).unwrap();
    let mut public = packed.clone();
    let mut foreign = OffsetAllocator::<M>::new(64, 1).unwrap();
    let foreign_id = foreign.allocate(1, 1).unwrap().id;
    let mut live: Vec<AllocationId> = Vec::new();
    let mut freed: Vec<AllocationId> = Vec::new();
    let mut state = seed;
    let steps = if cfg!(miri) { 100 } else { 3000 };
    for step in 0..steps {
        let r = next(&mut state);
        match r % 8 {
            0..=3 => {
                let size = match next(&mut state) % 16 {
                    0 => 0,
                    1 => capacity + 1,
                    _ => 1 + next(&mut state) % 1500,
                };
                let align = match next(&mut state) % 16 {
                    0 => 3,
                    1 => 1 << 63,
                    a => 1 << (a % 10),
                };
                let a = packed.allocate_packed(size, align);
                let b = public.allocate(size, align);
                assert_eq!(
                    a.map(|a| (a.offset, packed.id_of(a))),
                    b.ok().map(|b| (b.offset, b.id)),
                    "seed {seed} step {step}: allocate({size}, {align})"
                );
                live.extend(b.ok().map(|b| b.id));
            }
            4 | 5 if !live.is_empty() => {
                let id = live.swap_remove((r as usize / 8) % live.len());
                let a = packed.free_packed(id).map(|merged| merged.get());
                assert_eq!(a, public.free(id).ok().map(|merged| merged.size));
                assert!(a.is_some(), "seed {seed} step {step}");
                freed.push(id);
            }
            6 => {
                let id = freed
                    .get((r as usize / 8) % freed.len().max(1))
                    .copied()
                    .unwrap_or(foreign_id);
                for id in [id, foreign_id] {
                    assert_eq!(packed.free_packed(id), None, "seed {seed} step {step}");
                    assert!(public.free(id).is_err());
                }
            }
            _ => {
                if r % 16 == 7 {
                    packed.reserve_slots(1).unwrap();
                    public.reserve_slots(1).unwrap();
                } else {
                    packed.grow(64).unwrap();
                    public.grow(64).unwrap();
                }
            }
        }
        assert_eq!(
            packed.counters(),
            public.counters(),
            "seed {seed} step {step}"
        );
        assert_eq!(packed.storage_report(), public.storage_report());
        assert_eq!(packed.search_stats(), public.search_stats());
        assert!(packed.allocations().eq(public.allocations()));
        assert!(packed.free_ranges().eq(public.free_ranges()));
        assert_eq!(
            packed.has_unused_slot(),
            u64::from(public.slot_count()) > public.counters().live_allocations
        );
    }
    // The run did reach the failure paths it compares.
    assert!(public.counters().failed_allocations > 0, "seed {seed}");
}

#[test]
fn packed_calls_match_the_public_ones_on_random_runs() {
    let seeds = if cfg!(miri) { 1..2 } else { 1..5 };
    for seed in seeds {
        println!("seed {seed}");
        random_packed_run::<2>(seed);
        random_packed_run::<3>(seed);
        random_packed_run::<6>(seed);
    }
}

/// A slot's generation wraps after 2^31 reuses (2^32 generations, odd while
/// live): across the wrap nothing panics, and every id issued before it
/// stays stale until its own generation comes round again.
#[test]
fn generations_wrap_around_without_accepting_a_stale_id() {
    let mut heap = OffsetAllocator::<3>::new(100, 1).unwrap();
    // Fast-forward the one slot to 2^32 - 4 reuses, as if freed that often.
    heap.nodes[1].set_generation(u32::MAX - 3);
    let mut ids = Vec::new();
    for _ in 0..4 {
        let a = heap.allocate(10, 1).unwrap();
        for &old in &ids {
            assert_eq!(heap.get(old), None);
            assert_eq!(heap.free(old), Err(OffsetError::StaleId));
        }
        heap.free(a.id).unwrap();
        assert_eq!(heap.free(a.id), Err(OffsetError::StaleId));
        ids.push(a.id);
    }
    let generations: Vec<u32> = ids.iter().map(|id| id.generation).collect();
    assert_eq!(generations, [u32::MAX - 2, u32::MAX, 1, 3]);
}
