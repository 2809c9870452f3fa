//! One lavapipe device for every allocator, with `vkAllocateMemory` /
//! `vkFreeMemory` counted.
//!
//! Every Vulkan allocator under test calls the driver through the function
//! table of the `ash::Device` it is given (vk-mem copies that table into
//! `VmaVulkanFunctions`). The allocators get a second `ash::Device` for the
//! same `VkDevice` whose `vkAllocateMemory` and `vkFreeMemory` entries are
//! trampolines: they call the driver, then count calls and live bytes. So the
//! number of `vkAllocateMemory` calls and the peak of reserved
//! `VkDeviceMemory` bytes are measured the same way for every allocator,
//! whatever its own statistics say.
//!
//! The same table answers `vkGetBufferMemoryRequirements2` and
//! `vkGetImageMemoryRequirements2` for two placeholder handles
//! ([`unqueried_buffer`], [`unqueried_image`]) with the requirements of the
//! request being replayed ([`set_pending_requirements`]), without calling the
//! driver. That lets VMA be called through `vmaAllocateMemoryForBuffer` /
//! `vmaAllocateMemoryForImage`, which tell it the resource kind (its
//! documentation recommends them over `vmaAllocateMemory`), with the same
//! requirements as every other allocator and no resource created.
//!
//! vulkano loads its own device table through `vkGetDeviceProcAddr`:
//! [`counted_get_device_proc_addr`] answers it with the same entries as the
//! counted `ash::Device`, so its memory objects are counted by the same hooks.
//!
//! The hooks, the placeholders and the counters are in `vulkan/hooks.rs`;
//! this file keeps the context that installs them, the driver's entry
//! points they forward to, and the validation messenger's count.

use std::ffi::{c_void, CStr};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::OnceLock;

use ash::vk;

mod hooks;
pub use hooks::{
    counted_get_device_proc_addr, counts, driver_ns, reset_counts, set_pending_requirements,
    unqueried_buffer, unqueried_image, MemoryCounts,
};

/// The driver's entry points the trampolines forward to.
struct RealFns {
    allocate: vk::PFN_vkAllocateMemory,
    free: vk::PFN_vkFreeMemory,
    buffer_requirements: vk::PFN_vkGetBufferMemoryRequirements2,
    image_requirements: vk::PFN_vkGetImageMemoryRequirements2,
    get_device_proc_addr: vk::PFN_vkGetDeviceProcAddr,
}

static REAL: OnceLock<RealFns> = OnceLock::new();

/// Validation messages seen by the debug messenger.
static VALIDATION_MESSAGES: AtomicU64 = AtomicU64::new(0);
static PRINT_MESSAGES: AtomicBool = AtomicBool::new(true);

unsafe extern "system" fn debug_callback(
    severity: vk::DebugUtilsMessageSeverityFlagsEXT,
    kind: vk::DebugUtilsMessageTypeFlagsEXT,
    data: *const vk::DebugUtilsMessengerCallbackDataEXT<'_>,
    _user: *mut c_void,
) -> vk::Bool32 {
    VALIDATION_MESSAGES.fetch_add(1, Ordering::Relaxed);
    if PRINT_MESSAGES.load(Ordering::Relaxed) {
        let message = unsafe {
            let p = (*data).p_message;
            if p.is_null() {
                "(no message)".into()
            } else {
                CStr::from_ptr(p).to_string_lossy()
            }
        };
        eprintln!("[validation {severity:?} {kind:?}] {message}");
    }
    vk::FALSE
}

/// Whether the messenger prints what it counts (off for the deliberate
/// error of [`VulkanContext::check_validation_reports`]).
pub fn set_print_messages(print: bool) {
    PRINT_MESSAGES.store(print, Ordering::Relaxed);
}

/// Validation warnings and errors reported so far.
pub fn validation_messages() -> u64 {
    VALIDATION_MESSAGES.load(Ordering::Relaxed)
}

/// Counts one message as the messenger does: the unit tests' stand-in for
/// a validation layer reporting something.
#[cfg(test)]
pub fn note_validation_message() {
    VALIDATION_MESSAGES.fetch_add(1, Ordering::Relaxed);
}

/// The instance, the device, and the counted device table.
pub struct VulkanContext {
    /// Made with the validation layer and `VK_EXT_debug_utils`.
    pub validation: bool,
    entry: ash::Entry,
    pub instance: ash::Instance,
    pub physical_device: vk::PhysicalDevice,
    /// The plain device: resource creation and requirement queries.
    pub device: ash::Device,
    /// The same `VkDevice` with counted `vkAllocateMemory`/`vkFreeMemory`:
    /// what every allocator is given.
    pub counted_device: ash::Device,
    debug: Option<(ash::ext::debug_utils::Instance, vk::DebugUtilsMessengerEXT)>,
    pub device_name: String,
    pub driver_info: String,
    pub buffer_image_granularity: u64,
    /// The device was created with `timelineSemaphore` (Vulkan 1.2's
    /// features), which the `ring` trace's vk-suballoc row needs.
    pub timeline_semaphore: bool,
}

