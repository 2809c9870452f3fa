//! The allocators under test behind one small trait, each called the way its
//! documentation recommends for "I have `VkMemoryRequirements`, give me
//! memory".
//!
//! | allocator | call | notes |
//! |---|---|---|
//! | vk-suballoc | `Allocator::allocate_mut(&Request)` | `Config::default()` (`--empty-block-reserve` sets its `empty_block_reserve`), `Strategy::MinTime` (`--strategy min-memory`, `min-offset` or `max-offset` sets `AllocationDesc::strategy`); `&mut self`, no lock |
//! | vk-suballoc, locked | `Allocator::allocate(&Request)` | the same through `&self`: a lock per memory type |
//! | VMA (vk-mem) | `vmaAllocateMemoryForBuffer` / `ForImage` | `EXTERNALLY_SYNCHRONIZED` (no lock, as the others); `preferredFlags`/`requiredFlags` (the `AUTO` usages need a resource's create info), uploads `MAPPED`; the typed calls VMA's docs recommend over `vmaAllocateMemory`, so it knows buffers from images, on placeholder handles whose requirement query the bench answers from the trace (no driver call) |
//! | gpu-allocator | `Allocator::allocate` | `GpuAllocatorManaged`, `linear` from the resource kind, default block sizes; `&mut self`, no lock |
//! | gpu-alloc | `GpuAllocator::alloc` | `Config::i_am_prototyping()`; per-frame buffers `FAST_DEVICE_ACCESS \| UPLOAD \| HOST_ACCESS \| TRANSIENT`; `&mut self`, no lock |
//! | our core | `OffsetAllocator::allocate(size, align)` | one 4 GiB range, no Vulkan; sizes rounded up to their alignment, as the pools place them (`--strategy min-memory`, `min-offset` or `max-offset`: `allocate_with(size, align, strategy)`) |
//! | offset-allocator | `Allocator::allocate(units)` | one 4 GiB range in units (its sizes are `u32`) of the power of two that pads the trace's requests least (64 bytes on lavapipe); alignment above the unit by padding |
//!
//! The two cores, and the harness alone, are in `backends/cores.rs`;
//! vulkano's allocator and its two suballocators are in `vulkano_peer.rs`.

use ash::vk;

use crate::trace::{Kind, MemUse, Req};
use crate::vulkan::VulkanContext;

mod cores;
pub use cores::{
    HarnessFloor, OffsetAllocatorCore, OurCore, CORE_CAPACITY, MAX_OFFSET, MIN_MEMORY, MIN_OFFSET,
    MIN_TIME,
};

/// An allocator the replay drives.
pub trait Backend {
    /// What an allocation hands back.
    type Handle;
    /// Allocates for `req`; `None` on failure.
    fn allocate(&mut self, req: &Req) -> Option<Self::Handle>;
    /// Frees an allocation.
    fn free(&mut self, handle: Self::Handle);
    /// The memory object and offset of an allocation (the memory is null
    /// for the cores).
    fn placement(&self, handle: &Self::Handle) -> (vk::DeviceMemory, u64);
    /// `VkDeviceMemory` objects alive by the allocator's own statistics,
    /// where it keeps them (a cross-check of the counting hooks).
    fn own_memory_objects(&self) -> Option<u64> {
        None
    }
}

/// Which allocator.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Which {
    VkSuballoc,
    VkSuballocLocked,
    Vma,
    GpuAllocator,
    GpuAlloc,
    Vulkano,
    OurCore,
    OffsetAllocatorCore,
    VulkanoFreeListCore,
    VulkanoBuddyCore,
}

