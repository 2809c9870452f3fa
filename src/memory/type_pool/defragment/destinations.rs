//! Where a defragmentation plan's moves may go: the blocks of a source's
//! granularity class that hold something already, are not being emptied
//! and are not retiring, fullest first; and the placement of a move in them
//! (a new run in a fuller block, a free run slot, or a range), never in a
//! new block, an empty one, one left with frees waiting for their frame
//! only (empty once the frame is collected) or dedicated memory. It is
//! apart from the choice
//! of sources: these are the blocks that receive moves, ranked once per
//! source block.

use super::by_fraction_in_use;
use crate::memory::slab::SlabKey;
use crate::memory::type_pool::{DedicatedChoice, Placement, PoolRequest, TypePool};

/// Where a source block's moves may go.
#[derive(Debug)]
pub(super) struct Destinations {
    /// By granularity class, the usable blocks, fullest first.
    in_order: [Vec<SlabKey>; 2],
    /// By block slab index, the block's place in that order; `u32::MAX`
    /// for a block that takes no moves.
    rank: Vec<u32>,
}

impl<M> TypePool<M> {
    /// Whether block `source` has a block its allocations could go to:
    /// another of its granularity class that holds something and is not
    /// being emptied (by `emptied`, an earlier plan or its queued frees,
    /// `vanishing`).
    pub(super) fn has_destination(
        &self,
        source: SlabKey,
        emptied: &[SlabKey],
        vanishing: &[SlabKey],
    ) -> bool {
        let Some(class) = self.blocks.get(source).map(|block| block.class) else {
            return false;
        };
        self.order[class].iter().any(|&key| {
            key != source
                && !emptied.contains(&key)
                && !vanishing.contains(&key)
                && self
                    .blocks
                    .get(key)
                    .is_some_and(|block| !block.retiring && !block.ranges.is_empty())
        })
    }

    /// The blocks moves may go to while `emptied` are being emptied: those
    /// that hold something, are not in `emptied` and are not retiring, nor
    /// in `vanishing` (holding only frees waiting for their frame,
    /// [`blocks_to_empty`](Self::blocks_to_empty));
    /// fullest first (by fraction in use, weighed as sources are: a run's
    /// free slots, `free_in_runs`, count as free), so that moves fill the
    /// blocks least likely to be emptied next and leave sparse ones sparse.
    /// They stay so while one source block's moves are placed (placing only
    /// adds, and the order needs to be no more than a good guess: the free
    /// slots are those before the plan), so this is made once per source
    /// block.
    pub(super) fn destinations(
        &self,
        emptied: &[SlabKey],
        vanishing: &[SlabKey],
        free_in_runs: &[u64],
    ) -> Destinations {
        let mut usable: Vec<(SlabKey, u64, u64)> = self
            .blocks
            .iter()
            .filter(|(key, block)| {
                !block.retiring
                    && !block.ranges.is_empty()
                    && !emptied.contains(key)
                    && !vanishing.contains(key)
            })
            .map(|(key, block)| {
                let used = Self::bytes_in_use(block, key.index, free_in_runs);
                (key, used, block.size)
            })
            .collect();
        // Fullest first; the slab index breaks ties.
        usable.sort_unstable_by(|&(a, used_a, size_a), &(b, used_b, size_b)| {
            by_fraction_in_use((used_b, size_b), (used_a, size_a)).then(a.index.cmp(&b.index))
        });
        let mut rank = vec![u32::MAX; self.blocks.index_bound()];
        let mut in_order: [Vec<SlabKey>; 2] = [Vec::new(), Vec::new()];
        for (position, &(key, _, _)) in (0u32..).zip(&usable) {
            rank[key.index as usize] = position;
            if let Some(block) = self.blocks.get(key) {
                in_order[block.class].push(key);
            }
        }
        Destinations { in_order, rank }
    }

    /// Places `request` as [`allocate`](Self::allocate) would in a block,
    /// but only in `destinations`: never in new blocks or dedicated memory.
    pub(super) fn place_outside(
        &mut self,
        request: &PoolRequest<'_>,
        destinations: &Destinations,
    ) -> Option<Placement> {
        debug_assert_eq!(request.dedicated, DedicatedChoice::Never);
        let keys = &destinations.in_order[request.class];
        if let Some(class) = request.run_class {
            let class = usize::from(class);
            let rank = &destinations.rank;
            let rank_of = |key: SlabKey| rank.get(key.index as usize).copied().unwrap_or(u32::MAX);
            // A free slot in the fullest block that has one; but first a new
            // run in a fuller block, if one has room, so that a sparse
            // block's free slots do not take moves it would have to give
            // back when it is emptied in turn.
            let best = self.runs.best_with_room(class, rank_of);
            let before = best.map_or(u32::MAX, |(rank, _)| rank);
            let fuller = &keys[..keys.partition_point(|&key| rank_of(key) < before)];
            let run_request = Self::run_request(request, class);
            let run_range = fuller.iter().find_map(|&key| {
                self.takes_run_in(key, &run_request)
                    .then(|| self.allocate_in_block(key, &run_request))
                    .flatten()
            });
            if let Some(range) = run_range {
                let taken = self.start_run(class, range)?;
                return Some(self.hand_out_slot(taken, request));
            }
            if let Some(taken) = best.and_then(|(_, run)| self.runs.take_in(run)) {
                return Some(self.hand_out_slot(taken, request));
            }
        }
        let placement = self.allocate_in_keys(keys, request)?;
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
}
