//! Device-level entry points: allocation (mapped onto the real type, refused
//! past the fake limits, its dedicated resource recorded, new memory of a
//! non-coherent type filled with the host cache's fresh pattern), free
//! (accounting), map (refused on types that are not host-visible, on
//! memory already mapped through a host cache, and past the end of the
//! memory object) and, for non-coherent fake types, map, unmap, flush and
//! invalidate through a host cache (`host_cache.rs`): the mapping
//! intercepts are in `device_intercepts/mapping.rs`. The memory
//! requirements queries are in `requirements_intercepts.rs`, image creation
//! and destruction (tracking transient attachments and linear images) in
//! `image_kinds.rs`, buffer creation and the failures of chosen creations
//! and binds in `call_failures.rs`,
//! the binds (checked against dedicated memory) in `dedicated_binds.rs`.
//!
//! `vkGetDeviceProcAddr` hands out an intercept only when the next layer has
//! the command, so an application never sees a command its driver lacks;
//! the one exception is the layer's own query of the memory priorities it
//! saw (`memory_priority.rs`), on the devices it fakes.

use std::ffi::{c_char, CStr};

use ash::vk;

use crate::c_interop::{pnext_chain, void_fn};
use crate::call_failures::create_buffer;
use crate::dedicated_binds::{
    bind_buffer_memory, bind_buffer_memory2, bind_image_memory, bind_image_memory2,
    dedicated_target,
};
use crate::dispatch_registry::{device_state, unregister_device, DeviceState};
use crate::external_memory::{get_memory_fd_properties, get_memory_host_pointer_properties};
use crate::ffi_guard::guard;
use crate::host_cache::fill_fresh_memory;
use crate::image_kinds::{create_image, destroy_image};
use crate::memory_priority::{
    self, chained_priority, get_seen_memory_priorities, SeenPriority, GET_SEEN_PRIORITIES,
};
use crate::requirements_intercepts::{
    get_buffer_memory_requirements, get_buffer_memory_requirements2,
    get_device_buffer_memory_requirements, get_device_image_memory_requirements,
    get_image_memory_requirements, get_image_memory_requirements2,
};

mod mapping;

use mapping::{
    flush_mapped_memory_ranges, invalidate_mapped_memory_ranges, map_memory, map_memory2,
    unmap_memory, unmap_memory2,
};

/// This layer's `vkGetDeviceProcAddr`.
///
/// # Safety
/// Called by the loader or the layer above with a valid name and a live device.
pub unsafe extern "system" fn get_device_proc_addr(
    device: vk::Device,
    name: *const c_char,
) -> vk::PFN_vkVoidFunction {
    // SAFETY: forwarded contract.
    guard("vkGetDeviceProcAddr", None, || unsafe {
        get_device_proc_addr_impl(device, name)
    })
}

unsafe fn get_device_proc_addr_impl(
    device: vk::Device,
    name: *const c_char,
) -> vk::PFN_vkVoidFunction {
    if name.is_null() {
        return None;
    }
    // SAFETY: a non-null, NUL-terminated command name from the caller.
    let name = unsafe { CStr::from_ptr(name) };
    // SAFETY: a live device, from the caller.
    let state = unsafe { device_state(device) }?;
    if name.to_bytes() == b"vkGetDeviceProcAddr" {
        return void_fn!(get_device_proc_addr, vk::PFN_vkGetDeviceProcAddr);
    }
    if name == GET_SEEN_PRIORITIES && state.fake.is_some() {
        // The layer's own command, which no layer below has.
        return void_fn!(
            get_seen_memory_priorities,
            unsafe extern "system" fn(vk::Device, *mut u32, *mut SeenPriority) -> vk::Result
        );
    }
    // SAFETY: the next layer's gdpa with the device it created.
    let next = unsafe { (state.next_get_device_proc_addr)(device, name.as_ptr()) };
    // No intercept for a command the next layer lacks.
    next?;
    if name.to_bytes() == b"vkDestroyDevice" {
        return void_fn!(destroy_device, vk::PFN_vkDestroyDevice);
    }
    if state.fake.is_none() {
        return next;
    }
    device_intercept(name).or(next)
}

