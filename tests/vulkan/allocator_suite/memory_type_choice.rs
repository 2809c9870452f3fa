//! Memory-type choice on each profile: each usage lands in the type the
//! ranking promises (and `memory_type_for_buffer` / `_for_image` name that
//! type), `AllocationDesc::memory_type_bits` pins a buffer to each type its
//! requirements allow, images land only in types their `memoryTypeBits`
//! allow, and required and preferred property flags pick a type that has
//! them. The profiles' memory types are written out here,
//! apart from the layer's, so a change to either shows.

use ash::vk;
use vk_suballoc::{AllocationDesc, Error, Usage};

use super::super::allocator_setup::{allocator_for, buffer_info, image_info};
use crate::support::{on_custom_device, test_each_profile, Profile, VulkanContext};

use super::buffer;

/// The memory type each usage lands in, per profile (see the layer's profiles).
fn expected_types(profile: Profile) -> [(Usage, u32); 5] {
    let dynamic = Usage::UPLOAD | Usage::DEVICE_LOCAL;
    // Out of VRAM: the system-memory type of the fewest unwanted flags
    // (uncached first) where the profile has one, else the first
    // device-local type.
    let parked = Usage::DEVICE_LOCAL | Usage::PREFER_HOST;
    match profile {
        Profile::Lavapipe => [
            (Usage::DEVICE_LOCAL, 0),
            (Usage::UPLOAD, 0),
            (Usage::READBACK, 0),
            (dynamic, 0),
            (parked, 0),
        ],
        // 0 DL, 1 HV|HC, 2 HV|cached (non-coherent), 3 DL|HV|HC (BAR)
        Profile::Discrete => [
            (Usage::DEVICE_LOCAL, 0),
            (Usage::UPLOAD, 1),
            (Usage::READBACK, 2),
            (dynamic, 3),
            (parked, 1),
        ],
        // 0 DL, 1 DL|HV|HC, 2 DL|HV|HC|cached
        Profile::Integrated => [
            (Usage::DEVICE_LOCAL, 0),
            (Usage::UPLOAD, 1),
            (Usage::READBACK, 2),
            (dynamic, 1),
            (parked, 0),
        ],
        // 0 DL, 1 DL|HV|cached (non-coherent), 2 DL|HV|HC, 3 DL|lazily
        // allocated (transient attachments only: transient_suite.rs)
        Profile::Mobile => [
            (Usage::DEVICE_LOCAL, 0),
            (Usage::UPLOAD, 2),
            (Usage::READBACK, 1),
            (dynamic, 2),
            (parked, 0),
        ],
        // 0 DL, 1 HV|HC, 2 DL|HV|HC (BAR), 3 HV|HC|cached; 4-7 the same
        // with AMD's device-coherent flags, never used without their feature.
        Profile::Amd => [
            (Usage::DEVICE_LOCAL, 0),
            (Usage::UPLOAD, 1),
            (Usage::READBACK, 3),
            (dynamic, 2),
            (parked, 1),
        ],
        // 0 DL, 1 HV|HC, 2 HV|HC|cached, 3 DL|HV|HC (all of VRAM)
        Profile::Rebar => [
            (Usage::DEVICE_LOCAL, 0),
            (Usage::UPLOAD, 1),
            (Usage::READBACK, 2),
            (dynamic, 3),
            (parked, 1),
        ],
        // 0 DL, 1 HV|HC|cached (the only system-memory type), 2 DL|HV|HC
        // (the 256 MiB BAR): staging and readback in system memory, never
        // the BAR; only what the GPU reads often and the host writes goes
        // there.
        Profile::Arc => [
            (Usage::DEVICE_LOCAL, 0),
            (Usage::UPLOAD, 1),
            (Usage::READBACK, 1),
            (dynamic, 2),
            (parked, 1),
        ],
        // 0 DL, 1 DL|HV|cached (non-coherent, listed first), 2
        // DL|HV|HC|cached: host access takes the coherent type.
        Profile::Apple => [
            (Usage::DEVICE_LOCAL, 0),
            (Usage::UPLOAD, 2),
            (Usage::READBACK, 2),
            (dynamic, 2),
            (parked, 0),
        ],
        // 0 DL|HV|HC, 1 DL|HV|HC|cached, 2 DL|lazily allocated: GPU-only
        // data in the uncached host-visible type, readback in the cached one.
        Profile::Mali => [
            (Usage::DEVICE_LOCAL, 0),
            (Usage::UPLOAD, 0),
            (Usage::READBACK, 1),
            (dynamic, 0),
            (parked, 0),
        ],
    }
}

