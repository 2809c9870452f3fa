//! The fake device's own edges, which the other tests rely on: reads and
//! writes whose end passes `u64::MAX`, or of memory the host cannot see,
//! refused, host-visible memory the host cannot back out of host memory,
//! faults injected far in the future never firing, failures of chosen
//! buffer creations and binds (`fail_call`) hitting those calls only
//! (and giving way to a failure the call meets anyway), and handles
//! that come back after a free but never repeat across two devices.
//! These check the test backend, not the allocator.

use vk_suballoc::device::fake::{FakeDevice, FakeLayout};
use vk_suballoc::{DedicatedPolicy, Usage};

use super::super::{allocator, buffer, finish, free};

/// The fake device's `read` and `write` refuse ranges whose end passes
/// `u64::MAX`, as any other out-of-range access, instead of overflowing (a
/// panic in debug; in release a wrapped check let a write land before the
/// memory object and return `true`).
#[test]
fn fake_reads_and_writes_past_u64_max_are_refused() {
    let (allocator, device) = allocator(FakeLayout::lavapipe());
    let a = allocator.allocate(&buffer(4096, 1, Usage::UPLOAD)).unwrap();
    let memory = a.memory();
    // SAFETY: no slice of the memory is alive.
    unsafe {
        for offset in [u64::MAX, u64::MAX - 1, u64::MAX - 4095, 1 << 63] {
            assert!(!device.write(memory, offset, &[1]), "write at {offset}");
            assert!(!device.write(memory, offset, &[1; 2]), "write at {offset}");
            assert_eq!(device.read(memory, offset, 1), None, "read at {offset}");
            assert_eq!(device.read(memory, offset, usize::MAX), None);
        }
        assert_eq!(device.read(memory, 0, usize::MAX), None);
        // Nothing landed anywhere in the object either.
        let bytes = device.read(memory, 0, 4096).unwrap();
        assert!(bytes.iter().all(|&b| b == 0));
    }
    free(&allocator, a);
    finish(allocator, &device);
}

/// The fake device keeps no bytes behind memory the host cannot see, so
/// `read` answers `None` and `write` `false` for it, in range or not, as
/// their docs say: a test standing in for the GPU on device-local memory
/// learns that it cannot, rather than reading zeros that were never there.
#[test]
fn fake_reads_and_writes_of_memory_the_host_cannot_see_are_refused() {
    // Discrete: DEVICE_LOCAL lands in type 1, device-local only.
    let (allocator, device) = allocator(FakeLayout::discrete());
    let a = allocator
        .allocate(&buffer(4096, 1, Usage::DEVICE_LOCAL))
        .unwrap();
    assert!(a.mapped_ptr().is_none());
    // SAFETY: the memory has no host bytes, so no slice of them.
    unsafe {
        assert_eq!(device.read(a.memory(), a.offset(), 16), None);
        assert!(!device.write(a.memory(), a.offset(), &[1; 16]));
    }
    free(&allocator, a);
    finish(allocator, &device);
}

/// Fault injection `u64::MAX` calls away (never, in effect) is accepted,
/// not an overflow of the call count.
#[test]
fn faults_far_in_the_future_never_fire() {
    let (allocator, device) = allocator(FakeLayout::lavapipe());
    // One call of each has been made.
    let first = allocator.allocate(&buffer(4096, 1, Usage::UPLOAD)).unwrap();
    device.fail_allocation(
        u64::MAX,
        vk_suballoc::device::DeviceError::OutOfDeviceMemory,
    );
    device.fail_map(u64::MAX);
    let dedicated = buffer(4096, 1, Usage::UPLOAD).dedicated(DedicatedPolicy::Always);
    let second = allocator.allocate(&dedicated).unwrap();
    free(&allocator, first);
    free(&allocator, second);
    finish(allocator, &device);
}

/// Drivers reuse the handle of freed memory for the next allocation (on
/// lavapipe a `VkDeviceMemory` is the address of a freed-and-reused host
/// allocation); the fake device does too, so code that keys anything on a
/// raw handle after its memory was freed is caught.
#[test]
fn fake_handles_of_freed_memory_come_back() {
    use vk_suballoc::device::{AllocationFlags, MemoryDevice};
    let device = FakeDevice::new(FakeLayout::discrete());
    // SAFETY: a fake device; every object is freed once.
    unsafe {
        let first = device
            .allocate_memory(4096, 1, AllocationFlags::empty())
            .unwrap();
        let raw = first.raw();
        device.deallocate_memory(first);
        let second = device
            .allocate_memory(8192, 2, AllocationFlags::empty())
            .unwrap();
        assert_eq!(second.raw(), raw);
        device.deallocate_memory(second);
    }
    device.assert_clean();
}

