//! Device creation for [`super::VulkanContext`]: the features and extensions
//! an allocator test may need, each checked before it is enabled.

use std::ffi::CStr;

use ash::vk;

/// The created device and what was enabled on it.
pub struct DeviceSetup {
    /// The device.
    pub device: ash::Device,
    /// The version of the device's core functions: the lower of the
    /// instance's and the physical device's.
    pub api_version: u32,
    /// `bufferDeviceAddress` and `timelineSemaphore` are enabled (a
    /// device of Vulkan 1.2 or later).
    pub vulkan_1_2_features_enabled: bool,
    /// Family of the one graphics + compute queue.
    pub queue_family_index: u32,
    /// `VK_EXT_memory_budget` is enabled.
    pub memory_budget_enabled: bool,
    /// `VK_EXT_memory_priority` and its `memoryPriority` feature are enabled.
    pub memory_priority_enabled: bool,
    /// The `synchronization2` feature is enabled.
    pub synchronization2_enabled: bool,
    /// Below Vulkan 1.2, `VK_KHR_timeline_semaphore` and its
    /// `timelineSemaphore` feature are enabled (when listed): timeline
    /// semaphores through the extension's commands, as an engine targeting
    /// Vulkan 1.1 uses them.
    pub timeline_semaphore_khr_enabled: bool,
    /// `VK_KHR_external_memory_fd` is enabled (`VK_KHR_external_memory`,
    /// which it needs, is core in 1.1): memory can be exported as and
    /// imported from file descriptors.
    pub external_memory_fd_enabled: bool,
}

fn has_extension(extensions: &[vk::ExtensionProperties], wanted: &CStr) -> bool {
    extensions
        .iter()
        .any(|extension| extension.extension_name_as_c_str() == Ok(wanted))
}

