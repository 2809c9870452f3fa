//! An engine's everyday memory work, under the Khronos validation layer
//! with best practices and synchronization validation on (across
//! submissions too):
//! create buffers and an image with the allocator's helpers, upload through a
//! mapped staging buffer (from a custom pool capped at one block, as an
//! engine caps its staging memory), copy on the GPU (buffer -> buffer ->
//! image -> buffer), read the result back, retire resources after their
//! frame's fence, and print the allocator's figures.
//!
//! Run it with `scripts/with-vulkan.sh cargo run --example everyday` (when
//! lavapipe or the validation layer is missing, the script installs it as
//! root, or says what to install).
//! It exits non-zero if the data does not survive the round trip, the
//! validation layer reports anything, the allocator logs a warning or an
//! error (a leak at its drop is one) or memory is left after `trim`.

#![allow(clippy::expect_used, clippy::unwrap_used)]

#[path = "common/allocator_log.rs"]
mod allocator_log;
#[path = "common/validation.rs"]
mod validation;

use ash::vk;
use vk_suballoc::device::{AshMemoryDevice, DeviceFeatures};
use vk_suballoc::{AllocationDesc, Allocator, Config, PoolDesc, Usage};

const WIDTH: u32 = 64;
const HEIGHT: u32 = 64;
const BYTES: u64 = (WIDTH * HEIGHT * 4) as u64;

