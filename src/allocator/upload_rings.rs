//! The allocator's upload-ring methods: creating and destroying rings,
//! bump-allocating ring space in the current frame (with the debug fills'
//! checks, `ring_fill.rs`), and copying into ring allocations. The reclaim
//! of ring space as frames are collected is `frames.rs`'s; the rings'
//! shared state is `rings.rs`'s (`Rings`).
//!
//! Creating and destroying rings, and making their chunks, are here; the
//! allocation of ring space is in `upload_rings/ring_allocate.rs`, the
//! copy into it in `upload_rings/ring_write.rs`.

use std::sync::Arc;

use ash::vk;

use super::place::check_min_alignment;
use super::{lock, AllocationDesc, Allocator, Request};
use crate::device::MemoryDeviceExt;
use crate::frames::upload_ring::{ChunkSpec, RingChunk, RingState, RING_FRAMES};
use crate::frames::{Deferred, UploadRing, UploadRingDesc};
use crate::memory::{ResourceKind, Usage};
use crate::offset::{LinearAllocator, OffsetError};
use crate::{DedicatedPolicy, Error};

mod ring_allocate;
mod ring_write;
#[cfg(all(test, feature = "fake-device"))]
mod tests;

impl<D: MemoryDeviceExt<M>, M: Send> Allocator<D, M> {
    /// Creates an upload ring: a buffer of `desc.size` bytes for per-frame
    /// transient data, host-visible for data the host writes (`UPLOAD`, the
    /// default), or, with a usage without host access, GPU-only scratch
    /// (VRAM on a discrete GPU: [`UploadRingDesc::usage`]).
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
    /// with a bit beyond those above, checked after `desc.min_alignment`
    /// and before required flags. Nothing is created on error.
    ///
    /// # Time complexity
    /// As [`create_upload_ring_unchecked`](Self::create_upload_ring_unchecked).
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
    /// [`Error::AlignmentNotPowerOfTwo`] for a `desc.min_alignment` neither 0
    /// nor a power of two;
    /// [`Error::MissingRequiredFlags`] when no memory type the allocator
    /// may use has every flag of `desc.required_flags`;
    /// [`Error::DeviceAddressNotEnabled`] for `SHADER_DEVICE_ADDRESS` without
    /// [`DeviceFeatures::buffer_device_address`](crate::device::DeviceFeatures::buffer_device_address);
    /// [`Error::NoSuitableMemoryType`] when the types with those flags suit
    /// no ring: none `desc.usage` takes in a heap of more than 0 bytes
    /// (`LAZILY_ALLOCATED` or `PROTECTED` required, say; `memory_type_bits`
    /// names those types, or, with no required flags, every type the
    /// allocator may use) (nothing is created after any of these);
    /// [`Error::SizeExceedsHeaps`] for a ring larger than the heap of every
    /// memory type that suits `desc.usage`, however large, then
    /// [`Error::SizeExceedsMaxAllocation`] for one larger than
    /// `maxMemoryAllocationSize`, then [`Error::SizeExceedsMaxBuffer`] for
    /// one larger than the device's `maxBufferSize`
    /// ([`MemoryProperties::max_buffer_size`](crate::device::MemoryProperties::max_buffer_size))
    /// (nothing is created after these either); buffer creation failures;
    /// then, with the buffer made and destroyed again, the errors of
    /// [`allocate`](Self::allocate) for its memory (out of memory or
    /// budget, too many memory objects, no type of the usage among the
    /// buffer's `memoryTypeBits`...), and bind failures.
    ///
    /// # Safety
    /// Every bit of `desc.buffer_usage` is valid on the device: the
    /// extension or feature it comes with is enabled
    /// (VUID-VkBufferCreateInfo-usage-parameter and the usage's own rules).
    ///
    /// # Time complexity
    /// For its first chunk, a `vkCreateBuffer`, a query of its memory
    /// requirements, an [`allocate`](Self::allocate) and a `vkBindBufferMemory`
    /// (and a `vkGetBufferDeviceAddress` when `desc.buffer_usage` has
    /// `SHADER_DEVICE_ADDRESS`), with no lock of the allocator held but,
    /// while it allocates, the chunk's pool's (with
    /// [`Config::debug_fill`](crate::Config::debug_fill), a write of the
    /// chunk's bytes too); then O(1) amortised under the rings' lock.
    pub unsafe fn create_upload_ring_unchecked(
        &self,
        desc: &UploadRingDesc<'_>,
    ) -> Result<UploadRing, Error> {
        self.check_ring_desc(desc, false)?;
        // SAFETY: the caller's contract.
        unsafe { self.create_ring(desc) }
    }

