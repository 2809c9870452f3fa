//! The allocator under instances of Vulkan 1.1 and 1.2, as an engine written
//! against an older Vulkan creates them: the device then has the core
//! functions and structures of that version only (the lower of the
//! instance's and the physical device's), and the allocator must call
//! nothing and chain nothing newer, which the validation layer reports.
//!
//! Under 1.1 buffer device address is not enabled (a 1.2 feature):
//! requests for device addresses are refused. Timeline semaphores come
//! from `VK_KHR_timeline_semaphore` there, as an engine targeting 1.1 uses
//! them: the device has no core 1.2 commands, so the allocator must wait
//! on them through the extension's.

use ash::vk;
use vk_suballoc::device::AshMemoryDevice;
use vk_suballoc::{AllocationDesc, Allocator, Error, Request, ResourceKind, UploadRingDesc, Usage};

use super::allocator_setup::{
    allocator_with, buffer_info, check_pattern, context_features, image_info, memory_barrier,
    transition, IdleOnDrop, TRANSFER_TO_HOST,
};
use crate::support::{Profile, VulkanContext};

/// Lavapipe as it is, and the layouts with several memory types and with
/// non-coherent memory.
const PROFILES: [Profile; 3] = [Profile::Lavapipe, Profile::Discrete, Profile::Mobile];

#[test]
fn the_allocator_runs_under_vulkan_1_1_and_1_2_instances() {
    for profile in PROFILES {
        for api_version in [vk::API_VERSION_1_1, vk::API_VERSION_1_2] {
            let context = VulkanContext::with_api_version(profile, api_version);
            assert_eq!(
                context.api_version, api_version,
                "{profile}: the device's version is the instance's"
            );
            everyday_work(&context);
            context.assert_no_validation_messages();
        }
    }
}

/// Buffers and an image made and bound, written from the host and by the
/// GPU and read back; the memory types named for their create infos; an upload ring; frees after a frame on a fence and,
/// with Vulkan 1.2, on a timeline semaphore; a device-address request.
fn everyday_work(context: &VulkanContext) {
    let what = format!(
        "{} at Vulkan 1.{}",
        context.profile,
        vk::api_version_minor(context.api_version)
    );
    let allocator = allocator_with(context, context_features(context));
    let device = &context.device;
    let _idle = IdleOnDrop(device);

    let size = 64 << 10;
    // SAFETY: valid create infos; the objects are used by the one-time
    // commands below only, which are waited for.
    let (upload, mut staged) =
        unsafe { allocator.create_buffer(&buffer_info(size), &AllocationDesc::new(Usage::UPLOAD)) }
            .unwrap();
    // SAFETY: as above.
    let (readback, mut read) = unsafe {
        allocator.create_buffer(&buffer_info(size), &AllocationDesc::new(Usage::READBACK))
    }
    .unwrap();
    // SAFETY: as above.
    let (image, image_allocation) = unsafe {
        allocator.create_image(
            &image_info(64, 64),
            &AllocationDesc::new(Usage::DEVICE_LOCAL),
        )
    }
    .unwrap();
    // The memory-type queries: no maintenance4 below 1.3, so each makes
    // its resource and destroys it (the validation layer watches).
    // SAFETY: valid create infos.
    let (for_buffer, for_image) = unsafe {
        (
            allocator.memory_type_for_buffer(&buffer_info(size), Usage::UPLOAD),
            allocator.memory_type_for_image(&image_info(64, 64), Usage::DEVICE_LOCAL),
        )
    };
    assert_eq!(for_buffer, Ok(staged.memory_type()), "{what}");
    assert_eq!(for_image, Ok(image_allocation.memory_type()), "{what}");
    allocator.mapped_slice_mut(&mut staged).unwrap()[..size as usize].fill(0x5A);
    allocator.flush(&staged, 0..size).unwrap();

    let ring = allocator
        .create_upload_ring(&UploadRingDesc {
            size: 1 << 20,
            ..UploadRingDesc::default()
        })
        .unwrap();
    let from_ring = allocator.ring_allocate(ring, 4096, 4).unwrap();
    allocator.ring_write(&from_ring, 0, &[0xC3; 4096]).unwrap();

    context.run_one_time_commands(|device, cmd| {
        let whole = [vk::BufferCopy {
            src_offset: 0,
            dst_offset: 0,
            size,
        }];
        let tail = [vk::BufferCopy {
            src_offset: from_ring.buffer_offset(),
            dst_offset: size - 4096,
            size: 4096,
        }];
        let clear = vk::ClearColorValue {
            uint32: [1, 2, 3, 4],
        };
        // SAFETY: every handle belongs to `device` and is bound; the
        // barriers order the copies, and the transfers before host reads.
        unsafe {
            device.cmd_copy_buffer(cmd, upload, readback, &whole);
            memory_barrier(device, cmd, TRANSFER_WRITES, TRANSFER_WRITES);
            device.cmd_copy_buffer(cmd, from_ring.buffer(), readback, &tail);
            transition(
                device,
                cmd,
                image,
                (vk::ImageLayout::UNDEFINED, vk::AccessFlags::empty()),
                (
                    vk::ImageLayout::TRANSFER_DST_OPTIMAL,
                    vk::AccessFlags::TRANSFER_WRITE,
                ),
            );
            device.cmd_clear_color_image(
                cmd,
                image,
                vk::ImageLayout::TRANSFER_DST_OPTIMAL,
                &clear,
                &[super::allocator_setup::COLOR],
            );
            let (src, dst) = TRANSFER_TO_HOST;
            memory_barrier(device, cmd, src, dst);
        }
    });
    check_pattern(&allocator, &mut read, size - 4096, &[0x5A], &what);
    allocator.invalidate(&mut read, 0..size).unwrap();
    assert!(
        allocator.mapped_slice(&read).unwrap()[(size - 4096) as usize..size as usize]
            .iter()
            .all(|&byte| byte == 0xC3),
        "{what}: the ring's bytes did not arrive"
    );

    // Frees after a frame on a fence (signalled by an empty submission).
    // SAFETY: the GPU is done with them (the commands were waited for).
    unsafe {
        allocator
            .destroy_buffer_after_frame(upload, staged)
            .unwrap();
        allocator
            .destroy_image_after_frame(image, image_allocation)
            .unwrap();
    }
    // SAFETY: valid create info.
    let fence = unsafe { device.create_fence(&vk::FenceCreateInfo::default(), None) }.unwrap();
    // SAFETY: the fence is signalled by the submission just below, after
    // every use of the frame's memory.
    unsafe {
        allocator.end_frame(fence).unwrap();
        device.queue_submit(context.queue, &[], fence).unwrap();
    }
    assert_eq!(
        allocator.wait_and_collect(u64::MAX).unwrap().frees,
        2,
        "{what}"
    );
    // SAFETY: collected, so the allocator no longer reads it.
    unsafe { device.destroy_fence(fence, None) };

    // Every driver the suite runs on offers timeline semaphores to a 1.1
    // device (`VK_KHR_timeline_semaphore`): a context without them would
    // leave the timeline path untested, silently.
    assert!(
        context.vulkan_1_2_features_enabled || context.timeline_semaphore_khr_enabled,
        "{what}: no timeline semaphores, core or VK_KHR_timeline_semaphore"
    );
    timeline_frame(context, &allocator, readback, read, &what);
    device_address_request(context, &allocator, &what);
    allocator.destroy_upload_ring(ring).unwrap();
    // SAFETY: every frame's work is done (waited for above).
    unsafe { allocator.collect_idle() };
    assert_eq!(allocator.stats().allocations(), 0, "{what}");
}

