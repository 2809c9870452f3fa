//! The planning of defragmentation ([`Allocator::plan_defragmentation`]):
//! the checks of the movables, grouped by pool so that each pool is
//! locked once, then each pool's planning under its lock in turn (every
//! pool's whole blocks emptied first, then, with what is left of the
//! limits, blocks emptied in part, then compaction),
//! the debug fills' checks of the destinations, and the lines logged once
//! the plan is made. Apart from the types the engine sees (`defragment.rs`)
//! and from giving moves up (`give_up.rs`); the moves within one pool are
//! found by `memory/type_pool/defragment.rs`.

use std::any::Any;
use std::collections::{HashMap, HashSet};
use std::panic::{self, AssertUnwindSafe};
use std::sync::Mutex;

use super::{DefragmentationLimits, DefragmentationMove, DefragmentationPlan, Movable};
use crate::allocator::place::{check_requirements, custom_pool_request, lock, pool_request};
use crate::allocator::pool::{read, Home, PoolCell, PoolTag};
use crate::allocator::{Allocation, AllocationDesc, Allocator, Request};
use crate::device::MemoryDeviceExt;
use crate::frames::Deferred;
use crate::memory::deferred_log;
use crate::memory::slab::SlabKey;
use crate::memory::type_pool::{backtraces, TypePool};
use crate::memory::type_pool::{Location, MoveBudget, PoolMovable};
use crate::memory::Usage;
use crate::Error;

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
    /// block can take it (where optimal images get blocks of their own,
    /// past
    /// [`Config::max_padded_granularity`](crate::Config::max_padded_granularity)
    /// or at a granularity that is not a power of two, a kept empty block of the other class is taken over first), and it
    /// keeps the block until it is freed or a later plan moves it.
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
    /// closes its runs: a pass over the pool's blocks and runs. Splitting
    /// blocks over the limits adds, per pool with such blocks, the first
    /// pass over its blocks and runs again. Compaction
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
    /// `plan` (every pool's whole blocks emptied before any block is
    /// emptied in part, and those before any is compacted: the limits go
    /// to released memory first, and each later pass gets only what is
    /// left of them), then, with debug fills, checks and fills the
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
        // Every pool's whole blocks first, then (`split_blocks`) the blocks
        // over the limits, then (`compact_blocks`) compaction: each pass
        // gets only what the passes before left of the limits, over the
        // whole plan, not pool by pool.
        let passes = [
            (Pass::Whole, true),
            (Pass::Split, budget.split),
            (Pass::Compact, budget.compact),
        ];
        // By group, the blocks the whole pass found over the limits.
        let mut over: Vec<Vec<SlabKey>> = groups.iter().map(|_| Vec::new()).collect();
        // By group, the allocations a pass moved: a later pass moves them
        // no more. A block a pass emptied retires, so no later pass finds
        // them, unless another thread gives up a move out of that block
        // meanwhile (`give_up_move` ends its retirement): compaction then
        // gave them a second destination.
        let mut moved: Vec<HashSet<Location>> = groups.iter().map(|_| HashSet::new()).collect();
        for pass in passes
            .into_iter()
            .filter(|&(_, on)| on)
            .map(|(pass, _)| pass)
        {
            for ((group, over), moved) in groups.iter().zip(&mut over).zip(&mut moved) {
                let unmoved: Vec<PoolMovable>;
                let pool_movables = if moved.is_empty() {
                    &group.pool_movables
                } else {
                    unmoved = (group.pool_movables.iter())
                        .filter(|movable| !moved.contains(&movable.location))
                        .copied()
                        .collect();
                    &unmoved
                };
                if pool_movables.is_empty() {
                    continue;
                }
                let memory_type = group.memory_type;
                let mut pool = lock(group.pool.mutex());
                // A custom pool's least alignment, which its moves keep.
                let min_alignment = pool.shape().min_alignment;
                let request_for = |index: usize| {
                    let movable = &movables[index];
                    let desc =
                        AllocationDesc::new(Usage::DEVICE_LOCAL).min_alignment(min_alignment);
                    let request = Request::with_desc(movable.requirements, movable.kind, desc);
                    // As the pool places its own requests. Without
                    // `fit_to_block_size`: a request it would change
                    // needs a whole block, and no move gets one (its
                    // destination shares a block, or lies below its
                    // source), so it moves no more or less either way.
                    if group.tag == PoolTag::DEFAULT {
                        pool_request(&self.context, memory_type, &request, false)
                    } else {
                        custom_pool_request(&self.context, memory_type, &request, false)
                    }
                };
                let leaving = || -> Vec<(Location, u64)> {
                    queued
                        .iter()
                        .filter(|&&(memory_type, tag, ..)| {
                            memory_type == group.memory_type && tag == group.tag
                        })
                        .map(|&(.., location, size)| (location, size))
                        .collect()
                };
                let mut pool_plan = match pass {
                    Pass::Whole => pool.plan_defragmentation(
                        &self.context,
                        pool_movables,
                        &leaving(),
                        budget,
                        &request_for,
                    ),
                    Pass::Split => {
                        pool.plan_split(pool_movables, &leaving(), over, budget, &request_for)
                    }
                    Pass::Compact => pool.compact(pool_movables, budget, &request_for),
                };
                if pass == Pass::Whole {
                    *over = std::mem::take(&mut pool_plan.over);
                }
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
                            // The moved allocation's own, so that its
                            // leak says where it was first made; else
                            // this call's, under the pool's lock, unlike
                            // an allocation's (plans are rare).
                            let source = movables[*index].allocation.location;
                            let backtrace = pool
                                .backtrace_of(source)
                                .or_else(|| backtraces::capture(&self.context));
                            written_after_free.extend(pool.on_placed(
                                &self.context,
                                placement,
                                size,
                                backtrace,
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
                // A block started, or one the split pass found no room
                // for, was counted over the limits by the whole pass.
                plan.blocks_over_limits += pool_plan.over_limits;
                plan.blocks_over_limits -= pool_plan.started + pool_plan.no_room;
                plan.blocks_started += pool_plan.started;
                plan.blocks_compacted += pool_plan.compacted;
                moved.extend(
                    (pool_plan.moves.iter())
                        .map(|&(index, ..)| movables[index].allocation.location),
                );
                plan.moves.extend(
                    pool_plan
                        .moves
                        .into_iter()
                        .map(|(index, placement, source)| DefragmentationMove {
                            movable: index,
                            source,
                            home: Home::new(memory_type, group.tag),
                            allocator: self.id,
                            destination: Allocation {
                                memory: placement.memory,
                                offset: placement.offset,
                                size: movables[index].requirements.size,
                                home: Home::new(memory_type, group.tag),
                                location: placement.location,
                                allocator: self.id,
                                // Withheld where the allocation it replaces
                                // has none (`Config::strict_host_access`).
                                mapped: placement
                                    .mapped
                                    .filter(|_| movables[index].allocation.mapped.is_some()),
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
}

/// A pass of [`Allocator::plan_defragmentation`] over every pool.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Pass {
    /// Blocks emptied whole ([`TypePool::plan_defragmentation`]).
    Whole,
    /// Blocks over the limits emptied in part ([`TypePool::plan_split`]).
    Split,
    /// Blocks that stay packed ([`TypePool::compact`]).
    Compact,
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
