//! Defragmentation: plans that empty whole blocks, carried out as an engine
//! would (new allocation in use, old one freed), checked against the blocks
//! the allocator reports.

use std::collections::{HashMap, HashSet};

use ash::vk;
use gpu_alloc_types::MemoryPropertyFlags as Props;
use vk_suballoc::device::fake::FakeLayout;
use vk_suballoc::{
    Allocation, AllocationDesc, Config, DefragmentationLimits, DefragmentationPlan, Error, Movable,
    PoolDesc, Request, ResourceKind, Usage,
};

use super::seeded_rng::Rng;
use super::{allocator, allocator_with, buffer, finish, free, requirements, without_runs};
use super::{FakeAllocator, FakeDevice};

const MIB: u64 = 1 << 20;

/// Every allocation of `live` as a movable buffer of its own size,
/// aligned to 256.
pub(super) fn movables(live: &[Allocation]) -> Vec<Movable<'_>> {
    live.iter()
        .map(|a| Movable::new(a, requirements(a.size(), 256), ResourceKind::Buffer))
        .collect()
}

/// Carries `plan` out over `live`: each moved allocation is replaced by its
/// destination and freed, as an engine does once its copy finished.
/// Returns the memory objects the moves left.
fn carry_out(
    allocator: &FakeAllocator,
    live: &mut [Allocation],
    plan: DefragmentationPlan,
) -> Vec<vk::DeviceMemory> {
    let mut sources = Vec::new();
    for planned in plan.moves.into_iter().rev() {
        let old = std::mem::replace(&mut live[planned.movable], planned.destination);
        sources.push(old.memory());
        free(allocator, old);
    }
    sources
}

/// `count` device-local buffers of 1 MiB, aligned to 256, in allocation
/// order: the first 32 fill a 32 MiB first block, the next 64 a 64 MiB one.
fn mib_buffers(allocator: &FakeAllocator, count: usize) -> Vec<Allocation> {
    (0..count)
        .map(|_| {
            allocator
                .allocate(&buffer(MIB, 256, Usage::DEVICE_LOCAL))
                .unwrap()
        })
        .collect()
}

/// The allocations of `all` whose index `keep` accepts; the others freed.
fn keep_where(
    allocator: &FakeAllocator,
    all: Vec<Allocation>,
    keep: impl Fn(usize) -> bool,
) -> Vec<Allocation> {
    let mut kept = Vec::new();
    for (i, a) in all.into_iter().enumerate() {
        if keep(i) {
            kept.push(a);
        } else {
            free(allocator, a);
        }
    }
    kept
}

/// No two live allocations of one memory object overlap.
fn assert_disjoint<'a>(live: impl IntoIterator<Item = &'a Allocation>, context: &str) {
    let mut by_memory: HashMap<vk::DeviceMemory, Vec<(u64, u64)>> = HashMap::new();
    for a in live {
        by_memory
            .entry(a.memory())
            .or_default()
            .push((a.offset(), a.offset() + a.size()));
    }
    for ranges in by_memory.values_mut() {
        ranges.sort_unstable();
        for pair in ranges.windows(2) {
            assert!(pair[0].1 <= pair[1].0, "{context}: {pair:?} overlap");
        }
    }
}

/// The device-local type's block figures: (blocks, bytes, empty blocks).
fn blocks(allocator: &FakeAllocator, memory_type: u32) -> (u64, u64, u64) {
    let stats = allocator.stats().memory_types[memory_type as usize];
    (stats.blocks, stats.block_bytes, stats.empty_blocks)
}

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

/// A run's free slots count as free when a plan weighs how full a block
/// is (the offset allocator counts the whole run as in use): a 2 MiB block
/// of 24 runs with one live slot each is 1 % in use, not 75 %.
#[test]
fn free_slots_of_runs_count_as_free() {
    let config = Config {
        large_heap_block_size: 16 * MIB,
        ..Config::default()
    };
    let (allocator, device) = allocator_with(FakeLayout::discrete(), config);
    // 1000-byte buffers aligned to 16 take 1 KiB slots, 64 to a 64 KiB run.
    let small: Vec<Allocation> = (0..24 * 64)
        .map(|_| {
            allocator
                .allocate(&buffer(1000, 16, Usage::DEVICE_LOCAL))
                .unwrap()
        })
        .collect();
    let first = small[0].memory();
    assert!(small.iter().all(|a| a.memory() == first));
    let big = allocator
        .allocate(&buffer(MIB, 256, Usage::DEVICE_LOCAL))
        .unwrap();
    assert_ne!(big.memory(), first);
    let mut live = keep_where(&allocator, small, |i| i % 64 == 0);
    let listed: Vec<Movable<'_>> = live
        .iter()
        .map(|a| Movable::new(a, requirements(1000, 16), ResourceKind::Buffer))
        .collect();
    let plan = allocator
        .plan_defragmentation(&listed, &DefragmentationLimits::default())
        .unwrap();
    drop(listed);
    assert_eq!((plan.moves.len(), plan.blocks_released), (24, 1));
    assert!(plan
        .moves
        .iter()
        .all(|m| m.destination.memory() == big.memory()));
    carry_out(&allocator, &mut live, plan);
    for a in live.into_iter().chain([big]) {
        free(&allocator, a);
    }
    finish(allocator, &device);
}

/// Three blocks for [`destinations_count_free_slots_of_runs_as_free`] and
/// [`a_new_run_in_a_fuller_block_goes_before_free_slots_of_a_sparser_one`]:
/// `runs` (2 MiB of runs, a quarter of their slots live: 25 % in use,
/// though its ranges cover it all), `kept` (4 MiB, 39 % in use: a 1.5 MiB
/// buffer and a run of 1 KiB slots, `kept_free` of them free; not listed)
/// and `sparse` (8 MiB, 16 live slots). Returns the listed small buffers of
/// `runs` and `sparse`, what stays, and the three memory objects.
fn runs_kept_and_sparse(
    allocator: &FakeAllocator,
    kept_free: usize,
) -> (Vec<Allocation>, Vec<Allocation>, [vk::DeviceMemory; 3]) {
    // 1000-byte buffers aligned to 16 take 1 KiB slots, 64 to a 64 KiB run.
    let small = || {
        allocator
            .allocate(&buffer(1000, 16, Usage::DEVICE_LOCAL))
            .unwrap()
    };
    let in_runs: Vec<Allocation> = (0..32 * 64).map(|_| small()).collect();
    let runs = in_runs[0].memory();
    assert!(in_runs.iter().all(|a| a.memory() == runs));
    let kept_big = allocator
        .allocate(&buffer(3 * MIB / 2, 256, Usage::DEVICE_LOCAL))
        .unwrap();
    let kept = kept_big.memory();
    let in_kept: Vec<Allocation> = (0..64).map(|_| small()).collect();
    assert!(in_kept.iter().all(|a| a.memory() == kept));
    // Fills `kept` while `sparse` is made, so that its run comes from `sparse`.
    let kept_fill = allocator
        .allocate(&buffer(5 * MIB / 2 - 64 * 1024, 256, Usage::DEVICE_LOCAL))
        .unwrap();
    assert_eq!(kept_fill.memory(), kept);
    let sparse_big = allocator
        .allocate(&buffer(3 * MIB, 256, Usage::DEVICE_LOCAL))
        .unwrap();
    let sparse = sparse_big.memory();
    assert!(sparse != runs && sparse != kept);
    let in_sparse: Vec<Allocation> = (0..64).map(|_| small()).collect();
    assert!(in_sparse.iter().all(|a| a.memory() == sparse));
    free(allocator, sparse_big);
    free(allocator, kept_fill);
    let mut live = Vec::new();
    let mut stays = vec![kept_big];
    for (i, a) in in_runs.into_iter().enumerate() {
        if i % 64 < 16 {
            live.push(a);
        } else {
            free(allocator, a);
        }
    }
    for (i, a) in in_sparse.into_iter().enumerate() {
        if i < 16 {
            live.push(a);
        } else {
            free(allocator, a);
        }
    }
    for (i, a) in in_kept.into_iter().enumerate() {
        if i < 64 - kept_free {
            stays.push(a);
        } else {
            free(allocator, a);
        }
    }
    (live, stays, [runs, kept, sparse])
}

