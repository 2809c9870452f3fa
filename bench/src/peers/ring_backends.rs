//! The `ring` trace's rows: vk-suballoc's upload ring and the peers'
//! nearest equivalents for per-frame transient memory. vk-suballoc's rows
//! are here, the others in `ring_peers.rs`.
//!
//! | row | per allocation | per frame |
//! |---|---|---|
//! | vk-suballoc ring | `Allocator::ring_allocate` (`&self`: the rings' lock) | `end_frame_timeline(semaphore, frame + 1)`; `collect()` at the next frame start |
//! | vk-suballoc ring, `&mut` | `Allocator::ring_allocate_mut` (no lock) | the same |
//! | vk-suballoc | `allocate_mut` (`UPLOAD \| DEVICE_LOCAL`, a buffer's requirements) | `free_mut` of a completed frame's allocations |
//! | VMA linear pool | `vmaAllocateMemory` from a custom pool with `VMA_POOL_CREATE_LINEAR_ALGORITHM_BIT`, one block (`maxBlockCount` 1) made with the pool, `MAPPED` | `vmaFreeMemory` of a completed frame's allocations, oldest first: VMA's ring-buffer use of a linear pool |
//! | gpu-alloc | `alloc` with `FAST_DEVICE_ACCESS \| UPLOAD \| HOST_ACCESS \| TRANSIENT` (its free-list/linear chunks) | `dealloc` |
//! | gpu-allocator | `allocate`, `CpuToGpu`: it has no linear or ring allocator | `free` |
//! | core: vk-suballoc `LinearAllocator` | `allocate` | `finish_frame`; `reclaim_through` |
//! | core: VMA virtual block, linear | `vmaVirtualAllocate` (`VMA_VIRTUAL_BLOCK_CREATE_LINEAR_ALGORITHM_BIT`) | `vmaVirtualFree`, oldest first |
//!
//! vulkano 0.34 has no row: its transient allocator is `SubbufferAllocator`,
//! which bump-allocates `Subbuffer`s from arenas of buffers it creates
//! (through vulkano's own `Device`) and reuses an arena when every
//! `Arc` to it is dropped; freeing by frame is not a call there, and its
//! bare `BumpAllocator` only resets when empty (no frames in flight).

use ash::vk;

use crate::ring::RingBackend;
use crate::vulkan::VulkanContext;

/// The ring rows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RingWhich {
    VkSuballocRing,
    VkSuballocRingMut,
    VkSuballoc,
    VmaLinearPool,
    GpuAlloc,
    GpuAllocator,
    OurLinearCore,
    VmaVirtualLinearCore,
}

impl RingWhich {
    pub const ALL: [Self; 8] = [
        Self::VkSuballocRing,
        Self::VkSuballocRingMut,
        Self::VkSuballoc,
        Self::VmaLinearPool,
        Self::GpuAlloc,
        Self::GpuAllocator,
        Self::OurLinearCore,
        Self::VmaVirtualLinearCore,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Self::VkSuballocRing => "vk-suballoc ring (`ring_allocate`)",
            Self::VkSuballocRingMut => "vk-suballoc ring (`ring_allocate_mut`)",
            Self::VkSuballoc => "vk-suballoc (`allocate_mut`/`free_mut`)",
            Self::VmaLinearPool => "VMA linear pool (ring buffer)",
            Self::GpuAlloc => "gpu-alloc 0.6 (`TRANSIENT`)",
            Self::GpuAllocator => "gpu-allocator 0.28 (no linear path)",
            Self::OurLinearCore => "core: vk-suballoc `LinearAllocator`",
            Self::VmaVirtualLinearCore => "core: VMA virtual block, linear",
        }
    }

    pub fn key(self) -> &'static str {
        match self {
            Self::VkSuballocRing => "vk-suballoc-ring",
            Self::VkSuballocRingMut => "vk-suballoc-ring-mut",
            Self::VkSuballoc => "vk-suballoc",
            Self::VmaLinearPool => "vma-linear-pool",
            Self::GpuAlloc => "gpu-alloc",
            Self::GpuAllocator => "gpu-allocator",
            Self::OurLinearCore => "core-ours-linear",
            Self::VmaVirtualLinearCore => "core-vma-virtual-linear",
        }
    }

    /// Allocates `VkDeviceMemory` (as opposed to a bare core).
    pub fn is_vulkan(self) -> bool {
        !matches!(self, Self::OurLinearCore | Self::VmaVirtualLinearCore)
    }

    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|w| w.key() == s)
    }
}

