//! The harness's validation checks are on: best practices, and
//! synchronization validation within a command buffer and across
//! submissions (`tests/support/validation_messages.rs`). Each test makes the
//! mistake a check exists for and expects its message, so a harness that
//! lost a check fails here rather than letting the suite pass unchecked.

use ash::vk;
use vk_suballoc::device::AshMemoryDevice;
use vk_suballoc::{Allocation, AllocationDesc, Allocator, Usage};

use super::allocator_setup::{allocator_for, buffer_info};
use crate::support::{Advice, Profile, StackTurn, VulkanContext};

const SIZE: u64 = 64 * 1024;

fn device_buffer(allocator: &Allocator<AshMemoryDevice>) -> (vk::Buffer, Allocation) {
    // SAFETY: a valid create info.
    unsafe {
        allocator.create_buffer(
            &buffer_info(SIZE),
            &AllocationDesc::new(Usage::DEVICE_LOCAL),
        )
    }
    .unwrap()
}

/// A 4 KiB `vkAllocateMemory` draws best practices' advice, which a context
/// that allows [`Advice::SmallMemory`] drops; another, right after the
/// first is freed, NVIDIA's vendor-specific advice to reuse it
/// ([`Advice::ReusedMemory`]), which `VulkanContext::allowing` drops from
/// one call's messages and no other's; the allocator's own 64 KiB buffer,
/// in a block, draws none.
#[test]
fn best_practices_are_checked() {
    let context = VulkanContext::new(Profile::Lavapipe);
    let allocator = allocator_for(&context);
    let (buffer, allocation) = device_buffer(&allocator);
    context.assert_no_validation_messages();
    let info = vk::MemoryAllocateInfo::default()
        .allocation_size(4096)
        .memory_type_index(allocation.memory_type());
    // SAFETY: a valid allocate info; each memory object is freed once, unused.
    unsafe {
        let memory = context.device.allocate_memory(&info, None).unwrap();
        context.device.free_memory(memory, None);
        context.expect_validation_messages(&[
            "UNASSIGNED-BestPractices-vkAllocateMemory-small-allocation",
        ]);
        context.allow(Advice::SmallMemory);
        let memory = context.device.allocate_memory(&info, None).unwrap();
        context.device.free_memory(memory, None);
        // The vendor-specific checks are on: NVIDIA's advise reusing the
        // memory freed just before instead.
        context.expect_validation_messages(&[
            "UNASSIGNED-BestPractices-AllocateMemory-ReuseAllocations",
        ]);
        // Allowed for one call (`VulkanContext::allowing`), the advice is
        // dropped from that call's messages alone: the one recorded just
        // before stays, and so does the next call's.
        const REUSE: &str = "UNASSIGNED-BestPractices-AllocateMemory-ReuseAllocations";
        let memory = context.device.allocate_memory(&info, None).unwrap();
        context.device.free_memory(memory, None);
        let memory = context
            .allowing(&[Advice::ReusedMemory], || {
                context.device.allocate_memory(&info, None)
            })
            .unwrap();
        context.device.free_memory(memory, None);
        assert_eq!(context.expect_validation_messages(&[REUSE]).len(), 1);
        let memory = context.device.allocate_memory(&info, None).unwrap();
        context.device.free_memory(memory, None);
        assert_eq!(context.expect_validation_messages(&[REUSE]).len(), 1);
        context.allow(Advice::ReusedMemory);
        let memory = context.device.allocate_memory(&info, None).unwrap();
        context.device.free_memory(memory, None);
        context.assert_no_validation_messages();
        allocator.destroy_buffer(buffer, allocation).unwrap();
    }
}

/// The vendor-specific checks run in every kind of context the tests make:
/// on instances of Vulkan 1.1 and 1.2 (`api_version_suite`'s) a
/// `vkAllocateMemory` right after a free draws NVIDIA's advice to reuse
/// the memory, and on a profile with `VK_EXT_memory_priority` (discrete)
/// one without a priority draws NVIDIA's advice to give it one, which only
/// contexts without the extension let through on their own.
#[test]
fn vendor_checks_run_in_every_context() {
    const REUSE: &str = "UNASSIGNED-BestPractices-AllocateMemory-ReuseAllocations";
    const PRIORITY: &str = "UNASSIGNED-BestPractices-AllocateMemory-SetPriority";
    for api_version in [vk::API_VERSION_1_1, vk::API_VERSION_1_2] {
        let context = VulkanContext::with_api_version(Profile::Lavapipe, api_version);
        assert!(!context.memory_priority_enabled);
        context.allow(Advice::SmallMemory);
        // One memory object allocated, freed, and allocated again: the
        // advice the second allocation draws.
        allocate_and_free(&context);
        context.assert_no_validation_messages();
        allocate_and_free(&context);
        context.expect_validation_messages(&[REUSE]);
    }
    let context = VulkanContext::new(Profile::Discrete);
    assert!(context.memory_priority_enabled);
    context.allow(Advice::ReusedMemory);
    context.allow(Advice::SmallMemory);
    allocate_and_free(&context);
    context.expect_validation_messages(&[PRIORITY]);
}

