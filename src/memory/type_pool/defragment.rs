//! Defragmentation planning in one memory type: which blocks to empty, and
//! where their allocations go.
//!
//! A block can be emptied when every live allocation in it is movable (the
//! engine can recreate its resource elsewhere and copy the contents) or a
//! free waiting in the frame queue, and it is no fuller than the plan's
//! limit (half, by default), the queued frees' bytes counting as free. Such blocks are
//! tried emptiest first (the smallest fraction in use: the most bytes
//! released per byte copied; a run's free slots count as free). Each one's
//! allocations are placed, largest first, in the other blocks of their
//! granularity class that hold something already, fullest first (weighed
//! the same way), so that sparse blocks stay sparse for the next block to
//! empty instead of taking moves that would move again: never in a new
//! block, an empty one (moving into it would only swap one block for
//! another), one this plan empties, or one an earlier plan is still
//! emptying. A block is taken only when all of its allocations fit within
//! the plan's limits; otherwise its placements are undone and the next
//! block is tried. With `split_blocks`, what is left of the limits then
//! goes to the blocks that were over them, emptiest first: as many of each
//! one's allocations as fit, largest first; each retires as a block taken
//! whole does, and later plans move the rest.
//!
//! A block taken is *retiring*: it moves to the back of its class's
//! first-fit order, and blocks made later are listed before it, so new
//! requests go elsewhere while other blocks have room; its runs hand out
//! no more slots, and no new run is carved from it. It empties when the engine
//! frees the moved allocations, and is then released at once: not kept
//! for reuse, as blocks emptied by other frees may be
//! (but for a custom pool's `min_blocks`).
//! Kept, it gave nothing back until `trim`, and the next requests filled
//! it again (the peers benchmark's `--defragment` replay).
//! An engine that never frees them leaves the block retiring; it keeps
//! serving requests that fit nowhere else, and a later plan may empty it.
//!
//! With `MoveBudget::compact`, what is left of the budget once every pool's
//! blocks are planned to empty (the allocator calls
//! [`compact`](TypePool::compact) after `plan_defragmentation` on them all)
//! packs the blocks that stay (neither retiring nor emptied): in each, from the
//! highest offset down, a listed allocation in a range of its own moves to
//! the lowest free place of its block that ends at or before its offset
//! (`OffsetAllocator::allocate_in_gap` in the range chosen from one pass
//! over the block's ranges), when its old place then joins free
//! space (a move that would only carry a hole upward is not made). Once
//! those moves are carried out, the freed sources join the free ranges
//! around them.

use std::any::Any;
use std::cmp::{Ordering, Reverse};
use std::collections::HashSet;
use std::panic::{self, AssertUnwindSafe};

use super::allocate::{grow_slot_table, record_range};
use super::{DedicatedChoice, Location, Placement, PoolRequest, TypePool};
use crate::device::MemoryDeviceExt;
use crate::memory::block::Block;
use crate::memory::context::MemoryContext;
use crate::memory::deferred_log;
use crate::memory::slab::SlabKey;
use crate::offset::{AllocationId, OffsetAllocator};

/// An allocation the engine can move, as its memory type sees it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct PoolMovable {
    /// Its index in the engine's list, handed back with its move.
    pub(crate) index: usize,
    /// Where it is now.
    pub(crate) location: Location,
    /// Its offset in its memory object: live allocations of one block have
    /// distinct offsets, so equal ones are the same allocation listed twice.
    pub(crate) offset: u64,
    /// Its size now: the bytes its move copies.
    pub(crate) size: u64,
}

/// What a plan may still move, over all memory types.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct MoveBudget {
    pub(crate) moves: usize,
    pub(crate) bytes: u64,
    /// Only blocks at most this percent in use (0..=100) are emptied.
    pub(crate) used_percent: u8,
    /// Whether a block over what is left may be emptied in part, the rest
    /// left to later plans.
    pub(crate) split: bool,
    /// Whether what is left then packs the allocations of the blocks that
    /// stay toward their blocks' starts.
    pub(crate) compact: bool,
}

