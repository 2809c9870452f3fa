//! Debug margins (`Config::debug_margin`) and corruption detection in them
//! (`Config::detect_corruption`, `Allocator::check_corruption`).

use std::collections::HashMap;

use ash::vk;
use vk_suballoc::device::fake::{FakeDevice, FakeLayout};
use vk_suballoc::{
    Allocation, AllocationDesc, Config, DedicatedPolicy, DefragmentationLimits, Error, PoolDesc,
    Request, ResourceKind, Usage,
};

use super::defragment::movables;
use super::frames::end_frame;
use super::seeded_rng::Rng;
use super::{allocator_with, buffer, finish, free, requirements, FakeAllocator};

const MIB: u64 = 1 << 20;

/// The discrete layout's types: device-local, and host-visible coherent
/// (where `UPLOAD` lands).
const VRAM: u32 = 1;
const HOST: u32 = 2;

fn with_margin(margin: u64, detect: bool) -> Config {
    Config {
        debug_margin: margin,
        detect_corruption: detect,
        ..Config::default()
    }
}

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

/// Writes `bytes` at `offset` bytes past the start of `allocation`, as a
/// GPU overrun would.
fn gpu_write(device: &FakeDevice, allocation: &Allocation, offset: u64, bytes: &[u8]) {
    // SAFETY: no slice of the allocation is alive across the call.
    let written = unsafe { device.write(allocation.memory(), allocation.offset() + offset, bytes) };
    assert!(written);
}

