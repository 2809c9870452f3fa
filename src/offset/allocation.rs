//! Allocation ids and records handed out by [`OffsetAllocator`](super::OffsetAllocator).

use std::sync::atomic::{AtomicU32, Ordering};

/// Names one allocation of one [`OffsetAllocator`](super::OffsetAllocator).
///
/// Generational: the slot's generation changes when the allocation is freed,
/// so freeing the same id twice, or an id whose slot was reused since, returns
/// [`OffsetError::StaleId`](super::OffsetError::StaleId) instead of corrupting
/// anything. The owner tag makes an id from another allocator fail with
/// [`OffsetError::ForeignId`](super::OffsetError::ForeignId).
///
/// The generation is 32 bits, odd while the slot is live, so it would come
/// round again after 2^31 reuses of one slot (a tight allocate/free loop
/// on one slot gets there in about a minute and a half), and an id issued
/// before would name the allocation in that slot then. So a slot retires
/// instead when its last generation is freed: it is never handed out
/// again, and every id it ever carried stays stale. That costs one 32-byte
/// slot per 2^31 reuses; [`OutOfSlots`](super::OffsetError::OutOfSlots)
/// counts retired slots as taken, and
/// [`reserve_slots`](super::OffsetAllocator::reserve_slots) adds new ones.
///
/// A clone of an allocator keeps its owner tag, so that ids issued before the
/// clone work in both; once the two diverge, keep each one's later ids to
/// itself (the generation check catches most, not all, mix-ups).
///
/// The owner tag is 32 bits and taken from a process-wide counter that
/// wraps: an id of an allocator made 2^32 allocators before this one carries
/// the same tag, and only the slot and generation checks stand between it
/// and a free of whatever allocation holds its slot now. The core accepts
/// that, rather than refusing to construct once the tags run out, because it
/// is safe code that only hands out numbers; the Vulkan
/// [`Allocator`](crate::Allocator), whose handles point into mapped memory,
/// uses tags that never repeat.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct AllocationId {
    pub(crate) slot: u32,
    pub(crate) generation: u32,
    pub(crate) owner: u32,
}

impl AllocationId {
    /// The slot index, for diagnostics (stable while the allocation lives).
    pub const fn slot(&self) -> u32 {
        self.slot
    }
}

/// A live range handed out by an [`OffsetAllocator`](super::OffsetAllocator).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct OffsetAllocation {
    /// Pass this to `free`.
    pub id: AllocationId,
    /// First byte of the range; a multiple of the requested alignment.
    pub offset: u64,
    /// Length of the range: exactly the requested size.
    pub size: u64,
}

impl OffsetAllocation {
    /// One past the last byte of the range.
    pub const fn end(&self) -> u64 {
        self.offset + self.size
    }
}

/// A free range, as reported by iteration and by `free`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct FreeRange {
    /// First free byte.
    pub offset: u64,
    /// Number of free bytes (never zero).
    pub size: u64,
}

/// A process-wide source of owner tags, one per allocator instance.
pub(crate) fn next_owner_tag() -> u32 {
    static NEXT: AtomicU32 = AtomicU32::new(1);
    NEXT.fetch_add(1, Ordering::Relaxed)
}
