//! Dedicated allocations: one `VkDeviceMemory` per resource, for requests
//! the driver prefers or requires that way (`VkMemoryDedicatedRequirements`)
//! or the caller asks for ([`DedicatedPolicy`](crate::DedicatedPolicy)),
//! for requests larger than half a block (or aligned to more), for any
//! other request when no new block can be made, and past the heap's
//! budget instead of a new block. Past 3/4 of `maxMemoryAllocationCount` only required ones try it
//! before blocks, past the budget too ([`TypePool::allocate`]).

use std::borrow::Cow;

use super::{Location, Placement, PoolRequest, SlabKey, TypePool};
use crate::device::MemoryDeviceExt;
use crate::memory::block::DedicatedMemory;
use crate::memory::context::MemoryContext;
use crate::Error;

impl<M> TypePool<M> {
    /// Places `request` in a `VkDeviceMemory` of its own (named after the
    /// request, or [`dedicated_debug_name`](Self::dedicated_debug_name)),
    /// bound to the request's resource when it names one.
    ///
    /// # Errors
    /// Those of [`MemoryContext::allocate_memory`].
    pub(super) fn allocate_dedicated<D: MemoryDeviceExt<M>>(
        &mut self,
        context: &MemoryContext<D>,
        request: &PoolRequest<'_>,
    ) -> Result<Placement, Error> {
        let serial = self.next_serial;
        let name = self.dedicated_debug_name(serial, request.name);
        let priority = request.priority.or(self.priority);
        // Always asked for, whatever the heap refused before: the least
        // the request can take in this type (`context/refusals.rs`).
        let new = self.make_memory(
            context,
            request.size,
            request.target,
            priority,
            &name,
            request,
            false,
            &mut None,
        )?;
        let raw = context.device.raw_memory(&new.memory);
        let key = self.dedicated.insert(DedicatedMemory {
            memory: new.memory,
            raw,
            size: request.size,
            mapped: new.mapped,
            name: request.name.map(Into::into),
            serial,
            kind: request.kind,
            targeted: request.target.is_some(),
        });
        self.counters.dedicated += 1;
        self.counters.dedicated_bytes += request.size;
        Ok(Placement {
            location: Location::Dedicated(key),
            memory: raw,
            offset: 0,
            mapped: new.mapped,
        })
    }

    /// Names the live dedicated allocation `key` anew (`None`: unnamed),
    /// for reports and, through the device, as the debug name of its
    /// memory: the one a new allocation of that name would get.
    ///
    /// # Errors
    /// [`Error::StaleAllocation`] when `key` names nothing live.
    pub(super) fn rename_dedicated<D: MemoryDeviceExt<M>>(
        &mut self,
        context: &MemoryContext<D>,
        key: SlabKey,
        name: Option<&str>,
    ) -> Result<(), Error> {
        let serial = self
            .dedicated
            .get(key)
            .ok_or(Error::StaleAllocation)?
            .serial;
        let debug_name = self.dedicated_debug_name(serial, name);
        let dedicated = self.dedicated.get_mut(key).ok_or(Error::StaleAllocation)?;
        dedicated.name = name.map(Into::into);
        // SAFETY: the memory is live (it is in the pool) and the pool's
        // lock, held by the caller, or its `&mut` is what every map, unmap
        // and free of it goes through.
        unsafe {
            context
                .device
                .set_memory_name(&dedicated.memory, &debug_name)
        };
        Ok(())
    }

    /// The debug name (`VK_EXT_debug_utils`) of this pool's dedicated
    /// memory number `serial`: the allocation's `name`, or without one the
    /// pool's name for it, as its blocks are named
    /// ([`memory_debug_name`](Self::memory_debug_name)).
    pub(super) fn dedicated_debug_name<'n>(
        &self,
        serial: u32,
        name: Option<&'n str>,
    ) -> Cow<'n, str> {
        match name {
            Some(name) => Cow::Borrowed(name),
            None => Cow::Owned(self.memory_debug_name("dedicated", serial)),
        }
    }

    /// Dedicated allocations, for reports.
    pub(crate) fn dedicated_allocations(&self) -> impl Iterator<Item = &DedicatedMemory<M>> + '_ {
        self.dedicated.iter().map(|(_, d)| d)
    }

    /// Frees one dedicated allocation's memory and its counters.
    ///
    /// # Safety
    /// No pending GPU work uses the memory (VUID-vkFreeMemory-memory-00677).
    pub(super) unsafe fn release_dedicated<D: MemoryDeviceExt<M>>(
        &mut self,
        context: &MemoryContext<D>,
        dedicated: DedicatedMemory<M>,
    ) {
        self.counters.dedicated -= 1;
        self.counters.dedicated_bytes -= dedicated.size;
        // SAFETY: allocated by this context for this memory type; the
        // caller's contract covers GPU use.
        unsafe {
            context.free_memory(
                dedicated.memory,
                dedicated.mapped.is_some(),
                self.memory_type,
                dedicated.size,
            )
        };
    }
}
