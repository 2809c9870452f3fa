//! Where margins go: a margin the config refuses, allocations kept a
//! margin apart (runs' slots, custom pools and device-local blocks
//! included, dedicated memory left out), aliases that end at the
//! allocation's end, and the memory map showing a margin that `stats`
//! does not count. These tests check the layout, not the pattern's
//! checks, so they sit apart from the overrun tests.

use vk_suballoc::device::fake::{FakeDevice, FakeLayout};
use vk_suballoc::{
    Allocation, AllocationDesc, Config, DedicatedPolicy, Error, PoolDesc, Request, ResourceKind,
    Usage,
};

use super::super::seeded_rng::Rng;
use super::super::{allocator_with, buffer, finish, free, requirements, FakeAllocator};

use super::{assert_apart, gpu_write, with_margin, HOST, MIB, VRAM};

/// A margin must be a multiple of the pattern's 4-byte word, and at most
/// 64 KiB (a margin of gigabytes made every block request fail as out of
/// device memory).
#[test]
fn a_margin_not_a_multiple_of_4_is_refused() {
    for margin in [1, 2, 3, 6, 17, 1022, 65540, 1 << 40, u64::MAX - 3] {
        let result = FakeAllocator::new(
            FakeDevice::new(FakeLayout::discrete()),
            with_margin(margin, true),
        );
        assert_eq!(
            result.err(),
            Some(Error::InvalidConfig(
                "debug_margin must be a multiple of 4 and at most 65536"
            )),
            "margin {margin}"
        );
    }
    for margin in [0, 4, 16, 4096, 65536] {
        let (allocator, device) = allocator_with(FakeLayout::discrete(), with_margin(margin, true));
        finish(allocator, &device);
    }
}

/// Random sizes, alignments, usages and kinds, runs on and off: no
/// allocation starts within the margin of the one before it, and the
/// figures count requested bytes only. Seeded (`VK_SUBALLOC_SEED`).
#[test]
fn margins_keep_allocations_apart() {
    let mut rng = Rng::from_env("margins_keep_allocations_apart");
    for (margin, runs) in [(4, true), (64, true), (256, false), (1024, true)] {
        let config = Config {
            small_buffer_limit: if runs { 16384 } else { 0 },
            ..with_margin(margin, true)
        };
        let layout = if rng.below(2) == 0 {
            FakeLayout::discrete()
        } else {
            FakeLayout::mobile()
        };
        let (allocator, device) = allocator_with(layout, config);
        let mut live: Vec<Allocation> = Vec::new();
        for step in 0..1500 {
            if live.len() > 60 || (live.len() > 20 && rng.below(2) == 0) {
                let index = rng.below(live.len() as u64) as usize;
                free(&allocator, live.swap_remove(index));
                continue;
            }
            let size = match rng.below(3) {
                0 => 1 + rng.below(256),
                1 => 1 + rng.below(20_000),
                _ => 1 + rng.below(2 * MIB),
            };
            let alignment = 1 << rng.below(13);
            let kind = [
                ResourceKind::Buffer,
                ResourceKind::LinearImage,
                ResourceKind::OptimalImage,
            ][rng.below(3) as usize];
            let usage =
                [Usage::DEVICE_LOCAL, Usage::UPLOAD, Usage::READBACK][rng.below(3) as usize];
            let request = Request::new(requirements(size, alignment), usage, kind);
            live.push(allocator.allocate(&request).unwrap());
            if step % 100 == 0 {
                assert_apart(&live, margin, &format!("margin {margin} step {step}"));
            }
        }
        assert_apart(&live, margin, &format!("margin {margin}"));
        let stats = allocator.stats();
        let requested: u64 = live.iter().map(Allocation::size).sum();
        assert_eq!(stats.live_bytes(), requested);
        for a in live {
            free(&allocator, a);
        }
        assert_eq!(allocator.corruptions_detected(), 0);
        finish(allocator, &device);
    }
}

/// Small buffers take a size class holding their margin: 100 bytes
/// aligned to 16 with a 16-byte margin take 128-byte slots, not 112.
#[test]
fn run_slots_hold_the_margin() {
    let (allocator, device) = allocator_with(FakeLayout::discrete(), with_margin(16, true));
    let seed = allocator
        .allocate(&buffer(MIB, 256, Usage::UPLOAD))
        .unwrap();
    let small: Vec<Allocation> = (0..10)
        .map(|_| allocator.allocate(&buffer(100, 16, Usage::UPLOAD)).unwrap())
        .collect();
    let mut offsets: Vec<u64> = small.iter().map(Allocation::offset).collect();
    offsets.sort_unstable();
    let gaps: Vec<u64> = offsets.windows(2).map(|w| w[1] - w[0]).collect();
    assert_eq!(gaps, [128; 9]);
    assert_eq!(allocator.stats().live_bytes(), MIB + 1000);
    let report = allocator.check_corruption(1 << HOST).unwrap();
    assert_eq!((report.checked, report.damaged.len()), (11, 0));
    for a in small.into_iter().chain([seed]) {
        free(&allocator, a);
    }
    finish(allocator, &device);
}

