//! Ring allocations: [`Allocator::ring_allocate`] and
//! [`Allocator::ring_allocate_mut`] bump-allocate ring space in the
//! current frame, and a growing ring whose chunks are full adds one, made
//! with no lock of the allocator held. The path is written once over the
//! debug work (`RingDebug`, `ring_fill.rs`), so that without debug fills
//! it pays one test. Apart from the making of rings and chunks
//! (`upload_rings.rs`), as the rings' hot path: one call per transient
//! upload.

use crate::allocator::ring_fill::{NoRingFill, RingDebug, RingFill};
use crate::allocator::{exclusive, lock, Allocator};
use crate::device::MemoryDeviceExt;
use crate::frames::upload_ring::{OwnedChunkSpec, RingState};
use crate::frames::{RingAllocation, UploadRing};
use crate::offset::LinearAllocation;
use crate::Error;

impl<D: MemoryDeviceExt<M>, M: Send> Allocator<D, M> {
    /// Allocates `size` bytes at a multiple of `align` (relative to the ring
    /// buffer) in the current frame.
    ///
    /// # Errors
    /// In this order: [`Error::ForeignAllocation`] for another allocator's
    /// ring; [`Error::StaleAllocation`] for a destroyed ring;
    /// [`Error::ZeroSize`], [`Error::AlignmentNotPowerOfTwo`];
    /// [`Error::UploadRingTooSmall`] when `size` exceeds a ring that does
    /// not grow; [`Error::UploadRingFull`] when frames in flight hold the
    /// space (or a collected frame that a [`ring_write`](Self::ring_write)
    /// on another thread still copies into) and the ring does not grow.
    /// When a growing ring adds a chunk, the allocation errors of its
    /// memory ([`Error::SizeExceedsHeaps`] for a request larger than the
    /// heap of every memory type that suits the ring's usage, however
    /// large, then [`Error::SizeExceedsMaxAllocation`] for a chunk past
    /// `maxMemoryAllocationSize`; no buffer is made then),
    /// [`Error::SizeExceedsMaxBuffer`] for a chunk (the ring's size, or
    /// `size` if larger) past the device's `maxBufferSize` (no buffer is
    /// made then either), and the failures of its buffer's creation.
    ///
    /// A growing ring makes its new chunk with no lock of the allocator
    /// held (but the pool's it allocates from), so other threads'
    /// [`end_frame`](Self::end_frame), [`collect`](Self::collect) and ring
    /// allocations do not wait for the driver; the allocation is made once
    /// the chunk is in, in the frame current then. Should room have been
    /// made in the ring meanwhile (by another thread's chunk, a collect, or
    /// the end of a [`ring_write`](Self::ring_write) that held a collected
    /// frame's space), the allocation goes there and the new chunk is
    /// freed; should the ring
    /// have been destroyed meanwhile, the chunk is freed and the call fails
    /// with [`Error::StaleAllocation`].
    ///
    /// With [`Config::debug_fill`](crate::Config::debug_fill), in a
    /// host-visible memory type, the bytes handed out, and those skipped
    /// before them (alignment padding, or the end of the ring when the
    /// allocation wraps to its start), are checked to still read `0xEF`
    /// (a byte that does not was written after its frame was collected:
    /// logged with `log::error!` once the rings' lock is released, and
    /// counted in [`corruptions_detected`](Self::corruptions_detected));
    /// then the bytes handed out are filled with `0xDC`. A panic of the
    /// device backend in the flush or invalidate of that work, or of the
    /// logger, reaches the caller with the allocation dropped: its space
    /// comes back with its frame.
    ///
    /// # Time complexity
    /// O(1): a bump in the newest chunk. A growing ring whose newest chunk
    /// is full tries its older ones, O(chunks of the ring), and when none
    /// has room makes a chunk as
    /// [`create_upload_ring_unchecked`](Self::create_upload_ring_unchecked)
    /// makes its first (the same locks): a `vkCreateBuffer`, a query of its
    /// memory requirements, an [`allocate`](Self::allocate), a
    /// `vkBindBufferMemory` (and a `vkGetBufferDeviceAddress` for buffers
    /// that take device addresses), and should room have been made
    /// meanwhile, the chunk's destruction and [`free`](Self::free). But
    /// while a collected frame's space waits for a
    /// [`ring_write`](Self::ring_write) (and until the first ring call
    /// after it), each call retries that reclaim, O(chunks of every ring).
    /// With debug fills, O(`size`) more, and O(bytes) for the space a
    /// retried reclaim gives back.
    pub fn ring_allocate(
        &self,
        ring: UploadRing,
        size: u64,
        align: u64,
    ) -> Result<RingAllocation, Error> {
        if ring.allocator != self.id {
            return Err(Error::ForeignAllocation);
        }
        // The one test the path pays without debug fills.
        if self.context.fill_types() != 0 {
            return self.ring_allocate_filled(ring, size, align);
        }
        self.ring_allocate_with(ring, size, align, &mut NoRingFill)
    }

