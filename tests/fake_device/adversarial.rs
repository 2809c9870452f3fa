//! Adversarial arguments to every public entry point: sizes, offsets and
//! alignments at 0, 1, non-powers of two and near `u64::MAX`, reversed and
//! overflowing ranges, layouts at Vulkan's limits. Each gets a typed error
//! (or a correct result) and leaves the allocator consistent: never a
//! panic, never a wrapped figure.

use gpu_alloc_types::{MemoryHeap, MemoryPropertyFlags as Props, MemoryType};
use vk_suballoc::device::fake::{FakeDevice, FakeLayout};
use vk_suballoc::{Allocator, Config, DedicatedPolicy, Error, Usage};

use super::{allocator, buffer, finish, free};

/// A request whose size, rounded up to its alignment, would pass `u64::MAX`
/// fits no block: it must not wrap to a tiny placed size (and take a 16-byte
/// run slot while reporting `u64::MAX` bytes, with a mapped slice that long).
/// Only a heap of nearly 2^64 bytes admits such a size; the fake device can
/// report one.
#[test]
fn a_size_that_rounds_past_u64_max_takes_no_block() {
    let layout = FakeLayout::lavapipe().with_heap_sizes(u64::MAX);
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

/// The fake device's `read` and `write` refuse ranges whose end passes
/// `u64::MAX`, as any other out-of-range access, instead of overflowing (a
/// panic in debug; in release a wrapped check let a write land before the
/// memory object and return `true`).
#[test]
fn fake_reads_and_writes_past_u64_max_are_refused() {
    let (allocator, device) = allocator(FakeLayout::lavapipe());
    let a = allocator.allocate(&buffer(4096, 1, Usage::UPLOAD)).unwrap();
    let memory = a.memory();
    for offset in [u64::MAX, u64::MAX - 1, u64::MAX - 4095, 1 << 63] {
        assert!(!device.write(memory, offset, &[1]), "write at {offset}");
        assert!(!device.write(memory, offset, &[1; 2]), "write at {offset}");
        assert_eq!(device.read(memory, offset, 1), None, "read at {offset}");
        assert_eq!(device.read(memory, offset, usize::MAX), None);
    }
    assert_eq!(device.read(memory, 0, usize::MAX), None);
    // Nothing landed anywhere in the object either.
    assert!(device
        .read(memory, 0, 4096)
        .unwrap()
        .iter()
        .all(|&b| b == 0));
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
        memory_type: 0,
        heap: 0,
        props: Props::DEVICE_LOCAL,
        preferred_block_size: u64::MAX,
        blocks: vec![block(0), block(1)],
        dedicated: vec![dedicated.clone(), dedicated],
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
