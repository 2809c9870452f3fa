//! The `ring` trace's rows: vk-suballoc's upload ring and the peers'
//! nearest equivalents for per-frame transient memory.
//!
//! | row | per allocation | per frame |
//! |---|---|---|
//! | vk-suballoc ring | `Allocator::ring_allocate` (`&self`: the rings' lock) | `end_frame_timeline(semaphore, frame + 1)`; `collect()` at the next frame start |
//! | vk-suballoc ring, `&mut` | `Allocator::ring_allocate_mut` (no lock) | the same |
//! | vk-suballoc | `allocate_mut` (`UPLOAD \| DEVICE_LOCAL`, a buffer's requirements) | `free_mut` of a completed frame's allocations |
//! | VMA linear pool | `vmaAllocateMemory` from a custom pool with `VMA_POOL_CREATE_LINEAR_ALGORITHM_BIT`, one block (`maxBlockCount` 1) made with the pool, `MAPPED` | `vmaFreeMemory` of a completed frame's allocations, oldest first: VMA's ring-buffer use of a linear pool |
//! | gpu-alloc | `alloc` with `UPLOAD \| HOST_ACCESS \| TRANSIENT` (its free-list/linear chunks) | `dealloc` |
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
use vk_mem::Alloc;

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
unsafe fn poke(ptr: *mut u8, size: u64, tag: u64) {
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
unsafe fn peek(ptr: *const u8, size: u64) -> (u64, u64) {
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
        Some(unsafe { peek(handle.mapped_ptr().as_ptr(), size) })
    }
}

// ------------------------------------------------------- vk-suballoc, general

/// vk-suballoc's general path for the same requests: what an engine
/// without the ring would do.
pub struct VkSuballocGeneral {
    allocator: SubAllocator,
    memory_type_bits: u32,
}

