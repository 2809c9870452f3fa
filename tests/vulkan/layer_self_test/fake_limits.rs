//! The fake limits bite: `heapUsage` and `heapBudget` follow allocations,
//! a fake heap holds exactly its size, `maxMemoryAllocationCount` (an
//! override or the mobile profile's own) is enforced and reported, and
//! `fail-allocation=N` fails exactly the chosen calls (and
//! `fail-create-buffer=N`, `fail-create-image=N`, `fail-bind-buffer=N`,
//! `fail-bind-image=N` theirs, binding or making nothing), an allocation
//! the driver refuses leaves neither bytes nor a count behind, and memory
//! imported from this device's own export counts once per memory object,
//! as RADV and ANV count it, and the devices of one physical device share
//! its heaps, a destroyed device's leaked memory leaving them.

use ash::vk;

use crate::support::{test_each_fake_profile, Advice, ContextOptions, Profile, VulkanContext};

use super::{allocate, budgeted, create_buffer, expected_budget, free, image_info, MIB};

/// `heapUsage` of every heap.
fn heap_usage(context: &VulkanContext) -> Vec<u64> {
    let budget = context
        .memory_budget()
        .expect("a context made by `budgeted`");
    budget.iter().map(|heap| heap.usage).collect()
}

test_each_fake_profile!(
    /// `heapUsage` follows allocations and frees, per heap, and so does
    /// `heapBudget`, below the heap's size as on real drivers.
    fn budget_follows_allocations(profile) {
        let context = budgeted(profile);
        let properties = context.memory_properties();
        let heap = properties.memory_types[0].heap_index as usize;
        let size = properties.memory_heaps[heap].size;
        let memory = allocate(&context, 0, 3 * MIB).unwrap();
        assert_eq!(heap_usage(&context)[heap], 3 * MIB);
        let budget = context.memory_budget().unwrap()[heap].budget;
        assert_eq!(budget, expected_budget(size, 3 * MIB));
        assert!(budget < size);
        free(&context, memory);
        assert_eq!(heap_usage(&context)[heap], 0);
        context.assert_no_validation_messages();
    }
);

test_each_fake_profile!(
    /// A fake heap holds exactly its size; past it, `ERROR_OUT_OF_DEVICE_MEMORY`.
    fn heap_size_is_enforced(profile) {
        let context = budgeted(profile);
        context.allow(Advice::FailingCalls);
        let properties = context.memory_properties();
        let heap = properties.memory_types[0].heap_index as usize;
        let quarter = properties.memory_heaps[heap].size / 4;
        let mut held: Vec<_> = (0..4).map(|_| allocate(&context, 0, quarter).unwrap()).collect();
        assert_eq!(heap_usage(&context)[heap], 4 * quarter);
        assert_eq!(allocate(&context, 0, MIB), Err(vk::Result::ERROR_OUT_OF_DEVICE_MEMORY));
        free(&context, held.pop().unwrap());
        held.push(allocate(&context, 0, quarter).unwrap());
        for memory in held {
            free(&context, memory);
        }
        context.assert_no_validation_messages();
    }
);

test_each_fake_profile!(
    /// Past `maxMemoryAllocationCount`, `ERROR_TOO_MANY_OBJECTS`, and the
    /// validation layer reports it.
    fn allocation_count_is_enforced(profile) {
        let context = VulkanContext::with_options(profile, ContextOptions::default().max_allocations(8));
        context.allow(Advice::FailingCalls);
        assert_eq!(context.properties().limits.max_memory_allocation_count, 8);
        let held: Vec<_> = (0..8).map(|_| allocate(&context, 0, 4096).unwrap()).collect();
        context.assert_no_validation_messages();
        assert_eq!(allocate(&context, 0, 4096), Err(vk::Result::ERROR_TOO_MANY_OBJECTS));
        context.expect_validation_messages(&["VUID-vkAllocateMemory-maxMemoryAllocationCount-04101"]);
        for memory in held {
            free(&context, memory);
        }
    }
);

/// The mobile profile's own limit (1024) applies without an override.
#[test]
fn mobile_allows_1024_allocations() {
    let context = VulkanContext::new(Profile::Mobile);
    context.allow(Advice::FailingCalls);
    context.allow(Advice::ManyMemoryObjects);
    let held: Vec<_> = (0..1024)
        .map(|_| allocate(&context, 0, 256).unwrap())
        .collect();
    assert_eq!(
        allocate(&context, 0, 256),
        Err(vk::Result::ERROR_TOO_MANY_OBJECTS)
    );
    context.expect_validation_messages(&["VUID-vkAllocateMemory-maxMemoryAllocationCount-04101"]);
    for memory in held {
        free(&context, memory);
    }
}