/// Plans over [`runs_kept_and_sparse`]'s listed buffers, checks that
/// both `sparse` and `runs` empty, into `kept` only, and carries it out.
fn both_empty_into_kept(allocator: &FakeAllocator, kept_free: usize) {
    let (mut live, stays, [_, kept, _]) = runs_kept_and_sparse(allocator, kept_free);
    let listed: Vec<Movable<'_>> = live
        .iter()
        .map(|a| Movable::new(a, requirements(1000, 16), ResourceKind::Buffer))
        .collect();
    let plan = allocator
        .plan_defragmentation(&listed, &DefragmentationLimits::default())
        .unwrap();
    drop(listed);
    let into: HashSet<vk::DeviceMemory> =
        plan.moves.iter().map(|m| m.destination.memory()).collect();
    assert_eq!(into, HashSet::from([kept]), "the moves' destinations");
    assert_eq!((plan.moves.len(), plan.blocks_released), (32 * 16 + 16, 2));
    carry_out(allocator, &mut live, plan);
    for a in live.into_iter().chain(stays) {
        free(allocator, a);
    }
}

/// Destinations are weighed as sources are, a run's free slots counting as
/// free: `sparse` empties first, and its buffers go to the free slots of
/// `kept`, the fuller, not to those of `runs`, which then empties too.
/// Weighed by ranges, `runs` looked full: it took `sparse`'s buffers and
/// stayed, and a later plan would have moved them again.
#[test]
fn destinations_count_free_slots_of_runs_as_free() {
    let config = Config {
        large_heap_block_size: 16 * MIB,
        ..Config::default()
    };
    let (allocator, device) = allocator_with(FakeLayout::discrete(), config);
    both_empty_into_kept(&allocator, 16);
    finish(allocator, &device);
}

/// As [`destinations_count_free_slots_of_runs_as_free`], but `kept`'s run
/// is full: a new run in `kept` takes `sparse`'s buffers, not the free
/// slots of `runs`, the sparser block, which then empties too.
#[test]
fn a_new_run_in_a_fuller_block_goes_before_free_slots_of_a_sparser_one() {
    let config = Config {
        large_heap_block_size: 16 * MIB,
        ..Config::default()
    };
    let (allocator, device) = allocator_with(FakeLayout::discrete(), config);
    both_empty_into_kept(&allocator, 0);
    finish(allocator, &device);
}

/// Two blocks of 1 MiB buffers with holes, as in
/// [`a_plan_empties_the_least_used_block`]: the live ones, the first
/// block's 16 and then the second's 8.
fn two_fragmented_blocks(allocator: &FakeAllocator) -> Vec<Allocation> {
    let all = mib_buffers(allocator, 64);
    keep_where(allocator, all, |i| (i < 32 && i % 2 == 0) || i >= 56)
}

/// A block is emptied whole or not at all: limits below its 8 moves or
/// 8 MiB plan nothing, and change nothing.
#[test]
fn limits_stop_a_plan_short_of_a_block() {
    let (allocator, device) = allocator_with(FakeLayout::discrete(), without_runs());
    let mut live = two_fragmented_blocks(&allocator);
    let before = allocator.stats();
    for limits in [
        DefragmentationLimits::default().max_moves(7),
        DefragmentationLimits::default().max_bytes(8 * MIB - 1),
        DefragmentationLimits::default().max_moves(0),
    ] {
        let plan = allocator
            .plan_defragmentation(&movables(&live), &limits)
            .unwrap();
        assert!(plan.moves.is_empty(), "{limits:?}");
        // Both blocks (8 and 16 moves, 8 and 16 MiB) are over the limits.
        assert_eq!(plan.blocks_over_limits, 2, "{limits:?}");
        assert_eq!(allocator.stats(), before, "{limits:?}");
    }
    let limits = DefragmentationLimits::default()
        .max_moves(8)
        .max_bytes(8 * MIB);
    let plan = allocator
        .plan_defragmentation(&movables(&live), &limits)
        .unwrap();
    assert_eq!((plan.moves.len(), plan.blocks_released), (8, 1));
    assert_eq!((plan.bytes_moved, plan.blocks_over_limits), (8 * MIB, 0));
    carry_out(&allocator, &mut live, plan);
    for a in live {
        free(&allocator, a);
    }
    finish(allocator, &device);
}

/// With `split_blocks`, limits below a block's moves empty it over several
/// plans: each moves what the limits allow out of the emptiest block over
/// them, which retires at once; the plan that moves the last ones counts
/// it released. The 64 MiB block's 8 buffers go 3, 3 and 2 at a time
/// (or 2 by 2 under a 2.5 MiB limit, and under a 2 MiB one, which two
/// moves reach exactly).
#[test]
fn split_blocks_empty_a_block_over_several_plans() {
    for (limits, per_plan) in [
        (DefragmentationLimits::default().max_moves(3), 3),
        (DefragmentationLimits::default().max_bytes(5 * MIB / 2), 2),
        (DefragmentationLimits::default().max_bytes(2 * MIB), 2),
    ] {
        let limits = limits.split_blocks(true);
        let (allocator, device) = allocator_with(FakeLayout::discrete(), without_runs());
        let mut live = two_fragmented_blocks(&allocator);
        let memory_type = live[0].memory_type();
        let second = live[16].memory();
        let mut left = 8;
        while left > per_plan {
            let plan = allocator
                .plan_defragmentation(&movables(&live), &limits)
                .unwrap();
            assert_eq!(plan.moves.len(), per_plan, "{limits:?}");
            assert_eq!((plan.blocks_started, plan.blocks_released), (1, 0));
            // The first block, half full, is over the limits as a whole,
            // until the moves fill it past half.
            let first_plan = left == 8;
            assert_eq!(plan.blocks_over_limits, usize::from(first_plan));
            assert!(plan
                .moves
                .iter()
                .all(|m| live[m.movable].memory() == second));
            let map = allocator.memory_map();
            let retiring: Vec<_> = map.memory_types[memory_type as usize]
                .blocks
                .iter()
                .filter(|b| b.retiring)
                .map(|b| b.memory)
                .collect();
            assert_eq!(retiring, [second], "{limits:?}");
            carry_out(&allocator, &mut live, plan);
            left -= per_plan;
            assert_eq!(live.iter().filter(|a| a.memory() == second).count(), left);
            assert_eq!(blocks(&allocator, memory_type).0, 2, "not yet empty");
        }
        let plan = allocator
            .plan_defragmentation(&movables(&live), &limits)
            .unwrap();
        assert_eq!((plan.moves.len(), plan.blocks_released), (left, 1));
        assert_eq!(plan.blocks_started, 0);
        carry_out(&allocator, &mut live, plan);
        assert_eq!(blocks(&allocator, memory_type).0, 1, "released");
        // Without splitting the same limits plan nothing at all.
        let whole = DefragmentationLimits {
            split_blocks: false,
            ..limits
        };
        assert!(allocator
            .plan_defragmentation(&movables(&live), &whole)
            .unwrap()
            .moves
            .is_empty());
        for a in live {
            free(&allocator, a);
        }
        finish(allocator, &device);
    }
}

