//! Read-only views of an [`OffsetAllocator`]: lookups, iteration in address
//! order, exact reports and counters.

use super::allocation::{FreeRange, OffsetAllocation};
use super::node::{Node, NIL};
use super::report::{Counters, SearchStats, StorageReport};
use super::tlsf::{OffsetAllocator, SENTINEL};
use super::AllocationId;

impl<const M: u32> OffsetAllocator<M> {
    /// The live allocation `id` names, if it is live.
    ///
    /// # Time complexity
    /// O(1).
    pub fn get(&self, id: AllocationId) -> Option<OffsetAllocation> {
        let slot = self.live_slot(id).ok()?;
        Some(self.allocation_in(slot))
    }

    /// The live allocation whose range contains `offset`, if any: the reverse
    /// lookup a GPU fault address or a memory-map picture needs.
    ///
    /// # Time complexity
    /// O(live allocations below `offset`): a walk in address order. Not for
    /// hot paths.
    pub fn allocation_at(&self, offset: u64) -> Option<OffsetAllocation> {
        self.allocations()
            .take_while(|a| a.offset <= offset)
            .find(|a| offset < a.end())
    }

    /// The free bytes right before and right after the live allocation
    /// `id`, if it is live.
    ///
    /// # Time complexity
    /// O(1).
    pub(crate) fn gaps_around(&self, id: AllocationId) -> Option<(u64, u64)> {
        let slot = self.live_slot(id).ok()?;
        let node = &self.nodes[slot as usize];
        Some((self.nodes[node.prev as usize].gap(), node.gap()))
    }

    /// Live allocations in address order.
    ///
    /// # Time complexity
    /// O(1) per item.
    pub fn allocations(&self) -> impl Iterator<Item = OffsetAllocation> + '_ {
        let mut prev = SENTINEL;
        std::iter::from_fn(move || {
            let slot = self.nodes[prev as usize].next;
            if slot == NIL {
                return None;
            }
            let allocation = self.allocation_after(prev, slot);
            prev = slot;
            Some(allocation)
        })
    }

    /// Free ranges in address order; neighbours are always merged, so no two
    /// returned ranges touch.
    ///
    /// # Time complexity
    /// O(1) per item, plus one step per allocation with no free range after it.
    pub fn free_ranges(&self) -> impl Iterator<Item = FreeRange> + '_ {
        self.free_ranges_after().map(|(_, range)| range)
    }

    /// [`free_ranges`](Self::free_ranges), each with the live allocation it
    /// follows (`None`: the range at offset 0, before every allocation):
    /// where [`allocate_in_gap`](Self::allocate_in_gap) places into it.
    ///
    /// # Time complexity
    /// As [`free_ranges`](Self::free_ranges).
    pub fn free_ranges_after(
        &self,
    ) -> impl Iterator<Item = (Option<AllocationId>, FreeRange)> + '_ {
        let mut slot = SENTINEL;
        std::iter::from_fn(move || {
            while slot != NIL {
                let owner = slot;
                let node = &self.nodes[owner as usize];
                slot = node.next;
                if node.gap() > 0 {
                    let after = (owner != SENTINEL).then(|| self.allocation_in(owner).id);
                    let range = FreeRange {
                        offset: node.end(),
                        size: node.gap(),
                    };
                    return Some((after, range));
                }
            }
            None
        })
    }

    /// Exact free-space figures.
    ///
    /// # Time complexity
    /// O(free ranges in the highest non-empty bin), those within `1/2^M` of
    /// the largest: the largest free range is found exactly, not estimated
    /// from its bin. Everything else is O(1).
    pub fn storage_report(&self) -> StorageReport {
        let largest_free_range = self.mask.highest().map_or(0, |bin| {
            let mut largest = 0;
            let mut node = self.bin_heads[bin as usize];
            while node != NIL {
                let entry: &Node = &self.nodes[node as usize];
                largest = largest.max(entry.gap());
                node = entry.bin_next;
            }
            largest
        });
        StorageReport {
            capacity: self.capacity,
            free_bytes: self.free_bytes,
            largest_free_range,
            free_ranges: self.free_ranges,
        }
    }

    /// Running counters (live and peak bytes, successes, failures).
    ///
    /// # Time complexity
    /// O(1).
    pub fn counters(&self) -> &Counters {
        &self.counters
    }

    /// How often `allocate` searched the boundary bins gap by gap, the part
    /// of it that is not O(1) (see [`allocate`](Self::allocate)).
    ///
    /// # Time complexity
    /// O(1).
    pub fn search_stats(&self) -> SearchStats {
        self.search
    }

    /// Capacity in bytes.
    pub fn capacity(&self) -> u64 {
        self.capacity
    }

    /// Free bytes, in O(1).
    pub fn free_bytes(&self) -> u64 {
        self.free_bytes
    }

    /// Whether no allocation is live.
    pub fn is_empty(&self) -> bool {
        self.counters.live_allocations == 0
    }

    /// Number of allocation slots: live allocations possible without
    /// [`reserve_slots`](Self::reserve_slots), but for slots retired after
    /// 2^31 reuses, which it still counts
    /// ([`AllocationId`]).
    pub fn slot_count(&self) -> u32 {
        (self.nodes.len() - 1) as u32
    }

    /// Bytes of metadata this allocator holds: the node table (32 bytes per
    /// slot, plus the sentinel), the bin tables and the struct itself.
    pub fn metadata_bytes(&self) -> usize {
        self.nodes.capacity() * std::mem::size_of::<Node>()
            + self.bin_heads.len() * std::mem::size_of::<u32>()
            + self.bin_max_hint.len() * std::mem::size_of::<u64>()
            + std::mem::size_of::<Self>()
    }

    /// The allocation in live `slot`.
    fn allocation_in(&self, slot: u32) -> OffsetAllocation {
        self.allocation_after(self.nodes[slot as usize].prev, slot)
    }

    /// The allocation in live `slot`, whose previous node is `prev`: it
    /// starts where `prev`'s gap ends.
    fn allocation_after(&self, prev: u32, slot: u32) -> OffsetAllocation {
        let node = &self.nodes[slot as usize];
        let offset = self.nodes[prev as usize].gap_end();
        OffsetAllocation {
            id: AllocationId {
                slot,
                generation: node.generation(),
                owner: self.owner,
            },
            offset,
            size: node.end() - offset,
        }
    }
}
