//! The buffers and images of a fake device: those a test creates (the
//! application's, in the allocator's eyes) and those the allocator has the
//! device create, their binds to memory, and the checks on each bind that
//! a validation layer would make (an unknown or bound resource, memory
//! dedicated to another one, the reported requirements, a buffer of the
//! device's own in protected memory). Apart from
//! `state.rs`, which keeps the memory objects, because these rules are
//! about what is bound to memory, not the memory itself.

use ash::vk;
use ash::vk::Handle;

use gpu_alloc_types::MemoryPropertyFlags;

use super::{Memory, State};
use crate::device::fake::FakeLayout;
use crate::device::{DedicatedTarget, DeviceError};

impl State {
    pub(crate) fn create_resource(&mut self) -> u64 {
        self.next_handle += 1;
        self.resources.insert(self.next_handle, (0, 0));
        self.next_handle
    }

    /// Binds a buffer; `device_address` says whether buffer device address
    /// is enabled. A bind that breaks a rule is recorded as a violation
    /// (and binds nothing); one that breaks none and is to fail with
    /// `fault` binds nothing and returns it.
    pub(crate) fn bind(
        &mut self,
        layout: &FakeLayout,
        resource: u64,
        (memory, offset): (u64, u64),
        device_address: bool,
        fault: Option<DeviceError>,
    ) -> Result<(), DeviceError> {
        let problem = match self.resources.get(&resource) {
            None => Some("VUID-vkBindBufferMemory-buffer-parameter: unknown buffer"),
            Some(&(bound, _)) if bound != 0 => {
                Some("VUID-vkBindBufferMemory-buffer-07459: already bound")
            }
            Some(_) => match self.memories.get(&memory) {
                None => Some("VUID-vkBindBufferMemory-memory-parameter: unknown memory"),
                Some(m) if offset >= m.size => {
                    Some("VUID-vkBindBufferMemory-memoryOffset-01031: offset past the memory")
                }
                Some(m) => {
                    let created = self.requirements.get(&resource);
                    let protected = layout.memory_types[m.memory_type as usize]
                        .props
                        .contains(MemoryPropertyFlags::PROTECTED);
                    bind_problem(m, created, resource, offset, device_address, protected)
                }
            },
        };
        match (problem, fault) {
            (Some(problem), _) => self.violations.push(format!(
                "{problem} (buffer {resource:#x}, memory {memory:#x}, offset {offset})"
            )),
            (None, Some(fault)) => return Err(fault),
            (None, None) => {
                self.resources.insert(resource, (memory, offset));
            }
        }
        Ok(())
    }

    /// The device address of `buffer`, as `vkGetBufferDeviceAddress`
    /// answers it: the address of the memory it is bound to, plus its
    /// offset there. A violation, answered with `None`, when buffer device
    /// address is not enabled, for a buffer this device does not have, or
    /// made without `SHADER_DEVICE_ADDRESS` usage, or not bound. (A buffer
    /// a test made with `FakeDevice::create_resource` has no usage to
    /// check.)
    pub(crate) fn buffer_device_address(
        &mut self,
        layout: &FakeLayout,
        buffer: u64,
    ) -> Option<vk::DeviceAddress> {
        let usage = self.requirements.get(&buffer).map(|&(usage, _)| usage);
        let problem = match self.resources.get(&buffer) {
            _ if !layout.buffer_device_address => {
                "VUID-vkGetBufferDeviceAddress-bufferDeviceAddress-03324: buffer device address is not enabled"
            }
            None => "VUID-VkBufferDeviceAddressInfo-buffer-parameter: unknown buffer",
            Some(_)
                if usage.is_some_and(|usage| {
                    !usage.contains(vk::BufferUsageFlags::SHADER_DEVICE_ADDRESS)
                }) =>
            {
                "VUID-VkBufferDeviceAddressInfo-buffer-02601: a buffer made without SHADER_DEVICE_ADDRESS usage"
            }
            Some(&(memory, offset)) => match self.memories.get(&memory) {
                Some(memory) => return Some(memory.address + offset),
                None => "VUID-VkBufferDeviceAddressInfo-buffer-02600: a buffer bound to no memory",
            },
        };
        self.violations
            .push(format!("{problem} (buffer {buffer:#x})"));
        None
    }

    pub(crate) fn destroy_resource(&mut self, resource: u64) {
        self.requirements.remove(&resource);
        if self.resources.remove(&resource).is_none() {
            self.violations.push(format!(
                "vkDestroyBuffer/vkDestroyImage: {resource:#x} is not a live resource"
            ));
        }
    }
}

/// The raw handle of the resource dedicated memory is for.
pub(super) fn target_handle(target: DedicatedTarget) -> u64 {
    match target {
        DedicatedTarget::Buffer(buffer) => buffer.as_raw(),
        DedicatedTarget::Image(image) => image.as_raw(),
    }
}

/// What is wrong with binding `resource`, whose usage and requirements are
/// `created` (when the device made it), to `memory` at `offset`;
/// `device_address` says whether buffer device address is enabled, and
/// `protected` whether the memory's type is protected.
fn bind_problem(
    memory: &Memory,
    created: Option<&(vk::BufferUsageFlags, vk::MemoryRequirements)>,
    resource: u64,
    offset: u64,
    device_address: bool,
    protected: bool,
) -> Option<&'static str> {
    if let Some(target) = memory.dedicated {
        if target_handle(target) != resource || offset != 0 {
            return Some("VUID-vkBindBufferMemory-memory-01508: dedicated memory of another resource, or not at offset 0");
        }
    }
    let (usage, requirements) = created?;
    // A mask names the first 32 types; a layout may list more, in none.
    let type_bit = 1u32.checked_shl(memory.memory_type).unwrap_or(0);
    // The device makes its buffers without VK_BUFFER_CREATE_PROTECTED_BIT,
    // and names protected types in their memoryTypeBits all the same (the
    // allocator does not count on a driver leaving them out).
    if protected {
        Some("VUID-vkBindBufferMemory-None-01899: an unprotected buffer in memory of a protected type")
    } else if device_address
        && usage.contains(vk::BufferUsageFlags::SHADER_DEVICE_ADDRESS)
        && !memory.device_address
    {
        Some("VUID-vkBindBufferMemory-bufferDeviceAddress-03339: a device-address buffer in memory allocated without VK_MEMORY_ALLOCATE_DEVICE_ADDRESS_BIT")
    } else if requirements.memory_type_bits & type_bit == 0 {
        Some("VUID-vkBindBufferMemory-memory-01035: memory type not in memoryTypeBits")
    } else if offset % requirements.alignment.max(1) != 0 {
        Some("VUID-vkBindBufferMemory-memoryOffset-01036: offset not a multiple of the alignment")
    } else if requirements.size > memory.size - offset {
        Some("VUID-vkBindBufferMemory-size-01037: the buffer does not fit in the memory")
    } else {
        None
    }
}
