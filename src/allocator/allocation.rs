//! [`Allocation`]: the handle to one range of device memory.

use std::ptr::NonNull;

use ash::vk;

use super::pool::{Home, PoolTag};
use crate::memory::mapping::MappedPtr;
use crate::memory::type_pool::Location;

/// One allocation: a range `[offset, offset + size)` of a `VkDeviceMemory`.
///
/// Not `Clone`: freeing consumes it, so a double free does not compile.
/// Bind a resource with [`memory`](Self::memory) and [`offset`](Self::offset).
/// For host-visible memory, [`Allocator::mapped_slice_mut`](crate::Allocator::mapped_slice_mut)
/// gives its bytes.
#[derive(Debug, PartialEq, Eq, Hash)]
#[must_use = "an allocation must be freed; dropping the handle leaks its memory until the allocator is dropped"]
pub struct Allocation {
    pub(crate) memory: vk::DeviceMemory,
    pub(crate) offset: u64,
    pub(crate) size: u64,
    pub(crate) location: Location,
    pub(crate) allocator: u32,
    /// Its memory type and pool, in one word: the handle stays 64 bytes,
    /// which the allocation path returns and engines store.
    pub(crate) home: Home,
    pub(crate) mapped: Option<MappedPtr>,
}

// The allocation path returns it and engines store it: custom pools added
// their tag without growing it (`Home`). A larger handle cost every
// allocation 9-11 ns on the peers benchmark.
#[cfg(target_pointer_width = "64")]
const _: () = assert!(std::mem::size_of::<Allocation>() == 64);

impl Allocation {
    /// The `VkDeviceMemory` to bind to.
    pub fn memory(&self) -> vk::DeviceMemory {
        self.memory
    }

    /// Offset of the allocation in [`memory`](Self::memory): the
    /// `memoryOffset` of `vkBind*Memory`. A multiple of the requested alignment.
    pub fn offset(&self) -> u64 {
        self.offset
    }

    /// Size in bytes: exactly the requested size, the `size` of the memory
    /// requirements. For a resource made by the helpers that is the driver's
    /// figure, which can exceed the buffer's own size (NVIDIA rounds it up to
    /// 16 bytes), so copy and compare the buffer's size, not this one.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// Index of the memory type it was allocated from.
    #[inline]
    pub fn memory_type(&self) -> u32 {
        self.home.memory_type()
    }

    /// Whether it has a `VkDeviceMemory` of its own.
    pub fn is_dedicated(&self) -> bool {
        matches!(self.location, Location::Dedicated(_))
    }

    /// Whether it was allocated from a custom pool
    /// ([`AllocationDesc::pool`](crate::AllocationDesc::pool)).
    pub fn is_in_custom_pool(&self) -> bool {
        self.home.pool().slot().is_some()
    }

    /// Its custom pool's tag; `None` in a default pool.
    #[inline]
    pub(crate) fn custom_pool(&self) -> Option<PoolTag> {
        let pool = self.home.pool();
        pool.slot().map(|_| pool)
    }

    /// A second handle to the same range, for host access (a flush) with
    /// no borrow of this one, which something else keeps alive meanwhile,
    /// as an upload ring chunk's pins keep its allocation
    /// (`Allocator::ring_write`), or a destroyed ring's chunk queued for
    /// its frame keeps it while its frames are still reclaimed
    /// (`Rings::leaving`). Never free the copy: this handle is the one that
    /// gets freed, once.
    pub(crate) fn host_view(&self) -> Allocation {
        Allocation {
            memory: self.memory,
            offset: self.offset,
            size: self.size,
            location: self.location,
            allocator: self.allocator,
            home: self.home,
            mapped: self.mapped,
        }
    }

    /// Pointer to its first byte in the persistent mapping, when host-visible.
    ///
    /// The pointer is valid while the allocation and its allocator live.
    /// Prefer [`Allocator::mapped_slice_mut`](crate::Allocator::mapped_slice_mut),
    /// which ties the borrow to both.
    pub fn mapped_ptr(&self) -> Option<NonNull<u8>> {
        self.mapped.map(|p| p.0)
    }
}
