//! Per-instance and per-device state, keyed by dispatch word.
//!
//! Every dispatchable Vulkan handle (`VkInstance`, `VkPhysicalDevice`,
//! `VkDevice`, `VkQueue`, `VkCommandBuffer`) points at an object whose first
//! pointer-sized word is the loader's dispatch table. That word is the same for
//! an instance and all its physical devices, and for a device and all its
//! queues and command buffers, so it is the key a layer uses to find its state
//! (LoaderLayerInterface.md, "Associating Private Data with Vulkan Objects").
//! Separate instances and devices have separate keys, which is what lets tests
//! in parallel threads run instances with different profiles.

use std::collections::BTreeMap;
use std::ffi::CStr;
use std::sync::{Arc, Mutex, PoisonError, RwLock};

use ash::vk;
use ash::vk::Handle;

use crate::call_failures::CallCounts;
use crate::config::LayerConfig;
use crate::host_cache::HostCache;
use crate::image_kinds::ImageKinds;
use crate::memory_accounting::{lock, AllocationBook, HeapUsage};
use crate::memory_priority::SeenPriorities;
use crate::memory_type_map::MemoryTypeMap;

/// The dispatch word of a dispatchable handle.
pub type DispatchKey = usize;

/// Reads the dispatch word of a dispatchable handle; `None` for null.
///
/// # Safety
/// `handle` is null or a live dispatchable handle handed to this layer by the
/// loader or by the layer above.
pub unsafe fn dispatch_key<H: Handle>(handle: H) -> Option<DispatchKey> {
    let object = handle.as_raw() as usize as *const DispatchKey;
    if object.is_null() {
        return None;
    }
    // SAFETY: a dispatchable handle is a pointer to an object whose first
    // member is the loader's dispatch table pointer (vk_layer.h, "Dispatchable
    // objects"); the caller guarantees the object is live.
    Some(unsafe { object.read() })
}

/// Reinterprets a `PFN_vkVoidFunction` as the command's real pointer type.
///
/// # Safety
/// `F` is the `PFN_vk*` type of the command `function` was looked up by.
pub unsafe fn cast_function<F: Copy>(function: unsafe extern "system" fn()) -> F {
    const {
        assert!(std::mem::size_of::<F>() == std::mem::size_of::<unsafe extern "system" fn()>());
    }
    // SAFETY: same size (checked above); the caller guarantees `F` is the
    // command's signature, so calling through it is what the loader intends
    // when it hands out a `PFN_vkVoidFunction`.
    unsafe { std::mem::transmute_copy(&function) }
}

/// Looks up a next-layer command by the first of `names` that it has.
///
/// # Safety
/// `gipa` is the next layer's `vkGetInstanceProcAddr`, `instance` null or an
/// instance it created, and `F` the type of every command in `names`.
pub unsafe fn next_instance_fn<F: Copy>(
    gipa: vk::PFN_vkGetInstanceProcAddr,
    instance: vk::Instance,
    names: &[&CStr],
) -> Option<F> {
    names.iter().find_map(|name| {
        // SAFETY: see this function's contract.
        let function = unsafe { gipa(instance, name.as_ptr()) }?;
        // SAFETY: the command was looked up by a name of type `F`.
        Some(unsafe { cast_function::<F>(function) })
    })
}

/// Looks up a next-layer device command, like [`next_instance_fn`].
///
/// # Safety
/// `gdpa` is the next layer's `vkGetDeviceProcAddr`, `device` a device it
/// created, and `F` the type of every command in `names`.
pub unsafe fn next_device_fn<F: Copy>(
    gdpa: vk::PFN_vkGetDeviceProcAddr,
    device: vk::Device,
    names: &[&CStr],
) -> Option<F> {
    names.iter().find_map(|name| {
        // SAFETY: see this function's contract.
        let function = unsafe { gdpa(device, name.as_ptr()) }?;
        // SAFETY: the command was looked up by a name of type `F`.
        Some(unsafe { cast_function::<F>(function) })
    })
}

