//! `vkCreateDevice`: takes the device link, removes `VK_EXT_memory_budget`
//! and `VK_EXT_memory_priority` (which this layer provides) before the driver
//! sees the extension list, and `VkPhysicalDeviceMemoryPriorityFeaturesEXT`
//! before it sees the chain, and registers the device's state with the next
//! layer's commands.

use std::ffi::c_char;
use std::sync::Arc;

use ash::vk;

use crate::c_interop::c_str;
use crate::call_failures::CallCounts;
use crate::dispatch_registry::{
    instance_state, next_device_fn, next_instance_fn, register_device, DeviceState, FakeDevice,
    NextDeviceFns,
};
use crate::ffi_guard::guard;
use crate::host_cache::HostCache;
use crate::image_kinds::ImageKinds;
use crate::loader_interface::take_device_link;
use crate::memory_accounting::AllocationBook;
use crate::memory_priority::{self, has_memory_priority, SeenPriorities, MEMORY_PRIORITY};
use crate::physical_device_queries::{
    has_memory_budget, next_device_extensions, reported_limits, MEMORY_BUDGET,
};

/// `vkCreateDevice`: takes this layer's link, hides `VK_EXT_memory_budget` from
/// the driver (unless it has it and the configuration offers a budget), and
/// `VK_EXT_memory_priority` with its feature structure (unless it has it and
/// the configuration offers it), and registers the new device.
/// `VK_ERROR_INITIALIZATION_FAILED` when the feature structure stands behind
/// one whose size the layer does not know (`memory_priority::without`).
///
/// # Safety
/// The caller's arguments are valid, as Vulkan requires.
pub unsafe extern "system" fn create_device(
    physical_device: vk::PhysicalDevice,
    create_info: *const vk::DeviceCreateInfo<'_>,
    allocator: *const vk::AllocationCallbacks<'_>,
    device: *mut vk::Device,
) -> vk::Result {
    guard(
        "vkCreateDevice",
        vk::Result::ERROR_INITIALIZATION_FAILED,
        || {
            // SAFETY: the caller's arguments to vkCreateDevice.
            unsafe { create_device_impl(physical_device, create_info, allocator, device) }
        },
    )
}

