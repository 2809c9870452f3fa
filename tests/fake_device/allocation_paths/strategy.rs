//! `AllocationDesc::strategy` (VMA's `STRATEGY_MIN_TIME`,
//! `STRATEGY_MIN_MEMORY` and `STRATEGY_MIN_OFFSET`): in a block with free
//! ranges of 1000 and 1100 KiB, a request of 970 KiB takes the 1100 KiB
//! range by default (the first size class all of whose ranges hold it) and
//! the 1000 KiB one with `Strategy::MinMemory`, so that in a pool of one
//! fixed block a later request of 1090 KiB still fits, where by default it
//! fails. `Strategy::MinOffset` takes the lowest free range that holds a
//! request, however large, and gives small buffers ranges of their own at
//! the lowest offset, not run slots; `Strategy::MaxOffset` the highest.

use vk_suballoc::{Allocation, AllocationDesc, Error, PoolDesc, Request, Strategy, Usage};

use super::super::{allocator, finish, free, requirements, FakeAllocator};
use vk_suballoc::device::fake::FakeLayout;
use vk_suballoc::ResourceKind;

const KIB: u64 = 1 << 10;

/// A buffer of `kib` KiB with `desc`.
fn buffer_of(kib: u64, desc: AllocationDesc<'static>) -> Request<'static> {
    Request::with_desc(requirements(kib * KIB, 256), ResourceKind::Buffer, desc)
}

/// Leaves free ranges of 1000 KiB at 0 and 1100 KiB at 1064 KiB in the block
/// `desc`'s requests take (with 64 KiB held between and after them, and
/// `filler` KiB after that); returns what stays allocated.
fn two_gaps(
    allocator: &FakeAllocator,
    desc: AllocationDesc<'static>,
    filler: u64,
) -> Vec<Allocation> {
    let a = allocator.allocate(&buffer_of(1000, desc)).unwrap();
    let mut held = vec![allocator.allocate(&buffer_of(64, desc)).unwrap()];
    let b = allocator.allocate(&buffer_of(1100, desc)).unwrap();
    held.push(allocator.allocate(&buffer_of(64, desc)).unwrap());
    if filler > 0 {
        held.push(allocator.allocate(&buffer_of(filler, desc)).unwrap());
    }
    assert_eq!((a.offset(), b.offset()), (0, 1064 * KIB));
    assert!(held.iter().all(|h| h.memory() == a.memory()), "one block");
    free(allocator, a);
    free(allocator, b);
    held
}

#[test]
fn min_memory_takes_the_tighter_free_range_of_a_block() {
    let (allocator, device) = allocator(FakeLayout::discrete());
    let desc = AllocationDesc::new(Usage::DEVICE_LOCAL);
    let held = two_gaps(&allocator, desc, 0);
    let fast = allocator.allocate(&buffer_of(970, desc)).unwrap();
    assert_eq!(fast.offset(), 1064 * KIB, "MinTime, the default");
    free(&allocator, fast);
    let fast = allocator
        .allocate(&buffer_of(970, desc.strategy(Strategy::MinTime)))
        .unwrap();
    assert_eq!(fast.offset(), 1064 * KIB);
    free(&allocator, fast);
    let tight = allocator
        .allocate(&buffer_of(970, desc.strategy(Strategy::MinMemory)))
        .unwrap();
    assert_eq!((tight.offset(), tight.size()), (0, 970 * KIB));
    assert_eq!(tight.memory(), held[0].memory());
    free(&allocator, tight);
    for h in held {
        free(&allocator, h);
    }
    finish(allocator, &device);
}

/// Small buffers take run slots with `MinTime` and `MinMemory`: the strategy is a
/// block's choice among its free ranges, and a run's slots are of the
/// request's size class already.
#[test]
fn small_buffers_take_run_slots_with_either_strategy() {
    let (allocator, device) = allocator(FakeLayout::discrete());
    let desc = AllocationDesc::new(Usage::DEVICE_LOCAL);
    let fast = allocator.allocate(&buffer_of(1, desc)).unwrap();
    let tight = allocator
        .allocate(&buffer_of(1, desc.strategy(Strategy::MinMemory)))
        .unwrap();
    // The next slot of the same run.
    assert_eq!(tight.memory(), fast.memory());
    assert_eq!(tight.offset(), fast.offset() + KIB);
    free(&allocator, fast);
    free(&allocator, tight);
    finish(allocator, &device);
}

/// `MinOffset` takes the free range at the lowest offset that holds the
/// request, where the other strategies take a later, smaller one: with
/// free ranges of 1100 KiB at 0 and 520 KiB at 1164 KiB, 500 KiB goes to
/// 0, and by default (and with `MinMemory`, whose tight look is among
/// ranges of 480 to 511 KiB) to 1164 KiB.
#[test]
fn min_offset_takes_the_lowest_free_range_of_a_block() {
    let (allocator, device) = allocator(FakeLayout::discrete());
    let desc = AllocationDesc::new(Usage::DEVICE_LOCAL);
    let large = allocator.allocate(&buffer_of(1100, desc)).unwrap();
    let mut held = vec![allocator.allocate(&buffer_of(64, desc)).unwrap()];
    let small = allocator.allocate(&buffer_of(520, desc)).unwrap();
    held.push(allocator.allocate(&buffer_of(64, desc)).unwrap());
    assert_eq!((large.offset(), small.offset()), (0, 1164 * KIB));
    assert!(
        held.iter().all(|h| h.memory() == large.memory()),
        "one block"
    );
    free(&allocator, large);
    free(&allocator, small);
    for (strategy, offset) in [
        (Strategy::MinTime, 1164 * KIB),
        (Strategy::MinMemory, 1164 * KIB),
        (Strategy::MinOffset, 0),
    ] {
        let placed = allocator
            .allocate(&buffer_of(500, desc.strategy(strategy)))
            .unwrap();
        assert_eq!(
            (placed.memory(), placed.offset()),
            (held[0].memory(), offset),
            "{strategy:?}"
        );
        free(&allocator, placed);
    }
    for h in held {
        free(&allocator, h);
    }
    finish(allocator, &device);
}

/// A small buffer placed with `MinOffset` takes a range of its own at the
/// lowest offset of the block, not a slot of a run (carved where a run's
/// range fit), as it does with the other strategies.
#[test]
fn min_offset_gives_a_small_buffer_the_lowest_offset_not_a_run_slot() {
    let (allocator, device) = allocator(FakeLayout::discrete());
    let desc = AllocationDesc::new(Usage::DEVICE_LOCAL);
    let first = allocator.allocate(&buffer_of(100, desc)).unwrap();
    assert_eq!(first.offset(), 0);
    // A run of 1 KiB slots, carved from the block `first` made.
    let slot = allocator.allocate(&buffer_of(1, desc)).unwrap();
    assert_eq!(slot.memory(), first.memory());
    assert!(slot.offset() >= 100 * KIB);
    free(&allocator, first);
    let next_slot = allocator.allocate(&buffer_of(1, desc)).unwrap();
    assert_eq!(
        next_slot.offset(),
        slot.offset() + KIB,
        "the run's next slot"
    );
    let lowest = allocator
        .allocate(&buffer_of(1, desc.strategy(Strategy::MinOffset)))
        .unwrap();
    assert_eq!((lowest.memory(), lowest.offset()), (slot.memory(), 0));
    for a in [slot, next_slot, lowest] {
        free(&allocator, a);
    }
    finish(allocator, &device);
}

/// A small buffer placed by address (`MinOffset`, `MaxOffset`) that no
/// free range of a block holds takes a free slot of an existing run rather
/// than new memory: in a pool of 1 MiB blocks whose one block is full but
/// for a run's free slots, it lands in that run (as with `MinTime`), where
/// it failed as existing-memory-only and took a new block otherwise.
#[test]
fn by_address_takes_a_free_run_slot_where_no_range_holds_a_small_buffer() {
    let cases = [Strategy::MinOffset, Strategy::MaxOffset]
        .into_iter()
        .flat_map(|strategy| [(strategy, true), (strategy, false)]);
    for (strategy, existing_memory_only) in cases {
        let (allocator, device) = allocator(FakeLayout::discrete());
        let pool = allocator
            .create_pool(&PoolDesc {
                block_size: 1024 * KIB,
                ..PoolDesc::new(1)
            })
            .unwrap();
        let desc = AllocationDesc::new(Usage::DEVICE_LOCAL).pool(pool);
        // A range of its own (no block to carve a run from yet), then a
        // run of 1 KiB slots carved after it, then the rest of the block.
        let mut held = vec![allocator.allocate(&buffer_of(1, desc)).unwrap()];
        let slot = allocator.allocate(&buffer_of(1, desc)).unwrap();
        let block = held[0].memory();
        assert_eq!((slot.memory(), held[0].offset()), (block, 0));
        assert_eq!(slot.offset(), KIB, "a run after it");
        held.push(slot);
        held.push(allocator.allocate(&buffer_of(1024 - 1 - 64, desc)).unwrap());
        assert_eq!(held[2].memory(), block, "the block is full");
        let mut by_address = desc.strategy(strategy);
        if existing_memory_only {
            by_address = by_address.existing_memory_only();
        }
        let placed = allocator.allocate(&buffer_of(1, by_address));
        assert_eq!(
            placed
                .as_ref()
                .map(Allocation::memory)
                .map_err(Clone::clone),
            Ok(block),
            "{strategy:?}, existing memory only: {existing_memory_only}"
        );
        held.extend(placed);
        for h in held {
            free(&allocator, h);
        }
        allocator.destroy_pool(pool).unwrap();
        finish(allocator, &device);
    }
}

/// `MaxOffset` (VMA's `UPPER_ADDRESS`) places at the highest offset that
/// holds the request, `MinOffset` at the lowest: in a default pool's
/// block, two lifetimes kept at either end, the free space between them
/// in one piece; a small buffer placed so takes a range of its own at the
/// top, not a run slot.
#[test]
fn max_offset_keeps_allocations_at_the_top_of_a_block() {
    let (allocator, device) = allocator(FakeLayout::discrete());
    let desc = AllocationDesc::new(Usage::DEVICE_LOCAL);
    let low = allocator
        .allocate(&buffer_of(100, desc.strategy(Strategy::MinOffset)))
        .unwrap();
    assert_eq!(low.offset(), 0);
    let block = allocator.stats().memory_types[1].block_bytes;
    let high = allocator
        .allocate(&buffer_of(1000, desc.strategy(Strategy::MaxOffset)))
        .unwrap();
    assert_eq!(
        (high.memory(), high.offset()),
        (low.memory(), block - 1000 * KIB)
    );
    // A small buffer (a run slot with the other strategies) right below.
    let small = allocator
        .allocate(&buffer_of(1, desc.strategy(Strategy::MaxOffset)))
        .unwrap();
    assert_eq!(
        (small.memory(), small.offset()),
        (low.memory(), block - 1001 * KIB)
    );
    // The lowest offset is still the bottom's: the free space lies between.
    let next_low = allocator
        .allocate(&buffer_of(1, desc.strategy(Strategy::MinOffset)))
        .unwrap();
    assert_eq!(next_low.offset(), 100 * KIB);
    for a in [low, high, small, next_low] {
        free(&allocator, a);
    }
    finish(allocator, &device);
}

/// In a pool of one 4 MiB block, the tight choice leaves room for a request
/// that the default's choice refuses: 970 KiB then 1090 KiB fit the two free
/// ranges of 1000 and 1100 KiB only in that order of sizes.
#[test]
fn min_memory_fits_a_fixed_pool_where_min_time_runs_out() {
    for (strategy, second) in [
        (Strategy::MinTime, Err(Error::PoolFull { max_blocks: 1 })),
        (Strategy::MinMemory, Ok(1064 * KIB)),
    ] {
        let (allocator, device) = allocator(FakeLayout::discrete());
        let pool = allocator
            .create_pool(&PoolDesc {
                block_size: 4096 * KIB,
                max_blocks: Some(1),
                ..PoolDesc::new(1)
            })
            .unwrap();
        let desc = AllocationDesc::new(Usage::DEVICE_LOCAL)
            .pool(pool)
            .strategy(strategy);
        // The block full but for the two free ranges.
        let mut held = two_gaps(&allocator, desc, 4096 - 2228);
        let first = allocator.allocate(&buffer_of(970, desc)).unwrap();
        held.push(first);
        let result = allocator.allocate(&buffer_of(1090, desc));
        assert_eq!(
            result
                .as_ref()
                .map(Allocation::offset)
                .map_err(Clone::clone),
            second,
            "{strategy:?}"
        );
        held.extend(result);
        for h in held {
            free(&allocator, h);
        }
        allocator.destroy_pool(pool).unwrap();
        finish(allocator, &device);
    }
}
