//! Fuzz target: arbitrary operation sequences on the offset allocator (every
//! mantissa width) and the linear ring, each checked step by step against the
//! shadow models that the property tests use (`tests/offset_model/shadow.rs`).
//! A clone of each offset allocator runs the packed calls of the Vulkan pools
//! (`allocate_packed`, `allocate_packed_with` for the other strategies, `free_packed`) alongside and
//! must stay identical to it.
//! Any disagreement, overlap or false out-of-space panics, which libFuzzer
//! reports as a crash with the input that caused it.

#![no_main]

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;

// The shared model is the main crate's test code, whose MSRV (1.80) has no
// `u64::is_multiple_of`, which nightly clippy asks for.
#[allow(unknown_lints, clippy::manual_is_multiple_of)]
#[path = "../../tests/offset_model/shadow.rs"]
mod shadow;

use std::collections::VecDeque;

use shadow::{LinearOp, LinearShadow, Op, Shadow};
use vk_suballoc::offset::{
    AllocationId, OffsetAllocation, OffsetAllocator, OffsetError, Strategy, MAX_CAPACITY, MAX_SLOTS,
};

/// One operation; sizes come as an exponent and low bits, so that small and
/// huge sizes are equally easy for the fuzzer to reach.
#[derive(Arbitrary, Debug)]
enum FuzzOp {
    Allocate {
        size_log2: u8,
        size_bits: u64,
        align_log2: u8,
    },
    Free {
        pick: u16,
    },
    FreeStale {
        pick: u8,
    },
    FreeForeign,
    Grow {
        extra_log2: u8,
        extra_bits: u64,
    },
    /// Grows to `MAX_CAPACITY - 2 + target % 4`: exactly the maximum, just
    /// short of it, or one past it.
    GrowToMax {
        target: u8,
    },
    /// `reserve_slots(additional % 8)`, or for `0xfe` and `0xff` a count
    /// that takes the total past `MAX_SLOTS` whatever the slots are
    /// (`u32::MAX - 1` or `u32::MAX`): `TooManySlots`, before any memory
    /// is asked for.
    ReserveSlots {
        additional: u8,
    },
    Probe {
        at: u64,
    },
    FinishFrame,
    /// The ring's `LinearOp::Reclaim`.
    Reclaim {
        target: u8,
    },
    /// A compaction's probe below the live allocation number `pick`.
    AllocateBelow {
        size_log2: u8,
        size_bits: u64,
        align_log2: u8,
        pick: u16,
    },
    /// A placement in the free range after the live allocation `pick`.
    AllocateInGap {
        size_log2: u8,
        size_bits: u64,
        align_log2: u8,
        pick: u16,
    },
    /// `allocate_with(.., Strategy::MinMemory)`.
    AllocateMinMemory {
        size_log2: u8,
        size_bits: u64,
        align_log2: u8,
    },
    /// `allocate_with(.., Strategy::MinOffset)`.
    AllocateMinOffset {
        size_log2: u8,
        size_bits: u64,
        align_log2: u8,
    },
    /// `allocate_with(.., Strategy::MaxOffset)`.
    AllocateMaxOffset {
        size_log2: u8,
        size_bits: u64,
        align_log2: u8,
    },
    /// `allocate(size, 1)` of the free range number `pick` (in address
    /// order), all of it or all but a part (`Op::FillFreeRange`: for
    /// `leave` 0 all of it, below `0x80` all but `leave / 128` of it, from
    /// `0x80` all but the size of a live allocation less a few bytes):
    /// fills the allocator to the byte and takes a chosen range whole, the
    /// states where `largest_free_bound` must be capped by the free bytes
    /// (a bin's bound outliving the range it was taken from), which
    /// requests of unrelated sizes reached once in 15 minutes from an
    /// empty corpus.
    FillFreeRange {
        pick: u8,
        leave: u8,
    },
    /// Fast-forwards the unused slot number `pick` (neither live nor
    /// retired, in index order) to `reuses_left % 4` reuses before its
    /// last generation, in the allocator, its twin and the model, as if
    /// allocated and freed 2^31 times less that: its slot then retires
    /// within a few reuses, which no input reaches otherwise. For
    /// `reuses_left` of `0x80` and more, instead the slot of the id freed
    /// last, if unused, by 2^15 - 1 reuses: the next allocation takes
    /// that slot (the top of the unused stack) with a generation whose
    /// low 16 bits are that id's, which `FreeStale { pick: 0 }` must
    /// still refuse (the node keeps the generation in two 16-bit halves).
    AgeSlot {
        pick: u8,
        reuses_left: u8,
    },
}

