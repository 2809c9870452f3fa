//! What a request for device addresses (`Usage::DEVICE_ADDRESS`, a
//! buffer's `SHADER_DEVICE_ADDRESS`) is told when it cannot be served.
//! Its memory must be allocated with `VK_MEMORY_ALLOCATE_DEVICE_ADDRESS_BIT`,
//! which the allocator sets only when built with
//! `DeviceFeatures::buffer_device_address`: without it such a request is
//! refused up front, at every entry point, and the error says so. With it,
//! device addresses restrict no memory type, so a request no type suits
//! fails for another reason, which its error must name instead of sending
//! the user to a feature that is already on.

use ash::vk;
use vk_suballoc::device::fake::FakeLayout;
use vk_suballoc::{AllocationDesc, Error, PoolDesc, Request, ResourceKind, UploadRingDesc, Usage};

use super::{allocator, finish, FakeAllocator};

/// A 4 KiB buffer request for `desc`, allowed only the types in `bits`.
fn request(bits: u32, desc: AllocationDesc<'static>) -> Request<'static> {
    let requirements = vk::MemoryRequirements {
        size: 4096,
        alignment: 256,
        memory_type_bits: bits,
    };
    Request::with_desc(requirements, ResourceKind::Buffer, desc)
}

/// The errors of `allocate`, `allocate_mut` and `memory_type_for` for a
/// request allowed `bits` with `usage`, the same from all three; and of
/// the same request in a pool of each type of `pool_types`.
fn refusals(
    allocator: &mut FakeAllocator,
    bits: u32,
    usage: Usage,
    pool_types: &[u32],
) -> Vec<Error> {
    let plain = request(bits, AllocationDesc::new(usage));
    let locked = allocator.allocate(&plain).expect_err("refused");
    let exclusive = allocator.allocate_mut(&plain).expect_err("refused");
    let queried = allocator.memory_type_for(bits, usage).expect_err("refused");
    assert_eq!(locked, exclusive);
    assert_eq!(locked, queried);
    let mut errors = vec![locked];
    for &memory_type in pool_types {
        let pool = allocator
            .create_pool(&PoolDesc::new(memory_type).block_size(1 << 20))
            .unwrap();
        let in_pool = request(bits, AllocationDesc::new(usage).pool(pool));
        errors.push(allocator.allocate(&in_pool).expect_err("refused in a pool"));
        errors.push(
            allocator
                .allocate_mut(&in_pool)
                .expect_err("refused in a pool"),
        );
        allocator.destroy_pool(pool).unwrap();
    }
    errors
}

/// Whether `message` sends the user to the buffer device address feature.
fn blames_the_feature(message: &str) -> bool {
    message.contains("buffer_device_address") || message.contains("bufferDeviceAddress")
}

/// Without the feature, every entry point refuses a device-address
/// request with `DeviceAddressNotEnabled`, whatever memory types it
/// allows, and the message names the feature as the fix.
#[test]
fn without_the_feature_the_error_names_it() {
    // Mobile: no buffer device address. Type 0 device-local, 1 host-visible.
    let (mut allocator, device) = allocator(FakeLayout::mobile());
    for usage in [Usage::DEVICE_LOCAL, Usage::UPLOAD, Usage::READBACK] {
        for error in refusals(&mut allocator, !0, usage | Usage::DEVICE_ADDRESS, &[0, 1]) {
            assert_eq!(error, Error::DeviceAddressNotEnabled, "{usage:?}");
            let message = error.to_string();
            assert!(blames_the_feature(&message), "{usage:?}: {message}");
        }
    }
    // A ring whose buffers take their device address.
    let ring = UploadRingDesc {
        buffer_usage: vk::BufferUsageFlags::UNIFORM_BUFFER
            | vk::BufferUsageFlags::SHADER_DEVICE_ADDRESS,
        ..UploadRingDesc::default()
    };
    let error = allocator.create_upload_ring(&ring).map(|_| ()).unwrap_err();
    assert_eq!(error, Error::DeviceAddressNotEnabled);
    assert_eq!(device.live_allocations(), vec![]);
    finish(allocator, &device);
}

/// With the feature on, a device-address request that no allowed type
/// suits is refused for what its other usage needs, and the message does
/// not blame the feature: here host access that only a device-local type
/// is allowed, and (no host access) a lazily allocated type for a
/// request that is not transient.
#[test]
fn with_the_feature_the_error_does_not_blame_it() {
    // Discrete: buffer device address on; type 1 is device-local only.
    let (mut allocator, device) = allocator(FakeLayout::discrete());
    for usage in [Usage::UPLOAD, Usage::READBACK] {
        let usage = usage | Usage::DEVICE_ADDRESS;
        for error in refusals(&mut allocator, 1 << 1, usage, &[1]) {
            // The type allowed (the pool's, in the pool), and the usage
            // asked for, device addresses included.
            assert_eq!(
                error,
                Error::NoSuitableMemoryType {
                    memory_type_bits: 1 << 1,
                    usage,
                }
            );
            let message = error.to_string();
            assert!(!blames_the_feature(&message), "{usage:?}: {message}");
            assert!(message.contains("HOST_VISIBLE"), "{usage:?}: {message}");
        }
    }
    finish(allocator, &device);

    // Mobile with the feature: type 3 is lazily allocated, for transient
    // attachments only.
    let mut layout = FakeLayout::mobile();
    layout.buffer_device_address = true;
    let (mut allocator, device) = super::allocator(layout);
    let usage = Usage::DEVICE_LOCAL | Usage::DEVICE_ADDRESS;
    for error in refusals(&mut allocator, 1 << 3, usage, &[]) {
        assert_eq!(
            error,
            Error::NoSuitableMemoryType {
                memory_type_bits: 1 << 3,
                usage,
            }
        );
        let message = error.to_string();
        assert!(!blames_the_feature(&message), "{message}");
    }
    // The same requests with types that suit them are served.
    let served = allocator
        .allocate(&request(!0, AllocationDesc::new(usage)))
        .unwrap();
    assert!(device.live_allocations().iter().all(|m| m.device_address));
    super::free(&allocator, served);
    finish(allocator, &device);
}
