//! Instance-level entry points: creation and destruction of instances and
//! devices, and the physical-device queries that describe the memory
//! architecture (memory properties with `VK_EXT_memory_budget`, properties
//! with the limits, device extensions).

use std::ffi::{c_char, CStr};
use std::io::Write;
use std::sync::Arc;

use ash::vk;

use crate::config::{self, LayerConfig};
use crate::device_intercepts;
use crate::dispatch_registry::{
    instance_state, next_device_fn, next_instance_fn, register_device, register_instance,
    unregister_instance, DeviceState, FakeDevice, InstanceState, NextDeviceFns, NextInstanceFns,
};
use crate::ffi_guard::guard;
use crate::loader_interface::{take_device_link, take_instance_link};
use crate::memory_accounting::AllocationBook;
use crate::LAYER_NAME;

/// `PFN_vkVoidFunction` of an intercept with the given `PFN_vk*` type.
macro_rules! void_fn {
    ($function:expr, $pfn:ty) => {{
        let typed: $pfn = $function;
        // SAFETY: function pointers all have the same size and ABI class; the
        // loader casts the pointer back to `$pfn` by the command's name.
        Some(unsafe { std::mem::transmute::<$pfn, unsafe extern "system" fn()>(typed) })
    }};
}
pub(crate) use void_fn;

/// Copies an array out through the Vulkan two-call idiom: the count when
/// `out` is null, else up to `*count` items and `INCOMPLETE` if cut short.
///
/// # Safety
/// `count` is valid; `out` is null or points at `*count` writable items.
pub unsafe fn write_array<T: Copy>(items: &[T], count: *mut u32, out: *mut T) -> vk::Result {
    if count.is_null() {
        return vk::Result::ERROR_INITIALIZATION_FAILED;
    }
    let total = u32::try_from(items.len()).unwrap_or(u32::MAX);
    if out.is_null() {
        // SAFETY: `count` is valid and non-null.
        unsafe { count.write(total) };
        return vk::Result::SUCCESS;
    }
    // SAFETY: `count` is valid and non-null.
    let capacity = unsafe { count.read() };
    let written = capacity.min(total);
    for (index, item) in items.iter().take(written as usize).enumerate() {
        // SAFETY: `index < written <= *count`, the capacity of `out`.
        unsafe { out.add(index).write(*item) };
    }
    // SAFETY: `count` is valid and non-null.
    unsafe { count.write(written) };
    if written < total {
        vk::Result::INCOMPLETE
    } else {
        vk::Result::SUCCESS
    }
}

/// Reads a possibly null C string.
///
/// # Safety
/// `name` is null or a valid NUL-terminated string.
unsafe fn c_str<'a>(name: *const c_char) -> Option<&'a CStr> {
    // SAFETY: non-null and NUL-terminated by the contract.
    (!name.is_null()).then(|| unsafe { CStr::from_ptr(name) })
}

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

/// Overwrites the limits and device type the profile fakes.
fn patch_properties(config: &LayerConfig, properties: &mut vk::PhysicalDeviceProperties) {
    let limits = &mut properties.limits;
    let profile = config.profile;
    properties.device_type = profile.device_type;
    limits.buffer_image_granularity = limits
        .buffer_image_granularity
        .max(profile.buffer_image_granularity);
    limits.non_coherent_atom_size = limits
        .non_coherent_atom_size
        .max(profile.non_coherent_atom_size);
    limits.max_memory_allocation_count = limits
        .max_memory_allocation_count
        .min(config.max_memory_allocation_count());
}

unsafe extern "system" fn get_physical_device_properties(
    physical_device: vk::PhysicalDevice,
    properties: *mut vk::PhysicalDeviceProperties,
) {
    guard("vkGetPhysicalDeviceProperties", (), || {
        // SAFETY: a live physical device, from the caller.
        let Some(state) = (unsafe { instance_state(physical_device) }) else {
            return;
        };
        let Some(next) = state.next.get_physical_device_properties else {
            return;
        };
        // SAFETY: forwarding the caller's valid arguments.
        unsafe { next(physical_device, properties) };
        if let (Some(config), false) = (&state.config, properties.is_null()) {
            // SAFETY: non-null output the driver just filled.
            patch_properties(config, unsafe { &mut *properties });
        }
    });
}

