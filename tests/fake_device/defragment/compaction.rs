//! `compact_blocks`: a lone block of holes packed so that a larger request
//! fits, the highest allocations first and within the limits, only once no
//! block of any pool can be emptied, with no move that only carries a hole
//! up, a full slot table grown for a move, and degenerate states planning
//! nothing.

use vk_suballoc::device::fake::FakeLayout;
use vk_suballoc::{Allocation, Config, DefragmentationLimits, Error, Request, ResourceKind, Usage};

use super::super::FakeAllocator;
use super::super::{allocator_with, buffer, finish, free, requirements, without_runs};

use super::{
    assert_disjoint, blocks, carry_out, custom_pool_with_a_sparse_block, keep_where, mib_buffers,
    movables, MIB,
};

/// A full 32 MiB block of 1 MiB buffers with every other one freed: 16
/// holes of 1 MiB, and nowhere else for its buffers to go. The buffers at
/// odd MiB offsets stay.
fn one_block_of_holes(allocator: &FakeAllocator) -> Vec<Allocation> {
    let all = mib_buffers(allocator, 32);
    assert!(all.iter().all(|a| a.memory() == all[0].memory()));
    keep_where(allocator, all, |i| i % 2 == 1)
}

/// The offsets of `live`, in MiB, sorted.
fn mib_offsets(live: &[Allocation]) -> Vec<u64> {
    let mut offsets: Vec<u64> = live.iter().map(|a| a.offset() / MIB).collect();
    offsets.sort_unstable();
    offsets
}

/// A lone block full of holes cannot be emptied, so a default plan leaves
/// it; with `compact_blocks` the plan moves its highest buffers into its
/// lowest holes, each wholly below where it was, and once the moves are
/// carried out the free bytes are one range: a 2 MiB request, larger
/// than any hole before, fits without a new memory object. A second plan
/// then has nothing to move.
#[test]
fn compaction_packs_a_lone_block_so_a_larger_request_fits() {
    let (allocator, device) = allocator_with(FakeLayout::discrete(), without_runs());
    let mut live = one_block_of_holes(&allocator);
    let block = live[0].memory();
    let two_mib = || buffer(2 * MIB, 256, Usage::DEVICE_LOCAL).existing_memory_only();
    assert_eq!(
        allocator.allocate(&two_mib()).map(|_| ()),
        Err(Error::NoRoomInExistingMemory)
    );
    let plan = allocator
        .plan_defragmentation(&movables(&live), &DefragmentationLimits::default())
        .unwrap();
    assert!(plan.moves.is_empty(), "nowhere to empty it into");
    assert_eq!(plan.blocks_over_limits, 0);

    let before = blocks(&allocator, 1);
    // No block may be emptied (none is 0 % in use): compaction still runs.
    let compact_only = DefragmentationLimits::default()
        .max_used_percent(0)
        .compact_blocks(true);
    let plan = allocator
        .plan_defragmentation(&movables(&live), &compact_only)
        .unwrap();
    assert_eq!(
        (
            plan.blocks_compacted,
            plan.blocks_released,
            plan.moves.len()
        ),
        (1, 0, 8)
    );
    assert_eq!(plan.bytes_moved, 8 * MIB);
    // The highest first, each into the lowest hole: 31 -> 0, 29 -> 2, ...,
    // 17 -> 14; the buffer at 15 has no hole below it left.
    let mut pairs: Vec<(u64, u64)> = plan
        .moves
        .iter()
        .map(|m| (live[m.movable].offset() / MIB, m.destination.offset() / MIB))
        .collect();
    pairs.sort_unstable_by_key(|&(from, _)| std::cmp::Reverse(from));
    let expected: Vec<(u64, u64)> = (0..8).map(|k| (31 - 2 * k, 2 * k)).collect();
    assert_eq!(pairs, expected);
    for planned in &plan.moves {
        let (from, to) = (&live[planned.movable], &planned.destination);
        assert_eq!(to.memory(), block);
        assert!(to.offset() + to.size() <= from.offset(), "wholly below");
    }
    assert_eq!(blocks(&allocator, 1), before, "no memory object made");
    carry_out(&allocator, &mut live, plan);
    assert_disjoint(&live, "after compaction");
    assert_eq!(mib_offsets(&live), (0..16).collect::<Vec<_>>(), "packed");

    let again = allocator
        .plan_defragmentation(
            &movables(&live),
            &DefragmentationLimits::default().compact_blocks(true),
        )
        .unwrap();
    assert!(again.moves.is_empty());
    assert_eq!(again.blocks_compacted, 0);
    let large = allocator.allocate(&two_mib()).unwrap();
    assert_eq!((large.memory(), large.offset()), (block, 16 * MIB));
    assert_eq!(blocks(&allocator, 1), before);
    free(&allocator, large);
    for a in live {
        free(&allocator, a);
    }
    finish(allocator, &device);
}

