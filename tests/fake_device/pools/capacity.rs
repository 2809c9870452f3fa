//! A pool's memory objects: its blocks, counted in its memory type, its
//! fixed block size never retried smaller (or grown as the default pools'
//! without one), its most blocks (a full pool failing typed and changing
//! nothing) and its fewest (kept through emptying and trim, leaving
//! nothing when they cannot be made), and the one empty block it keeps
//! whatever the default pools' reserve. Checked against the fake device's
//! count of memory objects.

use std::collections::HashSet;

use vk_suballoc::device::fake::FakeLayout;
use vk_suballoc::device::DeviceError;
use vk_suballoc::{Config, Error, PoolDesc, Request, Usage};

use super::super::{allocator, allocator_with, buffer, finish, free};

use super::{in_pool, objects, MIB, VRAM};

#[test]
fn a_pool_has_blocks_of_its_own_counted_in_its_type() {
    let (allocator, device) = allocator(FakeLayout::discrete());
    assert_eq!(
        allocator.memory_type_for(!0, Usage::DEVICE_LOCAL).unwrap(),
        VRAM
    );
    let pool = allocator
        .create_pool(
            &PoolDesc::new(VRAM)
                .block_size(8 * MIB)
                .min_blocks(1)
                .name("meshes"),
        )
        .unwrap();
    assert_eq!(pool.memory_type(), VRAM);
    // min_blocks are made at once.
    assert_eq!(objects(&device), 1);
    let empty = allocator.pool_stats(&pool).unwrap();
    assert_eq!(
        (empty.blocks, empty.block_bytes, empty.empty_blocks),
        (1, 8 * MIB, 1)
    );

    let pooled: Vec<_> = (0..4)
        .map(|_| allocator.allocate(&in_pool(pool, MIB)).unwrap())
        .collect();
    let default = allocator
        .allocate(&buffer(MIB, 256, Usage::DEVICE_LOCAL))
        .unwrap();
    let pool_memory: HashSet<_> = pooled.iter().map(|a| a.memory()).collect();
    assert_eq!(pool_memory.len(), 1, "one 8 MiB block holds all four");
    assert!(!pool_memory.contains(&default.memory()));
    assert!(pooled
        .iter()
        .all(|a| a.is_in_custom_pool() && a.memory_type() == VRAM));
    assert!(!default.is_in_custom_pool());
    // Debug names tell the pools' blocks apart, named or not; a quote or a
    // line break in a pool's name is escaped, so the name's end is plain.
    let unnamed = allocator.create_pool(&PoolDesc::new(VRAM)).unwrap();
    let in_unnamed = allocator.allocate(&in_pool(unnamed, MIB)).unwrap();
    let odd = allocator
        .create_pool(&PoolDesc {
            name: Some("say \"hi\"\n"),
            ..PoolDesc::new(VRAM)
        })
        .unwrap();
    let in_odd = allocator.allocate(&in_pool(odd, MIB)).unwrap();
    let mut names: Vec<_> = device
        .live_allocations()
        .into_iter()
        .map(|m| m.name.unwrap())
        .collect();
    names.sort();
    assert_eq!(
        names,
        [
            "vk-suballoc block 1/0",
            "vk-suballoc custom pool block 1/0",
            "vk-suballoc pool \"meshes\" block 1/0",
            r#"vk-suballoc pool "say \"hi\"\n" block 1/0"#
        ]
    );
    free(&allocator, in_odd);
    allocator.destroy_pool(odd).unwrap();
    free(&allocator, in_unnamed);
    allocator.destroy_pool(unnamed).unwrap();

    let stats = allocator.pool_stats(&pool).unwrap();
    assert_eq!((stats.blocks, stats.block_allocations), (1, 4));
    assert_eq!(stats.block_allocated_bytes, 4 * MIB);
    assert_eq!(
        stats.to_string(),
        "type 1 (heap 0): 1 blocks 8.00 MiB (0 empty, 0 being emptied), \
         4 suballocations 4.00 MiB, 0 dedicated 0.00 MiB"
    );
    assert!(format!("{pool:?}").contains("memory_type: 1"), "{pool:?}");
    // The memory type's figures count the pool and the default pool.
    let vram = allocator.stats().memory_types[VRAM as usize];
    assert_eq!(vram.blocks, 2);
    assert_eq!(vram.block_allocations, 5);
    assert_eq!(vram.block_bytes, 8 * MIB + 32 * MIB);
    assert_eq!(allocator.stats().memory_objects, 2);

    for allocation in pooled {
        assert!(allocator.owns(&allocation));
        free(&allocator, allocation);
    }
    free(&allocator, default);
    allocator.destroy_pool(pool).unwrap();
    finish(allocator, &device);
}

