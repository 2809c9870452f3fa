//! Upload rings: per-frame transient memory with O(1) bump allocation.
//!
//! Staging copies, uniform blocks and dynamic vertices live for one frame,
//! and so does GPU scratch (a compute pass's temporaries, an acceleration
//! structure build's scratch). A ring is a buffer, host-visible for the
//! host's writes or in VRAM for the GPU alone, carved by the core's
//! [`LinearAllocator`](crate::offset::LinearAllocator):
//! each allocation bumps a pointer, each frame's space comes back when that
//! frame's fence signals (at [`Allocator::collect`](crate::Allocator::collect),
//! or at once on an idle device with
//! [`Allocator::collect_idle`](crate::Allocator::collect_idle)),
//! and a request that does not fit fails with [`Error::UploadRingFull`]
//! instead of overwriting a frame still in flight, unless the ring was made
//! to grow, in which case it adds a chunk (another buffer) and keeps every
//! offset already handed out valid.
//!
//! A ring's chunks, their reclaims and their retirement are in
//! `upload_ring/chunk.rs`. How a write copying into a ring with no lock
//! held keeps its frame's space from being reclaimed meanwhile (the
//! chunks' write pins) is in `upload_ring/write_pins.rs`.

use ash::vk;

use crate::memory::mapping::MappedPtr;
use crate::memory::slab::SlabKey;
use crate::memory::Usage;
use crate::offset::{LinearAllocation, OffsetError};
use crate::{AllocationDesc, Error};

mod chunk;
mod write_pins;

pub(crate) use chunk::{wrapping, Reclaimed, RetiredChunk, RetiredFree, RingChunk};
pub(crate) use write_pins::ChunkPins;

/// Sealed frames a ring chunk can track; more means `collect` was not
/// called for that many frames.
pub(crate) const RING_FRAMES: u32 = 64;

