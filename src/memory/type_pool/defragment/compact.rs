//! Compaction (`MoveBudget::compact`): once every pool's blocks are planned
//! to empty, what is left of the budget packs the allocations of the blocks
//! that stay toward their blocks' starts, each moving down within its own
//! block to the lowest free place that holds it, when its old place then
//! joins free space. It is apart from the emptying of blocks: it moves
//! allocations within a block, never out of one, chooses their places from
//! one pass over the block's free ranges, and places them with
//! `OffsetAllocator::allocate_in_gap`, not the first fit.

use std::cmp::Reverse;

use super::{MoveBudget, PoolMovable, PoolPlan};
use crate::memory::slab::SlabKey;
use crate::memory::type_pool::allocate::{grow_slot_table, record_range};
use crate::memory::type_pool::{DedicatedChoice, Location, Placement, PoolRequest, TypePool};
use crate::offset::{AllocationId, OffsetAllocator};

/// A free range of a block, and the range it follows (`None`: it starts
/// the block), which places into it
/// ([`OffsetAllocator::allocate_in_gap`](crate::offset::OffsetAllocator::allocate_in_gap)).
#[derive(Clone, Copy, Debug)]
struct OwnedRange {
    start: u64,
    end: u64,
    owner: Option<AllocationId>,
}

/// The free ranges of `ranges` in address order, each with the range it
/// follows: one pass over its ranges.
fn free_ranges_with_owners(ranges: &OffsetAllocator) -> Vec<OwnedRange> {
    ranges
        .free_ranges_after()
        .map(|(owner, range)| OwnedRange {
            start: range.offset,
            end: range.offset + range.size,
            owner,
        })
        .collect()
}

impl<M> TypePool<M> {
    /// Packs the listed allocations of the blocks that stay (neither
    /// retiring nor emptied) toward their blocks' starts, within `budget`:
    /// in each block, from the highest offset down, each allocation in a
    /// range of its own moves to the lowest place in its block that holds
    /// it and ends at or before its offset, when its old place then joins
    /// free space ([`move_joins_free_space`](Self::move_joins_free_space)).
    /// Once those moves are carried out, their old places join the free
    /// ranges around them (one range at the block's end when every
    /// allocation above the last hole moved).
    /// Run slots stay (their run is one range of the block, which does not
    /// move).
    ///
    /// Costs a pass over the pool's blocks, and per block with listed
    /// allocations a pass over its ranges, then for each listed allocation
    /// a look at the block's free ranges below it; each move is then
    /// O(1) in the block ([`OffsetAllocator::allocate_in_gap`] in the range
    /// it chose), and cuts the range it took in that list of free ranges.
    pub(crate) fn compact(
        &mut self,
        movables: &[PoolMovable],
        budget: &mut MoveBudget,
        request_for: &impl Fn(usize) -> PoolRequest<'static>,
    ) -> PoolPlan {
        let mut plan = PoolPlan::default();
        // Movables in ranges of their own, by block slab index.
        let mut by_block: Vec<Vec<PoolMovable>> = Vec::new();
        by_block.resize_with(self.blocks.index_bound(), Vec::new);
        for movable in movables {
            if let Location::Block { block, range } = movable.location {
                let live = self
                    .blocks
                    .get(block)
                    .is_some_and(|b| !b.retiring && b.ranges.get(range).is_some());
                if live {
                    by_block[block.index as usize].push(*movable);
                }
            }
        }
        let keys: Vec<SlabKey> = self.order.iter().flatten().copied().collect();
        for key in keys {
            let mut list = std::mem::take(&mut by_block[key.index as usize]);
            if list.is_empty() {
                continue;
            }
            // Highest first; an allocation listed twice moves once.
            list.sort_by_key(|movable| Reverse(movable.offset));
            list.dedup_by_key(|movable| movable.offset);
            let names = self.names_of(&list);
            let Some(block) = self.blocks.get(key) else {
                continue;
            };
            let class = block.class;
            let mut free = free_ranges_with_owners(&block.ranges);
            let mut moved = false;
            // The old place of the allocation moved last, the lowest moved
            // so far: free once the moves are carried out.
            let mut vacated: Option<u64> = None;
            for (movable, name) in list.iter().zip(&names) {
                if budget.moves == 0 {
                    break;
                }
                // Nothing is free below this one, nor below those after it.
                if free
                    .first()
                    .map_or(true, |range| range.start >= movable.offset)
                {
                    break;
                }
                if movable.size > budget.bytes {
                    continue;
                }
                let mut request = request_for(movable.index);
                request.name = name.as_deref();
                request.run_class = None;
                // Not into a block: a resource of unknown kind where the
                // granularity is not a power of two.
                if request.class != class || request.dedicated == DedicatedChoice::Require {
                    continue;
                }
                request.dedicated = DedicatedChoice::Never;
                let (size, align) = (request.placed_size, request.align);
                // The lowest place below it that holds it.
                let lowest = free
                    .iter()
                    .enumerate()
                    .take_while(|(_, range)| range.start < movable.offset)
                    .find_map(|(i, range)| {
                        let at = range.start.checked_next_multiple_of(align)?;
                        let fits = at.checked_add(size)? <= range.end.min(movable.offset);
                        fits.then_some((i, at))
                    });
                let Some((i, at)) = lowest else {
                    continue;
                };
                if !self.move_joins_free_space(key, movable.location, at + size, vacated) {
                    continue;
                }
                let owner = free[i].owner;
                let Some((placement, range)) = self.allocate_in_block_gap(key, &request, owner)
                else {
                    continue;
                };
                debug_assert_eq!(placement.offset, at);
                let placement = self.count(placement, &request);
                plan.moves.push((movable.index, placement, key));
                budget.moves -= 1;
                budget.bytes -= movable.size;
                plan.bytes_moved += movable.size;
                moved = true;
                vacated = Some(movable.offset);
                // The free range it took is cut as the offset allocator
                // cut it: the head slack stays its owner's, the rest
                // follows the destination. Ranges from this one's offset up
                // no longer matter (those after it are lower).
                let taken = free[i];
                let pieces = [
                    OwnedRange { end: at, ..taken },
                    OwnedRange {
                        start: at + size,
                        end: taken.end,
                        owner: Some(range),
                    },
                ];
                free.splice(i..=i, pieces.into_iter().filter(|r| r.start < r.end));
                free.truncate(free.partition_point(|r| r.start < movable.offset));
            }
            plan.compacted += usize::from(moved);
        }
        plan
    }

