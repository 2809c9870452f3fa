//! Custom pools at their edges: handles after many pool lifetimes, the
//! last slot, pools made and destroyed while others allocate or wait for
//! the driver, small buffers in a capped pool, error order, lazily
//! allocated and protected types.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Barrier;

use ash::vk;
use vk_suballoc::device::fake::{FakeDevice, FakeLayout};
use vk_suballoc::device::{
    AllocateInfo, AllocationFlags, MemoryDeviceExt, MemoryPropertyFlags as Props, MemoryType,
};
use vk_suballoc::{AllocationDesc, Error, Pool, PoolDesc, Request, ResourceKind, Usage};

use super::{allocator, buffer, finish, free, requirements};

const MIB: u64 = 1 << 20;

/// An upload (host-written) buffer request from `pool`, for a buffer whose
/// `memoryTypeBits` allow `memory_type` only.
fn upload_in(pool: Pool, size: u64, memory_type: u32) -> Request<'static> {
    let desc = AllocationDesc::new(Usage::UPLOAD).pool(pool);
    let requirements = vk::MemoryRequirements {
        size,
        alignment: 4,
        memory_type_bits: 1 << memory_type,
    };
    Request::with_desc(requirements, ResourceKind::Buffer, desc)
}

/// A pool's slot generation is 16 bits: after 65,536 pools made and
/// destroyed in one slot, the slot retires instead of naming a new pool
/// with a destroyed pool's tag. (When it wrapped, the stale handle was
/// served from the new pool whatever its memory type, and the allocation
/// reported the old handle's type: on the mobile layout, memory of the
/// non-coherent type 2 passed for the coherent type 1, so `flush` skipped
/// the flush and the GPU never saw the host's bytes.) No handle of the
/// pools destroyed on the way names the new pool either: the slot's last
/// generation is used once, not by every pool made in the slot after it.
#[test]
fn a_destroyed_pools_handle_stays_stale_after_its_generation_wraps() {
    const COHERENT: u32 = 1;
    const NON_COHERENT: u32 = 2;
    let (allocator, device) = allocator(FakeLayout::mobile());
    let old = allocator.create_pool(&PoolDesc::new(COHERENT)).unwrap();
    allocator.destroy_pool(old).unwrap();
    let destroyed: Vec<Pool> = (0..u16::MAX)
        .map(|_| {
            let pool = allocator.create_pool(&PoolDesc::new(COHERENT)).unwrap();
            allocator.destroy_pool(pool).unwrap();
            pool
        })
        .collect();
    let new = allocator
        .create_pool(&PoolDesc::new(NON_COHERENT).block_size(MIB))
        .unwrap();

    let result = allocator.allocate(&upload_in(old, 100, COHERENT));
    if let Ok(mut allocation) = result {
        let memory = allocation.memory();
        let block_type = device
            .live_allocations()
            .into_iter()
            .find(|m| m.memory == memory)
            .map(|m| m.memory_type);
        allocator
            .mapped_slice_mut(&mut allocation)
            .unwrap()
            .fill(0xAB);
        allocator.flush(&allocation, ..).unwrap();
        // SAFETY: no slice of the allocation is alive.
        let seen = unsafe { device.read(memory, allocation.offset(), 100) }.unwrap();
        let reported = allocation.memory_type();
        free(&allocator, allocation);
        panic!(
            "the destroyed pool's handle was served by the new pool: the allocation \
             says memory type {reported}, its block is of type {block_type:?}; \
             flushes recorded: {}; the GPU sees {:#x} where the host wrote 0xab",
            device.flushed_ranges().len(),
            seen[0]
        );
    }
    assert_eq!(result.err(), Some(Error::StalePool));
    // Nor may the old handle destroy (or read) the new pool.
    assert_eq!(allocator.pool_stats(&old).err(), Some(Error::StalePool));
    assert_eq!(allocator.destroy_pool(old), Err(Error::StalePool));
    for (i, pool) in destroyed.iter().enumerate() {
        assert_eq!(
            allocator.pool_stats(pool).err(),
            Some(Error::StalePool),
            "pool {} of those destroyed after the first: {pool:?}, the new pool {new:?}",
            i + 1
        );
    }
    allocator.destroy_pool(new).unwrap();
    finish(allocator, &device);
}