/// A block a split plan started stays retiring (it takes no new requests)
/// until a plan empties it, so a later plan goes on with it whatever its
/// `max_used_percent`: the percent chooses which blocks to start. Before,
/// a plan with a lower percent than the block's use passed it over, and
/// the block stayed retiring, holding its memory out of use.
#[test]
fn a_retiring_block_goes_on_under_a_lower_used_percent() {
    let (allocator, device) = allocator_with(FakeLayout::discrete(), without_runs());
    let mut live = two_fragmented_blocks(&allocator);
    let second = live[16].memory();
    let split = DefragmentationLimits::default()
        .max_moves(3)
        .split_blocks(true);
    let plan = allocator
        .plan_defragmentation(&movables(&live), &split)
        .unwrap();
    assert_eq!((plan.moves.len(), plan.blocks_started), (3, 1));
    carry_out(&allocator, &mut live, plan);
    // 5 MiB of the 64 MiB block left: under 8 %, above 5 %.
    let lower = split.max_used_percent(5);
    let plan = allocator
        .plan_defragmentation(&movables(&live), &lower)
        .unwrap();
    assert_eq!(plan.moves.len(), 3, "the retiring block goes on");
    assert!(plan
        .moves
        .iter()
        .all(|m| live[m.movable].memory() == second));
    carry_out(&allocator, &mut live, plan);
    let plan = allocator
        .plan_defragmentation(&movables(&live), &lower)
        .unwrap();
    assert_eq!((plan.moves.len(), plan.blocks_released), (2, 1));
    carry_out(&allocator, &mut live, plan);
    for a in live {
        free(&allocator, a);
    }
    finish(allocator, &device);
}

/// A resource made again of unknown kind needs dedicated memory where the
/// granularity is not a power of two (it cannot be padded to whole
/// pages): no plan moves it into a block, neither emptying one nor
/// compacting, where the same buffers listed as buffers move.
#[test]
fn a_resource_that_needs_dedicated_memory_is_not_moved_into_a_block() {
    let layout = FakeLayout::discrete().with_granularity(3072);
    let (allocator, device) = allocator_with(layout, without_runs());
    let live = two_fragmented_blocks(&allocator);
    let as_kind = |kind| -> Vec<Movable<'_>> {
        live.iter()
            .map(|a| Movable::new(a, requirements(a.size(), 256), kind))
            .collect()
    };
    let compacting = DefragmentationLimits::default().compact_blocks(true);
    for limits in [DefragmentationLimits::default(), compacting] {
        let plan = allocator
            .plan_defragmentation(&as_kind(ResourceKind::Unknown), &limits)
            .unwrap();
        assert!(plan.moves.is_empty(), "{limits:?}: {:?}", plan.moves);
    }
    let plan = allocator
        .plan_defragmentation(&as_kind(ResourceKind::Buffer), &compacting)
        .unwrap();
    assert!(!plan.moves.is_empty());
    for planned in plan.moves {
        allocator.give_up_move(planned).unwrap();
    }
    for a in live {
        free(&allocator, a);
    }
    finish(allocator, &device);
}

/// Every allocation of `live` as a movable optimal image of its own size,
/// aligned to 4096.
fn optimal_images(live: &[Allocation]) -> Vec<Movable<'_>> {
    live.iter()
        .map(|a| Movable::new(a, requirements(a.size(), 4096), ResourceKind::OptimalImage))
        .collect()
}

/// A move is placed as its pool places a new request of its kind. Past
/// `Config::max_padded_granularity` a default pool keeps optimal images in
/// blocks of their own, so a lone image block has nowhere to go though a
/// buffer block has room; a custom pool pads images to whole pages beside
/// buffers instead, so its sparse image block empties into the buffers'.
/// (With the two rules swapped, the default pool's image moved in among
/// the buffers and the custom pool's stayed.)
#[test]
fn moves_of_optimal_images_follow_their_pools_granularity_rule() {
    let layout = FakeLayout::discrete().with_granularity(64 * 1024);
    let (allocator, device) = allocator_with(layout, without_runs());
    let image = |desc: AllocationDesc<'static>| {
        let requirements = requirements(MIB, 4096);
        let request = Request::with_desc(requirements, ResourceKind::OptimalImage, desc);
        allocator.allocate(&request).unwrap()
    };
    // The default pool: one image, one buffer, each in a block of its own.
    let default_image = [image(AllocationDesc::new(Usage::DEVICE_LOCAL))];
    let lone_buffer = allocator
        .allocate(&buffer(MIB, 256, Usage::DEVICE_LOCAL))
        .unwrap();
    assert_ne!(lone_buffer.memory(), default_image[0].memory());
    let plan = allocator
        .plan_defragmentation(
            &optimal_images(&default_image),
            &DefragmentationLimits::default(),
        )
        .unwrap();
    assert!(plan.moves.is_empty(), "{:?}", plan.moves);
    // A custom pool of 8 MiB blocks: the first full of buffers but for one
    // freed, the second holding one image.
    let pool = allocator
        .create_pool(&PoolDesc::new(lone_buffer.memory_type()).block_size(8 * MIB))
        .unwrap();
    let in_pool = || AllocationDesc::new(Usage::DEVICE_LOCAL).pool(pool);
    let mut buffers: Vec<Allocation> = (0..8)
        .map(|_| {
            let request =
                Request::with_desc(requirements(MIB, 256), ResourceKind::Buffer, in_pool());
            allocator.allocate(&request).unwrap()
        })
        .collect();
    let mut pool_image = vec![image(in_pool())];
    assert_ne!(pool_image[0].memory(), buffers[0].memory());
    free(&allocator, buffers.swap_remove(3));
    let plan = allocator
        .plan_defragmentation(
            &optimal_images(&pool_image),
            &DefragmentationLimits::default(),
        )
        .unwrap();
    assert_eq!((plan.moves.len(), plan.blocks_released), (1, 1));
    assert_eq!(plan.moves[0].destination.memory(), buffers[0].memory());
    carry_out(&allocator, &mut pool_image, plan);
    for a in default_image
        .into_iter()
        .chain(pool_image)
        .chain(buffers)
        .chain([lone_buffer])
    {
        free(&allocator, a);
    }
    allocator.destroy_pool(pool).unwrap();
    finish(allocator, &device);
}

