//! The create-and-bind helpers when the driver fails `vkCreateBuffer`,
//! `vkCreateImage`, `vkBindBufferMemory` or `vkBindImageMemory` (the
//! fake-memory layer's `fail-create-*` and `fail-bind-*` options), with
//! either out-of-memory result: the caller gets the matching error, the
//! resource made is destroyed (the validation layer reports a buffer or
//! image left alive at device destruction), the memory allocated for it
//! is freed, and the same call succeeds next; and the memory-type queries
//! that make a resource to read its requirements.

use ash::vk;
use vk_suballoc::device::{AshMemoryDevice, DeviceFeatures};
use vk_suballoc::{Allocation, AllocationDesc, Allocator, Error, UploadRingDesc, Usage};

use super::super::allocator_setup::{
    allocator_for, allocator_with, buffer_info, context_features, image_info,
};
use crate::support::{test_each_fake_profile, Advice, ContextOptions, Profile, VulkanContext};

/// A helper that creates (or, for a ring, has the backend create) a
/// resource and binds it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Helper {
    /// `create_buffer`.
    Buffer,
    /// `create_image`.
    Image,
    /// `create_aliasing_buffer`, into an image's allocation.
    AliasingBuffer,
    /// `create_aliasing_image`, into an image's allocation.
    AliasingImage,
    /// `create_upload_ring`: its chunk's buffer, through the ash backend.
    Ring,
}

impl Helper {
    const ALL: [Self; 5] = [
        Self::Buffer,
        Self::Image,
        Self::AliasingBuffer,
        Self::AliasingImage,
        Self::Ring,
    ];

    /// The layer's options for the helper's creation and bind.
    fn options(self) -> [&'static str; 2] {
        match self {
            Self::Buffer | Self::AliasingBuffer | Self::Ring => {
                ["fail-create-buffer", "fail-bind-buffer"]
            }
            Self::Image | Self::AliasingImage => ["fail-create-image", "fail-bind-image"],
        }
    }

    /// Which call of its kind the helper makes: the second for an image
    /// alias, whose target image was made (and bound) first.
    fn nth(self) -> u32 {
        if self == Self::AliasingImage {
            2
        } else {
            1
        }
    }
}

/// What a helper made, to destroy.
enum Made {
    Buffer(vk::Buffer, Allocation),
    Image(vk::Image, Allocation),
    AliasBuffer(vk::Buffer),
    AliasImage(vk::Image),
    Ring(vk_suballoc::UploadRing),
}

/// Runs `helper`; `target` is the allocation an alias goes into.
fn make(
    helper: Helper,
    allocator: &Allocator<AshMemoryDevice>,
    target: Option<&Allocation>,
) -> Result<Made, Error> {
    let desc = AllocationDesc::new(Usage::DEVICE_LOCAL);
    // SAFETY: valid create infos; aliases go into a live allocation at 0,
    // and are destroyed before it is freed.
    unsafe {
        Ok(match (helper, target) {
            (Helper::Buffer, _) => {
                let (buffer, allocation) =
                    allocator.create_buffer(&buffer_info(64 << 10), &desc)?;
                Made::Buffer(buffer, allocation)
            }
            (Helper::Image, _) => {
                let (image, allocation) = allocator.create_image(&image_info(64, 64), &desc)?;
                Made::Image(image, allocation)
            }
            (Helper::AliasingBuffer, Some(target)) => Made::AliasBuffer(
                allocator.create_aliasing_buffer(target, 0, &buffer_info(4096))?,
            ),
            (Helper::AliasingImage, Some(target)) => {
                Made::AliasImage(allocator.create_aliasing_image(target, 0, &image_info(32, 32))?)
            }
            (Helper::Ring, _) => {
                let desc = UploadRingDesc {
                    size: 64 << 10,
                    ..UploadRingDesc::default()
                };
                Made::Ring(allocator.create_upload_ring(&desc)?)
            }
            (_, None) => unreachable!("an alias without its target"),
        })
    }
}

/// Destroys what `make` made.
fn destroy(context: &VulkanContext, allocator: &Allocator<AshMemoryDevice>, made: Made) {
    // SAFETY: nothing was submitted with any of them.
    unsafe {
        match made {
            Made::Buffer(buffer, allocation) => {
                allocator.destroy_buffer(buffer, allocation).unwrap()
            }
            Made::Image(image, allocation) => allocator.destroy_image(image, allocation).unwrap(),
            Made::AliasBuffer(buffer) => context.device.destroy_buffer(buffer, None),
            Made::AliasImage(image) => context.device.destroy_image(image, None),
            Made::Ring(ring) => {
                allocator.destroy_upload_ring(ring).unwrap();
                allocator.collect_idle();
            }
        }
    }
}