/// `Allocation` stays 64 bytes (commit 68a371b measured 9-11 ns per
/// allocation when it grew to 72; allocation.rs asserts it at build time
/// too), `Pool` and `Option<Pool>` 8.
#[test]
fn pool_handles_keep_their_sizes() {
    assert_eq!(std::mem::size_of::<vk_suballoc::Allocation>(), 64);
    assert_eq!(std::mem::size_of::<Pool>(), 8);
    assert_eq!(std::mem::size_of::<Option<Pool>>(), 8);
}

/// 2047 pools at once, the last slot's tag included; the 2048th is
/// `TooManyPools`, refused before its `min_blocks` block is made: no
/// `vkAllocateMemory` for a pool that cannot be kept (which, short of
/// memory, would fail as out of memory instead, after releasing the
/// default pools' kept empty blocks for it).
#[test]
fn the_last_pool_slot_works_and_the_next_is_too_many_pools() {
    let (allocator, device) = allocator(FakeLayout::discrete());
    let pools: Vec<Pool> = (0..2047)
        .map(|_| allocator.create_pool(&PoolDesc::new(1)).unwrap())
        .collect();
    let last = *pools.last().unwrap();
    let desc = AllocationDesc::new(Usage::DEVICE_LOCAL).pool(last);
    let request = Request::with_desc(requirements(MIB, 256), ResourceKind::Buffer, desc);
    let allocation = allocator.allocate(&request).unwrap();
    assert!(allocator.owns(&allocation));
    assert_eq!(allocator.pool_stats(&last).unwrap().block_allocations, 1);
    let calls = device.counters().allocate_calls;
    assert_eq!(
        allocator.create_pool(&PoolDesc::new(1).block_size(MIB).min_blocks(1)),
        Err(Error::TooManyPools)
    );
    assert_eq!(device.counters().allocate_calls, calls);
    assert_eq!(
        device.live_allocations().len(),
        1,
        "the refused pool's block"
    );
    free(&allocator, allocation);
    for pool in pools {
        allocator.destroy_pool(pool).unwrap();
    }
    finish(allocator, &device);
}

/// Threads allocating in their own pools while another thread makes and
/// destroys pools: no deadlock, no lost allocation, the device balanced.
#[test]
fn pools_made_and_destroyed_while_others_allocate() {
    let (allocator, device) = allocator(FakeLayout::discrete());
    let stop = AtomicBool::new(false);
    let barrier = Barrier::new(5);
    std::thread::scope(|scope| {
        for _ in 0..4 {
            scope.spawn(|| {
                let pool = allocator
                    .create_pool(&PoolDesc::new(1).block_size(4 * MIB).max_blocks(2))
                    .unwrap();
                barrier.wait();
                while !stop.load(Ordering::Relaxed) {
                    let live: Vec<_> = (0..6)
                        .map(|_| {
                            let desc = AllocationDesc::new(Usage::DEVICE_LOCAL).pool(pool);
                            let request = Request::with_desc(
                                vk::MemoryRequirements {
                                    size: MIB,
                                    alignment: 256,
                                    memory_type_bits: !0,
                                },
                                ResourceKind::Buffer,
                                desc,
                            );
                            allocator.allocate(&request).unwrap()
                        })
                        .collect();
                    let _ = allocator.stats();
                    for allocation in live {
                        free(&allocator, allocation);
                    }
                    allocator.trim();
                }
                allocator.destroy_pool(pool).unwrap();
            });
        }
        scope.spawn(|| {
            barrier.wait();
            for _ in 0..2000 {
                let pool = allocator
                    .create_pool(&PoolDesc::new(1).block_size(MIB).min_blocks(1))
                    .unwrap();
                let _ = allocator.memory_map();
                allocator.destroy_pool(pool).unwrap();
            }
            stop.store(true, Ordering::Relaxed);
        });
    });
    finish(allocator, &device);
}

