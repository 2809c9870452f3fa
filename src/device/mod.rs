//! The backend seam: what the allocator needs from a Vulkan device.
//!
//! The allocator never calls Vulkan directly. It talks to a device through
//! [`gpu_alloc_types::MemoryDevice`] (allocate, free, map, unmap, flush and
//! invalidate `VkDeviceMemory`) plus [`MemoryDeviceExt`], a small extension
//! for what that trait cannot say: the device's memory layout and limits,
//! allocations dedicated to one buffer or image (`VkMemoryDedicatedAllocateInfo`),
//! memory priority, heap budgets, debug names, the frame fences that tell
//! when the GPU is done with memory, and the buffers of upload rings and
//! deferred destruction. [`MemoryDeviceExt`] is an `unsafe` trait: the
//! allocator hands out the bytes of the memory it maps through safe
//! methods, so an implementation vouches for its mappings (its `# Safety`
//! section lists what).
//!
//! Two backends implement it: [`AshMemoryDevice`] over a real `ash::Device`,
//! and, with the `fake-device` feature, `fake::FakeDevice`, an
//! in-process device with host memory behind every allocation, realistic
//! memory layouts of real GPUs and fault injection, for tests of every path a
//! software driver like lavapipe never takes.

mod ash_device;
mod error;
#[cfg(feature = "fake-device")]
pub mod fake;

use std::fmt::Debug;

use ash::vk;
pub(crate) use ash_device::chain_structures;
pub use ash_device::{AshMemoryDevice, DeviceFeatures};
pub use error::DeviceError;
pub use gpu_alloc_types::{
    AllocationFlags, DeviceProperties, MemoryDevice, MemoryHeap, MemoryPropertyFlags, MemoryType,
};

/// Everything about a device's memory the allocator reads once, at creation.
#[derive(Debug)]
pub struct MemoryProperties {
    /// Memory types and heaps, `maxMemoryAllocationCount`,
    /// `maxMemoryAllocationSize`, `nonCoherentAtomSize`, and whether buffer
    /// device address is enabled.
    pub device: DeviceProperties<'static>,
    /// `VkPhysicalDeviceLimits::bufferImageGranularity`: linear and optimal
    /// resources must not share a page of this size in one `VkDeviceMemory`.
    pub buffer_image_granularity: u64,
    /// `VkPhysicalDeviceMaintenance4Properties::maxBufferSize`: no
    /// `VkBuffer` of this device may be larger
    /// (VUID-VkBufferCreateInfo-size-06409). The allocator checks it before
    /// every buffer it makes: upload-ring chunks, and the buffers of the
    /// ash helpers (`create_buffer`, `create_aliasing_buffer`,
    /// `memory_type_for_buffer`)
    /// ([`Error::SizeExceedsMaxBuffer`](crate::Error::SizeExceedsMaxBuffer)).
    /// `u64::MAX` when unknown: the device has neither Vulkan 1.3 nor
    /// `VK_KHR_maintenance4`, or reported 0; no limit is checked then.
    pub max_buffer_size: u64,
    /// `VK_EXT_memory_budget` is enabled: [`MemoryDeviceExt::heap_budgets`]
    /// reports real budgets.
    pub memory_budget: bool,
    /// `VK_EXT_memory_priority` is enabled: allocations can carry a priority.
    pub memory_priority: bool,
    /// The memory types with `VK_MEMORY_PROPERTY_DEVICE_COHERENT_BIT_AMD` or
    /// `VK_MEMORY_PROPERTY_DEVICE_UNCACHED_BIT_AMD`, one bit per type index.
    /// `gpu-alloc-types`' flags cannot express these, so they are reported
    /// here. AMD drivers list such types whenever `VK_AMD_device_coherent_memory`
    /// is supported, but allocating from them without the device's
    /// `deviceCoherentMemory` feature is invalid
    /// (VUID-vkAllocateMemory-deviceCoherentMemory-02790), and even with it
    /// they are uncached and slow, meant for crash breadcrumbs.
    pub amd_device_coherent_types: u32,
    /// `VK_AMD_device_coherent_memory` and its `deviceCoherentMemory` feature
    /// are enabled: the types above may be used, but only by a request
    /// whose `memoryTypeBits` allow no other type that suits its usage
    /// (crash breadcrumbs); an ordinary request never falls back to them.
    /// Without it the allocator never uses them.
    pub amd_device_coherent_memory: bool,
    /// The `protectedMemory` feature is enabled: custom pools may use the
    /// memory types with `VK_MEMORY_PROPERTY_PROTECTED_BIT` (other requests
    /// never do). Without it the allocator never allocates from them
    /// (VUID-VkMemoryAllocateInfo-memoryTypeIndex-01872).
    pub protected_memory: bool,
    /// The GPU, as memory dumps name it; `None` when the backend does not
    /// know (the dump then says `"unknown"`).
    pub gpu: Option<GpuInfo>,
    /// The external memory handle types memory of this device may be
    /// exported as, when the backend knows: [`Allocator::create_pool`](crate::Allocator::create_pool)
    /// then refuses a [`PoolDesc::export`](crate::PoolDesc::export) naming
    /// others. `None`: the backend cannot tell, as support depends on each
    /// resource's create info (`vkGetPhysicalDeviceExternalBufferProperties`,
    /// `vkGetPhysicalDeviceImageFormatProperties2`), and checking is the
    /// caller's. [`AshMemoryDevice`] says `None`.
    pub exportable_handle_types: Option<vk::ExternalMemoryHandleTypeFlags>,
}

