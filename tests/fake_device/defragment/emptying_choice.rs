//! Which blocks a plan empties: the least used first, by the fraction in use
//! rather than the bytes, only blocks at most `max_used_percent` in use,
//! only blocks whose every allocation is listed and fits elsewhere (the
//! placements tried for one that does not are undone), an allocation listed
//! twice moved once, excluded memory types kept; and frees queued for their
//! frame counting as leaving a block, a pool's own only.

use ash::vk;
use vk_suballoc::device::fake::FakeLayout;
use vk_suballoc::{Allocation, DefragmentationLimits, Movable, Usage};

use super::super::{allocator, allocator_with, buffer, finish, free, without_runs, FakeAllocator};

use super::{
    assert_disjoint, blocks, blocks_with_a_run, carry_out, keep_where, mib_buffers, movables,
    movables_of_run_blocks, two_fragmented_blocks, MIB,
};

/// 64 buffers of 1 MiB fill the first block (32 MiB) and half the second
/// (64 MiB). With holes punched in the first and most of the second freed,
/// the plan moves the second's 8 buffers into the first's holes, and the
/// second block empties once the engine frees them.
#[test]
fn a_plan_empties_the_least_used_block() {
    let (allocator, device) = allocator_with(FakeLayout::discrete(), without_runs());
    let all = mib_buffers(&allocator, 64);
    let memory_type = all[0].memory_type();
    let first = all[0].memory();
    let second = all[32].memory();
    assert!(all[..32].iter().all(|a| a.memory() == first));
    assert!(all[32..].iter().all(|a| a.memory() == second));
    assert_eq!(blocks(&allocator, memory_type), (2, 96 * MIB, 0));
    // Every other buffer of the first block, and 24 of the second's 32.
    let mut live = keep_where(&allocator, all, |i| (i < 32 && i % 2 == 0) || i >= 56);
    let allocations = allocator.stats().allocations();

    let plan = allocator
        .plan_defragmentation(&movables(&live), &DefragmentationLimits::default())
        .unwrap();
    assert_eq!((plan.blocks_released, plan.bytes_released), (1, 64 * MIB));
    let moved: Vec<usize> = plan.moves.iter().map(|m| m.movable).collect();
    assert_eq!(
        moved,
        (16..24).collect::<Vec<usize>>(),
        "the second block's 8"
    );
    for planned in &plan.moves {
        let destination = &planned.destination;
        assert_eq!(destination.memory(), first);
        assert_eq!(destination.memory_type(), memory_type);
        assert_eq!(destination.size(), MIB);
        assert_eq!(destination.offset() % 256, 0);
    }
    // The destinations are live allocations beside the sources, and the
    // memory map shows which block is being emptied.
    assert_eq!(allocator.stats().allocations(), allocations + 8);
    let retiring: Vec<(vk::DeviceMemory, bool)> = allocator.memory_map().memory_types
        [memory_type as usize]
        .blocks
        .iter()
        .map(|block| (block.memory, block.retiring))
        .collect();
    assert_eq!(retiring, [(first, false), (second, true)]);
    assert_eq!(
        allocator.stats().memory_types[memory_type as usize].retiring_blocks,
        1
    );

    let sources = carry_out(&allocator, &mut live, plan);
    assert!(sources.iter().all(|&m| m == second));
    assert!(live.iter().all(|a| a.memory() == first));
    assert_disjoint(&live, "after the moves");
    // The emptied block is released at once, not kept for reuse.
    assert_eq!(blocks(&allocator, memory_type), (1, 32 * MIB, 0));
    assert_eq!(
        allocator.stats().memory_types[memory_type as usize].retiring_blocks,
        0
    );
    assert_eq!(allocator.trim(), 0);
    // Nothing left to do: the one block cannot be emptied into another.
    let again = allocator
        .plan_defragmentation(&movables(&live), &DefragmentationLimits::default())
        .unwrap();
    assert!(again.moves.is_empty());
    assert_eq!((again.blocks_released, again.bytes_released), (0, 0));
    // A block emptied by ordinary frees is kept, as before.
    for a in live {
        free(&allocator, a);
    }
    assert_eq!(blocks(&allocator, memory_type), (1, 32 * MIB, 1));
    finish(allocator, &device);
}

