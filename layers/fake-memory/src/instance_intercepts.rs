//! Instance-level entry points: `vkGetInstanceProcAddr`, `vkCreateInstance`
//! (which picks the instance's profile) and `vkDestroyInstance`.

use std::ffi::{c_char, CStr};
use std::io::Write;
use std::sync::Arc;

use ash::vk;

use crate::c_interop::{c_str, void_fn};
use crate::config::{self, LayerConfig};
use crate::device_creation::create_device;
use crate::device_intercepts;
use crate::dispatch_registry::{
    instance_state, next_instance_fn, register_instance, unregister_instance, InstanceState,
    NextInstanceFns,
};
use crate::ffi_guard::guard;
use crate::loader_interface::take_instance_link;
use crate::memory_priority::get_physical_device_features2;
use crate::physical_device_queries::{
    enumerate_device_extension_properties, get_physical_device_memory_properties,
    get_physical_device_memory_properties2, get_physical_device_properties,
    get_physical_device_properties2,
};

/// Chooses the configuration of a new instance (see [`crate::config`]).
///
/// # Safety
/// `create_info` is a valid `VkInstanceCreateInfo`.
unsafe fn instance_config(
    create_info: &vk::InstanceCreateInfo<'_>,
) -> Result<Option<LayerConfig>, config::ConfigError> {
    let mut from_names = None;
    if !create_info.p_application_info.is_null() {
        // SAFETY: non-null pApplicationInfo of a valid create info.
        let app = unsafe { &*create_info.p_application_info };
        for name in [app.p_engine_name, app.p_application_name] {
            // SAFETY: application info strings are null or NUL-terminated.
            let text = unsafe { c_str(name) }.map(CStr::to_string_lossy);
            if let Some(spec) = text.as_deref().and_then(config::after_marker) {
                from_names = Some(spec.to_owned());
                break;
            }
        }
    }
    let spec = from_names.or_else(|| std::env::var(config::ENV_VAR).ok());
    spec.map_or(Ok(None), |spec| config::parse(&spec))
}

/// This layer's `vkGetInstanceProcAddr`.
///
/// # Safety
/// Called by the loader or the layer above with a valid name and a null or
/// live instance.
pub unsafe extern "system" fn get_instance_proc_addr(
    instance: vk::Instance,
    name: *const c_char,
) -> vk::PFN_vkVoidFunction {
    // SAFETY: forwarded contract.
    guard("vkGetInstanceProcAddr", None, || unsafe {
        get_instance_proc_addr_impl(instance, name)
    })
}

unsafe fn get_instance_proc_addr_impl(
    instance: vk::Instance,
    name: *const c_char,
) -> vk::PFN_vkVoidFunction {
    // SAFETY: the caller passes a NUL-terminated command name.
    let name = unsafe { c_str(name) }?;
    match name.to_bytes() {
        b"vkGetInstanceProcAddr" => {
            return void_fn!(get_instance_proc_addr, vk::PFN_vkGetInstanceProcAddr)
        }
        b"vkCreateInstance" => return void_fn!(create_instance, vk::PFN_vkCreateInstance),
        _ => {}
    }
    // SAFETY: a null or live instance, by the contract.
    let state = unsafe { instance_state(instance) }?;
    match name.to_bytes() {
        b"vkDestroyInstance" => return void_fn!(destroy_instance, vk::PFN_vkDestroyInstance),
        b"vkCreateDevice" => return void_fn!(create_device, vk::PFN_vkCreateDevice),
        b"vkGetDeviceProcAddr" => {
            return void_fn!(
                device_intercepts::get_device_proc_addr,
                vk::PFN_vkGetDeviceProcAddr
            )
        }
        _ => {}
    }
    // SAFETY: the next layer's gipa with the instance it created.
    let next = unsafe { (state.next_get_instance_proc_addr)(state.instance, name.as_ptr()) };
    if next.is_none() || state.config.is_none() {
        return next;
    }
    physical_device_intercept(name).or(next)
}

/// The intercept of a physical-device command, core and KHR names alike.
fn physical_device_intercept(name: &CStr) -> vk::PFN_vkVoidFunction {
    match name.to_bytes() {
        b"vkEnumerateDeviceExtensionProperties" => void_fn!(
            enumerate_device_extension_properties,
            vk::PFN_vkEnumerateDeviceExtensionProperties
        ),
        b"vkGetPhysicalDeviceProperties" => {
            void_fn!(
                get_physical_device_properties,
                vk::PFN_vkGetPhysicalDeviceProperties
            )
        }
        b"vkGetPhysicalDeviceProperties2" | b"vkGetPhysicalDeviceProperties2KHR" => {
            void_fn!(
                get_physical_device_properties2,
                vk::PFN_vkGetPhysicalDeviceProperties2
            )
        }
        b"vkGetPhysicalDeviceFeatures2" | b"vkGetPhysicalDeviceFeatures2KHR" => void_fn!(
            get_physical_device_features2,
            vk::PFN_vkGetPhysicalDeviceFeatures2
        ),
        b"vkGetPhysicalDeviceMemoryProperties" => void_fn!(
            get_physical_device_memory_properties,
            vk::PFN_vkGetPhysicalDeviceMemoryProperties
        ),
        b"vkGetPhysicalDeviceMemoryProperties2" | b"vkGetPhysicalDeviceMemoryProperties2KHR" => {
            void_fn!(
                get_physical_device_memory_properties2,
                vk::PFN_vkGetPhysicalDeviceMemoryProperties2
            )
        }
        _ => None,
    }
}

