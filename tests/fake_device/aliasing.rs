//! `Allocator::check_alias`: what may be bound into an allocation beside
//! the resource it was made for, on the layouts whose granularity and
//! padding differ. (The ash helpers that create and bind aliases run on
//! lavapipe, in the Vulkan suite.)

use crate::FakeTarget;
use ash::vk;
use vk_suballoc::device::fake::FakeLayout;
use vk_suballoc::{
    AllocationDesc, Config, DedicatedPolicy, DedicatedTarget, Error, PoolDesc, Request,
    ResourceKind, Usage,
};

use super::{allocator, allocator_with, finish, free, requirements, FakeAllocator};

const KIB: u64 = 1024;

// `Error::CannotAlias`'s texts, one per rule `check_alias` documents ("the
// text says why"): a refusal must give the rule the test breaks, not
// another one's.

/// The resource's `memoryTypeBits` exclude the allocation's type.
pub(crate) const OTHER_TYPES: &str =
    "the resource's memoryTypeBits exclude the allocation's memory type";
/// The bound offset is not a multiple of the resource's alignment.
pub(crate) const MISALIGNED: &str =
    "the bound offset is not a multiple of the resource's alignment";
/// Dedicated memory made for its resource.
pub(crate) const TARGETED: &str = "the allocation is dedicated memory made for one resource \
     (VkMemoryDedicatedAllocateInfo): no other may be bound to it";
/// A linear resource and an optimal image would share a page.
pub(crate) const GRANULARITY: &str = "a linear resource and an optimal-tiling image would share a \
     bufferImageGranularity page with the allocation's neighbours: \
     allocate for the optimal image, or dedicated memory";

use ResourceKind::{Buffer, LinearImage, OptimalImage};

/// A device-local allocation of `size` bytes for a `kind` resource.
fn allocation(allocator: &FakeAllocator, size: u64, kind: ResourceKind) -> vk_suballoc::Allocation {
    allocator
        .allocate(&Request::new(
            requirements(size, 256),
            Usage::DEVICE_LOCAL,
            kind,
        ))
        .unwrap()
}

#[test]
fn an_alias_must_fit_the_allocation() {
    let (allocator, device) = allocator(FakeLayout::discrete());
    let image = allocation(&allocator, 64 * KIB, OptimalImage);
    let fits = |offset, size, alignment, bits| {
        let requirements = vk::MemoryRequirements {
            size,
            alignment,
            memory_type_bits: bits,
        };
        allocator.check_alias(&image, offset, &requirements, OptimalImage)
    };
    assert_eq!(fits(0, 64 * KIB, 256, !0), Ok(()));
    assert_eq!(fits(32 * KIB, 32 * KIB, 256, !0), Ok(()));
    assert_eq!(
        fits(32 * KIB, 32 * KIB + 1, 256, !0),
        Err(Error::RangeOutOfBounds {
            start: 32 * KIB,
            end: 64 * KIB + 1,
            size: 64 * KIB
        })
    );
    assert_eq!(
        fits(u64::MAX, 1, 1, !0),
        Err(Error::RangeOutOfBounds {
            start: u64::MAX,
            end: u64::MAX,
            size: 64 * KIB
        })
    );
    assert_eq!(
        fits(256, KIB, 4096, !0),
        Err(Error::CannotAlias(MISALIGNED))
    );
    let other_types = !(1 << image.memory_type());
    assert_eq!(
        fits(0, KIB, 256, other_types),
        Err(Error::CannotAlias(OTHER_TYPES))
    );

    // Bad requirements are refused as every request's are.
    assert_eq!(
        allocator.check_alias(&image, 0, &requirements(0, 256), Buffer),
        Err(Error::ZeroSize)
    );
    assert_eq!(
        allocator.check_alias(&image, 0, &requirements(KIB, 3), Buffer),
        Err(Error::AlignmentNotPowerOfTwo(3))
    );

    let (other, other_device) = super::allocator(FakeLayout::discrete());
    let foreign = allocation(&other, KIB, Buffer);
    let requirements = requirements(KIB, 256);
    assert_eq!(
        allocator.check_alias(&foreign, 0, &requirements, Buffer),
        Err(Error::ForeignAllocation)
    );
    free(&other, foreign);
    finish(other, &other_device);
    free(&allocator, image);
    finish(allocator, &device);
}