/// The GPU's name, API version and type, for memory dumps
/// ([`MemoryProperties::gpu`],
/// [`MemoryMap::with_gpu`](crate::report::MemoryMap::with_gpu)).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GpuInfo {
    /// `VkPhysicalDeviceProperties::deviceName`.
    pub name: String,
    /// `VkPhysicalDeviceProperties::apiVersion`.
    pub api_version: u32,
    /// `VkPhysicalDeviceProperties::deviceType`.
    pub device_type: vk::PhysicalDeviceType,
}

impl From<&vk::PhysicalDeviceProperties> for GpuInfo {
    fn from(properties: &vk::PhysicalDeviceProperties) -> Self {
        let name = properties
            .device_name_as_c_str()
            .map(|name| name.to_string_lossy().into_owned())
            .unwrap_or_default();
        Self {
            name,
            api_version: properties.api_version,
            device_type: properties.device_type,
        }
    }
}

/// A heap's budget and current usage in bytes, as `VK_EXT_memory_budget`
/// reports them (for the whole process, not only this allocator). The
/// allocator reads a reported budget of 0 as `Config::budget_fraction` of
/// the heap, one larger than the heap as the heap's size (in a heap with a
/// `Config::heap_size_limits` entry, one larger than what others use plus
/// the limit as that), and a usage below its own memory in the heap as
/// that memory ([`Allocator::budgets`](crate::Allocator::budgets)).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HeapBudget {
    /// How much this process can use before allocations may fail or degrade.
    pub budget: u64,
    /// How much this process uses now.
    pub usage: u64,
}

/// The resource a dedicated `VkDeviceMemory` is made for
/// (`VkMemoryDedicatedAllocateInfo`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DedicatedTarget {
    /// A buffer, bound at offset 0 of the new memory.
    Buffer(vk::Buffer),
    /// An image, bound at offset 0 of the new memory.
    Image(vk::Image),
}

/// The driver's say on dedicated memory: `VkMemoryDedicatedRequirements`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct DedicatedHint {
    /// `requiresDedicatedAllocation`: the resource must have its own memory.
    pub required: bool,
    /// `prefersDedicatedAllocation`: the resource is faster with its own memory.
    pub preferred: bool,
}

impl DedicatedHint {
    /// What a filled `VkMemoryDedicatedRequirements` says.
    pub fn from_requirements(requirements: &vk::MemoryDedicatedRequirements<'_>) -> Self {
        Self {
            required: requirements.requires_dedicated_allocation == vk::TRUE,
            preferred: requirements.prefers_dedicated_allocation == vk::TRUE,
        }
    }
}

/// One `vkAllocateMemory` call.
#[derive(Clone, Copy, Debug)]
pub struct AllocateInfo<'a> {
    /// Size in bytes.
    pub size: u64,
    /// Index of the memory type.
    pub memory_type: u32,
    /// `DEVICE_ADDRESS` when buffers with device addresses may use the memory.
    pub flags: AllocationFlags,
    /// Dedicate the memory to this resource.
    pub dedicated: Option<DedicatedTarget>,
    /// `VK_EXT_memory_priority` priority in `[0, 1]` (the allocator clamps
    /// what its caller asked for, NaN as 0.5); ignored without it. `None`:
    /// none asked, which is Vulkan's default, [`DEFAULT_PRIORITY`] (the ash
    /// backend passes that value then, with the extension).
    pub priority: Option<f32>,
    /// Debug name for the new memory object (`VK_EXT_debug_utils`).
    pub name: Option<&'a str>,
    /// Handle types the memory can be exported as
    /// (`VkExportMemoryAllocateInfo::handleTypes`); empty: not exportable,
    /// and nothing is chained. Only a custom pool made with
    /// [`PoolDesc::export`](crate::PoolDesc::export) asks for any.
    pub export_handle_types: vk::ExternalMemoryHandleTypeFlags,
}