/// Every live allocation of one memory object starts at least `margin`
/// bytes after the end of the one before it.
fn assert_apart(live: &[Allocation], margin: u64, context: &str) {
    let mut by_memory: HashMap<vk::DeviceMemory, Vec<(u64, u64)>> = HashMap::new();
    for a in live.iter().filter(|a| !a.is_dedicated()) {
        by_memory
            .entry(a.memory())
            .or_default()
            .push((a.offset(), a.size()));
    }
    for ranges in by_memory.values_mut() {
        ranges.sort_unstable();
        for pair in ranges.windows(2) {
            let ((offset, size), (next, _)) = (pair[0], pair[1]);
            assert!(
                offset + size + margin <= next,
                "{context}: {next} is within {margin} bytes of {offset}+{size}"
            );
        }
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

/// One byte past the end, or a word at the margin's end, is seen when the
/// allocation is freed: logged with its name and counted. Its neighbours'
/// frees find nothing.
#[test]
fn an_overrun_is_caught_when_its_allocation_is_freed() {
    super::leak_log::install();
    let (allocator, device) = allocator_with(FakeLayout::discrete(), with_margin(16, true));
    for (size, past, name) in [
        (1000, 0, "overrun one byte past"),
        (1000, 12, "overrun at the margin's end"),
        (100, 0, "overrun of a run slot"),
    ] {
        let before = allocator
            .allocate(&buffer(size, 16, Usage::UPLOAD))
            .unwrap();
        let victim = allocator
            .allocate(&buffer(size, 16, Usage::UPLOAD).name(name))
            .unwrap();
        let after = allocator
            .allocate(&buffer(size, 16, Usage::UPLOAD))
            .unwrap();
        assert_eq!(victim.memory_type(), HOST);
        let count = allocator.corruptions_detected();
        gpu_write(
            &device,
            &victim,
            size + past,
            &[0xAB; 4][..if past == 0 { 1 } else { 4 }],
        );
        let (offset, memory_type) = (victim.offset(), victim.memory_type());
        free(&allocator, before);
        assert_eq!(allocator.corruptions_detected(), count, "{name}");
        free(&allocator, victim);
        assert_eq!(allocator.corruptions_detected(), count + 1, "{name}");
        free(&allocator, after);
        assert_eq!(allocator.corruptions_detected(), count + 1, "{name}");
        let lines = super::leak_log::lines();
        let line = lines
            .iter()
            .find(|line| line.contains(name))
            .unwrap_or_else(|| panic!("no line names {name:?}: {lines:#?}"));
        for figure in [
            format!("memory type {memory_type}"),
            format!("offset {offset}"),
            format!("size {size}"),
        ] {
            assert!(line.contains(&figure), "{line:?} lacks {figure:?}");
        }
    }
    finish(allocator, &device);
}

/// A free through the frame queue checks the margin when the frame is
/// collected.
#[test]
fn an_overrun_is_caught_when_a_queued_free_is_released() {
    let (allocator, device) = allocator_with(FakeLayout::discrete(), with_margin(8, true));
    let a = allocator
        .allocate(&buffer(4000, 64, Usage::UPLOAD))
        .unwrap();
    gpu_write(&device, &a, 4000, &[0; 4]);
    allocator.free_after_frame(a).unwrap();
    assert_eq!(allocator.corruptions_detected(), 0);
    device.signal_fence(end_frame(&allocator, &device));
    allocator.collect().unwrap();
    assert_eq!(allocator.corruptions_detected(), 1);
    finish(allocator, &device);
}

/// `check_corruption` lists the live allocations whose margins were
/// written over, in blocks, run slots and custom pools, with their
/// names; once freed they are gone from it.
#[test]
fn check_corruption_lists_damaged_margins() {
    let (allocator, device) = allocator_with(FakeLayout::discrete(), with_margin(32, true));
    let pool = allocator
        .create_pool(&PoolDesc::new(HOST).block_size(4 * MIB).name("staging pool"))
        .unwrap();
    let in_pool = Request::with_desc(
        requirements(3000, 256),
        ResourceKind::Buffer,
        AllocationDesc::new(Usage::UPLOAD).pool(pool).name("pooled"),
    );
    let mut live = vec![
        allocator
            .allocate(&buffer(MIB, 256, Usage::UPLOAD).name("large"))
            .unwrap(),
        allocator
            .allocate(&buffer(200, 16, Usage::UPLOAD).name("small"))
            .unwrap(),
        allocator.allocate(&in_pool).unwrap(),
        allocator
            .allocate(&buffer(5000, 256, Usage::UPLOAD))
            .unwrap(),
    ];
    let clean = allocator.check_corruption(!0).unwrap();
    assert!(clean.is_clean(), "{clean:?}");
    assert_eq!(clean.checked, 4);
    for a in &live[..3] {
        gpu_write(&device, a, a.size() + 28, &[1, 2, 3, 4]);
    }
    let report = allocator.check_corruption(1 << HOST).unwrap();
    assert_eq!(report.checked, 4);
    let mut found: Vec<_> = report
        .damaged
        .iter()
        .map(|d| (d.name.as_deref(), d.memory_type, d.memory, d.offset, d.size))
        .collect();
    found.sort_unstable();
    let mut want: Vec<_> = [
        ("large", &live[0]),
        ("pooled", &live[2]),
        ("small", &live[1]),
    ]
    .iter()
    .map(|(name, a)| (Some(*name), HOST, a.memory(), a.offset(), a.size()))
    .collect();
    want.sort_unstable();
    assert_eq!(found, want);
    assert!(report.damaged.iter().all(|d| d.margin >= 32));
    // Types without detection in the mask are skipped.
    assert_eq!(allocator.check_corruption(!0).unwrap(), report);
    free(&allocator, live.remove(0));
    assert_eq!(allocator.corruptions_detected(), 1);
    assert_eq!(allocator.check_corruption(!0).unwrap().damaged.len(), 2);
    for a in live {
        free(&allocator, a);
    }
    assert_eq!(allocator.corruptions_detected(), 3);
    assert_eq!(allocator.check_corruption(!0).unwrap(), Default::default());
    allocator.destroy_pool(pool).unwrap();
    finish(allocator, &device);
}

/// Only the memory types asked for are checked: a damaged margin in
/// another type with detection on (`READBACK`'s cached type) is neither
/// counted nor listed until that type is asked for too.
#[test]
fn check_corruption_checks_only_the_types_asked_for() {
    let (allocator, device) = allocator_with(FakeLayout::discrete(), with_margin(32, true));
    let upload = allocator
        .allocate(&buffer(MIB, 256, Usage::UPLOAD))
        .unwrap();
    let readback = allocator
        .allocate(&buffer(MIB, 256, Usage::READBACK))
        .unwrap();
    let cached = readback.memory_type();
    assert_eq!(upload.memory_type(), HOST);
    assert_ne!(cached, HOST);
    gpu_write(&device, &readback, readback.size() + 28, &[1, 2, 3, 4]);
    let report = allocator.check_corruption(1 << HOST).unwrap();
    assert_eq!((report.checked, report.damaged.len()), (1, 0), "{report:?}");
    let report = allocator.check_corruption(1 << HOST | 1 << cached).unwrap();
    assert_eq!((report.checked, report.damaged.len()), (2, 1), "{report:?}");
    assert_eq!(report.damaged[0].memory_type, cached);
    free(&allocator, upload);
    free(&allocator, readback);
    assert_eq!(allocator.corruptions_detected(), 1);
    finish(allocator, &device);
}

/// Memory types without detection are refused with a typed error: device
/// local (not host-visible), non-coherent host-visible, and every type
/// when detection or the margin is off.
#[test]
fn check_corruption_refuses_types_without_detection() {
    let off = |bits| {
        Err(Error::CorruptionDetectionOff {
            memory_type_bits: bits,
        })
    };
    let (allocator, device) = allocator_with(FakeLayout::discrete(), with_margin(16, true));
    assert_eq!(allocator.check_corruption(1 << VRAM), off(1 << VRAM));
    assert_eq!(allocator.check_corruption(0), off(0));
    assert!(allocator.check_corruption(1 << HOST).is_ok());
    finish(allocator, &device);
    // Mobile: type 2 is host-visible, cached and not coherent.
    let (allocator, device) = allocator_with(FakeLayout::mobile(), with_margin(16, true));
    assert_eq!(allocator.check_corruption(1 << 2), off(1 << 2));
    assert!(allocator.check_corruption(1 << 1).is_ok());
    finish(allocator, &device);
    for config in [with_margin(16, false), with_margin(0, true)] {
        let (allocator, device) = allocator_with(FakeLayout::discrete(), config);
        assert_eq!(allocator.check_corruption(!0), off(!0));
        finish(allocator, &device);
    }
    // AMD: types 5 to 7 are host-visible and coherent, but device-coherent,
    // which the allocator does not use without the feature; their
    // counterparts 1 to 3 are checked.
    let (allocator, device) = allocator_with(FakeLayout::amd(), with_margin(16, true));
    let device_coherent = 0b1110_0000;
    assert_eq!(
        allocator.check_corruption(device_coherent),
        off(device_coherent)
    );
    assert!(allocator.check_corruption(0b1110).is_ok());
    finish(allocator, &device);
}

/// A readback in non-coherent memory (mobile's type 2), read as the docs
/// say (the GPU writes, the host invalidates, then reads and frees),
/// reports no corruption: its margin is not checked, as the invalidate,
/// widened to whole atoms, takes in the margin and would have dropped a
/// pattern the host wrote there without a flush.
#[test]
fn non_coherent_readbacks_report_no_corruption() {
    let (allocator, device) = allocator_with(FakeLayout::mobile(), with_margin(16, true));
    for size in [1000, 100] {
        let mut readback = allocator
            .allocate(&buffer(size, 16, Usage::READBACK))
            .unwrap();
        assert_eq!(readback.memory_type(), 2, "size {size}");
        gpu_write(&device, &readback, 0, &vec![0x5A; size as usize]);
        allocator.invalidate(&mut readback, ..).unwrap();
        let read = allocator.mapped_slice(&readback).unwrap().to_vec();
        assert!(read.iter().all(|&byte| byte == 0x5A), "size {size}");
        free(&allocator, readback);
        assert_eq!(allocator.corruptions_detected(), 0, "size {size}");
    }
    finish(allocator, &device);
}

/// Allocations that fill their whole slice, over a long random run with
/// frees now and after frames, never damage a margin.
#[test]
fn no_false_positives_on_a_long_random_run() {
    let mut rng = Rng::from_env("no_false_positives_on_a_long_random_run");
    let (allocator, device) = allocator_with(FakeLayout::discrete(), with_margin(4, true));
    let mut live: Vec<Allocation> = Vec::new();
    for step in 0..4000u32 {
        match rng.below(10) {
            0..=4 if live.len() < 200 => {
                let largest = if rng.below(16) == 0 { MIB } else { 4096 };
                let size = 1 + rng.below(largest);
                let alignment = 1 << rng.below(9);
                let mut a = allocator
                    .allocate(&buffer(size, alignment, Usage::UPLOAD))
                    .unwrap();
                allocator.mapped_slice_mut(&mut a).unwrap().fill(step as u8);
                live.push(a);
            }
            0..=7 if !live.is_empty() => {
                let a = live.swap_remove(rng.below(live.len() as u64) as usize);
                if rng.below(2) == 0 {
                    free(&allocator, a);
                } else {
                    allocator.free_after_frame(a).unwrap();
                }
            }
            8 => device.signal_fence(end_frame(&allocator, &device)),
            _ => {
                allocator.collect().unwrap();
                let report = allocator.check_corruption(!0).unwrap();
                assert!(report.is_clean(), "step {step}: {report:?}");
            }
        }
    }
    for a in live {
        free(&allocator, a);
    }
    device.signal_fence(end_frame(&allocator, &device));
    allocator.collect().unwrap();
    assert_eq!(allocator.corruptions_detected(), 0);
    finish(allocator, &device);
}

/// The other side of the run above: over a long random run of
/// allocations (ranges and run slots) freed at once or after their frame,
/// a write past the end of a live allocation into its margin, by the
/// host or by the GPU, is listed by every `check_corruption` while the
/// allocation lives (queued for its frame included), and counted once,
/// when it is freed; nothing else is listed or counted. With debug fills
/// on too, which fill the margin's bytes again at the free.
#[test]
fn every_overrun_in_a_long_random_run_is_found_once() {
    let mut rng = Rng::from_env("every_overrun_in_a_long_random_run_is_found_once");
    for fills in [false, true] {
        let config = Config {
            debug_fill: fills,
            // Small blocks: `check_corruption` reads every free byte
            // with fills on.
            large_heap_block_size: 4 * MIB,
            ..with_margin(16, true)
        };
        let (allocator, device) = allocator_with(FakeLayout::discrete(), config);
        // Live allocations, whether each was overrun, and those queued
        // for their frame (still listed until the frame is collected).
        let mut live: Vec<(Allocation, bool)> = Vec::new();
        let mut queued: Vec<(vk::DeviceMemory, u64, bool, u64)> = Vec::new();
        let mut fences = Vec::new();
        let (mut overruns, mut freed_overrun) = (0u64, 0u64);
        for step in 0..2000u32 {
            let ctx = format!("fills {fills} step {step}");
            let action = rng.below(12);
            match action {
                0..=4 if live.len() < 150 => {
                    let largest = if rng.below(16) == 0 { MIB } else { 4096 };
                    let size = 1 + rng.below(largest);
                    let alignment = 1 << rng.below(9);
                    let a = allocator
                        .allocate(&buffer(size, alignment, Usage::UPLOAD))
                        .unwrap();
                    live.push((a, false));
                }
                5..=7 if !live.is_empty() => {
                    let (a, overrun) = live.swap_remove(rng.below(live.len() as u64) as usize);
                    if rng.below(2) == 0 {
                        free(&allocator, a);
                        freed_overrun += u64::from(overrun);
                    } else {
                        let frame = allocator.current_frame();
                        queued.push((a.memory(), a.offset(), overrun, frame));
                        allocator.free_after_frame(a).unwrap();
                    }
                }
                8 if !live.is_empty() => {
                    let index = rng.below(live.len() as u64) as usize;
                    let (a, overrun) = &mut live[index];
                    if !*overrun {
                        // One byte of the margin's 16, past the end.
                        let past = a.size() + rng.below(16);
                        if rng.below(2) == 0 {
                            gpu_write(&device, a, past, &[0x42]);
                        } else {
                            let pointer = a.mapped_ptr().unwrap();
                            // SAFETY: the overrun on purpose: inside the
                            // allocation's margin in its mapped block,
                            // which no other allocation holds.
                            unsafe { pointer.as_ptr().add(past as usize).write(0x42) };
                        }
                        *overrun = true;
                        overruns += 1;
                    }
                }
                9 => fences.push(end_frame(&allocator, &device)),
                _ => {
                    for fence in fences.drain(..) {
                        device.signal_fence(fence);
                    }
                    allocator.collect().unwrap();
                    // Every ended frame is collected; the current one stays.
                    let current = allocator.current_frame();
                    let collected = queued.iter().filter(|q| q.3 < current);
                    freed_overrun += collected.filter(|q| q.2).count() as u64;
                    queued.retain(|q| q.3 == current);
                }
            }
            // After each overrun and collect, and every few steps.
            if action < 8 && step % 8 != 0 {
                assert_eq!(allocator.corruptions_detected(), freed_overrun, "{ctx}");
                continue;
            }
            let report = allocator.check_corruption(!0).unwrap();
            let mut found: Vec<_> = report
                .damaged
                .iter()
                .map(|d| (d.memory, d.offset))
                .collect();
            found.sort_unstable();
            let mut want: Vec<_> = live
                .iter()
                .filter(|(_, overrun)| *overrun)
                .map(|(a, _)| (a.memory(), a.offset()))
                .chain(queued.iter().filter(|q| q.2).map(|q| (q.0, q.1)))
                .collect();
            want.sort_unstable();
            assert_eq!(found, want, "{ctx}");
            assert!(report.written_after_free.is_empty(), "{ctx}: {report:?}");
            assert_eq!(allocator.corruptions_detected(), freed_overrun, "{ctx}");
        }
        for (a, overrun) in live {
            free(&allocator, a);
            freed_overrun += u64::from(overrun);
        }
        for fence in fences {
            device.signal_fence(fence);
        }
        device.signal_fence(end_frame(&allocator, &device));
        allocator.collect().unwrap();
        freed_overrun += queued.iter().filter(|q| q.2).count() as u64;
        assert_eq!(freed_overrun, overruns);
        assert_eq!(allocator.corruptions_detected(), overruns, "fills {fills}");
        assert!(overruns > 50, "fills {fills}: {overruns} overruns");
        finish(allocator, &device);
    }
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

/// Defragmentation's destinations keep their margins, patterned: the plan
/// leaves every margin intact, and an overrun of a destination is caught.
#[test]
fn defragmentation_destinations_keep_margins() {
    let (allocator, device, all) = upload_buffers_with_margins(64);
    let first = all[0].memory();
    assert!(all.iter().any(|a| a.memory() != first));
    // Every other buffer of the first block, and most of the rest.
    let mut live = Vec::new();
    for (i, a) in all.into_iter().enumerate() {
        if (a.memory() == first && i % 2 == 0) || (a.memory() != first && i % 8 == 0) {
            live.push(a);
        } else {
            free(&allocator, a);
        }
    }
    let movables = movables(&live);
    let plan = allocator
        .plan_defragmentation(&movables, &DefragmentationLimits::default())
        .unwrap();
    assert!(!plan.moves.is_empty());
    overrun_a_destination_then_move(allocator, &device, live, plan.moves, 0);
}

/// `count` upload buffers of 1 MiB − 4 KiB with patterned margins of 256
/// bytes, no runs, on the discrete layout.
fn upload_buffers_with_margins(count: usize) -> (FakeAllocator, FakeDevice, Vec<Allocation>) {
    let config = Config {
        small_buffer_limit: 0,
        ..with_margin(256, true)
    };
    let (allocator, device) = allocator_with(FakeLayout::discrete(), config);
    let all: Vec<Allocation> = (0..count)
        .map(|_| {
            allocator
                .allocate(&buffer(MIB - 4096, 256, Usage::UPLOAD))
                .unwrap()
        })
        .collect();
    (allocator, device, all)
}

/// Checks that `moves` left every pattern intact, overruns the first
/// destination by `past_end + 1` bytes on the GPU (caught by
/// `check_corruption`), carries the moves out over `live`, and frees
/// everything: the overrun is counted once, at its destination's free.
fn overrun_a_destination_then_move(
    allocator: FakeAllocator,
    device: &FakeDevice,
    mut live: Vec<Allocation>,
    mut moves: Vec<vk_suballoc::DefragmentationMove>,
    past_end: u64,
) {
    assert!(allocator.check_corruption(!0).unwrap().is_clean());
    let destination = &moves[0].destination;
    gpu_write(device, destination, destination.size() + past_end, &[0xFF]);
    assert_eq!(allocator.check_corruption(!0).unwrap().damaged.len(), 1);
    for planned in moves.drain(..).rev() {
        let old = std::mem::replace(&mut live[planned.movable], planned.destination);
        free(&allocator, old);
    }
    assert_apart(&live, 256, "after the moves");
    assert_eq!(allocator.corruptions_detected(), 0);
    for a in live {
        free(&allocator, a);
    }
    assert_eq!(allocator.corruptions_detected(), 1);
    finish(allocator, device);
}

/// Compaction's destinations, lower in their own block, keep their
/// margins too: each lands wholly below its source, margin included, the
/// plan leaves every pattern intact, and an overrun of a destination is
/// caught.
#[test]
fn compaction_destinations_keep_margins() {
    let (allocator, device, all) = upload_buffers_with_margins(16);
    let block = all[0].memory();
    assert!(all.iter().all(|a| a.memory() == block));
    // Every other buffer: holes below the survivors.
    let mut live = Vec::new();
    for (i, a) in all.into_iter().enumerate() {
        if i % 2 == 1 {
            live.push(a);
        } else {
            free(&allocator, a);
        }
    }
    let movables = movables(&live);
    let limits = DefragmentationLimits::default()
        .max_used_percent(0)
        .compact_blocks(true);
    let plan = allocator.plan_defragmentation(&movables, &limits).unwrap();
    assert_eq!(plan.blocks_compacted, 1);
    assert!(plan.moves.len() >= 2);
    for planned in &plan.moves {
        let (source, destination) = (movables[planned.movable].allocation, &planned.destination);
        assert_eq!(destination.memory(), block);
        assert!(destination.offset() + destination.size() + 256 <= source.offset());
    }
    drop(movables);
    overrun_a_destination_then_move(allocator, &device, live, plan.moves, 255);
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

/// Frees queued for their frame count as gone from their block with their
/// margins: a block of small buffers with 64 KiB margins, most of them
/// queued, is nearly empty and a plan empties it. (Counted by their
/// requested size alone, the queued frees left it 80 % in use, over the
/// default limit.)
#[test]
fn queued_frees_leave_with_their_margins() {
    let config = Config {
        small_buffer_limit: 0,
        ..with_margin(65536, false)
    };
    let (allocator, device) = allocator_with(FakeLayout::discrete(), config);
    let small: Vec<Allocation> = (0..400)
        .map(|_| {
            allocator
                .allocate(&buffer(4096, 256, Usage::DEVICE_LOCAL))
                .unwrap()
        })
        .collect();
    let first = small[0].memory();
    assert!(small.iter().all(|a| a.memory() == first));
    // A second block that has room for the survivors.
    let large = allocator
        .allocate(&buffer(24 * MIB, 256, Usage::DEVICE_LOCAL))
        .unwrap();
    assert_ne!(large.memory(), first);
    let mut live = Vec::new();
    for (i, a) in small.into_iter().enumerate() {
        if i % 8 == 0 {
            live.push(a);
        } else {
            allocator.free_after_frame(a).unwrap();
        }
    }
    let movables = movables(&live);
    let plan = allocator
        .plan_defragmentation(&movables, &DefragmentationLimits::default())
        .unwrap();
    drop(movables);
    assert_eq!((plan.blocks_released, plan.moves.len()), (1, live.len()));
    for planned in plan.moves.into_iter().rev() {
        let old = std::mem::replace(&mut live[planned.movable], planned.destination);
        free(&allocator, old);
    }
    assert!(live.iter().all(|a| a.memory() == large.memory()));
    for a in live {
        free(&allocator, a);
    }
    free(&allocator, large);
    super::frames::finish_after_frame(allocator, &device);
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
