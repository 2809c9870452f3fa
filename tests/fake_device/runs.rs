//! Small buffers share runs: ranges of a block cut into equal slots.

use vk_suballoc::device::fake::FakeLayout;
use vk_suballoc::report::RangeKind;
use vk_suballoc::{
    Allocation, AllocationDesc, Config, Error, PoolDesc, Request, ResourceKind, UploadRingDesc,
    Usage,
};

use super::{
    allocator, allocator_with, buffer, finish, free, requirements, without_runs, FakeAllocator,
};

const MIB: u64 = 1 << 20;

/// A 1 MiB buffer at the start of a new block: runs are carved from
/// existing blocks only.
fn seed(allocator: &FakeAllocator) -> Allocation {
    let seed = allocator
        .allocate(&buffer(MIB, 256, Usage::DEVICE_LOCAL))
        .unwrap();
    assert_eq!(seed.offset(), 0);
    seed
}

/// A device-local buffer of 100 bytes aligned to 16: 112 bytes
/// placed, the class of 112-byte slots (64 to a run).
fn small(allocator: &FakeAllocator) -> Allocation {
    allocator
        .allocate(&buffer(100, 16, Usage::DEVICE_LOCAL))
        .unwrap()
}

/// 64 buffers of 100 bytes (aligned to 16, so 112 placed: the class of
/// 112-byte slots) fill one run of 64 slots, 7168 bytes, after the seed; the
/// 65th starts a second run right after it. The map shows each slot;
/// freeing them all gives the whole block back.
#[test]
fn small_buffers_share_a_run() {
    let (allocator, device) = allocator(FakeLayout::discrete());
    let seed = seed(&allocator);
    let mut live: Vec<Allocation> = (0..65).map(|_| small(&allocator)).collect();
    let memory = seed.memory();
    let memory_type = seed.memory_type() as usize;
    assert!(live.iter().all(|a| a.memory() == memory));
    let mut offsets: Vec<u64> = live.iter().map(Allocation::offset).collect();
    offsets.sort_unstable();
    assert_eq!(
        offsets,
        (0..65).map(|i| MIB + i * 112).collect::<Vec<u64>>()
    );
    let stats = allocator.stats();
    assert_eq!((stats.allocations(), stats.live_bytes()), (66, MIB + 6500));

    let map = allocator.memory_map();
    let block = &map.memory_types[memory_type].blocks[0];
    let held: Vec<(u64, u64, RangeKind)> = block
        .allocations()
        .map(|r| (r.offset, r.size, r.kind))
        .collect();
    let expected: Vec<(u64, u64, RangeKind)> = std::iter::once((0, MIB, RangeKind::Buffer))
        .chain((0..65).map(|i| (MIB + i * 112, 112, RangeKind::Buffer)))
        .collect();
    assert_eq!(held, expected);
    // The second run's 63 free slots and the rest of the block: one stretch
    // of free space, as a dump shows it.
    let end = MIB + 65 * 112;
    let free_ranges: Vec<(u64, u64)> = block.free_ranges().map(|r| (r.offset, r.size)).collect();
    assert_eq!(free_ranges, [(end, block.size - end)]);

    for allocation in live.drain(..).chain([seed]) {
        free(&allocator, allocation);
    }
    let map = allocator.memory_map();
    let block = &map.memory_types[memory_type].blocks[0];
    assert_eq!(block.allocations().count(), 0);
    assert_eq!(
        block.free_ranges().count(),
        1,
        "the runs went back to the block"
    );
    finish(allocator, &device);
}

/// Runs never create blocks: in a new allocator the first small buffer
/// takes a range of its own in the new block, and the next one carves a run
/// after it.
#[test]
fn runs_are_carved_from_existing_blocks() {
    let (allocator, device) = allocator(FakeLayout::integrated());
    let first = small(&allocator);
    let second = small(&allocator);
    let third = small(&allocator);
    assert_eq!(device.live_allocations().len(), 1);
    // First a range [0, 112), then a run of 112-byte slots from 112.
    assert_eq!(
        (first.offset(), second.offset(), third.offset()),
        (0, 112, 224)
    );
    for allocation in [first, second, third] {
        free(&allocator, allocation);
    }
    finish(allocator, &device);
}