/// Two fake devices never hand out the same handle, so that a log line
/// naming memory of one cannot be taken for memory of the other: the
/// tests of a binary share one log capture (`leak_log`), and each looks
/// for the lines naming its own memory. With handles counted from the
/// same start on every device, another test's line named the same memory
/// and byte, and a test read it as its own (`ring_fill`, fixed in
/// `fdd0ab5`).
#[test]
fn fake_devices_hand_out_handles_of_their_own() {
    use vk_suballoc::device::{AllocationFlags, MemoryDevice};
    let devices = [
        FakeDevice::new(FakeLayout::discrete()),
        FakeDevice::new(FakeLayout::discrete()),
    ];
    // SAFETY: fake devices; every object is freed once.
    let handles: Vec<u64> = devices
        .iter()
        .map(|device| unsafe {
            let memory = device
                .allocate_memory(4096, 1, AllocationFlags::empty())
                .unwrap();
            let raw = ash::vk::Handle::as_raw(memory.raw());
            device.deallocate_memory(memory);
            raw
        })
        .collect();
    assert_ne!(handles[0], handles[1]);
    // Nor does a resource of one share a handle with the other's memory.
    let resource = devices[1].create_resource();
    assert_ne!(resource, handles[0]);
    devices[1].destroy_resource(resource);
    for device in &devices {
        device.assert_clean();
    }
}

/// A host-visible memory object larger than the host can back (past
/// `isize::MAX` bytes, or more than the OS gives) fails as a driver's
/// would, `VK_ERROR_OUT_OF_HOST_MEMORY`, on a layout whose heaps admit
/// it: the fake device panicked there (capacity overflow; in release the
/// size plus the map alignment could wrap to a few bytes) or aborted the
/// test process (allocation failure). Coherent and non-coherent types
/// (the latter keep a device copy too); nothing is left allocated.
#[test]
fn host_memory_the_host_cannot_back_is_out_of_host_memory() {
    use vk_suballoc::{Error, ResourceKind};

    let mut layout = FakeLayout::mobile().with_heap_sizes(u64::MAX);
    layout.max_memory_allocation_size = u64::MAX;
    let (allocator, device) = allocator(layout);
    for usage in [Usage::UPLOAD, Usage::READBACK] {
        for size in [u64::MAX, u64::MAX - 63, 1 << 63, 1 << 62, 1 << 60] {
            let request = buffer(size, 1, usage).dedicated(DedicatedPolicy::Always);
            let result = allocator.allocate(&request).map(|a| a.size());
            assert_eq!(result, Err(Error::OutOfHostMemory), "{usage:?} {size}");
        }
    }
    assert_eq!(device.counters().allocations, 0);
    // The memory types still serve what the host can back.
    let a = allocator
        .allocate(&vk_suballoc::Request::new(
            super::super::requirements(4096, 1),
            Usage::READBACK,
            ResourceKind::Buffer,
        ))
        .unwrap();
    free(&allocator, a);
    finish(allocator, &device);
}

/// A buffer whose size rounds past `u64::MAX` (its memory requirements'
/// size is a multiple of the driver's granule, 64 bytes on `mobile`) is refused as a driver refuses a buffer it
/// cannot back, `VK_ERROR_OUT_OF_DEVICE_MEMORY`, on a layout that sets no
/// `maxBufferSize`: the fake device panicked there (`next_multiple_of`
/// overflowing in debug builds; in release the size wrapped to 0). The
/// allocator never asks for such a buffer (it refuses sizes past 2^48
/// first); a test driving the device itself does. Sizes that round to
/// `u64::MAX - 63` or less are made.
#[test]
fn a_buffer_whose_requirements_would_pass_u64_max_is_out_of_device_memory() {
    use ash::vk;
    use vk_suballoc::device::MemoryDeviceExt;

    let layout = FakeLayout::mobile().with_max_buffer_size(u64::MAX);
    // Sizes are rounded to the granule of the layout's driver (64 bytes):
    // the largest buffer any memory could back is u64::MAX rounded down.
    let granule = layout.buffer_requirements.size_granule;
    let largest_size = u64::MAX - (granule - 1);
    let raw = FakeDevice::new(layout);
    let usage = vk::BufferUsageFlags::TRANSFER_SRC;
    for size in [u64::MAX, u64::MAX - 1, largest_size + 1] {
        // SAFETY: a fake device; a non-zero size and a core usage.
        let made = unsafe { raw.create_buffer(size, usage) };
        assert!(
            matches!(
                made,
                Err(vk_suballoc::device::DeviceError::OutOfDeviceMemory)
            ),
            "{size}: {made:?}"
        );
    }
    // SAFETY: as above.
    let (largest, requirements, _) = unsafe { raw.create_buffer(largest_size, usage) }.unwrap();
    assert_eq!(requirements.size, largest_size);
    // SAFETY: made above, bound to nothing.
    unsafe { raw.destroy_buffer(largest) };
    raw.assert_clean();
}

