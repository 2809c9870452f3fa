//! Self-test of the fake-memory layer: each profile presents the memory
//! architecture it promises, the fake limits bite (heap sizes, allocation
//! count, chosen failures), and the validation layer above it catches misuse
//! that lavapipe alone would let through, while a correct run stays silent.

use ash::vk;

use crate::support::{
    on_custom_device, rgba8_image_info, test_each_fake_profile, test_each_profile,
    transient_attachment_info, Advice, ContextOptions, Profile, VulkanContext,
};

const MIB: u64 = 1024 * 1024;
const GIB: u64 = 1024 * MIB;

const DL: vk::MemoryPropertyFlags = vk::MemoryPropertyFlags::DEVICE_LOCAL;
const HV: vk::MemoryPropertyFlags = vk::MemoryPropertyFlags::HOST_VISIBLE;
const HC: vk::MemoryPropertyFlags = vk::MemoryPropertyFlags::HOST_COHERENT;
const CACHED: vk::MemoryPropertyFlags = vk::MemoryPropertyFlags::HOST_CACHED;
const LAZY: vk::MemoryPropertyFlags = vk::MemoryPropertyFlags::LAZILY_ALLOCATED;

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
            granularity: 64,
            atom: 64,
            max_allocations: 4096,
            buffer_alignment: 16,
            buffer_size_granule: 4,
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

/// `vkAllocateMemory` of `size` bytes in `type_index`. The layer's tests
/// make KiB-sized memory objects and bind resources to their whole: the
/// context allows the best-practices advice against it.
fn allocate(
    context: &VulkanContext,
    type_index: u32,
    size: u64,
) -> Result<vk::DeviceMemory, vk::Result> {
    context.allow(Advice::SmallMemory);
    let info = vk::MemoryAllocateInfo::default()
        .allocation_size(size)
        .memory_type_index(type_index);
    // SAFETY: a valid allocate info on the context's live device.
    unsafe { context.device.allocate_memory(&info, None) }
}

fn free(context: &VulkanContext, memory: vk::DeviceMemory) {
    // SAFETY: memory allocated on this device, no longer in use.
    unsafe { context.device.free_memory(memory, None) };
}

/// A context for `profile` that offers `VK_EXT_memory_budget` whatever the
/// profile says, to read the layer's accounting as `heapUsage`.
fn budgeted(profile: Profile) -> VulkanContext {
    VulkanContext::with_options(profile, ContextOptions::default().memory_budget(true))
}

/// `heapUsage` of every heap.
fn heap_usage(context: &VulkanContext) -> Vec<u64> {
    let budget = context
        .memory_budget()
        .expect("a context made by `budgeted`");
    budget.iter().map(|heap| heap.usage).collect()
}

/// `heapBudget` of a fake heap of `size` bytes with `used` allocated: what
/// is used plus 90% of the rest, in whole MiBs, as Mesa's drivers report it.
fn expected_budget(size: u64, used: u64) -> u64 {
    (used + (size - used) / 10 * 9) & !(MIB - 1)
}

