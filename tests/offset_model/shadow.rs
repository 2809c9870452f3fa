//! Shadow models of the offset core, shared by the property tests
//! (`tests/offset_model.rs`) and the fuzz target (`fuzz/`).
//!
//! A shadow replays one operation on the real allocator and on a plain model
//! (a `BTreeMap` of live ranges whose insert panics on overlap), then checks
//! every figure the allocator reports against the model. Any disagreement
//! panics with the operation that caused it.
//!
//! This file holds the shadow of the offset core (`Op`, `Shadow`) and the
//! checks both shadows share; `Shadow`'s placements (`allocate` under each
//! strategy, `allocate_below`, `allocate_in_gap`) are in
//! `shadow/placement.rs`, and the linear ring's shadow (`LinearOp`,
//! `LinearShadow`) is in `shadow/linear_ring.rs`, re-exported here.

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use vk_suballoc::offset::{
    AllocationId, Counters, FreeRange, OffsetAllocation, OffsetAllocator, OffsetError,
    StorageReport, Strategy, MAX_CAPACITY, MAX_SLOTS,
};

#[path = "shadow/linear_ring.rs"]
mod linear_ring;
#[path = "shadow/placement.rs"]
mod placement;

pub use linear_ring::{LinearOp, LinearShadow};

/// One operation on an [`OffsetAllocator`].
#[derive(Clone, Copy, Debug)]
pub enum Op {
    /// `allocate(size, align)`, taken as given (zero sizes and alignments that
    /// are no power of two included); placed at the first aligned offset of
    /// a free range of the size class `Strategy::MinTime` names (see
    /// `good_fit_classes`).
    Allocate { size: u64, align: u64 },
    /// `allocate_with(size, align, Strategy::MinMemory)`: checked as
    /// `Allocate`, and placed where `Strategy::MinMemory` says: in a free
    /// range of the class `size` rounds down to when one there holds it
    /// (one of them when that class has more than 8), else where
    /// `allocate` would have placed it.
    AllocateMinMemory { size: u64, align: u64 },
    /// `allocate_with(size, align, Strategy::MinOffset)`: checked as
    /// `Allocate`, and placed at the lowest aligned offset of any free
    /// range that holds it.
    AllocateMinOffset { size: u64, align: u64 },
    /// `allocate_with(size, align, Strategy::MaxOffset)`: checked as
    /// `Allocate`, and placed at the highest aligned offset of any free
    /// range that holds it.
    AllocateMaxOffset { size: u64, align: u64 },
    /// Frees the live allocation number `pick % live` in address order.
    Free { pick: usize },
    /// Frees an id freed before, number `pick % freed` counted back from
    /// the one freed last: must be `StaleId` and change nothing.
    FreeStale { pick: usize },
    /// Frees an id of another allocator: must be `ForeignId`.
    FreeForeign,
    /// `grow(extra)`.
    Grow { extra: u64 },
    /// `grow(target - capacity)` (0 when the capacity is larger already):
    /// reaches exactly [`MAX_CAPACITY`], or one past it, whatever came before.
    GrowTo { target: u64 },
    /// `reserve_slots(additional)`.
    ReserveSlots { additional: u32 },
    /// `allocation_at(at)`.
    Probe { at: u64 },
    /// `allocate_below(size, align, end)`, with `end` the offset of the live
    /// allocation number `pick % live` in address order (a compaction's
    /// move), or the capacity when none is live; or, when `pick` is odd, a
    /// free range's inside: `pick / 2 % (capacity + 1)`.
    AllocateBelow { size: u64, align: u64, pick: usize },
    /// `allocate_in_gap(after, size, align)`, `after` the live allocation
    /// number `pick % (live + 1)` in address order, or `None` for `live`;
    /// now and then (`pick` a multiple of 7) a freed id, which must be
    /// `StaleId`.
    AllocateInGap { size: u64, align: u64, pick: usize },
    /// `allocate(size, 1)`, `size` the free range number `pick % ranges`
    /// in address order less what `leave` leaves free of it: below
    /// `0x80`, `leave / 128` of it (rounded down, so that at least a byte
    /// is asked for; with `leave` 0 all of it); from `0x80`, as many bytes
    /// as the live allocation number `leave % 16 % live` (address order)
    /// holds, less `leave / 16 % 8`, when that is fewer than the range
    /// (else all of it). Checked as `Allocate` ([`resolve`](Shadow::resolve) turns it
    /// into one); nothing when no range is free. It fills the allocator to
    /// the byte and takes a chosen range whole, which requests of
    /// unrelated sizes almost never do, and leaves free ranges the size of
    /// an allocation, which frees the size of a free range: the way to the
    /// states where a bin's bound outlives the range it was taken from
    /// (its largest range taken whole, smaller ones left in the bin, and
    /// fewer bytes free in all than that range had), which
    /// `largest_free_bound` must cap.
    FillFreeRange { pick: usize, leave: u8 },
}

