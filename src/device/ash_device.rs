//! [`AshMemoryDevice`]: the backend over a real `ash::Device`.

use std::borrow::Cow;
use std::ffi::CString;

use ash::vk;
use gpu_alloc_types::{AllocationFlags, DeviceProperties, MemoryHeap, MemoryType};

use super::{
    memory_priority, AllocateInfo, DedicatedHint, DedicatedTarget, DeviceError, FrameSignal,
    GpuInfo, HeapBudget, MemoryDeviceExt, MemoryProperties, DEFAULT_PRIORITY,
};
pub(crate) use chain::chain_structures;
use command_lookup::{buffer_address_command, timeline_khr};
use info_requirements::InfoRequirements;
use properties::{
    amd_device_coherent_types, is_vulkan_1_3, known_max_buffer_size, memory_property_flags,
};

/// What was enabled when the `VkDevice` was created; the allocator uses a
/// feature only when it is enabled.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DeviceFeatures {
    /// `VkPhysicalDeviceVulkan12Features::bufferDeviceAddress` (or the KHR
    /// extension's feature) is enabled: every block, and all dedicated memory
    /// but an image's, is allocated with `VK_MEMORY_ALLOCATE_DEVICE_ADDRESS_BIT`,
    /// so any buffer placed there may take its address. Without it, requests
    /// with [`Usage::DEVICE_ADDRESS`](crate::Usage::DEVICE_ADDRESS) fail with
    /// [`Error::DeviceAddressNotEnabled`](crate::Error::DeviceAddressNotEnabled).
    /// Not for `VK_EXT_buffer_device_address` alone, whose feature
    /// structure is another: its memory needs no flag, and the flag is
    /// invalid without the core or KHR feature
    /// (VUID-VkMemoryAllocateInfo-flags-03331).
    pub buffer_device_address: bool,
    /// `VK_EXT_memory_budget` is enabled: heap budgets come from the driver.
    pub memory_budget: bool,
    /// `VK_EXT_memory_priority` and its `memoryPriority` feature are enabled:
    /// every allocation then carries a priority, the one asked
    /// (`AllocationDesc::priority`, a custom pool's) or Vulkan's default,
    /// 0.5 (as VMA does; NVIDIA's best practices ask for one on each).
    pub memory_priority: bool,
    /// `VK_EXT_debug_utils` is enabled on the instance: every block and
    /// dedicated allocation gets an object name.
    pub debug_utils: bool,
    /// `VK_AMD_device_coherent_memory` and its `deviceCoherentMemory` feature
    /// are enabled: memory types with `DEVICE_COHERENT_BIT_AMD` may be used
    /// by a request whose `memoryTypeBits` allow no other type that suits
    /// its usage (crash breadcrumbs). Leave it `false` otherwise: the
    /// allocator then never allocates from those types, which AMD drivers
    /// list even when the feature is off
    /// ([`MemoryProperties::amd_device_coherent_types`]).
    pub amd_device_coherent_memory: bool,
    /// The `protectedMemory` feature (`VkPhysicalDeviceProtectedMemoryFeatures`
    /// or `VkPhysicalDeviceVulkan11Features`) is enabled: custom pools
    /// ([`Allocator::create_pool`](crate::Allocator::create_pool)) may use
    /// memory types with `VK_MEMORY_PROPERTY_PROTECTED_BIT`, for protected
    /// resources: pick the type yourself (a protected type among a
    /// protected resource's `memoryTypeBits`), as
    /// [`Allocator::memory_type_for`](crate::Allocator::memory_type_for)
    /// never returns one. Other requests never use them (one whose
    /// `memoryTypeBits` name only protected types fails with
    /// [`Error::NoSuitableMemoryType`](crate::Error::NoSuitableMemoryType),
    /// or [`Error::NoMemoryTypeBits`](crate::Error::NoMemoryTypeBits)
    /// without the feature; the create-and-bind helpers give a protected
    /// resource protected types only, and any other resource none, whatever
    /// its `memoryTypeBits` say). Leave it `false` otherwise:
    /// allocating from a protected type without the feature is invalid
    /// (VUID-VkMemoryAllocateInfo-memoryTypeIndex-01872), and the allocator
    /// then never does, refusing a pool on one.
    pub protected_memory: bool,
    /// The device has maintenance4's requirement queries
    /// (`vkGetDeviceBufferMemoryRequirements`,
    /// `vkGetDeviceImageMemoryRequirements`): it was made for Vulkan 1.3
    /// or later (the lower of the instance's `apiVersion` and the physical
    /// device's), or with `VK_KHR_maintenance4` enabled (VMA's
    /// `VMA_ALLOCATOR_CREATE_KHR_MAINTENANCE4_BIT`).
    /// [`Allocator::memory_type_for_buffer`](crate::Allocator::memory_type_for_buffer)
    /// and [`memory_type_for_image`](crate::Allocator::memory_type_for_image)
    /// then read a create info's memory requirements from the driver
    /// without making the buffer or image; without it (or where the device
    /// answers neither command's name, core or `KHR`, to
    /// `vkGetDeviceProcAddr`, or for an image create info the query may not
    /// take), they make one and destroy it at once.
    pub maintenance4: bool,
}

