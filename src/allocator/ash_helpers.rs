//! Create, allocate and bind in one call: the everyday path over `ash`.
//!
//! What the helpers read from a create info and refuse before anything is
//! made is in `ash_helpers/create_info_checks.rs`.

use ash::vk;

use super::place::check_desc;
use super::{Allocation, AllocationDesc, Allocator, Request};
use crate::device::{
    AshMemoryDevice, DedicatedHint, DedicatedTarget, DeviceError, MemoryDeviceExt,
};
use crate::memory::{ResourceKind, Usage};
use crate::Error;
use create_info_checks::check_buffer_flags;
pub(super) use create_info_checks::{
    buffer_usage, check_image_flags, check_image_handle_types, check_image_swapchain,
};

impl Allocator<AshMemoryDevice> {
    /// Creates a buffer, allocates memory for it (dedicated when the driver
    /// asks, through `vkGetBufferMemoryRequirements2`) and binds it.
    ///
    /// A buffer created with `SHADER_DEVICE_ADDRESS` usage (in `info.usage`,
    /// or in a chained `VkBufferUsageFlags2CreateInfoKHR`, which replaces
    /// it) gets memory allocated with `VK_MEMORY_ALLOCATE_DEVICE_ADDRESS_BIT`; without
    /// [`DeviceFeatures::buffer_device_address`](crate::device::DeviceFeatures::buffer_device_address)
    /// it fails with [`Error::DeviceAddressNotEnabled`].
    ///
    /// A protected buffer (`VK_BUFFER_CREATE_PROTECTED_BIT`) takes only
    /// protected memory types and any other buffer only unprotected ones,
    /// whatever its `memoryTypeBits` say (VUID-vkBindBufferMemory-None-01898,
    /// -01899): protected memory comes from a custom pool of a protected
    /// type ([`DeviceFeatures::protected_memory`](crate::device::DeviceFeatures::protected_memory)).
    ///
    /// # Errors
    /// The allocator's errors ([`Error::PoolTypeNotAllowed`] for a custom
    /// pool whose memory type's protection is not the buffer's), and
    /// `vkCreateBuffer` / `vkBindBufferMemory`
    /// failures as [`Error::Device`] (or the matching variant). Nothing is
    /// leaked on error: the buffer is destroyed and the memory freed.
    /// [`Error::UnsupportedResource`] for a sparse buffer, which is bound
    /// with `vkQueueBindSparse`, not here, and for one made for capture and
    /// replay (`DEVICE_ADDRESS_CAPTURE_REPLAY`,
    /// `DESCRIPTOR_BUFFER_CAPTURE_REPLAY_EXT`), which binds only to memory
    /// allocated with `VK_MEMORY_ALLOCATE_DEVICE_ADDRESS_CAPTURE_REPLAY_BIT`,
    /// which the allocator never sets; [`Error::SizeExceedsMaxBuffer`] for
    /// a size past the device's `maxBufferSize`
    /// ([`MemoryProperties::max_buffer_size`](crate::device::MemoryProperties::max_buffer_size),
    /// VUID-VkBufferCreateInfo-size-06409); then [`Error::ForeignPool`] and
    /// [`Error::AlignmentNotPowerOfTwo`] for `desc.min_alignment`, which
    /// need no buffer (nothing is created after these).
    ///
    /// # Safety
    /// `info` is a valid `VkBufferCreateInfo` for this device (the
    /// VUID-VkBufferCreateInfo-* rules; size non-zero, usage supported;
    /// the size is checked against `maxBufferSize` where the device
    /// reports it).
    ///
    /// # Time complexity
    /// As [`allocate`](Self::allocate), plus a `vkCreateBuffer`,
    /// `vkGetBufferMemoryRequirements2` and `vkBindBufferMemory` call (and on
    /// failure a `vkDestroyBuffer` and a [`free`](Self::free)).
    pub unsafe fn create_buffer(
        &self,
        info: &vk::BufferCreateInfo<'_>,
        desc: &AllocationDesc<'_>,
    ) -> Result<(vk::Buffer, Allocation), Error> {
        self.check_buffer(info)?;
        // Before the buffer is made: a request refused for its description
        // alone creates nothing.
        check_desc(self.id, desc)?;
        let device = self.device().device();
        // SAFETY: the caller guarantees a valid create info.
        let buffer = unsafe { self.device().create_buffer_from(info) }?;
        // SAFETY: just created from this device with that usage; the
        // caller guarantees a valid create info, so a valid chain.
        let request = unsafe { self.buffer_request(buffer, buffer_usage(info), desc) };
        let protected = info.flags.contains(vk::BufferCreateFlags::PROTECTED);
        let request = keep_protection(request, self.context.protected_types(), protected);
        let allocation = self.allocate_and_bind(
            &request,
            |allocation| {
                // SAFETY: the memory type is allowed by the buffer's
                // memoryTypeBits, the offset honours its alignment and the
                // range fits the memory (VUID-vkBindBufferMemory-memory-01035,
                // -memoryOffset-01036, -size-01037); a dedicated allocation
                // was made for this buffer (-memory-01508).
                unsafe {
                    device.bind_buffer_memory(buffer, allocation.memory(), allocation.offset())
                }
                .map_err(|result| DeviceError::from(result).into())
            },
            // SAFETY: created above; nothing was submitted with it.
            || unsafe { self.device().destroy_buffer(buffer) },
        )?;
        Ok((buffer, allocation))
    }