/// Inserts `[offset, offset + size)` into a map of disjoint ranges, panicking
/// if it overlaps one already there.
fn insert_disjoint<V>(map: &mut BTreeMap<u64, (u64, V)>, offset: u64, size: u64, value: V) {
    if let Some((&below, &(below_size, _))) = map.range(..=offset).next_back() {
        assert!(
            below + below_size <= offset,
            "overlap: [{offset}, {}) with [{below}, {})",
            offset + size,
            below + below_size
        );
    }
    if let Some((&above, &(above_size, _))) = map.range(offset..).next() {
        assert!(
            offset + size <= above,
            "overlap: [{offset}, {}) with [{above}, {})",
            offset + size,
            above + above_size
        );
    }
    map.insert(offset, (size, value));
}

/// The first offset at or after `start` that is a multiple of `align`.
fn align_up(start: u64, align: u64) -> Option<u64> {
    start.checked_next_multiple_of(align)
}

/// An [`OffsetAllocator`] and its model.
pub struct Shadow<const M: u32> {
    pub heap: OffsetAllocator<M>,
    foreign_id: AllocationId,
    capacity: u64,
    slots: u32,
    /// Per slot (index 0, the sentinel's, unused): its generation as the
    /// docs of `AllocationId` define it, kept from the allocations and
    /// frees the model saw (0 unused, one more at each allocation and each
    /// free, odd while live), since ids do not show theirs.
    generations: Vec<u32>,
    /// Slots retired: each freed its last generation, `u32::MAX` (a slot
    /// retires rather than let its generation come round, see
    /// `AllocationId`), and is never handed out again, though
    /// `slot_count` and `OutOfSlots` still count it. Only a run that
    /// fast-forwards generations ([`fast_forward`](Self::fast_forward):
    /// the unit test `shadow_retirement`, the fuzz target's `AgeSlot`)
    /// reaches one.
    retired: BTreeSet<u32>,
    /// Requests refused `OutOfSlots` while a retired slot was among the
    /// slots: the case a model that counted only live allocations got wrong.
    pub refused_with_retired: u64,
    /// offset -> (size, id).
    live: BTreeMap<u64, (u64, AllocationId)>,
    /// Ids freed before, the most recent last (a bounded history).
    freed: VecDeque<AllocationId>,
    counters: Counters,
    /// The most recent successful allocation, probed after every step.
    last: Option<OffsetAllocation>,
}

impl<const M: u32> Shadow<M> {
    pub fn new(capacity: u64, slots: u32) -> Self {
        let heap = OffsetAllocator::<M>::new(capacity, slots).expect("valid configuration");
        let mut foreign = OffsetAllocator::<M>::new(64, 1).unwrap();
        let foreign_id = foreign.allocate(1, 1).unwrap().id;
        let this = Self {
            heap,
            foreign_id,
            capacity,
            slots,
            generations: vec![0; slots as usize + 1],
            retired: BTreeSet::new(),
            refused_with_retired: 0,
            live: BTreeMap::new(),
            freed: VecDeque::new(),
            counters: Counters::default(),
            last: None,
        };
        this.check();
        this
    }