/// Compaction stays within the limits, the highest allocations first,
/// and reaches them: moves that copy exactly the bytes allowed are made;
/// later plans go on where it stopped.
#[test]
fn compaction_takes_the_highest_allocations_first_within_the_limits() {
    let (allocator, device) = allocator_with(FakeLayout::discrete(), without_runs());
    let mut live = one_block_of_holes(&allocator);
    let compact = DefragmentationLimits::default().compact_blocks(true);
    let plan = allocator
        .plan_defragmentation(&movables(&live), &compact.max_moves(3))
        .unwrap();
    let mut moved: Vec<u64> = plan
        .moves
        .iter()
        .map(|m| live[m.movable].offset() / MIB)
        .collect();
    moved.sort_unstable();
    assert_eq!(moved, [27, 29, 31]);
    carry_out(&allocator, &mut live, plan);
    let plan = allocator
        .plan_defragmentation(&movables(&live), &compact.max_bytes(2 * MIB))
        .unwrap();
    assert_eq!((plan.moves.len(), plan.bytes_moved), (2, 2 * MIB));
    carry_out(&allocator, &mut live, plan);
    // Unlimited, the rest: three more moves finish the packing.
    let plan = allocator
        .plan_defragmentation(&movables(&live), &compact)
        .unwrap();
    assert_eq!(plan.moves.len(), 3);
    carry_out(&allocator, &mut live, plan);
    assert_eq!(mib_offsets(&live), (0..16).collect::<Vec<_>>());
    for a in live {
        free(&allocator, a);
    }
    finish(allocator, &device);
}

/// A custom pool at its `max_blocks` refuses a request no hole holds
/// (`PoolFull`); compacted, its one block takes it.
#[test]
fn a_full_pool_takes_a_larger_request_after_compaction() {
    let (allocator, device) = allocator_with(FakeLayout::discrete(), without_runs());
    let pool = allocator
        .create_pool(
            &vk_suballoc::PoolDesc::new(1)
                .block_size(8 * MIB)
                .max_blocks(1),
        )
        .unwrap();
    let in_pool = |size: u64| {
        let desc = vk_suballoc::AllocationDesc::new(Usage::DEVICE_LOCAL).pool(pool);
        Request::with_desc(requirements(size, 256), ResourceKind::Buffer, desc)
    };
    let all: Vec<Allocation> = (0..8)
        .map(|_| allocator.allocate(&in_pool(MIB)).unwrap())
        .collect();
    let mut live = keep_where(&allocator, all, |i| i % 3 == 0); // at 0, 3, 6 MiB
    assert_eq!(
        allocator.allocate(&in_pool(3 * MIB)).map(|_| ()),
        Err(Error::PoolFull { max_blocks: 1 })
    );
    let plan = allocator
        .plan_defragmentation(
            &movables(&live),
            &DefragmentationLimits::default().compact_blocks(true),
        )
        .unwrap();
    assert_eq!((plan.blocks_compacted, plan.moves.len()), (1, 2));
    carry_out(&allocator, &mut live, plan);
    assert_eq!(mib_offsets(&live), [0, 1, 2]);
    let large = allocator.allocate(&in_pool(3 * MIB)).unwrap();
    assert_eq!(large.offset(), 3 * MIB);
    free(&allocator, large);
    for a in live {
        free(&allocator, a);
    }
    allocator.destroy_pool(pool).unwrap();
    finish(allocator, &device);
}

