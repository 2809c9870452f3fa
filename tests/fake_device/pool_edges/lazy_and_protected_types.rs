//! Pools on memory types with special rules: a lazily allocated type,
//! where every request takes dedicated memory so a pool makes no blocks,
//! and a protected type, which needs the device's `protectedMemory`
//! feature (VUID-VkMemoryAllocateInfo-memoryTypeIndex-01872). Apart
//! because both refuse or change a pool by its type's property flags.

use vk_suballoc::device::fake::{FakeDevice, FakeLayout};
use vk_suballoc::device::{
    AllocateInfo, AllocationFlags, MemoryDeviceExt, MemoryPropertyFlags as Props, MemoryType,
};
use vk_suballoc::{AllocationDesc, Error, PoolDesc, Request, ResourceKind, Usage};

use super::super::{allocator, buffer, finish, free, requirements};
use super::MIB;

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
        assert_eq!(
            allocator.create_pool(&desc).err(),
            Some(Error::InvalidConfig(
                "PoolDesc::min_blocks and block_size must be 0 for a lazily allocated memory type"
            )),
            "{desc:?}"
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
    crate::assert_rules(
        &raw.violations(),
        &["VUID-VkMemoryAllocateInfo-memoryTypeIndex-01872"],
        "a protected type",
    );

    let (allocator, device) = allocator(layout.clone());
    for desc in [
        PoolDesc::new(PROTECTED).min_blocks(1),
        PoolDesc::new(PROTECTED),
    ] {
        assert_eq!(
            allocator.create_pool(&desc).err(),
            Some(Error::InvalidConfig(
                "PoolDesc::memory_type is not a memory type this allocator uses"
            )),
            "{desc:?}"
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

    let (allocator, device) = super::super::allocator(layout.with_protected_memory(true));
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
    assert_eq!(
        allocator.allocate(&only_protected).err(),
        Some(Error::NoSuitableMemoryType {
            memory_type_bits: 1 << PROTECTED,
            usage: Usage::DEVICE_LOCAL
        })
    );
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