/// The next layer's instance-level commands this layer calls.
#[derive(Debug, Clone, Copy)]
pub struct NextInstanceFns {
    /// `vkDestroyInstance`.
    pub destroy_instance: Option<vk::PFN_vkDestroyInstance>,
    /// `vkEnumerateDeviceExtensionProperties`.
    pub enumerate_device_extension_properties: Option<vk::PFN_vkEnumerateDeviceExtensionProperties>,
    /// `vkGetPhysicalDeviceProperties`.
    pub get_physical_device_properties: Option<vk::PFN_vkGetPhysicalDeviceProperties>,
    /// `vkGetPhysicalDeviceProperties2` or its KHR alias.
    pub get_physical_device_properties2: Option<vk::PFN_vkGetPhysicalDeviceProperties2>,
    /// `vkGetPhysicalDeviceFeatures2` or its KHR alias.
    pub get_physical_device_features2: Option<vk::PFN_vkGetPhysicalDeviceFeatures2>,
    /// `vkGetPhysicalDeviceMemoryProperties`.
    pub get_physical_device_memory_properties: Option<vk::PFN_vkGetPhysicalDeviceMemoryProperties>,
    /// `vkGetPhysicalDeviceMemoryProperties2` or its KHR alias.
    pub get_physical_device_memory_properties2:
        Option<vk::PFN_vkGetPhysicalDeviceMemoryProperties2>,
}

/// Faked state of one physical device: its type map and heap usage.
#[derive(Debug)]
pub struct PhysicalDeviceState {
    /// Fake-to-real memory types.
    pub type_map: MemoryTypeMap,
    /// Bytes in use per fake heap, across all devices of this physical device.
    pub heap_usage: HeapUsage,
}

/// What the layer keeps per instance.
#[derive(Debug)]
pub struct InstanceState {
    /// The instance handle, for next-layer lookups.
    pub instance: vk::Instance,
    /// The next layer's `vkGetInstanceProcAddr`.
    pub next_get_instance_proc_addr: vk::PFN_vkGetInstanceProcAddr,
    /// The faked architecture; `None` for pass-through.
    pub config: Option<Arc<LayerConfig>>,
    /// Next-layer commands.
    pub next: NextInstanceFns,
    physical_devices: Mutex<BTreeMap<u64, Arc<PhysicalDeviceState>>>,
}

impl InstanceState {
    /// Bundles an instance's state.
    pub fn new(
        instance: vk::Instance,
        next_get_instance_proc_addr: vk::PFN_vkGetInstanceProcAddr,
        config: Option<Arc<LayerConfig>>,
        next: NextInstanceFns,
    ) -> Self {
        Self {
            instance,
            next_get_instance_proc_addr,
            config,
            next,
            physical_devices: Mutex::new(BTreeMap::new()),
        }
    }

    /// The faked state of `physical_device`, created on first use from the
    /// real memory properties. `None` in pass-through.
    ///
    /// # Safety
    /// `physical_device` is a live physical device of this instance.
    pub unsafe fn physical_device(
        &self,
        physical_device: vk::PhysicalDevice,
    ) -> Option<Arc<PhysicalDeviceState>> {
        let config = self.config.as_ref()?;
        let mut devices = lock(&self.physical_devices);
        if let Some(state) = devices.get(&physical_device.as_raw()) {
            return Some(Arc::clone(state));
        }
        let get_real = self.next.get_physical_device_memory_properties?;
        let mut real = vk::PhysicalDeviceMemoryProperties::default();
        // SAFETY: a live physical device and a valid output structure.
        unsafe { get_real(physical_device, &mut real) };
        let state = Arc::new(PhysicalDeviceState {
            type_map: MemoryTypeMap::new(config.profile, &real)
                .with_image_alignment(config.image_alignment()),
            heap_usage: HeapUsage::default(),
        });
        devices.insert(physical_device.as_raw(), Arc::clone(&state));
        Some(state)
    }
}

