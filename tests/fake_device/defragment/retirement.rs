//! Blocks being emptied while the moves are in flight: they take no new
//! requests while other blocks have room, no run is carved from them, a
//! block made meanwhile comes before them, a move given up with
//! `give_up_move` ends their retirement, and a block whose move's
//! destination is freed (the move dropped, or its resource unloaded) stays
//! retiring, as does a block started by a split plan with no room left
//! elsewhere for the rest of its allocations.

use vk_suballoc::device::fake::{FakeDevice, FakeLayout};
use vk_suballoc::{
    Allocation, AllocationDesc, DefragmentationLimits, Error, Movable, Pool, PoolDesc, Request,
    ResourceKind, Usage,
};

use super::super::{
    allocator, allocator_with, buffer, finish, free, requirements, without_runs, FakeAllocator,
};

use super::{
    assert_disjoint, blocks, blocks_with_a_run, carry_out, custom_pool_with_a_sparse_block,
    keep_where, mib_buffers, movables, movables_of_run_blocks, two_fragmented_blocks, MIB,
};

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
    assert_the_second_released_then_finish(
        allocator,
        &device,
        live,
        new_small.into_iter().chain([new_large]),
    );
}

/// Checks that a plan carried out over two blocks released the second (one
/// 32 MiB block of `live`'s memory type left, none of them empty), then
/// frees `live` and `others` and checks the device left clean.
fn assert_the_second_released_then_finish(
    allocator: FakeAllocator,
    device: &FakeDevice,
    live: Vec<Allocation>,
    others: impl IntoIterator<Item = Allocation>,
) {
    let memory_type = live[0].memory_type();
    assert_eq!(
        blocks(&allocator, memory_type),
        (1, 32 * MIB, 0),
        "the second released"
    );
    for a in live.into_iter().chain(others) {
        free(&allocator, a);
    }
    finish(allocator, device);
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
    let (other, other_device) = super::super::allocator(FakeLayout::discrete());
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

    device.signal_fence(super::super::frames::end_frame(&allocator, &device));
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
/// does not empty (and giving the move up after that is refused as stale). Until it does, it comes last when requests look for
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
    // SAFETY: `Allocation` owns nothing on the heap and has no `Drop`; the
    // copy is freed, and the original, stale then, is only handed to
    // `give_up_move`, which refuses it.
    let destination = unsafe { std::ptr::read(&given_up.destination) };
    free(&allocator, destination);
    // A move whose destination was freed already is refused as stale
    // (`give_up_move`'s docs), and its block stays retiring, as below.
    assert_eq!(
        allocator.give_up_move(given_up),
        Err(Error::StaleAllocation)
    );
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
    assert_the_second_released_then_finish(
        allocator,
        &device,
        live,
        full.into_iter().chain([small]),
    );
}

/// `give_up_move` ends the retirement of the block the move leaves, in the
/// pool the plan placed it in, whatever its destination field holds by
/// then (the field is public: an engine may swap two moves'
/// destinations). The first blocks of a default pool and of a custom pool
/// can have equal keys in their pools; such a swap stopped the other
/// pool's block being emptied, and left the move's own block retiring.
#[test]
fn a_move_given_up_ends_the_retirement_in_its_own_pool() {
    let (allocator, device) = allocator(FakeLayout::discrete());
    let mut live = two_fragmented_blocks(&allocator);
    let memory_type = live[0].memory_type();
    let default_source = live[16].memory();
    let (pool, pooled, custom_source) = custom_pool_with_a_sparse_block(&allocator, memory_type);
    let default_count = live.len();
    live.extend(pooled);
    let plan = allocator
        .plan_defragmentation(&movables(&live), &DefragmentationLimits::default())
        .unwrap();
    let retiring = |memory| {
        let map = allocator.memory_map();
        let default = map.memory_types[memory_type as usize].blocks.iter();
        let custom = map.custom_pools().flat_map(|p| p.blocks.iter());
        let block = default.chain(custom).find(|b| b.memory == memory);
        block.expect("the block stays").retiring
    };
    assert!(retiring(default_source) && retiring(custom_source));
    let mut moves = plan.moves;
    let in_default = moves
        .iter()
        .position(|m| m.movable < default_count)
        .unwrap();
    let mut default_move = moves.remove(in_default);
    let in_custom = moves
        .iter()
        .position(|m| m.movable >= default_count)
        .unwrap();
    let mut custom_move = moves.remove(in_custom);
    std::mem::swap(&mut default_move.destination, &mut custom_move.destination);
    allocator.give_up_move(default_move).unwrap();
    assert!(
        !retiring(default_source),
        "the move's own block stops being emptied"
    );
    assert!(
        retiring(custom_source),
        "the other pool's block stays retiring"
    );
    allocator.give_up_move(custom_move).unwrap();
    assert!(!retiring(custom_source));
    for planned in moves {
        allocator.give_up_move(planned).unwrap();
    }
    device.signal_fence(super::super::frames::end_frame(&allocator, &device));
    allocator.collect().unwrap();
    for a in live {
        free(&allocator, a);
    }
    allocator.destroy_pool(pool).unwrap();
    finish(allocator, &device);
}