/// Named buffers take slots too, and the map shows their names; buffers over
/// the limit and images take ranges of their own, past the run.
#[test]
fn named_buffers_take_slots_and_larger_requests_take_ranges() {
    let (allocator, device) = allocator(FakeLayout::integrated());
    let seed = seed(&allocator);
    let in_run = small(&allocator);
    assert_eq!(in_run.offset(), MIB);
    // The run holds 64 slots of 112 bytes: [1 MiB, 1 MiB + 7168).
    let named = allocator
        .allocate(&buffer(100, 16, Usage::DEVICE_LOCAL).name("named"))
        .unwrap();
    assert_eq!(named.offset(), MIB + 112);
    let large = allocator
        .allocate(&buffer(16 * 1024 + 1, 1, Usage::DEVICE_LOCAL))
        .unwrap();
    assert_eq!(large.offset(), MIB + 7168);
    let image = allocator
        .allocate(&Request::new(
            requirements(100, 16),
            Usage::DEVICE_LOCAL,
            ResourceKind::OptimalImage,
        ))
        .unwrap();
    assert_eq!(image.offset(), MIB + 7168 + 16 * 1024 + 1 + 15);
    let map = allocator.memory_map();
    let block = &map.memory_types[seed.memory_type() as usize].blocks[0];
    let names: Vec<(u64, Option<&str>)> = block
        .allocations()
        .map(|r| (r.offset, r.name.as_deref()))
        .collect();
    assert_eq!(
        names[..3],
        [(0, None), (MIB, None), (MIB + 112, Some("named"))]
    );
    // Freed, the slot's name goes with it.
    free(&allocator, named);
    let again = small(&allocator);
    assert_eq!(again.offset(), MIB + 112);
    let map = allocator.memory_map();
    let block = &map.memory_types[seed.memory_type() as usize].blocks[0];
    assert!(block.allocations().all(|r| r.name.is_none()));
    for allocation in [seed, in_run, large, image, again] {
        free(&allocator, allocation);
    }
    finish(allocator, &device);
}

/// `small_buffer_limit: 0` turns runs off; a limit over 64 KiB is refused.
#[test]
fn the_limit_is_configurable() {
    let (allocator, device) = allocator_with(FakeLayout::integrated(), without_runs());
    let first = small(&allocator);
    let second = small(&allocator);
    // Ranges of their own, each its size rounded to its alignment.
    assert_eq!((first.offset(), second.offset()), (0, 112));
    free(&allocator, first);
    free(&allocator, second);
    finish(allocator, &device);
    let too_large = Config {
        small_buffer_limit: (64 << 10) + 1,
        ..Config::default()
    };
    let refused = vk_suballoc::Allocator::new(
        vk_suballoc::device::fake::FakeDevice::new(FakeLayout::integrated()),
        too_large,
    );
    assert_eq!(
        refused.err(),
        Some(Error::InvalidConfig(
            "small_buffer_limit must be at most 65536"
        ))
    );
}

/// Size classes above 32 KiB would make runs of one slot (a run holds at
/// most 64 KiB): a range that shares nothing, aligned to the slot size's
/// largest power of two. So buffers past 32 KiB take ranges of their own
/// whatever the limit: under the largest limit (65536) four 49052-byte
/// buffers land where they do under the default, each right after the
/// last, not at 16 KiB and 64 KiB steps.
#[test]
fn buffers_past_32_kib_take_ranges_whatever_the_limit() {
    let offsets = |config: Config| {
        let (allocator, device) = allocator_with(FakeLayout::discrete(), config);
        let mut live = vec![small(&allocator)];
        live.extend((0..4).map(|_| {
            allocator
                .allocate(&buffer(49052, 256, Usage::DEVICE_LOCAL))
                .unwrap()
        }));
        let offsets: Vec<u64> = live[1..].iter().map(Allocation::offset).collect();
        for allocation in live {
            free(&allocator, allocation);
        }
        finish(allocator, &device);
        offsets
    };
    let default = offsets(Config::default());
    assert!(
        default.windows(2).all(|w| w[1] - w[0] == 49152),
        "{default:?}"
    );
    let largest = Config {
        small_buffer_limit: 65536,
        ..Config::default()
    };
    assert_eq!(offsets(largest), default);
}

/// A run that empties leaves its class's list of runs with room: the next
/// small buffer takes a free slot of another run instead of carving a new
/// run where the emptied one was.
#[test]
fn an_emptied_run_leaves_the_list_of_runs_with_room() {
    let (allocator, device) = allocator(FakeLayout::discrete());
    let seed = seed(&allocator);
    // Two full runs of 64 slots: A at 1 MiB, B right after it.
    let mut a: Vec<Allocation> = (0..64).map(|_| small(&allocator)).collect();
    let mut b: Vec<Allocation> = (0..64).map(|_| small(&allocator)).collect();
    assert_eq!(a[5].offset(), MIB + 5 * 112);
    assert_eq!(b[0].offset(), MIB + 7168);
    // A gets room, then B; then B empties and goes back to the block.
    free(&allocator, a.remove(5));
    free(&allocator, b.remove(3));
    for allocation in b.drain(..) {
        free(&allocator, allocation);
    }
    assert_eq!(allocator.stats().allocations(), 1 + 63);
    // The freed slot of A is taken again, no new run.
    let again = small(&allocator);
    assert_eq!(again.offset(), MIB + 5 * 112);
    // A is full again: the next one carves a new run after it.
    let next = small(&allocator);
    assert_eq!(next.offset(), MIB + 7168);
    for allocation in a.into_iter().chain([again, next, seed]) {
        free(&allocator, allocation);
    }
    finish(allocator, &device);
}