/// The next layer's device-level commands this layer calls.
#[derive(Debug, Clone, Copy)]
pub struct NextDeviceFns {
    /// `vkDestroyDevice`.
    pub destroy_device: Option<vk::PFN_vkDestroyDevice>,
    /// `vkAllocateMemory`.
    pub allocate_memory: Option<vk::PFN_vkAllocateMemory>,
    /// `vkFreeMemory`.
    pub free_memory: Option<vk::PFN_vkFreeMemory>,
    /// `vkMapMemory`.
    pub map_memory: Option<vk::PFN_vkMapMemory>,
    /// `vkMapMemory2KHR`.
    pub map_memory2: Option<vk::PFN_vkMapMemory2KHR>,
    /// `vkUnmapMemory`.
    pub unmap_memory: Option<vk::PFN_vkUnmapMemory>,
    /// `vkUnmapMemory2KHR`.
    pub unmap_memory2: Option<vk::PFN_vkUnmapMemory2KHR>,
    /// `vkFlushMappedMemoryRanges`.
    pub flush_mapped_memory_ranges: Option<vk::PFN_vkFlushMappedMemoryRanges>,
    /// `vkInvalidateMappedMemoryRanges`.
    pub invalidate_mapped_memory_ranges: Option<vk::PFN_vkInvalidateMappedMemoryRanges>,
    /// `vkCreateBuffer`.
    pub create_buffer: Option<vk::PFN_vkCreateBuffer>,
    /// `vkCreateImage`.
    pub create_image: Option<vk::PFN_vkCreateImage>,
    /// `vkDestroyImage`.
    pub destroy_image: Option<vk::PFN_vkDestroyImage>,
    /// `vkBindBufferMemory`.
    pub bind_buffer_memory: Option<vk::PFN_vkBindBufferMemory>,
    /// `vkBindImageMemory`.
    pub bind_image_memory: Option<vk::PFN_vkBindImageMemory>,
    /// `vkBindBufferMemory2` or its KHR alias.
    pub bind_buffer_memory2: Option<vk::PFN_vkBindBufferMemory2>,
    /// `vkBindImageMemory2` or its KHR alias.
    pub bind_image_memory2: Option<vk::PFN_vkBindImageMemory2>,
    /// `vkGetDeviceMemoryCommitment`.
    pub get_device_memory_commitment: Option<vk::PFN_vkGetDeviceMemoryCommitment>,
    /// `vkGetMemoryFdPropertiesKHR`.
    pub get_memory_fd_properties: Option<vk::PFN_vkGetMemoryFdPropertiesKHR>,
    /// `vkGetMemoryHostPointerPropertiesEXT`.
    pub get_memory_host_pointer_properties: Option<vk::PFN_vkGetMemoryHostPointerPropertiesEXT>,
    /// `vkGetBufferMemoryRequirements`.
    pub get_buffer_memory_requirements: Option<vk::PFN_vkGetBufferMemoryRequirements>,
    /// `vkGetImageMemoryRequirements`.
    pub get_image_memory_requirements: Option<vk::PFN_vkGetImageMemoryRequirements>,
    /// `vkGetBufferMemoryRequirements2` or its KHR alias.
    pub get_buffer_memory_requirements2: Option<vk::PFN_vkGetBufferMemoryRequirements2>,
    /// `vkGetImageMemoryRequirements2` or its KHR alias.
    pub get_image_memory_requirements2: Option<vk::PFN_vkGetImageMemoryRequirements2>,
    /// `vkGetDeviceBufferMemoryRequirements` or its KHR alias (maintenance4).
    pub get_device_buffer_memory_requirements: Option<vk::PFN_vkGetDeviceBufferMemoryRequirements>,
    /// `vkGetDeviceImageMemoryRequirements` or its KHR alias (maintenance4).
    pub get_device_image_memory_requirements: Option<vk::PFN_vkGetDeviceImageMemoryRequirements>,
}

/// A device's fake architecture.
#[derive(Debug)]
pub struct FakeDevice {
    /// The instance's configuration.
    pub config: Arc<LayerConfig>,
    /// The physical device's type map and heap usage.
    pub physical: Arc<PhysicalDeviceState>,
    /// The device's live allocations.
    pub book: AllocationBook,
    /// Host caches in front of mappings of non-coherent fake types.
    pub host_cache: HostCache,
    /// `nonCoherentAtomSize` as the layer reports it for the physical
    /// device: the granularity of the host caches' flushes.
    pub non_coherent_atom_size: u64,
    /// `maxMemoryAllocationCount` as the layer reports it for the physical
    /// device (the lower of the driver's and the profile's, or the
    /// `max-allocations` override's): allocations past it fail.
    pub max_memory_allocation_count: u32,
    /// The live images created with `VK_IMAGE_USAGE_TRANSIENT_ATTACHMENT_BIT`
    /// or `VK_IMAGE_TILING_LINEAR`.
    pub image_kinds: ImageKinds,
    /// The driver itself got `VK_EXT_memory_priority` enabled (it has the
    /// extension and the configuration offers it): its structures go
    /// through. Else the layer takes them out (`memory_priority.rs`).
    pub driver_memory_priority: bool,
    /// The priorities of the device's allocations, for the layer's query.
    pub seen_priorities: SeenPriorities,
    /// The resource creations and binds made so far, which the
    /// configuration may choose to fail.
    pub call_counts: CallCounts,
}

