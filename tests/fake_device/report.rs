//! Statistics dumps: the VMA-format JSON agrees with `stats()` and with the
//! live allocations, byte for byte; names survive escaping; the SVG map is
//! well formed with one rectangle per allocation.

use std::collections::BTreeSet;

use ash::vk;
use serde_json::Value;
use vk_suballoc::device::fake::FakeLayout;
use vk_suballoc::device::DedicatedTarget;
use vk_suballoc::report::{GpuInfo, MemoryMap, RangeKind, Stats};
use vk_suballoc::{Allocation, AllocationDesc, DedicatedPolicy, Request, ResourceKind, Usage};

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

fn u(value: &Value) -> u64 {
    value
        .as_u64()
        .unwrap_or_else(|| panic!("not a number: {value}"))
}

fn image(size: u64, alignment: u64) -> Request<'static> {
    Request::new(
        requirements(size, alignment),
        Usage::DEVICE_LOCAL,
        ResourceKind::OptimalImage,
    )
}

/// A live allocation and what the dump must say about it.
struct Expected {
    allocation: Allocation,
    kind: &'static str,
    name: Option<&'static str>,
}

/// Allocations in four memory types, buffers and optimal images sharing
/// blocks, dedicated memory with and without a target, and a hole from a
/// free. Sizes are multiples of their alignment (and images of the 1024-byte
/// granularity), so each holds exactly its size in its block and the dump's
/// figures equal `stats()`; `held_bytes_and_requested_sizes` covers the rest.
fn populate(allocator: &FakeAllocator) -> Vec<Expected> {
    let mut live = Vec::new();
    let mut add = |request: Request<'static>, kind, name| {
        let allocation = allocator.allocate(&request).unwrap();
        live.push(Expected {
            allocation,
            kind,
            name,
        });
    };
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
            .dedicated_target(DedicatedTarget::Image(vk::Handle::from_raw(0x51)))
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

fn free_all(allocator: &FakeAllocator, live: Vec<Expected>) {
    for expected in live {
        free(allocator, expected.allocation);
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

/// Checks that tags nest and close, and returns the names of the elements
/// in document order.
fn balanced_elements(svg: &str) -> Vec<String> {
    let mut stack: Vec<String> = Vec::new();
    let mut elements = Vec::new();
    let mut rest = svg;
    while let Some(open) = rest.find('<') {
        let close = rest[open..].find('>').expect("unclosed tag") + open;
        let tag = &rest[open + 1..close];
        assert!(!tag.contains('<'), "'<' inside a tag: {tag}");
        if let Some(name) = tag.strip_prefix('/') {
            assert_eq!(stack.pop().as_deref(), Some(name), "mismatched </{name}>");
        } else {
            let name: String = tag
                .chars()
                .take_while(|c| !c.is_whitespace() && *c != '/')
                .collect();
            elements.push(name.clone());
            if !tag.ends_with('/') {
                stack.push(name);
            }
        }
        // Text between tags must not hold raw markup characters.
        let text_end = rest[close..].find('<').map_or(rest.len(), |n| n + close);
        let between = &rest[close + 1..text_end];
        assert!(!between.contains('>'), "raw '>' in text: {between}");
        rest = &rest[close + 1..];
    }
    assert!(stack.is_empty(), "unclosed elements: {stack:?}");
    elements
}

#[test]
fn svg_map_is_well_formed_with_one_rect_per_allocation() {
    let (allocator, device) = allocator(FakeLayout::discrete());
    let live = populate(&allocator);
    let map = allocator.memory_map();
    let svg = allocator.memory_map_svg();
    assert_eq!(svg, map.to_svg());
    assert!(svg.starts_with("<svg xmlns=\"http://www.w3.org/2000/svg\""));
    let elements = balanced_elements(&svg);
    assert_eq!(elements[0], "svg");
    assert_eq!(elements.iter().filter(|e| *e == "svg").count(), 1);
    assert_eq!(svg.matches("class=\"alloc ").count(), live.len());
    assert_eq!(map.allocation_count(), live.len());
    let blocks: usize = map.memory_types.iter().map(|t| t.blocks.len()).sum();
    assert_eq!(
        svg.matches("class=\"block\"").count(),
        blocks * 2,
        "a group and a background each"
    );
    // Every allocation rect carries its title; names are escaped.
    assert!(svg.contains(
        "&quot;vertices &quot;main&quot; C:\\assets\\mesh.bin &lt;lod 0&gt; &amp; más 🦀&quot; (BUFFER)"
    ));
    assert!(svg.contains("&quot;albedo\ttexture\nline two \u{fffd}&quot; (IMAGE_OPTIMAL)"));
    assert!(svg.contains("unnamed (BUFFER)"));
    assert!(!svg.contains('\u{1}'));
    free_all(&allocator, live);
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

/// The value of attribute `name` in the start tag `tag`.
fn svg_attr<'a>(tag: &'a str, name: &str) -> Option<&'a str> {
    let start = tag.find(&format!(" {name}=\""))? + name.len() + 3;
    Some(&tag[start..start + tag[start..].find('"')?])
}

/// `svg_attr` as a number.
fn svg_number(tag: &str, name: &str) -> f64 {
    svg_attr(tag, name)
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no number {name} in {tag}"))
}

/// The start tags of the elements named `element`, in document order.
fn svg_tags<'a>(svg: &'a str, element: &str) -> Vec<&'a str> {
    let open = format!("<{element} ");
    svg.match_indices(&open)
        .map(|(at, _)| &svg[at..at + svg[at..].find('>').unwrap()])
        .collect()
}

