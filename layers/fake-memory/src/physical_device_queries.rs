//! Physical-device queries that describe the memory architecture: memory
//! properties (with `VK_EXT_memory_budget` filled from the layer's own
//! accounting), properties (device type and limits), and device extensions
//! (`VK_EXT_memory_budget` and `VK_EXT_memory_priority` advertised where the
//! configuration offers them).

use std::ffi::{c_char, CStr};

use ash::vk;

use crate::c_interop::{c_str, pnext_chain, write_array};
use crate::config::LayerConfig;
use crate::dispatch_registry::{instance_state, InstanceState};
use crate::ffi_guard::guard;
use crate::memory_priority::memory_priority_extension;
use crate::LAYER_NAME;

/// Overwrites the limits and device type the profile fakes.
///
/// `bufferImageGranularity` and `nonCoherentAtomSize` are the profile's, but
/// on a GPU never below the driver's own, whose rules still hold for the
/// memory behind the fake types. On a CPU driver (lavapipe, SwiftShader)
/// they are the profile's even when smaller: its memory is host memory,
/// coherent, with no pages that linear and optimal resources could
/// conflict in, so neither limit guards anything there, and profiles with
/// small ones (`arc`'s granularity of 1, `apple`'s 16) report them as the
/// real GPUs do.
fn patch_properties(config: &LayerConfig, properties: &mut vk::PhysicalDeviceProperties) {
    let cpu_driver = properties.device_type == vk::PhysicalDeviceType::CPU;
    let raised = |driver: u64, profile: u64| {
        if cpu_driver {
            profile
        } else {
            driver.max(profile)
        }
    };
    let limits = &mut properties.limits;
    let profile = config.profile;
    properties.device_type = profile.device_type;
    limits.buffer_image_granularity = raised(
        limits.buffer_image_granularity,
        profile.buffer_image_granularity,
    );
    limits.non_coherent_atom_size = raised(
        limits.non_coherent_atom_size,
        profile.non_coherent_atom_size,
    );
    limits.max_memory_allocation_count = limits
        .max_memory_allocation_count
        .min(config.max_memory_allocation_count());
}

/// The limits this layer reports for `physical_device` under `config`
/// (the driver's, patched as [`patch_properties`] does; the profile's
/// `nonCoherentAtomSize` and allocation count limit if the driver lacks
/// `vkGetPhysicalDeviceProperties`).
///
/// # Safety
/// `physical_device` is a live physical device of `state`'s instance.
pub unsafe fn reported_limits(
    state: &InstanceState,
    config: &LayerConfig,
    physical_device: vk::PhysicalDevice,
) -> vk::PhysicalDeviceLimits {
    let Some(next) = state.next.get_physical_device_properties else {
        return vk::PhysicalDeviceLimits {
            non_coherent_atom_size: config.profile.non_coherent_atom_size,
            max_memory_allocation_count: config.max_memory_allocation_count(),
            ..Default::default()
        };
    };
    let mut properties = vk::PhysicalDeviceProperties::default();
    // SAFETY: a live physical device and a valid output structure.
    unsafe { next(physical_device, &mut properties) };
    patch_properties(config, &mut properties);
    properties.limits
}