unsafe fn create_device_impl(
    physical_device: vk::PhysicalDevice,
    create_info: *const vk::DeviceCreateInfo<'_>,
    allocator: *const vk::AllocationCallbacks<'_>,
    device: *mut vk::Device,
) -> vk::Result {
    if create_info.is_null() || device.is_null() {
        return vk::Result::ERROR_INITIALIZATION_FAILED;
    }
    // SAFETY: a valid device create info from the loader, with our link.
    let Some(link) = (unsafe { take_device_link(create_info) }) else {
        return vk::Result::ERROR_INITIALIZATION_FAILED;
    };
    // SAFETY: a live physical device, from the caller.
    let Some(instance) = (unsafe { instance_state(physical_device) }) else {
        return vk::Result::ERROR_INITIALIZATION_FAILED;
    };
    // SAFETY: the next gipa with the instance the chain created.
    let next_create: Option<vk::PFN_vkCreateDevice> = unsafe {
        next_instance_fn(
            link.get_instance_proc_addr,
            instance.instance,
            &[c"vkCreateDevice"],
        )
    };
    let Some(next_create) = next_create else {
        return vk::Result::ERROR_INITIALIZATION_FAILED;
    };
    // SAFETY: a valid, non-null create info.
    let mut patched = unsafe { *create_info };
    let mut kept_names: Vec<*const c_char> = Vec::new();
    let mut stripped_chain = None;
    let mut driver_memory_priority = false;
    if let Some(config) = &instance.config {
        // The driver's extensions go through only where the profile offers
        // them (else they are hidden, and an application that enables one
        // anyway has it taken out, as this layer's own).
        // SAFETY: a live physical device of this instance.
        let driver = unsafe { next_device_extensions(&instance, physical_device) };
        let real_has_budget =
            config.memory_budget() && driver.as_ref().is_ok_and(|e| has_memory_budget(e));
        let real_has_priority =
            config.memory_priority() && driver.as_ref().is_ok_and(|e| has_memory_priority(e));
        driver_memory_priority = real_has_priority;
        if !real_has_priority {
            // SAFETY: a valid create info's chain, which outlives the call.
            match unsafe {
                memory_priority::without(
                    patched.p_next,
                    vk::StructureType::PHYSICAL_DEVICE_MEMORY_PRIORITY_FEATURES_EXT,
                )
            } {
                Ok(Some(chain)) => {
                    patched.p_next = chain.head();
                    stripped_chain = Some(chain);
                }
                Ok(None) => {}
                Err(_) => return vk::Result::ERROR_INITIALIZATION_FAILED,
            }
        }
        let names: &[*const c_char] = if patched.pp_enabled_extension_names.is_null() {
            &[]
        } else {
            // SAFETY: a valid create info holds `enabled_extension_count` names.
            unsafe {
                std::slice::from_raw_parts(
                    patched.pp_enabled_extension_names,
                    patched.enabled_extension_count as usize,
                )
            }
        };
        kept_names = names
            .iter()
            .copied()
            .filter(|&name| {
                // SAFETY: each enabled extension name is a NUL-terminated string.
                let name = unsafe { c_str(name) };
                (real_has_budget || name != Some(MEMORY_BUDGET))
                    && (real_has_priority || name != Some(MEMORY_PRIORITY))
            })
            .collect();
        patched.enabled_extension_count = kept_names.len() as u32;
        patched.pp_enabled_extension_names = kept_names.as_ptr();
    }
    // SAFETY: the caller's arguments, our extensions and feature structure
    // (if any) removed; the strings, `kept_names` and the chain's copies
    // outlive the call.
    let result = unsafe { next_create(physical_device, &patched, allocator, device) };
    drop(kept_names);
    drop(stripped_chain);
    if result != vk::Result::SUCCESS {
        return result;
    }
    // SAFETY: creation succeeded, so `*device` is the new device.
    let handle = unsafe { device.read() };
    let gdpa = link.get_device_proc_addr;
    // SAFETY: (all lookups) the next gdpa with the device it just created,
    // each name paired with its own PFN type.
    let next = unsafe {
        NextDeviceFns {
            destroy_device: next_device_fn(gdpa, handle, &[c"vkDestroyDevice"]),
            allocate_memory: next_device_fn(gdpa, handle, &[c"vkAllocateMemory"]),
            free_memory: next_device_fn(gdpa, handle, &[c"vkFreeMemory"]),
            map_memory: next_device_fn(gdpa, handle, &[c"vkMapMemory"]),
            map_memory2: next_device_fn(gdpa, handle, &[c"vkMapMemory2", c"vkMapMemory2KHR"]),
            unmap_memory: next_device_fn(gdpa, handle, &[c"vkUnmapMemory"]),
            unmap_memory2: next_device_fn(gdpa, handle, &[c"vkUnmapMemory2", c"vkUnmapMemory2KHR"]),
            flush_mapped_memory_ranges: next_device_fn(
                gdpa,
                handle,
                &[c"vkFlushMappedMemoryRanges"],
            ),
            invalidate_mapped_memory_ranges: next_device_fn(
                gdpa,
                handle,
                &[c"vkInvalidateMappedMemoryRanges"],
            ),
            create_buffer: next_device_fn(gdpa, handle, &[c"vkCreateBuffer"]),
            create_image: next_device_fn(gdpa, handle, &[c"vkCreateImage"]),
            destroy_image: next_device_fn(gdpa, handle, &[c"vkDestroyImage"]),
            bind_buffer_memory: next_device_fn(gdpa, handle, &[c"vkBindBufferMemory"]),
            bind_image_memory: next_device_fn(gdpa, handle, &[c"vkBindImageMemory"]),
            bind_buffer_memory2: next_device_fn(
                gdpa,
                handle,
                &[c"vkBindBufferMemory2", c"vkBindBufferMemory2KHR"],
            ),
            bind_image_memory2: next_device_fn(
                gdpa,
                handle,
                &[c"vkBindImageMemory2", c"vkBindImageMemory2KHR"],
            ),
            get_device_memory_commitment: next_device_fn(
                gdpa,
                handle,
                &[c"vkGetDeviceMemoryCommitment"],
            ),
            get_memory_fd_properties: next_device_fn(
                gdpa,
                handle,
                &[c"vkGetMemoryFdPropertiesKHR"],
            ),
            get_memory_host_pointer_properties: next_device_fn(
                gdpa,
                handle,
                &[c"vkGetMemoryHostPointerPropertiesEXT"],
            ),
            get_buffer_memory_requirements: next_device_fn(
                gdpa,
                handle,
                &[c"vkGetBufferMemoryRequirements"],
            ),
            get_image_memory_requirements: next_device_fn(
                gdpa,
                handle,
                &[c"vkGetImageMemoryRequirements"],
            ),
            get_buffer_memory_requirements2: next_device_fn(
                gdpa,
                handle,
                &[
                    c"vkGetBufferMemoryRequirements2",
                    c"vkGetBufferMemoryRequirements2KHR",
                ],
            ),
            get_image_memory_requirements2: next_device_fn(
                gdpa,
                handle,
                &[
                    c"vkGetImageMemoryRequirements2",
                    c"vkGetImageMemoryRequirements2KHR",
                ],
            ),
            get_device_buffer_memory_requirements: next_device_fn(
                gdpa,
                handle,
                &[
                    c"vkGetDeviceBufferMemoryRequirements",
                    c"vkGetDeviceBufferMemoryRequirementsKHR",
                ],
            ),
            get_device_image_memory_requirements: next_device_fn(
                gdpa,
                handle,
                &[
                    c"vkGetDeviceImageMemoryRequirements",
                    c"vkGetDeviceImageMemoryRequirementsKHR",
                ],
            ),
        }
    };
    // SAFETY: a live physical device of this instance.
    let physical = unsafe { instance.physical_device(physical_device) };
    let fake = match (&instance.config, physical) {
        (Some(config), Some(physical)) => {
            // SAFETY: a live physical device of this instance.
            let limits = unsafe { reported_limits(&instance, config, physical_device) };
            Some(FakeDevice {
                config: Arc::clone(config),
                physical,
                book: AllocationBook::default(),
                host_cache: HostCache::default(),
                non_coherent_atom_size: limits.non_coherent_atom_size,
                max_memory_allocation_count: limits.max_memory_allocation_count,
                image_kinds: ImageKinds::default(),
                driver_memory_priority,
                seen_priorities: SeenPriorities::default(),
                call_counts: CallCounts::default(),
            })
        }
        _ => None,
    };
    let state = DeviceState {
        next_get_device_proc_addr: gdpa,
        next,
        fake,
    };
    // SAFETY: the live device just created; the terminator set its dispatch word.
    if !unsafe { register_device(handle, state) } {
        if let Some(destroy) = next.destroy_device {
            // SAFETY: undo the creation we cannot track.
            unsafe { destroy(handle, allocator) };
        }
        return vk::Result::ERROR_INITIALIZATION_FAILED;
    }
    vk::Result::SUCCESS
}