#[derive(Arbitrary, Debug)]
struct Input {
    /// Selects the allocator: mantissa width 2..=6, or the linear ring.
    allocator: u8,
    capacity_log2: u8,
    capacity_bits: u64,
    slots: u8,
    ops: Vec<FuzzOp>,
}

/// A value in `[2^e, 2^(e+1))` with `e = log2 % (max_log2 + 1)`; `0xff` gives 0.
fn log_uniform(log2: u8, bits: u64, max_log2: u32) -> u64 {
    if log2 == 0xff {
        return 0;
    }
    let e = u32::from(log2) % (max_log2 + 1);
    (1u64 << e) | (bits & ((1u64 << e) - 1))
}

/// `2^(a % 64)`, or an invalid alignment for `0xfe` and `0xff`.
fn alignment(align_log2: u8) -> u64 {
    match align_log2 {
        0xfe => 0,
        0xff => 3,
        a if a >= 0x80 => 1,
        a => 1u64 << (a % 64),
    }
}

/// A request size: log-uniform up to twice the capacity, or for `0xfe`
/// within a few bytes of the initial `capacity` (the whole allocator).
fn request_size(size_log2: u8, size_bits: u64, capacity: u64, capacity_log2: u32) -> u64 {
    if size_log2 == 0xfe {
        capacity.saturating_add_signed((size_bits % 7) as i64 - 4)
    } else {
        log_uniform(size_log2, size_bits, capacity_log2 + 1)
    }
}

fn to_op(op: &FuzzOp, capacity: u64, capacity_log2: u32) -> Option<Op> {
    Some(match *op {
        FuzzOp::Allocate {
            size_log2,
            size_bits,
            align_log2,
        } => Op::Allocate {
            size: request_size(size_log2, size_bits, capacity, capacity_log2),
            align: alignment(align_log2),
        },
        FuzzOp::Free { pick } => Op::Free {
            pick: usize::from(pick),
        },
        FuzzOp::FreeStale { pick } => Op::FreeStale {
            pick: usize::from(pick),
        },
        FuzzOp::FreeForeign => Op::FreeForeign,
        FuzzOp::Grow {
            extra_log2,
            extra_bits,
        } => Op::Grow {
            extra: if extra_log2 == 0xfe {
                u64::MAX
            } else {
                log_uniform(extra_log2, extra_bits, capacity_log2)
            },
        },
        FuzzOp::GrowToMax { target } => Op::GrowTo {
            target: MAX_CAPACITY - 2 + u64::from(target % 4),
        },
        FuzzOp::ReserveSlots { additional } => Op::ReserveSlots {
            additional: match additional {
                0xfe | 0xff => u32::MAX - u32::from(additional & 1),
                a => u32::from(a % 8),
            },
        },
        FuzzOp::Probe { at } => Op::Probe { at },
        FuzzOp::AllocateBelow {
            size_log2,
            size_bits,
            align_log2,
            pick,
        } => Op::AllocateBelow {
            size: request_size(size_log2, size_bits, capacity, capacity_log2),
            align: alignment(align_log2),
            pick: usize::from(pick),
        },
        FuzzOp::AllocateInGap {
            size_log2,
            size_bits,
            align_log2,
            pick,
        } => Op::AllocateInGap {
            size: request_size(size_log2, size_bits, capacity, capacity_log2),
            align: alignment(align_log2),
            pick: usize::from(pick),
        },
        FuzzOp::AllocateMinMemory {
            size_log2,
            size_bits,
            align_log2,
        } => Op::AllocateMinMemory {
            size: request_size(size_log2, size_bits, capacity, capacity_log2),
            align: alignment(align_log2),
        },
        FuzzOp::AllocateMinOffset {
            size_log2,
            size_bits,
            align_log2,
        } => Op::AllocateMinOffset {
            size: request_size(size_log2, size_bits, capacity, capacity_log2),
            align: alignment(align_log2),
        },
        FuzzOp::AllocateMaxOffset {
            size_log2,
            size_bits,
            align_log2,
        } => Op::AllocateMaxOffset {
            size: request_size(size_log2, size_bits, capacity, capacity_log2),
            align: alignment(align_log2),
        },
        FuzzOp::FillFreeRange { pick, leave } => Op::FillFreeRange {
            pick: usize::from(pick),
            leave,
        },
        FuzzOp::FinishFrame | FuzzOp::Reclaim { .. } | FuzzOp::AgeSlot { .. } => return None,
    })
}

