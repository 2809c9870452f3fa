//! Heap budgets of a [`MemoryContext`]: the budget and usage of each heap
//! that within-budget requests are checked against and the public reports
//! show. With `VK_EXT_memory_budget` they are the driver's figures, read
//! again every few memory objects and after each frame and estimated in
//! between from this allocator's own changes ([`BudgetCache`]); without it,
//! `Config::budget_fraction` of each heap and this allocator's own usage.
//! Apart from `context.rs` because reading, correcting and estimating the
//! driver's figures is a concern of its own: the allocation path only asks
//! for a heap's figures.

use std::sync::atomic::Ordering;
use std::sync::PoisonError;

use super::{MemoryContext, MAX_HEAPS};
use crate::device::{HeapBudget, MemoryDeviceExt};
use crate::memory::budget_cache::BudgetCache;
use crate::memory::held_lock::{lock, Held};

impl<D> MemoryContext<D> {
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
    /// `budget_fraction` of the heap and a larger one as the heap's size
    /// (in a heap with a `Config::heap_size_limits` entry, the budget is
    /// capped at what others use plus the limit instead, and a budget of 0
    /// is what others use plus `budget_fraction` of the limit: [`corrected`]).
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

    pub(super) fn budgets<M>(&self, read: Read) -> [HeapBudget; MAX_HEAPS]
    where
        D: MemoryDeviceExt<M>,
    {
        let fraction = self.config.budget_fraction.clamp(0.0, 1.0);
        let heaps = &self.properties.device.memory_heaps;
        // Before `own`: a reading takes the frees since out of it
        // (`driver_budgets`).
        let freed = self.freed_so_far();
        let own = self.own_usage();
        // Without the driver's figures: no budget reported, no usage but ours.
        let mut budgets = self
            .driver_budgets(read, &own, &freed)
            .unwrap_or([HeapBudget::default(); MAX_HEAPS]);
        for (index, ((heap, slot), &own)) in
            heaps.iter().zip(budgets.iter_mut()).zip(&own).enumerate()
        {
            let limited = self.is_limited_heap(index as u32);
            *slot = corrected(*slot, heap.size, fraction, own, limited);
        }
        budgets
    }

