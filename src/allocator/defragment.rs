//! Defragmentation: moves that empty whole blocks, planned by the
//! allocator and carried out by the engine.
//!
//! The allocator cannot move a resource: it does not know the buffer or
//! image bound to an allocation, and it records no commands. So, as in
//! VMA, the engine says which allocations it can move
//! ([`Movable`]), the allocator plans where they go
//! ([`Allocator::plan_defragmentation`](crate::Allocator::plan_defragmentation)),
//! and the engine creates the new resources, copies the contents and
//! frees the old allocations, through the frame queue when the GPU may
//! still read them. The blocks the plan empties are released as their
//! last allocation is freed.
//!
//! Plans empty whole blocks, as VMA's `FAST` algorithm does, in one plan
//! or, with [`DefragmentationLimits::split_blocks`], over several. With
//! [`DefragmentationLimits::compact_blocks`] they also pack allocations
//! toward the start of the blocks that stay, as the in-block moves of
//! VMA's `BALANCED` and `FULL` algorithms do: that
//! frees no memory, only joins free ranges, for a pool that cannot grow
//! or a lone block full of holes.
//!
//! The types the engine sees are here; the allocator's side is apart:
//! the planning in `defragment/planning.rs`, giving moves up in
//! `defragment/give_up.rs`.

use ash::vk;

use super::pool::Home;
use super::Allocation;
use crate::memory::slab::SlabKey;
use crate::memory::ResourceKind;

mod give_up;
mod planning;

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
    /// when it had one (the allocator does not remember it). A custom
    /// pool's [`PoolDesc::min_alignment`](crate::PoolDesc::min_alignment)
    /// needs no raising here: the allocator applies it to every move
    /// within the pool.
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
    /// limit by default (`usize::MAX`). Unlike VMA's, where 0 means no
    /// limit, 0 is a limit here: the plan moves nothing.
    pub max_moves: usize,
    /// The most bytes copied, counted as the moved allocations' sizes
    /// (VMA's `maxBytesPerPass`). No limit by default (`u64::MAX`).
    /// Unlike VMA's, where 0 means no limit, 0 is a limit here: the plan
    /// moves nothing.
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
    /// [`plan_defragmentation`](crate::Allocator::plan_defragmentation).
    pub movable: usize,
    /// Where it goes: the same pool (its memory type's default pool, or
    /// its custom pool), another block, or with
    /// [`DefragmentationLimits::compact_blocks`] a lower offset of the same
    /// block, wholly below the moved allocation (so a copy between the two
    /// never overlaps). A live allocation like any other; its name is the
    /// moved allocation's.
    pub destination: Allocation,
    /// The block the move leaves, for [`give_up_move`](crate::Allocator::give_up_move).
    pub(crate) source: SlabKey,
    /// The pool of that block (and of the destination as planned: the
    /// field is public, so an engine may have put another move's there).
    pub(crate) home: Home,
    /// The id of the allocator that planned the move: `source` and `home`
    /// name its blocks and pools, nobody else's (the destination may be
    /// another allocator's, put there by the engine).
    pub(crate) allocator: u32,
}

/// What [`plan_defragmentation`](crate::Allocator::plan_defragmentation) planned.
///
/// Dropping it, or a move, without using or freeing the destinations leaks
/// them until the allocator is dropped (which logs them), and leaves the
/// source blocks being emptied: give up the moves not carried out
/// ([`Allocator::give_up_move`](crate::Allocator::give_up_move)).
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
    /// ([`DefragmentationLimits::compact_blocks`] packs it instead), nor,
    /// with [`DefragmentationLimits::split_blocks`], a block over the
    /// limits none of whose allocations found room elsewhere (its pool's
    /// other blocks full: no limit would move them).
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
