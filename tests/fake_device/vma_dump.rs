//! The VMA-format JSON dump of an odd state (names that need every escape,
//! run slots live and free, dedicated memory, named and unnamed custom
//! pools, kept empty blocks, frees waiting in the frame queue), parsed with
//! serde_json and read as VMA's `GpuMemDumpVis.py` reads it: the keys it
//! indexes, with the types it converts, every figure an integer, and each
//! `Stats` object the sum of what the detailed map shows.

use std::collections::BTreeMap;

use ash::vk;
use serde_json::{Map, Value};
use vk_suballoc::device::fake::{FakeDevice, FakeLayout};
use vk_suballoc::report::MemoryMap;
use vk_suballoc::{
    Allocation, AllocationDesc, Config, DedicatedPolicy, Pool, PoolDesc, Request, ResourceKind,
    Usage,
};

use super::frames::end_frame;
use super::report::{map_rows, u};
use super::seeded_rng::Rng;
use super::{allocator, allocator_with, buffer, finish, free, requirements, FakeAllocator};

const KIB: u64 = 1 << 10;

/// Names that need JSON escapes or that naive writers get wrong: empty,
/// quotes, backslashes, every kind of control character, the line and
/// paragraph separators (valid JSON, invalid in old JavaScript), a byte
/// order mark, markup, and astral characters.
const ODD: [&str; 8] = [
    "",
    "\"quoted\" \\ C:\\path\\",
    "nul \u{0} bell \u{7} esc \u{1b} unit \u{1f} del \u{7f}",
    "tab\tcr\rlf\nff\u{c}bs\u{8}",
    "line\u{2028}paragraph\u{2029}next\u{85}",
    "\u{feff}bom é 🦀 \u{10ffff}",
    "</svg><!-- & ]]> '",
    "{\"Type\": \"FREE\", \"Size\": 1}, ",
];

/// A VMA `Stats` object's figures, as `VmaPrintDetailedStatistics` writes
/// them (min and max only with two or more).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Figures {
    blocks: u64,
    block_bytes: u64,
    allocations: u64,
    allocation_bytes: u64,
    unused_ranges: u64,
    allocation_min: Option<u64>,
    allocation_max: Option<u64>,
    unused_min: Option<u64>,
    unused_max: Option<u64>,
}

fn min_of(a: Option<u64>, b: Option<u64>) -> Option<u64> {
    a.into_iter().chain(b).min()
}

fn max_of(a: Option<u64>, b: Option<u64>) -> Option<u64> {
    a.into_iter().chain(b).max()
}

impl Figures {
    fn add(self, other: Self) -> Self {
        Self {
            blocks: self.blocks + other.blocks,
            block_bytes: self.block_bytes + other.block_bytes,
            allocations: self.allocations + other.allocations,
            allocation_bytes: self.allocation_bytes + other.allocation_bytes,
            unused_ranges: self.unused_ranges + other.unused_ranges,
            allocation_min: min_of(self.allocation_min, other.allocation_min),
            allocation_max: max_of(self.allocation_max, other.allocation_max),
            unused_min: min_of(self.unused_min, other.unused_min),
            unused_max: max_of(self.unused_max, other.unused_max),
        }
    }

    fn allocation(size: u64) -> Self {
        Self {
            allocations: 1,
            allocation_bytes: size,
            allocation_min: Some(size),
            allocation_max: Some(size),
            ..Self::default()
        }
    }

    fn unused(size: u64) -> Self {
        Self {
            unused_ranges: 1,
            unused_min: Some(size),
            unused_max: Some(size),
            ..Self::default()
        }
    }

