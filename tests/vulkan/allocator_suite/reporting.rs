//! What the allocator tells tools outside it about its memory: the memory
//! callback's events carry the driver's handles and the dedicated memory's
//! name, debug names (and renamed dedicated memory) reach the validation
//! layer's messages, and dumps name the GPU. All on lavapipe, whose
//! validation messages name the memory objects.

use ash::vk;
use vk_suballoc::report::GpuInfo;
use vk_suballoc::{AllocationDesc, DedicatedPolicy, Usage};

use super::super::allocator_setup::allocator_for;
use crate::support::{Advice, Profile, VulkanContext};

use super::{buffer, MIB};

/// The memory callback reports the driver's handles: the memory a buffer
/// was bound to is among the `Allocated` events, with the dedicated
/// memory's name, and every handle is `Freed` once by the time the
/// allocator is dropped.
#[test]
fn memory_events_name_the_drivers_handles() {
    use std::sync::{Arc, Mutex};
    use vk_suballoc::MemoryEventKind;
    let context = VulkanContext::new(Profile::Lavapipe);
    let mut allocator = allocator_for(&context);
    let events = Arc::new(Mutex::new(Vec::new()));
    let sink = Arc::clone(&events);
    allocator.set_memory_callback(move |event| {
        sink.lock().unwrap().push((
            event.kind,
            event.memory,
            event.size,
            event.name.map(str::to_owned),
        ));
    });
    let (small, small_memory) = buffer(&allocator, 4096, AllocationDesc::new(Usage::UPLOAD));
    let desc = AllocationDesc::new(Usage::DEVICE_LOCAL)
        .dedicated(DedicatedPolicy::Always)
        .name("target");
    let (large, large_memory) = buffer(&allocator, MIB, desc);
    {
        let events = events.lock().unwrap();
        let made = |memory: vk::DeviceMemory| {
            events
                .iter()
                .find(|(kind, m, ..)| *kind == MemoryEventKind::Allocated && *m == memory)
                .cloned()
        };
        assert!(made(small_memory.memory()).is_some());
        let (_, _, size, name) = made(large_memory.memory()).unwrap();
        assert_eq!(
            (size, name.as_deref()),
            (large_memory.size(), Some("target"))
        );
    }
    // SAFETY: never used by the GPU.
    unsafe {
        allocator.destroy_buffer(small, small_memory).unwrap();
        allocator.destroy_buffer(large, large_memory).unwrap();
    }
    drop(allocator);
    let events = events.lock().unwrap();
    for (kind, memory, ..) in events
        .iter()
        .filter(|(kind, ..)| *kind == MemoryEventKind::Allocated)
    {
        let freed = events
            .iter()
            .filter(|(k, m, ..)| *k == MemoryEventKind::Freed && m == memory)
            .count();
        assert_eq!(freed, 1, "{kind:?} {memory:?}");
    }
}

#[test]
fn debug_names_reach_the_validation_layer() {
    let context = VulkanContext::new(Profile::Lavapipe);
    let allocator = allocator_for(&context);
    let (block_buffer, block_allocation) =
        buffer(&allocator, 4096, AllocationDesc::new(Usage::UPLOAD));
    let dedicated = AllocationDesc::new(Usage::UPLOAD)
        .name("hero texture")
        .dedicated(DedicatedPolicy::Always);
    // A KiB-sized dedicated buffer carries a name: small memory on purpose,
    // for that call alone (the other buffer's block may not be small).
    let (own_buffer, own_allocation) = context.allowing(&[Advice::SmallMemory], || {
        buffer(&allocator, 4096, dedicated)
    });
    for memory in [block_allocation.memory(), own_allocation.memory()] {
        // Mapping memory the allocator keeps mapped is an error the layer
        // reports, naming the memory object.
        // SAFETY: deliberately invalid (already mapped): the validation layer
        // reports it; lavapipe just returns the same pointer again.
        let _ = unsafe {
            context
                .device
                .map_memory(memory, 0, 64, vk::MemoryMapFlags::empty())
        };
    }
    let messages = context.expect_validation_messages(&["VUID-vkMapMemory-memory-00678"]);
    let all = messages.join("\n");
    // Blocks are named "vk-suballoc block <memory type>/<index>".
    let block_name = format!("vk-suballoc block {}/0", block_allocation.memory_type());
    assert!(all.contains(&block_name), "{all}");
    assert!(all.contains("hero texture"), "{all}");
    // SAFETY: never used by the GPU.
    unsafe {
        allocator
            .destroy_buffer(block_buffer, block_allocation)
            .unwrap();
        allocator
            .destroy_buffer(own_buffer, own_allocation)
            .unwrap();
    }
}

/// `set_name` on dedicated memory renames the `VkDeviceMemory` for the
/// validation layer, without a message of its own: to the new name, then,
/// for `None`, to the name unnamed dedicated memory is made with.
#[test]
fn renamed_dedicated_memory_reaches_the_validation_layer() {
    let context = VulkanContext::new(Profile::Lavapipe);
    // A KiB-sized dedicated buffer carries a name.
    context.allow(Advice::SmallMemory);
    let allocator = allocator_for(&context);
    let dedicated = AllocationDesc::new(Usage::UPLOAD)
        .name("before rename")
        .dedicated(DedicatedPolicy::Always);
    let (handle, allocation) = buffer(&allocator, 4096, dedicated);
    // Mapping memory the allocator keeps mapped is an error the layer
    // reports, naming the memory object.
    let map_again = || {
        // SAFETY: deliberately invalid (already mapped): the validation
        // layer reports it; lavapipe just returns the same pointer again.
        let _ = unsafe {
            context
                .device
                .map_memory(allocation.memory(), 0, 64, vk::MemoryMapFlags::empty())
        };
        context
            .expect_validation_messages(&["VUID-vkMapMemory-memory-00678"])
            .join("\n")
    };

    allocator
        .set_name(&allocation, Some("after rename"))
        .unwrap();
    context.assert_no_validation_messages();
    let all = map_again();
    assert!(all.contains("after rename"), "{all}");
    assert!(!all.contains("before rename"), "{all}");

    allocator.set_name(&allocation, None).unwrap();
    context.assert_no_validation_messages();
    let all = map_again();
    let unnamed = format!("vk-suballoc dedicated {}/", allocation.memory_type());
    assert!(all.contains(&unnamed), "{all}");
    assert!(!all.contains("after rename"), "{all}");

    // A name with a NUL byte ends there, as a C string does.
    allocator
        .set_name(&allocation, Some("cut here\0not this"))
        .unwrap();
    let all = map_again();
    assert!(all.contains("cut here"), "{all}");
    assert!(
        !all.contains("not this") && !all.contains(&unnamed),
        "{all}"
    );
    // SAFETY: never used by the GPU.
    unsafe { allocator.destroy_buffer(handle, allocation).unwrap() };
}

/// With the ash backend, dumps name the GPU as
/// `vkGetPhysicalDeviceProperties` does, without `MemoryMap::with_gpu`.
#[test]
fn dumps_name_the_gpu() {
    let context = VulkanContext::new(Profile::Lavapipe);
    let allocator = allocator_for(&context);
    let expected = GpuInfo::from(&context.properties());
    assert!(!expected.name.is_empty());
    assert_eq!(allocator.memory_map().gpu.as_ref(), Some(&expected));
    let json = allocator.stats_json(false);
    let escaped = expected.name.replace('\\', "\\\\").replace('"', "\\\"");
    assert!(json.contains(&format!("\"GPU\": \"{escaped}\"")), "{json}");
    assert!(!json.contains("\"unknown\""), "{json}");
}