impl Which {
    pub const ALL: [Self; 10] = [
        Self::VkSuballoc,
        Self::VkSuballocLocked,
        Self::Vma,
        Self::GpuAllocator,
        Self::GpuAlloc,
        Self::Vulkano,
        Self::OurCore,
        Self::OffsetAllocatorCore,
        Self::VulkanoFreeListCore,
        Self::VulkanoBuddyCore,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Self::VkSuballoc => "vk-suballoc",
            Self::VkSuballocLocked => "vk-suballoc (locked)",
            Self::Vma => "vma (vk-mem 0.5)",
            Self::GpuAllocator => "gpu-allocator 0.28",
            Self::GpuAlloc => "gpu-alloc 0.6",
            Self::Vulkano => "vulkano 0.34 (locked)",
            Self::OurCore => "core: vk-suballoc offset",
            Self::OffsetAllocatorCore => "core: offset-allocator 0.2",
            Self::VulkanoFreeListCore => "core: vulkano 0.34 free-list",
            Self::VulkanoBuddyCore => "core: vulkano 0.34 buddy",
        }
    }

    pub fn key(self) -> &'static str {
        match self {
            Self::VkSuballoc => "vk-suballoc",
            Self::VkSuballocLocked => "vk-suballoc-locked",
            Self::Vma => "vma",
            Self::GpuAllocator => "gpu-allocator",
            Self::GpuAlloc => "gpu-alloc",
            Self::Vulkano => "vulkano",
            Self::OurCore => "core-ours",
            Self::OffsetAllocatorCore => "core-offset-allocator",
            Self::VulkanoFreeListCore => "core-vulkano-free-list",
            Self::VulkanoBuddyCore => "core-vulkano-buddy",
        }
    }

    /// Allocates `VkDeviceMemory` (as opposed to a bare core).
    pub fn is_vulkan(self) -> bool {
        !matches!(
            self,
            Self::OurCore
                | Self::OffsetAllocatorCore
                | Self::VulkanoFreeListCore
                | Self::VulkanoBuddyCore
        )
    }

    /// A Vulkan allocator we compare against (not one of our own rows).
    pub fn is_peer(self) -> bool {
        self.is_vulkan() && !matches!(self, Self::VkSuballoc | Self::VkSuballocLocked)
    }

    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|w| w.key() == s)
    }
}

// ---------------------------------------------------------------- vk-suballoc

/// `Config::empty_block_reserve` of the vk-suballoc rows, when
/// `--empty-block-reserve` sets it (0 is VMA's rule: one empty block kept);
/// else the default's.
pub static EMPTY_BLOCK_RESERVE: std::sync::OnceLock<f64> = std::sync::OnceLock::new();

/// The strategy of the vk-suballoc rows' requests and of our core's row,
/// when `--strategy` sets it; else `Strategy::MinTime`, the default.
pub static STRATEGY: std::sync::OnceLock<vk_suballoc::Strategy> = std::sync::OnceLock::new();

/// The strategy `--strategy` set, or the default.
pub fn strategy() -> vk_suballoc::Strategy {
    STRATEGY.get().copied().unwrap_or_default()
}

/// vk-suballoc through `allocate_mut`/`free_mut`, or with `LOCKED` through
/// the `&self` methods that take the memory type's lock.
pub struct VkSuballoc<const LOCKED: bool> {
    allocator: vk_suballoc::Allocator<vk_suballoc::device::AshMemoryDevice>,
    strategy: vk_suballoc::Strategy,
}

impl<const LOCKED: bool> VkSuballoc<LOCKED> {
    pub fn new(ctx: &VulkanContext) -> Self {
        // SAFETY: Vulkan 1.3 instance; the device comes from this physical
        // device; no optional feature is claimed; the context outlives the
        // allocator (backends are dropped before it).
        let device = unsafe {
            vk_suballoc::device::AshMemoryDevice::new(
                &ctx.instance,
                &ctx.counted_device,
                ctx.physical_device,
                vk_suballoc::device::DeviceFeatures::default(),
            )
        };
        let default = vk_suballoc::Config::default();
        let config = vk_suballoc::Config {
            empty_block_reserve: EMPTY_BLOCK_RESERVE
                .get()
                .copied()
                .unwrap_or(default.empty_block_reserve),
            ..default
        };
        let allocator =
            vk_suballoc::Allocator::new(device, config).expect("default config is valid");
        Self {
            allocator,
            strategy: strategy(),
        }
    }

    /// The allocator, made as this row makes it (the `ring` trace's rows).
    pub fn into_allocator(self) -> vk_suballoc::Allocator<vk_suballoc::device::AshMemoryDevice> {
        self.allocator
    }

