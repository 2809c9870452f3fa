//! Persistent mapping and the non-coherent atom rules for flush/invalidate.
//!
//! Host-visible blocks are mapped once, when they are created, and stay mapped
//! until they are freed (`vkMapMemory` may be called on a memory object only
//! while it is unmapped, and mapping costs a kernel call; persistent mapping
//! is what every engine does). An allocation's pointer is the block's pointer
//! plus the allocation's offset.
//!
//! On memory without `HOST_COHERENT`, host writes become visible to the GPU
//! only after `vkFlushMappedMemoryRanges`, and GPU writes to the host only
//! after `vkInvalidateMappedMemoryRanges`. Both take ranges whose offset is a
//! multiple of `nonCoherentAtomSize` and whose size is a multiple of it or
//! reaches the end of the memory object (VUID-VkMappedMemoryRange-offset-00687,
//! VUID-VkMappedMemoryRange-size-01390). [`atom_range`] widens a range to
//! atoms and clamps it to the memory object. Widening must not reach a
//! neighbour's bytes: a flush writes whole atoms of the host's view back
//! (over what the GPU wrote there), and an invalidate discards unflushed
//! host writes. So allocations in non-coherent memory start on an atom and
//! a widened range ends before the next allocation.

use std::ops::Range;
use std::ptr::NonNull;

/// A pointer into persistently mapped device memory.
///
/// `NonNull` is neither `Send` nor `Sync`; this newtype confines the
/// `unsafe impl`s to the one place where they are justified.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct MappedPtr(pub(crate) NonNull<u8>);

// SAFETY: the pointer addresses device memory mapped for the lifetime of its
// block, not thread-local data; the allocator hands each byte range to one
// allocation only, and synchronising accesses to that range is the owner's job,
// as for any `&mut [u8]`.
unsafe impl Send for MappedPtr {}
// SAFETY: as above; sharing the pointer value itself is harmless.
unsafe impl Sync for MappedPtr {}

impl MappedPtr {
    /// The pointer `offset` bytes further on.
    pub(crate) fn add(self, offset: u64) -> Self {
        // `wrapping_add` cannot be UB; callers only pass offsets inside the
        // mapped block, so the result is in bounds and non-null.
        let pointer = self.0.as_ptr().wrapping_add(offset as usize);
        Self(NonNull::new(pointer).unwrap_or(self.0))
    }
}

/// Widens `range` (bytes of a memory object of `memory_size` bytes) to whole
/// non-coherent atoms, clamped to the memory object.
pub(crate) fn atom_range(range: Range<u64>, atom: u64, memory_size: u64) -> Range<u64> {
    let atom = atom.max(1);
    let start = range.start / atom * atom;
    let end = range
        .end
        .checked_next_multiple_of(atom)
        .unwrap_or(u64::MAX)
        .min(memory_size);
    start..end
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_widen_to_atoms_and_clamp() {
        assert_eq!(atom_range(0..1, 64, 1024), 0..64);
        assert_eq!(atom_range(65..130, 64, 1024), 64..192);
        assert_eq!(atom_range(1000..1010, 256, 1010), 768..1010);
        assert_eq!(atom_range(128..192, 64, 1024), 128..192);
        assert_eq!(atom_range(5..9, 1, 1024), 5..9);
    }
}
