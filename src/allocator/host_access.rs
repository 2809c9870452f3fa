//! Flushing and invalidating many allocations at once (VMA's
//! `vmaFlushAllocations` / `vmaInvalidateAllocations`): one
//! `vkFlushMappedMemoryRanges` or `vkInvalidateMappedMemoryRanges` call per
//! pool the allocations live in, instead of one per allocation.

use std::ops::Range;

use gpu_alloc_types::MappedMemoryRange;

use super::{Allocation, Allocator};
use crate::device::{DeviceError, MemoryDeviceExt};
use crate::memory::mapping::atom_range;
use crate::Error;

impl<D: MemoryDeviceExt<M>, M: Send> Allocator<D, M> {
    /// Makes host writes to each `(allocation, range)` visible to the GPU,
    /// as [`flush`](Self::flush) does for one, in one driver call per pool
    /// of the allocations in non-coherent memory (none when all of them
    /// are coherent). Ranges are bytes of their allocation, widened to
    /// `nonCoherentAtomSize` and clamped to the memory object.
    ///
    /// ```
    /// # fn f(allocator: &vk_suballoc::Allocator<vk_suballoc::device::AshMemoryDevice>,
    /// #      vertices: &vk_suballoc::Allocation, uniforms: &vk_suballoc::Allocation)
    /// #      -> Result<(), vk_suballoc::Error> {
    /// allocator.flush_allocations([(vertices, 0..vertices.size()), (uniforms, 0..256)])?;
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    /// As [`flush`](Self::flush), for the first entry that has one; every
    /// entry is checked before anything is flushed. A device error may
    /// come after some pools' ranges were flushed.
    ///
    /// # Time complexity
    /// O(n log n) in the entries (they are grouped by pool), plus one
    /// heap allocation for them.
    pub fn flush_allocations<'a>(
        &self,
        ranges: impl IntoIterator<Item = (&'a Allocation, Range<u64>)>,
    ) -> Result<(), Error> {
        self.flush_or_invalidate_many(ranges.into_iter().collect(), true)
    }

    /// Makes GPU writes to each `(allocation, range)` visible to the host,
    /// as [`invalidate`](Self::invalidate) does for one (and taking each
    /// allocation by `&mut` for the same reason), in one driver call per
    /// pool of the allocations in non-coherent memory.
    ///
    /// # Errors
    /// As [`flush_allocations`](Self::flush_allocations).
    pub fn invalidate_allocations<'a>(
        &self,
        ranges: impl IntoIterator<Item = (&'a mut Allocation, Range<u64>)>,
    ) -> Result<(), Error> {
        let ranges = ranges
            .into_iter()
            .map(|(allocation, range)| (&*allocation, range))
            .collect();
        self.flush_or_invalidate_many(ranges, false)
    }

    fn flush_or_invalidate_many(
        &self,
        mut ranges: Vec<(&Allocation, Range<u64>)>,
        flush: bool,
    ) -> Result<(), Error> {
        for (allocation, range) in &ranges {
            self.check_host_range(allocation, range)?;
        }
        ranges.retain(|(allocation, range)| {
            !range.is_empty() && self.context.is_non_coherent(allocation.memory_type())
        });
        // One group per pool: each is flushed under its pool's lock, where
        // its memory objects can be named.
        ranges.sort_by_key(|(allocation, _)| allocation.home);
        for group in ranges.chunk_by(|(a, _), (b, _)| a.home == b.home) {
            self.with_pool(group[0].0, |pool| {
                let mut mapped = Vec::with_capacity(group.len());
                for (allocation, range) in group {
                    let (memory, memory_size) = pool
                        .memory_at(allocation.location)
                        .ok_or(Error::StaleAllocation)?;
                    mapped.push(self.mapped_range(allocation, range, memory, memory_size));
                }
                self.flush_or_invalidate_ranges(&mapped, flush)
            })??;
        }
        Ok(())
    }

    /// The bytes `range` of `allocation`, in its `memory` of `memory_size`
    /// bytes, widened to `nonCoherentAtomSize` and clamped to the memory.
    pub(super) fn mapped_range<'m>(
        &self,
        allocation: &Allocation,
        range: &Range<u64>,
        memory: &'m M,
        memory_size: u64,
    ) -> MappedMemoryRange<'m, M> {
        let absolute = allocation.offset + range.start..allocation.offset + range.end;
        let atom = self.context.properties.device.non_coherent_atom_size;
        let widened = atom_range(absolute, atom, memory_size);
        MappedMemoryRange {
            memory,
            offset: widened.start,
            size: widened.end - widened.start,
        }
    }

    /// One `vkFlushMappedMemoryRanges` (`flush`) or
    /// `vkInvalidateMappedMemoryRanges` call over `ranges`, made by
    /// [`mapped_range`](Self::mapped_range) under the lock of the pool
    /// holding their memory.
    pub(super) fn flush_or_invalidate_ranges(
        &self,
        ranges: &[MappedMemoryRange<'_, M>],
        flush: bool,
    ) -> Result<(), Error> {
        // SAFETY: each memory object is live (its pool's lock is held) and
        // persistently mapped over its whole size; each range lies inside
        // it and is atom-aligned or ends at its end (`mapped_range`,
        // VUID-VkMappedMemoryRange-memory-00684, -offset-00687,
        // -size-01390); the pool's lock serialises access to its memory
        // objects.
        let result = unsafe {
            if flush {
                self.context.device.flush_memory_ranges(ranges)
            } else {
                self.context.device.invalidate_memory_ranges(ranges)
            }
        };
        result.map_err(|e| Error::from(DeviceError::from(e)))
    }
}