/// Blocks are emptied in order of the fraction in use, not of bytes in use:
/// with room for one block's moves, the 64 MiB block with 6 MiB in use
/// (9 %) goes before the 32 MiB one with 4 MiB (12 %), releasing twice the
/// memory. The moves fill the fullest block, not the sparse first one,
/// which the next plan empties: nothing is moved twice.
#[test]
fn the_emptiest_block_goes_first() {
    let (allocator, device) = allocator_with(FakeLayout::discrete(), without_runs());
    // Blocks of 32, 64 and 128 MiB; the last half full.
    let all = mib_buffers(&allocator, 160);
    let third = all[96].memory();
    let mut live = Vec::new();
    let mut stays = Vec::new();
    for (i, a) in all.into_iter().enumerate() {
        match i {
            0..4 | 32..38 => live.push(a),
            96.. => stays.push(a),
            _ => free(&allocator, a),
        }
    }
    let limits = DefragmentationLimits::default().max_bytes(6 * MIB);
    let plan = allocator
        .plan_defragmentation(&movables(&live), &limits)
        .unwrap();
    assert_eq!((plan.blocks_released, plan.bytes_released), (1, 64 * MIB));
    let moved: Vec<usize> = plan.moves.iter().map(|m| m.movable).collect();
    assert_eq!(moved, (4..10).collect::<Vec<usize>>());
    // Into the fullest block with room, the third (half in use), so that
    // the first, sparse one is left to a later plan; the 4 MiB of its
    // moves were over the limit.
    assert!(plan.moves.iter().all(|m| m.destination.memory() == third));
    assert_eq!(plan.blocks_over_limits, 1);
    carry_out(&allocator, &mut live, plan);
    let plan = allocator
        .plan_defragmentation(&movables(&live), &DefragmentationLimits::default())
        .unwrap();
    assert_eq!((plan.blocks_released, plan.bytes_released), (1, 32 * MIB));
    let moved: Vec<usize> = plan.moves.iter().map(|m| m.movable).collect();
    assert_eq!(
        moved,
        (0..4).collect::<Vec<usize>>(),
        "each buffer moved once"
    );
    assert!(plan.moves.iter().all(|m| m.destination.memory() == third));
    carry_out(&allocator, &mut live, plan);
    for a in live.into_iter().chain(stays) {
        free(&allocator, a);
    }
    finish(allocator, &device);
}

/// By default only blocks at most half in use are emptied; the limit
/// goes from 0 (nothing) to 100 (any block that fits elsewhere).
#[test]
fn blocks_more_than_half_in_use_stay_by_default() {
    let (allocator, device) = allocator_with(FakeLayout::discrete(), without_runs());
    // The first block (32 MiB) keeps 20 buffers, 62 % in use; the second
    // (64 MiB) keeps its 32, with room for them.
    let all = mib_buffers(&allocator, 64);
    let mut live = keep_where(&allocator, all, |i| !(20..32).contains(&i));
    let listed = &live[..20];
    for percent in [0, 50, 62] {
        let limits = DefragmentationLimits::default().max_used_percent(percent);
        let plan = allocator
            .plan_defragmentation(&movables(listed), &limits)
            .unwrap();
        assert!(plan.moves.is_empty(), "{percent} %");
    }
    assert_eq!(DefragmentationLimits::default().max_used_percent, 50);
    let limits = DefragmentationLimits::default().max_used_percent(63);
    let plan = allocator
        .plan_defragmentation(&movables(listed), &limits)
        .unwrap();
    assert_eq!((plan.moves.len(), plan.blocks_released), (20, 1));
    carry_out(&allocator, &mut live, plan);
    for a in live {
        free(&allocator, a);
    }
    finish(allocator, &device);
}