/// The SVG is read by eye: the legend is one row of swatches inside the
/// picture, each with its label just right of it; every heading, label and
/// row sits below the legend, with less than a row of blank between; the
/// picture's height takes in the last row, with less than a row of blank
/// below it.
#[test]
fn svg_layout_keeps_legend_rows_and_height_apart() {
    let (allocator, device) = allocator(FakeLayout::discrete());
    let live = populate(&allocator);
    let svg = allocator.memory_map().to_svg();
    let root = svg_tags(&svg, "svg")[0];
    let (width, height) = (svg_number(root, "width"), svg_number(root, "height"));
    let legend_end = svg.find("</g>").unwrap();
    let (legend, rows) = svg.split_at(legend_end);
    let swatches: Vec<&str> = svg_tags(legend, "rect")
        .into_iter()
        .filter(|r| r.contains("class=\"legend "))
        .collect();
    let labels = svg_tags(legend, "text");
    assert_eq!((swatches.len(), labels.len()), (6, 6));
    let mut legend_bottom: f64 = 0.0;
    let mut previous_label = f64::NEG_INFINITY;
    for (swatch, label) in swatches.iter().zip(&labels) {
        let (x, y) = (svg_number(swatch, "x"), svg_number(swatch, "y"));
        let right = x + svg_number(swatch, "width");
        assert!(x >= 0.0 && x > previous_label && right < width, "{swatch}");
        assert_eq!(y, svg_number(swatches[0], "y"), "one row: {swatch}");
        let label_x = svg_number(label, "x");
        assert!(right < label_x && label_x <= right + 8.0, "{label}");
        let baseline = svg_number(label, "y");
        assert!(
            y < baseline && baseline <= y + 12.0,
            "{label} beside {swatch}"
        );
        previous_label = label_x;
        legend_bottom = legend_bottom.max(y + svg_number(swatch, "height"));
    }
    // Text is 11 units high above its baseline.
    let tops: Vec<f64> = svg_tags(rows, "text")
        .iter()
        .map(|t| svg_number(t, "y") - 11.0)
        .chain(svg_tags(rows, "rect").iter().map(|r| svg_number(r, "y")))
        .collect();
    let first = tops.iter().copied().fold(f64::INFINITY, f64::min);
    assert!(
        first >= legend_bottom && first < legend_bottom + 24.0,
        "first row at {first}, legend ends at {legend_bottom}"
    );
    let bottom = svg_tags(rows, "rect")
        .iter()
        .map(|r| svg_number(r, "y") + svg_number(r, "height"))
        .fold(0.0, f64::max);
    assert!(
        bottom < height && height < bottom + 24.0,
        "last row ends at {bottom}, picture at {height}"
    );
    free_all(&allocator, live);
    finish(allocator, &device);
}