impl VkSuballocGeneral {
    pub fn new(ctx: &VulkanContext, memory_type_bits: u32) -> Self {
        Self {
            allocator: crate::backends::VkSuballoc::<false>::new(ctx).into_allocator(),
            memory_type_bits,
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
        let request = vk_suballoc::Request::new(
            requirements,
            vk_suballoc::Usage::UPLOAD | vk_suballoc::Usage::DEVICE_LOCAL,
            vk_suballoc::ResourceKind::Buffer,
        );
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

// ------------------------------------------------------------ VMA linear pool

/// A VMA custom pool with the linear algorithm and one block of
/// `capacity` bytes, used as a ring buffer.
pub struct VmaLinearPool {
    // The pool holds an `Arc` of the allocator and is destroyed first.
    pool: vk_mem::AllocatorPool,
    info: vk_mem::AllocationCreateInfo,
    memory_type_bits: u32,
}

impl VmaLinearPool {
    pub fn new(ctx: &VulkanContext, capacity: u64, memory_type_bits: u32) -> Self {
        let allocator = std::sync::Arc::new(crate::backends::Vma::new(ctx).into_allocator());
        let upload = vk_mem::AllocationCreateInfo {
            flags: vk_mem::AllocationCreateFlags::MAPPED,
            required_flags: vk::MemoryPropertyFlags::HOST_VISIBLE
                | vk::MemoryPropertyFlags::HOST_COHERENT,
            preferred_flags: vk::MemoryPropertyFlags::DEVICE_LOCAL,
            ..Default::default()
        };
        // SAFETY: a live allocator.
        let memory_type_index =
            unsafe { allocator.find_memory_type_index(memory_type_bits, &upload) }
                .expect("vmaFindMemoryTypeIndex");
        let pool = allocator
            .create_pool(&vk_mem::PoolCreateInfo {
                memory_type_index,
                flags: vk_mem::AllocatorPoolCreateFlags::LINEAR_ALGORITHM,
                block_size: capacity,
                min_block_count: 1,
                max_block_count: 1,
                ..Default::default()
            })
            .expect("vmaCreatePool");
        Self {
            pool,
            info: vk_mem::AllocationCreateInfo {
                flags: vk_mem::AllocationCreateFlags::MAPPED,
                ..Default::default()
            },
            memory_type_bits,
        }
    }
}

impl RingBackend for VmaLinearPool {
    type Handle = vk_mem::Allocation;

    #[inline]
    fn allocate(&mut self, size: u64, align: u64) -> Option<Self::Handle> {
        let requirements = vk::MemoryRequirements {
            size,
            alignment: align,
            memory_type_bits: self.memory_type_bits,
        };
        // SAFETY: a live pool of a live allocator.
        unsafe { self.pool.allocate_memory(&requirements, &self.info) }.ok()
    }

    #[inline]
    fn release(&mut self, handles: &mut Vec<Self::Handle>) {
        let allocator = self.pool.allocator();
        for mut handle in handles.drain(..) {
            // SAFETY: a live allocation of this allocator, unused by the
            // GPU (its frame completed); oldest first, as a ring must free.
            unsafe { allocator.free_memory(&mut handle) };
        }
    }

    fn placement(&self, handle: &Self::Handle) -> (u64, u64) {
        let info = self.pool.allocator().get_allocation_info(handle);
        (vk::Handle::as_raw(info.device_memory), info.offset)
    }

    fn live_allocations(&mut self) -> Option<u64> {
        let stats = self.pool.get_statistics().expect("vmaGetPoolStatistics");
        Some(u64::from(stats.allocationCount))
    }

    fn write_tag(&mut self, handle: &mut Self::Handle, size: u64, tag: u64) -> bool {
        let ptr = self
            .pool
            .allocator()
            .get_allocation_info(handle)
            .mapped_data;
        if ptr.is_null() {
            return false;
        }
        // SAFETY: a live `MAPPED` allocation of `size` bytes.
        unsafe { poke(ptr.cast(), size, tag) };
        true
    }

    fn read_tag(&mut self, handle: &mut Self::Handle, size: u64) -> Option<(u64, u64)> {
        let ptr = self
            .pool
            .allocator()
            .get_allocation_info(handle)
            .mapped_data;
        // SAFETY: as in `write_tag`.
        (!ptr.is_null()).then(|| unsafe { peek(ptr.cast(), size) })
    }
}

// ------------------------------------------------------------------ gpu-alloc

/// gpu-alloc with its transient usage (free-list chunks, bumped).
pub struct GpuAllocTransient {
    inner: crate::backends::GpuAlloc,
    memory_type_bits: u32,
}

impl GpuAllocTransient {
    pub fn new(ctx: &VulkanContext, memory_type_bits: u32) -> Self {
        Self {
            inner: crate::backends::GpuAlloc::new(ctx),
            memory_type_bits,
        }
    }
}

impl RingBackend for GpuAllocTransient {
    type Handle = gpu_alloc::MemoryBlock<vk::DeviceMemory>;

    #[inline]
    fn allocate(&mut self, size: u64, align: u64) -> Option<Self::Handle> {
        let request = gpu_alloc::Request {
            size,
            align_mask: align - 1,
            usage: gpu_alloc::UsageFlags::FAST_DEVICE_ACCESS
                | gpu_alloc::UsageFlags::UPLOAD
                | gpu_alloc::UsageFlags::HOST_ACCESS
                | gpu_alloc::UsageFlags::TRANSIENT,
            memory_types: self.memory_type_bits,
        };
        self.inner.alloc(request)
    }

    #[inline]
    fn release(&mut self, handles: &mut Vec<Self::Handle>) {
        for handle in handles.drain(..) {
            crate::backends::Backend::free(&mut self.inner, handle);
        }
    }

    fn placement(&self, handle: &Self::Handle) -> (u64, u64) {
        (vk::Handle::as_raw(*handle.memory()), handle.offset())
    }

    fn live_allocations(&mut self) -> Option<u64> {
        None
    }

    fn write_tag(&mut self, handle: &mut Self::Handle, size: u64, tag: u64) -> bool {
        // SAFETY: mapped for the call, `size` bytes of a live block.
        let wrote = self
            .inner
            .with_mapped(handle, size, |ptr| unsafe { poke(ptr, size, tag) });
        wrote.is_some()
    }

    fn read_tag(&mut self, handle: &mut Self::Handle, size: u64) -> Option<(u64, u64)> {
        // SAFETY: as in `write_tag`.
        self.inner
            .with_mapped(handle, size, |ptr| unsafe { peek(ptr, size) })
    }
}

// -------------------------------------------------------------- gpu-allocator

/// gpu-allocator's general path (it has no linear allocator).
pub struct GpuAllocatorGeneral {
    inner: crate::backends::GpuAllocator,
    memory_type_bits: u32,
}

impl GpuAllocatorGeneral {
    pub fn new(ctx: &VulkanContext, memory_type_bits: u32) -> Self {
        Self {
            inner: crate::backends::GpuAllocator::new(ctx),
            memory_type_bits,
        }
    }
}

impl RingBackend for GpuAllocatorGeneral {
    type Handle = gpu_allocator::vulkan::Allocation;

    #[inline]
    fn allocate(&mut self, size: u64, align: u64) -> Option<Self::Handle> {
        let requirements = vk::MemoryRequirements {
            size,
            alignment: align,
            memory_type_bits: self.memory_type_bits,
        };
        self.inner.upload(requirements)
    }

    #[inline]
    fn release(&mut self, handles: &mut Vec<Self::Handle>) {
        for handle in handles.drain(..) {
            crate::backends::Backend::free(&mut self.inner, handle);
        }
    }

    fn placement(&self, handle: &Self::Handle) -> (u64, u64) {
        // SAFETY: only read, to compare.
        (
            vk::Handle::as_raw(unsafe { handle.memory() }),
            handle.offset(),
        )
    }

    fn live_allocations(&mut self) -> Option<u64> {
        None
    }

    fn write_tag(&mut self, handle: &mut Self::Handle, size: u64, tag: u64) -> bool {
        let Some(ptr) = handle.mapped_ptr() else {
            return false;
        };
        // SAFETY: a live, mapped CpuToGpu allocation of `size` bytes.
        unsafe { poke(ptr.as_ptr().cast(), size, tag) };
        true
    }

    fn read_tag(&mut self, handle: &mut Self::Handle, size: u64) -> Option<(u64, u64)> {
        let ptr = handle.mapped_ptr()?;
        // SAFETY: as in `write_tag`.
        Some(unsafe { peek(ptr.as_ptr().cast(), size) })
    }
}

// ---------------------------------------------------------------------- cores

/// Our bare ring core: the floor under the ring row.
pub struct OurLinearCore {
    core: vk_suballoc::offset::LinearAllocator,
}

impl OurLinearCore {
    pub fn new(capacity: u64) -> Self {
        Self {
            // Three sealed frames at most (two in the trace, and one spare
            // as the ring has more).
            core: vk_suballoc::offset::LinearAllocator::new(capacity, 3).expect("capacity"),
        }
    }
}

impl RingBackend for OurLinearCore {
    type Handle = vk_suballoc::offset::LinearAllocation;

    #[inline]
    fn allocate(&mut self, size: u64, align: u64) -> Option<Self::Handle> {
        self.core.allocate(size, align).ok()
    }

    #[inline]
    fn release(&mut self, handles: &mut Vec<Self::Handle>) {
        handles.clear();
    }

    #[inline]
    fn reclaim(&mut self, done: u64) {
        if let Some(last) = done.checked_sub(1) {
            self.core.reclaim_through(last);
        }
    }

    #[inline]
    fn end_frame(&mut self, _frame: u64) {
        self.core
            .finish_frame()
            .expect("three frames in flight at most");
    }

    fn placement(&self, handle: &Self::Handle) -> (u64, u64) {
        (0, handle.offset)
    }

    fn live_allocations(&mut self) -> Option<u64> {
        // Bytes held count as live allocations here: none once reclaimed.
        Some(u64::from(self.core.used() != 0))
    }
}

/// VMA's linear algorithm alone, in a virtual block.
pub struct VmaVirtualLinearCore {
    block: vk_mem::VirtualBlock,
    live: u64,
}

impl VmaVirtualLinearCore {
    pub fn new(capacity: u64) -> Self {
        let block = vk_mem::VirtualBlock::new(vk_mem::VirtualBlockCreateInfo {
            size: capacity,
            flags: vk_mem::VirtualBlockCreateFlags::VMA_VIRTUAL_BLOCK_CREATE_LINEAR_ALGORITHM_BIT,
            allocation_callbacks: None,
        })
        .expect("vmaCreateVirtualBlock");
        Self { block, live: 0 }
    }
}

impl RingBackend for VmaVirtualLinearCore {
    type Handle = (vk_mem::VirtualAllocation, u64);

    #[inline]
    fn allocate(&mut self, size: u64, align: u64) -> Option<Self::Handle> {
        // SAFETY: a live block; a valid size and a power-of-two alignment.
        let allocation = unsafe {
            self.block.allocate(vk_mem::VirtualAllocationCreateInfo {
                size,
                alignment: align,
                user_data: 0,
                flags: vk_mem::VirtualAllocationCreateFlags::empty(),
            })
        }
        .ok();
        self.live += u64::from(allocation.is_some());
        allocation
    }

    #[inline]
    fn release(&mut self, handles: &mut Vec<Self::Handle>) {
        self.live -= handles.len() as u64;
        for (mut handle, _) in handles.drain(..) {
            // SAFETY: a live allocation of this block, oldest first.
            unsafe { self.block.free(&mut handle) };
        }
    }

    fn placement(&self, handle: &Self::Handle) -> (u64, u64) {
        (0, handle.1)
    }

    fn live_allocations(&mut self) -> Option<u64> {
        // The virtual block has no statistics in vk-mem 0.5: the handles
        // this row gave back.
        Some(self.live)
    }
}
