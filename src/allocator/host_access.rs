//! The host's access to allocations in host-visible memory: their mapped
//! bytes, flushes and invalidations (one allocation's, or many at once with
//! one driver call per pool, VMA's `vmaFlushAllocations`), and copies that
//! flush or invalidate for the caller.

use std::ops::{Bound, Range, RangeBounds};

use gpu_alloc_types::MappedMemoryRange;

use super::{Allocation, Allocator};
use crate::device::{DeviceError, MemoryDeviceExt};
use crate::memory::mapping::atom_range;
use crate::Error;

impl<D: MemoryDeviceExt<M>, M: Send> Allocator<D, M> {
    /// The bytes of a host-visible allocation, to read.
    ///
    /// The slice has the allocation's [`size`](Allocation::size): for a
    /// resource made by the helpers that is the driver's figure, which can
    /// exceed the buffer's own size (NVIDIA rounds it up to 16 bytes). Index
    /// the buffer's bytes (`&slice[..len]`) before comparing or copying.
    ///
    /// On non-coherent memory, GPU writes show here only after
    /// [`invalidate`](Self::invalidate) of their bytes (after the GPU's
    /// work is done and made available to the host); until then the slice
    /// may hold stale bytes from the host's cache.
    /// [`copy_from_allocation`](Self::copy_from_allocation) invalidates and
    /// copies in one call. On coherent memory the writes show at once.
    ///
    /// # Errors
    /// [`Error::ForeignAllocation`], [`Error::NotHostVisible`];
    /// [`Error::MapFailed`] when the allocation is larger than a slice may
    /// be, `isize::MAX` bytes (more than 2 GiB, on 32-bit hosts).
    pub fn mapped_slice<'a>(&'a self, allocation: &'a Allocation) -> Result<&'a [u8], Error> {
        self.check_owner(allocation)?;
        let mapped = allocation.mapped.ok_or(Error::NotHostVisible)?;
        let len = mapped_len(allocation.size)?;
        // SAFETY:
        // - the pointer is the persistent mapping of the allocation's memory
        //   plus its offset, and `len` bytes from it are inside the mapping:
        //   blocks stay mapped until released, and a block holding a live
        //   allocation (this one: its handle exists, so it was not freed) is
        //   never released while the allocator, borrowed for 'a, lives;
        // - `len` is at most `isize::MAX` (`mapped_len`), as a slice's
        //   length must be;
        // - no other allocation overlaps this range (the offset allocator's
        //   invariant), and a `&mut` to it needs `&mut Allocation`, which the
        //   shared borrow of `allocation` excludes for 'a.
        Ok(unsafe { std::slice::from_raw_parts(mapped.0.as_ptr(), len) })
    }