/// The message of an empty map sits below the legend, inside the picture.
#[test]
fn svg_of_an_empty_map_says_so_below_the_legend() {
    let (allocator, device) = allocator(FakeLayout::discrete());
    let svg = allocator.memory_map_svg();
    let root = svg_tags(&svg, "svg")[0];
    let height = svg_number(root, "height");
    let legend_bottom = svg_tags(&svg, "rect")
        .iter()
        .filter(|r| r.contains("class=\"legend "))
        .map(|r| svg_number(r, "y") + svg_number(r, "height"))
        .fold(0.0, f64::max);
    let message = svg_tags(&svg, "text")
        .into_iter()
        .find(|t| svg[svg.find(t).unwrap()..].starts_with(&format!("{t}>No device memory")))
        .expect("message");
    let baseline = svg_number(message, "y");
    assert!(
        baseline - 11.0 >= legend_bottom && baseline < height,
        "message at {baseline}, legend ends at {legend_bottom}, picture at {height}"
    );
    assert!(baseline - 11.0 < legend_bottom + 24.0);
    finish(allocator, &device);
}

/// Allocations are coloured by kind with GpuMemDumpVis's palette and carry
/// the kind's CSS class, so a stylesheet or a script can pick them out:
/// buffers `#ffffa5`, optimal images `#b7ffff`, in the legend alike.
#[test]
fn svg_colours_allocations_by_kind() {
    let (allocator, device) = allocator(FakeLayout::discrete());
    let live = populate(&allocator);
    let svg = allocator.memory_map_svg();
    let rects = svg_tags(&svg, "rect");
    let styles = |class: &str| -> BTreeSet<(String, String)> {
        rects
            .iter()
            .filter(|r| svg_attr(r, "class").unwrap().starts_with(class))
            .map(|r| {
                let class = svg_attr(r, "class").unwrap();
                let kind = class.rsplit(' ').next().unwrap().to_owned();
                (kind, svg_attr(r, "fill").unwrap().to_owned())
            })
            .collect()
    };
    let buffer = ("buffer".to_owned(), "#ffffa5".to_owned());
    let optimal = ("image-optimal".to_owned(), "#b7ffff".to_owned());
    assert_eq!(
        styles("alloc "),
        BTreeSet::from([buffer.clone(), optimal.clone()])
    );
    let legend = styles("legend ");
    assert!(
        legend.contains(&buffer) && legend.contains(&optimal),
        "{legend:?}"
    );
    assert!(legend.contains(&("free".to_owned(), "#dcdcdc".to_owned())));
    let backgrounds = styles("block");
    assert_eq!(
        backgrounds,
        BTreeSet::from([("block".to_owned(), "#dcdcdc".to_owned())])
    );
    free_all(&allocator, live);
    finish(allocator, &device);
}

