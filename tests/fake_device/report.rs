//! Statistics dumps: the VMA-format JSON agrees with `stats()` and with the
//! live allocations, byte for byte; names survive escaping; the memory map
//! tiles every block. The SVG picture of the map is tested in `svg.rs`.

use std::collections::{BTreeSet, HashSet};

use ash::vk;
use serde_json::Value;
use vk_suballoc::device::fake::FakeLayout;
use vk_suballoc::device::DedicatedTarget;
use vk_suballoc::report::{DetailedStats, GpuInfo, MemoryMap, RangeKind, Stats};
use vk_suballoc::{
    Allocation, AllocationDesc, DedicatedPolicy, Pool, PoolDesc, Request, ResourceKind, Usage,
};

use super::{
    allocator, allocator_with, buffer, finish, free, requirements, without_runs, FakeAllocator,
};

const KIB: u64 = 1 << 10;
const MIB: u64 = 1 << 20;

/// Names that need JSON and XML escaping: quotes, backslashes, control
/// characters, markup, non-ASCII.
const TRICKY: &str = "vertices \"main\" C:\\assets\\mesh.bin <lod 0> & más 🦀";
const TABBED: &str = "albedo\ttexture\nline two \u{1}";

fn parse(json: &str) -> Value {
    serde_json::from_str(json).unwrap_or_else(|e| panic!("invalid JSON ({e}):\n{json}"))
}

/// A JSON number as the `u64` the dumps write (the VMA dump's tests too).
pub(super) fn u(value: &Value) -> u64 {
    value
        .as_u64()
        .unwrap_or_else(|| panic!("not an unsigned integer: {value}"))
}

/// A map's rows: its blocks and dedicated allocations, custom pools' too
/// (the VMA dump's tests too).
pub(super) fn map_rows(map: &MemoryMap) -> usize {
    map.memory_types
        .iter()
        .map(|t| {
            let pools = t.custom_pools.iter();
            t.blocks.len()
                + t.dedicated.len()
                + pools
                    .map(|p| p.blocks.len() + p.dedicated.len())
                    .sum::<usize>()
        })
        .sum()
}

fn image(size: u64, alignment: u64) -> Request<'static> {
    Request::new(
        requirements(size, alignment),
        Usage::DEVICE_LOCAL,
        ResourceKind::OptimalImage,
    )
}

/// A live allocation and what the dump must say about it.
pub(crate) struct Expected {
    allocation: Allocation,
    kind: &'static str,
    name: Option<&'static str>,
    /// The resource its memory is dedicated to (a fake handle).
    target: Option<u64>,
}

/// Allocations in four memory types, buffers and optimal images sharing
/// blocks, dedicated memory with and without a target, and a hole from a
/// free. Sizes are multiples of their alignment (and images of the 1024-byte
/// granularity), so each holds exactly its size in its block and the dump's
/// figures equal `stats()`; `held_bytes_and_requested_sizes` covers the rest.
pub(crate) fn populate(allocator: &FakeAllocator) -> Vec<Expected> {
    let mut live = Vec::new();
    let mut add = |request: Request<'static>, kind, name| {
        let allocation = allocator.allocate(&request).unwrap();
        let target = request.dedicated_target.map(|target| match target {
            DedicatedTarget::Buffer(buffer) => vk::Handle::as_raw(buffer),
            DedicatedTarget::Image(image) => vk::Handle::as_raw(image),
        });
        live.push(Expected {
            allocation,
            kind,
            name,
            target,
        });
    };
    let image_target = vk::Handle::from_raw(allocator.device().create_resource());
    add(
        buffer(4096, 256, Usage::DEVICE_LOCAL).name(TRICKY),
        "BUFFER",
        Some(TRICKY),
    );
    // Unnamed and small: a slot of a run, whose class (1024) is its size.
    add(buffer(1024, 16, Usage::DEVICE_LOCAL), "BUFFER", None);
    add(
        buffer(3 * KIB, 256, Usage::DEVICE_LOCAL).name("hole"),
        "BUFFER",
        Some("hole"),
    );
    add(
        buffer(10 * KIB, 1024, Usage::DEVICE_LOCAL).name("after hole"),
        "BUFFER",
        Some("after hole"),
    );
    add(
        image(256 * KIB, 64 * KIB).name(TABBED),
        "IMAGE_OPTIMAL",
        Some(TABBED),
    );
    add(image(MIB, 64 * KIB), "IMAGE_OPTIMAL", None);
    add(
        buffer(64 * KIB, 256, Usage::UPLOAD).name("staging"),
        "BUFFER",
        Some("staging"),
    );
    add(
        buffer(8 * KIB, 256, Usage::READBACK).name("readback"),
        "BUFFER",
        Some("readback"),
    );
    add(
        buffer(16 * KIB, 256, Usage::UPLOAD | Usage::DEVICE_LOCAL).name("uniforms"),
        "BUFFER",
        Some("uniforms"),
    );
    // Dedicated: an optimal image made for its target, a buffer without one.
    add(
        image(8 * MIB, 64 * KIB)
            .dedicated(DedicatedPolicy::Always)
            .dedicated_target(DedicatedTarget::Image(image_target))
            .name("shadow \"map\""),
        "IMAGE_OPTIMAL",
        Some("shadow \"map\""),
    );
    add(
        Request::with_desc(
            requirements(2 * MIB, 256),
            ResourceKind::Buffer,
            AllocationDesc::new(Usage::DEVICE_LOCAL).dedicated(DedicatedPolicy::Always),
        ),
        "BUFFER",
        None,
    );
    // A hole between "vertices" and "after hole".
    let hole = live.remove(2);
    free(allocator, hole.allocation);
    live
}