/// Dedicated memory has the exact size, no margin, and no check.
#[test]
fn dedicated_memory_gets_no_margin() {
    let (allocator, device) = allocator_with(FakeLayout::discrete(), with_margin(256, true));
    let a = allocator
        .allocate(&buffer(1000, 16, Usage::UPLOAD).dedicated(DedicatedPolicy::Always))
        .unwrap();
    assert!(a.is_dedicated());
    let sizes: Vec<u64> = device.live_allocations().iter().map(|m| m.size).collect();
    assert_eq!(sizes, [1000]);
    assert_eq!(allocator.check_corruption(!0).unwrap().checked, 0);
    free(&allocator, a);
    assert_eq!(allocator.corruptions_detected(), 0);
    finish(allocator, &device);
}

/// A custom pool's allocations keep their margins, and a pool whose fixed
/// blocks leave no room for one refuses the request as too large.
#[test]
fn custom_pools_keep_margins() {
    let (allocator, device) = allocator_with(FakeLayout::discrete(), with_margin(64, true));
    let pool = allocator
        .create_pool(&PoolDesc::new(HOST).block_size(MIB).max_blocks(1))
        .unwrap();
    let in_pool = |size| {
        Request::with_desc(
            requirements(size, 16),
            ResourceKind::Buffer,
            AllocationDesc::new(Usage::UPLOAD).pool(pool),
        )
    };
    assert_eq!(
        allocator.allocate(&in_pool(MIB - 32)).err(),
        Some(Error::TooLargeForPool {
            size: MIB + 32,
            block_size: MIB
        })
    );
    let live: Vec<Allocation> = (0..100)
        .map(|i| allocator.allocate(&in_pool(1000 + i * 37)).unwrap())
        .collect();
    assert_apart(&live, 64, "pool");
    gpu_write(&device, &live[50], live[50].size() + 63, &[0]);
    let report = allocator.check_corruption(1 << HOST).unwrap();
    assert_eq!(report.damaged.len(), 1);
    assert_eq!(report.damaged[0].offset, live[50].offset());
    for a in live {
        free(&allocator, a);
    }
    assert_eq!(allocator.corruptions_detected(), 1);
    allocator.destroy_pool(pool).unwrap();
    finish(allocator, &device);
}

/// A request for memory type bits that the kind of check would skip gets
/// margins in every type: device-local blocks too, with no pattern.
#[test]
fn device_local_blocks_get_margins_without_a_pattern() {
    let (allocator, device) = allocator_with(FakeLayout::discrete(), with_margin(128, true));
    let live: Vec<Allocation> = (0..20)
        .map(|i| {
            allocator
                .allocate(&buffer(3000 + i, 64, Usage::DEVICE_LOCAL))
                .unwrap()
        })
        .collect();
    assert!(live.iter().all(|a| a.memory_type() == VRAM));
    assert_apart(&live, 128, "device-local");
    assert_eq!(allocator.check_corruption(!0).unwrap().checked, 0);
    for a in live {
        free(&allocator, a);
    }
    finish(allocator, &device);
}

/// An alias may span the allocation's own bytes only: the margin after it
/// is not the allocation's.
#[test]
fn aliases_end_where_the_allocation_ends() {
    let (allocator, device) = allocator_with(FakeLayout::discrete(), with_margin(256, true));
    let a = allocator
        .allocate(&buffer(4096, 256, Usage::UPLOAD))
        .unwrap();
    let fits = requirements(4096, 256);
    assert_eq!(
        allocator.check_alias(&a, 0, &fits, ResourceKind::Buffer),
        Ok(())
    );
    let into_margin = requirements(4100, 4);
    assert_eq!(
        allocator.check_alias(&a, 0, &into_margin, ResourceKind::Buffer),
        Err(Error::RangeOutOfBounds {
            start: 0,
            end: 4100,
            size: 4096
        })
    );
    free(&allocator, a);
    finish(allocator, &device);
}

/// `Config::debug_margin`'s docs: the allocation and the live-byte figures
/// of `stats` report the requested size, while memory maps and dumps show
/// the range with the bytes it holds, margin included (rounded to its
/// alignment), as `RangeMap::size` says.
#[test]
fn maps_show_the_margin_and_stats_do_not() {
    let config = Config {
        small_buffer_limit: 0,
        ..with_margin(256, false)
    };
    let (allocator, device) = allocator_with(FakeLayout::discrete(), config);
    let a = allocator
        .allocate(&buffer(1000, 256, Usage::DEVICE_LOCAL))
        .unwrap();
    assert_eq!(a.size(), 1000);
    assert_eq!(allocator.stats().live_bytes(), 1000);
    let map = allocator.memory_map();
    let block = &map.memory_types[a.memory_type() as usize].blocks[0];
    let range = block
        .allocations()
        .find(|r| r.offset == a.offset())
        .unwrap();
    // 1000 + 256 rounded up to 256.
    assert_eq!(range.size, 1280);
    let json: serde_json::Value = serde_json::from_str(&allocator.stats_json(true)).unwrap();
    let blocks = &json["DefaultPools"][format!("Type {}", a.memory_type())]["Blocks"];
    let sizes: Vec<u64> = blocks[block.id.to_string()]["Suballocations"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["Type"] != "FREE")
        .map(|r| r["Size"].as_u64().unwrap())
        .collect();
    assert_eq!(sizes, vec![1280]);
    free(&allocator, a);
    finish(allocator, &device);
}
