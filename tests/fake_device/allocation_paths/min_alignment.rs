//! `AllocationDesc::min_alignment`: every placement aligned to it (block
//! ranges, run slots, custom pools, non-coherent memory), a value that is
//! neither a power of two nor 0 refused, and an alignment past half a block
//! served with dedicated memory.

use vk_suballoc::device::fake::FakeLayout;
use vk_suballoc::{Error, Usage};

use super::super::{allocator, buffer, finish, free};

use super::MIB;

/// `min_alignment` (VMA's `vmaCreateBufferWithAlignment`) aligns every
/// placement beyond the resource's own alignment: in block ranges, run
/// slots, custom pools and on non-coherent memory; a value that is neither
/// a power of two nor 0 is refused before anything happens.
#[test]
fn min_alignment_aligns_every_placement() {
    let seed = crate::seeded_rng::Rng::seed("min_alignment_aligns_every_placement");
    let mut rng = crate::seeded_rng::Rng(seed);
    for layout in [FakeLayout::discrete(), FakeLayout::mobile()] {
        let name = layout.name;
        let (allocator, device) = allocator(layout);
        let local = allocator.memory_type_for(!0, Usage::DEVICE_LOCAL).unwrap();
        let pool = allocator
            .create_pool(&vk_suballoc::PoolDesc::new(local).block_size(16 * MIB))
            .unwrap();
        let mut live = Vec::new();
        for i in 0..400 {
            let size = 1 + rng.below(if i % 2 == 0 { 512 } else { 200_000 });
            let min_alignment: u64 = 1 << rng.below(17);
            // READBACK: non-coherent (atom-aligned) on the mobile layout.
            let usage = [Usage::DEVICE_LOCAL, Usage::READBACK][i % 2];
            let mut request = buffer(size, 4, usage);
            request.desc = request.desc.min_alignment(min_alignment);
            if i % 4 == 0 {
                request.desc = request.desc.pool(pool);
            }
            let allocation = allocator.allocate(&request).unwrap();
            assert_eq!(
                allocation.offset() % min_alignment,
                0,
                "{name} seed {seed}: {size} bytes aligned to {min_alignment}"
            );
            live.push(allocation);
        }
        let before = allocator.stats();
        for bad in [3, 96, u64::MAX] {
            let mut request = buffer(64, 4, Usage::DEVICE_LOCAL);
            request.desc = request.desc.min_alignment(bad);
            assert_eq!(
                allocator.allocate(&request).unwrap_err(),
                Error::AlignmentNotPowerOfTwo(bad),
                "{name}"
            );
        }
        assert_eq!(allocator.stats(), before);
        for allocation in live {
            free(&allocator, allocation);
        }
        allocator.destroy_pool(pool).unwrap();
        finish(allocator, &device);
    }
}

/// A `min_alignment` past half a block leaves room for one allocation per
/// block, at offset 0: such requests get dedicated memory of their exact
/// size, not a block each (ten 1 GiB-aligned buffers reserved ten blocks,
/// 2 GiB, for half a MiB).
#[test]
fn an_alignment_past_half_a_block_gets_dedicated_memory() {
    let (allocator, device) = allocator(FakeLayout::discrete());
    let mut live = Vec::new();
    for shift in [63u32, 40, 30, 28] {
        for size in [64u64, 100_000] {
            let mut request = buffer(size, 4, Usage::DEVICE_LOCAL);
            request.desc = request.desc.min_alignment(1 << shift);
            let allocation = allocator.allocate(&request).unwrap();
            assert!(allocation.is_dedicated(), "aligned to 2^{shift}");
            assert_eq!(allocation.offset(), 0);
            live.push(allocation);
        }
    }
    // Half a block (128 MiB of 256) still takes blocks.
    let mut request = buffer(64, 4, Usage::DEVICE_LOCAL);
    request.desc = request.desc.min_alignment(128 * MIB);
    let in_block = allocator.allocate(&request).unwrap();
    assert!(!in_block.is_dedicated());
    live.push(in_block);
    let stats = allocator.stats();
    assert_eq!(stats.memory_types[1].dedicated_allocations, 8);
    assert_eq!(stats.memory_types[1].blocks, 1);
    for allocation in live {
        free(&allocator, allocation);
    }
    finish(allocator, &device);
}