test_each_fake_profile!(
    /// `fail-allocation=N` fails exactly the Nth call.
    fn chosen_allocations_fail(profile) {
        let options = ContextOptions::default().fail_allocation(2).fail_allocation(4);
        let context = VulkanContext::with_options(profile, options);
        context.allow(Advice::FailingCalls);
        let results: Vec<_> = (0..5).map(|_| allocate(&context, 0, 4096)).collect();
        let oom = Err(vk::Result::ERROR_OUT_OF_DEVICE_MEMORY);
        assert_eq!(results[1], oom);
        assert_eq!(results[3], oom);
        for result in [results[0], results[2], results[4]] {
            free(&context, result.unwrap());
        }
        context.assert_no_validation_messages();
    }
);

/// `fail-create-buffer=N` and its kin fail exactly the Nth call of their
/// command, counted apart (a `vkBind*Memory2` call counts as one bind),
/// with the result asked for, and make or bind nothing: the buffer whose
/// `vkBindBufferMemory` failed binds at the next call, as one never bound.
/// (After a failed `vkBind*Memory2`, the validation layer (1.3.239) takes
/// the resource for bound, and reports a second bind as
/// VUID-VkBindBufferMemoryInfo-buffer-07459: that resource is destroyed
/// unbound instead, as an application would.)
#[test]
fn chosen_creations_and_binds_fail() {
    let options = ContextOptions::default()
        .fail_call("fail-create-buffer", 2, true)
        .fail_call("fail-create-image", 1, false)
        .fail_call("fail-bind-buffer", 1, false)
        .fail_call("fail-bind-buffer", 3, true)
        .fail_call("fail-bind-image", 1, true);
    let context = VulkanContext::with_options(Profile::Discrete, options);
    context.allow(Advice::FailingCalls);
    let device = &context.device;
    let ood = Some(vk::Result::ERROR_OUT_OF_DEVICE_MEMORY);
    let ooh = Some(vk::Result::ERROR_OUT_OF_HOST_MEMORY);
    let info = vk::BufferCreateInfo::default()
        .size(4096)
        .usage(vk::BufferUsageFlags::TRANSFER_SRC);
    // SAFETY: valid create, allocate and bind infos on the live device;
    // every object is destroyed or freed once, after its last use.
    unsafe {
        let first = create_buffer(&context, 4096);
        assert_eq!(device.create_buffer(&info, None).err(), ooh);
        let second = create_buffer(&context, 4096);
        let third = create_buffer(&context, 4096);
        assert_eq!(device.create_image(&image_info(), None).err(), ood);
        let image = device.create_image(&image_info(), None).unwrap();
        let memory_for = |requirements: vk::MemoryRequirements| {
            let type_index = requirements.memory_type_bits.trailing_zeros();
            allocate(&context, type_index, requirements.size).unwrap()
        };
        let memories = [
            memory_for(device.get_buffer_memory_requirements(first)),
            memory_for(device.get_buffer_memory_requirements(second)),
            memory_for(device.get_buffer_memory_requirements(third)),
            memory_for(device.get_image_memory_requirements(image)),
        ];
        assert_eq!(device.bind_buffer_memory(first, memories[0], 0).err(), ood);
        device.bind_buffer_memory(first, memories[0], 0).unwrap();
        let bind = |buffer, memory| {
            [vk::BindBufferMemoryInfo::default()
                .buffer(buffer)
                .memory(memory)]
        };
        assert_eq!(
            device.bind_buffer_memory2(&bind(second, memories[1])).err(),
            ooh
        );
        device
            .bind_buffer_memory2(&bind(third, memories[2]))
            .unwrap();
        let bind = [vk::BindImageMemoryInfo::default()
            .image(image)
            .memory(memories[3])];
        assert_eq!(device.bind_image_memory2(&bind).err(), ooh);
        for buffer in [first, second, third] {
            device.destroy_buffer(buffer, None);
        }
        device.destroy_image(image, None);
        for memory in memories {
            free(&context, memory);
        }
    }
    context.assert_no_validation_messages();
}