/// How to make an upload ring.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UploadRingDesc<'a> {
    /// Bytes per chunk. The ring must hold every frame in flight. Each
    /// chunk is one buffer of this size (or of the request that outgrew it,
    /// in a growing ring). A chunk larger than the heap of every memory
    /// type that suits `usage`, than `maxMemoryAllocationSize`, or than the
    /// device's `maxBufferSize` (`VkPhysicalDeviceMaintenance4Properties`,
    /// 1–4 GiB on many drivers; VUID-VkBufferCreateInfo-size-06409:
    /// [`Error::SizeExceedsMaxBuffer`]),
    /// is refused before its buffer is made. A device without Vulkan 1.3
    /// or `VK_KHR_maintenance4` does not say its `maxBufferSize`: keep
    /// chunks within 1 GiB there. Default 4 MiB.
    pub size: u64,
    /// Memory usage: with `UPLOAD` or `READBACK` the host writes the ring
    /// (its memory is host-visible: every [`RingAllocation::mapped_ptr`] is
    /// there, and [`ring_write`](crate::Allocator::ring_write) copies into
    /// it); `UPLOAD | DEVICE_LOCAL` (the default) puts the ring in the BAR
    /// or shared memory when the device has it. A usage with neither
    /// (`DEVICE_LOCAL`) makes a ring for data only the GPU writes and reads,
    /// per-frame scratch (VMA's linear pool used as a ring buffer, in
    /// `GPU_ONLY` memory): in VRAM on a discrete GPU, and in a
    /// device-local type the host cannot see wherever the device has one
    /// (integrated GPUs often do), where its allocations have no
    /// `mapped_ptr` and `ring_write` fails with [`Error::NotHostVisible`];
    /// mapped all the same where every device-local type is host-visible
    /// (lavapipe). `UPLOAD | ALLOW_TRANSFER_INSTEAD` is a ring for uploads
    /// that may land in either: the host writes it where it is mapped, and
    /// the data comes by a transfer where it is not. The memory type is
    /// chosen for each chunk: such a growing ring may hold chunks of both
    /// kinds (mapped BAR or system memory, unmapped VRAM), so test
    /// `mapped_ptr` for each allocation, never once for the ring.
    ///
    /// A ring with `UPLOAD` or `READBACK` holds data the host writes and
    /// the GPU reads (GPU writes belong in a GPU-only ring, whose chunks in
    /// non-coherent memory get no debug fills for that reason:
    /// [`Config::debug_fill`](crate::Config::debug_fill); and a host write
    /// into a GPU-only ring's mapped, non-coherent memory has the same
    /// hazard as below: its flush covers whole atoms, neighbours' bytes the
    /// GPU wrote included). `READBACK`
    /// picks host-cached memory, which may not be host-coherent (some
    /// mobile GPUs): ring allocations are packed at their own alignment,
    /// not at `nonCoherentAtomSize`, so the flush of one
    /// [`ring_write`](crate::Allocator::ring_write) (or
    /// [`ring_flush`](crate::Allocator::ring_flush)) covers the atoms it
    /// shares with its neighbours and could write the host's view of them
    /// over what a GPU wrote there; and ring allocations have no
    /// invalidate. Read GPU results back through an allocation of its own.
    pub usage: Usage,
    /// Usage of the ring's buffers: not empty. Core Vulkan 1.0's usages
    /// and `SHADER_DEVICE_ADDRESS` (whose chunks' memory is allocated for
    /// device addresses, which needs
    /// [`DeviceFeatures::buffer_device_address`](crate::device::DeviceFeatures::buffer_device_address),
    /// and whose allocations give theirs:
    /// [`RingAllocation::device_address`])
    /// go through [`Allocator::create_upload_ring`](crate::Allocator::create_upload_ring);
    /// an extension's, through
    /// [`Allocator::create_upload_ring_unchecked`](crate::Allocator::create_upload_ring_unchecked).
    ///
    /// The buffers are made with `VK_SHARING_MODE_EXCLUSIVE`: use a ring on
    /// one queue family (or transfer ownership each frame), since bytes a
    /// queue family reads after another one used that range without an
    /// ownership transfer are undefined. Descriptor offsets into a ring
    /// buffer must honour the device's `minUniformBufferOffsetAlignment`,
    /// `minStorageBufferOffsetAlignment` or `minTexelBufferOffsetAlignment`:
    /// pass that as [`ring_allocate`](crate::Allocator::ring_allocate)'s
    /// `align`, which is relative to the buffer. Default `TRANSFER_SRC |
    /// UNIFORM_BUFFER | STORAGE_BUFFER | VERTEX_BUFFER | INDEX_BUFFER`.
    pub buffer_usage: vk::BufferUsageFlags,
    /// When full, add a chunk instead of failing: a buffer of `size` bytes,
    /// or of the request's size when larger. Chunks are kept until the
    /// ring is destroyed, so a spike (a level load streamed through a
    /// growing ring) holds its memory for the ring's whole life; to give it
    /// back, destroy the ring and make another, or stream large loads
    /// through allocations of their own. Default false.
    pub grow: bool,
    /// The ring's name: the name of its chunks' allocations (leak
    /// reports, memory maps and dumps), and of the ring in its log lines
    /// (a ring not destroyed at the allocator's drop, a write after free
    /// found in its space). Its chunks take blocks, whose debug name
    /// (`VK_EXT_debug_utils`) stays the block's; only a chunk the driver
    /// requires dedicated memory for has it as its memory's debug name.
    pub name: Option<&'a str>,
    /// Property flags the chunks' memory type must have, besides what
    /// `usage` requires (as
    /// [`AllocationDesc::required_flags`](crate::AllocationDesc::required_flags)):
    /// `HOST_COHERENT` for a ring never flushed, `DEVICE_LOCAL` for one
    /// that must be read from VRAM (ReBAR, the BAR) or not be made. A
    /// ring no memory type with them can hold is refused with
    /// [`Error::MissingRequiredFlags`]
    /// before its buffer is made. Empty by default.
    pub required_flags: vk::MemoryPropertyFlags,
    /// Property flags the chunks' memory type should have (as
    /// [`AllocationDesc::preferred_flags`](crate::AllocationDesc::preferred_flags)):
    /// the types with more of them come first, `usage` ordering those with
    /// as many. Empty by default.
    pub preferred_flags: vk::MemoryPropertyFlags,
    /// An alignment of each chunk's offset in its memory object beyond its
    /// buffer's own, a power of two; 0 (the default): none (as
    /// [`AllocationDesc::min_alignment`](crate::AllocationDesc::min_alignment)),
    /// but 256 for a ring whose `buffer_usage` has `SHADER_DEVICE_ADDRESS`,
    /// so that its allocations' device addresses are aligned as they are in
    /// the buffer up to 256 bytes without it being asked.
    /// [`ring_allocate`](crate::Allocator::ring_allocate)'s `align` is
    /// relative to the buffer; with this at least as large, a ring
    /// allocation aligned in its buffer is aligned in its memory object
    /// too, and so is its device address up to the alignment of the memory
    /// object's own address, which is the driver's (drivers start memory
    /// objects on pages; lavapipe on 4 KiB host pages). For GPU scratch
    /// whose device address must be aligned: acceleration-structure builds'
    /// (`minAccelerationStructureScratchOffsetAlignment`, here and as
    /// `align`). A chunk in dedicated memory starts at offset 0.
    pub min_alignment: u64,
}

