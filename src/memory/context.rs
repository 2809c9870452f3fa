//! [`MemoryContext`]: the device and what all memory types share.
//!
//! Every `VkDeviceMemory` the allocator creates or frees goes through
//! [`MemoryContext::allocate_memory`] and [`MemoryContext::free_memory`], so
//! the rules that span memory types live in one place:
//! - `maxMemoryAllocationCount` is never exceeded: a slot is reserved with an
//!   atomic before `vkAllocateMemory` and given back after `vkFreeMemory`
//!   (VUID-vkAllocateMemory-maxMemoryAllocationCount-04101);
//! - per-heap usage is counted for budgets, and the memory objects of one
//!   heap are made one at a time, from the budget check to the usage count,
//!   so that threads allocating in different memory types of a heap cannot
//!   both pass the check and together exceed the budget (frees of the
//!   heap's memory take the same turn, so no check counts memory the
//!   driver has not freed yet as gone);
//! - a heap with a `Config::heap_size_limits` entry looks `min(size,
//!   limit)` bytes large to everything that reads its size, and the
//!   allocator's memory there never exceeds that: a memory object past it
//!   is refused, under the heap's turn, without a `vkAllocateMemory`;
//! - host-visible memory is mapped once, right after allocation.
//!
//! This file holds the context's state and what the allocation path reads
//! of it; the making and freeing of memory objects are in
//! `context/memory_objects.rs`, the heaps' budgets in `context/budgets.rs`,
//! the refusals each heap remembers in `context/refusals.rs`, which memory
//! types take the debug paths in `context/debug_paths.rs`.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Mutex;

use ash::vk;
use gpu_alloc_types::{MemoryPropertyFlags, MemoryType};

use super::block_size::preferred_block_size;
use super::budget_cache::BudgetCache;
use super::events::MemoryCallback;
use super::mapping::MappedPtr;
use super::memory_type_choice::RankTable;
use super::runs::MAX_RUN_SLOT;
use super::Usage;
use crate::device::{DedicatedTarget, MemoryProperties};
use crate::{Config, Error};

mod budgets;
mod debug_paths;
mod memory_objects;
mod refusals;

use refusals::NONE_REFUSED;

/// Vulkan's `VK_MAX_MEMORY_HEAPS`.
pub(crate) const MAX_HEAPS: usize = 16;

/// A new `VkDeviceMemory` object, mapped when host-visible.
pub(crate) struct NewMemory<M> {
    pub(crate) memory: M,
    pub(crate) mapped: Option<MappedPtr>,
}

/// What one `VkDeviceMemory` is asked to be.
pub(crate) struct MemoryRequest<'a> {
    pub(crate) memory_type: u32,
    pub(crate) size: u64,
    pub(crate) dedicated: Option<DedicatedTarget>,
    pub(crate) priority: Option<f32>,
    pub(crate) name: Option<&'a str>,
    /// Fail with `OverBudget` rather than exceed the heap's budget.
    pub(crate) within_budget: bool,
    /// `VkExportMemoryAllocateInfo::handleTypes`: a custom pool's
    /// (`PoolDesc::export`), empty for the default pools'.
    pub(crate) export_handle_types: ash::vk::ExternalMemoryHandleTypeFlags,
    /// Answer with the heap's remembered refusal, without asking the
    /// driver, when it refused this many bytes or fewer
    /// (`context/refusals.rs`): every attempt of a request in a memory
    /// type but those it always makes there, its last and its dedicated
    /// memory.
    pub(crate) skip_if_refused: bool,
}