/// Writes `tag` into the first 8 bytes at `ptr` and its complement into
/// the last 8 of `size`.
///
/// # Safety
/// `ptr..ptr + size` is mapped, host-visible memory the caller owns, and
/// `size >= 16`.
pub(crate) unsafe fn poke(ptr: *mut u8, size: u64, tag: u64) {
    // SAFETY: the caller's contract; unaligned writes.
    unsafe {
        ptr.cast::<u64>().write_unaligned(tag);
        ptr.add(size as usize - 8)
            .cast::<u64>()
            .write_unaligned(!tag);
    }
}

/// Reads what [`poke`] wrote.
///
/// # Safety
/// As [`poke`].
pub(crate) unsafe fn peek(ptr: *const u8, size: u64) -> (u64, u64) {
    // SAFETY: the caller's contract; unaligned reads.
    unsafe {
        (
            ptr.cast::<u64>().read_unaligned(),
            ptr.add(size as usize - 8).cast::<u64>().read_unaligned(),
        )
    }
}

// ----------------------------------------------------------- vk-suballoc ring

/// A timeline semaphore the bench signals from the host; destroyed after
/// the allocator (a later field drops later).
struct Timeline {
    device: ash::Device,
    semaphore: vk::Semaphore,
    value: u64,
}

impl Timeline {
    fn new(device: &ash::Device) -> Self {
        let mut kind = vk::SemaphoreTypeCreateInfo::default()
            .semaphore_type(vk::SemaphoreType::TIMELINE)
            .initial_value(0);
        let info = vk::SemaphoreCreateInfo::default().push_next(&mut kind);
        // SAFETY: a device with timelineSemaphore enabled (the caller
        // checked `VulkanContext::timeline_semaphore`); destroyed in Drop.
        let semaphore = unsafe { device.create_semaphore(&info, None) }.expect("timeline");
        Self {
            device: device.clone(),
            semaphore,
            value: 0,
        }
    }

    /// Signals `value` from the host when it is past the current one
    /// (VUID-VkSemaphoreSignalInfo-value-03258: strictly greater).
    fn signal(&mut self, value: u64) {
        if value > self.value {
            let info = vk::SemaphoreSignalInfo::default()
                .semaphore(self.semaphore)
                .value(value);
            // SAFETY: a live timeline semaphore of this device; no queue
            // signal operation on it is pending.
            unsafe { self.device.signal_semaphore(&info) }.expect("vkSignalSemaphore");
            self.value = value;
        }
    }
}

impl Drop for Timeline {
    fn drop(&mut self) {
        // SAFETY: no frame of the allocator (dropped before) refers to it.
        unsafe { self.device.destroy_semaphore(self.semaphore, None) };
    }
}

type SubAllocator = vk_suballoc::Allocator<vk_suballoc::device::AshMemoryDevice>;

/// vk-suballoc with one upload ring of `capacity` bytes (not growing),
/// allocated from through `ring_allocate_mut` (no lock) when `MUT`, else
/// through `ring_allocate` (`&self`, the rings' lock).
pub struct VkSuballocRing<const MUT: bool> {
    allocator: SubAllocator,
    ring: Option<vk_suballoc::UploadRing>,
    timeline: Timeline,
}

impl<const MUT: bool> VkSuballocRing<MUT> {
    pub fn new(ctx: &VulkanContext, capacity: u64) -> Self {
        let allocator = crate::backends::VkSuballoc::<false>::new(ctx).into_allocator();
        let ring = allocator
            .create_upload_ring(&vk_suballoc::UploadRingDesc {
                size: capacity,
                ..Default::default()
            })
            .expect("create_upload_ring");
        Self {
            allocator,
            ring: Some(ring),
            timeline: Timeline::new(&ctx.device),
        }
    }
}

impl<const MUT: bool> RingBackend for VkSuballocRing<MUT> {
    type Handle = vk_suballoc::RingAllocation;

    #[inline]
    fn allocate(&mut self, size: u64, align: u64) -> Option<Self::Handle> {
        let ring = self.ring?;
        if MUT {
            self.allocator.ring_allocate_mut(ring, size, align).ok()
        } else {
            self.allocator.ring_allocate(ring, size, align).ok()
        }
    }

    #[inline]
    fn release(&mut self, handles: &mut Vec<Self::Handle>) {
        // `Copy` handles: the frame's space comes back in `reclaim`.
        handles.clear();
    }

    #[inline]
    fn reclaim(&mut self, _done: u64) {
        self.allocator.collect().expect("collect");
    }

