//! Aliasing: more resources bound to the memory of one allocation (VMA's
//! `vmaCreateAliasingBuffer2` and `vmaCreateAliasingImage2`), as a frame
//! graph binds transient render targets and buffers whose lifetimes do not
//! overlap to the same memory.
//!
//! The allocator checks what it can know: the resource's requirements
//! against the allocation (memory type, alignment of the bound offset,
//! size), the driver's demand for dedicated memory, and
//! `bufferImageGranularity` against the allocation's neighbours in its
//! block. Whether two aliases are in use at once, and the barriers and
//! layout transitions between them, are the engine's to get right, as in
//! Vulkan itself.

use ash::vk;

use super::ash_helpers::{
    buffer_usage, check_image_flags, check_image_handle_types, check_image_swapchain,
    keep_protection,
};
use super::place::check_requirements;
use super::pool::type_bit;
use super::{Allocation, AllocationDesc, Allocator, Request};
use crate::device::{AshMemoryDevice, DeviceError, MemoryDeviceExt};
use crate::memory::ResourceKind;
use crate::Error;

impl<D: MemoryDeviceExt<M>, M: Send> Allocator<D, M> {
    /// Checks that a resource with `requirements`, of `kind`, may be bound
    /// `offset` bytes into `allocation`, aliasing whatever else is bound
    /// there: the checks of [`create_aliasing_buffer`](Allocator::create_aliasing_buffer),
    /// for a resource the caller creates and binds itself. It does not see
    /// the resource's create info: a buffer with `SHADER_DEVICE_ADDRESS`
    /// usage also needs an allocator told of buffer device address
    /// ([`DeviceFeatures::buffer_device_address`](crate::device::DeviceFeatures::buffer_device_address)),
    /// whose memory is allocated for device addresses
    /// (VUID-vkBindBufferMemory-bufferDeviceAddress-03339), as
    /// `create_aliasing_buffer` checks. Nor does it see the resource's
    /// protection: a protected resource (`VK_BUFFER_CREATE_PROTECTED_BIT`,
    /// `VK_IMAGE_CREATE_PROTECTED_BIT`) binds only to memory of a protected
    /// type, any other only to an unprotected one
    /// (VUID-vkBindBufferMemory-None-01898, -01899,
    /// VUID-vkBindImageMemory-None-01901, -01902), as the
    /// `create_aliasing_*` helpers check: take the other protection's types
    /// out of the `memoryTypeBits` you pass
    /// ([`memory_type_properties`](Self::memory_type_properties)). And no
    /// allocation takes a resource made for capture and replay
    /// (`DEVICE_ADDRESS_CAPTURE_REPLAY`, `DESCRIPTOR_BUFFER_CAPTURE_REPLAY_EXT`
    /// create flags), whose memory needs
    /// `VK_MEMORY_ALLOCATE_DEVICE_ADDRESS_CAPTURE_REPLAY_BIT`, as the
    /// helpers refuse.
    ///
    /// # Errors
    /// [`Error::ForeignAllocation`]; [`Error::ZeroSize`] and
    /// [`Error::AlignmentNotPowerOfTwo`] for bad `requirements` (which a
    /// driver never reports); [`Error::RangeOutOfBounds`] when `offset`
    /// plus the resource's size passes the allocation's end;
    /// [`Error::CannotAlias`] when its `memoryTypeBits` exclude the
    /// allocation's memory type or the bound offset is not a multiple of
    /// its alignment; [`Error::StaleAllocation`] when the allocation is not
    /// live; [`Error::CannotAlias`] when the allocation is
    /// dedicated memory made for its resource (`VkMemoryDedicatedAllocateInfo`:
    /// the helpers attach it to all dedicated memory they make, unless
    /// [`AllocationDesc::can_alias`] is set and the driver does not require
    /// it), or a linear resource and
    /// an optimal-tiling image (or a resource of unknown kind and any
    /// other) could then share a `bufferImageGranularity` page (see
    /// [`create_aliasing_image`](Allocator::create_aliasing_image)).
    pub fn check_alias(
        &self,
        allocation: &Allocation,
        offset: u64,
        requirements: &vk::MemoryRequirements,
        kind: ResourceKind,
    ) -> Result<(), Error> {
        self.check_owner(allocation)?;
        check_requirements(requirements)?;
        let end = offset.saturating_add(requirements.size);
        if end > allocation.size {
            return Err(Error::RangeOutOfBounds {
                start: offset,
                end,
                size: allocation.size,
            });
        }
        if requirements.memory_type_bits & type_bit(allocation.memory_type()) == 0 {
            return Err(Error::CannotAlias(
                "the resource's memoryTypeBits exclude the allocation's memory type",
            ));
        }
        let alignment = requirements.alignment.max(1);
        if (allocation.offset + offset) % alignment != 0 {
            return Err(Error::CannotAlias(
                "the bound offset is not a multiple of the resource's alignment",
            ));
        }
        let held = self.with_pool(allocation, |pool| pool.kind_at(allocation.location))?;
        let (held, targeted) = held.ok_or(Error::StaleAllocation)?;
        if targeted {
            return Err(Error::CannotAlias(
                "the allocation is dedicated memory made for one resource \
                 (VkMemoryDedicatedAllocateInfo): no other may be bound to it",
            ));
        }
        if !self.alias_keeps_granularity(allocation, held, kind) {
            return Err(Error::CannotAlias(
                "a linear resource and an optimal-tiling image would share a \
                 bufferImageGranularity page with the allocation's neighbours: \
                 allocate for the optimal image, or dedicated memory",
            ));
        }
        Ok(())
    }

