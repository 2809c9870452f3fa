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
//! block is tried. With `split_blocks`, what is left of the limits once
//! every pool's whole blocks are planned (the allocator calls
//! [`plan_split`](TypePool::plan_split) after `plan_defragmentation` on them
//! all) goes to the blocks that were over them, emptiest first: as many of
//! each one's allocations as fit, largest first; each retires as a block
//! taken whole does, and later plans move the rest.
//!
//! A block taken is *retiring*: it leaves its class's first-fit walk for
//! the pool's list of retiring blocks, so new requests go elsewhere while
//! other blocks of their class (those made later too) have room, nor a
//! kept empty block of the other class, adopted; only then, before new
//! memory is made, do the retiring blocks take them, in the order they
//! retired (`allocate_in_reserve`). Its runs hand out no more slots, and
//! no new run is carved from it. It empties when the engine
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
//!
//! This file holds the plan's types and the emptying of blocks, whole or in
//! part; `sources` finds the blocks a plan may empty, `destinations` the
//! blocks their moves may go to and places the moves there, and `compact`
//! packs the blocks that stay.

use std::any::Any;
use std::cmp::{Ordering, Reverse};
use std::collections::HashSet;
use std::panic::{self, AssertUnwindSafe};

use super::{DedicatedChoice, Location, Placement, PoolRequest, TypePool};
use crate::device::MemoryDeviceExt;
use crate::memory::context::MemoryContext;
use crate::memory::deferred_log;
use crate::memory::slab::SlabKey;

mod compact;
mod destinations;
mod sources;

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
    /// allocations left for later plans. Each was counted in `over_limits`
    /// by the plan that found it over them, which it no longer is.
    pub(crate) started: usize,
    /// Blocks of `over` that [`plan_split`](TypePool::plan_split) tried
    /// and moved nothing out of for want of room elsewhere, not of limits:
    /// each was counted in `over_limits` by the plan's whole pass, which no
    /// limit would empty now (as a block with nowhere to go).
    pub(crate) no_room: usize,
    /// With `MoveBudget::split`, the blocks counted in `over_limits`,
    /// emptiest first: for [`plan_split`](TypePool::plan_split) to empty
    /// in part once every pool's whole blocks are planned.
    pub(crate) over: Vec<SlabKey>,
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

/// Orders two blocks' `(bytes in use, size)` by the fraction in use,
/// exactly (cross-multiplied, so no division rounds).
fn by_fraction_in_use(a: (u64, u64), b: (u64, u64)) -> Ordering {
    (u128::from(a.0) * u128::from(b.1)).cmp(&(u128::from(b.0) * u128::from(a.1)))
}

