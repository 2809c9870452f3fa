//! The allocator's upload-ring methods: creating and destroying rings,
//! bump-allocating ring space in the current frame (with the debug fills'
//! checks, `ring_fill.rs`), and copying into ring allocations. The reclaim
//! of ring space as frames are collected is `frames.rs`'s; the rings'
//! shared state is `rings.rs`'s (`Rings`).

use std::sync::Arc;

use ash::vk;

use super::ring_fill::{NoRingFill, RingDebug, RingFill};
use super::{exclusive, lock, Allocator, Request};
use crate::device::MemoryDeviceExt;
use crate::frames::upload_ring::{ChunkSpec, OwnedChunkSpec, RingChunk, RingState, RING_FRAMES};
use crate::frames::{Deferred, RingAllocation, UploadRing, UploadRingDesc};
use crate::memory::{ResourceKind, Usage};
use crate::offset::{LinearAllocation, LinearAllocator, OffsetError};
use crate::{DedicatedPolicy, Error};

impl<D: MemoryDeviceExt<M>, M: Send> Allocator<D, M> {
    /// Creates an upload ring: a host-visible buffer of `desc.size` bytes for
    /// per-frame transient data.
    ///
    /// `desc.buffer_usage` may hold the usages of core Vulkan 1.0 (transfer,
    /// uniform, storage, texel, index, vertex and indirect buffers), valid
    /// on every device, and `SHADER_DEVICE_ADDRESS` when the allocator was
    /// told of buffer device address: its chunks' memory is then allocated
    /// with `VK_MEMORY_ALLOCATE_DEVICE_ADDRESS_BIT`, as
    /// [`create_buffer`](Self::create_buffer) does. For an extension's
    /// usage (a descriptor buffer's, an acceleration-structure build
    /// input's), which only the caller knows to be enabled, use
    /// [`create_upload_ring_unchecked`](Self::create_upload_ring_unchecked).
    ///
    /// # Errors
    /// Those of [`create_upload_ring_unchecked`](Self::create_upload_ring_unchecked),
    /// in its order, and [`Error::InvalidConfig`] for a `desc.buffer_usage`
    /// with a bit beyond those above, checked after `desc.usage` and before
    /// buffer device address. Nothing is created on error.
    pub fn create_upload_ring(&self, desc: &UploadRingDesc<'_>) -> Result<UploadRing, Error> {
        self.check_ring_desc(desc, true)?;
        // SAFETY: every bit of the usage is core Vulkan 1.0's, valid on any
        // device, or SHADER_DEVICE_ADDRESS with buffer device address, which
        // `AshMemoryDevice::new`'s caller vouched is enabled
        // (`check_ring_desc`).
        unsafe { self.create_ring(desc) }
    }

    /// [`create_upload_ring`](Self::create_upload_ring) for any buffer
    /// usage: `desc.buffer_usage` reaches `vkCreateBuffer` as given.
    ///
    /// # Errors
    /// In this order: [`Error::ZeroSize`]; [`Error::InvalidConfig`] for an
    /// empty `desc.buffer_usage` (VUID-VkBufferCreateInfo-usage-requiredbitmask);
    /// [`Error::NotHostVisible`] when `desc.usage` does
    /// not need host-visible memory
    /// ([`Usage::needs_host_access`](crate::Usage::needs_host_access)): neither
    /// `UPLOAD` nor `READBACK`, or `UPLOAD` with `ALLOW_TRANSFER_INSTEAD`;
    /// [`Error::NoSuitableMemoryType`] for `SHADER_DEVICE_ADDRESS` without
    /// [`DeviceFeatures::buffer_device_address`](crate::device::DeviceFeatures::buffer_device_address)
    /// (nothing is created after any of these); allocation
    /// errors ([`Error::SizeExceedsHeaps`] for a ring larger than every
    /// heap, however large); buffer creation failures.
    ///
    /// # Safety
    /// Every bit of `desc.buffer_usage` is valid on the device: the
    /// extension or feature it comes with is enabled
    /// (VUID-VkBufferCreateInfo-usage-parameter and the usage's own rules).
    pub unsafe fn create_upload_ring_unchecked(
        &self,
        desc: &UploadRingDesc<'_>,
    ) -> Result<UploadRing, Error> {
        self.check_ring_desc(desc, false)?;
        // SAFETY: the caller's contract.
        unsafe { self.create_ring(desc) }
    }