#[test]
fn a_full_pool_fails_typed_and_changes_nothing() {
    let (allocator, device) = allocator(FakeLayout::discrete());
    let pool = allocator
        .create_pool(&PoolDesc::new(VRAM).block_size(4 * MIB).max_blocks(2))
        .unwrap();
    assert_eq!(objects(&device), 0, "no min_blocks: no block yet");
    let live: Vec<_> = (0..8)
        .map(|_| allocator.allocate(&in_pool(pool, MIB)).unwrap())
        .collect();
    let before = (allocator.pool_stats(&pool).unwrap(), device.counters());
    assert_eq!(before.0.blocks, 2);
    assert_eq!(
        allocator.allocate(&in_pool(pool, MIB)),
        Err(Error::PoolFull { max_blocks: 2 })
    );
    // Larger than a block: no block of the pool can hold it, full or not,
    // and that is what the error says (freeing would not help).
    assert_eq!(
        allocator.allocate(&in_pool(pool, 4 * MIB + 256)),
        Err(Error::TooLargeForPool {
            size: 4 * MIB + 256,
            block_size: 4 * MIB
        })
    );
    assert_eq!(
        (allocator.pool_stats(&pool).unwrap(), device.counters()),
        before
    );
    // The default pool is not limited by the custom one.
    let outside = allocator
        .allocate(&buffer(MIB, 256, Usage::DEVICE_LOCAL))
        .unwrap();
    free(&allocator, outside);
    for allocation in live {
        free(&allocator, allocation);
    }
    // With room for blocks, a request larger than the fixed size is refused
    // as such.
    assert_eq!(
        allocator.allocate(&in_pool(pool, 4 * MIB + 256)),
        Err(Error::TooLargeForPool {
            size: 4 * MIB + 256,
            block_size: 4 * MIB
        })
    );
    allocator.destroy_pool(pool).unwrap();
    finish(allocator, &device);
}

#[test]
fn min_blocks_are_kept_through_emptying_and_trim() {
    let (allocator, device) = allocator(FakeLayout::discrete());
    let kept = allocator
        .create_pool(&PoolDesc::new(VRAM).block_size(4 * MIB).min_blocks(2))
        .unwrap();
    let growing = allocator
        .create_pool(&PoolDesc::new(VRAM).block_size(4 * MIB))
        .unwrap();
    for pool in [kept, growing] {
        // Three blocks' worth, then all freed.
        let live: Vec<_> = (0..12)
            .map(|_| allocator.allocate(&in_pool(pool, MIB)).unwrap())
            .collect();
        assert_eq!(allocator.pool_stats(&pool).unwrap().blocks, 3);
        for allocation in live {
            free(&allocator, allocation);
        }
    }
    // Emptying keeps min_blocks (2), or one empty block as any pool does.
    assert_eq!(allocator.pool_stats(&kept).unwrap().blocks, 2);
    assert_eq!(allocator.pool_stats(&growing).unwrap().blocks, 1);
    assert_eq!(
        allocator.trim(),
        4 * MIB,
        "only the growing pool's block goes"
    );
    assert_eq!(allocator.pool_stats(&kept).unwrap().blocks, 2);
    assert_eq!(allocator.pool_stats(&growing).unwrap().blocks, 0);
    assert_eq!(objects(&device), 2);
    allocator.destroy_pool(kept).unwrap();
    assert_eq!(objects(&device), 0, "destroy releases min_blocks too");
    allocator.destroy_pool(growing).unwrap();
    finish(allocator, &device);
}

