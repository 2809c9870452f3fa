//! What the end of a frame does to the empty blocks memory types keep:
//! those kept longer than `Config::empty_block_frames` go back, and so do
//! all of a heap's kept blocks when its figures at the frame's end (the
//! driver's, read then, with `VK_EXT_memory_budget`; else
//! `Config::budget_fraction` of it and this allocator's own usage) put it
//! at or over its budget. Apart from
//! `frames.rs`, which seals and collects frames, because this is the
//! block-keeping policy's part of a frame's end, run by `end_frame`,
//! `end_frame_timeline` and `collect_idle` alike.

use crate::allocator::pool::read;
use crate::allocator::{try_lock, Allocator};
use crate::device::MemoryDeviceExt;
use crate::memory::deferred_log;
use crate::memory::type_pool::TypePool;

impl<D: MemoryDeviceExt<M>, M: Send> Allocator<D, M> {
    /// What every end of a frame does (`end_frame`, `end_frame_timeline`,
    /// `collect_idle`), once its locks are released: other processes may
    /// have taken or given back memory meanwhile, so the next budget check
    /// reads the driver's figures again and the heaps are asked for every
    /// size they refused (`memory/context/refusals.rs`); then the empty
    /// blocks kept too long
    /// ([`release_aged_empty_blocks`](Self::release_aged_empty_blocks))
    /// and those of heaps at or over their budget
    /// ([`release_empty_blocks_over_budget`](Self::release_empty_blocks_over_budget))
    /// are released. A write after free found in a released block (debug
    /// fills) is logged once the pools' locks are released.
    pub(in crate::allocator) fn after_frame_end(&self) {
        self.context.expire_budgets();
        self.context.forget_refusals();
        deferred_log::log_after_if(self.context.debug_types() != 0, || {
            self.release_aged_empty_blocks();
            self.release_empty_blocks_over_budget();
        });
    }

    /// Releases the empty blocks kept longer than
    /// [`Config::empty_block_frames`](crate::Config::empty_block_frames)
    /// (but each memory type's largest). A memory type whose lock another
    /// thread holds is skipped until a later frame: that thread may be
    /// making a block (`vkAllocateMemory` takes milliseconds on some
    /// drivers), and `end_frame` does not wait for it.
    fn release_aged_empty_blocks(&self) {
        let frames = self.context.config.empty_block_frames;
        if frames == u64::MAX {
            return;
        }
        for pool in self.pools.iter() {
            let Some(mut pool) = try_lock(pool) else {
                continue;
            };
            pool.release_aged_empty_blocks(&self.context, frames);
        }
    }

    /// Releases every kept empty block (down to a custom pool's
    /// `min_blocks`) of the memory types whose heap its figures now (the
    /// driver's, read now, with `VK_EXT_memory_budget`) put at or over its
    /// budget: the rule a block that empties
    /// follows (`TypePool::block_emptied`, VMA's `VmaBlockVector::Free`),
    /// applied to blocks that emptied before other processes took the
    /// heap past its budget, or that emptied on an estimate not read since
    /// (the free path never asks the driver). VMA reads the figures at
    /// every `vmaSetCurrentFrameIndex`; here they are read only when some
    /// memory type keeps an empty block it could release. Without
    /// `VK_EXT_memory_budget` there is nothing to read (the budget is
    /// `Config::budget_fraction` of the heap, the usage this allocator's
    /// own), but the heap may still be over it: a custom pool's
    /// `min_blocks`, made with no budget check when the pool is, may have
    /// taken it there after a block emptied and was kept, and no block of
    /// its pool emptied since (a request, of a default pool or a custom
    /// one, releases the heap's kept blocks before it passes the budget).
    /// As in
    /// [`release_aged_empty_blocks`](Self::release_aged_empty_blocks), a
    /// memory type whose lock another thread holds waits for a later frame.
    ///
    /// # Time complexity
    /// O(memory types + custom pools), one driver query (with
    /// `VK_EXT_memory_budget`) when a type keeps an empty block, and what
    /// [`TypePool::trim`] costs in each type over budget.
    fn release_empty_blocks_over_budget(&self) {
        let custom = read(&self.custom).snapshot();
        let every_pool = || {
            let custom = custom.iter().map(|(_, cell)| &**cell);
            self.pools.iter().chain(custom)
        };
        let keeps = |pool: &TypePool<M>| {
            pool.counters.empty_blocks > 0 && pool.keeps_more_than_min_blocks()
        };
        let keeping = every_pool()
            .any(|pool| try_lock(pool).is_some_and(|pool| !pool.is_destroyed() && keeps(&pool)));
        if !keeping {
            return;
        }
        // Read with no pool's lock held: some drivers answer in
        // milliseconds, and the heaps' checks below use this reading
        // (without `VK_EXT_memory_budget`, no driver call).
        self.context.heap_budgets();
        for pool in every_pool() {
            let Some(mut pool) = try_lock(pool) else {
                continue;
            };
            if !pool.is_destroyed()
                && keeps(&pool)
                && self.context.heap_at_or_over_budget(pool.memory_type())
            {
                pool.trim(&self.context);
            }
        }
    }
}