    /// Applies `op` to allocator and model, then checks every figure.
    pub fn apply(&mut self, op: Op) {
        match op {
            Op::Allocate { size, align } => self.allocate(size, align, Strategy::MinTime),
            Op::AllocateMinMemory { size, align } => {
                self.allocate(size, align, Strategy::MinMemory)
            }
            Op::AllocateMinOffset { size, align } => {
                self.allocate(size, align, Strategy::MinOffset)
            }
            Op::AllocateMaxOffset { size, align } => {
                self.allocate(size, align, Strategy::MaxOffset)
            }
            Op::Free { pick } => {
                if let Some((&offset, &(size, id))) =
                    self.live.iter().nth(pick % self.live.len().max(1))
                {
                    // The free range it joins: from the end of the live
                    // allocation before it to the start of the one after.
                    let start = self
                        .live
                        .range(..offset)
                        .next_back()
                        .map_or(0, |(&o, &(s, _))| o + s);
                    let end = self
                        .live
                        .range(offset + 1..)
                        .next()
                        .map_or(self.heap.capacity(), |(&o, _)| o);
                    let merged = FreeRange {
                        offset: start,
                        size: end - start,
                    };
                    assert_eq!(self.heap.free(id), Ok(merged));
                    self.live.remove(&offset);
                    self.counters.live_allocations -= 1;
                    self.counters.live_bytes -= size;
                    self.counters.frees += 1;
                    let slot = id.slot() as usize;
                    if self.generations[slot] == u32::MAX {
                        self.retired.insert(id.slot());
                    }
                    self.generations[slot] = self.generations[slot].wrapping_add(1);
                    if self.freed.len() == 64 {
                        self.freed.pop_front();
                    }
                    self.freed.push_back(id);
                    if self.last.is_some_and(|a| a.id == id) {
                        self.last = None;
                    }
                }
            }
            Op::FreeStale { pick } => {
                if !self.freed.is_empty() {
                    let id = self.freed[self.freed.len() - 1 - pick % self.freed.len()];
                    assert_eq!(self.heap.free(id), Err(OffsetError::StaleId));
                    assert_eq!(self.heap.get(id), None);
                }
            }
            Op::FreeForeign => {
                assert_eq!(self.heap.free(self.foreign_id), Err(OffsetError::ForeignId));
                assert_eq!(self.heap.get(self.foreign_id), None);
            }
            Op::GrowTo { target } => self.apply(Op::Grow {
                extra: target.saturating_sub(self.capacity),
            }),
            Op::Grow { extra } => {
                let result = self.heap.grow(extra);
                match self
                    .capacity
                    .checked_add(extra)
                    .filter(|&c| c <= MAX_CAPACITY)
                {
                    Some(capacity) => {
                        assert_eq!(result, Ok(()));
                        self.capacity = capacity;
                    }
                    None => assert_eq!(
                        result,
                        Err(OffsetError::CapacityTooLarge {
                            requested: self.capacity.saturating_add(extra),
                            max: MAX_CAPACITY
                        })
                    ),
                }
            }
            Op::ReserveSlots { additional } => {
                let result = self.heap.reserve_slots(additional);
                let total = u64::from(self.slots) + u64::from(additional);
                if total <= u64::from(MAX_SLOTS) {
                    assert_eq!(result, Ok(()));
                    self.slots += additional;
                    self.generations.resize(self.slots as usize + 1, 0);
                } else {
                    assert_eq!(
                        result,
                        Err(OffsetError::TooManySlots {
                            requested: total,
                            max: u64::from(MAX_SLOTS)
                        })
                    );
                }
            }
            Op::AllocateBelow { size, align, pick } => {
                let end = if pick % 2 == 1 {
                    (pick / 2) as u64 % (self.capacity + 1)
                } else {
                    self.live
                        .keys()
                        .nth(pick / 2 % self.live.len().max(1))
                        .copied()
                        .unwrap_or(self.capacity)
                };
                self.allocate_below(size, align, end);
            }
            Op::AllocateInGap { size, align, pick } => self.allocate_in_gap(size, align, pick),
            Op::FillFreeRange { .. } => {
                if let resolved @ Op::Allocate { .. } = self.resolve(op) {
                    // Its own checks included.
                    return self.apply(resolved);
                }
            }
            Op::Probe { at } => {
                let at = at % (self.capacity + 1);
                assert_eq!(
                    self.heap.allocation_at(at),
                    self.covering(at),
                    "allocation_at({at})"
                );
            }
        }
        self.check();
    }

