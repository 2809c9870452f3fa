//! Read-only questions to the allocator: its figures per memory type and
//! heap ([`Allocator::stats`]), the size of the `VkDeviceMemory` an
//! allocation lives in ([`memory_size`](Allocator::memory_size)), and
//! whether an allocation is its own and live ([`owns`](Allocator::owns)).
//! Each takes one pool's lock at a time, and none changes an allocation.
//! Apart from the facade as the allocator's read side: none is on the
//! allocation or free path.

use super::place::lock;
use super::{Allocation, Allocator};
use crate::device::MemoryDeviceExt;
use crate::report::{HeapStats, Stats, TypeStats};
use crate::Error;

impl<D: MemoryDeviceExt<M>, M: Send> Allocator<D, M> {
    /// Figures per memory type and heap, and totals. Cheap enough for every
    /// frame: one short lock per memory type and per custom pool, no walk
    /// over allocations, and
    /// with `VK_EXT_memory_budget` one query of the driver's heap budgets,
    /// as [`budgets`](Self::budgets) makes (VMA reads them once a frame).
    /// A memory type's figures count its custom pools' blocks and
    /// allocations ([`pool_stats`](Self::pool_stats) has each pool's).
    /// An allocation freed behind a frame
    /// ([`free_after_frame`](Self::free_after_frame), the
    /// `destroy_*_after_frame` helpers) counts as live until
    /// [`collect`](Self::collect) releases it: the GPU may still use it, and
    /// its bytes are not free for another allocation yet.
    ///
    /// While other threads allocate and free, each pool's figures are read
    /// whole under its lock, but one pool after another, and the memory
    /// object count and budgets after them: the totals may then mix
    /// moments (say, `memory_objects` one more than the blocks and
    /// dedicated allocations counted). They agree whenever no other call
    /// runs.
    ///
    /// # Time complexity
    /// O(custom pools + memory types × heaps): a copy of each pool's counters
    /// under its lock, no walk over blocks or allocations; and, with
    /// `VK_EXT_memory_budget`, one query of the driver's heap budgets.
    pub fn stats(&self) -> Stats {
        let properties = &self.context.properties.device;
        let mut counters: Vec<_> = self.pools.iter().map(|pool| lock(pool).counters).collect();
        self.for_each_custom_pool(|pool| counters[pool.memory_type() as usize] += pool.counters);
        let memory_types: Vec<TypeStats> = counters
            .iter()
            .enumerate()
            .map(|(t, counters)| {
                TypeStats::from_counters(t as u32, properties.memory_types[t].heap, counters)
            })
            .collect();
        let budgets = self.context.fresh_heap_budgets();
        let heaps = properties
            .memory_heaps
            .iter()
            .enumerate()
            .map(|(h, heap)| HeapStats::sum(h as u32, heap.size, budgets[h], &memory_types))
            .collect();
        Stats {
            memory_types,
            heaps,
            memory_objects: self.context.memory_object_count(),
        }
    }

    /// The size of the `VkDeviceMemory` `allocation` lives in
    /// ([`Allocation::memory`]): its block's, or its dedicated memory's
    /// (then the allocation's [`size`](Allocation::size)). An importer of
    /// memory exported from a custom pool ([`PoolDesc::export`](crate::PoolDesc::export))
    /// names it as `allocationSize` (for opaque handles, with the pool's
    /// memory type), and finds the allocation at its
    /// [`offset`](Allocation::offset).
    ///
    /// # Errors
    /// [`Error::ForeignAllocation`], [`Error::StaleAllocation`].
    ///
    /// # Time complexity
    /// O(1), under the lock of the allocation's pool.
    pub fn memory_size(&self, allocation: &Allocation) -> Result<u64, Error> {
        self.check_owner(allocation)?;
        self.with_pool(allocation, |pool| {
            pool.memory_at(allocation.location)
                .map(|(_, size)| size)
                .ok_or(Error::StaleAllocation)
        })?
    }

    /// Whether `allocation` is a live allocation of this allocator.
    pub fn owns(&self, allocation: &Allocation) -> bool {
        allocation.allocator == self.id
            && self
                .with_pool(allocation, |pool| pool.is_live(allocation.location))
                .unwrap_or(false)
    }
}
