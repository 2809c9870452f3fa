//! Correct use of the layer's memory behaves as a driver's and stays
//! silent: every memory type binds a buffer the GPU fills and the host reads
//! back and writes (invalidating and flushing non-coherent memory), a
//! transient attachment lives in the lazily allocated type, an image is
//! cleared, all without a validation message; mappings of non-coherent
//! types, which the layer serves from its host cache, keep the driver's
//! `minMemoryMapAlignment`; a host fill of new non-coherent memory with
//! any value reaches device memory at a flush, and a flush of a mapping
//! of part of the memory reaches its end while an unmap drops what was
//! not flushed; and imported non-coherent memory keeps its exporter's
//! bytes.

use ash::vk;

use crate::support::{
    on_custom_device, test_each_profile, transient_attachment_info, Advice, Profile, VulkanContext,
};

use super::{allocate, create_buffer, free, image_info, type_index, CACHED, HC, HV, LAZY};

/// Mappings of non-coherent types, which the layer serves from its host
/// cache, keep the driver's guarantee that a mapping's pointer (minus its
/// offset) is aligned to `minMemoryMapAlignment`, as the driver's own
/// pointer is: engines cast mapped bytes to typed slices. The cache was a
/// plain byte allocation, 16 bytes past a page for large ones.
#[test]
fn non_coherent_mappings_honour_min_memory_map_alignment() {
    for profile in [Profile::Discrete, Profile::Mobile] {
        let context = VulkanContext::new(profile);
        // SAFETY: the context's physical device.
        let limits = unsafe {
            context
                .instance
                .get_physical_device_properties(context.physical_device)
        }
        .limits;
        let alignment = limits.min_memory_map_alignment;
        let index = type_index(&context, false, HV | CACHED);
        for (size, offset) in [(1 << 20, 0), (4096, 0), (1 << 20, 256)] {
            let memory = allocate(&context, index, size).unwrap();
            // SAFETY: host-visible memory of this device, mapped once, at an
            // offset inside it.
            let pointer = unsafe {
                context.device.map_memory(
                    memory,
                    offset,
                    vk::WHOLE_SIZE,
                    vk::MemoryMapFlags::empty(),
                )
            }
            .unwrap();
            let misalignment = (pointer as usize - offset as usize) % alignment;
            // SAFETY: mapped above.
            unsafe { context.device.unmap_memory(memory) };
            free(&context, memory);
            assert_eq!(
                misalignment, 0,
                "{profile}: {size}-byte mapping at {offset}, alignment {alignment}"
            );
        }
    }
}

