//! The defragmentation pass that empties blocks, once per memory
//! architecture: `plan_defragmentation` moves the survivors of the emptiest
//! blocks (the image's among them) into the holes of the others, the plan
//! is carried out on the GPU as an engine would, every byte is read back,
//! and the emptied blocks are released as the old resources' frees are
//! collected. Apart from the compaction pass, which empties no block.

use std::collections::HashSet;

use ash::vk;
use vk_suballoc::{Allocation, DefragmentationLimits};

use super::super::allocator_setup::{allocator_configured, assert_no_page_shared, IdleOnDrop};
use super::{
    block_memories, block_totals, carry_out, check_and_destroy_all, config, create_filled,
    movables_of, punch_holes,
};
use crate::support::{test_each_profile, Profile, VulkanContext};

/// The pass itself (see the module docs).
fn defragmentation_pass(profile: Profile) {
    let context = VulkanContext::new(profile);
    let allocator = allocator_configured(&context, config());
    let _idle = IdleOnDrop(&context.device);
    let device = &context.device;
    let (mut image, buffers) = create_filled(&context, &allocator);
    let mut buffers = punch_holes(&allocator, &image, buffers);
    let survivors = buffers.len() as u64 + 1;
    let (blocks_before, bytes_before, empty_before) = block_totals(&allocator);
    assert_eq!(empty_before, 0, "no block emptied yet");

    // Every survivor is movable; the image comes last.
    let movables = movables_of(device, &buffers, Some(&image));
    let plan = allocator
        .plan_defragmentation(&movables, &DefragmentationLimits::default())
        .unwrap();
    assert!(
        plan.blocks_released >= 1 && !plan.moves.is_empty(),
        "{profile}: {plan:?}"
    );
    let moved_from: HashSet<vk::DeviceMemory> = plan
        .moves
        .iter()
        .map(|planned| movables[planned.movable].allocation.memory())
        .collect();
    assert_eq!(
        moved_from.len(),
        plan.blocks_released,
        "{profile}: blocks emptied"
    );
    for planned in &plan.moves {
        let (source, destination) = (movables[planned.movable].allocation, &planned.destination);
        assert_eq!(destination.memory_type(), source.memory_type());
        assert!(!destination.is_dedicated());
        assert!(
            !moved_from.contains(&destination.memory()),
            "{profile}: a move lands in a block the plan empties"
        );
    }
    // Mixed blocks (the granularity is padded, not separated): the
    // image's block is the least used, and it empties.
    let granularity = context.properties().limits.buffer_image_granularity;
    if granularity <= config().max_padded_granularity {
        assert!(
            plan.moves
                .iter()
                .any(|planned| planned.movable == buffers.len()),
            "{profile}: the image did not move: {plan:?}"
        );
    }
    // The destinations are live allocations beside their sources.
    let moves = plan.moves.len() as u64;
    assert_eq!(allocator.stats().allocations(), survivors + moves);
    let (emptied, emptied_bytes) = (plan.blocks_released as u64, plan.bytes_released);

    let sources = carry_out(&context, &allocator, plan, &mut buffers, &mut image);
    assert_eq!(sources, moved_from);
    assert_eq!(allocator.stats().allocations(), survivors);
    let live: Vec<&Allocation> = buffers.iter().map(|b| &b.allocation).collect();
    assert!(
        live.iter()
            .chain([&&image.allocation])
            .all(|a| !sources.contains(&a.memory())),
        "{profile}: an allocation is left in an emptied block"
    );
    let what = format!("{profile} after the moves");
    assert_no_page_shared(&context, live, [&image.allocation], &what);
    // The emptied blocks are released as they empty: none is kept.
    assert_eq!(
        block_totals(&allocator),
        (blocks_before - emptied, bytes_before - emptied_bytes, 0),
        "{profile}"
    );
    assert_eq!(allocator.trim(), 0, "{profile}");
    assert!(
        block_memories(&allocator).is_disjoint(&sources),
        "{profile}"
    );

    check_and_destroy_all(&context, &allocator, buffers, image, profile);
}

test_each_profile!(
    /// A defragmentation pass carried out on the GPU: the plan empties at
    /// least one block (the image's, the least used, among them), the
    /// copies keep every byte, the old resources go through the frame
    /// queue, and the emptied blocks are released when those frees are.
    fn a_defragmentation_pass_keeps_every_byte(profile) {
        defragmentation_pass(profile);
    }
);
