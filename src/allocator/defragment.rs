//! Defragmentation: moves that empty whole blocks, planned by the
//! allocator and carried out by the engine.
//!
//! The allocator cannot move a resource: it does not know the buffer or
//! image bound to an allocation, and it records no commands. So, as in
//! VMA, the engine says which allocations it can move
//! ([`Movable`]), the allocator plans where they go
//! ([`Allocator::plan_defragmentation`]), and the engine creates the new
//! resources, copies the contents and frees the old allocations, through
//! the frame queue when the GPU may still read them. The blocks the plan
//! empties are released as their last allocation is freed.
//!
//! Plans empty whole blocks, as VMA's `FAST` algorithm does, in one plan
//! or, with [`DefragmentationLimits::split_blocks`], over several. With
//! [`DefragmentationLimits::compact_blocks`] they also pack allocations
//! toward the start of the blocks that stay, as the in-block moves of
//! VMA's `BALANCED` and `FULL` algorithms do: that
//! frees no memory, only joins free ranges, for a pool that cannot grow
//! or a lone block full of holes.

use std::any::Any;
use std::collections::HashMap;
use std::panic::{self, AssertUnwindSafe};
use std::sync::Mutex;

use ash::vk;

use super::place::{check_requirements, custom_pool_request, lock, pool_request};
use super::pool::{read, Home, PoolCell, PoolTag};
use super::{Allocation, Allocator, Request};
use crate::device::MemoryDeviceExt;
use crate::frames::Deferred;
use crate::memory::deferred_log;
use crate::memory::slab::SlabKey;
use crate::memory::type_pool::TypePool;
use crate::memory::type_pool::{Location, MoveBudget, PoolMovable};
use crate::memory::{ResourceKind, Usage};
use crate::Error;

/// An allocation the engine can move: it can create its resource again
/// elsewhere and copy the contents over.
#[derive(Clone, Copy, Debug)]
pub struct Movable<'a> {
    /// The allocation now.
    pub allocation: &'a Allocation,
    /// The memory requirements of the resource that will take its place:
    /// those of the current resource when it is created again with the
    /// same parameters (Vulkan reports equal requirements then), with
    /// `alignment` raised to the allocation's
    /// [`AllocationDesc::min_alignment`](crate::AllocationDesc::min_alignment)
    /// when it had one (the allocator does not remember it).
    pub requirements: vk::MemoryRequirements,
    /// What that resource is, for `bufferImageGranularity`: an image's
    /// kind follows its tiling ([`ResourceKind::of_image`]: `LINEAR` is
    /// [`ResourceKind::LinearImage`], `OPTIMAL` [`ResourceKind::OptimalImage`],
    /// a DRM format modifier's [`ResourceKind::Unknown`]). A move for
    /// [`ResourceKind::Unknown`] takes whole pages; where the granularity
    /// is not a power of two such a resource needs dedicated memory, and
    /// no move is planned for it.
    pub kind: ResourceKind,
}

impl<'a> Movable<'a> {
    /// `allocation`, whose resource is recreated with `requirements`.
    pub const fn new(
        allocation: &'a Allocation,
        requirements: vk::MemoryRequirements,
        kind: ResourceKind,
    ) -> Self {
        Self {
            allocation,
            requirements,
            kind,
        }
    }
}

