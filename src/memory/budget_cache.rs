//! The driver's heap budgets, read every few memory objects rather than for
//! every one.
//!
//! `VK_EXT_memory_budget` reports, per heap, how much memory the process may
//! use (the budget) and how much it uses. The figures come from
//! `vkGetPhysicalDeviceMemoryProperties2`, which some drivers answer slowly:
//! VMA has had reports of 4–5 ms per call. The allocator checks a heap's
//! budget before every `VkDeviceMemory` it makes, so an application making
//! hundreds of dedicated allocations at load time would pay that hundreds of
//! times.
//!
//! As VMA does (`VmaCurrentBudgetData`), the figures are read again only
//! after [`REREAD_AFTER`] memory objects were made or freed since the last
//! reading, or at the next check after a frame ends; in between, the
//! estimate of a heap's usage is the last reading plus the change in this
//! allocator's own memory in the heap since then. Memory other processes
//! take shows at the next reading. A request the estimate finds over budget
//! is checked against a fresh reading before it is refused (the pool does
//! that), so a stale figure never refuses memory the driver would grant.
//! One fresh reading serves all the attempts a request makes in a memory
//! type (smaller blocks, dedicated memory): it is taken once the request
//! needs new memory there ([`BudgetCache::begin_request`]), not once per
//! memory object tried. A block that empties asks whether its heap is
//! over budget on the estimate however stale, which never reads the
//! driver (the request that made the block read it first): the free path
//! never waits for the driver.
//!
//! The cache is locked only to decide, store and estimate, never while the
//! driver answers (as VMA's `UpdateVulkanBudget`): threads making or freeing
//! memory meanwhile do not wait. Each reading is numbered when it begins;
//! the latest-begun one is kept, and only one begun after a frame ended or
//! a request began counts as read since then.

use super::context::MAX_HEAPS;
use crate::device::HeapBudget;

/// Memory objects made or freed after which the figures are read again
/// (VMA's 30).
pub(crate) const REREAD_AFTER: u32 = 30;

/// The last reading of the driver's figures, and how much has happened since.
#[derive(Debug, Default)]
pub(crate) struct BudgetCache {
    reading: Option<Reading>,
    objects_since: u32,
    /// The number of the latest reading begun.
    begun: u64,
    /// Readings numbered up to this began before the last frame ended.
    expired: u64,
    /// Readings numbered up to this began before the latest
    /// [`begin_request`](Self::begin_request).
    request: u64,
}

#[derive(Debug)]
struct Reading {
    /// From [`begin_reading`](BudgetCache::begin_reading).
    number: u64,
    /// The driver's figures, as reported.
    budgets: [HeapBudget; MAX_HEAPS],
    /// This allocator's own memory in each heap when they were read.
    own_usage: [u64; MAX_HEAPS],
}

impl BudgetCache {
    /// Whether the next estimate needs a new reading.
    pub(crate) fn is_stale(&self) -> bool {
        match &self.reading {
            None => true,
            Some(reading) => self.objects_since >= REREAD_AFTER || reading.number <= self.expired,
        }
    }

    /// Whether a request found over budget on the estimate is to be checked
    /// against a new reading: none began since the request did.
    pub(crate) fn needs_recheck(&self) -> bool {
        self.is_stale()
            || self
                .reading
                .as_ref()
                .is_some_and(|reading| reading.number <= self.request)
    }

    /// A reading of the driver's figures begins (the cache is unlocked
    /// while the driver answers): its number, for [`store`](Self::store).
    pub(crate) fn begin_reading(&mut self) -> u64 {
        self.begun += 1;
        self.begun
    }

    /// Keeps reading `number`: the driver's `budgets`, taken while this
    /// allocator held `own_usage` bytes in each heap; unless a reading that
    /// began later was stored first.
    pub(crate) fn store(
        &mut self,
        number: u64,
        budgets: [HeapBudget; MAX_HEAPS],
        own_usage: [u64; MAX_HEAPS],
    ) {
        if self.reading.as_ref().is_some_and(|r| r.number > number) {
            return;
        }
        self.reading = Some(Reading {
            number,
            budgets,
            own_usage,
        });
        self.objects_since = 0;
    }

