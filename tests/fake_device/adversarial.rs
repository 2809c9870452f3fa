//! Adversarial arguments to every public entry point: sizes, offsets and
//! alignments at 0, 1, non-powers of two and near `u64::MAX`, reversed and
//! overflowing ranges, layouts at Vulkan's limits. Each gets a typed error
//! (or a correct result) and leaves the allocator consistent: never a
//! panic, never a wrapped figure.

use std::ops::Bound::{Excluded, Included, Unbounded};

use gpu_alloc_types::{MemoryHeap, MemoryPropertyFlags as Props, MemoryType};
use vk_suballoc::device::fake::{FakeDevice, FakeLayout};
use vk_suballoc::{Allocator, Config, DedicatedPolicy, Error, ResourceKind, Usage};

use super::{allocator, buffer, finish, free};

/// A request whose size, rounded up to its alignment, would pass `u64::MAX`
/// fits no block: it must not wrap to a tiny placed size (and take a 16-byte
/// run slot while reporting `u64::MAX` bytes, with a mapped slice that long).
/// Only a heap of nearly 2^64 bytes, with no lower `maxMemoryAllocationSize`,
/// admits such a size; the fake device can report one.
#[test]
fn a_size_that_rounds_past_u64_max_takes_no_block() {
    let mut layout = FakeLayout::lavapipe().with_heap_sizes(u64::MAX);
    layout.max_memory_allocation_size = u64::MAX;
    let (allocator, device) = allocator(layout);
    // A block (and a run) exists, so a wrapped size would find room.
    let small = allocator.allocate(&buffer(16, 16, Usage::UPLOAD)).unwrap();
    let before = allocator.stats();
    for (size, align) in [
        (u64::MAX, 2),
        (u64::MAX, 256),
        (u64::MAX - 254, 256),
        (u64::MAX, 1 << 63),
        ((1 << 63) + 1, 1 << 63),
    ] {
        let request = buffer(size, align, Usage::UPLOAD).dedicated(DedicatedPolicy::Never);
        assert_eq!(
            allocator.allocate(&request).map(|a| (a.size(), a.offset())),
            Err(Error::OutOfDeviceMemory),
            "size {size} align {align}"
        );
    }
    assert_eq!(allocator.stats(), before);
    free(&allocator, small);
    finish(allocator, &device);
}

/// Vulkan caps a device at `VK_MAX_MEMORY_HEAPS` (16) heaps; a layout with
/// more is an unsupported device, refused up front, not a panic in `stats`
/// or `budgets` later.
#[test]
fn more_heaps_than_vulkan_allows_is_an_unsupported_device() {
    for memory_budget in [false, true] {
        let mut layout = FakeLayout::lavapipe().with_memory_budget(memory_budget);
        layout.memory_heaps = vec![MemoryHeap { size: 1 << 30 }; 17];
        let device = FakeDevice::new(layout);
        match Allocator::new(device.clone(), Config::default()) {
            Err(error) => assert!(matches!(error, Error::UnsupportedDevice(_))),
            Ok(allocator) => {
                // Before the fix: these panicked indexing 16 budgets.
                let _ = allocator.stats();
                let _ = allocator.budgets();
                panic!("a 17-heap device was accepted");
            }
        }
        device.assert_clean();
    }
}

/// A backend reporting a `maxMemoryAllocationSize` of 0 (Vulkan guarantees
/// at least 2^30) is refused up front: every request would otherwise fail
/// as larger than the limit.
#[test]
fn a_max_allocation_size_of_zero_is_an_unsupported_device() {
    let mut layout = FakeLayout::discrete();
    layout.max_memory_allocation_size = 0;
    let device = FakeDevice::new(layout);
    let result = Allocator::new(device.clone(), Config::default());
    assert!(matches!(result, Err(Error::UnsupportedDevice(_))));
    device.assert_clean();
}