/// `vkGetPhysicalDeviceProperties` with the profile's device type and limits.
///
/// # Safety
/// The caller's arguments are valid, as Vulkan requires.
pub unsafe extern "system" fn get_physical_device_properties(
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

/// `vkGetPhysicalDeviceProperties2[KHR]` with the profile's device type and limits.
///
/// # Safety
/// The caller's arguments are valid, as Vulkan requires.
pub unsafe extern "system" fn get_physical_device_properties2(
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

/// `vkGetPhysicalDeviceMemoryProperties`: the profile's heaps and types.
///
/// # Safety
/// The caller's arguments are valid, as Vulkan requires.
pub unsafe extern "system" fn get_physical_device_memory_properties(
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

/// `heapBudget` of a heap of `size` bytes of which `used` are allocated, as
/// Mesa's drivers report it (ANV, turnip, v3dv): what is in use plus 90% of
/// what is free ("let's not incite the app to starve the system"), rounded
/// down to a MiB as ANV rounds it, never 0 and never past the heap
/// (VkPhysicalDeviceMemoryBudgetPropertiesEXT). So the budget sits below
/// the heap's size and moves with every allocation and free.
pub fn heap_budget(size: u64, used: u64) -> u64 {
    const MIB: u64 = 1 << 20;
    let free = size.saturating_sub(used);
    let budget = used.saturating_add(free / 10 * 9) & !(MIB - 1);
    budget.clamp(1, size.max(1))
}

/// `vkGetPhysicalDeviceMemoryProperties2[KHR]`: the profile's heaps and types,
/// and `VkPhysicalDeviceMemoryBudgetPropertiesEXT` from the layer's accounting
/// (usage = bytes allocated through the layer, budget = [`heap_budget`])
/// where the configuration offers `VK_EXT_memory_budget`. Where it does not,
/// the structure keeps what the caller put in it, as a driver without the
/// extension leaves a structure it does not know (the driver below, which
/// may have the extension, is not let fill it with the real heaps' figures).
///
/// # Safety
/// The caller's arguments are valid, as Vulkan requires.
pub unsafe extern "system" fn get_physical_device_memory_properties2(
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
        let hidden = state.config.as_ref().is_some_and(|c| !c.memory_budget());
        // What the caller put in its budget structures, put back after the
        // driver's call when the extension is hidden.
        let callers_budgets = if hidden && !properties.is_null() {
            // SAFETY: non-null, the caller's valid output structure.
            unsafe { budget_structures(properties) }
                // SAFETY: each is a budget structure of the caller's chain.
                .map(|budget| (budget, unsafe { *budget }))
                .collect()
        } else {
            Vec::new()
        };
        // SAFETY: forwarding the caller's valid arguments; drivers ignore
        // chained structures they do not know (such as the budget one).
        unsafe { next(physical_device, properties) };
        let Some(config) = &state.config else { return };
        if properties.is_null() {
            return;
        }
        // SAFETY: non-null, valid output structure from the caller.
        unsafe { (*properties).memory_properties = config.profile.memory_properties() };
        for (budget, callers) in callers_budgets {
            // SAFETY: a budget structure of the caller's chain; only the
            // figures go back, the chain's links stay the caller's.
            unsafe {
                (*budget).heap_budget = callers.heap_budget;
                (*budget).heap_usage = callers.heap_usage;
            }
        }
        if hidden {
            return;
        }
        // SAFETY: a live physical device of this instance.
        let physical = unsafe { state.physical_device(physical_device) };
        let usage = physical
            .map(|p| p.heap_usage.snapshot())
            .unwrap_or_default();
        // SAFETY: non-null, the caller's valid output structure.
        for budget in unsafe { budget_structures(properties) } {
            // SAFETY: a budget structure of the caller's chain, an output
            // structure.
            let budget = unsafe { &mut *budget };
            budget.heap_budget = [0; vk::MAX_MEMORY_HEAPS];
            budget.heap_usage = [0; vk::MAX_MEMORY_HEAPS];
            for (index, heap) in config
                .profile
                .heaps
                .iter()
                .enumerate()
                .take(vk::MAX_MEMORY_HEAPS)
            {
                budget.heap_budget[index] = heap_budget(heap.size, usage[index]);
                budget.heap_usage[index] = usage[index];
            }
        }
    });
}

/// The `VkPhysicalDeviceMemoryBudgetPropertiesEXT` structures in the output
/// chain of `properties`.
///
/// # Safety
/// `properties` is a valid, non-null `VkPhysicalDeviceMemoryProperties2`
/// whose chain is made of valid output structures, each starting with
/// `sType` and `pNext`, that stay valid while the iterator and the
/// pointers it yields are used.
unsafe fn budget_structures(
    properties: *mut vk::PhysicalDeviceMemoryProperties2<'_>,
) -> impl Iterator<Item = *mut vk::PhysicalDeviceMemoryBudgetPropertiesEXT<'static>> {
    // SAFETY: the contract.
    let chain = unsafe { pnext_chain((*properties).p_next.cast_const()) };
    chain
        .filter(|&(s_type, _)| {
            s_type == vk::StructureType::PHYSICAL_DEVICE_MEMORY_BUDGET_PROPERTIES_EXT
        })
        // The sType identifies the structure, an output structure of the
        // caller's.
        .map(|(_, structure)| structure.cast_mut().cast())
}

