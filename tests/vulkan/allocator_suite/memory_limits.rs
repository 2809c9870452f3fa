//! The allocator at the driver's limits, on the fake profiles, which can
//! fail calls and fill heaps: a failed `vkAllocateMemory` is retried with a
//! smaller block, then dedicated memory; a full heap falls back to the
//! next memory type in order and, when all are full, to a typed error; the
//! object limit is a typed error before the driver's; budgets are the
//! driver's; `maxBufferSize`, which upload rings' chunks are checked
//! against, is the driver's.

use ash::vk;
use vk_suballoc::device::MemoryDeviceExt;
use vk_suballoc::{AllocationDesc, DedicatedPolicy, Error, Usage};

use super::super::allocator_setup::{allocator_for, buffer_info};
use crate::support::{test_each_fake_profile, Advice, ContextOptions, Profile, VulkanContext};

use super::{buffer, MIB};

test_each_fake_profile!(
    /// The driver fails the first `vkAllocateMemory`: the allocator retries
    /// with a smaller block, silently for the validation layer.
    fn a_failed_allocation_retries_smaller(profile) {
        let context = VulkanContext::with_options(profile, ContextOptions::default().fail_allocation(1));
        // The layer fails vkAllocateMemory on purpose.
        context.allow(Advice::FailingCalls);
        let allocator = allocator_for(&context);
        let (handle, allocation) = buffer(&allocator, 64 << 10, AllocationDesc::new(Usage::DEVICE_LOCAL));
        let stats = allocator.stats();
        assert_eq!(stats.memory_objects, 1);
        let block = stats.memory_types[allocation.memory_type() as usize].block_bytes;
        let heap = context.memory_properties().memory_heaps[0].size;
        let first_block = if heap > 1 << 30 { 32 * MIB } else { heap / 64 };
        assert_eq!(block, first_block / 2, "{profile}: retried at half the size");
        // SAFETY: never used by the GPU.
        unsafe { allocator.destroy_buffer(handle, allocation) }.unwrap();
    }
);

test_each_fake_profile!(
    /// Filling device-local memory moves on to smaller blocks, dedicated
    /// memory and the next memory type; when every type is full the error is
    /// typed. The validation layer sees nothing wrong on the way.
    fn exhausting_a_heap_falls_back_in_order(profile) {
        let context = VulkanContext::new(profile);
        // The heap runs out on purpose.
        context.allow(Advice::FailingCalls);
        let allocator = allocator_for(&context);
        let mut live = Vec::new();
        let mut types = Vec::new();
        let error = loop {
            // SAFETY: a valid create info.
            match unsafe { allocator.create_buffer(&buffer_info(24 * MIB), &AllocationDesc::new(Usage::DEVICE_LOCAL)) } {
                Ok((handle, allocation)) => {
                    if types.last() != Some(&allocation.memory_type()) {
                        types.push(allocation.memory_type());
                    }
                    live.push((handle, allocation));
                }
                Err(error) => break error,
            }
            assert!(live.len() < 1000, "{profile}: never ran out");
        };
        assert_eq!(error, Error::OutOfDeviceMemory, "{profile}");
        match profile {
            // VRAM, then the BAR, then system memory.
            // (Type 2 shares the system heap with type 1, so it is full too.)
            Profile::Discrete => assert_eq!(types, vec![0, 3, 1]),
            // The same, and never AMD's device-coherent duplicates (4-7),
            // which the validation layer would report.
            Profile::Amd => assert_eq!(types, vec![0, 2, 1]),
            // VRAM, then system memory: the host-visible VRAM type (3)
            // shares the full heap.
            Profile::Rebar => assert_eq!(types, vec![0, 1]),
            // VRAM, then the 256 MiB BAR, then (cached) system memory.
            Profile::Arc => assert_eq!(types, vec![0, 2, 1]),
            // One heap: every type shares it, so the first one fills it.
            _ => assert_eq!(types[0], 0),
        }
        // SAFETY: never used by the GPU.
        unsafe {
            for (handle, allocation) in live {
                allocator.destroy_buffer(handle, allocation).unwrap();
            }
        }
        allocator.trim();
        assert_eq!(allocator.stats().memory_objects, 0);
    }
);