    /// Whether a `kind` resource inside `allocation`, made for a `held`
    /// resource, keeps `bufferImageGranularity` with the allocation's
    /// neighbours. It does when the two kinds may share a page (the
    /// neighbours were placed for `held`), when the allocation has no
    /// neighbours (dedicated), when the granularity is 1, and for any
    /// resource in an allocation padded to whole pages, which no neighbour
    /// shares: an optimal image's where pools pad them, and always one of
    /// unknown kind.
    fn alias_keeps_granularity(
        &self,
        allocation: &Allocation,
        held: ResourceKind,
        kind: ResourceKind,
    ) -> bool {
        let granularity = self.context.properties.buffer_image_granularity;
        if held.may_share_page_with(kind) || allocation.is_dedicated() || granularity <= 1 {
            return true;
        }
        match held {
            // Optimal images take whole pages where they share blocks with
            // linear resources (place/pool_request.rs): always in custom
            // pools when the granularity is a power of two, in default
            // pools up to Config::max_padded_granularity. Elsewhere they
            // have blocks of their own, whose other images share their
            // pages.
            ResourceKind::OptimalImage if allocation.is_in_custom_pool() => {
                self.context.granularity_page().is_some()
            }
            ResourceKind::OptimalImage => self.context.padded_granularity().is_some(),
            // Whole pages wherever the granularity is a power of two; else
            // dedicated, handled above.
            ResourceKind::Unknown => true,
            ResourceKind::Buffer | ResourceKind::LinearImage => false,
        }
    }

    /// [`check_alias`](Allocator::check_alias) for a resource's request
    /// (which also says whether the driver requires dedicated memory) and
    /// its protection (`VK_BUFFER_CREATE_PROTECTED_BIT`,
    /// `VK_IMAGE_CREATE_PROTECTED_BIT`): the checks of the
    /// `create_aliasing_*` helpers, here for the fake device's tests too.
    fn check_resource_alias(
        &self,
        allocation: &Allocation,
        offset: u64,
        request: Request<'_>,
        protected: bool,
    ) -> Result<(), Error> {
        let request = keep_protection(request, self.context.protected_types(), protected);
        if request.driver_dedicated.required {
            return Err(Error::CannotAlias(
                "the driver requires dedicated memory for the resource",
            ));
        }
        // A buffer request has DEVICE_ADDRESS from SHADER_DEVICE_ADDRESS
        // usage (`buffer_request`). The allocator sets
        // VK_MEMORY_ALLOCATE_DEVICE_ADDRESS_BIT on every memory object
        // resources may share only when told of buffer device address:
        // without it, binding such a buffer breaks
        // VUID-vkBindBufferMemory-bufferDeviceAddress-03339 on a device
        // that has the feature enabled.
        self.context.check_device_address(request.desc.usage)?;
        // `keep_protection` ruled out the memory types of the other
        // protection: the driver's memoryTypeBits may still name them.
        let bit = type_bit(allocation.memory_type());
        if request.requirements.memory_type_bits & bit != 0 && request.type_bits() & bit == 0 {
            return Err(Error::CannotAlias(
                "a protected resource and unprotected memory, or an unprotected resource \
                 and protected memory (VUID-vkBindBufferMemory-None-01898, -01899, \
                 VUID-vkBindImageMemory-None-01901, -01902)",
            ));
        }
        self.check_alias(allocation, offset, &request.requirements, request.kind)
    }
}