/// The intercept of a device command, core and KHR names alike.
fn device_intercept(name: &CStr) -> vk::PFN_vkVoidFunction {
    match name.to_bytes() {
        b"vkAllocateMemory" => void_fn!(allocate_memory, vk::PFN_vkAllocateMemory),
        b"vkFreeMemory" => void_fn!(free_memory, vk::PFN_vkFreeMemory),
        b"vkMapMemory" => void_fn!(map_memory, vk::PFN_vkMapMemory),
        // Vulkan 1.4 made the KHR commands core under the plain names.
        b"vkMapMemory2" | b"vkMapMemory2KHR" => void_fn!(map_memory2, vk::PFN_vkMapMemory2KHR),
        b"vkUnmapMemory" => void_fn!(unmap_memory, vk::PFN_vkUnmapMemory),
        b"vkUnmapMemory2" | b"vkUnmapMemory2KHR" => {
            void_fn!(unmap_memory2, vk::PFN_vkUnmapMemory2KHR)
        }
        b"vkFlushMappedMemoryRanges" => {
            void_fn!(
                flush_mapped_memory_ranges,
                vk::PFN_vkFlushMappedMemoryRanges
            )
        }
        b"vkInvalidateMappedMemoryRanges" => {
            void_fn!(
                invalidate_mapped_memory_ranges,
                vk::PFN_vkInvalidateMappedMemoryRanges
            )
        }
        b"vkCreateBuffer" => void_fn!(create_buffer, vk::PFN_vkCreateBuffer),
        b"vkCreateImage" => void_fn!(create_image, vk::PFN_vkCreateImage),
        b"vkGetDeviceMemoryCommitment" => void_fn!(
            get_device_memory_commitment,
            vk::PFN_vkGetDeviceMemoryCommitment
        ),
        b"vkDestroyImage" => void_fn!(destroy_image, vk::PFN_vkDestroyImage),
        b"vkBindBufferMemory" => void_fn!(bind_buffer_memory, vk::PFN_vkBindBufferMemory),
        b"vkBindImageMemory" => void_fn!(bind_image_memory, vk::PFN_vkBindImageMemory),
        b"vkBindBufferMemory2" | b"vkBindBufferMemory2KHR" => {
            void_fn!(bind_buffer_memory2, vk::PFN_vkBindBufferMemory2)
        }
        b"vkBindImageMemory2" | b"vkBindImageMemory2KHR" => {
            void_fn!(bind_image_memory2, vk::PFN_vkBindImageMemory2)
        }
        b"vkGetMemoryFdPropertiesKHR" => {
            void_fn!(get_memory_fd_properties, vk::PFN_vkGetMemoryFdPropertiesKHR)
        }
        b"vkGetMemoryHostPointerPropertiesEXT" => void_fn!(
            get_memory_host_pointer_properties,
            vk::PFN_vkGetMemoryHostPointerPropertiesEXT
        ),
        b"vkGetBufferMemoryRequirements" => {
            void_fn!(
                get_buffer_memory_requirements,
                vk::PFN_vkGetBufferMemoryRequirements
            )
        }
        b"vkGetImageMemoryRequirements" => {
            void_fn!(
                get_image_memory_requirements,
                vk::PFN_vkGetImageMemoryRequirements
            )
        }
        b"vkGetBufferMemoryRequirements2" | b"vkGetBufferMemoryRequirements2KHR" => {
            void_fn!(
                get_buffer_memory_requirements2,
                vk::PFN_vkGetBufferMemoryRequirements2
            )
        }
        b"vkGetImageMemoryRequirements2" | b"vkGetImageMemoryRequirements2KHR" => {
            void_fn!(
                get_image_memory_requirements2,
                vk::PFN_vkGetImageMemoryRequirements2
            )
        }
        b"vkGetDeviceBufferMemoryRequirements" | b"vkGetDeviceBufferMemoryRequirementsKHR" => {
            void_fn!(
                get_device_buffer_memory_requirements,
                vk::PFN_vkGetDeviceBufferMemoryRequirements
            )
        }
        b"vkGetDeviceImageMemoryRequirements" | b"vkGetDeviceImageMemoryRequirementsKHR" => {
            void_fn!(
                get_device_image_memory_requirements,
                vk::PFN_vkGetDeviceImageMemoryRequirements
            )
        }
        _ => None,
    }
}