    /// What the buffer helpers check of a create info before the buffer is
    /// made: its flags ([`check_buffer_flags`]) and its size against the
    /// device's `maxBufferSize` (VUID-VkBufferCreateInfo-size-06409;
    /// [`Error::SizeExceedsMaxBuffer`]), which `u64::MAX`, unknown, never
    /// refuses.
    pub(super) fn check_buffer(&self, info: &vk::BufferCreateInfo<'_>) -> Result<(), Error> {
        check_buffer_flags(info.flags)?;
        self.check_buffer_size(info.size)
    }

    /// [`Error::SizeExceedsMaxBuffer`] for a buffer `size` past the
    /// device's `maxBufferSize` (VUID-VkBufferCreateInfo-size-06409), which
    /// `u64::MAX`, unknown, never refuses: checked before every
    /// `vkCreateBuffer` of a caller's create info.
    fn check_buffer_size(&self, size: u64) -> Result<(), Error> {
        let max = self.context.properties.max_buffer_size;
        if size > max {
            return Err(Error::SizeExceedsMaxBuffer { size, max });
        }
        Ok(())
    }

    /// Creates an image, allocates memory for it (dedicated when the driver
    /// asks) and binds it. Its kind for `bufferImageGranularity` follows
    /// `info.tiling` ([`ResourceKind::of_image`]: `LINEAR` images are linear
    /// resources, `OPTIMAL` ones optimal, and a DRM format modifier's,
    /// which may be either, take whole pages).
    ///
    /// Protected images (`VK_IMAGE_CREATE_PROTECTED_BIT`) take only
    /// protected memory types, and any other image only unprotected ones,
    /// as [`create_buffer`](Self::create_buffer)'s buffers
    /// (VUID-vkBindImageMemory-None-01901, -01902).
    ///
    /// # Errors
    /// As [`create_buffer`](Self::create_buffer), with `vkCreateImage` /
    /// `vkBindImageMemory` for the buffer's calls, and never
    /// [`Error::SizeExceedsMaxBuffer`] (`maxBufferSize` is a buffer's
    /// limit); [`Error::UnsupportedResource`] for a sparse image, for a disjoint
    /// multi-planar one, whose planes take memory requirements and binds of
    /// their own, and for one made for capture and replay
    /// (`DESCRIPTOR_BUFFER_CAPTURE_REPLAY_EXT`), as `create_buffer` refuses
    /// such buffers, and for one made for Android hardware buffers or QNX
    /// screen buffers (`VkExternalMemoryImageCreateInfo` naming
    /// `ANDROID_HARDWARE_BUFFER_ANDROID` or `SCREEN_BUFFER_QNX`), whose
    /// requirements may not be asked for before it is bound and whose
    /// memory is imported, not suballocated, and for one made to be bound
    /// to a swapchain's memory (`VkImageSwapchainCreateInfoKHR` naming a
    /// swapchain), which the swapchain owns (nothing is created then, nor
    /// after the checks of `desc` that `create_buffer` makes first).
    ///
    /// # Safety
    /// `info` is a valid `VkImageCreateInfo` for this device.
    ///
    /// # Time complexity
    /// As [`create_buffer`](Self::create_buffer), with the image's calls.
    pub unsafe fn create_image(
        &self,
        info: &vk::ImageCreateInfo<'_>,
        desc: &AllocationDesc<'_>,
    ) -> Result<(vk::Image, Allocation), Error> {
        check_image_flags(info.flags)?;
        // SAFETY: a valid create info has a valid chain (the contract).
        unsafe { check_image_handle_types(info) }?;
        // SAFETY: as above.
        unsafe { check_image_swapchain(info) }?;
        // As for buffers: before the image is made.
        check_desc(self.id, desc)?;
        let device = self.device().device();
        // SAFETY: the caller guarantees a valid create info.
        let image = unsafe { self.device().create_image_from(info) }?;
        // SAFETY: just created from this device with `info.tiling`, not
        // disjoint (checked above).
        let request = unsafe { self.image_request(image, info.tiling, desc) };
        let protected = info.flags.contains(vk::ImageCreateFlags::PROTECTED);
        let request = keep_protection(request, self.context.protected_types(), protected);
        let allocation = self.allocate_and_bind(
            &request,
            |allocation| {
                // SAFETY: as for buffers (VUID-vkBindImageMemory-memory-01047,
                // -memoryOffset-01048, -size-01049, -memory-01509); granularity
                // is kept by whole pages or separate blocks for optimal images.
                unsafe { device.bind_image_memory(image, allocation.memory(), allocation.offset()) }
                    .map_err(|result| DeviceError::from(result).into())
            },
            // SAFETY: created above; nothing was submitted with it.
            || unsafe { self.device().destroy_image(image) },
        )?;
        Ok((image, allocation))
    }