    /// What the JSON must say: min and max only from two on.
    fn to_json(self) -> Value {
        let mut object = Map::new();
        object.insert("BlockCount".into(), self.blocks.into());
        object.insert("BlockBytes".into(), self.block_bytes.into());
        object.insert("AllocationCount".into(), self.allocations.into());
        object.insert("AllocationBytes".into(), self.allocation_bytes.into());
        object.insert("UnusedRangeCount".into(), self.unused_ranges.into());
        if self.allocations > 1 {
            object.insert("AllocationSizeMin".into(), self.allocation_min.into());
            object.insert("AllocationSizeMax".into(), self.allocation_max.into());
        }
        if self.unused_ranges > 1 {
            object.insert("UnusedRangeSizeMin".into(), self.unused_min.into());
            object.insert("UnusedRangeSizeMax".into(), self.unused_max.into());
        }
        Value::Object(object)
    }
}

fn object(value: &Value) -> &Map<String, Value> {
    value
        .as_object()
        .unwrap_or_else(|| panic!("not an object: {value}"))
}

fn array(value: &Value) -> &Vec<Value> {
    value
        .as_array()
        .unwrap_or_else(|| panic!("not an array: {value}"))
}

/// Every number in `value` is an unsigned integer (VMA writes no floats,
/// and `GpuMemDumpVis.py` converts sizes with `int()`).
fn assert_integers_only(value: &Value) {
    match value {
        Value::Number(n) => assert!(n.is_u64(), "{n} is not an unsigned integer"),
        Value::Array(items) => items.iter().for_each(assert_integers_only),
        Value::Object(map) => map.values().for_each(assert_integers_only),
        _ => {}
    }
}

/// One pool's `DedicatedAllocations` and `Blocks`, read as
/// `GpuMemDumpVis.py` reads them (`ProcessBlock` and the dedicated loop);
/// checks that each block's suballocations tile it in address order, with
/// its own figures right; returns the pool's figures, names in address
/// order, and its rows.
fn read_pool(pool: &Value, names: &mut Vec<String>) -> (Figures, usize) {
    let mut figures = Figures::default();
    let dedicated = array(&pool["DedicatedAllocations"]);
    for d in dedicated {
        assert!(d["Type"].is_string() && d["Type"] != "FREE", "{d}");
        let size = u(&d["Size"]);
        assert_eq!(u(&d["Usage"]), 0);
        figures = figures.add(Figures {
            blocks: 1,
            block_bytes: size,
            ..Figures::allocation(size)
        });
        if let Some(name) = d.get("Name") {
            names.push(name.as_str().unwrap().to_owned());
        }
    }
    let blocks = object(&pool["Blocks"]);
    for (id, block) in blocks {
        assert!(id.parse::<u32>().is_ok(), "block key {id:?}");
        let total = u(&block["TotalBytes"]);
        assert!(u(&block["MapRefCount"]) <= 1);
        let mut block_figures = Figures {
            blocks: 1,
            block_bytes: total,
            ..Figures::default()
        };
        let mut end = 0;
        let mut previous_free = false;
        let mut unused_bytes = 0;
        for range in array(&block["Suballocations"]) {
            // GpuMemDumpVis draws each range after the one before, by size
            // alone: the offsets must follow on.
            assert_eq!(u(&range["Offset"]), end, "block {id}: {range}");
            let size = u(&range["Size"]);
            assert!(size > 0, "block {id}: {range}");
            end += size;
            let kind = range["Type"].as_str().unwrap();
            if kind == "FREE" {
                assert!(!previous_free, "block {id}: two free ranges in a row");
                assert_eq!(object(range).len(), 3, "{range}");
                unused_bytes += size;
                block_figures = block_figures.add(Figures::unused(size));
            } else {
                assert!(
                    ["BUFFER", "IMAGE_LINEAR", "IMAGE_OPTIMAL"].contains(&kind),
                    "{kind}"
                );
                assert_eq!(u(&range["Usage"]), 0);
                block_figures = block_figures.add(Figures::allocation(size));
                if let Some(name) = range.get("Name") {
                    names.push(name.as_str().unwrap().to_owned());
                }
            }
            previous_free = kind == "FREE";
        }
        assert_eq!(end, total, "block {id}: ranges do not cover it");
        assert_eq!(u(&block["UnusedBytes"]), unused_bytes, "block {id}");
        assert_eq!(u(&block["Allocations"]), block_figures.allocations);
        assert_eq!(u(&block["UnusedRanges"]), block_figures.unused_ranges);
        figures = figures.add(block_figures);
    }
    (figures, dedicated.len() + blocks.len())
}

