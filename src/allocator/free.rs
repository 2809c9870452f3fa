//! Freeing now: [`Allocator::free`] and its lock-free twin
//! [`free_mut`](Allocator::free_mut), with their out-of-line paths for an
//! allocation of a custom pool and of a memory type with debug work
//! (margins, debug fills), whose lines are logged once the pool's lock is
//! released. Frees that wait for the GPU's frames are `frames.rs`'s. Apart
//! from the facade as the counterpart of `allocate.rs`.

use super::place::{exclusive, lock};
use super::pool::{self, PoolTag};
use super::{Allocation, Allocator};
use crate::device::MemoryDeviceExt;
use crate::memory::deferred_log;
use crate::Error;

impl<D: MemoryDeviceExt<M>, M: Send> Allocator<D, M> {
    /// Frees an allocation now. Its range may be handed out again at once, and
    /// a block that empties may be released with `vkFreeMemory`.
    ///
    /// # Errors
    /// [`Error::ForeignAllocation`] for another allocator's allocation;
    /// [`Error::StaleAllocation`] for one whose memory is no longer live
    /// (the handle is not `Clone` and a pool with allocations is not
    /// destroyed, so only a forged handle gets it); nothing changes then.
    ///
    /// # Safety
    /// No command that is pending execution on the GPU uses the allocation
    /// (VUID-vkFreeMemory-memory-00677: memory may be freed with it). When
    /// that is not known, use [`free_after_frame`](Self::free_after_frame).
    ///
    /// # Time complexity
    /// O(1), plus `vkFreeMemory` when memory is released. A block that
    /// empties while others are empty also walks the memory type's blocks
    /// and sorts the empty ones, to release those past what the type keeps
    /// ([`Config::empty_block_reserve`](crate::Config::empty_block_reserve)),
    /// smallest first, and unlink them; one that empties while its heap is
    /// at or over its budget (the cached estimate: the free path never
    /// asks the driver) walks them to
    /// release every empty block of its pool (but a custom pool's
    /// `min_blocks`). A block a defragmentation plan is emptying
    /// ([`plan_defragmentation`](Self::plan_defragmentation)) is released
    /// as it empties, unlinked from its pool's blocks being emptied (a
    /// pass over those of its granularity class); in a custom pool at its
    /// `min_blocks` it stays instead and takes requests again, which costs
    /// that pass and one over the pool's runs, as
    /// [`give_up_move`](Self::give_up_move)'s. A named allocation's name
    /// is dropped (in a block, a hash table removal, O(1) expected: also a
    /// lookup for an unnamed one while others in its block or its pool's
    /// runs are named). With
    /// [`Config::debug_fill`](crate::Config::debug_fill) on, O(size) more
    /// (the allocation's bytes are written; a released block's are read,
    /// O(block size)); with
    /// [`Config::detect_corruption`](crate::Config::detect_corruption), the
    /// margin's are read; with
    /// [`Config::allocation_backtraces`](crate::Config::allocation_backtraces),
    /// its backtrace leaves a hash table; with
    /// [`Config::log_allocations`](crate::Config::log_allocations), a line
    /// is formatted and logged.
    pub unsafe fn free(&self, allocation: Allocation) -> Result<(), Error> {
        self.check_owner(&allocation)?;
        if let Some(tag) = allocation.custom_pool() {
            // SAFETY: as for this call.
            return unsafe { self.free_in_custom_pool(tag, allocation) };
        }
        if self.context.is_debug_type(allocation.memory_type()) {
            // SAFETY: as for this call.
            return unsafe { self.free_debug(allocation) };
        }
        let mut pool = lock(&self.pools[allocation.memory_type() as usize]);
        // SAFETY: the caller guarantees the GPU is done with the
        // allocation; its memory type has no debug work (above).
        unsafe { pool.free_plain(&self.context, &allocation.location, allocation.size) }
    }

    /// [`free`](Self::free) of an allocation of a default pool whose memory
    /// type has debug work (margins, debug fills): the lines of a damaged
    /// margin or a write after free it finds under the pool's lock are
    /// logged once the lock is released (`deferred_log`), so that a logger
    /// may call back into the allocator. Out of line, as the debug work.
    ///
    /// # Safety
    /// As [`free`](Self::free).
    #[cold]
    #[inline(never)]
    unsafe fn free_debug(&self, allocation: Allocation) -> Result<(), Error> {
        deferred_log::log_after(|| {
            let mut pool = lock(&self.pools[allocation.memory_type() as usize]);
            // SAFETY: the caller guarantees the GPU is done with the
            // allocation.
            unsafe { pool.free(&self.context, &allocation.location, allocation.size) }
        })
    }

