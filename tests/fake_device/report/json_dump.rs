//! The VMA-format JSON dump of the default pools: its figures agree with
//! `stats()` per heap, per memory type and in total, every block is tiled
//! by its suballocations in address order, each live allocation appears
//! once with its size, kind and exact name; the summary leaves the
//! detailed map out; keys come in VMA's order and layout; and a
//! `GpuInfo` names the device.

use std::collections::BTreeSet;

use ash::vk;
use serde_json::Value;
use vk_suballoc::device::fake::FakeLayout;
use vk_suballoc::report::{GpuInfo, MemoryMap, Stats};
use vk_suballoc::Usage;

use super::super::{allocator, buffer, finish, free};

use super::{assert_stats, free_all, parse, populate, type_figures, u, Expected, MIB};

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