    /// A request is about to make new memory: its first refusal on the
    /// estimate reads the figures again.
    pub(crate) fn begin_request(&mut self) {
        self.request = self.begun;
    }

    /// The estimate of every heap's figures, now that this allocator holds
    /// `own_usage` bytes in each: the last reading's budget, and its usage
    /// moved by the change in `own_usage`. `None` before the first reading.
    pub(crate) fn estimate(&self, own_usage: &[u64; MAX_HEAPS]) -> Option<[HeapBudget; MAX_HEAPS]> {
        let reading = self.reading.as_ref()?;
        let mut budgets = reading.budgets;
        for ((budget, &now), &then) in budgets.iter_mut().zip(own_usage).zip(&reading.own_usage) {
            budget.usage = moved(budget.usage, now, then);
        }
        Some(budgets)
    }

    /// [`estimate`](Self::estimate) of `heap` alone, now that this
    /// allocator holds `own` bytes in it: for the free path, which asks of
    /// one heap (through the whole table, a free that empties a block took
    /// some 460 instructions more, callgrind). `None` before the first
    /// reading.
    pub(crate) fn estimate_heap(&self, heap: usize, own: u64) -> Option<HeapBudget> {
        let reading = self.reading.as_ref()?;
        let mut budget = *reading.budgets.get(heap)?;
        budget.usage = moved(budget.usage, own, *reading.own_usage.get(heap)?);
        Some(budget)
    }

    /// Counts a memory object made or freed.
    pub(crate) fn count_object(&mut self) {
        self.objects_since = self.objects_since.saturating_add(1);
    }

    /// Makes the next estimate read the figures again (a frame ended): a
    /// reading that began before does not count.
    pub(crate) fn expire(&mut self) {
        self.expired = self.begun;
    }
}