/// The allocator's backend over `ash`.
///
/// Holds clones of the `ash::Instance` and `ash::Device` function tables (not
/// ownership of the Vulkan objects).
#[derive(Clone)]
pub struct AshMemoryDevice {
    instance: ash::Instance,
    device: ash::Device,
    physical_device: vk::PhysicalDevice,
    features: DeviceFeatures,
    debug_utils: Option<ash::ext::debug_utils::Device>,
    /// `VK_KHR_timeline_semaphore`'s commands, where the extension is
    /// enabled (`timeline_khr`): frames sealed on a timeline semaphore are
    /// waited for through them, else through the core 1.2 ones.
    timeline_khr: Option<ash::khr::timeline_semaphore::Device>,
    /// maintenance4's requirement queries, when
    /// [`DeviceFeatures::maintenance4`] is set and the device has them.
    info_requirements: Option<InfoRequirements>,
    /// `vkGetBufferDeviceAddressKHR` or `vkGetBufferDeviceAddress`, when
    /// [`DeviceFeatures::buffer_device_address`] is set and the device
    /// answers either name (`buffer_address_command`).
    buffer_address: Option<vk::PFN_vkGetBufferDeviceAddress>,
    /// The engine's host allocation callbacks
    /// ([`with_allocation_callbacks`](Self::with_allocation_callbacks)),
    /// passed as `pAllocator` to every command that makes, frees or
    /// destroys an object; none by default.
    allocation_callbacks: Option<HostCallbacks>,
}

/// `VkAllocationCallbacks` the backend may hold and share between threads.
#[derive(Clone, Copy)]
struct HostCallbacks(vk::AllocationCallbacks<'static>);

// SAFETY: `AshMemoryDevice::with_allocation_callbacks`'s contract: the
// callbacks may be called from any thread, concurrently, with their user
// data pointer, for as long as the backend lives; the backend only passes
// them to the driver.
unsafe impl Send for HostCallbacks {}
// SAFETY: as above; a shared reference only reads the structure.
unsafe impl Sync for HostCallbacks {}

impl std::fmt::Debug for AshMemoryDevice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AshMemoryDevice")
            .field("device", &self.device.handle())
            .field("physical_device", &self.physical_device)
            .field("features", &self.features)
            .field("timeline_khr", &self.timeline_khr.is_some())
            .field("info_requirements", &self.info_requirements.is_some())
            .field("buffer_address", &self.buffer_address.is_some())
            .field("allocation_callbacks", &self.allocation_callbacks.is_some())
            .finish()
    }
}

