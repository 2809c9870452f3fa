//! A custom pool that exports its memory (`PoolDesc::export`) on a real
//! driver, under the validation layer, once per memory architecture: a
//! buffer made in a pool exporting `OPAQUE_FD` is exported with
//! `vkGetMemoryFdKHR` (the validation layer here, 1.3.239, does not report
//! memory allocated without that handle type, and lavapipe then returns
//! -1, so the descriptor itself is checked), the file descriptor is imported into a second
//! `VkDeviceMemory` of the block's size, and a second buffer bound there at
//! the allocation's offset reads what the GPU wrote through the first.
//! Dedicated memory of such a pool, for a buffer with a device address
//! and for an image, is exported too. Lavapipe must support it: a driver
//! that does not fails the test, it is never skipped.

use std::os::fd::FromRawFd;

use ash::vk;
use vk_suballoc::device::AshMemoryDevice;
use vk_suballoc::{AllocationDesc, Allocator, DedicatedPolicy, PoolDesc, Usage};

use super::allocator_setup::{
    allocator_for, check_pattern, memory_barrier, IdleOnDrop, TRANSFER_TO_HOST,
    TRANSFER_TO_TRANSFER,
};
use crate::support::{rgba8_image_info, test_each_profile, Advice, Profile, VulkanContext};

const MIB: u64 = 1 << 20;
/// The pool's fixed block size.
const BLOCK: u64 = 4 * MIB;
/// The size of each buffer.
const SIZE: u64 = 64 * 1024;
const OPAQUE_FD: vk::ExternalMemoryHandleTypeFlags = vk::ExternalMemoryHandleTypeFlags::OPAQUE_FD;
const USAGE: vk::BufferUsageFlags = vk::BufferUsageFlags::from_raw(
    vk::BufferUsageFlags::TRANSFER_SRC.as_raw() | vk::BufferUsageFlags::TRANSFER_DST.as_raw(),
);

/// Panics unless buffers of [`USAGE`] can be exported as, and imported
/// from, an opaque file descriptor, in memory not dedicated to them.
fn assert_opaque_fd_supported(context: &VulkanContext) {
    let profile = context.profile;
    assert!(
        context.external_memory_fd_enabled,
        "{profile}: the device lacks VK_KHR_external_memory_fd (a newer mesa-vulkan-drivers has it)"
    );
    let info = vk::PhysicalDeviceExternalBufferInfo::default()
        .usage(USAGE)
        .handle_type(OPAQUE_FD);
    let mut properties = vk::ExternalBufferProperties::default();
    // SAFETY: a physical device of this Vulkan 1.3 instance; a valid query.
    unsafe {
        context
            .instance
            .get_physical_device_external_buffer_properties(
                context.physical_device,
                &info,
                &mut properties,
            )
    };
    let memory = properties.external_memory_properties;
    let wanted =
        vk::ExternalMemoryFeatureFlags::EXPORTABLE | vk::ExternalMemoryFeatureFlags::IMPORTABLE;
    assert!(
        memory.external_memory_features.contains(wanted)
            && memory.compatible_handle_types.contains(OPAQUE_FD),
        "{profile}: buffers cannot be exported and imported as OPAQUE_FD: {memory:?}"
    );
    assert!(
        !memory
            .external_memory_features
            .contains(vk::ExternalMemoryFeatureFlags::DEDICATED_ONLY),
        "{profile}: OPAQUE_FD is dedicated-only here; the test shares a block: {memory:?}"
    );
}

/// A buffer exportable as an opaque file descriptor.
fn create_info<'a>(
    external: &'a mut vk::ExternalMemoryBufferCreateInfo<'a>,
) -> vk::BufferCreateInfo<'a> {
    vk::BufferCreateInfo::default()
        .size(SIZE)
        .usage(USAGE)
        .push_next(external)
}

