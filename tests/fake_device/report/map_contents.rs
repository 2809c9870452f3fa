//! What the memory map shows of each block and memory type, as a debug UI
//! or a leak check reads it: ranges that tile every block end to offset,
//! the bytes an allocation holds beside the size it asked for, kinds exact
//! in shared blocks, an empty block as one free range until `trim`,
//! `allocation_count` adding block and dedicated allocations, and AMD's
//! device-coherent flag named in the map and the dump.

use vk_suballoc::device::fake::FakeLayout;
use vk_suballoc::report::RangeKind;
use vk_suballoc::{Allocation, DedicatedPolicy, Usage};

use super::super::{allocator, allocator_with, buffer, finish, free, without_runs};

use super::{assert_stats, free_all, image, parse, populate, u, KIB};

/// An allocation whose size is not a multiple of its alignment (or, for an
/// optimal image in a shared block, of the granularity) holds more bytes in
/// its block than it asked for: the map and the JSON show the bytes held, so
/// ranges tile the block as in a VMA dump; `stats()` keeps the requested size.
/// (Runs off: a buffer in a run holds its slot, see `runs.rs`.)
#[test]
fn held_bytes_and_requested_sizes() {
    let (allocator, device) = allocator_with(FakeLayout::discrete(), without_runs());
    let buffer = allocator
        .allocate(&buffer(1000, 16, Usage::DEVICE_LOCAL))
        .unwrap();
    let image = allocator.allocate(&image(1500, 512)).unwrap();
    assert_eq!(allocator.stats().live_bytes(), 2500);
    let map = allocator.memory_map();
    let block = &map.memory_types[buffer.memory_type() as usize].blocks[0];
    let ranges: Vec<(u64, u64, RangeKind)> = block
        .allocations()
        .map(|r| (r.offset, r.size, r.kind))
        .collect();
    assert_eq!(
        ranges,
        [
            (0, 1008, RangeKind::Buffer),
            (1024, 2048, RangeKind::ImageOptimal)
        ]
    );
    let json = parse(&allocator.stats_json(true));
    let pool = &json["DefaultPools"][format!("Type {}", buffer.memory_type())];
    let suballocations = pool["Blocks"][block.id.to_string()]["Suballocations"]
        .as_array()
        .unwrap()
        .clone();
    let sizes: Vec<u64> = suballocations.iter().map(|r| u(&r["Size"])).collect();
    assert_eq!(
        sizes.iter().sum::<u64>(),
        block.size,
        "ranges tile the block"
    );
    assert_eq!(&sizes[..3], [1008, 16, 2048], "buffer, free sliver, image");
    free(&allocator, buffer);
    free(&allocator, image);
    finish(allocator, &device);
}

#[test]
fn empty_blocks_show_as_one_free_range_and_trim_removes_them() {
    let (allocator, device) = allocator(FakeLayout::discrete());
    let empty = parse(&allocator.stats_json(true));
    assert_stats(&empty["Total"], 0, 0, 0, 0);
    let a = allocator
        .allocate(&buffer(4096, 256, Usage::DEVICE_LOCAL))
        .unwrap();
    free(&allocator, a);
    let map = allocator.memory_map();
    let block = &map.memory_types[1].blocks[0];
    assert_eq!(block.ranges.len(), 1);
    assert_eq!(block.ranges[0].kind, RangeKind::Free);
    assert_eq!(block.ranges[0].size, block.size);
    let json = parse(&allocator.stats_json(true));
    assert_stats(&json["Total"], 1, block.size, 0, 0);
    assert_eq!(u(&json["Total"]["UnusedRangeCount"]), 1);
    allocator.trim();
    assert_eq!(allocator.memory_map().allocation_count(), 0);
    assert!(allocator
        .memory_map_svg()
        .contains("No device memory is held."));
    finish(allocator, &device);
}