impl AshMemoryDevice {
    /// Wraps a device for the allocator.
    ///
    /// # Safety
    /// - `instance` was created with `apiVersion` 1.1 or later
    ///   (`VkApplicationInfo::apiVersion`, whose default, 0, means 1.0;
    ///   over a 1.0 instance, lavapipe's `maxMemoryAllocationSize` read as
    ///   0, which [`Allocator::new`](crate::Allocator::new) refuses with
    ///   [`Error::UnsupportedDevice`](crate::Error::UnsupportedDevice))
    ///   and
    ///   `physical_device` reports 1.1 or later
    ///   (`VkPhysicalDeviceProperties::apiVersion`): the 1.1 property and
    ///   requirement queries are used, and `VkMemoryDedicatedAllocateInfo`
    ///   and `VkMemoryAllocateFlagsInfo` are chained, which a 1.0 device
    ///   may not see even with a 1.1 instance (ash's table then holds no
    ///   `vkGetBufferMemoryRequirements2`, and calling it panics). A device
    ///   has the core functions of the lower of the instance's `apiVersion`
    ///   and the physical device's version only; a function it lacks
    ///   aborts the process when called (ash's stand-in panics inside an
    ///   `extern "system"` function). Beyond 1.1, only
    ///   [`Allocator::end_frame_timeline`](crate::Allocator::end_frame_timeline)
    ///   needs more: Vulkan 1.2, or `VK_KHR_timeline_semaphore` enabled
    ///   on the device, whose commands are used wherever it is enabled
    ///   (an engine targeting Vulkan 1.1).
    /// - `device` was created from `physical_device` of `instance` alone,
    ///   not from a device group
    ///   of several: every host-visible block is mapped, and memory of a
    ///   multi-instance heap allocated for several devices cannot be
    ///   (VUID-vkMapMemory-memory-00683).
    /// - `features` says no more than what was enabled at `vkCreateInstance` /
    ///   `vkCreateDevice` (VUID-VkMemoryAllocateInfo-flags-03331 for device
    ///   addresses, VUID-VkDeviceCreateInfo-ppEnabledExtensionNames for the
    ///   extensions).
    /// - `device` and `instance` outlive this value and every allocator built
    ///   on it: dropping the allocator frees memory through them.
    /// - the handle types of every custom pool an allocator built on it
    ///   makes exportable ([`PoolDesc::export`](crate::PoolDesc::export),
    ///   through [`Allocator::create_pool`](crate::Allocator::create_pool),
    ///   a safe call) are ones the device supports exporting that memory
    ///   as, for the resources that will be bound to it
    ///   (VUID-VkExportMemoryAllocateInfo-handleTypes-00656): this backend
    ///   cannot tell ([`MemoryProperties::exportable_handle_types`](crate::device::MemoryProperties::exportable_handle_types)
    ///   is `None`), so `create_pool` refuses only bits that are no handle
    ///   type, and every block and dedicated allocation of such a pool is
    ///   allocated with `VkExportMemoryAllocateInfo` naming the others.
    /// - when an allocator built on it is dropped (a safe call), no pending
    ///   GPU work uses its memory or the buffers and images still queued for
    ///   deferred destruction: drop frees and destroys them all, frames in
    ///   flight included (VUID-vkFreeMemory-memory-00677,
    ///   VUID-vkDestroyBuffer-buffer-00922, VUID-vkDestroyImage-image-01000).
    pub unsafe fn new(
        instance: &ash::Instance,
        device: &ash::Device,
        physical_device: vk::PhysicalDevice,
        features: DeviceFeatures,
    ) -> Self {
        let debug_utils = features
            .debug_utils
            .then(|| ash::ext::debug_utils::Device::new(instance, device));
        // SAFETY: `device` is a live device of `instance` (the contract).
        let timeline_khr = unsafe { timeline_khr(instance, device) };
        // SAFETY: as above; the flag says the commands may be called.
        let info_requirements = features
            .maintenance4
            .then(|| unsafe { InfoRequirements::find(instance, device.handle()) })
            .flatten();
        // SAFETY: as above; the flag says the command may be called.
        let buffer_address = features
            .buffer_device_address
            .then(|| unsafe { buffer_address_command(instance, device.handle()) })
            .flatten();
        Self {
            instance: instance.clone(),
            device: device.clone(),
            physical_device,
            features,
            debug_utils,
            timeline_khr,
            info_requirements,
            buffer_address,
            allocation_callbacks: None,
        }
    }