impl Allocator<AshMemoryDevice> {
    /// Creates a buffer bound `offset` bytes into `allocation`, aliasing
    /// whatever else is bound to that memory (VMA's
    /// `vmaCreateAliasingBuffer2`). Allocate for the largest resource that
    /// will alias there (or an optimal-tiling image, if any will), then
    /// bind the others to it with this and
    /// [`create_aliasing_image`](Self::create_aliasing_image).
    ///
    /// The buffer does not own the memory: destroy it with
    /// `vkDestroyBuffer` once no frame uses it, or queue it with
    /// [`destroy_alias_buffer_after_frame`](Self::destroy_alias_buffer_after_frame),
    /// and free the allocation once no alias is in use. Aliases in use at the same time, barriers and
    /// layout transitions between them are the engine's to get right.
    ///
    /// # Errors
    /// As [`check_alias`](Self::check_alias), and [`Error::CannotAlias`]
    /// when the driver requires dedicated memory for the buffer, when the
    /// buffer is protected (`VK_BUFFER_CREATE_PROTECTED_BIT`) and the
    /// allocation's memory type is not, or the reverse
    /// (VUID-vkBindBufferMemory-None-01898, -01899);
    /// [`Error::DeviceAddressNotEnabled`] when its usage (`info.usage`, or
    /// a chained `VkBufferUsageFlags2CreateInfoKHR`'s) has
    /// `SHADER_DEVICE_ADDRESS` and the allocator was not told of buffer
    /// device address
    /// ([`DeviceFeatures::buffer_device_address`](crate::device::DeviceFeatures::buffer_device_address)):
    /// its memory then lacks `VK_MEMORY_ALLOCATE_DEVICE_ADDRESS_BIT`
    /// (VUID-vkBindBufferMemory-bufferDeviceAddress-03339), as
    /// [`create_buffer`](Self::create_buffer) refuses such a buffer;
    /// `vkCreateBuffer` and `vkBindBufferMemory` failures as
    /// [`Error::Device`] (or the matching variant). The buffer is destroyed
    /// on error. [`Error::UnsupportedResource`] for a sparse buffer, and
    /// for one made for capture and replay (`DEVICE_ADDRESS_CAPTURE_REPLAY`,
    /// `DESCRIPTOR_BUFFER_CAPTURE_REPLAY_EXT`), which binds only to memory
    /// allocated with `VK_MEMORY_ALLOCATE_DEVICE_ADDRESS_CAPTURE_REPLAY_BIT`
    /// (VUID-vkBindBufferMemory-bufferDeviceAddressCaptureReplay-09200,
    /// -buffer-09201): the allocator makes none (nothing is created then);
    /// [`Error::SizeExceedsMaxBuffer`] as `create_buffer` gives it.
    ///
    /// # Safety
    /// `info` is a valid `VkBufferCreateInfo` for this device; the
    /// allocation is not freed while the buffer is in use.
    pub unsafe fn create_aliasing_buffer(
        &self,
        allocation: &Allocation,
        offset: u64,
        info: &vk::BufferCreateInfo<'_>,
    ) -> Result<vk::Buffer, Error> {
        self.check_buffer(info)?;
        self.check_owner(allocation)?;
        let device = self.device().device();
        // SAFETY: the caller guarantees a valid create info.
        let buffer = unsafe { self.device().create_buffer_from(info) }?;
        // SAFETY: just created from this device with that usage; the
        // caller guarantees a valid create info, so a valid chain.
        let request =
            unsafe { self.buffer_request(buffer, buffer_usage(info), &AllocationDesc::default()) };
        let protected = info.flags.contains(vk::BufferCreateFlags::PROTECTED);
        let bound = self
            .check_resource_alias(allocation, offset, request, protected)
            .and_then(|()| {
                // SAFETY: the checks above: a memory type and an offset the
                // buffer allows, its whole size inside the allocation's range
                // of live memory (VUID-vkBindBufferMemory-memory-01035,
                // -memoryOffset-01036, -size-01037), no dedicated requirement
                // (-buffer-01444).
                unsafe {
                    device.bind_buffer_memory(
                        buffer,
                        allocation.memory(),
                        allocation.offset() + offset,
                    )
                }
                .map_err(|result| DeviceError::from(result).into())
            });
        if let Err(error) = bound {
            // SAFETY: created above and never used.
            unsafe { self.device().destroy_buffer(buffer) };
            return Err(error);
        }
        Ok(buffer)
    }

