//! Blocks and what they hold: block sizes start small and grow, a large
//! alignment takes only the requested bytes, allocations in a block never
//! overlap and honour their alignment, a block out of slots grows its slot
//! table, the larger empty block is kept whichever empties first, and the
//! allocator's drop frees every block though allocations are still live.

use vk_suballoc::device::fake::FakeLayout;
use vk_suballoc::{Allocation, Usage};

use super::super::{allocator, buffer, finish, free};

use super::MIB;

#[test]
fn blocks_start_small_and_grow() {
    let (allocator, device) = allocator(FakeLayout::discrete());
    // 20 MiB requests: dedicated threshold is 128 MiB, first block 64 MiB
    // (the smallest of 32/64/128/256 that holds twice the request).
    let mut live = Vec::new();
    for _ in 0..12 {
        live.push(
            allocator
                .allocate(&buffer(20 * MIB, 256, Usage::DEVICE_LOCAL))
                .unwrap(),
        );
    }
    let mut sizes: Vec<u64> = device.live_allocations().iter().map(|m| m.size).collect();
    sizes.sort_unstable();
    assert_eq!(sizes, vec![64 * MIB, 128 * MIB, 256 * MIB]);
    assert!(live.iter().all(|a| !a.is_dedicated()));
    let names: Vec<_> = device
        .live_allocations()
        .into_iter()
        .map(|m| m.name.unwrap())
        .collect();
    assert!(
        names.contains(&"vk-suballoc block 1/0".to_owned()),
        "{names:?}"
    );
    for allocation in live {
        free(&allocator, allocation);
    }
    // One empty block is kept (the largest); trim releases it.
    assert_eq!(device.live_allocations().len(), 1);
    assert_eq!(device.live_allocations()[0].size, 256 * MIB);
    assert_eq!(allocator.stats().memory_types[1].empty_blocks, 1);
    assert_eq!(allocator.trim(), 256 * MIB);
    assert!(device.live_allocations().is_empty());
    finish(allocator, &device);
}

/// A block allocation's size is rounded up to its alignment only up to
/// 4 KiB: a 1 MiB buffer aligned to 64 MiB takes 1 MiB of the first block,
/// and the rest stays free for others (rounded, it took 64 MiB, in a
/// 128 MiB block made for it). Small buffers with such alignments skip the
/// runs, whose slots only keep alignments up to that.
#[test]
fn a_large_alignment_takes_only_the_requested_bytes() {
    let (allocator, device) = allocator(FakeLayout::discrete());
    let aligned = allocator
        .allocate(&buffer(MIB, 64 * MIB, Usage::DEVICE_LOCAL))
        .unwrap();
    let next = allocator
        .allocate(&buffer(MIB, 256, Usage::DEVICE_LOCAL))
        .unwrap();
    assert!(!aligned.is_dedicated());
    assert_eq!(
        (next.memory(), next.offset()),
        (aligned.memory(), aligned.offset() + MIB)
    );
    assert_eq!(allocator.stats().memory_types[1].block_bytes, 32 * MIB);
    let small: Vec<_> = (0..3)
        .map(|_| {
            allocator
                .allocate(&buffer(100, 64 << 10, Usage::DEVICE_LOCAL))
                .unwrap()
        })
        .collect();
    for allocation in &small {
        assert_eq!(allocation.offset() % (64 << 10), 0);
    }
    for allocation in small.into_iter().chain([aligned, next]) {
        free(&allocator, allocation);
    }
    finish(allocator, &device);
}

