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