/// `vkDestroyDevice`: forgets the device and releases its heap usage.
unsafe extern "system" fn destroy_device(
    device: vk::Device,
    allocator: *const vk::AllocationCallbacks<'_>,
) {
    guard("vkDestroyDevice", (), || {
        // SAFETY: the application's device, destroyed exactly once.
        let Some(state) = (unsafe { unregister_device(device) }) else {
            return;
        };
        if let Some(fake) = &state.fake {
            // Leaked allocations die with the device; the validation layer
            // reports them, the heap accounting just lets them go.
            fake.book.release_all(&fake.physical.heap_usage);
        }
        if let Some(destroy) = state.next.destroy_device {
            // SAFETY: forwarding the application's call.
            unsafe { destroy(device, allocator) };
        }
    });
}

/// `vkAllocateMemory`: admits the call against the fake limits, then allocates
/// in the real type behind the fake one, and records the resource a
/// `VkMemoryDedicatedAllocateInfo` dedicates the memory to and the priority
/// of a `VkMemoryPriorityAllocateInfoEXT`, which it takes out of the chain
/// where the driver lacks `VK_EXT_memory_priority` (refusing the call with
/// `VK_ERROR_VALIDATION_FAILED_EXT` when it cannot, `memory_priority::without`);
/// new memory of a non-coherent fake type gets the host cache's fresh
/// pattern ([`fill_fresh_non_coherent_memory`]).
unsafe extern "system" fn allocate_memory(
    device: vk::Device,
    allocate_info: *const vk::MemoryAllocateInfo<'_>,
    allocator: *const vk::AllocationCallbacks<'_>,
    memory: *mut vk::DeviceMemory,
) -> vk::Result {
    guard(
        "vkAllocateMemory",
        vk::Result::ERROR_OUT_OF_HOST_MEMORY,
        || {
            // SAFETY: the caller's arguments to vkAllocateMemory.
            unsafe { allocate_memory_impl(device, allocate_info, allocator, memory) }
        },
    )
}

unsafe fn allocate_memory_impl(
    device: vk::Device,
    allocate_info: *const vk::MemoryAllocateInfo<'_>,
    allocator: *const vk::AllocationCallbacks<'_>,
    memory: *mut vk::DeviceMemory,
) -> vk::Result {
    // SAFETY: a live device, from the caller.
    let Some(state) = (unsafe { device_state(device) }) else {
        return vk::Result::ERROR_OUT_OF_HOST_MEMORY;
    };
    let Some(next) = state.next.allocate_memory else {
        return vk::Result::ERROR_OUT_OF_HOST_MEMORY;
    };
    let (Some(fake), false, false) = (&state.fake, allocate_info.is_null(), memory.is_null())
    else {
        // SAFETY: forwarding the caller's arguments unchanged.
        return unsafe { next(device, allocate_info, allocator, memory) };
    };
    // SAFETY: non-null, valid allocate info (its pNext chain is passed on as is).
    let mut real_info = unsafe { *allocate_info };
    // SAFETY: a valid allocate info's chain is made of valid structures.
    let dedicated = unsafe { dedicated_target(&real_info) };
    // SAFETY: as above.
    let priority = unsafe { chained_priority(&real_info) };
    let mut stripped_chain = None;
    if priority.is_some() && !fake.driver_memory_priority {
        // SAFETY: as above; the chain outlives the call.
        match unsafe {
            memory_priority::without(
                real_info.p_next,
                vk::StructureType::MEMORY_PRIORITY_ALLOCATE_INFO_EXT,
            )
        } {
            Ok(Some(chain)) => {
                real_info.p_next = chain.head();
                stripped_chain = Some(chain);
            }
            Ok(None) => {}
            Err(_) => return vk::Result::ERROR_VALIDATION_FAILED_EXT,
        }
    }
    let usage = &fake.physical.heap_usage;
    let reservation = match fake.book.reserve(
        &fake.config,
        usage,
        fake.max_memory_allocation_count,
        real_info.memory_type_index,
        real_info.allocation_size,
    ) {
        Ok(reservation) => reservation.dedicated_to(dedicated),
        Err(refusal) => return refusal,
    };
    let Some(real_type) = fake
        .physical
        .type_map
        .real_type(real_info.memory_type_index)
    else {
        fake.book.cancel(usage, reservation);
        return vk::Result::ERROR_OUT_OF_DEVICE_MEMORY;
    };
    let fake_type = real_info.memory_type_index;
    real_info.memory_type_index = real_type;
    // SAFETY: the caller's allocation with the real type index (and without
    // its priority where the driver lacks the extension); the copies of
    // `stripped_chain` outlive the call.
    let result = unsafe { next(device, &real_info, allocator, memory) };
    if result == vk::Result::SUCCESS {
        // SAFETY: on success the driver wrote the new handle.
        let new_memory = unsafe { memory.read() };
        fake.book.commit(reservation, new_memory);
        // SAFETY: the driver's new memory, not yet handed to the
        // application, allocated with `real_info`, whose chain (through
        // the copies of `stripped_chain`, still held) is valid.
        unsafe {
            fill_fresh_non_coherent_memory(&state, device, new_memory, fake_type, &real_info)
        };
        if let Some(priority) = priority {
            fake.seen_priorities.record(SeenPriority {
                allocation_size: real_info.allocation_size,
                memory_type_index: fake_type,
                priority,
            });
        }
    } else {
        fake.book.cancel(usage, reservation);
    }
    // Only now: `real_info`'s chain, walked above for imports, runs
    // through the copies.
    drop(stripped_chain);
    result
}