    /// The checks of a ring's description, before anything is made, in
    /// the order both calls document: the size, an empty buffer usage, the
    /// chunks' least alignment, (for the safe call, `core_usage_only`)
    /// a buffer usage beyond core Vulkan 1.0's and `SHADER_DEVICE_ADDRESS`,
    /// required flags no memory type has, and device addresses without
    /// buffer device address. The new checks
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
        check_min_alignment(desc.min_alignment)?;
        if core_usage_only && !CORE_BUFFER_USAGE.contains(desc.buffer_usage) {
            return Err(Error::InvalidConfig(
                "UploadRingDesc::buffer_usage has a bit beyond core Vulkan 1.0's and \
                 SHADER_DEVICE_ADDRESS: use create_upload_ring_unchecked for an \
                 extension's usage",
            ));
        }
        // Before the first chunk's buffer is made, as the allocation of its
        // memory would refuse them: no memory type with the required flags
        // (the buffer's `memoryTypeBits` may narrow them more), device
        // addresses without buffer device address, and required flags that
        // only types no ring takes have (lazily allocated or protected
        // memory), for which the buffer was made and destroyed again.
        // Asked of the types the allocator may use, which the error names
        // when no required flags narrow them (all 32 bits of a mask named
        // types the device does not have).
        let usable = self.context.usable_types();
        self.memory_type_for_desc(usable, &ring_memory(desc))
            .map(|_| ())
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
            memory: ring_memory(desc),
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

    /// The largest heap of the usable memory types that suit the usage of
    /// a ring whose chunks ask for `memory` ([`ring_memory`]) and have
    /// its required flags, or of every heap should none suit it. The
    /// buffer's memory type bits are not known before it is made: any of
    /// these may be allowed.
    fn largest_ring_heap(&self, memory: &AllocationDesc<'_>) -> Option<u64> {
        let context = &self.context;
        // The ranking keeps the types the device may not use (AMD's
        // device-coherent ones without the feature): `admits` filters them.
        let types = context.usable_types() & context.types_with(memory.required_flags);
        let largest = context.largest_ranked_heap(memory.usage, types);
        largest.or_else(|| {
            let heaps = &context.properties.device.memory_heaps;
            heaps.iter().map(|h| h.size).max()
        })
    }

