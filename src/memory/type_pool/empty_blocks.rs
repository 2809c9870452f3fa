//! Empty blocks of a [`TypePool`]: which it keeps when a block empties
//! (its largest, and in a default pool more while they are within
//! `Config::empty_block_reserve` times the bytes allocated in its blocks;
//! none but a custom pool's `min_blocks` while the heap is at or over its
//! budget), which it releases at a frame's end (`end_frame`,
//! `end_frame_timeline`, `collect_idle`) once they have been empty
//! `Config::empty_block_frames` frames, or all of them (but `min_blocks`)
//! when the heap's figures then put it at or over its budget, at
//! `trim`, and at the allocator's drop, when every block goes and each
//! allocation still live is logged as a leak.

use std::cmp::Reverse;
use std::panic::{self, AssertUnwindSafe};

use super::{Location, TypePool};
use crate::device::MemoryDeviceExt;
use crate::memory::block::DedicatedMemory;
use crate::memory::context::MemoryContext;
use crate::memory::deferred_log;
use crate::memory::first_panic::FirstPanic;
use crate::memory::slab::SlabKey;

impl<M> TypePool<M> {
    /// Block `key` has just emptied: counts it, then releases it when a
    /// defragmentation plan emptied it (whose point is to give the memory
    /// back: not kept for reuse). Then, when its heap is at or over its
    /// budget, releases every empty block of the pool (VMA's
    /// `budgetExceeded` rule, below); else, when other blocks are empty
    /// too, the empty blocks past what the pool keeps
    /// ([`release_surplus_empty_blocks`](Self::release_surplus_empty_blocks)
    /// with [`Config::empty_block_reserve`](crate::Config::empty_block_reserve)
    /// for a default pool, none beyond the largest for a custom pool, as
    /// VMA). A custom pool keeps its `min_blocks` blocks: a retiring one
    /// among them stops retiring and stays. Out of line, as the rest of the
    /// free path is inlined: most frees leave their block in use.
    ///
    /// Over budget, as VMA's `VmaBlockVector::Free` (which deletes a block
    /// that empties while the heap's usage is at or over its budget rather
    /// than keep it), empty blocks are not kept for reuse: memory other
    /// processes or the driver need goes back at once, not
    /// `Config::empty_block_frames` frames later. The budget is the cached
    /// estimate ([`MemoryContext::heap_at_or_over_budget`]), taken as the
    /// block empties, before anything is released: no driver call on the
    /// free path.
    #[cold]
    #[inline(never)]
    pub(super) fn block_emptied<D: MemoryDeviceExt<M>>(
        &mut self,
        context: &MemoryContext<D>,
        key: SlabKey,
    ) {
        let Some(block) = self.blocks.get_mut(key) else {
            return;
        };
        block.emptied_in_frame = context.current_frame();
        let retiring = block.retiring;
        self.counters.empty_blocks += 1;
        let can_release = self.counters.blocks > self.policy.min_blocks;
        let over_budget = can_release && context.heap_at_or_over_budget(self.memory_type);
        if !can_release {
            if retiring {
                self.stop_retiring(key);
            }
        } else if retiring {
            self.release_block(context, key);
        }
        if over_budget {
            // Every empty block, down to a custom pool's `min_blocks`.
            self.trim(context);
        } else if self.counters.empty_blocks > 1 {
            let reserve = if self.custom {
                0.0
            } else {
                context.config.empty_block_reserve
            };
            self.release_surplus_empty_blocks(context, reserve, Some(key));
        }
    }

    /// Whether the pool holds more blocks than its `min_blocks` (none for a
    /// default pool): whether [`trim`](Self::trim) could release any.
    pub(crate) fn keeps_more_than_min_blocks(&self) -> bool {
        self.counters.blocks > self.policy.min_blocks
    }

    /// Releases the empty blocks of a default pool, but its largest, that
    /// have stayed empty for `frames` frames or more up to the frame being
    /// recorded ([`Config::empty_block_frames`](crate::Config::empty_block_frames)).
    /// Only default pools age their blocks (a frame's end, `end_frame`,
    /// `end_frame_timeline` or `collect_idle`, calls this for them alone):
    /// custom pools keep one, VMA's basic rule, and their `min_blocks`.
    ///
    /// # Time complexity
    /// O(blocks) for any number released ([`release_batch`](Self::release_batch)),
    /// and a `vkFreeMemory` call per block released (plus a read of it
    /// with debug fills).
    pub(crate) fn release_aged_empty_blocks<D: MemoryDeviceExt<M>>(
        &mut self,
        context: &MemoryContext<D>,
        frames: u64,
    ) {
        debug_assert!(!self.custom, "custom pools do not age their blocks");
        if self.counters.empty_blocks < 2 {
            return;
        }
        let now = context.current_frame();
        // The largest empty block stays, the most recently emptied among
        // blocks of its size.
        let kept = self
            .blocks
            .iter()
            .filter(|(_, block)| block.ranges.is_empty())
            .max_by_key(|(_, block)| (block.size, block.emptied_in_frame))
            .map(|(key, _)| key);
        let aged: Vec<SlabKey> = self
            .blocks
            .iter()
            .filter(|&(key, block)| {
                block.ranges.is_empty()
                    && Some(key) != kept
                    && now.saturating_sub(block.emptied_in_frame) >= frames
            })
            .map(|(key, _)| key)
            .collect();
        self.release_batch(|pool, batch| {
            for key in aged {
                pool.release_in_batch(context, key, batch);
            }
        });
    }

