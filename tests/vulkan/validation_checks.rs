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
/// that allows [`Advice::SmallMemory`] drops; the allocator's own 64 KiB
/// buffer, in a block, draws none.
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
        context.assert_no_validation_messages();
        allocator.destroy_buffer(buffer, allocation).unwrap();
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