    /// The bytes of a host-visible allocation, to write (or read).
    ///
    /// As with [`mapped_slice`](Self::mapped_slice), the slice can be longer
    /// than the buffer: copy into its front,
    /// `allocator.mapped_slice_mut(&mut allocation)?[..bytes.len()].copy_from_slice(bytes)`,
    /// since `copy_from_slice` panics when the lengths differ.
    ///
    /// Writes reach the GPU after [`flush`](Self::flush) on non-coherent memory.
    ///
    /// # Errors
    /// As [`mapped_slice`](Self::mapped_slice).
    pub fn mapped_slice_mut<'a>(
        &'a self,
        allocation: &'a mut Allocation,
    ) -> Result<&'a mut [u8], Error> {
        self.check_owner(allocation)?;
        let mapped = allocation.mapped.ok_or(Error::NotHostVisible)?;
        let len = mapped_len(allocation.size)?;
        // SAFETY: as in `mapped_slice`, and the exclusive borrow of the
        // allocation for 'a makes this the only slice of its bytes.
        Ok(unsafe { std::slice::from_raw_parts_mut(mapped.0.as_ptr(), len) })
    }

    /// Makes host writes to `range` (bytes of the allocation: `..` for all
    /// of them, `16..`, `0..len`, `0..=last`) visible to the GPU. A no-op on
    /// coherent memory; on non-coherent memory the range is widened to
    /// `nonCoherentAtomSize` and clamped to the memory object.
    ///
    /// Ranges are in bytes of the allocation, not of its memory object, and
    /// `vk::WHOLE_SIZE` is not special: `0..vk::WHOLE_SIZE` is refused as
    /// out of bounds. Write `..` (or `offset..`) for "to the end".
    ///
    /// The widened atoms are flushed whole, with whatever the host's view
    /// holds in their other bytes, and the driver may write them back over
    /// what the GPU wrote there. Widening never reaches another
    /// allocation (in non-coherent memory each starts on an atom, so the
    /// atoms over one reach at most the free bytes before the next), but
    /// it does reach this allocation's
    /// bytes around `range`: keep bytes the GPU writes and bytes the host
    /// writes in different atoms of an allocation, or in different
    /// allocations.
    ///
    /// # Errors
    /// [`Error::ForeignAllocation`]; [`Error::RangeOutOfBounds`] for a range
    /// past the allocation's end or reversed (`10..5`);
    /// [`Error::NotHostVisible`] for unmapped memory, even with an empty range
    /// (an empty range of mapped memory is `Ok`);
    /// [`Error::StaleAllocation`] for a handle whose allocation was freed
    /// (as for [`free`](Self::free), only a forged handle gets it), found
    /// where there is something to flush: on coherent memory, and for an
    /// empty range, nothing is looked up, and such a handle gets `Ok`;
    /// device errors.
    ///
    /// # Time complexity
    /// O(1): nothing on coherent memory; else, under the lock of the
    /// allocation's pool, one `vkFlushMappedMemoryRanges` call.
    pub fn flush(
        &self,
        allocation: &Allocation,
        range: impl RangeBounds<u64>,
    ) -> Result<(), Error> {
        self.flush_or_invalidate(allocation, byte_range(&range, allocation.size), true)
    }

    /// Makes GPU writes to `range` visible to the host. A no-op on coherent
    /// memory; widened and clamped as [`flush`](Self::flush).
    ///
    /// On non-coherent memory host writes not yet flushed are lost in every
    /// atom the widened range covers, not only in `range`: with a 256-byte
    /// atom, `invalidate(&mut readback, 0..4)` drops unflushed host writes
    /// to bytes `4..256` of the allocation as well ("If a range of
    /// non-coherent memory is written by the host and then invalidated
    /// without first being flushed, its contents are undefined"). Flush
    /// host writes, or keep them in other atoms, before invalidating.
    ///
    /// It takes the allocation by `&mut` because on non-coherent memory it
    /// changes the bytes the host sees (and drops host writes not yet
    /// flushed), so no slice of the allocation may be alive across it. A
    /// shared borrow does not do:
    ///
    /// ```compile_fail,E0308
    /// # fn f(allocator: &vk_suballoc::Allocator<vk_suballoc::device::AshMemoryDevice>,
    /// #      readback: vk_suballoc::Allocation) {
    /// let bytes = allocator.mapped_slice(&readback).unwrap();
    /// allocator.invalidate(&readback, 0..64).unwrap(); // error: expected `&mut Allocation`
    /// let first = bytes[0];
    /// # }
    /// ```
    ///
    /// and with `&mut readback` there, the borrow checker refuses it while
    /// `bytes` lives:
    ///
    /// ```compile_fail,E0502
    /// # fn f(allocator: &vk_suballoc::Allocator<vk_suballoc::device::AshMemoryDevice>,
    /// #      mut readback: vk_suballoc::Allocation) {
    /// let bytes = allocator.mapped_slice(&readback).unwrap();
    /// allocator.invalidate(&mut readback, 0..64).unwrap(); // error: `readback` is borrowed
    /// let first = bytes[0];
    /// # }
    /// ```
    ///
    /// Invalidate first, then take the slice:
    ///
    /// ```
    /// # fn f(allocator: &vk_suballoc::Allocator<vk_suballoc::device::AshMemoryDevice>,
    /// #      mut readback: vk_suballoc::Allocation) {
    /// allocator.invalidate(&mut readback, 0..64).unwrap();
    /// let first = allocator.mapped_slice(&readback).unwrap()[0];
    /// # }
    /// ```
    ///
    /// Atom widening never reaches another allocation's bytes, small
    /// buffers in run slots included: allocations in non-coherent memory
    /// start on a `nonCoherentAtomSize` boundary, so the atom that holds an
    /// allocation's last byte holds no other allocation's.
    ///
    /// # Errors
    /// As [`flush`](Self::flush).
    ///
    /// # Time complexity
    /// As [`flush`](Self::flush), with `vkInvalidateMappedMemoryRanges`.
    pub fn invalidate(
        &self,
        allocation: &mut Allocation,
        range: impl RangeBounds<u64>,
    ) -> Result<(), Error> {
        self.flush_or_invalidate(allocation, byte_range(&range, allocation.size), false)
    }

    /// Copies `bytes` into a host-visible allocation at `offset`, then
    /// flushes them (VMA's `vmaCopyMemoryToAllocation`): the one call an
    /// upload needs on any memory type, coherent or not.
    ///
    /// ```
    /// # fn f(allocator: &vk_suballoc::Allocator<vk_suballoc::device::AshMemoryDevice>,
    /// #      mut staging: vk_suballoc::Allocation) -> Result<(), vk_suballoc::Error> {
    /// let vertices = [0u8; 256];
    /// allocator.copy_to_allocation(&mut staging, 0, &vertices)?;
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    /// [`Error::ForeignAllocation`]; [`Error::RangeOutOfBounds`] when
    /// `offset + bytes.len()` passes the allocation's end (nothing is
    /// written); [`Error::NotHostVisible`]; [`Error::StaleAllocation`] for
    /// a handle whose allocation was freed (only a forged handle), on any
    /// memory type, before anything is written (for empty `bytes`, which
    /// write nothing, nothing is looked up and such a handle gets `Ok`, as
    /// from [`flush`](Self::flush)); [`Error::MapFailed`] as
    /// [`mapped_slice`](Self::mapped_slice) gives it (an allocation of more
    /// than 2 GiB on a 32-bit host); the flush's device errors.
    ///
    /// # Time complexity
    /// O(`bytes.len()`) for the copy, made with no lock held; before it,
    /// O(1) under the lock of the allocation's pool (the handle's check);
    /// and a [`flush`](Self::flush).
    pub fn copy_to_allocation(
        &self,
        allocation: &mut Allocation,
        offset: u64,
        bytes: &[u8],
    ) -> Result<(), Error> {
        let range = self.copy_range(allocation, offset, bytes.len())?;
        if !range.is_empty() {
            self.check_live(allocation)?;
        }
        let slice = self.mapped_slice_mut(allocation)?;
        slice[slice_range(&range)].copy_from_slice(bytes);
        self.flush(allocation, range)
    }

    /// Invalidates `out.len()` bytes of a host-visible allocation at
    /// `offset`, then copies them into `out` (VMA's
    /// `vmaCopyAllocationToMemory`): the one call a readback needs on any
    /// memory type.
    ///
    /// ```
    /// # fn f(allocator: &vk_suballoc::Allocator<vk_suballoc::device::AshMemoryDevice>,
    /// #      mut readback: vk_suballoc::Allocation) -> Result<(), vk_suballoc::Error> {
    /// let mut pixels = vec![0u8; 4096];
    /// allocator.copy_from_allocation(&mut readback, 0, &mut pixels)?;
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// As with [`invalidate`](Self::invalidate), host writes to the
    /// allocation not yet flushed may be lost on non-coherent memory, in
    /// the whole atoms around the bytes read.
    ///
    /// # Errors
    /// As [`copy_to_allocation`](Self::copy_to_allocation) (a forged stale
    /// handle gets [`Error::StaleAllocation`] before anything is read, on
    /// any memory type); `out` is left as it was on error.
    ///
    /// # Time complexity
    /// An [`invalidate`](Self::invalidate) (on coherent memory, O(1) under
    /// the lock of the allocation's pool for the handle's check instead),
    /// and O(`out.len()`) for the copy, made with no lock held.
    pub fn copy_from_allocation(
        &self,
        allocation: &mut Allocation,
        offset: u64,
        out: &mut [u8],
    ) -> Result<(), Error> {
        let range = self.copy_range(allocation, offset, out.len())?;
        // The invalidate looks the allocation up where it has something to
        // do (non-coherent memory); on coherent memory, the check does.
        if !range.is_empty() && !self.context.is_non_coherent(allocation.memory_type()) {
            self.check_live(allocation)?;
        }
        self.invalidate(allocation, range.clone())?;
        out.copy_from_slice(&self.mapped_slice(allocation)?[slice_range(&range)]);
        Ok(())
    }

    /// [`Error::StaleAllocation`] unless `allocation` is live (the lookup
    /// a flush makes, under the lock of its pool): before a copy touches
    /// its bytes, which a forged handle's freed range may have given to
    /// another allocation.
    fn check_live(&self, allocation: &Allocation) -> Result<(), Error> {
        self.with_pool(allocation, |pool| {
            pool.memory_at(allocation.location).is_some()
        })?
        .then_some(())
        .ok_or(Error::StaleAllocation)
    }

    /// The bytes `offset..offset + len` of `allocation`, checked as a flush
    /// checks them ([`check_host_range`](Self::check_host_range)).
    fn copy_range(
        &self,
        allocation: &Allocation,
        offset: u64,
        len: usize,
    ) -> Result<Range<u64>, Error> {
        // Past the end either way when `offset + len` overflows.
        let range = offset..offset.saturating_add(u64::try_from(len).unwrap_or(u64::MAX));
        self.check_host_range(allocation, &range)?;
        Ok(range)
    }

    /// The checks of a flush or invalidate of `range`: the allocation is
    /// this allocator's, the range lies within it, and it is mapped.
    fn check_host_range(&self, allocation: &Allocation, range: &Range<u64>) -> Result<(), Error> {
        self.check_owner(allocation)?;
        if range.start > range.end || range.end > allocation.size {
            return Err(Error::RangeOutOfBounds {
                start: range.start,
                end: range.end,
                size: allocation.size,
            });
        }
        if allocation.mapped.is_none() {
            return Err(Error::NotHostVisible);
        }
        Ok(())
    }

    /// [`flush`](Self::flush) (`flush`) or [`invalidate`](Self::invalidate)
    /// of `range`, bytes of `allocation`, for a caller that may borrow it
    /// shared: the debug fills of upload rings (`ring_fill.rs`), which
    /// invalidate only bytes no one writes.
    pub(super) fn flush_or_invalidate(
        &self,
        allocation: &Allocation,
        range: Range<u64>,
        flush: bool,
    ) -> Result<(), Error> {
        self.check_host_range(allocation, &range)?;
        if range.is_empty() || !self.context.is_non_coherent(allocation.memory_type()) {
            return Ok(());
        }
        self.with_pool(allocation, |pool| {
            let (memory, memory_size) = pool
                .memory_at(allocation.location)
                .ok_or(Error::StaleAllocation)?;
            let ranges = [self.mapped_range(allocation, &range, memory, memory_size)];
            self.flush_or_invalidate_ranges(&ranges, flush)
        })?
    }

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
    /// As [`flush`](Self::flush), for the first entry that has one: every
    /// entry's owner and range are checked before anything is flushed. An
    /// allocation no longer live ([`Error::StaleAllocation`], which only a
    /// handle forged past the type system can be) and a device error are
    /// found pool by pool, so they may come after other pools' ranges
    /// were flushed.
    ///
    /// # Time complexity
    /// O(n log n) in the entries (they are grouped by pool, with a stable
    /// sort), plus heap allocations: one for the entries, the sort's
    /// scratch space when there are more than a few, and one per pool with
    /// non-coherent entries for the ranges handed to the driver (two for a
    /// pool with more than one such entry on
    /// [`AshMemoryDevice`](crate::device::AshMemoryDevice), which copies
    /// them into `VkMappedMemoryRange`s).
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