    /// Creates an image bound `offset` bytes into `allocation`, as
    /// [`create_aliasing_buffer`](Self::create_aliasing_buffer) does a
    /// buffer (VMA's `vmaCreateAliasingImage2`).
    ///
    /// `bufferImageGranularity`: an optimal-tiling image may alias only an
    /// allocation made for an optimal-tiling image (or dedicated memory),
    /// and a linear resource one made for a linear resource, unless the
    /// allocation takes whole pages (an optimal image's where pools pad
    /// them, or one made for a resource of unknown kind); otherwise the alias
    /// could share a page with a neighbour of the other kind, and the
    /// request fails with [`Error::CannotAlias`]. On a device whose
    /// granularity is 1 any kind aliases any other. The image's kind
    /// follows `info.tiling` ([`ResourceKind::of_image`]): one with a DRM
    /// format modifier, linear or not by its modifier, is of unknown kind.
    ///
    /// # Errors
    /// As [`create_aliasing_buffer`](Self::create_aliasing_buffer), with
    /// `vkCreateImage` / `vkBindImageMemory` for the buffer's calls, the
    /// image's protection (VUID-vkBindImageMemory-None-01901, -01902), and
    /// never [`Error::SizeExceedsMaxBuffer`] nor
    /// [`Error::DeviceAddressNotEnabled`] (a buffer's size limit and usage);
    /// [`Error::UnsupportedResource`] for a sparse or disjoint image, and
    /// for one made for capture and replay
    /// (`DESCRIPTOR_BUFFER_CAPTURE_REPLAY_EXT`), which binds only to memory
    /// allocated with `VK_MEMORY_ALLOCATE_DEVICE_ADDRESS_CAPTURE_REPLAY_BIT`
    /// (VUID-vkBindImageMemory-image-09202): the allocator makes none
    /// (nothing is created then); and for one made for Android hardware
    /// buffers or QNX screen buffers, or to be bound to a swapchain's
    /// memory, as [`create_image`](Self::create_image) refuses it.
    ///
    /// # Safety
    /// `info` is a valid `VkImageCreateInfo` for this device; the
    /// allocation is not freed while the image is in use.
    pub unsafe fn create_aliasing_image(
        &self,
        allocation: &Allocation,
        offset: u64,
        info: &vk::ImageCreateInfo<'_>,
    ) -> Result<vk::Image, Error> {
        check_image_flags(info.flags)?;
        // SAFETY: a valid create info has a valid chain (the contract).
        unsafe { check_image_handle_types(info) }?;
        // SAFETY: as above.
        unsafe { check_image_swapchain(info) }?;
        self.check_owner(allocation)?;
        let device = self.device().device();
        // SAFETY: the caller guarantees a valid create info.
        let image = unsafe { self.device().create_image_from(info) }?;
        // SAFETY: just created from this device with `info.tiling`, not
        // disjoint.
        let request = unsafe { self.image_request(image, info.tiling, &AllocationDesc::default()) };
        let protected = info.flags.contains(vk::ImageCreateFlags::PROTECTED);
        let bound = self
            .check_resource_alias(allocation, offset, request, protected)
            .and_then(|()| {
                // SAFETY: as for buffers (VUID-vkBindImageMemory-memory-01047,
                // -memoryOffset-01048, -size-01049, -image-01445).
                unsafe {
                    device.bind_image_memory(
                        image,
                        allocation.memory(),
                        allocation.offset() + offset,
                    )
                }
                .map_err(|result| DeviceError::from(result).into())
            });
        if let Err(error) = bound {
            // SAFETY: created above and never used.
            unsafe { self.device().destroy_image(image) };
            return Err(error);
        }
        Ok(image)
    }
}