/// With two empty blocks the smaller one is released, whichever emptied
/// first, and the blocks left keep serving requests (first fit over them,
/// no new block).
#[test]
fn the_larger_empty_block_is_kept_whichever_empties_first() {
    let (allocator, device) = allocator(FakeLayout::discrete());
    // As in `blocks_start_small_and_grow`: blocks of 64, 128 and 256 MiB
    // holding 3, 6 and 3 of twelve 20 MiB buffers.
    let live: Vec<Allocation> = (0..12)
        .map(|_| {
            allocator
                .allocate(&buffer(20 * MIB, 256, Usage::DEVICE_LOCAL))
                .unwrap()
        })
        .collect();
    let block = |size| {
        device
            .live_allocations()
            .into_iter()
            .find(|m| m.size == size)
            .unwrap()
            .memory
    };
    let (b64, b128, b256) = (block(64 * MIB), block(128 * MIB), block(256 * MIB));
    let (mut in_64, rest): (Vec<Allocation>, Vec<Allocation>) =
        live.into_iter().partition(|a| a.memory() == b64);
    let (in_128, in_256): (Vec<Allocation>, Vec<Allocation>) =
        rest.into_iter().partition(|a| a.memory() == b128);
    assert_eq!((in_64.len(), in_128.len(), in_256.len()), (3, 6, 3));
    // The largest block empties first, then the middle one: the middle one
    // is released.
    for allocation in in_256.into_iter().chain(in_128) {
        free(&allocator, allocation);
    }
    let mut sizes: Vec<u64> = device.live_allocations().iter().map(|m| m.size).collect();
    sizes.sort_unstable();
    assert_eq!(sizes, [64 * MIB, 256 * MIB]);
    assert_eq!(allocator.stats().memory_types[1].empty_blocks, 1);
    // The 64 MiB block has no room for 20 MiB; the kept block takes it.
    let again = allocator
        .allocate(&buffer(20 * MIB, 256, Usage::DEVICE_LOCAL))
        .unwrap();
    assert_eq!((again.memory(), again.offset()), (b256, 0));
    assert_eq!(device.live_allocations().len(), 2);
    assert_eq!(allocator.stats().memory_types[1].empty_blocks, 0);
    for allocation in in_64.drain(..).chain([again]) {
        free(&allocator, allocation);
    }
    // Now the 64 MiB block emptied last and is the smaller: it goes.
    assert_eq!(device.live_allocations().len(), 1);
    assert_eq!(allocator.trim(), 256 * MIB);
    finish(allocator, &device);
}

#[test]
fn allocations_in_a_block_never_overlap_and_honour_alignment() {
    let (allocator, device) = allocator(FakeLayout::integrated());
    let mut live = Vec::new();
    for i in 0..500u64 {
        let align = 1 << (i % 12);
        let a = allocator
            .allocate(&buffer(1 + i * 97 % 5000, align, Usage::DEVICE_LOCAL))
            .unwrap();
        assert_eq!(a.offset() % align, 0);
        live.push(a);
    }
    let mut ranges: Vec<_> = live
        .iter()
        .map(|a| (a.memory(), a.offset(), a.offset() + a.size()))
        .collect();
    ranges.sort_unstable_by_key(|r| (ash::vk::Handle::as_raw(r.0), r.1));
    for pair in ranges.windows(2) {
        if pair[0].0 == pair[1].0 {
            assert!(pair[0].2 <= pair[1].1, "overlap {pair:?}");
        }
    }
    let stats = allocator.stats();
    assert_eq!(stats.allocations(), 500);
    assert_eq!(
        stats.live_bytes(),
        live.iter().map(|a| a.size()).sum::<u64>()
    );
    assert_eq!(
        stats.memory_objects as usize,
        device.live_allocations().len()
    );
    for allocation in live {
        free(&allocator, allocation);
    }
    finish(allocator, &device);
}

/// A block whose offset allocator runs out of slots grows its slot table:
/// the allocations share the block instead of spreading over new ones.
#[test]
fn a_block_out_of_slots_grows_its_slot_table() {
    let config = vk_suballoc::Config {
        initial_block_slots: 1,
        ..super::super::without_runs()
    };
    let (allocator, device) = super::super::allocator_with(FakeLayout::integrated(), config);
    let live: Vec<_> = (0..100)
        .map(|_| {
            allocator
                .allocate(&buffer(4096, 256, Usage::DEVICE_LOCAL))
                .unwrap()
        })
        .collect();
    assert!(live.iter().all(|a| a.memory() == live[0].memory()));
    assert_eq!(device.counters().allocations, 1);
    for allocation in live {
        free(&allocator, allocation);
    }
    finish(allocator, &device);
}

#[test]
fn dropping_with_live_allocations_frees_all_memory() {
    let (allocator, device) = allocator(FakeLayout::discrete());
    let mut leaked = Vec::new();
    for usage in [Usage::DEVICE_LOCAL, Usage::UPLOAD, Usage::READBACK] {
        leaked.push(
            allocator
                .allocate(&buffer(1000, 16, usage).name("leaky"))
                .unwrap(),
        );
        leaked.push(allocator.allocate(&buffer(200 * MIB, 16, usage)).unwrap());
    }
    assert_eq!(device.live_allocations().len(), 6);
    // The handles outlive the allocator; it frees the memory anyway.
    finish(allocator, &device);
    drop(leaked);
}