/// Nor does a plan start emptying a block in part (`split_blocks`) whose
/// other allocations could move while one of unknown kind there could not:
/// the block would stay retiring, taking no requests, for good. Nor does
/// it count the block over its limits.
#[test]
fn a_block_holding_a_resource_that_cannot_move_is_not_split() {
    const KIB: u64 = 1024;
    let layout = FakeLayout::discrete().with_granularity(3072);
    let (allocator, device) = allocator_with(layout, without_runs());
    let pool = allocator
        .create_pool(&PoolDesc::new(1).block_size(256 * KIB))
        .unwrap();
    let in_pool = |size| {
        let desc = AllocationDesc::new(Usage::DEVICE_LOCAL).pool(pool);
        let request = Request::with_desc(requirements(size, 256), ResourceKind::Buffer, desc);
        allocator.allocate(&request).unwrap()
    };
    // Block 1: two of 100 KiB; block 2: one of 150 KiB, room for one more.
    let live = [in_pool(100 * KIB), in_pool(100 * KIB), in_pool(150 * KIB)];
    assert_ne!(live[0].memory(), live[2].memory());
    let movables = [
        Movable::new(&live[0], requirements(100 * KIB, 256), ResourceKind::Buffer),
        Movable::new(
            &live[1],
            requirements(100 * KIB, 256),
            ResourceKind::Unknown,
        ),
    ];
    let split = DefragmentationLimits::default()
        .max_used_percent(100)
        .max_moves(1)
        .split_blocks(true);
    let plan = allocator.plan_defragmentation(&movables, &split).unwrap();
    assert_eq!(
        (plan.moves.len(), plan.blocks_started),
        (0, 0),
        "{:?}",
        plan.moves
    );
    // Nor is it over the limits: no limit would let it empty.
    assert_eq!(plan.blocks_over_limits, 0);
    // The block still takes requests.
    let more = in_pool(50 * KIB);
    assert_eq!(more.memory(), live[0].memory());
    for a in live.into_iter().chain([more]) {
        free(&allocator, a);
    }
    allocator.destroy_pool(pool).unwrap();
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

/// A block over the limits that no other block could take moves from is
/// not counted over them: no limit would let it empty. Alone in its
/// memory type, or beside an empty block kept for reuse (moving into it
/// would only swap one block for another).
#[test]
fn a_block_over_the_limits_with_nowhere_to_go_is_not_counted() {
    let (allocator, device) = allocator_with(FakeLayout::discrete(), without_runs());
    let mut live = mib_buffers(&allocator, 33);
    let memory_type = live[0].memory_type();
    let limits = DefragmentationLimits::default().max_moves(1);
    for a in live.drain(4..32) {
        free(&allocator, a);
    }
    let plan = allocator
        .plan_defragmentation(&movables(&live[..4]), &limits)
        .unwrap();
    assert_eq!(plan.blocks_over_limits, 1, "the second block takes them");
    free(&allocator, live.pop().unwrap());
    assert_eq!(blocks(&allocator, memory_type).2, 1, "an empty block kept");
    let plan = allocator
        .plan_defragmentation(&movables(&live), &limits)
        .unwrap();
    assert_eq!((plan.moves.len(), plan.blocks_over_limits), (0, 0));
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

/// Bad movables are refused before anything changes: another allocator's
/// allocation, a zero size, an alignment not a power of two.
#[test]
fn bad_movables_are_refused_and_change_nothing() {
    let (allocator, device) = allocator_with(FakeLayout::discrete(), without_runs());
    let (other, other_device) = super::allocator(FakeLayout::discrete());
    let live = two_fragmented_blocks(&allocator);
    let foreign = other
        .allocate(&buffer(MIB, 256, Usage::DEVICE_LOCAL))
        .unwrap();
    let before = allocator.stats();
    let good = movables(&live);
    let bad = |movable: Movable<'_>| {
        let list = [&good[..], &[movable]].concat();
        allocator
            .plan_defragmentation(&list, &DefragmentationLimits::default())
            .unwrap_err()
    };
    assert_eq!(
        bad(Movable::new(
            &foreign,
            requirements(MIB, 256),
            ResourceKind::Buffer
        )),
        Error::ForeignAllocation
    );
    assert_eq!(
        bad(Movable::new(
            &live[0],
            requirements(0, 256),
            ResourceKind::Buffer
        )),
        Error::ZeroSize
    );
    assert_eq!(
        bad(Movable::new(
            &live[0],
            requirements(MIB, 3),
            ResourceKind::Buffer
        )),
        Error::AlignmentNotPowerOfTwo(3)
    );
    assert_eq!(allocator.stats(), before);
    drop(good);
    for a in live {
        free(&allocator, a);
    }
    free(&other, foreign);
    finish(allocator, &device);
    finish(other, &other_device);
}

/// `plan_defragmentation`'s documented order: each movable's owner and
/// requirements first, staleness of a freed one only once every movable
/// passed those. A handle that outlived its free (copied out with
/// `ptr::read`, as only unsafe code can) is stale; listed after a movable
/// with bad requirements, the requirements' error wins, wherever it is
/// listed.
#[test]
fn bad_requirements_are_refused_before_a_stale_movable() {
    let (allocator, device) = allocator_with(FakeLayout::discrete(), without_runs());
    let (other, other_device) = super::allocator(FakeLayout::discrete());
    let mut live = two_fragmented_blocks(&allocator);
    let freed = live.pop().unwrap();
    // SAFETY: `Allocation` owns nothing on the heap and has no `Drop`; the
    // copy only names the freed range (refused as stale below), and is
    // never freed.
    let stale = unsafe { std::ptr::read(&freed) };
    free(&allocator, freed);
    let foreign = other
        .allocate(&buffer(MIB, 256, Usage::DEVICE_LOCAL))
        .unwrap();
    let before = allocator.stats();
    let good = movables(&live);
    let stale_movable = Movable::new(&stale, requirements(MIB, 256), ResourceKind::Buffer);
    let plan = |list: &[Movable<'_>]| {
        allocator
            .plan_defragmentation(list, &DefragmentationLimits::default())
            .unwrap_err()
    };
    assert_eq!(
        plan(&[&good[..], &[stale_movable]].concat()),
        Error::StaleAllocation
    );
    let zero = Movable::new(&live[0], requirements(0, 256), ResourceKind::Buffer);
    let odd = Movable::new(&live[0], requirements(MIB, 3), ResourceKind::Buffer);
    let theirs = Movable::new(&foreign, requirements(MIB, 256), ResourceKind::Buffer);
    for (bad, expected) in [
        (zero, Error::ZeroSize),
        (odd, Error::AlignmentNotPowerOfTwo(3)),
        (theirs, Error::ForeignAllocation),
    ] {
        assert_eq!(plan(&[stale_movable, bad]), expected);
        assert_eq!(plan(&[bad, stale_movable]), expected);
    }
    // Each movable's owner before its requirements.
    let foreign_zero = Movable::new(&foreign, requirements(0, 3), ResourceKind::Buffer);
    assert_eq!(plan(&[foreign_zero]), Error::ForeignAllocation);
    assert_eq!(allocator.stats(), before);
    drop(good);
    // The stale copy is never freed: it names nothing live.
    let _ = stale;
    for a in live {
        free(&allocator, a);
    }
    free(&other, foreign);
    finish(allocator, &device);
    finish(other, &other_device);
}

/// Small buffers in runs move too, into runs of the blocks that stay; the
/// emptied block's runs hand out no more slots, and new requests go to the
/// other blocks while those have room.
#[test]
fn blocks_being_emptied_take_no_new_requests_while_others_have_room() {
    let (allocator, device) = allocator(FakeLayout::discrete());
    let mut live = blocks_with_a_run(&allocator);
    let first = live[0].memory();
    let listed = movables_of_run_blocks(&live);
    let plan = allocator
        .plan_defragmentation(&listed, &DefragmentationLimits::default())
        .unwrap();
    assert_eq!((plan.moves.len(), plan.blocks_released), (18, 1));
    assert!(plan
        .moves
        .iter()
        .all(|m| m.destination.memory() == first && m.destination.offset() % 16 == 0));
    drop(listed);

    // While the moves are in flight, small buffers fill the new run in the
    // first block (64 slots, 10 of them the destinations), then a second
    // one there, rather than take the second block's free slots; a 1 MiB
    // buffer takes a hole of the first block.
    let new_small: Vec<Allocation> = (0..55)
        .map(|_| {
            allocator
                .allocate(&buffer(100, 16, Usage::DEVICE_LOCAL))
                .unwrap()
        })
        .collect();
    assert!(new_small.iter().all(|a| a.memory() == first));
    let new_large = allocator
        .allocate(&buffer(MIB, 256, Usage::DEVICE_LOCAL))
        .unwrap();
    assert_eq!(new_large.memory(), first);

    carry_out(&allocator, &mut live, plan);
    assert_disjoint(&live, "after the moves");
    let memory_type = live[0].memory_type();
    assert_eq!(
        blocks(&allocator, memory_type),
        (1, 32 * MIB, 0),
        "the second released"
    );
    for a in live.into_iter().chain(new_small).chain([new_large]) {
        free(&allocator, a);
    }
    finish(allocator, &device);
}

/// Two fragmented blocks ([`two_fragmented_blocks`]), the second also
/// holding a run of 10 small buffers (100 bytes aligned to 16), listed
/// last: the first block's 16 1 MiB buffers, the second's 8, then the 10.
fn blocks_with_a_run(allocator: &FakeAllocator) -> Vec<Allocation> {
    let mut live = two_fragmented_blocks(allocator);
    // A run goes to the first block with room: fill the first block's
    // holes, so that the small buffers' run is carved from the second.
    let fillers = mib_buffers(allocator, 16);
    let (first, second) = (live[0].memory(), live[16].memory());
    assert!(fillers.iter().all(|a| a.memory() == first));
    let small: Vec<Allocation> = (0..10)
        .map(|_| {
            allocator
                .allocate(&buffer(100, 16, Usage::DEVICE_LOCAL))
                .unwrap()
        })
        .collect();
    assert!(small.iter().all(|a| a.memory() == second));
    // Holes in the first block again.
    for a in fillers {
        free(allocator, a);
    }
    live.extend(small);
    live
}

/// [`blocks_with_a_run`]'s allocations as movables.
fn movables_of_run_blocks(live: &[Allocation]) -> Vec<Movable<'_>> {
    live.iter()
        .map(|a| {
            let alignment = if a.size() == 100 { 16 } else { 256 };
            Movable::new(a, requirements(a.size(), alignment), ResourceKind::Buffer)
        })
        .collect()
}