test_each_fake_profile!(
    /// With `maxMemoryAllocationCount` at 8 the allocator refuses the 9th
    /// memory object itself: a typed error and no VUID-...-04101.
    fn too_many_objects_is_a_typed_error(profile) {
        let context = VulkanContext::with_options(profile, ContextOptions::default().max_allocations(8));
        // KiB-sized dedicated buffers count the memory objects.
        context.allow(Advice::SmallMemory);
        let allocator = allocator_for(&context);
        let desc = AllocationDesc::new(Usage::DEVICE_LOCAL).dedicated(DedicatedPolicy::Always);
        let mut live = Vec::new();
        let error = loop {
            // SAFETY: a valid create info.
            match unsafe { allocator.create_buffer(&buffer_info(4096), &desc) } {
                Ok(pair) => live.push(pair),
                Err(error) => break error,
            }
        };
        assert_eq!(error, Error::TooManyObjects(8));
        assert_eq!(live.len(), 8);
        // SAFETY: never used by the GPU.
        unsafe {
            for (handle, allocation) in live {
                allocator.destroy_buffer(handle, allocation).unwrap();
            }
        }
    }
);

test_each_fake_profile!(
    /// Budgets come from `VK_EXT_memory_budget` and follow the allocator.
    fn budgets_match_the_driver(profile) {
        let context = VulkanContext::new(profile);
        let allocator = allocator_for(&context);
        let (handle, allocation) = buffer(&allocator, MIB, AllocationDesc::new(Usage::DEVICE_LOCAL));
        let ours = allocator.budgets();
        match context.memory_budget() {
            Some(driver) => {
                assert_eq!(ours.len(), driver.len());
                for (heap, (a, b)) in ours.iter().zip(&driver).enumerate() {
                    assert_eq!((a.budget, a.usage), (b.budget, b.usage), "{profile} heap {heap}");
                }
                let heap = context.memory_properties().memory_types[allocation.memory_type() as usize].heap_index;
                assert!(ours[heap as usize].usage >= allocator.stats().heaps[heap as usize].reserved_bytes);
            }
            None => assert!(ours.iter().all(|b| b.budget > 0)),
        }
        // SAFETY: never used by the GPU.
        unsafe { allocator.destroy_buffer(handle, allocation) }.unwrap();
    }
);

test_each_fake_profile!(
    /// The driver fails the block and its smaller retry: the request gets
    /// dedicated memory (or, where it is dedicated anyway, the next type).
    fn failed_blocks_fall_back_to_dedicated_memory(profile) {
        let options = ContextOptions::default().fail_allocation(1).fail_allocation(2);
        let context = VulkanContext::with_options(profile, options);
        // The layer fails vkAllocateMemory on purpose.
        context.allow(Advice::FailingCalls);
        let allocator = allocator_for(&context);
        let (handle, allocation) = buffer(&allocator, 20 * MIB, AllocationDesc::new(Usage::DEVICE_LOCAL));
        match profile {
            // 20 MiB wants a 64 MiB block; 64 and 32 fail; 16 is too small.
            Profile::Discrete
            | Profile::Integrated
            | Profile::Amd
            | Profile::Rebar
            | Profile::Arc
            | Profile::Apple
            | Profile::Mali => {
                assert!(allocation.is_dedicated(), "{profile}");
                assert_eq!(allocation.memory_type(), 0);
            }
            // Half the mobile heap's 32 MiB blocks: dedicated first (fails),
            // then a block (fails), then the next type.
            _ => assert_ne!(allocation.memory_type(), 0),
        }
        // SAFETY: never used by the GPU.
        unsafe { allocator.destroy_buffer(handle, allocation) }.unwrap();
    }
);

/// The ash backend reads `maxBufferSize` from
/// `VkPhysicalDeviceMaintenance4Properties` on a Vulkan 1.3 device: on
/// lavapipe it is what `vulkaninfo` shows there (0xffffffff with Mesa
/// 22.3), not `u64::MAX`, which would mean unknown and let upload rings
/// make buffers past it.
#[test]
fn the_backend_reads_max_buffer_size() {
    let context = VulkanContext::new(Profile::Lavapipe);
    assert!(context.properties().api_version >= vk::API_VERSION_1_3);
    let mut maintenance4 = vk::PhysicalDeviceMaintenance4Properties::default();
    let mut properties = vk::PhysicalDeviceProperties2::default().push_next(&mut maintenance4);
    // SAFETY: a live physical device of this Vulkan 1.3 instance, which
    // reports Vulkan 1.3: the maintenance4 struct is core.
    unsafe {
        context
            .instance
            .get_physical_device_properties2(context.physical_device, &mut properties);
    }
    let expected = maintenance4.max_buffer_size;
    assert!(expected >= 1 << 30 && expected != u64::MAX, "{expected:#x}");
    let allocator = allocator_for(&context);
    let reported = allocator.device().memory_properties().max_buffer_size;
    assert_eq!(reported, expected);
}