/// `bufferImageGranularity` 1024 on the discrete layout: optimal images
/// take whole pages (padded), so a buffer may alias an image's memory; an
/// image may not alias a buffer's, whose neighbours are linear. Unpadded
/// images (in blocks of their own, and in a custom pool where the
/// granularity is not a power of two) take no linear alias.
#[test]
fn granularity_decides_which_kinds_alias() {
    let (allocator, device) = allocator(FakeLayout::discrete());
    let image = allocation(&allocator, 64 * KIB, OptimalImage);
    let buffer = allocation(&allocator, 64 * KIB, Buffer);
    let r = requirements(16 * KIB, 1024);
    for kind in [Buffer, LinearImage, OptimalImage] {
        assert_eq!(
            allocator.check_alias(&image, 0, &r, kind),
            Ok(()),
            "{kind:?}"
        );
    }
    for kind in [Buffer, LinearImage] {
        assert_eq!(
            allocator.check_alias(&buffer, 0, &r, kind),
            Ok(()),
            "{kind:?}"
        );
    }
    assert_eq!(
        allocator.check_alias(&buffer, 0, &r, OptimalImage),
        Err(Error::CannotAlias(GRANULARITY))
    );
    free(&allocator, image);
    free(&allocator, buffer);
    finish(allocator, &device);

    // Images in blocks of their own (no padding): their neighbours are
    // images, so no linear alias either.
    let unpadded = Config {
        max_padded_granularity: 0,
        ..Config::default()
    };
    let (allocator, device) = allocator_with(FakeLayout::discrete(), unpadded);
    let image = allocation(&allocator, 64 * KIB, OptimalImage);
    assert_eq!(
        allocator.check_alias(&image, 0, &r, Buffer),
        Err(Error::CannotAlias(GRANULARITY))
    );
    assert_eq!(allocator.check_alias(&image, 0, &r, OptimalImage), Ok(()));
    // A custom pool pads its images, so it allows it.
    let pool = allocator
        .create_pool(&PoolDesc::new(image.memory_type()))
        .unwrap();
    let desc = AllocationDesc::new(Usage::DEVICE_LOCAL).pool(pool);
    let pooled = allocator
        .allocate(&Request::with_desc(
            requirements(64 * KIB, 256),
            OptimalImage,
            desc,
        ))
        .unwrap();
    assert_eq!(allocator.check_alias(&pooled, 0, &r, Buffer), Ok(()));
    free(&allocator, pooled);
    allocator.destroy_pool(pool).unwrap();
    free(&allocator, image);
    finish(allocator, &device);

    // A granularity that is not a power of two: a custom pool cannot pad
    // to it either, so it keeps its images in blocks of their own, and
    // they take no linear alias there.
    let layout = FakeLayout::discrete().with_granularity(3072);
    let (allocator, device) = allocator_with(layout, Config::default());
    let pool = allocator.create_pool(&PoolDesc::new(1)).unwrap();
    let desc = AllocationDesc::new(Usage::DEVICE_LOCAL).pool(pool);
    let pooled = [64 * KIB, 3 * KIB].map(|size| {
        allocator
            .allocate(&Request::with_desc(
                requirements(size, 1024),
                OptimalImage,
                desc,
            ))
            .unwrap()
    });
    assert_eq!(pooled[0].memory(), pooled[1].memory());
    for kind in [Buffer, LinearImage] {
        assert_eq!(
            allocator.check_alias(&pooled[0], 0, &r, kind),
            Err(Error::CannotAlias(GRANULARITY)),
            "{kind:?}"
        );
    }
    assert_eq!(
        allocator.check_alias(&pooled[0], 0, &r, OptimalImage),
        Ok(())
    );
    for allocation in pooled {
        free(&allocator, allocation);
    }
    allocator.destroy_pool(pool).unwrap();
    finish(allocator, &device);

    // Granularity 1 (the integrated layout): any kind aliases any other.
    let (allocator, device) = super::allocator(FakeLayout::integrated());
    let buffer = allocation(&allocator, 64 * KIB, Buffer);
    assert_eq!(allocator.check_alias(&buffer, 0, &r, OptimalImage), Ok(()));
    free(&allocator, buffer);
    finish(allocator, &device);
}

