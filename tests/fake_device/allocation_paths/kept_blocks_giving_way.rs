//! Kept empty blocks giving way to a request short of memory (the driver's
//! object count, a heap or its budget, a custom pool's block or its
//! `min_blocks`): all but the largest go first, then the largest, in the
//! heap that lacks memory only, and none for a refusal that is not for want
//! of memory.

use ash::vk;
use vk_suballoc::device::fake::FakeLayout;
use vk_suballoc::device::DeviceError;
use vk_suballoc::{
    Allocation, AllocationDesc, Config, DedicatedPolicy, Error, PoolDesc, Request, ResourceKind,
    Usage,
};

use super::super::frames::free_all_and_finish;
use super::super::{allocator, allocator_with, buffer, finish, free, requirements, FakeAllocator};

use super::{free_all, twenty_mib_buffers, MIB};

#[path = "kept_blocks_giving_way/custom_pools.rs"]
mod custom_pools;

/// Kept empty blocks give way to a request short of memory: each default
/// pool's empty blocks but the largest are released and the request is
/// tried again, whether the driver's object count, the heap's budget or a
/// custom pool's new block was what it lacked.
#[test]
fn kept_empty_blocks_give_way_to_a_request_short_of_memory() {
    // Blocks of 64, 128 and three of 256 MiB, the last two empty and kept.
    // With `vram_budget`, the VRAM heap's budget is set after, and read.
    let setup = |layout: FakeLayout, vram_budget: Option<u64>| {
        let (allocator, device) = allocator(layout);
        let long_lived = twenty_mib_buffers(&allocator, 15);
        let transient = twenty_mib_buffers(&allocator, 30);
        free_all(&allocator, transient);
        assert_eq!(allocator.stats().memory_types[1].empty_blocks, 2);
        assert_eq!(device.live_allocations().len(), 5);
        if let Some(budget) = vram_budget {
            device.set_heap_budget(0, budget, 0);
            allocator.budgets(); // the allocator's checks read the new budget
        }
        (allocator, device, long_lived)
    };
    // `pool_blocks`: bytes of custom pool blocks, counted in their type.
    let released_one = |allocator: &FakeAllocator, case: &str, pool_blocks: u64| {
        let stats = allocator.stats();
        assert_eq!(stats.memory_types[1].empty_blocks, 1, "{case}");
        assert_eq!(
            stats.memory_types[1].block_bytes,
            (64 + 128 + 2 * 256) * MIB + pool_blocks,
            "{case}"
        );
    };

    // maxMemoryAllocationCount 5: an upload buffer needs a sixth object
    // (no host-visible type has a block), which one kept block makes room
    // for.
    let (allocator, device, long_lived) =
        setup(FakeLayout::discrete().with_max_allocation_count(5), None);
    let upload = allocator
        .allocate(&buffer(MIB, 256, Usage::UPLOAD))
        .unwrap();
    assert_eq!(upload.memory_type(), 2);
    released_one(&allocator, "object count", 0);
    free_all_and_finish(allocator, &device, long_lived.into_iter().chain([upload]));

    // A 1100 MiB budget on the VRAM heap: 960 MiB of blocks leave no room
    // for a 300 MiB dedicated buffer (larger than any block) asked within
    // budget, unless a kept block goes.
    let (allocator, device, long_lived) = setup(FakeLayout::discrete(), Some(1100 * MIB));
    let large = allocator
        .allocate(&buffer(300 * MIB, 256, Usage::DEVICE_LOCAL).within_budget())
        .unwrap();
    assert!(large.is_dedicated());
    released_one(&allocator, "budget", 0);
    free_all_and_finish(allocator, &device, long_lived.into_iter().chain([large]));

    // The same budget, and a custom pool of 200 MiB blocks making its first.
    let (allocator, device, long_lived) = setup(FakeLayout::discrete(), Some(1100 * MIB));
    let pool = allocator
        .create_pool(&PoolDesc::new(1).block_size(200 * MIB))
        .unwrap();
    let desc = AllocationDesc::new(Usage::DEVICE_LOCAL)
        .pool(pool)
        .within_budget();
    let in_pool = allocator
        .allocate(&Request::with_desc(
            requirements(MIB, 256),
            ResourceKind::Buffer,
            desc,
        ))
        .unwrap();
    released_one(&allocator, "custom pool", 200 * MIB);
    free(&allocator, in_pool);
    allocator.destroy_pool(pool).unwrap();
    free_all_and_finish(allocator, &device, long_lived);
}

