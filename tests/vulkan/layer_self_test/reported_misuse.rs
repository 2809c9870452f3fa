//! Misuse the validation layer above the fake layer reports, which lavapipe
//! alone would let through: a flush not aligned to the profile's
//! `nonCoherentAtomSize`, maps of memory that is not host-visible (which the
//! layer refuses too), a second map of mapped non-coherent memory (which
//! the layer refuses, keeping the first mapping) and a map past its end
//! (which the layer refuses too), a bind at an offset below
//! the profile's alignment, and an allocation of AMD's device-coherent
//! types without their feature.

use ash::vk;

use crate::support::{Advice, Profile, VulkanContext};

use super::{allocate, create_buffer, free, type_index, CACHED, DL, HV, LAZY};

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

/// Mapping non-coherent memory that is already mapped is reported, and the
/// layer refuses it: the application still holds the first mapping's
/// pointer (lavapipe hands the same pointer out again), so that mapping's
/// host cache stays, and bytes written through it reach the memory at the
/// next flush. A second cache in its place would free the first one under
/// the application's pointer.
#[test]
fn second_map_of_non_coherent_memory_keeps_the_first_mapping() {
    let context = VulkanContext::new(Profile::Discrete);
    context.allow(Advice::FailingCalls);
    let index = type_index(&context, true, HV | CACHED);
    let memory = allocate(&context, index, 4096).unwrap();
    let whole = vk::MappedMemoryRange::default()
        .memory(memory)
        .offset(0)
        .size(vk::WHOLE_SIZE);
    // SAFETY: host-visible memory of this device; the second map is the
    // misuse under test and, refused, leaves the first mapping (4096 bytes
    // at `first`) in place until the unmap.
    unsafe {
        let first = context
            .device
            .map_memory(memory, 0, vk::WHOLE_SIZE, vk::MemoryMapFlags::empty())
            .unwrap()
            .cast::<u8>();
        let second =
            context
                .device
                .map_memory(memory, 0, vk::WHOLE_SIZE, vk::MemoryMapFlags::empty());
        assert_eq!(second, Err(vk::Result::ERROR_MEMORY_MAP_FAILED));
        first.write_bytes(0xA5, 4096);
        context.device.flush_mapped_memory_ranges(&[whole]).unwrap();
        context.device.unmap_memory(memory);
    }
    context.expect_validation_messages(&["VUID-vkMapMemory-memory-00678"]);
    // SAFETY: mapped once, read, unmapped.
    let bytes = unsafe {
        let mapped = context
            .device
            .map_memory(memory, 0, vk::WHOLE_SIZE, vk::MemoryMapFlags::empty())
            .unwrap()
            .cast::<u8>();
        let bytes = std::slice::from_raw_parts(mapped, 4096).to_vec();
        context.device.unmap_memory(memory);
        bytes
    };
    assert!(
        bytes.iter().all(|&b| b == 0xA5),
        "bytes written through the first mapping were lost"
    );
    free(&context, memory);
}

/// Mapping non-coherent memory past its end is reported, and the layer
/// refuses it: the host cache it would fill from the driver's pointer
/// would read (and, at a flush, write) past the memory object.
#[test]
fn map_of_non_coherent_memory_past_its_end_is_refused() {
    let context = VulkanContext::new(Profile::Discrete);
    context.allow(Advice::FailingCalls);
    let index = type_index(&context, true, HV | CACHED);
    let memory = allocate(&context, index, 4096).unwrap();
    // SAFETY: host-visible memory of this device, not mapped; the range
    // past its end is the misuse under test.
    let mapped = unsafe {
        context
            .device
            .map_memory(memory, 2048, 4096, vk::MemoryMapFlags::empty())
    };
    assert_eq!(mapped, Err(vk::Result::ERROR_MEMORY_MAP_FAILED));
    context.expect_validation_messages(&["VUID-vkMapMemory-size-00681"]);
    free(&context, memory);
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
