//! The allocator's answers about memory types: the property flags of one
//! (VMA's `vmaGetMemoryTypeProperties`), and the type a request of some
//! usage would be placed in first (VMA's `vmaFindMemoryTypeIndex`), the
//! type to make a custom pool of. Apart from the pools because they
//! answer from the device's memory properties and the ranking of its
//! types alone, with no pool locked.

use ash::vk;

use super::Allocator;
use crate::device::MemoryDeviceExt;
use crate::memory::Usage;
use crate::Error;

impl<D: MemoryDeviceExt<M>, M: Send> Allocator<D, M> {
    /// The property flags of memory type `memory_type` (VMA's
    /// `vmaGetMemoryTypeProperties`), or `None` past the device's types.
    /// With [`Allocation::memory_type`](crate::Allocation::memory_type) it
    /// answers VMA's `vmaGetAllocationMemoryProperties`: whether an
    /// `UPLOAD | ALLOW_TRANSFER_INSTEAD` allocation landed in device-local
    /// memory the host writes directly, whether its writes need a
    /// [`flush`](Self::flush). AMD's device-coherent types
    /// ([`MemoryProperties::amd_device_coherent_types`](crate::device::MemoryProperties::amd_device_coherent_types))
    /// report `DEVICE_COHERENT_AMD`, which Vulkan sets on every type that
    /// has `DEVICE_UNCACHED_AMD`: an engine finds its crash-breadcrumb types
    /// by it. `DEVICE_UNCACHED_AMD` itself is not reported (the device
    /// layer's flags do not carry it), where VMA reports it.
    ///
    /// ```
    /// use ash::vk;
    /// use vk_suballoc::device::fake::{FakeDevice, FakeLayout};
    /// use vk_suballoc::{Allocator, Config, Request, ResourceKind, Usage};
    ///
    /// let allocator = Allocator::new(FakeDevice::new(FakeLayout::rebar()), Config::default())?;
    /// let requirements = vk::MemoryRequirements { size: 4096, alignment: 256, memory_type_bits: !0 };
    /// let usage = Usage::UPLOAD | Usage::ALLOW_TRANSFER_INSTEAD;
    /// let vertices = allocator.allocate(&Request::new(requirements, usage, ResourceKind::Buffer))?;
    /// let flags = allocator.memory_type_properties(vertices.memory_type()).unwrap();
    /// // Resizable BAR: the GPU reads it in place, no staging copy needed.
    /// assert!(flags.contains(vk::MemoryPropertyFlags::DEVICE_LOCAL | vk::MemoryPropertyFlags::HOST_VISIBLE));
    /// // SAFETY: the fake device runs no GPU work.
    /// unsafe { allocator.free(vertices)? };
    /// # Ok::<(), vk_suballoc::Error>(())
    /// ```
    pub fn memory_type_properties(&self, memory_type: u32) -> Option<vk::MemoryPropertyFlags> {
        let ty = self.context.memory_types().get(memory_type as usize)?;
        // gpu-alloc-types' flags have Vulkan's bit values.
        let flags = vk::MemoryPropertyFlags::from_raw(u32::from(ty.props.bits()));
        let amd_types = self.context.properties.amd_device_coherent_types;
        let amd = 1u32
            .checked_shl(memory_type)
            .is_some_and(|bit| amd_types & bit != 0);
        Some(if amd {
            flags | vk::MemoryPropertyFlags::DEVICE_COHERENT_AMD
        } else {
            flags
        })
    }

    /// The memory type a request with `memory_type_bits` and `usage` would
    /// be placed in first (VMA's `vmaFindMemoryTypeIndex`): the type to
    /// make a custom pool of. Requests fall back to the next type when that
    /// one fails; a pool does not.
    ///
    /// # Errors
    /// [`Error::NoMemoryTypeBits`] when `memory_type_bits` names no usable
    /// type; [`Error::DeviceAddressNotEnabled`] when `usage` has
    /// [`Usage::DEVICE_ADDRESS`] and the allocator was not told of buffer
    /// device address; [`Error::NoSuitableMemoryType`] when none of the
    /// types suits `usage`.
    pub fn memory_type_for(&self, memory_type_bits: u32, usage: Usage) -> Result<u32, Error> {
        let bits = memory_type_bits & self.context.usable_types();
        if bits == 0 {
            return Err(Error::NoMemoryTypeBits(memory_type_bits));
        }
        self.context.check_device_address(usage)?;
        self.context
            .ranked_types(usage)
            .iter()
            .map(|&t| u32::from(t))
            .find(|&t| bits & (1 << t) != 0)
            .ok_or(Error::NoSuitableMemoryType {
                memory_type_bits,
                usage,
            })
    }
}