    /// This backend, passing `callbacks` as `pAllocator` to every Vulkan
    /// command it calls that takes one (VMA's `pAllocationCallbacks`):
    /// `vkAllocateMemory` and `vkFreeMemory`, `vkCreateBuffer` and
    /// `vkCreateImage` (the allocator's create-and-bind helpers, its
    /// upload rings' buffers, the buffers and images it makes to read
    /// memory requirements), `vkDestroyBuffer` and `vkDestroyImage` (those,
    /// and the engine's handed to
    /// [`Allocator::destroy_buffer`](crate::Allocator::destroy_buffer),
    /// [`destroy_image`](crate::Allocator::destroy_image) and the
    /// `destroy_*_after_frame` calls). For an engine whose own objects are
    /// made with its callbacks: the buffers and images it hands the
    /// allocator to destroy are destroyed with the same ones
    /// (VUID-vkDestroyBuffer-buffer-00923, VUID-vkDestroyImage-image-01001),
    /// and those the helpers make, which the engine may destroy itself,
    /// were made with them. [`allocation_callbacks`](Self::allocation_callbacks)
    /// gives them back.
    ///
    /// # Safety
    /// - `callbacks` is a valid `VkAllocationCallbacks` (its allocation,
    ///   reallocation and free functions set, its two notification
    ///   functions both set or both not: VUID-VkAllocationCallbacks-*), and
    ///   its functions and whatever its `p_user_data` points to stay valid
    ///   while this value, its clones, and every allocator built on them
    ///   live.
    /// - its functions may be called from every thread that calls into an
    ///   allocator built on this value, concurrently (the allocator makes,
    ///   frees and destroys objects on the calling thread, and the driver
    ///   calls them within those commands).
    /// - every buffer and image handed to the allocator to destroy was
    ///   created with callbacks compatible with these
    ///   (VUID-vkDestroyBuffer-buffer-00923,
    ///   VUID-vkDestroyImage-image-01001), and every one the allocator's
    ///   helpers return is destroyed with such callbacks (-00924 and -01002
    ///   forbid destroying them with none).
    pub unsafe fn with_allocation_callbacks(
        mut self,
        callbacks: vk::AllocationCallbacks<'static>,
    ) -> Self {
        self.allocation_callbacks = Some(HostCallbacks(callbacks));
        self
    }