    /// Keeps the largest empty block, and more empty blocks while their
    /// bytes are at most `reserve` times the bytes allocated in the pool's
    /// blocks; releases the others, smallest first (a larger block serves
    /// more future requests; among blocks of one size, `just_emptied`
    /// goes before one kept earlier). Never goes below a custom pool's
    /// `min_blocks`. Returns the bytes released.
    ///
    /// With a `reserve` of 0 this is VMA's basic rule: one empty block
    /// kept. (VMA keeps none that empties while the heap is over budget:
    /// nor does [`block_emptied`](Self::block_emptied). VMA also releases
    /// the one it keeps at a later free once that block has sorted last
    /// among the type's blocks; nothing here does: default pools age their
    /// kept blocks out by frames instead, and the first-fit order here is
    /// by creation, not by free bytes.)
    /// Above it, a pool whose live bytes swing keeps the blocks it will
    /// need again instead of giving them back and asking the driver for
    /// them anew (`vkAllocateMemory` takes milliseconds on some drivers);
    /// once its allocations are freed, the empty blocks go but one.
    ///
    /// # Time complexity
    /// O(blocks + e log e) for the `e` empty blocks, however many are
    /// released ([`release_batch`](Self::release_batch)), and a
    /// `vkFreeMemory` call per block released (plus a read of it with
    /// debug fills).
    pub(crate) fn release_surplus_empty_blocks<D: MemoryDeviceExt<M>>(
        &mut self,
        context: &MemoryContext<D>,
        reserve: f64,
        just_emptied: Option<SlabKey>,
    ) -> u64 {
        // (size, kept earlier, key): sorted so that the last goes first.
        let mut empty: Vec<(u64, bool, SlabKey)> = self
            .blocks
            .iter()
            .filter(|(_, block)| block.ranges.is_empty())
            .map(|(key, block)| (block.size, Some(key) != just_emptied, key))
            .collect();
        if empty.len() < 2 {
            return 0;
        }
        empty.sort_unstable_by_key(|&(size, kept_earlier, _)| Reverse((size, kept_earlier)));
        // A negative or NaN reserve keeps none; an infinite one, all while
        // the blocks hold allocations (0 × ∞ would be NaN: none without).
        let used = self.counters.block_allocated_bytes;
        let kept = if used == 0 {
            0.0
        } else {
            used as f64 * reserve.max(0.0)
        };
        let mut surplus: u64 = empty[1..].iter().map(|&(size, _, _)| size).sum();
        self.release_batch(|pool, batch| {
            let mut released = 0;
            while surplus as f64 > kept && pool.counters.blocks > pool.policy.min_blocks {
                let Some((size, _, key)) = empty.pop().filter(|_| !empty.is_empty()) else {
                    break;
                };
                pool.release_in_batch(context, key, batch);
                surplus -= size;
                released += size;
            }
            released
        })
    }

    /// Takes block `key` out of the pool (its slot, its first-fit order or
    /// the retiring blocks, its counts), then frees its memory; with debug
    /// fills, an empty block is checked whole first
    /// ([`check_released_block`](Self::check_released_block)), and a write
    /// after free found is logged once it is freed.
    ///
    /// # Time complexity
    /// O(blocks of its granularity class), to unlink it from their
    /// first-fit order (or the retiring ones), and a `vkFreeMemory` call.
    /// Releases of several blocks at once go through
    /// [`release_batch`](Self::release_batch), which unlinks them all in
    /// one pass.
    pub(super) fn release_block<D: MemoryDeviceExt<M>>(
        &mut self,
        context: &MemoryContext<D>,
        key: SlabKey,
    ) {
        let Some(block) = self.blocks.get(key) else {
            return;
        };
        let list = if block.retiring {
            &mut self.retiring[block.class]
        } else {
            &mut self.order[block.class]
        };
        list.retain(|k| *k != key);
        self.release_unlinked(context, key);
    }