/// A run whose slots are all freed goes back to its block, and the block,
/// emptied, is released: the next small buffers of its class take live
/// memory, never a slot of the released run, which was the last run with
/// room of its class (the one the runs' table of last runs named).
#[test]
fn a_released_run_is_never_served_again() {
    let (allocator, device) = allocator(FakeLayout::discrete());
    let first = seed(&allocator);
    let released = first.memory();
    let slots: Vec<Allocation> = (0..3).map(|_| small(&allocator)).collect();
    assert!(slots.iter().all(|a| a.memory() == released));
    for allocation in slots.into_iter().chain([first]) {
        free(&allocator, allocation);
    }
    allocator.trim();
    assert!(device.live_allocations().is_empty(), "the block went");
    // No block: the first small buffer takes a range of a new block (runs
    // never make blocks), the next ones slots of a run carved there.
    let live: Vec<Allocation> = (0..3).map(|_| small(&allocator)).collect();
    let memory = live[0].memory();
    let objects: Vec<_> = device.live_allocations().iter().map(|o| o.memory).collect();
    assert_eq!(objects, [memory]);
    assert!(live.iter().all(|a| a.memory() == memory));
    let offsets: Vec<u64> = live.iter().map(Allocation::offset).collect();
    let run = offsets[1];
    assert_eq!(offsets, [0, run, run + 112]);
    for allocation in live {
        free(&allocator, allocation);
    }
    finish(allocator, &device);
}

/// A run takes at most a sixteenth of its block: in a custom pool of 64 KiB
/// blocks, a 1000-byte buffer (1024 placed, whose run of 64 slots is 64 KiB)
/// takes a range of its own, and a 2000-byte buffer fits beside it in the
/// same block, as without runs. Before, the first buffer's run filled the
/// pool's empty block and the second took a new one: two memory objects
/// where one held both.
#[test]
fn a_run_never_fills_a_small_block() {
    let (allocator, device) = allocator(FakeLayout::discrete());
    let pool = allocator
        .create_pool(&PoolDesc::new(1).block_size(64 << 10).min_blocks(1))
        .unwrap();
    let request = |size| {
        let desc = AllocationDesc::new(Usage::DEVICE_LOCAL).pool(pool);
        Request::with_desc(requirements(size, 256), ResourceKind::Buffer, desc)
    };
    let first = allocator.allocate(&request(1000)).unwrap();
    let second = allocator.allocate(&request(2000)).unwrap();
    assert_eq!(device.live_allocations().len(), 1, "one block holds both");
    assert_eq!(first.memory(), second.memory());
    assert_eq!((first.offset(), second.offset()), (0, 1024));
    // Runs still come from blocks 16 times their size: 16-byte buffers
    // aligned to 16 take slots of a 1 KiB run (64 slots), which a range
    // after them then follows.
    let tiny_request = |_| {
        let desc = AllocationDesc::new(Usage::DEVICE_LOCAL).pool(pool);
        Request::with_desc(requirements(16, 16), ResourceKind::Buffer, desc)
    };
    let tiny: Vec<Allocation> = (0..3)
        .map(|i| allocator.allocate(&tiny_request(i)).unwrap())
        .collect();
    let offsets: Vec<u64> = tiny.iter().map(Allocation::offset).collect();
    assert_eq!(offsets, [3072, 3088, 3104], "slots of one run");
    let after = allocator.allocate(&request(100)).unwrap();
    assert_eq!(after.offset(), 3072 + 1024, "after the run's 1 KiB");
    for allocation in tiny.into_iter().chain([first, second, after]) {
        free(&allocator, allocation);
    }
    allocator.destroy_pool(pool).unwrap();
    finish(allocator, &device);
}