/// The first memory type whose flags are exactly, or include, `flags`.
fn type_index(context: &VulkanContext, exact: bool, flags: vk::MemoryPropertyFlags) -> u32 {
    let properties = context.memory_properties();
    (0..properties.memory_type_count)
        .find(|&i| {
            let have = properties.memory_types[i as usize].property_flags;
            if exact {
                have == flags
            } else {
                have.contains(flags)
            }
        })
        .unwrap_or_else(|| panic!("{}: no memory type with {flags:?}", context.profile))
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

fn create_buffer(context: &VulkanContext, size: u64) -> vk::Buffer {
    let info = vk::BufferCreateInfo::default()
        .size(size)
        .usage(vk::BufferUsageFlags::TRANSFER_SRC | vk::BufferUsageFlags::TRANSFER_DST);
    // SAFETY: a valid create info on a live device.
    unsafe { context.device.create_buffer(&info, None) }.unwrap()
}

fn image_info() -> vk::ImageCreateInfo<'static> {
    let usage = vk::ImageUsageFlags::TRANSFER_DST | vk::ImageUsageFlags::TRANSFER_SRC;
    rgba8_image_info(64, 64, usage)
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
            // SAFETY: valid create infos and image on a live device; the
            // image is destroyed unbound.
            let (plain, two, from_info) = unsafe {
                let image = device.create_image(&info, None).unwrap();
                let plain = device.get_image_memory_requirements(image);
                let mut two = vk::MemoryRequirements2::default();
                device.get_image_memory_requirements2(
                    &vk::ImageMemoryRequirementsInfo2::default().image(image),
                    &mut two,
                );
                let mut from_info = vk::MemoryRequirements2::default();
                device.get_device_image_memory_requirements(
                    &vk::DeviceImageMemoryRequirements::default().create_info(&info),
                    &mut from_info,
                );
                device.destroy_image(image, None);
                (plain.memory_type_bits, two.memory_requirements.memory_type_bits,
                    from_info.memory_requirements.memory_type_bits)
            };
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

test_each_fake_profile!(
    /// `heapUsage` follows allocations and frees, per heap, and so does
    /// `heapBudget`, below the heap's size as on real drivers.
    fn budget_follows_allocations(profile) {
        let context = budgeted(profile);
        let properties = context.memory_properties();
        let heap = properties.memory_types[0].heap_index as usize;
        let size = properties.memory_heaps[heap].size;
        let memory = allocate(&context, 0, 3 * MIB).unwrap();
        assert_eq!(heap_usage(&context)[heap], 3 * MIB);
        let budget = context.memory_budget().unwrap()[heap].budget;
        assert_eq!(budget, expected_budget(size, 3 * MIB));
        assert!(budget < size);
        free(&context, memory);
        assert_eq!(heap_usage(&context)[heap], 0);
        context.assert_no_validation_messages();
    }
);

test_each_fake_profile!(
    /// A fake heap holds exactly its size; past it, `ERROR_OUT_OF_DEVICE_MEMORY`.
    fn heap_size_is_enforced(profile) {
        let context = budgeted(profile);
        context.allow(Advice::FailingCalls);
        let properties = context.memory_properties();
        let heap = properties.memory_types[0].heap_index as usize;
        let quarter = properties.memory_heaps[heap].size / 4;
        let mut held: Vec<_> = (0..4).map(|_| allocate(&context, 0, quarter).unwrap()).collect();
        assert_eq!(heap_usage(&context)[heap], 4 * quarter);
        assert_eq!(allocate(&context, 0, MIB), Err(vk::Result::ERROR_OUT_OF_DEVICE_MEMORY));
        free(&context, held.pop().unwrap());
        held.push(allocate(&context, 0, quarter).unwrap());
        for memory in held {
            free(&context, memory);
        }
        context.assert_no_validation_messages();
    }
);

test_each_fake_profile!(
    /// Past `maxMemoryAllocationCount`, `ERROR_TOO_MANY_OBJECTS`, and the
    /// validation layer reports it.
    fn allocation_count_is_enforced(profile) {
        let context = VulkanContext::with_options(profile, ContextOptions::default().max_allocations(8));
        context.allow(Advice::FailingCalls);
        assert_eq!(context.properties().limits.max_memory_allocation_count, 8);
        let held: Vec<_> = (0..8).map(|_| allocate(&context, 0, 4096).unwrap()).collect();
        context.assert_no_validation_messages();
        assert_eq!(allocate(&context, 0, 4096), Err(vk::Result::ERROR_TOO_MANY_OBJECTS));
        context.expect_validation_messages(&["VUID-vkAllocateMemory-maxMemoryAllocationCount-04101"]);
        for memory in held {
            free(&context, memory);
        }
    }
);

/// The mobile profile's own limit (1024) applies without an override.
#[test]
fn mobile_allows_1024_allocations() {
    let context = VulkanContext::new(Profile::Mobile);
    context.allow(Advice::FailingCalls);
    context.allow(Advice::ManyMemoryObjects);
    let held: Vec<_> = (0..1024)
        .map(|_| allocate(&context, 0, 256).unwrap())
        .collect();
    assert_eq!(
        allocate(&context, 0, 256),
        Err(vk::Result::ERROR_TOO_MANY_OBJECTS)
    );
    context.expect_validation_messages(&["VUID-vkAllocateMemory-maxMemoryAllocationCount-04101"]);
    for memory in held {
        free(&context, memory);
    }
}

test_each_fake_profile!(
    /// `fail-allocation=N` fails exactly the Nth call.
    fn chosen_allocations_fail(profile) {
        let options = ContextOptions::default().fail_allocation(2).fail_allocation(4);
        let context = VulkanContext::with_options(profile, options);
        context.allow(Advice::FailingCalls);
        let results: Vec<_> = (0..5).map(|_| allocate(&context, 0, 4096)).collect();
        let oom = Err(vk::Result::ERROR_OUT_OF_DEVICE_MEMORY);
        assert_eq!(results[1], oom);
        assert_eq!(results[3], oom);
        for result in [results[0], results[2], results[4]] {
            free(&context, result.unwrap());
        }
        context.assert_no_validation_messages();
    }
);

/// A flush on the discrete profile's non-coherent type that is not aligned to
/// its `nonCoherentAtomSize` (256; lavapipe's own is 64) is reported.
#[test]
fn misaligned_flush_on_non_coherent_memory_is_reported() {
    let context = VulkanContext::new(Profile::Discrete);
    let index = type_index(&context, true, HV | CACHED);
    let memory = allocate(&context, index, 4096).unwrap();
    // SAFETY: host-visible memory of this device, mapped once; the range lies
    // inside the mapping (only its alignment is wrong, on purpose).
    unsafe {
        context
            .device
            .map_memory(memory, 0, vk::WHOLE_SIZE, vk::MemoryMapFlags::empty())
            .unwrap();
        let range = vk::MappedMemoryRange::default()
            .memory(memory)
            .offset(64)
            .size(64);
        context.device.flush_mapped_memory_ranges(&[range]).unwrap();
        context.device.unmap_memory(memory);
    }
    context.expect_validation_messages(&[
        "VUID-VkMappedMemoryRange-offset-00687",
        "VUID-VkMappedMemoryRange-size-01390",
    ]);
    free(&context, memory);
}

/// Mappings of non-coherent types, which the layer serves from its host
/// cache, keep the driver's guarantee that a mapping's pointer (minus its
/// offset) is aligned to `minMemoryMapAlignment`, as the driver's own
/// pointer is: engines cast mapped bytes to typed slices. The cache was a
/// plain byte allocation, 16 bytes past a page for large ones.
#[test]
fn non_coherent_mappings_honour_min_memory_map_alignment() {
    for profile in [Profile::Discrete, Profile::Mobile] {
        let context = VulkanContext::new(profile);
        // SAFETY: the context's physical device.
        let limits = unsafe {
            context
                .instance
                .get_physical_device_properties(context.physical_device)
        }
        .limits;
        let alignment = limits.min_memory_map_alignment;
        let index = type_index(&context, false, HV | CACHED);
        for (size, offset) in [(1 << 20, 0), (4096, 0), (1 << 20, 256)] {
            let memory = allocate(&context, index, size).unwrap();
            // SAFETY: host-visible memory of this device, mapped once, at an
            // offset inside it.
            let pointer = unsafe {
                context.device.map_memory(
                    memory,
                    offset,
                    vk::WHOLE_SIZE,
                    vk::MemoryMapFlags::empty(),
                )
            }
            .unwrap();
            let misalignment = (pointer as usize - offset as usize) % alignment;
            // SAFETY: mapped above.
            unsafe { context.device.unmap_memory(memory) };
            free(&context, memory);
            assert_eq!(
                misalignment, 0,
                "{profile}: {size}-byte mapping at {offset}, alignment {alignment}"
            );
        }
    }
}

/// Maps memory of type `index`, which is not host-visible: the layer
/// refuses and the validation layer reports it.
fn assert_map_is_refused(context: &VulkanContext, index: u32) {
    context.allow(Advice::FailingCalls);
    let memory = allocate(context, index, 4096).unwrap();
    // SAFETY: a live allocation; mapping it is the misuse under test.
    let mapped = unsafe {
        context
            .device
            .map_memory(memory, 0, vk::WHOLE_SIZE, vk::MemoryMapFlags::empty())
    };
    assert_eq!(mapped, Err(vk::Result::ERROR_MEMORY_MAP_FAILED));
    context.expect_validation_messages(&["VUID-vkMapMemory-memory-00682"]);
    free(context, memory);
}

/// Mapping the device-local-only type is reported and refused.
#[test]
fn map_of_device_local_only_memory_is_reported() {
    let context = VulkanContext::new(Profile::Discrete);
    let index = type_index(&context, true, DL);
    assert_map_is_refused(&context, index);
}

/// Mapping the mobile profile's lazily allocated memory is reported and
/// refused: the layer never maps it (nor caches it on the host).
#[test]
fn map_of_lazily_allocated_memory_is_reported() {
    let context = VulkanContext::new(Profile::Mobile);
    let index = type_index(&context, false, LAZY);
    assert_map_is_refused(&context, index);
}

/// Binding a buffer at an offset aligned for lavapipe (64) but not for the
/// profile's buffer alignment (256) is reported.
#[test]
fn bind_at_misaligned_offset_is_reported() {
    let context = VulkanContext::new(Profile::Discrete);
    let buffer = create_buffer(&context, 1024);
    // SAFETY: a live buffer of this device.
    let requirements = unsafe { context.device.get_buffer_memory_requirements(buffer) };
    assert_eq!(requirements.alignment, 256);
    let memory = allocate(&context, 0, 4096).unwrap();
    // SAFETY: the misaligned bind is the misuse under test; lavapipe accepts it.
    unsafe {
        let _ = context.device.bind_buffer_memory(buffer, memory, 64);
        context.device.destroy_buffer(buffer, None);
    }
    context.expect_validation_messages(&["VUID-vkBindBufferMemory-memoryOffset-01036"]);
    free(&context, memory);
}

/// Fills `buffer` with `pattern` on the GPU and makes it visible to the host.
fn fill(context: &VulkanContext, buffer: vk::Buffer, pattern: u32) {
    context.run_one_time_commands(|device, commands| {
        let barrier = vk::MemoryBarrier::default()
            .src_access_mask(vk::AccessFlags::TRANSFER_WRITE)
            .dst_access_mask(vk::AccessFlags::HOST_READ);
        // SAFETY: a recording command buffer; the buffer is bound.
        unsafe {
            device.cmd_fill_buffer(commands, buffer, 0, vk::WHOLE_SIZE, pattern);
            device.cmd_pipeline_barrier(
                commands,
                vk::PipelineStageFlags::TRANSFER,
                vk::PipelineStageFlags::HOST,
                vk::DependencyFlags::empty(),
                &[barrier],
                &[],
                &[],
            );
        }
    });
}

/// One buffer per allowed memory type: bind, GPU fill, host read back
/// (invalidating non-coherent memory), host write and atom-aligned flush.
fn exercise_every_memory_type(context: &VulkanContext) {
    const SIZE: u64 = 64 * 1024;
    let properties = context.memory_properties();
    let atom = context.properties().limits.non_coherent_atom_size;
    let device = &context.device;
    for index in 0..properties.memory_type_count {
        let flags = properties.memory_types[index as usize].property_flags;
        if flags.contains(vk::MemoryPropertyFlags::DEVICE_COHERENT_AMD) {
            // Needs deviceCoherentMemory, which the harness never enables
            // (VUID-vkAllocateMemory-deviceCoherentMemory-02790); the test
            // below checks that the validation layer reports it.
            continue;
        }
        let buffer = create_buffer(context, SIZE);
        // SAFETY: a live buffer.
        let requirements = unsafe { device.get_buffer_memory_requirements(buffer) };
        if flags.contains(LAZY) {
            assert_eq!(
                requirements.memory_type_bits & (1 << index),
                0,
                "no buffer in type {index}"
            );
            // SAFETY: never bound.
            unsafe { device.destroy_buffer(buffer, None) };
            exercise_a_transient_attachment(context, index);
            continue;
        }
        assert_ne!(
            requirements.memory_type_bits & (1 << index),
            0,
            "buffers fit every type but lazily allocated ones"
        );
        let memory = allocate(context, index, requirements.size).unwrap();
        // SAFETY: offset 0 satisfies any alignment; the type is allowed.
        unsafe { device.bind_buffer_memory(buffer, memory, 0) }.unwrap();
        let pattern = 0x0101_0101 * (index + 1);
        fill(context, buffer, pattern);
        if flags.contains(HV) {
            // SAFETY: host-visible memory, mapped once, read and written
            // within the buffer after the fill completed; ranges are whole or
            // atom-aligned.
            unsafe {
                let data = device
                    .map_memory(memory, 0, vk::WHOLE_SIZE, vk::MemoryMapFlags::empty())
                    .unwrap()
                    .cast::<u32>();
                let whole = [vk::MappedMemoryRange::default()
                    .memory(memory)
                    .offset(0)
                    .size(vk::WHOLE_SIZE)];
                if !flags.contains(HC) {
                    device.invalidate_mapped_memory_ranges(&whole).unwrap();
                }
                let words = std::slice::from_raw_parts_mut(data, (SIZE / 4) as usize);
                assert!(
                    words.iter().all(|&w| w == pattern),
                    "type {index} reads back its fill"
                );
                words[(atom / 4) as usize] = !pattern;
                if !flags.contains(HC) {
                    let range = vk::MappedMemoryRange::default()
                        .memory(memory)
                        .offset(atom)
                        .size(atom);
                    device.flush_mapped_memory_ranges(&[range]).unwrap();
                }
                device.unmap_memory(memory);
            }
        }
        // SAFETY: the GPU finished with the buffer (the fill was waited for).
        unsafe { device.destroy_buffer(buffer, None) };
        free(context, memory);
    }
}

/// A transient colour attachment in the lazily allocated type `index`,
/// cleared by a render pass; the memory's commitment can be queried.
fn exercise_a_transient_attachment(context: &VulkanContext, index: u32) {
    let device = &context.device;
    // SAFETY: a valid create info on a live device.
    let image = unsafe { device.create_image(&transient_attachment_info(32, 32), None) }.unwrap();
    // SAFETY: a live image.
    let requirements = unsafe { device.get_image_memory_requirements(image) };
    assert_ne!(
        requirements.memory_type_bits & (1 << index),
        0,
        "a transient image fits type {index}"
    );
    let memory = allocate(context, index, requirements.size).unwrap();
    // SAFETY: offset 0 satisfies any alignment; the type is allowed.
    unsafe { device.bind_image_memory(image, memory, 0) }.unwrap();
    context.clear_transient_attachment(image, (32, 32));
    // SAFETY: memory of a lazily allocated type (VUID-vkGetDeviceMemoryCommitment-memory-00690).
    let committed = unsafe { device.get_device_memory_commitment(memory) };
    // On lavapipe the layer backs the type with real memory that is not
    // lazily allocated, committed whole, and says so itself (lavapipe's own
    // answer for such memory is 0, NVIDIA's its 64 KiB page). A device of
    // its own may back it with a lazily allocated type of its own.
    if on_custom_device() {
        assert!(
            committed <= requirements.size,
            "{committed} bytes committed"
        );
    } else {
        assert_eq!(committed, requirements.size, "bytes committed");
    }
    // SAFETY: the render pass was waited for.
    unsafe { device.destroy_image(image, None) };
    free(context, memory);
}

/// An optimal image in its lowest allowed type, cleared on the GPU.
fn exercise_an_image(context: &VulkanContext) {
    let device = &context.device;
    // SAFETY: a valid create info on a live device.
    let image = unsafe { device.create_image(&image_info(), None) }.unwrap();
    // SAFETY: a live image.
    let requirements = unsafe { device.get_image_memory_requirements(image) };
    let index = requirements.memory_type_bits.trailing_zeros();
    let memory = allocate(context, index, requirements.size).unwrap();
    // SAFETY: offset 0 satisfies any alignment; the type is allowed.
    unsafe { device.bind_image_memory(image, memory, 0) }.unwrap();
    let range = vk::ImageSubresourceRange::default()
        .aspect_mask(vk::ImageAspectFlags::COLOR)
        .level_count(1)
        .layer_count(1);
    context.run_one_time_commands(|device, commands| {
        let to_transfer = vk::ImageMemoryBarrier::default()
            .dst_access_mask(vk::AccessFlags::TRANSFER_WRITE)
            .old_layout(vk::ImageLayout::UNDEFINED)
            .new_layout(vk::ImageLayout::TRANSFER_DST_OPTIMAL)
            .src_queue_family_index(vk::QUEUE_FAMILY_IGNORED)
            .dst_queue_family_index(vk::QUEUE_FAMILY_IGNORED)
            .image(image)
            .subresource_range(range);
        let color = vk::ClearColorValue {
            float32: [0.25, 0.5, 0.75, 1.0],
        };
        // SAFETY: a recording command buffer; the image is bound.
        unsafe {
            device.cmd_pipeline_barrier(
                commands,
                vk::PipelineStageFlags::TOP_OF_PIPE,
                vk::PipelineStageFlags::TRANSFER,
                vk::DependencyFlags::empty(),
                &[],
                &[],
                &[to_transfer],
            );
            device.cmd_clear_color_image(
                commands,
                image,
                vk::ImageLayout::TRANSFER_DST_OPTIMAL,
                &color,
                &[range],
            );
        }
    });
    // SAFETY: the clear was waited for.
    unsafe { device.destroy_image(image, None) };
    free(context, memory);
}

test_each_profile!(
    /// Correct use of every memory type and an image produces no message.
    fn clean_run_has_no_validation_messages(profile) {
        let context = VulkanContext::new(profile);
        exercise_every_memory_type(&context);
        exercise_an_image(&context);
        context.assert_no_validation_messages();
    }
);

/// The validation layer sees the AMD profile's device-coherent types as
/// such: allocating one without the feature is reported, so a test that
/// runs on that profile would catch the allocator using one.
#[test]
fn amd_device_coherent_types_need_their_feature() {
    let context = VulkanContext::new(Profile::Amd);
    let properties = context.memory_properties();
    let coherent: Vec<u32> = (0..properties.memory_type_count)
        .filter(|&index| {
            properties.memory_types[index as usize]
                .property_flags
                .contains(vk::MemoryPropertyFlags::DEVICE_COHERENT_AMD)
        })
        .collect();
    assert_eq!(coherent, [4, 5, 6, 7]);
    // The call is invalid, so its result means nothing; free it if any.
    if let Ok(memory) = allocate(&context, 4, 64 * 1024) {
        free(&context, memory);
    }
    context.expect_validation_messages(&["VUID-vkAllocateMemory-deviceCoherentMemory-02790"]);
}

/// Instances created at the same time in different threads keep their own
/// profiles (the profile travels in each instance's engine name).
#[test]
fn parallel_instances_keep_their_own_profiles() {
    let real_heaps = VulkanContext::new(Profile::Lavapipe)
        .memory_properties()
        .memory_heap_count;
    std::thread::scope(|scope| {
        for profile in Profile::ALL {
            scope.spawn(move || {
                let context = VulkanContext::new(profile);
                let heaps = context.memory_properties().memory_heap_count as usize;
                let want = if profile == Profile::Lavapipe {
                    real_heaps as usize
                } else {
                    expected(profile).heaps.len()
                };
                assert_eq!(heaps, want, "{profile}");
            });
        }
    });
}
