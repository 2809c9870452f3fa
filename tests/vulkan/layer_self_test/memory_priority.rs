//! `VK_EXT_memory_priority` as the layer emulates it: offered (extension
//! listed, `memoryPriority` reported) exactly on the profiles of GPUs that
//! have it or with `priority=on`, hidden with `priority=off`; enabled on a
//! device (the harness chains the feature structure behind others, which
//! the layer copies to take it out) and taken out of `vkAllocateMemory`'s
//! chain wherever it stands, the priority recorded; and the validation
//! layer above checks the structure's range.

use ash::vk;

use crate::support::{test_each_fake_profile, Advice, ContextOptions, VulkanContext};

use super::{type_index, CACHED, HV, MIB};

/// Whether the device lists `VK_EXT_memory_priority`, and `memoryPriority`.
fn offered(context: &VulkanContext) -> (bool, bool) {
    // SAFETY: a physical device of this instance.
    let extensions = unsafe {
        context
            .instance
            .enumerate_device_extension_properties(context.physical_device)
    }
    .unwrap();
    let listed = extensions
        .iter()
        .any(|e| e.extension_name_as_c_str() == Ok(ash::ext::memory_priority::NAME));
    let mut priority = vk::PhysicalDeviceMemoryPriorityFeaturesEXT::default();
    let mut features = vk::PhysicalDeviceFeatures2::default().push_next(&mut priority);
    // SAFETY: a valid output chain.
    unsafe {
        context
            .instance
            .get_physical_device_features2(context.physical_device, &mut features)
    };
    (listed, priority.memory_priority == vk::TRUE)
}

/// `vkAllocateMemory` of `size` bytes in type 0 with `priority` chained
/// between a flags structure and a dedicated one (none), all three.
fn allocate_with_priority(
    context: &VulkanContext,
    size: u64,
    priority: f32,
) -> Result<vk::DeviceMemory, vk::Result> {
    allocate_in_type_with_priority(context, 0, size, priority)
}

/// [`allocate_with_priority`] in memory type `index`.
fn allocate_in_type_with_priority(
    context: &VulkanContext,
    index: u32,
    size: u64,
    priority: f32,
) -> Result<vk::DeviceMemory, vk::Result> {
    context.allow(Advice::SmallMemory);
    context.allow_own_allocations();
    let mut flags = vk::MemoryAllocateFlagsInfo::default();
    let mut priority = vk::MemoryPriorityAllocateInfoEXT::default().priority(priority);
    let mut dedicated = vk::MemoryDedicatedAllocateInfo::default();
    let info = vk::MemoryAllocateInfo::default()
        .allocation_size(size)
        .memory_type_index(index)
        .push_next(&mut flags)
        .push_next(&mut priority)
        .push_next(&mut dedicated);
    // SAFETY: a valid allocate info on the context's live device.
    unsafe { context.device.allocate_memory(&info, None) }
}

test_each_fake_profile!(
    /// The extension and feature are offered where the profile says, and
    /// by `priority=on|off` whatever it says; the harness enables them.
    fn the_extension_is_offered_where_the_profile_says(profile) {
        for (option, want) in [
            (None, profile.has_memory_priority()),
            (Some(true), true),
            (Some(false), false),
        ] {
            let options = match option {
                Some(on) => ContextOptions::default().memory_priority(on),
                None => ContextOptions::default(),
            };
            let context = VulkanContext::with_options(profile, options);
            assert_eq!(offered(&context), (want, want), "{profile} {option:?}");
            assert_eq!(context.memory_priority_enabled, want, "{profile} {option:?}");
            assert_eq!(context.seen_memory_priorities(), [], "{profile}");
            context.assert_no_validation_messages();
        }
    }
);

test_each_fake_profile!(
    /// The layer takes the structure out wherever it stands in the chain
    /// (the driver has no such extension) and records its priority; the
    /// validation layer above reports a priority out of range.
    fn priorities_are_recorded_and_checked_above(profile) {
        let context =
            VulkanContext::with_options(profile, ContextOptions::default().memory_priority(true));
        let first = allocate_with_priority(&context, MIB, 0.25).unwrap();
        let second = allocate_with_priority(&context, 2 * MIB, 1.0).unwrap();
        assert_eq!(context.seen_memory_priorities(), [(MIB, 0, 0.25), (2 * MIB, 0, 1.0)]);
        context.assert_no_validation_messages();
        // Out of range: the validation layer reports it (the call goes on).
        let third = allocate_with_priority(&context, MIB, 1.5).unwrap();
        context.expect_validation_messages(&["VUID-VkMemoryPriorityAllocateInfoEXT-priority-02602"]);
        assert_eq!(context.seen_memory_priorities().len(), 3);
        for memory in [first, second, third] {
            // SAFETY: memory of this device, unused.
            unsafe { context.device.free_memory(memory, None) };
        }
        context.assert_no_validation_messages();
    }
);

/// New memory of a non-coherent type allocated with a priority behind
/// another structure: the layer takes the priority out (copying the
/// structure before it), then looks for an import in the chain before it
/// writes its fresh-memory pattern. It looked in the chain it had handed
/// the driver, whose copies it had already freed (a read after free: the
/// process crashed, or the walk went astray). Each new memory object must
/// hold the pattern: no atom of one value.
#[test]
fn non_coherent_memory_allocated_with_a_priority_gets_the_fresh_pattern() {
    const SIZE: u64 = 64 * 1024;
    let context = VulkanContext::with_options(
        crate::support::Profile::Discrete,
        ContextOptions::default().memory_priority(true),
    );
    let atom = context.properties().limits.non_coherent_atom_size as usize;
    let index = type_index(&context, true, HV | CACHED);
    for round in 0..32 {
        let memory = allocate_in_type_with_priority(&context, index, SIZE, 0.5).unwrap();
        // SAFETY: host-visible memory, mapped once, whole, read, unmapped.
        let fresh = unsafe {
            let data = context
                .device
                .map_memory(memory, 0, vk::WHOLE_SIZE, vk::MemoryMapFlags::empty())
                .unwrap()
                .cast::<u8>();
            let fresh = std::slice::from_raw_parts(data, SIZE as usize).to_vec();
            context.device.unmap_memory(memory);
            fresh
        };
        // SAFETY: memory of this device, unused.
        unsafe { context.device.free_memory(memory, None) };
        let constant = fresh
            .chunks(atom)
            .position(|bytes| bytes.iter().all(|&b| b == bytes[0]));
        assert_eq!(
            constant, None,
            "round {round}: an atom of new memory holds one value"
        );
    }
    context.assert_no_validation_messages();
}