    /// The host allocation callbacks this backend passes to Vulkan
    /// ([`with_allocation_callbacks`](Self::with_allocation_callbacks)):
    /// `None` by default, for `pAllocator` null.
    pub fn allocation_callbacks(&self) -> Option<&vk::AllocationCallbacks<'static>> {
        self.allocation_callbacks
            .as_ref()
            .map(|callbacks| &callbacks.0)
    }

    /// The wrapped device.
    pub fn device(&self) -> &ash::Device {
        &self.device
    }

    /// A buffer's memory requirements and what the driver says about
    /// dedicated memory for it (`vkGetBufferMemoryRequirements2`).
    ///
    /// # Safety
    /// `buffer` was created from this device and is not destroyed.
    pub(crate) unsafe fn buffer_requirements(
        &self,
        buffer: vk::Buffer,
    ) -> (vk::MemoryRequirements, DedicatedHint) {
        let mut dedicated = vk::MemoryDedicatedRequirements::default();
        let mut requirements = vk::MemoryRequirements2::default().push_next(&mut dedicated);
        let query = vk::BufferMemoryRequirementsInfo2::default().buffer(buffer);
        // SAFETY: a live buffer of this device (contract); the 1.1 query is
        // available (this type's contract: Vulkan 1.1+).
        unsafe {
            self.device
                .get_buffer_memory_requirements2(&query, &mut requirements)
        };
        let requirements = requirements.memory_requirements;
        (requirements, DedicatedHint::from_requirements(&dedicated))
    }

    /// The memory requirements of a buffer made from `info`, read without
    /// making it (maintenance4); `None` where the device has no such query
    /// ([`DeviceFeatures::maintenance4`]).
    ///
    /// # Safety
    /// `info` is a valid `VkBufferCreateInfo` for this device.
    pub(crate) unsafe fn buffer_info_requirements(
        &self,
        info: &vk::BufferCreateInfo<'_>,
    ) -> Option<vk::MemoryRequirements> {
        let queries = self.info_requirements.as_ref()?;
        // SAFETY: the caller's contract.
        Some(unsafe { queries.buffer(info) })
    }

    /// The memory requirements of an image made from `info`, read without
    /// making it (maintenance4); `None` where the device has no such query
    /// ([`DeviceFeatures::maintenance4`]) or `info` is one it may not take
    /// (`InfoRequirements::image`).
    ///
    /// # Safety
    /// `info` is a valid `VkImageCreateInfo` for this device.
    pub(crate) unsafe fn image_info_requirements(
        &self,
        info: &vk::ImageCreateInfo<'_>,
    ) -> Option<vk::MemoryRequirements> {
        let queries = self.info_requirements.as_ref()?;
        // SAFETY: the caller's contract.
        unsafe { queries.image(info) }
    }

    /// The wrapped instance.
    pub fn instance(&self) -> &ash::Instance {
        &self.instance
    }

    /// The physical device the wrapped device was created from.
    pub fn physical_device(&self) -> vk::PhysicalDevice {
        self.physical_device
    }

    /// What was enabled on the device.
    pub fn features(&self) -> DeviceFeatures {
        self.features
    }

    /// `vkCreateBuffer` of `info`, with this backend's allocation callbacks
    /// (the create-and-bind helpers' buffers and requirement probes;
    /// destroyed with [`MemoryDeviceExt::destroy_buffer`], which passes the
    /// same ones).
    ///
    /// # Safety
    /// `info` is a valid `VkBufferCreateInfo` for this device.
    pub(crate) unsafe fn create_buffer_from(
        &self,
        info: &vk::BufferCreateInfo<'_>,
    ) -> Result<vk::Buffer, DeviceError> {
        // SAFETY: the caller's contract; the callbacks are valid
        // (`with_allocation_callbacks`'s contract).
        Ok(unsafe { self.device.create_buffer(info, self.allocation_callbacks()) }?)
    }

    /// `vkCreateImage` of `info`, as [`create_buffer_from`](Self::create_buffer_from)
    /// makes buffers (destroyed with [`MemoryDeviceExt::destroy_image`]).
    ///
    /// # Safety
    /// `info` is a valid `VkImageCreateInfo` for this device.
    pub(crate) unsafe fn create_image_from(
        &self,
        info: &vk::ImageCreateInfo<'_>,
    ) -> Result<vk::Image, DeviceError> {
        // SAFETY: as above.
        Ok(unsafe { self.device.create_image(info, self.allocation_callbacks()) }?)
    }

    /// Whether the physical device has `VkPhysicalDeviceMaintenance4Properties`:
    /// it reports Vulkan 1.3 or later, or supports `VK_KHR_maintenance4`
    /// (a failed extension query reads as not supported).
    fn has_maintenance4(&self) -> bool {
        // SAFETY: `physical_device` belongs to `instance` (`new`'s contract).
        let properties = unsafe {
            self.instance
                .get_physical_device_properties(self.physical_device)
        };
        if is_vulkan_1_3(properties.api_version) {
            return true;
        }
        // SAFETY: as above.
        let extensions = unsafe {
            self.instance
                .enumerate_device_extension_properties(self.physical_device)
        };
        extensions.is_ok_and(|extensions| {
            extensions
                .iter()
                .any(|e| e.extension_name_as_c_str() == Ok(ash::khr::maintenance4::NAME))
        })
    }

    fn set_name(&self, memory: vk::DeviceMemory, name: &str) {
        let Some(debug_utils) = &self.debug_utils else {
            return;
        };
        // A C string ends at its first NUL: so does the name given, which
        // leaves none for `CString::new` to refuse.
        let name = CString::new(name.split('\0').next().unwrap_or_default()).unwrap_or_default();
        let info = vk::DebugUtilsObjectNameInfoEXT::default()
            .object_handle(memory)
            .object_name(&name);
        // SAFETY: `memory` is a live memory object of this device that no
        // other thread uses meanwhile (just allocated, or
        // `set_memory_name`'s contract); VK_EXT_debug_utils is enabled
        // (`new`'s contract). A failure to name is harmless and ignored.
        let _ = unsafe { debug_utils.set_debug_utils_object_name(&info) };
    }
}