impl Default for UploadRingDesc<'_> {
    fn default() -> Self {
        Self {
            size: 4 << 20,
            usage: Usage::UPLOAD | Usage::DEVICE_LOCAL,
            buffer_usage: vk::BufferUsageFlags::TRANSFER_SRC
                | vk::BufferUsageFlags::UNIFORM_BUFFER
                | vk::BufferUsageFlags::STORAGE_BUFFER
                | vk::BufferUsageFlags::VERTEX_BUFFER
                | vk::BufferUsageFlags::INDEX_BUFFER,
            grow: false,
            name: None,
            required_flags: vk::MemoryPropertyFlags::empty(),
            preferred_flags: vk::MemoryPropertyFlags::empty(),
            min_alignment: 0,
        }
    }
}

/// Names an upload ring of an allocator.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct UploadRing {
    pub(crate) key: SlabKey,
    pub(crate) allocator: u32,
}

/// Bytes of the current frame in an upload ring. Valid until that frame is
/// collected; write them with [`Allocator::ring_write`](crate::Allocator::ring_write),
/// or in place through [`mapped_ptr`](Self::mapped_ptr) and flush them
/// with [`Allocator::ring_flush`](crate::Allocator::ring_flush).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct RingAllocation {
    pub(crate) ring: UploadRing,
    pub(crate) chunk: u32,
    pub(crate) buffer: vk::Buffer,
    pub(crate) buffer_offset: u64,
    pub(crate) memory: vk::DeviceMemory,
    pub(crate) memory_offset: u64,
    pub(crate) size: u64,
    pub(crate) frame: u64,
    /// Its first byte in the chunk's mapping; `None` in memory the host
    /// cannot see (a ring of GPU-only usage).
    pub(crate) mapped: Option<MappedPtr>,
    /// Its first byte's device address; `None` unless the ring's buffers
    /// take theirs.
    pub(crate) device_address: Option<vk::DeviceAddress>,
}

impl RingAllocation {
    /// The ring buffer to bind or copy from.
    pub fn buffer(&self) -> vk::Buffer {
        self.buffer
    }

    /// Offset in [`buffer`](Self::buffer): a multiple of the requested alignment.
    pub fn buffer_offset(&self) -> u64 {
        self.buffer_offset
    }

    /// The memory behind the buffer.
    pub fn memory(&self) -> vk::DeviceMemory {
        self.memory
    }