    /// The allocator, for its `&self` methods (`--defragment` plans).
    pub fn allocator(&self) -> &vk_suballoc::Allocator<vk_suballoc::device::AshMemoryDevice> {
        &self.allocator
    }
}

/// vk-suballoc's resource kind for a trace request's: buffers are linear,
/// the traces' images optimal-tiling.
#[inline]
pub fn resource_kind(kind: Kind) -> vk_suballoc::ResourceKind {
    match kind {
        Kind::Buffer => vk_suballoc::ResourceKind::Buffer,
        Kind::Image => vk_suballoc::ResourceKind::OptimalImage,
    }
}

impl<const LOCKED: bool> Backend for VkSuballoc<LOCKED> {
    type Handle = vk_suballoc::Allocation;

    #[inline]
    fn allocate(&mut self, req: &Req) -> Option<Self::Handle> {
        let usage = match req.usage {
            MemUse::DeviceLocal => vk_suballoc::Usage::DEVICE_LOCAL,
            MemUse::Upload => vk_suballoc::Usage::UPLOAD | vk_suballoc::Usage::DEVICE_LOCAL,
        };
        let mut request =
            vk_suballoc::Request::new(req.requirements, usage, resource_kind(req.kind));
        request.desc.strategy = self.strategy;
        if LOCKED {
            self.allocator.allocate(&request).ok()
        } else {
            self.allocator.allocate_mut(&request).ok()
        }
    }

    #[inline]
    fn free(&mut self, handle: Self::Handle) {
        // SAFETY: no GPU work uses the memory (none is submitted).
        let result = unsafe {
            if LOCKED {
                self.allocator.free(handle)
            } else {
                self.allocator.free_mut(handle)
            }
        };
        result.expect("own, live allocation");
    }

    fn placement(&self, handle: &Self::Handle) -> (vk::DeviceMemory, u64) {
        (handle.memory(), handle.offset())
    }

    fn own_memory_objects(&self) -> Option<u64> {
        Some(u64::from(self.allocator.stats().memory_objects))
    }
}

// ------------------------------------------------------------------------ VMA

pub struct Vma {
    allocator: vk_mem::Allocator,
    device_local: vk_mem::AllocationCreateInfo,
    upload: vk_mem::AllocationCreateInfo,
}

impl Vma {
    pub fn new(ctx: &VulkanContext) -> Self {
        let mut info = vk_mem::AllocatorCreateInfo::new(
            &ctx.instance,
            &ctx.counted_device,
            ctx.physical_device,
        );
        info.vulkan_api_version = vk::API_VERSION_1_3;
        // One thread drives it, as every other allocator here: no lock.
        info.flags = vk_mem::AllocatorCreateFlags::EXTERNALLY_SYNCHRONIZED;
        // SAFETY: valid instance/device of API 1.3; the allocator is dropped
        // before the device.
        let allocator = unsafe { vk_mem::Allocator::new(info) }.expect("vmaCreateAllocator");
        let device_local = vk_mem::AllocationCreateInfo {
            preferred_flags: vk::MemoryPropertyFlags::DEVICE_LOCAL,
            ..Default::default()
        };
        // Persistently mapped, as VMA's docs advise for per-frame uploads
        // (and as the other allocators map every host-visible block).
        let upload = vk_mem::AllocationCreateInfo {
            flags: vk_mem::AllocationCreateFlags::MAPPED,
            required_flags: vk::MemoryPropertyFlags::HOST_VISIBLE
                | vk::MemoryPropertyFlags::HOST_COHERENT,
            preferred_flags: vk::MemoryPropertyFlags::DEVICE_LOCAL,
            ..Default::default()
        };
        Self {
            allocator,
            device_local,
            upload,
        }
    }
}

impl Vma {
    /// The allocator, made as this row makes it, and the create info of its
    /// uploads (the `ring` trace's VMA pool).
    pub fn into_allocator(self) -> (vk_mem::Allocator, vk_mem::AllocationCreateInfo) {
        (self.allocator, self.upload)
    }
}

