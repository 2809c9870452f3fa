//! Each profile presents the memory architecture it promises: heaps,
//! memory types, device type, limits and budget, the type bits and
//! alignments of every requirements query (the lazily allocated types only
//! for transient attachments), and its own profile in each of several
//! instances made at once. What each fake profile must report is written out
//! here, independently of the layer, so a change to either shows.
//!
//! This file holds those expectations and the tests of heaps, types, limits,
//! budget and instances; the requirements queries' tests are in
//! `memory_architecture/requirements.rs`.

use ash::vk;

use crate::support::{
    on_custom_device, test_each_fake_profile, test_each_profile, ContextOptions, Profile,
    VulkanContext,
};

use super::{budgeted, expected_budget, MIB};

#[path = "memory_architecture/requirements.rs"]
mod requirements;

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