/// Kept empty blocks give way to a request short of memory in any of its
/// memory types, not only in the first it tries: here the first type's
/// new block cannot be mapped (`MapFailed`, no want of memory), and the
/// next type's heap is full of kept empty blocks. VMA's rule (0.0) keeps
/// one, and leaves room.
#[test]
fn kept_empty_blocks_give_way_after_a_first_type_that_failed_otherwise() {
    // UPLOAD memory in type 2 (the 16 GiB system heap) or 4 (the 256 MiB BAR).
    let bar_or_system = |size: u64| {
        let mut request = buffer(size, 256, Usage::UPLOAD);
        request.requirements.memory_type_bits = 1 << 2 | 1 << 4;
        request
    };
    let in_bar = |size: u64| {
        let mut request = buffer(size, 256, Usage::UPLOAD);
        request.requirements.memory_type_bits = 1 << 4;
        request
    };
    for reserve in [1.0, 0.0] {
        let config = Config {
            empty_block_reserve: reserve,
            ..Config::default()
        };
        let (allocator, device) = allocator_with(FakeLayout::discrete(), config);
        // The BAR's blocks: 16 and 32 MiB in use, two of 32 emptied.
        let long_lived: Vec<Allocation> = (0..6)
            .map(|_| allocator.allocate(&in_bar(8 * MIB)).unwrap())
            .collect();
        let transient: Vec<Allocation> = (0..8)
            .map(|_| allocator.allocate(&in_bar(8 * MIB)).unwrap())
            .collect();
        free_all(&allocator, transient);
        let kept = if reserve > 0.0 { 2 } else { 1 };
        assert_eq!(allocator.stats().memory_types[4].empty_blocks, kept);
        // Room for 40 MiB beside one kept empty block, not beside two.
        device.cap_heap(2, 120 * MIB);
        device.fail_map(1);
        let a = allocator
            .allocate(&bar_or_system(40 * MIB))
            .unwrap_or_else(|error| panic!("reserve {reserve}: {error}"));
        assert_eq!(a.memory_type(), 4, "reserve {reserve}");
        assert_eq!(allocator.stats().memory_types[4].empty_blocks, 1);
        free(&allocator, a);
        free_all(&allocator, long_lived);
        finish(allocator, &device);
    }
}

/// `count` 20 MiB upload buffers, in the system heap's upload type (2).
fn twenty_mib_uploads(allocator: &FakeAllocator, count: usize) -> Vec<Allocation> {
    (0..count)
        .map(|_| {
            allocator
                .allocate(&buffer(20 * MIB, 256, Usage::UPLOAD))
                .unwrap()
        })
        .collect()
}

/// Blocks of 64, 128 and three of 256 MiB in the upload type (2), the last
/// two empty and kept: 960 MiB of the system heap (1). Returns the
/// allocations in the others.
fn kept_upload_blocks(allocator: &FakeAllocator) -> Vec<Allocation> {
    let long_lived = twenty_mib_uploads(allocator, 15);
    free_all(allocator, twenty_mib_uploads(allocator, 30));
    assert_eq!(allocator.stats().memory_types[2].empty_blocks, 2);
    long_lived
}

/// A 300 MiB upload buffer, larger than any block (dedicated memory), in
/// the upload type (2) or the cached one (3): both in the system heap.
fn large_upload() -> Request<'static> {
    let mut request = buffer(300 * MIB, 256, Usage::UPLOAD);
    request.requirements.memory_type_bits = 1 << 2 | 1 << 3;
    request
}

/// Places [`large_upload`] and checks that it landed in `memory_type` and
/// that the upload type (2) keeps `empty_blocks` kept empty blocks after it.
fn large_upload_lands_in(
    allocator: &FakeAllocator,
    memory_type: u32,
    empty_blocks: u64,
) -> Allocation {
    let large = allocator
        .allocate(&large_upload())
        .unwrap_or_else(|error| panic!("{error}"));
    assert_eq!(large.memory_type(), memory_type);
    assert_eq!(allocator.stats().memory_types[2].empty_blocks, empty_blocks);
    large
}

