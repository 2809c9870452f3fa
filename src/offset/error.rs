//! Errors of the offset allocators.

/// What went wrong in an [`OffsetAllocator`](super::OffsetAllocator) or
/// [`LinearAllocator`](super::LinearAllocator) call. Every failing call leaves
/// the allocator's allocations and free ranges as they were; only its
/// failure counters and search statistics may count the attempt.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum OffsetError {
    /// A size of zero was requested. Ask for at least one byte.
    #[error("allocation size must not be zero")]
    ZeroSize,
    /// The alignment is not a power of two. Vulkan alignments always are; pass
    /// `VkMemoryRequirements::alignment` (or 1 for none).
    #[error("alignment {0} is not a power of two")]
    AlignmentNotPowerOfTwo(u64),
    /// The request is larger than the whole allocator: it cannot succeed
    /// until [`grow`](crate::offset::OffsetAllocator::grow) makes it larger
    /// (a linear allocator never grows). Use a larger allocator (or, in a
    /// Vulkan pool, dedicated memory).
    #[error("size {size} exceeds the capacity {capacity}")]
    SizeExceedsCapacity {
        /// Requested size in bytes.
        size: u64,
        /// Capacity of the allocator in bytes.
        capacity: u64,
    },
    /// Fewer bytes are free than requested. Free something, or grow.
    #[error("out of space: {size} bytes requested, {free} bytes free")]
    OutOfSpace {
        /// Requested size in bytes.
        size: u64,
        /// Free bytes in the allocator.
        free: u64,
    },
    /// Enough bytes are free in total, but no single free range can hold the
    /// aligned request. Freeing neighbours of free ranges helps; so does a new
    /// allocator (block).
    #[error("too fragmented: {size} bytes at alignment {align} requested, {free} bytes free in pieces too small")]
    TooFragmented {
        /// Requested size in bytes.
        size: u64,
        /// Requested alignment.
        align: u64,
        /// Free bytes in the allocator.
        free: u64,
    },
    /// Every preallocated allocation slot is in use (or retired: a slot
    /// retires after 2^31 reuses, see
    /// [`AllocationId`](super::AllocationId)). Free an allocation, or call
    /// `reserve_slots` (outside the hot path) to add more.
    #[error("none of the {0} allocation slots is free")]
    OutOfSlots(u32),
    /// The capacity (or capacity after `grow`) exceeds what offsets can
    /// address, [`MAX_CAPACITY`](super::MAX_CAPACITY) bytes.
    #[error("capacity {requested} exceeds the maximum {max}")]
    CapacityTooLarge {
        /// The capacity asked for.
        requested: u64,
        /// The largest capacity supported.
        max: u64,
    },
    /// More allocation slots were asked for than ids can number.
    #[error("{requested} allocation slots exceed the maximum {max}")]
    TooManySlots {
        /// The slot count asked for.
        requested: u64,
        /// The largest slot count supported.
        max: u64,
    },
    /// The host could not allocate the allocator's own metadata: the node
    /// table (32 bytes per allocation slot) or the frame table (16 bytes per
    /// frame in flight). Ask for fewer slots or frames. Nothing changed.
    #[error("out of host memory for the allocator's metadata")]
    OutOfHostMemory,
    /// The id does not name a live allocation of this allocator: it was freed
    /// already (double free) or its slot has been reused since. Nothing changed.
    #[error("stale allocation id: already freed")]
    StaleId,
    /// The id was issued by another allocator. Nothing changed.
    #[error("allocation id belongs to another allocator")]
    ForeignId,
    /// A linear allocator already holds the maximum number of sealed frames in
    /// flight. Reclaim the oldest frame (after its fence signals) first.
    #[error("{0} frames are already in flight")]
    TooManyFramesInFlight(u32),
}