/// The environment variable that stacks the tests' fake-memory layer under
/// the bench (its value, the layer's configuration: a profile name such as
/// `discrete`, `mobile`...).
pub const FAKE_MEMORY_VARIABLE: &str = "VK_SUBALLOC_FAKE_MEMORY";

impl VulkanContext {
    /// Creates a Vulkan 1.3 instance and device on the first physical device
    /// whose name contains `device` (case-insensitive), or on the first one
    /// when `device` is `None` (lavapipe on a machine without a GPU). With
    /// `validation`, the Khronos validation layer and a debug-utils
    /// messenger that counts every warning and error.
    pub fn new(validation: bool, device: Option<&str>) -> Result<Self, String> {
        // SAFETY: loading the system Vulkan loader.
        let entry = unsafe { ash::Entry::load() }.map_err(|e| {
            format!(
                "cannot load the Vulkan loader ({e}); install libvulkan1 and mesa-vulkan-drivers"
            )
        })?;
        let app = vk::ApplicationInfo::default()
            .application_name(c"vk-suballoc-peers")
            .api_version(vk::API_VERSION_1_3);
        // With VK_SUBALLOC_FAKE_MEMORY set (a profile of the tests'
        // fake-memory layer, `layers/fake-memory`, which reads it), that layer
        // goes below validation, as the Vulkan tests stack it: the device
        // then looks like a discrete, integrated or mobile GPU, and
        // `--real-resources` binds real resources on that architecture
        // (`scripts/with-vulkan.sh` puts the layer on the loader's path).
        let mut layers = Vec::new();
        if validation {
            layers.push(c"VK_LAYER_KHRONOS_validation".as_ptr());
        }
        if std::env::var_os(FAKE_MEMORY_VARIABLE).is_some() {
            layers.push(c"VK_LAYER_VK_SUBALLOC_fake_memory".as_ptr());
        }
        let extensions = [ash::ext::debug_utils::NAME.as_ptr()];
        let mut messenger_info = vk::DebugUtilsMessengerCreateInfoEXT::default()
            .message_severity(
                vk::DebugUtilsMessageSeverityFlagsEXT::WARNING
                    | vk::DebugUtilsMessageSeverityFlagsEXT::ERROR,
            )
            .message_type(
                vk::DebugUtilsMessageTypeFlagsEXT::GENERAL
                    | vk::DebugUtilsMessageTypeFlagsEXT::VALIDATION
                    | vk::DebugUtilsMessageTypeFlagsEXT::PERFORMANCE,
            )
            .pfn_user_callback(Some(debug_callback));
        let mut info = vk::InstanceCreateInfo::default()
            .application_info(&app)
            .enabled_layer_names(&layers);
        if validation {
            info = info
                .enabled_extension_names(&extensions)
                .push_next(&mut messenger_info);
        }
        // SAFETY: valid create info; the instance is destroyed in Drop.
        let instance = unsafe { entry.create_instance(&info, None) }.map_err(|e| {
            if validation {
                format!("vkCreateInstance with validation failed ({e}); install vulkan-validationlayers")
            } else {
                format!("vkCreateInstance failed ({e})")
            }
        })?;
        let debug = if validation {
            let loader = ash::ext::debug_utils::Instance::new(&entry, &instance);
            // SAFETY: the extension is enabled on this instance.
            let messenger = unsafe { loader.create_debug_utils_messenger(&messenger_info, None) }
                .map_err(|e| format!("vkCreateDebugUtilsMessengerEXT failed ({e})"))?;
            Some((loader, messenger))
        } else {
            None
        };
        // SAFETY: valid instance.
        let physical_devices = unsafe { instance.enumerate_physical_devices() }
            .map_err(|e| format!("vkEnumeratePhysicalDevices failed ({e})"))?;
        let name_of = |physical_device: vk::PhysicalDevice| {
            // SAFETY: physical device of this instance.
            let properties = unsafe { instance.get_physical_device_properties(physical_device) };
            properties
                .device_name_as_c_str()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_default()
        };
        let physical_device = match device {
            None => *physical_devices
                .first()
                .ok_or("no Vulkan physical device; install mesa-vulkan-drivers (lavapipe)")?,
            Some(wanted) => physical_devices
                .iter()
                .copied()
                .find(|&d| name_of(d).to_lowercase().contains(&wanted.to_lowercase()))
                .ok_or_else(|| {
                    let seen: Vec<String> = physical_devices.iter().map(|&d| name_of(d)).collect();
                    format!("no Vulkan device named like {wanted:?} (devices: {seen:?})")
                })?,
        };
        // SAFETY: physical device of this instance.
        let properties = unsafe { instance.get_physical_device_properties(physical_device) };
        let device_name = name_of(physical_device);
        let mut driver = vk::PhysicalDeviceDriverProperties::default();
        let mut properties2 = vk::PhysicalDeviceProperties2::default().push_next(&mut driver);
        // SAFETY: Vulkan 1.3 instance, so properties2 is core.
        unsafe { instance.get_physical_device_properties2(physical_device, &mut properties2) };
        let driver_info = driver
            .driver_info_as_c_str()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default();
        let queue_family = 0;
        let priorities = [1.0];
        let queues = [vk::DeviceQueueCreateInfo::default()
            .queue_family_index(queue_family)
            .queue_priorities(&priorities)];
        // Timeline semaphores (core 1.2, optional there, required by 1.3)
        // when the device has them: the `ring` trace ends vk-suballoc's
        // frames with `end_frame_timeline` and signals them from the host.
        let mut supported12 = vk::PhysicalDeviceVulkan12Features::default();
        let mut features2 = vk::PhysicalDeviceFeatures2::default().push_next(&mut supported12);
        // SAFETY: Vulkan 1.3 instance, so features2 is core.
        unsafe { instance.get_physical_device_features2(physical_device, &mut features2) };
        let timeline_semaphore = supported12.timeline_semaphore == vk::TRUE;
        let mut enabled12 =
            vk::PhysicalDeviceVulkan12Features::default().timeline_semaphore(timeline_semaphore);
        let device_info = vk::DeviceCreateInfo::default()
            .queue_create_infos(&queues)
            .push_next(&mut enabled12);
        // SAFETY: valid create info; destroyed in Drop.
        let device = unsafe { instance.create_device(physical_device, &device_info, None) }
            .map_err(|e| format!("vkCreateDevice failed ({e})"))?;
        let _ = REAL.set(RealFns {
            allocate: device.fp_v1_0().allocate_memory,
            free: device.fp_v1_0().free_memory,
            buffer_requirements: device.fp_v1_1().get_buffer_memory_requirements2,
            image_requirements: device.fp_v1_1().get_image_memory_requirements2,
            get_device_proc_addr: instance.fp_v1_0().get_device_proc_addr,
        });
        let handle = device.handle();
        // SAFETY: every entry point but the four hooks is the driver's own,
        // looked up for this device; the hooks forward to the driver's (the
        // requirement hooks answer placeholder handles themselves).
        let counted_device = unsafe {
            ash::Device::load_with(
                |name| {
                    std::mem::transmute::<vk::PFN_vkVoidFunction, *const c_void>(
                        counted_get_device_proc_addr(handle, name.as_ptr()),
                    )
                },
                handle,
            )
        };
        Ok(Self {
            validation,
            entry,
            instance,
            physical_device,
            device,
            counted_device,
            debug,
            device_name,
            driver_info,
            buffer_image_granularity: properties.limits.buffer_image_granularity,
            timeline_semaphore,
        })
    }
}