/// When releasing the kept empty blocks but the largest leaves a request
/// still short of memory, the largest goes too and the request is tried
/// again in its first memory type: it neither fails nor leaves that type.
#[test]
fn every_kept_empty_block_gives_way_when_all_but_the_largest_are_not_enough() {
    let (allocator, device) = allocator(FakeLayout::discrete());
    let long_lived = kept_upload_blocks(&allocator);
    // 300 MiB fit beside the blocks in use (448 MiB), not beside one kept
    // block more (704).
    device.cap_heap(1, 800 * MIB);
    let large = large_upload_lands_in(&allocator, 2, 0);
    assert!(large.is_dedicated());
    free_all_and_finish(allocator, &device, long_lived.into_iter().chain([large]));
}

/// A memory type tried again once its kept empty blocks but the largest
/// are released, that fails then otherwise than for want of memory
/// (`MapFailed`), gives the request to the next type: its largest kept
/// block stays, as no want of memory asked for it.
#[test]
fn a_type_that_fails_otherwise_once_kept_blocks_went_keeps_its_largest() {
    let (allocator, device) = allocator(FakeLayout::discrete());
    let long_lived = kept_upload_blocks(&allocator);
    // 300 MiB fit beside one kept block (704 MiB), not beside two (960).
    device.cap_heap(1, 1100 * MIB);
    // The retry's memory objects, the first two mapped from now: its
    // dedicated memory, then the new block the type tries when dedicated
    // memory cannot be mapped.
    device.fail_map(1);
    device.fail_map(2);
    let large = large_upload_lands_in(&allocator, 3, 1);
    assert!(large.mapped_ptr().is_some());
    free_all_and_finish(allocator, &device, long_lived.into_iter().chain([large]));
}

/// The largest kept empty block a memory type's failed retry left (it
/// failed otherwise, `MapFailed`) gives way when the next type of its heap
/// lacks memory: that type is tried again without it. Before, the heap's
/// types counted as released once those beyond the largest went, and the
/// request failed with the largest kept. The driver's refusals are its
/// own here: the fake heap's cap has room for the next type, but a driver
/// may refuse memory a heap's bytes would allow (fragmentation, another
/// process's allocation).
#[test]
fn the_largest_kept_block_left_by_a_type_that_failed_otherwise_gives_way_later() {
    let (allocator, device) = allocator(FakeLayout::discrete());
    let long_lived = kept_upload_blocks(&allocator);
    device.cap_heap(1, 1100 * MIB);
    // The first type's retry cannot map its dedicated memory nor its new
    // block (calls 3 and 4); the next type's dedicated memory and block
    // (calls 5 and 6) are refused.
    device.fail_map(1);
    device.fail_map(2);
    device.fail_allocation(5, DeviceError::OutOfDeviceMemory);
    device.fail_allocation(6, DeviceError::OutOfDeviceMemory);
    let large = large_upload_lands_in(&allocator, 3, 0);
    free_all_and_finish(allocator, &device, long_lived.into_iter().chain([large]));
}

/// A memory type tried again once kept empty blocks are released, that
/// fails then with an error no new memory object would mend (the host out
/// of memory), ends the request with that error: no other memory object
/// is asked for, and the next type (3) has no existing block to take it.
#[test]
fn a_retry_after_releasing_kept_blocks_that_fails_for_good_ends_the_request() {
    let (allocator, device) = allocator(FakeLayout::discrete());
    let long_lived = kept_upload_blocks(&allocator);
    device.cap_heap(1, 1100 * MIB);
    // The first two calls (dedicated memory, then a block of its size)
    // fail for the cap; the third is the retry's dedicated memory.
    device.fail_allocation(3, DeviceError::OutOfHostMemory);
    let calls = device.counters().allocate_calls;
    let result = allocator.allocate(&large_upload());
    assert_eq!(result.err(), Some(Error::OutOfHostMemory));
    assert_eq!(device.counters().allocate_calls, calls + 3);
    assert_eq!(allocator.stats().memory_types[2].empty_blocks, 1);
    free_all_and_finish(allocator, &device, long_lived);
}

/// A request refused otherwise than for want of memory releases no kept
/// empty block: for existing memory only, fitting none, or one whose
/// first type cannot map its memory, taken by the next type.
#[test]
fn a_refusal_not_for_want_of_memory_releases_no_kept_block() {
    let (allocator, device) = allocator(FakeLayout::discrete());
    let long_lived = kept_upload_blocks(&allocator);
    let result = allocator.allocate(&large_upload().existing_memory_only());
    assert_eq!(result.err(), Some(Error::NoRoomInExistingMemory));
    assert_eq!(allocator.stats().memory_types[2].empty_blocks, 2);
    // The first type's dedicated memory, then its block.
    device.fail_map(1);
    device.fail_map(2);
    let large = large_upload_lands_in(&allocator, 3, 2);
    free_all_and_finish(allocator, &device, long_lived.into_iter().chain([large]));
}