pub(crate) fn free_all(allocator: &FakeAllocator, live: Vec<Expected>) {
    for expected in live {
        free(allocator, expected.allocation);
        if let Some(target) = expected.target {
            allocator.device().destroy_resource(target);
        }
    }
}

/// `VmaPrintDetailedStatistics` object against expected figures.
fn assert_stats(json: &Value, blocks: u64, block_bytes: u64, allocations: u64, bytes: u64) {
    assert_eq!(u(&json["BlockCount"]), blocks, "{json}");
    assert_eq!(u(&json["BlockBytes"]), block_bytes, "{json}");
    assert_eq!(u(&json["AllocationCount"]), allocations, "{json}");
    assert_eq!(u(&json["AllocationBytes"]), bytes, "{json}");
    let ranges = u(&json["UnusedRangeCount"]);
    assert_eq!(json.get("AllocationSizeMin").is_some(), allocations > 1);
    assert_eq!(json.get("UnusedRangeSizeMax").is_some(), ranges > 1);
}

fn type_figures(stats: &Stats, memory_type: usize) -> (u64, u64, u64, u64) {
    let t = &stats.memory_types[memory_type];
    (
        t.blocks + t.dedicated_allocations,
        t.reserved_bytes(),
        t.allocations(),
        t.live_bytes(),
    )
}

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
fn json_dump_agrees_with_stats_and_live_allocations() {
    let (allocator, device) = allocator(FakeLayout::discrete());
    let live = populate(&allocator);
    let stats = allocator.stats();
    let map = allocator.memory_map();
    let text = allocator.stats_json(true);
    assert_eq!(text, map.to_vma_json(true), "one snapshot, one rendering");
    let json = parse(&text);

    let general = &json["General"];
    assert_eq!(general["API"], "Vulkan");
    assert_eq!(general["GPU"], "unknown");
    assert_eq!(general["apiVersion"], "0.0.0");
    assert_eq!(u(&general["memoryHeapCount"]), 3);
    assert_eq!(u(&general["memoryTypeCount"]), 5);
    assert_eq!(u(&general["bufferImageGranularity"]), 1024);
    assert_eq!(u(&general["nonCoherentAtomSize"]), 64);
    assert_eq!(u(&general["maxMemoryAllocationCount"]), 4096);

    let sizes: Vec<u64> = live.iter().map(|e| e.allocation.size()).collect();
    let total = &json["Total"];
    assert_stats(
        total,
        stats
            .memory_types
            .iter()
            .map(|t| t.blocks + t.dedicated_allocations)
            .sum(),
        stats.reserved_bytes(),
        stats.allocations(),
        stats.live_bytes(),
    );
    assert_eq!(stats.allocations(), live.len() as u64);
    assert_eq!(u(&total["AllocationSizeMin"]), *sizes.iter().min().unwrap());
    assert_eq!(u(&total["AllocationSizeMax"]), *sizes.iter().max().unwrap());
    assert_eq!(
        u(&json["MemoryInfo"]["Heap 0"]["Stats"]["AllocationSizeMax"]),
        8 * MIB
    );

    // Heaps: flags, size, budget, figures, and their memory types.
    let device_local_heaps = [true, false, true];
    for heap in &stats.heaps {
        let h = &json["MemoryInfo"][format!("Heap {}", heap.heap)];
        let flags = h["Flags"].as_array().unwrap();
        assert_eq!(!flags.is_empty(), device_local_heaps[heap.heap as usize]);
        assert_eq!(u(&h["Size"]), heap.size);
        assert_eq!(u(&h["Budget"]["BudgetBytes"]), heap.budget.budget);
        assert_eq!(u(&h["Budget"]["UsageBytes"]), heap.budget.usage);
        assert_eq!(u(&h["Stats"]["BlockBytes"]), heap.reserved_bytes);
        assert_eq!(u(&h["Stats"]["AllocationCount"]), heap.allocations);
        assert_eq!(u(&h["Stats"]["AllocationBytes"]), heap.live_bytes);
        let pools = h["MemoryPools"].as_object().unwrap();
        let types: BTreeSet<u32> = stats
            .memory_types
            .iter()
            .filter(|t| t.heap == heap.heap)
            .map(|t| t.memory_type)
            .collect();
        let keys: BTreeSet<String> = pools.keys().cloned().collect();
        let expected: BTreeSet<String> = types.iter().map(|t| format!("Type {t}")).collect();
        assert_eq!(keys, expected);
        for t in types {
            let (blocks, block_bytes, allocations, bytes) = type_figures(&stats, t as usize);
            assert_stats(
                &pools[&format!("Type {t}")]["Stats"],
                blocks,
                block_bytes,
                allocations,
                bytes,
            );
        }
    }
    assert_eq!(
        json["MemoryInfo"]["Heap 2"]["MemoryPools"]["Type 4"]["Flags"],
        serde_json::json!(["DEVICE_LOCAL", "HOST_VISIBLE", "HOST_COHERENT"])
    );
    assert_eq!(
        json["MemoryInfo"]["Heap 1"]["MemoryPools"]["Type 0"]["Flags"],
        serde_json::json!([])
    );

    check_default_pools(&json, &stats, &map);
    check_live_allocations(&json, &map, &live);
    assert_eq!(json["CustomPools"], serde_json::json!({}));

    free_all(&allocator, live);
    finish(allocator, &device);
}