/// Threads in different pools never wait for each other: one thread's
/// slow `vkAllocateMemory` in pool A, with a `create_pool` waiting for the
/// table's write lock, does not hold up an allocation in pool B that needs
/// no driver call. (When pool calls held the table's read lock through
/// their driver calls, std's `RwLock`, which lets no new reader in while a
/// writer waits, made B wait for A's driver call.)
#[test]
fn a_slow_block_in_one_pool_does_not_hold_up_other_pools() {
    use std::time::{Duration, Instant};
    const DELAY: Duration = Duration::from_millis(600);
    let (allocator, device) = allocator(FakeLayout::discrete());
    let slow = allocator
        .create_pool(&PoolDesc::new(1).block_size(4 * MIB))
        .unwrap();
    let ready = allocator
        .create_pool(&PoolDesc::new(1).block_size(4 * MIB).min_blocks(1))
        .unwrap();
    device.slow_allocations(Some(DELAY));
    let in_ready = std::thread::scope(|scope| {
        let slow_thread = scope.spawn(|| allocator.allocate(&vram_in(slow)).unwrap());
        std::thread::sleep(Duration::from_millis(100));
        let maker = scope.spawn(|| {
            let pool = allocator.create_pool(&PoolDesc::new(1)).unwrap();
            allocator.destroy_pool(pool).unwrap();
        });
        std::thread::sleep(Duration::from_millis(100));
        let start = Instant::now();
        let in_ready = allocator.allocate(&vram_in(ready)).unwrap();
        let waited = start.elapsed();
        let in_slow = slow_thread.join().unwrap();
        maker.join().unwrap();
        free(&allocator, in_slow);
        assert!(
            waited < Duration::from_millis(200),
            "an allocation in a ready block of pool B waited {waited:?} for pool A's \
             vkAllocateMemory ({DELAY:?})"
        );
        in_ready
    });
    device.slow_allocations(None);
    free(&allocator, in_ready);
    allocator.destroy_pool(slow).unwrap();
    allocator.destroy_pool(ready).unwrap();
    finish(allocator, &device);
}

/// A device-local 1 MiB buffer request from `pool`.
fn vram_in(pool: Pool) -> Request<'static> {
    let desc = AllocationDesc::new(Usage::DEVICE_LOCAL).pool(pool);
    Request::with_desc(requirements(MIB, 256), ResourceKind::Buffer, desc)
}

/// A block a plan is emptying, that empties once the pool is down to its
/// `min_blocks`, stays (not retiring any more) and takes requests again;
/// `stats()`, `pool_stats()` and the memory map agree on the pool.
#[test]
fn a_retiring_block_kept_for_min_blocks_serves_requests_again() {
    use vk_suballoc::{DefragmentationLimits, Movable};
    let (allocator, device) = allocator(FakeLayout::discrete());
    let pool = allocator
        .create_pool(&PoolDesc::new(1).block_size(4 * MIB).min_blocks(2))
        .unwrap();
    let all: Vec<_> = (0..12)
        .map(|_| allocator.allocate(&vram_in(pool)).unwrap())
        .collect();
    // Block 0 keeps one buffer (the one to move), block 1 three (the
    // destination, fullest), block 2 two.
    let mut live = Vec::new();
    for (i, allocation) in all.into_iter().enumerate() {
        if [0, 4, 5, 6, 8, 9].contains(&i) {
            live.push(allocation);
        } else {
            free(&allocator, allocation);
        }
    }
    let movables: Vec<_> = live[..1]
        .iter()
        .map(|a| Movable::new(a, requirements(MIB, 256), ResourceKind::Buffer))
        .collect();
    let plan = allocator
        .plan_defragmentation(&movables, &DefragmentationLimits::default())
        .unwrap();
    drop(movables);
    assert_eq!(plan.blocks_released, 1, "{plan:?}");
    assert_eq!(allocator.pool_stats(&pool).unwrap().retiring_blocks, 1);
    // The memory type's figures count the pool's retiring block too.
    assert_eq!(allocator.stats().memory_types[1].retiring_blocks, 1);
    let planned = plan.moves.into_iter().next().unwrap();
    // Meanwhile block 2 empties and trim takes it: the pool is at min_blocks.
    let third_block: Vec<_> = live.drain(4..).collect();
    for allocation in third_block {
        free(&allocator, allocation);
    }
    assert_eq!(allocator.trim(), 4 * MIB);
    let old = std::mem::replace(&mut live[planned.movable], planned.destination);
    free(&allocator, old);
    let stats = allocator.pool_stats(&pool).unwrap();
    assert_eq!(
        (stats.blocks, stats.retiring_blocks, stats.empty_blocks),
        (2, 0, 1)
    );
    // The kept block takes requests again: four more fit in the two blocks.
    let more: Vec<_> = (0..4)
        .map(|_| allocator.allocate(&vram_in(pool)).unwrap())
        .collect();
    assert_eq!(allocator.pool_stats(&pool).unwrap().blocks, 2);
    let map = allocator.memory_map();
    let pool_map = map.custom_pools().next().unwrap();
    assert_eq!(pool_map.blocks.len(), 2);
    assert_eq!(
        allocator.stats().memory_types[1].block_allocations,
        allocator.pool_stats(&pool).unwrap().block_allocations
    );
    for allocation in more.into_iter().chain(live) {
        free(&allocator, allocation);
    }
    allocator.destroy_pool(pool).unwrap();
    finish(allocator, &device);
}