    #[inline]
    fn end_frame(&mut self, frame: u64) {
        // SAFETY: the semaphore is a live timeline semaphore of the
        // allocator's device, kept alive until every frame is collected
        // (`live_allocations`); value `frame + 1` is signalled once the
        // bench completes the frame, after which nothing reads its memory.
        unsafe {
            self.allocator
                .end_frame_timeline(self.timeline.semaphore, frame + 1)
        }
        .expect("end_frame_timeline");
    }

    fn complete(&mut self, done: u64) {
        self.timeline.signal(done);
    }

    fn placement(&self, handle: &Self::Handle) -> (u64, u64) {
        (vk::Handle::as_raw(handle.buffer()), handle.buffer_offset())
    }

    fn live_allocations(&mut self) -> Option<u64> {
        // The ring's memory is released with the frame it is destroyed
        // in: end that frame, complete it, collect.
        if let Some(ring) = self.ring.take() {
            self.allocator
                .destroy_upload_ring(ring)
                .expect("destroy_upload_ring");
            let next = self.timeline.value.max(self.allocator.current_frame()) + 1;
            self.end_frame(next - 1);
            self.timeline.signal(next);
            self.allocator.collect().expect("collect");
        }
        Some(self.allocator.stats().allocations())
    }

    fn write_tag(&mut self, handle: &mut Self::Handle, size: u64, tag: u64) -> bool {
        let a = self.allocator.ring_write(handle, 0, &tag.to_ne_bytes());
        let b = self
            .allocator
            .ring_write(handle, size - 8, &(!tag).to_ne_bytes());
        a.is_ok() && b.is_ok()
    }

    fn read_tag(&mut self, handle: &mut Self::Handle, size: u64) -> Option<(u64, u64)> {
        // SAFETY: the allocation's frame is not collected yet (read before
        // the bench releases it); host-coherent on the devices run.
        let ptr = handle.mapped_ptr()?;
        Some(unsafe { peek(ptr.as_ptr(), size) })
    }
}

// ------------------------------------------------------- vk-suballoc, general

/// vk-suballoc's general path for the same requests: what an engine
/// without the ring would do, with `--strategy`'s strategy as the other
/// vk-suballoc rows.
pub struct VkSuballocGeneral {
    allocator: SubAllocator,
    memory_type_bits: u32,
    strategy: vk_suballoc::Strategy,
}

impl VkSuballocGeneral {
    pub fn new(ctx: &VulkanContext, memory_type_bits: u32) -> Self {
        Self {
            allocator: crate::backends::VkSuballoc::<false>::new(ctx).into_allocator(),
            memory_type_bits,
            strategy: crate::backends::strategy(),
        }
    }
}

impl RingBackend for VkSuballocGeneral {
    type Handle = vk_suballoc::Allocation;

    #[inline]
    fn allocate(&mut self, size: u64, align: u64) -> Option<Self::Handle> {
        let requirements = vk::MemoryRequirements {
            size,
            alignment: align,
            memory_type_bits: self.memory_type_bits,
        };
        let mut request = vk_suballoc::Request::new(
            requirements,
            vk_suballoc::Usage::UPLOAD | vk_suballoc::Usage::DEVICE_LOCAL,
            vk_suballoc::ResourceKind::Buffer,
        );
        request.desc.strategy = self.strategy;
        self.allocator.allocate_mut(&request).ok()
    }

    #[inline]
    fn release(&mut self, handles: &mut Vec<Self::Handle>) {
        for handle in handles.drain(..) {
            // SAFETY: its frame completed: no GPU work uses the memory.
            unsafe { self.allocator.free_mut(handle) }.expect("own, live allocation");
        }
    }

    fn placement(&self, handle: &Self::Handle) -> (u64, u64) {
        (vk::Handle::as_raw(handle.memory()), handle.offset())
    }

    fn live_allocations(&mut self) -> Option<u64> {
        Some(self.allocator.stats().allocations())
    }

    fn write_tag(&mut self, handle: &mut Self::Handle, size: u64, tag: u64) -> bool {
        let Some(ptr) = handle.mapped_ptr() else {
            return false;
        };
        // SAFETY: a live, mapped upload allocation of `size` bytes.
        unsafe { poke(ptr.as_ptr(), size, tag) };
        true
    }

    fn read_tag(&mut self, handle: &mut Self::Handle, size: u64) -> Option<(u64, u64)> {
        let ptr = handle.mapped_ptr()?;
        // SAFETY: as in `write_tag`.
        Some(unsafe { peek(ptr.as_ptr(), size) })
    }
}