// SAFETY: `map_memory` returns what `vkMapMemory` returns, a host pointer
// to the `size` bytes mapped, valid until `vkUnmapMemory` or `vkFreeMemory`;
// the driver maps each memory object to host memory of its own; the memory
// types are the device's own, and `new`'s contract rules out the
// multi-device heaps that cannot be mapped (VUID-vkMapMemory-memory-00683).
unsafe impl MemoryDeviceExt<vk::DeviceMemory> for AshMemoryDevice {
    fn memory_properties(&self) -> MemoryProperties {
        // SAFETY: `physical_device` belongs to `instance` (`new`'s contract).
        let memory = unsafe {
            self.instance
                .get_physical_device_memory_properties(self.physical_device)
        };
        // maxBufferSize is Vulkan 1.3's, or VK_KHR_maintenance4's: asked for
        // only where the device has one or the other.
        let maintenance4 = self.has_maintenance4();
        let mut maintenance3 = vk::PhysicalDeviceMaintenance3Properties::default();
        let mut maintenance4_properties = vk::PhysicalDeviceMaintenance4Properties::default();
        let mut properties2 = vk::PhysicalDeviceProperties2::default().push_next(&mut maintenance3);
        if maintenance4 {
            properties2 = properties2.push_next(&mut maintenance4_properties);
        }
        // SAFETY: as above; the instance is Vulkan 1.1+ (`new`'s contract), so
        // vkGetPhysicalDeviceProperties2 and the maintenance3 struct are core;
        // the maintenance4 struct is chained only for a device of Vulkan 1.3
        // or one that supports VK_KHR_maintenance4 (physical-device-level
        // functionality: supported is enough, enabled is not needed). Open
        // edge: a 1.3 device that lists no VK_KHR_maintenance4 under an
        // instance made for 1.1 or 1.2 may not be asked for 1.3's structs,
        // which this cannot tell (ash keeps no instance version); a driver
        // that ignores the struct leaves maxBufferSize 0, read as unknown.
        unsafe {
            self.instance
                .get_physical_device_properties2(self.physical_device, &mut properties2)
        };
        let limits = properties2.properties.limits;
        let gpu = GpuInfo::from(&properties2.properties);
        let memory_types = memory.memory_types_as_slice().iter().map(|t| MemoryType {
            heap: t.heap_index,
            props: memory_property_flags(t.property_flags),
        });
        let amd_device_coherent_types = amd_device_coherent_types(memory.memory_types_as_slice());
        let memory_heaps = memory
            .memory_heaps_as_slice()
            .iter()
            .map(|h| MemoryHeap { size: h.size });
        MemoryProperties {
            device: DeviceProperties {
                memory_types: Cow::Owned(memory_types.collect()),
                memory_heaps: Cow::Owned(memory_heaps.collect()),
                max_memory_allocation_count: limits.max_memory_allocation_count,
                max_memory_allocation_size: maintenance3.max_memory_allocation_size,
                non_coherent_atom_size: limits.non_coherent_atom_size,
                buffer_device_address: self.features.buffer_device_address,
            },
            buffer_image_granularity: limits.buffer_image_granularity,
            max_buffer_size: known_max_buffer_size(
                maintenance4.then_some(maintenance4_properties.max_buffer_size),
            ),
            memory_budget: self.features.memory_budget,
            memory_priority: self.features.memory_priority,
            amd_device_coherent_types,
            amd_device_coherent_memory: self.features.amd_device_coherent_memory,
            protected_memory: self.features.protected_memory,
            gpu: Some(gpu),
            // Support depends on each resource's create info: the caller's
            // to check.
            exportable_handle_types: None,
        }
    }