/// Every block tiles its size with suballocations in address order, free
/// ranges fill the gaps (never two in a row), and the block and pool figures
/// add up to `stats()`.
fn check_default_pools(json: &Value, stats: &Stats, map: &MemoryMap) {
    let pools = json["DefaultPools"].as_object().unwrap();
    assert_eq!(pools.len(), stats.memory_types.len());
    for t in &stats.memory_types {
        let pool = &pools[&format!("Type {}", t.memory_type)];
        assert!(u(&pool["PreferredBlockSize"]) > 0);
        let blocks = pool["Blocks"].as_object().unwrap();
        assert_eq!(blocks.len() as u64, t.blocks, "type {}", t.memory_type);
        let mut block_bytes = 0;
        let mut allocations = 0;
        let mut allocated = 0;
        for (id, block) in blocks {
            let size = u(&block["TotalBytes"]);
            let in_map = map.memory_types[t.memory_type as usize]
                .blocks
                .iter()
                .find(|b| b.id.to_string() == *id)
                .unwrap();
            assert_eq!(size, in_map.size);
            assert_eq!(u(&block["MapRefCount"]), u64::from(in_map.mapped));
            block_bytes += size;
            let mut end = 0;
            let (mut used, mut free_count, mut free_bytes, mut count) = (0, 0, 0, 0);
            let mut previous_free = false;
            for range in block["Suballocations"].as_array().unwrap() {
                assert_eq!(u(&range["Offset"]), end, "gap or overlap in block {id}");
                let length = u(&range["Size"]);
                assert!(length > 0);
                end += length;
                if range["Type"] == "FREE" {
                    assert!(!previous_free, "two free ranges in a row in block {id}");
                    assert!(range.get("Name").is_none() && range.get("Usage").is_none());
                    free_count += 1;
                    free_bytes += length;
                    previous_free = true;
                } else {
                    assert_eq!(u(&range["Usage"]), 0);
                    used += length;
                    count += 1;
                    previous_free = false;
                }
            }
            assert_eq!(end, size, "block {id} not covered");
            assert_eq!(u(&block["UnusedBytes"]), free_bytes);
            assert_eq!(u(&block["UnusedRanges"]), free_count);
            assert_eq!(u(&block["Allocations"]), count);
            allocations += count;
            allocated += used;
        }
        assert_eq!(block_bytes, t.block_bytes);
        assert_eq!(allocations, t.block_allocations);
        assert_eq!(allocated, t.block_allocated_bytes);
        let dedicated = pool["DedicatedAllocations"].as_array().unwrap();
        assert_eq!(dedicated.len() as u64, t.dedicated_allocations);
        let bytes: u64 = dedicated.iter().map(|d| u(&d["Size"])).sum();
        assert_eq!(bytes, t.dedicated_bytes);
    }
}

/// Each live allocation appears once, at its offset in its block (found by
/// its `VkDeviceMemory`), with its size, kind and exact name.
fn check_live_allocations(json: &Value, map: &MemoryMap, live: &[Expected]) {
    let mut seen = BTreeSet::new();
    for expected in live {
        let a = &expected.allocation;
        let pool = &json["DefaultPools"][format!("Type {}", a.memory_type())];
        let entry = if a.is_dedicated() {
            let index = map.memory_types[a.memory_type() as usize]
                .dedicated
                .iter()
                .position(|d| d.memory == a.memory())
                .unwrap();
            seen.insert((a.memory_type(), u64::MAX, index as u64));
            pool["DedicatedAllocations"][index].clone()
        } else {
            let block = map.memory_types[a.memory_type() as usize]
                .blocks
                .iter()
                .find(|b| b.memory == a.memory())
                .unwrap();
            seen.insert((a.memory_type(), u64::from(block.id), a.offset()));
            let ranges = pool["Blocks"][block.id.to_string()]["Suballocations"]
                .as_array()
                .unwrap();
            ranges
                .iter()
                .find(|r| u(&r["Offset"]) == a.offset())
                .unwrap_or_else(|| panic!("{:?} missing", expected.name))
                .clone()
        };
        assert_eq!(u(&entry["Size"]), a.size());
        assert_eq!(entry["Type"], expected.kind, "{:?}", expected.name);
        assert_eq!(entry["Name"].as_str(), expected.name);
    }
    assert_eq!(seen.len(), live.len(), "two allocations at one place");
}