/// A heap short of memory or budget releases the kept empty blocks of its
/// own memory types only: those of another heap do not stand in its way.
#[test]
fn a_heap_short_of_budget_releases_its_own_kept_blocks_only() {
    let (allocator, device) = allocator(FakeLayout::discrete());
    let upload = |count| -> Vec<Allocation> {
        (0..count)
            .map(|_| {
                allocator
                    .allocate(&buffer(20 * MIB, 256, Usage::UPLOAD))
                    .unwrap()
            })
            .collect()
    };
    // Two kept empty blocks in the VRAM type (1) and in the system-memory
    // upload type (2, another heap).
    let long_lived = twenty_mib_buffers(&allocator, 15);
    let long_lived_upload = upload(15);
    free_all(&allocator, twenty_mib_buffers(&allocator, 30));
    free_all(&allocator, upload(30));
    let empty = |t: usize| allocator.stats().memory_types[t].empty_blocks;
    assert_eq!((empty(1), empty(2)), (2, 2));
    // The VRAM heap's budget leaves no room for a 300 MiB dedicated buffer
    // unless a VRAM block goes.
    device.set_heap_budget(0, 1100 * MIB, 0);
    allocator.budgets();
    let large = allocator
        .allocate(&buffer(300 * MIB, 256, Usage::DEVICE_LOCAL).within_budget())
        .unwrap();
    assert_eq!((empty(1), empty(2)), (1, 2));
    let live = long_lived.into_iter().chain(long_lived_upload);
    free_all_and_finish(allocator, &device, live.chain([large]));
}

/// A request that no block of its memory type could ever hold, once
/// rounded as a block places it (to its 4096-byte alignment, past the end
/// of a heap that alignment does not divide, or past
/// `maxMemoryAllocationSize`), and that may not take dedicated memory of
/// its own size (a custom pool's request, or `DedicatedPolicy::Never`),
/// fails at once with the error that says it never fits, makes no Vulkan
/// call and releases no kept empty block. Before, it failed with
/// `OutOfDeviceMemory` ("free memory and retry") after releasing the empty
/// blocks of every memory type of its heap, which could not have helped.
/// A request that may take dedicated memory still does, once a kept block
/// gives way when the heap lacks room for it.
#[test]
fn a_request_no_block_could_hold_releases_no_kept_block() {
    let heap = 256 * MIB + 1000;
    let mut layout = FakeLayout::discrete().with_heap_size(2, heap);
    layout.max_memory_allocation_size = 512 * MIB + 1000;
    let (allocator, device) = allocator(layout);
    // An empty block kept in the BAR type (4, heap 2) and in VRAM (1).
    let small = |memory_type: u32| {
        let mut request = buffer(MIB, 256, Usage::DEVICE_LOCAL);
        request.requirements.memory_type_bits = 1 << memory_type;
        request
    };
    for memory_type in [4, 1] {
        free(&allocator, allocator.allocate(&small(memory_type)).unwrap());
    }
    let kept = |allocator: &FakeAllocator| {
        let stats = allocator.stats();
        (
            stats.memory_types[4].empty_blocks,
            stats.memory_types[1].empty_blocks,
        )
    };
    assert_eq!(kept(&allocator), (1, 1));
    let unrounded = |memory_type: u32, size: u64| vk::MemoryRequirements {
        size,
        alignment: 4096,
        memory_type_bits: 1 << memory_type,
    };
    let cases = [
        (
            4,
            unrounded(4, heap - 500),
            Error::SizeExceedsHeaps {
                size: (heap - 500).next_multiple_of(4096),
                largest_heap: heap,
            },
        ),
        (
            1,
            unrounded(1, 512 * MIB + 500),
            Error::SizeExceedsMaxAllocation {
                size: 512 * MIB + 4096,
                max: 512 * MIB + 1000,
            },
        ),
    ];
    for (memory_type, requirements, too_large) in cases {
        let pool = allocator.create_pool(&PoolDesc::new(memory_type)).unwrap();
        let in_pool = Request::with_desc(
            requirements,
            ResourceKind::Buffer,
            AllocationDesc::new(Usage::DEVICE_LOCAL).pool(pool),
        );
        let never = Request::new(requirements, Usage::DEVICE_LOCAL, ResourceKind::Buffer)
            .dedicated(DedicatedPolicy::Never);
        let before = device.counters();
        assert_eq!(allocator.allocate(&in_pool).err(), Some(too_large));
        assert_eq!(
            allocator.allocate_many(&[in_pool]).err(),
            Some(too_large),
            "type {memory_type}"
        );
        assert_eq!(allocator.allocate(&never).err(), Some(too_large));
        // For existing memory only, too, as a fixed block size is said.
        for request in [in_pool, never] {
            let existing = request.existing_memory_only();
            assert_eq!(allocator.allocate(&existing).err(), Some(too_large));
        }
        let after = device.counters();
        assert_eq!(kept(&allocator), (1, 1), "type {memory_type}");
        assert_eq!(
            (after.allocate_calls, after.frees),
            (before.allocate_calls, before.frees),
            "type {memory_type}"
        );
        allocator.destroy_pool(pool).unwrap();
    }
    // Dedicated memory of its own size fits the heap once the kept BAR
    // block gives way.
    let request = Request::new(cases[0].1, Usage::DEVICE_LOCAL, ResourceKind::Buffer);
    let dedicated = allocator
        .allocate(&request)
        .unwrap_or_else(|error| panic!("{error}"));
    assert!(dedicated.is_dedicated());
    assert_eq!(kept(&allocator), (0, 1));
    free(&allocator, dedicated);
    finish(allocator, &device);
}

