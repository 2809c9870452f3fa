//! The compaction pass (`compact_blocks`), once per memory architecture: no
//! block is emptied, every move goes wholly below its source in its own
//! block, the copies between the old and new resources of one memory
//! object keep every byte, and nothing is released. Apart from the
//! emptying pass because its moves stay in their memory object, which the
//! validation layer checks for overlapping copies.

use std::collections::HashSet;

use vk_suballoc::{Allocation, DefragmentationLimits};

use super::super::allocator_setup::{allocator_configured, assert_no_page_shared, IdleOnDrop};
use super::{
    block_memories, block_totals, carry_out, check_and_destroy_all, config, create_filled,
    movables_of, punch_holes,
};
use crate::support::{test_each_profile, Profile, VulkanContext};

/// A compaction pass (`compact_blocks`) carried out on the GPU: no block
/// is emptied (`max_used_percent(0)`), so every move goes lower in its own
/// block, wholly below its source; the copies between the old and new
/// resources of one memory object keep every byte, nothing is released,
/// and the validation layer says nothing (copies whose ranges share a
/// memory object but do not overlap are valid).
fn compaction_pass(profile: Profile) {
    let context = VulkanContext::new(profile);
    let allocator = allocator_configured(&context, config());
    let _idle = IdleOnDrop(&context.device);
    let device = &context.device;
    let (mut image, buffers) = create_filled(&context, &allocator);
    let mut buffers = punch_holes(&allocator, &image, buffers);
    let survivors = buffers.len() as u64 + 1;
    let before = block_totals(&allocator);
    let memories = block_memories(&allocator);

    let movables = movables_of(device, &buffers, Some(&image));
    let limits = DefragmentationLimits::default()
        .max_used_percent(0)
        .compact_blocks(true);
    let plan = allocator.plan_defragmentation(&movables, &limits).unwrap();
    assert_eq!(plan.blocks_released, 0, "{profile}: {plan:?}");
    assert!(
        plan.blocks_compacted >= 1 && !plan.moves.is_empty(),
        "{profile}: {plan:?}"
    );
    let mut compacted = HashSet::new();
    for planned in &plan.moves {
        let (source, destination) = (movables[planned.movable].allocation, &planned.destination);
        assert_eq!(destination.memory(), source.memory(), "{profile}");
        assert!(
            destination.offset() + destination.size() <= source.offset(),
            "{profile}: {destination:?} not wholly below {source:?}"
        );
        compacted.insert(source.memory());
    }
    assert_eq!(compacted.len(), plan.blocks_compacted, "{profile}");
    assert_eq!(
        allocator.stats().allocations(),
        survivors + plan.moves.len() as u64
    );

    let sources = carry_out(&context, &allocator, plan, &mut buffers, &mut image);
    assert_eq!(sources, compacted);
    assert_eq!(allocator.stats().allocations(), survivors);
    let live: Vec<&Allocation> = buffers.iter().map(|b| &b.allocation).collect();
    let what = format!("{profile} after compaction");
    assert_no_page_shared(&context, live, [&image.allocation], &what);
    assert_eq!(
        block_totals(&allocator),
        before,
        "{profile}: nothing released"
    );
    assert_eq!(block_memories(&allocator), memories, "{profile}");
    // Packed: a second plan finds nothing more to move lower.
    let movables = movables_of(device, &buffers, None);
    let again = allocator.plan_defragmentation(&movables, &limits).unwrap();
    assert!(again.moves.is_empty(), "{profile}: {again:?}");
    drop(movables);

    check_and_destroy_all(&context, &allocator, buffers, image, profile);
}

test_each_profile!(
    /// A compaction pass carried out on the GPU keeps every byte and moves
    /// each allocation lower in its own block.
    fn a_compaction_pass_keeps_every_byte(profile) {
        compaction_pass(profile);
    }
);
