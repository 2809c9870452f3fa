//! The allocator against `VK_EXT_memory_budget` as drivers report it, under
//! the validation layer: the fake-memory layer's `heapBudget` sits below
//! each heap's size and moves with its usage, as Mesa's drivers report it;
//! and, on the profiles of GPUs without the extension (integrated, mobile,
//! apple, mali), against the allocator's own budget, a fraction of each
//! heap.

use vk_suballoc::{AllocationDesc, Config, Error, Usage};

use super::allocator_setup::{allocator_for, buffer_info};
use crate::support::{test_each_fake_profile, VulkanContext};

const MIB: u64 = 1 << 20;

test_each_fake_profile!(
    /// Requests that must stay within budget stop with `OverBudget`, from
    /// the budget the driver reports (below the heap's size), or without
    /// the extension from `Config::budget_fraction` of the heap and the
    /// allocator's own usage, not with `OutOfDeviceMemory` at the heap's
    /// end.
    fn within_budget_requests_stop_at_the_heaps_budget(profile) {
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
        let heap_size = context.memory_properties().memory_heaps[heap as usize].size;
        match context.memory_budget() {
            Some(driver) => {
                let driver = driver[heap as usize];
                assert_eq!((usage, budget), (driver.usage, driver.budget), "{profile}");
            }
            None => {
                assert!(!profile.has_memory_budget(), "{profile}");
                let ours = allocator.budgets()[heap as usize];
                assert_eq!((usage, budget), (ours.usage, ours.budget), "{profile}");
                assert_eq!(budget, (heap_size as f64 * Config::default().budget_fraction) as u64, "{profile}");
            }
        }
        assert!(usage + size > budget, "{profile}: {error:?}");
        assert!(budget < heap_size, "{profile}");
        // SAFETY: never used by the GPU.
        unsafe {
            for (handle, allocation) in live {
                allocator.destroy_buffer(handle, allocation).unwrap();
            }
        }
        context.assert_no_validation_messages();
    }
);
