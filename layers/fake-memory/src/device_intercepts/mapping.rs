//! The mapping intercepts: `vkMapMemory` and `vkMapMemory2` (refused on
//! fake types that are not host-visible, on memory already mapped through a
//! host cache, and past the end of the memory object), and for non-coherent
//! fake types the host cache (`host_cache.rs`) put in front of a mapping and
//! kept through unmap, flush and invalidate.

use std::ffi::c_void;

use ash::vk;

use crate::dispatch_registry::{device_state, DeviceState};
use crate::ffi_guard::guard;
use crate::memory_accounting::MemoryRecord;

/// The layer's record of `memory` and the property flags of its fake type;
/// `None` in pass-through or for memory the layer did not allocate.
fn fake_memory(
    state: &DeviceState,
    memory: vk::DeviceMemory,
) -> Option<(MemoryRecord, vk::MemoryPropertyFlags)> {
    let fake = state.fake.as_ref()?;
    let record = fake.book.get(memory)?;
    let memory_type = fake.config.profile.types.get(record.fake_type as usize)?;
    Some((record, memory_type.flags))
}

/// `MEMORY_MAP_FAILED` when a map of `size` bytes (`VK_WHOLE_SIZE`
/// allowed) at `offset` of `memory` would be of a fake type that is not
/// host-visible, of memory already mapped through a host cache, or past
/// the end of the memory object.
///
/// A second map of mapped memory is invalid (VUID-vkMapMemory-memory-00678,
/// which the validation layer reports), but the application still holds
/// the first mapping's pointer: lavapipe hands the same pointer out again,
/// other drivers refuse. A new cache would replace, and free, the one that
/// pointer points into, so the layer refuses and keeps the first mapping.
/// A map past the end is invalid too (VUID-vkMapMemory-offset-00679,
/// -size-00681, reported as well), and lavapipe maps it anyway: the host
/// cache of a non-coherent type, filled from the driver's pointer, would
/// read past the memory object, and write past it at a flush.
fn refuse_map(
    state: &DeviceState,
    memory: vk::DeviceMemory,
    offset: u64,
    size: u64,
) -> Option<vk::Result> {
    let (record, flags) = fake_memory(state, memory)?;
    let mapped = state
        .fake
        .as_ref()
        .is_some_and(|fake| fake.host_cache.is_mapped(memory));
    let in_bounds = if size == vk::WHOLE_SIZE {
        offset < record.size
    } else {
        offset
            .checked_add(size)
            .is_some_and(|end| end <= record.size)
    };
    (!flags.contains(vk::MemoryPropertyFlags::HOST_VISIBLE) || mapped || !in_bounds)
        .then_some(vk::Result::ERROR_MEMORY_MAP_FAILED)
}

/// The bytes a mapping of `memory` at `offset` of `size` bytes
/// (`VK_WHOLE_SIZE` allowed) covers, when `memory` has a fake type that is
/// host-visible but not host-coherent; `None` otherwise.
fn non_coherent_mapping_size(
    state: &DeviceState,
    memory: vk::DeviceMemory,
    offset: u64,
    size: u64,
) -> Option<u64> {
    let (record, flags) = fake_memory(state, memory)?;
    if !flags.contains(vk::MemoryPropertyFlags::HOST_VISIBLE)
        || flags.contains(vk::MemoryPropertyFlags::HOST_COHERENT)
    {
        return None;
    }
    if size == vk::WHOLE_SIZE {
        record.size.checked_sub(offset)
    } else {
        Some(size)
    }
}