/// `Allocator::new` refuses in its documented order: a bad `Config`
/// before anything about the device, then a `nonCoherentAtomSize` that is
/// not a power of two, a `maxMemoryAllocationSize` of 0, and more than 16
/// heaps; an atom of 0 is read as 1, not refused.
#[test]
fn new_refuses_config_then_device_in_the_documented_order() {
    let mut layout = FakeLayout::mobile();
    layout.non_coherent_atom_size = 48;
    layout.max_memory_allocation_size = 0;
    layout.memory_heaps = vec![MemoryHeap { size: 1 << 30 }; 17];
    let bad_config = Config {
        max_frames_in_flight: 0,
        ..Config::default()
    };
    let refusal = |layout: &FakeLayout, config: Config| {
        let device = FakeDevice::new(layout.clone());
        let error = Allocator::new(device.clone(), config).err();
        device.assert_clean();
        error
    };
    assert!(matches!(
        refusal(&layout, bad_config),
        Some(Error::InvalidConfig(_))
    ));
    assert_eq!(
        refusal(&layout, Config::default()),
        Some(Error::UnsupportedDevice(
            "nonCoherentAtomSize must be a power of two"
        ))
    );
    layout.non_coherent_atom_size = 0;
    assert_eq!(
        refusal(&layout, Config::default()),
        Some(Error::UnsupportedDevice("maxMemoryAllocationSize is 0"))
    );
    layout.max_memory_allocation_size = 1 << 30;
    assert_eq!(
        refusal(&layout, Config::default()),
        Some(Error::UnsupportedDevice(
            "more than VK_MAX_MEMORY_HEAPS (16) memory heaps"
        ))
    );
    // An atom of 0 counts as 1: the mobile layout's non-coherent type
    // takes allocations.
    let mut layout = FakeLayout::mobile();
    layout.non_coherent_atom_size = 0;
    let (allocator, device) = super::allocator_with(layout, Config::default());
    let a = allocator
        .allocate(&buffer(1000, 4, Usage::READBACK))
        .unwrap();
    free(&allocator, a);
    finish(allocator, &device);
}

/// 16 heaps, the most Vulkan allows, and 32 types, work; types past 32
/// (which Vulkan does not allow either) are ignored rather than trip a shift.
#[test]
fn vulkan_s_largest_layouts_work() {
    let mut layout = FakeLayout::lavapipe();
    layout.memory_heaps = vec![MemoryHeap { size: 1 << 30 }; 16];
    layout.memory_types = (0..33)
        .map(|t| MemoryType {
            heap: t % 16,
            props: Props::DEVICE_LOCAL | Props::HOST_VISIBLE | Props::HOST_COHERENT,
        })
        .collect();
    let (allocator, device) = allocator(layout);
    let a = allocator.allocate(&buffer(4096, 1, Usage::UPLOAD)).unwrap();
    assert_eq!(allocator.stats().heaps.len(), 16);
    assert_eq!(allocator.budgets().len(), 16);
    assert_eq!(allocator.memory_map().memory_types.len(), 32);
    free(&allocator, a);
    finish(allocator, &device);
}

/// Types past 32 have no pool, so a request short of memory, which releases
/// the empty blocks each pool keeps (`Config::empty_block_reserve`), looks
/// at the 32 there are (before, it indexed a 33rd pool and panicked).
#[test]
fn a_request_short_of_memory_ignores_types_past_32() {
    let mut layout = FakeLayout::lavapipe();
    layout.memory_types = (0..33)
        .map(|_| MemoryType {
            heap: 0,
            props: Props::DEVICE_LOCAL | Props::HOST_VISIBLE | Props::HOST_COHERENT,
        })
        .collect();
    let (allocator, device) = allocator(layout);
    device.fail_allocation(1, vk_suballoc::device::DeviceError::TooManyObjects);
    let a = allocator.allocate(&buffer(4096, 1, Usage::UPLOAD)).unwrap();
    assert_eq!(a.memory_type(), 1);
    free(&allocator, a);
    finish(allocator, &device);
}

/// A request no memory type can take says why, on a layout with types
/// past 32 too: it looks at the 32 the allocator uses (before, working out
/// whether the request was too large for every heap shifted a bit by the
/// 33rd type's index and panicked in debug builds).
#[test]
fn a_request_no_type_takes_ignores_types_past_32() {
    let mut layout = FakeLayout::lavapipe();
    layout.memory_types = (0..33)
        .map(|_| MemoryType {
            heap: 0,
            props: Props::DEVICE_LOCAL,
        })
        .collect();
    let heap = layout.memory_heaps[0].size;
    let (allocator, device) = allocator(layout);
    let before = allocator.stats();
    assert_eq!(
        allocator.allocate(&buffer(4096, 1, Usage::UPLOAD)),
        Err(Error::NoSuitableMemoryType {
            memory_type_bits: !0,
            usage: Usage::UPLOAD,
        })
    );
    assert_eq!(
        allocator.allocate(&buffer(heap + 1, 1, Usage::DEVICE_LOCAL)),
        Err(Error::SizeExceedsHeaps {
            size: heap + 1,
            largest_heap: heap,
        })
    );
    assert_eq!(allocator.stats(), before);
    finish(allocator, &device);
}

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

