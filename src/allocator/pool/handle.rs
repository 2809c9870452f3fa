//! The names of a custom pool: [`Pool`], the handle an engine keeps and
//! names in its requests, and the pool's [`PoolTag`] (0 for a memory
//! type's default pool, else a slot of the allocator's table and that
//! slot's generation), which a handle and every allocation carry packed
//! with the memory type in a [`Home`]. Apart from the table because
//! allocations carry them everywhere (`Allocation`, defragmentation),
//! where the table is only a way to find a pool.

use std::num::NonZeroU32;

/// A custom pool: name it in [`AllocationDesc::pool`](crate::AllocationDesc::pool)
/// to allocate from it. A copyable handle;
/// [`Allocator::destroy_pool`](crate::Allocator::destroy_pool) ends it,
/// after which requests naming it fail with
/// [`Error::StalePool`](crate::Error::StalePool).
///
/// Eight bytes, and `Option<Pool>` too: a request carries one.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Pool {
    pub(crate) allocator: u32,
    /// Its memory type and tag as a [`Home`]: never 0, as the tag is a
    /// custom pool's.
    home: NonZeroU32,
}

impl Pool {
    pub(super) fn new(allocator: u32, memory_type: u32, tag: PoolTag) -> Self {
        debug_assert!(tag.slot().is_some());
        // A custom pool's tag is never 0, so neither is its home. Were it,
        // MIN (memory type 1, tag 0: a default pool's) names no custom
        // pool, so the handle would only ever be refused as stale.
        let home = NonZeroU32::new(Home::new(memory_type, tag).0).unwrap_or(NonZeroU32::MIN);
        Self { allocator, home }
    }

    /// The memory type of its blocks.
    pub fn memory_type(&self) -> u32 {
        Home(self.home.get()).memory_type()
    }

    /// Its slot and generation in the allocator's table.
    pub(crate) fn tag(&self) -> PoolTag {
        Home(self.home.get()).pool()
    }
}

impl std::fmt::Debug for Pool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let tag = self.tag();
        f.debug_struct("Pool")
            .field("memory_type", &self.memory_type())
            .field("slot", &tag.slot())
            .field("generation", &tag.generation())
            .field("allocator", &self.allocator)
            .finish()
    }
}

/// Which pool of its memory type an allocation lives in, in 27 bits: 0 for
/// the default pool, else a custom pool's slot plus one (low 11 bits) and
/// that slot's generation (16 bits above).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub(crate) struct PoolTag(u32);

impl PoolTag {
    /// The memory type's default pool.
    pub(crate) const DEFAULT: Self = Self(0);

    pub(super) fn custom(slot: usize, generation: u16) -> Self {
        debug_assert!(slot < MAX_POOLS);
        Self((u32::from(generation) << SLOT_BITS) | (slot as u32 + 1))
    }

    /// The custom pool's slot; `None` for a default pool.
    #[inline]
    pub(crate) fn slot(self) -> Option<usize> {
        ((self.0 & MAX_POOLS as u32) as usize).checked_sub(1)
    }

    pub(super) fn generation(self) -> u16 {
        (self.0 >> SLOT_BITS) as u16
    }
}

/// Bits of a [`PoolTag`] naming the slot.
const SLOT_BITS: u32 = 11;

/// Custom pools at once: slots 0..2046, named by an 11-bit tag minus one.
pub(super) const MAX_POOLS: usize = (1 << SLOT_BITS) - 1;

/// An allocation's memory type (low 5 bits: Vulkan has at most 32) and
/// [`PoolTag`] (the 27 bits above), in the one word the handle has room
/// for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) struct Home(u32);

impl Home {
    /// The home of an allocation of `memory_type` (below 32) in `pool`.
    #[inline]
    pub(crate) fn new(memory_type: u32, pool: PoolTag) -> Self {
        debug_assert!(memory_type < 32);
        Self(memory_type | (pool.0 << 5))
    }

    #[inline]
    pub(crate) fn memory_type(self) -> u32 {
        self.0 & 31
    }

    #[inline]
    pub(crate) fn pool(self) -> PoolTag {
        PoolTag(self.0 >> 5)
    }
}