    /// The checks of a ring's description, before anything is made, in
    /// the order both calls document: the size, an empty buffer usage, a
    /// usage the host cannot reach, (for the safe call, `core_usage_only`)
    /// a buffer usage beyond core Vulkan 1.0's and `SHADER_DEVICE_ADDRESS`,
    /// and device addresses without buffer device address. The new checks
    /// come after the older ones, so a description those refused gets the
    /// same error as before.
    fn check_ring_desc(
        &self,
        desc: &UploadRingDesc<'_>,
        core_usage_only: bool,
    ) -> Result<(), Error> {
        if desc.size == 0 {
            return Err(Error::ZeroSize);
        }
        if desc.buffer_usage.is_empty() {
            return Err(Error::InvalidConfig(
                "UploadRingDesc::buffer_usage must not be empty",
            ));
        }
        // Only a host-access usage restricts the ranking to host-visible
        // memory. Without one, a chunk may land in memory the host cannot
        // see (VRAM first on a discrete GPU), and refusing it after the
        // allocation would leave behind the block made for it.
        if !desc.usage.needs_host_access() {
            return Err(Error::NotHostVisible);
        }
        if core_usage_only && !CORE_BUFFER_USAGE.contains(desc.buffer_usage) {
            return Err(Error::InvalidConfig(
                "UploadRingDesc::buffer_usage has a bit beyond core Vulkan 1.0's and \
                 SHADER_DEVICE_ADDRESS: use create_upload_ring_unchecked for an \
                 extension's usage",
            ));
        }
        // Before the first chunk's buffer is made, as the allocation of its
        // memory would refuse it.
        let usage = ring_memory_usage(desc);
        if self.context.lacks_device_address(usage) {
            return Err(Error::NoSuitableMemoryType {
                memory_type_bits: self.context.usable_types(),
                usage,
            });
        }
        Ok(())
    }

    /// Makes the ring `desc` describes, once [`check_ring_desc`](Self::check_ring_desc)
    /// has passed it.
    ///
    /// # Errors
    /// Allocation and buffer creation failures.
    ///
    /// # Safety
    /// As [`create_upload_ring_unchecked`](Self::create_upload_ring_unchecked).
    unsafe fn create_ring(&self, desc: &UploadRingDesc<'_>) -> Result<UploadRing, Error> {
        let mut state = RingState {
            usage: ring_memory_usage(desc),
            buffer_usage: desc.buffer_usage,
            chunk_size: desc.size,
            grow: desc.grow,
            name: desc.name.map(Into::into),
            chunks: Vec::new(),
        };
        // Made with no lock held (the driver may take milliseconds), then
        // put in; it starts in the frame current then.
        let mut chunk = self.create_ring_chunk(&state.chunk_spec(), desc.size)?;
        let mut rings = lock(&self.rings);
        chunk.first_frame = rings.current_frame;
        state.chunks.push(chunk);
        let key = rings.rings.insert(state);
        Ok(UploadRing {
            key,
            allocator: self.id,
        })
    }

    /// The error for a ring chunk of `size` bytes, past the `max` a linear
    /// allocator manages: past every heap there is (as the allocation path
    /// says it), or, should a heap be larger still, past what one memory
    /// object may be here.
    #[cold]
    fn too_large_for_a_ring(&self, size: u64, max: u64) -> Error {
        let device = &self.context.properties.device;
        let largest_heap = device.memory_heaps.iter().map(|h| h.size).max();
        match largest_heap {
            Some(largest_heap) if size > largest_heap => {
                Error::SizeExceedsHeaps { size, largest_heap }
            }
            _ => Error::SizeExceedsMaxAllocation {
                size,
                max: device.max_memory_allocation_size.min(max),
            },
        }
    }

