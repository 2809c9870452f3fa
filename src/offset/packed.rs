//! [`OffsetAllocator::allocate`] and [`OffsetAllocator::free`] for the
//! crate's Vulkan pools, with results small enough to come back in
//! registers.
//!
//! The public calls return a `Result<OffsetAllocation, OffsetError>` of 40
//! bytes and a `Result<FreeRange, OffsetError>` of 24. Results that large go
//! back through memory: the callee stores them field by field and the caller
//! loads them back at once, often in wider loads than the stores, which the
//! processor cannot forward, so the caller waits for the stores to retire.
//! perf showed that wait as the hottest instruction of the Vulkan
//! allocator's allocation path.
//!
//! The pools check their requests before they get here and only need to
//! know *that* a call failed (a full slot table is told apart with
//! [`OffsetAllocator::has_unused_slot`]). These variants run the same code
//! as the public calls, whose inlined bodies they share, and hand back 16
//! and 8 bytes instead. Measured on lavapipe's machine against the same
//! code calling the public functions (`bench/ab.sh`, best of five
//! interleaved rounds): 0.4–2 ns less per operation on every trace, 0.7–2.9
//! ns per allocation and 0.7–1.2 ns per free.

use std::num::NonZeroU64;

use super::node::NIL;
use super::{AllocationId, OffsetAllocation, OffsetAllocator, Strategy};

/// An allocation in two words: its offset, and its slot and generation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct PackedAllocation {
    /// First byte of the range.
    pub(crate) offset: u64,
    /// The slot in the low half, the generation in the high half: never
    /// zero, since a live allocation's generation is odd.
    slot_generation: NonZeroU64,
}

impl PackedAllocation {
    fn new(allocation: OffsetAllocation) -> Self {
        let id = allocation.id;
        let packed = u64::from(id.slot) | u64::from(id.generation) << 32;
        Self {
            offset: allocation.offset,
            // A live generation is odd (OffsetAllocator::live_slot).
            slot_generation: NonZeroU64::new(packed).unwrap_or(NonZeroU64::MIN),
        }
    }
}

impl<const M: u32> OffsetAllocator<M> {
    /// [`allocate`](Self::allocate), packed: `None` on every error.
    ///
    /// Never inlined: inlined into the pools' allocation path (it is reached
    /// from four places there) it measured 1–2 ns slower per allocation.
    ///
    /// # Time complexity
    /// As [`allocate`](Self::allocate).
    #[inline(never)]
    pub(crate) fn allocate_packed(&mut self, size: u64, align: u64) -> Option<PackedAllocation> {
        self.allocate_body(size, align)
            .ok()
            .map(PackedAllocation::new)
    }

    /// [`allocate_packed`](Self::allocate_packed) with a [`Strategy`]
    /// (that of [`allocate_with`](Self::allocate_with)): `None` on every
    /// error. A call of its own, with the strategy as an argument, so that
    /// the common strategy's code stays as it was: the pools call it for
    /// any strategy but `MinTime` (a `match` of every strategy there, or a
    /// call that took the pools' request by reference, compiled the pools'
    /// allocation path to 3 to 8 more instructions per allocation:
    /// callgrind, the `mixed` peer trace).
    ///
    /// # Time complexity
    /// As [`allocate_with`](Self::allocate_with).
    #[inline(never)]
    pub(crate) fn allocate_packed_with(
        &mut self,
        size: u64,
        align: u64,
        strategy: Strategy,
    ) -> Option<PackedAllocation> {
        let placed = match strategy {
            Strategy::MinTime => return self.allocate_packed(size, align),
            Strategy::MinMemory => match self.allocate_tight(size, align) {
                Some(placed) => placed,
                None => return self.allocate_packed(size, align),
            },
            Strategy::MinOffset => self.allocate_lowest(size, align).ok()?,
            Strategy::MaxOffset => self.allocate_highest(size, align).ok()?,
        };
        Some(PackedAllocation::new(placed))
    }

    /// The id of `packed`, an allocation of this allocator.
    pub(crate) fn id_of(&self, packed: PackedAllocation) -> AllocationId {
        let bits = packed.slot_generation.get();
        AllocationId {
            slot: bits as u32,
            generation: (bits >> 32) as u32,
            owner: self.owner,
        }
    }

    /// [`free`](Self::free), packed: the size of the free range the freed
    /// bytes are now part of, or `None` on every error (nothing changes
    /// then).
    ///
    /// # Time complexity
    /// As [`free`](Self::free).
    #[inline(always)]
    pub(crate) fn free_packed(&mut self, id: AllocationId) -> Option<NonZeroU64> {
        self.free_parts(id.slot, id.generation, id.owner)
    }