/// A pool capped at one block takes a request that fits beside its live
/// allocations: 32 KiB live and 200 KiB asked of a 256 KiB pool. With run
/// slots, the small buffers carved a 64 KiB run of 16 KiB slots (runs.rs),
/// whose free slots no other size can take, and the pool answered
/// `PoolFull`; capped pools take no runs (as VMA's pools have none).
#[test]
fn small_buffer_runs_do_not_make_a_capped_pool_full() {
    const KIB: u64 = 1 << 10;
    let (allocator, device) = allocator(FakeLayout::discrete());
    let pool = allocator
        .create_pool(&PoolDesc::new(1).block_size(256 * KIB).max_blocks(1))
        .unwrap();
    let request = |size| {
        let desc = AllocationDesc::new(Usage::DEVICE_LOCAL).pool(pool);
        Request::with_desc(requirements(size, 256), ResourceKind::Buffer, desc)
    };
    let small: Vec<_> = (0..2)
        .map(|_| allocator.allocate(&request(16 * KIB)).unwrap())
        .collect();
    let large = allocator.allocate(&request(200 * KIB));
    let stats = allocator.pool_stats(&pool).unwrap();
    let large = large.unwrap_or_else(|error| {
        panic!(
            "{error:?} with {} of {} bytes allocated in the pool's one block",
            stats.block_allocated_bytes, stats.block_bytes
        )
    });
    free(&allocator, large);
    for allocation in small {
        free(&allocator, allocation);
    }
    allocator.destroy_pool(pool).unwrap();
    finish(allocator, &device);
}

/// A request that finds a custom pool in the table while `destroy_pool`
/// releases its blocks, and waits for the pool's lock, is refused with
/// `StalePool` once it gets it: the pool is destroyed, though still in the
/// table. Served, it took a new block in a pool that no handle reaches
/// any more, and leaked it.
#[test]
fn a_request_waiting_for_a_pool_being_destroyed_is_refused() {
    let (allocator, device) = allocator(FakeLayout::discrete());
    let pool = allocator
        .create_pool(&PoolDesc::new(1).block_size(MIB).min_blocks(1))
        .unwrap();
    let objects = device.live_allocations().len();
    // The block's free waits 200 ms before its memory goes, and 200 ms
    // after, under the pool's lock.
    device.slow_frees(Some(std::time::Duration::from_millis(200)));
    let desc = AllocationDesc::new(Usage::DEVICE_LOCAL).pool(pool);
    let request = Request::with_desc(requirements(4096, 256), ResourceKind::Buffer, desc);
    std::thread::scope(|scope| {
        let destroying = scope.spawn(|| allocator.destroy_pool(pool));
        // The block's memory is gone: `destroy_pool` holds the pool's lock
        // a while more. (A request coming after it is refused too.)
        while device.live_allocations().len() == objects {
            std::thread::yield_now();
        }
        let result = allocator.allocate(&request);
        assert_eq!(result.as_ref().err(), Some(&Error::StalePool));
        assert_eq!(destroying.join().unwrap(), Ok(()));
    });
    device.slow_frees(None);
    finish(allocator, &device);
}

/// A pool request is checked in the default path's order: a host-access
/// request larger than the pool's heap is `SizeExceedsHeaps` on both
/// paths, before the pool's type is found not host-visible.
#[test]
fn a_pool_request_checks_in_the_documented_order() {
    let (allocator, device) = allocator(FakeLayout::discrete());
    let pool = allocator.create_pool(&PoolDesc::new(1)).unwrap();
    let huge = vk::MemoryRequirements {
        size: 9 << 30,
        alignment: 256,
        memory_type_bits: 1 << 1,
    };
    let default = allocator.allocate(&Request::new(huge, Usage::UPLOAD, ResourceKind::Buffer));
    assert!(
        matches!(default, Err(Error::SizeExceedsHeaps { .. })),
        "{default:?}"
    );
    let desc = AllocationDesc::new(Usage::UPLOAD).pool(pool);
    let pooled = allocator.allocate(&Request::with_desc(huge, ResourceKind::Buffer, desc));
    assert!(
        matches!(pooled, Err(Error::SizeExceedsHeaps { .. })),
        "{pooled:?}"
    );
    allocator.destroy_pool(pool).unwrap();
    finish(allocator, &device);
}