/// The moves planned in one memory type.
#[derive(Debug, Default)]
pub(crate) struct PoolPlan {
    /// Each move: the movable's index, its new place and the block it
    /// leaves.
    pub(crate) moves: Vec<(usize, Placement, SlabKey)>,
    /// Blocks that empty once every moved allocation is freed.
    pub(crate) blocks: usize,
    /// Their bytes.
    pub(crate) bytes: u64,
    /// The moved allocations' sizes.
    pub(crate) bytes_moved: u64,
    /// Blocks skipped because their moves exceeded what was left of the
    /// budget's moves or bytes.
    pub(crate) over_limits: usize,
    /// Blocks emptied in part (`MoveBudget::split`): retiring, with
    /// allocations left for later plans.
    pub(crate) started: usize,
    /// Blocks some of whose allocations move lower in the same block
    /// (`MoveBudget::compact`).
    pub(crate) compacted: usize,
    /// A backend's panic in the debug work on the placements the plan
    /// undid ([`undo_placements`](TypePool::undo_placements)), to go on
    /// once the caller has given up the moves planned before it: the plan
    /// stopped there.
    pub(crate) panic: Option<Box<dyn Any + Send>>,
}

/// The requests of `list`'s moves, named `names`, largest first: each with
/// its movable's index and the bytes its move copies. Small buffers take
/// run slots only when `runs` ([`TypePool::takes_runs`]).
fn move_requests<'n>(
    list: &[PoolMovable],
    names: &'n [Option<Box<str>>],
    request_for: &impl Fn(usize) -> PoolRequest<'static>,
    runs: bool,
) -> Vec<(usize, PoolRequest<'n>, u64)> {
    let mut requests: Vec<_> = list
        .iter()
        .zip(names)
        .map(|(movable, name)| {
            let mut request = request_for(movable.index);
            request.name = name.as_deref();
            request.dedicated = DedicatedChoice::Never;
            if !runs {
                request.run_class = None;
            }
            (movable.index, request, movable.size)
        })
        .collect();
    requests.sort_by_key(|(_, request, _)| Reverse(request.placed_size));
    requests
}

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

/// Orders two blocks' `(bytes in use, size)` by the fraction in use,
/// exactly (cross-multiplied, so no division rounds).
fn by_fraction_in_use(a: (u64, u64), b: (u64, u64)) -> Ordering {
    (u128::from(a.0) * u128::from(b.1)).cmp(&(u128::from(b.0) * u128::from(a.1)))
}

/// Where a source block's moves may go.
#[derive(Debug)]
struct Destinations {
    /// By granularity class, the usable blocks, fullest first.
    in_order: [Vec<SlabKey>; 2],
    /// By block slab index, the block's place in that order; `u32::MAX`
    /// for a block that takes no moves.
    rank: Vec<u32>,
}

/// A block a plan may empty: every live allocation in it is movable.
#[derive(Debug)]
struct Source {
    key: SlabKey,
    /// Bytes in use.
    used: u64,
    size: u64,
    /// Its movables, each allocation once.
    movables: Vec<PoolMovable>,
}