    /// Runs `release`, whose releases of blocks ([`release_in_batch`](Self::release_in_batch))
    /// mark them in the batch it is given, then unlinks every block marked
    /// from the first-fit order and the retiring blocks in one pass,
    /// keeping the others' order: unlinking each as it went
    /// ([`release_block`](Self::release_block))
    /// made releasing `k` blocks O(k·blocks). Also when `release` panics
    /// (the memory callback, a backend in a released block's check): the
    /// blocks released before the panic are unlinked, those after stay, as
    /// they did, before the panic goes on.
    ///
    /// # Time complexity
    /// O(blocks) once a block is released (the batch's marks, by slab
    /// index, and the pass over the order), besides `release`.
    fn release_batch<R>(&mut self, release: impl FnOnce(&mut Self, &mut Vec<bool>) -> R) -> R {
        let mut batch = Vec::new();
        let outcome = panic::catch_unwind(AssertUnwindSafe(|| release(self, &mut batch)));
        if !batch.is_empty() {
            for list in self.order.iter_mut().chain(&mut self.retiring) {
                list.retain(|key| !batch.get(key.index as usize).copied().unwrap_or(false));
            }
            debug_assert!(
                self.order
                    .iter()
                    .chain(&self.retiring)
                    .flatten()
                    .all(|&key| self.blocks.get(key).is_some()),
                "a released block left in the first-fit order or the retiring list"
            );
        }
        outcome.unwrap_or_else(|payload| panic::resume_unwind(payload))
    }

    /// Releases block `key` as [`release_block`](Self::release_block)
    /// does, but leaves it in the first-fit order, marked in `batch` for
    /// [`release_batch`](Self::release_batch) to unlink.
    fn release_in_batch<D: MemoryDeviceExt<M>>(
        &mut self,
        context: &MemoryContext<D>,
        key: SlabKey,
        batch: &mut Vec<bool>,
    ) {
        if self.blocks.get(key).is_none() {
            return;
        }
        if batch.is_empty() {
            batch.resize(self.blocks.index_bound(), false);
        }
        if let Some(marked) = batch.get_mut(key.index as usize) {
            *marked = true;
        }
        self.release_unlinked(context, key);
    }

    /// The rest of [`release_block`](Self::release_block), once block `key`
    /// is out of the first-fit order (or marked to leave it: a batch's):
    /// takes it out of its slot and its counts, then frees its memory; with
    /// debug fills, an empty block is checked whole first, and a write
    /// after free found is logged once it is freed.
    fn release_unlinked<D: MemoryDeviceExt<M>>(
        &mut self,
        context: &MemoryContext<D>,
        key: SlabKey,
    ) {
        let Some(block) = self.blocks.remove(key) else {
            return;
        };
        self.counters.blocks -= 1;
        self.counters.block_bytes -= block.size;
        if block.ranges.is_empty() {
            self.counters.empty_blocks -= 1;
        }
        if block.retiring {
            self.counters.retiring_blocks -= 1;
        }
        // Debug fills: a write after free that no allocation found. A
        // backend panicking in the check's invalidate (non-coherent types)
        // goes on once the block is freed: it is out of the pool already,
        // and nobody else would free it.
        let written = if context.fills(self.memory_type) {
            panic::catch_unwind(AssertUnwindSafe(|| {
                self.check_released_block(context, &block)
            }))
        } else {
            Ok(None)
        };
        let mapped = block.mapped.is_some();
        // SAFETY: allocated by this context for this type; callers release
        // only empty blocks (or everything at drop), so no live resource of
        // ours is bound to it.
        let free =
            || unsafe { context.free_memory(block.memory, mapped, self.memory_type, block.size) };
        let line = match written {
            Ok(None) => return free(),
            Ok(Some(line)) => line,
            Err(payload) => {
                // A second panic (the memory callback) is dropped, so that
                // the first one goes on.
                let _ = panic::catch_unwind(AssertUnwindSafe(free));
                panic::resume_unwind(payload);
            }
        };
        // Logged once the block is gone, and also when its free panics
        // (the memory callback), before that panic goes on: the pool was
        // updated first. Under a `&self` call, once the pool's lock is
        // released (`deferred_log`).
        let freed = panic::catch_unwind(AssertUnwindSafe(free));
        deferred_log::log(log::Level::Error, line);
        freed.unwrap_or_else(|payload| panic::resume_unwind(payload));
    }

    /// Releases every empty block, but for a custom pool's `min_blocks`;
    /// returns the bytes given back.
    ///
    /// # Time complexity
    /// O(blocks) for any number released ([`release_batch`](Self::release_batch)),
    /// and a `vkFreeMemory` call per block released (plus a read of it
    /// with debug fills).
    pub(crate) fn trim<D: MemoryDeviceExt<M>>(&mut self, context: &MemoryContext<D>) -> u64 {
        let empty: Vec<(SlabKey, u64)> = self
            .blocks
            .iter()
            .filter(|(_, block)| block.ranges.is_empty())
            .map(|(key, block)| (key, block.size))
            .collect();
        let releasable = self.counters.blocks.saturating_sub(self.policy.min_blocks);
        self.release_batch(|pool, batch| {
            let mut released = 0;
            for (key, size) in empty.into_iter().take(releasable as usize) {
                pool.release_in_batch(context, key, batch);
                released += size;
            }
            released
        })
    }