/// Creates the test device on `physical_device` of an instance created
/// with `instance_version`: the features of Vulkan 1.2 and 1.3 are enabled
/// when both versions reach them.
///
/// # Panics
/// When the physical device lacks Vulkan 1.2, `bufferDeviceAddress`,
/// `timelineSemaphore` or a graphics + compute queue, or creation fails.
pub fn create_device(
    instance: &ash::Instance,
    physical_device: vk::PhysicalDevice,
    instance_version: u32,
) -> DeviceSetup {
    // SAFETY: a physical device of this instance.
    let properties = unsafe { instance.get_physical_device_properties(physical_device) };
    assert!(
        properties.api_version >= vk::API_VERSION_1_2,
        "lavapipe reports Vulkan {}.{}; the tests need 1.2 or later (a newer mesa-vulkan-drivers)",
        vk::api_version_major(properties.api_version),
        vk::api_version_minor(properties.api_version),
    );
    // A device has the core functionality of the lower version only.
    let api_version = properties.api_version.min(instance_version);
    let has_vulkan_1_2 = api_version >= vk::API_VERSION_1_2;
    let has_vulkan_1_3 = api_version >= vk::API_VERSION_1_3;

    let mut supported12 = vk::PhysicalDeviceVulkan12Features::default();
    let mut supported13 = vk::PhysicalDeviceVulkan13Features::default();
    let mut supported = vk::PhysicalDeviceFeatures2::default();
    if has_vulkan_1_2 {
        supported = supported.push_next(&mut supported12);
    }
    if has_vulkan_1_3 {
        supported = supported.push_next(&mut supported13);
    }
    // SAFETY: a valid output chain of structures the device's version knows.
    unsafe { instance.get_physical_device_features2(physical_device, &mut supported) };
    assert!(
        !has_vulkan_1_2
            || (supported12.buffer_device_address == vk::TRUE
                && supported12.timeline_semaphore == vk::TRUE),
        "lavapipe lacks bufferDeviceAddress or timelineSemaphore; install a newer mesa-vulkan-drivers"
    );
    let synchronization2 = supported13.synchronization2 == vk::TRUE;
    let maintenance4 = supported13.maintenance4 == vk::TRUE;

    // SAFETY: a physical device of this instance.
    let extensions = unsafe { instance.enumerate_device_extension_properties(physical_device) }
        .unwrap_or_else(|error| panic!("vkEnumerateDeviceExtensionProperties failed: {error}"));
    let memory_budget = has_extension(&extensions, ash::ext::memory_budget::NAME);
    let mut enabled_extensions = Vec::new();
    if memory_budget {
        enabled_extensions.push(ash::ext::memory_budget::NAME.as_ptr());
    }
    let memory_priority = has_extension(&extensions, ash::ext::memory_priority::NAME) && {
        let mut priority = vk::PhysicalDeviceMemoryPriorityFeaturesEXT::default();
        let mut features = vk::PhysicalDeviceFeatures2::default().push_next(&mut priority);
        // SAFETY: a valid output chain; the extension is listed.
        unsafe { instance.get_physical_device_features2(physical_device, &mut features) };
        priority.memory_priority == vk::TRUE
    };
    if memory_priority {
        enabled_extensions.push(ash::ext::memory_priority::NAME.as_ptr());
    }
    let timeline_khr =
        !has_vulkan_1_2 && has_extension(&extensions, ash::khr::timeline_semaphore::NAME) && {
            let mut timeline = vk::PhysicalDeviceTimelineSemaphoreFeatures::default();
            let mut features = vk::PhysicalDeviceFeatures2::default().push_next(&mut timeline);
            // SAFETY: a valid output chain; the extension is listed.
            unsafe { instance.get_physical_device_features2(physical_device, &mut features) };
            timeline.timeline_semaphore == vk::TRUE
        };
    if timeline_khr {
        enabled_extensions.push(ash::khr::timeline_semaphore::NAME.as_ptr());
    }
    let external_memory_fd = has_extension(&extensions, ash::khr::external_memory_fd::NAME);
    if external_memory_fd {
        enabled_extensions.push(ash::khr::external_memory_fd::NAME.as_ptr());
    }

    // SAFETY: a physical device of this instance.
    let families = unsafe { instance.get_physical_device_queue_family_properties(physical_device) };
    let wanted = vk::QueueFlags::GRAPHICS | vk::QueueFlags::COMPUTE;
    let queue_family_index = families
        .iter()
        .position(|family| family.queue_flags.contains(wanted) && family.queue_count > 0)
        .and_then(|index| u32::try_from(index).ok())
        .unwrap_or_else(|| panic!("lavapipe offers no graphics + compute queue: {families:?}"));

    let priorities = [1.0];
    let queues = [vk::DeviceQueueCreateInfo::default()
        .queue_family_index(queue_family_index)
        .queue_priorities(&priorities)];
    let mut enable12 = vk::PhysicalDeviceVulkan12Features::default()
        .buffer_device_address(true)
        .timeline_semaphore(true);
    let mut enable13 = vk::PhysicalDeviceVulkan13Features::default()
        .synchronization2(synchronization2)
        .maintenance4(maintenance4);
    let mut enable_timeline_khr =
        vk::PhysicalDeviceTimelineSemaphoreFeatures::default().timeline_semaphore(true);
    let mut enable_priority =
        vk::PhysicalDeviceMemoryPriorityFeaturesEXT::default().memory_priority(true);
    let mut device_info = vk::DeviceCreateInfo::default()
        .queue_create_infos(&queues)
        .enabled_extension_names(&enabled_extensions);
    // push_next prepends: the priority features go last, behind the
    // structures the fake-memory layer copies to take them out.
    if memory_priority {
        device_info = device_info.push_next(&mut enable_priority);
    }
    if has_vulkan_1_2 {
        device_info = device_info.push_next(&mut enable12);
    }
    if has_vulkan_1_3 {
        device_info = device_info.push_next(&mut enable13);
    }
    if timeline_khr {
        device_info = device_info.push_next(&mut enable_timeline_khr);
    }

    // SAFETY: a valid create info with features the device supports.
    let device = unsafe { instance.create_device(physical_device, &device_info, None) }
        .unwrap_or_else(|error| panic!("vkCreateDevice failed: {error}"));
    DeviceSetup {
        device,
        api_version,
        vulkan_1_2_features_enabled: has_vulkan_1_2,
        queue_family_index,
        memory_budget_enabled: memory_budget,
        memory_priority_enabled: memory_priority,
        synchronization2_enabled: synchronization2,
        timeline_semaphore_khr_enabled: timeline_khr,
        external_memory_fd_enabled: external_memory_fd,
    }
}