#[cfg(all(test, feature = "fake-device"))]
mod tests {
    use ash::vk;

    use crate::device::fake::{FakeDevice, FakeLayout};
    use crate::device::{DedicatedHint, MemoryPropertyFlags, MemoryType};
    use crate::{Allocation, AllocationDesc, Allocator, Config, Error, PoolDesc, Request};
    use crate::{ResourceKind, Usage};

    /// The checks `create_aliasing_buffer` and `_image` make beyond
    /// `check_alias`, from the resource's request and protection: a
    /// protected resource binds only to protected memory and any other only
    /// to unprotected memory (VUID-vkBindBufferMemory-None-01898, -01899,
    /// VUID-vkBindImageMemory-None-01901, -01902), whether the driver's
    /// `memoryTypeBits` name both types or only the allocation's; no
    /// resource the driver requires dedicated memory for aliases. (Lavapipe
    /// has no protected memory type, so the Vulkan suite cannot reach the
    /// protection check.)
    #[test]
    fn aliases_keep_to_memory_of_their_protection() {
        const ORDINARY: u32 = 1;
        const PROTECTED: u32 = 5;
        let mut layout = FakeLayout::discrete().with_protected_memory(true);
        layout.memory_types.push(MemoryType {
            heap: 0,
            props: MemoryPropertyFlags::DEVICE_LOCAL | MemoryPropertyFlags::PROTECTED,
        });
        let device = FakeDevice::new(layout);
        let allocator = Allocator::new(device.clone(), Config::default()).unwrap();
        let request = |memory_type_bits, desc| {
            let requirements = vk::MemoryRequirements {
                size: 4096,
                alignment: 256,
                memory_type_bits,
            };
            Request::with_desc(requirements, ResourceKind::Buffer, desc)
        };
        let pool = allocator.create_pool(&PoolDesc::new(PROTECTED)).unwrap();
        let in_pool = AllocationDesc::new(Usage::DEVICE_LOCAL).pool(pool);
        let protected = allocator
            .allocate(&request(1 << PROTECTED, in_pool))
            .unwrap();
        let plain = AllocationDesc::new(Usage::DEVICE_LOCAL);
        let ordinary = allocator.allocate(&request(!0, plain)).unwrap();
        assert_eq!(
            (protected.memory_type(), ordinary.memory_type()),
            (PROTECTED, ORDINARY)
        );

        let check = |allocation: &Allocation, bits, resource_protected| {
            let request = request(bits, plain);
            allocator.check_resource_alias(allocation, 0, request, resource_protected)
        };
        let both = (1 << ORDINARY) | (1 << PROTECTED);
        for bits in [both, !0] {
            assert_eq!(check(&ordinary, bits, false), Ok(()), "{bits:#x}");
            assert_eq!(check(&protected, bits, true), Ok(()), "{bits:#x}");
        }
        for (bits, resource_protected, allocation) in [
            (both, false, &protected),
            (both, true, &ordinary),
            (1 << PROTECTED, false, &protected),
            (1 << ORDINARY, true, &ordinary),
        ] {
            // Refused for the protection, not for another rule (the
            // memoryTypeBits, with the other protection's types taken out).
            assert_eq!(
                check(allocation, bits, resource_protected),
                Err(Error::CannotAlias(
                    "a protected resource and unprotected memory, or an unprotected resource \
                     and protected memory (VUID-vkBindBufferMemory-None-01898, -01899, \
                     VUID-vkBindImageMemory-None-01901, -01902)",
                )),
                "{bits:#x}, protected resource {resource_protected}"
            );
        }

        let mut required = request(!0, plain);
        required.driver_dedicated = DedicatedHint {
            required: true,
            preferred: true,
        };
        assert_eq!(
            allocator.check_resource_alias(&ordinary, 0, required, false),
            Err(Error::CannotAlias(
                "the driver requires dedicated memory for the resource"
            ))
        );

        for allocation in [protected, ordinary] {
            // SAFETY: the fake device runs no GPU work.
            unsafe { allocator.free(allocation) }.unwrap();
        }
        allocator.destroy_pool(pool).unwrap();
        drop(allocator);
        device.assert_clean();
    }
}