/// A resource unloaded while its move is pending (VMA's
/// `MOVE_OPERATION_DESTROY`): the engine frees its old allocation and the
/// move's destination, and the block goes on being emptied, so that it is
/// released once those frees are collected, as the plan said. Given up
/// instead (`give_up_move`, VMA's `MOVE_OPERATION_IGNORE`, for a resource
/// that stays where it was), the move ends the block's retirement: the
/// block empties all the same here, but is kept as an empty block rather
/// than released (and until it empties it takes requests again).
#[test]
fn a_move_whose_resource_is_unloaded_frees_both_and_its_block_is_released() {
    for give_up in [false, true] {
        let (allocator, device) = allocator_with(FakeLayout::discrete(), without_runs());
        let all = mib_buffers(&allocator, 64);
        let memory_type = all[0].memory_type();
        let (first, second) = (all[0].memory(), all[32].memory());
        // 8 left in the first block, 24 in the second: the first is
        // emptied into the second's holes.
        let mut live = keep_where(&allocator, all, |i| (i < 32 && i % 4 == 0) || i >= 40);
        let plan = allocator
            .plan_defragmentation(&movables(&live), &DefragmentationLimits::default())
            .unwrap();
        assert_eq!((plan.moves.len(), plan.blocks_released), (8, 1));
        let mut moves = plan.moves;
        let unloaded = moves.pop().unwrap();
        for planned in moves {
            let old = std::mem::replace(&mut live[planned.movable], planned.destination);
            allocator.free_after_frame(old).unwrap();
        }
        allocator
            .free_after_frame(live.swap_remove(unloaded.movable))
            .unwrap();
        if give_up {
            allocator.give_up_move(unloaded).unwrap();
        } else {
            allocator.free_after_frame(unloaded.destination).unwrap();
        }
        let retiring = allocator.stats().memory_types[memory_type as usize].retiring_blocks;
        assert_eq!(retiring, u64::from(!give_up), "give up: {give_up}");
        device.signal_fence(super::super::frames::end_frame(&allocator, &device));
        allocator.collect().unwrap();
        let kept: Vec<_> = allocator.memory_map().memory_types[memory_type as usize]
            .blocks
            .iter()
            .map(|b| (b.memory, b.allocations().count()))
            .collect();
        if give_up {
            assert_eq!(kept, [(first, 0), (second, 31)], "kept, empty");
        } else {
            assert_eq!(kept, [(second, 31)], "the first released");
        }
        for a in live {
            free(&allocator, a);
        }
        finish(allocator, &device);
    }
}

/// A custom pool at its `max_blocks`, two 8 MiB blocks of 1 MiB buffers,
/// the first keeping 6 of them and the second 4: two moves of the second
/// fill the first, and two are left with no room elsewhere. Returns the
/// pool, the request its buffers came from and the live buffers, the
/// first block's first.
fn full_two_block_pool(allocator: &FakeAllocator) -> (Pool, Request<'static>, Vec<Allocation>) {
    let memory_type = allocator.memory_type_for(!0, Usage::DEVICE_LOCAL).unwrap();
    let pool = allocator
        .create_pool(&PoolDesc::new(memory_type).block_size(8 * MIB).max_blocks(2))
        .unwrap();
    let desc = AllocationDesc::new(Usage::DEVICE_LOCAL).pool(pool);
    let request = Request::with_desc(requirements(MIB, 256), ResourceKind::Buffer, desc);
    let all: Vec<Allocation> = (0..16)
        .map(|_| allocator.allocate(&request).unwrap())
        .collect();
    let live = keep_where(allocator, all, |i| (2..12).contains(&i));
    (pool, request, live)
}

