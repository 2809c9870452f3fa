//! Renaming an allocation ([`Allocator::set_name`], VMA's
//! `vmaSetAllocationName`): the name leak reports, memory maps, dumps and
//! corruption reports give it, and for dedicated memory the debug name
//! debuggers and validation messages show (`VK_EXT_debug_utils`). Apart
//! from the facade as a debugging aid of its own; an allocation's first
//! name comes with its request (`AllocationDesc::name`).

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
    /// O(1) expected (a hash table entry), under the lock of the
    /// allocation's pool; for dedicated memory, one
    /// `vkSetDebugUtilsObjectNameEXT` call there as well.
    pub fn set_name(&self, allocation: &Allocation, name: Option<&str>) -> Result<(), Error> {
        self.check_owner(allocation)?;
        self.with_pool(allocation, |pool| {
            pool.rename(&self.context, allocation.location, name)
        })?
    }
}
