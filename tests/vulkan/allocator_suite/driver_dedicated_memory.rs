//! Dedicated memory the driver prefers or requires for a resource
//! (`dedicated=prefer` / `dedicated=require` of the fake layer): the
//! create-and-bind helpers honour it, and so do `allocate_for_buffer` and
//! `allocate_for_image` for resources the caller created, which also request
//! what the helpers would (the tiling's kind, device addresses). The
//! validation layer and the fake layer check every bind.

use ash::vk;
use vk_suballoc::report::RangeKind;
use vk_suballoc::{Allocation, AllocationDesc, DedicatedPolicy, UploadRingDesc, Usage};

use super::super::allocator_setup::{allocator_for, buffer_info, image_info};
use crate::support::{
    test_each_fake_profile, test_each_profile, Advice, ContextOptions, Profile, VulkanContext,
};

test_each_fake_profile!(
    /// A driver that prefers dedicated memory for a resource gets it from
    /// the create-and-bind helpers, unless the caller said `Never`; one that
    /// requires it always gets it. The validation layer checks every bind
    /// against what the driver reported.
    fn driver_dedicated_requirements_are_honoured(profile) {
        for (mode, required) in [("prefer", false), ("require", true)] {
            let options = ContextOptions::default().dedicated(mode);
            let context = VulkanContext::with_options(profile, options);
            let allocator = allocator_for(&context);
            let auto = AllocationDesc::new(Usage::DEVICE_LOCAL);
            let never = auto.dedicated(DedicatedPolicy::Never);
            // The fake driver prefers or requires dedicated memory for
            // KiB-sized resources: allowed for the calls that take it, so
            // that a block (`Never` where the driver only prefers it, the
            // upload ring's 4 MiB chunk) still may not be small.
            let small = [Advice::SmallMemory];
            let small_if_required = if required { &small[..] } else { &[] };
            // SAFETY: valid create infos; nothing is used by the GPU.
            unsafe {
                let (buffer, a) =
                    context.allowing(&small, || allocator.create_buffer(&buffer_info(4096), &auto)).unwrap();
                let (image, b) =
                    context.allowing(&small, || allocator.create_image(&image_info(16, 16), &auto)).unwrap();
                let (kept, c) = context
                    .allowing(small_if_required, || allocator.create_buffer(&buffer_info(4096), &never))
                    .unwrap();
                assert!(a.is_dedicated() && b.is_dedicated(), "{profile} {mode}");
                assert_eq!(c.is_dedicated(), required, "{profile} {mode}");
                allocator.destroy_buffer(buffer, a).unwrap();
                allocator.destroy_image(image, b).unwrap();
                allocator.destroy_buffer(kept, c).unwrap();
            }
            assert_eq!(allocator.stats().memory_objects, u32::from(!required));
            // Upload-ring chunks share blocks unless the driver requires
            // dedicated memory.
            let ring = allocator.create_upload_ring(&UploadRingDesc::default()).unwrap();
            let dedicated: u64 = allocator
                .stats()
                .memory_types
                .iter()
                .map(|t| t.dedicated_allocations)
                .sum();
            assert_eq!(dedicated, u64::from(required), "{profile} {mode}");
            allocator.destroy_upload_ring(ring).unwrap();
        }
    }
);

test_each_profile!(
    /// Engines that create their own resources: `allocate_for_buffer` and
    /// `allocate_for_image` request what `create_buffer` / `create_image`
    /// would (the driver's dedicated memory, made for that resource; device
    /// addresses), and the caller's own binds pass validation. On the fake
    /// profiles the driver also prefers, then requires, dedicated memory.
    fn memory_for_resources_the_caller_created(profile) {
        let modes: &[Option<&'static str>] = match profile {
            Profile::Lavapipe => &[None],
            _ => &[None, Some("prefer"), Some("require")],
        };
        for &mode in modes {
            let options = match mode {
                Some(mode) => ContextOptions::default().dedicated(mode),
                None => ContextOptions::default(),
            };
            let context = VulkanContext::with_options(profile, options);
            // A linear image among the caller's resources, on purpose.
            context.allow(Advice::LinearImages);
            if mode.is_some() {
                // The fake driver's dedicated memory for KiB-sized resources.
                context.allow(Advice::SmallMemory);
            }
            let allocator = allocator_for(&context);
            let device = &context.device;
            let desc = AllocationDesc::new(Usage::DEVICE_LOCAL).name("own");
            let buffer_info = buffer_info(4096).usage(
                vk::BufferUsageFlags::STORAGE_BUFFER | vk::BufferUsageFlags::SHADER_DEVICE_ADDRESS,
            );
            let image_info = image_info(32, 32);
            let linear_info = image_info.tiling(vk::ImageTiling::LINEAR);
            // SAFETY: valid create infos; each resource is bound once, to
            // memory allocated for it, and never used by the GPU.
            unsafe {
                let buffer = device.create_buffer(&buffer_info, None).unwrap();
                let image = device.create_image(&image_info, None).unwrap();
                let linear = device.create_image(&linear_info, None).unwrap();
                let a = allocator.allocate_for_buffer(buffer, buffer_info.usage, &desc).unwrap();
                let b = allocator.allocate_for_image(image, image_info.tiling, &desc).unwrap();
                let c = allocator.allocate_for_image(linear, linear_info.tiling, &desc).unwrap();
                for allocation in [&a, &b, &c] {
                    assert_eq!(allocation.is_dedicated(), mode.is_some(), "{profile} {mode:?}");
                }
                // The tiling decides the kind, for bufferImageGranularity.
                let map = allocator.memory_map();
                let kind_of = |allocation: &Allocation| {
                    let memory_type = &map.memory_types[allocation.memory_type() as usize];
                    let in_blocks = memory_type.blocks.iter().filter(|block| block.memory == allocation.memory());
                    let ranges = in_blocks.flat_map(|block| &block.ranges).filter(|r| r.offset == allocation.offset());
                    let dedicated = memory_type.dedicated.iter().filter(|d| d.memory == allocation.memory());
                    ranges.map(|r| r.kind).chain(dedicated.map(|d| d.kind)).next()
                };
                assert_eq!(kind_of(&b), Some(RangeKind::ImageOptimal), "{profile} {mode:?}");
                assert_eq!(kind_of(&c), Some(RangeKind::ImageLinear), "{profile} {mode:?}");
                device.bind_buffer_memory(buffer, a.memory(), a.offset()).unwrap();
                device.bind_image_memory(image, b.memory(), b.offset()).unwrap();
                device.bind_image_memory(linear, c.memory(), c.offset()).unwrap();
                // Its memory was allocated with the device-address flag
                // (VUID-vkBindBufferMemory-bufferDeviceAddress-03339, which
                // the validation layer checked on the bind above).
                let address = device.get_buffer_device_address(
                    &vk::BufferDeviceAddressInfo::default().buffer(buffer),
                );
                assert_ne!(address, 0, "{profile} {mode:?}");
                allocator.destroy_buffer(buffer, a).unwrap();
                allocator.destroy_image(image, b).unwrap();
                allocator.destroy_image(linear, c).unwrap();
            }
            assert_eq!(allocator.stats().allocations(), 0);
        }
    }
);