/// A block started by a split plan stays retiring while there is no room
/// for the rest of its allocations (a custom pool at its `max_blocks`, its
/// other block full): later plans move nothing and count no block over
/// their limits, as the README says; the block comes last for requests
/// (here, with no room elsewhere, it takes one) and retires no more once
/// its allocations are freed.
#[test]
fn a_started_block_without_room_elsewhere_stays_retiring_until_freed() {
    let (allocator, device) = allocator_with(FakeLayout::discrete(), without_runs());
    let (pool, request, mut live) = full_two_block_pool(&allocator);
    let second = live[6].memory();
    let limits = DefragmentationLimits::default()
        .max_moves(2)
        .split_blocks(true)
        .max_used_percent(100);
    let plan = allocator
        .plan_defragmentation(&movables(&live), &limits)
        .unwrap();
    assert_eq!((plan.moves.len(), plan.blocks_started), (2, 1));
    for planned in plan.moves.into_iter().rev() {
        let old = std::mem::replace(&mut live[planned.movable], planned.destination);
        free(&allocator, old);
    }
    let retiring = || allocator.pool_stats(&pool).unwrap().retiring_blocks;
    assert_eq!(retiring(), 1);
    for split in [true, false] {
        let limits = DefragmentationLimits::default().split_blocks(split);
        let plan = allocator
            .plan_defragmentation(&movables(&live), &limits)
            .unwrap();
        let figures = (
            plan.moves.len(),
            plan.blocks_over_limits,
            plan.blocks_released,
        );
        assert_eq!(figures, (0, 0, 0), "split {split}: nothing left to do");
        assert_eq!(retiring(), 1, "split {split}: still retiring");
    }
    // The pool is full but for the retiring block's 6 MiB, which it hands
    // out all the same when nothing else has room.
    let extra = allocator.allocate(&request).unwrap();
    assert_eq!(extra.memory(), second);
    free(&allocator, extra);
    let (in_second, rest): (Vec<_>, Vec<_>) = live.into_iter().partition(|a| a.memory() == second);
    for a in in_second {
        free(&allocator, a);
    }
    assert_eq!(retiring(), 0, "an emptied block retires no more");
    for a in rest {
        free(&allocator, a);
    }
    allocator.destroy_pool(pool).unwrap();
    finish(allocator, &device);
}

/// The same under limits smaller than what the started block has left, as
/// an engine that defragments a little every frame sets them: with no room
/// elsewhere no limit would help, so later split plans count no block over
/// their limits (the README), and such an engine, which stops at a plan
/// with no moves and none over the limits, stops.
#[test]
fn a_started_block_without_room_is_not_over_small_limits() {
    let (allocator, device) = allocator_with(FakeLayout::discrete(), without_runs());
    let (pool, _, mut live) = full_two_block_pool(&allocator);
    let limits = DefragmentationLimits::default()
        .max_moves(1)
        .split_blocks(true)
        .max_used_percent(100);
    for _ in 0..2 {
        let plan = allocator
            .plan_defragmentation(&movables(&live), &limits)
            .unwrap();
        assert_eq!(plan.moves.len(), 1);
        for planned in plan.moves {
            let old = std::mem::replace(&mut live[planned.movable], planned.destination);
            free(&allocator, old);
        }
    }
    assert_eq!(allocator.pool_stats(&pool).unwrap().retiring_blocks, 1);
    let plan = allocator
        .plan_defragmentation(&movables(&live), &limits)
        .unwrap();
    let figures = (
        plan.moves.len(),
        plan.blocks_over_limits,
        plan.blocks_started,
    );
    assert_eq!(figures, (0, 0, 0), "no room: nothing over the limits");
    for a in live {
        free(&allocator, a);
    }
    allocator.destroy_pool(pool).unwrap();
    finish(allocator, &device);
}
