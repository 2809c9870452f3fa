//! Each profile presents the memory architecture it promises: heaps,
//! memory types, device type, limits and budget, the type bits and
//! alignments of every requirements query (the lazily allocated types only
//! for transient attachments), and its own profile in each of several
//! instances made at once. What each fake profile must report is written out
//! here, independently of the layer, so a change to either shows.

use ash::vk;

use crate::support::{
    on_custom_device, rgba8_image_info, test_each_fake_profile, test_each_profile,
    transient_attachment_info, Advice, ContextOptions, Profile, VulkanContext,
};

use super::{budgeted, create_buffer, expected_budget, image_info, LAZY, MIB};

const GIB: u64 = 1024 * MIB;

/// What a fake profile must report, written out independently of the layer.
struct Expected {
    device_type: vk::PhysicalDeviceType,
    heaps: &'static [u64],
    /// (flags, heap) per type; flags given as raw bits.
    types: &'static [(u32, u32)],
    /// `memoryTypeBits` of an optimal image.
    image_type_bits: u32,
    /// `memoryTypeBits` of an optimal transient-attachment image: also the
    /// lazily allocated types, which no other resource may use.
    transient_image_type_bits: u32,
    /// `memoryTypeBits` of a host-pointer import: the host-visible types
    /// in system memory (a heap that is not device-local), or, where none
    /// is (a unified-memory GPU), every host-visible type; never one the
    /// host cannot map, nor a lazily allocated one.
    host_pointer_type_bits: u32,
    granularity: u64,
    atom: u64,
    max_allocations: u32,
    buffer_alignment: u64,
    /// Buffer requirement sizes are rounded up to a multiple of this.
    buffer_size_granule: u64,
    image_alignment: u64,
}

fn expected(profile: Profile) -> Expected {
    match profile {
        Profile::Discrete => Expected {
            device_type: vk::PhysicalDeviceType::DISCRETE_GPU,
            heaps: &[GIB, 2 * GIB, 256 * MIB],
            types: &[
                (0x1, 0),
                (0x2 | 0x4, 1),
                (0x2 | 0x8, 1),
                (0x1 | 0x2 | 0x4, 2),
            ],
            image_type_bits: 0b1001,
            transient_image_type_bits: 0b1001,
            host_pointer_type_bits: 0b0110,
            granularity: 1024,
            atom: 256,
            max_allocations: 4096,
            buffer_alignment: 256,
            buffer_size_granule: 16,
            image_alignment: 4096,
        },
        Profile::Integrated => Expected {
            device_type: vk::PhysicalDeviceType::INTEGRATED_GPU,
            heaps: &[2 * GIB],
            types: &[(0x1, 0), (0x1 | 0x2 | 0x4, 0), (0x1 | 0x2 | 0x4 | 0x8, 0)],
            image_type_bits: 0b111,
            transient_image_type_bits: 0b111,
            host_pointer_type_bits: 0b110,
            granularity: 64,
            atom: 64,
            max_allocations: 4096,
            buffer_alignment: 64,
            buffer_size_granule: 1,
            image_alignment: 4096,
        },
        Profile::Mobile => Expected {
            device_type: vk::PhysicalDeviceType::INTEGRATED_GPU,
            heaps: &[256 * MIB],
            // LAZILY_ALLOCATED 0x10.
            types: &[
                (0x1, 0),
                (0x1 | 0x2 | 0x8, 0),
                (0x1 | 0x2 | 0x4, 0),
                (0x1 | 0x10, 0),
            ],
            image_type_bits: 0b0111,
            transient_image_type_bits: 0b1111,
            host_pointer_type_bits: 0b0110,
            granularity: 4096,
            atom: 128,
            max_allocations: 1024,
            buffer_alignment: 64,
            buffer_size_granule: 64,
            image_alignment: 4096,
        },
        Profile::Amd => Expected {
            device_type: vk::PhysicalDeviceType::DISCRETE_GPU,
            heaps: &[GIB, 2 * GIB, 256 * MIB],
            // DEVICE_COHERENT_AMD 0x40, DEVICE_UNCACHED_AMD 0x80.
            types: &[
                (0x1, 0),
                (0x2 | 0x4, 1),
                (0x1 | 0x2 | 0x4, 2),
                (0x2 | 0x4 | 0x8, 1),
                (0x1 | 0x40 | 0x80, 0),
                (0x2 | 0x4 | 0x40 | 0x80, 1),
                (0x1 | 0x2 | 0x4 | 0x40 | 0x80, 2),
                (0x2 | 0x4 | 0x8 | 0x40 | 0x80, 1),
            ],
            image_type_bits: 0b0101_0101,
            transient_image_type_bits: 0b0101_0101,
            host_pointer_type_bits: 0b1010_1010,
            granularity: 64,
            atom: 64,
            max_allocations: 4096,
            buffer_alignment: 16,
            buffer_size_granule: 16,
            image_alignment: 4096,
        },
        Profile::Rebar => Expected {
            device_type: vk::PhysicalDeviceType::DISCRETE_GPU,
            heaps: &[GIB, 2 * GIB],
            types: &[
                (0x1, 0),
                (0x2 | 0x4, 1),
                (0x2 | 0x4 | 0x8, 1),
                (0x1 | 0x2 | 0x4, 0),
            ],
            image_type_bits: 0b1001,
            transient_image_type_bits: 0b1001,
            host_pointer_type_bits: 0b0110,
            granularity: 1024,
            atom: 64,
            max_allocations: 4096,
            buffer_alignment: 256,
            buffer_size_granule: 16,
            image_alignment: 4096,
        },
        Profile::Arc => Expected {
            device_type: vk::PhysicalDeviceType::DISCRETE_GPU,
            heaps: &[2 * GIB - 256 * MIB, 2 * GIB, 256 * MIB],
            types: &[(0x1, 0), (0x2 | 0x4 | 0x8, 1), (0x1 | 0x2 | 0x4, 2)],
            image_type_bits: 0b101,
            transient_image_type_bits: 0b101,
            host_pointer_type_bits: 0b010,
            granularity: 1,
            atom: 64,
            // No limit of its own: the device's applies.
            max_allocations: u32::MAX,
            buffer_alignment: 64,
            buffer_size_granule: 4,
            image_alignment: 4096,
        },
        Profile::Apple => Expected {
            device_type: vk::PhysicalDeviceType::INTEGRATED_GPU,
            heaps: &[2 * GIB],
            // The non-coherent type before the coherent one.
            types: &[(0x1, 0), (0x1 | 0x2 | 0x8, 0), (0x1 | 0x2 | 0x4 | 0x8, 0)],
            image_type_bits: 0b111,
            transient_image_type_bits: 0b111,
            host_pointer_type_bits: 0b110,
            granularity: 16,
            atom: 16,
            max_allocations: 4096,
            buffer_alignment: 16,
            buffer_size_granule: 1,
            image_alignment: 4096,
        },
        Profile::Mali => Expected {
            device_type: vk::PhysicalDeviceType::INTEGRATED_GPU,
            heaps: &[2 * GIB],
            types: &[
                (0x1 | 0x2 | 0x4, 0),
                (0x1 | 0x2 | 0x4 | 0x8, 0),
                (0x1 | 0x10, 0),
            ],
            image_type_bits: 0b011,
            transient_image_type_bits: 0b111,
            host_pointer_type_bits: 0b011,
            granularity: 4096,
            atom: 64,
            max_allocations: 4096,
            buffer_alignment: 64,
            buffer_size_granule: 1,
            image_alignment: 4096,
        },
        Profile::Lavapipe => unreachable!("lavapipe is not a fake profile"),
    }
}