/// The device plus the state every memory type shares.
#[derive(Debug)]
pub(crate) struct MemoryContext<D> {
    pub(crate) device: D,
    pub(crate) properties: MemoryProperties,
    pub(crate) config: Config,
    /// Buffers of at most this many placed bytes take run slots:
    /// [`Config::small_buffer_limit`], at most
    /// [`MAX_RUN_SLOT`].
    pub(crate) run_limit: u64,
    memory_objects: AtomicU32,
    heap_usage: Box<[AtomicU64]>,
    /// Per heap, every byte this allocator has freed there so far: added
    /// as `heap_usage` drops, never taken back. A budget reading subtracts
    /// what it grew by while the driver answered from the usage before, so
    /// that it never counts as ours memory the driver no longer did
    /// (`context/budgets.rs`).
    heap_freed: Box<[AtomicU64]>,
    /// Bit `h` set when heap `h` has a `Config::heap_size_limits` entry: no
    /// memory object may take `heap_usage[h]` past the heap's (limited)
    /// size (`context/memory_objects.rs`).
    limited_heaps: u32,
    /// Held by a thread making a memory object in the heap, from its budget
    /// check until its size is in `heap_usage` (and in the usage the device
    /// reports), and by a thread freeing one, from taking its size out of
    /// `heap_usage` until the device has freed it: a budget check never
    /// sees `heap_usage` below what the device counts. Taken under a memory
    /// type's pool lock, never the other way.
    heap_turns: Box<[Mutex<()>]>,
    /// Held by a thread sizing and making a remainder block in the heap
    /// (`type_pool/new_block.rs`), from reading the heap's room until the
    /// block is counted in `heap_usage` or refused: memory types of one
    /// heap (each a pool under its own lock) then size their remainder
    /// blocks one after another, each on the room the last one left, so
    /// that together they leave half of it, as one type does. Taken under
    /// a memory type's pool lock and before the heap's turn, never the
    /// other way (the lock order: `allocator/mod.rs`).
    remainder_turns: Box<[Mutex<()>]>,
    /// Per heap, the fewest bytes the driver refused a memory object of
    /// since the heap was last refreshed, `u64::MAX` for none
    /// (`context/refusals.rs`).
    refused: Box<[AtomicU64]>,
    /// The driver's budgets as last read ([`BudgetCache`]).
    budget_cache: Mutex<BudgetCache>,
    /// Memory types ranked per usage, once (the allocation path reads it).
    ranks: RankTable,
    /// The preferred block size of each memory type, from its heap.
    preferred_block_sizes: Box<[u64]>,
    /// Bit `t` set when memory type `t` is host-visible but not coherent.
    non_coherent_types: u32,
    /// Bit `t` set when memory type `t` is lazily allocated.
    lazily_allocated_types: u32,
    /// `non_coherent_types | lazily_allocated_types`: the types whose
    /// requests `pool_request` adjusts, tested once per request
    /// ([`is_unusual`](Self::is_unusual)).
    unusual_types: u32,
    /// Bit `t` set when memory type `t` is protected.
    protected_types: u32,
    /// Bit `t` set when memory type `t` exists and may be allocated from:
    /// all of them but AMD's device-coherent types when their feature is off
    /// (VUID-vkAllocateMemory-deviceCoherentMemory-02790) and protected
    /// types when `protectedMemory` is off
    /// (VUID-VkMemoryAllocateInfo-memoryTypeIndex-01872).
    usable_types: u32,
    /// The page optimal images are padded to in blocks shared with linear
    /// resources; `None`: the two kinds take separate blocks.
    padded_granularity: Option<u64>,
    /// Bit `t` set when allocations in blocks of memory type `t` get the
    /// corruption-detection pattern in their margins: with
    /// `Config::detect_corruption` and a margin, the `HOST_VISIBLE |
    /// HOST_COHERENT` types (`type_pool/corruption.rs`).
    corruption_types: u32,
    /// Bit `t` set when memory type `t` is filled with `0xEF` when freed
    /// and `0xDC` when allocated: with `Config::debug_fill`, the
    /// `HOST_VISIBLE` types, coherent or not (`type_pool/debug_fill.rs`).
    fill_types: u32,
    /// `corruption_types | fill_types`, every type with
    /// `Config::allocation_backtraces` or `Config::log_allocations`, and
    /// the host-visible types with `Config::strict_host_access`: the
    /// types whose allocations and frees take the out-of-line debug paths,
    /// tested once per allocation and per free
    /// ([`is_debug_type`](Self::is_debug_type)).
    debug_types: u32,
    /// Damaged margins and writes after free found so far
    /// ([`count_corruption`](Self::count_corruption)).
    corruptions: AtomicU64,
    /// Called on every memory object made or freed (`events.rs`).
    callback: Option<MemoryCallback>,
    /// The index of the frame being recorded (`Allocator::end_frame` and
    /// `Allocator::collect_idle` advance it, with the frame queue's lock
    /// held): when a block empties, its pool notes it, so that
    /// `Config::empty_block_frames` can age kept empty blocks.
    frame: AtomicU64,
    /// Per [`Failure`], bit `t` set once the allocator warned of that
    /// failure in memory type `t`, cleared when `t` makes a memory object
    /// again ([`first_failure`](Self::first_failure)).
    warned_types: [AtomicU32; 2],
}