/// Structures whose memory comes with contents of its own (an import).
const IMPORTS: [vk::StructureType; 8] = [
    vk::StructureType::IMPORT_MEMORY_FD_INFO_KHR,
    vk::StructureType::IMPORT_MEMORY_HOST_POINTER_INFO_EXT,
    vk::StructureType::IMPORT_MEMORY_WIN32_HANDLE_INFO_KHR,
    vk::StructureType::IMPORT_MEMORY_WIN32_HANDLE_INFO_NV,
    vk::StructureType::IMPORT_ANDROID_HARDWARE_BUFFER_INFO_ANDROID,
    vk::StructureType::IMPORT_MEMORY_ZIRCON_HANDLE_INFO_FUCHSIA,
    vk::StructureType::IMPORT_METAL_BUFFER_INFO_EXT,
    vk::StructureType::IMPORT_SCREEN_BUFFER_INFO_QNX,
];

/// Writes the host cache's fresh-memory pattern (`host_cache.rs`,
/// `fill_fresh_memory`) over new memory of a fake type that is host-visible
/// but not host-coherent, through a mapping of its own: the contents of new
/// memory are not defined, and lavapipe's are what its freed memory held,
/// often a value a test writes again, which the host cache would not see
/// written. Imported memory keeps its contents; a map the driver refuses
/// leaves the memory as it is.
///
/// # Safety
/// `memory` is new memory of `device`, allocated with `info` (its fake
/// type `fake_type`), that the application has not been given yet.
unsafe fn fill_fresh_non_coherent_memory(
    state: &DeviceState,
    device: vk::Device,
    memory: vk::DeviceMemory,
    fake_type: u32,
    info: &vk::MemoryAllocateInfo<'_>,
) {
    let Some(fake) = &state.fake else { return };
    let (Some(map), Some(unmap)) = (state.next.map_memory, state.next.unmap_memory) else {
        return;
    };
    let non_coherent = fake
        .config
        .profile
        .types
        .get(fake_type as usize)
        .is_some_and(|t| {
            t.flags.contains(vk::MemoryPropertyFlags::HOST_VISIBLE)
                && !t.flags.contains(vk::MemoryPropertyFlags::HOST_COHERENT)
        });
    if !non_coherent {
        return;
    }
    // SAFETY: a valid allocate info's chain is made of valid structures.
    let imported = unsafe { pnext_chain(info.p_next) }.any(|(s_type, _)| IMPORTS.contains(&s_type));
    let Ok(len) = usize::try_from(info.allocation_size) else {
        return;
    };
    if imported {
        return;
    }
    let mut data = std::ptr::null_mut();
    // SAFETY: the driver's host-visible memory behind a host-visible fake
    // type, not mapped (new), mapped whole.
    let mapped = unsafe {
        map(
            device,
            memory,
            0,
            vk::WHOLE_SIZE,
            vk::MemoryMapFlags::empty(),
            &mut data,
        )
    };
    if mapped != vk::Result::SUCCESS || data.is_null() {
        return;
    }
    // SAFETY: the mapping covers the whole allocation, which nothing else
    // can reach yet (the application has not got the handle).
    unsafe { fill_fresh_memory(data.cast(), len) };
    // SAFETY: mapped above. No flush: where the real type is not coherent,
    // the GPU may see some of the old bytes, which are as undefined.
    unsafe { unmap(device, memory) };
}