/// `range` as a half-open range of an allocation of `size` bytes: an open
/// end is `size`, an open start 0; an inclusive end of `u64::MAX` stays
/// `u64::MAX` (past any allocation, so refused as out of bounds).
pub(crate) fn byte_range(range: &impl RangeBounds<u64>, size: u64) -> Range<u64> {
    let start = match range.start_bound() {
        Bound::Included(&start) => start,
        Bound::Excluded(&start) => start.saturating_add(1),
        Bound::Unbounded => 0,
    };
    let end = match range.end_bound() {
        Bound::Included(&last) => last.saturating_add(1),
        Bound::Excluded(&end) => end,
        Bound::Unbounded => size,
    };
    start..end
}

/// The length of a mapped slice of an allocation of `size` bytes:
/// [`Error::MapFailed`] past `isize::MAX`, the most bytes a slice may span
/// (`slice::from_raw_parts`), which only a 32-bit host's mapping can
/// reach (a host-visible allocation of more than 2 GiB there).
fn mapped_len(size: u64) -> Result<usize, Error> {
    usize::try_from(size)
        .ok()
        .filter(|&len| isize::try_from(len).is_ok())
        .ok_or(Error::MapFailed)
}

/// A range checked against an allocation's mapped slice as a slice index.
/// Its ends fit `usize`: the slice, which is that long, exists.
fn slice_range(range: &Range<u64>) -> Range<usize> {
    let index = |at: u64| usize::try_from(at).unwrap_or(usize::MAX);
    index(range.start)..index(range.end)
}

#[cfg(all(test, feature = "fake-device"))]
mod stale_handle_tests;

#[cfg(test)]
mod tests {
    use super::*;

    /// A mapped slice spans at most `isize::MAX` bytes, as
    /// `slice::from_raw_parts` requires of every slice: a longer mapping
    /// (only a 32-bit host's can be) is refused as `MapFailed` rather than
    /// made into a slice, which would be undefined behaviour.
    #[test]
    fn mapped_slices_are_at_most_isize_max_bytes() {
        let most = isize::MAX as u64;
        assert_eq!(mapped_len(most), Ok(isize::MAX as usize));
        assert_eq!(mapped_len(1000), Ok(1000));
        assert_eq!(mapped_len(most + 1), Err(Error::MapFailed));
        assert_eq!(mapped_len(u64::MAX), Err(Error::MapFailed));
    }
}