/// Transfer writes made visible to later transfer reads and writes.
const TRANSFER_WRITES: (vk::PipelineStageFlags, vk::AccessFlags) = (
    vk::PipelineStageFlags::TRANSFER,
    vk::AccessFlags::from_raw(
        vk::AccessFlags::TRANSFER_READ.as_raw() | vk::AccessFlags::TRANSFER_WRITE.as_raw(),
    ),
);

/// A frame sealed on a timeline semaphore (Vulkan 1.2, or 1.1 with
/// `VK_KHR_timeline_semaphore`), signalled from the host, retires
/// `buffer`.
fn timeline_frame(
    context: &VulkanContext,
    allocator: &Allocator<AshMemoryDevice>,
    buffer: vk::Buffer,
    allocation: vk_suballoc::Allocation,
    what: &str,
) {
    let device = &context.device;
    let mut type_info = vk::SemaphoreTypeCreateInfo::default()
        .semaphore_type(vk::SemaphoreType::TIMELINE)
        .initial_value(0);
    let info = vk::SemaphoreCreateInfo::default().push_next(&mut type_info);
    // SAFETY: timeline semaphores are enabled with Vulkan 1.2 or the
    // extension.
    let timeline = unsafe { device.create_semaphore(&info, None) }.unwrap();
    // SAFETY: the GPU is done with the buffer; the host signals the value
    // below; the device has timeline semaphores (1.2 or the extension).
    unsafe {
        allocator
            .destroy_buffer_after_frame(buffer, allocation)
            .unwrap();
        allocator.end_frame_timeline(timeline, 1).unwrap();
    }
    assert_eq!(allocator.collect().unwrap().frames, 0, "{what}");
    let signal = vk::SemaphoreSignalInfo::default()
        .semaphore(timeline)
        .value(1);
    // SAFETY: a host signal of a larger value, through the extension's
    // command where the device has no core 1.2 ones.
    unsafe {
        if context.vulkan_1_2_features_enabled {
            device.signal_semaphore(&signal)
        } else {
            ash::khr::timeline_semaphore::Device::new(&context.instance, device)
                .signal_semaphore(&signal)
        }
    }
    .unwrap();
    assert_eq!(
        allocator.wait_and_collect(u64::MAX).unwrap().frees,
        1,
        "{what}"
    );
    // SAFETY: collected, so the allocator no longer reads it.
    unsafe { device.destroy_semaphore(timeline, None) };
}

/// A request for memory whose buffers take their device address: served
/// with buffer device address (Vulkan 1.2 here), refused without it.
fn device_address_request(
    context: &VulkanContext,
    allocator: &Allocator<AshMemoryDevice>,
    what: &str,
) {
    let requirements = vk::MemoryRequirements {
        size: 4096,
        alignment: 256,
        memory_type_bits: (1 << context.memory_properties().memory_type_count) - 1,
    };
    let request = Request::new(
        requirements,
        Usage::DEVICE_LOCAL | Usage::DEVICE_ADDRESS,
        ResourceKind::Buffer,
    );
    let result = allocator.allocate(&request);
    if context.vulkan_1_2_features_enabled {
        // SAFETY: never bound or used.
        unsafe { allocator.free(result.unwrap()) }.unwrap();
    } else {
        assert!(
            matches!(result, Err(Error::DeviceAddressNotEnabled)),
            "{what}: {result:?}"
        );
    }
}
