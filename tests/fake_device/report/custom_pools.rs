//! Custom pools in the reports: in the memory map beside their memory
//! type's default pool, with their blocks, allocations and dedicated
//! memory there only, and counted in its figures as `stats()` counts them;
//! in the VMA dump under `CustomPools`, as VMA lists them, so that the
//! reads of VMA's `GpuMemDumpVis.py` find every block.

use std::collections::{BTreeSet, HashSet};

use ash::vk;
use serde_json::Value;
use vk_suballoc::device::fake::FakeLayout;
use vk_suballoc::report::{DetailedStats, RangeKind};

use super::super::{allocator, finish};

use super::{
    assert_stats, free_pools, map_rows, parse, populate, populate_pools, type_figures, u, KIB, MIB,
    POOL_NAME,
};

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
