//! Bad input gets a typed error and leaves the allocator consistent.
//!
//! This file holds the requests refused (bad sizes and alignments, memory
//! type bits, device addresses, foreign allocations, ranges, unsuitable
//! usages) and the helpers the files below share: the sizes refused as too
//! large for the heaps or one memory object (`bad_input/sizes.rs`), the
//! configurations refused and the documented defaults
//! (`bad_input/configuration.rs`), and the documented order of a request's
//! checks (`bad_input/check_order.rs`).

use ash::vk;
use vk_suballoc::device::fake::FakeLayout;
use vk_suballoc::{DedicatedHint, Error, Request, ResourceKind, Usage};

use super::{allocator, buffer, finish, free, FakeAllocator};

#[path = "bad_input/check_order.rs"]
mod check_order;
#[path = "bad_input/configuration.rs"]
mod configuration;
#[path = "bad_input/sizes.rs"]
mod sizes;

const GIB: u64 = 1 << 30;

/// The error both entry points, `allocate` and `allocate_mut`, give for a
/// request that must fail.
fn rejected(allocator: &mut FakeAllocator, request: &Request<'_>) -> Error {
    let locked = allocator.allocate(request).expect_err("a bad request");
    let exclusive = allocator.allocate_mut(request).expect_err("a bad request");
    assert_eq!(locked, exclusive);
    locked
}

#[test]
fn bad_requests_are_typed_errors() {
    let (mut allocator, device) = allocator(FakeLayout::discrete());
    let live = allocator
        .allocate(&buffer(4096, 256, Usage::DEVICE_LOCAL))
        .unwrap();
    let before = allocator.stats();

    assert_eq!(
        rejected(&mut allocator, &buffer(0, 1, Usage::DEVICE_LOCAL)),
        Error::ZeroSize
    );
    assert_eq!(
        rejected(&mut allocator, &buffer(64, 48, Usage::DEVICE_LOCAL)),
        Error::AlignmentNotPowerOfTwo(48)
    );
    assert_eq!(
        rejected(&mut allocator, &buffer(64, 0, Usage::DEVICE_LOCAL)),
        Error::AlignmentNotPowerOfTwo(0)
    );
    // The driver requires dedicated memory, and no resource is named: the
    // memory could never be bound (VUID-vkBindBufferMemory-buffer-01444).
    let untargeted = buffer(4096, 256, Usage::DEVICE_LOCAL).driver_dedicated(DedicatedHint {
        required: true,
        preferred: true,
    });
    assert_eq!(
        rejected(&mut allocator, &untargeted),
        Error::MissingDedicatedTarget
    );
    let no_bits = Request::new(
        vk::MemoryRequirements {
            size: 64,
            alignment: 1,
            memory_type_bits: 0,
        },
        Usage::DEVICE_LOCAL,
        ResourceKind::Buffer,
    );
    assert_eq!(
        rejected(&mut allocator, &no_bits),
        Error::NoMemoryTypeBits(0)
    );
    // The discrete preset has 5 types: bit 7 names none of them.
    let missing_type = Request::new(
        vk::MemoryRequirements {
            size: 64,
            alignment: 1,
            memory_type_bits: 1 << 7,
        },
        Usage::DEVICE_LOCAL,
        ResourceKind::Buffer,
    );
    assert_eq!(
        rejected(&mut allocator, &missing_type),
        Error::NoMemoryTypeBits(1 << 7)
    );
    // Only device-local type 1 allowed, but the host must write: no type fits.
    let device_local_only = Request::new(
        vk::MemoryRequirements {
            size: 64,
            alignment: 1,
            memory_type_bits: 1 << 1,
        },
        Usage::UPLOAD,
        ResourceKind::Buffer,
    );
    assert!(matches!(
        rejected(&mut allocator, &device_local_only),
        Error::NoSuitableMemoryType {
            memory_type_bits: 2,
            ..
        }
    ));
    assert_eq!(
        rejected(&mut allocator, &buffer(100 * GIB, 1, Usage::DEVICE_LOCAL)),
        Error::SizeExceedsHeaps {
            size: 100 * GIB,
            largest_heap: 16 * GIB
        }
    );

    assert_eq!(allocator.stats(), before);
    free(&allocator, live);
    finish(allocator, &device);
}

