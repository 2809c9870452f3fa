//! The placements of the offset core's shadow: `Shadow`'s `allocate` under
//! each `Strategy`, checked against where that strategy's docs say a request
//! goes, and the placement probes `allocate_below` and `allocate_in_gap`,
//! with the size-class arithmetic the checks need.

use vk_suballoc::offset::{
    AllocationId, FreeRange, OffsetAllocation, OffsetError, Strategy, MAX_CAPACITY,
};

use super::{align_up, bad_input_error, Shadow};

/// The size class (bin) a free range of `size > 0` bytes is filed under
/// with `M` mantissa bits: the largest small float of `M` mantissa bits
/// at most `size`, as an index. Written here from the definition, apart
/// from the crate's own.
fn size_class<const M: u32>(size: u64) -> u32 {
    if size < 1 << M {
        return size as u32;
    }
    let exponent = 63 - size.leading_zeros(); // size in [2^e, 2^(e+1))
    let mantissa = (size >> (exponent - M)) as u32 & ((1 << M) - 1);
    ((exponent - M + 1) << M) + mantissa
}

/// The smallest size filed under size class `class` with `M` mantissa
/// bits: the inverse of [`size_class`], from the same definition.
fn class_lower_bound<const M: u32>(class: u32) -> u64 {
    if class < 1 << M {
        return u64::from(class);
    }
    let exponent = (class >> M) + M - 1; // sizes in [2^exponent, 2^(exponent+1))
    let mantissa = u64::from(class & ((1 << M) - 1));
    ((1 << M) | mantissa) << (exponent - M)
}

/// The first size class all of whose free ranges hold `size > 0` bytes.
fn class_up<const M: u32>(size: u64) -> u32 {
    let class = size_class::<M>(size);
    class + u32::from(class_lower_bound::<M>(class) != size)
}

/// Whether `range` holds `size` bytes at its first offset aligned to `align`.
fn holds(range: &FreeRange, size: u64, align: u64) -> bool {
    align_up(range.offset, align).is_some_and(|start| start + size <= range.offset + range.size)
}

