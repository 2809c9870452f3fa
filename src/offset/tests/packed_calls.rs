//! The packed calls the Vulkan pools use (`allocate_packed` and
//! `allocate_packed_with`, for the other strategies, `free_packed`,
//! `id_of`, `has_unused_slot`) against the public calls, over random
//! requests on two clones of one allocator, whose unused slots are now and
//! then moved close to retiring: every result, report, counter and
//! listing stays the same, and `has_unused_slot` counts retired slots as
//! taken. They are apart because they check that
//! the pools' shortcut is the public API's behaviour, not a behaviour of
//! its own; the seeds come from the xorshift `next` of `tests.rs`.

use super::super::*;
use super::next;

/// The packed calls the Vulkan pools use run on one clone, the public calls
/// on another, over random requests (failing ones included): every result,
/// report, counter and listing stays the same, so the pools see exactly the
/// public API's behaviour.
fn random_packed_run<const M: u32>(seed: u64) {
    let capacity = 1 << 12;
    let mut packed = OffsetAllocator::<M>::new(capacity, 8).unwrap();
    let mut public = packed.clone();
    let mut foreign = OffsetAllocator::<M>::new(64, 1).unwrap();
    let foreign_id = foreign.allocate(1, 1).unwrap().id;
    let mut live: Vec<AllocationId> = Vec::new();
    let mut freed: Vec<AllocationId> = Vec::new();
    // Slots retired: their last generation freed (see `fast_forward`).
    let mut retired = 0u32;
    let mut state = seed;
    let steps = if cfg!(miri) { 100 } else { 3000 };
    for step in 0..steps {
        let r = next(&mut state);
        match r % 8 {
            0..=3 => {
                let size = match next(&mut state) % 16 {
                    0 => 0,
                    1 => capacity + 1,
                    _ => 1 + next(&mut state) % 1500,
                };
                let align = match next(&mut state) % 16 {
                    0 => 3,
                    1 => 1 << 63,
                    a => 1 << (a % 10),
                };
                let strategy = match r % 16 {
                    0..=7 => Strategy::MinTime,
                    8..=11 => Strategy::MinMemory,
                    12 | 13 => Strategy::MinOffset,
                    _ => Strategy::MaxOffset,
                };
                // The pools' two calls: `allocate_packed` for the default,
                // `allocate_packed_with` for the others (any, here).
                let a = if strategy == Strategy::MinTime && r % 32 < 16 {
                    packed.allocate_packed(size, align)
                } else {
                    packed.allocate_packed_with(size, align, strategy)
                };
                let b = public.allocate_with(size, align, strategy);
                assert_eq!(
                    a.map(|a| (a.offset, packed.id_of(a))),
                    b.ok().map(|b| (b.offset, b.id)),
                    "seed {seed} step {step}: allocate_with({size}, {align}, {strategy:?})"
                );
                live.extend(b.ok().map(|b| b.id));
            }
            4 | 5 if !live.is_empty() => {
                let id = live.swap_remove((r as usize / 8) % live.len());
                let a = packed.free_packed(id).map(|merged| merged.get());
                assert_eq!(a, public.free(id).ok().map(|merged| merged.size));
                assert!(a.is_some(), "seed {seed} step {step}");
                retired += u32::from(id.generation == u32::MAX);
                freed.push(id);
            }
            6 => {
                let id = freed
                    .get((r as usize / 8) % freed.len().max(1))
                    .copied()
                    .unwrap_or(foreign_id);
                for id in [id, foreign_id] {
                    assert_eq!(packed.free_packed(id), None, "seed {seed} step {step}");
                    // The documented error: a freed id of this allocator
                    // is stale, the other allocator's is foreign.
                    let expected = if id == foreign_id {
                        OffsetError::ForeignId
                    } else {
                        OffsetError::StaleId
                    };
                    assert_eq!(public.free(id), Err(expected), "seed {seed} step {step}");
                }
            }
            _ => {
                if r % 32 == 15 {
                    // Unused slots close to retiring, on both clones.
                    let reuses_left = (r >> 8) as u32 % 3;
                    fast_forward(&mut packed, u32::MAX - 1 - 2 * reuses_left);
                    fast_forward(&mut public, u32::MAX - 1 - 2 * reuses_left);
                } else if r % 16 == 7 {
                    packed.reserve_slots(1).unwrap();
                    public.reserve_slots(1).unwrap();
                } else {
                    packed.grow(64).unwrap();
                    public.grow(64).unwrap();
                }
            }
        }
        assert_eq!(
            packed.counters(),
            public.counters(),
            "seed {seed} step {step}"
        );
        assert_eq!(packed.storage_report(), public.storage_report());
        assert_eq!(packed.search_stats(), public.search_stats());
        assert!(packed.allocations().eq(public.allocations()));
        assert!(packed.free_ranges().eq(public.free_ranges()));
        // A slot is left unless every one is live or retired.
        let taken = public.counters().live_allocations + u64::from(retired);
        assert_eq!(
            packed.has_unused_slot(),
            u64::from(public.slot_count()) > taken,
            "seed {seed} step {step}: {retired} slots retired"
        );
    }
    // The run did reach the failure paths it compares, and slots retired.
    assert!(public.counters().failed_allocations > 0, "seed {seed}");
    assert!(retired > 0, "seed {seed}: no slot retired");
}

/// Moves every unused slot of `heap` on to `generation` (even) where that
/// is later than its own, as if allocated and freed that often: its slot
/// then retires within a few reuses (2^31 of them otherwise).
fn fast_forward<const M: u32>(heap: &mut OffsetAllocator<M>, generation: u32) {
    let mut slot = heap.unused_slot;
    while slot != crate::offset::node::NIL {
        let node = &mut heap.nodes[slot as usize];
        if node.generation() < generation {
            node.set_generation(generation);
        }
        slot = node.next;
    }
}

#[test]
fn packed_calls_match_the_public_ones_on_random_runs() {
    let seeds = if cfg!(miri) { 1..2 } else { 1..5 };
    for seed in seeds {
        println!("seed {seed}");
        random_packed_run::<2>(seed);
        random_packed_run::<3>(seed);
        random_packed_run::<6>(seed);
    }
}