impl AllocateInfo<'static> {
    /// A plain allocation: what `MemoryDevice::allocate_memory` asks for.
    pub const fn plain(size: u64, memory_type: u32, flags: AllocationFlags) -> Self {
        Self {
            size,
            memory_type,
            flags,
            dedicated: None,
            priority: None,
            name: None,
            export_handle_types: vk::ExternalMemoryHandleTypeFlags::empty(),
        }
    }
}

/// Every `VkExternalMemoryHandleTypeFlagBits` value Vulkan defines, as
/// ash 0.38 (Vulkan 1.3.281) knows them: bits 0 to 12 and 14. Any other
/// bit in `VkExportMemoryAllocateInfo::handleTypes` breaks
/// VUID-VkExportMemoryAllocateInfo-handleTypes-parameter.
pub(crate) const DEFINED_HANDLE_TYPES: vk::ExternalMemoryHandleTypeFlags = {
    use vk::ExternalMemoryHandleTypeFlags as T;
    T::from_raw(
        T::OPAQUE_FD.as_raw()
            | T::OPAQUE_WIN32.as_raw()
            | T::OPAQUE_WIN32_KMT.as_raw()
            | T::D3D11_TEXTURE.as_raw()
            | T::D3D11_TEXTURE_KMT.as_raw()
            | T::D3D12_HEAP.as_raw()
            | T::D3D12_RESOURCE.as_raw()
            | T::HOST_ALLOCATION_EXT.as_raw()
            | T::HOST_MAPPED_FOREIGN_MEMORY_EXT.as_raw()
            | T::DMA_BUF_EXT.as_raw()
            | T::ANDROID_HARDWARE_BUFFER_ANDROID.as_raw()
            | T::ZIRCON_VMO_FUCHSIA.as_raw()
            | T::RDMA_ADDRESS_NV.as_raw()
            | T::SCREEN_BUFFER_QNX.as_raw(),
    )
};

/// The handle types every driver reports `DEDICATED_ONLY` for (the
/// Vulkan specification requires it of D3D11 textures and D3D12
/// resources, whose external APIs know no suballocated memory): memory
/// exported as one of them must be dedicated to a named image or buffer
/// (`VkMemoryDedicatedAllocateInfo`, VUID-VkMemoryAllocateInfo-pNext-00639),
/// never a block or dedicated memory for no one resource. (QNX Screen
/// buffers, required so too, are import-only: no pool exports them.)
pub(crate) const DEDICATED_ONLY_HANDLE_TYPES: vk::ExternalMemoryHandleTypeFlags = {
    use vk::ExternalMemoryHandleTypeFlags as T;
    T::from_raw(
        T::D3D11_TEXTURE.as_raw() | T::D3D11_TEXTURE_KMT.as_raw() | T::D3D12_RESOURCE.as_raw(),
    )
};

/// The priority of memory allocated without `VkMemoryPriorityAllocateInfoEXT`
/// (the `VK_EXT_memory_priority` specification): what [`AllocateInfo::priority`]
/// `None` stands for.
pub const DEFAULT_PRIORITY: f32 = 0.5;

/// The `VK_EXT_memory_priority` value for a requested priority
/// ([`AllocateInfo::priority`]): clamped to `[0, 1]`
/// (VUID-VkMemoryPriorityAllocateInfoEXT-priority-02602), and NaN, which
/// `clamp` would pass on, as Vulkan's default of 0.5.
pub(crate) fn memory_priority(priority: f32) -> f32 {
    if priority.is_nan() {
        DEFAULT_PRIORITY
    } else {
        priority.clamp(0.0, 1.0)
    }
}

/// A [`DeviceError`] in the narrower form `MemoryDevice::allocate_memory`
/// returns (host memory, or device memory for everything else).
pub(crate) fn out_of_memory(error: DeviceError) -> gpu_alloc_types::OutOfMemory {
    match error {
        DeviceError::OutOfHostMemory => gpu_alloc_types::OutOfMemory::OutOfHostMemory,
        _ => gpu_alloc_types::OutOfMemory::OutOfDeviceMemory,
    }
}

