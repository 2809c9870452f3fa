//! A pool's priority reaching its memory objects through the backend,
//! clamped when out of range. With `priority_of`, which reads the
//! priority the fake device was given for a memory object.

use ash::vk;
use vk_suballoc::device::fake::FakeLayout;
use vk_suballoc::{AllocationDesc, DedicatedPolicy, PoolDesc, Request, ResourceKind, Usage};

use super::super::FakeDevice;
use super::super::{allocator, buffer, finish, free, requirements};

use super::{in_pool, MIB, VRAM};

#[test]
fn a_pools_priority_reaches_its_memory_objects() {
    let (allocator, device) = allocator(FakeLayout::discrete());
    let pool = allocator
        .create_pool(&PoolDesc::new(VRAM).min_blocks(1).priority(0.75))
        .unwrap();
    let dedicated = |priority: Option<f32>| {
        let mut desc = AllocationDesc::new(Usage::DEVICE_LOCAL)
            .pool(pool)
            .dedicated(DedicatedPolicy::Always);
        desc.priority = priority;
        let request = Request::with_desc(requirements(MIB, 256), ResourceKind::Buffer, desc);
        allocator.allocate(&request).unwrap()
    };
    let own = dedicated(Some(0.25));
    let inherited = dedicated(None);
    let outside = allocator
        .allocate(&buffer(MIB, 256, Usage::DEVICE_LOCAL))
        .unwrap();
    let block = device
        .live_allocations()
        .into_iter()
        .find(|m| m.dedicated.is_none() && m.memory != outside.memory())
        .unwrap();
    assert_eq!(block.priority, Some(0.75), "the pool's block");
    assert_eq!(priority_of(&device, inherited.memory()), Some(0.75));
    assert_eq!(
        priority_of(&device, own.memory()),
        Some(0.25),
        "the request's own"
    );
    assert_eq!(
        priority_of(&device, outside.memory()),
        None,
        "a default block"
    );
    for allocation in [own, inherited, outside] {
        free(&allocator, allocation);
    }
    allocator.destroy_pool(pool).unwrap();
    finish(allocator, &device);
}

/// The `VK_EXT_memory_priority` priority the backend was handed for
/// `memory`, a live memory object.
fn priority_of(device: &FakeDevice, memory: vk::DeviceMemory) -> Option<f32> {
    device
        .live_allocations()
        .into_iter()
        .find(|m| m.memory == memory)
        .unwrap()
        .priority
}

/// A priority outside `[0, 1]` reaches the backend clamped, and NaN as
/// Vulkan's default 0.5, as `PoolDesc::priority` and
/// `AllocationDesc::priority` say and `AllocateInfo::priority` promises
/// every backend: not only the ash one, which clamped for itself (a
/// backend of the engine's own was handed 2.0 and NaN as they came).
#[test]
fn priorities_out_of_range_reach_the_backend_clamped() {
    let (allocator, device) = allocator(FakeLayout::discrete());
    for (asked, given) in [(2.0, 1.0), (-1.0, 0.0), (f32::NAN, 0.5)] {
        let pool = allocator
            .create_pool(&PoolDesc::new(VRAM).priority(asked))
            .unwrap();
        let block = allocator.allocate(&in_pool(pool, MIB)).unwrap();
        assert_eq!(
            priority_of(&device, block.memory()),
            Some(given),
            "pool {asked}"
        );
        let mut desc = AllocationDesc::new(Usage::DEVICE_LOCAL).dedicated(DedicatedPolicy::Always);
        desc.priority = Some(asked);
        let request = Request::with_desc(requirements(MIB, 256), ResourceKind::Buffer, desc);
        let dedicated = allocator.allocate(&request).unwrap();
        assert_eq!(
            priority_of(&device, dedicated.memory()),
            Some(given),
            "request {asked}"
        );
        free(&allocator, block);
        free(&allocator, dedicated);
        allocator.destroy_pool(pool).unwrap();
    }
    finish(allocator, &device);
}