/// A move given up with `give_up_move` (VMA's `MOVE_OPERATION_IGNORE`)
/// ends its block's retirement: the block holds the allocation that stays,
/// is no longer marked or counted as being emptied, and its run hands out
/// slots again; the destination goes back after the frame.
#[test]
fn a_move_given_up_ends_its_blocks_retirement() {
    let (allocator, device) = allocator(FakeLayout::discrete());
    let mut live = blocks_with_a_run(&allocator);
    let second = live[16].memory();
    let memory_type = live[0].memory_type() as usize;
    let listed = movables_of_run_blocks(&live);
    let plan = allocator
        .plan_defragmentation(&listed, &DefragmentationLimits::default())
        .unwrap();
    drop(listed);
    assert_eq!((plan.moves.len(), plan.blocks_released), (18, 1));
    assert_eq!(
        allocator.stats().memory_types[memory_type].retiring_blocks,
        1
    );
    let allocations = allocator.stats().allocations();
    // Give up the first small buffer's move (movable 24), carry out the rest.
    let mut moves = plan.moves;
    let at = moves.iter().position(|m| m.movable == 24).unwrap();
    allocator.give_up_move(moves.remove(at)).unwrap();
    for planned in moves {
        let old = std::mem::replace(&mut live[planned.movable], planned.destination);
        free(&allocator, old);
    }
    let stats = allocator.stats();
    assert_eq!(stats.memory_types[memory_type].retiring_blocks, 0);
    // The given-up destination still counts until its frame is collected.
    assert_eq!(stats.allocations(), allocations - 17);
    let map = allocator.memory_map();
    let block = map.memory_types[memory_type]
        .blocks
        .iter()
        .find(|b| b.memory == second)
        .expect("the block stays");
    assert!(!block.retiring);
    assert_eq!(block.allocations().count(), 1);
    // Its run hands out slots again.
    let new_small = allocator
        .allocate(&buffer(100, 16, Usage::DEVICE_LOCAL))
        .unwrap();
    assert_eq!(new_small.memory(), second);
    // Another allocator's move is refused.
    let (other, other_device) = super::allocator(FakeLayout::discrete());
    let mut other_live = two_fragmented_blocks(&other);
    let other_plan = other
        .plan_defragmentation(&movables(&other_live), &DefragmentationLimits::default())
        .unwrap();
    let mut other_moves = other_plan.moves.into_iter();
    // Refused, and dropped with its destination: a leak of `other`'s, which
    // its drop logs and frees.
    let foreign = other_moves.next().unwrap();
    assert_eq!(
        allocator.give_up_move(foreign),
        Err(Error::ForeignAllocation)
    );
    for planned in other_moves {
        let old = std::mem::replace(&mut other_live[planned.movable], planned.destination);
        free(&other, old);
    }
    for a in other_live {
        free(&other, a);
    }
    drop(other);
    assert_eq!(other_device.live_allocations().len(), 0);

    device.signal_fence(super::frames::end_frame(&allocator, &device));
    allocator.collect().unwrap();
    assert_eq!(allocator.stats().allocations(), allocations - 18 + 1);
    for a in live.into_iter().chain([new_small]) {
        free(&allocator, a);
    }
    finish(allocator, &device);
}

/// A retired run that was full stays closed when the engine frees its
/// first slot: a free relists only runs still open.
#[test]
fn a_full_retired_run_stays_closed_after_a_free() {
    let (allocator, device) = allocator(FakeLayout::discrete());
    let seed = allocator
        .allocate(&buffer(MIB, 256, Usage::DEVICE_LOCAL))
        .unwrap();
    let another = allocator
        .allocate(
            &buffer(MIB, 256, Usage::DEVICE_LOCAL).dedicated(vk_suballoc::DedicatedPolicy::Never),
        )
        .unwrap();
    let block = seed.memory();
    // A full run of 64 small buffers in the block.
    let small: Vec<Allocation> = (0..64)
        .map(|_| {
            allocator
                .allocate(&buffer(100, 16, Usage::DEVICE_LOCAL))
                .unwrap()
        })
        .collect();
    assert!(small.iter().all(|a| a.memory() == block));
    // A second block holding one big buffer, with room for the moves.
    let big = allocator
        .allocate(
            &buffer(31 * MIB, 256, Usage::DEVICE_LOCAL)
                .dedicated(vk_suballoc::DedicatedPolicy::Never),
        )
        .unwrap();
    let other = big.memory();
    assert_ne!(other, block);
    let mut live: Vec<Allocation> = small.into_iter().chain([seed, another]).collect();
    let listed: Vec<Movable<'_>> = live
        .iter()
        .map(|a| {
            let alignment = if a.size() == 100 { 16 } else { 256 };
            Movable::new(a, requirements(a.size(), alignment), ResourceKind::Buffer)
        })
        .collect();
    let plan = allocator
        .plan_defragmentation(&listed, &DefragmentationLimits::default())
        .unwrap();
    drop(listed);
    assert_eq!((plan.moves.len(), plan.blocks_released), (66, 1));
    assert!(plan.moves.iter().all(|m| m.destination.memory() == other));
    let mut moves = plan.moves.into_iter();
    let first = moves.next().unwrap();
    let old = std::mem::replace(&mut live[first.movable], first.destination);
    free(&allocator, old);
    // The destinations' run in the other block is full too: a new small
    // buffer gets a new run there, not the freed slot of the retired run.
    let new_small = allocator
        .allocate(&buffer(100, 16, Usage::DEVICE_LOCAL))
        .unwrap();
    assert_eq!(new_small.memory(), other);
    for planned in moves {
        let old = std::mem::replace(&mut live[planned.movable], planned.destination);
        free(&allocator, old);
    }
    for a in live.into_iter().chain([big, new_small]) {
        free(&allocator, a);
    }
    finish(allocator, &device);
}

/// An engine that drops a move frees its destination: the source block then
/// does not empty. Until it does, it comes last when requests look for
/// room: here it is the older block, which first fit would try first.
#[test]
fn a_move_given_up_frees_its_destination() {
    let (allocator, device) = allocator_with(FakeLayout::discrete(), without_runs());
    let all = mib_buffers(&allocator, 64);
    let memory_type = all[0].memory_type();
    let (first, second) = (all[0].memory(), all[32].memory());
    // 8 left in the first block, 24 in the second: the first is emptied
    // into the second's 8 holes.
    let mut live = keep_where(&allocator, all, |i| (i < 32 && i % 4 == 0) || i >= 40);
    let mut plan = allocator
        .plan_defragmentation(&movables(&live), &DefragmentationLimits::default())
        .unwrap();
    assert_eq!((plan.moves.len(), plan.blocks_released), (8, 1));
    assert!(plan.moves.iter().all(|m| m.destination.memory() == second));
    let given_up = plan.moves.pop().unwrap();
    free(&allocator, given_up.destination);
    carry_out(&allocator, &mut live, plan);
    assert_eq!(blocks(&allocator, memory_type), (2, 96 * MIB, 0));
    // New buffers fill the second block's 33 MiB of room (the given-up
    // move's hole and its never-used end) before the retiring first block,
    // the older one, takes the 34th.
    let fillers = mib_buffers(&allocator, 34);
    assert!(fillers[..33].iter().all(|a| a.memory() == second));
    assert_eq!(fillers[33].memory(), first);
    assert_eq!(blocks(&allocator, memory_type).0, 2, "no third block");
    for a in live.into_iter().chain(fillers) {
        free(&allocator, a);
    }
    finish(allocator, &device);
}