/// `vkCreateInstance`: takes this layer's link, reads the instance's
/// configuration and registers the new instance.
unsafe extern "system" fn create_instance(
    create_info: *const vk::InstanceCreateInfo<'_>,
    allocator: *const vk::AllocationCallbacks<'_>,
    instance: *mut vk::Instance,
) -> vk::Result {
    guard(
        "vkCreateInstance",
        vk::Result::ERROR_INITIALIZATION_FAILED,
        || {
            // SAFETY: the loader's arguments to vkCreateInstance.
            unsafe { create_instance_impl(create_info, allocator, instance) }
        },
    )
}

unsafe fn create_instance_impl(
    create_info: *const vk::InstanceCreateInfo<'_>,
    allocator: *const vk::AllocationCallbacks<'_>,
    instance: *mut vk::Instance,
) -> vk::Result {
    if create_info.is_null() || instance.is_null() {
        return vk::Result::ERROR_INITIALIZATION_FAILED;
    }
    // SAFETY: the loader passes a valid create info and leaves a link for us.
    let Some(next_gipa) = (unsafe { take_instance_link(create_info) }) else {
        return vk::Result::ERROR_INITIALIZATION_FAILED;
    };
    // SAFETY: non-null, valid create info.
    let config = match unsafe { instance_config(&*create_info) } {
        Ok(config) => config.map(Arc::new),
        Err(error) => {
            let _ = writeln!(
                std::io::stderr(),
                "vk-fake-memory-layer: bad configuration: {error}"
            );
            return vk::Result::ERROR_INITIALIZATION_FAILED;
        }
    };
    // SAFETY: global command lookup through the next layer's gipa.
    let next_create: Option<vk::PFN_vkCreateInstance> =
        unsafe { next_instance_fn(next_gipa, vk::Instance::null(), &[c"vkCreateInstance"]) };
    let Some(next_create) = next_create else {
        return vk::Result::ERROR_INITIALIZATION_FAILED;
    };
    // SAFETY: the application's arguments, with our link consumed.
    let result = unsafe { next_create(create_info, allocator, instance) };
    if result != vk::Result::SUCCESS {
        return result;
    }
    // SAFETY: creation succeeded, so `*instance` is the new instance.
    let handle = unsafe { instance.read() };
    // SAFETY: (all lookups) the next gipa with the instance it just created,
    // each name paired with its own PFN type.
    let next = unsafe {
        NextInstanceFns {
            destroy_instance: next_instance_fn(next_gipa, handle, &[c"vkDestroyInstance"]),
            enumerate_device_extension_properties: next_instance_fn(
                next_gipa,
                handle,
                &[c"vkEnumerateDeviceExtensionProperties"],
            ),
            get_physical_device_properties: next_instance_fn(
                next_gipa,
                handle,
                &[c"vkGetPhysicalDeviceProperties"],
            ),
            get_physical_device_properties2: next_instance_fn(
                next_gipa,
                handle,
                &[
                    c"vkGetPhysicalDeviceProperties2",
                    c"vkGetPhysicalDeviceProperties2KHR",
                ],
            ),
            get_physical_device_features2: next_instance_fn(
                next_gipa,
                handle,
                &[
                    c"vkGetPhysicalDeviceFeatures2",
                    c"vkGetPhysicalDeviceFeatures2KHR",
                ],
            ),
            get_physical_device_memory_properties: next_instance_fn(
                next_gipa,
                handle,
                &[c"vkGetPhysicalDeviceMemoryProperties"],
            ),
            get_physical_device_memory_properties2: next_instance_fn(
                next_gipa,
                handle,
                &[
                    c"vkGetPhysicalDeviceMemoryProperties2",
                    c"vkGetPhysicalDeviceMemoryProperties2KHR",
                ],
            ),
        }
    };
    let state = InstanceState::new(handle, next_gipa, config, next);
    // SAFETY: `handle` is the live instance just created.
    if !unsafe { register_instance(handle, state) } {
        if let Some(destroy) = next.destroy_instance {
            // SAFETY: undo the creation we cannot track.
            unsafe { destroy(handle, allocator) };
        }
        return vk::Result::ERROR_INITIALIZATION_FAILED;
    }
    vk::Result::SUCCESS
}

/// `vkDestroyInstance`: forgets the instance.
unsafe extern "system" fn destroy_instance(
    instance: vk::Instance,
    allocator: *const vk::AllocationCallbacks<'_>,
) {
    guard("vkDestroyInstance", (), || {
        // SAFETY: the application's instance, destroyed exactly once.
        let Some(state) = (unsafe { unregister_instance(instance) }) else {
            return;
        };
        if let Some(destroy) = state.next.destroy_instance {
            // SAFETY: forwarding the application's call.
            unsafe { destroy(instance, allocator) };
        }
    });
}
