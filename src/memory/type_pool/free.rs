//! Freeing in a [`TypePool`]: an allocation's range goes back to its
//! block's offset allocator (a run slot to its run, and a run left empty to
//! its block), dedicated memory is released, and a block left empty goes to
//! `empty_blocks`, which keeps or releases it. In a memory type with
//! corruption detection or debug fills the margin is checked and the freed
//! bytes are filled first, out of line. It is apart from placement: every
//! allocation comes here once, on a path with its own unwind rules (a
//! damaged margin is logged only once the allocation is freed).

use std::panic::{self, AssertUnwindSafe};

use super::allocation_log::log_allocation;
use super::{Location, TypePool};
use crate::device::MemoryDeviceExt;
use crate::memory::context::MemoryContext;
use crate::memory::deferred_log;
use crate::memory::slab::SlabKey;
use crate::offset::AllocationId;
use crate::Error;

impl<M> TypePool<M> {
    /// Frees the allocation of `size` requested bytes at `location`; releases
    /// its memory when it was dedicated, and, when its block empties, the
    /// empty blocks the pool does not keep
    /// ([`block_emptied`](Self::block_emptied)).
    ///
    /// # Errors
    /// [`Error::StaleAllocation`] when `location` names nothing live.
    ///
    /// # Safety
    /// The GPU no longer uses the allocation (VUID-vkFreeMemory-memory-00677
    /// when memory is released).
    pub(crate) unsafe fn free<D: MemoryDeviceExt<M>>(
        &mut self,
        context: &MemoryContext<D>,
        location: &Location,
        size: u64,
    ) -> Result<(), Error> {
        // SAFETY: the caller's contract.
        unsafe { self.free_logged(context, location, size, true) }
    }

    /// [`free`](Self::free) of an allocation handed to nobody and never
    /// logged as made (`Config::log_allocations`): a defragmentation
    /// plan's destination undone under the pool's lock, before the plan
    /// logs its destinations. Its free is not logged either, so that the
    /// log has no free of an allocation it never showed.
    ///
    /// # Errors
    /// As [`free`](Self::free).
    ///
    /// # Safety
    /// As [`free`](Self::free).
    #[cold]
    pub(crate) unsafe fn free_unlogged<D: MemoryDeviceExt<M>>(
        &mut self,
        context: &MemoryContext<D>,
        location: Location,
        size: u64,
    ) -> Result<(), Error> {
        // SAFETY: the caller's contract.
        unsafe { self.free_logged(context, &location, size, false) }
    }

    /// [`free`](Self::free), whose line `Config::log_allocations` logs
    /// when `logged` ([`free_unlogged`](Self::free_unlogged) passes
    /// false). Inlined with `logged` constant: `free`'s code is as it was.
    ///
    /// # Safety
    /// As [`free`](Self::free).
    #[inline(always)]
    unsafe fn free_logged<D: MemoryDeviceExt<M>>(
        &mut self,
        context: &MemoryContext<D>,
        location: &Location,
        size: u64,
        logged: bool,
    ) -> Result<(), Error> {
        // Every free comes here, so every guarded margin is checked once,
        // and every freed range filled.
        if context.is_debug_type(self.memory_type) {
            // SAFETY: the caller's contract.
            return unsafe { self.free_debug(context, *location, size, logged) };
        }
        // SAFETY: the caller's contract.
        unsafe { self.free_plain(context, location, size) }
    }