/// A host fill of any one value over an atom of new non-coherent memory
/// reaches device memory at a flush. The host cache takes an atom as
/// written when a byte of it differs from what the cache last exchanged
/// with device memory, so a write of the bytes new memory already held
/// goes unseen; lavapipe hands out freed memory uncleared, and
/// `non_coherent_neighbours_keep_their_bytes` failed now and then when a
/// buffer landed where an earlier test had left its own fill value: the
/// flush was dropped and the GPU's older bytes came back. The layer now
/// fills new memory of these types with a pattern in which no two
/// neighbouring bytes are equal.
#[test]
fn host_fills_of_new_non_coherent_memory_are_flushed() {
    const SIZE: u64 = 64 * 1024;
    for profile in [Profile::Discrete, Profile::Mobile] {
        let context = VulkanContext::new(profile);
        let atom = context.properties().limits.non_coherent_atom_size as usize;
        let index = type_index(&context, false, HV | CACHED);
        let buffer = create_buffer(&context, SIZE);
        let device = &context.device;
        // SAFETY: a live buffer.
        let requirements = unsafe { device.get_buffer_memory_requirements(buffer) };
        assert_eq!(requirements.size, SIZE, "{profile}");
        let memory = allocate(&context, index, SIZE).unwrap();
        // SAFETY: offset 0 of memory the buffer's size, of an allowed type.
        unsafe { device.bind_buffer_memory(buffer, memory, 0) }.unwrap();
        // SAFETY: host-visible memory, mapped once, whole.
        let data =
            unsafe { device.map_memory(memory, 0, vk::WHOLE_SIZE, vk::MemoryMapFlags::empty()) }
                .unwrap()
                .cast::<u8>();
        // SAFETY: the mapping holds SIZE bytes; nothing writes them now.
        let fresh = unsafe { std::slice::from_raw_parts(data, SIZE as usize) }.to_vec();
        let one_value = |bytes: &[u8]| bytes.iter().all(|&b| b == bytes[0]);
        let constant = fresh.chunks(atom).position(one_value);
        assert_eq!(
            constant, None,
            "{profile}: an atom of new memory holds one value"
        );
        // The GPU writes the buffer, then the host fills each atom with its
        // first byte as mapped, and flushes the whole mapping.
        fill(&context, buffer, 0xa5a5_a5a5);
        let whole = [vk::MappedMemoryRange::default()
            .memory(memory)
            .offset(0)
            .size(vk::WHOLE_SIZE)];
        for (k, bytes) in fresh.chunks(atom).enumerate() {
            // SAFETY: atom `k` lies in the mapping.
            unsafe { std::ptr::write_bytes(data.add(k * atom), bytes[0], bytes.len()) };
        }
        // SAFETY: the whole mapping, flushed then refilled from device
        // memory; the fill above completed (run_one_time_commands waits).
        unsafe {
            device.flush_mapped_memory_ranges(&whole).unwrap();
            device.invalidate_mapped_memory_ranges(&whole).unwrap();
        }
        // SAFETY: as above.
        let now = unsafe { std::slice::from_raw_parts(data, SIZE as usize) }.to_vec();
        let lost = fresh
            .chunks(atom)
            .zip(now.chunks(atom))
            .position(|(was, is)| !is.iter().all(|&b| b == was[0]));
        assert_eq!(
            lost, None,
            "{profile}: a flushed host fill did not reach device memory"
        );
        // SAFETY: mapped above; the GPU finished with the buffer.
        unsafe {
            device.unmap_memory(memory);
            device.destroy_buffer(buffer, None);
        }
        free(&context, memory);
        context.assert_no_validation_messages();
    }
}

/// Imported memory of a non-coherent type keeps the bytes its exporter
/// wrote: the layer's fresh-memory pattern goes only into memory that is
/// new. Non-coherent memory is exported as an opaque file descriptor
/// after the host wrote it (flushed), imported as a second memory object,
/// and read through a mapping of that.
#[test]
fn imported_non_coherent_memory_keeps_its_bytes() {
    const SIZE: u64 = 64 * 1024;
    const OPAQUE_FD: vk::ExternalMemoryHandleTypeFlags =
        vk::ExternalMemoryHandleTypeFlags::OPAQUE_FD;
    let context = VulkanContext::new(Profile::Mobile);
    assert!(
        context.external_memory_fd_enabled,
        "the device lacks VK_KHR_external_memory_fd"
    );
    context.allow(Advice::SmallMemory);
    context.allow_own_allocations();
    let device = &context.device;
    let index = type_index(&context, false, HV | CACHED);
    let whole = |memory| {
        [vk::MappedMemoryRange::default()
            .memory(memory)
            .offset(0)
            .size(vk::WHOLE_SIZE)]
    };
    let mut export = vk::ExportMemoryAllocateInfo::default().handle_types(OPAQUE_FD);
    let info = vk::MemoryAllocateInfo::default()
        .allocation_size(SIZE)
        .memory_type_index(index)
        .push_next(&mut export);
    // SAFETY: a valid allocate info; lavapipe exports opaque descriptors
    // of its memory type.
    let exported = unsafe { device.allocate_memory(&info, None) }.unwrap();
    let written: Vec<u8> = (0..SIZE).map(|i| (i % 251) as u8).collect();
    // SAFETY: host-visible memory, mapped once, whole, written within its
    // size, flushed whole, then unmapped.
    unsafe {
        let data = device
            .map_memory(exported, 0, vk::WHOLE_SIZE, vk::MemoryMapFlags::empty())
            .unwrap()
            .cast::<u8>();
        std::ptr::copy_nonoverlapping(written.as_ptr(), data, written.len());
        device.flush_mapped_memory_ranges(&whole(exported)).unwrap();
        device.unmap_memory(exported);
    }
    let fd_device = ash::khr::external_memory_fd::Device::new(&context.instance, device);
    let get_fd = vk::MemoryGetFdInfoKHR::default()
        .memory(exported)
        .handle_type(OPAQUE_FD);
    // SAFETY: live memory allocated exportable as OPAQUE_FD; the extension
    // is enabled.
    let fd = unsafe { fd_device.get_memory_fd(&get_fd) }.unwrap();
    let mut import = vk::ImportMemoryFdInfoKHR::default()
        .handle_type(OPAQUE_FD)
        .fd(fd);
    let info = vk::MemoryAllocateInfo::default()
        .allocation_size(SIZE)
        .memory_type_index(index)
        .push_next(&mut import);
    // SAFETY: an opaque descriptor imported with the size and memory type
    // its payload was made with; on success the driver owns the descriptor.
    let imported = unsafe { device.allocate_memory(&info, None) }.unwrap();
    // SAFETY: host-visible memory, mapped once, whole, read within its size
    // after an invalidate; nothing else writes it.
    let seen = unsafe {
        let data = device
            .map_memory(imported, 0, vk::WHOLE_SIZE, vk::MemoryMapFlags::empty())
            .unwrap()
            .cast::<u8>();
        device
            .invalidate_mapped_memory_ranges(&whole(imported))
            .unwrap();
        let seen = std::slice::from_raw_parts(data, SIZE as usize).to_vec();
        device.unmap_memory(imported);
        seen
    };
    free(&context, imported);
    free(&context, exported);
    let first_lost = seen.iter().zip(&written).position(|(a, b)| a != b);
    assert_eq!(
        first_lost, None,
        "the import shows other bytes than the export's"
    );
    context.assert_no_validation_messages();
}

