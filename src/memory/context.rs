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
//! - host-visible memory is mapped once, right after allocation.

use std::panic::{self, AssertUnwindSafe};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};

use gpu_alloc_types::{AllocationFlags, MemoryPropertyFlags, MemoryType};

use super::block_size::preferred_block_size;
use super::budget_cache::BudgetCache;
use super::events::{MemoryCallback, MemoryEvent, MemoryEventKind};
use super::mapping::MappedPtr;
use super::memory_type_choice::RankTable;
use super::Usage;
use crate::device::{
    memory_priority, AllocateInfo, DedicatedTarget, HeapBudget, MemoryDeviceExt, MemoryProperties,
};
use crate::{Config, Error};

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
}

/// The device plus the state every memory type shares.
#[derive(Debug)]
pub(crate) struct MemoryContext<D> {
    pub(crate) device: D,
    pub(crate) properties: MemoryProperties,
    pub(crate) config: Config,
    memory_objects: AtomicU32,
    heap_usage: Box<[AtomicU64]>,
    /// Held by a thread making a memory object in the heap, from its budget
    /// check until its size is in `heap_usage` (and in the usage the device
    /// reports), and by a thread freeing one, from taking its size out of
    /// `heap_usage` until the device has freed it: a budget check never
    /// sees `heap_usage` below what the device counts. Taken under a memory
    /// type's pool lock, never the other way.
    heap_turns: Box<[Mutex<()>]>,
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
    /// `corruption_types | fill_types`: the types whose allocations and
    /// frees take the out-of-line debug paths, tested once per allocation
    /// and per free ([`is_debug_type`](Self::is_debug_type)).
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
}