/// Reads the whole dump as `GpuMemDumpVis.py` and checks every `Stats`
/// object against the detailed map. Returns the names found and the rows
/// GpuMemDumpVis draws.
fn read_dump(json: &Value, map: &MemoryMap) -> (Vec<String>, usize) {
    assert_integers_only(json);
    let top: Vec<&str> = object(json).keys().map(String::as_str).collect();
    assert_eq!(
        top,
        [
            "CustomPools",
            "DefaultPools",
            "General",
            "MemoryInfo",
            "Total"
        ]
    );
    assert_eq!(json["General"]["API"], "Vulkan");
    let mut names = Vec::new();
    let mut rows = 0;
    let mut per_type: BTreeMap<String, Figures> = BTreeMap::new();
    for (key, pool) in object(&json["DefaultPools"]) {
        assert!(u(&pool["PreferredBlockSize"]) > 0);
        let (figures, pool_rows) = read_pool(pool, &mut names);
        rows += pool_rows;
        *per_type.entry(key.clone()).or_default() = figures;
    }
    for (key, pools) in object(&json["CustomPools"]) {
        let mut pool_names = Vec::new();
        for (index, pool) in array(pools).iter().enumerate() {
            let name = pool["Name"].as_str().expect("every custom pool has a Name");
            assert!(
                name == index.to_string() || name.starts_with(&format!("{index} - ")),
                "{name:?}"
            );
            pool_names.push(name.to_owned());
            let (figures, pool_rows) = read_pool(pool, &mut names);
            rows += pool_rows;
            let entry = per_type
                .get_mut(key)
                .expect("custom pools of a listed type");
            *entry = entry.add(figures);
        }
        pool_names.sort();
        pool_names.dedup();
        assert_eq!(
            pool_names.len(),
            array(pools).len(),
            "GpuMemDumpVis keys pools by Name"
        );
    }
    // Per type, per heap and in total, the figures are the sums of the map.
    let mut total = Figures::default();
    for (heap_key, heap) in object(&json["MemoryInfo"]) {
        assert!(heap["Flags"].is_array());
        assert!(u(&heap["Size"]) > 0);
        assert!(heap["Budget"]["BudgetBytes"].is_u64());
        assert!(heap["Budget"]["UsageBytes"].is_u64());
        let mut heap_figures = Figures::default();
        for (type_key, memory_type) in object(&heap["MemoryPools"]) {
            assert!(array(&memory_type["Flags"]).iter().all(Value::is_string));
            let figures = per_type[type_key];
            assert_eq!(memory_type["Stats"], figures.to_json(), "{type_key}");
            heap_figures = heap_figures.add(figures);
        }
        assert_eq!(heap["Stats"], heap_figures.to_json(), "{heap_key}");
        total = total.add(heap_figures);
    }
    assert_eq!(json["Total"], total.to_json(), "Total");
    assert_eq!(
        total.allocations,
        map.allocation_count() as u64,
        "the map's allocations"
    );
    (names, rows)
}

fn image(size: u64, alignment: u64, kind: ResourceKind) -> Request<'static> {
    Request::new(requirements(size, alignment), Usage::DEVICE_LOCAL, kind)
}