    unsafe fn allocate(&self, info: &AllocateInfo<'_>) -> Result<vk::DeviceMemory, DeviceError> {
        let mut flags_info = vk::MemoryAllocateFlagsInfo::default();
        let mut dedicated_info = vk::MemoryDedicatedAllocateInfo::default();
        let mut priority_info = vk::MemoryPriorityAllocateInfoEXT::default();
        let mut export_info = vk::ExportMemoryAllocateInfo::default();
        let mut allocate_info = vk::MemoryAllocateInfo::default()
            .allocation_size(info.size)
            .memory_type_index(info.memory_type);
        if info.flags.contains(AllocationFlags::DEVICE_ADDRESS) {
            flags_info = flags_info.flags(vk::MemoryAllocateFlags::DEVICE_ADDRESS);
            allocate_info = allocate_info.push_next(&mut flags_info);
        }
        if let Some(target) = info.dedicated {
            dedicated_info = match target {
                DedicatedTarget::Buffer(buffer) => dedicated_info.buffer(buffer),
                DedicatedTarget::Image(image) => dedicated_info.image(image),
            };
            allocate_info = allocate_info.push_next(&mut dedicated_info);
        }
        if self.features.memory_priority {
            // Every allocation says its priority, Vulkan's default 0.5
            // when none was asked, as VMA does with the extension: the
            // same to the driver as no structure, but the validation
            // layer's NVIDIA best practices warn of each allocation without
            // one (BestPractices-AllocateMemory-SetPriority). Clamped by the
            // allocator already; again for a caller that drives this
            // backend itself.
            let priority = info.priority.map_or(DEFAULT_PRIORITY, memory_priority);
            priority_info = priority_info.priority(priority);
            allocate_info = allocate_info.push_next(&mut priority_info);
        }
        if !info.export_handle_types.is_empty() {
            // Core in Vulkan 1.1, which `new`'s contract requires.
            export_info = export_info.handle_types(info.export_handle_types);
            allocate_info = allocate_info.push_next(&mut export_info);
        }
        // SAFETY: the caller upholds `MemoryDeviceExt::allocate`'s contract
        // (valid type index, non-zero size, flags, dedicated target and
        // export handle types valid, VUID-VkExportMemoryAllocateInfo-handleTypes-00656);
        // the pNext structs are only chained for enabled features
        // (VkExportMemoryAllocateInfo is core 1.1).
        let memory = unsafe {
            self.device
                .allocate_memory(&allocate_info, self.allocation_callbacks())
        }?;
        if let Some(name) = info.name {
            self.set_name(memory, name);
        }
        Ok(memory)
    }

    fn raw_memory(&self, memory: &vk::DeviceMemory) -> vk::DeviceMemory {
        *memory
    }

    unsafe fn set_memory_name(&self, memory: &vk::DeviceMemory, name: &str) {
        self.set_name(*memory, name);
    }

    fn heap_budgets(&self, out: &mut [HeapBudget]) -> bool {
        if !self.features.memory_budget {
            return false;
        }
        let mut budget = vk::PhysicalDeviceMemoryBudgetPropertiesEXT::default();
        let mut properties = vk::PhysicalDeviceMemoryProperties2::default().push_next(&mut budget);
        // SAFETY: `physical_device` belongs to `instance`, which is Vulkan 1.1+,
        // and VK_EXT_memory_budget is enabled (`new`'s contract), so the budget
        // struct may be chained.
        unsafe {
            self.instance
                .get_physical_device_memory_properties2(self.physical_device, &mut properties)
        };
        let heaps = properties.memory_properties.memory_heap_count as usize;
        for (heap, slot) in out.iter_mut().enumerate().take(heaps) {
            *slot = HeapBudget {
                budget: budget.heap_budget[heap],
                usage: budget.heap_usage[heap],
            };
        }
        true
    }

    unsafe fn is_signalled(&self, signal: FrameSignal) -> Result<bool, DeviceError> {
        match signal {
            // SAFETY: a live fence of this device (the caller's contract;
            // VUID-vkGetFenceStatus-fence-parameter, -fence-parent).
            FrameSignal::Fence(fence) => Ok(unsafe { self.device.get_fence_status(fence) }?),
            FrameSignal::Timeline { semaphore, value } => {
                // SAFETY: a live timeline semaphore of this device (the
                // caller's contract; VUID-vkGetSemaphoreCounterValue-semaphore-03255).
                let current = unsafe {
                    match &self.timeline_khr {
                        Some(khr) => khr.get_semaphore_counter_value(semaphore),
                        None => self.device.get_semaphore_counter_value(semaphore),
                    }
                }?;
                Ok(current >= value)
            }
        }
    }