/// Emptying goes before compaction over the whole plan, not pool by pool:
/// a default pool's lone block of holes, planned first, leaves the moves
/// that empty a custom pool's sparse block to that block. Compaction gets
/// only what is left once no block of any pool can be emptied.
#[test]
fn compaction_in_one_pool_leaves_the_limits_to_emptying_in_another() {
    let (allocator, device) = allocator_with(FakeLayout::discrete(), without_runs());
    let mut live = one_block_of_holes(&allocator);
    let (pool, in_custom, sparse) =
        custom_pool_with_a_sparse_block(&allocator, live[0].memory_type());
    let first_listed = live.len();
    live.extend(in_custom);
    // The two moves empty the sparse block, as they do without compaction.
    let limits = DefragmentationLimits::default()
        .max_moves(2)
        .compact_blocks(true);
    let plan = allocator
        .plan_defragmentation(&movables(&live), &limits)
        .unwrap();
    assert_eq!(
        (
            plan.blocks_released,
            plan.blocks_compacted,
            plan.moves.len()
        ),
        (1, 0, 2),
        "compaction took the moves first"
    );
    assert!(plan.moves.iter().all(|m| m.movable >= first_listed));
    assert!(plan
        .moves
        .iter()
        .all(|m| live[m.movable].memory() == sparse));
    carry_out(&allocator, &mut live, plan);
    assert_disjoint(&live, "after the plan");
    for a in live {
        free(&allocator, a);
    }
    allocator.destroy_pool(pool).unwrap();
    finish(allocator, &device);
}

/// A move that would only carry a hole upward is not made: here a hole
/// lies under three listed buffers and an unlisted one above them, so
/// moving any of them down leaves a hole of the same size higher up, and
/// the plan copies nothing. Listed too, the top one (free space above it)
/// goes into the hole, the one move that fits.
#[test]
fn compaction_makes_no_move_that_only_carries_a_hole_up() {
    let (allocator, device) = allocator_with(FakeLayout::discrete(), without_runs());
    let all = mib_buffers(&allocator, 32);
    // [A 0][hole 1][B 2][C 3][U 4][free 5..32]
    let mut live = keep_where(&allocator, all, |i| i == 0 || (2..=4).contains(&i));
    assert_eq!(mib_offsets(&live), [0, 2, 3, 4]);
    let compact = DefragmentationLimits::default()
        .max_used_percent(0)
        .compact_blocks(true);
    let plan = allocator
        .plan_defragmentation(&movables(&live[..3]), &compact)
        .unwrap();
    assert!(plan.moves.is_empty(), "{plan:?}");
    assert_eq!(plan.blocks_compacted, 0);
    // With U listed: U (free above it) goes into the hole, then C and B
    // have their neighbour above moving.
    let plan = allocator
        .plan_defragmentation(&movables(&live), &compact)
        .unwrap();
    assert_eq!(plan.moves.len(), 1, "only the hole at 1 fits: {plan:?}");
    assert_eq!(live[plan.moves[0].movable].offset(), 4 * MIB);
    carry_out(&allocator, &mut live, plan);
    assert_eq!(mib_offsets(&live), [0, 1, 2, 3]);
    for a in live {
        free(&allocator, a);
    }
    finish(allocator, &device);
}