/// 4 KiB of memory type 0 (lavapipe's and the fake profiles' type 0 takes
/// any size) allocated without a priority and freed at once, unused.
fn allocate_and_free(context: &VulkanContext) {
    let info = vk::MemoryAllocateInfo::default()
        .allocation_size(4096)
        .memory_type_index(0);
    // SAFETY: a valid allocate info; the object is freed once, unused.
    unsafe {
        let memory = context.device.allocate_memory(&info, None).unwrap();
        context.device.free_memory(memory, None);
    }
}

/// A copy that reads what a fill in the same command buffer wrote, with no
/// barrier between them, is a read-after-write hazard.
#[test]
fn a_hazard_within_a_command_buffer_is_reported() {
    let context = VulkanContext::new(Profile::Lavapipe);
    let allocator = allocator_for(&context);
    let (source, source_allocation) = device_buffer(&allocator);
    let (target, target_allocation) = device_buffer(&allocator);
    // SAFETY: bound buffers of this device; the missing barrier is the
    // mistake under test (lavapipe runs the commands in order).
    context.run_one_time_commands(|device, cmd| unsafe {
        device.cmd_fill_buffer(cmd, source, 0, SIZE, 7);
        let region = [vk::BufferCopy {
            src_offset: 0,
            dst_offset: 0,
            size: SIZE,
        }];
        device.cmd_copy_buffer(cmd, source, target, &region);
    });
    context.expect_validation_messages(&["SYNC-HAZARD-READ-AFTER-WRITE"]);
    // SAFETY: the commands completed (run_one_time_commands waits).
    unsafe {
        allocator.destroy_buffer(source, source_allocation).unwrap();
        allocator.destroy_buffer(target, target_allocation).unwrap();
    }
}

/// Two submissions that fill the same buffer with nothing ordering their
/// writes (submission order is no memory dependency) are a
/// write-after-write hazard: what an allocator handing out memory still in
/// use by an earlier submission would cause.
#[test]
fn a_hazard_across_submissions_is_reported() {
    let context = VulkanContext::new(Profile::Lavapipe);
    let allocator = allocator_for(&context);
    let (buffer, allocation) = device_buffer(&allocator);
    let device = &context.device;
    let pool_info = vk::CommandPoolCreateInfo::default()
        .flags(vk::CommandPoolCreateFlags::TRANSIENT)
        .queue_family_index(context.queue_family_index);
    // SAFETY: valid create and allocate infos on a live device; the buffer
    // is bound; the queue has no other user in this test; everything is
    // destroyed after the queue is idle. The unordered writes are the
    // mistake under test.
    unsafe {
        let pool = device.create_command_pool(&pool_info, None).unwrap();
        let allocate_info = vk::CommandBufferAllocateInfo::default()
            .command_pool(pool)
            .level(vk::CommandBufferLevel::PRIMARY)
            .command_buffer_count(2);
        let commands = device.allocate_command_buffers(&allocate_info).unwrap();
        let begin = vk::CommandBufferBeginInfo::default()
            .flags(vk::CommandBufferUsageFlags::ONE_TIME_SUBMIT);
        for (pattern, &cmd) in (1..).zip(&commands) {
            device.begin_command_buffer(cmd, &begin).unwrap();
            device.cmd_fill_buffer(cmd, buffer, 0, SIZE, pattern);
            device.end_command_buffer(cmd).unwrap();
        }
        for cmd in &commands {
            let submit = vk::SubmitInfo::default().command_buffers(std::slice::from_ref(cmd));
            device
                .queue_submit(context.queue, &[submit], vk::Fence::null())
                .unwrap();
        }
        device.queue_wait_idle(context.queue).unwrap();
        device.destroy_command_pool(pool, None);
        allocator.destroy_buffer(buffer, allocation).unwrap();
    }
    context.expect_validation_messages(&["SYNC-HAZARD-WRITE-AFTER-WRITE"]);
}

