//! Host writes into freed memory, through a mapping kept past the free: the
//! fake device keeps a freed object's host bytes in a quarantine and
//! reports a write into them as a violation, naming the memory and the
//! byte; a write no check saw (as any violation no test read) makes the
//! device's drop panic, unless the device is dropped while its thread
//! already unwinds.

use std::panic::{self, AssertUnwindSafe};

use ash::vk;
use ash::vk::Handle;
use vk_suballoc::device::fake::{FakeDevice, FakeLayout};
use vk_suballoc::device::MemoryDeviceExt;
use vk_suballoc::{DedicatedPolicy, Usage};

use super::super::{allocator, buffer, free, FakeAllocator};

/// Allocates a dedicated 4 KiB upload buffer and frees it, checking that its
/// memory object went; returns the memory and the old mapped pointer of
/// byte 100 with its memory offset.
fn freed_upload_memory(
    allocator: &FakeAllocator,
    device: &FakeDevice,
) -> (vk::DeviceMemory, std::ptr::NonNull<u8>, u64) {
    let a = allocator
        .allocate(&buffer(4096, 4, Usage::UPLOAD).dedicated(DedicatedPolicy::Always))
        .unwrap();
    let memory = a.memory();
    let offset = a.offset() + 100;
    // SAFETY: byte 100 of a 4096-byte mapped allocation.
    let pointer = unsafe { a.mapped_ptr().unwrap().add(100) };
    free(allocator, a);
    assert!(
        device.live_allocations().iter().all(|m| m.memory != memory),
        "the dedicated memory was freed"
    );
    (memory, pointer, offset)
}

#[test]
fn a_host_write_into_freed_memory_is_a_violation() {
    let (allocator, device) = allocator(FakeLayout::discrete());
    // A free with no write after it breaks no rule.
    freed_upload_memory(&allocator, &device);
    assert!(device.violations().is_empty(), "{:#?}", device.violations());
    let (memory, pointer, offset) = freed_upload_memory(&allocator, &device);
    // SAFETY: a deliberate write after `vkFreeMemory`, yet into live host
    // memory: the fake device keeps a freed object's host bytes (4 KiB,
    // under its 16 MiB quarantine limit) allocated in its quarantine until
    // 64 MiB of later frees evict them or `violations` checks them, and
    // nothing was freed or checked since. No reference to those bytes
    // exists (the allocation is gone, no slice of it was made), and the
    // device reads them only under its lock, on this thread, after this
    // write: no aliasing, no race. It breaks Vulkan's rule, not Rust's.
    unsafe { pointer.as_ptr().write(0x5A) };
    let expected = format!(
        "use after vkFreeMemory: host bytes of freed memory {:#x} were written after the free (first changed byte at offset {offset})",
        memory.as_raw()
    );
    assert_eq!(device.violations(), [expected]);
    drop(allocator);
    assert!(device.live_allocations().is_empty());
    assert_eq!(device.counters().allocations, device.counters().frees);
}

/// Frees a dedicated upload buffer, drops `allocator` and writes a byte
/// through the buffer's old mapping: a host write into freed memory that
/// no `violations` or `assert_clean` call has checked yet. Returns the
/// line the quarantine's check will give for it.
fn unchecked_write_into_freed_memory(allocator: FakeAllocator, device: &FakeDevice) -> String {
    let (memory, pointer, offset) = freed_upload_memory(&allocator, device);
    drop(allocator);
    // SAFETY: as in `a_host_write_into_freed_memory_is_a_violation`: the
    // freed host bytes stay allocated in the device's quarantine (nothing
    // is freed or checked after them) until the device's drop reads them,
    // on this thread, after this write; no reference to them exists.
    unsafe { pointer.as_ptr().write(0x5A) };
    format!(
        "use after vkFreeMemory: host bytes of freed memory {:#x} were written after the free (first changed byte at offset {offset})",
        memory.as_raw()
    )
}

/// The message `device`'s drop panics with; fails the test if it does not.
fn drop_panic_message(device: FakeDevice) -> String {
    let dropped = panic::catch_unwind(AssertUnwindSafe(move || drop(device)));
    *dropped
        .expect_err("the drop panics")
        .downcast::<String>()
        .expect("a formatted message")
}

/// A host write into freed memory that no check saw before the device
/// went is not lost: the device's drop checks the quarantine and panics,
/// naming the memory and the byte. Every other test checks the quarantine
/// through `violations` first, so a drop that checked nothing, or
/// panicked only while unwinding already, went unseen.
#[test]
fn an_unchecked_write_into_freed_memory_panics_when_the_device_drops() {
    let (allocator, device) = allocator(FakeLayout::discrete());
    let expected = unchecked_write_into_freed_memory(allocator, &device);
    assert_eq!(
        drop_panic_message(device),
        format!(
            "fake device dropped with violations no test read: {:#?}",
            [expected]
        )
    );
}

/// Any rule broken that no test read makes the device's drop panic too,
/// naming it, so a test that never calls `violations` or `assert_clean`
/// still fails when the allocator broke a rule (33 of the suite's 54
/// files name neither). The ones a test read are not reported again.
#[test]
fn an_unread_violation_panics_when_the_device_drops() {
    let device = FakeDevice::new(FakeLayout::discrete());
    let usage = vk::BufferUsageFlags::TRANSFER_SRC;
    // SAFETY: a fake device; the invalid calls are the ones under test.
    unsafe {
        assert!(device.create_buffer(0, usage).is_err());
    }
    assert_eq!(device.violations().len(), 1, "read: not reported again");
    // SAFETY: as above.
    unsafe {
        assert!(device
            .create_buffer(256, vk::BufferUsageFlags::empty())
            .is_err());
    }
    let unread = ["VUID-VkBufferCreateInfo-usage-requiredbitmask: a buffer with no usage"];
    assert_eq!(
        drop_panic_message(device),
        format!("fake device dropped with violations no test read: {unread:#?}")
    );
}

/// A buffer, image or memory object still alive when the device goes
/// (the allocator, which holds the device, dropped and freed what it
/// had) makes the drop panic too: a test that never calls `assert_clean`
/// still fails when the allocator leaked.
#[test]
fn a_leak_panics_when_the_device_drops() {
    let device = FakeDevice::new(FakeLayout::discrete());
    // SAFETY: a fake device; the buffer is never bound or destroyed.
    let created = unsafe { device.create_buffer(256, vk::BufferUsageFlags::TRANSFER_SRC) };
    assert!(created.is_ok());
    let leak = ["1 buffers or images never destroyed (VUID-vkDestroyDevice-device-05137)"];
    assert_eq!(
        drop_panic_message(device),
        format!("fake device dropped with violations no test read: {leak:#?}")
    );
}

/// A device dropped while its thread unwinds from another panic (a test
/// failing with the device in scope) reports no write into freed memory:
/// a second panic would abort the test binary and hide the first failure.
#[test]
fn a_device_dropped_while_unwinding_does_not_panic_again() {
    let (allocator, device) = allocator(FakeLayout::discrete());
    unchecked_write_into_freed_memory(allocator, &device);
    let unwound = panic::catch_unwind(AssertUnwindSafe(move || {
        let _device = device;
        panic!("an earlier failure");
    }));
    let message = *unwound
        .expect_err("the closure panics")
        .downcast::<&str>()
        .expect("the closure's own message");
    assert_eq!(message, "an earlier failure");
}