    /// Allocates memory for a buffer the caller created, without binding it
    /// (VMA's `vmaAllocateMemoryForBuffer`): for engines that create their
    /// own buffers. As in [`create_buffer`](Self::create_buffer), the request
    /// takes the buffer's requirements from `vkGetBufferMemoryRequirements2`,
    /// dedicated memory (made for this buffer) when the driver asks for it,
    /// and [`Usage::DEVICE_ADDRESS`] when `usage` has
    /// `SHADER_DEVICE_ADDRESS`. It does not see the buffer's create flags:
    /// a protected buffer needs a custom pool of a protected memory type,
    /// and any other buffer memory of an unprotected one (the default
    /// pools' always is; VUID-vkBindBufferMemory-None-01898, -01899), which
    /// `create_buffer` checks and this cannot. Bind it yourself:
    ///
    /// ```no_run
    /// # use ash::vk;
    /// # use vk_suballoc::{AllocationDesc, Allocator, Usage, device::AshMemoryDevice};
    /// # fn f(allocator: &Allocator<AshMemoryDevice>, device: &ash::Device,
    /// #      info: &vk::BufferCreateInfo) -> Result<(), vk_suballoc::Error> {
    /// // SAFETY: a valid create info.
    /// let buffer = unsafe { device.create_buffer(info, None) }.expect("vkCreateBuffer");
    /// let desc = AllocationDesc::new(Usage::DEVICE_LOCAL).name("vertices");
    /// // SAFETY: a live, non-sparse buffer of this device, created with `info.usage`.
    /// let allocation = unsafe { allocator.allocate_for_buffer(buffer, info.usage, &desc)? };
    /// // SAFETY: the memory type and offset honour the buffer's requirements.
    /// unsafe { device.bind_buffer_memory(buffer, allocation.memory(), allocation.offset()) }
    ///     .expect("vkBindBufferMemory");
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// As [`allocate`](Self::allocate). Nothing is created or destroyed.
    ///
    /// # Safety
    /// `buffer` was created from this device with `usage` (the flags of a
    /// chained `VkBufferUsageFlags2CreateInfoKHR` when its create info has
    /// one, which replaces `info.usage`: pass `info.usage` then and a
    /// device-address buffer loses `SHADER_DEVICE_ADDRESS`, its memory the
    /// device-address flag; VUID-vkBindBufferMemory-bufferDeviceAddress-03339), is not sparse
    /// nor made for capture and replay (as [`create_buffer`](Self::create_buffer)
    /// refuses) and
    /// is not destroyed while the allocation may still be bound to it
    /// (dedicated memory can only ever be bound to its buffer).
    ///
    /// # Time complexity
    /// As [`allocate`](Self::allocate), plus a `vkGetBufferMemoryRequirements2`
    /// call.
    pub unsafe fn allocate_for_buffer(
        &self,
        buffer: vk::Buffer,
        usage: vk::BufferUsageFlags,
        desc: &AllocationDesc<'_>,
    ) -> Result<Allocation, Error> {
        // SAFETY: the caller's contract.
        let request = unsafe { self.buffer_request(buffer, usage, desc) };
        self.allocate(&request)
    }