/// Random allocations of buffers and optimal images (granularity 1024 on
/// the discrete profile), random frees, then plans over a random subset
/// carried out: every destination is in the source's memory type, aligned,
/// outside every emptied block; no two live allocations overlap; and once
/// the sources are freed, `trim` gives back exactly the bytes the plan said.
#[test]
fn random_plans_keep_allocations_apart_and_release_what_they_say() {
    let mut rng = Rng::from_env("random_plans_keep_allocations_apart_and_release_what_they_say");
    for layout in [
        FakeLayout::discrete(),
        FakeLayout::mobile(),
        FakeLayout::integrated(),
    ] {
        let config = Config {
            large_heap_block_size: 16 * MIB,
            ..Config::default()
        };
        let (allocator, device) = allocator_with(layout, config);
        let (moves, blocks, packing) = random_plans(&allocator, &device, &mut rng);
        println!(
            "{}: {moves} moves ({packing} within a block) emptied {blocks} blocks",
            device.layout().name
        );
        finish(allocator, &device);
    }
}

struct Live {
    allocation: Allocation,
    requirements: vk::MemoryRequirements,
    kind: ResourceKind,
}

/// Returns the moves, emptied blocks and compaction's moves of all its
/// plans.
fn random_plans(
    allocator: &FakeAllocator,
    device: &FakeDevice,
    rng: &mut Rng,
) -> (usize, usize, usize) {
    let name = device.layout().name;
    let mut live: Vec<Live> = Vec::new();
    let (mut total_moves, mut total_blocks, mut total_packing) = (0, 0, 0);
    for round in 0..20 {
        let context = format!("{name} round {round}");
        for _ in 0..rng.below(300) {
            let kind = match rng.below(4) {
                0 => ResourceKind::OptimalImage,
                1 => ResourceKind::LinearImage,
                _ => ResourceKind::Buffer,
            };
            let size = match rng.below(3) {
                0 => 16 + rng.below(4096),
                1 => 4096 + rng.below(256 << 10),
                _ => (64 << 10) + rng.below(2 * MIB),
            };
            let requirements = requirements(size, 1 << rng.below(13));
            let usage =
                [Usage::DEVICE_LOCAL, Usage::UPLOAD, Usage::READBACK][rng.below(3) as usize];
            let allocation = allocator
                .allocate(&Request::new(requirements, usage, kind))
                .unwrap();
            live.push(Live {
                allocation,
                requirements,
                kind,
            });
        }
        for _ in 0..rng.below(live.len() as u64 + 1) {
            let gone = live.swap_remove(rng.below(live.len() as u64) as usize);
            free(allocator, gone.allocation);
        }
        allocator.trim();
        let reserved = allocator.stats().reserved_bytes();
        let movable: Vec<usize> = (0..live.len()).filter(|_| rng.below(8) != 0).collect();
        let listed: Vec<Movable<'_>> = movable
            .iter()
            .map(|&i| Movable::new(&live[i].allocation, live[i].requirements, live[i].kind))
            .collect();
        let limits = match rng.below(4) {
            0 => DefragmentationLimits::default().max_moves(rng.below(40) as usize),
            1 => DefragmentationLimits::default().max_bytes(rng.below(16 * MIB)),
            2 => DefragmentationLimits::default().max_used_percent(rng.below(101) as u8),
            _ => DefragmentationLimits::default(),
        }
        .split_blocks(rng.below(2) == 0)
        .compact_blocks(rng.below(3) == 0);
        let plan = allocator.plan_defragmentation(&listed, &limits).unwrap();
        if !limits.compact_blocks {
            assert_eq!(plan.blocks_compacted, 0, "{context}");
        }
        assert!(plan.moves.len() <= limits.max_moves, "{context}");
        let moved_bytes: u64 = plan
            .moves
            .iter()
            .map(|m| listed[m.movable].allocation.size())
            .sum();
        assert!(moved_bytes <= limits.max_bytes, "{context}");
        assert_eq!(plan.bytes_moved, moved_bytes, "{context}");
        if (limits.max_moves, limits.max_bytes) == (usize::MAX, u64::MAX) {
            assert_eq!(plan.blocks_over_limits, 0, "{context}");
        }
        drop(listed);
        // Moves to another block, and compaction's within one.
        let (within, across): (Vec<_>, Vec<_>) = plan
            .moves
            .iter()
            .partition(|m| m.destination.memory() == live[movable[m.movable]].allocation.memory());
        let sources: Vec<vk::DeviceMemory> = across
            .iter()
            .map(|m| live[movable[m.movable]].allocation.memory())
            .collect();
        let mut compacted: Vec<vk::DeviceMemory> =
            within.iter().map(|m| m.destination.memory()).collect();
        compacted.sort_unstable();
        compacted.dedup();
        assert_eq!(compacted.len(), plan.blocks_compacted, "{context}");
        total_packing += within.len();
        assert!(
            compacted.iter().all(|memory| !sources.contains(memory)),
            "{context}: a block both emptied and compacted"
        );
        let (blocks_emptied, bytes_emptied) = (plan.blocks_released, plan.bytes_released);
        let blocks_started = plan.blocks_started;
        if !limits.split_blocks {
            assert_eq!(blocks_started, 0, "{context}");
        }
        total_moves += plan.moves.len();
        total_blocks += plan.blocks_released;
        for planned in plan.moves.into_iter().rev() {
            let slot = &mut live[movable[planned.movable]];
            let destination = &planned.destination;
            assert_eq!(
                destination.memory_type(),
                slot.allocation.memory_type(),
                "{context}"
            );
            assert_eq!(destination.size(), slot.requirements.size, "{context}");
            assert_eq!(
                destination.offset() % slot.requirements.alignment,
                0,
                "{context}"
            );
            assert!(!destination.is_dedicated(), "{context}");
            let props = device.layout().memory_types[destination.memory_type() as usize].props;
            if props.contains(Props::HOST_VISIBLE) && !props.contains(Props::HOST_COHERENT) {
                let atom = device.layout().non_coherent_atom_size;
                assert_eq!(destination.offset() % atom, 0, "{context}: off the atom");
            }
            assert!(
                !sources.contains(&destination.memory()),
                "{context}: into an emptied block"
            );
            if destination.memory() == slot.allocation.memory() {
                assert!(
                    destination.offset() + destination.size() <= slot.allocation.offset(),
                    "{context}: a compaction's move not wholly below its source"
                );
            }
            let old = std::mem::replace(&mut slot.allocation, planned.destination);
            free(allocator, old);
        }
        assert_disjoint(live.iter().map(|l| &l.allocation), &context);
        // A source block is emptied, or (splitting) started: some of its
        // allocations stay for a later plan.
        let mut all_sources = sources.clone();
        all_sources.sort_unstable();
        all_sources.dedup();
        let (emptied, started): (Vec<vk::DeviceMemory>, Vec<vk::DeviceMemory>) = all_sources
            .into_iter()
            .partition(|&memory| live.iter().all(|l| l.allocation.memory() != memory));
        assert_eq!(emptied.len(), blocks_emptied, "{context}");
        assert_eq!(started.len(), blocks_started, "{context}");
        assert_eq!(
            allocator.stats().reserved_bytes(),
            reserved - bytes_emptied,
            "{context}"
        );
        assert_eq!(
            allocator.stats().allocations(),
            live.len() as u64,
            "{context}"
        );
    }
    for l in live {
        free(allocator, l.allocation);
    }
    (total_moves, total_blocks, total_packing)
}

