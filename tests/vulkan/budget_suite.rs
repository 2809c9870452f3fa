//! The allocator against `VK_EXT_memory_budget` as drivers report it, under
//! the validation layer: the fake-memory layer's `heapBudget` sits below
//! each heap's size and moves with its usage, as Mesa's drivers report it.

use vk_suballoc::{AllocationDesc, Error, Usage};

use super::allocator_setup::{allocator_for, buffer_info};
use crate::support::{test_each_fake_profile, VulkanContext};

const MIB: u64 = 1 << 20;

test_each_fake_profile!(
    /// Requests that must stay within budget stop with `OverBudget`, from
    /// the budget the driver reports (below the heap's size), not with
    /// `OutOfDeviceMemory` at the heap's end.
    fn within_budget_requests_stop_at_the_drivers_budget(profile) {
        let context = VulkanContext::new(profile);
        let allocator = allocator_for(&context);
        let within = AllocationDesc::new(Usage::DEVICE_LOCAL).within_budget();
        let mut live = Vec::new();
        let error = loop {
            // SAFETY: a valid create info.
            match unsafe { allocator.create_buffer(&buffer_info(24 * MIB), &within) } {
                Ok(pair) => live.push(pair),
                Err(error) => break error,
            }
            assert!(live.len() < 1000, "{profile}: never stopped");
        };
        let Error::OverBudget { heap, size, usage, budget } = error else {
            panic!("{profile}: {error:?}");
        };
        let driver = context.memory_budget().unwrap()[heap as usize];
        assert_eq!((usage, budget), (driver.usage, driver.budget), "{profile}");
        assert!(usage + size > budget, "{profile}: {error:?}");
        assert!(budget < context.memory_properties().memory_heaps[heap as usize].size, "{profile}");
        // SAFETY: never used by the GPU.
        unsafe {
            for (handle, allocation) in live {
                allocator.destroy_buffer(handle, allocation).unwrap();
            }
        }
        context.assert_no_validation_messages();
    }
);
