//! `vkAllocateMemory` on the fake device: the checks of an allocate info
//! (memory type, size, protection, device address, dedicated target,
//! export handle types), the faults and limits that refuse it, and the new
//! memory object with its host bytes, device copy and device address.

use ash::vk;
use ash::vk::Handle;
use gpu_alloc_types::{AllocationFlags, MemoryPropertyFlags};

use super::super::coherence::DeviceCopy;
use super::super::host_bytes::HostBytes;
use super::resources::target_handle;
use super::{Fault, Memory, State, ADDRESS_SPACING, MAP_ALIGNMENT};
use crate::device::fake::FakeLayout;
use crate::device::{
    AllocateInfo, DedicatedTarget, DeviceError, DEDICATED_ONLY_HANDLE_TYPES, DEFINED_HANDLE_TYPES,
};

impl State {
    pub(in crate::device::fake) fn allocate(
        &mut self,
        layout: &FakeLayout,
        info: &AllocateInfo<'_>,
    ) -> Result<u64, DeviceError> {
        self.counters.allocate_calls += 1;
        let call = self.counters.allocate_calls;
        if self.device_lost {
            return Err(DeviceError::DeviceLost);
        }
        let Some(memory_type) = layout.memory_types.get(info.memory_type as usize).copied() else {
            return Err(self.violation(format!(
                "VUID-vkAllocateMemory-pAllocateInfo-01714: memory type {} does not exist",
                info.memory_type
            )));
        };
        if info.size == 0 {
            return Err(
                self.violation("VUID-VkMemoryAllocateInfo-allocationSize-07899: size 0".to_owned())
            );
        }
        // A mask names the first 32 types; a layout may list more.
        let type_bit = 1u32.checked_shl(info.memory_type).unwrap_or(0);
        if layout.amd_device_coherent_types & type_bit != 0 && !layout.amd_device_coherent_memory {
            return Err(self.violation(format!(
                "VUID-vkAllocateMemory-deviceCoherentMemory-02790: memory type {} is device-coherent (AMD) and the feature is not enabled",
                info.memory_type
            )));
        }
        if memory_type.props.contains(MemoryPropertyFlags::PROTECTED) && !layout.protected_memory {
            return Err(self.violation(format!(
                "VUID-VkMemoryAllocateInfo-memoryTypeIndex-01872: memory type {} is protected and the protectedMemory feature is not enabled",
                info.memory_type
            )));
        }
        if info.flags.contains(AllocationFlags::DEVICE_ADDRESS) && !layout.buffer_device_address {
            return Err(self.violation(
                "VUID-VkMemoryAllocateInfo-flags-03331: device address not enabled".to_owned(),
            ));
        }
        // `AllocateInfo` promises a valid priority (the allocator clamps it).
        if let Some(priority) = info.priority.filter(|p| !(0.0..=1.0).contains(p)) {
            return Err(self.violation(format!(
                "VUID-VkMemoryPriorityAllocateInfoEXT-priority-02602: priority {priority} is not in [0, 1]"
            )));
        }
        // A dedicated allocation names a live resource of this device.
        if let Some(target) = info.dedicated {
            let resource = target_handle(target);
            let vuid = match target {
                DedicatedTarget::Buffer(_) => "VUID-VkMemoryDedicatedAllocateInfo-buffer-parameter",
                DedicatedTarget::Image(_) => "VUID-VkMemoryDedicatedAllocateInfo-image-parameter",
            };
            if !self.resources.contains_key(&resource) {
                return Err(self.violation(format!(
                    "{vuid}: dedicated to {resource:#x}, which is not a live buffer or image"
                )));
            }
        }
        if let Some(DedicatedTarget::Buffer(buffer)) = info.dedicated {
            if let Some((_, requirements)) = self.requirements.get(&buffer.as_raw()) {
                if requirements.size != info.size {
                    return Err(self.violation(format!(
                        "VUID-VkMemoryDedicatedAllocateInfo-buffer-02965: {} bytes for a buffer that requires {}",
                        info.size, requirements.size
                    )));
                }
            }
        }
        let undefined = info.export_handle_types & !DEFINED_HANDLE_TYPES;
        if !undefined.is_empty() {
            return Err(self.violation(format!(
                "VUID-VkExportMemoryAllocateInfo-handleTypes-parameter: {undefined:?} are no handle types"
            )));
        }
        // Every driver reports DEDICATED_ONLY for these: such memory names
        // its resource.
        let dedicated_only = info.export_handle_types & DEDICATED_ONLY_HANDLE_TYPES;
        if !dedicated_only.is_empty() && info.dedicated.is_none() {
            return Err(self.violation(format!(
                "VUID-VkMemoryAllocateInfo-pNext-00639: memory exported as {dedicated_only:?} without VkMemoryDedicatedAllocateInfo naming an image or buffer"
            )));
        }
        // Vulkan sizes memory it exports as an Android hardware buffer for a
        // dedicated image itself.
        if info
            .export_handle_types
            .contains(vk::ExternalMemoryHandleTypeFlags::ANDROID_HARDWARE_BUFFER_ANDROID)
            && matches!(info.dedicated, Some(DedicatedTarget::Image(_)))
        {
            return Err(self.violation(format!(
                "VUID-VkMemoryAllocateInfo-pNext-01874: {} bytes for memory dedicated to an image and exported as an Android hardware buffer, whose allocationSize must be 0",
                info.size
            )));
        }
        if let Some(exportable) = layout.exportable_handle_types {
            if !exportable.contains(info.export_handle_types) {
                return Err(self.violation(format!(
                    "VUID-VkExportMemoryAllocateInfo-handleTypes-00656: {:?} are not exportable (only {exportable:?})",
                    info.export_handle_types
                )));
            }
        }
        if let Some(i) = self
            .faults
            .iter()
            .position(|f| matches!(f, Fault::Allocate { at, .. } if *at == call))
        {
            if let Fault::Allocate { error, .. } = self.faults.remove(i) {
                return Err(error);
            }
        }
        if self.memories.len() >= layout.max_memory_allocation_count as usize {
            self.violations.push(format!(
                "VUID-vkAllocateMemory-maxMemoryAllocationCount-04101: {} memory objects exist",
                self.memories.len()
            ));
            return Err(DeviceError::TooManyObjects);
        }
        let heap = memory_type.heap as usize;
        let heap_size = layout.memory_heaps[heap].size;
        if info.size > heap_size {
            self.violations.push(format!(
                "VUID-vkAllocateMemory-pAllocateInfo-01713: {} bytes exceed heap {heap} of {heap_size} bytes",
                info.size
            ));
            return Err(DeviceError::OutOfDeviceMemory);
        }
        let limit = self.heap_caps[heap].map_or(heap_size, |cap| cap.min(heap_size));
        let too_large = self.fail_from_size.is_some_and(|from| info.size >= from)
            || info.size > layout.max_memory_allocation_size;
        let past_limit = self.heap_usage[heap]
            .checked_add(info.size)
            .map_or(true, |total| total > limit);
        if too_large || past_limit {
            return Err(DeviceError::OutOfDeviceMemory);
        }
        // Host bytes (and a device copy, for non-coherent memory) the
        // host cannot allocate fail the call, as a driver out of host
        // memory does.
        let (host, device) = if memory_type
            .props
            .contains(MemoryPropertyFlags::HOST_VISIBLE)
        {
            let size = usize::try_from(info.size).map_err(|_| DeviceError::OutOfHostMemory)?;
            let host = HostBytes::new(size, MAP_ALIGNMENT).ok_or(DeviceError::OutOfHostMemory)?;
            let coherent = memory_type
                .props
                .contains(MemoryPropertyFlags::HOST_COHERENT);
            let device = if coherent {
                None
            } else {
                Some(DeviceCopy::new(size).ok_or(DeviceError::OutOfHostMemory)?)
            };
            (Some(host), device)
        } else {
            (None, None)
        };
        let handle = self.freed_handles.pop().unwrap_or_else(|| {
            self.next_handle += 1;
            self.next_handle
        });
        // Address ranges 64 KiB apart, as drivers leave between memory
        // objects (wrapping after 2^64 bytes: no test gets that far).
        let address = self.next_address;
        self.next_address = address
            .wrapping_add(info.size.next_multiple_of(ADDRESS_SPACING))
            .wrapping_add(ADDRESS_SPACING);
        self.memories.insert(
            handle,
            Memory {
                size: info.size,
                memory_type: info.memory_type,
                heap: heap as u32,
                host,
                device,
                mapped: None,
                dedicated: info.dedicated,
                name: info.name.map(str::to_owned),
                device_address: info.flags.contains(AllocationFlags::DEVICE_ADDRESS),
                address,
                priority: info.priority,
                export_handle_types: info.export_handle_types,
            },
        );
        self.heap_usage[heap] += info.size;
        self.counters.allocations += 1;
        Ok(handle)
    }
}
