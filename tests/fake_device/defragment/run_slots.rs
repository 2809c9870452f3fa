//! Plans and the runs of small buffers: a run's free slots count as free
//! when a plan weighs how full a block is, as a source and as a destination;
//! a small buffer's move takes a free run slot as its allocation would, and
//! starts no run in a small block or in a pool with `max_blocks`.

use std::collections::HashSet;

use ash::vk;
use vk_suballoc::device::fake::FakeLayout;
use vk_suballoc::{
    Allocation, AllocationDesc, DefragmentationLimits, DefragmentationPlan, Movable, PoolDesc,
    Request, ResourceKind, Usage,
};

use super::super::FakeAllocator;
use super::super::{allocator, buffer, finish, free, requirements};

use super::{allocator_with_16_mib_blocks, carry_out, keep_where, MIB};

/// A run's free slots count as free when a plan weighs how full a block
/// is (the offset allocator counts the whole run as in use): a 2 MiB block
/// of 24 runs with one live slot each is 1 % in use, not 75 %.
#[test]
fn free_slots_of_runs_count_as_free() {
    let (allocator, device) = allocator_with_16_mib_blocks(FakeLayout::discrete());
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
    let plan = plan_as_buffers(&allocator, &live, 1000, 16);
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

/// Plans the moves of every allocation of `live`, listed as a buffer of
/// `size` bytes aligned to `alignment`, under the default limits.
fn plan_as_buffers(
    allocator: &FakeAllocator,
    live: &[Allocation],
    size: u64,
    alignment: u64,
) -> DefragmentationPlan {
    let listed: Vec<Movable<'_>> = live
        .iter()
        .map(|a| Movable::new(a, requirements(size, alignment), ResourceKind::Buffer))
        .collect();
    allocator
        .plan_defragmentation(&listed, &DefragmentationLimits::default())
        .unwrap()
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
    let plan = plan_as_buffers(allocator, &live, 1000, 16);
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
    let (allocator, device) = allocator_with_16_mib_blocks(FakeLayout::discrete());
    both_empty_into_kept(&allocator, 16);
    finish(allocator, &device);
}

/// As [`destinations_count_free_slots_of_runs_as_free`], but `kept`'s run
/// is full: a new run in `kept` takes `sparse`'s buffers, not the free
/// slots of `runs`, the sparser block, which then empties too.
#[test]
fn a_new_run_in_a_fuller_block_goes_before_free_slots_of_a_sparser_one() {
    let (allocator, device) = allocator_with_16_mib_blocks(FakeLayout::discrete());
    both_empty_into_kept(&allocator, 0);
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

    let plan = plan_as_buffers(&allocator, std::slice::from_ref(&small), 100, 16);
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
    let plan = plan_as_buffers(allocator, std::slice::from_ref(&alone), 1000, 16);
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

    let plan = plan_as_buffers(&allocator, std::slice::from_ref(&small), 1000, 16);
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