/// What the layer keeps per device.
#[derive(Debug)]
pub struct DeviceState {
    /// The next layer's `vkGetDeviceProcAddr`.
    pub next_get_device_proc_addr: vk::PFN_vkGetDeviceProcAddr,
    /// Next-layer commands.
    pub next: NextDeviceFns,
    /// `None` in pass-through.
    pub fake: Option<FakeDevice>,
}

type Registry<T> = RwLock<BTreeMap<DispatchKey, Arc<T>>>;

static INSTANCES: Registry<InstanceState> = RwLock::new(BTreeMap::new());
static DEVICES: Registry<DeviceState> = RwLock::new(BTreeMap::new());

fn find<T>(registry: &Registry<T>, key: Option<DispatchKey>) -> Option<Arc<T>> {
    let map = registry.read().unwrap_or_else(PoisonError::into_inner);
    map.get(&key?).cloned()
}

fn insert<T>(registry: &Registry<T>, key: DispatchKey, state: T) {
    let mut map = registry.write().unwrap_or_else(PoisonError::into_inner);
    map.insert(key, Arc::new(state));
}

fn remove<T>(registry: &Registry<T>, key: Option<DispatchKey>) -> Option<Arc<T>> {
    let mut map = registry.write().unwrap_or_else(PoisonError::into_inner);
    map.remove(&key?)
}

/// The state of the instance that owns `handle` (an instance or one of its
/// physical devices).
///
/// # Safety
/// `handle` is null or a live instance-level dispatchable handle.
pub unsafe fn instance_state<H: Handle>(handle: H) -> Option<Arc<InstanceState>> {
    // SAFETY: forwarded contract.
    find(&INSTANCES, unsafe { dispatch_key(handle) })
}

/// Registers a new instance's state.
///
/// # Safety
/// `instance` is the live instance the state belongs to.
pub unsafe fn register_instance(instance: vk::Instance, state: InstanceState) -> bool {
    // SAFETY: forwarded contract.
    let Some(key) = (unsafe { dispatch_key(instance) }) else {
        return false;
    };
    insert(&INSTANCES, key, state);
    true
}

/// Removes an instance's state.
///
/// # Safety
/// `instance` is null or a live instance.
pub unsafe fn unregister_instance(instance: vk::Instance) -> Option<Arc<InstanceState>> {
    // SAFETY: forwarded contract.
    remove(&INSTANCES, unsafe { dispatch_key(instance) })
}

/// The state of the device that owns `handle` (a device, queue or command buffer).
///
/// # Safety
/// `handle` is null or a live device-level dispatchable handle.
pub unsafe fn device_state<H: Handle>(handle: H) -> Option<Arc<DeviceState>> {
    // SAFETY: forwarded contract.
    find(&DEVICES, unsafe { dispatch_key(handle) })
}

/// Registers a new device's state.
///
/// # Safety
/// `device` is the live device the state belongs to, its dispatch word set.
pub unsafe fn register_device(device: vk::Device, state: DeviceState) -> bool {
    // SAFETY: forwarded contract.
    let Some(key) = (unsafe { dispatch_key(device) }) else {
        return false;
    };
    insert(&DEVICES, key, state);
    true
}

/// Removes a device's state.
///
/// # Safety
/// `device` is null or a live device.
pub unsafe fn unregister_device(device: vk::Device) -> Option<Arc<DeviceState>> {
    // SAFETY: forwarded contract.
    remove(&DEVICES, unsafe { dispatch_key(device) })
}
