//! [`Strategy`]: how hard a placement looks for a tight free range.

/// How an allocation chooses among the free ranges that can hold it
/// (VMA's `VMA_ALLOCATION_CREATE_STRATEGY_MIN_TIME_BIT`,
/// `..._MIN_MEMORY_BIT` and `..._MIN_OFFSET_BIT`, for its blocks and its
/// virtual blocks alike, and its `UPPER_ADDRESS_BIT`).
///
/// `MinTime` and `MinMemory` cost what
/// [`allocate`](super::OffsetAllocator::allocate) costs (O(1) but for a
/// request close to failing or of a large alignment: see its time
/// complexity), `MinMemory` up to 8 free ranges more; `MinOffset` and
/// `MaxOffset` walk the allocations in address order, from either end. None ever fails where a free range
/// could hold the request; they differ in the range they take when
/// several could.
///
/// Measured on the peer bench's traces (`bench/`'s `peers --strategy
/// min-memory` against the default, 5 runs each on lavapipe, 2-core Xeon
/// VM, two such pairs of runs): on our core's row (the core alone in one
/// range) `MinMemory` lowered the peak of the range in use by 5 % on
/// `streaming` and `small-churn` and 2 % on `frame-loop`, and raised it
/// 1 % on `mixed`, for 4 to 12 ns more per allocation (a sixth to a half
/// more), frees level. In the Vulkan allocator's blocks the same traces
/// reserved the same memory either way (new blocks' sizes decide it
/// there), for 3 to 9 ns more per allocation; it helps where blocks are
/// few and fixed, as in a custom pool with `max_blocks`.
///
/// Non-exhaustive: a strategy may be added.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Strategy {
    /// The first size class all of whose free ranges hold the request,
    /// and its first range: two bitmask searches. A range up to one
    /// class (1/8 for the default 3 mantissa bits) larger than the
    /// smallest that fits may be taken, its rest left free. At an
    /// alignment above 1, when the alignment shifts the request out of
    /// that class's first range, the first class whose ranges hold
    /// `size + align - 1` bytes is taken instead, however much larger
    /// than a range that holds the aligned request
    /// ([`MinMemory`](Self::MinMemory) looks for one in the class the
    /// request rounds down to first).
    #[default]
    MinTime,
    /// First, up to 8 free ranges of the size class the request rounds
    /// down to, the class whose ranges may or may not hold it (those
    /// that do leave less than a class's width over); the first that
    /// holds it is taken. Else as [`MinTime`](Self::MinTime). The range
    /// taken is never of a larger size class than `MinTime`'s choice.
    MinMemory,
    /// The lowest offset where the request fits: the first free range in
    /// address order that holds it, at its first aligned offset. Packs
    /// allocations toward the start of the range, leaving the free space
    /// at its end in one piece (what a block that should shrink, or be
    /// freed, wants), at the cost of a walk of the allocations before the
    /// range taken, O(allocations), where the others look at a few bins:
    /// for placements made rarely, not per frame. On the peer bench's
    /// traces (`peers --strategy min-offset`, 3 runs, 2-core Xeon VM idle)
    /// our core's row took 205–1062 ns per allocation (25–32 ns with
    /// `MinTime` right after), 16.4 µs on `small-churn`'s 8192 small live ranges, and
    /// its peak range was 4 % lower on `streaming` and 1–4 % higher on the
    /// others.
    MinOffset,
    /// The highest offset where the request fits: the last free range in
    /// address order that holds it, at its last aligned offset, so that it
    /// ends as close to the range's end as its alignment lets it (VMA's
    /// `UPPER_ADDRESS`, the upper stack of its linear pools' double stack;
    /// here in any block, freed in any order). With `MinOffset` for the
    /// other lifetime, it keeps two kinds of allocations apart, at either
    /// end of a range, their free space between them in one piece: a
    /// level's data from the bottom, its transient loads from the top. A
    /// walk from the end, O(allocations after the range taken), as
    /// `MinOffset`'s from the start: on the peer traces (`peers --strategy
    /// max-offset`, 3 runs, the Xeon VM idle) our core's row took 173–818
    /// ns per allocation (23–28 ns with `MinTime` right after), 16 µs on
    /// `small-churn`.
    MaxOffset,
}

impl Strategy {
    /// Whether it places by address ([`MinOffset`](Self::MinOffset),
    /// [`MaxOffset`](Self::MaxOffset)), which a slot of a run carved
    /// anywhere would not honour: the Vulkan pools give such a request a
    /// range of its own.
    pub(crate) fn places_by_address(self) -> bool {
        matches!(self, Self::MinOffset | Self::MaxOffset)
    }
}
