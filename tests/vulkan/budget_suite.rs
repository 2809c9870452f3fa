//! The allocator against `VK_EXT_memory_budget` as drivers report it, under
//! the validation layer: the fake-memory layer's `heapBudget` sits below
//! each heap's size and moves with its usage, as Mesa's drivers report it;
//! and, on the profiles of GPUs without the extension (integrated, mobile,
//! apple, mali), against the allocator's own budget, a fraction of each
//! heap.

use vk_suballoc::{AllocationDesc, Config, Error, Usage};

use super::allocator_setup::{allocator_configured, allocator_for, buffer_info};
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

/// `Config::heap_size_limits` on drivers, under the validation layer: a
/// heap limited to 64 MiB looks 64 MiB large (stats, budget), holds at
/// most 64 MiB of the allocator's memory, and requests past it fail on
/// lavapipe (one heap) and move to the other heaps on the discrete
/// profile, with no validation message either way.
#[test]
fn a_limited_heap_holds_no_more_than_its_limit() {
    use crate::support::Profile;

    for profile in [Profile::Lavapipe, Profile::Discrete] {
        let context = VulkanContext::new(profile);
        let mut config = Config::default();
        config.heap_size_limits[0] = 64 * MIB;
        let allocator = allocator_configured(&context, config);
        let stats = allocator.stats();
        assert_eq!(stats.heaps[0].size, 64 * MIB, "{profile}");
        assert!(stats.heaps[0].budget.budget <= 64 * MIB, "{profile}");
        let desc = AllocationDesc::new(Usage::DEVICE_LOCAL);
        let mut live = Vec::new();
        let mut refused = None;
        for _ in 0..8 {
            // SAFETY: a valid create info.
            match unsafe { allocator.create_buffer(&buffer_info(16 * MIB), &desc) } {
                Ok(pair) => live.push(pair),
                Err(error) => {
                    refused = Some(error);
                    break;
                }
            }
            let heap_0 = allocator.stats().heaps[0].reserved_bytes;
            assert!(heap_0 <= 64 * MIB, "{profile}: {heap_0} bytes in heap 0");
        }
        if profile == Profile::Lavapipe {
            assert!(
                matches!(refused, Some(Error::OutOfDeviceMemory)),
                "{profile}: {refused:?}"
            );
        } else {
            assert!(refused.is_none(), "{profile}: {refused:?}");
            assert_eq!(live.len(), 8, "{profile}");
        }
        // SAFETY: never used by the GPU.
        unsafe {
            for (handle, allocation) in live {
                allocator.destroy_buffer(handle, allocation).unwrap();
            }
        }
        context.assert_no_validation_messages();
    }
}