/// A block holding anything not movable stays: here the second block's
/// last buffer is left out, then a dedicated allocation, which never moves,
/// is the only thing listed.
#[test]
fn only_blocks_whose_every_allocation_moves_are_emptied() {
    let (allocator, device) = allocator_with(FakeLayout::discrete(), without_runs());
    let live = two_fragmented_blocks(&allocator);
    let plan = allocator
        .plan_defragmentation(&movables(&live[16..23]), &DefragmentationLimits::default())
        .unwrap();
    assert!(plan.moves.is_empty());

    let dedicated = allocator
        .allocate(
            &buffer(MIB, 256, Usage::DEVICE_LOCAL).dedicated(vk_suballoc::DedicatedPolicy::Always),
        )
        .unwrap();
    assert!(dedicated.is_dedicated());
    let plan = allocator
        .plan_defragmentation(
            &movables(std::slice::from_ref(&dedicated)),
            &DefragmentationLimits::default(),
        )
        .unwrap();
    assert!(plan.moves.is_empty());
    for a in live.into_iter().chain([dedicated]) {
        free(&allocator, a);
    }
    finish(allocator, &device);
}

/// A block whose allocations do not all fit in the other blocks stays, and
/// the placements tried for it are undone: here the second block's 2 MiB
/// buffers find only 1 MiB holes once the first has fitted.
#[test]
fn a_block_that_does_not_fit_elsewhere_stays() {
    let (allocator, device) = allocator_with(FakeLayout::discrete(), without_runs());
    let mut live = two_fragmented_blocks(&allocator);
    let large: Vec<Allocation> = (0..2)
        .map(|_| {
            allocator
                .allocate(&buffer(2 * MIB, 256, Usage::DEVICE_LOCAL))
                .unwrap()
        })
        .collect();
    let second = live[16].memory();
    assert!(large.iter().all(|a| a.memory() == second));
    // One 3 MiB hole in the first block, the rest 1 MiB: the first large
    // buffer fits, the second does not.
    free(&allocator, live.remove(1));
    live.extend(large);
    let before = allocator.stats();
    let plan = allocator
        .plan_defragmentation(&movables(&live[15..]), &DefragmentationLimits::default())
        .unwrap();
    assert!(plan.moves.is_empty());
    assert_eq!(allocator.stats(), before, "the tried placements are undone");
    // What the first block's holes can take, the next plan still finds.
    let plan = allocator
        .plan_defragmentation(&movables(&live[..15]), &DefragmentationLimits::default())
        .unwrap();
    assert_eq!(plan.blocks_released, 1);
    carry_out(&allocator, &mut live, plan);
    for a in live {
        free(&allocator, a);
    }
    finish(allocator, &device);
}

/// Listed twice, an allocation moves once; requirements that exclude its
/// memory type keep it (and so its block) where it is.
#[test]
fn duplicates_move_once_and_excluded_types_stay() {
    let (allocator, device) = allocator_with(FakeLayout::discrete(), without_runs());
    let mut live = two_fragmented_blocks(&allocator);
    let memory_type = live[0].memory_type();
    let mut listed = movables(&live);
    listed.extend(movables(&live[16..]));
    let excluded = Movable {
        requirements: vk::MemoryRequirements {
            memory_type_bits: !(1 << memory_type),
            ..listed[16].requirements
        },
        ..listed[16]
    };
    let plan = allocator
        .plan_defragmentation(
            &[&[excluded], &listed[17..24]].concat(),
            &DefragmentationLimits::default(),
        )
        .unwrap();
    assert!(plan.moves.is_empty(), "one of the second block's stays");

    let plan = allocator
        .plan_defragmentation(&listed, &DefragmentationLimits::default())
        .unwrap();
    let moved: Vec<usize> = plan.moves.iter().map(|m| m.movable).collect();
    assert_eq!(moved, (16..24).collect::<Vec<usize>>());
    drop(listed);
    carry_out(&allocator, &mut live, plan);
    for a in live {
        free(&allocator, a);
    }
    finish(allocator, &device);
}