    /// Offset in [`memory`](Self::memory).
    pub fn memory_offset(&self) -> u64 {
        self.memory_offset
    }

    /// Size in bytes.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// The frame it belongs to.
    pub fn frame(&self) -> u64 {
        self.frame
    }

    /// Pointer to its first byte; `None` when the ring's memory is not
    /// host-visible (a ring whose `usage` has no host access, in VRAM on
    /// a discrete GPU: [`UploadRingDesc::usage`]). A ring with `READBACK`,
    /// or with `UPLOAD` but not `ALLOW_TRANSFER_INSTEAD`, always has it. Valid
    /// for writes until its frame is collected; after that the bytes belong
    /// to later frames. Dropping the allocator frees the ring's memory, its
    /// frames in flight uncollected: the pointer dangles from then on too.
    ///
    /// Bytes written through it are not flushed, and the ring's memory
    /// may not be host-coherent (some mobile GPUs): there the GPU sees
    /// them only once [`Allocator::ring_flush`](crate::Allocator::ring_flush)
    /// flushes them. [`Allocator::ring_write`](crate::Allocator::ring_write)
    /// copies and flushes in one call.
    pub fn mapped_ptr(&self) -> Option<std::ptr::NonNull<u8>> {
        self.mapped.map(|mapped| mapped.0)
    }

    /// The device address of its first byte, for shaders that reach it
    /// through a pointer (`GL_EXT_buffer_reference`, a push constant or a
    /// uniform holding the address) and for acceleration-structure builds'
    /// scratch: the address of [`buffer`](Self::buffer) plus
    /// [`buffer_offset`](Self::buffer_offset). `Some` when the ring's
    /// `buffer_usage` has `SHADER_DEVICE_ADDRESS`
    /// ([`UploadRingDesc::buffer_usage`]), `None` otherwise (and on a
    /// custom backend whose
    /// [`buffer_device_address`](crate::device::MemoryDeviceExt::buffer_device_address)
    /// cannot tell). Each chunk's buffer address is read once, when the
    /// chunk is made (`vkGetBufferDeviceAddress`): no call per allocation.
    /// Valid until its frame is collected, as the allocation is; aligned as
    /// [`UploadRingDesc::min_alignment`] says (by default, as the
    /// allocation is in its buffer, up to 256).
    pub fn device_address(&self) -> Option<vk::DeviceAddress> {
        self.device_address
    }
}

/// A ring's chunks.
#[derive(Debug)]
pub(crate) struct RingState {
    /// What its chunks' allocations ask for: its usage (with
    /// `DEVICE_ADDRESS` for a buffer usage with `SHADER_DEVICE_ADDRESS`)
    /// and its required and preferred flags; the name apart.
    pub(crate) memory: AllocationDesc<'static>,
    pub(crate) buffer_usage: vk::BufferUsageFlags,
    pub(crate) chunk_size: u64,
    pub(crate) grow: bool,
    pub(crate) name: Option<Box<str>>,
    pub(crate) chunks: Vec<RingChunk>,
}

/// What a ring's chunks are made from, read from its [`RingState`].
#[derive(Clone, Copy, Debug)]
pub(crate) struct ChunkSpec<'a> {
    pub(crate) memory: AllocationDesc<'static>,
    pub(crate) buffer_usage: vk::BufferUsageFlags,
    pub(crate) name: Option<&'a str>,
}

/// A [`ChunkSpec`] copied out of a ring's state, with the ring's chunk
/// size: a growing ring's new chunk is made from it after the rings' lock
/// is released.
#[derive(Debug)]
pub(crate) struct OwnedChunkSpec {
    memory: AllocationDesc<'static>,
    buffer_usage: vk::BufferUsageFlags,
    name: Option<Box<str>>,
    pub(crate) chunk_size: u64,
}

impl OwnedChunkSpec {
    pub(crate) fn borrow(&self) -> ChunkSpec<'_> {
        ChunkSpec {
            memory: self.memory,
            buffer_usage: self.buffer_usage,
            name: self.name.as_deref(),
        }
    }
}