/// A block made while a plan's moves are in flight goes before the block
/// being emptied in first-fit order: the emptied block still comes last,
/// so it empties and is released. Here a 40 MiB buffer fits in neither
/// block and makes a third; the next 1 MiB buffers fill the first block's
/// holes, then go to the third, not to the retiring second.
#[test]
fn a_block_made_while_moves_are_in_flight_comes_before_the_retiring_one() {
    let (allocator, device) = allocator_with(FakeLayout::discrete(), without_runs());
    let mut live = two_fragmented_blocks(&allocator);
    let memory_type = live[0].memory_type();
    let (first, second) = (live[0].memory(), live[16].memory());
    let plan = allocator
        .plan_defragmentation(&movables(&live), &DefragmentationLimits::default())
        .unwrap();
    assert_eq!((plan.moves.len(), plan.blocks_released), (8, 1));
    let large = allocator
        .allocate(
            &buffer(40 * MIB, 256, Usage::DEVICE_LOCAL)
                .dedicated(vk_suballoc::DedicatedPolicy::Never),
        )
        .unwrap();
    let third = large.memory();
    assert!(third != first && third != second);
    let fillers = mib_buffers(&allocator, 9);
    assert!(fillers[..8].iter().all(|a| a.memory() == first));
    assert_eq!(fillers[8].memory(), third, "into the retiring block");
    carry_out(&allocator, &mut live, plan);
    assert_eq!(blocks(&allocator, memory_type).0, 2, "the second released");
    for a in live.into_iter().chain(fillers).chain([large]) {
        free(&allocator, a);
    }
    finish(allocator, &device);
}