/// A retry that the object count refuses, once the kept blocks of a heap
/// short of budget gave way, releases the kept blocks of every heap and
/// is tried again, as a first refusal at `maxMemoryAllocationCount` does:
/// objects are counted device-wide, and a kept block of another heap is
/// one the request may need. The driver answers `VK_ERROR_TOO_MANY_OBJECTS`
/// below the allocator's own count when memory objects it did not make
/// (another library's, on the same device) take the rest; so may a
/// thread that takes the objects the release freed. Before, the retry's
/// `TooManyObjects` ended the request, a default pool's or a custom
/// pool's, with the system-memory upload block still kept.
#[test]
fn a_retry_refused_at_the_object_limit_releases_every_heaps_kept_blocks() {
    let only = |memory_type: u32, size: u64, usage: Usage| {
        let mut request = buffer(size, 256, usage).dedicated(DedicatedPolicy::Never);
        request.requirements.memory_type_bits = 1 << memory_type;
        request
    };
    let kept = |allocator: &FakeAllocator| {
        let stats = allocator.stats();
        let empty = |t: usize| stats.memory_types[t].empty_blocks;
        (empty(1), empty(2))
    };
    for in_pool in [false, true] {
        let (allocator, device) = allocator(FakeLayout::discrete());
        // A 32 MiB block kept empty in VRAM (type 1) and one in system
        // memory (type 2, heap 1).
        for (memory_type, usage) in [(1, Usage::DEVICE_LOCAL), (2, Usage::UPLOAD)] {
            let small = allocator.allocate(&only(memory_type, MIB, usage)).unwrap();
            free(&allocator, small);
        }
        assert_eq!(kept(&allocator), (1, 1));
        let pool = allocator.create_pool(&PoolDesc::new(1)).unwrap();
        let mut request = only(1, 100 * MIB, Usage::DEVICE_LOCAL);
        if in_pool {
            request.desc = request.desc.pool(pool);
        }
        // VRAM's budget holds a 128 MiB block only once the kept one goes.
        device.set_heap_budget(0, 159 * MIB, 0);
        allocator.budgets();
        // The first call, for that block once the VRAM block went, finds
        // the device's objects taken.
        device.fail_allocation(1, DeviceError::TooManyObjects);
        let large = allocator
            .allocate(&request)
            .unwrap_or_else(|error| panic!("in a pool: {in_pool}: {error}"));
        assert_eq!(large.memory_type(), 1);
        assert_eq!(kept(&allocator), (0, 0), "in a pool: {in_pool}");
        free(&allocator, large);
        allocator.destroy_pool(pool).unwrap();
        finish(allocator, &device);
    }
}
