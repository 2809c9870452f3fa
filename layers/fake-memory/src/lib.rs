//! # vk-fake-memory-layer
//!
//! A Vulkan layer, for tests only, that makes one driver (in CI: lavapipe,
//! Mesa's CPU driver with a single coherent memory type) look like GPUs with
//! other memory architectures, so that the validation layer stacked above it
//! checks an allocator's multi-type, non-coherent, out-of-memory and
//! allocation-count paths against a real driver.
//!
//! Stack it *below* `VK_LAYER_KHRONOS_validation`: enable the layers in
//! `ppEnabledLayerNames` as `[VK_LAYER_KHRONOS_validation,
//! VK_LAYER_VK_SUBALLOC_fake_memory]` (the first is closest to the
//! application). The validation layer then sees the fake memory properties,
//! limits and requirements, while the driver below sees only what it knows.
//!
//! What the layer fakes, per instance (see [`config`] for how an instance
//! picks its profile and fault injection, [`profile`] for the profiles):
//! - memory properties (`vkGetPhysicalDeviceMemoryProperties`, `…2`, `…2KHR`),
//!   with `VkPhysicalDeviceMemoryBudgetPropertiesEXT` filled from its own
//!   accounting; it advertises `VK_EXT_memory_budget` for the profiles of
//!   GPUs that have it (discrete, amd, rebar, arc; `budget=on|off`
//!   overrides), hides it for the others, the driver's included (a budget
//!   structure chained there anyway comes back as the caller filled it),
//!   and removes it from the extension list before the driver's
//!   `vkCreateDevice` unless the profile offers it and the driver has it;
//! - `VK_EXT_memory_priority` for the profiles of GPUs that have it
//!   (discrete, amd, rebar; `priority=on|off` overrides; see
//!   `memory_priority.rs`): the extension listed, `memoryPriority` reported
//!   by `vkGetPhysicalDeviceFeatures2[KHR]`, the extension and
//!   `VkPhysicalDeviceMemoryPriorityFeaturesEXT` taken out of
//!   `vkCreateDevice`'s create info and `VkMemoryPriorityAllocateInfoEXT`
//!   out of `vkAllocateMemory`'s chain before the driver (which lacks it)
//!   sees them, the priorities recorded for the layer's own command
//!   `vkGetSeenMemoryPrioritiesVKSUBALLOC`;
//! - the device type and the limits `bufferImageGranularity`,
//!   `nonCoherentAtomSize` and `maxMemoryAllocationCount`
//!   (`vkGetPhysicalDeviceProperties`, `…2`, `…2KHR`);
//! - every memory-requirements query (buffer/image, 1.0, `2`, `2KHR`, and the
//!   maintenance4 `vkGetDevice{Buffer,Image}MemoryRequirements[KHR]`):
//!   `memoryTypeBits` in fake indices (a lazily allocated type only for
//!   images created with `VK_IMAGE_USAGE_TRANSIENT_ATTACHMENT_BIT`, a host
//!   type that holds no optimal images still for linear ones, both of
//!   which the layer tracks through `vkCreateImage` and `vkDestroyImage`),
//!   alignment raised to the profile's,
//!   buffer sizes rounded up as a real driver rounds them (the discrete
//!   profile to 16 bytes, as NVIDIA does), and, with the `dedicated=` option,
//!   `VkMemoryDedicatedRequirements` preferring or requiring dedicated memory;
//! - the import queries `vkGetMemoryFdPropertiesKHR` and
//!   `vkGetMemoryHostPointerPropertiesEXT`: `memoryTypeBits` in fake
//!   indices, as for a buffer (no lazily allocated type), for a host
//!   pointer only the host-visible types in system memory (every
//!   host-visible type where all heaps are device-local);
//! - `vkAllocateMemory`: the fake type is backed by a real one;
//!   `ERROR_OUT_OF_DEVICE_MEMORY` past a fake heap's size or on a call chosen
//!   to fail, `ERROR_TOO_MANY_OBJECTS` past the allocation count;
//! - binds (`vkBindBufferMemory`, `vkBindImageMemory`, `…2`, `…2KHR`):
//!   the layer records the resource each allocation is dedicated to
//!   (`VkMemoryDedicatedAllocateInfo`) and refuses, with
//!   `VK_ERROR_VALIDATION_FAILED_EXT` and a line on standard error (none
//!   with `refusals=quiet`), a bind
//!   of another resource into it or at a non-zero offset
//!   (VUID-vkBindBufferMemory-memory-01508, VUID-vkBindImageMemory-memory-01509)
//!   and, with `dedicated=require`, a bind into memory not dedicated to the
//!   resource (VUID-vkBindBufferMemory-buffer-01444,
//!   VUID-vkBindImageMemory-image-01445): lavapipe accepts such binds and
//!   the validation layer the tests run under (1.3.239) reports none of
//!   them;
//! - `vkCreateBuffer`, `vkCreateImage` and the binds: the calls the
//!   `fail-create-*` and `fail-bind-*` options choose return
//!   `ERROR_OUT_OF_DEVICE_MEMORY` (or `ERROR_OUT_OF_HOST_MEMORY`) without
//!   reaching the driver (`call_failures.rs`);
//! - `vkFreeMemory` (accounting) and `vkMapMemory` / `vkMapMemory2` /
//!   `vkMapMemory2KHR` (`ERROR_MEMORY_MAP_FAILED` on a type that is not
//!   host-visible, on non-coherent memory already mapped, whose first
//!   mapping's host cache stays, and past the end of the memory object);
//! - `vkGetDeviceMemoryCommitment` of a lazily allocated fake type backed by
//!   a real type that is not: the whole allocation (the driver's own answer
//!   for such memory is not defined);
//! - non-coherent memory: mappings of a fake type that is host-visible but
//!   not host-coherent go through a host cache (`host_cache.rs`) that only
//!   `vkFlushMappedMemoryRanges` writes back and only
//!   `vkInvalidateMappedMemoryRanges` refills, so a missing flush or
//!   invalidate shows up as wrong bytes, on lavapipe's coherent memory;
//!   new memory of such a type (not imported) starts out holding a pattern
//!   in which no two neighbouring bytes are equal, so that the cache sees
//!   a host fill of any value as a write.
//!
//! The only exported symbol is `vkNegotiateLoaderLayerInterfaceVersion`
//! (loader interface version 2); no panic crosses into the loader. The
//! layer's one command of its own, `vkGetSeenMemoryPrioritiesVKSUBALLOC`,
//! is handed out by its `vkGetDeviceProcAddr`.