test_each_profile!(
    /// Each usage lands in the memory type the ranking promises.
    fn memory_type_choice_per_usage(profile) {
        let context = VulkanContext::new(profile);
        let allocator = allocator_for(&context);
        let memory = context.memory_properties();
        for (usage, expected) in expected_types(profile) {
            let (handle, allocation) = buffer(&allocator, 4096, AllocationDesc::new(usage));
            if profile == Profile::Lavapipe && on_custom_device() {
                // An unknown device: the chosen type must have what the usage
                // needs; which of several such types is the ranking's choice.
                let flags = memory.memory_types[allocation.memory_type() as usize].property_flags;
                let needed = if usage.needs_host_access() {
                    vk::MemoryPropertyFlags::HOST_VISIBLE
                } else if usage.contains(Usage::PREFER_HOST) {
                    vk::MemoryPropertyFlags::empty()
                } else {
                    vk::MemoryPropertyFlags::DEVICE_LOCAL
                };
                assert!(flags.contains(needed), "{profile} {usage:?}: type {} is {flags:?}", allocation.memory_type());
            } else {
                assert_eq!(allocation.memory_type(), expected, "{profile} {usage:?}");
            }
            if usage.needs_host_access() {
                assert!(allocation.mapped_ptr().is_some(), "{profile} {usage:?}");
            }
            // What a custom pool for such buffers would be made of.
            // SAFETY: a valid create info.
            let for_buffer = unsafe { allocator.memory_type_for_buffer(&buffer_info(4096), usage) };
            assert_eq!(for_buffer, Ok(allocation.memory_type()), "{profile} {usage:?}");
            // SAFETY: never used by the GPU.
            unsafe { allocator.destroy_buffer(handle, allocation) }.unwrap();
        }
        // Images too: the type the query names is the one an image takes.
        let desc = AllocationDesc::new(Usage::DEVICE_LOCAL);
        // SAFETY: a valid create info.
        let (image, allocation) = unsafe { allocator.create_image(&image_info(16, 16), &desc) }.unwrap();
        // SAFETY: as above.
        let for_image = unsafe { allocator.memory_type_for_image(&image_info(16, 16), Usage::DEVICE_LOCAL) };
        assert_eq!(for_image, Ok(allocation.memory_type()), "{profile}");
        // SAFETY: never used by the GPU.
        unsafe { allocator.destroy_image(image, allocation) }.unwrap();
    }
);

test_each_profile!(
    /// `AllocationDesc::memory_type_bits` pins a buffer made by the helper
    /// to each memory type its requirements allow, in turn (but AMD's
    /// device-coherent ones, whose feature is off): the bind is valid in
    /// every one (the validation layer checks it).
    fn memory_type_bits_pin_buffers_to_each_allowed_type(profile) {
        let context = VulkanContext::new(profile);
        let allocator = allocator_for(&context);
        let info = buffer_info(4096);
        let allowed = buffer_type_bits(&context, &info);
        let memory = context.memory_properties();
        let types = allocator.stats().memory_types.len() as u32;
        assert_eq!(types, memory.memory_type_count, "{profile}");
        let amd = vk::MemoryPropertyFlags::DEVICE_COHERENT_AMD;
        let mut pinned = 0;
        for t in (0..types).filter(|t| allowed & (1 << t) != 0) {
            let flags = memory.memory_types[t as usize].property_flags;
            let desc = AllocationDesc::new(Usage::DEVICE_LOCAL).memory_type_bits(1 << t);
            // SAFETY: a valid create info; the buffer is never used.
            let created = unsafe { allocator.create_buffer(&info, &desc) };
            match created {
                Ok((buffer, allocation)) => {
                    assert_eq!(allocation.memory_type(), t, "{profile}");
                    pinned += 1;
                    // SAFETY: never used by the GPU.
                    unsafe { allocator.destroy_buffer(buffer, allocation).unwrap() };
                }
                // AMD's device-coherent types need a feature left off;
                // every other type the buffer allows takes it.
                Err(Error::NoMemoryTypeBits(bits)) if flags.contains(amd) => {
                    assert_eq!(bits, allowed & (1 << t), "{profile}")
                }
                Err(error) => panic!("{profile}: type {t}: {error}"),
            }
        }
        assert!(pinned > 0, "{profile}");
    }
);

test_each_profile!(
    /// Images land only in memory types their `memoryTypeBits` allow, for
    /// every usage that has such a type: device-local images always, and
    /// host-visible ones wherever the image's bits name a host-visible
    /// type the allocator uses (not protected, not AMD's device-coherent);
    /// refused with `NoSuitableMemoryType` only where they name none.
    fn images_stay_in_their_types(profile) {
        let context = VulkanContext::new(profile);
        let allocator = allocator_for(&context);
        let info = image_info(64, 64);
        // SAFETY: a valid create info; the probe image is destroyed below.
        let bits = unsafe {
            let probe = context.device.create_image(&info, None).unwrap();
            let requirements = context.device.get_image_memory_requirements(probe);
            context.device.destroy_image(probe, None);
            requirements.memory_type_bits
        };
        let memory = context.memory_properties();
        let unused = vk::MemoryPropertyFlags::PROTECTED | vk::MemoryPropertyFlags::DEVICE_COHERENT_AMD;
        let host_type = (0..memory.memory_type_count).any(|t| {
            let flags = memory.memory_types[t as usize].property_flags;
            bits & (1 << t) != 0
                && flags.contains(vk::MemoryPropertyFlags::HOST_VISIBLE)
                && !flags.intersects(unused)
        });
        for usage in [Usage::DEVICE_LOCAL, Usage::READBACK, Usage::UPLOAD | Usage::DEVICE_LOCAL] {
            // SAFETY: a valid create info.
            match unsafe { allocator.create_image(&info, &AllocationDesc::new(usage)) } {
                Ok((image, allocation)) => {
                    assert!(bits & (1 << allocation.memory_type()) != 0, "{profile} {usage:?}");
                    // SAFETY: never used by the GPU.
                    unsafe { allocator.destroy_image(image, allocation) }.unwrap();
                }
                Err(error) => assert!(
                    usage != Usage::DEVICE_LOCAL
                        && !host_type
                        && matches!(error, Error::NoSuitableMemoryType { .. }),
                    "{profile} {usage:?}: {error:?} (host-visible type in the bits: {host_type})"
                ),
            }
        }
    }
);