/// An allocation made for a resource of unknown kind takes whole pages, so
/// any kind may alias it, whether images are padded (1024) or kept in
/// blocks of their own (64 KiB); an alias of unknown kind is linear and
/// optimal at once, so it may alias only such an allocation, a padded
/// optimal image's, or dedicated memory.
#[test]
fn a_resource_of_unknown_kind_aliases_where_both_kinds_would() {
    use ResourceKind::Unknown;
    let r = requirements(KIB, 256);
    for granularity in [1024, 65536] {
        let layout = FakeLayout::discrete().with_granularity(granularity);
        let (allocator, device) = allocator(layout);
        let unknown = allocation(&allocator, 64 * KIB, Unknown);
        let buffer = allocation(&allocator, 64 * KIB, Buffer);
        let image = allocation(&allocator, 64 * KIB, OptimalImage);
        for kind in [Buffer, LinearImage, OptimalImage, Unknown] {
            let context = format!("granularity {granularity}, a {kind:?} alias");
            assert_eq!(
                allocator.check_alias(&unknown, 0, &r, kind),
                Ok(()),
                "{context}"
            );
        }
        assert_eq!(
            allocator.check_alias(&buffer, 0, &r, Unknown),
            Err(Error::CannotAlias(GRANULARITY))
        );
        // Padded at 1024, in blocks of images alone at 64 KiB.
        let padded = granularity <= Config::default().max_padded_granularity;
        let expected = if padded {
            Ok(())
        } else {
            Err(Error::CannotAlias(GRANULARITY))
        };
        assert_eq!(
            allocator.check_alias(&image, 0, &r, Unknown),
            expected,
            "granularity {granularity}"
        );
        for allocation in [unknown, buffer, image] {
            free(&allocator, allocation);
        }
        finish(allocator, &device);
    }
}

/// Dedicated memory has no neighbours, but memory made for one resource
/// (`VkMemoryDedicatedAllocateInfo`) takes no other.
#[test]
fn dedicated_memory_aliases_unless_made_for_its_resource() {
    let (allocator, device) = allocator(FakeLayout::discrete());
    let always = AllocationDesc::new(Usage::DEVICE_LOCAL).dedicated(DedicatedPolicy::Always);
    let untargeted = allocator
        .allocate(&Request::with_desc(
            requirements(64 * KIB, 256),
            Buffer,
            always,
        ))
        .unwrap();
    let resource = device.create_resource();
    let targeted = allocator
        .allocate(
            &Request::with_desc(requirements(64 * KIB, 256), Buffer, always)
                .fake_target(DedicatedTarget::Buffer(vk::Handle::from_raw(resource))),
        )
        .unwrap();
    let r = requirements(16 * KIB, 256);
    assert_eq!(
        allocator.check_alias(&untargeted, 0, &r, OptimalImage),
        Ok(())
    );
    assert_eq!(
        allocator.check_alias(&targeted, 0, &r, Buffer),
        Err(Error::CannotAlias(TARGETED))
    );
    free(&allocator, untargeted);
    free(&allocator, targeted);
    device.destroy_resource(resource);
    finish(allocator, &device);
}

/// An alias handed to `destroy_alias_*_after_frame` is destroyed when its
/// frame is collected, and its allocation stays until freed on its own.
#[test]
fn aliases_are_destroyed_after_their_frame() {
    let (allocator, device) = allocator(FakeLayout::discrete());
    let image = allocation(&allocator, 64 * KIB, OptimalImage);
    let (buffer, alias_image) = (device.create_resource(), device.create_resource());
    assert_eq!(device.live_resources(), 2);
    // SAFETY: fake resources of this device, destroyed by nothing else.
    unsafe {
        allocator.destroy_alias_buffer_after_frame(vk::Handle::from_raw(buffer));
        allocator.destroy_alias_image_after_frame(vk::Handle::from_raw(alias_image));
    }
    allocator.free_after_frame(image).unwrap();
    let fence = super::frames::end_frame(&allocator, &device);
    allocator.collect().unwrap();
    assert_eq!(device.live_resources(), 2, "the frame is not done");
    device.signal_fence(fence);
    let collected = allocator.collect().unwrap();
    assert_eq!(collected.frees, 3);
    assert_eq!(device.live_resources(), 0);
    finish(allocator, &device);
}
