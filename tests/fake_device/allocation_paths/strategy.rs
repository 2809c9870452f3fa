//! `AllocationDesc::strategy` (VMA's `STRATEGY_MIN_TIME` and
//! `STRATEGY_MIN_MEMORY`): in a block with free ranges of 1000 and 1100
//! KiB, a request of 970 KiB takes the 1100 KiB range by default (the first
//! size class all of whose ranges hold it) and the 1000 KiB one with
//! `Strategy::MinMemory`, so that in a pool of one fixed block a later
//! request of 1090 KiB still fits, where by default it fails.

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

/// Small buffers take run slots whatever the strategy: the strategy is a
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
