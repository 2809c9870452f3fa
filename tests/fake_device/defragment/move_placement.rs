//! Moves placed as a new request of the resource's kind would be: a resource
//! that needs dedicated memory is not moved into a block, optimal images
//! follow their pool's granularity rule, and a block holding a resource that
//! cannot move is not emptied in part.

use vk_suballoc::device::fake::FakeLayout;
use vk_suballoc::{
    Allocation, AllocationDesc, DefragmentationLimits, Movable, PoolDesc, Request, ResourceKind,
    Usage,
};

use super::super::{allocator_with, buffer, finish, free, requirements, without_runs};

use super::{carry_out, two_fragmented_blocks, MIB};

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