/// `fail_call` fails the `nth` call of its kind from now, once, with the
/// error asked for, making nothing: the buffer creation makes no buffer,
/// the bind leaves the buffer unbound (a later bind of it is no second
/// bind); creations and binds are counted apart (a call made to panic
/// not at all), several failures may wait at once, and `nth` 0 fails
/// nothing.
#[test]
fn fake_buffer_creations_and_binds_fail_as_asked() {
    use vk_suballoc::device::fake::FakeCall;
    use vk_suballoc::device::{AllocationFlags, DeviceError, MemoryDevice, MemoryDeviceExt};
    let device = FakeDevice::new(FakeLayout::discrete());
    let usage = ash::vk::BufferUsageFlags::TRANSFER_SRC;
    device.fail_call(FakeCall::CreateBuffer, 0, DeviceError::OutOfDeviceMemory);
    device.fail_call(FakeCall::CreateBuffer, 2, DeviceError::TooManyObjects);
    device.fail_call(FakeCall::CreateBuffer, 3, DeviceError::OutOfHostMemory);
    device.fail_call(FakeCall::BindBuffer, 1, DeviceError::OutOfDeviceMemory);
    // SAFETY: a fake device; every object is destroyed or freed once.
    unsafe {
        let (buffer, requirements, _) = device.create_buffer(4096, usage).unwrap();
        assert_eq!(
            device.create_buffer(4096, usage).map(|_| ()),
            Err(DeviceError::TooManyObjects)
        );
        assert_eq!(
            device.create_buffer(4096, usage).map(|_| ()),
            Err(DeviceError::OutOfHostMemory)
        );
        assert_eq!(device.live_resources(), 1, "the failed calls made nothing");
        let (other, _, _) = device.create_buffer(4096, usage).unwrap();
        let memory_type = requirements.memory_type_bits.trailing_zeros();
        let memory = device
            .allocate_memory(requirements.size, memory_type, AllocationFlags::empty())
            .unwrap();
        assert_eq!(
            device.bind_buffer_memory(buffer, memory.raw(), 0),
            Err(DeviceError::OutOfDeviceMemory)
        );
        // Unbound still: this bind is its first.
        device.bind_buffer_memory(buffer, memory.raw(), 0).unwrap();
        // A call made to panic is not counted: the next one is the one
        // asked to fail.
        device.panic_on(FakeCall::CreateBuffer, 1);
        device.fail_call(FakeCall::CreateBuffer, 1, DeviceError::OutOfDeviceMemory);
        let panicked = std::panic::catch_unwind(|| device.create_buffer(4096, usage));
        assert!(panicked.is_err());
        assert_eq!(
            device.create_buffer(4096, usage).map(|_| ()),
            Err(DeviceError::OutOfDeviceMemory)
        );
        // Nor is a bind made to panic.
        device.panic_on(FakeCall::BindBuffer, 1);
        device.fail_call(FakeCall::BindBuffer, 1, DeviceError::OutOfDeviceMemory);
        let panicked =
            std::panic::catch_unwind(|| device.bind_buffer_memory(other, memory.raw(), 0));
        assert!(panicked.is_err());
        assert_eq!(
            device.bind_buffer_memory(other, memory.raw(), 0),
            Err(DeviceError::OutOfDeviceMemory)
        );
        device.destroy_buffer(buffer);
        device.destroy_buffer(other);
        device.deallocate_memory(memory);
    }
    device.assert_clean();
}