    /// Makes a chunk of `size` bytes for a ring, with no lock of the
    /// allocator held but those of the pools it allocates from. Its
    /// `first_frame` is 0: the caller sets it, under the rings' lock, to the
    /// frame current when it puts the chunk in its ring.
    fn create_ring_chunk(&self, ring: &ChunkSpec<'_>, size: u64) -> Result<RingChunk, Error> {
        // Before the buffer exists, so that an oversized ring leaks nothing.
        // Past what a linear allocator manages (2^48 bytes) is past every
        // heap there is: said as the allocation path says it, not as a
        // shortage that freeing could cure.
        let linear = LinearAllocator::new(size, RING_FRAMES).map_err(|error| match error {
            OffsetError::CapacityTooLarge { max, .. } => self.too_large_for_a_ring(size, max),
            OffsetError::OutOfHostMemory => Error::OutOfHostMemory,
            _ => Error::OutOfDeviceMemory,
        })?;
        // SAFETY: `size` is non-zero (checked by the callers); the buffer
        // usage is not empty (`create_upload_ring` checks it,
        // VUID-VkBufferCreateInfo-usage-requiredbitmask) and comes from the
        // ring's description, whose docs ask for enabled bits only.
        let (buffer, requirements, driver_dedicated) =
            unsafe { self.context.device.create_buffer(size, ring.buffer_usage) }?;
        // Chunks share blocks unless the driver requires dedicated memory.
        let mut request = Request::new(requirements, ring.usage, ResourceKind::Buffer)
            .dedicated(DedicatedPolicy::Never)
            .driver_dedicated(driver_dedicated)
            .dedicated_target(crate::device::DedicatedTarget::Buffer(buffer));
        request.desc.name = ring.name;
        let device = &self.context.device;
        let allocation = self.allocate_and_bind(
            &request,
            |allocation| {
                if allocation.mapped.is_none() {
                    return Err(Error::NotHostVisible);
                }
                // SAFETY: the memory type comes from the buffer's requirements,
                // the offset honours their alignment and the allocation has
                // their size.
                unsafe {
                    device.bind_buffer_memory(buffer, allocation.memory(), allocation.offset())
                }
                .map_err(Error::from)
            },
            // SAFETY: created above; nothing was submitted with it.
            || unsafe { device.destroy_buffer(buffer) },
        )?;
        let chunk = RingChunk {
            allocation,
            buffer,
            linear,
            first_frame: 0,
            pins: Arc::default(),
            owed: None,
            fills: false,
        };
        if self.context.fills(chunk.allocation.memory_type()) {
            return Ok(self.fill_new_chunk(chunk));
        }
        Ok(chunk)
    }

    /// Frees a chunk no ring allocation was made in: made for a ring that
    /// was destroyed meanwhile, or that another thread's chunk made room in.
    pub(super) fn discard_ring_chunk(&self, chunk: RingChunk) {
        // `release` destroys the buffer and frees the memory at once, which
        // its contract allows here: the chunk was never in a ring, so no
        // ring allocation, and no command, uses it.
        self.release_each(vec![Deferred::Buffer(chunk.buffer, chunk.allocation)]);
    }

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
    /// memory ([`Error::SizeExceedsHeaps`] for a request larger than every
    /// heap, however large) and the failures of its buffer's creation.
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
    /// O(1): a bump in the newest chunk (a growing ring tries older ones);
    /// but while a collected frame's space waits for a
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