/// A custom pool keeps one empty block, VMA's basic rule, whatever
/// `Config::empty_block_reserve` says for the default pools: with a
/// reserve that keeps every empty block while the type's blocks hold
/// allocations, a pool of three blocks, one still in use, keeps one empty
/// block where a default pool keeps both.
#[test]
fn a_custom_pool_keeps_one_empty_block_whatever_the_reserve() {
    let config = Config {
        empty_block_reserve: f64::INFINITY,
        large_heap_block_size: 4 * MIB,
        ..Config::default()
    };
    let (allocator, device) = allocator_with(FakeLayout::discrete(), config);
    let pool = allocator
        .create_pool(&PoolDesc::new(VRAM).block_size(4 * MIB))
        .unwrap();
    // Three blocks' worth of 1 MiB buffers, all but the first freed.
    let fill = |request: &dyn Fn() -> Request<'static>| {
        let mut live: Vec<_> = (0..12)
            .map(|_| allocator.allocate(&request()).unwrap())
            .collect();
        let first = live.remove(0);
        for allocation in live {
            free(&allocator, allocation);
        }
        first
    };
    let in_the_pool = fill(&|| in_pool(pool, MIB));
    let pool_stats = allocator.pool_stats(&pool).unwrap();
    assert_eq!((pool_stats.blocks, pool_stats.empty_blocks), (2, 1));
    // The default pool of the same type keeps both under this reserve.
    let in_the_default_pool = fill(&|| buffer(MIB, 256, Usage::DEVICE_LOCAL));
    let type_stats = allocator.stats().memory_types[VRAM as usize];
    // The type's figures count the pool's blocks too.
    let (blocks, empty) = (type_stats.blocks - 2, type_stats.empty_blocks - 1);
    assert!(blocks >= 3, "{type_stats:?}");
    assert_eq!(empty, blocks - 1, "{type_stats:?}");
    free(&allocator, in_the_pool);
    free(&allocator, in_the_default_pool);
    allocator.destroy_pool(pool).unwrap();
    finish(allocator, &device);
}

#[test]
fn a_pool_without_a_block_size_grows_as_the_default_pools() {
    let (allocator, device) = allocator(FakeLayout::discrete());
    let pool = allocator.create_pool(&PoolDesc::new(VRAM)).unwrap();
    let first = allocator.allocate(&in_pool(pool, MIB)).unwrap();
    // VMA's sizes: 1/8 of the preferred 256 MiB first.
    assert_eq!(allocator.pool_stats(&pool).unwrap().block_bytes, 32 * MIB);
    free(&allocator, first);
    allocator.destroy_pool(pool).unwrap();
    finish(allocator, &device);
}

#[test]
fn min_blocks_that_cannot_be_made_leave_nothing() {
    let (allocator, device) = allocator(FakeLayout::discrete());
    device.fail_allocation(3, DeviceError::OutOfDeviceMemory);
    let result = allocator.create_pool(&PoolDesc::new(VRAM).block_size(4 * MIB).min_blocks(4));
    assert_eq!(result, Err(Error::OutOfDeviceMemory));
    assert_eq!(objects(&device), 0, "the two blocks made were released");
    assert_eq!(allocator.stats().memory_types[VRAM as usize].blocks, 0);
    finish(allocator, &device);
}

#[test]
fn a_fixed_block_size_is_not_retried_smaller() {
    let (allocator, device) = allocator(FakeLayout::discrete());
    // The heap has room for 6 MiB more: a default pool's block shrinks to
    // fit, a pool's fixed 8 MiB block does not.
    device.cap_heap(0, 6 * MIB);
    let pool = allocator
        .create_pool(&PoolDesc::new(VRAM).block_size(8 * MIB))
        .unwrap();
    assert_eq!(
        allocator.allocate(&in_pool(pool, MIB)),
        Err(Error::OutOfDeviceMemory)
    );
    assert_eq!(device.counters().allocate_calls, 1);
    let shrunk = allocator
        .allocate(&buffer(MIB, 256, Usage::DEVICE_LOCAL))
        .unwrap();
    assert!(allocator.stats().memory_types[VRAM as usize].block_bytes <= 6 * MIB);
    free(&allocator, shrunk);
    allocator.destroy_pool(pool).unwrap();
    finish(allocator, &device);
}