/// `fail_call` refuses, with a panic naming it, a call that returns no
/// `DeviceError` or whose failure the device does not model, rather than
/// accept a failure that would never come; `fail_map_with` so refuses a
/// result `vkMapMemory` never returns.
#[test]
fn fake_failures_of_calls_that_cannot_fail_are_refused() {
    use vk_suballoc::device::fake::FakeCall;
    use vk_suballoc::device::DeviceError;
    let device = FakeDevice::new(FakeLayout::discrete());
    for call in [
        FakeCall::Map,
        FakeCall::Unmap,
        FakeCall::SignalQuery,
        FakeCall::DestroyBuffer,
        FakeCall::DestroyImage,
        FakeCall::Invalidate,
        FakeCall::Free,
    ] {
        let refused = std::panic::catch_unwind(|| {
            device.fail_call(call, 1, DeviceError::OutOfHostMemory);
        });
        let message = refused.expect_err("accepted").downcast::<String>().unwrap();
        assert!(message.contains(&format!("{call:?}")), "{message}");
    }
    // Nor a map failing with a result vkMapMemory never returns.
    let refused = std::panic::catch_unwind(|| {
        device.fail_map_with(1, DeviceError::TooManyObjects);
    });
    let message = refused.expect_err("accepted").downcast::<String>().unwrap();
    assert!(message.contains("TooManyObjects"), "{message}");
    device.assert_clean();
}

/// A failure `fail_call` asked for gives way to the failure its call
/// meets anyway, and is spent on it, as its docs say: a creation or bind
/// that breaks a rule is a violation (the validation layer's, before the
/// driver would fail it), a creation on a lost device is
/// `VK_ERROR_DEVICE_LOST`, one whose size rounds past `u64::MAX` out of
/// device memory; the next call of the kind is made.
#[test]
fn a_chosen_call_failure_gives_way_to_the_call_s_own_and_is_spent() {
    use ash::vk;
    use vk_suballoc::device::fake::FakeCall;
    use vk_suballoc::device::{AllocationFlags, DeviceError, MemoryDevice, MemoryDeviceExt};
    let usage = vk::BufferUsageFlags::TRANSFER_SRC;
    let violation = Err(DeviceError::Unexpected(
        vk::Result::ERROR_VALIDATION_FAILED_EXT,
    ));
    let device = FakeDevice::new(FakeLayout::mobile().with_max_buffer_size(u64::MAX));
    // SAFETY: a fake device; every object made is destroyed or freed once.
    unsafe {
        device.fail_call(FakeCall::CreateBuffer, 1, DeviceError::OutOfHostMemory);
        assert_eq!(device.create_buffer(0, usage).map(|_| ()), violation);
        device.fail_call(FakeCall::CreateBuffer, 1, DeviceError::OutOfHostMemory);
        assert_eq!(
            device.create_buffer(u64::MAX, usage).map(|_| ()),
            Err(DeviceError::OutOfDeviceMemory)
        );
        // Both failures spent: this one is made.
        let (buffer, requirements, _) = device.create_buffer(4096, usage).unwrap();
        let memory_type = requirements.memory_type_bits.trailing_zeros();
        let memory = device
            .allocate_memory(requirements.size, memory_type, AllocationFlags::empty())
            .unwrap();
        device.bind_buffer_memory(buffer, memory.raw(), 0).unwrap();
        // A second bind of the buffer: a violation, not the failure.
        device.fail_call(FakeCall::BindBuffer, 1, DeviceError::OutOfDeviceMemory);
        assert_eq!(device.bind_buffer_memory(buffer, memory.raw(), 0), Ok(()));
        let (other, _, _) = device.create_buffer(4096, usage).unwrap();
        device.bind_buffer_memory(other, memory.raw(), 0).unwrap();
        let violations = device.violations();
        assert_eq!(violations.len(), 2, "{violations:#?}");
        assert!(violations[0].contains("VUID-VkBufferCreateInfo-size-00912"));
        assert!(violations[1].contains("VUID-vkBindBufferMemory"));
        device.destroy_buffer(buffer);
        device.destroy_buffer(other);
        device.deallocate_memory(memory);
    }
    assert_eq!(device.live_resources(), 0);
    assert!(device.live_allocations().is_empty());

    let lost = FakeDevice::new(FakeLayout::discrete());
    lost.fail_call(FakeCall::CreateBuffer, 1, DeviceError::OutOfHostMemory);
    lost.lose_device();
    // SAFETY: as above; nothing is made.
    let made = unsafe { lost.create_buffer(4096, usage) };
    assert_eq!(made.map(|_| ()), Err(DeviceError::DeviceLost));
    lost.assert_clean();
}
