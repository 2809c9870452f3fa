//! Renaming an allocation ([`Allocator::set_name`], VMA's
//! `vmaSetAllocationName`): the name leak reports, memory maps, dumps and
//! corruption reports give it, and for dedicated memory the debug name
//! debuggers and validation messages show (`VK_EXT_debug_utils`); and
//! reading it back ([`Allocator::name`], VMA's `VmaAllocationInfo::pName`).
//! Apart from the facade as a debugging aid of its own; an allocation's
//! first name comes with its request (`AllocationDesc::name`).

use super::{Allocation, Allocator};
use crate::device::MemoryDeviceExt;
use crate::Error;

impl<D: MemoryDeviceExt<M>, M: Send> Allocator<D, M> {
    /// Names `allocation` anew, or drops its name with `None` (VMA's
    /// `vmaSetAllocationName`): the name leak reports, memory maps, dumps
    /// and corruption reports give it. Dedicated memory (its own
    /// `VkDeviceMemory`, from the default pools or a custom pool) is
    /// renamed for debuggers and validation messages too
    /// (`VK_EXT_debug_utils`, through
    /// [`MemoryDeviceExt::set_memory_name`]):
    /// it gets the debug name a new allocation of that name would, `name`
    /// itself, or for `None` `vk-suballoc dedicated <type>/<n>` (in a
    /// custom pool `vk-suballoc pool "<pool>" dedicated <type>/<n>`, or
    /// `vk-suballoc custom pool dedicated <type>/<n>` when the pool has no
    /// name, as its blocks are named; quotes, backslashes and control
    /// characters in `<pool>` are escaped as `{:?}` escapes them). A block's
    /// debug name stays the block's.
    ///
    /// # Errors
    /// [`Error::ForeignAllocation`], [`Error::StaleAllocation`]; nothing
    /// changes then.
    ///
    /// # Time complexity
    /// O(1) expected (a hash table entry) and O(name's length) for the
    /// copy of `name` (a heap allocation), under the lock of the
    /// allocation's pool; for dedicated memory, one
    /// `vkSetDebugUtilsObjectNameEXT` call there as well (for `None`, with
    /// the name it makes for the memory).
    pub fn set_name(&self, allocation: &Allocation, name: Option<&str>) -> Result<(), Error> {
        self.check_owner(allocation)?;
        self.with_pool(allocation, |pool| {
            pool.rename(&self.context, allocation.location, name)
        })?
    }

    /// The name of `allocation` (VMA's `VmaAllocationInfo::pName`): its
    /// request's ([`AllocationDesc::name`](crate::AllocationDesc::name)), or
    /// the last [`set_name`](Self::set_name) gave it; `None` when it has
    /// none. A copy: the allocator keeps its own.
    ///
    /// ```
    /// # #[cfg(feature = "fake-device")] {
    /// use ash::vk;
    /// use vk_suballoc::device::fake::{FakeDevice, FakeLayout};
    /// use vk_suballoc::{Allocator, Config, Request, ResourceKind, Usage};
    ///
    /// let allocator = Allocator::new(FakeDevice::new(FakeLayout::discrete()), Config::default())?;
    /// let requirements = vk::MemoryRequirements { size: 4096, alignment: 256, memory_type_bits: !0 };
    /// let request = Request::new(requirements, Usage::DEVICE_LOCAL, ResourceKind::Buffer);
    /// let vertices = allocator.allocate(&request.name("vertices"))?;
    /// assert_eq!(allocator.name(&vertices)?.as_deref(), Some("vertices"));
    /// allocator.set_name(&vertices, Some("terrain vertices"))?;
    /// assert_eq!(allocator.name(&vertices)?.as_deref(), Some("terrain vertices"));
    /// // SAFETY: the fake device runs no GPU work.
    /// unsafe { allocator.free(vertices)? };
    /// # }
    /// # Ok::<(), vk_suballoc::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::ForeignAllocation`], [`Error::StaleAllocation`].
    ///
    /// # Time complexity
    /// O(1) expected (a hash table lookup) and O(name's length) for the
    /// copy, under the lock of the allocation's pool.
    pub fn name(&self, allocation: &Allocation) -> Result<Option<String>, Error> {
        self.check_owner(allocation)?;
        self.with_pool(allocation, |pool| {
            pool.name_of(allocation.location)
                .map(|name| name.map(String::from))
        })?
    }
}