impl<D> MemoryContext<D> {
    pub(crate) fn new(device: D, properties: MemoryProperties, config: Config) -> Self {
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
        // Debug fills: every host-visible type; in non-coherent ones, fills
        // are flushed and checks invalidate first (`debug_fill.rs`).
        let fill_types = if config.debug_fill {
            coherent_types | (usable_types & non_coherent_types)
        } else {
            0
        };
        let heap_usage = (0..heaps.len()).map(|_| AtomicU64::new(0)).collect();
        let heap_turns = (0..heaps.len()).map(|_| Mutex::new(())).collect();
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
            config,
            memory_objects: AtomicU32::new(0),
            heap_usage,
            heap_turns,
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
            debug_types: corruption_types | fill_types,
            corruptions: AtomicU64::new(0),
            callback: None,
            frame: AtomicU64::new(0),
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

    /// Sets the callback on memory objects made and freed.
    pub(crate) fn set_callback(&mut self, callback: MemoryCallback) {
        self.callback = Some(callback);
    }

    /// Tells the callback, if any, of `kind` on `memory`. A panic of the
    /// callback is caught and returned, for the caller to resume once the
    /// memory object is made or freed: unwound from the middle of that, it
    /// left the object allocated for good (never freed, not even at drop)
    /// and its bytes counted in the heap's usage and in
    /// `maxMemoryAllocationCount`, while every pool lock it unwound through
    /// carries on after the poison (`place.rs`).
    fn tell<M>(
        &self,
        kind: MemoryEventKind,
        memory: &M,
        memory_type: u32,
        size: u64,
        name: Option<&str>,
    ) -> std::thread::Result<()>
    where
        D: MemoryDeviceExt<M>,
    {
        let Some(callback) = &self.callback else {
            return Ok(());
        };
        let event = MemoryEvent {
            kind,
            memory: self.device.raw_memory(memory),
            memory_type,
            heap: self.heap_of(memory_type),
            size,
            name,
        };
        // Unwind safety: nothing the callback can see is left half-changed
        // by the panic; the caller finishes its step before resuming it.
        panic::catch_unwind(AssertUnwindSafe(|| (callback.0)(&event)))
    }

    /// Whether allocations and frees in `memory_type` take the debug
    /// paths: margins' patterns or debug fills (the field `debug_types`).
    #[inline]
    pub(crate) fn is_debug_type(&self, memory_type: u32) -> bool {
        // Zero first: the only test the default path pays.
        self.debug_types != 0 && self.debug_types & 1u32.wrapping_shl(memory_type) != 0
    }

    /// The memory types with margins' patterns or debug fills, one bit
    /// per type: 0 unless `Config::detect_corruption` (with a margin) or
    /// `Config::debug_fill` is on.
    #[inline]
    pub(crate) fn debug_types(&self) -> u32 {
        self.debug_types
    }

    /// Whether allocations in blocks of `memory_type` get the corruption
    /// pattern in their margins (the field `corruption_types`). Not on
    /// the default path: [`is_debug_type`](Self::is_debug_type) is.
    pub(crate) fn detects_corruption(&self, memory_type: u32) -> bool {
        self.corruption_types & 1u32.wrapping_shl(memory_type) != 0
    }

    /// Whether `memory_type` is filled on allocation and free (the field
    /// `fill_types`). Not on the default path either.
    pub(crate) fn fills(&self, memory_type: u32) -> bool {
        self.fill_types & 1u32.wrapping_shl(memory_type) != 0
    }

    /// The memory types filled on allocation and free, one bit per type.
    pub(crate) fn fill_types(&self) -> u32 {
        self.fill_types
    }

    /// Counts a damaged margin found when its allocation was freed, or
    /// memory written after its free found when it was allocated again or
    /// when its empty block was released.
    pub(crate) fn count_corruption(&self) {
        self.corruptions.fetch_add(1, Ordering::Relaxed);
    }

    /// Damaged margins and writes after free found so far.
    pub(crate) fn corruptions(&self) -> u64 {
        self.corruptions.load(Ordering::Relaxed)
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

    pub(crate) fn heap_of(&self, memory_type: u32) -> u32 {
        self.memory_types()[memory_type as usize].heap
    }

    /// The size of `memory_type`'s heap in bytes.
    pub(crate) fn heap_size(&self, memory_type: u32) -> u64 {
        let heap = self.heap_of(memory_type) as usize;
        self.properties
            .device
            .memory_heaps
            .get(heap)
            .map_or(0, |h| h.size)
    }

    /// Whether `usage` asks for device addresses (`Usage::DEVICE_ADDRESS`)
    /// on a device without buffer device address: no memory type serves it.
    #[inline]
    pub(crate) fn lacks_device_address(&self, usage: Usage) -> bool {
        usage.contains(Usage::DEVICE_ADDRESS) && !self.properties.device.buffer_device_address
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

    /// Budget and usage of every heap: from `VK_EXT_memory_budget` when
    /// enabled, else `budget_fraction` of each heap's size and this
    /// allocator's own usage.
    ///
    /// The driver's figures are an estimate between readings: read again
    /// every few memory objects and after each frame, with this allocator's
    /// own changes added in between ([`BudgetCache`]).
    ///
    /// Some drivers report a budget of 0, or one larger than the heap; as
    /// VMA does (`UpdateVulkanBudget`), a budget of 0 is read as
    /// `budget_fraction` of the heap and a larger one as the heap's size.
    /// Taken as reported, a 0 would fail every within-budget request and
    /// send every block through the smaller-block retries. A reported usage
    /// below this allocator's own memory in the heap (VMA has seen 0) is
    /// stale too: the usage is at least the allocator's own.
    pub(crate) fn heap_budgets<M>(&self) -> [HeapBudget; MAX_HEAPS]
    where
        D: MemoryDeviceExt<M>,
    {
        self.budgets(Read::WhenStale)
    }

    /// [`heap_budgets`](Self::heap_budgets) from a new reading of the
    /// driver's figures (when it has some), which later checks then start
    /// from: what the public reports show.
    pub(crate) fn fresh_heap_budgets<M>(&self) -> [HeapBudget; MAX_HEAPS]
    where
        D: MemoryDeviceExt<M>,
    {
        self.budgets(Read::Always)
    }

    fn budgets<M>(&self, read: Read) -> [HeapBudget; MAX_HEAPS]
    where
        D: MemoryDeviceExt<M>,
    {
        let fraction = self.config.budget_fraction.clamp(0.0, 1.0);
        let heaps = &self.properties.device.memory_heaps;
        let own = self.own_usage();
        // Without the driver's figures: no budget reported, no usage but ours.
        let mut budgets = self
            .driver_budgets(read, &own)
            .unwrap_or([HeapBudget::default(); MAX_HEAPS]);
        for ((heap, slot), &own) in heaps.iter().zip(budgets.iter_mut()).zip(&own) {
            slot.budget = match slot.budget {
                0 => fraction_of(heap.size, fraction),
                budget => budget.min(heap.size),
            };
            // The process's usage includes this allocator's memory; a
            // driver that reports less (VMA has seen 0) is stale.
            slot.usage = slot.usage.max(own);
        }
        budgets
    }

    /// The driver's figures, as reported (or estimated since the last
    /// reading), when `VK_EXT_memory_budget` is enabled; read again as
    /// `read` says. `own` is this allocator's memory in each heap now.
    fn driver_budgets<M>(
        &self,
        read: Read,
        own: &[u64; MAX_HEAPS],
    ) -> Option<[HeapBudget; MAX_HEAPS]>
    where
        D: MemoryDeviceExt<M>,
    {
        if !self.properties.memory_budget {
            return None;
        }
        let number = {
            let mut cache = self.budget_cache();
            let stale = match read {
                Read::WhenStale => cache.is_stale(),
                Read::ForRecheck => cache.needs_recheck(),
                Read::Always => true,
            };
            if !stale {
                return cache.estimate(own);
            }
            cache.begin_reading()
        };
        // Unlocked while the driver answers (milliseconds on some): threads
        // making or freeing memory meanwhile do not wait for it.
        let mut budgets = [HeapBudget::default(); MAX_HEAPS];
        if !self.device.heap_budgets(&mut budgets) {
            return None;
        }
        // What the reading counts as ours must not exceed what the
        // driver counted, or the estimate falls below the true usage
        // until the next reading. Memory freed while the driver was
        // read (`own` was taken before) is out of the usage after it,
        // and memory made meanwhile out of the usage before it (made
        // memory is counted after `vkAllocateMemory`, freed memory
        // uncounted before `vkFreeMemory`).
        let after = self.own_usage();
        let mut counted = *own;
        for (counted, after) in counted.iter_mut().zip(after) {
            *counted = (*counted).min(after);
        }
        let mut cache = self.budget_cache();
        cache.store(number, budgets, counted);
        cache.estimate(own)
    }

    /// This allocator's memory in each heap.
    fn own_usage(&self) -> [u64; MAX_HEAPS] {
        let mut own = [0; MAX_HEAPS];
        for (slot, usage) in own.iter_mut().zip(self.heap_usage.iter()) {
            *slot = usage.load(Ordering::Relaxed);
        }
        own
    }

    /// The budget cache, whatever a panic elsewhere left (it holds figures
    /// only: any state of it is valid).
    fn budget_cache(&self) -> std::sync::MutexGuard<'_, BudgetCache> {
        self.budget_cache
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Makes the next budget check read the driver's figures again: a frame
    /// ended, and other processes may have taken or given back memory.
    pub(crate) fn expire_budgets(&self) {
        self.budget_cache().expire();
    }

    /// A within-budget request is about to make new memory: the first of
    /// its budget checks that the estimate refuses reads the figures again,
    /// the others use that reading ([`BudgetCache::begin_request`]).
    pub(crate) fn begin_budget_checks(&self) {
        if self.properties.memory_budget {
            self.budget_cache().begin_request();
        }
    }

    /// Allocates (and maps, when host-visible) one `VkDeviceMemory`.
    ///
    /// # Errors
    /// [`Error::TooManyObjects`] at `maxMemoryAllocationCount`,
    /// [`Error::OverBudget`] when asked to stay within budget, and the device's
    /// allocation and map failures. Nothing is leaked on error.
    pub(crate) fn allocate_memory<M>(
        &self,
        request: &MemoryRequest<'_>,
    ) -> Result<NewMemory<M>, Error>
    where
        D: MemoryDeviceExt<M>,
    {
        // Requests above the limit were refused before placement, but a
        // block may still have rounded one up past it: the driver would
        // refuse (or may refuse) such memory anyway.
        if request.size > self.properties.device.max_memory_allocation_size {
            return Err(Error::OutOfDeviceMemory);
        }
        // Nor may memory exceed its heap (VUID-vkAllocateMemory-pAllocateInfo-01713):
        // a type whose heap the backend does not list (Vulkan rules it out)
        // has a heap of 0 bytes, so no memory of it is made, and the heaps'
        // tables below are never indexed past their end.
        if request.size > self.heap_size(request.memory_type) {
            return Err(Error::OutOfDeviceMemory);
        }
        // Before the memory is made: a logger that panics here leaves
        // nothing to undo.
        log::debug!(
            "vk-suballoc: allocating {} bytes of memory type {} ({})",
            request.size,
            request.memory_type,
            request.name.unwrap_or("unnamed")
        );
        let heap = self.heap_of(request.memory_type);
        // One memory object of the heap at a time, from the budget check to
        // the usage count: without this, two threads in different memory
        // types of the heap could both pass the check and together exceed
        // the budget. A poisoned turn guards nothing: carry on.
        let heap_turn = self.heap_turns[heap as usize]
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if request.within_budget {
            let over =
                |budget: HeapBudget| budget.usage.saturating_add(request.size) > budget.budget;
            let mut budget = self.heap_budgets()[heap as usize];
            if over(budget) && self.properties.memory_budget {
                // The estimate may be stale: refuse on a reading taken
                // since the request began (this check's own, or a new one).
                budget = self.budgets(Read::ForRecheck)[heap as usize];
            }
            if over(budget) {
                return Err(Error::OverBudget {
                    heap,
                    size: request.size,
                    usage: budget.usage,
                    budget: budget.budget,
                });
            }
        }
        let limit = self.properties.device.max_memory_allocation_count;
        let slot = ObjectSlot::take(&self.memory_objects, limit)?;
        // With buffer device address on, any block, and memory dedicated to
        // a buffer or to no named resource, may hold a buffer whose address
        // is taken; memory dedicated to an image never does (VMA's rule).
        let for_image = matches!(request.dedicated, Some(DedicatedTarget::Image(_)));
        let flags = if self.properties.device.buffer_device_address && !for_image {
            AllocationFlags::DEVICE_ADDRESS
        } else {
            AllocationFlags::empty()
        };
        let info = AllocateInfo {
            size: request.size,
            memory_type: request.memory_type,
            flags,
            dedicated: request.dedicated,
            // Every backend gets a valid priority, as `AllocateInfo` says.
            priority: request.priority.map(memory_priority),
            name: request.name,
            export_handle_types: request.export_handle_types,
        };
        // SAFETY: `memory_type` is an index of this device's types (callers
        // take it from the ranked candidates) and `size` is non-zero (checked
        // at the facade) (VUID-vkAllocateMemory-pAllocateInfo-01714,
        // VUID-VkMemoryAllocateInfo-allocationSize-07899); DEVICE_ADDRESS is
        // set only when the device reports buffer device address enabled
        // (VUID-VkMemoryAllocateInfo-flags-03331); a dedicated target comes
        // from the caller's resource of this exact size; export handle types
        // come from a custom pool whose caller vouched for them
        // (`PoolDesc::export`, VUID-VkExportMemoryAllocateInfo-handleTypes-00656).
        let mut memory = match unsafe { self.device.allocate(&info) } {
            Ok(memory) => memory,
            // The slot goes back as it drops (and on a panic, as it unwinds).
            Err(error) => {
                return Err(match Error::from(error) {
                    Error::TooManyObjects(_) => Error::TooManyObjects(limit),
                    other => other,
                });
            }
        };
        slot.keep();
        self.heap_usage[heap as usize].fetch_add(request.size, Ordering::Relaxed);
        drop(heap_turn);
        self.budget_cache().count_object();
        let told = self.tell(
            MemoryEventKind::Allocated,
            &memory,
            request.memory_type,
            request.size,
            request.name,
        );
        if let Err(panic) = told {
            // Handed to nobody: freed again (with its `Freed` event, whose
            // own panic is dropped for the first), then the panic goes on.
            let free = || {
                // SAFETY: allocated above by this context with this type
                // and size, and counted; not mapped yet and never bound.
                unsafe { self.free_memory(memory, false, request.memory_type, request.size) }
            };
            let _ = panic::catch_unwind(AssertUnwindSafe(free));
            panic::resume_unwind(panic);
        }
        let mapped = if self
            .props(request.memory_type)
            .contains(MemoryPropertyFlags::HOST_VISIBLE)
        {
            // A backend that panics here (a bug, caught by the engine) left
            // the object made, counted and told of, but in no pool: it is
            // freed as on a failed map before the panic goes on.
            let map = panic::catch_unwind(AssertUnwindSafe(|| {
                // SAFETY: the memory is new, so not mapped yet, and
                // host-visible; the range is the whole object
                // (VUID-vkMapMemory-memory-00678, -00682, -offset-00679,
                // -size-00681).
                unsafe { self.device.map_memory(&mut memory, 0, request.size) }
            }));
            match map {
                Ok(Ok(pointer)) => Some(MappedPtr(pointer)),
                Ok(Err(error)) => {
                    // SAFETY: allocated above by this context with this
                    // type and size, and counted; not mapped (the map
                    // failed) and never bound.
                    unsafe { self.free_memory(memory, false, request.memory_type, request.size) };
                    return Err(crate::device::DeviceError::from(error).into());
                }
                Err(panic) => {
                    let free = || {
                        // SAFETY: as for a failed map (should the backend
                        // have mapped it before it panicked, vkFreeMemory
                        // unmaps it).
                        unsafe {
                            self.free_memory(memory, false, request.memory_type, request.size)
                        }
                    };
                    // Its `Freed` event's own panic is dropped for the
                    // first, as after a panic of the `Allocated` event.
                    let _ = panic::catch_unwind(AssertUnwindSafe(free));
                    panic::resume_unwind(panic);
                }
            }
        } else {
            None
        };
        Ok(NewMemory { memory, mapped })
    }

    /// Unmaps (when mapped) and frees one `VkDeviceMemory`.
    ///
    /// # Safety
    /// `memory` came from [`allocate_memory`](Self::allocate_memory) of this
    /// context with `memory_type` and `size`, `mapped` says whether it is
    /// mapped, and no resource bound to it is used by the GPU any more
    /// (VUID-vkFreeMemory-memory-00677).
    pub(crate) unsafe fn free_memory<M>(
        &self,
        mut memory: M,
        mapped: bool,
        memory_type: u32,
        size: u64,
    ) where
        D: MemoryDeviceExt<M>,
    {
        // A backend that panics in the unmap (a bug, caught by the engine)
        // does not stop the free: the caller counted the memory out, so
        // nothing would free it again. vkFreeMemory unmaps memory still
        // mapped. The panic goes on once it is freed, as the callback's.
        let unmapped = if mapped {
            panic::catch_unwind(AssertUnwindSafe(|| {
                // SAFETY: mapped once at allocation (the caller says it is).
                unsafe { self.device.unmap_memory(&mut memory) }
            }))
        } else {
            Ok(())
        };
        // Uncounted before the driver frees it: a budget reading taken
        // meanwhile then never counts as ours memory the driver no longer
        // does (`driver_budgets`). The heap's turn keeps budget checks out
        // until the driver has freed it, as it still counts it until then.
        let told = self.tell(MemoryEventKind::Freed, &memory, memory_type, size, None);
        let heap = self.heap_of(memory_type);
        let heap_turn = self.heap_turns[heap as usize]
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        self.heap_usage[heap as usize].fetch_sub(size, Ordering::Relaxed);
        // SAFETY: the caller's contract.
        unsafe { self.device.deallocate_memory(memory) };
        drop(heap_turn);
        self.memory_objects.fetch_sub(1, Ordering::AcqRel);
        self.budget_cache().count_object();
        log::debug!("vk-suballoc: freed {size} bytes of memory type {memory_type}");
        if let Err(panic) = unmapped.and(told) {
            panic::resume_unwind(panic);
        }
    }
}

/// When a budget query reads the driver's figures again.
#[derive(Clone, Copy)]
enum Read {
    /// When the cache is stale ([`BudgetCache::is_stale`]).
    WhenStale,
    /// When stale or not read since the request began
    /// ([`BudgetCache::needs_recheck`]).
    ForRecheck,
    /// Always: the public reports.
    Always,
}

/// `fraction` (in `[0, 1]`) of a heap of `size` bytes, for budgets (`f64`
/// arithmetic, exact below 2^53 bytes).
fn fraction_of(size: u64, fraction: f64) -> u64 {
    (size as f64 * fraction) as u64
}

/// One of `maxMemoryAllocationCount`'s memory objects, counted for an object
/// about to be made: given back when dropped, unless [`keep`](Self::keep)
/// says the object was made. So an error, or a backend that panics (caught
/// by the caller), leaves the count as it was.
struct ObjectSlot<'a> {
    count: &'a AtomicU32,
}

impl<'a> ObjectSlot<'a> {
    /// Counts one more object, when fewer than `limit` exist.
    fn take(count: &'a AtomicU32, limit: u32) -> Result<Self, Error> {
        count
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < limit).then_some(n + 1)
            })
            .map_err(|_| Error::TooManyObjects(limit))?;
        Ok(Self { count })
    }

    /// The object was made: it stays counted (until `free_memory`).
    fn keep(self) {
        std::mem::forget(self);
    }
}

impl Drop for ObjectSlot<'_> {
    fn drop(&mut self) {
        self.count.fetch_sub(1, Ordering::AcqRel);
    }
}