/// Rows of the SVG neither overlap nor drift apart: in document order each
/// heading, label and row starts below the one before it, with less than a
/// row of blank between; and each allocation is drawn to scale inside its
/// block's row, at `offset / size` of the row's width.
#[test]
fn svg_rows_stack_and_allocations_are_drawn_to_scale() {
    let (allocator, device) = allocator(FakeLayout::discrete());
    let live = populate(&allocator);
    let map = allocator.memory_map();
    let svg = map.to_svg();
    let picture_width = svg_number(svg_tags(&svg, "svg")[0], "width");
    // Rows span the picture's width, with equal margins.
    let full_width = |row: &str| {
        let (x, width) = (svg_number(row, "x"), svg_number(row, "width"));
        assert!(
            x > 0.0 && (x + width - (picture_width - x)).abs() < 0.01,
            "{row}"
        );
    };
    let rows = &svg[svg.find("</g>").unwrap()..];
    // (top, bottom) of every heading, label and row background, in order.
    let mut items: Vec<(f64, f64, &str)> = Vec::new();
    let mut blocks = map.memory_types.iter().flat_map(|t| &t.blocks);
    let mut rest = rows;
    while let Some(at) = rest.find('<') {
        rest = &rest[at..];
        let tag = &rest[..rest.find('>').unwrap()];
        if tag.starts_with("<text ") {
            let baseline = svg_number(tag, "y");
            items.push((baseline - 11.0, baseline, tag));
        } else if tag.starts_with("<rect ") {
            full_width(tag);
            let y = svg_number(tag, "y");
            items.push((y, y + svg_number(tag, "height"), tag));
        } else if tag == "<g class=\"block\"" {
            let group = &rest[..rest.find("</g>").unwrap()];
            let rects = svg_tags(group, "rect");
            let row = rects[0];
            let (x, y, width) = (
                svg_number(row, "x"),
                svg_number(row, "y"),
                svg_number(row, "width"),
            );
            full_width(row);
            items.push((y, y + svg_number(row, "height"), row));
            let block = blocks.next().expect("a block per row");
            let allocations: Vec<_> = block.allocations().collect();
            assert_eq!(rects.len() - 1, allocations.len());
            for (rect, range) in rects[1..].iter().zip(allocations) {
                assert_eq!(svg_number(rect, "y"), y, "{rect}");
                let expected_x = x + width * range.offset as f64 / block.size as f64;
                let expected_width = width * range.size as f64 / block.size as f64;
                assert!((svg_number(rect, "x") - expected_x).abs() < 0.01, "{rect}");
                let drawn = svg_number(rect, "width");
                assert!(
                    (drawn - expected_width.max(1.0)).abs() < 0.01,
                    "{rect}: {expected_width}"
                );
            }
            rest = &rest[group.len()..];
            continue;
        }
        rest = &rest[1..];
    }
    assert!(blocks.next().is_none(), "a row per block");
    // A bold heading names each memory type that holds memory.
    let headings: Vec<&str> = rows
        .split("<text ")
        .filter(|t| t.contains("font-weight=\"bold\""))
        .collect();
    let held: Vec<u32> = map
        .memory_types
        .iter()
        .filter(|t| !t.blocks.is_empty() || !t.dedicated.is_empty())
        .map(|t| t.memory_type)
        .collect();
    assert_eq!(headings.len(), held.len());
    for (heading, memory_type) in headings.iter().zip(held) {
        assert!(heading.contains(&format!(">Memory type {memory_type} (")));
    }
    assert!(items.len() > 10);
    for pair in items.windows(2) {
        let ((_, bottom, before), (top, _, after)) = (pair[0], pair[1]);
        assert!(
            top >= bottom && top < bottom + 24.0,
            "{after} does not follow {before}"
        );
    }
    free_all(&allocator, live);
    finish(allocator, &device);
}

/// A block's label in the SVG gives its free space and largest free range
/// (what tells fragmentation from exhaustion): an emptied block's one free
/// range is the whole block.
#[test]
fn svg_block_label_gives_the_largest_free_range() {
    let (allocator, device) = allocator(FakeLayout::discrete());
    let a = allocator
        .allocate(&buffer(4096, 256, Usage::DEVICE_LOCAL))
        .unwrap();
    free(&allocator, a);
    let svg = allocator.memory_map_svg();
    let label = svg
        .lines()
        .find_map(|line| line.split(">Block 0: ").nth(1))
        .expect("a block label");
    let size = label.split(',').next().unwrap();
    assert!(
        label.starts_with(&format!(
            "{size}, 0 allocations, {size} free in 1 range (largest {size})"
        )),
        "{label}"
    );
    allocator.trim();
    finish(allocator, &device);
}