    /// Allocates memory for an image the caller created, without binding it
    /// (VMA's `vmaAllocateMemoryForImage`), as
    /// [`allocate_for_buffer`](Self::allocate_for_buffer) does for buffers:
    /// requirements from `vkGetImageMemoryRequirements2`, dedicated memory
    /// when the driver asks. `tiling` is the image's, and gives its kind for
    /// `bufferImageGranularity` as in [`create_image`](Self::create_image)
    /// ([`ResourceKind::of_image`]). Nor does it see the image's create
    /// flags: protected images need a custom pool of a protected memory
    /// type, as `allocate_for_buffer` says of buffers. Bind with `vkBindImageMemory(image, memory(), offset())`.
    ///
    /// # Errors
    /// As [`allocate`](Self::allocate). Nothing is created or destroyed.
    ///
    /// # Safety
    /// `image` was created from this device with `tiling`, is neither sparse
    /// nor disjoint (`DISJOINT` planes have requirements of their own) nor
    /// made for capture and replay nor for Android hardware buffers or QNX
    /// screen buffers (as [`create_image`](Self::create_image) refuses),
    /// and is not destroyed while the allocation may still be bound to it.
    ///
    /// # Time complexity
    /// As [`allocate`](Self::allocate), plus a `vkGetImageMemoryRequirements2`
    /// call.
    pub unsafe fn allocate_for_image(
        &self,
        image: vk::Image,
        tiling: vk::ImageTiling,
        desc: &AllocationDesc<'_>,
    ) -> Result<Allocation, Error> {
        // SAFETY: the caller's contract.
        let request = unsafe { self.image_request(image, tiling, desc) };
        self.allocate(&request)
    }