/// Reports are plain data an engine may build or combine itself; figures
/// that sum past `u64::MAX` saturate rather than overflow (a panic in debug,
/// a wrapped total in release), in the renderers and in the public sums.
#[test]
fn report_figures_past_u64_max_saturate() {
    use ash::vk;
    use vk_suballoc::device::HeapBudget;
    use vk_suballoc::report::{
        BlockMap, DedicatedMap, DetailedStats, HeapMap, MemoryMap, MemoryTypeMap, RangeKind,
        RangeMap, Stats, TypeStats,
    };

    let range = |offset, size, kind| RangeMap {
        offset,
        size,
        kind,
        name: Some("<&\"huge\">".to_owned()),
    };
    let block = |id| BlockMap {
        id,
        memory: vk::DeviceMemory::null(),
        size: u64::MAX,
        mapped: true,
        retiring: true,
        ranges: vec![
            range(0, u64::MAX - 1, RangeKind::Buffer),
            range(u64::MAX - 1, u64::MAX, RangeKind::ImageOptimal),
            range(u64::MAX, u64::MAX, RangeKind::Free),
        ],
    };
    let dedicated = DedicatedMap {
        memory: vk::DeviceMemory::null(),
        size: u64::MAX,
        mapped: false,
        kind: RangeKind::ImageLinear,
        name: None,
    };
    let memory_type = MemoryTypeMap {
        amd_device_coherent: false,
        memory_type: 0,
        heap: 0,
        props: Props::DEVICE_LOCAL,
        preferred_block_size: u64::MAX,
        blocks: vec![block(0), block(1)],
        dedicated: vec![dedicated.clone(), dedicated],
        custom_pools: Vec::new(),
    };
    let map = MemoryMap {
        memory_types: vec![memory_type.clone(), memory_type],
        heaps: vec![HeapMap {
            heap: 0,
            size: u64::MAX,
            device_local: true,
            budget: HeapBudget {
                budget: u64::MAX,
                usage: u64::MAX,
            },
        }],
        buffer_image_granularity: u64::MAX,
        non_coherent_atom_size: u64::MAX,
        max_memory_allocation_count: u32::MAX,
        gpu: None,
    };
    let total = map.total_stats();
    assert_eq!(total.block_count, 8);
    assert_eq!(total.block_bytes, u64::MAX);
    assert_eq!(total.allocation_bytes, u64::MAX);
    assert_eq!(total.allocation_size_max, u64::MAX);
    assert_eq!(map.heap_stats(0), total);
    assert_eq!(map.allocation_count(), 12);
    assert!(map
        .to_vma_json(true)
        .contains("\"BlockBytes\": 18446744073709551615"));
    assert!(map.to_svg().contains("&lt;&amp;&quot;huge&quot;&gt;"));

    let full = DetailedStats {
        block_count: u64::MAX,
        block_bytes: u64::MAX,
        allocation_count: u64::MAX,
        allocation_bytes: u64::MAX,
        unused_range_count: u64::MAX,
        ..DetailedStats::default()
    };
    assert_eq!(full.merged(full), full);

    let huge = TypeStats {
        block_bytes: u64::MAX,
        block_allocated_bytes: u64::MAX,
        block_allocations: u64::MAX,
        dedicated_allocations: u64::MAX,
        dedicated_bytes: u64::MAX,
        ..TypeStats::default()
    };
    assert_eq!(
        (huge.reserved_bytes(), huge.live_bytes(), huge.allocations()),
        (u64::MAX, u64::MAX, u64::MAX)
    );
    let stats = Stats {
        memory_types: vec![huge; 3],
        ..Stats::default()
    };
    assert_eq!(
        (
            stats.reserved_bytes(),
            stats.live_bytes(),
            stats.allocations()
        ),
        (u64::MAX, u64::MAX, u64::MAX)
    );
    assert!(stats.to_string().contains("allocations"));
}