/// A mapping of part of non-coherent memory that runs to its end, off the
/// profile's atom (`discrete`: 256 bytes), flushed with `VK_WHOLE_SIZE`,
/// reaches device memory to that end; host writes that are not flushed
/// before `vkUnmapMemory` are lost (unmapping does not flush, and the layer
/// drops the host cache unwritten); bytes outside the mappings keep what
/// they held. Each mapping is read back through a new whole mapping,
/// invalidated first.
#[test]
fn sub_range_flushes_reach_the_memory_end_and_unmaps_drop_unflushed_writes() {
    const TAIL: u64 = 4096;
    const SIZE: u64 = 2 * TAIL + 100;
    let context = VulkanContext::new(Profile::Discrete);
    let device = &context.device;
    let index = type_index(&context, true, HV | CACHED);
    let memory = allocate(&context, index, SIZE).unwrap();
    let whole = [vk::MappedMemoryRange::default()
        .memory(memory)
        .offset(0)
        .size(vk::WHOLE_SIZE)];
    // The memory's bytes as a new, invalidated whole mapping shows them.
    let read = || {
        // SAFETY: host-visible memory of this device, not mapped now,
        // mapped whole, read within its size after an invalidate, then
        // unmapped.
        unsafe {
            let data = device
                .map_memory(memory, 0, vk::WHOLE_SIZE, vk::MemoryMapFlags::empty())
                .unwrap()
                .cast::<u8>();
            device.invalidate_mapped_memory_ranges(&whole).unwrap();
            let bytes = std::slice::from_raw_parts(data, SIZE as usize).to_vec();
            device.unmap_memory(memory);
            bytes
        }
    };
    let before = read();
    // SAFETY: host-visible memory, not mapped; each mapping runs from an
    // atom boundary to the end of the memory, is written within its size
    // and unmapped; the flush names the first mapping's whole range.
    unsafe {
        let tail = device
            .map_memory(memory, TAIL, vk::WHOLE_SIZE, vk::MemoryMapFlags::empty())
            .unwrap()
            .cast::<u8>();
        tail.write_bytes(0x5a, (SIZE - TAIL) as usize);
        let range = vk::MappedMemoryRange::default()
            .memory(memory)
            .offset(TAIL)
            .size(vk::WHOLE_SIZE);
        device.flush_mapped_memory_ranges(&[range]).unwrap();
        device.unmap_memory(memory);
        let end = device
            .map_memory(
                memory,
                2 * TAIL,
                vk::WHOLE_SIZE,
                vk::MemoryMapFlags::empty(),
            )
            .unwrap()
            .cast::<u8>();
        end.write_bytes(0x11, (SIZE - 2 * TAIL) as usize);
        device.unmap_memory(memory);
    }
    let after = read();
    free(&context, memory);
    assert_eq!(
        after[..TAIL as usize],
        before[..TAIL as usize],
        "bytes before the mappings changed"
    );
    let lost = after[TAIL as usize..].iter().position(|&b| b != 0x5a);
    assert_eq!(
        lost, None,
        "a flushed byte did not reach device memory, or an unflushed one did"
    );
    context.assert_no_validation_messages();
}

