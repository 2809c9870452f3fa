//! The type bits and alignments of every memory requirements query on each
//! fake profile: buffers and images, lazily allocated types for transient
//! attachments only, host-pointer imports, linear images, and image
//! alignments by size and tiling as the modelled drivers align them.

use ash::vk;

use crate::support::{
    on_custom_device, rgba8_image_info, test_each_fake_profile, transient_attachment_info, Advice,
    Profile, VulkanContext,
};

use super::super::{create_buffer, image_info, LAZY};
use super::{expected, Expected};

/// `memoryTypeBits` of a buffer: every type but the lazily allocated ones,
/// which the spec keeps from buffers.
fn buffer_type_bits(want: &Expected) -> u32 {
    (0..want.types.len())
        .filter(|&index| want.types[index].0 & LAZY.as_raw() == 0)
        .fold(0, |bits, index| bits | 1 << index)
}

/// The memory requirements of an image made from `info`, by each query the
/// layer rewrites: `vkGetImageMemoryRequirements`,
/// `vkGetImageMemoryRequirements2` and
/// `vkGetDeviceImageMemoryRequirements` (from the create info alone).
fn image_requirements_three_ways(
    device: &ash::Device,
    info: &vk::ImageCreateInfo<'_>,
) -> [vk::MemoryRequirements; 3] {
    // SAFETY: `info` is a valid create info for `device` (the callers'
    // images); the image is destroyed unbound.
    unsafe {
        let image = device.create_image(info, None).unwrap();
        let plain = device.get_image_memory_requirements(image);
        let mut two = vk::MemoryRequirements2::default();
        device.get_image_memory_requirements2(
            &vk::ImageMemoryRequirementsInfo2::default().image(image),
            &mut two,
        );
        let mut from_info = vk::MemoryRequirements2::default();
        device.get_device_image_memory_requirements(
            &vk::DeviceImageMemoryRequirements::default().create_info(info),
            &mut from_info,
        );
        device.destroy_image(image, None);
        [
            plain,
            two.memory_requirements,
            from_info.memory_requirements,
        ]
    }
}

/// The device's own memory types and a test buffer's and image's
/// requirements, for assertion messages about type bits.
fn real_device_facts() -> String {
    let context = VulkanContext::new(Profile::Lavapipe);
    let memory = context.memory_properties();
    let types: Vec<String> = memory.memory_types[..memory.memory_type_count as usize]
        .iter()
        .enumerate()
        .map(|(index, t)| format!("{index}: heap {} {:?}", t.heap_index, t.property_flags))
        .collect();
    let buffer = create_buffer(&context, 1000);
    // SAFETY: valid create info, buffer and image on a live device; both are
    // destroyed before the context.
    let (buffer_requirements, image_requirements) = unsafe {
        let image = context.device.create_image(&image_info(), None).unwrap();
        let requirements = (
            context.device.get_buffer_memory_requirements(buffer),
            context.device.get_image_memory_requirements(image),
        );
        context.device.destroy_image(image, None);
        context.device.destroy_buffer(buffer, None);
        requirements
    };
    format!(
        "device types [{}]; buffer {buffer_requirements:?}; image {image_requirements:?}",
        types.join(", ")
    )
}

