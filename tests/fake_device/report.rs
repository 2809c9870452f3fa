//! Statistics dumps: the VMA-format JSON agrees with `stats()` and with the
//! live allocations, byte for byte; names survive escaping; the memory map
//! tiles every block. The SVG picture of the map is tested in `svg.rs`.
//!
//! The tests sit in the files below by what they check. This file holds
//! what they share, and what `svg.rs` and `vma_dump.rs` use: a state
//! populated in four memory types and in two custom pools, with the
//! allocations the dump must show (`populate`, `populate_pools`, freed by
//! `free_all` and `free_pools`), and the reading of a dump's JSON and its
//! figures (`parse`, `u`, `map_rows`, `assert_stats`, `type_figures`).

use crate::FakeTarget;
use ash::vk;
use serde_json::Value;
use vk_suballoc::device::DedicatedTarget;
use vk_suballoc::report::{MemoryMap, Stats};
use vk_suballoc::{
    Allocation, AllocationDesc, DedicatedPolicy, Pool, PoolDesc, Request, ResourceKind, Usage,
};

use super::{buffer, free, requirements, FakeAllocator};

#[path = "report/custom_pools.rs"]
mod custom_pools;
#[path = "report/json_dump.rs"]
mod json_dump;
#[path = "report/map_contents.rs"]
mod map_contents;
#[path = "report/names_and_ids.rs"]
mod names_and_ids;

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
        let target = request.target().map(|target| match target {
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
            .fake_target(DedicatedTarget::Image(image_target))
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