/// How much one plan may move, and which blocks are worth emptying.
///
/// By default a block is emptied entirely or not at all, so a plan stops
/// short of these limits rather than move part of a block;
/// [`split_blocks`](Self::split_blocks) lets plans empty a block over
/// several passes, as VMA's incremental passes do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DefragmentationLimits {
    /// The most allocations moved (VMA's `maxAllocationsPerPass`). No
    /// limit by default.
    pub max_moves: usize,
    /// The most bytes copied, counted as the moved allocations' sizes
    /// (VMA's `maxBytesPerPass`). No limit by default.
    pub max_bytes: u64,
    /// Only blocks with at most this percent of their bytes in use are
    /// emptied: 50 by default, at most one byte copied per two released.
    /// Emptying fuller blocks copies nearly a block to release one, and
    /// where the workload grows back it makes a block again soon after
    /// (the peers benchmark's `--defragment` replay: on `mixed`, plans
    /// with no such limit copied 4.4 GiB and made 34 memory objects where
    /// the plain replay made 4). 100 empties any block that fits elsewhere,
    /// as VMA's `FAST` algorithm does. It chooses the blocks a plan starts
    /// emptying: one an earlier plan started in part
    /// ([`split_blocks`](Self::split_blocks)) goes on whatever its use.
    pub max_used_percent: u8,
    /// Whether a block with more allocations or bytes than what is left of
    /// the limits may be emptied in part: once no other block fits whole,
    /// the rest of the limits goes to such blocks, emptiest first, as many
    /// of each one's allocations as fit; each then retires as an emptied
    /// block does, and later plans listing its allocations again move the
    /// rest ([`DefragmentationPlan::blocks_started`]).
    /// Off by default: under limits smaller than a block's allocations, a
    /// plan then never empties that block (`blocks_over_limits`). On, an
    /// engine that defragments a little every frame makes progress on
    /// blocks of any size.
    pub split_blocks: bool,
    /// Whether what is left of the limits, once no more blocks can be
    /// emptied, packs allocations toward the start of the blocks that stay,
    /// as the in-block moves of VMA's `BALANCED` and `FULL` algorithms do:
    /// in each block, from the highest offset down, a listed allocation in
    /// a range of its own moves to the lowest free place of its block that
    /// holds it and lies wholly below it, when its old place then joins
    /// free space (the free range above it, the old place of the
    /// allocation above it when that moves too, or the free range below it
    /// when the destination is lower still: a move that would only carry a
    /// hole upward is not made)
    /// ([`DefragmentationPlan::blocks_compacted`]). That releases no
    /// memory; it joins a block's free ranges toward one at its end, so
    /// that a request larger than any hole may fit again without a new
    /// block: for a custom pool at its `max_blocks`, or a lone fragmented
    /// block, which no plan can empty. Holes too small for the allocations
    /// above them stay, and so can a hole that would hold an allocation
    /// above it whose move would only carry the hole upward (right above
    /// that allocation is one that stays, not listed, a run of small
    /// buffers or one with no room below, or the block's end; below it, no
    /// free range or only the one its destination would lie in): the free
    /// bytes are one range only when every allocation above the lowest
    /// hole moved. Each move takes the lowest hole that holds it, one at a
    /// time, so the holes left are not always the fewest the moves could
    /// make. Small buffers' run slots stay.
    /// Off by default.
    pub compact_blocks: bool,
}

impl Default for DefragmentationLimits {
    fn default() -> Self {
        Self {
            max_moves: usize::MAX,
            max_bytes: u64::MAX,
            max_used_percent: 50,
            split_blocks: false,
            compact_blocks: false,
        }
    }
}

impl DefragmentationLimits {
    /// At most `moves` allocations moved.
    #[must_use]
    pub const fn max_moves(mut self, moves: usize) -> Self {
        self.max_moves = moves;
        self
    }

    /// At most `bytes` bytes copied.
    #[must_use]
    pub const fn max_bytes(mut self, bytes: u64) -> Self {
        self.max_bytes = bytes;
        self
    }

    /// Only blocks at most `percent` in use are emptied (values above 100
    /// count as 100).
    #[must_use]
    pub const fn max_used_percent(mut self, percent: u8) -> Self {
        self.max_used_percent = percent;
        self
    }

    /// Lets a block over the limits be emptied over several plans.
    #[must_use]
    pub const fn split_blocks(mut self, split: bool) -> Self {
        self.split_blocks = split;
        self
    }

    /// Lets plans pack allocations toward their blocks' starts
    /// ([`compact_blocks`](Self::compact_blocks)).
    #[must_use]
    pub const fn compact_blocks(mut self, compact: bool) -> Self {
        self.compact_blocks = compact;
        self
    }
}

/// One planned move: the movable's new allocation.
#[derive(Debug)]
#[must_use = "a planned move holds its new allocation, which must be used or freed"]
pub struct DefragmentationMove {
    /// Index of the movable in the slice given to
    /// [`plan_defragmentation`](Allocator::plan_defragmentation).
    pub movable: usize,
    /// Where it goes: the same pool (its memory type's default pool, or
    /// its custom pool), another block, or with
    /// [`DefragmentationLimits::compact_blocks`] a lower offset of the same
    /// block, wholly below the moved allocation (so a copy between the two
    /// never overlaps). A live allocation like any other; its name is the
    /// moved allocation's.
    pub destination: Allocation,
    /// The block the move leaves, for [`give_up_move`](Allocator::give_up_move).
    pub(crate) source: SlabKey,
}