impl RingState {
    /// What its chunks are made from.
    pub(crate) fn chunk_spec(&self) -> ChunkSpec<'_> {
        ChunkSpec {
            memory: self.memory,
            buffer_usage: self.buffer_usage,
            name: self.name.as_deref(),
        }
    }

    /// What its chunks are made from, copied out.
    pub(crate) fn chunk_spec_owned(&self) -> OwnedChunkSpec {
        OwnedChunkSpec {
            memory: self.memory,
            buffer_usage: self.buffer_usage,
            name: self.name.clone(),
            chunk_size: self.chunk_size,
        }
    }

    /// Bump-allocates in the newest chunk that has room. Returns the
    /// chunk's index, the allocation, and the chunk's head before it: the
    /// bytes from there to the allocation's end (its alignment padding, or
    /// the end of the ring it skipped to wrap to offset 0) were free, and
    /// are its frame's now (`allocator/ring_fill.rs` checks them).
    ///
    /// # Time complexity
    /// O(chunks), one for a ring that does not grow.
    #[inline]
    pub(crate) fn allocate(
        &mut self,
        size: u64,
        align: u64,
    ) -> Result<(usize, LinearAllocation, u64), Error> {
        let mut last_error = OffsetError::OutOfSpace { size, free: 0 };
        for (index, chunk) in self.chunks.iter_mut().enumerate().rev() {
            let head = chunk.linear.head();
            match chunk.linear.allocate(size, align) {
                Ok(allocation) => return Ok((index, allocation, head)),
                Err(OffsetError::ZeroSize) => return Err(Error::ZeroSize),
                Err(OffsetError::AlignmentNotPowerOfTwo(a)) => {
                    return Err(Error::AlignmentNotPowerOfTwo(a))
                }
                Err(error) => last_error = error,
            }
        }
        match last_error {
            OffsetError::OutOfSpace { free, .. } | OffsetError::TooFragmented { free, .. } => {
                Err(Error::UploadRingFull { size, free })
            }
            // Larger than every chunk, so no collect can make room.
            _ => Err(Error::UploadRingTooSmall {
                size,
                capacity: self
                    .chunks
                    .iter()
                    .map(|c| c.linear.capacity())
                    .max()
                    .unwrap_or(0),
            }),
        }
    }

    /// Whether every chunk can seal one more frame.
    pub(crate) fn can_finish_frame(&self) -> bool {
        self.chunks
            .iter()
            .all(|c| c.linear.frames_in_flight() < RING_FRAMES as usize)
    }

    /// Seals the current frame in every chunk (checked by `can_finish_frame`).
    pub(crate) fn finish_frame(&mut self) {
        for chunk in &mut self.chunks {
            let _ = chunk.linear.finish_frame();
        }
    }

    /// Gives back the space of allocator frames `<= frame`, but of those
    /// a write is copying into, and of later ones, which stay owed
    /// ([`RingChunk::reclaim_through`], which hands the space of chunks
    /// with debug fills to `on_reclaim`). Returns whether a reclaim is
    /// owed.
    pub(crate) fn reclaim_through(
        &mut self,
        frame: u64,
        on_reclaim: &mut impl FnMut(&RingChunk, Reclaimed),
    ) -> bool {
        let mut owed = false;
        for chunk in &mut self.chunks {
            owed |= chunk.reclaim_through_frame(frame, on_reclaim);
        }
        owed
    }

    /// Retries the reclaims owed in its chunks (`on_reclaim` as in
    /// [`reclaim_through`](Self::reclaim_through)). Returns whether one is
    /// still owed.
    pub(crate) fn retry_owed(
        &mut self,
        on_reclaim: &mut impl FnMut(&RingChunk, Reclaimed),
    ) -> bool {
        let mut owed = false;
        for chunk in &mut self.chunks {
            owed |= chunk.retry(on_reclaim);
        }
        owed
    }
}