fn to_linear_op(op: &FuzzOp, capacity: u64, capacity_log2: u32) -> LinearOp {
    match *op {
        FuzzOp::Allocate {
            size_log2,
            size_bits,
            align_log2,
        } => LinearOp::Allocate {
            size: request_size(size_log2, size_bits, capacity, capacity_log2),
            align: match align_log2 {
                // Invalid (0 and 3), up to 2^63 (from 0xc0: 2^2 to 2^63),
                // mostly small.
                0xfe => 0,
                0xff => 3,
                a if a >= 0xc0 => 1 << (a % 64 + 2),
                a => 1 << (a % 12),
            },
        },
        FuzzOp::FinishFrame | FuzzOp::Free { .. } | FuzzOp::FreeStale { .. } => {
            LinearOp::FinishFrame
        }
        FuzzOp::Reclaim { target } => LinearOp::Reclaim {
            target: u64::from(target),
        },
        _ => LinearOp::Reclaim { target: 1 },
    }
}

fn run_offset<const M: u32>(input: &Input, capacity: u64, capacity_log2: u32) {
    let mut shadow = Shadow::<M>::new(capacity, u32::from(input.slots));
    let mut twin = PackedTwin::new(&shadow.heap);
    for op in &input.ops {
        if let FuzzOp::AgeSlot { pick, reuses_left } = *op {
            twin.age_slot(&mut shadow, pick, reuses_left);
        } else if let Some(op) = to_op(op, capacity, capacity_log2) {
            twin.apply(&mut shadow, op);
        }
    }
    shadow.finish();
}

/// A clone of the shadow's allocator driven through the packed calls the
/// Vulkan pools use (`allocate_packed`, `free_packed`, `has_unused_slot`,
/// reachable here through their `cfg(fuzzing)` wrappers): after every step
/// it must hold exactly what the public calls left in the shadow's. Steps
/// without a packed call copy the shadow's allocator again. After every
/// step it also checks what the pools read besides (`largest_free_bound`,
/// `gaps_around`) and the search statistics `allocate` documents.
struct PackedTwin<const M: u32> {
    heap: OffsetAllocator<M>,
    foreign_id: AllocationId,
    /// Ids the twin freed, the most recent last (a bounded history).
    freed: VecDeque<AllocationId>,
}

impl<const M: u32> PackedTwin<M> {
    fn new(heap: &OffsetAllocator<M>) -> Self {
        let mut foreign = OffsetAllocator::<M>::new(64, 1).unwrap();
        let foreign_id = foreign.allocate(1, 1).unwrap().id;
        Self {
            heap: heap.clone(),
            foreign_id,
            freed: VecDeque::new(),
        }
    }

    /// Applies `op` to the shadow and the twin ([`apply_op`](Self::apply_op)),
    /// then checks the public allocator's search statistics against what
    /// `allocate`'s docs give: a request refused before any search (a zero
    /// size, an alignment that is no power of two, a size past the capacity,
    /// no unused slot) counts none, a space error exactly one, a success at
    /// most one and, placed by a walk of the allocations (`MinOffset`,
    /// `MaxOffset`), none; no other call (frees, probes, `allocate_below`,
    /// `allocate_in_gap`, `grow`, `reserve_slots`) counts any, and no gap is
    /// visited without a search.
    fn apply(&mut self, shadow: &mut Shadow<M>, op: Op) {
        // A `FillFreeRange` as the `Allocate` it is, for the packed call.
        let op = shadow.resolve(op);
        let heap = &shadow.heap;
        let (failed_before, searches_before) =
            (heap.counters().failed_allocations, heap.search_stats());
        let request = match op {
            Op::Allocate { size, align }
            | Op::AllocateMinMemory { size, align }
            | Op::AllocateMinOffset { size, align }
            | Op::AllocateMaxOffset { size, align } => Some(
                size == 0
                    || !align.is_power_of_two()
                    || size > heap.capacity()
                    || !shadow.has_unused_slot(),
            ),
            _ => None,
        };
        self.apply_op(shadow, op);
        let heap = &shadow.heap;
        let searches = heap.search_stats();
        let searched = searches.boundary_searches - searches_before.boundary_searches;
        let failed = heap.counters().failed_allocations > failed_before;
        let expected = match (request, op) {
            (None | Some(true), _) => 0..=0,
            (Some(false), _) if failed => 1..=1,
            (Some(false), Op::AllocateMinOffset { .. } | Op::AllocateMaxOffset { .. }) => 0..=0,
            (Some(false), _) => 0..=1,
        };
        assert!(
            expected.contains(&searched),
            "{op:?} counted {searched} boundary searches, expected {expected:?}"
        );
        if searched == 0 {
            assert_eq!(
                searches.gaps_visited, searches_before.gaps_visited,
                "{op:?} visited gaps without a boundary search"
            );
        }
    }