/// What a frame's GPU work signals when it completes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FrameSignal {
    /// A fence passed to the frame's last `vkQueueSubmit`.
    Fence(vk::Fence),
    /// A timeline semaphore that reaches `value` when the frame is done.
    Timeline {
        /// The timeline semaphore.
        semaphore: vk::Semaphore,
        /// The value the frame's submission signals.
        value: u64,
    },
}

/// What [`gpu_alloc_types::MemoryDevice`] cannot say. Implemented by
/// [`AshMemoryDevice`] and the fake device.
///
/// Every method may be called from several threads at once.
///
/// A method may panic (a bug of the backend, which the engine may catch):
/// the allocator leaves nothing half done behind it, neither the memory
/// object or buffer it made or was freeing nor the frees it took out of the
/// frame queue, and carries on (`tests/fake_device/backend_panics.rs`). But
/// [`raw_memory`](Self::raw_memory), a getter called just after a memory
/// object is made, before it is counted, must not panic: a panic there
/// leaves that memory object made and never freed.
///
/// # Safety
/// The allocator hands out the bytes behind the pointers this device maps
/// through safe methods ([`Allocator::mapped_slice_mut`](crate::Allocator::mapped_slice_mut)),
/// so an implementation must guarantee that:
/// - a pointer returned by [`MemoryDevice::map_memory`] for `offset` and
///   `size` is valid for reads and writes of `size` bytes, and stays so until
///   [`MemoryDevice::unmap_memory`] or [`MemoryDevice::deallocate_memory`] of
///   that memory object;
/// - no two memory objects mapped at once share a byte of host memory, and
///   nothing else writes those bytes from the host meanwhile;
/// - [`memory_properties`](Self::memory_properties) marks host-visible only
///   memory types whose objects it can map;
/// - the requirements [`create_buffer`](Self::create_buffer) returns are
///   the buffer's own, their `size` at least the buffer's: upload rings
///   write through the mapped pointer up to the buffer's size within an
///   allocation of that `size`.
pub unsafe trait MemoryDeviceExt<M>: MemoryDevice<M> + Send + Sync + Debug {
    /// Memory layout and limits. Called once, when the allocator is created.
    fn memory_properties(&self) -> MemoryProperties;