test_each_fake_profile!(
    /// Every requirements query reports fake type bits and raised alignments,
    /// and the maintenance4 device queries agree with the object queries.
    fn memory_requirements_use_fake_types(profile) {
        let context = VulkanContext::new(profile);
        let want = expected(profile);
        let device = &context.device;

        let buffer = create_buffer(&context, 1000);
        let buffer_info = vk::BufferCreateInfo::default()
            .size(1000)
            .usage(vk::BufferUsageFlags::TRANSFER_SRC | vk::BufferUsageFlags::TRANSFER_DST);
        // SAFETY: valid buffer and create info on a live device.
        let (plain, two, from_info) = unsafe {
            let plain = device.get_buffer_memory_requirements(buffer);
            let mut two = vk::MemoryRequirements2::default();
            device.get_buffer_memory_requirements2(
                &vk::BufferMemoryRequirementsInfo2::default().buffer(buffer),
                &mut two,
            );
            let mut from_info = vk::MemoryRequirements2::default();
            device.get_device_buffer_memory_requirements(
                &vk::DeviceBufferMemoryRequirements::default().create_info(&buffer_info),
                &mut from_info,
            );
            (plain, two.memory_requirements, from_info.memory_requirements)
        };
        assert_eq!(plain.memory_type_bits, buffer_type_bits(&want), "{}", real_device_facts());
        assert!(plain.alignment >= want.buffer_alignment);
        // Sizes rounded as real drivers round them (lavapipe reports 1000).
        assert!(plain.size >= 1000 && plain.size % want.buffer_size_granule == 0, "{}", plain.size);
        if !on_custom_device() {
            assert_eq!(plain.size, 1000_u64.next_multiple_of(want.buffer_size_granule));
        }
        assert_eq!(two.size, plain.size);
        assert_eq!(from_info.size, plain.size);
        assert_eq!((two.memory_type_bits, two.alignment), (plain.memory_type_bits, plain.alignment));
        assert_eq!((from_info.memory_type_bits, from_info.alignment), (plain.memory_type_bits, plain.alignment));

        let image_info = image_info();
        // SAFETY: valid create infos and image on a live device.
        let (image, plain, from_info) = unsafe {
            let image = device.create_image(&image_info, None).unwrap();
            let plain = device.get_image_memory_requirements(image);
            let mut from_info = vk::MemoryRequirements2::default();
            device.get_device_image_memory_requirements(
                &vk::DeviceImageMemoryRequirements::default().create_info(&image_info),
                &mut from_info,
            );
            (image, plain, from_info.memory_requirements)
        };
        if on_custom_device() {
            // A real GPU may keep optimal images out of types lavapipe allows
            // (NVIDIA: out of host-visible ones): a subset with device-local.
            let bits = plain.memory_type_bits;
            assert!(bits & !want.image_type_bits == 0 && bits & 1 != 0, "{bits:#b}; {}", real_device_facts());
        } else {
            assert_eq!(plain.memory_type_bits, want.image_type_bits, "{}", real_device_facts());
        }
        assert!(plain.alignment >= want.image_alignment);
        assert_eq!((from_info.memory_type_bits, from_info.alignment), (plain.memory_type_bits, plain.alignment));
        // SAFETY: unbound objects of this device.
        unsafe {
            device.destroy_image(image, None);
            device.destroy_buffer(buffer, None);
        }
        context.assert_no_validation_messages();
    }
);

test_each_fake_profile!(
    /// Only an image created with `TRANSIENT_ATTACHMENT` usage is offered
    /// the lazily allocated types (the mobile and mali profiles' last), by every
    /// image requirements query; a colour attachment without it is not.
    fn lazily_allocated_types_are_for_transient_attachments_only(profile) {
        let context = VulkanContext::new(profile);
        let want = expected(profile);
        let device = &context.device;
        let transient = transient_attachment_info(64, 64);
        let attachment = transient.usage(vk::ImageUsageFlags::COLOR_ATTACHMENT);
        for (info, bits) in [
            (transient, want.transient_image_type_bits),
            (attachment, want.image_type_bits),
        ] {
            let [plain, two, from_info] =
                image_requirements_three_ways(device, &info).map(|r| r.memory_type_bits);
            let usage = info.usage;
            if on_custom_device() {
                assert!(plain & !bits == 0, "{profile} {usage:?}: {plain:#b}");
            } else {
                assert_eq!(plain, bits, "{profile} {usage:?}: {}", real_device_facts());
            }
            assert_eq!((two, from_info), (plain, plain), "{profile} {usage:?}");
        }
        context.assert_no_validation_messages();
    }
);

/// A device of `context`'s physical device with `VK_EXT_external_memory_host`
/// enabled (lavapipe has it; the harness's device does not enable it), and
/// one queue of the context's family.
fn device_with_external_memory_host(context: &VulkanContext) -> ash::Device {
    // SAFETY: the context's live physical device.
    let extensions = unsafe {
        context
            .instance
            .enumerate_device_extension_properties(context.physical_device)
    }
    .unwrap();
    let name = ash::ext::external_memory_host::NAME;
    assert!(
        extensions
            .iter()
            .any(|e| e.extension_name_as_c_str() == Ok(name)),
        "{}: the device lacks {name:?}",
        context.profile
    );
    let priorities = [1.0];
    let queues = [vk::DeviceQueueCreateInfo::default()
        .queue_family_index(context.queue_family_index)
        .queue_priorities(&priorities)];
    let names = [name.as_ptr()];
    let info = vk::DeviceCreateInfo::default()
        .queue_create_infos(&queues)
        .enabled_extension_names(&names);
    // SAFETY: a valid create info with a listed extension.
    unsafe {
        context
            .instance
            .create_device(context.physical_device, &info, None)
    }
    .unwrap()
}