/// An upload ring's chunk in a run slot of mobile's non-coherent type
/// (sizes off the 256-byte atom, with and without margins): its debug
/// fills, `ring_write`s and `ring_flush`es, frame after frame, never reach
/// the run slots beside it, whose unflushed host writes and GPU writes not
/// yet invalidated stay as they were; nothing is found written after free.
#[test]
fn a_ring_chunk_in_a_run_slot_leaves_its_neighbours_alone() {
    for (margin, size) in [(0, 3), (0, 1000), (16, 777), (60, 5000)] {
        let config = Config {
            debug_margin: margin,
            debug_fill: true,
            // First blocks of 1 MiB: filled whole, and large enough for runs.
            large_heap_block_size: 8 * MIB,
            ..Config::default()
        };
        let (allocator, device) = allocator_with(FakeLayout::mobile(), config);
        let readback = buffer(size, 4, Usage::READBACK);
        let mut neighbours: Vec<Allocation> = (0..3)
            .map(|_| allocator.allocate(&readback).unwrap())
            .collect();
        let ring = allocator
            .create_upload_ring(&UploadRingDesc {
                size,
                usage: Usage::READBACK,
                ..UploadRingDesc::default()
            })
            .unwrap();
        neighbours.extend((0..3).map(|_| allocator.allocate(&readback).unwrap()));
        // A run of the chunk's class holds them all (the first took a
        // range of its own, before the run).
        let offsets: Vec<u64> = neighbours.iter().map(Allocation::offset).collect();
        let slot = offsets[2] - offsets[1];
        assert_eq!(offsets[1..], [slot, 2 * slot, 4 * slot, 5 * slot, 6 * slot]);
        // Even ones: written by the GPU; odd ones: by the host, unflushed.
        for (i, a) in neighbours.iter_mut().enumerate() {
            let tag = 0x30 + i as u8;
            if i % 2 == 0 {
                let bytes = vec![tag; a.size() as usize];
                // SAFETY: no slice of the memory is alive.
                assert!(unsafe { device.write(a.memory(), a.offset(), &bytes) });
            } else {
                allocator.mapped_slice_mut(a).unwrap().fill(tag);
            }
        }
        for frame in 0..8 {
            for k in 0..3 {
                let len = 1 + (frame * 7 + k * 13) % (size / 3).max(1);
                if let Ok(placed) = allocator.ring_allocate(ring, len, 1 << k) {
                    let bytes = vec![0x77; len as usize];
                    allocator.ring_write(&placed, 0, &bytes).unwrap();
                    allocator.ring_flush(&placed, ..).unwrap();
                }
            }
            device.signal_fence(super::frames::end_frame(&allocator, &device));
            allocator.collect().unwrap();
            assert!(allocator.check_corruption(!0).unwrap().is_clean());
        }
        for (i, a) in neighbours.iter_mut().enumerate() {
            if i % 2 == 0 {
                allocator.invalidate(a, ..).unwrap();
            }
            let bytes = allocator.mapped_slice(a).unwrap();
            let tag = 0x30 + i as u8;
            assert!(
                bytes.iter().all(|&b| b == tag),
                "size {size}: neighbour {i}"
            );
        }
        allocator.destroy_upload_ring(ring).unwrap();
        neighbours.into_iter().for_each(|a| free(&allocator, a));
        assert_eq!(allocator.corruptions_detected(), 0);
        super::frames::finish_after_frame(allocator, &device);
    }
}

/// The limit is on the placed size, the debug margin included, and
/// inclusive: under a limit of 1000 with a 16-byte margin, a 984-byte
/// buffer (1000 placed) takes a slot of the 1024-byte class, which the map
/// shows whole; a 985-byte one (1001 placed) a range of its own, 1001
/// bytes. (review57g: no test pinned the edge.)
#[test]
fn the_limit_takes_the_placed_size_with_its_margin_inclusively() {
    let config = Config {
        small_buffer_limit: 1000,
        debug_margin: 16,
        ..Config::default()
    };
    let (allocator, device) = allocator_with(FakeLayout::discrete(), config);
    let seed = seed(&allocator);
    let held = |allocation: &Allocation| {
        let map = allocator.memory_map();
        let block = &map.memory_types[seed.memory_type() as usize].blocks[0];
        let range = block
            .allocations()
            .find(|r| r.offset == allocation.offset());
        range.map(|r| r.size)
    };
    let at_limit = allocator
        .allocate(&buffer(984, 8, Usage::DEVICE_LOCAL))
        .unwrap();
    assert_eq!(held(&at_limit), Some(1024), "a slot");
    let past_limit = allocator
        .allocate(&buffer(985, 1, Usage::DEVICE_LOCAL))
        .unwrap();
    assert_eq!(held(&past_limit), Some(1001), "a range of its own");
    for allocation in [at_limit, past_limit, seed] {
        free(&allocator, allocation);
    }
    finish(allocator, &device);
}
