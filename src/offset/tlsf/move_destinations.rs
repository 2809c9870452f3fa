//! Allocations at a place the caller chose, for compaction:
//! [`allocate_below`](OffsetAllocator::allocate_below) takes the lowest
//! offset below a bound, walking the allocations in address order (the
//! walk of `lowest_offset.rs`), and
//! [`allocate_in_gap`](OffsetAllocator::allocate_in_gap) one given free
//! range. Both are probes, whose empty answer is not a failed request.
//! Apart from `tlsf.rs` because they bypass the bins' search: they choose
//! the place by address, not by size class, and serve the planning of
//! moves, never the hot path.

use super::{OffsetAllocator, SENTINEL};
use crate::offset::allocation::{AllocationId, OffsetAllocation};
use crate::offset::node::NIL;
use crate::offset::OffsetError;

impl<const M: u32> OffsetAllocator<M> {
    /// Allocates `size` bytes at alignment `align` at the lowest offset where
    /// they fit and end at or before `end`: the destination of a move that
    /// packs allocations toward the start of the range (compaction), which
    /// must lie wholly below the allocation it replaces.
    ///
    /// `Ok(None)` when no free range below `end` holds the request. That is
    /// a probe coming back empty, not a failed request: the
    /// [`Counters`](crate::offset::Counters)' failures do not count it.
    ///
    /// ```
    /// use vk_suballoc::offset::OffsetAllocator;
    ///
    /// let mut heap = OffsetAllocator::<3>::new(100, 8)?;
    /// let a = heap.allocate(10, 1)?;
    /// let hole = heap.allocate(20, 1)?;
    /// let b = heap.allocate(10, 1)?; // [30, 40)
    /// heap.free(hole.id)?;
    /// // b fits in the hole at 10, wholly below its offset: move it there.
    /// let moved = heap.allocate_below(b.size, 1, b.offset)?.expect("room below");
    /// assert_eq!(moved.offset, a.end());
    /// heap.free(b.id)?;
    /// // What is left is one free range after the packed allocations.
    /// assert_eq!(heap.free_ranges().count(), 1);
    /// assert!(heap.allocate_below(5, 1, moved.offset)?.is_none());
    /// # Ok::<(), vk_suballoc::offset::OffsetError>(())
    /// ```
    ///
    /// # Errors
    /// [`OffsetError::ZeroSize`], [`OffsetError::AlignmentNotPowerOfTwo`],
    /// and [`OffsetError::OutOfSlots`] when no slot is unused (see
    /// [`reserve_slots`](Self::reserve_slots)). Nothing changes on error.
    ///
    /// # Time complexity
    /// O(allocations below `end`): a walk in address order, not a bin
    /// lookup. For planning moves, not for hot paths.
    pub fn allocate_below(
        &mut self,
        size: u64,
        align: u64,
        end: u64,
    ) -> Result<Option<OffsetAllocation>, OffsetError> {
        if size == 0 {
            return Err(OffsetError::ZeroSize);
        }
        if !align.is_power_of_two() {
            return Err(OffsetError::AlignmentNotPowerOfTwo(align));
        }
        if self.unused_slot == NIL {
            return Err(OffsetError::OutOfSlots(self.slot_count()));
        }
        Ok(self
            .find_lowest_fit(size, align, end)
            .map(|(node, offset)| self.place(node, offset, size)))
    }

    /// Allocates `size` bytes at alignment `align` at the lowest offset of
    /// one given free range, if they fit there: the range right after the
    /// live allocation `after`, or with `None` the range at offset 0,
    /// before every allocation. For a caller that chose the place itself
    /// from the ranges it walked
    /// ([`free_ranges_after`](Self::free_ranges_after) gives each with the
    /// allocation it follows), as compaction does once per block instead
    /// of once per move.
    ///
    /// `Ok(None)` when that range does not hold the request (or is empty):
    /// a probe, not a failed request.
    ///
    /// ```
    /// use vk_suballoc::offset::OffsetAllocator;
    ///
    /// let mut heap = OffsetAllocator::<3>::new(100, 8)?;
    /// let a = heap.allocate(10, 1)?;
    /// let hole = heap.allocate(20, 1)?;
    /// heap.allocate(10, 1)?;
    /// heap.free(hole.id)?;
    /// // The free range after `a` is [10, 30).
    /// assert!(heap.allocate_in_gap(Some(a.id), 16, 8)?.is_none()); // [16, 32) does not fit
    /// let placed = heap.allocate_in_gap(Some(a.id), 12, 8)?.expect("fits");
    /// assert_eq!((placed.offset, placed.size), (16, 12));
    /// // Nothing is free before `a`.
    /// assert!(heap.allocate_in_gap(None, 1, 1)?.is_none());
    /// # Ok::<(), vk_suballoc::offset::OffsetError>(())
    /// ```
    ///
    /// # Errors
    /// [`OffsetError::ZeroSize`], [`OffsetError::AlignmentNotPowerOfTwo`],
    /// [`OffsetError::ForeignId`] and [`OffsetError::StaleId`] for `after`,
    /// and [`OffsetError::OutOfSlots`] when no slot is unused. Nothing
    /// changes on error.
    ///
    /// # Time complexity
    /// O(1).
    pub fn allocate_in_gap(
        &mut self,
        after: Option<AllocationId>,
        size: u64,
        align: u64,
    ) -> Result<Option<OffsetAllocation>, OffsetError> {
        if size == 0 {
            return Err(OffsetError::ZeroSize);
        }
        if !align.is_power_of_two() {
            return Err(OffsetError::AlignmentNotPowerOfTwo(align));
        }
        let owner = match after {
            Some(id) => self.live_slot(id)?,
            None => SENTINEL,
        };
        if self.unused_slot == NIL {
            return Err(OffsetError::OutOfSlots(self.slot_count()));
        }
        // Past the capacity nothing fits; below it `fit_in_gap` cannot
        // overflow, and a fit means a non-empty gap, filed in a bin.
        if size > self.capacity {
            return Ok(None);
        }
        Ok(self
            .fit_in_gap(owner, size, align)
            .map(|offset| self.place(owner, offset, size)))
    }
}