test_each_profile!(
    /// `AllocationDesc::required_flags` and `preferred_flags` with buffers
    /// the helper makes and binds: for each memory type the buffer's
    /// requirements allow, requiring its flags lands the buffer in a type
    /// with all of them (mapped when host-visible), and so does preferring
    /// them, `memory_type_for_buffer` with the description naming that
    /// type (or giving the same error); flags no type has fail with `MissingRequiredFlags` and leave
    /// no buffer behind (the validation layer reports one left at device
    /// destruction).
    fn property_flags_choose_the_type(profile) {
        let context = VulkanContext::new(profile);
        let allocator = allocator_for(&context);
        let memory = context.memory_properties();
        let info = buffer_info(4096);
        let allowed = buffer_type_bits(&context, &info);
        let amd = vk::MemoryPropertyFlags::DEVICE_COHERENT_AMD;
        let lazy = vk::MemoryPropertyFlags::LAZILY_ALLOCATED;
        let mut placed = 0;
        for t in (0..memory.memory_type_count).filter(|t| allowed & (1 << t) != 0) {
            let flags = memory.memory_types[t as usize].property_flags;
            let base = AllocationDesc::new(Usage::DEVICE_LOCAL);
            for desc in [base.required_flags(flags), base.preferred_flags(flags)] {
                // What a custom pool for such buffers would be made of: the
                // type the buffer takes, or the same error.
                // SAFETY: a valid create info.
                let named = unsafe { allocator.memory_type_for_buffer(&info, desc) };
                // SAFETY: a valid create info; the buffer is never used.
                let created = unsafe { allocator.create_buffer(&info, &desc) };
                assert_eq!(
                    named,
                    created.as_ref().map(|(_, allocation)| allocation.memory_type()).map_err(|e| *e),
                    "{profile}: type {t} ({flags:?})"
                );
                match created {
                    Ok((buffer, allocation)) => {
                        let chosen = memory.memory_types[allocation.memory_type() as usize].property_flags;
                        // Preferred AMD flags, with their feature off: the
                        // same type without them.
                        let reachable = flags & !(amd | vk::MemoryPropertyFlags::DEVICE_UNCACHED_AMD);
                        assert!(chosen.contains(reachable), "{profile}: type {t} ({flags:?}): got {chosen:?}");
                        let host_visible = chosen.contains(vk::MemoryPropertyFlags::HOST_VISIBLE);
                        assert_eq!(allocation.mapped_ptr().is_some(), host_visible, "{profile} type {t}");
                        placed += 1;
                        // SAFETY: never used by the GPU.
                        unsafe { allocator.destroy_buffer(buffer, allocation) }.unwrap();
                    }
                    // AMD's device-coherent types (their feature is off) and
                    // lazily allocated ones (transient attachments only).
                    Err(Error::MissingRequiredFlags { .. } | Error::NoSuitableMemoryType { .. })
                        if flags.intersects(amd | lazy) => {}
                    Err(error) => panic!("{profile}: type {t} ({flags:?}): {error}"),
                }
            }
        }
        assert!(placed >= 2, "{profile}");
        let nowhere = vk::MemoryPropertyFlags::HOST_VISIBLE | lazy;
        let desc = AllocationDesc::new(Usage::UPLOAD).required_flags(nowhere);
        // SAFETY: a valid create info.
        let refused = unsafe { allocator.create_buffer(&info, &desc) }.map(|_| ()).unwrap_err();
        assert!(
            matches!(refused, Error::MissingRequiredFlags { required, .. } if required == nowhere),
            "{profile}: {refused:?}"
        );
        assert_eq!(allocator.stats().allocations(), 0, "{profile}");
    }
);

/// The `memoryTypeBits` of a buffer made from `info` (a valid create
/// info), read from a probe buffer destroyed at once.
fn buffer_type_bits(context: &VulkanContext, info: &vk::BufferCreateInfo<'_>) -> u32 {
    // SAFETY: a valid create info; the buffer is only queried.
    unsafe {
        let probe = context.device.create_buffer(info, None).unwrap();
        let bits = context
            .device
            .get_buffer_memory_requirements(probe)
            .memory_type_bits;
        context.device.destroy_buffer(probe, None);
        bits
    }
}