    /// `op` with its sizes taken from the model's state: a
    /// [`Op::FillFreeRange`] as the [`Op::Allocate`] it stands for, or as
    /// it is when no range is free; any other `op` as it is. For a caller
    /// that drives the allocator's twin alongside (the fuzz target's packed
    /// calls).
    pub fn resolve(&self, op: Op) -> Op {
        let Op::FillFreeRange { pick, leave } = op else {
            return op;
        };
        let ranges = self.free_ranges();
        let Some(range) = ranges.get(pick % ranges.len().max(1)) else {
            return op;
        };
        let left = if leave < 0x80 {
            // No overflow: a range is below 2^48 bytes.
            range.size * u64::from(leave) / 128
        } else {
            let like = usize::from(leave % 16) % self.live.len().max(1);
            self.live
                .values()
                .nth(like)
                .map(|&(size, _)| size.saturating_sub(u64::from(leave / 16 % 8)))
                .filter(|&left| left < range.size)
                .unwrap_or(0)
        };
        Op::Allocate {
            size: range.size - left,
            align: 1,
        }
    }

    /// Frees everything left, then checks that one free range spans the
    /// whole capacity.
    pub fn finish(mut self) {
        while !self.live.is_empty() {
            // Free from the middle outwards, so merges happen on both sides.
            self.apply(Op::Free {
                pick: self.live.len() / 2,
            });
        }
        let ranges: Vec<FreeRange> = self.heap.free_ranges().collect();
        if self.capacity == 0 {
            assert!(ranges.is_empty());
        } else {
            assert_eq!(
                ranges,
                vec![FreeRange {
                    offset: 0,
                    size: self.capacity
                }]
            );
        }
        let report = self.heap.storage_report();
        assert_eq!(report.largest_free_range, self.capacity);
        assert_eq!(report.free_ranges, u64::from(self.capacity > 0));
        assert!(self.heap.is_empty());
        // The whole capacity is one usable range again.
        if self.capacity > 0 && self.has_unused_slot() {
            let whole = self
                .heap
                .allocate(self.capacity, 1)
                .expect("whole capacity");
            assert_eq!(whole.offset, 0);
        }
    }

    /// Whether an allocation slot is free: neither live nor retired.
    pub fn has_unused_slot(&self) -> bool {
        (self.live.len() + self.retired.len()) < self.slots as usize
    }

    /// The id freed last, if any.
    pub fn last_freed(&self) -> Option<AllocationId> {
        self.freed.back().copied()
    }

    /// Slots retired so far.
    pub fn retired_slots(&self) -> usize {
        self.retired.len()
    }

    /// The slots neither live nor retired, with their generations (even).
    pub fn unused_slots(&self) -> Vec<(u32, u32)> {
        let live: BTreeSet<u32> = self.live.values().map(|(_, id)| id.slot()).collect();
        (1..=self.slots)
            .filter(|slot| !live.contains(slot) && !self.retired.contains(slot))
            .map(|slot| (slot, self.generations[slot as usize]))
            .collect()
    }

    /// Tells the model that unused `slot` now has `generation` (even, not
    /// below its own: an earlier one would make freed ids live again), as
    /// if allocated and freed that often: the caller set the allocator's
    /// (a hook the public API lacks: a unit test, or the fuzz build's).
    pub fn fast_forward(&mut self, slot: u32, generation: u32) {
        assert!(
            generation % 2 == 0
                && generation >= self.generations[slot as usize]
                && self.unused_slots().iter().any(|&(s, _)| s == slot),
            "fast_forward({slot}, {generation}): a generation back, odd, or of a slot in use"
        );
        self.generations[slot as usize] = generation;
    }

    /// Counts a successful allocation in the model, whose id must name a
    /// slot neither live nor retired.
    fn record(&mut self, allocation: OffsetAllocation) {
        let slot = allocation.id.slot();
        let unused = self.unused_slots();
        assert!(
            unused.iter().any(|&(s, _)| s == slot),
            "{allocation:?} in a slot that is live, retired or missing: the unused \
             ones are {unused:?}, retired {:?}",
            self.retired
        );
        self.generations[slot as usize] += 1;
        let size = allocation.size;
        insert_disjoint(&mut self.live, allocation.offset, size, allocation.id);
        let c = &mut self.counters;
        c.live_allocations += 1;
        c.live_bytes += size;
        c.peak_live_bytes = c.peak_live_bytes.max(c.live_bytes);
        c.allocations += 1;
        // Saturating, as `Counters::requested_bytes` documents.
        c.requested_bytes = c.requested_bytes.saturating_add(size);
        self.last = Some(allocation);
    }