    /// [`ring_allocate`](Self::ring_allocate) with debug fills on in some
    /// memory type: the ring space given back meanwhile is filled, and
    /// the bytes handed out checked and filled (`ring_fill.rs`); the
    /// lines found are logged, and a panic of the backend in a flush or
    /// invalidate goes on, once the rings' lock is released. The
    /// allocation is dropped then, handed to nobody: its space comes back
    /// with its frame.
    #[cold]
    #[inline(never)]
    fn ring_allocate_filled(
        &self,
        ring: UploadRing,
        size: u64,
        align: u64,
    ) -> Result<RingAllocation, Error> {
        let mut fill = RingFill::new(self);
        let allocation = self.ring_allocate_with(ring, size, align, &mut fill);
        fill.finish();
        allocation
    }

    /// [`ring_allocate`](Self::ring_allocate) through `&mut self`: the
    /// same allocation, with no lock taken, for an engine that owns the
    /// allocator on one thread or behind its own lock (as
    /// [`allocate_mut`](Self::allocate_mut)). A growing ring that adds a
    /// chunk, and every call while debug fills are on in some memory type,
    /// take the rings' lock as `ring_allocate` does (uncontended here).
    ///
    /// # Errors
    /// Those of [`ring_allocate`](Self::ring_allocate), in its order.
    ///
    /// # Time complexity
    /// As [`ring_allocate`](Self::ring_allocate).
    pub fn ring_allocate_mut(
        &mut self,
        ring: UploadRing,
        size: u64,
        align: u64,
    ) -> Result<RingAllocation, Error> {
        if ring.allocator != self.id {
            return Err(Error::ForeignAllocation);
        }
        if self.context.fill_types() != 0 {
            return self.ring_allocate_filled(ring, size, align);
        }
        // `ring_allocate_with`'s first try, through `&mut` instead of the
        // lock. (Written out in both: a function shared by the two returns
        // the allocation through a temporary, 15 instructions a call more.)
        let rings = exclusive(&mut self.rings);
        rings.retry_owed(&mut |_, _| {});
        let frame = rings.current_frame;
        let state = rings
            .rings
            .get_mut(ring.key)
            .ok_or(Error::StaleAllocation)?;
        let spec = match state.allocate(size, align) {
            Ok((chunk, placed, _)) => return ring_allocation(ring, state, chunk, placed, frame),
            Err(Error::UploadRingFull { .. } | Error::UploadRingTooSmall { .. }) if state.grow => {
                state.chunk_spec_owned()
            }
            Err(error) => return Err(error),
        };
        self.grow_and_allocate(ring, size, align, spec, &mut NoRingFill)
    }