/// A `vkBindBufferMemory2` call of several binds is one buffer bind of
/// `fail-bind-buffer=N`'s count, as the layer's options say: with the
/// second bind chosen, a first call that binds two buffers binds both,
/// and the next call, of one, fails.
#[test]
fn a_bind2_call_of_several_binds_counts_as_one_bind() {
    let options = ContextOptions::default().fail_call("fail-bind-buffer", 2, false);
    let context = VulkanContext::with_options(Profile::Discrete, options);
    context.allow(Advice::FailingCalls);
    let device = &context.device;
    // SAFETY: valid create, allocate and bind infos on the live device;
    // every object is destroyed or freed once, after its last use.
    unsafe {
        let buffers = [0; 3].map(|_| create_buffer(&context, 4096));
        let memories = buffers.map(|buffer| {
            let requirements = device.get_buffer_memory_requirements(buffer);
            let type_index = requirements.memory_type_bits.trailing_zeros();
            allocate(&context, type_index, requirements.size).unwrap()
        });
        let binds = [0, 1].map(|i| {
            vk::BindBufferMemoryInfo::default()
                .buffer(buffers[i])
                .memory(memories[i])
        });
        device.bind_buffer_memory2(&binds).unwrap();
        assert_eq!(
            device.bind_buffer_memory(buffers[2], memories[2], 0).err(),
            Some(vk::Result::ERROR_OUT_OF_DEVICE_MEMORY)
        );
        for buffer in buffers {
            device.destroy_buffer(buffer, None);
        }
        for memory in memories {
            free(&context, memory);
        }
    }
    context.assert_no_validation_messages();
}

// An opaque POSIX file descriptor: Unix only.
#[cfg(unix)]
test_each_fake_profile!(
    /// An allocation the layer admits and the driver then refuses (an
    /// import of a descriptor that holds no memory: lavapipe answers
    /// `ERROR_INVALID_EXTERNAL_HANDLE`) leaves nothing in the layer's
    /// books: `heapUsage` is back to 0 and, under `max-allocations=1`, the
    /// next allocation gets the slot. Every other refusal in these tests
    /// is the layer's own, made before it reserves anything, so the
    /// layer's undoing of a reservation the driver refused ran in no test.
    fn a_driver_refusal_leaves_no_usage_and_no_count(profile) {
        use std::os::fd::IntoRawFd;
        let options = ContextOptions::default().memory_budget(true).max_allocations(1);
        let context = VulkanContext::with_options(profile, options);
        assert!(context.external_memory_fd_enabled, "{profile}: the device lacks VK_KHR_external_memory_fd");
        context.allow(Advice::FailingCalls);
        context.allow_own_allocations();
        let heap = context.memory_properties().memory_types[0].heap_index as usize;
        // Left open: lavapipe (Mesa 22.3) closes the descriptor of a failed
        // import, which the application still owns by the specification.
        let not_memory = std::fs::File::open("/dev/null").unwrap().into_raw_fd();
        let mut import = vk::ImportMemoryFdInfoKHR::default()
            .handle_type(vk::ExternalMemoryHandleTypeFlags::OPAQUE_FD)
            .fd(not_memory);
        let info = vk::MemoryAllocateInfo::default()
            .allocation_size(MIB)
            .memory_type_index(0)
            .push_next(&mut import);
        // SAFETY: a valid allocate info but for the descriptor, which holds
        // no memory: the refusal is what the test is after.
        match unsafe { context.device.allocate_memory(&info, None) } {
            // The driver's refusal, not the layer's.
            Err(error) => assert_eq!(error, vk::Result::ERROR_INVALID_EXTERNAL_HANDLE, "{profile}"),
            Ok(memory) => {
                free(&context, memory);
                panic!("{profile}: the driver imported /dev/null");
            }
        }
        // Lavapipe reports its refusal through the messenger too.
        let messages = context.take_messages();
        assert!(
            messages.iter().all(|message| message.contains("VK_ERROR_INVALID_EXTERNAL_HANDLE")),
            "{profile}: {messages:?}"
        );
        assert_eq!(heap_usage(&context)[heap], 0, "{profile}: the refused import's bytes stayed counted");
        let memory = allocate(&context, 0, MIB)
            .unwrap_or_else(|error| panic!("{profile}: the refused import kept its count slot: {error}"));
        free(&context, memory);
        context.assert_no_validation_messages();
    }
);