    /// The driver's figures, as reported (or estimated since the last
    /// reading), when `VK_EXT_memory_budget` is enabled; read again as
    /// `read` says. `own` is this allocator's memory in each heap now, and
    /// `freed` its bytes freed in each so far, read before `own`.
    fn driver_budgets<M>(
        &self,
        read: Read,
        own: &[u64; MAX_HEAPS],
        freed: &[u64; MAX_HEAPS],
    ) -> Option<[HeapBudget; MAX_HEAPS]>
    where
        D: MemoryDeviceExt<M>,
    {
        if !self.properties.memory_budget {
            return None;
        }
        let number = {
            let mut cache = self.budget_cache();
            if !read.is_due(&cache) {
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
        // until the next reading. Our usage never exceeds the driver's
        // count of our memory (made memory is counted after
        // `vkAllocateMemory`, freed memory uncounted before
        // `vkFreeMemory`), so the usage when the driver read its figures
        // would do; it is at least the usage before (`own`) less the
        // bytes freed since: memory made meanwhile only adds to it. The
        // lower of the usages before and after, taken instead, counted
        // memory freed before the driver's reading (in the usage before)
        // and memory made after it (in the usage after) as one, where the
        // driver counted neither. (Still capped by the usage after.)
        let after = self.own_usage();
        let freed_since = self.freed_so_far();
        let mut counted = *own;
        for (heap, counted) in counted.iter_mut().enumerate() {
            let freed_while_read = freed_since[heap].wrapping_sub(freed[heap]);
            *counted = counted.saturating_sub(freed_while_read).min(after[heap]);
        }
        let mut cache = self.budget_cache();
        cache.store(number, budgets, counted);
        cache.estimate(own)
    }

    /// The bytes this allocator has freed in each heap so far. Acquire:
    /// a free seen here is out of the usage read after it (`own_usage`).
    fn freed_so_far(&self) -> [u64; MAX_HEAPS] {
        let mut freed = [0; MAX_HEAPS];
        for (slot, bytes) in freed.iter_mut().zip(self.heap_freed.iter()) {
            *slot = bytes.load(Ordering::Acquire);
        }
        freed
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
    pub(super) fn budget_cache(&self) -> std::sync::MutexGuard<'_, BudgetCache> {
        self.budget_cache
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// One heap's figures, corrected as [`budgets`](Self::budgets)
    /// corrects each ([`corrected`]): the budget cache's estimate of that
    /// heap alone ([`BudgetCache::estimate_heap`]) when `read` asks for no
    /// reading now, else the whole table's, which reads the driver. `None`
    /// for a heap the device does not list.
    ///
    /// # Time complexity
    /// O(1) (one heap's estimate, under the budget cache's lock); when a
    /// reading is due, a driver call and O(heaps).
    fn heap_figures<M>(&self, heap: usize, read: Read) -> Option<HeapBudget>
    where
        D: MemoryDeviceExt<M>,
    {
        let (Some(usage), Some(properties)) = (
            self.heap_usage.get(heap),
            self.properties.device.memory_heaps.get(heap),
        ) else {
            return None;
        };
        let own = usage.load(Ordering::Relaxed);
        let driver = if self.properties.memory_budget {
            let cache = self.budget_cache();
            if read.is_due(&cache) {
                // The whole table's, which takes the reading.
                drop(cache);
                return self.budgets(read).get(heap).copied();
            }
            // Not due, so read before; but the free path's `Read::Cached`
            // never reads, and with no reading yet (which no block it can
            // release leaves: `heap_at_or_over_budget`) has none of the
            // driver's figures, as `budgets` without them.
            cache.estimate_heap(heap, own).unwrap_or_default()
        } else {
            HeapBudget::default()
        };
        let fraction = self.config.budget_fraction.clamp(0.0, 1.0);
        let limited = self.is_limited_heap(heap as u32);
        Some(corrected(driver, properties.size, fraction, own, limited))
    }

    /// Whether the heap of `memory_type` is at or over its budget (its
    /// usage at least its budget: VMA's `budgetExceeded` in
    /// `VmaBlockVector::Free`), on the cached figures ([`Read::Cached`]):
    /// the driver's as last read plus this allocator's own changes since,
    /// or, without `VK_EXT_memory_budget`, `budget_fraction` of the heap
    /// and this allocator's usage. The driver is never asked, and need not
    /// be: a block that empties asks this only when its pool holds more
    /// than its `min_blocks` (a custom pool's, made without a budget
    /// check; none in a default pool), and every block past those was made
    /// by a request whose first attempt, within the budget, read the
    /// figures. (With no reading, it would answer as without the
    /// extension, as [`budgets`](Self::budgets) does when the driver gives
    /// none.)
    ///
    /// # Time complexity
    /// O(1) (one heap's estimate, [`heap_figures`](Self::heap_figures)),
    /// no driver call.
    pub(crate) fn heap_at_or_over_budget<M>(&self, memory_type: u32) -> bool
    where
        D: MemoryDeviceExt<M>,
    {
        let heap = self.heap_of(memory_type) as usize;
        self.heap_figures(heap, Read::Cached)
            .is_some_and(|figures| figures.usage >= figures.budget)
    }

    /// The bytes a new memory object of `memory_type` may still take in
    /// its heap as far as this allocator knows: the heap's size (as
    /// `Config::heap_size_limits` limits it) less this allocator's memory
    /// there and, `within_budget`, no more than the heap's budget leaves
    /// (its figures as [`heap_budgets`](Self::heap_budgets) gives them:
    /// read again when stale, [`Read::WhenStale`]). The driver may grant
    /// less; a guide to the size of a remainder block (`block_size.rs`),
    /// which the budget check and the driver still decide.
    ///
    /// # Time complexity
    /// O(1) (one heap's estimate, [`heap_figures`](Self::heap_figures));
    /// when the figures are stale, a driver call and O(heaps).
    pub(crate) fn known_room<M>(&self, memory_type: u32, within_budget: bool) -> u64
    where
        D: MemoryDeviceExt<M>,
    {
        let heap = self.heap_of(memory_type) as usize;
        let own = self
            .heap_usage
            .get(heap)
            .map_or(0, |usage| usage.load(Ordering::Relaxed));
        let room = self.heap_size(memory_type).saturating_sub(own);
        if !within_budget {
            return room;
        }
        let budget = self.heap_figures(heap, Read::WhenStale).unwrap_or_default();
        room.min(budget.budget.saturating_sub(budget.usage))
    }

    /// The remainder turn of `memory_type`'s heap, held while a remainder
    /// block is sized on the heap's [`known_room`](Self::known_room) and
    /// made (`type_pool/new_block.rs`), until it is counted in the heap's
    /// usage ([`allocate_memory`](Self::allocate_memory) releases it then,
    /// before the memory callback and the map) or refused: another memory
    /// type of the heap sizes its own once this one is counted. `None`
    /// for a heap the device does not list (no memory of it is ever made).
    ///
    /// Taken through the pools' [`lock`]: a logger given a line logged
    /// under it (the block's "allocating" line) that calls into the
    /// allocator for another memory type of the heap meets it and no pool
    /// lock of its own; debug builds then panic, as on a pool's lock,
    /// where the thread deadlocked unseen.
    pub(crate) fn remainder_turn(&self, memory_type: u32) -> Option<Held<'_, ()>> {
        let heap = self.heap_of(memory_type) as usize;
        let turn = self.remainder_turns.get(heap)?;
        Some(lock(turn))
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
}

/// When a budget query reads the driver's figures again.
#[derive(Clone, Copy)]
pub(super) enum Read {
    /// When the cache is stale ([`BudgetCache::is_stale`]).
    WhenStale,
    /// Never: the last reading plus this allocator's own changes since,
    /// however stale. For the free path, which must not wait for the
    /// driver.
    Cached,
    /// When stale or not read since the request began
    /// ([`BudgetCache::needs_recheck`]).
    ForRecheck,
    /// Always: the public reports.
    Always,
}

impl Read {
    /// Whether `cache` is to be read again before its figures are used.
    fn is_due(self, cache: &BudgetCache) -> bool {
        match self {
            Read::WhenStale => cache.is_stale(),
            Read::Cached => false,
            Read::ForRecheck => cache.needs_recheck(),
            Read::Always => true,
        }
    }
}

/// A heap's figures as the driver gave them (or as estimated since; zeros
/// without them), corrected as [`MemoryContext::heap_budgets`] says: a
/// budget of 0 read as `fraction` (in `[0, 1]`) of the heap's `size`, one
/// past the heap as its size, and a usage below this allocator's own,
/// `own`, as that. In a heap `limited` by `Config::heap_size_limits`
/// (whose `size` is then the limited one), the budget leaves room for no
/// more than the limit beside what others use (the usage less `own`):
/// the limit caps this allocator's memory, not theirs, so their memory
/// does not push its requests out of the heap; a budget check is then the
/// limit's check too. A budget of 0 there leaves `fraction` of the limit
/// beside what others use (as without the driver's figures, where the
/// usage is this allocator's own).
fn corrected(
    mut figures: HeapBudget,
    size: u64,
    fraction: f64,
    own: u64,
    limited: bool,
) -> HeapBudget {
    // The process's usage includes this allocator's memory; a driver that
    // reports less (VMA has seen 0) is stale.
    figures.usage = figures.usage.max(own);
    let others = if limited { figures.usage - own } else { 0 };
    figures.budget = match figures.budget {
        // In a limited heap, the fraction of the limit beside the others'
        // memory, as the budget below leaves the limit beside it: of the
        // limit alone, their memory pushed the allocator out of the heap.
        0 => others.saturating_add(fraction_of(size, fraction)),
        budget => budget.min(others.saturating_add(size)),
    };
    figures
}

/// `fraction` (in `[0, 1]`) of a heap of `size` bytes, for budgets (`f64`
/// arithmetic, exact below 2^53 bytes).
fn fraction_of(size: u64, fraction: f64) -> u64 {
    (size as f64 * fraction) as u64
}

#[cfg(all(test, feature = "fake-device"))]
mod tests {
    use super::MemoryContext;
    use crate::device::fake::{FakeDevice, FakeLayout};
    use crate::device::MemoryDeviceExt;
    use crate::memory::context::MemoryRequest;
    use crate::Config;

    const MIB: u64 = 1 << 20;
    const GIB: u64 = 1 << 30;
    /// The discrete layout's device-local type, in heap 0 (8 GiB).
    const VRAM: u32 = 1;

    fn new_context(layout: FakeLayout, config: Config) -> (MemoryContext<FakeDevice>, FakeDevice) {
        let device = FakeDevice::new(layout);
        let properties = device.memory_properties();
        (
            MemoryContext::new(device.clone(), properties, config),
            device,
        )
    }

    fn reads(device: &FakeDevice) -> u64 {
        device.counters().budget_queries
    }

    /// Makes `size` bytes of `VRAM` memory, not held to the budget (no
    /// budget check, no reading), and returns what frees it.
    fn make(context: &MemoryContext<FakeDevice>, size: u64) -> impl FnOnce() + '_ {
        let new = context
            .allocate_memory::<crate::device::fake::FakeMemory>(
                &MemoryRequest {
                    memory_type: VRAM,
                    size,
                    dedicated: None,
                    priority: None,
                    name: None,
                    within_budget: false,
                    export_handle_types: ash::vk::ExternalMemoryHandleTypeFlags::empty(),
                    skip_if_refused: false,
                },
                &mut None,
            )
            .unwrap();
        move || {
            // SAFETY: made above by this context, not mapped (VRAM is not
            // host-visible), no GPU work.
            unsafe { context.free_memory(new.memory, false, VRAM, size) }
        }
    }

    /// One heap's figures as its two readers take them, and when each
    /// asks the driver: `heap_at_or_over_budget` (the free path) never,
    /// `known_room` (a remainder block's size) whenever they are stale
    /// (never read, a frame ended, or `REREAD_AFTER` objects since);
    /// between readings, both follow this allocator's own memory without
    /// a reading.
    #[test]
    fn one_heaps_figures_are_read_when_each_reader_says() {
        let (context, device) = new_context(FakeLayout::discrete(), Config::default());
        // Never read: the free path does not read either, and has none of
        // the driver's figures (`budget_fraction` of the heap, its own
        // usage: not over, where the driver would say at its budget).
        device.set_heap_budget(0, 100 * MIB, 100 * MIB);
        assert!(!context.heap_at_or_over_budget(VRAM));
        assert_eq!(reads(&device), 0);
        device.set_heap_budget(0, 100 * MIB, 40 * MIB);
        assert_eq!(context.known_room(VRAM, true), 60 * MIB);
        assert_eq!(reads(&device), 1);
        assert!(!context.heap_at_or_over_budget(VRAM));
        assert_eq!(context.known_room(VRAM, false), 8 * GIB);
        assert_eq!(reads(&device), 1);
        // Others take 30 MiB more and a frame ends: the free path keeps
        // the last reading, the room is read again.
        device.set_heap_budget(0, 100 * MIB, 70 * MIB);
        context.expire_budgets();
        assert!(!context.heap_at_or_over_budget(VRAM));
        assert_eq!(reads(&device), 1);
        assert_eq!(context.known_room(VRAM, true), 30 * MIB);
        assert_eq!(reads(&device), 2);
        // Own memory moves both estimates, unread.
        let free_small = make(&context, 10 * MIB);
        assert_eq!(context.known_room(VRAM, true), 20 * MIB);
        assert_eq!(context.known_room(VRAM, false), 8 * GIB - 10 * MIB);
        assert!(!context.heap_at_or_over_budget(VRAM));
        let free_large = make(&context, 25 * MIB);
        assert_eq!(context.known_room(VRAM, true), 0);
        assert_eq!(context.known_room(VRAM, false), 8 * GIB - 35 * MIB);
        assert!(context.heap_at_or_over_budget(VRAM));
        assert_eq!(reads(&device), 2);
        free_large();
        free_small();
        assert_eq!(context.known_room(VRAM, true), 30 * MIB);
        assert!(!context.heap_at_or_over_budget(VRAM));
        assert_eq!(reads(&device), 2);
        // `REREAD_AFTER` (30) objects made or freed since the reading:
        // the room is read again, the free path still uses the estimate.
        for _ in 0..13 {
            make(&context, MIB)();
        }
        device.set_heap_budget(0, 100 * MIB, 50 * MIB);
        assert!(!context.heap_at_or_over_budget(VRAM));
        assert_eq!(reads(&device), 2);
        assert_eq!(context.known_room(VRAM, true), 50 * MIB);
        assert_eq!(reads(&device), 3);
        assert_eq!(context.known_room(VRAM, true), 50 * MIB);
        assert_eq!(reads(&device), 3);
    }

    /// The room read first reads the driver once; the free path then uses
    /// that reading.
    #[test]
    fn the_room_read_first_reads_the_driver_once() {
        let (context, device) = new_context(FakeLayout::discrete(), Config::default());
        device.set_heap_budget(0, 100 * MIB, 99 * MIB);
        assert_eq!(context.known_room(VRAM, true), MIB);
        assert_eq!(reads(&device), 1);
        assert!(!context.heap_at_or_over_budget(VRAM));
        assert_eq!(reads(&device), 1);
        device.set_heap_budget(0, 100 * MIB, 100 * MIB);
        assert!(!context.heap_at_or_over_budget(VRAM), "as last read");
        assert_eq!(context.known_room(VRAM, true), MIB, "as last read");
        assert_eq!(reads(&device), 1);
    }

    /// Corrected figures, alike for both readers: a budget of 0 read as
    /// `budget_fraction` of the heap; a limited heap's budget capped at
    /// others' usage plus the limit; without `VK_EXT_memory_budget`,
    /// `budget_fraction` of the heap and own usage, no driver read.
    #[test]
    fn both_readers_take_the_corrected_figures() {
        let (context, device) = new_context(FakeLayout::discrete(), Config::default());
        device.set_heap_budget(0, 0, 0);
        let fraction = (8.0 * GIB as f64 * 0.8) as u64;
        assert_eq!(context.known_room(VRAM, true), fraction);
        assert!(!context.heap_at_or_over_budget(VRAM));

        let mut config = Config::default();
        config.heap_size_limits[0] = GIB;
        let (context, device) = new_context(FakeLayout::discrete(), config);
        device.set_heap_budget(0, 4 * GIB, 2 * GIB);
        let free = make(&context, GIB / 4);
        // Budget min(4, 2 + 1) GiB, usage 2.25 GiB: 0.75 GiB; the limit's
        // room is 0.75 GiB too.
        assert_eq!(context.known_room(VRAM, true), 3 * GIB / 4);
        assert_eq!(context.known_room(VRAM, false), 3 * GIB / 4);
        device.set_heap_budget(0, 2 * GIB, 2 * GIB);
        context.expire_budgets();
        assert_eq!(context.known_room(VRAM, true), 0);
        assert!(context.heap_at_or_over_budget(VRAM));
        free();

        let layout = FakeLayout::discrete().with_memory_budget(false);
        let (context, device) = new_context(layout, Config::default());
        let free = make(&context, GIB);
        assert_eq!(context.known_room(VRAM, true), fraction - GIB);
        assert_eq!(context.known_room(VRAM, false), 7 * GIB);
        assert!(!context.heap_at_or_over_budget(VRAM));
        // In pieces within maxMemoryAllocationSize (4 GiB).
        let free_more = make(&context, 3 * GIB);
        let free_rest = make(&context, fraction - 4 * GIB);
        assert_eq!(context.known_room(VRAM, true), 0);
        assert!(context.heap_at_or_over_budget(VRAM));
        free_rest();
        free_more();
        free();
        assert_eq!(reads(&device), 0);
    }
}