/// The failures of a memory type the allocator warns of, once each until
/// the type makes a memory object again
/// ([`MemoryContext::first_failure`]).
#[derive(Clone, Copy, Debug)]
pub(crate) enum Failure {
    /// A new block the driver or the budget refused, tried again smaller.
    SmallerBlock = 0,
    /// A request the type could not take, sent on to the next type.
    NextType = 1,
}

impl<D> MemoryContext<D> {
    pub(crate) fn new(device: D, mut properties: MemoryProperties, config: Config) -> Self {
        // Before anything reads a heap's size: every reader (ranking, block
        // sizes, budgets, reports) sees the limited one.
        let limited_heaps = limit_heaps(&mut properties, &config.heap_size_limits);
        let heaps = &properties.device.memory_heaps;
        let types = &properties.device.memory_types;
        let amd_types = properties.amd_device_coherent_types;
        let existing = match types.len() {
            0 => 0,
            count => u32::MAX >> (32 - count.min(32)),
        };
        let type_mask = |has: fn(MemoryPropertyFlags) -> bool| {
            types
                .iter()
                .take(32)
                .enumerate()
                .filter(|(_, ty)| has(ty.props))
                .fold(0, |mask, (index, _)| mask | 1 << index)
        };
        let (mut usable_types, ranked_last) = if properties.amd_device_coherent_memory {
            (existing, amd_types)
        } else {
            (existing & !amd_types, 0)
        };
        // The ranking never picks protected types either way: with the
        // feature, only a custom pool of one does.
        let protected_types = type_mask(|props| props.contains(MemoryPropertyFlags::PROTECTED));
        if !properties.protected_memory {
            usable_types &= !protected_types;
        }
        let ranks = RankTable::new(types, heaps, ranked_last);
        let preferred_block_sizes = types
            .iter()
            .map(|ty| {
                let heap_size = heaps.get(ty.heap as usize).map_or(0, |h| h.size);
                preferred_block_size(
                    heap_size,
                    &config,
                    properties.device.max_memory_allocation_size,
                )
            })
            .collect();
        let non_coherent_types = type_mask(|props| {
            props.contains(MemoryPropertyFlags::HOST_VISIBLE)
                && !props.contains(MemoryPropertyFlags::HOST_COHERENT)
        });
        let lazily_allocated_types =
            type_mask(|props| props.contains(MemoryPropertyFlags::LAZILY_ALLOCATED));
        // The usable host-visible coherent types: margins' patterns go in
        // these only, so that a margin's check needs no invalidate of its
        // allocation's atoms (`corruption.rs`); debug fills go in these
        // and the non-coherent ones.
        let coherent_types = usable_types
            & type_mask(|props| {
                props.contains(
                    MemoryPropertyFlags::HOST_VISIBLE | MemoryPropertyFlags::HOST_COHERENT,
                )
            });
        let corruption_types = if config.detect_corruption && config.debug_margin > 0 {
            coherent_types
        } else {
            0
        };
        // The usable host-visible types, coherent or not.
        let host_visible_types = coherent_types | (usable_types & non_coherent_types);
        // Debug fills: every host-visible type; in non-coherent ones, fills
        // are flushed and checks invalidate first (`debug_fill.rs`).
        let fill_types = if config.debug_fill {
            host_visible_types
        } else {
            0
        };
        let heap_usage = (0..heaps.len()).map(|_| AtomicU64::new(0)).collect();
        let heap_freed = (0..heaps.len()).map(|_| AtomicU64::new(0)).collect();
        let heap_turns = (0..heaps.len()).map(|_| Mutex::new(())).collect();
        let remainder_turns = (0..heaps.len()).map(|_| Mutex::new(())).collect();
        let refused = (0..heaps.len())
            .map(|_| AtomicU64::new(NONE_REFUSED))
            .collect();
        // bufferImageGranularity: a linear and an optimal resource must not
        // share a page. Up to `max_padded_granularity`, optimal images take
        // whole pages (start and end on a page boundary), so no linear
        // resource can ever lie in one of their pages, and everything shares
        // one block class. Larger pages keep the two kinds in separate
        // blocks instead, and so does a page size that is not a power of two
        // (no driver reports one; the offset allocator could not align an
        // image's start to it).
        let granularity = properties.buffer_image_granularity.max(1);
        let padded_granularity = (granularity.is_power_of_two()
            && granularity <= config.max_padded_granularity)
            .then_some(granularity);
        Self {
            device,
            properties,
            run_limit: config.small_buffer_limit.min(MAX_RUN_SLOT),
            config,
            memory_objects: AtomicU32::new(0),
            heap_usage,
            heap_freed,
            limited_heaps,
            heap_turns,
            remainder_turns,
            refused,
            budget_cache: Mutex::default(),
            ranks,
            preferred_block_sizes,
            non_coherent_types,
            lazily_allocated_types,
            unusual_types: non_coherent_types | lazily_allocated_types,
            protected_types,
            usable_types,
            padded_granularity,
            corruption_types,
            fill_types,
            // Backtraces are recorded, and allocations logged, on the
            // debug paths, in every type.
            debug_types: corruption_types
                | fill_types
                | if config.allocation_backtraces || config.log_allocations {
                    existing
                } else {
                    0
                }
                // Mappings are withheld on the allocation's debug path.
                | if config.strict_host_access {
                    host_visible_types
                } else {
                    0
                },
            corruptions: AtomicU64::new(0),
            callback: None,
            frame: AtomicU64::new(0),
            warned_types: [AtomicU32::new(0), AtomicU32::new(0)],
        }
    }