/// After the driver mapped `memory` at `offset` and wrote its pointer to
/// `data`: puts the host cache in front of a non-coherent fake type's mapping.
///
/// # Safety
/// `data` holds the driver's pointer to a mapping of `size` bytes (or
/// `VK_WHOLE_SIZE`) at `offset` of `memory`.
unsafe fn cache_mapping(
    state: &DeviceState,
    memory: vk::DeviceMemory,
    offset: u64,
    size: u64,
    data: *mut *mut c_void,
) {
    let (Some(fake), Some(size), false) = (
        &state.fake,
        non_coherent_mapping_size(state, memory, offset, size),
        data.is_null(),
    ) else {
        return;
    };
    // SAFETY: the driver wrote its pointer to `data` (contract).
    let device_pointer = unsafe { data.read() }.cast::<u8>();
    // SAFETY: the driver's mapping covers `size` bytes from that pointer and
    // lasts until unmapped or freed, when the cache is forgotten.
    let cached = unsafe {
        fake.host_cache.map(
            memory,
            device_pointer,
            offset,
            size,
            fake.non_coherent_atom_size,
        )
    };
    // SAFETY: `data` is the caller's writable output.
    unsafe { data.write(cached.cast()) };
}

/// `vkMapMemory`: `ERROR_MEMORY_MAP_FAILED` on a fake type that is not
/// host-visible, on memory already mapped through a host cache, or past the
/// end of the memory object; a host cache in front of a non-coherent type.
pub(super) unsafe extern "system" fn map_memory(
    device: vk::Device,
    memory: vk::DeviceMemory,
    offset: vk::DeviceSize,
    size: vk::DeviceSize,
    flags: vk::MemoryMapFlags,
    data: *mut *mut c_void,
) -> vk::Result {
    guard("vkMapMemory", vk::Result::ERROR_MEMORY_MAP_FAILED, || {
        // SAFETY: a live device, from the caller.
        let Some(state) = (unsafe { device_state(device) }) else {
            return vk::Result::ERROR_MEMORY_MAP_FAILED;
        };
        if let Some(refusal) = refuse_map(&state, memory, offset, size) {
            return refusal;
        }
        let Some(next) = state.next.map_memory else {
            return vk::Result::ERROR_MEMORY_MAP_FAILED;
        };
        // SAFETY: forwarding the caller's arguments.
        let result = unsafe { next(device, memory, offset, size, flags, data) };
        if result == vk::Result::SUCCESS {
            // SAFETY: on success the driver wrote its pointer to `data`.
            unsafe { cache_mapping(&state, memory, offset, size, data) };
        }
        result
    })
}

/// `vkMapMemory2KHR`: as [`map_memory`].
pub(super) unsafe extern "system" fn map_memory2(
    device: vk::Device,
    map_info: *const vk::MemoryMapInfoKHR<'_>,
    data: *mut *mut c_void,
) -> vk::Result {
    guard(
        "vkMapMemory2KHR",
        vk::Result::ERROR_MEMORY_MAP_FAILED,
        || {
            // SAFETY: a live device, from the caller.
            let Some(state) = (unsafe { device_state(device) }) else {
                return vk::Result::ERROR_MEMORY_MAP_FAILED;
            };
            if !map_info.is_null() {
                // SAFETY: non-null, valid map info from the caller.
                let info = unsafe { *map_info };
                if let Some(refusal) = refuse_map(&state, info.memory, info.offset, info.size) {
                    return refusal;
                }
            }
            let Some(next) = state.next.map_memory2 else {
                return vk::Result::ERROR_MEMORY_MAP_FAILED;
            };
            // SAFETY: forwarding the caller's arguments.
            let result = unsafe { next(device, map_info, data) };
            if result == vk::Result::SUCCESS && !map_info.is_null() {
                // SAFETY: non-null, valid map info from the caller.
                let info = unsafe { *map_info };
                // SAFETY: on success the driver wrote its pointer to `data`.
                unsafe { cache_mapping(&state, info.memory, info.offset, info.size, data) };
            }
            result
        },
    )
}

/// `vkUnmapMemory`: drops the host cache (unwritten), then unmaps.
pub(super) unsafe extern "system" fn unmap_memory(device: vk::Device, memory: vk::DeviceMemory) {
    guard("vkUnmapMemory", (), || {
        // SAFETY: a live device, from the caller.
        let Some(state) = (unsafe { device_state(device) }) else {
            return;
        };
        if let Some(fake) = &state.fake {
            fake.host_cache.forget(memory);
        }
        if let Some(next) = state.next.unmap_memory {
            // SAFETY: forwarding the caller's arguments.
            unsafe { next(device, memory) };
        }
    });
}