test_each_fake_profile!(
    /// `vkGetMemoryHostPointerPropertiesEXT` names memory types as every
    /// other query does, in the profile's indices, and only the types a
    /// host pointer belongs in: host-visible ones in system memory, as
    /// RADV offers (one cached system-memory type) and as the
    /// specification asks ("should only include bits that identify memory
    /// types which are host visible"; before its relaxation, "must"). The
    /// layer passed the driver's bits through, in the driver's indices: on
    /// lavapipe bit 0, which names the profile's first type (on
    /// `discrete`, device-local memory the host cannot map), and an
    /// application that imported host memory into the host-visible type it
    /// should pick was told that type cannot hold it. Then it offered every
    /// type a buffer may take, device-only ones and the BAR window
    /// included, so an importer that took the lowest bit put the host's
    /// pages in a device-local type the host cannot map (ANV offers every
    /// type, which the relaxed wording allows; RADV never does, and the
    /// layer answers as the specification prefers).
    fn host_pointer_imports_name_fake_types(profile) {
        let context = VulkanContext::new(profile);
        let device = device_with_external_memory_host(&context);
        let mut host = vk::PhysicalDeviceExternalMemoryHostPropertiesEXT::default();
        let mut properties = vk::PhysicalDeviceProperties2::default().push_next(&mut host);
        // SAFETY: a valid output chain; the extension is listed.
        unsafe {
            context
                .instance
                .get_physical_device_properties2(context.physical_device, &mut properties);
        }
        let alignment = host.min_imported_host_pointer_alignment.max(4096) as usize;
        let layout = std::alloc::Layout::from_size_align(alignment, alignment).unwrap();
        // SAFETY: a non-zero size.
        let pointer = unsafe { std::alloc::alloc_zeroed(layout) };
        assert!(!pointer.is_null());
        let functions = ash::ext::external_memory_host::Device::new(&context.instance, &device);
        let mut pointer_properties = vk::MemoryHostPointerPropertiesEXT::default();
        // SAFETY: a live, suitably aligned host allocation; the extension is
        // enabled on `device`.
        let result = unsafe {
            (functions.fp().get_memory_host_pointer_properties_ext)(
                device.handle(),
                vk::ExternalMemoryHandleTypeFlags::HOST_ALLOCATION_EXT,
                pointer.cast_const().cast(),
                &mut pointer_properties,
            )
        };
        // SAFETY: nothing imported it; the device made nothing else.
        unsafe {
            std::alloc::dealloc(pointer, layout);
            device.destroy_device(None);
        }
        assert_eq!(result, vk::Result::SUCCESS, "{profile}");
        let bits = pointer_properties.memory_type_bits;
        let want = expected(profile).host_pointer_type_bits;
        let memory = context.memory_properties();
        let not_mappable: Vec<usize> = (0..memory.memory_type_count as usize)
            .filter(|&index| bits & 1 << index != 0)
            .filter(|&index| {
                !memory.memory_types[index]
                    .property_flags
                    .contains(vk::MemoryPropertyFlags::HOST_VISIBLE)
            })
            .collect();
        assert_eq!(not_mappable, [0usize; 0], "{profile}: {bits:#b} names types the host cannot map");
        if on_custom_device() {
            assert!(bits != 0 && bits & !want == 0, "{profile}: {bits:#b}");
        } else {
            assert_eq!(bits, want, "{profile}: {bits:#b}; {}", real_device_facts());
        }
        context.assert_no_validation_messages();
    }
);

