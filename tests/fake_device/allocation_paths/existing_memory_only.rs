//! Requests for existing memory only (VMA's `NEVER_ALLOCATE`): placed in the
//! blocks that exist, of any suitable memory type in rank order or of their
//! custom pool, never making a memory object, and otherwise refused with
//! `NoRoomInExistingMemory`.

use vk_suballoc::device::fake::FakeLayout;
use vk_suballoc::{DedicatedHint, DedicatedPolicy, Error, Request, ResourceKind, Usage};

use super::super::{allocator, buffer, finish, free, requirements};

use super::MIB;

/// `existing_memory_only` (VMA's `NEVER_ALLOCATE`) places requests in the
/// blocks that exist, in any suitable memory type, and otherwise fails
/// with `NoRoomInExistingMemory`: never a new memory object, not even for
/// a request that needs dedicated memory.
#[test]
fn existing_memory_only_never_makes_a_memory_object() {
    let (allocator, device) = allocator(FakeLayout::discrete());
    let only = |size: u64| buffer(size, 256, Usage::DEVICE_LOCAL).existing_memory_only();
    // Nothing exists yet.
    assert_eq!(
        allocator.allocate(&only(MIB)).unwrap_err(),
        Error::NoRoomInExistingMemory
    );
    assert_eq!(device.counters().allocate_calls, 0);
    // One block, made by an ordinary request, then filled by requests for
    // existing memory, small buffers (run slots) among them.
    let first = allocator
        .allocate(&buffer(MIB, 256, Usage::DEVICE_LOCAL))
        .unwrap();
    let block_bytes = allocator.stats().memory_types[1].block_bytes;
    let mut live = vec![first];
    let error = loop {
        match allocator.allocate(&only(MIB)) {
            Ok(allocation) => {
                assert_eq!(allocation.memory(), live[0].memory());
                live.push(allocation);
            }
            Err(error) => break error,
        }
    };
    assert_eq!(error, Error::NoRoomInExistingMemory);
    assert_eq!(
        live.len() as u64,
        block_bytes / MIB,
        "the block was not filled"
    );
    assert_eq!(device.counters().allocate_calls, 1);
    // A request the driver would rather have dedicated takes a block too;
    // one that needs dedicated memory fails.
    live.push(
        allocator
            .allocate(&buffer(MIB, 256, Usage::DEVICE_LOCAL))
            .unwrap(),
    );
    let preferred = only(4096).driver_dedicated(DedicatedHint {
        required: false,
        preferred: true,
    });
    let in_block = allocator.allocate(&preferred).unwrap();
    assert!(!in_block.is_dedicated());
    live.push(in_block);
    let always = only(4096).dedicated(DedicatedPolicy::Always);
    assert_eq!(
        allocator.allocate(&always).unwrap_err(),
        Error::NoRoomInExistingMemory
    );
    let small = allocator.allocate(&only(256)).unwrap();
    live.push(small);
    assert_eq!(device.counters().allocate_calls, 2);
    for allocation in live {
        free(&allocator, allocation);
    }
    finish(allocator, &device);
}

/// The other suitable memory types' existing blocks are tried in rank
/// order, and a custom pool's request for existing memory stays in its
/// blocks (`NoRoomInExistingMemory`, not `PoolFull`, and no new block
/// below `max_blocks`).
#[test]
fn existing_memory_only_tries_every_type_and_pool_blocks() {
    // Mobile: TRANSIENT ranks the lazily allocated type (3, always
    // dedicated) first, then device-local types.
    let (allocator, device) = allocator(FakeLayout::mobile());
    let transient = |size: u64| {
        Request::new(
            requirements(size, 256),
            Usage::TRANSIENT,
            ResourceKind::OptimalImage,
        )
        .existing_memory_only()
    };
    assert_eq!(
        allocator.allocate(&transient(MIB)).unwrap_err(),
        Error::NoRoomInExistingMemory
    );
    let local = allocator
        .allocate(&Request::new(
            requirements(MIB, 256),
            Usage::DEVICE_LOCAL,
            ResourceKind::OptimalImage,
        ))
        .unwrap();
    let fallback = allocator.allocate(&transient(MIB)).unwrap();
    assert_eq!(fallback.memory_type(), local.memory_type());
    assert_eq!(fallback.memory(), local.memory());
    assert_eq!(device.counters().allocate_calls, 1);

    let pool = allocator
        .create_pool(
            &vk_suballoc::PoolDesc::new(0)
                .block_size(4 * MIB)
                .min_blocks(1),
        )
        .unwrap();
    let in_pool = |size: u64| {
        let mut request = buffer(size, 256, Usage::DEVICE_LOCAL);
        request.desc = request.desc.pool(pool).existing_memory_only();
        request
    };
    let a = allocator.allocate(&in_pool(3 * MIB)).unwrap();
    assert_eq!(
        allocator.allocate(&in_pool(2 * MIB)).unwrap_err(),
        Error::NoRoomInExistingMemory
    );
    assert_eq!(allocator.pool_stats(&pool).unwrap().blocks, 1);
    let b = allocator.allocate(&in_pool(MIB)).unwrap();
    for allocation in [local, fallback, a, b] {
        free(&allocator, allocation);
    }
    allocator.destroy_pool(pool).unwrap();
    finish(allocator, &device);
}
