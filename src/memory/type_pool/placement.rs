//! What a [`TypePool`](super::TypePool) is asked for and what it hands
//! back: the request as one memory type sees it, where an allocation lives
//! (a block range, a run slot or dedicated memory), and the pool's counters.

use ash::vk;

use crate::device::DedicatedTarget;
use crate::memory::mapping::MappedPtr;
use crate::memory::runs::TakenSlot;
use crate::memory::slab::SlabKey;
use crate::memory::usage::ResourceKind;
use crate::offset::{AllocationId, Strategy};

/// Whether an allocation gets its own `VkDeviceMemory`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum DedicatedChoice {
    /// Never: blocks only.
    Never,
    /// First when the request is larger than half a block (or aligned to
    /// more); else when no new block can be made. Past 3/4 of `maxMemoryAllocationCount`,
    /// never first.
    Auto,
    /// First, blocks if dedicated memory fails; past 3/4 of
    /// `maxMemoryAllocationCount`, as `Auto` for a small request.
    Prefer,
    /// Only dedicated memory.
    Require,
}

/// A request as one memory type sees it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct PoolRequest<'a> {
    /// The requested size: what the allocation reports and statistics count.
    pub(crate) size: u64,
    /// The bytes it takes in a block: `size` and the debug margin
    /// (`Config::debug_margin`, 0 by default), rounded up, for an optimal
    /// image in blocks shared with linear resources and a resource of
    /// unknown kind, to the buffer-image granularity page; else to
    /// `align`, or to 4 KiB when `align` is larger.
    pub(crate) placed_size: u64,
    pub(crate) align: u64,
    /// Granularity class (0 linear, 1 optimal images).
    pub(crate) class: usize,
    /// The resource kind, recorded for memory dumps.
    pub(crate) kind: ResourceKind,
    pub(crate) dedicated: DedicatedChoice,
    pub(crate) target: Option<DedicatedTarget>,
    pub(crate) name: Option<&'a str>,
    pub(crate) within_budget: bool,
    /// The default path's last pass, which may pass the heap's budget
    /// (`Placer::allocate_in_next_types`): dedicated memory of the
    /// request's size then, not a new block, unless dedicated memory is
    /// ruled out or 3/4 of `maxMemoryAllocationCount` is used
    /// (`MemoryContext::objects_mostly_used`).
    pub(crate) past_budget: bool,
    /// No new memory object: existing blocks only
    /// ([`AllocationDesc::existing_memory_only`](crate::AllocationDesc::existing_memory_only)).
    pub(crate) existing_memory_only: bool,
    pub(crate) priority: Option<f32>,
    /// The size class of the run slot a small buffer takes; `None`: a range
    /// of its own. A request of [`Strategy::MinOffset`] or
    /// [`Strategy::MaxOffset`] takes a range of its own first, and a free
    /// slot of an existing run only where no block's free range holds it
    /// (`TypePool::allocate`, `allocate_slow`).
    pub(crate) run_class: Option<u8>,
    /// How a block's offset allocator chooses among the free ranges that
    /// hold the request ([`AllocationDesc::strategy`](crate::AllocationDesc::strategy)).
    pub(crate) strategy: Strategy,
}

impl PoolRequest<'_> {
    /// A request for a plain range of `size` bytes, a buffer's, with no
    /// dedicated memory, name or run: a custom pool's `min_blocks` (linear
    /// class, as an empty block serves either; no budget check, as VMA's
    /// pools make theirs), and the range of a new run.
    pub(crate) fn for_block(size: u64) -> Self {
        Self {
            size,
            placed_size: size,
            align: 1,
            class: 0,
            kind: ResourceKind::Buffer,
            dedicated: DedicatedChoice::Never,
            target: None,
            name: None,
            within_budget: false,
            past_budget: false,
            existing_memory_only: false,
            priority: None,
            run_class: None,
            strategy: Strategy::MinTime,
        }
    }
}

/// Where an allocation lives inside its memory type.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Location {
    /// A range of a block.
    Block { block: SlabKey, range: AllocationId },
    /// A slot of a run.
    Slot {
        run: SlabKey,
        slot: u32,
        generation: u32,
    },
    /// Dedicated memory.
    Dedicated(SlabKey),
}

/// A successful placement.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Placement {
    pub(crate) location: Location,
    pub(crate) memory: vk::DeviceMemory,
    pub(crate) offset: u64,
    pub(crate) mapped: Option<MappedPtr>,
}

impl From<TakenSlot> for Placement {
    #[inline]
    fn from(taken: TakenSlot) -> Self {
        Self {
            location: Location::Slot {
                run: taken.run,
                slot: taken.slot,
                generation: taken.generation,
            },
            memory: taken.memory,
            offset: taken.offset,
            mapped: taken.mapped,
        }
    }
}

/// Running figures of one pool: a memory type's default pool or a custom
/// pool.
///
/// `repr(C)`, with the two counts every allocation and free updates
/// (`block_allocations`, `block_allocated_bytes`) apart: side by side,
/// LLVM updated them as one 16-byte vector (a load, a constant, a shuffle,
/// an add and a store: 6 instructions where two adds to memory do),
/// on the allocation path and the free path alike.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[repr(C)]
pub(crate) struct PoolCounters {
    pub(crate) block_allocations: u64,
    pub(crate) blocks: u64,
    pub(crate) block_bytes: u64,
    pub(crate) empty_blocks: u64,
    /// Blocks a defragmentation plan is emptying.
    pub(crate) retiring_blocks: u64,
    pub(crate) block_allocated_bytes: u64,
    pub(crate) dedicated: u64,
    pub(crate) dedicated_bytes: u64,
}

impl std::ops::AddAssign for PoolCounters {
    /// Adds a custom pool's figures to its memory type's.
    fn add_assign(&mut self, other: Self) {
        self.blocks += other.blocks;
        self.block_bytes += other.block_bytes;
        self.empty_blocks += other.empty_blocks;
        self.retiring_blocks += other.retiring_blocks;
        self.block_allocations += other.block_allocations;
        self.block_allocated_bytes += other.block_allocated_bytes;
        self.dedicated += other.dedicated;
        self.dedicated_bytes += other.dedicated_bytes;
    }
}
