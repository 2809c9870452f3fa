//! Self-test of the fake-memory layer's checks of binds into dedicated
//! memory (`layers/fake-memory/src/dedicated_binds.rs`): memory made for one
//! resource (`VkMemoryDedicatedAllocateInfo`) takes that resource, at offset
//! 0, and nothing else; with `dedicated=require` a resource takes only memory
//! dedicated to it. Lavapipe accepts all of these binds and the validation
//! layer the tests run under reports none of them, so the layer refuses
//! them itself, with `VK_ERROR_VALIDATION_FAILED_EXT`; the allocator's
//! dedicated memory binds as a driver that relies on it expects.

use ash::vk;
use vk_suballoc::{AllocationDesc, DedicatedPolicy, Usage};

use super::allocator_setup::{allocator_for, buffer_info, image_info};
use crate::support::{has_id, test_each_fake_profile, Advice, ContextOptions, VulkanContext};

/// What the layer returns for a bind it refuses.
const REFUSED: Result<(), vk::Result> = Err(vk::Result::ERROR_VALIDATION_FAILED_EXT);

/// The rules a refused bind breaks: the validation layer may report them
/// (the one on Debian 12 does not); no other message is expected.
const DEDICATED_RULES: [&str; 8] = [
    "VUID-vkBindBufferMemory-memory-01508",
    "VUID-vkBindImageMemory-memory-01509",
    "VUID-VkBindBufferMemoryInfo-memory-01508",
    "VUID-VkBindImageMemoryInfo-memory-01509",
    "VUID-vkBindBufferMemory-buffer-01444",
    "VUID-vkBindImageMemory-image-01445",
    "VUID-VkBindBufferMemoryInfo-buffer-01444",
    "VUID-VkBindImageMemoryInfo-image-01445",
];

/// A context for `profile` whose tests bind resources to KiB-sized memory
/// of their own and make binds fail on purpose (the layer's lines saying
/// why are kept off the log: `refusals=quiet`).
fn context_with(profile: crate::support::Profile, options: ContextOptions) -> VulkanContext {
    let context = VulkanContext::with_options(profile, options.quiet_refusals());
    context.allow(Advice::SmallMemory);
    context.allow(Advice::FailingCalls);
    context
}

/// Panics if a message other than one of [`DEDICATED_RULES`] and `also`
/// was recorded.
fn assert_only_dedicated_rules(context: &VulkanContext, also: &[&str]) {
    let messages = context.take_messages();
    let others: Vec<&String> = messages
        .iter()
        .filter(|message| {
            !DEDICATED_RULES
                .iter()
                .chain(also)
                .any(|id| has_id(message, id))
        })
        .collect();
    assert!(
        others.is_empty(),
        "{}: unexpected messages:\n{others:#?}",
        context.profile
    );
}

/// A new buffer of `size` bytes and its requirements.
///
/// Each refused bind takes a resource of its own: the validation layer
/// (1.3.239) records a bind even when the call fails, so a second bind of
/// the same resource would break VUID-vkBindBufferMemory-buffer-07459.
fn new_buffer(context: &VulkanContext, size: u64) -> (vk::Buffer, vk::MemoryRequirements) {
    // SAFETY: a valid create info on the context's live device; a live buffer.
    unsafe {
        let buffer = context
            .device
            .create_buffer(&buffer_info(size), None)
            .unwrap();
        (
            buffer,
            context.device.get_buffer_memory_requirements(buffer),
        )
    }
}

/// A new 32×32 image and its requirements, as [`new_buffer`].
fn new_image(context: &VulkanContext) -> (vk::Image, vk::MemoryRequirements) {
    // SAFETY: a valid create info on the context's live device; a live image.
    unsafe {
        let image = context
            .device
            .create_image(&image_info(32, 32), None)
            .unwrap();
        (image, context.device.get_image_memory_requirements(image))
    }
}

/// `vkAllocateMemory` of `size` bytes in the first type of `type_bits`,
/// dedicated to `dedicated` if given.
fn allocate(
    context: &VulkanContext,
    size: u64,
    type_bits: u32,
    dedicated: Option<vk::MemoryDedicatedAllocateInfo<'static>>,
) -> vk::DeviceMemory {
    let mut info = vk::MemoryAllocateInfo::default()
        .allocation_size(size)
        .memory_type_index(type_bits.trailing_zeros());
    let mut dedicated_info = dedicated.unwrap_or_default();
    if dedicated.is_some() {
        info = info.push_next(&mut dedicated_info);
    }
    // Without a priority, which NVIDIA's advice asks of every allocation:
    // let through for this call only, not for the allocator's dedicated
    // memory beside it.
    // SAFETY: a valid allocate info on the context's live device; a
    // dedicated resource is a live one of this device.
    context
        .allowing(&[Advice::NoMemoryPriority], || unsafe {
            context.device.allocate_memory(&info, None)
        })
        .unwrap()
}