/// Runs are not carved from a block being emptied: a small buffer that
/// finds no run with room, and no block but the retiring one with room for
/// a new run, takes a range of its own in another block's gap rather than
/// start a run that would keep the retiring block alive.
#[test]
fn no_run_is_carved_from_a_block_being_emptied() {
    let (allocator, device) = allocator(FakeLayout::discrete());
    // The first block (32 MiB): 31 buffers of 1 MiB and one 4 KiB short,
    // which leaves a 4 KiB gap at its end; the second holds one buffer.
    let mut full: Vec<Allocation> = (0..31)
        .map(|_| {
            allocator
                .allocate(&buffer(MIB, 256, Usage::DEVICE_LOCAL))
                .unwrap()
        })
        .collect();
    full.push(
        allocator
            .allocate(&buffer(MIB - 4096, 256, Usage::DEVICE_LOCAL))
            .unwrap(),
    );
    let first = full[0].memory();
    assert!(full.iter().all(|a| a.memory() == first));
    let mut live = vec![allocator
        .allocate(&buffer(MIB, 256, Usage::DEVICE_LOCAL))
        .unwrap()];
    let second = live[0].memory();
    assert_ne!(second, first);
    // A 1 MiB hole in the first block takes the second's buffer.
    free(&allocator, full.swap_remove(5));
    let plan = allocator
        .plan_defragmentation(&movables(&live), &DefragmentationLimits::default())
        .unwrap();
    assert_eq!((plan.moves.len(), plan.blocks_released), (1, 1));
    assert_eq!(plan.moves[0].destination.memory(), first);
    // The first block's only room left is the 4 KiB gap: too small for a
    // run of 112-byte slots (7 KiB).
    let small = allocator
        .allocate(&buffer(100, 16, Usage::DEVICE_LOCAL))
        .unwrap();
    assert_eq!(small.memory(), first, "a run in the retiring block");
    carry_out(&allocator, &mut live, plan);
    let memory_type = live[0].memory_type();
    assert_eq!(
        blocks(&allocator, memory_type),
        (1, 32 * MIB, 0),
        "the second released"
    );
    for a in live.into_iter().chain(full).chain([small]) {
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
        fences.push(super::frames::end_frame(&allocator, &device));
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
    device.signal_fence(super::frames::end_frame(&allocator, &device));
    allocator.collect().unwrap();
    for a in live.into_iter().chain([first_upload]) {
        free(&allocator, a);
    }
    finish(allocator, &device);
}

/// A lone fragmented block has nowhere to go: no limit would empty it, so
/// a plan under limits does not count it over them (the newcomer's plan
/// said "over the limits" and raising them did nothing). With a second
/// block holding something, it is over them.
#[test]
fn a_block_with_nowhere_to_go_is_not_over_the_limits() {
    let (allocator, device) = allocator_with(FakeLayout::discrete(), without_runs());
    // The first block (32 MiB) alone, a quarter in use.
    let all = mib_buffers(&allocator, 32);
    let live = keep_where(&allocator, all, |i| i % 4 == 0);
    let limits = DefragmentationLimits::default().max_moves(2);
    for split in [false, true] {
        let plan = allocator
            .plan_defragmentation(&movables(&live), &limits.split_blocks(split))
            .unwrap();
        assert!(plan.moves.is_empty());
        assert_eq!(plan.blocks_over_limits, 0, "split {split}");
    }
    // A second block, holding one buffer the plan may not move: the first
    // could go there.
    let mut others = mib_buffers(&allocator, 25);
    let anchor = others.pop().unwrap();
    assert_ne!(anchor.memory(), live[0].memory());
    for a in others {
        free(&allocator, a);
    }
    let plan = allocator
        .plan_defragmentation(&movables(&live), &limits)
        .unwrap();
    assert_eq!((plan.moves.len(), plan.blocks_over_limits), (0, 1));
    for a in live.into_iter().chain([anchor]) {
        free(&allocator, a);
    }
    finish(allocator, &device);
}

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
    let pool = allocator
        .create_pool(
            &vk_suballoc::PoolDesc::new(live[0].memory_type())
                .block_size(8 * MIB)
                .max_blocks(2),
        )
        .unwrap();
    let in_pool = || {
        let desc = vk_suballoc::AllocationDesc::new(Usage::DEVICE_LOCAL).pool(pool);
        Request::with_desc(requirements(MIB, 256), ResourceKind::Buffer, desc)
    };
    // The pool's first block full but for two holes, its second holding two
    // buffers: they fit in the holes.
    let all: Vec<Allocation> = (0..10)
        .map(|_| allocator.allocate(&in_pool()).unwrap())
        .collect();
    let sparse = all[8].memory();
    assert_ne!(sparse, all[0].memory());
    let in_custom = keep_where(&allocator, all, |i| i != 2 && i != 5);
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

/// A move's destination is no new run in a block less than 16 times the
/// run's size, as an allocation's is not: in a custom pool of 64 KiB
/// blocks, a 100-byte buffer (a 112-byte class, whose run of 64 slots
/// takes 7 KiB) moves into the fuller block as a range of its own, and a
/// 20 KiB buffer still fits beside it. A run there would have taken 7 KiB
/// of the block's 24 KiB of room.
#[test]
fn a_move_starts_no_run_in_a_small_block() {
    let (allocator, device) = allocator(FakeLayout::discrete());
    let pool = allocator
        .create_pool(&vk_suballoc::PoolDesc::new(1).block_size(64 << 10))
        .unwrap();
    let in_pool = |size: u64, alignment: u64| {
        let desc = vk_suballoc::AllocationDesc::new(Usage::DEVICE_LOCAL).pool(pool);
        Request::with_desc(requirements(size, alignment), ResourceKind::Buffer, desc)
    };
    // The first block full (40 KiB and 24 KiB), the small buffer alone in
    // a second one; then the 24 KiB freed.
    let kept = allocator.allocate(&in_pool(40 << 10, 256)).unwrap();
    let filler = allocator.allocate(&in_pool(24 << 10, 256)).unwrap();
    let small = allocator.allocate(&in_pool(100, 16)).unwrap();
    assert_eq!(filler.memory(), kept.memory());
    assert_ne!(small.memory(), kept.memory());
    free(&allocator, filler);

    let movables = [Movable::new(
        &small,
        requirements(100, 16),
        ResourceKind::Buffer,
    )];
    let plan = allocator
        .plan_defragmentation(&movables, &DefragmentationLimits::default())
        .unwrap();
    assert_eq!(plan.moves.len(), 1);
    let mut live = vec![small];
    carry_out(&allocator, &mut live, plan);
    assert_eq!(live[0].memory(), kept.memory());
    assert_eq!(live[0].offset(), 40 << 10);
    let beside = allocator.allocate(&in_pool(20 << 10, 256)).unwrap();
    assert_eq!(beside.memory(), kept.memory(), "the room a run would take");
    for allocation in live.into_iter().chain([kept, beside]) {
        free(&allocator, allocation);
    }
    allocator.destroy_pool(pool).unwrap();
    finish(allocator, &device);
}

/// A custom pool of 1 MiB blocks with no `max_blocks`, so small buffers
/// take run slots in it: its first block, `kept`, holds a small buffer
/// (1000 bytes aligned to 16) at 0 (its first, a range of its own: runs
/// make no block), a run of 64 1 KiB slots after it, the one at `FREE_SLOT`
/// free again, and a buffer after the run that fills the block (freed
/// unless `keep_filler`); a second block holds one more small buffer,
/// alone (no block had room for its run). Returns the pool, that buffer,
/// what stays in `kept`, and `kept`'s memory object.
fn a_run_with_a_free_slot(
    allocator: &FakeAllocator,
    keep_filler: bool,
) -> (
    vk_suballoc::Pool,
    Allocation,
    Vec<Allocation>,
    vk::DeviceMemory,
) {
    let pool = allocator
        .create_pool(&PoolDesc::new(1).block_size(MIB))
        .unwrap();
    let in_pool = |size: u64, alignment: u64| {
        let desc = AllocationDesc::new(Usage::DEVICE_LOCAL).pool(pool);
        Request::with_desc(requirements(size, alignment), ResourceKind::Buffer, desc)
    };
    let mut stays: Vec<Allocation> = (0..65)
        .map(|_| allocator.allocate(&in_pool(1000, 16)).unwrap())
        .collect();
    let kept = stays[0].memory();
    assert!(stays.iter().all(|a| a.memory() == kept));
    let mut offsets: Vec<u64> = stays.iter().map(Allocation::offset).collect();
    offsets.sort_unstable();
    assert_eq!(offsets, (0..65).map(|i| i << 10).collect::<Vec<_>>());
    let filler = allocator.allocate(&in_pool(MIB - (65 << 10), 256)).unwrap();
    assert_eq!((filler.memory(), filler.offset()), (kept, 65 << 10));
    let alone = allocator.allocate(&in_pool(1000, 16)).unwrap();
    assert_ne!(alone.memory(), kept);
    let freed = stays.iter().position(|a| a.offset() == FREE_SLOT).unwrap();
    free(allocator, stays.swap_remove(freed));
    if keep_filler {
        stays.push(filler);
    } else {
        free(allocator, filler);
    }
    (pool, alone, stays, kept)
}

/// The offset of the free slot of [`a_run_with_a_free_slot`]'s run.
const FREE_SLOT: u64 = 10 << 10;

/// Plans over [`a_run_with_a_free_slot`]'s lone small buffer: its block
/// empties, and the buffer moves into `kept`. Returns the move's
/// destination, the small buffers and what stays, with the pool.
fn plan_the_lone_small_buffer(
    allocator: &FakeAllocator,
    keep_filler: bool,
) -> (Allocation, Vec<Allocation>, vk_suballoc::Pool) {
    let (pool, alone, stays, kept) = a_run_with_a_free_slot(allocator, keep_filler);
    let listed = [Movable::new(
        &alone,
        requirements(1000, 16),
        ResourceKind::Buffer,
    )];
    let plan = allocator
        .plan_defragmentation(&listed, &DefragmentationLimits::default())
        .unwrap();
    assert_eq!(
        (plan.moves.len(), plan.blocks_released, plan.bytes_released),
        (1, 1, MIB),
        "{plan:?}"
    );
    let mut live = vec![alone];
    carry_out(allocator, &mut live, plan);
    let moved = live.remove(0);
    assert_eq!(moved.memory(), kept);
    (moved, stays, pool)
}

/// A small buffer's move takes a free slot of a run in a block that stays,
/// as its allocation would: here the only room left in the pool's other
/// block. (Moves in a pool whose requests take run slots once took none,
/// and found no room there: the block did not empty.)
#[test]
fn a_small_buffers_move_takes_a_free_run_slot() {
    let (allocator, device) = allocator(FakeLayout::discrete());
    let (moved, stays, pool) = plan_the_lone_small_buffer(&allocator, true);
    assert_eq!(moved.offset(), FREE_SLOT);
    for a in stays.into_iter().chain([moved]) {
        free(&allocator, a);
    }
    allocator.destroy_pool(pool).unwrap();
    finish(allocator, &device);
}

/// A free slot of the fullest block with one goes before a new run in that
/// same block (a new run goes first only in a fuller block): the move
/// takes the slot, and the room after the run, which a new run would have
/// cut into, still takes a buffer that fills it.
#[test]
fn a_small_buffers_move_takes_a_free_slot_before_a_new_run_in_its_block() {
    let (allocator, device) = allocator(FakeLayout::discrete());
    let (moved, mut stays, pool) = plan_the_lone_small_buffer(&allocator, false);
    assert_eq!(moved.offset(), FREE_SLOT, "the free slot, not a new run");
    let desc = AllocationDesc::new(Usage::DEVICE_LOCAL).pool(pool);
    let request = Request::with_desc(
        requirements(MIB - (65 << 10), 256),
        ResourceKind::Buffer,
        desc,
    );
    let large = allocator.allocate(&request).unwrap();
    assert_eq!((large.memory(), large.offset()), (moved.memory(), 65 << 10));
    stays.push(large);
    for a in stays.into_iter().chain([moved]) {
        free(&allocator, a);
    }
    allocator.destroy_pool(pool).unwrap();
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

/// In a pool with `max_blocks`, where small buffers take no run slots, a
/// small buffer's move takes no run either: it moves as a range of its
/// own, and the rest of the room it moved into still takes a buffer that
/// fills it. A run there would have taken all 64 KiB of that room.
#[test]
fn a_small_buffers_move_in_a_capped_pool_starts_no_run() {
    let (allocator, device) = allocator(FakeLayout::discrete());
    let pool = allocator
        .create_pool(&PoolDesc::new(1).block_size(MIB).max_blocks(2))
        .unwrap();
    let in_pool = |size: u64, alignment: u64| {
        let desc = AllocationDesc::new(Usage::DEVICE_LOCAL).pool(pool);
        Request::with_desc(requirements(size, alignment), ResourceKind::Buffer, desc)
    };
    // The first block full while the small buffer takes the second, then
    // 64 KiB of it freed.
    let full = allocator.allocate(&in_pool(MIB, 256)).unwrap();
    let small = allocator.allocate(&in_pool(1000, 16)).unwrap();
    assert_ne!(small.memory(), full.memory());
    let kept = full.memory();
    free(&allocator, full);
    let stays = allocator.allocate(&in_pool(MIB - (64 << 10), 256)).unwrap();
    assert_eq!((stays.memory(), stays.offset()), (kept, 0));

    let listed = [Movable::new(
        &small,
        requirements(1000, 16),
        ResourceKind::Buffer,
    )];
    let plan = allocator
        .plan_defragmentation(&listed, &DefragmentationLimits::default())
        .unwrap();
    assert_eq!((plan.moves.len(), plan.blocks_released), (1, 1), "{plan:?}");
    let mut live = vec![small];
    carry_out(&allocator, &mut live, plan);
    assert_eq!(
        (live[0].memory(), live[0].offset()),
        (kept, MIB - (64 << 10))
    );
    // The 1008 bytes it holds, rounded up to 1 KiB: the rest of the room.
    let beside = allocator.allocate(&in_pool(63 << 10, 1024)).unwrap();
    assert_eq!((beside.memory(), beside.offset()), (kept, MIB - (63 << 10)));
    for allocation in live.into_iter().chain([stays, beside]) {
        free(&allocator, allocation);
    }
    allocator.destroy_pool(pool).unwrap();
    finish(allocator, &device);
}
