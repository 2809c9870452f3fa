//! Unit tests of the runs, one rule each: the size classes (quarter
//! octaves covering every size up to `RUN_BYTES`, each slot aligned for
//! every alignment its class serves), the lowest free slot taken first,
//! stale and double frees refused, which slots are live, and clearing.
//! They are apart from `runs.rs` so that the runs read without their
//! tests; `RANGE`, the offset-allocator range the tests' runs occupy, is
//! shared with the model test in `runs/model_tests.rs`.

use super::*;

#[test]
fn classes_are_quarter_octaves_and_cover_every_size() {
    assert_eq!(class_size(0), 16);
    assert_eq!(class_size(CLASSES - 1), RUN_BYTES);
    for class in 1..CLASSES {
        assert!(class_size(class) > class_size(class - 1));
    }
    for placed in 1..=RUN_BYTES {
        let class = class_of(placed);
        let size = class_size(class);
        assert!(size >= placed, "{placed} -> {size}");
        assert!(
            class == 0 || class_size(class - 1) < placed,
            "{placed}: class {class} is not the smallest"
        );
        // Under a quarter wasted above the smallest class.
        assert!(
            placed <= 16 || (size - placed) * 4 < size,
            "{placed} -> {size}"
        );
    }
}

/// Every slot of a class's run is aligned to every alignment that class
/// serves: a request placed as `m * align` bytes.
#[test]
fn slots_keep_every_alignment_their_class_serves() {
    for shift in 0..=16 {
        let align = 1u64 << shift;
        let mut placed = align;
        while placed <= RUN_BYTES {
            let size = class_size(class_of(placed));
            let run_align = 1u64 << size.trailing_zeros();
            assert_eq!(size % align, 0, "placed {placed} align {align} -> {size}");
            assert_eq!(run_align % align, 0);
            placed += align;
        }
    }
}

/// Runs never look inside their range's id.
pub(super) const RANGE: AllocationId = AllocationId {
    slot: 0,
    generation: 1,
    owner: 0,
};

#[test]
fn slots_are_taken_lowest_first_and_stale_frees_are_refused() {
    let mut runs = Runs::default();
    let class = class_of(4096);
    let slots = slots_per_run(4096);
    assert_eq!(slots, 16);
    let block = SlabKey {
        index: 0,
        generation: 0,
    };
    runs.insert(class, block, RANGE, 1 << 20, vk::DeviceMemory::null(), None);
    let taken: Vec<TakenSlot> = (0..slots).map(|_| runs.take(class).unwrap()).collect();
    for (i, slot) in taken.iter().enumerate() {
        assert_eq!(slot.offset, (1 << 20) + i as u64 * 4096);
    }
    // Full: no run of the class has room.
    assert!(runs.take(class).is_none());
    let first = taken[0];
    let free = |runs: &mut Runs, slot: &TakenSlot| {
        runs.free(slot.run, slot.slot, slot.generation)
            .map(|emptied| emptied.is_some())
    };
    assert_eq!(free(&mut runs, &first), Ok(false));
    // Double free.
    assert_eq!(free(&mut runs, &first), Err(()));
    let again = runs.take(class).unwrap();
    assert_eq!((again.slot, again.generation), (0, first.generation + 1));
    // Stale: the slot now belongs to `again`.
    assert_eq!(free(&mut runs, &first), Err(()));
    assert!(runs.live(again.run, again.slot, again.generation).is_some());
    // Freeing every slot hands the run back.
    for slot in taken.iter().skip(1).chain([&again]) {
        let emptied = free(&mut runs, slot).unwrap();
        assert_eq!(emptied, std::ptr::eq(slot, &again));
    }
    assert_eq!(runs.iter().count(), 0);
    assert!(runs.take(class).is_none());
}

/// Only a slot handed out and not freed is live: not a free slot that
/// was never taken (its generation is 0 too), nor one past the run's last.
#[test]
fn free_and_out_of_range_slots_are_not_live() {
    let mut runs = Runs::default();
    let class = class_of(4096);
    assert_eq!(slots_per_run(4096), 16);
    let block = SlabKey {
        index: 0,
        generation: 0,
    };
    runs.insert(class, block, RANGE, 0, vk::DeviceMemory::null(), None);
    let taken = runs.take(class).unwrap();
    assert_eq!((taken.slot, taken.generation), (0, 0));
    assert!(runs.live(taken.run, 0, 0).is_some());
    for slot in [1, 15, 16] {
        assert!(runs.live(taken.run, slot, 0).is_none(), "slot {slot}");
        assert!(runs.free(taken.run, slot, 0).is_err(), "slot {slot}");
    }
    // Nothing changed: slot 1 is the next one handed out.
    assert_eq!(runs.take(class).unwrap().slot, 1);
}

/// Clearing (the pool releasing its blocks) forgets every run, slot
/// and name: no slot is handed out of a released block.
#[test]
fn clear_forgets_every_run() {
    let mut runs = Runs::default();
    let class = class_of(4096);
    let block = SlabKey {
        index: 0,
        generation: 0,
    };
    runs.insert(class, block, RANGE, 0, vk::DeviceMemory::null(), None);
    let taken = runs.take(class).unwrap();
    runs.set_name(&taken, "named");
    runs.clear();
    assert_eq!(runs.iter().count(), 0);
    assert!(runs.take(class).is_none());
    assert!(runs.live(taken.run, taken.slot, taken.generation).is_none());
    assert_eq!(runs.name(taken.run, taken.slot), None);
}
