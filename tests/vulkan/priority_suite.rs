//! Memory priorities (`VK_EXT_memory_priority`) on a real driver, under the
//! validation layer, once per fake memory architecture. Lavapipe lacks the
//! extension; the fake-memory layer offers it (`priority=on`), takes the
//! structure out before the driver sees it and records what it saw, so the
//! validation layer above checks every `VkMemoryPriorityAllocateInfoEXT` the
//! allocator chains (its range, VUID-VkMemoryPriorityAllocateInfoEXT-priority-02602)
//! and the test reads the priorities back from the layer.

use vk_suballoc::{AllocationDesc, DedicatedPolicy, PoolDesc, Usage};

use super::allocator_setup::{allocator_for, buffer_info, image_info};
use crate::support::{test_each_fake_profile, Advice, ContextOptions, VulkanContext};

const MIB: u64 = 1 << 20;

test_each_fake_profile!(
    /// Dedicated memory, a custom pool's blocks and its dedicated memory
    /// carry their priorities, clamped to `[0, 1]`, NaN as 0.5; memory of
    /// the default pools' blocks carries Vulkan's default, 0.5 (said, so
    /// that NVIDIA's best practices see a priority on every allocation).
    /// No validation message.
    fn priorities_reach_the_driver_clamped(profile) {
        let context =
            VulkanContext::with_options(profile, ContextOptions::default().memory_priority(true));
        assert!(context.memory_priority_enabled, "{profile}: priority=on offers the extension");
        let allocator = allocator_for(&context);
        // Dedicated memory for small resources, on purpose: allowed for
        // those calls alone, so that the default pool's block and the
        // custom pools' blocks still may not be small.
        let small = [Advice::SmallMemory];
        let mut expected: Vec<(u64, u32, f32)> = Vec::new();
        let mut buffers = Vec::new();
        let mut images = Vec::new();
        // SAFETY: valid create infos on the allocator's device; every
        // resource is destroyed before the allocator.
        unsafe {
            // A default pool's block: the request's priority is for
            // dedicated memory only, the block gets the default.
            let desc = AllocationDesc::new(Usage::DEVICE_LOCAL).priority(0.9);
            let (buffer, allocation) = allocator.create_buffer(&buffer_info(4096), &desc).unwrap();
            assert!(!allocation.is_dedicated());
            expected.push((allocator.memory_size(&allocation).unwrap(), allocation.memory_type(), 0.5));
            buffers.push((buffer, allocation));

            for (asked, sent) in [(0.25, 0.25), (7.0, 1.0), (-3.0, 0.0), (f32::NAN, 0.5)] {
                let desc = AllocationDesc::new(Usage::DEVICE_LOCAL)
                    .dedicated(DedicatedPolicy::Always)
                    .priority(asked);
                let (buffer, allocation) = context
                    .allowing(&small, || allocator.create_buffer(&buffer_info(64 * 1024), &desc))
                    .unwrap();
                expected.push((
                    allocator.memory_size(&allocation).unwrap(),
                    allocation.memory_type(),
                    sent,
                ));
                buffers.push((buffer, allocation));
            }
            let desc = AllocationDesc::new(Usage::DEVICE_LOCAL)
                .dedicated(DedicatedPolicy::Always)
                .priority(f32::INFINITY);
            let (image, allocation) = context
                .allowing(&small, || allocator.create_image(&image_info(64, 64), &desc))
                .unwrap();
            expected.push((allocator.memory_size(&allocation).unwrap(), allocation.memory_type(), 1.0));
            images.push((image, allocation));

            // Custom pools: their blocks take the pool's priority, their
            // dedicated memory the request's, else the pool's.
            let memory_type =
                allocator.memory_type_for_buffer(&buffer_info(4096), Usage::UPLOAD).unwrap();
            let mut pools = Vec::new();
            for (asked, sent) in [(2.0, 1.0), (f32::NAN, 0.5), (f32::NEG_INFINITY, 0.0)] {
                let pool = allocator
                    .create_pool(&PoolDesc::new(memory_type).block_size(MIB).priority(asked))
                    .unwrap();
                pools.push(pool);
                let desc = AllocationDesc::new(Usage::UPLOAD).pool(pool);
                let (buffer, allocation) = allocator.create_buffer(&buffer_info(4096), &desc).unwrap();
                assert!(!allocation.is_dedicated());
                expected.push((allocator.memory_size(&allocation).unwrap(), memory_type, sent));
                buffers.push((buffer, allocation));
                let desc = desc.dedicated(DedicatedPolicy::Always);
                let (buffer, allocation) = context
                    .allowing(&small, || allocator.create_buffer(&buffer_info(8192), &desc))
                    .unwrap();
                expected.push((allocator.memory_size(&allocation).unwrap(), memory_type, sent));
                buffers.push((buffer, allocation));
                let (buffer, allocation) = context
                    .allowing(&small, || {
                        allocator.create_buffer(&buffer_info(8192), &desc.priority(-0.5))
                    })
                    .unwrap();
                expected.push((allocator.memory_size(&allocation).unwrap(), memory_type, 0.0));
                buffers.push((buffer, allocation));
            }
            assert_eq!(context.seen_memory_priorities(), expected, "{profile}");
            for (buffer, allocation) in buffers {
                allocator.destroy_buffer(buffer, allocation).unwrap();
            }
            for (image, allocation) in images {
                allocator.destroy_image(image, allocation).unwrap();
            }
            for pool in pools {
                allocator.destroy_pool(pool).unwrap();
            }
        }
        drop(allocator);
        context.assert_no_validation_messages();
    }
);

/// On a profile that does not offer the extension, an allocator left
/// untold of it chains no priority (the validation layer would report the
/// structure without its extension, VUID-VkMemoryAllocateInfo-pNext-pNext).
#[test]
fn no_priority_without_the_extension() {
    let context = VulkanContext::with_options(
        crate::support::Profile::Discrete,
        ContextOptions::default().memory_priority(false),
    );
    assert!(!context.memory_priority_enabled);
    context.allow(Advice::SmallMemory);
    let allocator = allocator_for(&context);
    let desc = AllocationDesc::new(Usage::DEVICE_LOCAL)
        .dedicated(DedicatedPolicy::Always)
        .priority(0.75);
    // SAFETY: a valid create info; the buffer is destroyed before the allocator.
    unsafe {
        let (buffer, allocation) = allocator.create_buffer(&buffer_info(4096), &desc).unwrap();
        allocator.destroy_buffer(buffer, allocation).unwrap();
    }
    assert_eq!(context.seen_memory_priorities(), []);
    drop(allocator);
    context.assert_no_validation_messages();
}