/// The body of `exported_pool_memory_is_seen_through_an_import`.
fn export_and_import(profile: Profile) {
    let context = VulkanContext::new(profile);
    assert_opaque_fd_supported(&context);
    let allocator = allocator_for(&context);
    let _idle = IdleOnDrop(&context.device);
    let device = &context.device;
    let mut external = vk::ExternalMemoryBufferCreateInfo::default().handle_types(OPAQUE_FD);
    let info = create_info(&mut external);

    // The importing side's buffer, made first: its requirements pick the
    // pool's memory type (those of the exported buffers are the same, as
    // their create infos are).
    // SAFETY: a valid create info (non-zero size, transfer usage, an
    // external handle type the device supports).
    let imported_buffer = unsafe { device.create_buffer(&info, None) }.unwrap();
    // SAFETY: a live buffer of `device`.
    let requirements = unsafe { device.get_buffer_memory_requirements(imported_buffer) };
    let memory_type = allocator
        .memory_type_for(requirements.memory_type_bits, Usage::DEVICE_LOCAL)
        .unwrap();
    let pool = allocator
        .create_pool(
            &PoolDesc::new(memory_type)
                .block_size(BLOCK)
                .min_blocks(1)
                .max_blocks(1)
                .name("exported")
                .export(OPAQUE_FD),
        )
        .unwrap();
    let desc = AllocationDesc::new(Usage::DEVICE_LOCAL).pool(pool);
    // Two buffers in the one block: the second is the one exported, at an
    // offset past the first, whose pattern it must not read.
    // SAFETY: a valid create info, as above; its handle type is the pool's
    // (VUID-vkBindBufferMemory-memory-02726).
    let (neighbour, neighbour_allocation) =
        unsafe { allocator.create_buffer(&info, &desc) }.unwrap();
    // SAFETY: as above.
    let (exported, allocation) = unsafe { allocator.create_buffer(&info, &desc) }.unwrap();
    assert_eq!(
        allocation.memory(),
        neighbour_allocation.memory(),
        "{profile}"
    );
    assert!(!allocation.is_dedicated(), "{profile}");
    assert_ne!(allocation.offset(), 0, "{profile}");
    assert_eq!(allocator.memory_size(&allocation), Ok(BLOCK), "{profile}");

    // Export the block; import it as a second memory object.
    let fd_device = ash::khr::external_memory_fd::Device::new(&context.instance, device);
    let get_fd = vk::MemoryGetFdInfoKHR::default()
        .memory(allocation.memory())
        .handle_type(OPAQUE_FD);
    // SAFETY: the block is live and was allocated exportable as OPAQUE_FD
    // (VUID-VkMemoryGetFdInfoKHR-handleType-00671, which the validation
    // layer here does not check: the import below does);
    // the extension is enabled.
    let fd = unsafe { fd_device.get_memory_fd(&get_fd) }
        .unwrap_or_else(|error| panic!("{profile}: vkGetMemoryFdKHR failed: {error}"));
    assert!(fd >= 0, "{profile}: vkGetMemoryFdKHR gave fd {fd}");
    let mut import = vk::ImportMemoryFdInfoKHR::default()
        .handle_type(OPAQUE_FD)
        .fd(fd);
    let import_info = vk::MemoryAllocateInfo::default()
        .allocation_size(BLOCK)
        .memory_type_index(memory_type)
        .push_next(&mut import);
    // The import says no priority: NVIDIA's advice on it alone, not on
    // the allocator's blocks, whose exported one must carry a priority.
    // SAFETY: an opaque fd imported with the size and memory type its
    // payload was made with (VUID-VkMemoryAllocateInfo-allocationSize-01742);
    // on success the driver owns the fd.
    let imported = context
        .allowing(&[Advice::NoMemoryPriority], || unsafe {
            device.allocate_memory(&import_info, None)
        })
        .unwrap_or_else(|error| panic!("{profile}: importing the fd failed: {error}"));
    // SAFETY: an unbound buffer made for this handle type; the offset is
    // the exported buffer's, whose requirements are the same, so it is
    // aligned and the buffer fits.
    unsafe { device.bind_buffer_memory(imported_buffer, imported, allocation.offset()) }.unwrap();

    // The GPU writes through the allocator's buffers and reads through the
    // imported one.
    let (readback, mut readback_allocation) = readback_buffer(&allocator);
    let (first, second) = (0x1111_1111u32, 0xA5C3_0F1Eu32);
    context.run_one_time_commands(|device, cmd| {
        // SAFETY: every buffer belongs to `device` and is bound; the
        // barriers order the fills before the copy, and the copy before
        // the host reads.
        unsafe {
            device.cmd_fill_buffer(cmd, neighbour, 0, vk::WHOLE_SIZE, first);
            device.cmd_fill_buffer(cmd, exported, 0, vk::WHOLE_SIZE, second);
            let (src, dst) = TRANSFER_TO_TRANSFER;
            memory_barrier(device, cmd, src, dst);
            let region = [vk::BufferCopy {
                src_offset: 0,
                dst_offset: 0,
                size: SIZE,
            }];
            device.cmd_copy_buffer(cmd, imported_buffer, readback, &region);
            let (src, dst) = TRANSFER_TO_HOST;
            memory_barrier(device, cmd, src, dst);
        }
    });
    let what = format!("{profile}: the imported memory at the allocation's offset");
    check_pattern(
        &allocator,
        &mut readback_allocation,
        SIZE,
        &second.to_le_bytes(),
        &what,
    );

    // An alias bound into the exported allocation needs the external create
    // info as well: the layer reports one without it.
    // SAFETY: valid create infos whose requirements are the exported
    // buffer's; the aliases are never used.
    let (alias, unmarked) = unsafe {
        let alias = allocator.create_aliasing_buffer(&allocation, 0, &info);
        context.assert_no_validation_messages();
        let plain = vk::BufferCreateInfo::default().size(SIZE).usage(USAGE);
        let unmarked = allocator.create_aliasing_buffer(&allocation, 0, &plain);
        context.expect_validation_messages(&["VUID-vkBindBufferMemory-memory-02726"]);
        (alias.unwrap(), unmarked.unwrap())
    };

    // SAFETY: the commands completed (run_one_time_commands waits); the
    // imported buffer is destroyed before its memory.
    unsafe {
        device.destroy_buffer(imported_buffer, None);
        device.destroy_buffer(alias, None);
        device.destroy_buffer(unmarked, None);
        device.free_memory(imported, None);
        allocator
            .destroy_buffer(readback, readback_allocation)
            .unwrap();
        allocator.destroy_buffer(exported, allocation).unwrap();
        allocator
            .destroy_buffer(neighbour, neighbour_allocation)
            .unwrap();
    }
    allocator.destroy_pool(pool).unwrap();
    context.assert_no_validation_messages();
}