#[test]
fn json_dump_of_an_odd_state_reads_as_gpu_mem_dump_vis_reads_it() {
    let (allocator, device) = allocator(FakeLayout::discrete());
    let long_name = "long \\\"name\" ".repeat(4096);
    let mut names: Vec<String> = ODD.iter().map(|&n| n.to_owned()).collect();
    names.push(long_name.clone());
    let mut live: Vec<Allocation> = Vec::new();
    let mut expected_names: Vec<String> = Vec::new();
    let mut keep = |allocation: Allocation, name: Option<&str>| {
        if let Some(name) = name {
            expected_names.push(name.to_owned());
        }
        live.push(allocation);
    };

    // Small buffers in run slots, each named, every other freed: free
    // slots between live ones.
    let mut freed_slots = Vec::new();
    for (i, name) in names.iter().enumerate() {
        let slot = allocator
            .allocate(&buffer(256, 16, Usage::DEVICE_LOCAL).name(name))
            .unwrap();
        let other = allocator
            .allocate(&buffer(256, 16, Usage::DEVICE_LOCAL).name("to free"))
            .unwrap();
        keep(slot, Some(name));
        if i % 2 == 0 {
            freed_slots.push(other);
        } else {
            keep(other, Some("to free"));
        }
    }
    for slot in freed_slots {
        free(&allocator, slot);
    }
    // Ranges of their own: buffers and images of both tilings.
    for (i, name) in names.iter().enumerate() {
        let kind = [
            ResourceKind::Buffer,
            ResourceKind::LinearImage,
            ResourceKind::OptimalImage,
        ][i % 3];
        let a = allocator
            .allocate(&image(64 * KIB + 100, 4 * KIB, kind).name(name))
            .unwrap();
        keep(a, Some(name));
    }
    // Dedicated memory, named oddly and unnamed.
    let dedicated = |name: Option<&str>| {
        let request = Request::with_desc(
            requirements(3 * KIB, 256),
            ResourceKind::OptimalImage,
            AllocationDesc::new(Usage::DEVICE_LOCAL).dedicated(DedicatedPolicy::Always),
        );
        match name {
            Some(name) => allocator.allocate(&request.name(name)).unwrap(),
            None => allocator.allocate(&request).unwrap(),
        }
    };
    keep(dedicated(Some(ODD[1])), Some(ODD[1]));
    keep(dedicated(None), None);
    // A kept empty block in the upload type.
    let staging = allocator
        .allocate(&buffer(128 * KIB, 256, Usage::UPLOAD))
        .unwrap();
    free(&allocator, staging);
    // Custom pools: one with an empty name holding a range, a slot and
    // dedicated memory; one with a name that needs escaping and an empty
    // block kept by min_blocks; one unnamed.
    let vram = allocator.memory_type_for(!0, Usage::DEVICE_LOCAL).unwrap();
    let pools = [
        allocator
            .create_pool(&PoolDesc::new(vram).name("").block_size(1 << 20))
            .unwrap(),
        allocator
            .create_pool(&PoolDesc::new(vram).name(ODD[2]).min_blocks(1))
            .unwrap(),
        allocator.create_pool(&PoolDesc::new(vram)).unwrap(),
    ];
    for (pool, name) in [(&pools[0], ODD[4]), (&pools[2], ODD[6])] {
        let desc = AllocationDesc::new(Usage::DEVICE_LOCAL).pool(*pool);
        for (size, policy) in [
            (96 * KIB, DedicatedPolicy::Never),
            (512, DedicatedPolicy::Never),
            (8 * KIB, DedicatedPolicy::Always),
        ] {
            let request = Request::with_desc(
                requirements(size, 256),
                ResourceKind::Buffer,
                desc.dedicated(policy),
            );
            keep(allocator.allocate(&request.name(name)).unwrap(), Some(name));
        }
    }
    // Frees waiting in the frame queue are still live memory: the dump
    // shows them until `collect` releases them.
    let queued = allocator
        .allocate(&buffer(32 * KIB, 256, Usage::DEVICE_LOCAL).name("queued"))
        .unwrap();
    allocator.free_after_frame(queued).unwrap();
    expected_names.push("queued".to_owned());
    let fence = end_frame(&allocator, &device);

    let map = allocator.memory_map();
    let stats = allocator.stats();
    let text = map.to_vma_json(true);
    let json: Value =
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("invalid JSON ({e}):\n{text}"));
    let (mut found, rows) = read_dump(&json, &map);

    // Every name comes back exactly, as often as it was given.
    found.sort();
    expected_names.sort();
    assert_eq!(found, expected_names);
    // No key written twice (serde_json keeps the last): as many blocks and
    // rows as the map holds.
    assert_eq!(rows, map_rows(&map));
    // And the dump agrees with stats(): memory objects, bytes, allocations.
    assert_eq!(
        u(&json["Total"]["BlockCount"]),
        u64::from(stats.memory_objects)
    );
    assert_eq!(u(&json["Total"]["BlockBytes"]), stats.reserved_bytes());
    assert_eq!(u(&json["Total"]["AllocationCount"]), stats.allocations());
    let empty_blocks: u64 = stats.memory_types.iter().map(|t| t.empty_blocks).sum();
    assert!(empty_blocks >= 2, "the upload type's and the pool's");
    // Custom pool names as VMA writes them.
    let custom = array(&json["CustomPools"][format!("Type {vram}")]);
    let pool_names: Vec<&str> = custom.iter().map(|p| p["Name"].as_str().unwrap()).collect();
    assert_eq!(pool_names, ["0 - ", &format!("1 - {}", ODD[2]), "2"]);

    // For a look with VMA's tools: the dump and the picture, written where
    // this names.
    if let Ok(dir) = std::env::var("VK_SUBALLOC_DUMP_DIR") {
        std::fs::write(format!("{dir}/odd.json"), &text).unwrap();
        std::fs::write(format!("{dir}/odd.svg"), map.to_svg()).unwrap();
    }

    tear_down(allocator, &device, [fence], live, pools);
}