impl<M> TypePool<M> {
    /// Plans moves that empty blocks, whole or (`MoveBudget::split`) in
    /// part (see the module docs), within
    /// `budget`, which it lowers by what it plans. `request_for` gives the
    /// new place of a movable (by its index) as a request; it is asked for
    /// the movables of the blocks within the used percent, and again for
    /// those of the blocks being tried. The destinations are live
    /// allocations of this pool from then on, named as their sources.
    ///
    /// `leaving` are this pool's allocations whose frees wait in the frame
    /// queue, with their sizes: they need no move, and a block holding them
    /// and movables only is emptied (it empties when they are released).
    ///
    /// Costs O(n log n) in the `movables` listed plus a pass over the
    /// pool's blocks and runs, before any move: no hashing per movable.
    /// Each block tried then costs a sort of the blocks that may take its
    /// moves ([`destinations`](Self::destinations)), each checked against
    /// the blocks emptied so far.
    pub(crate) fn plan_defragmentation<D: MemoryDeviceExt<M>>(
        &mut self,
        context: &MemoryContext<D>,
        movables: &[PoolMovable],
        leaving: &[(Location, u64)],
        budget: &mut MoveBudget,
        request_for: &impl Fn(usize) -> PoolRequest<'static>,
    ) -> PoolPlan {
        let mut plan = PoolPlan::default();
        let free_in_runs = self.free_slot_bytes_by_block();
        let mut sources = self.blocks_to_empty(movables, leaving, &free_in_runs);
        // The percent chooses the blocks to start; a block a split plan
        // started goes on whatever it is (retiring, it takes no requests:
        // passed over, it stayed retiring, its memory out of use).
        let percent = u128::from(budget.used_percent);
        sources.retain(|source| {
            u128::from(source.used) * 100 <= u128::from(source.size) * percent
                || self
                    .blocks
                    .get(source.key)
                    .is_some_and(|block| block.retiring)
        });
        // A block holding an allocation that must have dedicated memory to
        // move (a resource of unknown kind where the granularity is not a
        // power of two) never empties: it is tried neither whole nor in
        // part, nor counted over the limits.
        sources.retain(|source| {
            let stays = |movable: &PoolMovable| {
                request_for(movable.index).dedicated == DedicatedChoice::Require
            };
            !source.movables.iter().any(stays)
        });
        if sources.is_empty() {
            return plan;
        }
        // The emptiest first, by the fraction of the block in use: the most
        // bytes released per byte copied. The slab index breaks ties.
        sources.sort_unstable_by(|a, b| {
            by_fraction_in_use((a.used, a.size), (b.used, b.size))
                .then(a.key.index.cmp(&b.key.index))
        });

        let mut emptied: Vec<SlabKey> = Vec::new();
        let mut received: HashSet<SlabKey> = HashSet::new();
        // Blocks over the budget, emptiest first, to split when it allows.
        let mut over: Vec<Source> = Vec::new();
        // A custom pool keeps its min_blocks: a plan starts emptying no more
        // blocks than it holds above them, besides those retiring already
        // (which it may go on emptying: they are counted out already).
        let releasable = (self.counters.blocks)
            .saturating_sub(self.counters.retiring_blocks)
            .saturating_sub(self.policy.min_blocks);
        let over_min_blocks = |this: &Self, key: SlabKey, emptied: &[SlabKey]| {
            let newly = emptied
                .iter()
                .filter(|key| this.blocks.get(**key).is_some_and(|block| !block.retiring))
                .count() as u64;
            let retiring = this.blocks.get(key).is_some_and(|block| block.retiring);
            this.policy.min_blocks > 0 && !retiring && newly >= releasable
        };
        for source in sources {
            if over_min_blocks(self, source.key, &emptied) {
                continue;
            }
            // A block that took moves holds allocations nobody can move.
            if received.contains(&source.key) {
                continue;
            }
            let list = &source.movables;
            let bytes: u64 = list.iter().map(|movable| movable.size).sum();
            if list.len() > budget.moves || bytes > budget.bytes {
                // Over the limits, unless no limit would help: with nowhere
                // to go, the block is not counted.
                if self.has_destination(source.key, &emptied) {
                    plan.over_limits += 1;
                    if budget.split {
                        over.push(source);
                    }
                }
                continue;
            }
            let names = self.names_of(list);
            let requests = move_requests(list, &names, request_for, self.takes_runs());
            emptied.push(source.key);
            let destinations = self.destinations(&emptied, &free_in_runs);
            let mut placed: Vec<(usize, Placement, u64)> = Vec::with_capacity(list.len());
            for (index, request, _) in &requests {
                let Some(placement) = self.place_outside(request, &destinations) else {
                    break;
                };
                placed.push((*index, placement, request.size));
            }
            if placed.len() < list.len() {
                emptied.pop();
                if let Err(payload) = self.undo_placements(context, placed) {
                    // The pool is consistent; the moves planned so far are
                    // the caller's to give up.
                    plan.panic = Some(payload);
                    for key in emptied {
                        self.retire(key);
                    }
                    return plan;
                }
                continue;
            }
            for (index, placement, _) in placed {
                if let Some(block) = self.block_of(placement.location) {
                    received.insert(block);
                }
                plan.moves.push((index, placement, source.key));
            }
            budget.moves -= list.len();
            budget.bytes -= bytes;
            plan.blocks += 1;
            plan.bytes += source.size;
            plan.bytes_moved += bytes;
        }
        // What is left of the budget goes to the emptiest block over it,
        // moved in part (then the next, should the first take little).
        for source in over {
            if budget.moves == 0 || budget.bytes == 0 {
                break;
            }
            if over_min_blocks(self, source.key, &emptied) {
                continue;
            }
            if received.contains(&source.key) {
                continue;
            }
            if self.empty_in_part(
                &source,
                budget,
                request_for,
                &free_in_runs,
                &mut emptied,
                &mut received,
                &mut plan,
            ) {
                plan.over_limits -= 1;
                plan.started += 1;
            }
        }
        for key in emptied {
            self.retire(key);
        }
        plan
    }

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