/// What [`plan_defragmentation`](Allocator::plan_defragmentation) planned.
///
/// Dropping it, or a move, without using or freeing the destinations leaks
/// them until the allocator is dropped (which logs them), and leaves the
/// source blocks being emptied: give up the moves not carried out
/// ([`Allocator::give_up_move`]).
#[derive(Debug, Default)]
#[non_exhaustive]
#[must_use = "the planned moves hold new allocations, which must be used or freed"]
pub struct DefragmentationPlan {
    /// The moves, by movable index. Empty when no block can be emptied
    /// and (with [`DefragmentationLimits::compact_blocks`]) no listed
    /// allocation can move lower in its block.
    pub moves: Vec<DefragmentationMove>,
    /// Blocks that empty, and are released, once every moved allocation
    /// is freed.
    pub blocks_released: usize,
    /// Their bytes: the memory given back.
    pub bytes_released: u64,
    /// The moved allocations' sizes: what the moves copy, as
    /// [`DefragmentationLimits::max_bytes`] counts it.
    pub bytes_moved: u64,
    /// Blocks whose every allocation was listed, but whose moves exceeded
    /// what was left of the limits' moves or bytes: a plan with higher
    /// limits might empty them. Unless plans split blocks, a block is moved
    /// whole or not at all, so a block with more allocations (or bytes)
    /// than the limits allow is never emptied under them. With no moves and none of these, the movables
    /// listed leave nothing to do (until their blocks change). A plan with
    /// no moves and some of these will stay so under the same limits: raise
    /// them, let plans split blocks, or stop. Not counted: a block emptied
    /// in part, and a block with nowhere to go (no other block of its pool
    /// and `bufferImageGranularity` class holds something and is not being
    /// emptied: a lone fragmented block), which no limit would empty
    /// ([`DefragmentationLimits::compact_blocks`] packs it instead).
    pub blocks_over_limits: usize,
    /// Blocks this plan moves some but not all of the allocations out of,
    /// under [`DefragmentationLimits::split_blocks`]: they are being
    /// emptied (retiring) from then on, and a later plan that lists their
    /// remaining allocations moves more of them (list only those whose
    /// moves were carried out or given up: the others are still live
    /// there). A block emptied over several plans counts here in each plan
    /// but the last, which counts it in `blocks_released`.
    pub blocks_started: usize,
    /// Blocks some of whose allocations move to lower offsets of the same
    /// block ([`DefragmentationLimits::compact_blocks`]): no memory is
    /// released, their free ranges join once the moves are carried out.
    pub blocks_compacted: usize,
}

