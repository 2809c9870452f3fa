//! Blocks being emptied as the pool's last room before new memory: a
//! request that no other block of its granularity class can take goes to
//! one rather than make a memory object, whichever way it came (blocks
//! first, existing memory only, or blocks after the driver's preferred
//! dedicated memory failed); the blocks being emptied take such requests
//! in the order they started being emptied; and before a kept empty block
//! of the other class is taken over, which in turn comes before new
//! memory.

use vk_suballoc::device::fake::FakeLayout;
use vk_suballoc::device::{DedicatedHint, DeviceError};
use vk_suballoc::{
    Allocation, AllocationDesc, Config, DefragmentationLimits, Pool, PoolDesc, Request,
    ResourceKind, Usage,
};

use super::super::{
    allocator, allocator_with, buffer, finish, free, requirements, without_runs, FakeAllocator,
};
use super::{carry_out, keep_where, mib_buffers, movables, two_fragmented_blocks, MIB};

/// The discrete layout's device-local type.
const VRAM: u32 = 1;

/// A custom pool of 4 MiB blocks in the device-local type.
fn pool_of_4_mib_blocks(allocator: &FakeAllocator) -> Pool {
    allocator
        .create_pool(&PoolDesc::new(VRAM).block_size(4 * MIB))
        .unwrap()
}

/// A 1 MiB request from `pool`: a buffer, or an optimal image aligned to
/// 64 KiB.
fn mib_in_pool(pool: Pool, kind: ResourceKind) -> Request<'static> {
    let alignment = if kind == ResourceKind::Buffer {
        256
    } else {
        65536
    };
    let desc = AllocationDesc::new(Usage::DEVICE_LOCAL).pool(pool);
    Request::with_desc(requirements(MIB, alignment), kind, desc)
}

/// `count` 1 MiB buffers from `pool`.
fn mib_buffers_in(allocator: &FakeAllocator, pool: Pool, count: usize) -> Vec<Allocation> {
    (0..count)
        .map(|_| {
            allocator
                .allocate(&mib_in_pool(pool, ResourceKind::Buffer))
                .unwrap()
        })
        .collect()
}

/// While the moves are in flight, a request that fits in no other block
/// takes room in the block being emptied, not a new memory object: when it
/// tries blocks first, when it asks for existing memory only, and when the
/// driver's preferred dedicated memory failed first.
#[test]
fn a_request_no_other_block_takes_goes_to_the_retiring_block_not_to_new_memory() {
    let (allocator, device) = allocator_with(FakeLayout::discrete(), without_runs());
    let mut live = two_fragmented_blocks(&allocator);
    let memory_type = live[0].memory_type() as usize;
    let (first, second) = (live[0].memory(), live[16].memory());
    let plan = allocator
        .plan_defragmentation(&movables(&live), &DefragmentationLimits::default())
        .unwrap();
    assert_eq!((plan.moves.len(), plan.blocks_released), (8, 1));
    // The first block's last 8 holes filled: only the retiring second has room.
    let mut taken = mib_buffers(&allocator, 8);
    assert!(taken.iter().all(|a| a.memory() == first));
    let made = device.counters().allocations;
    let plain = buffer(MIB, 256, Usage::DEVICE_LOCAL);
    taken.push(allocator.allocate(&plain).unwrap());
    taken.push(allocator.allocate(&plain.existing_memory_only()).unwrap());
    let calls = device.counters().allocate_calls;
    device.fail_allocation(1, DeviceError::OutOfDeviceMemory);
    let preferred = DedicatedHint {
        required: false,
        preferred: true,
    };
    taken.push(
        allocator
            .allocate(&plain.driver_dedicated(preferred))
            .unwrap(),
    );
    assert_eq!(
        device.counters().allocate_calls,
        calls + 1,
        "dedicated memory was tried first"
    );
    let homes: Vec<bool> = taken[8..].iter().map(|a| a.memory() == second).collect();
    assert_eq!(
        homes, [true; 3],
        "blocks first, existing only, after dedicated"
    );
    assert_eq!(device.counters().allocations, made, "no new memory");
    assert_eq!(
        allocator.stats().memory_types[memory_type].retiring_blocks,
        1
    );
    carry_out(&allocator, &mut live, plan);
    for a in live.into_iter().chain(taken) {
        free(&allocator, a);
    }
    finish(allocator, &device);
}