    /// Allocates a `VkDeviceMemory` as `info` describes.
    ///
    /// # Errors
    /// The `vkAllocateMemory` result as a [`DeviceError`].
    ///
    /// # Safety
    /// - `info.memory_type` is an index into the device's memory types and
    ///   `info.size` is not zero (VUID-vkAllocateMemory-pAllocateInfo-01714,
    ///   VUID-VkMemoryAllocateInfo-allocationSize-07899).
    /// - `info.flags` contains `DEVICE_ADDRESS` only when buffer device address
    ///   is enabled on the device.
    /// - a dedicated target is a live resource of this device whose memory
    ///   requirements have this size (VUID-VkMemoryDedicatedAllocateInfo-image-02964).
    /// - `info.export_handle_types` are valid handle types the memory can
    ///   be exported as, for the resources that will be bound to it
    ///   (VUID-VkExportMemoryAllocateInfo-handleTypes-00656), and not an
    ///   Android hardware buffer when the dedicated target is an image
    ///   (VUID-VkMemoryAllocateInfo-pNext-01874: that memory's size is 0).
    unsafe fn allocate(&self, info: &AllocateInfo<'_>) -> Result<M, DeviceError>;

    /// The raw handle of `memory`, as bound to buffers and images. Must not
    /// panic (the trait's docs).
    fn raw_memory(&self, memory: &M) -> vk::DeviceMemory;

    /// Gives `memory` the debug name `name` in place of the one it was made
    /// with ([`AllocateInfo::name`]; `vkSetDebugUtilsObjectNameEXT`), for
    /// [`Allocator::set_name`](crate::Allocator::set_name) on dedicated
    /// memory. Cheap: called under the lock of the memory's pool. A
    /// backend without debug names does nothing, as the default does.
    ///
    /// # Safety
    /// `memory` is a live memory object of this device
    /// (VUID-VkDebugUtilsObjectNameInfoEXT-objectType-02590), and no other
    /// thread names, maps, unmaps or frees it during the call (host access
    /// to `objectHandle` is externally synchronized).
    unsafe fn set_memory_name(&self, memory: &M, name: &str) {
        let _ = (memory, name);
    }

    /// Fills `out[heap]` with the budget of each heap and returns `true`, or
    /// returns `false` when the device cannot tell (no `VK_EXT_memory_budget`).
    fn heap_budgets(&self, out: &mut [HeapBudget]) -> bool;

    /// Whether the GPU work behind `signal` has completed. Never blocks.
    ///
    /// # Errors
    /// [`DeviceError::DeviceLost`] and other failures of
    /// `vkGetFenceStatus` / `vkGetSemaphoreCounterValue`.
    ///
    /// # Safety
    /// `signal` names a live fence, or a live timeline semaphore, of this
    /// device (VUID-vkGetFenceStatus-fence-parameter,
    /// VUID-vkGetSemaphoreCounterValue-semaphore-parameter, -03255).
    unsafe fn is_signalled(&self, signal: FrameSignal) -> Result<bool, DeviceError>;

    /// Waits up to `timeout_ns` for `signal`; returns whether it completed.
    ///
    /// # Errors
    /// As [`is_signalled`](Self::is_signalled).
    ///
    /// # Safety
    /// As [`is_signalled`](Self::is_signalled), for the whole wait
    /// (VUID-vkWaitForFences-pFences-parameter,
    /// VUID-VkSemaphoreWaitInfo-pSemaphores-03256).
    unsafe fn wait_signalled(
        &self,
        signal: FrameSignal,
        timeout_ns: u64,
    ) -> Result<bool, DeviceError>;

    /// Creates an exclusive buffer of `size` bytes with `usage` (upload-ring
    /// chunks) and returns it with its memory requirements and what the
    /// driver says about dedicated memory for it.
    ///
    /// # Errors
    /// The `vkCreateBuffer` result.
    ///
    /// # Safety
    /// `size` is non-zero and `usage` is supported by the device
    /// (VUID-VkBufferCreateInfo-size-00912, -usage-parameter).
    unsafe fn create_buffer(
        &self,
        size: u64,
        usage: vk::BufferUsageFlags,
    ) -> Result<(vk::Buffer, vk::MemoryRequirements, DedicatedHint), DeviceError>;

    /// Binds `buffer` to `memory` at `offset`.
    ///
    /// # Errors
    /// The `vkBindBufferMemory` result.
    ///
    /// # Safety
    /// The buffer is unbound; the memory's type is allowed by its
    /// requirements, `offset` honours their alignment and the buffer fits
    /// (VUID-vkBindBufferMemory-buffer-07459, -memory-01035,
    /// -memoryOffset-01036, -size-01037).
    unsafe fn bind_buffer_memory(
        &self,
        buffer: vk::Buffer,
        memory: vk::DeviceMemory,
        offset: u64,
    ) -> Result<(), DeviceError>;

    /// Destroys a buffer (deferred destruction, upload rings).
    ///
    /// # Safety
    /// The buffer belongs to this device, was created with the
    /// `VkAllocationCallbacks` the backend destroys it with (the ash
    /// backend's: [`AshMemoryDevice::with_allocation_callbacks`], none by
    /// default; VUID-vkDestroyBuffer-buffer-00923), and no pending GPU work uses it
    /// (VUID-vkDestroyBuffer-buffer-00922).
    unsafe fn destroy_buffer(&self, buffer: vk::Buffer);

    /// Destroys an image (deferred destruction).
    ///
    /// # Safety
    /// The image belongs to this device, was created with the
    /// `VkAllocationCallbacks` the backend destroys it with (the ash
    /// backend's: [`AshMemoryDevice::with_allocation_callbacks`], none by
    /// default; VUID-vkDestroyImage-image-01001), and no pending GPU work uses it
    /// (VUID-vkDestroyImage-image-01000).
    unsafe fn destroy_image(&self, image: vk::Image);

    /// The device address of `buffer`'s first byte
    /// (`vkGetBufferDeviceAddress`), or `None` when this backend cannot
    /// tell, as the default answers. Asked once per upload-ring chunk whose
    /// buffer usage has `SHADER_DEVICE_ADDRESS`, right after its buffer is
    /// bound, for [`RingAllocation::device_address`](crate::RingAllocation::device_address).
    /// A backend on a device without buffer device address answers `None`
    /// (and the allocator refuses such rings before they are made).
    ///
    /// # Safety
    /// `buffer` is a live, non-sparse buffer of this device, made with
    /// `SHADER_DEVICE_ADDRESS` usage (VUID-VkBufferDeviceAddressInfo-buffer-02601)
    /// and bound to one memory object (-02600), allocated with
    /// `VK_MEMORY_ALLOCATE_DEVICE_ADDRESS_BIT`.
    unsafe fn buffer_device_address(&self, buffer: vk::Buffer) -> Option<vk::DeviceAddress> {
        let _ = buffer;
        None
    }
}