    /// Copies `bytes` into a ring allocation at `offset`, and flushes them
    /// when the ring's memory is not coherent.
    ///
    /// The copy and the flush are made with no lock of the allocator held
    /// (but, for the flush, the lock of the pool the ring's memory comes
    /// from, as [`flush`](Self::flush) takes it): other threads' ring calls,
    /// [`end_frame`](Self::end_frame) and [`collect`](Self::collect) do not
    /// wait for a write of many megabytes. The call pins its allocation's
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
    /// ring; [`Error::RangeOutOfBounds`]; [`Error::StaleAllocation`] when
    /// the allocation's frame was collected already (its bytes belong to
    /// later frames now) or the ring was destroyed; on non-coherent memory,
    /// the flush's device errors (the bytes are copied then).
    ///
    /// # Time complexity
    /// O(1) under the rings' lock; the copy is O(`bytes.len()`).
    pub fn ring_write(
        &self,
        allocation: &RingAllocation,
        offset: u64,
        bytes: &[u8],
    ) -> Result<(), Error> {
        if allocation.ring.allocator != self.id {
            return Err(Error::ForeignAllocation);
        }
        let end = offset.saturating_add(bytes.len() as u64);
        if end > allocation.size {
            return Err(Error::RangeOutOfBounds {
                start: offset,
                end,
                size: allocation.size,
            });
        }
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
                    allocation.mapped.add(offset).0.as_ptr(),
                    bytes.len(),
                );
            }
            let start = allocation.buffer_offset + offset;
            // While the memory is mapped still: the pin is dropped after it.
            self.flush(&memory, start..start + bytes.len() as u64)
        };
        drop(pin);
        flushed
    }

    /// Destroys an upload ring. Its buffers and memory are released after
    /// the current frame, since frames in flight may still read them, by
    /// the first [`collect`](Self::collect) (or
    /// [`collect_idle`](Self::collect_idle)) after that frame in which no
    /// [`ring_write`](Self::ring_write) that began before this call still
    /// copies into them. Writes from now on get [`Error::StaleAllocation`].
    ///
    /// With [`Config::debug_fill`](crate::Config::debug_fill), the ring
    /// space free now, and that of the frames in flight now once each is
    /// collected (filled with `0xEF` then, as a live ring's), is checked to
    /// still read `0xEF` as each chunk is freed (not the current frame's):
    /// a byte that does not was written after its frame was collected
    /// (logged with `log::error!` once that call's locks are released, and
    /// counted in [`corruptions_detected`](Self::corruptions_detected)).
    /// So is a live ring's free space at the allocator's drop.
    ///
    /// # Errors
    /// [`Error::ForeignAllocation`], [`Error::StaleAllocation`].
    ///
    /// # Time complexity
    /// O(chunks of the ring): their memory is freed later, as above.
    pub fn destroy_upload_ring(&self, ring: UploadRing) -> Result<(), Error> {
        if ring.allocator != self.id {
            return Err(Error::ForeignAllocation);
        }
        let mut frames = lock(&self.frames);
        let mut rings = lock(&self.rings);
        let state = rings.rings.remove(ring.key).ok_or(Error::StaleAllocation)?;
        // Out of the rings, a chunk takes no new pin; one a write holds
        // still keeps it from being freed (`Rings::sort_ring_chunks`).
        // With debug fills, a chunk's frames in flight go on being
        // reclaimed (filled) as they are collected (`Rings::leaving`).
        let RingState { chunks, name, .. } = state;
        for (index, chunk) in chunks.into_iter().enumerate() {
            let (retired, leaving) = chunk.retire(name.as_deref(), index);
            frames.push(Deferred::RingChunk(retired));
            if let Some(leaving) = leaving {
                rings.leaving.push(leaving);
            }
        }
        Ok(())
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
        .ok_or(Error::NotHostVisible)?
        .add(placed.offset);
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
    })
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

/// The buffer usages [`Allocator::create_upload_ring`] takes: core Vulkan
/// 1.0's, valid on every device, and `SHADER_DEVICE_ADDRESS`, which it
/// checks against buffer device address.
const CORE_BUFFER_USAGE: vk::BufferUsageFlags = vk::BufferUsageFlags::from_raw(
    vk::BufferUsageFlags::TRANSFER_SRC.as_raw()
        | vk::BufferUsageFlags::TRANSFER_DST.as_raw()
        | vk::BufferUsageFlags::UNIFORM_TEXEL_BUFFER.as_raw()
        | vk::BufferUsageFlags::STORAGE_TEXEL_BUFFER.as_raw()
        | vk::BufferUsageFlags::UNIFORM_BUFFER.as_raw()
        | vk::BufferUsageFlags::STORAGE_BUFFER.as_raw()
        | vk::BufferUsageFlags::INDEX_BUFFER.as_raw()
        | vk::BufferUsageFlags::VERTEX_BUFFER.as_raw()
        | vk::BufferUsageFlags::INDIRECT_BUFFER.as_raw()
        | vk::BufferUsageFlags::SHADER_DEVICE_ADDRESS.as_raw(),
);

/// The memory usage of a ring's chunks: `desc.usage`, with
/// [`Usage::DEVICE_ADDRESS`] when its buffers take their address, whose
/// memory must be allocated for it
/// (VUID-vkBindBufferMemory-bufferDeviceAddress-03339).
fn ring_memory_usage(desc: &UploadRingDesc<'_>) -> Usage {
    if desc
        .buffer_usage
        .contains(vk::BufferUsageFlags::SHADER_DEVICE_ADDRESS)
    {
        desc.usage | Usage::DEVICE_ADDRESS
    } else {
        desc.usage
    }
}
