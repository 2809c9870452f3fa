//! Blocks and what they hold: block sizes start small and grow, a large
//! alignment takes only the requested bytes, allocations in a block never
//! overlap and honour their alignment, a block out of slots grows its slot
//! table, the larger empty block is kept whichever empties first, the
//! allocator's drop frees every block though allocations are still live,
//! no block is made while one has a free range that holds the request, and
//! `memory_size` is the size each allocation's memory object was made with.

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

/// gpu-alloc's free-list allocator lost track of its free bytes
/// (zakarumych/gpu-alloc PR #44 and #45, for gfx-rs/wgpu issue #1242: "a
/// second memory allocation that should not happen"), and vulkano's
/// `FreeListAllocator` passed over a free range of the right size and
/// alignment in one case (vulkano-rs/vulkano PR #2492): either makes a new
/// `VkDeviceMemory` while a block has room. Here a seeded random walk of
/// buffers and optimal images (granularity 1024 on the discrete preset, 1
/// on the integrated one), aligned up to 4 KiB, placed by every strategy
/// and freed at random, checks each request that made a block against the
/// free ranges of the memory map just before it: none held the request at
/// its alignment (an optimal image at a page start, in whole pages).
#[test]
fn no_block_is_made_while_one_has_room() {
    use crate::seeded_rng::Rng;
    use vk_suballoc::{AllocationDesc, Config, Request, ResourceKind};

    let mut rng = Rng::from_env("no_block_is_made_while_one_has_room");
    let mut blocks_made = 0;
    for walk in 0..12 {
        // No runs: the map shows a run's free slots as free space, which
        // only small buffers of the run's size class may take (with runs
        // on, an image made a block beside 60 KiB of free slots, as the
        // README's runs section says a run holds its range).
        let config = Config {
            small_buffer_limit: 0,
            large_heap_block_size: [8 * MIB, 32 * MIB][walk % 2],
            ..Config::default()
        };
        let discrete = walk % 4 >= 2;
        let (layout, vram) = if discrete {
            (FakeLayout::discrete(), 1)
        } else {
            (FakeLayout::integrated(), 0)
        };
        let page = layout.buffer_image_granularity;
        let (allocator, device) = super::super::allocator_with(layout, config);
        let mut live: Vec<Allocation> = Vec::new();
        for step in 0..1500 {
            if !live.is_empty() && rng.below(10) >= 6 {
                free(
                    &allocator,
                    live.swap_remove(rng.below(live.len() as u64) as usize),
                );
                continue;
            }
            let align = 1u64 << rng.below(13);
            let units = if rng.below(8) == 0 {
                (2 * MIB) / align + 1
            } else {
                64
            };
            // Sizes a multiple of the alignment: the bytes a range holds.
            let size = align * (1 + rng.below(units));
            let kind = if discrete && rng.below(2) == 0 {
                ResourceKind::OptimalImage
            } else {
                ResourceKind::Buffer
            };
            let strategy = super::super::STRATEGIES[rng.below(4) as usize];
            let map = allocator.memory_map();
            let objects = device.counters().allocate_calls;
            let desc = AllocationDesc::new(Usage::DEVICE_LOCAL).strategy(strategy);
            let request = Request::with_desc(super::super::requirements(size, align), kind, desc);
            let allocation = allocator.allocate(&request).unwrap();
            assert_eq!(allocation.memory_type(), vram);
            if device.counters().allocate_calls > objects && !allocation.is_dedicated() {
                blocks_made += 1;
                let (start_align, held) = if kind == ResourceKind::OptimalImage {
                    (align.max(page), size.next_multiple_of(page))
                } else {
                    (align, size)
                };
                for block in &map.memory_types[vram as usize].blocks {
                    for range in block.ranges.iter().filter(|r| !r.is_allocation()) {
                        let start = range.offset.next_multiple_of(start_align);
                        assert!(
                            start + held > range.end(),
                            "walk {walk} step {step}: {kind:?} of {size} at {align} \
                             ({strategy:?}) made a block while block {} had {range:?}",
                            block.id
                        );
                    }
                }
            }
            live.push(allocation);
        }
        for allocation in live {
            free(&allocator, allocation);
        }
        finish(allocator, &device);
    }
    println!("{blocks_made} requests made a block");
}

