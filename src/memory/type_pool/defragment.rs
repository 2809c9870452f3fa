//! Defragmentation planning in one memory type: which blocks to empty, and
//! where their allocations go.
//!
//! A block can be emptied when every live allocation in it is movable (the
//! engine can recreate its resource elsewhere and copy the contents). Such
//! blocks are tried emptiest first (the smallest fraction in use: the most
//! bytes released per byte copied). Each one's allocations are placed,
//! largest first, in the other blocks of their granularity class that hold
//! something already: never in a new block, an empty one (moving into it
//! would only swap one block for another), one this plan empties, or one an
//! earlier plan is still emptying. A block is taken only when all of its
//! allocations fit within the plan's limits; otherwise its placements are
//! undone and the next block is tried.
//!
//! A block taken is *retiring*: it moves to the back of its class's
//! first-fit order, so new requests go elsewhere while other blocks have
//! room, and its runs hand out no more slots. It empties when the engine
//! frees the moved allocations, and is then released at once: not kept as
//! the type's one empty block, as blocks emptied by other frees may be.
//! Kept, it gave nothing back until `trim`, and the next requests filled
//! it again (the peers benchmark's `--defragment` replay).
//! An engine that never frees them leaves the block retiring; it keeps
//! serving requests that fit nowhere else, and a later plan may empty it.

use std::cmp::Reverse;
use std::collections::{HashMap, HashSet};

use super::{DedicatedChoice, Location, Placement, PoolRequest, TypePool};
use crate::device::MemoryDeviceExt;
use crate::memory::context::MemoryContext;
use crate::memory::slab::SlabKey;

/// An allocation the engine can move, as its memory type sees it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct PoolMovable<'a> {
    /// Its index in the engine's list, handed back with its move.
    pub(crate) index: usize,
    /// Where it is now.
    pub(crate) location: Location,
    /// Its size now: the bytes its move copies.
    pub(crate) size: u64,
    /// Its new place, as a request (dedicated memory is never chosen).
    pub(crate) request: PoolRequest<'a>,
}

/// What a plan may still move, over all memory types.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct MoveBudget {
    pub(crate) moves: usize,
    pub(crate) bytes: u64,
}

/// The moves planned in one memory type.
#[derive(Debug, Default)]
pub(crate) struct PoolPlan {
    /// Each move: the movable's index and its new place.
    pub(crate) moves: Vec<(usize, Placement)>,
    /// Blocks that empty once every moved allocation is freed.
    pub(crate) blocks: usize,
    /// Their bytes.
    pub(crate) bytes: u64,
}

impl<M> TypePool<M> {
    /// Plans moves that empty whole blocks (see the module docs), within
    /// `budget`, which it lowers by what it plans. The destinations are
    /// live allocations of this pool from then on.
    pub(crate) fn plan_defragmentation<D: MemoryDeviceExt<M>>(
        &mut self,
        context: &MemoryContext<D>,
        movables: &[PoolMovable<'_>],
        budget: &mut MoveBudget,
    ) -> PoolPlan {
        let by_block = self.movables_by_block(movables);
        // (used bytes, block size, key) of each block that can be emptied.
        let mut sources: Vec<(u64, u64, SlabKey)> = self
            .live_allocations_by_block(&by_block)
            .into_iter()
            .filter(|(key, live)| by_block.get(key).map(Vec::len) == Some(*live as usize))
            .filter_map(|(key, _)| {
                let block = self.blocks.get(key)?;
                Some((block.size - block.ranges.free_bytes(), block.size, key))
            })
            .collect();
        // The emptiest first, by the fraction of the block in use: the most
        // bytes released per byte copied. The slab index breaks ties, so
        // that a plan does not depend on a hash map's order.
        sources.sort_unstable_by(|&(used_a, size_a, a), &(used_b, size_b, b)| {
            let fraction_a = u128::from(used_a) * u128::from(size_b);
            let fraction_b = u128::from(used_b) * u128::from(size_a);
            fraction_a.cmp(&fraction_b).then(a.index.cmp(&b.index))
        });

        let mut plan = PoolPlan::default();
        let mut emptied: Vec<SlabKey> = Vec::new();
        let mut received: HashSet<SlabKey> = HashSet::new();
        for (_, _, source) in sources {
            // A block that took moves holds allocations nobody can move.
            if received.contains(&source) {
                continue;
            }
            let Some(list) = by_block.get(&source) else {
                continue;
            };
            let bytes: u64 = list.iter().map(|movable| movable.size).sum();
            if list.len() > budget.moves || bytes > budget.bytes {
                continue;
            }
            emptied.push(source);
            let mut largest_first = list.clone();
            largest_first.sort_by_key(|movable| Reverse(movable.request.placed_size));
            let mut placed: Vec<(usize, Placement, u64)> = Vec::with_capacity(list.len());
            for movable in largest_first {
                let Some(placement) = self.place_outside(&movable.request, &emptied) else {
                    break;
                };
                placed.push((movable.index, placement, movable.request.size));
            }
            if placed.len() < list.len() {
                for (_, placement, size) in placed {
                    // SAFETY: placed just now and handed to nobody: no
                    // resource is bound to it. Its block held other
                    // allocations before, so no memory is released.
                    let undone = unsafe { self.free(context, placement.location, size) };
                    debug_assert!(undone.is_ok());
                }
                emptied.pop();
                continue;
            }
            for (index, placement, _) in placed {
                if let Some(block) = self.block_of(placement.location) {
                    received.insert(block);
                }
                plan.moves.push((index, placement));
            }
            budget.moves -= list.len();
            budget.bytes -= bytes;
            plan.blocks += 1;
            plan.bytes += self.blocks.get(source).map_or(0, |block| block.size);
        }
        for key in emptied {
            self.retire(key);
        }
        plan
    }

    /// The block of a live allocation in a block or a run slot; `None` for
    /// dedicated memory and anything not live.
    fn block_of(&self, location: Location) -> Option<SlabKey> {
        match location {
            Location::Block { block, range } => {
                self.blocks.get(block)?.ranges.get(range)?;
                Some(block)
            }
            Location::Slot {
                run,
                slot,
                generation,
            } => Some(self.runs.live(run, slot, generation)?.block),
            Location::Dedicated(_) => None,
        }
    }

    /// The movables in blocks, by block, each allocation once.
    fn movables_by_block<'m, 'a>(
        &self,
        movables: &'m [PoolMovable<'a>],
    ) -> HashMap<SlabKey, Vec<&'m PoolMovable<'a>>> {
        let mut seen = HashSet::new();
        let mut by_block: HashMap<SlabKey, Vec<&PoolMovable<'a>>> = HashMap::new();
        for movable in movables {
            if !seen.insert(movable.location) {
                continue;
            }
            if let Some(block) = self.block_of(movable.location) {
                by_block.entry(block).or_default().push(movable);
            }
        }
        by_block
    }