    /// The request for `buffer`'s memory: its requirements, the driver's
    /// dedicated hint with the buffer as target, and device-address usage
    /// when `usage` asks for it.
    ///
    /// # Safety
    /// `buffer` is a live buffer of this device, created with `usage`.
    pub(super) unsafe fn buffer_request<'a>(
        &self,
        buffer: vk::Buffer,
        usage: vk::BufferUsageFlags,
        desc: &AllocationDesc<'a>,
    ) -> Request<'a> {
        // SAFETY: the caller's contract.
        let (requirements, dedicated) = unsafe { self.device().buffer_requirements(buffer) };
        let mut desc = *desc;
        if usage.contains(vk::BufferUsageFlags::SHADER_DEVICE_ADDRESS) {
            desc.usage |= Usage::DEVICE_ADDRESS;
        }
        let request = Request::with_desc(requirements, ResourceKind::Buffer, desc)
            .driver_dedicated(dedicated);
        target_unless_aliased(request, DedicatedTarget::Buffer(buffer))
    }

    /// The memory type a buffer made from `info` would take first with
    /// `desc` (a [`Usage`] alone, or a whole [`AllocationDesc`] with its
    /// required and preferred flags and the types it rules out):
    /// [`memory_type_for_desc`](Self::memory_type_for_desc) with the
    /// buffer's `memoryTypeBits` (VMA's
    /// `vmaFindMemoryTypeIndexForBufferInfo`), to make a custom pool for
    /// such buffers. Reads the requirements without making the buffer on a
    /// device with maintenance4
    /// ([`DeviceFeatures::maintenance4`](crate::device::DeviceFeatures::maintenance4)),
    /// else creates the buffer and destroys it at once; with
    /// `SHADER_DEVICE_ADDRESS` usage, asks for a device-address type.
    ///
    /// Never a protected type, as `memory_type_for`: it does not look at
    /// `info.flags`, so for a protected buffer (`VK_BUFFER_CREATE_PROTECTED_BIT`),
    /// which [`create_buffer`](Self::create_buffer) binds only to protected
    /// memory, the type it names (unprotected) is one the buffer cannot
    /// take: pick a protected type of its `memoryTypeBits` for the pool
    /// yourself ([`memory_type_properties`](Self::memory_type_properties)).
    ///
    /// # Errors
    /// [`Error::SizeExceedsMaxBuffer`] for a size past the device's
    /// `maxBufferSize`, before the buffer is made (as
    /// [`create_buffer`](Self::create_buffer) refuses it); as
    /// [`memory_type_for_desc`](Self::memory_type_for_desc), and `vkCreateBuffer`
    /// failures (where the buffer is made) as [`Error::Device`] (or the
    /// matching variant).
    ///
    /// # Safety
    /// As [`create_buffer`](Self::create_buffer).
    pub unsafe fn memory_type_for_buffer<'a>(
        &self,
        info: &vk::BufferCreateInfo<'_>,
        desc: impl Into<AllocationDesc<'a>>,
    ) -> Result<u32, Error> {
        let mut desc = desc.into();
        // The buffer below would break VUID-VkBufferCreateInfo-size-06409.
        self.check_buffer_size(info.size)?;
        // SAFETY: the caller guarantees a valid create info.
        let requirements = match unsafe { self.device().buffer_info_requirements(info) } {
            Some(requirements) => requirements,
            // SAFETY: as above.
            None => unsafe { self.made_buffer_requirements(info) }?,
        };
        // SAFETY: a valid create info has a valid chain.
        let buffer_usage = unsafe { buffer_usage(info) };
        if buffer_usage.contains(vk::BufferUsageFlags::SHADER_DEVICE_ADDRESS) {
            desc.usage |= Usage::DEVICE_ADDRESS;
        }
        self.memory_type_for_desc(requirements.memory_type_bits, &desc)
    }

    /// The memory type an image made from `info` would take first with
    /// `desc`, as [`memory_type_for_buffer`](Self::memory_type_for_buffer)
    /// for buffers (VMA's `vmaFindMemoryTypeIndexForImageInfo`), and, as
    /// it, never a protected type, whatever `info.flags` say. Makes no image
    /// on a device with maintenance4 but for create infos its query may not
    /// take (DRM format modifier tiling, or a swapchain's, an explicit DRM
    /// modifier's, or an Android or QNX Screen external format's structure
    /// in the chain), whose image is made and destroyed at once.
    ///
    /// # Errors
    /// [`Error::UnsupportedResource`] for a disjoint multi-planar image
    /// (`VK_IMAGE_CREATE_DISJOINT_BIT`), whose planes have requirements of
    /// their own, before the image is made (reading one set of
    /// requirements for it would break
    /// VUID-vkGetImageMemoryRequirements-image-01588), and for one made
    /// for Android hardware buffers or QNX screen buffers, as
    /// [`create_image`](Self::create_image) refuses it; as
    /// [`memory_type_for_desc`](Self::memory_type_for_desc), and `vkCreateImage`
    /// failures (where the image is made) as [`Error::Device`] (or the
    /// matching variant).
    ///
    /// # Safety
    /// `info` is a valid `VkImageCreateInfo` for this device.
    pub unsafe fn memory_type_for_image<'a>(
        &self,
        info: &vk::ImageCreateInfo<'_>,
        desc: impl Into<AllocationDesc<'a>>,
    ) -> Result<u32, Error> {
        let desc = desc.into();
        if info.flags.contains(vk::ImageCreateFlags::DISJOINT) {
            return Err(Error::UnsupportedResource("ImageCreateFlags::DISJOINT"));
        }
        // SAFETY: a valid create info has a valid chain (the contract).
        unsafe { check_image_handle_types(info) }?;
        // SAFETY: the caller guarantees a valid create info.
        let requirements = match unsafe { self.device().image_info_requirements(info) } {
            Some(requirements) => requirements,
            // SAFETY: as above; not disjoint (refused above).
            None => unsafe { self.made_image_requirements(info) }?,
        };
        self.memory_type_for_desc(requirements.memory_type_bits, &desc)
    }

    /// The memory requirements of a buffer made from `info`, by making one
    /// and destroying it at once (where the device has no maintenance4
    /// query).
    ///
    /// # Safety
    /// `info` is a valid `VkBufferCreateInfo` for this device.
    unsafe fn made_buffer_requirements(
        &self,
        info: &vk::BufferCreateInfo<'_>,
    ) -> Result<vk::MemoryRequirements, Error> {
        let device = self.device().device();
        // SAFETY: the caller guarantees a valid create info.
        let buffer = unsafe { self.device().create_buffer_from(info) }?;
        // SAFETY: just created from this device, and not used by anything.
        unsafe {
            let requirements = device.get_buffer_memory_requirements(buffer);
            self.device().destroy_buffer(buffer);
            Ok(requirements)
        }
    }

    /// The memory requirements of an image made from `info`, by making one
    /// and destroying it at once (where the device has no maintenance4
    /// query, or the query may not take `info`).
    ///
    /// # Safety
    /// `info` is a valid `VkImageCreateInfo` for this device, not disjoint.
    unsafe fn made_image_requirements(
        &self,
        info: &vk::ImageCreateInfo<'_>,
    ) -> Result<vk::MemoryRequirements, Error> {
        let device = self.device().device();
        // SAFETY: the caller guarantees a valid create info.
        let image = unsafe { self.device().create_image_from(info) }?;
        // SAFETY: just created from this device, not disjoint (the
        // contract), and not used by anything.
        unsafe {
            let requirements = device.get_image_memory_requirements(image);
            self.device().destroy_image(image);
            Ok(requirements)
        }
    }

    /// The request for `image`'s memory: its requirements, its kind from
    /// `tiling`, and the driver's dedicated hint with the image as target.
    ///
    /// # Safety
    /// `image` is a live image of this device, created with `tiling`, and
    /// not disjoint.
    pub(super) unsafe fn image_request<'a>(
        &self,
        image: vk::Image,
        tiling: vk::ImageTiling,
        desc: &AllocationDesc<'a>,
    ) -> Request<'a> {
        let mut dedicated = vk::MemoryDedicatedRequirements::default();
        let mut requirements = vk::MemoryRequirements2::default().push_next(&mut dedicated);
        let query = vk::ImageMemoryRequirementsInfo2::default().image(image);
        // SAFETY: a live image of this device (the caller's contract), not
        // disjoint, so no plane info is needed
        // (VUID-VkImageMemoryRequirementsInfo2-image-01589); the 1.1 query
        // is available (`AshMemoryDevice`'s contract: Vulkan 1.1+).
        unsafe {
            self.device()
                .device()
                .get_image_memory_requirements2(&query, &mut requirements)
        };
        let kind = ResourceKind::of_image(tiling);
        let memory_requirements = requirements.memory_requirements;
        let hint = DedicatedHint::from_requirements(&dedicated);
        let request = Request::with_desc(memory_requirements, kind, *desc).driver_dedicated(hint);
        target_unless_aliased(request, DedicatedTarget::Image(image))
    }

    /// Destroys a buffer and frees its memory.
    ///
    /// # Errors
    /// As [`free`](Self::free), with the buffer destroyed all the same:
    /// [`Error::ForeignAllocation`], the allocation left to its own
    /// allocator; [`Error::StaleAllocation`] for an allocation no longer
    /// live (only a forged handle gets it).
    ///
    /// # Safety
    /// `buffer` was created by this device, with the `VkAllocationCallbacks`
    /// it is destroyed with ([`AshMemoryDevice::with_allocation_callbacks`],
    /// none by default: VUID-vkDestroyBuffer-buffer-00923), and
    /// no pending GPU work uses it or the allocation
    /// (VUID-vkDestroyBuffer-buffer-00922).
    ///
    /// # Time complexity
    /// As [`free`](Self::free), plus a `vkDestroyBuffer` call.
    pub unsafe fn destroy_buffer(
        &self,
        buffer: vk::Buffer,
        allocation: Allocation,
    ) -> Result<(), Error> {
        // SAFETY: the caller's contract: a buffer of this device that no
        // pending GPU work uses (VUID-vkDestroyBuffer-buffer-00922), nor
        // the allocation (`free`'s, VUID-vkFreeMemory-memory-00677).
        unsafe {
            self.device().destroy_buffer(buffer);
            self.free(allocation)
        }
    }

    /// Destroys an image and frees its memory.
    ///
    /// # Errors
    /// As [`destroy_buffer`](Self::destroy_buffer).
    ///
    /// # Safety
    /// `image` was created by this device, with the `VkAllocationCallbacks`
    /// it is destroyed with ([`AshMemoryDevice::with_allocation_callbacks`],
    /// none by default: VUID-vkDestroyImage-image-01001), and no
    /// pending GPU work uses it or the allocation
    /// (VUID-vkDestroyImage-image-01000).
    ///
    /// # Time complexity
    /// As [`free`](Self::free), plus a `vkDestroyImage` call.
    pub unsafe fn destroy_image(
        &self,
        image: vk::Image,
        allocation: Allocation,
    ) -> Result<(), Error> {
        // SAFETY: the caller's contract: an image of this device that no
        // pending GPU work uses (VUID-vkDestroyImage-image-01000), nor the
        // allocation (`free`'s, VUID-vkFreeMemory-memory-00677).
        unsafe {
            self.device().destroy_image(image);
            self.free(allocation)
        }
    }
}