/// `max_frames_in_flight` sizes a reservation, not a limit: a huge figure
/// must not make `Allocator::new` reserve room for that many frames (at
/// `u32::MAX`, 240 GB: the process aborted). Frames past it still queue.
#[test]
fn a_huge_frames_in_flight_figure_reserves_no_huge_queue() {
    let config = Config {
        max_frames_in_flight: u32::MAX,
        ..Config::default()
    };
    let (allocator, device) = super::allocator_with(FakeLayout::lavapipe(), config);
    assert_eq!(allocator.config().max_frames_in_flight, u32::MAX);
    let fences: Vec<_> = (0..100)
        .map(|_| {
            let a = allocator.allocate(&buffer(256, 1, Usage::UPLOAD)).unwrap();
            allocator.free_after_frame(a).unwrap();
            let fence = device.create_fence();
            // SAFETY: fake fences, signalled below.
            unsafe { allocator.end_frame(fence) }.unwrap();
            fence
        })
        .collect();
    assert_eq!(allocator.frames_in_flight(), 100);
    fences.iter().for_each(|&fence| device.signal_fence(fence));
    assert_eq!(allocator.collect().map(|c| c.frees), Ok(100));
    finish(allocator, &device);
}

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
            Error::NoSuitableMemoryType {
                memory_type_bits: !0,
                usage: Usage::DEVICE_LOCAL | Usage::DEVICE_ADDRESS,
            },
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
    assert_eq!(
        allocator.create_upload_ring(&ring_desc(4096, Usage::DEVICE_LOCAL, false)),
        Err(Error::NotHostVisible)
    );
    for size in [u64::MAX, 1 << 48] {
        assert!(matches!(
            allocator.create_upload_ring(&ring_desc(size, Usage::UPLOAD, false)),
            Err(Error::OutOfDeviceMemory | Error::SizeExceedsHeaps { .. })
        ));
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
        assert!(allocator.ring_allocate(growing, size, 1).is_err());
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

/// `Config` figures at and past their limits: refused with
/// `InvalidConfig`, or, where valid, working.
#[test]
fn config_figures_at_their_limits() {
    let config = |change: fn(&mut Config)| {
        let mut config = Config::default();
        change(&mut config);
        config
    };
    let invalid = [
        config(|c| c.large_heap_block_size = 0),
        config(|c| c.budget_fraction = f64::NAN),
        config(|c| c.budget_fraction = -0.01),
        config(|c| c.budget_fraction = 1.01),
        config(|c| c.budget_fraction = f64::INFINITY),
        config(|c| c.budget_fraction = f64::NEG_INFINITY),
        config(|c| c.small_buffer_limit = 65537),
        config(|c| c.small_buffer_limit = u64::MAX),
        config(|c| c.initial_block_slots = 0),
        config(|c| c.initial_block_slots = vk_suballoc::offset::MAX_SLOTS + 1),
        config(|c| c.initial_block_slots = u32::MAX),
        config(|c| c.max_frames_in_flight = 0),
        config(|c| c.empty_block_reserve = f64::NAN),
        config(|c| c.empty_block_reserve = -0.5),
        config(|c| c.empty_block_reserve = f64::NEG_INFINITY),
    ];
    let device = FakeDevice::new(FakeLayout::discrete());
    for config in invalid {
        assert!(
            matches!(
                Allocator::new(device.clone(), config),
                Err(Error::InvalidConfig(_))
            ),
            "{config:?}"
        );
    }
    let valid = [
        config(|c| c.large_heap_block_size = 1),
        config(|c| c.large_heap_block_size = u64::MAX),
        config(|c| c.small_heap_limit = 0),
        config(|c| c.small_heap_limit = u64::MAX),
        config(|c| c.budget_fraction = 0.0),
        config(|c| c.budget_fraction = -0.0),
        config(|c| c.budget_fraction = 1.0),
        config(|c| c.empty_block_reserve = 0.0),
        config(|c| c.empty_block_reserve = -0.0),
        config(|c| c.empty_block_reserve = f64::INFINITY),
        config(|c| c.max_padded_granularity = 0),
        config(|c| c.max_padded_granularity = 1 << 63),
        config(|c| c.max_padded_granularity = u64::MAX),
        config(|c| c.small_buffer_limit = 0),
        config(|c| c.small_buffer_limit = 65536),
        config(|c| c.initial_block_slots = 1),
        config(|c| c.max_frames_in_flight = u32::MAX),
    ];
    for config in valid {
        let (allocator, device) = super::allocator_with(FakeLayout::discrete(), config);
        for kind in [ResourceKind::Buffer, ResourceKind::OptimalImage] {
            let request = vk_suballoc::Request::new(
                super::requirements(1000, 256),
                Usage::DEVICE_LOCAL,
                kind,
            );
            let a = allocator.allocate(&request).unwrap();
            let b = allocator.allocate(&request).unwrap();
            free(&allocator, a);
            free(&allocator, b);
        }
        finish(allocator, &device);
    }
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