/// `vkUnmapMemory2KHR`: as [`unmap_memory`].
pub(super) unsafe extern "system" fn unmap_memory2(
    device: vk::Device,
    unmap_info: *const vk::MemoryUnmapInfoKHR<'_>,
) -> vk::Result {
    guard("vkUnmapMemory2KHR", vk::Result::ERROR_UNKNOWN, || {
        // SAFETY: a live device, from the caller.
        let Some(state) = (unsafe { device_state(device) }) else {
            return vk::Result::ERROR_UNKNOWN;
        };
        if let (Some(fake), false) = (&state.fake, unmap_info.is_null()) {
            // SAFETY: non-null, valid unmap info from the caller.
            fake.host_cache.forget(unsafe { (*unmap_info).memory });
        }
        let Some(next) = state.next.unmap_memory2 else {
            return vk::Result::ERROR_UNKNOWN;
        };
        // SAFETY: forwarding the caller's arguments.
        unsafe { next(device, unmap_info) }
    })
}

/// The caller's `count` ranges at `ranges` as a slice (empty for null).
///
/// # Safety
/// `ranges` is null or points to `count` valid ranges.
unsafe fn ranges<'a>(
    ranges: *const vk::MappedMemoryRange<'a>,
    count: u32,
) -> &'a [vk::MappedMemoryRange<'a>] {
    if ranges.is_null() || count == 0 {
        return &[];
    }
    // SAFETY: the contract.
    unsafe { std::slice::from_raw_parts(ranges, count as usize) }
}

/// `vkFlushMappedMemoryRanges`: writes the flushed bytes of host caches back
/// to device memory, then flushes.
pub(super) unsafe extern "system" fn flush_mapped_memory_ranges(
    device: vk::Device,
    count: u32,
    memory_ranges: *const vk::MappedMemoryRange<'_>,
) -> vk::Result {
    guard(
        "vkFlushMappedMemoryRanges",
        vk::Result::ERROR_OUT_OF_HOST_MEMORY,
        || {
            // SAFETY: a live device, from the caller.
            let Some(state) = (unsafe { device_state(device) }) else {
                return vk::Result::ERROR_OUT_OF_HOST_MEMORY;
            };
            if let Some(fake) = &state.fake {
                // SAFETY: the caller's ranges, of memory it has mapped.
                unsafe { fake.host_cache.flush(ranges(memory_ranges, count)) };
            }
            let Some(next) = state.next.flush_mapped_memory_ranges else {
                return vk::Result::ERROR_OUT_OF_HOST_MEMORY;
            };
            // SAFETY: forwarding the caller's arguments.
            unsafe { next(device, count, memory_ranges) }
        },
    )
}

/// `vkInvalidateMappedMemoryRanges`: invalidates, then refills the
/// invalidated bytes of host caches from device memory.
pub(super) unsafe extern "system" fn invalidate_mapped_memory_ranges(
    device: vk::Device,
    count: u32,
    memory_ranges: *const vk::MappedMemoryRange<'_>,
) -> vk::Result {
    guard(
        "vkInvalidateMappedMemoryRanges",
        vk::Result::ERROR_OUT_OF_HOST_MEMORY,
        || {
            // SAFETY: a live device, from the caller.
            let Some(state) = (unsafe { device_state(device) }) else {
                return vk::Result::ERROR_OUT_OF_HOST_MEMORY;
            };
            let Some(next) = state.next.invalidate_mapped_memory_ranges else {
                return vk::Result::ERROR_OUT_OF_HOST_MEMORY;
            };
            // SAFETY: forwarding the caller's arguments.
            let result = unsafe { next(device, count, memory_ranges) };
            if let (Some(fake), vk::Result::SUCCESS) = (&state.fake, result) {
                // SAFETY: the caller's ranges, of memory it has mapped.
                unsafe { fake.host_cache.invalidate(ranges(memory_ranges, count)) };
            }
            result
        },
    )
}
