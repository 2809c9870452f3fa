//! Copying into ring allocations and flushing them:
//! [`Allocator::ring_write`] copies and flushes
//! ([`Allocator::ring_flush`] flushes bytes written in place) with no lock
//! of the allocator held, the allocation's frame
//! pinned in its chunk (`ChunkPins`) so that no collect reclaims its space
//! or frees the chunk under the copy, and writes into one chunk take
//! turns. Apart from the allocation of ring space (`ring_allocate.rs`): it
//! works on a ring allocation handed out already, and checks that its
//! frame still owns its space (`RingChunk::holds_frame`, here).

use std::ops::{Range, RangeBounds};

use crate::allocator::host_access::byte_range;
use crate::allocator::{lock, Allocator};
use crate::device::MemoryDeviceExt;
use crate::frames::upload_ring::RingChunk;
use crate::frames::RingAllocation;
use crate::Error;

impl<D: MemoryDeviceExt<M>, M: Send> Allocator<D, M> {
    /// Copies `bytes` into a ring allocation at `offset`, and flushes them
    /// when the ring's memory is not coherent.
    ///
    /// The copy and the flush are made with no lock of the allocator held
    /// (but, for the flush, the lock of the pool the ring's memory comes
    /// from, as [`flush`](Self::flush) takes it): other threads' ring calls,
    /// [`end_frame`](Self::end_frame) and [`collect`](Self::collect) do not
    /// wait for a write of many megabytes (with
    /// [`Config::debug_fill`](crate::Config::debug_fill) in non-coherent
    /// memory, those that fill ring space take that pool's lock, so they
    /// may wait for the flush, not for the copy). The call pins its allocation's
    /// frame in its chunk (under the upload rings' lock, briefly, as its
    /// checks are made) until the copy and the flush are over, and what
    /// would pull the memory from under it waits for that, never blocking:
    /// a `collect` (or [`collect_idle`](Self::collect_idle)) that finishes
    /// the frame makes the allocation stale at once (later writes get
    /// [`Error::StaleAllocation`]) but hands its bytes to later ring
    /// allocations only once the write is over, at the next `collect`,
    /// `end_frame` or `ring_allocate`; and a ring
    /// [destroyed](Self::destroy_upload_ring) meanwhile keeps its memory
    /// until a `collect` after the write. Only a `collect_idle` finding a
    /// chunk with as many sealed frames as it can hold, the oldest pinned,
    /// waits for the write, with no lock held.
    ///
    /// Writes into the same chunk of a ring take turns (copy and flush):
    /// two writes into one allocation (a [`RingAllocation`] is `Copy`) would
    /// race on its bytes, and on non-coherent memory ring allocations,
    /// packed at their own alignment, share `nonCoherentAtomSize` atoms with
    /// their neighbours, which a flush covers whole, so a driver that
    /// flushes by copying the host's bytes would read bytes another write
    /// is copying. Writes into different chunks do not wait for each other.
    ///
    /// # Errors
    /// In this order: [`Error::ForeignAllocation`] for another allocator's
    /// ring; [`Error::RangeOutOfBounds`]; [`Error::NotHostVisible`] in
    /// memory the host cannot see (a ring of GPU-only usage:
    /// [`RingAllocation::mapped_ptr`] is `None`);
    /// [`Error::StaleAllocation`] when
    /// the allocation's frame was collected already (its bytes belong to
    /// later frames now) or the ring was destroyed; on non-coherent memory,
    /// the flush's device errors (the bytes are copied then).
    ///
    /// # Time complexity
    /// O(1) under the rings' lock; the copy is O(`bytes.len()`); then, on
    /// non-coherent memory, one `vkFlushMappedMemoryRanges` call under the
    /// lock of the pool the ring's memory comes from, as
    /// [`ring_flush`](Self::ring_flush).
    pub fn ring_write(
        &self,
        allocation: &RingAllocation,
        offset: u64,
        bytes: &[u8],
    ) -> Result<(), Error> {
        let end = offset.saturating_add(bytes.len() as u64);
        self.ring_access(allocation, offset..end, Some(bytes))
    }

