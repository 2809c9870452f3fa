//! The typed error of each adversarial argument to the allocator's public
//! API, pinned in one table-like test, a small device per group of
//! calls. It is long on its own, so it has a file of its own.

use std::ops::Bound::{Excluded, Included, Unbounded};

use vk_suballoc::device::fake::FakeLayout;
use vk_suballoc::{DedicatedPolicy, Error, ResourceKind, Usage};

use super::super::{allocator, buffer, finish, free};

/// The typed error for each adversarial argument tried on the allocator's
/// public API, pinned so that no later change turns one into a panic, a
/// wrapped value or another error. Fast: one small device per group.
#[test]
fn adversarial_arguments_get_these_errors() {
    use vk_suballoc::{AllocationDesc, Request, UploadRingDesc};

    const GIB: u64 = 1 << 30;
    let (allocator, device) = allocator(FakeLayout::mobile());
    let request = |size, alignment, memory_type_bits, usage| {
        let requirements = ash::vk::MemoryRequirements {
            size,
            alignment,
            memory_type_bits,
        };
        Request::new(requirements, usage, ResourceKind::Buffer)
    };
    let heaps = Error::SizeExceedsHeaps {
        size: u64::MAX,
        largest_heap: 2 * GIB,
    };
    let requests = [
        (request(0, 1, !0, Usage::UPLOAD), Error::ZeroSize),
        (request(0, 3, 0, Usage::UPLOAD), Error::ZeroSize),
        (
            request(1, 0, !0, Usage::UPLOAD),
            Error::AlignmentNotPowerOfTwo(0),
        ),
        (
            request(1, 3, !0, Usage::UPLOAD),
            Error::AlignmentNotPowerOfTwo(3),
        ),
        (
            request(1, u64::MAX, !0, Usage::UPLOAD),
            Error::AlignmentNotPowerOfTwo(u64::MAX),
        ),
        (
            request(1, (1 << 63) + 1, !0, Usage::UPLOAD),
            Error::AlignmentNotPowerOfTwo((1 << 63) + 1),
        ),
        (request(1, 1, 0, Usage::UPLOAD), Error::NoMemoryTypeBits(0)),
        (
            request(1, 1, 1 << 31, Usage::UPLOAD),
            Error::NoMemoryTypeBits(1 << 31),
        ),
        (request(u64::MAX, 1, !0, Usage::UPLOAD), heaps),
        (request(u64::MAX, 1 << 63, !0, Usage::DEVICE_LOCAL), heaps),
        (
            request(2 * GIB + 1, 1, !0, Usage::DEVICE_LOCAL),
            Error::SizeExceedsHeaps {
                size: 2 * GIB + 1,
                largest_heap: 2 * GIB,
            },
        ),
        (
            request(1, 1, !0, Usage::DEVICE_LOCAL | Usage::DEVICE_ADDRESS),
            Error::DeviceAddressNotEnabled,
        ),
        (
            request(1, 1, 1, Usage::READBACK),
            Error::NoSuitableMemoryType {
                memory_type_bits: 1,
                usage: Usage::READBACK,
            },
        ),
    ];
    for (request, error) in &requests {
        let requirements = request.requirements;
        assert_eq!(
            allocator.allocate(request).map(|a| a.size()),
            Err(*error),
            "{requirements:?}"
        );
    }
    assert_eq!(allocator.stats().allocations(), 0);
    assert_eq!(device.counters().allocate_calls, 0);

    // Odd but valid: a 2^63 alignment is met at offset 0 of a memory
    // object (dedicated memory of the request's one byte: a block could
    // hold no second such allocation); priorities outside [0, 1] are
    // clamped, NaN is the default.
    let huge_align = allocator
        .allocate(&request(1, 1 << 63, !0, Usage::DEVICE_LOCAL))
        .unwrap();
    assert_eq!((huge_align.offset(), huge_align.is_dedicated()), (0, true));
    free(&allocator, huge_align);
    for priority in [f32::NAN, f32::INFINITY, f32::NEG_INFINITY, -1.0, 2.0] {
        let desc = AllocationDesc::new(Usage::DEVICE_LOCAL)
            .priority(priority)
            .dedicated(DedicatedPolicy::Always);
        let requirements = ash::vk::MemoryRequirements {
            size: 4096,
            alignment: 1,
            memory_type_bits: !0,
        };
        let a = allocator
            .allocate(&Request::with_desc(
                requirements,
                ResourceKind::Buffer,
                desc,
            ))
            .unwrap();
        free(&allocator, a);
    }

    // Ranges of flush and invalidate, on non-coherent readback memory.
    let mut readback = allocator
        .allocate(&buffer(1000, 1, Usage::READBACK))
        .unwrap();
    let gpu_only = allocator
        .allocate(&buffer(1000, 1, Usage::DEVICE_LOCAL))
        .unwrap();
    let out = |start, end| Error::RangeOutOfBounds {
        start,
        end,
        size: 1000,
    };
    #[allow(clippy::reversed_empty_ranges)]
    let ranges = [
        (10..5, Err(out(10, 5))),
        (1001..1001, Err(out(1001, 1001))),
        (0..1001, Err(out(0, 1001))),
        (0..u64::MAX, Err(out(0, u64::MAX))),
        (u64::MAX..u64::MAX, Err(out(u64::MAX, u64::MAX))),
        (u64::MAX..0, Err(out(u64::MAX, 0))),
        (1000..1000, Ok(())),
        (0..0, Ok(())),
        (999..1000, Ok(())),
        (0..1000, Ok(())),
    ];
    for (range, expected) in ranges {
        assert_eq!(allocator.flush(&readback, range.clone()), expected);
        assert_eq!(allocator.invalidate(&mut readback, range.clone()), expected);
        let on_gpu_only = expected.and(Err(Error::NotHostVisible));
        assert_eq!(allocator.flush(&gpu_only, range), on_gpu_only);
    }
    // Every form of range: an open end is the allocation's, an inclusive
    // end one past the byte it names; the error shows the half-open range.
    let bounds = [
        ((Unbounded, Unbounded), Ok(())),                         // ..
        ((Included(10), Unbounded), Ok(())),                      // 10..
        ((Unbounded, Included(999)), Ok(())),                     // ..=999
        ((Unbounded, Included(1000)), Err(out(0, 1001))),         // ..=1000
        ((Excluded(999), Unbounded), Ok(())),                     // empty, at the end
        ((Excluded(1000), Unbounded), Err(out(1001, 1000))),      // past the end
        ((Unbounded, Included(u64::MAX)), Err(out(0, u64::MAX))), // no overflow
        ((Excluded(u64::MAX), Excluded(0)), Err(out(u64::MAX, 0))),
    ];
    for (range, expected) in bounds {
        assert_eq!(allocator.flush(&readback, range), expected, "{range:?}");
        assert_eq!(
            allocator.invalidate(&mut readback, range),
            expected,
            "{range:?}"
        );
    }
    assert_eq!(
        allocator.mapped_slice(&gpu_only).map(<[u8]>::len),
        Err(Error::NotHostVisible)
    );
    assert_eq!(allocator.mapped_slice(&readback).map(<[u8]>::len), Ok(1000));
    assert!(device.violations().is_empty());
    free(&allocator, readback);
    free(&allocator, gpu_only);

    // Upload rings: their sizes, and ring_allocate's sizes and alignments.
    let ring_desc = |size, usage, grow| UploadRingDesc {
        size,
        usage,
        grow,
        ..UploadRingDesc::default()
    };
    assert_eq!(
        allocator.create_upload_ring(&ring_desc(0, Usage::UPLOAD, false)),
        Err(Error::ZeroSize)
    );
    // A GPU-only ring (scratch) as a host-visible one.
    for (size, usage) in [u64::MAX, 1 << 48]
        .into_iter()
        .flat_map(|size| [(size, Usage::UPLOAD), (size, Usage::DEVICE_LOCAL)])
    {
        // Past every heap of the usage, however large: refused before
        // any buffer or memory is made.
        assert_eq!(
            allocator
                .create_upload_ring(&ring_desc(size, usage, false))
                .map(|_| ()),
            Err(Error::SizeExceedsHeaps {
                size,
                largest_heap: 2 * GIB
            }),
            "{size} {usage:?}"
        );
    }
    assert_eq!(device.live_resources(), 0);
    let ring = allocator
        .create_upload_ring(&ring_desc(4096, Usage::UPLOAD, false))
        .unwrap();
    let too_small = |size| Error::UploadRingTooSmall {
        size,
        capacity: 4096,
    };
    for (size, align, expected) in [
        (0, 1, Err(Error::ZeroSize)),
        (0, 3, Err(Error::ZeroSize)),
        (1, 0, Err(Error::AlignmentNotPowerOfTwo(0))),
        (1, 3, Err(Error::AlignmentNotPowerOfTwo(3))),
        (1, u64::MAX, Err(Error::AlignmentNotPowerOfTwo(u64::MAX))),
        (4097, 1, Err(too_small(4097))),
        (u64::MAX, 1, Err(too_small(u64::MAX))),
        (u64::MAX, 1 << 63, Err(too_small(u64::MAX))),
        (1, 1 << 63, Ok(0)),
        // Offset 0 is the only multiple of 2^63, and this frame holds it.
        (
            1,
            1 << 63,
            Err(Error::UploadRingFull {
                size: 1,
                free: 4095,
            }),
        ),
    ] {
        assert_eq!(
            allocator
                .ring_allocate(ring, size, align)
                .map(|a| a.buffer_offset()),
            expected,
            "size {size} align {align}"
        );
    }
    // ring_write's offsets and byte counts, in a 100-byte allocation.
    let bytes = allocator.ring_allocate(ring, 100, 1).unwrap();
    let out = |start, end| Error::RangeOutOfBounds {
        start,
        end,
        size: 100,
    };
    for (offset, len, expected) in [
        (u64::MAX, 1, Err(out(u64::MAX, u64::MAX))),
        (u64::MAX, 0, Err(out(u64::MAX, u64::MAX))),
        (101, 0, Err(out(101, 101))),
        (1, 100, Err(out(1, 101))),
        (0, 101, Err(out(0, 101))),
        (100, 0, Ok(())),
        (0, 100, Ok(())),
    ] {
        assert_eq!(
            allocator.ring_write(&bytes, offset, &vec![7; len]),
            expected,
            "offset {offset} len {len}"
        );
    }
    allocator.destroy_upload_ring(ring).unwrap();
    assert_eq!(
        allocator.ring_allocate(ring, 1, 1).map(|a| a.size()),
        Err(Error::StaleAllocation)
    );
    // A growing ring asked for more than any heap: an error, nothing kept.
    let growing = allocator
        .create_upload_ring(&ring_desc(4096, Usage::UPLOAD, true))
        .unwrap();
    for size in [u64::MAX, u64::MAX - 1, 1 << 48] {
        assert_eq!(
            allocator.ring_allocate(growing, size, 1).map(|a| a.size()),
            Err(Error::SizeExceedsHeaps {
                size,
                largest_heap: 2 * GIB
            }),
            "{size}"
        );
    }
    // A full growing ring adds a chunk of its usual size for any alignment:
    // offset 0 of the new chunk's buffer meets even 2^63.
    let full = allocator.ring_allocate(growing, 4096, 1).unwrap();
    let aligned = allocator.ring_allocate(growing, 1, 1 << 63).unwrap();
    assert_ne!(aligned.buffer(), full.buffer());
    assert_eq!(aligned.buffer_offset(), 0);
    allocator.destroy_upload_ring(growing).unwrap();

    // Frames: null signals, and extreme values and timeouts.
    assert_eq!(
        // SAFETY: a null fence is refused before it is used.
        unsafe { allocator.end_frame(ash::vk::Fence::null()) },
        Err(Error::NullFrameSignal)
    );
    assert_eq!(
        // SAFETY: as above.
        unsafe { allocator.end_frame_timeline(ash::vk::Semaphore::null(), u64::MAX) },
        Err(Error::NullFrameSignal)
    );
    let timeline = device.create_timeline_semaphore();
    // SAFETY: a fake semaphore, advanced below.
    let frame = unsafe { allocator.end_frame_timeline(timeline, u64::MAX) }.unwrap();
    assert_eq!(allocator.wait_and_collect(0), Err(Error::Timeout));
    device.signal_timeline(timeline, u64::MAX);
    assert_eq!(
        allocator.wait_and_collect(u64::MAX).map(|c| c.frames),
        Ok(1)
    );
    assert_eq!(allocator.current_frame(), frame + 1);
    finish(allocator, &device);
}