impl VulkanContext {
    /// The Vulkan loader the context was made through.
    pub fn entry(&self) -> &ash::Entry {
        &self.entry
    }

    /// Makes one deliberate validation error (a buffer bound at a misaligned
    /// offset, VUID-vkBindBufferMemory-memoryOffset-01036) and checks that
    /// the messenger counted it: a real-resources run that sees no message
    /// is then known to be armed.
    pub fn check_validation_reports(&self) -> Result<(), String> {
        let before = validation_messages();
        let info = vk::BufferCreateInfo::default()
            .size(256)
            .usage(vk::BufferUsageFlags::STORAGE_BUFFER)
            .sharing_mode(vk::SharingMode::EXCLUSIVE);
        // SAFETY: valid create infos; everything is destroyed below; the
        // misaligned bind is the point (the driver only records the offset).
        unsafe {
            let buffer = self
                .device
                .create_buffer(&info, None)
                .map_err(|e| format!("vkCreateBuffer: {e}"))?;
            let requirements = self.device.get_buffer_memory_requirements(buffer);
            let memory_type = requirements.memory_type_bits.trailing_zeros();
            let memory = self
                .device
                .allocate_memory(
                    &vk::MemoryAllocateInfo::default()
                        .allocation_size(4096)
                        .memory_type_index(memory_type),
                    None,
                )
                .map_err(|e| format!("vkAllocateMemory: {e}"))?;
            set_print_messages(false);
            let offset = if requirements.alignment > 1 { 1 } else { 4096 };
            let _ = self.device.bind_buffer_memory(buffer, memory, offset);
            set_print_messages(true);
            self.device.destroy_buffer(buffer, None);
            self.device.free_memory(memory, None);
        }
        if validation_messages() > before {
            Ok(())
        } else {
            Err("the validation layer did not report a deliberately misaligned bind".into())
        }
    }
}

impl Drop for VulkanContext {
    fn drop(&mut self) {
        // SAFETY: every allocator and resource made on the device is gone by
        // now (they are dropped before the context).
        unsafe {
            let _ = self.device.device_wait_idle();
            self.device.destroy_device(None);
            if let Some((loader, messenger)) = self.debug.take() {
                loader.destroy_debug_utils_messenger(messenger, None);
            }
            self.instance.destroy_instance(None);
        }
    }
}