/// A pool request exactly as large as its heap, or as
/// `maxMemoryAllocationSize`, passes those checks, as on the default
/// path: the heap's size is refused for its usage instead (the VRAM type
/// is not host-visible), and the limit itself takes a block of its size.
#[test]
fn a_pool_request_at_the_heap_size_or_the_allocation_limit_passes_them() {
    const GIB: u64 = 1 << 30;
    let (allocator, device) = allocator(FakeLayout::discrete());
    let pool = allocator.create_pool(&PoolDesc::new(1)).unwrap();
    let in_pool = |size, usage| {
        let desc = AllocationDesc::new(usage).pool(pool);
        Request::with_desc(requirements(size, 256), ResourceKind::Buffer, desc)
    };
    // The VRAM heap: 8 GiB.
    let heap_sized = allocator.allocate(&in_pool(8 * GIB, Usage::READBACK));
    assert!(
        matches!(heap_sized, Err(Error::NoSuitableMemoryType { .. })),
        "{heap_sized:?}"
    );
    let largest = allocator
        .allocate(&in_pool(4 * GIB, Usage::DEVICE_LOCAL))
        .unwrap_or_else(|error| panic!("{error}"));
    assert_eq!(largest.size(), 4 * GIB);
    assert_eq!(allocator.pool_stats(&pool).unwrap().block_bytes, 4 * GIB);
    free(&allocator, largest);
    allocator.destroy_pool(pool).unwrap();
    finish(allocator, &device);
}

/// On a lazily allocated type every pool request takes dedicated memory,
/// so blocks there would never be used: `min_blocks` and `block_size` are
/// refused, and a pool without them serves its requests dedicated.
#[test]
fn a_lazily_allocated_pool_makes_no_blocks() {
    const LAZY: u32 = 3;
    let (allocator, device) = allocator(FakeLayout::mobile());
    for desc in [
        PoolDesc::new(LAZY).min_blocks(1),
        PoolDesc::new(LAZY).block_size(4 * MIB),
    ] {
        let result = allocator.create_pool(&desc);
        assert!(
            matches!(result, Err(Error::InvalidConfig(_))),
            "{desc:?}: {result:?}"
        );
    }
    assert_eq!(device.counters().allocate_calls, 0);
    let pool = allocator.create_pool(&PoolDesc::new(LAZY)).unwrap();
    let desc = AllocationDesc::new(Usage::DEVICE_LOCAL).pool(pool);
    let request = Request::with_desc(requirements(MIB, 256), ResourceKind::OptimalImage, desc);
    let allocation = allocator.allocate(&request).unwrap();
    assert!(allocation.is_dedicated());
    let stats = allocator.pool_stats(&pool).unwrap();
    assert_eq!((stats.blocks, stats.dedicated_allocations), (0, 1));
    free(&allocator, allocation);
    allocator.destroy_pool(pool).unwrap();
    finish(allocator, &device);
}