/// A host-readable buffer of the default pools, to copy into.
fn readback_buffer(
    allocator: &Allocator<AshMemoryDevice>,
) -> (vk::Buffer, vk_suballoc::Allocation) {
    let info = vk::BufferCreateInfo::default()
        .size(SIZE)
        .usage(vk::BufferUsageFlags::TRANSFER_DST);
    let desc = AllocationDesc::new(Usage::READBACK).name("readback");
    // SAFETY: a valid create info (non-zero size, transfer usage).
    unsafe { allocator.create_buffer(&info, &desc) }.unwrap()
}

test_each_profile!(
    /// A buffer in a pool exporting `OPAQUE_FD`: its block is exported
    /// with `vkGetMemoryFdKHR` and imported as a second memory object of
    /// `memory_size` bytes, where a buffer bound at the allocation's offset
    /// reads what the GPU wrote through the first, not its neighbour's
    /// bytes; an alias without the external create info is reported.
    fn exported_pool_memory_is_seen_through_an_import(profile) {
        export_and_import(profile);
    }
);

test_each_profile!(
    /// Dedicated memory of a pool exporting `OPAQUE_FD`
    /// (`DedicatedPolicy::Always`): a buffer with a device address, whose
    /// memory chains the export, the device-address flag and the dedicated
    /// buffer together, and an optimal image (export and dedicated image,
    /// no address flag). Both are exported with `vkGetMemoryFdKHR`, which
    /// must give a file descriptor: for memory allocated without the handle
    /// type lavapipe answers `VK_SUCCESS` with -1, and the validation layer
    /// here (1.3.239) reports nothing (VUID-VkMemoryGetFdInfoKHR-handleType-00671).
    /// The buffer's address is taken; no validation message.
    fn dedicated_exportable_memory_is_exported(profile) {
        let context = VulkanContext::new(profile);
        assert_opaque_fd_supported(&context);
        // Dedicated memory for a small buffer and image, on purpose.
        context.allow(Advice::SmallMemory);
        let allocator = allocator_for(&context);
        let fd_device = ash::khr::external_memory_fd::Device::new(&context.instance, &context.device);
        let export = |memory: vk::DeviceMemory, what: &str| {
            let get_fd = vk::MemoryGetFdInfoKHR::default().memory(memory).handle_type(OPAQUE_FD);
            // SAFETY: live memory of this device; the extension is enabled.
            let fd = unsafe { fd_device.get_memory_fd(&get_fd) }
                .unwrap_or_else(|error| panic!("{profile}: vkGetMemoryFdKHR of the {what} failed: {error}"));
            assert!(fd >= 0, "{profile}: {what}");
            // SAFETY: the fd is ours: vkGetMemoryFdKHR hands over a new one.
            drop(unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) });
        };
        let mut external = vk::ExternalMemoryBufferCreateInfo::default().handle_types(OPAQUE_FD);
        let buffer_info = vk::BufferCreateInfo::default()
            .size(SIZE)
            .usage(USAGE | vk::BufferUsageFlags::SHADER_DEVICE_ADDRESS)
            .push_next(&mut external);
        let mut image_external = vk::ExternalMemoryImageCreateInfo::default().handle_types(OPAQUE_FD);
        let image_info = rgba8_image_info(64, 64, vk::ImageUsageFlags::TRANSFER_DST).push_next(&mut image_external);
        // SAFETY: valid create infos (external handle types the device
        // supports); the pools' handle type is theirs
        // (VUID-vkBindBufferMemory-memory-02726, VUID-vkBindImageMemory-memory-02728);
        // every resource is destroyed before its pool.
        unsafe {
            let buffer_type = allocator.memory_type_for_buffer(&buffer_info, Usage::DEVICE_LOCAL).unwrap();
            let image_type = allocator.memory_type_for_image(&image_info, Usage::DEVICE_LOCAL).unwrap();
            let pool_desc = |memory_type| PoolDesc::new(memory_type).name("exported dedicated").export(OPAQUE_FD);
            let buffer_pool = allocator.create_pool(&pool_desc(buffer_type)).unwrap();
            let image_pool = allocator.create_pool(&pool_desc(image_type)).unwrap();
            let desc = AllocationDesc::new(Usage::DEVICE_LOCAL).dedicated(DedicatedPolicy::Always);

            let (buffer, allocation) = allocator.create_buffer(&buffer_info, &desc.pool(buffer_pool)).unwrap();
            assert!(allocation.is_dedicated(), "{profile}");
            let address = context
                .device
                .get_buffer_device_address(&vk::BufferDeviceAddressInfo::default().buffer(buffer));
            assert_ne!(address, 0, "{profile}");
            export(allocation.memory(), "buffer");

            let (image, image_allocation) = allocator.create_image(&image_info, &desc.pool(image_pool)).unwrap();
            assert!(image_allocation.is_dedicated(), "{profile}");
            export(image_allocation.memory(), "image");

            allocator.destroy_buffer(buffer, allocation).unwrap();
            allocator.destroy_image(image, image_allocation).unwrap();
            allocator.destroy_pool(buffer_pool).unwrap();
            allocator.destroy_pool(image_pool).unwrap();
        }
        context.assert_no_validation_messages();
    }
);
