//! The allocator's answers about memory types: the property flags of one
//! (VMA's `vmaGetMemoryTypeProperties`), and the type a request of some
//! usage would be placed in first (VMA's `vmaFindMemoryTypeIndex`), the
//! type to make a custom pool of. Apart from the pools because they
//! answer from the device's memory properties and the ranking of its
//! types alone, with no pool locked.

use ash::vk;

use super::place::{allowed_types, preferring, unsuitable_types};
use super::{AllocationDesc, Allocator};
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
    /// # #[cfg(feature = "fake-device")] {
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
    /// // Past the device's types (and past the 32 a mask names): none.
    /// assert_eq!(allocator.memory_type_properties(32), None);
    /// assert_eq!(allocator.memory_type_properties(u32::MAX), None);
    /// // SAFETY: the fake device runs no GPU work.
    /// unsafe { allocator.free(vertices)? };
    /// # }
    /// # Ok::<(), vk_suballoc::Error>(())
    /// ```
    pub fn memory_type_properties(&self, memory_type: u32) -> Option<vk::MemoryPropertyFlags> {
        self.context.vk_props(memory_type)
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
    /// types suits `usage` (the types of a heap of 0 bytes, which no
    /// request fits, suit none).
    pub fn memory_type_for(&self, memory_type_bits: u32, usage: Usage) -> Result<u32, Error> {
        self.memory_type_for_desc(memory_type_bits, &AllocationDesc::new(usage))
    }

    /// [`memory_type_for`](Self::memory_type_for) with the rest of a
    /// description: the memory types it rules out
    /// ([`AllocationDesc::excluded_memory_types`]), its required and
    /// preferred flags ([`AllocationDesc::required_flags`],
    /// [`AllocationDesc::preferred_flags`]) narrow and order the types as
    /// for an allocation (VMA's `vmaFindMemoryTypeIndex` with its
    /// `requiredFlags` and `preferredFlags`). The other fields are ignored:
    /// its dedicated policy and budget do not choose a type, and a request
    /// naming a custom pool takes the pool's type whatever this answers.
    ///
    /// ```
    /// # #[cfg(feature = "fake-device")] {
    /// use ash::vk;
    /// use vk_suballoc::device::fake::{FakeDevice, FakeLayout};
    /// use vk_suballoc::{AllocationDesc, Allocator, Config, Usage};
    ///
    /// // A discrete GPU: 2 is host-visible coherent, 3 also cached.
    /// let allocator = Allocator::new(FakeDevice::new(FakeLayout::discrete()), Config::default())?;
    /// assert_eq!(allocator.memory_type_for(!0, Usage::UPLOAD)?, 2);
    /// let cached = AllocationDesc::new(Usage::UPLOAD).preferred_flags(vk::MemoryPropertyFlags::HOST_CACHED);
    /// assert_eq!(allocator.memory_type_for_desc(!0, &cached)?, 3);
    /// # }
    /// # Ok::<(), vk_suballoc::Error>(())
    /// ```
    ///
    /// # Errors
    /// Those of [`memory_type_for`](Self::memory_type_for), and
    /// [`Error::MissingRequiredFlags`] (after [`Error::NoMemoryTypeBits`])
    /// when none of the types allowed has the required flags.
    pub fn memory_type_for_desc(
        &self,
        memory_type_bits: u32,
        desc: &AllocationDesc<'_>,
    ) -> Result<u32, Error> {
        let type_bits = memory_type_bits & !desc.excluded_memory_types;
        let bits = allowed_types(&self.context, type_bits, desc)?;
        let ranked = self.context.ranked_types(desc.usage);
        // Size 1, the least a request has: the types of a heap of 0 bytes
        // take no request (`RankTable::admits`), so they are not named.
        // Without preferred flags the order is the ranking's.
        let candidates = preferring(&self.context, ranked, bits, 1, desc.preferred_flags);
        let first = candidates.as_slice().first().copied();
        first.map(u32::from).ok_or(Error::NoSuitableMemoryType {
            memory_type_bits: unsuitable_types(type_bits, bits, desc),
            usage: desc.usage,
        })
    }
}