    /// Frees `placed`, the destinations of a source block's moves placed
    /// by [`plan_defragmentation`](Self::plan_defragmentation) and given
    /// up because the block's other moves did not fit. With debug fills,
    /// each is first checked to read the freed pattern still
    /// ([`check_undone`](Self::check_undone)): handed to nobody, it was
    /// neither checked nor filled, and its free fills it again. A write
    /// after free found is logged once the call releases its locks
    /// (`deferred_log`). A backend panicking in that work (a flush or an
    /// invalidate, in a non-coherent type) does not stop the others'
    /// undoing; the first panic is returned once all are freed.
    #[cold]
    fn undo_placements<D: MemoryDeviceExt<M>>(
        &mut self,
        context: &MemoryContext<D>,
        placed: Vec<(usize, Placement, u64)>,
    ) -> std::thread::Result<()> {
        let mut first_panic = None;
        let fills = context.fills(self.memory_type);
        for (_, placement, size) in placed {
            let mut line = None;
            if fills {
                match panic::catch_unwind(AssertUnwindSafe(|| {
                    self.check_undone(context, &placement)
                })) {
                    Ok(found) => line = found,
                    Err(payload) => {
                        first_panic.get_or_insert(payload);
                    }
                }
            }
            // Unwind safety: a free updates the pool before anything that
            // can panic (`free_debug` catches the fill's flush).
            let freed = panic::catch_unwind(AssertUnwindSafe(|| {
                // SAFETY: placed just now and handed to nobody: no
                // resource is bound to it. Its block held other
                // allocations before, so no memory is released.
                unsafe { self.free(context, placement.location, size) }
            }));
            match freed {
                Ok(undone) => debug_assert!(undone.is_ok()),
                Err(payload) => {
                    first_panic.get_or_insert(payload);
                }
            }
            if let Some(line) = line {
                deferred_log::log(log::Level::Error, line);
            }
        }
        first_panic.map_or(Ok(()), Err)
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

    /// Moves what `budget` allows of `source`'s movables, largest first
    /// (skipping those over the bytes left or with no room elsewhere), and
    /// counts them in `plan`; the block joins `emptied`, to retire, and the
    /// destinations' blocks join `received`. Returns whether anything
    /// moved; nothing changes when not.
    #[allow(clippy::too_many_arguments)]
    fn empty_in_part(
        &mut self,
        source: &Source,
        budget: &mut MoveBudget,
        request_for: &impl Fn(usize) -> PoolRequest<'static>,
        free_in_runs: &[u64],
        emptied: &mut Vec<SlabKey>,
        received: &mut HashSet<SlabKey>,
        plan: &mut PoolPlan,
    ) -> bool {
        let names = self.names_of(&source.movables);
        let requests = move_requests(&source.movables, &names, request_for, self.takes_runs());
        emptied.push(source.key);
        let destinations = self.destinations(emptied, free_in_runs);
        let mut moved = false;
        for (index, request, bytes) in &requests {
            if budget.moves == 0 {
                break;
            }
            if *bytes > budget.bytes {
                continue;
            }
            let Some(placement) = self.place_outside(request, &destinations) else {
                continue;
            };
            if let Some(block) = self.block_of(placement.location) {
                received.insert(block);
            }
            plan.moves.push((*index, placement, source.key));
            budget.moves -= 1;
            budget.bytes -= bytes;
            plan.bytes_moved += bytes;
            moved = true;
        }
        if !moved {
            emptied.pop();
        }
        moved
    }

    /// Whether block `source` has a block its allocations could go to:
    /// another of its granularity class that holds something and is not
    /// being emptied (by `emptied` or an earlier plan).
    fn has_destination(&self, source: SlabKey, emptied: &[SlabKey]) -> bool {
        let Some(class) = self.blocks.get(source).map(|block| block.class) else {
            return false;
        };
        self.order[class].iter().any(|&key| {
            key != source
                && !emptied.contains(&key)
                && self
                    .blocks
                    .get(key)
                    .is_some_and(|block| !block.retiring && !block.ranges.is_empty())
        })
    }

    /// The names of `list`'s allocations, copied out: each destination
    /// takes its source's, and placing changes the maps that hold them.
    fn names_of(&self, list: &[PoolMovable]) -> Vec<Option<Box<str>>> {
        list.iter()
            .map(|movable| self.name_at(movable.location).map(Into::into))
            .collect()
    }

    /// By block slab index, the bytes of the free slots of its runs, which
    /// its offset allocator counts as in use.
    fn free_slot_bytes_by_block(&self) -> Vec<u64> {
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
    fn bytes_in_use(block: &Block<M>, index: u32, free_in_runs: &[u64]) -> u64 {
        let used = block.size - block.ranges.free_bytes();
        used.saturating_sub(free_in_runs.get(index as usize).copied().unwrap_or(0))
    }

    /// The blocks whose every live allocation is among `movables` or
    /// `leaving` (frees waiting for their frame), with their movables (each
    /// allocation once).
    fn blocks_to_empty(
        &self,
        movables: &[PoolMovable],
        leaving: &[(Location, u64)],
        free_in_runs: &[u64],
    ) -> Vec<Source> {
        // Movables by block slab index.
        let mut by_block: Vec<Vec<PoolMovable>> = Vec::new();
        by_block.resize_with(self.blocks.index_bound(), Vec::new);
        for movable in movables {
            if let Some(block) = self.block_of(movable.location) {
                by_block[block.index as usize].push(*movable);
            }
        }
        // Queued frees by block: their count and bytes (still live, so
        // counted in use until released).
        let mut gone: Vec<(u64, u64)> = vec![(0, 0); by_block.len()];
        for &(location, size) in leaving {
            if let Some(block) = self.block_of(location) {
                let entry = &mut gone[block.index as usize];
                entry.0 += 1;
                // What it holds in the block: margin and padding included.
                entry.1 += self.held_bytes(location).unwrap_or(size);
            }
        }
        // Live allocations by block: its ranges, a run counting as its live
        // slots instead of one.
        let mut live: Vec<u64> = vec![0; by_block.len()];
        for (key, block) in self.blocks.iter() {
            if !by_block[key.index as usize].is_empty() {
                live[key.index as usize] = block.ranges.counters().live_allocations;
            }
        }
        for (_, run) in self.runs.iter() {
            let index = run.block.index as usize;
            if live[index] > 0 {
                live[index] = (live[index] + u64::from(run.live_slots())).saturating_sub(1);
            }
        }
        self.blocks
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
            .collect()
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

    /// The blocks moves may go to while `emptied` are being emptied: those
    /// that hold something, are not in `emptied` and are not retiring;
    /// fullest first (by fraction in use, weighed as sources are: a run's
    /// free slots, `free_in_runs`, count as free), so that moves fill the
    /// blocks least likely to be emptied next and leave sparse ones sparse.
    /// They stay so while one source block's moves are placed (placing only
    /// adds, and the order needs to be no more than a good guess: the free
    /// slots are those before the plan), so this is made once per source
    /// block.
    fn destinations(&self, emptied: &[SlabKey], free_in_runs: &[u64]) -> Destinations {
        let mut usable: Vec<(SlabKey, u64, u64)> = self
            .blocks
            .iter()
            .filter(|(key, block)| {
                !block.retiring && !block.ranges.is_empty() && !emptied.contains(key)
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
    fn place_outside(
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

    /// Ends the retirement of block `key`, when it is retiring: a move out
    /// of it was given up, so it cannot empty. It takes requests (before
    /// the blocks still retiring) and moves again, and its runs reopen.
    pub(crate) fn stop_retiring(&mut self, key: SlabKey) {
        let Some(block) = self.blocks.get_mut(key) else {
            return;
        };
        if !block.retiring {
            return;
        }
        block.retiring = false;
        self.counters.retiring_blocks -= 1;
        let class = block.class;
        self.order[class].retain(|&other| other != key);
        self.list_block(class, key);
        self.runs.reopen_in_block(key);
    }

    /// Marks block `key` retiring (module docs): last in first-fit order,
    /// its runs closed to new slots.
    fn retire(&mut self, key: SlabKey) {
        let Some(block) = self.blocks.get_mut(key) else {
            return;
        };
        if !block.retiring {
            self.counters.retiring_blocks += 1;
        }
        block.retiring = true;
        let order = &mut self.order[block.class];
        order.retain(|&other| other != key);
        order.push(key);
        self.runs.retire_in_block(key);
    }
}