    /// Applies `op` to the shadow (which checks it against its model) and
    /// its packed counterpart to the twin, then compares the two.
    fn apply_op(&mut self, shadow: &mut Shadow<M>, op: Op) {
        match op {
            Op::Allocate { size, align } => {
                let packed = self.heap.fuzz_allocate_packed(size, align);
                shadow.apply(op);
                if let Some((offset, id)) = packed {
                    assert_eq!(
                        shadow.heap.get(id),
                        Some(OffsetAllocation { id, offset, size }),
                        "allocate_packed({size}, {align})"
                    );
                }
            }
            Op::AllocateMinMemory { size, align }
            | Op::AllocateMinOffset { size, align }
            | Op::AllocateMaxOffset { size, align } => {
                let strategy = match op {
                    Op::AllocateMinMemory { .. } => Strategy::MinMemory,
                    Op::AllocateMinOffset { .. } => Strategy::MinOffset,
                    _ => Strategy::MaxOffset,
                };
                let packed = self.heap.fuzz_allocate_packed_with(size, align, strategy);
                shadow.apply(op);
                if let Some((offset, id)) = packed {
                    assert_eq!(
                        shadow.heap.get(id),
                        Some(OffsetAllocation { id, offset, size }),
                        "allocate_packed_with({size}, {align}, {strategy:?})"
                    );
                }
            }
            Op::Free { pick } => {
                let live = shadow.heap.allocations().count();
                let Some(freed) = shadow.heap.allocations().nth(pick % live.max(1)) else {
                    shadow.apply(op);
                    return self.compare(shadow);
                };
                let merged = self.heap.fuzz_free_packed(freed.id);
                shadow.apply(op);
                // The size of the free range the freed bytes joined.
                let joined = shadow
                    .heap
                    .free_ranges()
                    .find(|r| r.offset <= freed.offset && freed.end() <= r.offset + r.size)
                    .map(|r| r.size);
                assert_eq!(merged.map(|m| m.get()), joined, "free_packed of {freed:?}");
                assert_eq!(self.heap.fuzz_free_packed(freed.id), None, "double free");
                assert_eq!(
                    self.heap.fuzz_gaps_around(freed.id),
                    None,
                    "freed {freed:?}"
                );
                if self.freed.len() == 64 {
                    self.freed.pop_front();
                }
                self.freed.push_back(freed.id);
            }
            Op::FreeStale { pick } => {
                shadow.apply(op);
                if !self.freed.is_empty() {
                    // As the shadow's: counted back from the id freed last.
                    let id = self.freed[self.freed.len() - 1 - pick % self.freed.len()];
                    assert_eq!(self.heap.fuzz_free_packed(id), None, "stale {id:?}");
                    assert_eq!(self.heap.fuzz_gaps_around(id), None, "stale {id:?}");
                }
            }
            Op::FreeForeign => {
                shadow.apply(op);
                assert_eq!(self.heap.fuzz_free_packed(self.foreign_id), None);
                assert_eq!(self.heap.fuzz_gaps_around(self.foreign_id), None);
                assert_eq!(
                    self.heap.allocate_in_gap(Some(self.foreign_id), 1, 1),
                    Err(OffsetError::ForeignId)
                );
            }
            Op::ReserveSlots { additional } if additional > u32::from(u8::MAX) => {
                // Past `MAX_SLOTS`: the error names the total asked for and
                // the limit, and nothing changes (the shadow's check, then
                // the twin's comparison with it).
                let requested = u64::from(self.heap.slot_count()) + u64::from(additional);
                assert_eq!(
                    self.heap.reserve_slots(additional),
                    Err(OffsetError::TooManySlots {
                        requested,
                        max: u64::from(MAX_SLOTS)
                    }),
                    "reserve_slots({additional})"
                );
                shadow.apply(op);
            }
            Op::AllocateBelow { size, align, .. } => {
                // No end past the capacity changes where the probe lands.
                let capacity = self.heap.capacity();
                let mut beyond = self.heap.clone();
                assert_eq!(
                    beyond.allocate_below(size, align, u64::MAX),
                    self.heap.allocate_below(size, align, capacity),
                    "allocate_below({size}, {align}) with an end past {capacity}"
                );
                shadow.apply(op);
                self.heap = shadow.heap.clone();
            }
            _ => {
                shadow.apply(op);
                self.heap = shadow.heap.clone();
            }
        }
        self.compare(shadow);
    }

