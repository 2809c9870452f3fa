//! The ash backend as `gpu-alloc-types`' [`MemoryDevice`]: allocation,
//! free, map and unmap of memory objects, and flush and invalidate with each
//! batch of mapped ranges passed to the driver in one call.

use std::ptr::NonNull;

use ash::vk;
use gpu_alloc_types::{
    AllocationFlags, DeviceMapError, MappedMemoryRange, MemoryDevice, OutOfMemory,
};

use super::{AllocateInfo, AshMemoryDevice, MemoryDeviceExt};

impl MemoryDevice<vk::DeviceMemory> for AshMemoryDevice {
    unsafe fn allocate_memory(
        &self,
        size: u64,
        memory_type: u32,
        flags: AllocationFlags,
    ) -> Result<vk::DeviceMemory, OutOfMemory> {
        let info = AllocateInfo::plain(size, memory_type, flags);
        // SAFETY: the caller upholds `MemoryDevice::allocate_memory`'s contract,
        // which is `MemoryDeviceExt::allocate`'s without a dedicated target.
        unsafe { MemoryDeviceExt::allocate(self, &info) }.map_err(crate::device::out_of_memory)
    }

    unsafe fn deallocate_memory(&self, memory: vk::DeviceMemory) {
        // SAFETY: the caller guarantees `memory` came from this device and is no
        // longer in use (VUID-vkFreeMemory-memory-00677).
        unsafe { self.device.free_memory(memory, self.allocation_callbacks()) }
    }

    unsafe fn map_memory(
        &self,
        memory: &mut vk::DeviceMemory,
        offset: u64,
        size: u64,
    ) -> Result<NonNull<u8>, DeviceMapError> {
        // SAFETY: the caller guarantees a host-visible, unmapped memory object
        // of this device and an in-bounds range (VUID-vkMapMemory-memory-00678,
        // -00682, -offset-00679, -size-00681).
        let pointer = unsafe {
            self.device
                .map_memory(*memory, offset, size, vk::MemoryMapFlags::empty())
        };
        match pointer {
            Ok(pointer) => NonNull::new(pointer.cast()).ok_or(DeviceMapError::MapFailed),
            Err(vk::Result::ERROR_OUT_OF_DEVICE_MEMORY) => Err(DeviceMapError::OutOfDeviceMemory),
            Err(vk::Result::ERROR_OUT_OF_HOST_MEMORY) => Err(DeviceMapError::OutOfHostMemory),
            Err(_) => Err(DeviceMapError::MapFailed),
        }
    }

    unsafe fn unmap_memory(&self, memory: &mut vk::DeviceMemory) {
        // SAFETY: the caller guarantees the memory is mapped
        // (VUID-vkUnmapMemory-memory-00689).
        unsafe { self.device.unmap_memory(*memory) }
    }

    unsafe fn invalidate_memory_ranges(
        &self,
        ranges: &[MappedMemoryRange<'_, vk::DeviceMemory>],
    ) -> Result<(), OutOfMemory> {
        with_vk_ranges(ranges, |vk_ranges| {
            // SAFETY: the caller guarantees mapped, atom-aligned ranges
            // (VUID-VkMappedMemoryRange-memory-00684, -offset-00687,
            // -size-01390); `with_vk_ranges` passes at least one
            // (VUID-vkInvalidateMappedMemoryRanges-memoryRangeCount-arraylength).
            unsafe { self.device.invalidate_mapped_memory_ranges(vk_ranges) }
        })
    }

    unsafe fn flush_memory_ranges(
        &self,
        ranges: &[MappedMemoryRange<'_, vk::DeviceMemory>],
    ) -> Result<(), OutOfMemory> {
        with_vk_ranges(ranges, |vk_ranges| {
            // SAFETY: as for invalidation.
            unsafe { self.device.flush_mapped_memory_ranges(vk_ranges) }
        })
    }
}

/// Calls `call` once with all of `ranges` as `VkMappedMemoryRange`s (none
/// for an empty slice, which Vulkan does not allow): each pool's share of
/// a batch of
/// [`Allocator::flush_allocations`](crate::Allocator::flush_allocations)
/// is one driver call, as its documentation says. One range, the common
/// case, goes without a heap allocation.
fn with_vk_ranges(
    ranges: &[MappedMemoryRange<'_, vk::DeviceMemory>],
    call: impl FnOnce(&[vk::MappedMemoryRange<'_>]) -> ash::prelude::VkResult<()>,
) -> Result<(), OutOfMemory> {
    let result = match ranges {
        [] => return Ok(()),
        [one] => call(&[vk_mapped_range(one)]),
        many => call(&many.iter().map(vk_mapped_range).collect::<Vec<_>>()),
    };
    result.map_err(out_of_memory)
}

fn vk_mapped_range<'a>(
    range: &MappedMemoryRange<'_, vk::DeviceMemory>,
) -> vk::MappedMemoryRange<'a> {
    vk::MappedMemoryRange::default()
        .memory(*range.memory)
        .offset(range.offset)
        .size(range.size)
}

fn out_of_memory(result: vk::Result) -> OutOfMemory {
    if result == vk::Result::ERROR_OUT_OF_HOST_MEMORY {
        OutOfMemory::OutOfHostMemory
    } else {
        OutOfMemory::OutOfDeviceMemory
    }
}