/// Signals `fences` and collects their frames, frees `live`, destroys
/// `pools`: the device must then hold nothing.
fn tear_down(
    allocator: FakeAllocator,
    device: &FakeDevice,
    fences: impl IntoIterator<Item = vk::Fence>,
    live: Vec<Allocation>,
    pools: impl IntoIterator<Item = Pool>,
) {
    for fence in fences {
        device.signal_fence(fence);
    }
    allocator.collect().unwrap();
    for allocation in live {
        free(&allocator, allocation);
    }
    for pool in pools {
        allocator.destroy_pool(pool).unwrap();
    }
    finish(allocator, device);
}

/// Random allocations (run slots, ranges, dedicated memory, custom pools,
/// odd names), frees, frees after a frame, frames ended and collected, and
/// trims, on a layout and configuration the seed picks (debug margins,
/// runs off, a coarse granularity): after every step, each `Stats` object
/// of the dump is the sum of its detailed map, which reads as
/// GpuMemDumpVis reads it, and agrees with `stats()`; the SVG draws every
/// allocation.
#[test]
fn random_states_dump_figures_that_add_up() {
    let mut rng = Rng::from_env("random_states_dump_figures_that_add_up");
    let layouts = [
        FakeLayout::discrete(),
        FakeLayout::integrated(),
        FakeLayout::mobile(),
        FakeLayout::amd().with_granularity(64 * KIB),
    ];
    let layout = layouts[rng.below(layouts.len() as u64) as usize].clone();
    let mut config = Config::default();
    if rng.below(3) == 0 {
        config.debug_margin = 64;
        config.detect_corruption = true;
    }
    if rng.below(3) == 0 {
        config.small_buffer_limit = 0;
    }
    let (allocator, device) = allocator_with(layout, config);
    let vram = allocator.memory_type_for(!0, Usage::DEVICE_LOCAL).unwrap();
    let pools = [
        allocator
            .create_pool(
                &PoolDesc::new(vram)
                    .name(ODD[1])
                    .block_size(1 << 20)
                    .min_blocks(1),
            )
            .unwrap(),
        allocator.create_pool(&PoolDesc::new(vram)).unwrap(),
    ];
    let mut live: Vec<Allocation> = Vec::new();
    let mut fences = Vec::new();
    for step in 0..200 {
        match rng.below(10) {
            0..=4 => {
                let size = match rng.below(3) {
                    0 => 1 + rng.below(2 * KIB),
                    1 => 1 + rng.below(64 * KIB),
                    _ => 1 + rng.below(4 << 20),
                };
                let kinds = [
                    ResourceKind::Buffer,
                    ResourceKind::LinearImage,
                    ResourceKind::OptimalImage,
                ];
                let usages = [Usage::DEVICE_LOCAL, Usage::UPLOAD, Usage::READBACK];
                let mut desc = AllocationDesc::new(usages[rng.below(3) as usize]);
                if rng.below(4) == 0 {
                    let pool = pools[rng.below(2) as usize];
                    desc = AllocationDesc::new(Usage::DEVICE_LOCAL).pool(pool);
                }
                if rng.below(8) == 0 {
                    desc = desc.dedicated(DedicatedPolicy::Always);
                }
                let requirements = requirements(size, 1 << rng.below(13));
                let request = Request::with_desc(requirements, kinds[rng.below(3) as usize], desc);
                let name = ODD[rng.below(ODD.len() as u64) as usize];
                let request = if rng.below(2) == 0 {
                    request.name(name)
                } else {
                    request
                };
                // A full custom pool or heap refuses: nothing to check.
                if let Ok(allocation) = allocator.allocate(&request) {
                    live.push(allocation);
                }
            }
            5 | 6 if !live.is_empty() => {
                let at = rng.below(live.len() as u64) as usize;
                free(&allocator, live.swap_remove(at));
            }
            7 if !live.is_empty() => {
                let at = rng.below(live.len() as u64) as usize;
                allocator.free_after_frame(live.swap_remove(at)).unwrap();
            }
            8 => {
                fences.push(end_frame(&allocator, &device));
                if fences.len() > 2 {
                    device.signal_fence(fences.remove(0));
                    allocator.collect().unwrap();
                }
            }
            _ => {
                if rng.below(4) == 0 {
                    allocator.trim();
                }
            }
        }
        let ctx = format!("step {step}");
        let map = allocator.memory_map();
        let stats = allocator.stats();
        let text = map.to_vma_json(true);
        let json: Value = serde_json::from_str(&text)
            .unwrap_or_else(|e| panic!("{ctx}: invalid JSON ({e}):\n{text}"));
        let (_, rows) = read_dump(&json, &map);
        assert_eq!(rows, map_rows(&map), "{ctx}: a key written twice");
        let total = &json["Total"];
        assert_eq!(
            u(&total["BlockCount"]),
            u64::from(stats.memory_objects),
            "{ctx}"
        );
        assert_eq!(u(&total["BlockBytes"]), stats.reserved_bytes(), "{ctx}");
        assert_eq!(u(&total["AllocationCount"]), stats.allocations(), "{ctx}");
        for t in &map.memory_types {
            let blocks = t.custom_pools.iter().flat_map(|p| &p.blocks);
            let empty = (t.blocks.iter().chain(blocks))
                .filter(|b| b.allocations().next().is_none())
                .count() as u64;
            let s = &stats.memory_types[t.memory_type as usize];
            assert_eq!(empty, s.empty_blocks, "{ctx}: type {}", t.memory_type);
        }
        let svg = map.to_svg();
        let drawn = svg.matches("class=\"alloc ").count();
        assert_eq!(drawn, map.allocation_count(), "{ctx}");
    }
    fences.push(end_frame(&allocator, &device));
    tear_down(allocator, &device, fences, live, pools);
}