/// One test thread at a time holds Vulkan contexts (`StackTurn`): a
/// context asked for on another thread is made only once this thread's
/// last one is dropped, while this thread may hold several at once. Without
/// the turn, the validation layer crashed now and then when a test
/// destroyed its instance during another test's call. The other thread is
/// seen waiting for the turn (or, were it let through, seen done with its
/// context) before this thread goes on, so the test cannot pass because
/// the other thread was merely slow to start.
#[test]
fn one_test_thread_at_a_time_holds_contexts() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    let first = VulkanContext::new(Profile::Lavapipe);
    let given_back = Arc::new(AtomicBool::new(false));
    let other = std::thread::spawn({
        let given_back = Arc::clone(&given_back);
        move || {
            let _context = VulkanContext::new(Profile::Lavapipe);
            given_back.load(Ordering::SeqCst)
        }
    });
    let other_id = other.thread().id();
    let start = Instant::now();
    while !StackTurn::is_waiting(other_id) && !other.is_finished() {
        assert!(
            start.elapsed() < Duration::from_secs(120),
            "the other thread neither waited for the turn nor made its context"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    let second = VulkanContext::new(Profile::Lavapipe);
    drop(second);
    given_back.store(true, Ordering::SeqCst);
    drop(first);
    assert!(
        other.join().unwrap(),
        "another thread made a context while this one held the stack"
    );
}

/// Set in the processes that
/// [`settings_that_hide_messages_fail_the_tests`] starts: there the test
/// makes a misaligned flush and ends, so that its context fails it.
const MUTING_CHILD: &str = "VK_SUBALLOC_MUTING_CHILD";

/// The message the child's misaligned flush draws.
const FLUSH_VUID: &str = "VUID-VkMappedMemoryRange-offset-00687";

/// Flushes at offset 1, not a multiple of `nonCoherentAtomSize`, and
/// drops the context with the message untaken: the test fails, unless the
/// layer was kept from reporting it.
fn misaligned_flush() {
    let context = VulkanContext::new(Profile::Lavapipe);
    context.allow(Advice::SmallMemory);
    let memory = mapped_memory(&context, None);
    // SAFETY: memory mapped above; the range's offset is the mistake under
    // test; freed unmapped.
    unsafe {
        let range = misaligned_range(memory);
        context.device.flush_mapped_memory_ranges(&[range]).unwrap();
        context.device.unmap_memory(memory);
        context.device.free_memory(memory, None);
    }
}

/// 4 KiB of lavapipe's host-visible type 0, named `name` when given, and
/// mapped whole.
fn mapped_memory(context: &VulkanContext, name: Option<&std::ffi::CStr>) -> vk::DeviceMemory {
    context.allow_own_allocations();
    let info = vk::MemoryAllocateInfo::default()
        .allocation_size(4096)
        .memory_type_index(0);
    // SAFETY: lavapipe's type 0 is host-visible; the memory is named while
    // live and mapped once.
    unsafe {
        let memory = context.device.allocate_memory(&info, None).unwrap();
        if let Some(name) = name {
            let debug_utils =
                ash::ext::debug_utils::Device::new(&context.instance, &context.device);
            let name_info = vk::DebugUtilsObjectNameInfoEXT::default()
                .object_handle(memory)
                .object_name(name);
            debug_utils.set_debug_utils_object_name(&name_info).unwrap();
        }
        context
            .device
            .map_memory(memory, 0, vk::WHOLE_SIZE, vk::MemoryMapFlags::empty())
            .unwrap();
        memory
    }
}

/// A range of `memory` at offset 1, not a multiple of
/// `nonCoherentAtomSize`: its flush draws [`FLUSH_VUID`].
fn misaligned_range(memory: vk::DeviceMemory) -> vk::MappedMemoryRange<'static> {
    vk::MappedMemoryRange::default()
        .memory(memory)
        .offset(1)
        .size(64)
}