    /// The index of the frame being recorded.
    pub(crate) fn current_frame(&self) -> u64 {
        self.frame.load(Ordering::Relaxed)
    }

    /// A frame was sealed: `frame` is now being recorded.
    pub(crate) fn set_current_frame(&self, frame: u64) {
        self.frame.store(frame, Ordering::Relaxed);
    }

    /// Whether this `failure` of `memory_type` is its first since the type
    /// last made a memory object: the allocator warns of it then only, not
    /// at every request that meets it while a heap stays at its budget
    /// (which was a warning per allocation, on the allocation path).
    pub(crate) fn first_failure(&self, memory_type: u32, failure: Failure) -> bool {
        let bit = 1u32.checked_shl(memory_type).unwrap_or(0);
        self.warned_types[failure as usize].fetch_or(bit, Ordering::Relaxed) & bit == 0
    }

    /// `memory_type` made a memory object: its next failures are firsts
    /// again ([`first_failure`](Self::first_failure)). A load per failure
    /// kind, and a write only after a warning.
    pub(crate) fn made_memory(&self, memory_type: u32) {
        let bit = 1u32.checked_shl(memory_type).unwrap_or(0);
        for warned in &self.warned_types {
            if warned.load(Ordering::Relaxed) & bit != 0 {
                warned.fetch_and(!bit, Ordering::Relaxed);
            }
        }
    }

    /// Sets the callback on memory objects made and freed.
    pub(crate) fn set_callback(&mut self, callback: MemoryCallback) {
        self.callback = Some(callback);
    }

    /// The memory types allocations may use, one bit per type index: every
    /// type the device has, less AMD's device-coherent types unless their
    /// feature is enabled, and less protected types unless `protectedMemory`
    /// is.
    #[inline]
    pub(crate) fn usable_types(&self) -> u32 {
        self.usable_types
    }