/// What [`empty_in_part`](TypePool::empty_in_part) did with a block over
/// the limits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum InPart {
    /// Some of its allocations move: it is being emptied.
    Started,
    /// None moved, and some did not for the limits: a plan with higher
    /// ones might move them.
    OverLimits,
    /// None moved, each for want of room elsewhere: no limit would help.
    NoRoom,
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
    /// Plans moves that empty whole blocks (see the module docs), within
    /// `budget`, which it lowers by what it plans; with `MoveBudget::split`
    /// the blocks over it are left in the plan's `over`, for
    /// [`plan_split`](Self::plan_split). `request_for` gives the
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
        self.stop_retiring_past_min_blocks();
        let free_in_runs = self.free_slot_bytes_by_block();
        let (mut sources, vanishing) = self.blocks_to_empty(movables, leaving, &free_in_runs);
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
        let releasable = self.releasable_blocks();
        for source in sources {
            if self.keeps_for_min_blocks(source.key, &emptied, releasable) {
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
                if self.has_destination(source.key, &emptied, &vanishing) {
                    plan.over_limits += 1;
                    if budget.split {
                        plan.over.push(source.key);
                    }
                }
                continue;
            }
            let names = self.names_of(list);
            let requests = move_requests(list, &names, request_for, self.takes_runs());
            emptied.push(source.key);
            let destinations = self.destinations(&emptied, &vanishing, &free_in_runs);
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
        for key in emptied {
            self.retire(key);
        }
        plan
    }

    /// Empties in part (`MoveBudget::split`) the blocks `over`, which
    /// [`plan_defragmentation`](Self::plan_defragmentation) found over the
    /// budget, emptiest first, with what is left of `budget` once every
    /// pool's whole blocks are planned: the emptiest block over it takes
    /// what is left (then the next, should the first take little). Each
    /// such block retires, and counts in the plan's `started`. A block
    /// that no longer holds only `movables` and `leaving` (it took moves
    /// since, or another thread allocated in it) is passed over.
    ///
    /// Costs the pass over the pool's blocks and runs of
    /// `plan_defragmentation` again, then for each block started a sort of
    /// the blocks that may take its moves and a first fit for each move.
    pub(crate) fn plan_split(
        &mut self,
        movables: &[PoolMovable],
        leaving: &[(Location, u64)],
        over: &[SlabKey],
        budget: &mut MoveBudget,
        request_for: &impl Fn(usize) -> PoolRequest<'static>,
    ) -> PoolPlan {
        let mut plan = PoolPlan::default();
        if over.is_empty() || budget.moves == 0 || budget.bytes == 0 {
            return plan;
        }
        let free_in_runs = self.free_slot_bytes_by_block();
        let (mut sources, vanishing) = self.blocks_to_empty(movables, leaving, &free_in_runs);
        // The emptiest first, as the plan found them.
        sources.retain(|source| over.contains(&source.key));
        sources.sort_by_key(|source| over.iter().position(|&key| key == source.key));
        // The whole blocks the plan took are retiring: counted out.
        let releasable = self.releasable_blocks();
        let mut emptied: Vec<SlabKey> = Vec::new();
        let mut received: HashSet<SlabKey> = HashSet::new();
        for source in sources {
            if budget.moves == 0 || budget.bytes == 0 {
                break;
            }
            if self.keeps_for_min_blocks(source.key, &emptied, releasable) {
                continue;
            }
            if received.contains(&source.key) {
                continue;
            }
            match self.empty_in_part(
                &source,
                budget,
                request_for,
                (&free_in_runs, &vanishing),
                &mut emptied,
                &mut received,
                &mut plan,
            ) {
                InPart::Started => plan.started += 1,
                InPart::NoRoom => plan.no_room += 1,
                InPart::OverLimits => {}
            }
        }
        for key in emptied {
            self.retire(key);
        }
        plan
    }

    /// How many blocks a plan may start emptying in a custom pool that keeps
    /// `min_blocks`: no more than it holds above them, besides those
    /// retiring already (which it may go on emptying: they are counted out
    /// already). See [`keeps_for_min_blocks`](Self::keeps_for_min_blocks).
    fn releasable_blocks(&self) -> u64 {
        (self.counters.blocks)
            .saturating_sub(self.counters.retiring_blocks)
            .saturating_sub(self.policy.min_blocks)
    }

    /// Whether block `key` must stay for the pool's `min_blocks`: it is not
    /// retiring, and the blocks of `emptied` not retiring yet already take
    /// the `releasable` ([`releasable_blocks`](Self::releasable_blocks)
    /// before the pass).
    fn keeps_for_min_blocks(&self, key: SlabKey, emptied: &[SlabKey], releasable: u64) -> bool {
        let newly = emptied
            .iter()
            .filter(|key| self.blocks.get(**key).is_some_and(|block| !block.retiring))
            .count() as u64;
        let retiring = self.blocks.get(key).is_some_and(|block| block.retiring);
        self.policy.min_blocks > 0 && !retiring && newly >= releasable
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
                // allocations before, so no memory is released. Never
                // logged as made (`Config::log_allocations`), its free
                // is not either.
                unsafe { self.free_unlogged(context, placement.location, size) }
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

    /// Moves what `budget` allows of `source`'s movables, largest first
    /// (skipping those over the bytes left or with no room elsewhere), and
    /// counts them in `plan`; the block joins `emptied`, to retire, and the
    /// destinations' blocks join `received`. Returns whether anything
    /// moved, and when not, whether the limits or the room elsewhere
    /// stopped it; nothing changes when not.
    #[allow(clippy::too_many_arguments)]
    fn empty_in_part(
        &mut self,
        source: &Source,
        budget: &mut MoveBudget,
        request_for: &impl Fn(usize) -> PoolRequest<'static>,
        (free_in_runs, vanishing): (&[u64], &[SlabKey]),
        emptied: &mut Vec<SlabKey>,
        received: &mut HashSet<SlabKey>,
        plan: &mut PoolPlan,
    ) -> InPart {
        let names = self.names_of(&source.movables);
        let requests = move_requests(&source.movables, &names, request_for, self.takes_runs());
        emptied.push(source.key);
        let destinations = self.destinations(emptied, vanishing, free_in_runs);
        let mut moved = false;
        // Whether a move was left out for the limits, not for room.
        let mut limited = false;
        for (index, request, bytes) in &requests {
            if budget.moves == 0 {
                limited = true;
                break;
            }
            if *bytes > budget.bytes {
                limited = true;
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
        if moved {
            InPart::Started
        } else {
            emptied.pop();
            if limited {
                InPart::OverLimits
            } else {
                InPart::NoRoom
            }
        }
    }

    /// The names of `list`'s allocations, copied out: each destination
    /// takes its source's, and placing changes the maps that hold them.
    fn names_of(&self, list: &[PoolMovable]) -> Vec<Option<Box<str>>> {
        list.iter()
            .map(|movable| self.name_at(movable.location).map(Into::into))
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

    /// Ends the retirement of block `key`, when it is retiring: a move out
    /// of it was given up, so it cannot empty, or it emptied in a custom
    /// pool at its `min_blocks`, which keeps it
    /// ([`block_emptied`](Self::block_emptied)), or a plan found that pool
    /// unable to release it (`stop_retiring_past_min_blocks`). It goes back
    /// to the first-fit walk (after the blocks there) and takes requests
    /// and moves again, and its runs reopen.
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
        // An empty block holds no run (a run is one of its ranges): the
        // walk over the pool's runs would find none.
        let has_runs = !block.ranges.is_empty();
        self.retiring[class].retain(|&other| other != key);
        self.order[class].push(key);
        if has_runs {
            self.runs.reopen_in_block(key);
        }
    }

    /// Marks block `key` retiring (module docs): out of the first-fit walk,
    /// last among the retiring blocks of its class (also when it was
    /// retiring already: a later plan goes on emptying it), its runs closed
    /// to new slots.
    fn retire(&mut self, key: SlabKey) {
        let Some(block) = self.blocks.get_mut(key) else {
            return;
        };
        let class = block.class;
        if block.retiring {
            self.retiring[class].retain(|&other| other != key);
        } else {
            block.retiring = true;
            self.counters.retiring_blocks += 1;
            self.order[class].retain(|&other| other != key);
        }
        self.retiring[class].push(key);
        self.runs.retire_in_block(key);
    }
}