/// As [`compaction_makes_no_move_that_only_carries_a_hole_up`], with the
/// hole at the block's start: a listed buffer between it and an unlisted
/// one stays, as moving it to offset 0 would only carry the hole up.
#[test]
fn compaction_carries_no_hole_up_from_the_block_start() {
    let (allocator, device) = allocator_with(FakeLayout::discrete(), without_runs());
    let all = mib_buffers(&allocator, 32);
    // [hole 0][A 1][U 2][free 3..32]
    let live = keep_where(&allocator, all, |i| i == 1 || i == 2);
    assert_eq!(mib_offsets(&live), [1, 2]);
    let compact = DefragmentationLimits::default()
        .max_used_percent(0)
        .compact_blocks(true);
    let plan = allocator
        .plan_defragmentation(&movables(&live[..1]), &compact)
        .unwrap();
    assert!(plan.moves.is_empty(), "{plan:?}");
    assert_eq!((plan.blocks_compacted, plan.bytes_moved), (0, 0));
    for a in live {
        free(&allocator, a);
    }
    finish(allocator, &device);
}

/// A buffer with nothing free above it moves into a hole lower than the
/// one right below it: its old place joins that one. Here the two holes
/// lie between unlisted buffers, and the listed one moves from 4 MiB to
/// 1 MiB, leaving one free range of 2 MiB at 3 MiB.
#[test]
fn compaction_moves_into_a_hole_below_the_one_beside_it() {
    let (allocator, device) = allocator_with(FakeLayout::discrete(), without_runs());
    let all = mib_buffers(&allocator, 32);
    let block = all[0].memory();
    // [Y 0][hole 1][X 2][hole 3][A 4][U 5][free 6..32]
    let mut live = keep_where(&allocator, all, |i| [0, 2, 4, 5].contains(&i));
    assert_eq!(mib_offsets(&live), [0, 2, 4, 5]);
    let compact = DefragmentationLimits::default()
        .max_used_percent(0)
        .compact_blocks(true);
    let plan = allocator
        .plan_defragmentation(&movables(&live[2..3]), &compact)
        .unwrap();
    assert_eq!((plan.blocks_compacted, plan.bytes_moved), (1, MIB));
    let planned = &plan.moves[..];
    assert_eq!(planned.len(), 1, "{plan:?}");
    assert_eq!(planned[0].movable, 0);
    assert_eq!(
        (
            planned[0].destination.memory(),
            planned[0].destination.offset()
        ),
        (block, MIB)
    );
    carry_out(&allocator, &mut live[2..3], plan);
    assert_eq!(mib_offsets(&live), [0, 1, 2, 5]);
    let map = allocator.memory_map();
    let holes: Vec<(u64, u64)> = map.memory_types[1].blocks[0]
        .free_ranges()
        .map(|range| (range.offset / MIB, range.size / MIB))
        .collect();
    assert_eq!(holes, [(3, 2), (6, 26)], "its old place joined the hole");
    for a in live {
        free(&allocator, a);
    }
    finish(allocator, &device);
}

/// Compaction grows a block's slot table when every slot is taken, as an
/// allocation does: here a block of two slots (`initial_block_slots`)
/// holds two buffers, the second aligned to 4 MiB above a 3 MiB gap, and
/// made again aligned to 256 it moves into that gap. (Without the growth
/// the move found no slot, and compaction gave it up without a word.)
#[test]
fn compaction_grows_a_full_slot_table() {
    let config = Config {
        initial_block_slots: 2,
        ..without_runs()
    };
    let (allocator, device) = allocator_with(FakeLayout::discrete(), config);
    let first = allocator
        .allocate(&buffer(MIB, 256, Usage::DEVICE_LOCAL))
        .unwrap();
    let aligned = allocator
        .allocate(&buffer(MIB, 4 * MIB, Usage::DEVICE_LOCAL))
        .unwrap();
    assert_eq!(aligned.memory(), first.memory());
    assert_eq!((first.offset(), aligned.offset()), (0, 4 * MIB));
    let mut live = vec![first, aligned];
    let compact = DefragmentationLimits::default()
        .max_used_percent(0)
        .compact_blocks(true);
    let plan = allocator
        .plan_defragmentation(&movables(&live[1..]), &compact)
        .unwrap();
    assert_eq!(
        (plan.blocks_compacted, plan.moves.len()),
        (1, 1),
        "{plan:?}"
    );
    assert_eq!(plan.moves[0].destination.offset(), MIB);
    carry_out(&allocator, &mut live[1..], plan);
    assert_eq!(mib_offsets(&live), [0, 1]);
    for a in live {
        free(&allocator, a);
    }
    finish(allocator, &device);
}