/// `memoryTypeBits` of a buffer: every type but the lazily allocated ones,
/// which the spec keeps from buffers.
fn buffer_type_bits(want: &Expected) -> u32 {
    (0..want.types.len())
        .filter(|&index| want.types[index].0 & LAZY.as_raw() == 0)
        .fold(0, |bits, index| bits | 1 << index)
}

/// The device's own memory types and a test buffer's and image's
/// requirements, for assertion messages about type bits.
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

test_each_profile!(
    /// Heaps, types, limits, device type and budget are the profile's.
    fn reports_its_memory_architecture(profile) {
        let context = VulkanContext::new(profile);
        let memory = context.memory_properties();
        let properties = context.properties();
        if profile == Profile::Lavapipe && on_custom_device() {
            // Another device as it is: only what holds for every device.
            assert!(memory.memory_heap_count >= 1 && memory.memory_type_count >= 1);
            if let Some(budget) = context.memory_budget() {
                assert_eq!(budget.len(), memory.memory_heap_count as usize);
                assert!(budget.iter().all(|heap| heap.budget > 0));
            }
            context.assert_no_validation_messages();
            return;
        }
        if profile == Profile::Lavapipe {
            assert_eq!(memory.memory_heap_count, 1);
            assert_eq!(memory.memory_type_count, 1);
            assert_eq!(properties.device_type, vk::PhysicalDeviceType::CPU);
            assert!(!context.memory_budget_enabled);
            assert_eq!(context.memory_budget(), None);
            return;
        }
        let want = expected(profile);
        let heaps: Vec<u64> =
            memory.memory_heaps[..memory.memory_heap_count as usize].iter().map(|h| h.size).collect();
        assert_eq!(heaps, want.heaps);
        let types: Vec<(u32, u32)> = memory.memory_types[..memory.memory_type_count as usize]
            .iter()
            .map(|t| (t.property_flags.as_raw(), t.heap_index))
            .collect();
        assert_eq!(types, want.types);
        assert_eq!(properties.device_type, want.device_type);
        // The layer reports the profile's granularity and atom: exactly on a
        // CPU driver such as lavapipe (where neither guards anything), never
        // below the device's own on a GPU. The allocation count is never
        // above the device's.
        let real = VulkanContext::new(Profile::Lavapipe).properties();
        let (granularity, atom) = if real.device_type == vk::PhysicalDeviceType::CPU {
            (want.granularity, want.atom)
        } else {
            (
                want.granularity.max(real.limits.buffer_image_granularity),
                want.atom.max(real.limits.non_coherent_atom_size),
            )
        };
        assert_eq!(properties.limits.buffer_image_granularity, granularity);
        assert_eq!(properties.limits.non_coherent_atom_size, atom);
        assert_eq!(
            properties.limits.max_memory_allocation_count,
            want.max_allocations.min(real.limits.max_memory_allocation_count)
        );

        // The budget extension is offered where the GPU modelled has it
        // (hidden elsewhere, the driver's too); `budget=on` offers it on
        // every profile. The 2 query agrees with the 1.0 one and carries
        // the budget.
        assert_eq!(context.memory_budget_enabled, profile.has_memory_budget(), "{profile}");
        if profile.has_memory_budget() {
            let hidden = VulkanContext::with_options(profile, ContextOptions::default().memory_budget(false));
            assert!(!hidden.memory_budget_enabled, "{profile}: budget=off hides it");
            assert_eq!(hidden.memory_budget(), None, "{profile}");
            hidden.assert_no_validation_messages();
        } else {
            assert_eq!(context.memory_budget(), None, "{profile}");
        }
        context.assert_no_validation_messages();
        let context = budgeted(profile);
        assert!(context.memory_budget_enabled, "VK_EXT_memory_budget is advertised and enabled");
        let budget = context.memory_budget().unwrap();
        let budgets: Vec<u64> = budget.iter().map(|heap| heap.budget).collect();
        let below_heaps: Vec<u64> = want.heaps.iter().map(|&size| expected_budget(size, 0)).collect();
        assert_eq!(budgets, below_heaps);
        assert!(budget.iter().all(|heap| heap.usage == 0));
        context.assert_no_validation_messages();
    }
);