/// `request` with its resource as the target of dedicated memory
/// (`VkMemoryDedicatedAllocateInfo`), unless the caller will alias the
/// memory ([`AllocationDesc::can_alias`]) and the driver does not require
/// it: memory made for one resource takes no other (VMA's `CAN_ALIAS`).
fn target_unless_aliased(request: Request<'_>, target: DedicatedTarget) -> Request<'_> {
    if request.desc.can_alias && !request.driver_dedicated.required {
        request
    } else {
        // SAFETY: the helpers made `target` (neither sparse nor disjoint:
        // they refuse both) with the request's requirements, allocate for
        // it at once, and bind only it to dedicated memory.
        unsafe { request.dedicated_target(target) }
    }
}

/// `request` kept off the memory types whose protection differs from its
/// resource's (`protected_types`: the device's protected types, one bit
/// each) (`protected`: created with
/// `VK_BUFFER_CREATE_PROTECTED_BIT` / `VK_IMAGE_CREATE_PROTECTED_BIT`): a
/// protected resource is bound to protected memory only, any other to
/// unprotected memory only (VUID-vkBindBufferMemory-None-01898, -01899,
/// VUID-vkBindImageMemory-None-01901, -01902). Vulkan promises a protected
/// resource a protected type among its `memoryTypeBits`, not that they name
/// no other, nor that an unprotected resource's name no protected type.
pub(super) fn keep_protection(
    mut request: Request<'_>,
    protected_types: u32,
    protected: bool,
) -> Request<'_> {
    request.desc.excluded_memory_types |= if protected {
        !protected_types
    } else {
        protected_types
    };
    request
}

mod create_info_checks;
#[cfg(test)]
mod tests;