    unsafe fn wait_signalled(
        &self,
        signal: FrameSignal,
        timeout_ns: u64,
    ) -> Result<bool, DeviceError> {
        let result = match signal {
            // SAFETY: as in `is_signalled`.
            FrameSignal::Fence(fence) => unsafe {
                self.device.wait_for_fences(&[fence], true, timeout_ns)
            },
            FrameSignal::Timeline { semaphore, value } => {
                let semaphores = [semaphore];
                let values = [value];
                let info = vk::SemaphoreWaitInfo::default()
                    .semaphores(&semaphores)
                    .values(&values);
                // SAFETY: as in `is_signalled`; the extension's command
                // where the device has no core 1.2 one (`new`).
                unsafe {
                    match &self.timeline_khr {
                        Some(khr) => khr.wait_semaphores(&info, timeout_ns),
                        None => self.device.wait_semaphores(&info, timeout_ns),
                    }
                }
            }
        };
        match result {
            Ok(()) => Ok(true),
            Err(vk::Result::TIMEOUT) => Ok(false),
            Err(error) => Err(error.into()),
        }
    }

    unsafe fn create_buffer(
        &self,
        size: u64,
        usage: vk::BufferUsageFlags,
    ) -> Result<(vk::Buffer, vk::MemoryRequirements, DedicatedHint), DeviceError> {
        let info = vk::BufferCreateInfo::default()
            .size(size)
            .usage(usage)
            .sharing_mode(vk::SharingMode::EXCLUSIVE);
        // SAFETY: the caller guarantees a non-zero size and supported usage
        // (VUID-VkBufferCreateInfo-size-00912, -usage-parameter).
        let buffer = unsafe {
            self.device
                .create_buffer(&info, self.allocation_callbacks())
        }?;
        // SAFETY: just created from this device.
        let (requirements, dedicated) = unsafe { self.buffer_requirements(buffer) };
        Ok((buffer, requirements, dedicated))
    }

    unsafe fn bind_buffer_memory(
        &self,
        buffer: vk::Buffer,
        memory: vk::DeviceMemory,
        offset: u64,
    ) -> Result<(), DeviceError> {
        // SAFETY: the caller's contract is vkBindBufferMemory's
        // (VUID-vkBindBufferMemory-buffer-07459, -memory-01035, -memoryOffset-01036, -size-01037).
        Ok(unsafe { self.device.bind_buffer_memory(buffer, memory, offset) }?)
    }

    unsafe fn destroy_buffer(&self, buffer: vk::Buffer) {
        // SAFETY: the caller guarantees the buffer is this device's, made
        // with this backend's allocation callbacks (or none, as they are),
        // and that no pending GPU work uses it
        // (VUID-vkDestroyBuffer-buffer-00922, -00923).
        unsafe {
            self.device
                .destroy_buffer(buffer, self.allocation_callbacks())
        }
    }

    unsafe fn destroy_image(&self, image: vk::Image) {
        // SAFETY: the caller guarantees the image is this device's, made
        // with this backend's allocation callbacks (or none, as they are),
        // and that no pending GPU work uses it
        // (VUID-vkDestroyImage-image-01000, -01001).
        unsafe {
            self.device
                .destroy_image(image, self.allocation_callbacks())
        }
    }

    unsafe fn buffer_device_address(&self, buffer: vk::Buffer) -> Option<vk::DeviceAddress> {
        let command = self.buffer_address?;
        let info = vk::BufferDeviceAddressInfo::default().buffer(buffer);
        // SAFETY: the command was answered for this device with buffer
        // device address enabled (`new`'s contract); the caller vouches
        // for the buffer (VUID-VkBufferDeviceAddressInfo-buffer-02600,
        // -02601), and `info` is a valid structure with no chain.
        Some(unsafe { command(self.device.handle(), &info) })
    }
}

mod chain;
mod command_lookup;
mod info_requirements;
mod memory_device;
mod properties;
#[cfg(test)]
mod tests;