unsafe extern "system" fn get_physical_device_properties2(
    physical_device: vk::PhysicalDevice,
    properties: *mut vk::PhysicalDeviceProperties2<'_>,
) {
    guard("vkGetPhysicalDeviceProperties2", (), || {
        // SAFETY: a live physical device, from the caller.
        let Some(state) = (unsafe { instance_state(physical_device) }) else {
            return;
        };
        let Some(next) = state.next.get_physical_device_properties2 else {
            return;
        };
        // SAFETY: forwarding the caller's valid arguments.
        unsafe { next(physical_device, properties) };
        if let (Some(config), false) = (&state.config, properties.is_null()) {
            // SAFETY: non-null output the driver just filled.
            patch_properties(config, unsafe { &mut (*properties).properties });
        }
    });
}

unsafe extern "system" fn get_physical_device_memory_properties(
    physical_device: vk::PhysicalDevice,
    properties: *mut vk::PhysicalDeviceMemoryProperties,
) {
    guard("vkGetPhysicalDeviceMemoryProperties", (), || {
        // SAFETY: a live physical device, from the caller.
        let Some(state) = (unsafe { instance_state(physical_device) }) else {
            return;
        };
        match (&state.config, properties.is_null()) {
            // SAFETY: non-null output structure from the caller.
            (Some(config), false) => unsafe {
                properties.write(config.profile.memory_properties())
            },
            _ => {
                if let Some(next) = state.next.get_physical_device_memory_properties {
                    // SAFETY: forwarding the caller's valid arguments.
                    unsafe { next(physical_device, properties) };
                }
            }
        }
    });
}

unsafe extern "system" fn get_physical_device_memory_properties2(
    physical_device: vk::PhysicalDevice,
    properties: *mut vk::PhysicalDeviceMemoryProperties2<'_>,
) {
    guard("vkGetPhysicalDeviceMemoryProperties2", (), || {
        // SAFETY: a live physical device, from the caller.
        let Some(state) = (unsafe { instance_state(physical_device) }) else {
            return;
        };
        let Some(next) = state.next.get_physical_device_memory_properties2 else {
            return;
        };
        // SAFETY: forwarding the caller's valid arguments; drivers ignore
        // chained structures they do not know (such as the budget one).
        unsafe { next(physical_device, properties) };
        let Some(config) = &state.config else { return };
        if properties.is_null() {
            return;
        }
        // SAFETY: a live physical device of this instance.
        let physical = unsafe { state.physical_device(physical_device) };
        let usage = physical
            .map(|p| p.heap_usage.snapshot())
            .unwrap_or_default();
        // SAFETY: non-null, valid output structure from the caller.
        let properties = unsafe { &mut *properties };
        properties.memory_properties = config.profile.memory_properties();
        let mut next_struct = properties.p_next.cast::<vk::BaseOutStructure<'_>>();
        while !next_struct.is_null() {
            // SAFETY: every structure in a valid pNext chain starts with sType, pNext.
            let (s_type, following) = unsafe { ((*next_struct).s_type, (*next_struct).p_next) };
            if s_type == vk::StructureType::PHYSICAL_DEVICE_MEMORY_BUDGET_PROPERTIES_EXT {
                // SAFETY: the sType identifies the structure.
                let budget = unsafe {
                    &mut *next_struct.cast::<vk::PhysicalDeviceMemoryBudgetPropertiesEXT<'_>>()
                };
                budget.heap_budget = [0; vk::MAX_MEMORY_HEAPS];
                budget.heap_usage = [0; vk::MAX_MEMORY_HEAPS];
                for (index, heap) in config
                    .profile
                    .heaps
                    .iter()
                    .enumerate()
                    .take(vk::MAX_MEMORY_HEAPS)
                {
                    budget.heap_budget[index] = heap.size;
                    budget.heap_usage[index] = usage[index];
                }
            }
            next_struct = following;
        }
    });
}

const MEMORY_BUDGET: &CStr = vk::EXT_MEMORY_BUDGET_NAME;

/// `VkExtensionProperties` of `VK_EXT_memory_budget`, which this layer provides.
fn memory_budget_extension() -> vk::ExtensionProperties {
    let mut properties = vk::ExtensionProperties {
        spec_version: vk::EXT_MEMORY_BUDGET_SPEC_VERSION,
        ..Default::default()
    };
    for (slot, byte) in properties
        .extension_name
        .iter_mut()
        .zip(MEMORY_BUDGET.to_bytes())
    {
        *slot = *byte as c_char;
    }
    properties
}

