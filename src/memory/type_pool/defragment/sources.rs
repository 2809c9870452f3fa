//! The blocks a defragmentation plan may empty, its sources: those whose
//! every live allocation is movable or a free waiting in the frame queue,
//! each with the bytes it has in use (a run's free slots and the queued
//! frees counting as free). It is apart from the plan that orders and tries
//! them: this is the one pass over the pool's blocks and runs, before any
//! move, that turns the engine's list of movables into candidates by
//! block. The blocks left with queued frees only, which empty on their
//! own and so take no moves, are found by the same counts. Before it, the
//! blocks being emptied that a custom pool could no longer release (its
//! `min_blocks`) stop being emptied.

use super::{PoolMovable, Source};
use crate::memory::block::Block;
use crate::memory::slab::SlabKey;
use crate::memory::type_pool::{Location, TypePool};

impl<M> TypePool<M> {
    /// Ends the retirement of the blocks being emptied that a custom pool
    /// could no longer release once they empty: those past the blocks it
    /// holds above its `min_blocks`, after `trim` (or another release of
    /// empty blocks) took the others since they retired. Being emptied,
    /// each would take the moves of a plan that empties it for nothing
    /// (the pool keeps it, empty), and count as released.
    pub(super) fn stop_retiring_past_min_blocks(&mut self) {
        if self.policy.min_blocks == 0 {
            return;
        }
        let above_min = (self.counters.blocks).saturating_sub(self.policy.min_blocks);
        let past = (self.counters.retiring_blocks).saturating_sub(above_min);
        // From the ends of the retiring lists: the latest of their class
        // to retire first.
        let keys: Vec<SlabKey> = (self.retiring.iter().flatten().rev())
            .take(usize::try_from(past).unwrap_or(usize::MAX))
            .copied()
            .collect();
        for key in keys {
            self.stop_retiring(key);
        }
    }

    /// By block slab index, the bytes of the free slots of its runs, which
    /// its offset allocator counts as in use.
    pub(super) fn free_slot_bytes_by_block(&self) -> Vec<u64> {
        let mut free_in_runs: Vec<u64> = vec![0; self.blocks.index_bound()];
        for (_, run) in self.runs.iter() {
            if let Some(bytes) = free_in_runs.get_mut(run.block.index as usize) {
                *bytes += run.free_slot_bytes();
            }
        }
        free_in_runs
    }

    /// The bytes of block `block` in use, a run's free slots counting as
    /// free (`free_in_runs` from [`free_slot_bytes_by_block`](Self::free_slot_bytes_by_block)).
    pub(super) fn bytes_in_use(block: &Block<M>, index: u32, free_in_runs: &[u64]) -> u64 {
        let used = block.size - block.ranges.free_bytes();
        used.saturating_sub(free_in_runs.get(index as usize).copied().unwrap_or(0))
    }

    /// By block slab index, the frees of `leaving` (waiting for their
    /// frame) in it: their count and the bytes they hold there, margin and
    /// padding included (still live, so counted in use until released).
    fn queued_by_block(&self, leaving: &[(Location, u64)]) -> Vec<(u64, u64)> {
        let mut gone: Vec<(u64, u64)> = vec![(0, 0); self.blocks.index_bound()];
        for &(location, size) in leaving {
            if let Some(block) = self.block_of(location) {
                let entry = &mut gone[block.index as usize];
                entry.0 += 1;
                entry.1 += self.held_bytes(location).unwrap_or(size);
            }
        }
        gone
    }

    /// By block slab index, the live allocations in it: its ranges, a run
    /// counting as its live slots instead of one.
    fn live_by_block(&self) -> Vec<u64> {
        let mut live: Vec<u64> = vec![0; self.blocks.index_bound()];
        for (key, block) in self.blocks.iter() {
            live[key.index as usize] = block.ranges.counters().live_allocations;
        }
        for (_, run) in self.runs.iter() {
            if let Some(count) = live.get_mut(run.block.index as usize) {
                *count = (*count + u64::from(run.live_slots())).saturating_sub(1);
            }
        }
        live
    }

    /// The blocks whose every live allocation is among `movables` or
    /// `leaving` (frees waiting for their frame), with their movables (each
    /// allocation once); and, from the same counts, the blocks whose every
    /// live allocation is in `leaving`. Those empty once their frames are
    /// collected, so no move goes there ([`destinations`](Self::destinations)):
    /// it would keep a block about to empty, as a move into an empty block
    /// would only swap one block for another.
    pub(super) fn blocks_to_empty(
        &self,
        movables: &[PoolMovable],
        leaving: &[(Location, u64)],
        free_in_runs: &[u64],
    ) -> (Vec<Source>, Vec<SlabKey>) {
        // Movables by block slab index.
        let mut by_block: Vec<Vec<PoolMovable>> = Vec::new();
        by_block.resize_with(self.blocks.index_bound(), Vec::new);
        for movable in movables {
            if let Some(block) = self.block_of(movable.location) {
                by_block[block.index as usize].push(*movable);
            }
        }
        let gone = self.queued_by_block(leaving);
        let live = self.live_by_block();
        let emptying_on_their_own = self
            .blocks
            .iter()
            .filter(|(key, _)| {
                let index = key.index as usize;
                gone[index].0 > 0 && gone[index].0 == live[index]
            })
            .map(|(key, _)| key)
            .collect();
        let sources = self
            .blocks
            .iter()
            .filter_map(|(key, block)| {
                let mut list = std::mem::take(&mut by_block[key.index as usize]);
                if list.is_empty() {
                    return None;
                }
                // Stable: of an allocation listed twice, the first listing
                // (of those whose requirements allow its memory type) moves.
                list.sort_by_key(|movable| movable.offset);
                list.dedup_by_key(|movable| movable.offset);
                let (queued, queued_bytes) = gone[key.index as usize];
                (list.len() as u64 + queued == live[key.index as usize]).then(|| Source {
                    key,
                    used: Self::bytes_in_use(block, key.index, free_in_runs)
                        .saturating_sub(queued_bytes),
                    size: block.size,
                    movables: list,
                })
            })
            .collect();
        (sources, emptying_on_their_own)
    }
}