impl<D: MemoryDeviceExt<M>, M: Send> Allocator<D, M> {
    /// Plans moves of `movables` that empty blocks (whole, or over several
    /// plans with [`DefragmentationLimits::split_blocks`]), as VMA's
    /// defragmentation does, and makes their new allocations.
    ///
    /// A block is emptied when every allocation in it is among `movables`
    /// and it is no fuller than `limits` allow (half by default); the
    /// emptiest (smallest fraction in use) go first. Their allocations
    /// move, in the same pool (the memory type's default pool, or their
    /// custom pool), to blocks that hold other allocations
    /// already, the fullest first (leaving sparse blocks to be emptied in
    /// turn), within `limits`: the plan makes no memory object, so it needs
    /// no budget and cannot run out of memory. Frees still queued for their
    /// frame ([`free_after_frame`](Self::free_after_frame), the moves of an
    /// earlier plan) need no move: a block holding only those and
    /// `movables` is emptied too, and empties once they are released.
    /// Dedicated allocations never move (they have memory of their own),
    /// nor do movables whose `requirements` exclude their memory type; an
    /// allocation listed twice moves once.
    ///
    /// For each move the engine:
    /// 1. creates the resource again and binds it to `destination`;
    /// 2. copies the contents: `vkCmdCopyBuffer`/`vkCmdCopyImage` on the GPU
    ///    (a new image starts `UNDEFINED`: transition it first), or, for
    ///    memory the GPU is not using and the host has mapped
    ///    ([`Allocation::mapped_ptr`] is `Some`), a copy of the
    ///    mapped bytes ([`mapped_slice`](Self::mapped_slice) to
    ///    [`mapped_slice_mut`](Self::mapped_slice_mut); on non-coherent
    ///    memory [`invalidate`](Self::invalidate) the source first and
    ///    [`flush`](Self::flush) the destination after: destinations there
    ///    start on a `nonCoherentAtomSize` boundary, as every allocation does);
    /// 3. frees the old allocation and destroys the old resource once the
    ///    GPU is done with them: [`destroy_buffer_after_frame`](Self::destroy_buffer_after_frame)
    ///    (or `_image_`, or [`free_after_frame`](Self::free_after_frame))
    ///    before the [`end_frame`](Self::end_frame) of the frame whose
    ///    submission holds the copies, or [`free`](Self::free) after waiting
    ///    for that submission;
    /// 4. uses the new resource and allocation from then on, and points
    ///    what referred to the old resource at the new one: descriptor sets,
    ///    and buffer device addresses, which change with the buffer.
    ///
    /// **Exported memory.** An allocation of a pool that exports its memory
    /// ([`PoolDesc::export`](crate::PoolDesc::export)) moves like any other
    /// when listed, to another block of its pool or another offset, and an
    /// importer of its old memory object (CUDA, OpenGL, another process)
    /// keeps reading and writing the old place: the plan cannot tell it.
    /// List such an allocation only when the importer can export and import
    /// the destination anew, before its next use.
    ///
    /// The blocks empty when those frees are released
    /// ([`collect`](Self::collect) after the frame's fence). Until then
    /// [`stats`](Self::stats) counts both the old allocations and the new.
    ///
    /// **Compaction.** With [`DefragmentationLimits::compact_blocks`], what
    /// is left of the limits then packs the listed allocations of the
    /// blocks that stay (not being emptied) toward their starts: a move's
    /// destination is then in the same memory object as its source, wholly
    /// below it, so the copy's source and destination ranges never
    /// overlap. No memory is released; the blocks' free ranges join once
    /// the moves are carried out ([`DefragmentationPlan::blocks_compacted`]).
    ///
    /// An engine that cannot carry out a move gives it up with
    /// [`give_up_move`](Self::give_up_move): its source block then does not
    /// empty, and is no longer treated as being emptied (below).
    ///
    /// List only allocations with no move pending: an allocation whose move
    /// from an earlier plan is neither carried out nor given up is still
    /// live in its block, and a new plan that lists it gives it a second
    /// destination.
    ///
    /// Plan once the workload has settled (after loading or unloading a
    /// level): a block emptied while the engine still allocates more is
    /// soon made again.
    ///
    /// Until they empty, the blocks being emptied take no other plan's
    /// moves, give out no more slots for small buffers, and come last when
    /// new requests look for room: a request lands there only when no other
    /// block can take it, and it keeps the block until it is freed or a
    /// later plan moves it.
    ///
    /// # Errors
    /// Checked for every movable before anything changes, in this order:
    /// each movable in turn, [`Error::ForeignAllocation`] for another
    /// allocator's allocation, then [`Error::ZeroSize`] and
    /// [`Error::AlignmentNotPowerOfTwo`] for bad `requirements`, then
    /// [`Error::StaleAllocation`] when its custom pool was destroyed; once
    /// every movable passed those, [`Error::StaleAllocation`] for one not
    /// live (freed already).
    ///
    /// # Time complexity
    /// O(n log n) in the `n` movables listed, plus a pass over the frame
    /// queue, and per pool with movables a pass over its frees queued for
    /// their frame, its blocks and its runs. Then, for each block it tries,
    /// a sort of the `b` blocks of its pool that may take moves (each
    /// checked against the `e` blocks this plan empties so far: O(b log b +
    /// b·e)), and for each allocation of that block a first fit over those
    /// (for a small buffer, first a pass over its size class's runs with a
    /// free slot, and a first fit for a new run over the blocks fuller than
    /// that slot's); a block over the limits costs the same pass over the
    /// blocks, to tell whether any could take its moves. Each block the
    /// plan starts emptying then leaves its pool's first-fit order and
    /// closes its runs: a pass over the pool's blocks and runs. Compaction
    /// adds, per pool with movables, a pass over its blocks, and per block
    /// with listed allocations a pass over its ranges and a look at its
    /// free ranges below each listed allocation, which each move then cuts.
    pub fn plan_defragmentation(
        &self,
        movables: &[Movable<'_>],
        limits: &DefragmentationLimits,
    ) -> Result<DefragmentationPlan, Error> {
        // Checks first, grouped by pool (the default pool of each memory
        // type, then custom pools) so that each pool is locked once:
        // nothing changes unless every movable passes. Moves stay in their
        // pool.
        let mut groups: Vec<PoolGroup<'_, M>> = (0u32..)
            .zip(self.pools.iter())
            .map(|(memory_type, pool)| PoolGroup {
                memory_type,
                tag: PoolTag::DEFAULT,
                pool: GroupPool::Default(pool),
                indices: Vec::new(),
                pool_movables: Vec::new(),
            })
            .collect();
        let mut custom_groups: HashMap<PoolTag, usize> = HashMap::new();
        for (index, movable) in movables.iter().enumerate() {
            let allocation = movable.allocation;
            self.check_owner(allocation)?;
            check_requirements(&movable.requirements)?;
            let group = match allocation.custom_pool() {
                None => allocation.memory_type() as usize,
                Some(tag) => match custom_groups.get(&tag) {
                    Some(&group) => group,
                    None => {
                        let cell = read(&self.custom).get(tag);
                        groups.push(PoolGroup {
                            memory_type: allocation.memory_type(),
                            tag,
                            pool: GroupPool::Custom(cell.ok_or(Error::StaleAllocation)?),
                            indices: Vec::new(),
                            pool_movables: Vec::new(),
                        });
                        custom_groups.insert(tag, groups.len() - 1);
                        groups.len() - 1
                    }
                },
            };
            let group = groups.get_mut(group).ok_or(Error::StaleAllocation)?;
            group.indices.push(index);
        }
        for group in &groups {
            let indices = &group.indices;
            if indices.is_empty() {
                continue;
            }
            let pool = lock(group.pool.mutex());
            if pool.is_destroyed()
                || !indices
                    .iter()
                    .all(|&index| pool.is_live(movables[index].allocation.location))
            {
                return Err(Error::StaleAllocation);
            }
        }

        // Frees waiting for their frame need no move: a block holding them
        // and movables only is emptied too (it empties once they are
        // released). Copied out, the queue's lock released before any pool's.
        let queued: Vec<(u32, PoolTag, Location, u64)> = lock(&self.frames)
            .iter()
            .filter_map(Deferred::allocation)
            .filter(|allocation| allocation.allocator == self.id && !allocation.is_dedicated())
            .map(|a| (a.memory_type(), a.home.pool(), a.location, a.size))
            .collect();

        let mut budget = MoveBudget {
            moves: limits.max_moves,
            bytes: limits.max_bytes,
            used_percent: limits.max_used_percent.min(100),
            split: limits.split_blocks,
            compact: limits.compact_blocks,
        };
        let mut plan = DefragmentationPlan::default();
        for group in &mut groups {
            let memory_type = group.memory_type;
            group.pool_movables = group
                .indices
                .iter()
                .map(|&index| movables[index])
                .zip(&group.indices)
                .filter(|(movable, _)| {
                    !movable.allocation.is_dedicated()
                        && movable.requirements.memory_type_bits & (1 << memory_type) != 0
                })
                .map(|(movable, &index)| PoolMovable {
                    index,
                    location: movable.allocation.location,
                    offset: movable.allocation.offset,
                    size: movable.allocation.size,
                })
                .collect();
        }
        // Writes after free found in destinations (debug fills), logged
        // once the plan is made.
        let mut written_after_free = Vec::new();
        // Every line the pools' work logs (a failed flush's warning, a
        // write after free in a destination the plan undid) waits for the
        // locks to be released, as these do (`deferred_log`).
        let (planned, mut lines) = deferred_log::deferring(|| {
            self.plan_pools(
                &groups,
                movables,
                &queued,
                &mut budget,
                &mut plan,
                &mut written_after_free,
            )
        });
        for line in written_after_free {
            lines.push(log::Level::Error, line);
        }
        // A backend panicking in the debug work (non-coherent types)
        // unwinds past the plan once its moves are given up, as a logger's
        // panic does; the lines found before it, counted already, are
        // logged first (a logger's own panic dropped, so that the
        // backend's goes on).
        if let Some(payload) = planned.map_or_else(Some, Result::err) {
            self.give_up_plan(&mut plan);
            lines.log_quietly();
            panic::resume_unwind(payload);
        }
        plan.moves.sort_unstable_by_key(|planned| planned.movable);
        self.log_plan_lines(lines, &mut plan);
        Ok(plan)
    }

    /// The pools' work of [`plan_defragmentation`](Self::plan_defragmentation),
    /// under each pool's lock in turn: plans each group's moves into
    /// `plan` (every pool's blocks emptied before any is compacted: the
    /// limits go to released memory first, and compaction gets only what
    /// is left of them), then, with debug fills, checks and fills the
    /// destinations, whose writes after free it adds to
    /// `written_after_free`. Returns a backend's panic in that work once
    /// the moves planned so far are in `plan`, for the caller to give up.
    fn plan_pools(
        &self,
        groups: &[PoolGroup<'_, M>],
        movables: &[Movable<'_>],
        queued: &[(u32, PoolTag, Location, u64)],
        budget: &mut MoveBudget,
        plan: &mut DefragmentationPlan,
        written_after_free: &mut Vec<String>,
    ) -> Result<(), Box<dyn Any + Send>> {
        let passes: &[bool] = if budget.compact {
            &[false, true]
        } else {
            &[false]
        };
        for &compacting in passes {
            for group in groups {
                let pool_movables = &group.pool_movables;
                if pool_movables.is_empty() {
                    continue;
                }
                let memory_type = group.memory_type;
                let request_for = |index: usize| {
                    let movable = &movables[index];
                    let request =
                        Request::new(movable.requirements, Usage::DEVICE_LOCAL, movable.kind);
                    // As the pool places its own requests. Without
                    // `fit_to_fixed_blocks`: a request it would change
                    // needs a whole block, and no move gets one (its
                    // destination shares a block, or lies below its
                    // source), so it moves no more or less either way.
                    if group.tag == PoolTag::DEFAULT {
                        pool_request(&self.context, memory_type, &request, false)
                    } else {
                        custom_pool_request(&self.context, memory_type, &request, false)
                    }
                };
                let mut pool = lock(group.pool.mutex());
                let mut pool_plan = if compacting {
                    pool.compact(pool_movables, budget, &request_for)
                } else {
                    let leaving: Vec<(Location, u64)> = queued
                        .iter()
                        .filter(|&&(memory_type, tag, ..)| {
                            memory_type == group.memory_type && tag == group.tag
                        })
                        .map(|&(.., location, size)| (location, size))
                        .collect();
                    pool.plan_defragmentation(
                        &self.context,
                        pool_movables,
                        &leaving,
                        budget,
                        &request_for,
                    )
                };
                // A backend's panic as the pool undid placements: the
                // moves it planned before are checked still, and given up.
                let mut debug_panic = pool_plan.panic.take();
                // Destinations keep their margins, and their patterns; with
                // debug fills, their bytes are checked and filled as any
                // new allocation's (the lines logged once the plan is made).
                // A backend panicking in a fill's flush or invalidate
                // (non-coherent types) stops the checks: the destinations
                // left unchecked are freed unchecked as the plan is given
                // up (the backend would be called again to check them).
                if self.context.is_debug_type(memory_type) {
                    let checked = panic::catch_unwind(AssertUnwindSafe(|| {
                        for (index, placement, _) in &pool_plan.moves {
                            let size = movables[*index].requirements.size;
                            written_after_free.extend(pool.on_placed(
                                &self.context,
                                placement,
                                size,
                            ));
                        }
                    }));
                    if let Err(payload) = checked {
                        debug_panic.get_or_insert(payload);
                    }
                }
                drop(pool);
                plan.blocks_released += pool_plan.blocks;
                plan.bytes_released += pool_plan.bytes;
                plan.bytes_moved += pool_plan.bytes_moved;
                plan.blocks_over_limits += pool_plan.over_limits;
                plan.blocks_started += pool_plan.started;
                plan.blocks_compacted += pool_plan.compacted;
                plan.moves.extend(
                    pool_plan
                        .moves
                        .into_iter()
                        .map(|(index, placement, source)| DefragmentationMove {
                            movable: index,
                            source,
                            destination: Allocation {
                                memory: placement.memory,
                                offset: placement.offset,
                                size: movables[index].requirements.size,
                                home: Home::new(memory_type, group.tag),
                                location: placement.location,
                                allocator: self.id,
                                mapped: placement.mapped,
                            },
                        }),
                );
                if let Some(payload) = debug_panic {
                    return Err(payload);
                }
            }
        }
        Ok(())
    }

    /// Logs the lines of a plan: writes after free that the debug fills'
    /// checks found in its destinations, and those its pools' work kept
    /// (`deferred_log`). A logger that panics on a line (one that
    /// fails a test on an error) unwinds past the plan once every line is
    /// logged: its moves are given up first, so that their destinations,
    /// handed to nobody, do not stay live until the allocator's drop.
    fn log_plan_lines(&self, lines: deferred_log::Kept, plan: &mut DefragmentationPlan) {
        if let Err(payload) = panic::catch_unwind(AssertUnwindSafe(|| lines.log())) {
            self.give_up_plan(plan);
            panic::resume_unwind(payload);
        }
    }

    /// Gives up every move of `plan` ([`give_up_move`](Self::give_up_move)),
    /// on the way out of a panic: their destinations, handed to nobody,
    /// would otherwise stay live until the allocator's drop. A second panic
    /// (the memory callback) is dropped, so that the first one goes on.
    #[cold]
    fn give_up_plan(&self, plan: &mut DefragmentationPlan) {
        for planned in plan.moves.drain(..) {
            let _ = panic::catch_unwind(AssertUnwindSafe(|| self.give_up_move(planned)));
        }
    }

    /// Gives up a planned move, as VMA's `MOVE_OPERATION_IGNORE` does: the
    /// moved allocation stays where it is, and its destination is freed
    /// through the frame queue, as [`free_after_frame`](Self::free_after_frame)
    /// frees (so a copy already submitted may still write it). The block
    /// the move would have left can no longer empty, so it stops being
    /// emptied: it takes requests and other plans' moves again, and its
    /// small-buffer slots reopen. Other moves out of that block may still
    /// be carried out; they just do not empty it. A compaction's move
    /// ([`DefragmentationLimits::compact_blocks`]) leaves no block being
    /// emptied: giving it up only frees its destination.
    ///
    /// Freeing the destination directly gives the move up too, but leaves
    /// the block being emptied until it empties or a later plan empties
    /// it.
    ///
    /// With [`Config::debug_fill`](crate::Config::debug_fill) the
    /// destination is filled `0xEF` as it is freed, unchecked, as any
    /// freed allocation is: the copy may have written it. (It was checked
    /// as the plan placed it.)
    ///
    /// # Errors
    /// [`Error::ForeignAllocation`] for another allocator's move (nothing
    /// changes then); [`Error::StaleAllocation`] when the destination was
    /// freed already.
    ///
    /// # Time complexity
    /// O(1) amortised, but for a move whose source block is still being
    /// emptied: that block goes back to its pool's first-fit order and its
    /// runs reopen, a pass over the pool's blocks and runs.
    pub fn give_up_move(&self, planned: DefragmentationMove) -> Result<(), Error> {
        self.check_owner(&planned.destination)?;
        let destination = &planned.destination;
        self.with_pool(destination, |pool| {
            if !pool.is_live(destination.location) {
                return Err(Error::StaleAllocation);
            }
            pool.stop_retiring(planned.source);
            Ok(())
        })??;
        self.free_after_frame(planned.destination)
    }
}

/// The movables of one pool, for [`Allocator::plan_defragmentation`].
struct PoolGroup<'a, M> {
    memory_type: u32,
    tag: PoolTag,
    pool: GroupPool<'a, M>,
    /// Indices into the movables: every movable of this pool.
    indices: Vec<usize>,
    /// Those of them that may move (not dedicated, and their
    /// `memoryTypeBits` name the pool's type): filled once every movable
    /// passed the checks.
    pool_movables: Vec<PoolMovable>,
}

/// A group's pool: a default pool, or a custom pool's cell, held (and
/// locked later) without the custom pools' table.
enum GroupPool<'a, M> {
    Default(&'a Mutex<TypePool<M>>),
    Custom(PoolCell<M>),
}

impl<M> GroupPool<'_, M> {
    fn mutex(&self) -> &Mutex<TypePool<M>> {
        match self {
            Self::Default(pool) => pool,
            Self::Custom(cell) => cell,
        }
    }
}