    /// [`free`](Self::free) of an allocation of custom pool `tag`. Out of
    /// line: the default pools' free path pays one test for pools.
    ///
    /// # Safety
    /// As [`free`](Self::free).
    #[inline(never)]
    unsafe fn free_in_custom_pool(
        &self,
        tag: PoolTag,
        allocation: Allocation,
    ) -> Result<(), Error> {
        let free = || {
            self.with_custom_pool(tag, |pool| {
                // SAFETY: the caller guarantees the GPU is done with the allocation.
                unsafe { pool.free(&self.context, &allocation.location, allocation.size) }
            })
            .ok_or(Error::StaleAllocation)?
        };
        if self.context.is_debug_type(allocation.memory_type()) {
            // Lines found under the pool's lock, logged once it is released.
            return deferred_log::log_after(free);
        }
        free()
    }

    /// [`free`](Self::free) without taking the memory type's lock (or a
    /// custom pool's), as
    /// [`allocate_mut`](Self::allocate_mut).
    ///
    /// # Errors
    /// As [`free`](Self::free).
    ///
    /// # Safety
    /// As [`free`](Self::free).
    ///
    /// # Time complexity
    /// As [`free`](Self::free), with no lock taken but the heap's, held
    /// while a `VkDeviceMemory` is released.
    pub unsafe fn free_mut(&mut self, allocation: Allocation) -> Result<(), Error> {
        self.check_owner(&allocation)?;
        if let Some(tag) = allocation.custom_pool() {
            // SAFETY: as for this call.
            return unsafe { self.free_mut_in_custom_pool(tag, allocation) };
        }
        if self.context.is_debug_type(allocation.memory_type()) {
            // SAFETY: as for this call.
            return unsafe { self.free_mut_debug(allocation) };
        }
        let pool = exclusive(&mut self.pools[allocation.memory_type() as usize]);
        // SAFETY: the caller guarantees the GPU is done with the
        // allocation. Its memory type has no debug work (above), so this
        // is `free_plain`, called out of line: `free_mut` stays small
        // enough to be inlined into its caller, and the run's free is
        // inlined into `TypePool::free`. With `free_plain` inlined here
        // instead (it is `#[inline(always)]`), frees took 1.4–3.7 ns more
        // (`bench/ab.sh`, 8 interleaved rounds, every trace).
        unsafe { pool.free(&self.context, &allocation.location, allocation.size) }
    }

    /// [`free_mut`](Self::free_mut) of an allocation of a default pool
    /// whose memory type has debug work, as
    /// [`free_debug`](Self::free_debug): no lock is held, but the lines
    /// are kept all the same until the free is done (`deferred_log`), so
    /// that a logger that panics on one (a damaged margin, a write after
    /// free found in a released empty block) stops the call where it stops
    /// `free`. Logged at once, its panic stopped the release of the other
    /// empty blocks that `free` releases (their lines untold), and went on
    /// in the place of a memory callback's panic that `free` lets go on.
    ///
    /// # Safety
    /// As [`free`](Self::free).
    #[cold]
    #[inline(never)]
    unsafe fn free_mut_debug(&mut self, allocation: Allocation) -> Result<(), Error> {
        let context = &self.context;
        let pool = exclusive(&mut self.pools[allocation.memory_type() as usize]);
        deferred_log::log_after(|| {
            // SAFETY: the caller guarantees the GPU is done with the
            // allocation.
            unsafe { pool.free(context, &allocation.location, allocation.size) }
        })
    }

    /// [`free_mut`](Self::free_mut) of an allocation of custom pool `tag`,
    /// with no lock taken. Out of line, as `free_in_custom_pool`.
    ///
    /// # Safety
    /// As [`free`](Self::free).
    #[inline(never)]
    unsafe fn free_mut_in_custom_pool(
        &mut self,
        tag: PoolTag,
        allocation: Allocation,
    ) -> Result<(), Error> {
        let context = &self.context;
        let custom = &mut self.custom;
        let free = || {
            pool::with_custom_pool_mut(custom, tag, |pool| {
                // SAFETY: the caller guarantees the GPU is done with the allocation.
                unsafe { pool.free(context, &allocation.location, allocation.size) }
            })
            .ok_or(Error::StaleAllocation)?
        };
        // Lines kept until the free is done, as `free_mut_debug` keeps them.
        deferred_log::log_after_if(context.is_debug_type(allocation.memory_type()), free)
    }
}