impl Backend for Vma {
    type Handle = vk_mem::Allocation;

    #[inline]
    fn allocate(&mut self, req: &Req) -> Option<Self::Handle> {
        use vk_mem::Alloc;
        let info = match req.usage {
            MemUse::DeviceLocal => &self.device_local,
            MemUse::Upload => &self.upload,
        };
        // VMA's typed calls query the resource's requirements through the
        // device table: the bench's hook answers the placeholder handle with
        // the trace's requirements (no driver call, no resource).
        crate::vulkan::set_pending_requirements(&req.requirements);
        // SAFETY: the placeholder handles are answered by the hooks and
        // never reach the driver (the hooks drop a dedicated-allocation
        // link naming them).
        unsafe {
            match req.kind {
                Kind::Buffer => self
                    .allocator
                    .allocate_memory_for_buffer(crate::vulkan::unqueried_buffer(), info),
                Kind::Image => self
                    .allocator
                    .allocate_memory_for_image(crate::vulkan::unqueried_image(), info),
            }
        }
        .ok()
    }

    #[inline]
    fn free(&mut self, mut handle: Self::Handle) {
        // SAFETY: a live allocation of this allocator, unused by the GPU.
        unsafe { self.allocator.free_memory(&mut handle) };
    }

    fn placement(&self, handle: &Self::Handle) -> (vk::DeviceMemory, u64) {
        let info = self.allocator.get_allocation_info(handle);
        (info.device_memory, info.offset)
    }
}

// -------------------------------------------------------------- gpu-allocator

pub struct GpuAllocator {
    allocator: gpu_allocator::vulkan::Allocator,
}

impl GpuAllocator {
    pub fn new(ctx: &VulkanContext) -> Self {
        let allocator =
            gpu_allocator::vulkan::Allocator::new(&gpu_allocator::vulkan::AllocatorCreateDesc {
                instance: ctx.instance.clone(),
                device: ctx.counted_device.clone(),
                physical_device: ctx.physical_device,
                debug_settings: Default::default(),
                buffer_device_address: false,
                allocation_sizes: Default::default(),
            })
            .expect("gpu-allocator Allocator::new");
        Self { allocator }
    }
}

impl GpuAllocator {
    /// An upload (`CpuToGpu`, linear) allocation for `requirements`.
    #[inline]
    pub fn upload(
        &mut self,
        requirements: vk::MemoryRequirements,
    ) -> Option<gpu_allocator::vulkan::Allocation> {
        self.allocator
            .allocate(&gpu_allocator::vulkan::AllocationCreateDesc {
                name: "",
                requirements,
                location: gpu_allocator::MemoryLocation::CpuToGpu,
                linear: true,
                allocation_scheme: gpu_allocator::vulkan::AllocationScheme::GpuAllocatorManaged,
            })
            .ok()
    }

    /// Live allocations by its own report (`generate_report`). Its `Drop`
    /// frees every block whatever is still allocated in it, so the hooks
    /// see no memory left behind either way.
    pub fn live_allocations(&self) -> u64 {
        self.allocator.generate_report().allocations.len() as u64
    }
}

impl Backend for GpuAllocator {
    type Handle = gpu_allocator::vulkan::Allocation;

    #[inline]
    fn allocate(&mut self, req: &Req) -> Option<Self::Handle> {
        let location = match req.usage {
            MemUse::DeviceLocal => gpu_allocator::MemoryLocation::GpuOnly,
            MemUse::Upload => gpu_allocator::MemoryLocation::CpuToGpu,
        };
        self.allocator
            .allocate(&gpu_allocator::vulkan::AllocationCreateDesc {
                name: "",
                requirements: req.requirements,
                location,
                linear: req.kind == Kind::Buffer,
                allocation_scheme: gpu_allocator::vulkan::AllocationScheme::GpuAllocatorManaged,
            })
            .ok()
    }

    #[inline]
    fn free(&mut self, handle: Self::Handle) {
        self.allocator.free(handle).expect("gpu-allocator free");
    }