// An opaque POSIX file descriptor: Unix only.
#[cfg(unix)]
test_each_fake_profile!(
    /// Memory this device exported and imported again counts once per
    /// memory object in `heapUsage`, as Mesa's drivers for the GPUs the
    /// profiles model count it: ANV adds each `VkDeviceMemory`'s BO size to
    /// its heap's `used` at `vkAllocateMemory`, imports included, though a
    /// self-import shares the exporter's BO, and subtracts it at
    /// `vkFreeMemory`; RADV's `heapUsage` is its winsys's allocated-bytes
    /// counter, which every import adds its buffer's size to again (a new
    /// winsys BO per import). Each object's bytes go when that object is
    /// freed, the exporter's first here, and the heap ends empty.
    fn a_self_import_counts_per_memory_object(profile) {
        const OPAQUE_FD: vk::ExternalMemoryHandleTypeFlags =
            vk::ExternalMemoryHandleTypeFlags::OPAQUE_FD;
        let context = budgeted(profile);
        assert!(context.external_memory_fd_enabled, "{profile}: the device lacks VK_KHR_external_memory_fd");
        context.allow(Advice::SmallMemory);
        context.allow_own_allocations();
        let device = &context.device;
        let heap = context.memory_properties().memory_types[0].heap_index as usize;
        let mut export = vk::ExportMemoryAllocateInfo::default().handle_types(OPAQUE_FD);
        let info = vk::MemoryAllocateInfo::default()
            .allocation_size(MIB)
            .memory_type_index(0)
            .push_next(&mut export);
        // SAFETY: a valid allocate info; lavapipe exports opaque descriptors
        // of its memory type.
        let exported = unsafe { device.allocate_memory(&info, None) }.unwrap();
        let fd_device = ash::khr::external_memory_fd::Device::new(&context.instance, device);
        let get_fd = vk::MemoryGetFdInfoKHR::default().memory(exported).handle_type(OPAQUE_FD);
        // SAFETY: live memory allocated exportable as OPAQUE_FD; the
        // extension is enabled.
        let fd = unsafe { fd_device.get_memory_fd(&get_fd) }.unwrap();
        let mut import = vk::ImportMemoryFdInfoKHR::default().handle_type(OPAQUE_FD).fd(fd);
        let info = vk::MemoryAllocateInfo::default()
            .allocation_size(MIB)
            .memory_type_index(0)
            .push_next(&mut import);
        // SAFETY: an opaque descriptor imported with the size and memory
        // type its payload was made with; on success the driver owns it.
        let imported = unsafe { device.allocate_memory(&info, None) }.unwrap();
        assert_eq!(heap_usage(&context)[heap], 2 * MIB, "{profile}: one count per memory object");
        free(&context, exported);
        assert_eq!(heap_usage(&context)[heap], MIB, "{profile}: the import still holds its count");
        free(&context, imported);
        assert_eq!(heap_usage(&context)[heap], 0, "{profile}");
        context.assert_no_validation_messages();
    }
);

/// The devices of one physical device share its fake heaps: `heapUsage`
/// counts every device's memory, and a device destroyed with memory still
/// allocated (a leak, which the validation layer reports) gives that memory
/// back to the heap, as the driver frees it, and no other device's. The
/// layer's accounting at `vkDestroyDevice` ran in no test.
#[test]
fn devices_share_heaps_and_a_destroyed_device_gives_its_memory_back() {
    let context = budgeted(Profile::Discrete);
    let heap = context.memory_properties().memory_types[0].heap_index as usize;
    let priorities = [1.0];
    let queues = [vk::DeviceQueueCreateInfo::default()
        .queue_family_index(context.queue_family_index)
        .queue_priorities(&priorities)];
    let info = vk::DeviceCreateInfo::default().queue_create_infos(&queues);
    // SAFETY: a valid create info on the context's live physical device.
    let other = unsafe {
        context
            .instance
            .create_device(context.physical_device, &info, None)
    }
    .unwrap();
    let own = allocate(&context, 0, MIB).unwrap();
    let info = vk::MemoryAllocateInfo::default()
        .allocation_size(2 * MIB)
        .memory_type_index(0);
    // SAFETY: a valid allocate info on a live device; the first memory is
    // left allocated on purpose, the second freed unused.
    unsafe {
        other.allocate_memory(&info, None).unwrap();
        let freed = other.allocate_memory(&info, None).unwrap();
        other.free_memory(freed, None);
    }
    assert_eq!(heap_usage(&context)[heap], 3 * MIB, "both devices' memory");
    // SAFETY: the other device made nothing but the memory it leaks.
    unsafe { other.destroy_device(None) };
    context.expect_validation_messages(&["VUID-vkDestroyDevice-device-00378"]);
    assert_eq!(
        heap_usage(&context)[heap],
        MIB,
        "the destroyed device's memory stayed counted, or the other device's went"
    );
    free(&context, own);
    assert_eq!(heap_usage(&context)[heap], 0);
    context.assert_no_validation_messages();
}