test_each_fake_profile!(
    /// Where `VK_EXT_memory_budget` is not offered (`budget=off`; by
    /// default on the integrated, mobile, apple and mali profiles, whose
    /// GPUs lack it), a `VkPhysicalDeviceMemoryBudgetPropertiesEXT` chained
    /// to the memory properties query comes back as the caller filled it,
    /// as a driver without the extension leaves a structure it does not
    /// know: an allocator told of a budget the device lacks reads none,
    /// as it would on such a GPU, rather than the layer's figures.
    fn no_budget_is_reported_without_the_extension(profile) {
        let context = VulkanContext::with_options(profile, ContextOptions::default().memory_budget(false));
        assert!(!context.memory_budget_enabled, "{profile}");
        let untouched = [7; vk::MAX_MEMORY_HEAPS];
        let mut budget = vk::PhysicalDeviceMemoryBudgetPropertiesEXT {
            heap_budget: untouched,
            heap_usage: untouched,
            ..Default::default()
        };
        let mut properties = vk::PhysicalDeviceMemoryProperties2::default().push_next(&mut budget);
        // SAFETY: a valid output chain on a live physical device.
        unsafe {
            context
                .instance
                .get_physical_device_memory_properties2(context.physical_device, &mut properties);
        }
        let heaps = properties.memory_properties.memory_heap_count as usize;
        assert_eq!(heaps, expected(profile).heaps.len(), "{profile}: the fake heaps");
        assert_eq!((budget.heap_budget, budget.heap_usage), (untouched, untouched), "{profile}");
        context.assert_no_validation_messages();
    }
);

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

/// Instances alive at the same time keep their own profiles (the profile
/// travels in each instance's engine name), queried from several threads
/// at once. One test thread at a time may use the Vulkan stack
/// ([`crate::support::StackTurn`]), so this thread makes every context,
/// each before any is dropped, and threads of its own query them: contexts
/// made on threads of their own would each be made and dropped in turn, and
/// a layer that kept one configuration for the process (the last
/// instance's) would pass.
#[test]
fn parallel_instances_keep_their_own_profiles() {
    let contexts: Vec<VulkanContext> = Profile::ALL.into_iter().map(VulkanContext::new).collect();
    std::thread::scope(|scope| {
        for context in &contexts {
            scope.spawn(move || {
                let profile = context.profile;
                let memory = context.memory_properties();
                let heaps: Vec<u64> = memory.memory_heaps[..memory.memory_heap_count as usize]
                    .iter()
                    .map(|heap| heap.size)
                    .collect();
                let types: Vec<(u32, u32)> = memory.memory_types
                    [..memory.memory_type_count as usize]
                    .iter()
                    .map(|t| (t.property_flags.as_raw(), t.heap_index))
                    .collect();
                if profile == Profile::Lavapipe {
                    // The device as it is: no fake profile's types.
                    let fake = Profile::FAKE
                        .into_iter()
                        .find(|&fake| types == expected(fake).types);
                    assert_eq!(fake, None, "{profile}: types {types:?}");
                } else {
                    let want = expected(profile);
                    assert_eq!(
                        (heaps, types),
                        (want.heaps.to_vec(), want.types.to_vec()),
                        "{profile}"
                    );
                }
            });
        }
    });
}

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