/// Frees queued for their frame need no move: a block holding only those
/// and listed allocations is emptied, and empties once they are released.
/// With frames in flight, a split plan made every frame moves every frame,
/// its earlier moves' sources still queued. (Before, such frees held their
/// block: every other plan moved nothing, and an engine that stopped at the
/// first empty plan left the block half emptied.)
#[test]
fn queued_frees_do_not_hold_a_block_from_a_plan() {
    let (allocator, device) = allocator_with(FakeLayout::discrete(), without_runs());
    let mut live = two_fragmented_blocks(&allocator);
    let memory_type = live[0].memory_type();
    let second = live[16].memory();
    // Half the second block's buffers are unloaded, freed after the frame.
    for gone in live.drain(16..20) {
        allocator.free_after_frame(gone).unwrap();
    }
    let limits = DefragmentationLimits::default()
        .max_moves(2)
        .split_blocks(true);
    let mut fences = Vec::new();
    for frame in 0..2 {
        let plan = allocator
            .plan_defragmentation(&movables(&live), &limits)
            .unwrap();
        assert_eq!(plan.moves.len(), 2, "frame {frame}: {plan:?}");
        assert_eq!(
            (plan.blocks_started, plan.blocks_released),
            (1 - frame, frame),
            "frame {frame}"
        );
        // The moves' sources go through the frame queue, as an engine's do.
        for planned in plan.moves.into_iter().rev() {
            let old = std::mem::replace(&mut live[planned.movable], planned.destination);
            assert_eq!(old.memory(), second);
            allocator.free_after_frame(old).unwrap();
        }
        fences.push(super::super::frames::end_frame(&allocator, &device));
    }
    assert!(live.iter().all(|a| a.memory() != second));
    assert_eq!(blocks(&allocator, memory_type).0, 2, "frees still queued");
    for fence in fences {
        device.signal_fence(fence);
    }
    allocator.collect().unwrap();
    assert_eq!(blocks(&allocator, memory_type).0, 1, "released");
    for a in live {
        free(&allocator, a);
    }
    finish(allocator, &device);
}

/// Only a pool's own queued frees count as leaving its blocks: a small
/// buffer's free queued in another memory type's pool, whose run slot has
/// the same keys as an unlisted small buffer's here (each the first slot
/// of its pool's first run), does not stand in for it, and the block is
/// not emptied around it. (Counted, the plan moved the block's other
/// buffers and counted it released, though it never empties.) Only run
/// slots can meet so: a block range's id carries its offset allocator's
/// owner tag, which no other pool's block shares.
#[test]
fn another_pools_queued_free_does_not_leave_a_block() {
    let (allocator, device) = allocator(FakeLayout::discrete());
    let live = blocks_with_a_run(&allocator);
    // In the upload type, a first small buffer makes a block, whose first
    // run the second's slot starts.
    let upload = || allocator.allocate(&buffer(100, 16, Usage::UPLOAD)).unwrap();
    let (first_upload, second_upload) = (upload(), upload());
    assert_ne!(first_upload.memory_type(), live[0].memory_type());
    allocator.free_after_frame(second_upload).unwrap();
    // The second block's buffers but its first small one (movable 24).
    let listed: Vec<Movable<'_>> = movables_of_run_blocks(&live)
        .into_iter()
        .enumerate()
        .filter(|&(index, _)| index >= 16 && index != 24)
        .map(|(_, movable)| movable)
        .collect();
    let plan = allocator
        .plan_defragmentation(&listed, &DefragmentationLimits::default())
        .unwrap();
    assert_eq!(
        (plan.moves.len(), plan.blocks_released),
        (0, 0),
        "{:?}",
        plan.moves
    );
    drop(listed);
    device.signal_fence(super::super::frames::end_frame(&allocator, &device));
    allocator.collect().unwrap();
    for a in live.into_iter().chain([first_upload]) {
        free(&allocator, a);
    }
    finish(allocator, &device);
}

/// Blocks of 32, 64 and 128 MiB, by their memory objects, and their live
/// 1 MiB buffers: the first three quarters full (its `i % 4 != 0`), the
/// second five eighths (its `i % 8 < 5`), the third holding 8.
fn three_blocks(allocator: &FakeAllocator) -> ([vk::DeviceMemory; 3], [Vec<Allocation>; 3]) {
    let all = mib_buffers(allocator, 104);
    let memory = [all[0].memory(), all[32].memory(), all[96].memory()];
    assert!(memory[0] != memory[1] && memory[1] != memory[2] && memory[0] != memory[2]);
    let live = keep_where(allocator, all, |i| {
        (i < 32 && i % 4 != 0) || (32..96).contains(&i) && (i - 32) % 8 < 5 || i >= 96
    });
    let mut by_block: [Vec<Allocation>; 3] = Default::default();
    for a in live {
        let block = memory.iter().position(|&m| m == a.memory()).unwrap();
        by_block[block].push(a);
    }
    assert_eq!(by_block.each_ref().map(Vec::len), [24, 40, 8]);
    (memory, by_block)
}