/// VMA #232: the extensive algorithm crashed on a `firstFreeBlock` left
/// unset when the state it started from was degenerate. Plans over
/// degenerate states, every limit and compaction on: nothing listed, only
/// dedicated allocations, a lone allocation at offset 0, a block of small
/// buffers' run slots alone, a full block without a hole, and a custom
/// pool of one block whose allocations leave no hole below them. Each plan
/// moves nothing, or only what it may, and changes no figure; the device
/// is clean at the end.
#[test]
fn degenerate_states_plan_nothing_and_change_nothing() {
    use vk_suballoc::{AllocationDesc, DedicatedPolicy, PoolDesc};

    let (allocator, device) = allocator_with(FakeLayout::discrete(), Config::default());
    let limits = DefragmentationLimits::default().compact_blocks(true);
    let plan_over = |live: &[Allocation], what: &str| {
        let stats = allocator.stats();
        let plan = allocator
            .plan_defragmentation(&movables(live), &limits)
            .unwrap();
        assert!(plan.moves.is_empty(), "{what}: {} moves", plan.moves.len());
        assert_eq!(
            (plan.blocks_released, plan.blocks_compacted),
            (0, 0),
            "{what}"
        );
        assert_eq!(allocator.stats(), stats, "{what}");
    };
    plan_over(&[], "nothing listed");

    let dedicated: Vec<Allocation> = (0..3)
        .map(|_| {
            allocator
                .allocate(&buffer(MIB, 256, Usage::DEVICE_LOCAL).dedicated(DedicatedPolicy::Always))
                .unwrap()
        })
        .collect();
    plan_over(&dedicated, "dedicated allocations");

    let lone = vec![allocator
        .allocate(&buffer(MIB, 256, Usage::READBACK))
        .unwrap()];
    assert_eq!(lone[0].offset(), 0);
    plan_over(&lone, "a lone allocation at offset 0");

    let slots: Vec<Allocation> = (0..20)
        .map(|_| allocator.allocate(&buffer(64, 16, Usage::UPLOAD)).unwrap())
        .collect();
    plan_over(&slots, "run slots alone");

    let pool = allocator
        .create_pool(&PoolDesc::new(1).block_size(4 * MIB).max_blocks(1))
        .unwrap();
    let in_pool = |size: u64| {
        Request::with_desc(
            requirements(size, 256),
            ResourceKind::Buffer,
            AllocationDesc::new(Usage::DEVICE_LOCAL).pool(pool),
        )
    };
    let full: Vec<Allocation> = (0..4)
        .map(|_| allocator.allocate(&in_pool(MIB)).unwrap())
        .collect();
    assert_eq!(
        allocator.allocate(&in_pool(MIB)).err(),
        Some(Error::PoolFull { max_blocks: 1 })
    );
    plan_over(&full, "a full block without a hole");
    // The top MiB freed: a hole above every allocation, none below one.
    let mut full = full;
    let top = full.iter().position(|a| a.offset() == 3 * MIB).unwrap();
    free(&allocator, full.swap_remove(top));
    plan_over(&full, "a hole above every allocation");

    for a in dedicated.into_iter().chain(lone).chain(slots).chain(full) {
        free(&allocator, a);
    }
    allocator.destroy_pool(pool).unwrap();
    finish(allocator, &device);
}