/// `vkFreeMemory`: returns the bytes to the fake heap, then frees.
///
/// The record goes before the driver's free: once the driver has freed
/// `memory`, another thread's `vkAllocateMemory` may get the same handle
/// (lavapipe's handles are addresses) and record it, and a release after the
/// free would drop that new record instead.
unsafe extern "system" fn free_memory(
    device: vk::Device,
    memory: vk::DeviceMemory,
    allocator: *const vk::AllocationCallbacks<'_>,
) {
    guard("vkFreeMemory", (), || {
        // SAFETY: a live device, from the caller.
        let Some(state) = (unsafe { device_state(device) }) else {
            return;
        };
        if let Some(fake) = &state.fake {
            // Freeing unmaps: the cache goes first, unwritten.
            fake.host_cache.forget(memory);
            fake.book.release(&fake.physical.heap_usage, memory);
        }
        if let Some(next) = state.next.free_memory {
            // SAFETY: forwarding the caller's arguments.
            unsafe { next(device, memory, allocator) };
        }
    });
}

/// `vkGetDeviceMemoryCommitment`: memory of a lazily allocated fake type
/// backed by a real type that is not is committed whole, and the layer says
/// so itself; the driver's answer for memory of such a type is not defined
/// (NVIDIA's is its 64 KiB page, more than a small allocation's size).
unsafe extern "system" fn get_device_memory_commitment(
    device: vk::Device,
    memory: vk::DeviceMemory,
    committed: *mut vk::DeviceSize,
) {
    guard("vkGetDeviceMemoryCommitment", (), || {
        // SAFETY: a live device, from the caller.
        let Some(state) = (unsafe { device_state(device) }) else {
            return;
        };
        let emulated = state.fake.as_ref().and_then(|fake| {
            let record = fake.book.get(memory)?;
            fake.physical
                .type_map
                .emulates_lazy_allocation(record.fake_type)
                .then_some(record.size)
        });
        match (emulated, state.next.get_device_memory_commitment) {
            (Some(size), _) if !committed.is_null() => {
                // SAFETY: the caller's output pointer, non-null.
                unsafe { committed.write(size) };
            }
            (None, Some(next)) => {
                // SAFETY: forwarding the caller's arguments.
                unsafe { next(device, memory, committed) };
            }
            _ => {}
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Vulkan 1.4's core `vkMapMemory2`/`vkUnmapMemory2` reach the same
    /// intercepts as their KHR names: a mapping through them gets the host
    /// cache of non-coherent types too. So do 1.1's `vkBind*Memory2` and
    /// `VK_KHR_bind_memory2`'s: a bind through either is checked against
    /// dedicated memory.
    #[test]
    fn core_and_khr_names_reach_the_same_intercepts() {
        for (core, khr) in [
            (c"vkMapMemory2", c"vkMapMemory2KHR"),
            (c"vkUnmapMemory2", c"vkUnmapMemory2KHR"),
            (c"vkBindBufferMemory2", c"vkBindBufferMemory2KHR"),
            (c"vkBindImageMemory2", c"vkBindImageMemory2KHR"),
        ] {
            let (core, khr) = (device_intercept(core), device_intercept(khr));
            assert!(core.is_some());
            assert_eq!(core.map(|f| f as usize), khr.map(|f| f as usize));
        }
    }
}