    /// The protected memory types, one bit per type index.
    pub(crate) fn protected_types(&self) -> u32 {
        self.protected_types
    }

    /// The page (a power of two) optimal images are padded to in blocks
    /// they share with linear resources; `None` when the two kinds take
    /// separate blocks.
    #[inline]
    pub(crate) fn padded_granularity(&self) -> Option<u64> {
        self.padded_granularity
    }

    /// `bufferImageGranularity` when it is a power of two, however large:
    /// the pages custom pools pad optimal images to, and every pool
    /// resources of [`ResourceKind::Unknown`](crate::ResourceKind::Unknown);
    /// `None` otherwise (no driver we know of).
    pub(crate) fn granularity_page(&self) -> Option<u64> {
        let granularity = self.properties.buffer_image_granularity.max(1);
        granularity.is_power_of_two().then_some(granularity)
    }

    /// Memory types usable for `usage`, best first, before the
    /// `memoryTypeBits` and size filters ([`RankTable::admits`]).
    #[inline]
    pub(crate) fn ranked_types(&self, usage: Usage) -> &[u8] {
        self.ranks.ranked(usage)
    }

    /// The largest heap of the memory types ranked for `usage` that `bits`
    /// allows (one bit per type index); `None` when `bits` allows none of
    /// them. For the errors of requests that no type admits.
    pub(crate) fn largest_ranked_heap(&self, usage: Usage, bits: u32) -> Option<u64> {
        self.ranked_types(usage)
            .iter()
            .filter(|&&t| bits & (1 << t) != 0)
            .map(|&t| self.heap_size(u32::from(t)))
            .max()
    }

    /// The memory types ranked per usage, and the per-request filters
    /// ([`RankTable::admits`]).
    #[inline]
    pub(crate) fn ranks(&self) -> &RankTable {
        &self.ranks
    }

    /// The preferred block size of `memory_type`
    /// ([`preferred_block_size`] of its heap).
    #[inline]
    pub(crate) fn preferred_block_size(&self, memory_type: u32) -> u64 {
        self.preferred_block_sizes[memory_type as usize]
    }

    pub(crate) fn memory_types(&self) -> &[MemoryType] {
        &self.properties.device.memory_types
    }

    pub(crate) fn props(&self, memory_type: u32) -> MemoryPropertyFlags {
        self.memory_types()[memory_type as usize].props
    }

    /// The Vulkan property flags of `memory_type`, `None` past the device's
    /// types: its flags, and `DEVICE_COHERENT_AMD` for AMD's device-coherent
    /// types, which the device layer's flags do not carry (Vulkan sets it
    /// on every type with `DEVICE_UNCACHED_AMD`, itself not reported).
    pub(crate) fn vk_props(&self, memory_type: u32) -> Option<vk::MemoryPropertyFlags> {
        let ty = self.memory_types().get(memory_type as usize)?;
        // gpu-alloc-types' flags have Vulkan's bit values.
        let flags = vk::MemoryPropertyFlags::from_raw(u32::from(ty.props.bits()));
        let amd = 1u32
            .checked_shl(memory_type)
            .is_some_and(|bit| self.properties.amd_device_coherent_types & bit != 0);
        Some(if amd {
            flags | vk::MemoryPropertyFlags::DEVICE_COHERENT_AMD
        } else {
            flags
        })
    }

    /// The memory types (one bit per type index, the first 32) whose
    /// [`vk_props`](Self::vk_props) have every flag of `required`: all of
    /// them when `required` is empty.
    ///
    /// # Time complexity
    /// O(types), at most 32.
    pub(crate) fn types_with(&self, required: vk::MemoryPropertyFlags) -> u32 {
        (0..self.memory_types().len().min(32) as u32)
            .filter(|&t| self.vk_props(t).is_some_and(|f| f.contains(required)))
            .fold(0, |mask, t| mask | 1 << t)
    }

    pub(crate) fn heap_of(&self, memory_type: u32) -> u32 {
        self.memory_types()[memory_type as usize].heap
    }

