//! Figures that would pass `u64::MAX`: a request whose size rounded up to
//! its alignment would wrap, and report figures that sum past it and must
//! saturate. Each needs a heap or a report built to reach the edge, so
//! these tests sit together.

use gpu_alloc_types::MemoryPropertyFlags as Props;
use vk_suballoc::device::fake::FakeLayout;
use vk_suballoc::{DedicatedPolicy, Error, Usage};

use super::super::{allocator, buffer, finish, free};

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