    /// Flushes bytes written in place, through
    /// [`RingAllocation::mapped_ptr`], when the ring's memory is not
    /// coherent (a no-op but for the checks on coherent memory), as
    /// [`flush`](Self::flush) does for an allocation: `range` is in bytes
    /// of the ring allocation (`..` for all of them, `16..`, `0..len`).
    /// [`ring_write`](Self::ring_write) copies and flushes in one call;
    /// this is for data built in the ring's memory itself.
    ///
    /// The flush is widened to `nonCoherentAtomSize`, and ring allocations,
    /// packed at their own alignment, share atoms with their neighbours:
    /// it flushes what the host's view holds of their bytes in those atoms
    /// too. It pins the allocation's frame and takes its turn in the chunk
    /// as `ring_write` does, so it never runs beside a `ring_write` into
    /// the same chunk; bytes written in place into a neighbour in a shared
    /// atom by another thread during the call are that thread's to order
    /// (a driver flushes a cache, but `FakeDevice` copies the host's bytes),
    /// and an allocation aligned to `nonCoherentAtomSize` whose size is a
    /// multiple of it shares no atom.
    ///
    /// # Errors
    /// As [`ring_write`](Self::ring_write): [`Error::ForeignAllocation`];
    /// [`Error::RangeOutOfBounds`] for a range past the allocation's end or
    /// reversed (`10..5`); [`Error::NotHostVisible`] in memory the host
    /// cannot see, even for an empty range (as [`flush`](Self::flush));
    /// [`Error::StaleAllocation`] when its frame was
    /// collected or the ring destroyed; the flush's device errors.
    ///
    /// # Time complexity
    /// O(1): under the rings' lock briefly, then, on non-coherent memory,
    /// one `vkFlushMappedMemoryRanges` call under the lock of the pool the
    /// ring's memory comes from.
    pub fn ring_flush(
        &self,
        allocation: &RingAllocation,
        range: impl RangeBounds<u64>,
    ) -> Result<(), Error> {
        self.ring_access(allocation, byte_range(&range, allocation.size), None)
    }

    /// [`ring_write`](Self::ring_write) of `bytes` (as many as `range`
    /// holds) at `range.start`, or, without bytes,
    /// [`ring_flush`](Self::ring_flush) of `range`: the checks, the pin and
    /// the turn, the copy, the flush.
    fn ring_access(
        &self,
        allocation: &RingAllocation,
        range: Range<u64>,
        bytes: Option<&[u8]>,
    ) -> Result<(), Error> {
        if allocation.ring.allocator != self.id {
            return Err(Error::ForeignAllocation);
        }
        if range.start > range.end || range.end > allocation.size {
            return Err(Error::RangeOutOfBounds {
                start: range.start,
                end: range.end,
                size: allocation.size,
            });
        }
        // A ring of GPU-only usage in memory the host cannot see.
        let Some(mapped) = allocation.mapped else {
            return Err(Error::NotHostVisible);
        };
        let (offset, len) = (range.start, range.end - range.start);
        let (pin, memory) = {
            let rings = lock(&self.rings);
            if allocation.frame < rings.next_uncollected {
                return Err(Error::StaleAllocation);
            }
            let state = rings
                .rings
                .get(allocation.ring.key)
                .ok_or(Error::StaleAllocation)?;
            let chunk = state
                .chunks
                .get(allocation.chunk as usize)
                .ok_or(Error::StaleAllocation)?;
            if !chunk.holds_frame(allocation.frame) {
                return Err(Error::StaleAllocation);
            }
            // Under the lock, after the checks: the frame is live in the
            // chunk, and nothing reclaims it or frees the chunk while the
            // pin is held (`ChunkPins`). Dropped on return or unwind.
            let pin = chunk.pin(allocation.frame - chunk.first_frame);
            (pin, chunk.allocation.host_view())
        };
        let flushed = {
            // One write into the chunk at a time: another may copy into
            // the same bytes (the same allocation), or, on non-coherent
            // memory, into atoms this flush covers (`ChunkPins`).
            let _turn = pin.take_turn();
            if let Some(bytes) = bytes {
                // SAFETY: the destination lies inside the ring allocation (checked
                // above), which lies inside the chunk's persistent mapping. The pin
                // keeps both in place with the rings' lock released: the chunk's
                // memory is freed (and unmapped) only once no pin is left on it
                // (`Rings::sort_ring_chunks`; the allocator's drop takes `&mut
                // self`, so no write is in progress then), and the frame's space is
                // not reclaimed, so no later ring allocation overlaps these bytes,
                // while its pin is held (`RingChunk::reclaim_through`). `bytes` is
                // a separate Rust slice, so the ranges do not overlap.
                unsafe {
                    std::ptr::copy_nonoverlapping(
                        bytes.as_ptr(),
                        mapped.add(offset).0.as_ptr(),
                        bytes.len(),
                    );
                }
            }
            let start = allocation.buffer_offset + offset;
            // While the memory is mapped still: the pin is dropped after it.
            self.flush(&memory, start..start + len)
        };
        drop(pin);
        flushed
    }
}

impl RingChunk {
    /// Whether allocator frame `frame` still owns its ring space.
    fn holds_frame(&self, frame: u64) -> bool {
        let Some(chunk_frame) = frame.checked_sub(self.first_frame) else {
            return false;
        };
        // Frames are sealed and reclaimed in order, so the unreclaimed ones
        // are the last `frames_in_flight` sealed frames plus the current one.
        let current = self.linear.current_frame();
        let oldest_live = current - self.linear.frames_in_flight() as u64;
        (oldest_live..=current).contains(&chunk_frame)
    }
}
