//! Margins and the moves of a defragmentation plan: destinations, of a
//! plan or of a compaction, keep their margins and an overrun of one is
//! caught, and queued frees count as gone with their margins when a plan
//! weighs a block. The moves need helpers of their own (upload buffers
//! with margins, an overrun of a destination then the moves), kept here
//! with the tests that use them.

use vk_suballoc::device::fake::{FakeDevice, FakeLayout};
use vk_suballoc::{Allocation, Config, DefragmentationLimits, Usage};

use super::super::defragment::movables;
use super::super::{allocator_with, buffer, finish, free, FakeAllocator};

use super::{assert_apart, gpu_write, with_margin, MIB};

/// Defragmentation's destinations keep their margins, patterned: the plan
/// leaves every margin intact, and an overrun of a destination is caught.
#[test]
fn defragmentation_destinations_keep_margins() {
    let (allocator, device, all) = upload_buffers_with_margins(64);
    let first = all[0].memory();
    assert!(all.iter().any(|a| a.memory() != first));
    // Every other buffer of the first block, and most of the rest.
    let mut live = Vec::new();
    for (i, a) in all.into_iter().enumerate() {
        if (a.memory() == first && i % 2 == 0) || (a.memory() != first && i % 8 == 0) {
            live.push(a);
        } else {
            free(&allocator, a);
        }
    }
    let movables = movables(&live);
    let plan = allocator
        .plan_defragmentation(&movables, &DefragmentationLimits::default())
        .unwrap();
    assert!(!plan.moves.is_empty());
    overrun_a_destination_then_move(allocator, &device, live, plan.moves, 0);
}

/// `count` upload buffers of 1 MiB − 4 KiB with patterned margins of 256
/// bytes, no runs, on the discrete layout.
fn upload_buffers_with_margins(count: usize) -> (FakeAllocator, FakeDevice, Vec<Allocation>) {
    let config = Config {
        small_buffer_limit: 0,
        ..with_margin(256, true)
    };
    let (allocator, device) = allocator_with(FakeLayout::discrete(), config);
    let all: Vec<Allocation> = (0..count)
        .map(|_| {
            allocator
                .allocate(&buffer(MIB - 4096, 256, Usage::UPLOAD))
                .unwrap()
        })
        .collect();
    (allocator, device, all)
}

/// Checks that `moves` left every pattern intact, overruns the first
/// destination by `past_end + 1` bytes on the GPU (caught by
/// `check_corruption`), carries the moves out over `live`, and frees
/// everything: the overrun is counted once, at its destination's free.
fn overrun_a_destination_then_move(
    allocator: FakeAllocator,
    device: &FakeDevice,
    mut live: Vec<Allocation>,
    mut moves: Vec<vk_suballoc::DefragmentationMove>,
    past_end: u64,
) {
    assert!(allocator.check_corruption(!0).unwrap().is_clean());
    let destination = &moves[0].destination;
    gpu_write(device, destination, destination.size() + past_end, &[0xFF]);
    assert_eq!(allocator.check_corruption(!0).unwrap().damaged.len(), 1);
    for planned in moves.drain(..).rev() {
        let old = std::mem::replace(&mut live[planned.movable], planned.destination);
        free(&allocator, old);
    }
    assert_apart(&live, 256, "after the moves");
    assert_eq!(allocator.corruptions_detected(), 0);
    for a in live {
        free(&allocator, a);
    }
    assert_eq!(allocator.corruptions_detected(), 1);
    finish(allocator, device);
}

/// Compaction's destinations, lower in their own block, keep their
/// margins too: each lands wholly below its source, margin included, the
/// plan leaves every pattern intact, and an overrun of a destination is
/// caught.
#[test]
fn compaction_destinations_keep_margins() {
    let (allocator, device, all) = upload_buffers_with_margins(16);
    let block = all[0].memory();
    assert!(all.iter().all(|a| a.memory() == block));
    // Every other buffer: holes below the survivors.
    let mut live = Vec::new();
    for (i, a) in all.into_iter().enumerate() {
        if i % 2 == 1 {
            live.push(a);
        } else {
            free(&allocator, a);
        }
    }
    let movables = movables(&live);
    let limits = DefragmentationLimits::default()
        .max_used_percent(0)
        .compact_blocks(true);
    let plan = allocator.plan_defragmentation(&movables, &limits).unwrap();
    assert_eq!(plan.blocks_compacted, 1);
    assert!(plan.moves.len() >= 2);
    for planned in &plan.moves {
        let (source, destination) = (movables[planned.movable].allocation, &planned.destination);
        assert_eq!(destination.memory(), block);
        assert!(destination.offset() + destination.size() + 256 <= source.offset());
    }
    drop(movables);
    overrun_a_destination_then_move(allocator, &device, live, plan.moves, 255);
}

/// Frees queued for their frame count as gone from their block with their
/// margins: a block of small buffers with 64 KiB margins, most of them
/// queued, is nearly empty and a plan empties it. (Counted by their
/// requested size alone, the queued frees left it 80 % in use, over the
/// default limit.)
#[test]
fn queued_frees_leave_with_their_margins() {
    let config = Config {
        small_buffer_limit: 0,
        ..with_margin(65536, false)
    };
    let (allocator, device) = allocator_with(FakeLayout::discrete(), config);
    let small: Vec<Allocation> = (0..400)
        .map(|_| {
            allocator
                .allocate(&buffer(4096, 256, Usage::DEVICE_LOCAL))
                .unwrap()
        })
        .collect();
    let first = small[0].memory();
    assert!(small.iter().all(|a| a.memory() == first));
    // A second block that has room for the survivors.
    let large = allocator
        .allocate(&buffer(24 * MIB, 256, Usage::DEVICE_LOCAL))
        .unwrap();
    assert_ne!(large.memory(), first);
    let mut live = Vec::new();
    for (i, a) in small.into_iter().enumerate() {
        if i % 8 == 0 {
            live.push(a);
        } else {
            allocator.free_after_frame(a).unwrap();
        }
    }
    let movables = movables(&live);
    let plan = allocator
        .plan_defragmentation(&movables, &DefragmentationLimits::default())
        .unwrap();
    drop(movables);
    assert_eq!((plan.blocks_released, plan.moves.len()), (1, live.len()));
    for planned in plan.moves.into_iter().rev() {
        let old = std::mem::replace(&mut live[planned.movable], planned.destination);
        free(&allocator, old);
    }
    assert!(live.iter().all(|a| a.memory() == large.memory()));
    for a in live {
        free(&allocator, a);
    }
    free(&allocator, large);
    super::super::frames::finish_after_frame(allocator, &device);
}