/// The next layer's device extensions of `physical_device`.
///
/// # Safety
/// `physical_device` is a live physical device of `state`'s instance.
unsafe fn next_device_extensions(
    state: &InstanceState,
    physical_device: vk::PhysicalDevice,
) -> Result<Vec<vk::ExtensionProperties>, vk::Result> {
    let next = state
        .next
        .enumerate_device_extension_properties
        .ok_or(vk::Result::ERROR_INITIALIZATION_FAILED)?;
    loop {
        let mut count = 0;
        // SAFETY: count query with valid pointers.
        let result = unsafe {
            next(
                physical_device,
                std::ptr::null(),
                &mut count,
                std::ptr::null_mut(),
            )
        };
        if result != vk::Result::SUCCESS {
            return Err(result);
        }
        let mut extensions = vec![vk::ExtensionProperties::default(); count as usize];
        // SAFETY: `extensions` has room for `count` items.
        let result = unsafe {
            next(
                physical_device,
                std::ptr::null(),
                &mut count,
                extensions.as_mut_ptr(),
            )
        };
        match result {
            vk::Result::SUCCESS => {
                extensions.truncate(count as usize);
                return Ok(extensions);
            }
            vk::Result::INCOMPLETE => continue,
            error => return Err(error),
        }
    }
}

fn has_memory_budget(extensions: &[vk::ExtensionProperties]) -> bool {
    extensions.iter().any(|e| {
        e.extension_name_as_c_str()
            .is_ok_and(|name| name == MEMORY_BUDGET)
    })
}

unsafe extern "system" fn enumerate_device_extension_properties(
    physical_device: vk::PhysicalDevice,
    layer_name: *const c_char,
    count: *mut u32,
    properties: *mut vk::ExtensionProperties,
) -> vk::Result {
    guard(
        "vkEnumerateDeviceExtensionProperties",
        vk::Result::ERROR_INITIALIZATION_FAILED,
        || {
            // SAFETY: a live physical device, from the caller.
            let Some(state) = (unsafe { instance_state(physical_device) }) else {
                return vk::Result::ERROR_INITIALIZATION_FAILED;
            };
            // SAFETY: null or the NUL-terminated layer name of the caller.
            let layer = unsafe { c_str(layer_name) };
            if layer == Some(LAYER_NAME) {
                let own = [memory_budget_extension()];
                let own = if state.config.is_some() {
                    &own[..]
                } else {
                    &[]
                };
                // SAFETY: the caller's valid count and array.
                return unsafe { write_array(own, count, properties) };
            }
            let Some(next) = state.next.enumerate_device_extension_properties else {
                return vk::Result::ERROR_INITIALIZATION_FAILED;
            };
            if layer.is_some() || state.config.is_none() {
                // SAFETY: forwarding the caller's valid arguments.
                return unsafe { next(physical_device, layer_name, count, properties) };
            }
            // SAFETY: a live physical device of this instance.
            let mut extensions = match unsafe { next_device_extensions(&state, physical_device) } {
                Ok(extensions) => extensions,
                Err(error) => return error,
            };
            if !has_memory_budget(&extensions) {
                extensions.push(memory_budget_extension());
            }
            // SAFETY: the caller's valid count and array.
            unsafe { write_array(&extensions, count, properties) }
        },
    )
}

unsafe extern "system" fn create_device(
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
    if instance.config.is_some() {
        // SAFETY: a live physical device of this instance.
        let real_has_budget = unsafe { next_device_extensions(&instance, physical_device) }
            .is_ok_and(|extensions| has_memory_budget(&extensions));
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
                real_has_budget || unsafe { c_str(name) } != Some(MEMORY_BUDGET)
            })
            .collect();
        patched.enabled_extension_count = kept_names.len() as u32;
        patched.pp_enabled_extension_names = kept_names.as_ptr();
    }
    // SAFETY: the caller's arguments, our extension (if any) removed; the
    // strings and `kept_names` outlive the call.
    let result = unsafe { next_create(physical_device, &patched, allocator, device) };
    drop(kept_names);
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
            map_memory2: next_device_fn(gdpa, handle, &[c"vkMapMemory2KHR"]),
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
        (Some(config), Some(physical)) => Some(FakeDevice {
            config: Arc::clone(config),
            physical,
            book: AllocationBook::default(),
        }),
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