    /// The error for a ring chunk of `size` bytes, larger than
    /// `largest_heap` ([`largest_ring_heap`](Self::largest_ring_heap)) or
    /// than the `max` a linear allocator manages: past those heaps (as the
    /// allocation path says it), or, should a heap be larger still, past
    /// what one memory object may be here.
    #[cold]
    fn too_large_for_a_ring(&self, largest_heap: Option<u64>, size: u64, max: u64) -> Error {
        let device = &self.context.properties.device;
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
        let largest_heap = self.largest_ring_heap(&ring.memory);
        let linear = LinearAllocator::new(size, RING_FRAMES).map_err(|error| match error {
            OffsetError::CapacityTooLarge { max, .. } => {
                self.too_large_for_a_ring(largest_heap, size, max)
            }
            OffsetError::OutOfHostMemory => Error::OutOfHostMemory,
            _ => Error::OutOfDeviceMemory,
        })?;
        // Larger than the heap of every memory type a ring can use, or than
        // one memory object may be: refused before the buffer is made too.
        // The allocation would refuse it all the same, but a buffer that
        // size may pass the device's `maxBufferSize`, which a validation
        // layer reports (VUID-VkBufferCreateInfo-size-06409).
        let properties = &self.context.properties;
        let max_object = properties.device.max_memory_allocation_size;
        if largest_heap.is_some_and(|heap| size > heap) || size > max_object {
            return Err(self.too_large_for_a_ring(largest_heap, size, u64::MAX));
        }
        // Within those, past `maxBufferSize` (`u64::MAX`, unknown, is
        // never passed): no buffer may be that large.
        let max_buffer = properties.max_buffer_size;
        if size > max_buffer {
            return Err(Error::SizeExceedsMaxBuffer {
                size,
                max: max_buffer,
            });
        }
        // SAFETY: `size` is non-zero (checked by the callers); the buffer
        // usage is not empty (`create_upload_ring` checks it,
        // VUID-VkBufferCreateInfo-usage-requiredbitmask) and comes from the
        // ring's description, whose docs ask for enabled bits only.
        let (buffer, requirements, driver_dedicated) =
            unsafe { self.context.device.create_buffer(size, ring.buffer_usage) }?;
        // Chunks share blocks unless the driver requires dedicated memory.
        let request = Request::with_desc(requirements, ResourceKind::Buffer, ring.memory)
            .dedicated(DedicatedPolicy::Never)
            .driver_dedicated(driver_dedicated);
        // SAFETY: the buffer was just made, not sparse, with these
        // requirements, and only it is bound to the memory.
        let mut request =
            unsafe { request.dedicated_target(crate::device::DedicatedTarget::Buffer(buffer)) };
        request.desc.name = ring.name;
        let device = &self.context.device;
        let takes_address = ring
            .buffer_usage
            .contains(vk::BufferUsageFlags::SHADER_DEVICE_ADDRESS);
        let mut device_address = None;
        let allocation = self.allocate_and_bind(
            &request,
            |allocation| {
                // A host-access usage ranks only host-visible memory, which
                // is mapped (but should a backend fail to): a ring that
                // needs no host access may be in memory the host cannot
                // see, its allocations without `mapped_ptr`.
                if ring.memory.usage.needs_host_access() && allocation.mapped.is_none() {
                    return Err(Error::NotHostVisible);
                }
                // SAFETY: the memory type comes from the buffer's requirements,
                // the offset honours their alignment and the allocation has
                // their size.
                unsafe {
                    device.bind_buffer_memory(buffer, allocation.memory(), allocation.offset())
                }?;
                if takes_address {
                    // SAFETY: the buffer was made with SHADER_DEVICE_ADDRESS
                    // usage, not sparse, and is now bound to one memory
                    // object, allocated for device addresses (`ring_memory`).
                    device_address = unsafe { device.buffer_device_address(buffer) };
                }
                Ok(())
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
            device_address,
        };
        // A GPU-only ring's chunk (neither UPLOAD nor READBACK: an
        // `UPLOAD | ALLOW_TRANSFER_INSTEAD` ring's mapped chunks are the
        // host's to write) in non-coherent memory goes unfilled: its fills
        // share atoms with live ring allocations the GPU writes, and the
        // host's cached lines of those atoms, written back, would put the
        // host's bytes over the GPU's.
        let memory_type = chunk.allocation.memory_type();
        let usage = ring.memory.usage;
        let gpu_writes = !usage.contains(Usage::UPLOAD) && !usage.contains(Usage::READBACK);
        if self.context.fills(memory_type)
            && !(gpu_writes && self.context.is_non_coherent(memory_type))
        {
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

    /// Destroys an upload ring. Its buffers and memory are released after
    /// the current frame, since frames in flight may still read them, by
    /// the first [`collect`](Self::collect) (or
    /// [`collect_idle`](Self::collect_idle)) after that frame in which no
    /// [`ring_write`](Self::ring_write) that began before this call still
    /// copies into them. Writes from now on get [`Error::StaleAllocation`],
    /// as do the ring's handle and its ring allocations however many rings
    /// are made after it (a slot of the rings' table is retired, not
    /// reused, once 2^32 rings have been made in it).
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

/// The description of a ring's chunks' allocations (their name apart):
/// `desc.usage`, with [`Usage::DEVICE_ADDRESS`] when its buffers take their
/// address, whose memory must be allocated for it
/// (VUID-vkBindBufferMemory-bufferDeviceAddress-03339), and its required
/// and preferred flags.
fn ring_memory(desc: &UploadRingDesc<'_>) -> AllocationDesc<'static> {
    let takes_address = desc
        .buffer_usage
        .contains(vk::BufferUsageFlags::SHADER_DEVICE_ADDRESS);
    let usage = if takes_address {
        desc.usage | Usage::DEVICE_ADDRESS
    } else {
        desc.usage
    };
    let min_alignment = if takes_address && desc.min_alignment == 0 {
        DEVICE_ADDRESS_CHUNK_ALIGNMENT
    } else {
        desc.min_alignment
    };
    AllocationDesc::new(usage)
        .required_flags(desc.required_flags)
        .preferred_flags(desc.preferred_flags)
        .min_alignment(min_alignment)
}

/// The alignment in their memory of the chunks of a ring whose buffers
/// take device addresses and whose `min_alignment` is 0.
/// `ring_allocate`'s `align` is relative to the buffer: without it, a chunk
/// a growing ring added in a block at its buffer's alignment alone gave
/// allocations aligned to 256 in the buffer device addresses 128 bytes off
/// that on five of the Vulkan tests' profiles (session 50). 256 covers the
/// alignments device addresses are asked for
/// (`minAccelerationStructureScratchOffsetAlignment` is 128 or 256 on the
/// GPUs we know of), for at most 255 bytes a chunk.
const DEVICE_ADDRESS_CHUNK_ALIGNMENT: u64 = 256;