    /// [`free`](Self::free) in a memory type with corruption detection,
    /// debug fills or backtraces on: drops its backtrace, checks the
    /// allocation's margin, fills the bytes it
    /// holds with the freed pattern (`debug_fill.rs`), frees it, and only
    /// then logs a damaged margin (under a `&self` call, once the pool's
    /// lock is released: `deferred_log`), so that a logger that panics on
    /// the error line leaves the allocation freed. The line is logged also
    /// when the free panics (the memory callback, as the emptied block is
    /// released), before that panic goes on. A backend panicking in the
    /// fill's flush (non-coherent types) goes on once the allocation is
    /// freed. With `Config::log_allocations` and `logged` (false for
    /// [`free_unlogged`](Self::free_unlogged)), the free's line is logged
    /// once the allocation is freed, before the damaged margin's, and
    /// also when the free panics.
    ///
    /// # Safety
    /// As [`free`](Self::free).
    #[cold]
    #[inline(never)]
    unsafe fn free_debug<D: MemoryDeviceExt<M>>(
        &mut self,
        context: &MemoryContext<D>,
        location: Location,
        size: u64,
        logged: bool,
    ) -> Result<(), Error> {
        // A stale location names no recorded allocation: generations
        // differ.
        self.forget_backtrace(location);
        // Worded while the allocation is live, logged once it is freed.
        let logged = if logged && context.logs_allocations() {
            self.allocation_line("freed", location, size)
        } else {
            None
        };
        let damaged = if context.detects_corruption(self.memory_type) {
            self.check_margin_on_free(context, location)
        } else {
            None
        };
        // A backend panicking in the flush of the fill (non-coherent
        // types) goes on once the allocation is freed: the pool holds it
        // still, and nobody else would free it.
        let filled = if context.fills(self.memory_type) {
            panic::catch_unwind(AssertUnwindSafe(|| {
                // SAFETY: the caller's contract: the allocation is freed
                // and the GPU is done with it.
                unsafe { self.fill_freed(context, location) }
            }))
        } else {
            Ok(())
        };
        if let (None, Ok(()), None) = (&damaged, &filled, &logged) {
            // SAFETY: the caller's contract.
            return unsafe { self.free_plain(context, &location, size) };
        }
        // Unwind safety: a free updates the pool before anything that can
        // panic (`FirstPanic::run`'s note).
        let freed = panic::catch_unwind(AssertUnwindSafe(|| {
            // SAFETY: the caller's contract.
            unsafe { self.free_plain(context, &location, size) }
        }));
        // Freed also when the release of its memory panicked (the memory
        // callback): the pool was updated first.
        if let Ok(Ok(())) | Err(_) = freed {
            log_allocation(logged);
        }
        if let Some(damaged) = damaged {
            deferred_log::log(log::Level::Error, damaged);
        }
        if let Err(payload) = filled {
            panic::resume_unwind(payload);
        }
        freed.unwrap_or_else(|payload| panic::resume_unwind(payload))
    }

    /// [`free`](Self::free) without the debug work (the margin check, the
    /// freed fill): for a memory type that has none, or once it is done.
    /// `Allocator::free` calls it directly once it has checked the type.
    /// A stale `location` is refused all the same.
    ///
    /// # Errors
    /// As [`free`](Self::free).
    ///
    /// # Safety
    /// As [`free`](Self::free).
    #[inline(always)]
    pub(crate) unsafe fn free_plain<D: MemoryDeviceExt<M>>(
        &mut self,
        context: &MemoryContext<D>,
        location: &Location,
        size: u64,
    ) -> Result<(), Error> {
        match *location {
            Location::Dedicated(key) => {
                let dedicated = self.dedicated.remove(key).ok_or(Error::StaleAllocation)?;
                // SAFETY: the caller guarantees the GPU is done with it.
                unsafe { self.release_dedicated(context, dedicated) };
                Ok(())
            }
            Location::Slot {
                run,
                slot,
                generation,
            } => {
                let emptied = self
                    .runs
                    .free(run, slot, generation)
                    .map_err(|()| Error::StaleAllocation)?;
                self.counters.block_allocations -= 1;
                self.counters.block_allocated_bytes -= size;
                if let Some(run) = emptied {
                    if self.free_range(run.block, run.range)? {
                        self.block_emptied(context, run.block);
                    }
                }
                Ok(())
            }
            Location::Block { block, range } => {
                let emptied = self.free_range(block, range)?;
                self.counters.block_allocations -= 1;
                self.counters.block_allocated_bytes -= size;
                // After the counters: what an empty block may keep is
                // weighed against the bytes still allocated.
                if emptied {
                    self.block_emptied(context, block);
                }
                Ok(())
            }
        }
    }

    /// Gives `range` back to block `key`; returns whether that emptied the
    /// block (the caller, once its counters are up to date, calls
    /// [`block_emptied`](Self::block_emptied)).
    ///
    /// # Errors
    /// [`Error::StaleAllocation`] when the range is not live.
    #[inline(always)]
    fn free_range(&mut self, key: SlabKey, range: AllocationId) -> Result<bool, Error> {
        let block = self.blocks.get_mut(key).ok_or(Error::StaleAllocation)?;
        let merged = block
            .ranges
            .free_packed(range)
            .ok_or(Error::StaleAllocation)?;
        block.miss.after_free(merged.get());
        // Most allocations are unnamed: skip hashing the slot then.
        if !block.names.is_empty() {
            block.names.remove(&range.slot());
        }
        Ok(block.ranges.is_empty())
    }
}
