//! A pool's `min_alignment` (VMA's `minAllocationAlignment`): every
//! allocation of the pool starts on a multiple of it, small buffers and
//! defragmentation destinations included, whatever the request's own
//! alignment; other pools' allocations are not affected; a value neither 0
//! nor a power of two is refused.

use vk_suballoc::device::fake::FakeLayout;
use vk_suballoc::{
    AllocationDesc, DefragmentationLimits, Error, Movable, PoolDesc, Request, ResourceKind, Usage,
};

use super::super::{allocator, buffer, finish, free, requirements};
use super::{objects, MIB, VRAM};

const KIB: u64 = 1 << 10;

/// A device-local request of `size` bytes aligned to `alignment` from `pool`.
fn aligned_in(
    pool: vk_suballoc::Pool,
    size: u64,
    alignment: u64,
    kind: ResourceKind,
) -> Request<'static> {
    let desc = AllocationDesc::new(Usage::DEVICE_LOCAL).pool(pool);
    Request::with_desc(requirements(size, alignment), kind, desc)
}

#[test]
fn a_min_alignment_not_a_power_of_two_is_refused() {
    let (allocator, device) = allocator(FakeLayout::discrete());
    for bad in [3, 48, 1000, (64 * KIB) + 1] {
        let desc = PoolDesc::new(VRAM).min_blocks(1).min_alignment(bad);
        assert_eq!(
            allocator.create_pool(&desc),
            Err(Error::AlignmentNotPowerOfTwo(bad))
        );
        assert_eq!(objects(&device), 0, "no block made for {bad}");
    }
    let pool = allocator
        .create_pool(&PoolDesc::new(VRAM).min_alignment(0))
        .unwrap();
    allocator.destroy_pool(pool).unwrap();
    finish(allocator, &device);
}

/// Small buffers (run slots elsewhere), mid-sized and large buffers and
/// optimal images, in growing and fixed blocks, all start on 64 KiB; a
/// request aligned past it keeps its own alignment; the default pools'
/// small buffers still pack tightly.
#[test]
fn every_allocation_of_a_pool_starts_on_its_min_alignment() {
    let (allocator, device) = allocator(FakeLayout::discrete());
    let align = 64 * KIB;
    let growing = allocator
        .create_pool(&PoolDesc::new(VRAM).min_alignment(align))
        .unwrap();
    let fixed = allocator
        .create_pool(&PoolDesc::new(VRAM).block_size(MIB).min_alignment(align))
        .unwrap();
    let mut made = Vec::new();
    for pool in [growing, fixed] {
        for (size, alignment, kind) in [
            (100, 16, ResourceKind::Buffer),
            (100, 16, ResourceKind::Buffer),
            (10 * KIB, 256, ResourceKind::Buffer),
            (300 * KIB, 256, ResourceKind::Buffer),
            (300 * KIB, 256, ResourceKind::Buffer),
            (64 * KIB + 4, 1024, ResourceKind::OptimalImage),
            (100, 4, ResourceKind::LinearImage),
        ] {
            let allocation = allocator
                .allocate(&aligned_in(pool, size, alignment, kind))
                .unwrap();
            assert_eq!(
                allocation.offset() % align,
                0,
                "{size} {kind:?}: {allocation:?}"
            );
            made.push(allocation);
        }
        let beyond = allocator
            .allocate(&aligned_in(pool, 4 * KIB, 256 * KIB, ResourceKind::Buffer))
            .unwrap();
        assert_eq!(beyond.offset() % (256 * KIB), 0, "{beyond:?}");
        made.push(beyond);
    }
    // The two 100-byte buffers of a pool do not share 64 KiB.
    assert_ne!(made[0].offset(), made[1].offset());
    let outside: Vec<_> = (0..2)
        .map(|_| {
            allocator
                .allocate(&buffer(100, 16, Usage::DEVICE_LOCAL))
                .unwrap()
        })
        .collect();
    assert_eq!(outside[0].memory(), outside[1].memory());
    assert!(outside[0].offset().abs_diff(outside[1].offset()) < align);
    for allocation in made.into_iter().chain(outside) {
        free(&allocator, allocation);
    }
    allocator.destroy_pool(growing).unwrap();
    allocator.destroy_pool(fixed).unwrap();
    finish(allocator, &device);
}

/// The moves a plan makes in the pool keep its alignment, though the
/// movables list only the resources' own (256): the allocator remembers
/// the pool's. Holes of 100 KiB between 64 KiB-aligned allocations would
/// otherwise take destinations at unaligned offsets.
#[test]
fn defragmentation_destinations_keep_a_pools_min_alignment() {
    let (allocator, device) = allocator(FakeLayout::discrete());
    let align = 64 * KIB;
    let pool = allocator
        .create_pool(&PoolDesc::new(VRAM).block_size(4 * MIB).min_alignment(align))
        .unwrap();
    let size = 100 * KIB;
    // Two blocks of 100 KiB allocations (one per 128 KiB); every other
    // one freed.
    let all: Vec<_> = (0..64)
        .map(|_| {
            allocator
                .allocate(&aligned_in(pool, size, 256, ResourceKind::Buffer))
                .unwrap()
        })
        .collect();
    assert_eq!(allocator.pool_stats(&pool).unwrap().blocks, 2);
    let mut live = Vec::new();
    for (i, allocation) in all.into_iter().enumerate() {
        if i % 2 == 0 && i >= 32 || i % 4 == 0 {
            live.push(allocation);
        } else {
            free(&allocator, allocation);
        }
    }
    let movables: Vec<_> = live
        .iter()
        .map(|a| Movable::new(a, requirements(size, 256), ResourceKind::Buffer))
        .collect();
    let limits = DefragmentationLimits::default().compact_blocks(true);
    let plan = allocator.plan_defragmentation(&movables, &limits).unwrap();
    drop(movables);
    assert!(!plan.moves.is_empty(), "{plan:?}");
    for planned in &plan.moves {
        let destination = &planned.destination;
        assert_eq!(destination.offset() % align, 0, "{destination:?}");
    }
    for planned in plan.moves {
        let old = std::mem::replace(&mut live[planned.movable], planned.destination);
        free(&allocator, old);
    }
    for allocation in live {
        free(&allocator, allocation);
    }
    allocator.destroy_pool(pool).unwrap();
    finish(allocator, &device);
}

/// `allocate_many` sees a request as the pool places it, its alignment
/// raised to the pool's: the same `TooLargeForPool` as `allocate`, its
/// size rounded to 4 KiB (the most a placed size is rounded to), made
/// before anything is placed.
#[test]
fn allocate_many_checks_a_request_with_the_pools_alignment() {
    let (allocator, device) = allocator(FakeLayout::discrete());
    let pool = allocator
        .create_pool(&PoolDesc::new(VRAM).block_size(MIB).min_alignment(64 * KIB))
        .unwrap();
    let too_large = aligned_in(pool, MIB + 1, 256, ResourceKind::Buffer);
    let expected = Error::TooLargeForPool {
        size: MIB + 4 * KIB,
        block_size: MIB,
    };
    assert_eq!(allocator.allocate(&too_large), Err(expected));
    let fits = aligned_in(pool, 4 * KIB, 256, ResourceKind::Buffer);
    assert_eq!(
        allocator.allocate_many(&[fits, too_large]).map(|_| ()),
        Err(expected)
    );
    assert_eq!(objects(&device), 0);
    allocator.destroy_pool(pool).unwrap();
    finish(allocator, &device);
}