/// A block whose every allocation is a free waiting for its frame takes no
/// moves: it empties once the frame is collected, and a move into its
/// holes would keep it, as one into an empty block would only swap one
/// block for another. The moves go to the next fullest block instead;
/// with one allocation that stays, the block takes them again. (Before,
/// the queued frees counted as in use: the block ranked fullest and took
/// every move.)
#[test]
fn a_block_left_only_with_queued_frees_takes_no_moves() {
    for stays in [0, 1] {
        let (allocator, device) = allocator_with(FakeLayout::discrete(), without_runs());
        let (memory, [mut first, kept, mut listed]) = three_blocks(&allocator);
        // The first block's buffers unloaded this frame, but `stays`; the
        // second's kept (not listed); the third's listed, to move.
        let staying: Vec<Allocation> = first.drain(..stays).collect();
        for gone in first {
            allocator.free_after_frame(gone).unwrap();
        }
        let plan = allocator
            .plan_defragmentation(&movables(&listed), &DefragmentationLimits::default())
            .unwrap();
        assert_eq!(plan.moves.len(), 8, "{stays}: {plan:?}");
        let into: Vec<_> = plan.moves.iter().map(|m| m.destination.memory()).collect();
        let expected = if stays == 0 { memory[1] } else { memory[0] };
        assert!(
            into.iter().all(|&m| m == expected),
            "{stays}: into {into:?}"
        );
        carry_out(&allocator, &mut listed, plan);
        let memory_type = kept[0].memory_type();
        device.signal_fence(super::super::frames::end_frame(&allocator, &device));
        allocator.collect().unwrap();
        // The third block, retiring, went as the moves emptied it; the
        // first, left with nothing, stays a while as an empty block.
        let (count, _, empty) = blocks(&allocator, memory_type);
        assert_eq!((count, empty), (2, 1 - stays as u64), "{stays}");
        for a in kept.into_iter().chain(listed).chain(staying) {
            free(&allocator, a);
        }
        finish(allocator, &device);
    }
}

/// Frees queued for their frame count as free in the choice of the blocks
/// to empty: a block three quarters full, two thirds of it queued frees,
/// is a quarter in use, so it is emptied first (under the default 50 %),
/// before one three eighths in use, which then takes its moves as the
/// fullest block left. (Counted whole, it was over the 50 %: the other
/// block was emptied instead.)
#[test]
fn queued_frees_count_as_free_in_a_blocks_use() {
    let (allocator, device) = allocator_with(FakeLayout::discrete(), without_runs());
    let (memory, [mut first, mut second, third]) = three_blocks(&allocator);
    for gone in first.drain(..16) {
        allocator.free_after_frame(gone).unwrap();
    }
    // Of the second block's 40, 24 listed (three eighths of it in use).
    let unlisted: Vec<Allocation> = second.drain(24..).collect();
    for a in unlisted {
        free(&allocator, a);
    }
    let mut listed: Vec<Allocation> = first.into_iter().chain(second).collect();
    let plan = allocator
        .plan_defragmentation(&movables(&listed), &DefragmentationLimits::default())
        .unwrap();
    let from = |block: usize| {
        plan.moves
            .iter()
            .filter(|m| listed[m.movable].memory() == memory[block])
            .count()
    };
    assert_eq!(
        (from(0), from(1), plan.blocks_released),
        (8, 0, 1),
        "{plan:?}"
    );
    assert!(plan
        .moves
        .iter()
        .all(|m| m.destination.memory() == memory[1]));
    carry_out(&allocator, &mut listed, plan);
    device.signal_fence(super::super::frames::end_frame(&allocator, &device));
    allocator.collect().unwrap();
    for a in listed.into_iter().chain(third) {
        free(&allocator, a);
    }
    finish(allocator, &device);
}