impl<const M: u32> Shadow<M> {
    pub(super) fn allocate(&mut self, size: u64, align: u64, strategy: Strategy) {
        let searches = self.heap.search_stats().boundary_searches;
        // The good fit's choice, and the free ranges to find both in.
        let fast = (strategy == Strategy::MinMemory)
            .then(|| self.heap.clone().allocate(size, align).ok())
            .flatten();
        let free_before = self.free_ranges();
        // The default strategy through `allocate` itself.
        let result = if strategy == Strategy::MinTime {
            self.heap.allocate(size, align)
        } else {
            self.heap.allocate_with(size, align, strategy)
        };
        if let Some(error) = bad_input_error(size, align) {
            assert_eq!(result.err(), Some(error));
            return;
        }
        let free = self.capacity - self.counters.live_bytes;
        let expected_error = if size > self.capacity {
            Some(OffsetError::SizeExceedsCapacity {
                size,
                capacity: self.capacity,
            })
        } else if !self.has_unused_slot() {
            Some(OffsetError::OutOfSlots(self.slots))
        } else if !self.free_ranges().iter().any(|r| holds(r, size, align)) {
            // No free range holds it: the only case a space error is right.
            Some(if free < size {
                OffsetError::OutOfSpace { size, free }
            } else {
                OffsetError::TooFragmented { size, align, free }
            })
        } else {
            None
        };
        match (result, expected_error) {
            (Err(error), Some(expected)) => {
                assert_eq!(error, expected);
                if let OffsetError::OutOfSlots(_) = error {
                    self.refused_with_retired += u64::from(!self.retired.is_empty());
                }
                self.counters.failed_allocations += 1;
                self.counters.failed_bytes = self.counters.failed_bytes.saturating_add(size);
                if align == 1 && self.heap.search_stats().boundary_searches > searches {
                    self.check_repeated_failure(size, expected);
                }
            }
            (Ok(allocation), None) => {
                // The free range it was carved from, and the class of it.
                let host = free_before
                    .iter()
                    .find(|r| {
                        r.offset <= allocation.offset && allocation.offset < r.offset + r.size
                    })
                    .copied()
                    .expect("placed in a free range");
                let placed_class = size_class::<M>(host.size);
                if strategy == Strategy::MinTime {
                    // At its range's first aligned offset (the head slack
                    // stays free), in a class the good fit names.
                    let classes = good_fit_classes::<M>(&free_before, size, align);
                    assert!(
                        align_up(host.offset, align) == Some(allocation.offset)
                            && classes.contains(&placed_class),
                        "allocate took {allocation:?} from {host:?} (class {placed_class}), \
                         the good fit names classes {classes:?} (free ranges {free_before:?})"
                    );
                }
                if strategy == Strategy::MinMemory {
                    // The tight look: ranges of the class `size` rounds down
                    // to, up to 8 of them, unless `size` is that class's
                    // bound at alignment 1 (where the good fit takes one).
                    let tight = size_class::<M>(size);
                    let in_tight: Vec<FreeRange> = free_before
                        .iter()
                        .filter(|r| size_class::<M>(r.size) == tight)
                        .copied()
                        .collect();
                    let looked = !(align == 1 && class_lower_bound::<M>(tight) == size);
                    let tight_fit = placed_class == tight
                        && holds(&host, size, align)
                        && align_up(host.offset, align) == Some(allocation.offset);
                    let good_fit = fast.map(|f| f.offset) == Some(allocation.offset);
                    let ok = if !looked || !in_tight.iter().any(|r| holds(r, size, align)) {
                        good_fit
                    } else if in_tight.len() <= 8 {
                        tight_fit
                    } else {
                        tight_fit || good_fit
                    };
                    assert!(
                        ok,
                        "MinMemory took {allocation:?} from {host:?}; the good fit took {fast:?}, \
                         class {tight} holds {in_tight:?} (free ranges {free_before:?})"
                    );
                }
                if strategy == Strategy::MinOffset {
                    // The first free range in address order that holds it.
                    let lowest = free_before.iter().find_map(|r| {
                        align_up(r.offset, align).filter(|&start| start + size <= r.offset + r.size)
                    });
                    assert_eq!(
                        Some(allocation.offset),
                        lowest,
                        "MinOffset took {allocation:?} (free ranges {free_before:?})"
                    );
                }
                if strategy == Strategy::MaxOffset {
                    // The last free range in address order that holds it,
                    // at its highest aligned start.
                    let highest = free_before.iter().rev().find_map(|r| {
                        let start = (r.offset + r.size).checked_sub(size)? & !(align - 1);
                        (start >= r.offset).then_some(start)
                    });
                    assert_eq!(
                        Some(allocation.offset),
                        highest,
                        "MaxOffset took {allocation:?} (free ranges {free_before:?})"
                    );
                }
                assert_eq!(allocation.size, size);
                assert_eq!(allocation.offset % align, 0, "misaligned {allocation:?}");
                assert!(
                    allocation.end() <= self.capacity,
                    "out of bounds {allocation:?}"
                );
                self.record(allocation);
            }
            (result, expected) => panic!(
                "allocate({size}, {align}) returned {result:?}, model expects {expected:?} \
                 (free ranges {:?})",
                self.free_ranges()
            ),
        }
    }

    /// `allocate`'s promise for a request of `size` bytes at alignment 1
    /// that failed after a boundary search: the search left every bin it
    /// walked with an exact bound, so the same request again visits no gap
    /// (checked on a clone, whose counters then differ). With a larger
    /// alignment a bin may keep gaps of `size` bytes or more that the
    /// alignment shifts the request out of, and is walked again.
    fn check_repeated_failure(&self, size: u64, error: OffsetError) {
        let mut again = self.heap.clone();
        let before = again.search_stats().gaps_visited;
        assert_eq!(
            again.allocate(size, 1),
            Err(error),
            "repeat of allocate({size}, 1)"
        );
        assert_eq!(
            again.search_stats().gaps_visited,
            before,
            "a repeated failing allocate({size}, 1) walked gaps again"
        );
    }

    pub(super) fn allocate_below(&mut self, size: u64, align: u64, end: u64) {
        let result = self.heap.allocate_below(size, align, end);
        if self.refused_up_front(&result, size, align) {
            return;
        }
        // The lowest aligned start in a free range that ends by `end`.
        let free = self.free_ranges();
        let expected = free.iter().find_map(|r| {
            let start = align_up(r.offset, align)?;
            let stop = start.checked_add(size)?;
            (stop <= r.offset + r.size && stop <= end).then_some(start)
        });
        self.expect_probe(result, expected, size, || {
            format!("allocate_below({size}, {align}, {end}), free ranges {free:?}")
        });
    }