#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

mod c_interop;
pub mod call_failures;
pub mod config;
mod dedicated_binds;
mod device_creation;
mod device_intercepts;
mod dispatch_registry;
mod external_memory;
mod ffi_guard;
mod host_cache;
mod image_kinds;
mod instance_intercepts;
mod loader_interface;
mod memory_accounting;
mod memory_priority;
mod memory_type_map;
mod physical_device_queries;
pub mod profile;
#[cfg(test)]
mod profile_mirrors;
mod requirements_intercepts;

use std::ffi::CStr;

use ash::vk;

use loader_interface::{
    NegotiateLayerInterface, LAYER_INTERFACE_VERSION, LAYER_NEGOTIATE_INTERFACE_STRUCT,
};

/// The layer's name, as in its manifest.
pub const LAYER_NAME: &CStr = c"VK_LAYER_VK_SUBALLOC_fake_memory";

/// Negotiates the loader–layer interface: version 2, handing the loader this
/// layer's `vkGetInstanceProcAddr` and `vkGetDeviceProcAddr`.
///
/// # Safety
/// Called by the Vulkan loader with null or a valid, writable
/// `VkNegotiateLayerInterface`.
#[no_mangle]
#[allow(non_snake_case)]
pub unsafe extern "system" fn vkNegotiateLoaderLayerInterfaceVersion(
    interface: *mut NegotiateLayerInterface,
) -> vk::Result {
    ffi_guard::guard(
        "vkNegotiateLoaderLayerInterfaceVersion",
        vk::Result::ERROR_INITIALIZATION_FAILED,
        || {
            if interface.is_null() {
                return vk::Result::ERROR_INITIALIZATION_FAILED;
            }
            // SAFETY: non-null and, per the contract, valid and writable.
            let interface = unsafe { &mut *interface };
            if interface.s_type != LAYER_NEGOTIATE_INTERFACE_STRUCT
                || interface.loader_layer_interface_version < LAYER_INTERFACE_VERSION
            {
                return vk::Result::ERROR_INITIALIZATION_FAILED;
            }
            interface.loader_layer_interface_version = LAYER_INTERFACE_VERSION;
            interface.pfn_get_instance_proc_addr =
                Some(instance_intercepts::get_instance_proc_addr);
            interface.pfn_get_device_proc_addr = Some(device_intercepts::get_device_proc_addr);
            interface.pfn_get_physical_device_proc_addr = None;
            vk::Result::SUCCESS
        },
    )
}