    /// Whether moving the allocation at `location` (a range of block
    /// `key`) to a place ending at `destination_end` makes the block's free
    /// space more contiguous: its old place joins free space that the move
    /// leaves free. That is the free range right after it, or the old place
    /// of the allocation above it when that moves too (`vacated`), or the
    /// free range right before it when the destination lies wholly below
    /// that range. Otherwise the move would only carry a hole upward: a
    /// copy for nothing.
    fn move_joins_free_space(
        &self,
        key: SlabKey,
        location: Location,
        destination_end: u64,
        vacated: Option<u64>,
    ) -> bool {
        let Location::Block { range, .. } = location else {
            return false;
        };
        let Some(ranges) = self.blocks.get(key).map(|block| &block.ranges) else {
            return false;
        };
        let (Some(held), Some((before, after))) = (ranges.get(range), ranges.gaps_around(range))
        else {
            return false;
        };
        after > 0
            || vacated == Some(held.end())
            || (before > 0 && destination_end <= held.offset - before)
    }

    /// Places `request` in block `key` as
    /// [`allocate_in_block`](Self::allocate_in_block) does, but at the lowest
    /// offset of the free range after the range `after` (`None`: the
    /// block's first free range), a compaction's move; not counted (see
    /// [`count`](Self::count)). Returns the placement and its range.
    fn allocate_in_block_gap(
        &mut self,
        key: SlabKey,
        request: &PoolRequest<'_>,
        after: Option<AllocationId>,
    ) -> Option<(Placement, AllocationId)> {
        let block = self.blocks.get_mut(key)?;
        if !block.ranges.has_unused_slot() {
            grow_slot_table(&mut block.ranges)?;
        }
        let allocation = block
            .ranges
            .allocate_in_gap(after, request.placed_size, request.align)
            .ok()??;
        let range = allocation.id;
        let placement = record_range(block, key, range, allocation.offset, request);
        Some((placement, range))
    }
}