    /// [`free_packed`](Self::free_packed) out of line, with the id in its
    /// three parts: they come in registers, where the 12-byte id went
    /// through the stack (callgrind, 1e5 operations: 0.2-0.6 % fewer
    /// instructions on the peer traces).
    #[inline(never)]
    fn free_parts(&mut self, slot: u32, generation: u32, owner: u32) -> Option<NonZeroU64> {
        let id = AllocationId {
            slot,
            generation,
            owner,
        };
        self.free_body(id)
            .ok()
            .and_then(|merged| NonZeroU64::new(merged.size))
    }

    /// An upper bound of the largest free range, 0 when nothing is free:
    /// the bound the highest non-empty bin keeps of its largest gap (as
    /// [`find_fit_exhaustive`](Self::find_fit_exhaustive) reads it), or the
    /// free bytes when fewer. Every gap of a lower bin is smaller than that
    /// bin's every gap, so no free range is larger. A request of more bytes
    /// cannot fit: the pools ask this before
    /// [`allocate_packed`](Self::allocate_packed), whose failing call costs
    /// far more (a call, the request's checks, the bin searches).
    ///
    /// The bin's bound alone may exceed the free bytes: it stays when a
    /// gap other than the bin's head leaves the bin, until a search sees
    /// the whole bin. Capped, the bound rules out every request a test of
    /// the free bytes would.
    ///
    /// # Time complexity
    /// O(1).
    #[inline]
    pub(crate) fn largest_free_bound(&self) -> u64 {
        self.mask
            .highest()
            .map_or(0, |bin| self.bin_max_hint[bin as usize])
            .min(self.free_bytes)
    }

    /// Whether an allocation slot is left: `allocate` fails with
    /// [`OffsetError::OutOfSlots`](super::OffsetError::OutOfSlots) when not.
    pub(crate) fn has_unused_slot(&self) -> bool {
        self.unused_slot != NIL
    }
}

/// The packed calls for the fuzz target (`fuzz/`), which sees only the
/// public API: built with `--cfg fuzzing` alone, which `cargo fuzz` sets and
/// no other build does.
#[cfg(fuzzing)]
impl<const M: u32> OffsetAllocator<M> {
    /// [`allocate_packed`](Self::allocate_packed), with the id unpacked.
    #[doc(hidden)]
    pub fn fuzz_allocate_packed(&mut self, size: u64, align: u64) -> Option<(u64, AllocationId)> {
        self.allocate_packed(size, align)
            .map(|packed| (packed.offset, self.id_of(packed)))
    }

    /// [`allocate_packed_with`](Self::allocate_packed_with), with the id
    /// unpacked.
    #[doc(hidden)]
    pub fn fuzz_allocate_packed_with(
        &mut self,
        size: u64,
        align: u64,
        strategy: Strategy,
    ) -> Option<(u64, AllocationId)> {
        self.allocate_packed_with(size, align, strategy)
            .map(|packed| (packed.offset, self.id_of(packed)))
    }

    /// [`free_packed`](Self::free_packed).
    #[doc(hidden)]
    pub fn fuzz_free_packed(&mut self, id: AllocationId) -> Option<NonZeroU64> {
        self.free_packed(id)
    }

    /// [`has_unused_slot`](Self::has_unused_slot).
    #[doc(hidden)]
    pub fn fuzz_has_unused_slot(&self) -> bool {
        self.has_unused_slot()
    }

    /// [`largest_free_bound`](Self::largest_free_bound).
    #[doc(hidden)]
    pub fn fuzz_largest_free_bound(&self) -> u64 {
        self.largest_free_bound()
    }

    /// [`gaps_around`](Self::gaps_around).
    #[doc(hidden)]
    pub fn fuzz_gaps_around(&self, id: AllocationId) -> Option<(u64, u64)> {
        self.gaps_around(id)
    }