test_each_fake_profile!(
    /// A linear image may take every memory type a buffer may (the lazily
    /// allocated ones only as a transient attachment): the profiles keep
    /// *optimal* images out of their host memory types, as the GPUs they
    /// model do, but those GPUs' drivers offer system memory to linear
    /// images, which the host reads and writes in place (NVIDIA, RADV and
    /// ANV list every type for them). The layer kept linear images out of
    /// the host types too: on `discrete` a linear readback image could not
    /// take the cached, non-coherent type, nor an upload one system memory.
    /// Every requirements query agrees.
    fn linear_images_may_take_host_memory_types(profile) {
        let context = VulkanContext::new(profile);
        context.allow(Advice::LinearImages);
        let want = buffer_type_bits(&expected(profile));
        let device = &context.device;
        let info = image_info().tiling(vk::ImageTiling::LINEAR);
        // Lavapipe takes linear RGBA8 images for transfers.
        let [plain, two, from_info] = image_requirements_three_ways(device, &info);
        let bits = plain.memory_type_bits;
        if on_custom_device() {
            assert!(bits != 0 && bits & !want == 0, "{profile}: {bits:#b}");
        } else {
            assert_eq!(bits, want, "{profile}: {bits:#b}; {}", real_device_facts());
        }
        assert_eq!((two.memory_type_bits, from_info.memory_type_bits), (bits, bits), "{profile}");
        assert_eq!((two.alignment, from_info.alignment), (plain.alignment, plain.alignment), "{profile}");
        context.assert_no_validation_messages();
    }
);

/// The alignments a profile's image requirements must report, written out
/// from the drivers' sources independently of the layer (the crate's
/// `ImageRequirements` lists them): (a 64x64 RGBA8 optimal image, a
/// 2048x2048 one with its mips, a 64x64 linear one, a 64x64 D16 depth
/// image). RADV aligns optimal images of 32 KiB or more, and depth/stencil
/// images of any size, to its 64 KiB swizzle blocks and linear ones to
/// 256; NVK's tiles reach 16 KiB for tall images; ANV on a Gen12 iGPU
/// aligns optimal images to its aux map's 64 KiB, on Arc and Turnip to
/// their 4 KiB tiles, linear ones to 64.
fn expected_image_alignments(profile: Profile) -> (u64, u64, u64, u64) {
    match profile {
        Profile::Discrete | Profile::Rebar => (4096, 16 << 10, 4096, 4096),
        Profile::Amd => (4096, 64 << 10, 256, 64 << 10),
        Profile::Integrated => (64 << 10, 64 << 10, 64, 64 << 10),
        Profile::Arc | Profile::Mobile => (4096, 4096, 64, 4096),
        Profile::Apple | Profile::Mali => (4096, 4096, 4096, 4096),
        Profile::Lavapipe => unreachable!("a fake profile"),
    }
}

test_each_fake_profile!(
    /// Image alignments follow the modelled driver by size and tiling, by
    /// every requirements query: a small texture takes the driver's small
    /// alignment, a 2048x2048 one with mips RADV's 64 KiB swizzle blocks
    /// on `amd` (NVK's 16 KiB tiles on the NVIDIA profiles), a linear image
    /// the driver's linear alignment (never below lavapipe's own), a small
    /// depth image RADV's 64 KiB Z blocks on `amd`.
    fn images_are_aligned_by_size_and_tiling_as_their_drivers_align_them(profile) {
        let context = VulkanContext::new(profile);
        context.allow(Advice::LinearImages);
        let device = &context.device;
        let usage = vk::ImageUsageFlags::TRANSFER_DST | vk::ImageUsageFlags::TRANSFER_SRC;
        let small = rgba8_image_info(64, 64, usage);
        let large = rgba8_image_info(2048, 2048, usage | vk::ImageUsageFlags::SAMPLED).mip_levels(12);
        let linear = small.tiling(vk::ImageTiling::LINEAR);
        let depth = rgba8_image_info(64, 64, vk::ImageUsageFlags::DEPTH_STENCIL_ATTACHMENT)
            .format(vk::Format::D16_UNORM);
        let want = expected_image_alignments(profile);
        let mut got = [0; 4];
        for (slot, info) in got.iter_mut().zip([small, large, linear, depth]) {
            let [plain, two, from_info] = image_requirements_three_ways(device, &info);
            assert_eq!((two.alignment, from_info.alignment), (plain.alignment, plain.alignment), "{profile}");
            assert_eq!(plain.size % 4, 0, "{profile}");
            *slot = plain.alignment;
        }
        let got = (got[0], got[1], got[2], got[3]);
        if on_custom_device() {
            assert!(got.0 >= want.0 && got.1 >= want.1 && got.2 >= want.2 && got.3 >= want.3, "{profile}: {got:?}");
        } else {
            assert_eq!(got, want, "{profile}: (small, large, linear, depth); {}", real_device_facts());
        }
        context.assert_no_validation_messages();
    }
);