fn main() {
    validation::enable_submit_time_sync_validation();
    allocator_log::install();
    // SAFETY: loading the system's Vulkan loader library.
    let entry = unsafe { ash::Entry::load() }
        .expect("no Vulkan loader: install libvulkan1 (scripts/with-vulkan.sh does)");
    let layers = [c"VK_LAYER_KHRONOS_validation".as_ptr()];
    // VK_EXT_validation_features comes with the validation layer.
    let extensions = [
        ash::ext::debug_utils::NAME.as_ptr(),
        ash::ext::validation_features::NAME.as_ptr(),
    ];
    let mut validation_features =
        vk::ValidationFeaturesEXT::default().enabled_validation_features(&validation::CHECKS);
    let app = vk::ApplicationInfo::default()
        .application_name(c"vk-suballoc everyday")
        .api_version(vk::API_VERSION_1_3);
    let mut messenger_info = validation::messenger_info();
    let instance_info = vk::InstanceCreateInfo::default()
        .application_info(&app)
        .enabled_layer_names(&layers)
        .enabled_extension_names(&extensions)
        .push_next(&mut messenger_info)
        .push_next(&mut validation_features);
    // SAFETY: valid create info; the layer and extension are checked by the
    // loader (it fails with a result, which we report).
    let instance = unsafe { entry.create_instance(&instance_info, None) }.expect(
        "vkCreateInstance failed: is the validation layer installed (vulkan-validationlayers)?",
    );
    let debug_utils = ash::ext::debug_utils::Instance::new(&entry, &instance);
    // SAFETY: the instance enables VK_EXT_debug_utils.
    let messenger =
        unsafe { debug_utils.create_debug_utils_messenger(&messenger_info, None) }.unwrap();

    // Any device with a graphics queue; lavapipe on CI.
    // SAFETY: valid instance.
    let physical_device = unsafe { instance.enumerate_physical_devices() }
        .unwrap()
        .into_iter()
        .next()
        .expect("no Vulkan device: install mesa-vulkan-drivers for lavapipe");
    // SAFETY: `physical_device` comes from this instance.
    let properties = unsafe { instance.get_physical_device_properties(physical_device) };
    let name = properties
        .device_name_as_c_str()
        .unwrap_or(c"?")
        .to_string_lossy()
        .into_owned();
    // SAFETY: as above.
    let queue_family =
        unsafe { instance.get_physical_device_queue_family_properties(physical_device) }
            .iter()
            .position(|f| f.queue_flags.contains(vk::QueueFlags::GRAPHICS))
            .expect("no graphics queue") as u32;
    let priorities = [1.0];
    let queue_info = [vk::DeviceQueueCreateInfo::default()
        .queue_family_index(queue_family)
        .queue_priorities(&priorities)];
    let mut features12 = vk::PhysicalDeviceVulkan12Features::default()
        .buffer_device_address(true)
        .timeline_semaphore(true);
    let device_info = vk::DeviceCreateInfo::default()
        .queue_create_infos(&queue_info)
        .push_next(&mut features12);
    // SAFETY: valid create info for this physical device (lavapipe supports
    // both features; drivers that do not fail with a result).
    let device = unsafe { instance.create_device(physical_device, &device_info, None) }.unwrap();
    // SAFETY: the queue family and index exist.
    let queue = unsafe { device.get_device_queue(queue_family, 0) };

    // The allocator.
    let features = DeviceFeatures {
        buffer_device_address: true,
        memory_budget: false,
        memory_priority: false,
        debug_utils: true,
        amd_device_coherent_memory: false,
        protected_memory: false,
        // maintenance4's queries are core in a Vulkan 1.3 device: the
        // instance asks for 1.3, so the physical device's version decides.
        maintenance4: properties.api_version >= vk::API_VERSION_1_3,
    };
    // SAFETY: Vulkan 1.3 instance, `device` made from `physical_device` with
    // these features, and both outlive the allocator (dropped below first).
    let memory_device =
        unsafe { AshMemoryDevice::new(&instance, &device, physical_device, features) };
    // Debug builds map only what asks for host access, so that a write to
    // GPU-only memory fails here as it would on a discrete GPU (lavapipe's
    // one memory type is host-visible).
    let config = Config {
        strict_host_access: cfg!(debug_assertions),
        ..Config::default()
    };
    let allocator = Allocator::new(memory_device, config).unwrap();

    // Resources: staging (host writes), GPU buffer, image, readback (host reads).
    let buffer_info = |usage| vk::BufferCreateInfo::default().size(BYTES).usage(usage);
    let transfer = vk::BufferUsageFlags::TRANSFER_SRC | vk::BufferUsageFlags::TRANSFER_DST;
    // Staging memory capped at one 4 MiB block: a custom pool of the type
    // staging buffers take.
    let staging_info = buffer_info(vk::BufferUsageFlags::TRANSFER_SRC);
    // SAFETY: a valid create info.
    let upload_type = unsafe { allocator.memory_type_for_buffer(&staging_info, Usage::UPLOAD) };
    let staging_pool = allocator
        .create_pool(
            &PoolDesc::new(upload_type.unwrap())
                .block_size(4 << 20)
                .max_blocks(1)
                .name("staging"),
        )
        .unwrap();
    // SAFETY: valid create infos (non-zero size, supported usage).
    let (staging, mut staging_memory) = unsafe {
        allocator.create_buffer(
            &staging_info,
            &AllocationDesc::new(Usage::UPLOAD)
                .name("staging")
                .pool(staging_pool),
        )
    }
    .unwrap();
    // SAFETY: as above.
    let (gpu_buffer, gpu_memory) = unsafe {
        allocator.create_buffer(
            &buffer_info(transfer),
            &AllocationDesc::new(Usage::DEVICE_LOCAL).name("vertices"),
        )
    }
    .unwrap();
    // SAFETY: as above.
    let (readback, mut readback_memory) = unsafe {
        allocator.create_buffer(
            &buffer_info(vk::BufferUsageFlags::TRANSFER_DST),
            &AllocationDesc::new(Usage::READBACK).name("readback"),
        )
    }
    .unwrap();
    let image_info = vk::ImageCreateInfo::default()
        .image_type(vk::ImageType::TYPE_2D)
        .format(vk::Format::R8G8B8A8_UNORM)
        .extent(vk::Extent3D {
            width: WIDTH,
            height: HEIGHT,
            depth: 1,
        })
        .mip_levels(1)
        .array_layers(1)
        .samples(vk::SampleCountFlags::TYPE_1)
        .tiling(vk::ImageTiling::OPTIMAL)
        .usage(vk::ImageUsageFlags::TRANSFER_SRC | vk::ImageUsageFlags::TRANSFER_DST)
        .initial_layout(vk::ImageLayout::UNDEFINED);
    // SAFETY: a valid 2D image create info (format and usage lavapipe and
    // every desktop driver support).
    let (image, image_memory) = unsafe {
        allocator.create_image(
            &image_info,
            &AllocationDesc::new(Usage::DEVICE_LOCAL).name("texture"),
        )
    }
    .unwrap();

    // Upload: write through the persistent mapping, flush (a no-op on coherent memory).
    // The mapped slice has the allocation's size, the driver's figure, which
    // can be larger than the buffer: copy into its front.
    let pattern: Vec<u8> = (0..BYTES).map(|i| (i * 7 % 251) as u8).collect();
    allocator.mapped_slice_mut(&mut staging_memory).unwrap()[..pattern.len()]
        .copy_from_slice(&pattern);
    allocator.flush(&staging_memory, 0..BYTES).unwrap();

    // Record the copies.
    let pool_info = vk::CommandPoolCreateInfo::default().queue_family_index(queue_family);
    // SAFETY: valid create info.
    let pool = unsafe { device.create_command_pool(&pool_info, None) }.unwrap();
    let alloc_info = vk::CommandBufferAllocateInfo::default()
        .command_pool(pool)
        .level(vk::CommandBufferLevel::PRIMARY)
        .command_buffer_count(1);
    // SAFETY: `pool` is a command pool of `device`.
    let cmd = unsafe { device.allocate_command_buffers(&alloc_info) }.unwrap()[0];
    let whole = [vk::BufferCopy {
        src_offset: 0,
        dst_offset: 0,
        size: BYTES,
    }];
    let region = [vk::BufferImageCopy::default()
        .image_subresource(vk::ImageSubresourceLayers {
            aspect_mask: vk::ImageAspectFlags::COLOR,
            mip_level: 0,
            base_array_layer: 0,
            layer_count: 1,
        })
        .image_extent(vk::Extent3D {
            width: WIDTH,
            height: HEIGHT,
            depth: 1,
        })];
    let range = vk::ImageSubresourceRange {
        aspect_mask: vk::ImageAspectFlags::COLOR,
        base_mip_level: 0,
        level_count: 1,
        base_array_layer: 0,
        layer_count: 1,
    };
    let transfer_barrier = [vk::MemoryBarrier::default()
        .src_access_mask(vk::AccessFlags::TRANSFER_WRITE)
        .dst_access_mask(vk::AccessFlags::TRANSFER_READ | vk::AccessFlags::TRANSFER_WRITE)];
    let to_dst = [vk::ImageMemoryBarrier::default()
        .dst_access_mask(vk::AccessFlags::TRANSFER_WRITE)
        .old_layout(vk::ImageLayout::UNDEFINED)
        .new_layout(vk::ImageLayout::TRANSFER_DST_OPTIMAL)
        .src_queue_family_index(vk::QUEUE_FAMILY_IGNORED)
        .dst_queue_family_index(vk::QUEUE_FAMILY_IGNORED)
        .image(image)
        .subresource_range(range)];
    let to_src = [vk::ImageMemoryBarrier::default()
        .src_access_mask(vk::AccessFlags::TRANSFER_WRITE)
        .dst_access_mask(vk::AccessFlags::TRANSFER_READ)
        .old_layout(vk::ImageLayout::TRANSFER_DST_OPTIMAL)
        .new_layout(vk::ImageLayout::TRANSFER_SRC_OPTIMAL)
        .src_queue_family_index(vk::QUEUE_FAMILY_IGNORED)
        .dst_queue_family_index(vk::QUEUE_FAMILY_IGNORED)
        .image(image)
        .subresource_range(range)];
    let to_host = [vk::MemoryBarrier::default()
        .src_access_mask(vk::AccessFlags::TRANSFER_WRITE)
        .dst_access_mask(vk::AccessFlags::HOST_READ)];
    let transfer_stage = vk::PipelineStageFlags::TRANSFER;
    // SAFETY: `cmd` is a fresh primary command buffer; every handle belongs to
    // `device`, each resource is bound to memory, and the barriers order the
    // copies (staging -> buffer -> image -> readback -> host).
    unsafe {
        device
            .begin_command_buffer(
                cmd,
                &vk::CommandBufferBeginInfo::default()
                    .flags(vk::CommandBufferUsageFlags::ONE_TIME_SUBMIT),
            )
            .unwrap();
        device.cmd_copy_buffer(cmd, staging, gpu_buffer, &whole);
        device.cmd_pipeline_barrier(
            cmd,
            transfer_stage,
            transfer_stage,
            vk::DependencyFlags::empty(),
            &transfer_barrier,
            &[],
            &to_dst,
        );
        device.cmd_copy_buffer_to_image(
            cmd,
            gpu_buffer,
            image,
            vk::ImageLayout::TRANSFER_DST_OPTIMAL,
            &region,
        );
        device.cmd_pipeline_barrier(
            cmd,
            transfer_stage,
            transfer_stage,
            vk::DependencyFlags::empty(),
            &[],
            &[],
            &to_src,
        );
        device.cmd_copy_image_to_buffer(
            cmd,
            image,
            vk::ImageLayout::TRANSFER_SRC_OPTIMAL,
            readback,
            &region,
        );
        device.cmd_pipeline_barrier(
            cmd,
            transfer_stage,
            vk::PipelineStageFlags::HOST,
            vk::DependencyFlags::empty(),
            &to_host,
            &[],
            &[],
        );
        device.end_command_buffer(cmd).unwrap();
    }

    // Submit with the frame's fence; retire the staging buffer after it.
    // SAFETY: valid create info.
    let fence = unsafe { device.create_fence(&vk::FenceCreateInfo::default(), None) }.unwrap();
    let cmds = [cmd];
    let submit = [vk::SubmitInfo::default().command_buffers(&cmds)];
    // SAFETY: `cmd` is recorded; `queue` and `fence` belong to `device`.
    unsafe { device.queue_submit(queue, &submit, fence) }.unwrap();
    // SAFETY: `staging` was created by this device, and only the allocator
    // destroys it.
    unsafe { allocator.destroy_buffer_after_frame(staging, staging_memory) }.unwrap();
    // SAFETY: `fence` is signalled by the submission that last uses the
    // staging buffer, and lives until the frame is collected.
    unsafe { allocator.end_frame(fence) }.unwrap();

    // Wait, read back, check.
    allocator.wait_and_collect(u64::MAX).unwrap();
    allocator
        .invalidate(&mut readback_memory, 0..BYTES)
        .unwrap();
    let round_trip =
        allocator.mapped_slice(&readback_memory).unwrap()[..pattern.len()] == *pattern.as_slice();
    println!("device: {name}");
    println!(
        "round trip staging -> buffer -> image -> readback: {}",
        if round_trip { "ok" } else { "CORRUPTED" }
    );
    print!("{}", allocator.stats());
    // The staging buffer's frame is collected: its pool is empty again.
    println!(
        "staging pool: {}",
        allocator.pool_stats(&staging_pool).unwrap()
    );
    allocator.destroy_pool(staging_pool).unwrap();

    // Tear down: the GPU is idle (waited above).
    // SAFETY: no pending work uses these resources.
    unsafe {
        allocator.destroy_buffer(gpu_buffer, gpu_memory).unwrap();
        allocator.destroy_buffer(readback, readback_memory).unwrap();
        allocator.destroy_image(image, image_memory).unwrap();
    }
    // Every allocation is freed, so `trim` releases every block.
    let released = allocator.trim();
    let memory_left = allocator.stats().memory_objects;
    println!("trim released {released} bytes; {memory_left} memory objects left");
    drop(allocator);
    // SAFETY: everything created from these handles is destroyed, in order.
    unsafe {
        device.destroy_fence(fence, None);
        device.destroy_command_pool(pool, None);
        device.destroy_device(None);
        debug_utils.destroy_debug_utils_messenger(messenger, None);
        instance.destroy_instance(None);
    }
    let messages = validation::messages();
    println!("validation messages: {messages}");
    let warnings = allocator_log::allocator_warnings();
    println!("allocator warnings and errors (leaks included): {warnings}");
    if !round_trip || messages > 0 || warnings > 0 || memory_left > 0 {
        std::process::exit(1);
    }
}