/// `vkBindBufferMemory2` of one buffer at offset 0.
///
/// # Safety
/// `buffer` and `memory` are live objects of `context`'s device.
unsafe fn bind_buffer2(
    context: &VulkanContext,
    buffer: vk::Buffer,
    memory: vk::DeviceMemory,
) -> Result<(), vk::Result> {
    let info = vk::BindBufferMemoryInfo::default()
        .buffer(buffer)
        .memory(memory);
    // SAFETY: the contract.
    unsafe { context.device.bind_buffer_memory2(&[info]) }
}

/// `vkBindImageMemory2` of one image at offset 0.
///
/// # Safety
/// `image` and `memory` are live objects of `context`'s device.
unsafe fn bind_image2(
    context: &VulkanContext,
    image: vk::Image,
    memory: vk::DeviceMemory,
) -> Result<(), vk::Result> {
    let info = vk::BindImageMemoryInfo::default()
        .image(image)
        .memory(memory);
    // SAFETY: the contract.
    unsafe { context.device.bind_image_memory2(&[info]) }
}

test_each_fake_profile!(
    /// The allocator's dedicated memory (`DedicatedPolicy::Always`) binds
    /// its buffer and its image; another buffer or image bound to it, by
    /// either bind command, is refused, and so is a buffer bound at a
    /// non-zero offset of memory dedicated to it.
    fn dedicated_memory_takes_only_its_resource(profile) {
        let context = context_with(profile, ContextOptions::default());
        let allocator = allocator_for(&context);
        let device = &context.device;
        let always = AllocationDesc::new(Usage::DEVICE_LOCAL).dedicated(DedicatedPolicy::Always);
        // SAFETY: valid create infos; the refused binds are the misuse under
        // test and bind nothing; every resource is destroyed before its
        // memory is freed; nothing is used by the GPU.
        unsafe {
            let (buffer, a) = allocator.create_buffer(&buffer_info(4096), &always).unwrap();
            let (image, b) = allocator.create_image(&image_info(32, 32), &always).unwrap();
            assert!(a.is_dedicated() && b.is_dedicated(), "{profile}");
            let buffers = [new_buffer(&context, 1024).0, new_buffer(&context, 1024).0, new_buffer(&context, 1024).0];
            let images = [new_image(&context).0, new_image(&context).0];
            assert_eq!(device.bind_buffer_memory(buffers[0], a.memory(), 0), REFUSED, "{profile}");
            assert_eq!(bind_buffer2(&context, buffers[1], a.memory()), REFUSED, "{profile}");
            assert_eq!(device.bind_image_memory(images[0], b.memory(), 0), REFUSED, "{profile}");
            assert_eq!(bind_image2(&context, images[1], b.memory()), REFUSED, "{profile}");
            // A buffer in memory dedicated to an image.
            assert_eq!(device.bind_buffer_memory(buffers[2], b.memory(), 0), REFUSED, "{profile}");
            assert_only_dedicated_rules(&context, &[]);

            // Memory dedicated to a buffer, twice its size (which the
            // validation layer reports): the buffer at an aligned,
            // non-zero offset is refused.
            let (offset_buffer, requirements) = new_buffer(&context, 1024);
            let to_buffer = vk::MemoryDedicatedAllocateInfo::default().buffer(offset_buffer);
            let memory = allocate(&context, 2 * requirements.size, requirements.memory_type_bits, Some(to_buffer));
            let offset = requirements.alignment.max(requirements.size);
            assert_eq!(device.bind_buffer_memory(offset_buffer, memory, offset), REFUSED, "{profile}");
            assert_only_dedicated_rules(&context, &["VUID-VkMemoryDedicatedAllocateInfo-buffer-01435"]);

            for buffer in buffers.into_iter().chain([offset_buffer]) {
                device.destroy_buffer(buffer, None);
            }
            for image in images {
                device.destroy_image(image, None);
            }
            device.free_memory(memory, None);
            allocator.destroy_buffer(buffer, a).unwrap();
            allocator.destroy_image(image, b).unwrap();
        }
        context.assert_no_validation_messages();
    }
);