#[test]
fn summary_dump_leaves_out_the_detailed_map() {
    let (allocator, device) = allocator(FakeLayout::discrete());
    let live = populate(&allocator);
    let detailed = parse(&allocator.stats_json(true));
    let summary = parse(&allocator.stats_json(false));
    let keys: Vec<&str> = summary
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    // serde_json sorts keys; `key_order_and_layout_follow_vma` checks the order.
    assert_eq!(keys, ["General", "MemoryInfo", "Total"]);
    assert_eq!(summary["Total"], detailed["Total"]);
    assert_eq!(summary["MemoryInfo"], detailed["MemoryInfo"]);
    free_all(&allocator, live);
    finish(allocator, &device);
}

#[test]
fn key_order_and_layout_follow_vma() {
    let (allocator, device) = allocator(FakeLayout::discrete());
    let a = allocator
        .allocate(&buffer(4096, 256, Usage::DEVICE_LOCAL).name("a"))
        .unwrap();
    let text = allocator.stats_json(true);
    let order = [
        "\"General\"",
        "\"API\": \"Vulkan\"",
        "\"apiVersion\"",
        "\"GPU\"",
        "\"deviceType\"",
        "\"maxMemoryAllocationCount\"",
        "\"bufferImageGranularity\"",
        "\"nonCoherentAtomSize\"",
        "\"memoryHeapCount\"",
        "\"memoryTypeCount\"",
        "\"Total\"",
        "\"MemoryInfo\"",
        "\"Heap 0\"",
        "\"Flags\": [\"DEVICE_LOCAL\"]",
        "\"Budget\"",
        "\"MemoryPools\"",
        "\"Type 1\"",
        "\"DefaultPools\"",
        "\"Type 0\"",
        "\"PreferredBlockSize\"",
        "\"Blocks\"",
        "\"MapRefCount\": 0",
        "\"Suballocations\": [",
        "{\"Offset\": 0, \"Type\": \"BUFFER\", \"Size\": 4096, \"Usage\": 0, \"Name\": \"a\"}",
        "{\"Offset\": 4096, \"Type\": \"FREE\", \"Size\": ",
        "\"DedicatedAllocations\": [",
        "\"CustomPools\": {",
    ];
    let mut at = 0;
    for key in order {
        let found = text[at..]
            .find(key)
            .unwrap_or_else(|| panic!("{key} missing or out of order in\n{text}"));
        at += found + key.len();
    }
    assert!(text.starts_with("{\n  \"General\": {\n    \"API\": \"Vulkan\", \n"));
    assert!(text.ends_with("\n  }\n}"));
    free(&allocator, a);
    finish(allocator, &device);
}