#[test]
fn device_address_needs_the_feature() {
    let (allocator, device) = allocator(FakeLayout::mobile());
    assert!(matches!(
        allocator.allocate(&buffer(64, 1, Usage::DEVICE_LOCAL | Usage::DEVICE_ADDRESS)),
        Err(Error::DeviceAddressNotEnabled)
    ));
    finish(allocator, &device);

    let (discrete, device) = super::allocator(FakeLayout::discrete());
    let a = discrete
        .allocate(&buffer(64, 1, Usage::DEVICE_LOCAL | Usage::DEVICE_ADDRESS))
        .unwrap();
    assert!(device.live_allocations().iter().all(|m| m.device_address));
    free(&discrete, a);
    finish(discrete, &device);
}

#[test]
fn foreign_allocations_are_rejected_and_change_nothing() {
    let (first, first_device) = allocator(FakeLayout::lavapipe());
    let (mut second, second_device) = allocator(FakeLayout::lavapipe());
    let mut a = first.allocate(&buffer(256, 1, Usage::UPLOAD)).unwrap();
    let b = second.allocate(&buffer(256, 1, Usage::UPLOAD)).unwrap();
    // SAFETY: no GPU work on the fake device.
    assert_eq!(unsafe { second.free(a) }, Err(Error::ForeignAllocation));
    a = first.allocate(&buffer(256, 1, Usage::UPLOAD)).unwrap();
    // SAFETY: as above.
    assert_eq!(unsafe { second.free_mut(a) }, Err(Error::ForeignAllocation));
    // `free` consumed the handle; get a new one to keep testing the other paths.
    a = first.allocate(&buffer(256, 1, Usage::UPLOAD)).unwrap();
    assert_eq!(
        second.mapped_slice_mut(&mut a).map(|s| s.len()),
        Err(Error::ForeignAllocation)
    );
    assert_eq!(second.flush(&a, 0..1), Err(Error::ForeignAllocation));
    assert!(!second.owns(&a));
    assert!(first.owns(&a));
    assert_eq!(second.stats().allocations(), 1);
    free(&first, a);
    free(&second, b);
    // The two rejected handles leaked their ranges in `first` until drop.
    finish(first, &first_device);
    finish(second, &second_device);
}

#[test]
fn ranges_past_the_allocation_are_rejected() {
    let (allocator, device) = allocator(FakeLayout::mobile());
    let mut a = allocator
        .allocate(&buffer(1000, 1, Usage::READBACK))
        .unwrap();
    assert_eq!(
        allocator.invalidate(&mut a, 10..1001),
        Err(Error::RangeOutOfBounds {
            start: 10,
            end: 1001,
            size: 1000
        })
    );
    let gpu_only = allocator
        .allocate(&buffer(1000, 1, Usage::DEVICE_LOCAL))
        .unwrap();
    assert_eq!(
        allocator.mapped_slice(&gpu_only).map(|s| s.len()),
        Err(Error::NotHostVisible)
    );
    assert_eq!(
        allocator.flush(&gpu_only, 0..10),
        Err(Error::NotHostVisible)
    );
    free(&allocator, a);
    free(&allocator, gpu_only);
    finish(allocator, &device);
}

/// A usage no memory type suits gets a message that names what the usage
/// needs: a newcomer who forgot buffer device address reads the fix in it.
#[test]
fn an_unsuitable_usage_says_what_it_needs() {
    // Mobile: no buffer device address; type 0 is device-local only.
    let (mut allocator, device) = allocator(FakeLayout::mobile());
    let address = rejected(
        &mut allocator,
        &buffer(4096, 256, Usage::DEVICE_LOCAL | Usage::DEVICE_ADDRESS),
    );
    assert_eq!(address, Error::DeviceAddressNotEnabled);
    let message = address.to_string();
    assert!(
        message.contains("DeviceFeatures::buffer_device_address"),
        "{message}"
    );
    assert!(!message.contains("HOST_VISIBLE"), "{message}");
    let mut readback = buffer(4096, 256, Usage::READBACK);
    readback.requirements.memory_type_bits = 1;
    let message = rejected(&mut allocator, &readback).to_string();
    assert!(message.contains("HOST_VISIBLE"), "{message}");
    assert!(!message.contains("buffer_device_address"), "{message}");
    finish(allocator, &device);
}
