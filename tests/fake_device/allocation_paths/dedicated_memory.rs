//! Dedicated memory: for requests past half a block and for the driver's
//! hints, with the resource it is dedicated to and the request's name;
//! always for lazily allocated memory; without a device address when
//! dedicated to an image; not for a request of exactly half a block; and
//! for the driver's requirement whatever the policy.

use crate::FakeTarget;
use vk_suballoc::device::fake::FakeLayout;
use vk_suballoc::device::DedicatedTarget;
use vk_suballoc::{DedicatedHint, DedicatedPolicy, Request, ResourceKind, Usage};

use super::super::{allocator, buffer, finish, free, requirements};

use super::MIB;

#[test]
fn large_requests_and_driver_hints_get_dedicated_memory() {
    let (allocator, device) = allocator(FakeLayout::discrete());
    let large = allocator
        .allocate(&buffer(129 * MIB, 256, Usage::DEVICE_LOCAL))
        .unwrap();
    assert!(large.is_dedicated());
    assert_eq!(large.offset(), 0);
    let target_handle = device.create_resource();
    let target = DedicatedTarget::Buffer(ash::vk::Handle::from_raw(target_handle));
    let preferred = allocator
        .allocate(
            &buffer(4096, 256, Usage::DEVICE_LOCAL)
                .driver_dedicated(DedicatedHint {
                    required: false,
                    preferred: true,
                })
                .fake_target(target)
                .name("preferred"),
        )
        .unwrap();
    assert!(preferred.is_dedicated());
    let info = device
        .live_allocations()
        .into_iter()
        .find(|m| m.memory == preferred.memory())
        .unwrap();
    assert_eq!(info.dedicated, Some(target));
    assert_eq!(info.name.as_deref(), Some("preferred"));
    let never = allocator
        .allocate(&buffer(129 * MIB, 256, Usage::DEVICE_LOCAL).dedicated(DedicatedPolicy::Never))
        .unwrap();
    assert!(!never.is_dedicated());
    let always = allocator
        .allocate(&buffer(256, 256, Usage::DEVICE_LOCAL).dedicated(DedicatedPolicy::Always))
        .unwrap();
    assert!(always.is_dedicated());
    let stats = allocator.stats();
    assert_eq!(stats.memory_types[1].dedicated_allocations, 3);
    for allocation in [large, preferred, never, always] {
        free(&allocator, allocation);
    }
    device.destroy_resource(target_handle);
    finish(allocator, &device);
}

/// Lazily allocated memory is always dedicated (as in VMA): one memory
/// object per transient attachment, even with `DedicatedPolicy::Never`,
/// committed and reported on its own. When no more memory objects can be
/// made, a transient attachment takes a device-local block instead.
#[test]
fn lazily_allocated_memory_is_always_dedicated() {
    // Mobile: 0 DL, 1 DL|HV|HC, 2 DL|HV|cached, 3 DL|lazy; 3 objects.
    let (allocator, device) = allocator(FakeLayout::mobile().with_max_allocation_count(3));
    let transient = |policy| {
        let request = Request::new(
            requirements(MIB, 4096),
            Usage::TRANSIENT,
            ResourceKind::OptimalImage,
        );
        allocator.allocate(&request.dedicated(policy)).unwrap()
    };
    let first = transient(DedicatedPolicy::Auto);
    let second = transient(DedicatedPolicy::Never);
    for a in [&first, &second] {
        assert_eq!((a.memory_type(), a.is_dedicated()), (3, true));
    }
    assert_ne!(first.memory(), second.memory());
    let memory = device.live_allocations();
    assert!(memory.iter().all(|m| m.size == MIB), "{memory:?}");
    // The last memory object is a device-local block; transient
    // attachments then share it.
    let vertices = allocator
        .allocate(&buffer(4096, 256, Usage::DEVICE_LOCAL))
        .unwrap();
    let third = transient(DedicatedPolicy::Auto);
    let fourth = transient(DedicatedPolicy::Auto);
    for a in [&third, &fourth] {
        assert_eq!((a.memory_type(), a.is_dedicated()), (0, false));
        assert_eq!(a.memory(), vertices.memory());
    }
    for a in [first, second, third, fourth, vertices] {
        free(&allocator, a);
    }
    finish(allocator, &device);
}

