//! [`Strategy::MinOffset`](crate::offset::Strategy::MinOffset) and
//! [`Strategy::MaxOffset`](crate::offset::Strategy::MaxOffset): the lowest
//! (highest) offset where a request fits, found by a walk of the
//! allocations in address order from the start (the end), not by the
//! bins. The forward walk is shared with
//! [`allocate_below`](OffsetAllocator::allocate_below), compaction's probe
//! (`move_destinations.rs`); both are apart from `tlsf.rs` because they
//! cost O(allocations), not O(1), and so stay off the common strategies'
//! path.

use super::{OffsetAllocator, SENTINEL};
use crate::offset::allocation::OffsetAllocation;
use crate::offset::node::NIL;
use crate::offset::OffsetError;

impl<const M: u32> OffsetAllocator<M> {
    /// [`allocate_with`](Self::allocate_with) for
    /// [`Strategy::MinOffset`](crate::offset::Strategy::MinOffset): `size`
    /// bytes at alignment `align` at the lowest offset where they fit.
    ///
    /// A request that fails `allocate`'s checks, or that no free range
    /// holds, goes to `allocate`'s body, which fails it as `allocate` would:
    /// the same error, counted as a failure the same way. That body finds a
    /// range wherever one holds the request (`tlsf.rs`, "Never a false
    /// out-of-space"), so it places nothing the walk missed.
    ///
    /// Out of line, as [`allocate_tight`](Self::allocate_tight): the common
    /// strategies' code stays as it was.
    ///
    /// # Time complexity
    /// O(allocations before the range taken), and O(allocations) when none
    /// holds the request.
    #[inline(never)]
    pub(in crate::offset) fn allocate_lowest(
        &mut self,
        size: u64,
        align: u64,
    ) -> Result<OffsetAllocation, OffsetError> {
        if self.walks(size, align) {
            if let Some((node, offset)) = self.find_lowest_fit(size, align, self.capacity) {
                return Ok(self.place(node, offset, size));
            }
        }
        self.allocate_body(size, align)
    }

    /// [`allocate_with`](Self::allocate_with) for
    /// [`Strategy::MaxOffset`](crate::offset::Strategy::MaxOffset): `size`
    /// bytes at alignment `align` ending as high as they can, at the
    /// highest aligned offset of the last free range in address order that
    /// holds them. Fails as [`allocate_lowest`](Self::allocate_lowest) does.
    ///
    /// # Time complexity
    /// O(allocations after the range taken), and O(allocations) when none
    /// holds the request.
    #[inline(never)]
    pub(in crate::offset) fn allocate_highest(
        &mut self,
        size: u64,
        align: u64,
    ) -> Result<OffsetAllocation, OffsetError> {
        if self.walks(size, align) {
            if let Some((node, offset)) = self.find_highest_fit(size, align) {
                return Ok(self.place(node, offset, size));
            }
        }
        self.allocate_body(size, align)
    }

    /// Whether a request passes `allocate`'s checks and may fit the free
    /// bytes (too few in all: no walk): only then is a walk worth making,
    /// else `allocate`'s body gives the error.
    fn walks(&self, size: u64, align: u64) -> bool {
        size != 0
            && align.is_power_of_two()
            && size <= self.capacity
            && self.unused_slot != NIL
            && size <= self.free_bytes
    }

    /// The highest offset at which `size` bytes at alignment `align` fit in
    /// a free range, with the node whose gap holds them; `None` when no
    /// free range does. The caller checked `size` (not 0) and `align` (a
    /// power of two).
    ///
    /// # Time complexity
    /// O(allocations after the answer, or all of them when there is none).
    fn find_highest_fit(&self, size: u64, align: u64) -> Option<(u32, u64)> {
        let mut node = self.tail;
        while node != NIL {
            let entry = self.nodes[node as usize];
            if entry.gap() >= size {
                // The highest aligned start whose range ends in the gap:
                // no overflow, as the gap ends at or above `size`.
                let start = (entry.gap_end() - size) & !(align - 1);
                if start >= entry.end() {
                    // Earlier gaps end lower still.
                    return Some((node, start));
                }
            }
            node = entry.prev;
        }
        None
    }

    /// The lowest offset at which `size` bytes at alignment `align` fit in
    /// a free range and end at or before `end`, with the node whose gap
    /// holds them; `None` when no free range below `end` does. The caller
    /// checked `size` (not 0) and `align` (a power of two).
    ///
    /// # Time complexity
    /// O(allocations below the answer, or below `end` when there is none).
    pub(super) fn find_lowest_fit(&self, size: u64, align: u64, end: u64) -> Option<(u32, u64)> {
        // Past the capacity nothing fits; below it `fit_in_gap` cannot
        // overflow.
        if size > self.capacity.min(end) {
            return None;
        }
        let mut node = SENTINEL;
        while node != NIL {
            let entry = self.nodes[node as usize];
            if entry.end() >= end {
                break;
            }
            if entry.gap() >= size {
                if let Some(offset) = self.fit_in_gap(node, size, align) {
                    // Later gaps start later still.
                    return (offset + size <= end).then_some((node, offset));
                }
            }
            node = entry.next;
        }
        None
    }
}
