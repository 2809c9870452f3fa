//! Create, allocate and bind in one call: the everyday path over `ash`.

use ash::vk;

use super::{Allocation, AllocationDesc, Allocator, Request};
use crate::device::{AshMemoryDevice, DedicatedHint, DedicatedTarget, DeviceError};
use crate::memory::{ResourceKind, Usage};
use crate::Error;

impl Allocator<AshMemoryDevice> {
    /// Creates a buffer, allocates memory for it (dedicated when the driver
    /// asks, through `vkGetBufferMemoryRequirements2`) and binds it.
    ///
    /// A buffer created with `SHADER_DEVICE_ADDRESS` usage gets memory
    /// allocated with `VK_MEMORY_ALLOCATE_DEVICE_ADDRESS_BIT`; without
    /// [`DeviceFeatures::buffer_device_address`](crate::device::DeviceFeatures::buffer_device_address)
    /// it fails with [`Error::NoSuitableMemoryType`].
    ///
    /// # Errors
    /// The allocator's errors, and `vkCreateBuffer` / `vkBindBufferMemory`
    /// failures as [`Error::Device`] (or the matching variant). Nothing is
    /// leaked on error: the buffer is destroyed and the memory freed.
    /// [`Error::UnsupportedResource`] for a sparse buffer, which is bound
    /// with `vkQueueBindSparse`, not here (nothing is created then).
    ///
    /// # Safety
    /// `info` is a valid `VkBufferCreateInfo` for this device (the
    /// VUID-VkBufferCreateInfo-* rules; size non-zero, usage supported).
    pub unsafe fn create_buffer(
        &self,
        info: &vk::BufferCreateInfo<'_>,
        desc: &AllocationDesc<'_>,
    ) -> Result<(vk::Buffer, Allocation), Error> {
        if info.flags.contains(vk::BufferCreateFlags::SPARSE_BINDING) {
            return Err(Error::UnsupportedResource(
                "BufferCreateFlags::SPARSE_BINDING",
            ));
        }
        let device = self.device().device();
        // SAFETY: the caller guarantees a valid create info.
        let buffer = unsafe { device.create_buffer(info, None) }.map_err(DeviceError::from)?;
        // SAFETY: just created from this device.
        let (requirements, dedicated) = unsafe { self.device().buffer_requirements(buffer) };
        let mut desc = *desc;
        if info
            .usage
            .contains(vk::BufferUsageFlags::SHADER_DEVICE_ADDRESS)
        {
            desc.usage |= Usage::DEVICE_ADDRESS;
        }
        let request = Request::with_desc(requirements, ResourceKind::Buffer, desc)
            .driver_dedicated(dedicated)
            .dedicated_target(DedicatedTarget::Buffer(buffer));
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
            || unsafe { device.destroy_buffer(buffer, None) },
        )?;
        Ok((buffer, allocation))
    }

    /// Creates an image, allocates memory for it (dedicated when the driver
    /// asks) and binds it. Linear-tiling images count as linear resources for
    /// `bufferImageGranularity`, every other tiling as optimal.
    ///
    /// # Errors
    /// As [`create_buffer`](Self::create_buffer);
    /// [`Error::UnsupportedResource`] for a sparse image and for a disjoint
    /// multi-planar one, whose planes take memory requirements and binds of
    /// their own (nothing is created then).
    ///
    /// # Safety
    /// `info` is a valid `VkImageCreateInfo` for this device.
    pub unsafe fn create_image(
        &self,
        info: &vk::ImageCreateInfo<'_>,
        desc: &AllocationDesc<'_>,
    ) -> Result<(vk::Image, Allocation), Error> {
        if info.flags.contains(vk::ImageCreateFlags::SPARSE_BINDING) {
            return Err(Error::UnsupportedResource(
                "ImageCreateFlags::SPARSE_BINDING",
            ));
        }
        if info.flags.contains(vk::ImageCreateFlags::DISJOINT) {
            return Err(Error::UnsupportedResource("ImageCreateFlags::DISJOINT"));
        }
        let device = self.device().device();
        // SAFETY: the caller guarantees a valid create info.
        let image = unsafe { device.create_image(info, None) }.map_err(DeviceError::from)?;
        let mut dedicated = vk::MemoryDedicatedRequirements::default();
        let mut requirements = vk::MemoryRequirements2::default().push_next(&mut dedicated);
        let query = vk::ImageMemoryRequirementsInfo2::default().image(image);
        // SAFETY: `image` was just created from this device, not disjoint
        // (checked above), so no plane info is needed
        // (VUID-VkImageMemoryRequirementsInfo2-image-01589).
        unsafe { device.get_image_memory_requirements2(&query, &mut requirements) };
        let kind = if info.tiling == vk::ImageTiling::LINEAR {
            ResourceKind::LinearImage
        } else {
            ResourceKind::OptimalImage
        };
        let request = Request::with_desc(requirements.memory_requirements, kind, *desc)
            .driver_dedicated(DedicatedHint::from_requirements(&dedicated))
            .dedicated_target(DedicatedTarget::Image(image));
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
            || unsafe { device.destroy_image(image, None) },
        )?;
        Ok((image, allocation))
    }

    /// Destroys a buffer and frees its memory.
    ///
    /// # Errors
    /// [`Error::ForeignAllocation`]: the buffer is destroyed, the allocation
    /// is left to its own allocator.
    ///
    /// # Safety
    /// `buffer` was created by this device and no pending GPU work uses it or
    /// the allocation (VUID-vkDestroyBuffer-buffer-00922).
    pub unsafe fn destroy_buffer(
        &self,
        buffer: vk::Buffer,
        allocation: Allocation,
    ) -> Result<(), Error> {
        // SAFETY: the caller's contract.
        unsafe {
            self.device().device().destroy_buffer(buffer, None);
            self.free(allocation)
        }
    }

    /// Destroys an image and frees its memory.
    ///
    /// # Errors
    /// As [`destroy_buffer`](Self::destroy_buffer).
    ///
    /// # Safety
    /// `image` was created by this device and no pending GPU work uses it or
    /// the allocation (VUID-vkDestroyImage-image-01000).
    pub unsafe fn destroy_image(
        &self,
        image: vk::Image,
        allocation: Allocation,
    ) -> Result<(), Error> {
        // SAFETY: the caller's contract.
        unsafe {
            self.device().device().destroy_image(image, None);
            self.free(allocation)
        }
    }
}