/// With buffer device address on, blocks and memory dedicated to a buffer
/// are allocated with `VK_MEMORY_ALLOCATE_DEVICE_ADDRESS_BIT` (any buffer in
/// them may take its address); memory dedicated to an image is not, as in
/// VMA.
#[test]
fn memory_dedicated_to_an_image_has_no_device_address() {
    let (allocator, device) = allocator(FakeLayout::discrete());
    let targets = [device.create_resource(), device.create_resource()];
    let image = DedicatedTarget::Image(ash::vk::Handle::from_raw(targets[0]));
    let buffer_target = DedicatedTarget::Buffer(ash::vk::Handle::from_raw(targets[1]));
    let requests = [
        (buffer(4096, 256, Usage::DEVICE_LOCAL), true),
        (
            Request::new(
                requirements(8 * MIB, 4096),
                Usage::DEVICE_LOCAL,
                ResourceKind::OptimalImage,
            )
            .dedicated(DedicatedPolicy::Always)
            .fake_target(image),
            false,
        ),
        (
            buffer(8 * MIB, 256, Usage::DEVICE_LOCAL)
                .dedicated(DedicatedPolicy::Always)
                .fake_target(buffer_target),
            true,
        ),
    ];
    for (request, device_address) in requests {
        let allocation = allocator.allocate(&request).unwrap();
        let info = device
            .live_allocations()
            .into_iter()
            .find(|m| m.memory == allocation.memory())
            .unwrap();
        assert_eq!(info.device_address, device_address, "{request:?}");
        free(&allocator, allocation);
    }
    for target in targets {
        device.destroy_resource(target);
    }
    finish(allocator, &device);
}

/// The dedicated threshold is strict: a request of exactly half the
/// preferred block size (256 MiB for the discrete preset's device-local
/// heap) still goes to a block; a larger one gets dedicated memory.
#[test]
fn exactly_half_a_block_is_not_dedicated() {
    let (allocator, device) = allocator(FakeLayout::discrete());
    let half = allocator
        .allocate(&buffer(128 * MIB, 256, Usage::DEVICE_LOCAL))
        .unwrap();
    assert!(!half.is_dedicated());
    let over = allocator
        .allocate(&buffer(128 * MIB + 256, 256, Usage::DEVICE_LOCAL))
        .unwrap();
    assert!(over.is_dedicated());
    let stats = allocator.stats();
    assert_eq!(stats.memory_types[1].dedicated_allocations, 1);
    free(&allocator, half);
    free(&allocator, over);
    finish(allocator, &device);
}

/// vulkano's `GenericMemoryAllocator` configured without dedicated
/// allocations made none even where the driver required one
/// (vulkano-rs/vulkano PR #2215): memory the resource could never be bound
/// to. Here the driver's requirement outranks `DedicatedPolicy::Never`, in
/// a default pool and in a custom one, existing blocks with room or not,
/// and the memory is dedicated to the resource; the driver's preference
/// alone does not.
#[test]
fn the_drivers_requirement_outranks_a_policy_of_never() {
    let (allocator, device) = allocator(FakeLayout::discrete());
    // A block with room, so that a block would have been the easy answer.
    let filler = allocator
        .allocate(&buffer(4096, 256, Usage::DEVICE_LOCAL))
        .unwrap();
    let pool = allocator
        .create_pool(&vk_suballoc::PoolDesc::new(1).block_size(8 * MIB))
        .unwrap();
    let in_pool = allocator
        .allocate(&Request::with_desc(
            requirements(4096, 256),
            ResourceKind::Buffer,
            vk_suballoc::AllocationDesc::new(Usage::DEVICE_LOCAL).pool(pool),
        ))
        .unwrap();
    let mut live = vec![filler, in_pool];
    for pooled in [false, true] {
        let target_handle = device.create_resource();
        let target = DedicatedTarget::Buffer(ash::vk::Handle::from_raw(target_handle));
        let mut request = buffer(4096, 256, Usage::DEVICE_LOCAL)
            .dedicated(DedicatedPolicy::Never)
            .driver_dedicated(DedicatedHint {
                required: true,
                preferred: true,
            })
            .fake_target(target);
        if pooled {
            request.desc = request.desc.pool(pool);
        }
        let required = allocator.allocate(&request).unwrap();
        assert!(required.is_dedicated(), "pooled {pooled}");
        let info = device
            .live_allocations()
            .into_iter()
            .find(|m| m.memory == required.memory())
            .unwrap();
        assert_eq!(info.dedicated, Some(target), "pooled {pooled}");
        free(&allocator, required);
        device.destroy_resource(target_handle);
        let mut preferred = buffer(4096, 256, Usage::DEVICE_LOCAL)
            .dedicated(DedicatedPolicy::Never)
            .driver_dedicated(DedicatedHint {
                required: false,
                preferred: true,
            });
        if pooled {
            preferred.desc = preferred.desc.pool(pool);
        }
        let preferred = allocator.allocate(&preferred).unwrap();
        assert!(!preferred.is_dedicated(), "pooled {pooled}");
        live.push(preferred);
    }
    for allocation in live {
        free(&allocator, allocation);
    }
    allocator.destroy_pool(pool).unwrap();
    finish(allocator, &device);
}