/// A usage read while this allocator held `then` bytes in the heap, moved
/// by the change to `now` (never below 0 nor past `u64::MAX`).
fn moved(usage: u64, now: u64, then: u64) -> u64 {
    if now >= then {
        usage.saturating_add(now - then)
    } else {
        usage.saturating_sub(then - now)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    fn heap0(budget: u64, usage: u64) -> [HeapBudget; MAX_HEAPS] {
        let mut budgets = [HeapBudget::default(); MAX_HEAPS];
        budgets[0] = HeapBudget { budget, usage };
        budgets
    }

    fn own(heap0: u64) -> [u64; MAX_HEAPS] {
        let mut usage = [0; MAX_HEAPS];
        usage[0] = heap0;
        usage
    }

    /// A reading that nothing overtakes: begun and stored at once.
    fn read(cache: &mut BudgetCache, budgets: [HeapBudget; MAX_HEAPS], own: [u64; MAX_HEAPS]) {
        let number = cache.begin_reading();
        cache.store(number, budgets, own);
    }

    /// Between readings the usage follows the allocator's own memory, up
    /// and down; the budget stays as read.
    #[test]
    fn the_estimate_adds_the_allocators_own_changes() {
        let mut cache = BudgetCache::default();
        assert!(cache.is_stale());
        assert_eq!(cache.estimate(&own(0)), None);
        // Read with 100 MiB used, 40 of them ours.
        read(&mut cache, heap0(500 * MIB, 100 * MIB), own(40 * MIB));
        assert!(!cache.is_stale());
        assert_eq!(cache.estimate(&own(40 * MIB)).unwrap()[0].usage, 100 * MIB);
        assert_eq!(cache.estimate(&own(104 * MIB)).unwrap()[0].usage, 164 * MIB);
        assert_eq!(cache.estimate(&own(10 * MIB)).unwrap()[0].usage, 70 * MIB);
        assert_eq!(cache.estimate(&own(0)).unwrap()[0].usage, 60 * MIB);
        assert_eq!(cache.estimate(&own(0)).unwrap()[0].budget, 500 * MIB);
        // One heap's estimate is the table's.
        for now in [0, 10 * MIB, 40 * MIB, 104 * MIB] {
            assert_eq!(
                cache.estimate_heap(0, now),
                Some(cache.estimate(&own(now)).unwrap()[0])
            );
        }
        assert_eq!(cache.estimate_heap(MAX_HEAPS, 0), None);
        // A driver that reported less than ours: never below zero.
        read(&mut cache, heap0(500 * MIB, 0), own(40 * MIB));
        assert_eq!(cache.estimate(&own(0)).unwrap()[0].usage, 0);
    }

    /// The free path's figures (one heap's estimate, never read again):
    /// none before the first reading; then the reading, however stale.
    #[test]
    fn the_cached_figures_are_the_last_reading_however_stale() {
        let mut cache = BudgetCache::default();
        assert_eq!(cache.estimate_heap(0, 0), None);
        read(&mut cache, heap0(MIB, 0), own(0));
        for _ in 0..REREAD_AFTER {
            cache.count_object();
        }
        cache.expire();
        assert!(cache.is_stale());
        assert_eq!(cache.estimate_heap(0, 0), Some(heap0(MIB, 0)[0]));
    }

    /// Read again after `REREAD_AFTER` memory objects, or once expired.
    #[test]
    fn the_figures_are_read_again_every_few_objects_or_when_expired() {
        let mut cache = BudgetCache::default();
        read(&mut cache, heap0(MIB, 0), own(0));
        for _ in 1..REREAD_AFTER {
            cache.count_object();
        }
        assert!(!cache.is_stale());
        cache.count_object();
        assert!(cache.is_stale());
        read(&mut cache, heap0(MIB, 0), own(0));
        assert!(!cache.is_stale());
        cache.expire();
        assert!(cache.is_stale());
    }

    /// A request's refusal is checked on one reading taken since the
    /// request began, whichever check took it.
    #[test]
    fn a_request_needs_one_reading_since_it_began() {
        let mut cache = BudgetCache::default();
        assert!(cache.needs_recheck());
        read(&mut cache, heap0(MIB, 0), own(0));
        assert!(!cache.needs_recheck());
        cache.begin_request();
        assert!(cache.needs_recheck());
        cache.count_object();
        read(&mut cache, heap0(MIB, 0), own(0));
        assert!(!cache.needs_recheck());
        cache.expire();
        assert!(cache.needs_recheck());
    }

    /// Readings overlap (the cache is unlocked while the driver answers):
    /// the one that began last is kept, and one that began before a frame
    /// ended or a request began does not count as read since.
    #[test]
    fn overlapping_readings_keep_the_latest_begun() {
        let mut cache = BudgetCache::default();
        let (first, second) = (cache.begin_reading(), cache.begin_reading());
        cache.store(second, heap0(2 * MIB, 0), own(0));
        cache.store(first, heap0(MIB, 0), own(0));
        assert_eq!(cache.estimate(&own(0)).unwrap()[0].budget, 2 * MIB);
        assert!(!cache.is_stale());
        // Begun, then the frame ends: stored after, still stale.
        let before_frame_end = cache.begin_reading();
        cache.expire();
        cache.store(before_frame_end, heap0(3 * MIB, 0), own(0));
        assert!(cache.is_stale());
        read(&mut cache, heap0(MIB, 0), own(0));
        assert!(!cache.is_stale());
        // The same for a request.
        let before_request = cache.begin_reading();
        cache.begin_request();
        cache.store(before_request, heap0(MIB, 0), own(0));
        assert!(cache.needs_recheck());
        assert!(!cache.is_stale());
        read(&mut cache, heap0(MIB, 0), own(0));
        assert!(!cache.needs_recheck());
    }
}