test_each_fake_profile!(
    /// A driver that requires dedicated memory (`dedicated=require`) gets
    /// it from the allocator's `create_buffer` and `create_image`, whose
    /// binds pass; a buffer or image bound, by either bind command, to
    /// memory not dedicated to it is refused, and one bound to memory
    /// dedicated to it binds.
    fn required_dedicated_memory_is_enforced_on_binds(profile) {
        let context = context_with(profile, ContextOptions::default().dedicated("require"));
        let allocator = allocator_for(&context);
        let device = &context.device;
        let auto = AllocationDesc::new(Usage::DEVICE_LOCAL);
        // SAFETY: valid create infos; the refused binds are the misuse under
        // test and bind nothing; every resource is destroyed before its
        // memory is freed; nothing is used by the GPU.
        unsafe {
            let (buffer, a) = allocator.create_buffer(&buffer_info(4096), &auto).unwrap();
            let (image, b) = allocator.create_image(&image_info(32, 32), &auto).unwrap();
            assert!(a.is_dedicated() && b.is_dedicated(), "{profile}");

            let buffers = [new_buffer(&context, 4096).0, new_buffer(&context, 4096).0];
            let images = [new_image(&context).0, new_image(&context).0];
            let (dedicated_buffer, buffer_requirements) = new_buffer(&context, 4096);
            let (dedicated_image, image_requirements) = new_image(&context);
            let plain_for_buffers = allocate(&context, buffer_requirements.size, buffer_requirements.memory_type_bits, None);
            let plain_for_images = allocate(&context, image_requirements.size, image_requirements.memory_type_bits, None);
            assert_eq!(device.bind_buffer_memory(buffers[0], plain_for_buffers, 0), REFUSED, "{profile}");
            assert_eq!(bind_buffer2(&context, buffers[1], plain_for_buffers), REFUSED, "{profile}");
            assert_eq!(device.bind_image_memory(images[0], plain_for_images, 0), REFUSED, "{profile}");
            assert_eq!(bind_image2(&context, images[1], plain_for_images), REFUSED, "{profile}");
            assert_only_dedicated_rules(&context, &[]);

            let to_buffer = vk::MemoryDedicatedAllocateInfo::default().buffer(dedicated_buffer);
            let to_image = vk::MemoryDedicatedAllocateInfo::default().image(dedicated_image);
            let buffer_memory = allocate(&context, buffer_requirements.size, buffer_requirements.memory_type_bits, Some(to_buffer));
            let image_memory = allocate(&context, image_requirements.size, image_requirements.memory_type_bits, Some(to_image));
            bind_buffer2(&context, dedicated_buffer, buffer_memory).unwrap();
            device.bind_image_memory(dedicated_image, image_memory, 0).unwrap();

            for buffer in buffers.into_iter().chain([dedicated_buffer]) {
                device.destroy_buffer(buffer, None);
            }
            for image in images.into_iter().chain([dedicated_image]) {
                device.destroy_image(image, None);
            }
            for memory in [plain_for_buffers, plain_for_images, buffer_memory, image_memory] {
                device.free_memory(memory, None);
            }
            allocator.destroy_buffer(buffer, a).unwrap();
            allocator.destroy_image(image, b).unwrap();
        }
        context.assert_no_validation_messages();
    }
);

/// A bind the layer refuses for the dedicated-memory rules counts among
/// the binds `fail-bind-buffer=N` numbers (`call_failures.rs`): with
/// `fail-bind-buffer=2` under `dedicated=require`, a buffer bound to
/// plain memory is refused (the first bind), the next bind, of a buffer
/// into memory dedicated to it, fails out of device memory (the second),
/// and the same bind then binds (the third).
#[test]
fn a_refused_bind_counts_among_the_binds_chosen_to_fail() {
    let options =
        ContextOptions::default()
            .dedicated("require")
            .fail_call("fail-bind-buffer", 2, false);
    let context = context_with(crate::support::Profile::Discrete, options);
    let device = &context.device;
    // SAFETY: valid create and allocate infos; the refused and failed
    // binds are the cases under test and bind nothing; every buffer is
    // destroyed before its memory is freed; nothing is used by the GPU.
    unsafe {
        let (refused, requirements) = new_buffer(&context, 4096);
        let plain = allocate(
            &context,
            requirements.size,
            requirements.memory_type_bits,
            None,
        );
        assert_eq!(device.bind_buffer_memory(refused, plain, 0), REFUSED);
        assert_only_dedicated_rules(&context, &[]);

        let (buffer, requirements) = new_buffer(&context, 4096);
        let to_buffer = vk::MemoryDedicatedAllocateInfo::default().buffer(buffer);
        let memory = allocate(
            &context,
            requirements.size,
            requirements.memory_type_bits,
            Some(to_buffer),
        );
        assert_eq!(
            device.bind_buffer_memory(buffer, memory, 0),
            Err(vk::Result::ERROR_OUT_OF_DEVICE_MEMORY),
            "the refused bind was the first"
        );
        device.bind_buffer_memory(buffer, memory, 0).unwrap();

        for buffer in [refused, buffer] {
            device.destroy_buffer(buffer, None);
        }
        for memory in [plain, memory] {
            device.free_memory(memory, None);
        }
    }
    context.assert_no_validation_messages();
}