    /// Logs every live allocation as a leak, then frees all memory: at the
    /// allocator's drop, and for a custom pool at `destroy_pool` and when
    /// `create_pool` gives up. A panic (of the memory callback, or of a
    /// logger) stops one step, not the rest: every memory object is freed
    /// first, then the first panic goes on. Unwound from the middle, the
    /// memory objects not yet freed leaked for good (a destroyed pool is
    /// not released again at drop).
    ///
    /// # Time complexity
    /// O(blocks + allocations), and a `vkFreeMemory` per memory object
    /// (plus a read of each block with debug fills). The first-fit order
    /// is emptied once, up front: unlinking each block from it as it goes
    /// (`release_block`) made this O(blocks²).
    pub(crate) fn release_all<D: MemoryDeviceExt<M>>(&mut self, context: &MemoryContext<D>) {
        // Each step leaves the pool consistent (`release_unlinked` counts the
        // block out before freeing it; a block out of the first-fit order
        // takes no request, and every block goes below).
        let mut panics = FirstPanic::default();
        self.log_leaks(&mut panics);
        // Each dedicated allocation with where it was made, for its line
        // below.
        let dedicated: Vec<(SlabKey, String)> = self
            .dedicated
            .iter()
            .map(|(key, _)| (key, self.made_at(Location::Dedicated(key))))
            .collect();
        self.forget_backtraces();
        self.runs.clear();
        for list in self.order.iter_mut().chain(&mut self.retiring) {
            list.clear();
        }
        let keys: Vec<SlabKey> = self.blocks.iter().map(|(key, _)| key).collect();
        for key in keys {
            panics.run(|| self.release_unlinked(context, key));
        }
        let pool = self.pool_label();
        let drained: Vec<(DedicatedMemory<M>, String)> = dedicated
            .into_iter()
            .filter_map(|(key, made_at)| Some((self.dedicated.remove(key)?, made_at)))
            .collect();
        debug_assert!(self.dedicated.iter().next().is_none());
        for (dedicated, made_at) in drained {
            panics.run(|| {
                log::warn!(
                    "vk-suballoc: leaked dedicated allocation {:?}: {} bytes{pool} (memory type {}){made_at}",
                    dedicated.name.as_deref().unwrap_or("unnamed"),
                    dedicated.size,
                    self.memory_type
                );
            });
            // SAFETY: the allocator is being dropped, so its owner promised
            // the GPU is idle; a pool being destroyed, or one `create_pool`
            // gives up, holds no allocation.
            panics.run(|| unsafe { self.release_dedicated(context, dedicated) });
        }
        self.counters.block_allocations = 0;
        self.counters.block_allocated_bytes = 0;
        panics.resume();
    }

    /// Logs every live allocation in the pool's blocks as a leak, with
    /// where it was made when that was recorded
    /// (`Config::allocation_backtraces`). A logger's panic on one line,
    /// kept in `panics`, stops that line, not the others.
    fn log_leaks(&mut self, panics: &mut FirstPanic) {
        // Which pool, for custom pools (whose block numbers restart at 0).
        let pool = self.pool_label();
        let memory_type = self.memory_type;
        let mut log_leak = |name: &str, size: u64, offset: u64, serial: u32, made_at: String| {
            panics.run(|| {
                log::warn!(
                    "vk-suballoc: leaked allocation {name:?}: {size} bytes held at offset {offset} of block {memory_type}/{serial}{pool} (memory type {memory_type}){made_at}"
                );
            });
        };
        self.guarded.clear();
        let runs = self.runs_by_range();
        for (key, block) in self.blocks.iter() {
            for range in block.ranges.allocations() {
                if let Some(&(run_key, run)) = runs.get(&(key, range.id)) {
                    for (slot, _, offset) in run.slots().filter(|&(_, live, _)| live) {
                        let name = self.runs.name(run_key, slot).unwrap_or("unnamed");
                        let made_at = self.made_at(Location::Slot {
                            run: run_key,
                            slot,
                            generation: run.generation(slot),
                        });
                        log_leak(name, run.slot_size, offset, block.serial, made_at);
                    }
                    continue;
                }
                let name = block
                    .names
                    .get(&range.id.slot())
                    .map_or("unnamed", |n| &**n);
                let made_at = self.made_at(Location::Block {
                    block: key,
                    range: range.id,
                });
                log_leak(name, range.size, range.offset, block.serial, made_at);
            }
        }
    }
}