    /// [`ring_allocate`](Self::ring_allocate) past its checks, with the
    /// debug work of `debug` (none without debug fills: [`NoRingFill`]).
    #[inline(always)]
    fn ring_allocate_with(
        &self,
        ring: UploadRing,
        size: u64,
        align: u64,
        debug: &mut impl RingDebug,
    ) -> Result<RingAllocation, Error> {
        let mut rings = lock(&self.rings);
        // Space a write held up may have come back since.
        rings.retry_owed(&mut |chunk, space| debug.reclaimed(chunk, space));
        let frame = rings.current_frame;
        let state = rings
            .rings
            .get_mut(ring.key)
            .ok_or(Error::StaleAllocation)?;
        let spec = match state.allocate(size, align) {
            Ok((chunk, placed, from)) => {
                debug.placed(state, chunk, &placed, from);
                return ring_allocation(ring, state, chunk, placed, frame);
            }
            Err(Error::UploadRingFull { .. } | Error::UploadRingTooSmall { .. }) if state.grow => {
                state.chunk_spec_owned()
            }
            Err(error) => return Err(error),
        };
        drop(rings);
        self.grow_and_allocate(ring, size, align, spec, debug)
    }

    /// A ring allocation for which a growing ring found no room in its
    /// chunks: makes a chunk of `spec` (or of `size`, if larger) with no
    /// lock of the allocator held, then allocates there, or in room made
    /// meanwhile (the chunk is freed then).
    #[inline(never)]
    fn grow_and_allocate(
        &self,
        ring: UploadRing,
        size: u64,
        align: u64,
        spec: OwnedChunkSpec,
        debug: &mut impl RingDebug,
    ) -> Result<RingAllocation, Error> {
        // Offsets are relative to a chunk's buffer, so offset 0 of the new
        // chunk meets any alignment: `size` bytes are enough.
        let chunk_size = spec.chunk_size.max(size);
        let mut chunk = self.create_ring_chunk(&spec.borrow(), chunk_size)?;

        let mut rings = lock(&self.rings);
        // A write that held up the space this call found full may be over
        // now: that space is room made meanwhile, as a collect's.
        rings.retry_owed(&mut |chunk, space| debug.reclaimed(chunk, space));
        let frame = rings.current_frame;
        let Some(state) = rings.rings.get_mut(ring.key) else {
            drop(rings);
            self.discard_ring_chunk(chunk);
            return Err(Error::StaleAllocation);
        };
        let (spare, found) = match state.allocate(size, align) {
            Ok(found) => (Some(chunk), Ok(found)),
            Err(Error::UploadRingFull { .. } | Error::UploadRingTooSmall { .. }) => {
                chunk.first_frame = frame;
                state.chunks.push(chunk);
                (None, state.allocate(size, align))
            }
            Err(error) => (Some(chunk), Err(error)),
        };
        let allocation = found.and_then(|(chunk, placed, from)| {
            debug.placed(state, chunk, &placed, from);
            ring_allocation(ring, state, chunk, placed, frame)
        });
        drop(rings);
        if let Some(spare) = spare {
            self.discard_ring_chunk(spare);
        }
        allocation
    }
}

/// The handle to `placed`, made in chunk `chunk` of `state` (ring `ring`)
/// in allocator frame `frame`.
fn ring_allocation(
    ring: UploadRing,
    state: &RingState,
    chunk: usize,
    placed: LinearAllocation,
    frame: u64,
) -> Result<RingAllocation, Error> {
    let chunk_state = state.chunks.get(chunk).ok_or(Error::StaleAllocation)?;
    let mapped = chunk_state
        .allocation
        .mapped
        .map(|mapped| mapped.add(placed.offset));
    Ok(RingAllocation {
        ring,
        chunk: chunk as u32,
        buffer: chunk_state.buffer,
        buffer_offset: placed.offset,
        memory: chunk_state.allocation.memory(),
        memory_offset: chunk_state.allocation.offset() + placed.offset,
        size: placed.size,
        frame,
        mapped,
        device_address: chunk_state
            .device_address
            .map(|address| address + placed.offset),
    })
}