/// VMA added `vmaGetAllocationInfo2` for its `blockSize` (#340, #383): an
/// importer of exported memory names the whole `VkDeviceMemory`'s size,
/// and a wrong one fails the import. `memory_size` must be the size the
/// memory object was made with, for every way an allocation gets its
/// memory: a run slot, a range of a block, dedicated memory (as asked, by
/// size, with a debug margin, in non-coherent memory whose atoms the
/// request does not fill), a custom pool's block and its dedicated memory,
/// and a defragmentation move's destination; and the allocation lies
/// within it.
#[test]
fn memory_size_is_the_size_its_memory_object_was_made_with() {
    use vk_suballoc::{
        AllocationDesc, Config, DedicatedPolicy, DefragmentationLimits, Movable, PoolDesc, Request,
        ResourceKind,
    };

    for (layout, margin) in [
        (FakeLayout::discrete(), 0),
        (FakeLayout::mobile(), 0),
        (FakeLayout::discrete(), 256),
        (FakeLayout::mobile(), 64),
    ] {
        let config = Config {
            debug_margin: margin,
            ..Config::default()
        };
        let (allocator, device) = super::super::allocator_with(layout.clone(), config);
        let context = format!("{layout:?} margin {margin}");
        let dedicated = |size: u64, usage: Usage| {
            let desc = AllocationDesc::new(usage).dedicated(DedicatedPolicy::Always);
            Request::with_desc(
                super::super::requirements(size, 16),
                ResourceKind::Buffer,
                desc,
            )
        };
        let mut live: Vec<Allocation> = vec![
            allocator.allocate(&buffer(100, 16, Usage::UPLOAD)).unwrap(),
            allocator
                .allocate(&buffer(300 << 10, 256, Usage::UPLOAD))
                .unwrap(),
            allocator
                .allocate(&buffer(MIB, 256, Usage::DEVICE_LOCAL))
                .unwrap(),
            allocator.allocate(&dedicated(1000, Usage::UPLOAD)).unwrap(),
            allocator
                .allocate(&dedicated(3 * MIB + 5, Usage::READBACK))
                .unwrap(),
            allocator
                .allocate(&buffer(300 * MIB + 3, 256, Usage::DEVICE_LOCAL))
                .unwrap(),
        ];
        let memory_type = live[0].memory_type();
        let pool = allocator
            .create_pool(&PoolDesc::new(memory_type).block_size(4 * MIB + 77))
            .unwrap();
        let in_pool = |size: u64, policy: DedicatedPolicy| {
            let desc = AllocationDesc::new(Usage::UPLOAD)
                .pool(pool)
                .dedicated(policy);
            Request::with_desc(
                super::super::requirements(size, 64),
                ResourceKind::Buffer,
                desc,
            )
        };
        live.push(
            allocator
                .allocate(&in_pool(MIB + 1, DedicatedPolicy::Never))
                .unwrap(),
        );
        live.push(
            allocator
                .allocate(&in_pool(5000, DedicatedPolicy::Always))
                .unwrap(),
        );
        // Two half-used blocks of 1 MiB buffers: a plan moves the second's
        // into the first's holes.
        let mut movable: Vec<Allocation> = (0..64)
            .map(|_| {
                allocator
                    .allocate(&buffer(MIB, 256, Usage::DEVICE_LOCAL))
                    .unwrap()
            })
            .collect();
        let mut kept = Vec::new();
        for (i, a) in movable.drain(..).enumerate() {
            if (i < 32 && i % 2 == 0) || i >= 60 {
                kept.push(a);
            } else {
                free(&allocator, a);
            }
        }
        let movables: Vec<Movable<'_>> = kept
            .iter()
            .map(|a| {
                Movable::new(
                    a,
                    super::super::requirements(a.size(), 256),
                    ResourceKind::Buffer,
                )
            })
            .collect();
        let plan = allocator
            .plan_defragmentation(&movables, &DefragmentationLimits::default())
            .unwrap();
        assert!(!plan.moves.is_empty(), "{context}: the plan moves nothing");
        let mut moved = Vec::new();
        for planned in plan.moves {
            moved.push(planned.movable);
            live.push(planned.destination);
        }
        moved.sort_unstable();
        for index in moved.into_iter().rev() {
            free(&allocator, kept.swap_remove(index));
        }
        live.extend(kept);

        let sizes: std::collections::HashMap<_, _> = device
            .live_allocations()
            .into_iter()
            .map(|m| (m.memory, m.size))
            .collect();
        for (i, a) in live.iter().enumerate() {
            let size = allocator.memory_size(a).unwrap();
            assert_eq!(
                Some(&size),
                sizes.get(&a.memory()),
                "{context}: allocation {i} (dedicated {})",
                a.is_dedicated()
            );
            assert!(
                a.offset() + a.size() <= size,
                "{context}: allocation {i} ends past its memory"
            );
        }
        for a in live {
            free(&allocator, a);
        }
        allocator.destroy_pool(pool).unwrap();
        finish(allocator, &device);
    }
}