    /// [`FuzzOp::AgeSlot`]: the shadow's allocator and the twin alike
    /// (they are identical between steps), then the model.
    fn age_slot(&mut self, shadow: &mut Shadow<M>, pick: u8, reuses_left: u8) {
        let unused = shadow.unused_slots();
        let picked = if reuses_left >= 0x80 {
            // The id freed last has its slot's generation less one; its
            // slot's next allocation then has that id's plus 2^16.
            let Some(last) = shadow.last_freed() else {
                return;
            };
            unused
                .iter()
                .find(|&&(slot, _)| slot == last.slot())
                .and_then(|&(slot, generation)| {
                    Some((slot, generation, generation.checked_add(0xfffe)?))
                })
        } else {
            unused
                .get(usize::from(pick) % unused.len().max(1))
                .map(|&(slot, generation)| {
                    (
                        slot,
                        generation,
                        u32::MAX - 1 - 2 * u32::from(reuses_left % 4),
                    )
                })
        };
        let Some((slot, generation, target)) = picked else {
            return;
        };
        // Forwards only: an earlier generation would make freed ids live.
        if target <= generation {
            return;
        }
        assert!(shadow.heap.fuzz_fast_forward_slot(slot, target));
        assert!(self.heap.fuzz_fast_forward_slot(slot, target));
        shadow.fast_forward(slot, target);
        shadow.check();
        self.compare(shadow);
    }

    fn compare(&self, shadow: &Shadow<M>) {
        let public = &shadow.heap;
        let twin = &self.heap;
        assert!(twin.allocations().eq(public.allocations()), "allocations");
        assert!(twin.free_ranges().eq(public.free_ranges()), "free ranges");
        assert_eq!(twin.storage_report(), public.storage_report());
        assert_eq!(twin.counters(), public.counters());
        assert_eq!(twin.search_stats(), public.search_stats());
        // The shadow checks the public allocator's against the docs.
        assert_eq!(twin.metadata_bytes(), public.metadata_bytes());
        // Neither live nor retired: the model's count of the slots.
        assert_eq!(twin.fuzz_has_unused_slot(), shadow.has_unused_slot());
        let report = public.storage_report();
        for heap in [twin, public] {
            // The pools turn away a request past this bound before
            // `allocate_packed`: never below the largest free range (that
            // would be a false out-of-space), never above the free bytes.
            let bound = heap.fuzz_largest_free_bound();
            assert!(
                report.largest_free_range <= bound && bound <= report.free_bytes,
                "largest_free_bound {bound}, {report:?}"
            );
            // Compaction weighs a move by the free bytes right before and
            // after each live allocation.
            let live: Vec<OffsetAllocation> = heap.allocations().collect();
            for (i, a) in live.iter().enumerate() {
                let before = a.offset - i.checked_sub(1).map_or(0, |p| live[p].end());
                let after = live.get(i + 1).map_or(heap.capacity(), |n| n.offset) - a.end();
                assert_eq!(
                    heap.fuzz_gaps_around(a.id),
                    Some((before, after)),
                    "gaps_around {a:?}"
                );
            }
        }
    }
}

fuzz_target!(|input: Input| {
    // Capacities up to 2^41 bytes, mostly small so that they fill up, or
    // (for 0xfe) within 1 MiB of the maximum.
    let (capacity, capacity_log2) = match input.capacity_log2 {
        0xff => (0, 0),
        0xfe => (MAX_CAPACITY - (input.capacity_bits % (1 << 20)), 47),
        log2 => (
            log_uniform(log2, input.capacity_bits, 41),
            u32::from(log2 % 42),
        ),
    };
    match input.allocator % 6 {
        0 => run_offset::<2>(&input, capacity, capacity_log2),
        1 => run_offset::<3>(&input, capacity, capacity_log2),
        2 => run_offset::<4>(&input, capacity, capacity_log2),
        3 => run_offset::<5>(&input, capacity, capacity_log2),
        4 => run_offset::<6>(&input, capacity, capacity_log2),
        _ => {
            // The ring: capacities up to 1 MiB, or near the maximum.
            let (capacity, capacity_log2) = if input.capacity_log2 == 0xfe {
                (capacity, capacity_log2)
            } else {
                (capacity.min(1 << 20), capacity_log2.min(20))
            };
            let mut shadow = LinearShadow::new(capacity, u32::from(input.slots % 6));
            for op in &input.ops {
                shadow.apply(to_linear_op(op, capacity, capacity_log2));
            }
            shadow.finish();
        }
    }
});
