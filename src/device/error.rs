//! Errors a device backend returns.

use ash::vk;
use gpu_alloc_types::{DeviceMapError, OutOfMemory};

/// A failed device call, one variant per `VkResult` the allocator acts on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DeviceError {
    /// `VK_ERROR_OUT_OF_DEVICE_MEMORY`: the heap is full. The allocator retries
    /// with smaller blocks, dedicated memory and other memory types first.
    #[error("out of device memory")]
    OutOfDeviceMemory,
    /// `VK_ERROR_OUT_OF_HOST_MEMORY`: the driver could not allocate host memory.
    #[error("out of host memory")]
    OutOfHostMemory,
    /// `VK_ERROR_TOO_MANY_OBJECTS`: from `vkAllocateMemory`,
    /// `maxMemoryAllocationCount` memory objects exist (free dedicated
    /// allocations, or use larger blocks; the allocator returns it as
    /// [`Error::TooManyObjects`](crate::Error::TooManyObjects) with the
    /// limit); from another call, too many objects of the kind it makes
    /// (the allocator passes it on as
    /// [`Error::Device`](crate::Error::Device)).
    #[error("VK_ERROR_TOO_MANY_OBJECTS (too many objects)")]
    TooManyObjects,
    /// `VK_ERROR_MEMORY_MAP_FAILED`: the memory could not be mapped.
    #[error("memory map failed")]
    MapFailed,
    /// `VK_ERROR_DEVICE_LOST`: the device is gone. Stop submitting work; the
    /// allocator can still be dropped, which frees everything it holds.
    #[error("device lost")]
    DeviceLost,
    /// Any other `VkResult`, passed on unchanged.
    #[error("unexpected Vulkan result {0:?}")]
    Unexpected(vk::Result),
}

impl From<vk::Result> for DeviceError {
    fn from(result: vk::Result) -> Self {
        match result {
            vk::Result::ERROR_OUT_OF_DEVICE_MEMORY => Self::OutOfDeviceMemory,
            vk::Result::ERROR_OUT_OF_HOST_MEMORY => Self::OutOfHostMemory,
            vk::Result::ERROR_TOO_MANY_OBJECTS => Self::TooManyObjects,
            vk::Result::ERROR_MEMORY_MAP_FAILED => Self::MapFailed,
            vk::Result::ERROR_DEVICE_LOST => Self::DeviceLost,
            other => Self::Unexpected(other),
        }
    }
}

impl From<OutOfMemory> for DeviceError {
    fn from(error: OutOfMemory) -> Self {
        match error {
            OutOfMemory::OutOfDeviceMemory => Self::OutOfDeviceMemory,
            OutOfMemory::OutOfHostMemory => Self::OutOfHostMemory,
        }
    }
}

impl From<DeviceMapError> for DeviceError {
    fn from(error: DeviceMapError) -> Self {
        match error {
            DeviceMapError::OutOfDeviceMemory => Self::OutOfDeviceMemory,
            DeviceMapError::OutOfHostMemory => Self::OutOfHostMemory,
            DeviceMapError::MapFailed => Self::MapFailed,
        }
    }
}
