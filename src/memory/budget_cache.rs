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
//! memory object tried.

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
    /// A reading was taken since the last [`begin_request`](Self::begin_request):
    /// a request it finds over budget needs no newer one.
    read_for_request: bool,
}

#[derive(Debug)]
struct Reading {
    /// The driver's figures, as reported.
    budgets: [HeapBudget; MAX_HEAPS],
    /// This allocator's own memory in each heap when they were read.
    own_usage: [u64; MAX_HEAPS],
}

impl BudgetCache {
    /// Whether the next estimate needs a new reading.
    pub(crate) fn is_stale(&self) -> bool {
        self.reading.is_none() || self.objects_since >= REREAD_AFTER
    }

    /// Keeps a new reading: the driver's `budgets`, taken while this
    /// allocator held `own_usage` bytes in each heap.
    pub(crate) fn store(&mut self, budgets: [HeapBudget; MAX_HEAPS], own_usage: [u64; MAX_HEAPS]) {
        self.reading = Some(Reading { budgets, own_usage });
        self.objects_since = 0;
        self.read_for_request = true;
    }

    /// Whether a request found over budget on the estimate is to be checked
    /// against a new reading: none was taken since the request began.
    pub(crate) fn needs_recheck(&self) -> bool {
        self.is_stale() || !self.read_for_request
    }

    /// A request is about to make new memory: its first refusal on the
    /// estimate reads the figures again.
    pub(crate) fn begin_request(&mut self) {
        self.read_for_request = false;
    }

    /// The estimate of every heap's figures, now that this allocator holds
    /// `own_usage` bytes in each: the last reading's budget, and its usage
    /// moved by the change in `own_usage`. `None` before the first reading.
    pub(crate) fn estimate(&self, own_usage: &[u64; MAX_HEAPS]) -> Option<[HeapBudget; MAX_HEAPS]> {
        let reading = self.reading.as_ref()?;
        let mut budgets = reading.budgets;
        for ((budget, &now), &then) in budgets.iter_mut().zip(own_usage).zip(&reading.own_usage) {
            budget.usage = if now >= then {
                budget.usage.saturating_add(now - then)
            } else {
                budget.usage.saturating_sub(then - now)
            };
        }
        Some(budgets)
    }

    /// Counts a memory object made or freed.
    pub(crate) fn count_object(&mut self) {
        self.objects_since = self.objects_since.saturating_add(1);
    }

    /// Makes the next estimate read the figures again (a frame ended, or a
    /// request is about to be refused on the estimate).
    pub(crate) fn expire(&mut self) {
        self.objects_since = REREAD_AFTER;
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

    /// Between readings the usage follows the allocator's own memory, up
    /// and down; the budget stays as read.
    #[test]
    fn the_estimate_adds_the_allocators_own_changes() {
        let mut cache = BudgetCache::default();
        assert!(cache.is_stale());
        assert_eq!(cache.estimate(&own(0)), None);
        // Read with 100 MiB used, 40 of them ours.
        cache.store(heap0(500 * MIB, 100 * MIB), own(40 * MIB));
        assert!(!cache.is_stale());
        assert_eq!(cache.estimate(&own(40 * MIB)).unwrap()[0].usage, 100 * MIB);
        assert_eq!(cache.estimate(&own(104 * MIB)).unwrap()[0].usage, 164 * MIB);
        assert_eq!(cache.estimate(&own(10 * MIB)).unwrap()[0].usage, 70 * MIB);
        assert_eq!(cache.estimate(&own(0)).unwrap()[0].usage, 60 * MIB);
        assert_eq!(cache.estimate(&own(0)).unwrap()[0].budget, 500 * MIB);
        // A driver that reported less than ours: never below zero.
        cache.store(heap0(500 * MIB, 0), own(40 * MIB));
        assert_eq!(cache.estimate(&own(0)).unwrap()[0].usage, 0);
    }

    /// Read again after `REREAD_AFTER` memory objects, or once expired.
    #[test]
    fn the_figures_are_read_again_every_few_objects_or_when_expired() {
        let mut cache = BudgetCache::default();
        cache.store(heap0(MIB, 0), own(0));
        for _ in 1..REREAD_AFTER {
            cache.count_object();
        }
        assert!(!cache.is_stale());
        cache.count_object();
        assert!(cache.is_stale());
        cache.store(heap0(MIB, 0), own(0));
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
        cache.store(heap0(MIB, 0), own(0));
        assert!(!cache.needs_recheck());
        cache.begin_request();
        assert!(cache.needs_recheck());
        cache.count_object();
        cache.store(heap0(MIB, 0), own(0));
        assert!(!cache.needs_recheck());
        cache.expire();
        assert!(cache.needs_recheck());
    }
}