    pub(super) fn allocate_in_gap(&mut self, size: u64, align: u64, pick: usize) {
        if pick % 7 == 0 {
            if let Some(&stale) = self.freed.back() {
                let result = self.heap.allocate_in_gap(Some(stale), size, align);
                let expected = bad_input_error(size, align).unwrap_or(OffsetError::StaleId);
                assert_eq!(result, Err(expected));
                return;
            }
        }
        let live: Vec<(u64, u64, AllocationId)> = self
            .live
            .iter()
            .map(|(&offset, &(size, id))| (offset, size, id))
            .collect();
        let at = pick % (live.len() + 1);
        // The free range after the picked allocation (or the first).
        let (after, start) = match live.get(at) {
            Some(&(offset, size, id)) => (Some(id), offset + size),
            None => (None, 0),
        };
        let end = match after {
            Some(_) => live
                .get(at + 1)
                .map_or(self.capacity, |&(offset, ..)| offset),
            None => live.first().map_or(self.capacity, |&(offset, ..)| offset),
        };
        let result = self.heap.allocate_in_gap(after, size, align);
        if self.refused_up_front(&result, size, align) {
            return;
        }
        let expected = align_up(start, align)
            .filter(|&at| at.checked_add(size).is_some_and(|stop| stop <= end));
        self.expect_probe(result, expected, size, || {
            format!("allocate_in_gap({after:?}, {size}, {align}), range [{start}, {end})")
        });
    }

    /// Checks a placement probe's `result` (past its up-front errors)
    /// against the `expected` offset of `size` bytes, `None` for no room,
    /// and counts a placement; `call` names the probe when they differ.
    fn expect_probe(
        &mut self,
        result: Result<Option<OffsetAllocation>, OffsetError>,
        expected: Option<u64>,
        size: u64,
        call: impl FnOnce() -> String,
    ) {
        match (result, expected) {
            (Ok(None), None) => {}
            (Ok(Some(allocation)), Some(offset)) => {
                assert_eq!((allocation.offset, allocation.size), (offset, size));
                self.record(allocation);
            }
            (result, expected) => panic!(
                "{} returned {result:?}, model expects an offset of {expected:?}",
                call()
            ),
        }
    }

    /// Whether `result`, of a placement of `size` bytes at `align`, is an
    /// error the model expects before any room is looked for (bad input,
    /// then no unused slot): checked, and `true`, when it is one.
    fn refused_up_front(
        &self,
        result: &Result<Option<OffsetAllocation>, OffsetError>,
        size: u64,
        align: u64,
    ) -> bool {
        let expected = bad_input_error(size, align)
            .or((!self.has_unused_slot()).then_some(OffsetError::OutOfSlots(self.slots)));
        if let Some(error) = expected {
            assert_eq!(*result, Err(error), "allocating {size} at {align}");
        }
        expected.is_some()
    }
}

/// The size classes of free range that `allocate` (`Strategy::MinTime`)
/// may take `size` bytes at `align` from, given the free ranges: the
/// first non-empty class from `size` rounded up, if its first range
/// holds the aligned request (all of them do, none do, or some do, when
/// the bins' lists order decides); else the first non-empty class from
/// `size + align - 1` rounded up, whose every range holds it wherever
/// it starts; else the boundary search's: the smallest class from
/// `size` rounded down with a range that holds it. Empty when nothing
/// holds it. Each step is the `Strategy::MinTime` docs' "first size
/// class all of whose free ranges hold the request, and its first
/// range", and `allocate`'s time complexity docs' boundary search.
fn good_fit_classes<const M: u32>(free: &[FreeRange], size: u64, align: u64) -> Vec<u32> {
    let holds = |r: &FreeRange| holds(r, size, align);
    let first_from = |class: u32| {
        free.iter()
            .map(|r| size_class::<M>(r.size))
            .filter(|&c| c >= class)
            .min()
    };
    let boundary = free
        .iter()
        .filter(|r| holds(r))
        .map(|r| size_class::<M>(r.size))
        .filter(|&c| c >= size_class::<M>(size))
        .min();
    let after_first = || match size
        .checked_add(align - 1)
        .filter(|&worst| worst <= MAX_CAPACITY)
        .and_then(|worst| first_from(class_up::<M>(worst)))
    {
        Some(class) => Some(class),
        None => boundary,
    };
    let Some(first) = first_from(class_up::<M>(size)) else {
        return boundary.into_iter().collect();
    };
    let in_first: Vec<bool> = free
        .iter()
        .filter(|r| size_class::<M>(r.size) == first)
        .map(holds)
        .collect();
    if in_first.iter().all(|&h| h) {
        vec![first]
    } else if in_first.iter().any(|&h| h) {
        std::iter::once(first).chain(after_first()).collect()
    } else {
        after_first().into_iter().collect()
    }
}