    fn placement(&self, handle: &Self::Handle) -> (vk::DeviceMemory, u64) {
        // SAFETY: only read, to bind or compare.
        (unsafe { handle.memory() }, handle.offset())
    }
}

// ------------------------------------------------------------------ gpu-alloc

pub struct GpuAlloc {
    allocator: gpu_alloc::GpuAllocator<vk::DeviceMemory>,
    device: ash::Device,
}

impl GpuAlloc {
    pub fn new(ctx: &VulkanContext) -> Self {
        // SAFETY: the physical device belongs to the instance.
        let mut props = unsafe {
            gpu_alloc_ash::device_properties(
                &ctx.instance,
                vk::API_VERSION_1_3,
                ctx.physical_device,
            )
        }
        .expect("gpu-alloc device properties");
        // Not enabled on the device (gpu-alloc's own docs ask for this).
        props.buffer_device_address = false;
        let allocator = gpu_alloc::GpuAllocator::new(gpu_alloc::Config::i_am_prototyping(), props);
        Self {
            allocator,
            device: ctx.counted_device.clone(),
        }
    }
}

impl GpuAlloc {
    /// `GpuAllocator::alloc` of `request`.
    #[inline]
    pub fn alloc(
        &mut self,
        request: gpu_alloc::Request,
    ) -> Option<gpu_alloc::MemoryBlock<vk::DeviceMemory>> {
        // SAFETY: the device is the one the properties came from.
        unsafe {
            self.allocator
                .alloc(gpu_alloc_ash::AshMemoryDevice::wrap(&self.device), request)
        }
        .ok()
    }

    /// Maps the first `size` bytes of `block`, runs `f` on them, unmaps.
    pub fn with_mapped<T>(
        &self,
        block: &mut gpu_alloc::MemoryBlock<vk::DeviceMemory>,
        size: u64,
        f: impl FnOnce(*mut u8) -> T,
    ) -> Option<T> {
        let device = gpu_alloc_ash::AshMemoryDevice::wrap(&self.device);
        // SAFETY: a block of this allocator and device.
        let ptr = unsafe { block.map(device, 0, size as usize) }.ok()?;
        let result = f(ptr.as_ptr());
        // SAFETY: mapped just above.
        unsafe { block.unmap(device) };
        Some(result)
    }
}

impl Backend for GpuAlloc {
    type Handle = gpu_alloc::MemoryBlock<vk::DeviceMemory>;

    #[inline]
    fn allocate(&mut self, req: &Req) -> Option<Self::Handle> {
        let usage = match req.usage {
            MemUse::DeviceLocal => gpu_alloc::UsageFlags::FAST_DEVICE_ACCESS,
            MemUse::Upload => {
                gpu_alloc::UsageFlags::FAST_DEVICE_ACCESS
                    | gpu_alloc::UsageFlags::UPLOAD
                    | gpu_alloc::UsageFlags::HOST_ACCESS
                    | gpu_alloc::UsageFlags::TRANSIENT
            }
        };
        let request = gpu_alloc::Request {
            size: req.requirements.size,
            align_mask: req.requirements.alignment - 1,
            usage,
            memory_types: req.requirements.memory_type_bits,
        };
        // SAFETY: the device is the one the properties came from.
        unsafe {
            self.allocator
                .alloc(gpu_alloc_ash::AshMemoryDevice::wrap(&self.device), request)
        }
        .ok()
    }

    #[inline]
    fn free(&mut self, handle: Self::Handle) {
        // SAFETY: allocated from this allocator and device, unused by the GPU.
        unsafe {
            self.allocator
                .dealloc(gpu_alloc_ash::AshMemoryDevice::wrap(&self.device), handle)
        };
    }

    fn placement(&self, handle: &Self::Handle) -> (vk::DeviceMemory, u64) {
        (*handle.memory(), handle.offset())
    }
}

impl Drop for GpuAlloc {
    fn drop(&mut self) {
        // SAFETY: every block was deallocated by the replay.
        unsafe {
            self.allocator
                .cleanup(gpu_alloc_ash::AshMemoryDevice::wrap(&self.device))
        };
    }
}
