//! The 32-byte node that describes one allocation and the free gap after it.
//!
//! The allocator keeps every allocation in one address-ordered, doubly-linked
//! list. A node owns its allocation *and* the free gap that follows it, up to
//! the next node (or to the capacity). A sentinel node of size zero at offset 0
//! owns the gap before the first allocation. So free ranges need no nodes of
//! their own: one node per allocation slot, plus the sentinel.
//!
//! A node stores where its allocation ends and where its gap ends. Where its
//! allocation *starts* is where the previous node's gap ends, so it is not
//! stored twice. That choice keeps the hot paths short: the allocator decides
//! whether a gap fits, and splits it, from the gap owner's node alone, without
//! reading its neighbour (one dependent cache miss fewer per operation).
//!
//! Both positions take 48 bits (256 TiB); the 32-bit generation of the slot
//! lives in the remaining 16 + 16 bits. With four 32-bit links that makes 32
//! bytes, the metadata cost of one allocation slot.

/// "No node" in every link field.
pub(crate) const NIL: u32 = u32::MAX;

/// Offsets, ends and capacities must fit this many bits.
pub(crate) const ADDRESS_BITS: u32 = 48;
const ADDRESS_MASK: u64 = (1u64 << ADDRESS_BITS) - 1;

/// One allocation slot. Unused slots chain through `next` (the free-slot stack)
/// and keep their generation, so a stale id still fails its check; a slot
/// whose last generation was freed is on no stack (retired, generation 0).
///
/// Aligned to 32 bytes so that no node straddles two cache lines (a large
/// `Vec` from the system allocator starts 16 bytes past a page boundary).
#[derive(Clone, Copy, Debug)]
#[repr(align(32))]
pub(crate) struct Node {
    /// Bits 0..48: end of the allocation. Bits 48..64: generation, high half.
    end_generation: u64,
    /// Bits 0..48: end of the gap after the allocation (the next node's
    /// offset, or the capacity). Bits 48..64: generation, low half.
    gap_end_generation: u64,
    /// Previous node in address order (`NIL` only for the sentinel).
    pub(crate) prev: u32,
    /// Next node in address order, or the next unused slot while unused.
    pub(crate) next: u32,
    /// Neighbours in the free list of the bin holding this node's gap.
    pub(crate) bin_prev: u32,
    /// See `bin_prev`.
    pub(crate) bin_next: u32,
}

const _: () = assert!(core::mem::size_of::<Node>() == 32);
const _: () = assert!(core::mem::align_of::<Node>() == 32);

impl Node {
    pub(crate) const fn unused(next_unused: u32) -> Self {
        Self {
            end_generation: 0,
            gap_end_generation: 0,
            prev: NIL,
            next: next_unused,
            bin_prev: NIL,
            bin_next: NIL,
        }
    }

    /// One past the last byte of the allocation (its offset is the previous
    /// node's [`gap_end`](Self::gap_end)).
    #[inline]
    pub(crate) const fn end(&self) -> u64 {
        self.end_generation & ADDRESS_MASK
    }

    /// One past the last byte of the free gap after the allocation.
    #[inline]
    pub(crate) const fn gap_end(&self) -> u64 {
        self.gap_end_generation & ADDRESS_MASK
    }

    /// Bytes in the free gap after the allocation (may be zero).
    #[inline]
    pub(crate) const fn gap(&self) -> u64 {
        self.gap_end() - self.end()
    }

    /// The slot's generation: odd while it holds a live allocation.
    #[inline]
    pub(crate) const fn generation(&self) -> u32 {
        (((self.end_generation >> ADDRESS_BITS) << 16) | (self.gap_end_generation >> ADDRESS_BITS))
            as u32
    }

    /// Sets both ends and the generation at once (`end <= gap_end < 2^48`).
    #[inline]
    pub(crate) fn set(&mut self, end: u64, gap_end: u64, generation: u32) {
        debug_assert!(end <= gap_end && gap_end <= ADDRESS_MASK);
        self.end_generation = end | (u64::from(generation >> 16) << ADDRESS_BITS);
        self.gap_end_generation = gap_end | (u64::from(generation & 0xffff) << ADDRESS_BITS);
    }

    /// Moves the end of the gap (`end() <= gap_end < 2^48`).
    #[inline]
    pub(crate) fn set_gap_end(&mut self, gap_end: u64) {
        debug_assert!(self.end() <= gap_end && gap_end <= ADDRESS_MASK);
        self.gap_end_generation = (self.gap_end_generation & !ADDRESS_MASK) | gap_end;
    }

    #[inline]
    pub(crate) fn set_generation(&mut self, generation: u32) {
        let (end, gap_end) = (self.end(), self.gap_end());
        self.set(end, gap_end, generation);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_round_trip_through_the_packing() {
        let mut node = Node::unused(NIL);
        node.set(ADDRESS_MASK - 7, ADDRESS_MASK, 0xdead_beef);
        assert_eq!(node.end(), ADDRESS_MASK - 7);
        assert_eq!(node.gap_end(), ADDRESS_MASK);
        assert_eq!(node.gap(), 7);
        assert_eq!(node.generation(), 0xdead_beef);
        node.set_generation(u32::MAX);
        assert_eq!(node.generation(), u32::MAX);
        node.set_gap_end(ADDRESS_MASK - 3);
        assert_eq!(node.gap_end(), ADDRESS_MASK - 3);
        assert_eq!(node.end(), ADDRESS_MASK - 7);
        assert_eq!(node.generation(), u32::MAX);
    }
}