    /// Whether `heap` has a `Config::heap_size_limits` entry: the
    /// allocator's memory there may not exceed its (limited) size.
    #[inline]
    pub(crate) fn is_limited_heap(&self, heap: u32) -> bool {
        self.limited_heaps & 1u32.wrapping_shl(heap) != 0
    }

    /// The size of `memory_type`'s heap in bytes (as
    /// `Config::heap_size_limits` limits it).
    pub(crate) fn heap_size(&self, memory_type: u32) -> u64 {
        let heap = self.heap_of(memory_type) as usize;
        self.properties
            .device
            .memory_heaps
            .get(heap)
            .map_or(0, |h| h.size)
    }

    /// [`Error::DeviceAddressNotEnabled`] when `usage` asks for device
    /// addresses (`Usage::DEVICE_ADDRESS`) on an allocator not told of
    /// buffer device address: its memory would lack
    /// `VK_MEMORY_ALLOCATE_DEVICE_ADDRESS_BIT`. The one check of every
    /// path that takes a usage (requests, pools, rings, aliases,
    /// `memory_type_for`).
    #[inline]
    pub(crate) fn check_device_address(&self, usage: Usage) -> Result<(), Error> {
        if usage.contains(Usage::DEVICE_ADDRESS) && !self.properties.device.buffer_device_address {
            return Err(Error::DeviceAddressNotEnabled);
        }
        Ok(())
    }

    /// Whether flushes and invalidations of `memory_type` are needed.
    #[inline]
    pub(crate) fn is_non_coherent(&self, memory_type: u32) -> bool {
        memory_type < 32 && self.non_coherent_types & (1 << memory_type) != 0
    }

    /// Whether `memory_type` is non-coherent or lazily allocated: false
    /// for most requests' type, which then skip both tests.
    #[inline]
    pub(crate) fn is_unusual(&self, memory_type: u32) -> bool {
        memory_type < 32 && self.unusual_types & (1 << memory_type) != 0
    }

    /// Whether `memory_type` is lazily allocated: its memory is always
    /// dedicated (as in VMA), so that each transient attachment's memory
    /// object is committed, and reported by `vkGetDeviceMemoryCommitment`,
    /// on its own.
    #[inline]
    pub(crate) fn is_lazily_allocated(&self, memory_type: u32) -> bool {
        memory_type < 32 && self.lazily_allocated_types & (1 << memory_type) != 0
    }

    /// `VkDeviceMemory` objects alive now (blocks and dedicated).
    pub(crate) fn memory_object_count(&self) -> u32 {
        self.memory_objects.load(Ordering::Relaxed)
    }

    /// Whether more than 3/4 of `maxMemoryAllocationCount` objects are
    /// alive. Dedicated memory is then made only where it is required, so
    /// that the last quarter of the objects goes to blocks, which hold many
    /// allocations each (VMA's rule in `AllocateMemoryOfType`).
    pub(crate) fn objects_mostly_used(&self) -> bool {
        let limit = u64::from(self.properties.device.max_memory_allocation_count);
        u64::from(self.memory_object_count()) > limit * 3 / 4
    }
}

/// Applies `Config::heap_size_limits` to `properties`: each heap with a
/// limit (non-zero) takes the size `min(size, limit)`, as VMA's
/// `pHeapSizeLimit` makes it. Returns the heaps with a limit, one bit each
/// (those at or above their heap's size too: the allocator's memory
/// there is still capped at the heap's size, as in VMA). Limits of heaps
/// the device lacks are ignored.
fn limit_heaps(properties: &mut MemoryProperties, limits: &[u64; MAX_HEAPS]) -> u32 {
    let heaps = &properties.device.memory_heaps;
    let limited = limits
        .iter()
        .take(heaps.len())
        .enumerate()
        .filter(|(_, &limit)| limit != 0)
        .fold(0u32, |mask, (heap, _)| mask | 1 << heap);
    if limited != 0 {
        for (heap, &limit) in properties
            .device
            .memory_heaps
            .to_mut()
            .iter_mut()
            .zip(limits)
        {
            if limit != 0 {
                heap.size = heap.size.min(limit);
            }
        }
    }
    limited
}