    /// How many live allocations each block of `blocks` holds: its ranges,
    /// each run among them counting as its live slots.
    fn live_allocations_by_block<T>(&self, blocks: &HashMap<SlabKey, T>) -> HashMap<SlabKey, u64> {
        let mut live: HashMap<SlabKey, u64> = blocks
            .keys()
            .filter_map(|&key| {
                let block = self.blocks.get(key)?;
                Some((key, block.ranges.counters().live_allocations))
            })
            .collect();
        for (_, run) in self.runs.iter() {
            if let Some(count) = live.get_mut(&run.block) {
                // The run's own range is one of the block's live ranges.
                *count = (*count + u64::from(run.live_slots())).saturating_sub(1);
            }
        }
        live
    }

    /// Places `request` as [`allocate`](Self::allocate) would in a block,
    /// but only in blocks that hold something, are not in `emptied` and are
    /// not retiring; never in new blocks or dedicated memory.
    fn place_outside(
        &mut self,
        request: &PoolRequest<'_>,
        emptied: &[SlabKey],
    ) -> Option<Placement> {
        debug_assert_eq!(request.dedicated, DedicatedChoice::Never);
        let blocks = &self.blocks;
        let usable = |key: SlabKey| {
            !emptied.contains(&key)
                && blocks
                    .get(key)
                    .is_some_and(|block| !block.retiring && !block.ranges.is_empty())
        };
        let usable_keys: Vec<SlabKey> = self.order[request.class]
            .iter()
            .copied()
            .filter(|&key| usable(key))
            .collect();
        if let Some(class) = request.run_class {
            let class = usize::from(class);
            if let Some(taken) = self.runs.take_outside(class, |key| !usable(key)) {
                return Some(self.hand_out_slot(taken, request));
            }
            let run_request = Self::run_request(request, class);
            if let Some(range) = self.allocate_in_keys(&usable_keys, &run_request) {
                let taken = self.start_run(class, range)?;
                return Some(self.hand_out_slot(taken, request));
            }
        }
        let placement = self.allocate_in_keys(&usable_keys, request)?;
        Some(self.count(placement, request))
    }

    /// First fit over `keys`, in order.
    fn allocate_in_keys(
        &mut self,
        keys: &[SlabKey],
        request: &PoolRequest<'_>,
    ) -> Option<Placement> {
        keys.iter()
            .find_map(|&key| self.allocate_in_block(key, request))
    }

    /// Marks block `key` retiring (module docs): last in first-fit order,
    /// its runs closed to new slots.
    fn retire(&mut self, key: SlabKey) {
        let Some(block) = self.blocks.get_mut(key) else {
            return;
        };
        block.retiring = true;
        let order = &mut self.order[block.class];
        order.retain(|&other| other != key);
        order.push(key);
        self.runs.retire_in_block(key);
    }
}
