//! The `ring` trace's peer rows (`ring_backends.rs` has the table of all
//! rows and vk-suballoc's): a VMA linear pool used as a ring buffer,
//! gpu-alloc's transient path, gpu-allocator's general allocator, and the
//! bare linear cores (ours, VMA's virtual block).

use ash::vk;
use vk_mem::Alloc;

use crate::ring::RingBackend;
use crate::ring_backends::{peek, poke};
use crate::vulkan::VulkanContext;

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
        // The pool's memory type is the one VMA picks for the upload row.
        let (allocator, upload) = crate::backends::Vma::new(ctx).into_allocator();
        let allocator = std::sync::Arc::new(allocator);
        // SAFETY: a live allocator.
        let memory_type_index =
            unsafe { allocator.find_memory_type_index(memory_type_bits, &upload) }
                .expect("vmaFindMemoryTypeIndex");
        let pool = allocator
            .create_pool(&vk_mem::PoolCreateInfo {
                memory_type_index,
                // Buffers alone: VMA's docs advise the granularity flag for
                // such a pool, else its allocations (type UNKNOWN through
                // vmaAllocateMemory) pad to bufferImageGranularity wherever
                // it exceeds their alignment (1024 on an NVIDIA GPU).
                flags: vk_mem::AllocatorPoolCreateFlags::LINEAR_ALGORITHM
                    | vk_mem::AllocatorPoolCreateFlags::IGNORE_BUFFER_IMAGE_GRANULARITY,
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
        Some(self.inner.live_allocations())
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
