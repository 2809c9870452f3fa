//! Host access to fake memory objects: `vkMapMemory`, `vkUnmapMemory`, and
//! the flushes and invalidates of mapped ranges, each checked as a
//! validation layer would (a host-visible type, one mapping at a time,
//! ranges inside the mapping and on `nonCoherentAtomSize` boundaries) and
//! recorded; on non-coherent types they move bytes between the host's and
//! the device's copies (`coherence.rs`). Apart from `state.rs`, which makes
//! and frees the memory objects, because these are the rules of their
//! mappings.

use std::ptr::NonNull;

use ash::vk;
use ash::vk::Handle;
use gpu_alloc_types::{DeviceMapError, MemoryPropertyFlags};

use super::{Fault, RecordedRange, State};
use crate::device::fake::FakeLayout;
use crate::device::DeviceError;

impl State {
    pub(crate) fn map(
        &mut self,
        layout: &FakeLayout,
        handle: u64,
        offset: u64,
        size: u64,
    ) -> Result<NonNull<u8>, DeviceMapError> {
        self.counters.maps += 1;
        let call = self.counters.maps;
        if let Some(i) = self
            .faults
            .iter()
            .position(|f| matches!(f, Fault::Map { at, .. } if *at == call))
        {
            if let Fault::Map { error, .. } = self.faults.remove(i) {
                return Err(match error {
                    DeviceError::OutOfDeviceMemory => DeviceMapError::OutOfDeviceMemory,
                    DeviceError::OutOfHostMemory => DeviceMapError::OutOfHostMemory,
                    _ => DeviceMapError::MapFailed,
                });
            }
        }
        let Some(memory) = self.memories.get_mut(&handle) else {
            self.violations
                .push(format!("vkMapMemory: memory {handle:#x} is not live"));
            return Err(DeviceMapError::MapFailed);
        };
        let props = layout.memory_types[memory.memory_type as usize].props;
        let problem = if !props.contains(MemoryPropertyFlags::HOST_VISIBLE) {
            Some("VUID-vkMapMemory-memory-00682: memory type is not host-visible")
        } else if memory.mapped.is_some() {
            Some("VUID-vkMapMemory-memory-00678: memory is already mapped")
        } else if offset >= memory.size {
            Some("VUID-vkMapMemory-offset-00679: offset past the memory object")
        } else if size == 0 {
            Some("VUID-vkMapMemory-size-00680: size 0")
        } else if size != vk::WHOLE_SIZE && offset.saturating_add(size) > memory.size {
            Some("VUID-vkMapMemory-size-00681: range exceeds the memory object")
        } else {
            None
        };
        if let Some(problem) = problem {
            self.violations.push(problem.to_owned());
            return Err(DeviceMapError::MapFailed);
        }
        let length = if size == vk::WHOLE_SIZE {
            memory.size - offset
        } else {
            size
        };
        memory.mapped = Some((offset, length));
        let range = offset as usize..(offset + length) as usize;
        if let Some((host, device)) = memory.host_and_device(range.clone()) {
            device.map(host, range);
        }
        let host = memory.host.as_mut().ok_or(DeviceMapError::MapFailed)?;
        host.pointer(offset as usize)
            .ok_or(DeviceMapError::MapFailed)
    }

    pub(crate) fn unmap(&mut self, handle: u64) {
        self.counters.unmaps += 1;
        match self.memories.get_mut(&handle) {
            Some(memory) if memory.mapped.is_some() => {
                memory.mapped = None;
                if let Some(device) = memory.device.as_mut() {
                    device.unmap();
                }
            }
            _ => self.violations.push(format!(
                "VUID-vkUnmapMemory-memory-00689: memory {handle:#x} is not mapped"
            )),
        }
    }

    /// Checks and records a flush (`flush == true`) or invalidation.
    pub(crate) fn record_range(
        &mut self,
        layout: &FakeLayout,
        handle: u64,
        offset: u64,
        size: u64,
        flush: bool,
    ) {
        let range = RecordedRange {
            memory: vk::DeviceMemory::from_raw(handle),
            offset,
            size,
        };
        if flush {
            self.counters.flushes += 1;
            self.flushed.push(range);
        } else {
            self.counters.invalidates += 1;
            self.invalidated.push(range);
        }
        let Some(memory) = self.memories.get_mut(&handle) else {
            self.violations.push(format!(
                "VkMappedMemoryRange: memory {handle:#x} is not live"
            ));
            return;
        };
        // Vulkan's atom is a power of two; one of 0, which the allocator
        // reads as 1 (`Allocator::new`), is read so here too, rather than
        // divided by.
        let atom = layout.non_coherent_atom_size.max(1);
        let checked = match memory.mapped {
            None => Err("VUID-VkMappedMemoryRange-memory-00684: memory is not mapped"),
            Some((map_offset, map_size)) => {
                let map_end = map_offset + map_size;
                let whole = size == vk::WHOLE_SIZE;
                let end = if whole {
                    map_end
                } else {
                    offset.saturating_add(size)
                };
                if whole && !(map_offset..map_end).contains(&offset) {
                    Err("VUID-VkMappedMemoryRange-size-00686: offset outside the mapping")
                } else if offset < map_offset || end > map_end {
                    Err("VUID-VkMappedMemoryRange-size-00685: range outside the mapping")
                } else if whole && map_end % atom != 0 && map_end != memory.size {
                    Err("VUID-VkMappedMemoryRange-size-01389: the mapping ends inside an atom, before the end of the memory")
                } else if offset % atom != 0 {
                    Err("VUID-VkMappedMemoryRange-offset-00687: offset not a multiple of nonCoherentAtomSize")
                } else if size != vk::WHOLE_SIZE && size % atom != 0 && end != memory.size {
                    Err("VUID-VkMappedMemoryRange-size-01390: size not a multiple of nonCoherentAtomSize")
                } else {
                    Ok(offset as usize..end as usize)
                }
            }
        };
        match checked {
            // Non-coherent memory: the bytes move between host and device
            // (coherence.rs); an invalid range moves nothing.
            // A flush only reads the host's bytes: the owner may hold a
            // shared slice of them across it (`host_to_read_and_device`).
            Ok(bytes) if flush => {
                if let Some((host, device)) = memory.host_to_read_and_device(bytes.clone()) {
                    device.flush(host, bytes);
                }
            }
            Ok(bytes) => {
                if let Some((host, device)) = memory.host_and_device(bytes.clone()) {
                    device.invalidate(host, bytes);
                }
            }
            Err(problem) => self.violations.push(format!(
                "{problem} (offset {offset}, size {size}, memory size {})",
                memory.size
            )),
        }
    }
}