/// Kinds are recorded per allocation, whatever the granularity: with
/// granularity 1 buffers and images share a block and still show as such.
#[test]
fn kinds_are_exact_in_shared_blocks() {
    let (allocator, device) = allocator(FakeLayout::discrete().with_granularity(1));
    let a = allocator.allocate(&image(4096, 4096)).unwrap();
    let b = allocator
        .allocate(&buffer(4096, 256, Usage::DEVICE_LOCAL))
        .unwrap();
    let map = allocator.memory_map();
    let kinds: Vec<RangeKind> = map.memory_types[1].blocks[0]
        .allocations()
        .map(|r| r.kind)
        .collect();
    assert_eq!(kinds, [RangeKind::ImageOptimal, RangeKind::Buffer]);
    free(&allocator, a);
    free(&allocator, b);
    finish(allocator, &device);
}

/// What a debug UI drawing the map relies on: in every block, each range
/// ends (`RangeMap::end`) exactly where the next begins, the first begins at
/// 0 and the last ends at the block's size.
#[test]
fn map_ranges_tile_each_block_end_to_offset() {
    let (allocator, device) = allocator(FakeLayout::discrete());
    let live = populate(&allocator);
    let map = allocator.memory_map();
    let mut checked = 0;
    for block in map.memory_types.iter().flat_map(|t| &t.blocks) {
        let mut at = 0;
        for range in &block.ranges {
            assert_eq!(range.offset, at, "gap or overlap in block {}", block.id);
            assert_eq!(range.end(), range.offset + range.size);
            at = range.end();
            checked += 1;
        }
        assert_eq!(at, block.size, "block {} not covered", block.id);
    }
    assert!(checked > live.len(), "allocations and free ranges");
    free_all(&allocator, live);
    finish(allocator, &device);
}

/// `MemoryMap::allocation_count` is what a leak check or an overlay reads:
/// block allocations plus dedicated ones, also in a memory type that holds
/// only dedicated memory or only blocks.
#[test]
fn allocation_count_adds_block_and_dedicated_allocations() {
    let (allocator, device) = allocator(FakeLayout::discrete());
    let dedicated = allocator
        .allocate(&buffer(4 * KIB, 256, Usage::DEVICE_LOCAL).dedicated(DedicatedPolicy::Always))
        .unwrap();
    assert!(dedicated.is_dedicated());
    assert_eq!(allocator.memory_map().allocation_count(), 1);
    let staging: Vec<Allocation> = (0..3)
        .map(|_| {
            allocator
                .allocate(&buffer(64 * KIB, 256, Usage::UPLOAD))
                .unwrap()
        })
        .collect();
    assert_ne!(staging[0].memory_type(), dedicated.memory_type());
    assert_eq!(allocator.memory_map().allocation_count(), 4);
    free(&allocator, dedicated);
    for allocation in staging {
        free(&allocator, allocation);
    }
    finish(allocator, &device);
}

/// AMD's device-coherent types (4 to 7 on the AMD layout) carry their flag
/// name in the map and the dump, which `gpu-alloc-types`' flags cannot.
#[test]
fn amd_device_coherent_types_are_named_in_dumps() {
    let (allocator, device) = super::super::allocator(FakeLayout::amd());
    let map = allocator.memory_map();
    let amd: Vec<u32> = map
        .memory_types
        .iter()
        .filter(|t| t.amd_device_coherent)
        .map(|t| t.memory_type)
        .collect();
    assert_eq!(amd, [4, 5, 6, 7]);
    assert!(map.memory_types[4]
        .flag_names()
        .any(|name| name == "DEVICE_COHERENT_AMD"));
    assert!(map.memory_types[0]
        .flag_names()
        .all(|name| name != "DEVICE_COHERENT_AMD"));
    let json = parse(&allocator.stats_json(false));
    let flags = |heap: u32, memory_type: u32| -> Vec<String> {
        json["MemoryInfo"][format!("Heap {heap}")]["MemoryPools"][format!("Type {memory_type}")]
            ["Flags"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_str().unwrap().to_owned())
            .collect()
    };
    let heap = map.memory_types[4].heap;
    assert!(
        flags(heap, 4).contains(&"DEVICE_COHERENT_AMD".to_owned()),
        "{:?}",
        flags(heap, 4)
    );
    let heap0 = map.memory_types[0].heap;
    assert!(!flags(heap0, 0).contains(&"DEVICE_COHERENT_AMD".to_owned()));
    super::super::finish(allocator, &device);
}
