//! Figures an offset allocator reports about itself.

/// Exact free-space figures of an [`OffsetAllocator`](super::OffsetAllocator).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct StorageReport {
    /// Capacity in bytes.
    pub capacity: u64,
    /// Sum of all free ranges in bytes.
    pub free_bytes: u64,
    /// Size of the largest free range: exact, not a bin's lower bound. A request
    /// of this size with alignment 1 succeeds (given a free slot).
    pub largest_free_range: u64,
    /// Number of (maximal, merged) free ranges.
    pub free_ranges: u64,
}

/// Running counters of an allocator, cheap to read at any time.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Counters {
    /// Allocations alive now.
    pub live_allocations: u64,
    /// Bytes in live allocations now.
    pub live_bytes: u64,
    /// The largest `live_bytes` seen.
    pub peak_live_bytes: u64,
    /// Successful allocations since creation.
    pub allocations: u64,
    /// Successful frees since creation.
    pub frees: u64,
    /// Bytes requested by successful allocations since creation (each placed
    /// range is exactly its request: alignment slack stays free). Saturates
    /// at `u64::MAX` rather than wrap.
    pub requested_bytes: u64,
    /// Allocation requests that failed for lack of space or slots, or were
    /// larger than the capacity (invalid sizes and alignments are not counted):
    /// those of [`allocate`](super::OffsetAllocator::allocate) and
    /// [`allocate_with`](super::OffsetAllocator::allocate_with). The
    /// placement probes [`allocate_below`](super::OffsetAllocator::allocate_below)
    /// and [`allocate_in_gap`](super::OffsetAllocator::allocate_in_gap)
    /// count none, not even [`OutOfSlots`](super::OffsetError::OutOfSlots).
    pub failed_allocations: u64,
    /// Bytes asked for by those failed requests (saturating, like
    /// `requested_bytes`).
    pub failed_bytes: u64,
}

/// How often [`allocate`](super::OffsetAllocator::allocate) went past its
/// O(1) search: requests close to failing, for which the bins that may or
/// may not hold the request are searched gap by gap.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct SearchStats {
    /// Requests that searched the boundary bins (successful or not).
    pub boundary_searches: u64,
    /// Gaps those searches looked at, in all.
    pub gaps_visited: u64,
}

impl Counters {
    #[inline]
    pub(crate) fn on_allocate(&mut self, size: u64) {
        self.live_allocations += 1;
        self.live_bytes += size;
        self.peak_live_bytes = self.peak_live_bytes.max(self.live_bytes);
        self.allocations += 1;
        self.requested_bytes = self.requested_bytes.saturating_add(size);
    }

    #[inline]
    pub(crate) fn on_free(&mut self, size: u64) {
        self.live_allocations -= 1;
        self.live_bytes -= size;
        self.frees += 1;
    }

    #[inline]
    pub(crate) fn on_failure(&mut self, size: u64) {
        self.failed_allocations += 1;
        self.failed_bytes = self.failed_bytes.saturating_add(size);
    }
}
