//! The generational allocation ids: stale, double and foreign frees change
//! nothing, live allocations never share a slot (the Vulkan pools key
//! names and resource kinds by it), and a slot's generation wraps without
//! accepting an id issued before the wrap. They are apart because the ids
//! are what makes a stale free an error instead of corruption.

use super::super::*;

#[test]
fn stale_double_and_foreign_frees_change_nothing() {
    let mut heap = OffsetAllocator::<3>::new(1000, 4).unwrap();
    let mut other = OffsetAllocator::<3>::new(1000, 4).unwrap();
    let a = heap.allocate(100, 1).unwrap();
    let foreign = other.allocate(100, 1).unwrap();
    assert_eq!(heap.free(foreign.id), Err(OffsetError::ForeignId));
    heap.free(a.id).unwrap();
    assert_eq!(heap.free(a.id), Err(OffsetError::StaleId));
    // The slot is reused; the old id still fails and the new one works.
    let b = heap.allocate(50, 1).unwrap();
    assert_eq!(b.id.slot(), a.id.slot());
    assert_eq!(heap.free(a.id), Err(OffsetError::StaleId));
    assert_eq!(heap.get(b.id).map(|x| x.size), Some(50));
    heap.free(b.id).unwrap();
    assert!(heap.is_empty());
    assert_eq!(heap.storage_report().largest_free_range, 1000);
}

/// Live allocations never share a slot: the Vulkan pools key an
/// allocation's name and resource kind by [`AllocationId::slot`]. Slots are
/// `1..=slot_count` (0 is the sentinel).
#[test]
fn live_allocations_have_distinct_slots() {
    let mut heap = OffsetAllocator::<3>::new(1000, 6).unwrap();
    let mut live: Vec<_> = (0..6).map(|_| heap.allocate(10, 1).unwrap()).collect();
    let slots = |live: &[OffsetAllocation]| {
        let mut slots: Vec<u32> = live.iter().map(|a| a.id.slot()).collect();
        slots.sort_unstable();
        slots
    };
    assert_eq!(slots(&live), (1..=6).collect::<Vec<_>>());
    // Freed slots are taken again, next to reserved ones, by new
    // allocations only.
    for freed in live.drain(1..4) {
        heap.free(freed.id).unwrap();
    }
    heap.reserve_slots(2).unwrap();
    live.extend((0..5).map(|_| heap.allocate(10, 1).unwrap()));
    assert_eq!(slots(&live), (1..=8).collect::<Vec<_>>());
    for allocation in &live {
        assert_eq!(heap.get(allocation.id), Some(*allocation));
    }
}

/// A slot's generation would come round after 2^31 reuses (2^32
/// generations, odd while live), and the slot's first id, kept that long,
/// would then free whatever allocation holds it. The slot retires instead:
/// no allocation takes it again (`OutOfSlots` with one slot), every id it
/// carried stays stale, nothing panics, and new slots serve as before.
#[test]
fn a_slot_retires_before_its_generation_comes_round() {
    let mut heap = OffsetAllocator::<3>::new(100, 1).unwrap();
    let first = heap.allocate(10, 1).unwrap();
    assert_eq!(first.id.generation, 1);
    heap.free(first.id).unwrap();
    // Fast-forward the one slot to 2^32 - 4 reuses, as if freed that often.
    heap.nodes[1].set_generation(u32::MAX - 3);
    let mut ids = vec![first.id];
    for _ in 0..2 {
        let a = heap.allocate(10, 1).unwrap();
        heap.free(a.id).unwrap();
        ids.push(a.id);
    }
    let generations: Vec<u32> = ids.iter().map(|id| id.generation).collect();
    assert_eq!(generations, [1, u32::MAX - 2, u32::MAX]);
    assert_eq!(heap.allocate(10, 1), Err(OffsetError::OutOfSlots(1)));
    for &old in &ids {
        assert_eq!(heap.get(old), None);
        assert_eq!(heap.free(old), Err(OffsetError::StaleId));
    }
    heap.reserve_slots(1).unwrap();
    let next = heap.allocate(10, 1).unwrap();
    assert_eq!((next.id.slot, next.id.generation), (2, 1));
    assert_eq!(heap.free(first.id), Err(OffsetError::StaleId));
    assert_eq!(heap.get(next.id), Some(next));
    heap.free(next.id).unwrap();
    assert_eq!(heap.storage_report().largest_free_range, 100);
}