/// Allocating from a protected memory type without the device's
/// `protectedMemory` feature is invalid
/// (VUID-VkMemoryAllocateInfo-memoryTypeIndex-01872, which the fake device
/// records). Without the feature a custom pool on one is refused before any
/// Vulkan call (the safe `create_pool` passed the type to
/// `vkAllocateMemory`), and a request naming only it gets
/// `NoMemoryTypeBits`. With it, the pool is made and serves a protected
/// resource's requests, while other requests still never use the type.
#[test]
fn a_pool_on_a_protected_type_needs_protected_memory() {
    const PROTECTED: u32 = 5;
    let mut layout = FakeLayout::discrete();
    layout.memory_types.push(MemoryType {
        heap: 0,
        props: Props::DEVICE_LOCAL | Props::PROTECTED,
    });
    let raw = FakeDevice::new(layout.clone());
    let info = AllocateInfo::plain(4096, PROTECTED, AllocationFlags::empty());
    // SAFETY: a fake device; the call is the invalid one under test.
    assert!(unsafe { raw.allocate(&info) }.is_err());
    let violations = raw.violations();
    assert!(
        violations.len() == 1 && violations[0].contains("01872"),
        "{violations:?}"
    );

    let (allocator, device) = allocator(layout.clone());
    for desc in [
        PoolDesc::new(PROTECTED).min_blocks(1),
        PoolDesc::new(PROTECTED),
    ] {
        let result = allocator.create_pool(&desc);
        assert!(
            matches!(result, Err(Error::InvalidConfig(_))),
            "{desc:?}: {result:?}"
        );
    }
    let mut only_protected = buffer(4096, 256, Usage::DEVICE_LOCAL);
    only_protected.requirements.memory_type_bits = 1 << PROTECTED;
    assert_eq!(
        allocator.allocate(&only_protected).err(),
        Some(Error::NoMemoryTypeBits(1 << PROTECTED))
    );
    assert_eq!(device.counters().allocate_calls, 0);
    finish(allocator, &device);

    let (allocator, device) = super::allocator(layout.with_protected_memory(true));
    let pool = allocator
        .create_pool(&PoolDesc::new(PROTECTED).min_blocks(1))
        .unwrap();
    assert_eq!(device.counters().allocate_calls, 1);
    let desc = AllocationDesc::new(Usage::DEVICE_LOCAL).pool(pool);
    let in_pool = Request::with_desc(only_protected.requirements, ResourceKind::Buffer, desc);
    let protected = allocator.allocate(&in_pool).unwrap();
    assert_eq!(protected.memory_type(), PROTECTED);
    // Requests outside the pool never rank it.
    let ordinary = allocator
        .allocate(&buffer(4096, 256, Usage::DEVICE_LOCAL))
        .unwrap();
    assert_eq!(ordinary.memory_type(), 1);
    assert!(matches!(
        allocator.allocate(&only_protected),
        Err(Error::NoSuitableMemoryType { .. })
    ));
    // Nor does `memory_type_for` (and so `memory_type_for_buffer` and
    // `_image`, whose docs say so): never the protected type, even when it
    // is the only one allowed.
    assert_eq!(allocator.memory_type_for(!0, Usage::DEVICE_LOCAL), Ok(1));
    assert_eq!(
        allocator.memory_type_for(1 << PROTECTED, Usage::DEVICE_LOCAL),
        Err(Error::NoSuitableMemoryType {
            memory_type_bits: 1 << PROTECTED,
            usage: Usage::DEVICE_LOCAL
        })
    );
    for allocation in [protected, ordinary] {
        free(&allocator, allocation);
    }
    allocator.destroy_pool(pool).unwrap();
    finish(allocator, &device);
}

/// A request for existing memory only that no block of a fixed-size pool
/// could hold is refused with `TooLargeForPool`, as any other request is:
/// the documented order puts the pool's block size before exhaustion, and
/// no freeing would help, whereas `NoRoomInExistingMemory` says to retry
/// without the flag (which would get `TooLargeForPool`). Before, it got
/// `NoRoomInExistingMemory`. One the pool's blocks could hold still gets
/// that error when they have no room.
#[test]
fn existing_memory_only_too_large_for_a_pool_says_so() {
    let (allocator, device) = allocator(FakeLayout::discrete());
    for min_blocks in [0, 1] {
        let desc = PoolDesc::new(1).block_size(MIB).min_blocks(min_blocks);
        let pool = allocator.create_pool(&desc).unwrap();
        let only = |size: u64| {
            let desc = AllocationDesc::new(Usage::DEVICE_LOCAL)
                .pool(pool)
                .existing_memory_only();
            Request::with_desc(requirements(size, 256), ResourceKind::Buffer, desc)
        };
        let calls = device.counters().allocate_calls;
        assert_eq!(
            allocator.allocate(&only(MIB + 1)),
            Err(Error::TooLargeForPool {
                size: MIB + 256,
                block_size: MIB
            })
        );
        if min_blocks == 0 {
            assert_eq!(
                allocator.allocate(&only(MIB)),
                Err(Error::NoRoomInExistingMemory)
            );
        } else {
            let whole = allocator.allocate(&only(MIB)).unwrap();
            assert_eq!(
                allocator.allocate(&only(256)),
                Err(Error::NoRoomInExistingMemory)
            );
            free(&allocator, whole);
        }
        assert_eq!(device.counters().allocate_calls, calls);
        allocator.destroy_pool(pool).unwrap();
    }
    finish(allocator, &device);
}