#[test]
fn gpu_info_names_the_device() {
    let (allocator, device) = allocator(FakeLayout::discrete());
    let mut properties = vk::PhysicalDeviceProperties {
        api_version: vk::make_api_version(0, 1, 3, 280),
        device_type: vk::PhysicalDeviceType::DISCRETE_GPU,
        ..Default::default()
    };
    for (dst, src) in properties.device_name.iter_mut().zip(b"Fake \"RTX\"\0") {
        *dst = *src as std::ffi::c_char;
    }
    let json = parse(
        &allocator
            .memory_map()
            .with_gpu(GpuInfo::from(&properties))
            .to_vma_json(false),
    );
    assert_eq!(json["General"]["GPU"], "Fake \"RTX\"");
    assert_eq!(json["General"]["apiVersion"], "1.3.280");
    assert_eq!(u(&json["General"]["deviceType"]), 2);
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

/// Every block of a memory type has its own id in the memory map (the key of
/// the block in the VMA dump), and every memory object its own debug name.
#[test]
fn blocks_and_dedicated_memory_have_distinct_ids_and_names() {
    let (allocator, device) = allocator(FakeLayout::discrete());
    // Three 20 MiB buffers fill the first block (64 MiB); the fourth opens a
    // second; two large buffers get dedicated memory.
    let mut live: Vec<Allocation> = (0..4)
        .map(|_| {
            allocator
                .allocate(&buffer(20 * MIB, 256, Usage::DEVICE_LOCAL))
                .unwrap()
        })
        .collect();
    for _ in 0..2 {
        let large = allocator
            .allocate(&buffer(129 * MIB, 256, Usage::DEVICE_LOCAL))
            .unwrap();
        assert!(large.is_dedicated());
        live.push(large);
    }
    let map = allocator.memory_map();
    let ids: Vec<u32> = map.memory_types[1].blocks.iter().map(|b| b.id).collect();
    assert_eq!(ids, [0, 1]);
    let names: BTreeSet<String> = device
        .live_allocations()
        .into_iter()
        .map(|m| m.name.unwrap())
        .collect();
    assert_eq!(names.len(), 4, "{names:?}");
    assert!(names.contains("vk-suballoc block 1/0"), "{names:?}");
    assert!(names.contains("vk-suballoc block 1/1"), "{names:?}");
    for allocation in live {
        free(&allocator, allocation);
    }
    finish(allocator, &device);
}

/// A freed named range takes its name with it: an unnamed allocation that
/// reuses the range is shown unnamed.
#[test]
fn a_freed_range_forgets_its_name() {
    let (allocator, device) = allocator_with(FakeLayout::integrated(), without_runs());
    let named = allocator
        .allocate(&buffer(4 * KIB, 256, Usage::DEVICE_LOCAL).name("named"))
        .unwrap();
    let other = allocator
        .allocate(&buffer(4 * KIB, 256, Usage::DEVICE_LOCAL).name("other"))
        .unwrap();
    let offset = named.offset();
    free(&allocator, named);
    let unnamed = allocator
        .allocate(&buffer(4 * KIB, 256, Usage::DEVICE_LOCAL))
        .unwrap();
    assert_eq!(unnamed.offset(), offset);
    let map = allocator.memory_map();
    let block = &map.memory_types[unnamed.memory_type() as usize].blocks[0];
    let names: Vec<(u64, Option<&str>)> = block
        .allocations()
        .map(|r| (r.offset, r.name.as_deref()))
        .collect();
    assert_eq!(names, [(offset, None), (other.offset(), Some("other"))]);
    free(&allocator, unnamed);
    free(&allocator, other);
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

/// The name of the first custom pool of `populate_pools`: it needs escaping
/// in JSON and XML.
pub(crate) const POOL_NAME: &str = "streamed \"<textures>\"";

/// Two custom pools of the device-local type, beside `populate`'s default
/// pools: the first named, of 1 MiB blocks and at most 3, holding three
/// 512 KiB images (two blocks) and a dedicated buffer; the second unnamed,
/// with one block made at once and kept, holding nothing. Sizes are
/// multiples of their alignment, so the dump's figures equal `stats()`.
pub(crate) fn populate_pools(allocator: &FakeAllocator) -> (Vec<Pool>, Vec<Expected>) {
    let vram = allocator.memory_type_for(!0, Usage::DEVICE_LOCAL).unwrap();
    let named = allocator
        .create_pool(
            &PoolDesc::new(vram)
                .block_size(MIB)
                .max_blocks(3)
                .name(POOL_NAME),
        )
        .unwrap();
    let unnamed = allocator
        .create_pool(&PoolDesc::new(vram).min_blocks(1))
        .unwrap();
    let in_pool = AllocationDesc::new(Usage::DEVICE_LOCAL).pool(named);
    let mut live = Vec::new();
    for name in ["tile 0", "tile 1", "tile 2"] {
        let request = Request::with_desc(
            requirements(512 * KIB, 64 * KIB),
            ResourceKind::OptimalImage,
            in_pool,
        );
        live.push(Expected {
            allocation: allocator.allocate(&request.name(name)).unwrap(),
            kind: "IMAGE_OPTIMAL",
            name: Some(name),
            target: None,
        });
    }
    let dedicated = Request::with_desc(
        requirements(2 * MIB, 256),
        ResourceKind::Buffer,
        in_pool.dedicated(DedicatedPolicy::Always),
    );
    live.push(Expected {
        allocation: allocator
            .allocate(&dedicated.name("pool dedicated"))
            .unwrap(),
        kind: "BUFFER",
        name: Some("pool dedicated"),
        target: None,
    });
    assert!(live.iter().all(|e| e.allocation.is_in_custom_pool()));
    assert!(live[3].allocation.is_dedicated());
    (vec![named, unnamed], live)
}

/// Frees what `populate_pools` allocated and destroys its pools.
pub(crate) fn free_pools(allocator: &FakeAllocator, pools: Vec<Pool>, live: Vec<Expected>) {
    free_all(allocator, live);
    for pool in pools {
        allocator.destroy_pool(pool).unwrap();
    }
}

/// The figures `stats()` gives a memory type, as VMA counts them.
fn figures(stats: &DetailedStats) -> (u64, u64, u64, u64) {
    (
        stats.block_count,
        stats.block_bytes,
        stats.allocation_count,
        stats.allocation_bytes,
    )
}

/// Custom pools are in the memory map beside their memory type's default
/// pool, with their blocks, allocations and dedicated memory there and only
/// there, and what they fix about their blocks; the map's figures per type
/// and heap, and its totals, count them as `stats()` does.
#[test]
fn custom_pools_are_in_the_map_and_its_figures() {
    let (allocator, device) = allocator(FakeLayout::discrete());
    let mut live = populate(&allocator);
    let (pools, pooled) = populate_pools(&allocator);
    let map = allocator.memory_map();
    let stats = allocator.stats();
    let vram = pools[0].memory_type() as usize;
    let memory_type = &map.memory_types[vram];
    assert_eq!(memory_type.custom_pools.len(), 2);
    assert_eq!(map.custom_pools().count(), 2);
    assert!(map
        .memory_types
        .iter()
        .all(|t| t.memory_type as usize == vram || t.custom_pools.is_empty()));

    let named = &memory_type.custom_pools[0];
    assert_eq!(named.name.as_deref(), Some(POOL_NAME));
    assert_eq!(
        (named.memory_type, named.heap),
        (vram as u32, memory_type.heap)
    );
    assert_eq!(named.block_size, Some(MIB));
    assert_eq!(named.preferred_block_size, MIB);
    assert_eq!((named.min_blocks, named.max_blocks), (0, Some(3)));
    assert_eq!(named.blocks.len(), 2);
    let mut in_pool = HashSet::new();
    for block in &named.blocks {
        assert_eq!(block.size, MIB);
        for range in block.allocations() {
            let name = range.name.clone();
            in_pool.insert((block.memory, range.offset, range.size, range.kind, name));
        }
    }
    let expected: HashSet<_> = pooled[..3]
        .iter()
        .map(|e| {
            let a = &e.allocation;
            let name = e.name.map(str::to_owned);
            (
                a.memory(),
                a.offset(),
                a.size(),
                RangeKind::ImageOptimal,
                name,
            )
        })
        .collect();
    assert_eq!(in_pool, expected);
    let dedicated = &pooled[3].allocation;
    assert_eq!(named.dedicated.len(), 1);
    assert_eq!(named.dedicated[0].memory, dedicated.memory());
    assert_eq!(named.dedicated[0].size, dedicated.size());
    assert_eq!(named.dedicated[0].kind, RangeKind::Buffer);
    assert_eq!(named.dedicated[0].name.as_deref(), Some("pool dedicated"));

    let unnamed = &memory_type.custom_pools[1];
    assert_eq!(unnamed.name, None);
    assert_eq!(unnamed.block_size, None);
    assert_eq!(
        unnamed.preferred_block_size,
        memory_type.preferred_block_size
    );
    assert_eq!((unnamed.min_blocks, unnamed.max_blocks), (1, None));
    assert_eq!(unnamed.blocks.len(), 1);
    assert_eq!(unnamed.blocks[0].allocations().count(), 0);
    assert!(unnamed.dedicated.is_empty());

    // Only there: no memory object of the named pool is in a default pool
    // or in the other custom pool.
    let pool_memory: BTreeSet<vk::DeviceMemory> =
        pooled.iter().map(|e| e.allocation.memory()).collect();
    let elsewhere = map.memory_types.iter().flat_map(|t| {
        let default = t.blocks.iter().map(|b| b.memory);
        let dedicated = t.dedicated.iter().map(|d| d.memory);
        default.chain(dedicated)
    });
    let unnamed_blocks = unnamed.blocks.iter().map(|b| b.memory);
    for memory in elsewhere.chain(unnamed_blocks) {
        assert!(!pool_memory.contains(&memory), "{memory:?} in two pools");
    }

    // Figures per type and heap, and totals, count the pools as stats() do.
    for t in &stats.memory_types {
        let in_map = map.memory_types[t.memory_type as usize].detailed_stats();
        assert_eq!(
            figures(&in_map),
            type_figures(&stats, t.memory_type as usize),
            "type {}",
            t.memory_type
        );
    }
    for heap in &stats.heaps {
        let (blocks, bytes, allocations, live_bytes) = figures(&map.heap_stats(heap.heap));
        assert!(blocks > 0 || bytes == 0);
        assert_eq!(
            (bytes, allocations, live_bytes),
            (heap.reserved_bytes, heap.allocations, heap.live_bytes),
            "heap {}",
            heap.heap
        );
    }
    let total = map.total_stats();
    assert_eq!(
        (
            total.block_bytes,
            total.allocation_count,
            total.allocation_bytes
        ),
        (
            stats.reserved_bytes(),
            stats.allocations(),
            stats.live_bytes()
        )
    );
    assert_eq!(total.block_count, u64::from(stats.memory_objects));
    assert_eq!(map.allocation_count() as u64, stats.allocations());
    assert_eq!(map.allocation_count(), live.len() + pooled.len());

    live.extend(pooled);
    free_pools(&allocator, pools, live);
    finish(allocator, &device);
}

/// The VMA dump lists custom pools under `CustomPools`, by memory type, as
/// VMA does: each with its `Name` (its index, then its name), its
/// `PreferredBlockSize`, its `Blocks` and `DedicatedAllocations` written as
/// the default pools' are; their figures count in `MemoryInfo` and `Total`;
/// and the reads of VMA's `GpuMemDumpVis.py` find every block.
#[test]
fn json_dump_lists_custom_pools_as_vma_does() {
    let (allocator, device) = allocator(FakeLayout::discrete());
    let mut live = populate(&allocator);
    let (pools, pooled) = populate_pools(&allocator);
    let stats = allocator.stats();
    let map = allocator.memory_map();
    let text = allocator.stats_json(true);
    assert_eq!(text, map.to_vma_json(true));
    let json = parse(&text);
    let vram = pools[0].memory_type();
    let type_key = format!("Type {vram}");

    let custom = json["CustomPools"].as_object().unwrap();
    assert_eq!(custom.keys().collect::<Vec<_>>(), [&type_key]);
    let entries = custom[&type_key].as_array().unwrap();
    assert_eq!(entries.len(), 2);
    let named = &entries[0];
    assert_eq!(named["Name"], format!("0 - {POOL_NAME}"));
    assert_eq!(u(&named["PreferredBlockSize"]), MIB);
    let blocks = named["Blocks"].as_object().unwrap();
    assert_eq!(blocks.len(), 2);
    let mut names = BTreeSet::new();
    for block in blocks.values() {
        assert_eq!(u(&block["TotalBytes"]), MIB);
        for range in block["Suballocations"].as_array().unwrap() {
            if range["Type"] != "FREE" {
                assert_eq!(range["Type"], "IMAGE_OPTIMAL");
                assert_eq!(u(&range["Size"]), 512 * KIB);
                names.insert(range["Name"].as_str().unwrap().to_owned());
            }
        }
    }
    assert_eq!(
        names,
        BTreeSet::from(["tile 0", "tile 1", "tile 2"].map(String::from))
    );
    let dedicated = named["DedicatedAllocations"].as_array().unwrap();
    assert_eq!(dedicated.len(), 1);
    assert_eq!(dedicated[0]["Name"], "pool dedicated");
    assert_eq!(u(&dedicated[0]["Size"]), 2 * MIB);
    let unnamed = &entries[1];
    assert_eq!(unnamed["Name"], "1");
    assert_eq!(
        u(&unnamed["PreferredBlockSize"]),
        map.memory_types[vram as usize].preferred_block_size
    );
    let blocks = unnamed["Blocks"].as_object().unwrap();
    assert_eq!(blocks.len(), 1);
    assert_eq!(u(&blocks.values().next().unwrap()["Allocations"]), 0);
    assert_eq!(unnamed["DedicatedAllocations"], serde_json::json!([]));

    // The default pool of the type holds none of the pools' allocations.
    let default = json["DefaultPools"][&type_key].to_string();
    for expected in &pooled {
        assert!(!default.contains(expected.name.unwrap()), "{default}");
    }

    // Per type, per heap and in total, the pools count as in stats().
    let vram_stats = &json["MemoryInfo"]["Heap 0"]["MemoryPools"][&type_key]["Stats"];
    let (blocks, block_bytes, allocations, bytes) = type_figures(&stats, vram as usize);
    assert_stats(vram_stats, blocks, block_bytes, allocations, bytes);
    let heap = &stats.heaps[0];
    let heap_stats = &json["MemoryInfo"]["Heap 0"]["Stats"];
    assert_eq!(u(&heap_stats["BlockBytes"]), heap.reserved_bytes);
    assert_eq!(u(&heap_stats["AllocationCount"]), heap.allocations);
    assert_eq!(u(&json["Total"]["AllocationCount"]), stats.allocations());
    assert_eq!(u(&json["Total"]["BlockBytes"]), stats.reserved_bytes());

    assert_eq!(rows_gpu_mem_dump_vis_draws(&json), map_rows(&map));

    live.extend(pooled);
    free_pools(&allocator, pools, live);
    finish(allocator, &device);
}

/// Reads `json` as VMA's `GpuMemDumpVis.py` (3.x) does, indexing the keys
/// it indexes without a check (it stops with a `KeyError` on any missing),
/// and returns the rows it draws: one per block and per dedicated
/// allocation. Custom pools are keyed by `Name` within their memory type,
/// so two pools of a type with one `Name` would lose rows.
fn rows_gpu_mem_dump_vis_draws(json: &Value) -> usize {
    assert!(json["General"]["API"].is_string());
    let pool_rows = |pool: &Value| -> usize {
        for dedicated in pool["DedicatedAllocations"].as_array().unwrap() {
            assert!(dedicated["Type"].is_string(), "{dedicated}");
            assert!(dedicated["Size"].is_u64() && dedicated["Usage"].is_u64());
        }
        for block in pool["Blocks"].as_object().unwrap().values() {
            assert!(block["TotalBytes"].is_u64(), "{block}");
            for range in block["Suballocations"].as_array().unwrap() {
                assert!(range["Type"].is_string() && range["Size"].is_u64());
            }
        }
        pool["DedicatedAllocations"].as_array().unwrap().len()
            + pool["Blocks"].as_object().unwrap().len()
    };
    let mut rows = 0;
    for pool in json["DefaultPools"].as_object().unwrap().values() {
        rows += pool_rows(pool);
    }
    for pools in json["CustomPools"].as_object().unwrap().values() {
        let mut names = BTreeSet::new();
        for pool in pools.as_array().unwrap() {
            let name = pool["Name"].as_str().expect("every custom pool has a Name");
            if names.insert(name.to_owned()) {
                rows += pool_rows(pool);
            }
        }
    }
    rows
}

/// AMD's device-coherent types (4 to 7 on the AMD layout) carry their flag
/// name in the map and the dump, which `gpu-alloc-types`' flags cannot.
#[test]
fn amd_device_coherent_types_are_named_in_dumps() {
    let (allocator, device) = super::allocator(FakeLayout::amd());
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
    super::finish(allocator, &device);
}

/// `set_name` renames a live allocation wherever it lives (a block range,
/// a run slot, dedicated memory, a custom pool), as dumps show it, and
/// `None` drops the name; another allocator's handle is refused.
#[test]
fn set_name_renames_allocations_everywhere() {
    let (allocator, device) = allocator(FakeLayout::discrete());
    let pool = allocator.create_pool(&PoolDesc::new(1)).unwrap();
    let mut in_pool = buffer(4096, 256, Usage::DEVICE_LOCAL).name("pool-old");
    in_pool.desc = in_pool.desc.pool(pool);
    let allocations = [
        allocator
            .allocate(&buffer(1 << 20, 256, Usage::DEVICE_LOCAL).name("range-old"))
            .unwrap(),
        // In the range's block, so in a run slot: runs are carved from
        // existing blocks only (a first upload buffer took a range).
        allocator
            .allocate(&buffer(256, 4, Usage::DEVICE_LOCAL).name("slot-old"))
            .unwrap(),
        allocator
            .allocate(
                &buffer(4096, 256, Usage::DEVICE_LOCAL)
                    .dedicated(DedicatedPolicy::Always)
                    .name("dedicated-old"),
            )
            .unwrap(),
        allocator.allocate(&in_pool).unwrap(),
    ];
    let json = allocator.stats_json(true);
    for old in ["range-old", "slot-old", "dedicated-old", "pool-old"] {
        assert!(json.contains(old), "{old} missing before the rename");
    }
    for (i, allocation) in allocations.iter().enumerate() {
        allocator
            .set_name(allocation, Some(&format!("renamed-{i}")))
            .unwrap();
    }
    let json = allocator.stats_json(true);
    for i in 0..4 {
        assert!(
            json.contains(&format!("\"renamed-{i}\"")),
            "renamed-{i} missing"
        );
    }
    assert!(!json.contains("-old"), "{json}");
    allocator.set_name(&allocations[1], None).unwrap();
    assert!(!allocator.stats_json(true).contains("renamed-1"));

    let (other, other_device) = super::allocator(FakeLayout::discrete());
    assert_eq!(
        other.set_name(&allocations[0], Some("theirs")),
        Err(vk_suballoc::Error::ForeignAllocation)
    );
    finish(other, &other_device);
    for allocation in allocations {
        free(&allocator, allocation);
    }
    allocator.destroy_pool(pool).unwrap();
    finish(allocator, &device);
}

/// `set_name` on dedicated memory, from the default pools or a custom
/// pool, renames the `VkDeviceMemory` too (`vkSetDebugUtilsObjectNameEXT`):
/// to the new name, or for `None` to the `vk-suballoc dedicated <type>/<n>`
/// an unnamed allocation is made with. A block keeps its own debug name.
#[test]
fn set_name_renames_dedicated_memory_for_debuggers() {
    let (allocator, device) = allocator(FakeLayout::discrete());
    let debug_name = |allocation: &Allocation| -> String {
        device
            .live_allocations()
            .into_iter()
            .find(|m| m.memory == allocation.memory())
            .and_then(|m| m.name)
            .unwrap_or_else(|| panic!("{:?} is not live or unnamed", allocation.memory()))
    };
    let dedicated = |name: Option<&'static str>| {
        let request = buffer(4096, 256, Usage::DEVICE_LOCAL).dedicated(DedicatedPolicy::Always);
        match name {
            Some(name) => request.name(name),
            None => request,
        }
    };
    let pool = allocator
        .create_pool(&PoolDesc::new(1).name("textures"))
        .unwrap();
    let mut in_pool = dedicated(None);
    in_pool.desc = in_pool.desc.pool(pool);
    let named = allocator.allocate(&dedicated(Some("old"))).unwrap();
    let unnamed = allocator.allocate(&dedicated(None)).unwrap();
    let pooled = allocator.allocate(&in_pool).unwrap();
    let in_block = allocator
        .allocate(&buffer(4096, 256, Usage::DEVICE_LOCAL).name("range"))
        .unwrap();
    assert!(named.is_dedicated() && unnamed.is_dedicated() && pooled.is_dedicated());
    assert!(!in_block.is_dedicated());
    assert_eq!(debug_name(&named), "old");
    let unnamed_at_birth = debug_name(&unnamed);
    let pooled_at_birth = debug_name(&pooled);
    let block_name = debug_name(&in_block);
    assert!(
        unnamed_at_birth.starts_with("vk-suballoc dedicated 1/"),
        "{unnamed_at_birth}"
    );
    // A custom pool's dedicated memory is named after the pool, as its
    // blocks are: serials count per pool.
    assert!(
        pooled_at_birth.starts_with("vk-suballoc pool \"textures\" dedicated 1/"),
        "{pooled_at_birth}"
    );
    let renames = device.counters().renames;

    allocator.set_name(&named, Some("new")).unwrap();
    allocator.set_name(&unnamed, Some("given")).unwrap();
    allocator.set_name(&pooled, Some("pooled")).unwrap();
    allocator
        .set_name(&in_block, Some("range renamed"))
        .unwrap();
    assert_eq!(debug_name(&named), "new");
    assert_eq!(debug_name(&unnamed), "given");
    assert_eq!(debug_name(&pooled), "pooled");
    assert_eq!(debug_name(&in_block), block_name, "a block is not renamed");
    assert_eq!(device.counters().renames, renames + 3);

    // Dropping the name gives back what an unnamed allocation gets.
    allocator.set_name(&unnamed, None).unwrap();
    allocator.set_name(&pooled, None).unwrap();
    allocator.set_name(&named, None).unwrap();
    assert_eq!(debug_name(&unnamed), unnamed_at_birth);
    assert_eq!(debug_name(&pooled), pooled_at_birth);
    let dropped = debug_name(&named);
    assert!(
        dropped.starts_with("vk-suballoc dedicated 1/") && dropped != unnamed_at_birth,
        "{dropped}"
    );
    // The reports still take the allocation's own name, none now.
    assert!(!allocator.stats_json(true).contains("vk-suballoc dedicated"));

    for allocation in [named, unnamed, pooled, in_block] {
        free(&allocator, allocation);
    }
    allocator.destroy_pool(pool).unwrap();
    finish(allocator, &device);
}