/// Fills `buffer` with `pattern` on the GPU and makes it visible to the host.
fn fill(context: &VulkanContext, buffer: vk::Buffer, pattern: u32) {
    context.run_one_time_commands(|device, commands| {
        let barrier = vk::MemoryBarrier::default()
            .src_access_mask(vk::AccessFlags::TRANSFER_WRITE)
            .dst_access_mask(vk::AccessFlags::HOST_READ);
        // SAFETY: a recording command buffer; the buffer is bound.
        unsafe {
            device.cmd_fill_buffer(commands, buffer, 0, vk::WHOLE_SIZE, pattern);
            device.cmd_pipeline_barrier(
                commands,
                vk::PipelineStageFlags::TRANSFER,
                vk::PipelineStageFlags::HOST,
                vk::DependencyFlags::empty(),
                &[barrier],
                &[],
                &[],
            );
        }
    });
}

/// One buffer per allowed memory type: bind, GPU fill, host read back
/// (invalidating non-coherent memory), host write and atom-aligned flush.
fn exercise_every_memory_type(context: &VulkanContext) {
    const SIZE: u64 = 64 * 1024;
    let properties = context.memory_properties();
    let atom = context.properties().limits.non_coherent_atom_size;
    let device = &context.device;
    for index in 0..properties.memory_type_count {
        let flags = properties.memory_types[index as usize].property_flags;
        if flags.contains(vk::MemoryPropertyFlags::DEVICE_COHERENT_AMD) {
            // Needs deviceCoherentMemory, which the harness never enables
            // (VUID-vkAllocateMemory-deviceCoherentMemory-02790); the test
            // below checks that the validation layer reports it.
            continue;
        }
        let buffer = create_buffer(context, SIZE);
        // SAFETY: a live buffer.
        let requirements = unsafe { device.get_buffer_memory_requirements(buffer) };
        if flags.contains(LAZY) {
            assert_eq!(
                requirements.memory_type_bits & (1 << index),
                0,
                "no buffer in type {index}"
            );
            // SAFETY: never bound.
            unsafe { device.destroy_buffer(buffer, None) };
            exercise_a_transient_attachment(context, index);
            continue;
        }
        assert_ne!(
            requirements.memory_type_bits & (1 << index),
            0,
            "buffers fit every type but lazily allocated ones"
        );
        let memory = allocate(context, index, requirements.size).unwrap();
        // SAFETY: offset 0 satisfies any alignment; the type is allowed.
        unsafe { device.bind_buffer_memory(buffer, memory, 0) }.unwrap();
        let pattern = 0x0101_0101 * (index + 1);
        fill(context, buffer, pattern);
        if flags.contains(HV) {
            // SAFETY: host-visible memory, mapped once, read and written
            // within the buffer after the fill completed; ranges are whole or
            // atom-aligned.
            unsafe {
                let data = device
                    .map_memory(memory, 0, vk::WHOLE_SIZE, vk::MemoryMapFlags::empty())
                    .unwrap()
                    .cast::<u32>();
                let whole = [vk::MappedMemoryRange::default()
                    .memory(memory)
                    .offset(0)
                    .size(vk::WHOLE_SIZE)];
                if !flags.contains(HC) {
                    device.invalidate_mapped_memory_ranges(&whole).unwrap();
                }
                let words = std::slice::from_raw_parts_mut(data, (SIZE / 4) as usize);
                assert!(
                    words.iter().all(|&w| w == pattern),
                    "type {index} reads back its fill"
                );
                words[(atom / 4) as usize] = !pattern;
                if !flags.contains(HC) {
                    let range = vk::MappedMemoryRange::default()
                        .memory(memory)
                        .offset(atom)
                        .size(atom);
                    device.flush_mapped_memory_ranges(&[range]).unwrap();
                }
                device.unmap_memory(memory);
            }
        }
        // SAFETY: the GPU finished with the buffer (the fill was waited for).
        unsafe { device.destroy_buffer(buffer, None) };
        free(context, memory);
    }
}