/// Runs `helper` with the `nth` call of the layer's `option` failing
/// (`host`: with out of host memory), the driver requiring dedicated
/// memory for every resource when `dedicated`: the error is the driver's,
/// nothing is left (no allocation, no buffer or image, which the
/// validation layer would report at device destruction), and the same
/// call then succeeds.
fn check(profile: Profile, helper: Helper, option: &str, host: bool, dedicated: bool) {
    let what = format!("{profile}: {helper:?}, {option}, host {host}, dedicated {dedicated}");
    let mut options = ContextOptions::default().fail_call(option, helper.nth(), host);
    if dedicated {
        options = options.dedicated("require");
    }
    let context = VulkanContext::with_options(profile, options);
    // The layer fails the call on purpose.
    context.allow(Advice::FailingCalls);
    if dedicated {
        // Small resources each take a memory object, as the driver asks.
        context.allow(Advice::SmallMemory);
    }
    let allocator = allocator_for(&context);
    let target = matches!(helper, Helper::AliasingBuffer | Helper::AliasingImage).then(|| {
        let desc = AllocationDesc::new(Usage::DEVICE_LOCAL);
        // SAFETY: a valid create info.
        unsafe { allocator.create_image(&image_info(64, 64), &desc) }.unwrap()
    });
    let target_allocation = target.as_ref().map(|(_, allocation)| allocation);
    let stats = allocator.stats();
    let expected = if host {
        Error::OutOfHostMemory
    } else {
        Error::OutOfDeviceMemory
    };
    let failed = make(helper, &allocator, target_allocation);
    assert_eq!(failed.as_ref().err(), Some(&expected), "{what}");
    // Nothing allocated is left: a block made for the resource stays,
    // empty, for reuse; dedicated memory is freed.
    let after = allocator.stats();
    assert_eq!(after.allocations(), stats.allocations(), "{what}");
    assert_eq!(after.live_bytes(), stats.live_bytes(), "{what}");
    let dedicated_objects = |stats: &vk_suballoc::report::Stats| -> u64 {
        let types = stats.memory_types.iter();
        types.map(|t| t.dedicated_allocations).sum()
    };
    assert_eq!(
        dedicated_objects(&after),
        dedicated_objects(&stats),
        "{what}"
    );
    if dedicated {
        assert_eq!(after.memory_objects, stats.memory_objects, "{what}");
    }
    let made = make(helper, &allocator, target_allocation)
        .unwrap_or_else(|error| panic!("{what}: again: {error:?}"));
    if dedicated {
        let now = dedicated_objects(&allocator.stats());
        assert!(now > dedicated_objects(&stats), "{what}: not dedicated");
    }
    destroy(&context, &allocator, made);
    if let Some((image, allocation)) = target {
        // SAFETY: its aliases are destroyed; never used.
        unsafe { allocator.destroy_image(image, allocation) }.unwrap();
    }
    drop(allocator);
    context.assert_no_validation_messages();
}

test_each_fake_profile!(
    /// Each helper with its creation, then its bind, failing with out of
    /// device memory, then out of host memory, as [`check`] checks.
    fn a_failed_creation_or_bind_leaves_nothing_behind(profile) {
        for helper in Helper::ALL {
            for option in helper.options() {
                for host in [false, true] {
                    check(profile, helper, option, host, false);
                }
            }
        }
    }
);

/// As `a_failed_creation_or_bind_leaves_nothing_behind`, with the driver
/// requiring dedicated memory: the memory freed after a failed bind is the
/// resource's own memory object. (Aliases refuse such resources before
/// anything is bound.)
#[test]
fn a_failed_bind_frees_the_dedicated_memory_made_for_it() {
    for helper in [Helper::Buffer, Helper::Image, Helper::Ring] {
        for option in helper.options() {
            check(Profile::Discrete, helper, option, false, true);
        }
    }
}

/// Without maintenance4's queries, `memory_type_for_buffer` and
/// `memory_type_for_image` make a resource to read its requirements: when
/// the driver fails that creation, the error is the driver's, nothing is
/// left, and the next query answers.
#[test]
fn a_memory_type_query_whose_resource_creation_fails_returns_the_error() {
    for (option, image) in [("fail-create-buffer", false), ("fail-create-image", true)] {
        let options = ContextOptions::default().fail_call(option, 1, true);
        let context = VulkanContext::with_options(Profile::Discrete, options);
        context.allow(Advice::FailingCalls);
        let features = DeviceFeatures {
            maintenance4: false,
            ..context_features(&context)
        };
        let allocator = allocator_with(&context, features);
        let desc = AllocationDesc::new(Usage::DEVICE_LOCAL);
        // SAFETY: valid create infos.
        let query = || unsafe {
            if image {
                allocator.memory_type_for_image(&image_info(64, 64), desc)
            } else {
                allocator.memory_type_for_buffer(&buffer_info(4096), desc)
            }
        };
        assert_eq!(query(), Err(Error::OutOfHostMemory), "{option}");
        assert!(query().is_ok(), "{option}: the next query");
        drop(allocator);
        context.assert_no_validation_messages();
    }
}