/// Of two blocks being emptied, requests that fit in no other block go to
/// the one that started first, then to the other: here the newer block,
/// which first fit over the blocks would try second.
#[test]
fn retiring_blocks_take_requests_in_the_order_they_retired() {
    let (allocator, device) = allocator(FakeLayout::discrete());
    let pool = pool_of_4_mib_blocks(&allocator);
    // Three blocks of four: the first two keep one buffer each, the third
    // two.
    let all = mib_buffers_in(&allocator, pool, 12);
    let (older, newer, receiving) = (all[0].memory(), all[4].memory(), all[8].memory());
    assert!(older != newer && newer != receiving && older != receiving);
    let mut live = keep_where(&allocator, all, |i| [0, 4, 8, 9].contains(&i));
    // One plan empties the newer block, a second the older one: each moves
    // its block's buffer into the third block.
    let limits = DefragmentationLimits::default();
    let newer_plan = allocator
        .plan_defragmentation(&movables(&live[1..2]), &limits)
        .unwrap();
    let older_plan = allocator
        .plan_defragmentation(&movables(&live[..1]), &limits)
        .unwrap();
    for plan in [&newer_plan, &older_plan] {
        assert_eq!((plan.moves.len(), plan.blocks_released), (1, 1));
        assert_eq!(plan.moves[0].destination.memory(), receiving);
    }
    let made = device.counters().allocations;
    let fillers = mib_buffers_in(&allocator, pool, 6);
    let homes: Vec<_> = fillers.iter().map(Allocation::memory).collect();
    assert_eq!(
        homes,
        [newer, newer, newer, older, older, older],
        "the block that retired first, then the other"
    );
    assert_eq!(device.counters().allocations, made, "no new block");
    carry_out(&allocator, &mut live[1..2], newer_plan);
    carry_out(&allocator, &mut live[..1], older_plan);
    for a in live.into_iter().chain(fillers) {
        free(&allocator, a);
    }
    allocator.destroy_pool(pool).unwrap();
    finish(allocator, &device);
}

/// Where optimal images get blocks of their own (a default pool, past
/// `Config::max_padded_granularity`), a buffer that fits in no other
/// buffer block takes over a kept empty image block before it takes the
/// block being emptied (a kept empty block is idle memory; a request in a
/// retiring block keeps that block and undoes part of the plan's work);
/// once the adopted block is full, it takes the retiring block, still
/// before any new memory.
#[test]
fn an_empty_block_of_the_other_class_comes_before_a_retiring_block() {
    let (allocator, device) = allocator_with(
        FakeLayout::discrete().with_granularity(65536),
        Config::default(),
    );
    // A 32 MiB block keeps 4 buffers, a 64 MiB one 60 of its 64.
    let all = mib_buffers(&allocator, 96);
    let (sparse, receiving) = (all[0].memory(), all[32].memory());
    let mut live = keep_where(&allocator, all, |i| i < 4 || (32..92).contains(&i));
    // An image block, emptied and kept.
    let image = allocator
        .allocate(&Request::new(
            requirements(MIB, 65536),
            Usage::DEVICE_LOCAL,
            ResourceKind::OptimalImage,
        ))
        .unwrap();
    let image_block = image.memory();
    assert!(image_block != sparse && image_block != receiving);
    free(&allocator, image);
    let memory_type = live[0].memory_type() as usize;
    assert_eq!(allocator.stats().memory_types[memory_type].empty_blocks, 1);
    let plan = allocator
        .plan_defragmentation(&movables(&live[..4]), &DefragmentationLimits::default())
        .unwrap();
    assert_eq!((plan.moves.len(), plan.blocks_released), (4, 1));
    assert!(plan
        .moves
        .iter()
        .all(|m| m.destination.memory() == receiving));
    let made = device.counters().allocations;
    // Buffers until one lands outside the adopted image block: the
    // retiring block's 28 free MiB stay untouched until then.
    let mut fillers = Vec::new();
    while fillers
        .last()
        .map_or(true, |a: &Allocation| a.memory() == image_block)
    {
        assert!(fillers.len() < 256, "the adopted block never filled");
        fillers.extend(mib_buffers(&allocator, 1));
    }
    assert!(fillers.len() > 1, "the kept empty image block first");
    assert_eq!(
        fillers.last().map(Allocation::memory),
        Some(sparse),
        "then the retiring block"
    );
    assert_eq!(device.counters().allocations, made, "no new block");
    carry_out(&allocator, &mut live[..4], plan);
    for a in live.into_iter().chain(fillers) {
        free(&allocator, a);
    }
    finish(allocator, &device);
}