/// A transient colour attachment in the lazily allocated type `index`,
/// cleared by a render pass; the memory's commitment can be queried.
fn exercise_a_transient_attachment(context: &VulkanContext, index: u32) {
    let device = &context.device;
    // SAFETY: a valid create info on a live device.
    let image = unsafe { device.create_image(&transient_attachment_info(32, 32), None) }.unwrap();
    // SAFETY: a live image.
    let requirements = unsafe { device.get_image_memory_requirements(image) };
    assert_ne!(
        requirements.memory_type_bits & (1 << index),
        0,
        "a transient image fits type {index}"
    );
    let memory = allocate(context, index, requirements.size).unwrap();
    // SAFETY: offset 0 satisfies any alignment; the type is allowed.
    unsafe { device.bind_image_memory(image, memory, 0) }.unwrap();
    context.clear_transient_attachment(image, (32, 32));
    // SAFETY: memory of a lazily allocated type (VUID-vkGetDeviceMemoryCommitment-memory-00690).
    let committed = unsafe { device.get_device_memory_commitment(memory) };
    // On lavapipe the layer backs the type with real memory that is not
    // lazily allocated, committed whole, and says so itself (lavapipe's own
    // answer for such memory is 0, NVIDIA's its 64 KiB page). A device of
    // its own may back it with a lazily allocated type of its own.
    if on_custom_device() {
        assert!(
            committed <= requirements.size,
            "{committed} bytes committed"
        );
    } else {
        assert_eq!(committed, requirements.size, "bytes committed");
    }
    // SAFETY: the render pass was waited for.
    unsafe { device.destroy_image(image, None) };
    free(context, memory);
}

/// An optimal image in its lowest allowed type, cleared on the GPU.
fn exercise_an_image(context: &VulkanContext) {
    let device = &context.device;
    // SAFETY: a valid create info on a live device.
    let image = unsafe { device.create_image(&image_info(), None) }.unwrap();
    // SAFETY: a live image.
    let requirements = unsafe { device.get_image_memory_requirements(image) };
    let index = requirements.memory_type_bits.trailing_zeros();
    let memory = allocate(context, index, requirements.size).unwrap();
    // SAFETY: offset 0 satisfies any alignment; the type is allowed.
    unsafe { device.bind_image_memory(image, memory, 0) }.unwrap();
    let range = vk::ImageSubresourceRange::default()
        .aspect_mask(vk::ImageAspectFlags::COLOR)
        .level_count(1)
        .layer_count(1);
    context.run_one_time_commands(|device, commands| {
        let to_transfer = vk::ImageMemoryBarrier::default()
            .dst_access_mask(vk::AccessFlags::TRANSFER_WRITE)
            .old_layout(vk::ImageLayout::UNDEFINED)
            .new_layout(vk::ImageLayout::TRANSFER_DST_OPTIMAL)
            .src_queue_family_index(vk::QUEUE_FAMILY_IGNORED)
            .dst_queue_family_index(vk::QUEUE_FAMILY_IGNORED)
            .image(image)
            .subresource_range(range);
        let color = vk::ClearColorValue {
            float32: [0.25, 0.5, 0.75, 1.0],
        };
        // SAFETY: a recording command buffer; the image is bound.
        unsafe {
            device.cmd_pipeline_barrier(
                commands,
                vk::PipelineStageFlags::TOP_OF_PIPE,
                vk::PipelineStageFlags::TRANSFER,
                vk::DependencyFlags::empty(),
                &[],
                &[],
                &[to_transfer],
            );
            device.cmd_clear_color_image(
                commands,
                image,
                vk::ImageLayout::TRANSFER_DST_OPTIMAL,
                &color,
                &[range],
            );
        }
    });
    // SAFETY: the clear was waited for.
    unsafe { device.destroy_image(image, None) };
    free(context, memory);
}

test_each_profile!(
    /// Correct use of every memory type and an image produces no message.
    fn clean_run_has_no_validation_messages(profile) {
        let context = VulkanContext::new(profile);
        exercise_every_memory_type(&context);
        exercise_an_image(&context);
        context.assert_no_validation_messages();
    }
);