    /// The model's free ranges: the complement of the live ranges.
    fn free_ranges(&self) -> Vec<FreeRange> {
        let mut ranges = Vec::new();
        let mut cursor = 0;
        for (&offset, &(size, _)) in &self.live {
            if offset > cursor {
                ranges.push(FreeRange {
                    offset: cursor,
                    size: offset - cursor,
                });
            }
            cursor = offset + size;
        }
        if self.capacity > cursor {
            ranges.push(FreeRange {
                offset: cursor,
                size: self.capacity - cursor,
            });
        }
        ranges
    }

    fn covering(&self, at: u64) -> Option<OffsetAllocation> {
        let (&offset, &(size, id)) = self.live.range(..=at).next_back()?;
        (at < offset + size).then_some(OffsetAllocation { id, offset, size })
    }

    /// Every figure the allocator reports equals the model's.
    pub fn check(&self) {
        let heap = &self.heap;
        let expected: Vec<OffsetAllocation> = self
            .live
            .iter()
            .map(|(&offset, &(size, id))| OffsetAllocation { id, offset, size })
            .collect();
        let actual: Vec<OffsetAllocation> = heap.allocations().collect();
        assert_eq!(actual, expected, "allocations in address order");
        for allocation in &expected {
            assert_eq!(heap.get(allocation.id), Some(*allocation));
        }

        let free = self.free_ranges();
        assert_eq!(heap.free_ranges().collect::<Vec<_>>(), free, "free ranges");
        // Each free range follows the live allocation that ends where it
        // starts (none at offset 0).
        for (after, range) in heap.free_ranges_after() {
            let expected = self
                .live
                .range(..range.offset)
                .next_back()
                .filter(|(&offset, &(size, _))| offset + size == range.offset)
                .map(|(_, &(_, id))| id);
            assert_eq!(after, expected, "the allocation before {range:?}");
        }
        let free_bytes: u64 = free.iter().map(|r| r.size).sum();
        assert_eq!(
            heap.storage_report(),
            StorageReport {
                capacity: self.capacity,
                free_bytes,
                largest_free_range: free.iter().map(|r| r.size).max().unwrap_or(0),
                free_ranges: free.len() as u64,
            }
        );
        assert_eq!(heap.free_bytes(), free_bytes);
        assert_eq!(heap.capacity(), self.capacity);
        assert_eq!(heap.slot_count(), self.slots);
        // The host memory the docs give (README, "Metadata"; the type's
        // docs): 32 bytes per slot and the sentinel, a bin table of
        // `12 << (M + 6)` bytes, and the struct.
        assert_eq!(
            heap.metadata_bytes(),
            32 * (self.slots as usize + 1)
                + (12 << (M + 6))
                + std::mem::size_of::<OffsetAllocator<M>>(),
            "metadata_bytes with {} slots",
            self.slots
        );
        assert_eq!(heap.is_empty(), self.live.is_empty());
        assert_eq!(heap.counters(), &self.counters);

        // Reverse lookups: both ends of the latest allocation, the first byte
        // of a few free ranges, and the edges of the address space.
        let mut probes = vec![0, self.capacity.saturating_sub(1), self.capacity];
        if let Some(last) = self.last {
            probes.extend([last.offset, last.end() - 1, last.end()]);
        }
        probes.extend(free.iter().take(3).map(|r| r.offset));
        for at in probes {
            assert_eq!(
                heap.allocation_at(at),
                self.covering(at),
                "allocation_at({at})"
            );
        }
    }
}

/// The error both allocators must return for a request that is invalid
/// whatever their state: zero size, then a non-power-of-two alignment.
fn bad_input_error(size: u64, align: u64) -> Option<OffsetError> {
    if size == 0 {
        Some(OffsetError::ZeroSize)
    } else if !align.is_power_of_two() {
        Some(OffsetError::AlignmentNotPowerOfTwo(align))
    } else {
        None
    }
}