/// The node keeps a slot's generation in two 16-bit halves (`node.rs`):
/// an id 2^15 reuses stale, whose generation is the live one's in its
/// low half, is refused as any stale id.
#[test]
fn an_id_like_the_live_one_in_its_low_16_bits_is_stale() {
    let mut heap = OffsetAllocator::<3>::new(100, 1).unwrap();
    let old = heap.allocate(10, 1).unwrap();
    heap.free(old.id).unwrap();
    // As if allocated and freed 2^15 - 1 times more.
    heap.nodes[1].set_generation(old.id.generation + 0xffff);
    let live = heap.allocate(20, 1).unwrap();
    assert_eq!(live.id.generation, old.id.generation + 0x1_0000);
    assert_eq!(heap.get(old.id), None);
    assert_eq!(heap.free(old.id), Err(OffsetError::StaleId));
    assert_eq!(heap.get(live.id), Some(live));
}

/// A retired slot among live ones, as the docs describe it
/// ([`AllocationId`], [`OffsetError::OutOfSlots`], `slot_count`): it is
/// never handed out again, by any call; `slot_count` and `OutOfSlots`
/// still count it, and the pools' `has_unused_slot` says no slot is left
/// when the others are live (so they reserve more, as after any
/// `OutOfSlots`); its last id stays stale for every call that takes an id
/// (`free`, `free_packed`, `get`, `gaps_around`, `allocate_in_gap`), and
/// the bytes it held merge with their neighbours as any free does.
#[test]
fn a_retired_slot_is_counted_but_never_handed_out_again() {
    let mut heap = OffsetAllocator::<3>::new(100, 3).unwrap();
    let a = heap.allocate(10, 1).unwrap();
    let b = heap.allocate(10, 1).unwrap();
    let c = heap.allocate(10, 1).unwrap();
    heap.free(b.id).unwrap();
    // Fast-forward b's slot to its last reuse, as if freed 2^31 - 1 times.
    heap.nodes[b.id.slot as usize].set_generation(u32::MAX - 1);
    let last = heap.allocate(10, 1).unwrap();
    assert_eq!(
        (last.id.slot, last.id.generation, last.offset),
        (b.id.slot, u32::MAX, 10)
    );
    assert_eq!(heap.free(last.id).map(|r| (r.offset, r.size)), Ok((10, 10)));

    // Retired: counted, but no call places anything with it.
    assert_eq!(heap.slot_count(), 3);
    assert!(!heap.has_unused_slot());
    assert_eq!(heap.allocate(10, 1), Err(OffsetError::OutOfSlots(3)));
    for strategy in [
        Strategy::MinMemory,
        Strategy::MinOffset,
        Strategy::MaxOffset,
    ] {
        assert_eq!(
            heap.allocate_with(10, 1, strategy),
            Err(OffsetError::OutOfSlots(3))
        );
        assert_eq!(heap.allocate_packed_with(10, 1, strategy), None);
    }
    assert_eq!(heap.allocate_packed(10, 1), None);
    assert_eq!(
        heap.allocate_below(10, 1, 100),
        Err(OffsetError::OutOfSlots(3))
    );
    assert_eq!(
        heap.allocate_in_gap(Some(a.id), 10, 1),
        Err(OffsetError::OutOfSlots(3))
    );

    // Every id the slot carried stays stale, whatever the call.
    for old in [b.id, last.id] {
        assert_eq!(heap.free(old), Err(OffsetError::StaleId));
        assert_eq!(heap.free_packed(old), None);
        assert_eq!(heap.get(old), None);
        assert_eq!(heap.gaps_around(old), None);
        assert_eq!(
            heap.allocate_in_gap(Some(old), 1, 1),
            Err(OffsetError::StaleId)
        );
    }
    assert_eq!(
        heap.allocations().map(|x| x.id).collect::<Vec<_>>(),
        [a.id, c.id]
    );

    // The other slots serve as before; the retired one is skipped, also
    // after new slots are reserved.
    heap.free(c.id).unwrap();
    heap.reserve_slots(2).unwrap();
    let mut live = vec![a];
    while let Ok(next) = heap.allocate(5, 1) {
        assert_ne!(next.id.slot, b.id.slot, "the retired slot handed out");
        live.push(next);
    }
    // a, and the three of the four free slots that are not retired.
    assert_eq!(live.len(), 4);
    assert_eq!(heap.allocate(5, 1), Err(OffsetError::OutOfSlots(5)));
    for allocation in live {
        heap.free(allocation.id).unwrap();
    }
    assert_eq!(heap.free(last.id), Err(OffsetError::StaleId));
    assert_eq!(
        heap.free_ranges().collect::<Vec<_>>(),
        [FreeRange {
            offset: 0,
            size: 100
        }]
    );
}
