//! The documented order of a request's checks (`Allocator::allocate`'s
//! `# Errors`): a request with several faults gets the first one's error,
//! on the default path and a custom pool's, through `allocate` and
//! `allocate_mut` alike.

use crate::FakeTarget;
use ash::vk::{self, Handle};
use vk_suballoc::device::fake::FakeLayout;
use vk_suballoc::device::DedicatedTarget;
use vk_suballoc::{
    AllocationDesc, Config, DedicatedHint, Error, Pool, PoolDesc, Request, ResourceKind, Usage,
};

use crate::{finish, free};

use super::{rejected, GIB};

/// `Allocator::allocate` checks a bad request in the documented order
/// (its `# Errors`), with no Vulkan call: a request with several faults
/// gets the first one's error, on the default path and on a custom pool's,
/// through `allocate` and `allocate_mut` alike. Each step below mends the
/// fault the step before was refused for and keeps the later ones, so a
/// check that moved ahead of an earlier one changes an answer.
#[test]
fn bad_requests_are_checked_in_the_documented_order() {
    // No buffer device address; type 1 is device-local only, in an 8 GiB
    // heap; maxMemoryAllocationSize 4 GiB.
    let mut layout = FakeLayout::discrete();
    layout.buffer_device_address = false;
    let (mut allocator, device) = crate::allocator_with(layout.clone(), Config::default());
    const VRAM: u32 = 1;
    let image = DedicatedTarget::Image(vk::Image::from_raw(1));
    let own_buffer = DedicatedTarget::Buffer(vk::Buffer::from_raw(2));
    let required = DedicatedHint {
        required: true,
        preferred: true,
    };
    let address = Usage::UPLOAD | Usage::DEVICE_ADDRESS;
    // size, alignment, min_alignment, dedicated target, memoryTypeBits, usage.
    type Step = (u64, u64, u64, Option<DedicatedTarget>, u32, Usage);
    let request = |(size, alignment, min_alignment, target, bits, usage): Step| {
        let requirements = vk::MemoryRequirements {
            size,
            alignment,
            memory_type_bits: bits,
        };
        let desc = AllocationDesc::new(usage).min_alignment(min_alignment);
        let request =
            Request::with_desc(requirements, ResourceKind::Buffer, desc).driver_dedicated(required);
        match target {
            Some(target) => request.fake_target(target),
            None => request,
        }
    };
    let default_path: [(Step, Error); 10] = [
        ((0, 48, 3, None, 0, address), Error::ZeroSize),
        (
            (100 * GIB, 48, 3, None, 0, address),
            Error::AlignmentNotPowerOfTwo(48),
        ),
        (
            (100 * GIB, 256, 3, None, 0, address),
            Error::AlignmentNotPowerOfTwo(3),
        ),
        (
            (100 * GIB, 256, 0, None, 0, address),
            Error::MissingDedicatedTarget,
        ),
        (
            (100 * GIB, 256, 0, Some(image), 0, address),
            Error::DedicatedTargetMismatch,
        ),
        (
            (100 * GIB, 256, 0, Some(own_buffer), 0, address),
            Error::NoMemoryTypeBits(0),
        ),
        // The device-address feature comes before the size checks.
        (
            (100 * GIB, 256, 0, Some(own_buffer), 1 << VRAM, address),
            Error::DeviceAddressNotEnabled,
        ),
        (
            (
                100 * GIB,
                256,
                0,
                Some(own_buffer),
                1 << VRAM,
                Usage::UPLOAD,
            ),
            Error::SizeExceedsHeaps {
                size: 100 * GIB,
                largest_heap: 8 * GIB,
            },
        ),
        // Within the heap and past maxMemoryAllocationSize: the usage
        // first.
        (
            (6 * GIB, 256, 0, Some(own_buffer), 1 << VRAM, Usage::UPLOAD),
            Error::NoSuitableMemoryType {
                memory_type_bits: 1 << VRAM,
                usage: Usage::UPLOAD,
            },
        ),
        (
            (
                6 * GIB,
                256,
                0,
                Some(own_buffer),
                1 << VRAM,
                Usage::DEVICE_LOCAL,
            ),
            Error::SizeExceedsMaxAllocation {
                size: 6 * GIB,
                max: 4 * GIB,
            },
        ),
    ];
    for (step, expected) in default_path {
        assert_eq!(
            rejected(&mut allocator, &request(step)),
            expected,
            "{step:?}"
        );
    }

    // A custom pool's requests: another allocator's pool first, then the
    // same checks against the pool's type (PoolTypeNotAllowed for
    // NoMemoryTypeBits), then a destroyed pool.
    let (other, other_device) = crate::allocator_with(layout, Config::default());
    let foreign = other.create_pool(&PoolDesc::new(VRAM)).unwrap();
    let destroyed = allocator.create_pool(&PoolDesc::new(VRAM)).unwrap();
    allocator.destroy_pool(destroyed).unwrap();
    let in_pool = |pool: Pool, step: Step| {
        let mut request = request(step);
        request.desc.pool = Some(pool);
        request
    };
    let all_faults = (0, 48, 3, None, 1, address);
    assert_eq!(
        rejected(&mut allocator, &in_pool(foreign, all_faults)),
        Error::ForeignPool
    );
    let pool_path: [(Step, Error); 11] = [
        (all_faults, Error::ZeroSize),
        (
            (100 * GIB, 48, 3, None, 1, address),
            Error::AlignmentNotPowerOfTwo(48),
        ),
        (
            (100 * GIB, 256, 3, None, 1, address),
            Error::AlignmentNotPowerOfTwo(3),
        ),
        (
            (100 * GIB, 256, 0, None, 1, address),
            Error::MissingDedicatedTarget,
        ),
        (
            (100 * GIB, 256, 0, Some(image), 1, address),
            Error::DedicatedTargetMismatch,
        ),
        (
            (100 * GIB, 256, 0, Some(own_buffer), 1, address),
            Error::PoolTypeNotAllowed {
                memory_type: VRAM,
                memory_type_bits: 1,
            },
        ),
        (
            (100 * GIB, 256, 0, Some(own_buffer), !0, address),
            Error::DeviceAddressNotEnabled,
        ),
        (
            (100 * GIB, 256, 0, Some(own_buffer), !0, Usage::UPLOAD),
            Error::SizeExceedsHeaps {
                size: 100 * GIB,
                largest_heap: 8 * GIB,
            },
        ),
        (
            (6 * GIB, 256, 0, Some(own_buffer), !0, Usage::UPLOAD),
            // The pool's type, the one type the request could take.
            Error::NoSuitableMemoryType {
                memory_type_bits: 1 << VRAM,
                usage: Usage::UPLOAD,
            },
        ),
        (
            (6 * GIB, 256, 0, Some(own_buffer), !0, Usage::DEVICE_LOCAL),
            Error::SizeExceedsMaxAllocation {
                size: 6 * GIB,
                max: 4 * GIB,
            },
        ),
        (
            (4096, 256, 0, Some(own_buffer), !0, Usage::DEVICE_LOCAL),
            Error::StalePool,
        ),
    ];
    for (step, expected) in pool_path {
        let pooled = in_pool(destroyed, step);
        assert_eq!(rejected(&mut allocator, &pooled), expected, "{step:?}");
    }
    // None of it reached the driver.
    assert_eq!(device.counters().allocate_calls, 0);

    // Then the pool's own limits: a fixed block size before a full pool.
    let pool = allocator
        .create_pool(&PoolDesc::new(VRAM).block_size(1 << 20).max_blocks(1))
        .unwrap();
    let fill = Request::with_desc(
        crate::requirements(1 << 20, 256),
        ResourceKind::Buffer,
        AllocationDesc::new(Usage::DEVICE_LOCAL).pool(pool),
    );
    let full = allocator.allocate(&fill).unwrap();
    let mut larger = fill;
    larger.requirements.size = (1 << 20) + 1;
    assert_eq!(
        rejected(&mut allocator, &larger),
        Error::TooLargeForPool {
            size: (1 << 20) + 256,
            block_size: 1 << 20,
        }
    );
    let mut smaller = fill;
    smaller.requirements.size = 4096;
    assert_eq!(
        rejected(&mut allocator, &smaller),
        Error::PoolFull { max_blocks: 1 }
    );
    free(&allocator, full);
    allocator.destroy_pool(pool).unwrap();
    other.destroy_pool(foreign).unwrap();
    finish(other, &other_device);
    finish(allocator, &device);
}