/// Validation-layer settings from outside the test (a settings file the
/// Vulkan Configurator left in `~/.local/share/vulkan/settings.d/`, one
/// in the current folder or named by `VK_LAYER_SETTINGS_PATH`, or the
/// layer's environment variables) that mute a message id, turn checks off
/// or limit repeats fail every test, rather than letting one pass that a
/// message should fail (`tests/support/layer_settings.rs`). Each case runs
/// this test binary again, as a child that makes a misuse, under one such
/// setting; the first child, with none, shows that the misuse fails it.
#[test]
fn settings_that_hide_messages_fail_the_tests() {
    use std::path::Path;
    use std::process::Command;

    if std::env::var_os(MUTING_CHILD).is_some() {
        misaligned_flush();
        return;
    }
    let root = std::env::temp_dir().join(format!("vk-suballoc-muting-{}", std::process::id()));
    let empty_home = root.join("empty-home");
    let vkconfig_home = root.join("vkconfig-home");
    let settings_dir = vkconfig_home.join("vulkan/settings.d");
    let cwd_dir = root.join("cwd");
    let path_dir = root.join("settings-path");
    for dir in [&empty_home, &settings_dir, &cwd_dir, &path_dir] {
        std::fs::create_dir_all(dir).unwrap();
    }
    let filter = format!("khronos_validation.message_id_filter = {FLUSH_VUID}\n");
    std::fs::write(settings_dir.join("vk_layer_settings.txt"), &filter).unwrap();
    std::fs::write(cwd_dir.join("vk_layer_settings.txt"), &filter).unwrap();
    let limit = path_dir.join("limit.txt");
    std::fs::write(&limit, "khronos_validation.duplicate_message_limit = 0\n").unwrap();
    // The child needs the layer built (it is given it prebuilt).
    crate::support::fake_layer_setup::prepare();

    let test = format!(
        "{}::settings_that_hide_messages_fail_the_tests",
        module_path!().split_once("::").unwrap().1
    );
    // The setting a child runs under (none for the first): a variable and
    // its value, the current folder, and what its output must name.
    struct Case<'a> {
        name: &'a str,
        variable: Option<(&'a str, &'a std::ffi::OsStr)>,
        cwd: &'a Path,
        named: &'a str,
    }
    let cases = [
        Case {
            name: "no setting",
            variable: None,
            cwd: &root,
            named: FLUSH_VUID,
        },
        Case {
            name: "the Vulkan Configurator's file",
            variable: Some(("XDG_DATA_HOME", vkconfig_home.as_os_str())),
            cwd: &root,
            named: "message_id_filter",
        },
        Case {
            name: "a file in the current folder",
            variable: None,
            cwd: &cwd_dir,
            named: "message_id_filter",
        },
        Case {
            name: "VK_LAYER_SETTINGS_PATH",
            variable: Some(("VK_LAYER_SETTINGS_PATH", limit.as_os_str())),
            cwd: &root,
            named: "duplicate_message_limit",
        },
        Case {
            name: "VK_LAYER_MESSAGE_ID_FILTER",
            variable: Some(("VK_LAYER_MESSAGE_ID_FILTER", FLUSH_VUID.as_ref())),
            cwd: &root,
            named: "VK_LAYER_MESSAGE_ID_FILTER",
        },
        Case {
            name: "VK_LAYER_DISABLES",
            variable: Some((
                "VK_LAYER_DISABLES",
                "VK_VALIDATION_FEATURE_DISABLE_CORE_CHECKS_EXT".as_ref(),
            )),
            cwd: &root,
            named: "VK_LAYER_DISABLES",
        },
    ];
    for Case {
        name: case,
        variable,
        cwd,
        named,
    } in cases
    {
        let mut child = Command::new(std::env::current_exe().unwrap());
        child
            .args([test.as_str(), "--exact", "--test-threads=1"])
            .current_dir(cwd)
            .env(MUTING_CHILD, "1")
            .env("XDG_DATA_HOME", &empty_home)
            .env(
                crate::support::fake_layer_setup::PREBUILT_LIBRARY,
                crate::support::fake_layer_setup::library_path(),
            );
        for variable in [
            "VK_LAYER_SETTINGS_PATH",
            "VK_LAYER_MESSAGE_ID_FILTER",
            "VK_LAYER_DISABLES",
            "VK_LAYER_DUPLICATE_MESSAGE_LIMIT",
        ] {
            child.env_remove(variable);
        }
        child.envs(variable);
        let output = child.output().unwrap();
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        assert!(
            !output.status.success(),
            "{case}: the misuse passed unreported:\n{text}"
        );
        assert!(
            text.contains(named),
            "{case}: the child failed without naming {named}:\n{text}"
        );
    }
    std::fs::remove_dir_all(&root).unwrap();
}

/// `expect_validation_messages` takes message ids: a message of another id
/// whose text names the expected one (here through the debug name of the
/// object it is about, as a pool's name is in its blocks') is unexpected.
#[test]
fn an_expected_id_is_the_message_id_not_a_part_of_its_text() {
    use std::panic::{catch_unwind, AssertUnwindSafe};

    const NAMED: &str = "VUID-vkMapMemory-memory-00678";
    let context = VulkanContext::new(Profile::Lavapipe);
    context.allow(Advice::SmallMemory);
    let name = std::ffi::CString::new(format!("memory named {NAMED}")).unwrap();
    let memory = mapped_memory(&context, Some(&name));
    // SAFETY: memory mapped above, freed unmapped; the flush's offset is
    // the mistake under test.
    unsafe {
        let range = misaligned_range(memory);
        for expected in [NAMED, FLUSH_VUID] {
            context.device.flush_mapped_memory_ranges(&[range]).unwrap();
            let taken = catch_unwind(AssertUnwindSafe(|| {
                context.expect_validation_messages(&[expected])
            }));
            assert_eq!(
                taken.is_ok(),
                expected == FLUSH_VUID,
                "expecting {expected} after a message of {FLUSH_VUID} about memory named {NAMED}: {taken:?}"
            );
        }
        context.device.unmap_memory(memory);
        context.device.free_memory(memory, None);
    }
}
