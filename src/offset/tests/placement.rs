//! Where the offset allocator places a request: the bins' O(1) search and
//! its boundary search (the 324-unit regression of the C++ original's
//! round-up rule, a failing request that learns its bin's exact bound),
//! an aligned request taking the first bin that holds it wherever a gap
//! starts, and the head slack of an aligned placement kept free. They are
//! apart because they check the placement itself, reading its search
//! statistics and free ranges, rather than what a caller gets back.

use super::super::*;
use crate::offset::size_class::bin_down;

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
    // fails, and makes the bound exact (67). 198 bytes are free, in the
    // three gaps.
    assert_eq!(
        heap.allocate(70, 1),
        Err(OffsetError::TooFragmented {
            size: 70,
            align: 1,
            free: 198
        })
    );
    assert_eq!(visited(&heap), before + 4);
    let searches = heap.search_stats().boundary_searches;
    assert_eq!(
        heap.allocate(70, 1),
        Err(OffsetError::TooFragmented {
            size: 70,
            align: 1,
            free: 198
        })
    );
    assert_eq!(
        heap.allocate(68, 1),
        Err(OffsetError::TooFragmented {
            size: 68,
            align: 1,
            free: 198
        })
    );
    assert_eq!(visited(&heap), before + 4);
    assert_eq!(heap.search_stats().boundary_searches, searches + 2);
    // The 71-byte gap comes back: the next search finds it.
    let offset = taken.offset;
    heap.free(taken.id).unwrap();
    assert_eq!(heap.allocate(70, 1).unwrap().offset, offset);
}