    /// Sets unused `slot`'s generation to `generation`, as if allocated and
    /// freed that often, so that the fuzz target reaches a slot's
    /// retirement (2^31 reuses): `false`, changing nothing, unless `slot`
    /// is unused (on the stack of unused slots, not retired) and
    /// `generation` even and not below its own (an earlier one would make
    /// freed ids live again).
    #[doc(hidden)]
    pub fn fuzz_fast_forward_slot(&mut self, slot: u32, generation: u32) -> bool {
        let mut unused = self.unused_slot;
        while unused != NIL && unused != slot {
            unused = self.nodes[unused as usize].next;
        }
        let node = match self.nodes.get_mut(slot as usize) {
            Some(node) if unused == slot => node,
            _ => return false,
        };
        if generation % 2 != 0 || generation < node.generation() {
            return false;
        }
        node.set_generation(generation);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::super::OffsetError;
    use super::*;

    #[test]
    fn packed_calls_do_what_the_public_ones_do() {
        let mut packed = OffsetAllocator::<3>::new(1 << 20, 4).unwrap();
        let mut public = packed.clone();
        for (size, align) in [(100, 1), (300, 256), (5000, 4096), (7, 8)] {
            let a = packed.allocate_packed(size, align).unwrap();
            let b = public.allocate(size, align).unwrap();
            assert_eq!((a.offset, packed.id_of(a)), (b.offset, b.id));
        }
        // Out of slots: `None`, told apart by `has_unused_slot`.
        assert!(!packed.has_unused_slot());
        assert_eq!(packed.allocate_packed(1, 1), None);
        assert_eq!(public.allocate(1, 1), Err(OffsetError::OutOfSlots(4)));
        // Out of space.
        packed.reserve_slots(1).unwrap();
        assert!(packed.has_unused_slot());
        assert_eq!(packed.allocate_packed(1 << 20, 1), None);

        let ids: Vec<_> = packed.allocations().map(|a| a.id).collect();
        for id in ids {
            let merged = packed.free_packed(id).unwrap();
            assert_eq!(Ok(merged.get()), public.free(id).map(|r| r.size));
            // A double free changes nothing.
            assert_eq!(packed.free_packed(id), None);
        }
        assert_eq!(packed.storage_report(), public.storage_report());
    }

    /// The bound is never below the largest free range, so a request it
    /// turns away could not have been placed; 0 when nothing is free.
    #[test]
    fn the_free_bound_covers_the_largest_free_range() {
        let mut heap = OffsetAllocator::<3>::new(1 << 20, 256).unwrap();
        assert_eq!(heap.largest_free_bound(), 1 << 20);
        let mut live = Vec::new();
        let mut state = 0x9e37_79b9_7f4a_7c15_u64;
        for step in 0..4000 {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            if state % 3 == 0 && !live.is_empty() {
                let id = live.swap_remove((state >> 8) as usize % live.len());
                heap.free_packed(id).unwrap();
            } else {
                let size = 1 + (state >> 20) % 20_000;
                let align = 1 << ((state >> 40) % 10);
                let bound = heap.largest_free_bound();
                match heap.allocate_packed(size, align) {
                    Some(packed) => {
                        assert!(size <= bound, "step {step}: {size} placed past {bound}");
                        live.push(heap.id_of(packed));
                    }
                    None if heap.has_unused_slot() => {}
                    None => heap.reserve_slots(64).unwrap(),
                }
            }
            let largest = heap.storage_report().largest_free_range;
            assert!(heap.largest_free_bound() >= largest, "step {step}");
            assert!(
                heap.largest_free_bound() <= heap.free_bytes(),
                "step {step}"
            );
        }
        for id in live.drain(..) {
            heap.free_packed(id).unwrap();
        }
        assert_eq!(heap.largest_free_bound(), 1 << 20);
        heap.allocate_packed(1 << 20, 1).unwrap();
        assert_eq!(heap.largest_free_bound(), 0);
        assert_eq!(heap.allocate_packed(1, 1), None);
    }

    /// The bound is never above the free bytes either, so that it rules
    /// out at least what the test of the free bytes it replaced did: a bin
    /// whose largest gap was placed in (not its head, so its bound stays)
    /// may be left with smaller gaps only.
    #[test]
    fn the_free_bound_never_exceeds_the_free_bytes() {
        let mut heap = OffsetAllocator::<3>::new(2000, 8).unwrap();
        let mut ids = Vec::new();
        for size in [10, 1000, 10, 970, 10] {
            let packed = heap.allocate_packed(size, 1).unwrap();
            ids.push(heap.id_of(packed));
        }
        // Two gaps in the bin [960, 1024): 1000 bytes at 10, then 970 at
        // 1020, the bin's head.
        heap.free_packed(ids[1]).unwrap();
        heap.free_packed(ids[3]).unwrap();
        let placed = heap.allocate_packed(1000, 1).unwrap();
        assert_eq!(placed.offset, 10);
        assert_eq!(heap.free_bytes(), 970);
        assert!(
            heap.largest_free_bound() <= heap.free_bytes(),
            "bound {} over {} free bytes",
            heap.largest_free_bound(),
            heap.free_bytes()
        );
        assert!(heap.largest_free_bound() >= 970);
    }
}