/// `VK_EXT_memory_budget`, the extension this layer provides.
pub const MEMORY_BUDGET: &CStr = vk::EXT_MEMORY_BUDGET_NAME;

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
pub unsafe fn next_device_extensions(
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

/// Whether `extensions` lists `VK_EXT_memory_budget`.
pub fn has_memory_budget(extensions: &[vk::ExtensionProperties]) -> bool {
    extensions.iter().any(|e| {
        e.extension_name_as_c_str()
            .is_ok_and(|name| name == MEMORY_BUDGET)
    })
}

/// The extensions this layer provides under `config`, each with whether
/// the configuration offers it.
fn own_extensions(config: Option<&LayerConfig>) -> [(vk::ExtensionProperties, bool); 2] {
    [
        (
            memory_budget_extension(),
            config.is_some_and(LayerConfig::memory_budget),
        ),
        (
            memory_priority_extension(),
            config.is_some_and(LayerConfig::memory_priority),
        ),
    ]
}

/// `vkEnumerateDeviceExtensionProperties`: the driver's list plus the
/// extensions the layer provides and the configuration offers
/// (`VK_EXT_memory_budget`, `LayerConfig::memory_budget`;
/// `VK_EXT_memory_priority`, `LayerConfig::memory_priority`), less those it
/// does not offer, the driver's included (the GPU modelled has none, and the
/// driver's budget would report the real heaps); for this layer's name,
/// those it offers alone.
///
/// # Safety
/// The caller's arguments are valid, as Vulkan requires.
pub unsafe extern "system" fn enumerate_device_extension_properties(
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
            let own = own_extensions(state.config.as_deref());
            if layer == Some(LAYER_NAME) {
                let offered: Vec<vk::ExtensionProperties> = own
                    .iter()
                    .filter(|(_, offered)| *offered)
                    .map(|(extension, _)| *extension)
                    .collect();
                // SAFETY: the caller's valid count and array.
                return unsafe { write_array(&offered, count, properties) };
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
            for (extension, offered) in own {
                let name = extension.extension_name_as_c_str();
                let same = |e: &vk::ExtensionProperties| e.extension_name_as_c_str() == name;
                if !offered {
                    extensions.retain(|e| !same(e));
                } else if !extensions.iter().any(same) {
                    extensions.push(extension);
                }
            }
            // SAFETY: the caller's valid count and array.
            unsafe { write_array(&extensions, count, properties) }
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::parse;

    /// A driver's properties with the given device type and limits.
    fn driver(
        device_type: vk::PhysicalDeviceType,
        granularity: u64,
        atom: u64,
    ) -> vk::PhysicalDeviceProperties {
        let mut properties = vk::PhysicalDeviceProperties {
            device_type,
            ..Default::default()
        };
        properties.limits.buffer_image_granularity = granularity;
        properties.limits.non_coherent_atom_size = atom;
        properties.limits.max_memory_allocation_count = 4096;
        properties
    }

    #[test]
    fn a_cpu_driver_gets_the_profiles_limits_even_below_its_own() {
        let config = parse("apple").unwrap().unwrap();
        let mut properties = driver(vk::PhysicalDeviceType::CPU, 64, 64);
        patch_properties(&config, &mut properties);
        let limits = properties.limits;
        assert_eq!(
            (
                properties.device_type,
                limits.buffer_image_granularity,
                limits.non_coherent_atom_size
            ),
            (vk::PhysicalDeviceType::INTEGRATED_GPU, 16, 16)
        );
        let config = parse("arc").unwrap().unwrap();
        let mut properties = driver(vk::PhysicalDeviceType::CPU, 64, 64);
        patch_properties(&config, &mut properties);
        assert_eq!(properties.limits.buffer_image_granularity, 1);
        // The allocation count is never above the driver's.
        assert_eq!(properties.limits.max_memory_allocation_count, 4096);
    }

    #[test]
    fn a_gpu_drivers_limits_are_raised_never_lowered() {
        let config = parse("apple").unwrap().unwrap();
        let mut properties = driver(vk::PhysicalDeviceType::DISCRETE_GPU, 1024, 64);
        patch_properties(&config, &mut properties);
        let limits = properties.limits;
        assert_eq!(
            (
                limits.buffer_image_granularity,
                limits.non_coherent_atom_size
            ),
            (1024, 64)
        );
        let config = parse("discrete").unwrap().unwrap();
        let mut properties = driver(vk::PhysicalDeviceType::INTEGRATED_GPU, 1, 64);
        patch_properties(&config, &mut properties);
        let limits = properties.limits;
        assert_eq!(
            (
                limits.buffer_image_granularity,
                limits.non_coherent_atom_size
            ),
            (1024, 256)
        );
    }

    const MIB: u64 = 1 << 20;

    #[test]
    fn the_budget_is_usage_plus_nine_tenths_of_the_free_rest() {
        assert_eq!(heap_budget(1000 * MIB, 0), 900 * MIB);
        assert_eq!(heap_budget(1000 * MIB, 500 * MIB), 950 * MIB);
        // Below the heap until it is full; never 0, never past the heap.
        assert!(heap_budget(1000 * MIB, 999 * MIB) < 1000 * MIB);
        assert_eq!(heap_budget(1000 * MIB, 1000 * MIB), 1000 * MIB);
        assert_eq!(heap_budget(1000 * MIB, 2000 * MIB), 1000 * MIB);
        assert_eq!(heap_budget(MIB / 2, 0), 1);
        // Whole MiBs.
        assert_eq!(heap_budget(1000 * MIB, 1), 899 * MIB);
    }
}