/// A boundary search that finds its fit behind its bin's head has not seen
/// the whole bin: the bin's bound must stay an upper bound of the gaps
/// left, or a later request would skip a bin that holds it (a false
/// out-of-space).
#[test]
fn a_boundary_fit_behind_the_head_keeps_the_bins_bound() {
    // [64, 72) holds 66 (head), 71, 69, in that list order; nothing larger.
    let (mut heap, offsets) = heap_with_gaps(&[69, 71, 66], 1 << 12);
    let visited = heap.search_stats().gaps_visited;
    // 68: past the 66 at the head to the 71 behind it.
    assert_eq!(heap.allocate(68, 1).map(|a| a.offset), Ok(offsets[1]));
    assert_eq!(heap.search_stats().gaps_visited, visited + 2);
    // 69: the bin still says it may hold a gap that large; the 69 does.
    assert_eq!(heap.allocate(69, 1).map(|a| a.offset), Ok(offsets[0]));
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

/// `Strategy::MinTime`'s docs: "up to one class larger than the smallest
/// that fits" holds at alignment 1 only. When the alignment shifts the
/// request out of its class's first range, the good fit goes to the first
/// class whose ranges hold `size + align - 1` bytes, however large, past
/// a range of the request's own class that holds it; `MinMemory` finds
/// that one.
#[test]
fn an_aligned_good_fit_may_pass_a_range_of_its_own_class_that_holds_it() {
    let mut heap = OffsetAllocator::<3>::new(1 << 20, 16).unwrap();
    // Two 71-byte gaps in bin [64, 72): at 1, which cannot hold 64 bytes
    // at 64, and at 192, which can; the rest from 1000 free.
    let mut gaps = Vec::new();
    for (separator, gap) in [(1, 71), (120, 71)] {
        heap.allocate(separator, 1).unwrap();
        gaps.push(heap.allocate(gap, 1).unwrap());
    }
    heap.allocate(1000 - 263, 1).unwrap();
    assert_eq!(
        gaps.iter().map(|g| (g.offset, g.size)).collect::<Vec<_>>(),
        [(1, 71), (192, 71)]
    );
    // The gap at 1 heads its bin's list.
    for gap in gaps.iter().rev() {
        heap.free(gap.id).unwrap();
    }
    assert_eq!(
        offset_placed_by_a_clone(&heap, 64, 64, Strategy::MinTime),
        Ok(1024)
    );
    assert_eq!(
        offset_placed_by_a_clone(&heap, 64, 64, Strategy::MinMemory),
        Ok(192)
    );
}

/// What `allocate`'s docs promise of a failed request: the failure
/// counters count it, but only a space error searched the bins, so only
/// it counts a boundary search (one, whatever the bins hold); a request
/// larger than the capacity or without a free slot is refused before any
/// search, and zero sizes and bad alignments count nowhere.
#[test]
fn only_a_space_error_counts_a_boundary_search() {
    let mut heap = OffsetAllocator::<3>::new(1000, 1).unwrap();
    let failures = |heap: &OffsetAllocator<3>| heap.counters().failed_allocations;
    assert_eq!(heap.allocate(0, 1), Err(OffsetError::ZeroSize));
    assert_eq!(
        heap.allocate(8, 3),
        Err(OffsetError::AlignmentNotPowerOfTwo(3))
    );
    assert_eq!(
        heap.allocate(1001, 1),
        Err(OffsetError::SizeExceedsCapacity {
            size: 1001,
            capacity: 1000
        })
    );
    assert_eq!(failures(&heap), 1);
    assert_eq!(heap.search_stats(), SearchStats::default());

    let kept = heap.allocate(10, 1).unwrap();
    assert_eq!(heap.allocate(1, 1), Err(OffsetError::OutOfSlots(1)));
    assert_eq!(failures(&heap), 2);
    assert_eq!(heap.search_stats(), SearchStats::default());

    heap.reserve_slots(1).unwrap();
    // 990 bytes free, at 10: fewer than 995, and 990 of them from 16 on
    // pass the end.
    assert_eq!(
        heap.allocate(995, 1),
        Err(OffsetError::OutOfSpace {
            size: 995,
            free: 990
        })
    );
    assert_eq!(
        heap.allocate(990, 16),
        Err(OffsetError::TooFragmented {
            size: 990,
            align: 16,
            free: 990
        })
    );
    assert_eq!(failures(&heap), 4);
    assert_eq!(heap.search_stats().boundary_searches, 2);
    heap.free(kept.id).unwrap();
}

/// Holds `[0, capacity)` but for free gaps of the given sizes, in that
/// order in address and so in the reverse order in their bins' lists (a
/// gap freed last is its bin's head). Returns the heap and each gap's
/// offset.
fn heap_with_gaps(gaps: &[u64], capacity: u64) -> (OffsetAllocator<3>, Vec<u64>) {
    let mut heap = OffsetAllocator::<3>::new(capacity, 64).unwrap();
    let mut to_free = Vec::new();
    for &gap in gaps {
        let a = heap.allocate(gap, 1).unwrap();
        heap.allocate(8, 1).unwrap(); // a separator
        to_free.push(a);
    }
    let rest = heap.free_bytes();
    heap.allocate(rest, 1).unwrap();
    for a in &to_free {
        heap.free(a.id).unwrap();
    }
    (heap, to_free.iter().map(|a| a.offset).collect())
}

/// The offset at which a clone of `heap` places `size` bytes at `align`
/// with `strategy`, or its error; `heap` itself stays as it was.
fn offset_placed_by_a_clone(
    heap: &OffsetAllocator<3>,
    size: u64,
    align: u64,
    strategy: Strategy,
) -> Result<u64, OffsetError> {
    heap.clone()
        .allocate_with(size, align, strategy)
        .map(|a| a.offset)
}

/// `MinMemory` takes a gap of the bin the request rounds down to, which
/// the good fit passes over for the first bin whose every gap holds it;
/// at an alignment too, where the tight gap's aligned start must leave
/// room, else the good fit's choice is taken.
#[test]
fn min_memory_takes_the_tight_gap_the_good_fit_passes_over() {
    // 1000 in bin [960, 1024) at 0, 1100 in [1024, 1152) at 1008.
    let (heap, offsets) = heap_with_gaps(&[1000, 1100], 1 << 16);
    assert_eq!(offsets, [0, 1008]);
    assert_eq!(heap.clone().allocate(970, 1).unwrap().offset, 1008);
    assert_eq!(
        offset_placed_by_a_clone(&heap, 970, 1, Strategy::MinTime),
        Ok(1008)
    );
    let mut tight = heap.clone();
    assert_eq!(
        tight
            .allocate_with(970, 1, Strategy::MinMemory)
            .unwrap()
            .offset,
        0
    );
    // The rest of the tight gap stays free.
    assert!(tight.free_ranges().any(|r| r
        == FreeRange {
            offset: 970,
            size: 30
        }));
    assert_eq!(
        offset_placed_by_a_clone(&heap, 990, 64, Strategy::MinMemory),
        Ok(0)
    );

    // 1000 bytes at 24: aligned to 256, 980 bytes would end past it.
    let (heap, offsets) = heap_with_gaps(&[16, 1000, 4096], 1 << 16);
    assert_eq!(offsets, [0, 24, 1032]);
    assert_eq!(
        offset_placed_by_a_clone(&heap, 980, 256, Strategy::MinMemory),
        Ok(1280)
    );
    // 700 bytes do fit there: the tight gap, not the good fit's 4096.
    assert_eq!(
        offset_placed_by_a_clone(&heap, 700, 256, Strategy::MinMemory),
        Ok(256)
    );
}

/// `MinMemory` looks at 8 gaps of the boundary bin at most, head first,
/// so it stays O(1): a fitting gap behind 8 that do not is left for the
/// good fit's choice.
#[test]
fn min_memory_looks_at_eight_gaps_at_most() {
    // The 1020-byte gap is freed first, so it is last in its bin's list,
    // behind `small` gaps of 965 bytes (same bin, too small for 1000).
    for small in [7, 8] {
        let mut gaps = vec![1020];
        gaps.extend(std::iter::repeat(965).take(small));
        gaps.push(4096); // where the good fit goes
        let (mut heap, offsets) = heap_with_gaps(&gaps, 1 << 16);
        let searched = heap.search_stats();
        let placed = heap.allocate_with(1000, 1, Strategy::MinMemory).unwrap();
        let expected = if small < 8 {
            offsets[0]
        } else {
            offsets[small + 1]
        };
        assert_eq!(
            placed.offset, expected,
            "{small} gaps ahead of the tight one"
        );
        // The tight walk is not a boundary search.
        assert_eq!(heap.search_stats(), searched);
    }
}

/// A tight walk that sees its whole bin without a fit makes the bin's
/// bound exact, as the boundary walk does.
#[test]
fn a_tight_walk_of_a_whole_bin_makes_its_bound_exact() {
    // [960, 1024) holds 970 (head), 965, 1020 (tail); bound 1020.
    let (mut heap, offsets) = heap_with_gaps(&[1020, 965, 970, 4096], 1 << 16);
    let bin = bin_down::<3>(1000) as usize;
    assert_eq!(heap.bin_max_hint[bin], 1020);
    // The tail leaves the bin; the bound stays (only an emptied bin's resets).
    let placed = heap.allocate_with(1010, 1, Strategy::MinMemory).unwrap();
    assert_eq!(placed.offset, offsets[0]);
    assert_eq!(heap.bin_max_hint[bin], 1020);
    // 1000 bytes: both gaps seen, neither fits; the good fit takes 4096's.
    let placed = heap.allocate_with(1000, 1, Strategy::MinMemory).unwrap();
    assert_eq!(placed.offset, offsets[3]);
    assert_eq!(heap.bin_max_hint[bin], 970);
}

/// A size on a bin's lower bound at an alignment: its own bin's gaps hold
/// it unaligned, not always aligned, so the good fit may pass a fitting gap
/// behind its bin's head for a bin past `size + align - 1`; `MinMemory`
/// walks that bin too (the packed twin alike), and at alignment 1 takes the
/// good fit's head.
#[test]
fn min_memory_walks_the_own_bin_of_an_aligned_size_on_a_bin_bound() {
    // [1024, 1152) holds 1100 at 1032 (head; aligned to 256 it holds 852
    // bytes) and 1024 at 0; 4096 at 2140 in its own bin.
    let (heap, offsets) = heap_with_gaps(&[1024, 1100, 4096], 1 << 16);
    assert_eq!(offsets, [0, 1032, 2140]);
    let fast = heap.clone().allocate(1024, 256).unwrap();
    assert_eq!(fast.offset, 2304, "the good fit passes the 1024 at 0");
    assert_eq!(
        offset_placed_by_a_clone(&heap, 1024, 256, Strategy::MinMemory),
        Ok(offsets[0])
    );
    let mut packed = heap.clone();
    assert_eq!(
        packed
            .allocate_packed_with(1024, 256, Strategy::MinMemory)
            .map(|p| p.offset),
        Some(offsets[0])
    );
    // Alignment 1: the head holds it, as the good fit's choice.
    assert_eq!(
        offset_placed_by_a_clone(&heap, 1024, 1, Strategy::MinMemory),
        Ok(offsets[1])
    );
}

/// `MinOffset` takes the first free range in address order that holds the
/// request, at its first aligned offset, wherever the bins would look
/// first: past ranges too small, and past one whose aligned start leaves
/// too little room; with nothing below, it fails as `allocate` does, with
/// the same error and count.
#[test]
fn min_offset_takes_the_lowest_range_that_holds_the_request() {
    // Gaps of 100 at 0, 1000 at 108, 5000 at 1116; the rest taken.
    let (heap, offsets) = heap_with_gaps(&[100, 1000, 5000], 1 << 16);
    assert_eq!(offsets, [0, 108, 1116]);
    let lowest =
        |size: u64, align: u64| offset_placed_by_a_clone(&heap, size, align, Strategy::MinOffset);
    // The good fit takes a bin whose every gap holds the request: 1024
    // bytes and more for 970, so the 5000-byte gap's bin.
    assert_eq!(heap.clone().allocate(970, 1).unwrap().offset, 1116);
    assert_eq!(lowest(970, 1), Ok(108));
    assert_eq!(lowest(50, 1), Ok(0));
    assert_eq!(lowest(100, 1), Ok(0));
    assert_eq!(lowest(101, 1), Ok(108));
    // 64-aligned: 128 is the first aligned start in the 1000-byte gap
    // (108..1108): 980 bytes from there end at its end, 990 pass it.
    assert_eq!(lowest(980, 64), Ok(128));
    assert_eq!(lowest(990, 64), Ok(1152));
    assert_eq!(lowest(5000, 1), Ok(1116));
    // Nothing holds it: allocate's error, counted as allocate counts it.
    let mut min_offset = heap.clone();
    let mut min_time = heap.clone();
    let error = min_offset.allocate_with(5001, 1, Strategy::MinOffset);
    assert_eq!(error, min_time.allocate(5001, 1));
    assert_eq!(
        error,
        Err(OffsetError::TooFragmented {
            size: 5001,
            align: 1,
            free: 6100
        })
    );
    assert_eq!(min_offset.counters(), min_time.counters());
    assert_eq!(
        heap.clone().allocate_with(0, 1, Strategy::MinOffset),
        Err(OffsetError::ZeroSize)
    );
}

/// `MaxOffset` takes the last free range in address order that holds the
/// request, at its highest aligned offset (the request ending as close to
/// the range's end as its alignment lets it), and fails as `allocate`
/// does where nothing holds it.
#[test]
fn max_offset_takes_the_highest_place_that_holds_the_request() {
    // Gaps of 100 at 0, 1000 at 108, 5000 at 1116 (ending at 6116).
    let (heap, offsets) = heap_with_gaps(&[100, 1000, 5000], 1 << 16);
    assert_eq!(offsets, [0, 108, 1116]);
    let highest =
        |size: u64, align: u64| offset_placed_by_a_clone(&heap, size, align, Strategy::MaxOffset);
    assert_eq!(highest(10, 1), Ok(6106));
    assert_eq!(highest(5000, 1), Ok(1116));
    // Aligned down from the range's end: 6066 to 6016, 5116 to 4096.
    assert_eq!(highest(50, 64), Ok(6016));
    assert_eq!(highest(1000, 4096), Ok(4096));
    // 4096-aligned 2100 bytes: the last range's one multiple, 4096, leaves
    // too little; none of the others holds it.
    assert_eq!(
        highest(2100, 4096),
        Err(OffsetError::TooFragmented {
            size: 2100,
            align: 4096,
            free: 6100
        })
    );
    // 2000 at 2048-alignment: 4096 in the last range (6116 - 2000 = 4116).
    assert_eq!(highest(2000, 2048), Ok(4096));
    // With the last range taken, the one before: 1000 bytes end at 1108.
    let mut heap = heap.clone();
    heap.allocate_with(5000, 1, Strategy::MaxOffset).unwrap();
    assert_eq!(
        offset_placed_by_a_clone(&heap, 1000, 1, Strategy::MaxOffset),
        Ok(108)
    );
    assert_eq!(
        offset_placed_by_a_clone(&heap, 40, 1, Strategy::MaxOffset),
        Ok(1068)
    );
    let mut min_time = heap.clone();
    let error = heap.allocate_with(1001, 1, Strategy::MaxOffset);
    assert_eq!(error, min_time.allocate(1001, 1));
    assert_eq!(heap.counters(), min_time.counters());
}