/// A request whose bytes fit a fixed-size pool's block, but whose rounding
/// (to the non-coherent atom here, or its alignment, or a granularity page)
/// passes the block's end, takes a block from its start to its end. Before,
/// it was refused as `TooLargeForPool` (1024 bytes for a 1000-byte block),
/// where VMA places it. Its flushes stay within the memory object, smaller
/// requests share blocks as before, and a byte more than a block is still
/// refused.
#[test]
fn a_request_that_fits_a_fixed_block_only_unrounded_is_placed() {
    const CACHED: u32 = 2; // mobile: HOST_VISIBLE | HOST_CACHED, atom 256
    let (allocator, device) = allocator(FakeLayout::mobile());
    let pool = allocator
        .create_pool(&PoolDesc::new(CACHED).block_size(1000))
        .unwrap();
    let whole = [
        allocator.allocate(&upload_in(pool, 1000, CACHED)).unwrap(),
        allocator.allocate(&upload_in(pool, 900, CACHED)).unwrap(),
    ];
    for allocation in &whole {
        assert_eq!(allocation.offset(), 0);
        allocator.flush(allocation, ..).unwrap();
    }
    assert_ne!(whole[0].memory(), whole[1].memory());
    // Smaller requests share blocks as before: 256 placed bytes each
    // (rounded to the atom). Only a request that takes a whole block may
    // pass the last multiple of its rounding: a fourth one, at 768, would
    // end at 1024 and goes to another block.
    let shared = [
        allocator.allocate(&upload_in(pool, 200, CACHED)).unwrap(),
        allocator.allocate(&upload_in(pool, 200, CACHED)).unwrap(),
    ];
    assert_eq!(shared[0].memory(), shared[1].memory());
    // An optimal image takes whole 4096-byte granularity pages in blocks it
    // shares with buffers: in blocks smaller than a page, a block of its own.
    let image = {
        let desc = AllocationDesc::new(Usage::DEVICE_LOCAL).pool(pool);
        let requirements = vk::MemoryRequirements {
            size: 512,
            alignment: 256,
            memory_type_bits: 1 << CACHED,
        };
        let request = Request::with_desc(requirements, ResourceKind::OptimalImage, desc);
        allocator.allocate(&request).unwrap()
    };
    assert_eq!(image.offset(), 0);
    assert_eq!(allocator.pool_stats(&pool).unwrap().blocks, 4);
    assert_eq!(
        allocator.allocate(&upload_in(pool, 1001, CACHED)),
        Err(Error::TooLargeForPool {
            size: 1024,
            block_size: 1000
        })
    );
    assert_eq!(device.violations(), Vec::<String>::new());
    for allocation in whole.into_iter().chain(shared).chain([image]) {
        free(&allocator, allocation);
    }
    allocator.destroy_pool(pool).unwrap();
    finish(allocator, &device);
}

/// A pool of 2000 blocks (its `min_blocks`) goes whole, by `destroy_pool`
/// and by the allocator's drop: every memory object freed, none twice
/// (the fake device checks both). Both were quadratic in the pool's
/// blocks (each block unlinked from the first-fit order in turn); this
/// checks that the batch release still frees each block once.
#[test]
fn a_pool_of_many_blocks_is_released_whole() {
    let (allocator, device) = allocator(FakeLayout::discrete());
    let many = PoolDesc::new(1).block_size(64 << 10).min_blocks(2000);
    let destroyed = allocator.create_pool(&many).unwrap();
    assert_eq!(device.live_allocations().len(), 2000);
    allocator.destroy_pool(destroyed).unwrap();
    assert!(device.live_allocations().is_empty());
    let dropped = allocator.create_pool(&many).unwrap();
    let desc = AllocationDesc::new(Usage::DEVICE_LOCAL).pool(dropped);
    let small = Request::with_desc(requirements(4096, 256), ResourceKind::Buffer, desc);
    let a = allocator.allocate(&small).unwrap();
    assert_eq!(device.live_allocations().len(), 2000);
    free(&allocator, a);
    finish(allocator, &device);
}
