//! Queries that name the memory types an external handle or a host pointer
//! can be imported as (`vkGetMemoryFdPropertiesKHR`,
//! `vkGetMemoryHostPointerPropertiesEXT`): the driver's `memoryTypeBits`,
//! in its own type indices, rewritten into the profile's as the memory
//! requirements queries rewrite theirs (`memory_type_map.rs`): the fake
//! types whose backing real type the driver allows, never a lazily
//! allocated one (imported memory comes with its contents, committed),
//! and for a host pointer only the host-visible types in system memory
//! (`MemoryTypeMap::fake_host_pointer_type_bits`; every host-visible type
//! on a profile whose heaps are all device-local).
//! Passed through, the driver's bits named fake types by the driver's
//! indices: on lavapipe bit 0, the profile's first type (on `discrete`,
//! device-local memory the host cannot map), for a host pointer; rewritten
//! as for a buffer, they offered a host pointer device-only memory and the
//! BAR window, which the specification asks implementations not to do and
//! RADV does not.

use std::ffi::c_void;

use ash::vk;

use crate::dispatch_registry::{device_state, DeviceState};
use crate::ffi_guard::guard;

/// Rewrites `bits`, the driver's `memoryTypeBits` for an import of an
/// external handle, into the profile's type indices, if the device is faked.
fn patch_import_bits(state: &DeviceState, bits: &mut u32) {
    if let Some(fake) = &state.fake {
        *bits = fake.physical.type_map.fake_import_type_bits(*bits);
    }
}

/// Rewrites `bits`, the driver's `memoryTypeBits` for a host-pointer
/// import, into the profile's host-visible system-memory types, if the
/// device is faked.
fn patch_host_pointer_bits(state: &DeviceState, bits: &mut u32) {
    if let Some(fake) = &state.fake {
        *bits = fake.physical.type_map.fake_host_pointer_type_bits(*bits);
    }
}

/// `vkGetMemoryFdPropertiesKHR`, in fake type indices.
pub(crate) unsafe extern "system" fn get_memory_fd_properties(
    device: vk::Device,
    handle_type: vk::ExternalMemoryHandleTypeFlags,
    fd: i32,
    properties: *mut vk::MemoryFdPropertiesKHR<'_>,
) -> vk::Result {
    guard(
        "vkGetMemoryFdPropertiesKHR",
        vk::Result::ERROR_OUT_OF_HOST_MEMORY,
        || {
            // SAFETY: a live device, from the caller.
            let Some(state) = (unsafe { device_state(device) }) else {
                return vk::Result::ERROR_OUT_OF_HOST_MEMORY;
            };
            let Some(next) = state.next.get_memory_fd_properties else {
                return vk::Result::ERROR_OUT_OF_HOST_MEMORY;
            };
            // SAFETY: forwarding the caller's arguments.
            let result = unsafe { next(device, handle_type, fd, properties) };
            if result == vk::Result::SUCCESS && !properties.is_null() {
                // SAFETY: the caller's output structure, which the driver
                // just filled.
                patch_import_bits(&state, unsafe { &mut (*properties).memory_type_bits });
            }
            result
        },
    )
}

/// `vkGetMemoryHostPointerPropertiesEXT`, in fake type indices: the
/// host-visible system-memory types the driver's answer allows.
pub(crate) unsafe extern "system" fn get_memory_host_pointer_properties(
    device: vk::Device,
    handle_type: vk::ExternalMemoryHandleTypeFlags,
    host_pointer: *const c_void,
    properties: *mut vk::MemoryHostPointerPropertiesEXT<'_>,
) -> vk::Result {
    guard(
        "vkGetMemoryHostPointerPropertiesEXT",
        vk::Result::ERROR_OUT_OF_HOST_MEMORY,
        || {
            // SAFETY: a live device, from the caller.
            let Some(state) = (unsafe { device_state(device) }) else {
                return vk::Result::ERROR_OUT_OF_HOST_MEMORY;
            };
            let Some(next) = state.next.get_memory_host_pointer_properties else {
                return vk::Result::ERROR_OUT_OF_HOST_MEMORY;
            };
            // SAFETY: forwarding the caller's arguments.
            let result = unsafe { next(device, handle_type, host_pointer, properties) };
            if result == vk::Result::SUCCESS && !properties.is_null() {
                // SAFETY: the caller's output structure, which the driver
                // just filled.
                patch_host_pointer_bits(&state, unsafe { &mut (*properties).memory_type_bits });
            }
            result
        },
    )
}
