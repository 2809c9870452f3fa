//! The checks of the pattern in the margins: an overrun caught when its
//! allocation or its queued free is released, `check_corruption` listing
//! the damaged margins of the types asked for and refusing types without
//! detection, `check_pool_corruption` checking one custom pool, and
//! non-coherent readbacks reporting nothing. Each test writes past one
//! allocation on purpose and looks for it once.

use ash::vk::Handle;
use vk_suballoc::device::fake::FakeLayout;
use vk_suballoc::{AllocationDesc, Error, PoolDesc, Request, ResourceKind, Usage};

use super::super::frames::end_frame;
use super::super::leak_log::{record_thread_lines, take_thread_lines};
use super::super::{allocator_with, buffer, finish, free, requirements};

use super::{gpu_write, with_margin, HOST, MIB, VRAM};

/// The margin holds VMA's pattern, `0x7F84E666` in little-endian words
/// from the allocation's end, over the whole tail the allocation takes in
/// its block (the margin and its size's rounding), as the README and
/// `Config::detect_corruption` say; a damaged one is logged as an error
/// (`log::error!`), not a warning.
#[test]
fn margins_hold_vma_s_pattern_and_damage_is_an_error() {
    record_thread_lines();
    let (allocator, device) = allocator_with(FakeLayout::discrete(), with_margin(16, true));
    // 1000 bytes and a 16-byte margin take 1024 (1016 rounded up): a tail
    // of 24 bytes.
    let a = allocator
        .allocate(&buffer(1000, 16, Usage::UPLOAD).name("patterned"))
        .unwrap();
    assert_eq!(a.memory_type(), HOST);
    // SAFETY: no slice of the allocation is alive.
    let tail = unsafe { device.read(a.memory(), a.offset() + 1000, 24) }.unwrap();
    let pattern: Vec<u8> = 0x7F84_E666u32.to_le_bytes().repeat(6);
    assert_eq!(tail, pattern);
    gpu_write(&device, &a, 1000, &[0]);
    free(&allocator, a);
    let damaged: Vec<String> = take_thread_lines()
        .into_iter()
        .filter(|line| line.contains("margin was written over"))
        .collect();
    assert_eq!(damaged.len(), 1, "{damaged:#?}");
    assert!(damaged[0].starts_with("ERROR: "), "{damaged:#?}");
    finish(allocator, &device);
}

/// On a device of one memory type (lavapipe's), that type's bit is the
/// whole of the allocator's debug types (`MemoryContext::is_debug_type`
/// tests it alone): its allocations get the pattern and their frees
/// check it, as where the other types have none.
#[test]
fn the_only_memory_type_of_a_device_is_checked() {
    let (allocator, device) = allocator_with(FakeLayout::lavapipe(), with_margin(16, true));
    let a = allocator
        .allocate(&buffer(1000, 16, Usage::UPLOAD).name("only type"))
        .unwrap();
    assert_eq!(a.memory_type(), 0);
    // SAFETY: no slice of the allocation is alive.
    let margin = unsafe { device.read(a.memory(), a.offset() + 1000, 16) }.unwrap();
    assert_eq!(margin, 0x7F84_E666u32.to_le_bytes().repeat(4));
    gpu_write(&device, &a, 1000, &[0]);
    free(&allocator, a);
    assert_eq!(allocator.corruptions_detected(), 1);
    finish(allocator, &device);
}

/// One byte past the end, or a word at the margin's end, is seen when the
/// allocation is freed: logged with its name and counted. Its neighbours'
/// frees find nothing.
#[test]
fn an_overrun_is_caught_when_its_allocation_is_freed() {
    super::super::leak_log::install();
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
        let memory = victim.memory().as_raw();
        free(&allocator, before);
        assert_eq!(allocator.corruptions_detected(), count, "{name}");
        free(&allocator, victim);
        assert_eq!(allocator.corruptions_detected(), count + 1, "{name}");
        free(&allocator, after);
        assert_eq!(allocator.corruptions_detected(), count + 1, "{name}");
        let lines = super::super::leak_log::lines();
        let line = lines
            .iter()
            .find(|line| line.contains(name))
            .unwrap_or_else(|| panic!("no line names {name:?}: {lines:#?}"));
        for figure in [
            format!("memory type {memory_type}"),
            format!("memory {memory:#x}"),
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

/// `check_pool_corruption` (VMA's `vmaCheckPoolCorruption`) checks one
/// custom pool: its damaged margin is listed, the default blocks' and
/// another pool's of the same memory type are not; a pool of a type
/// without detection is refused as `check_corruption` refuses the type, and
/// a destroyed or another allocator's pool with the pool errors.
#[test]
fn check_pool_corruption_checks_that_pool_alone() {
    let (allocator, device) = allocator_with(FakeLayout::discrete(), with_margin(32, true));
    let pools = [0, 1].map(|_| {
        allocator
            .create_pool(&PoolDesc::new(HOST).block_size(4 * MIB))
            .unwrap()
    });
    let pooled = |pool, name| {
        Request::with_desc(
            requirements(3000, 256),
            ResourceKind::Buffer,
            AllocationDesc::new(Usage::UPLOAD).pool(pool).name(name),
        )
    };
    let live = [
        allocator.allocate(&pooled(pools[0], "mine")).unwrap(),
        allocator
            .allocate(&pooled(pools[0], "mine, clean"))
            .unwrap(),
        allocator.allocate(&pooled(pools[1], "other pool")).unwrap(),
        allocator
            .allocate(&buffer(3000, 256, Usage::UPLOAD).name("default"))
            .unwrap(),
    ];
    assert_eq!(live[3].memory_type(), HOST);
    for a in [&live[0], &live[2], &live[3]] {
        gpu_write(&device, a, a.size() + 28, &[1, 2, 3, 4]);
    }
    let report = allocator.check_pool_corruption(&pools[0]).unwrap();
    assert_eq!(report.checked, 2, "{report:?}");
    let damaged: Vec<_> = report.damaged.iter().map(|d| d.name.as_deref()).collect();
    assert_eq!(damaged, [Some("mine")]);
    let report = allocator.check_pool_corruption(&pools[1]).unwrap();
    assert_eq!((report.checked, report.damaged.len()), (1, 1), "{report:?}");

    let vram_pool = allocator.create_pool(&PoolDesc::new(VRAM)).unwrap();
    assert_eq!(
        allocator.check_pool_corruption(&vram_pool),
        Err(Error::CorruptionDetectionOff {
            memory_type_bits: 1 << VRAM
        })
    );
    allocator.destroy_pool(vram_pool).unwrap();
    assert_eq!(
        allocator.check_pool_corruption(&vram_pool),
        Err(Error::StalePool)
    );
    let (other, other_device) = allocator_with(FakeLayout::discrete(), with_margin(32, true));
    assert_eq!(
        other.check_pool_corruption(&pools[0]),
        Err(Error::ForeignPool)
    );
    finish(other, &other_device);
    for a in live {
        free(&allocator, a);
    }
    for pool in pools {
        allocator.destroy_pool(pool).unwrap();
    }
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

/// `Config::allocation_backtraces` sends every memory type down the debug
/// paths, but checks none: alone it leaves `check_corruption` and
/// `check_pool_corruption` refusing every type, and beside detection it
/// adds no type to those checked (device-local memory, where margins get no
/// pattern, is still refused).
#[test]
fn backtraces_turn_no_corruption_checks_on() {
    let off = |bits| {
        Err(Error::CorruptionDetectionOff {
            memory_type_bits: bits,
        })
    };
    let traced = |config| vk_suballoc::Config {
        allocation_backtraces: true,
        ..config
    };
    let (allocator, device) = allocator_with(
        FakeLayout::discrete(),
        traced(vk_suballoc::Config::default()),
    );
    let live = [Usage::UPLOAD, Usage::DEVICE_LOCAL]
        .map(|usage| allocator.allocate(&buffer(4096, 256, usage)).unwrap());
    assert_eq!(allocator.check_corruption(!0), off(!0));
    assert_eq!(allocator.check_corruption(1 << HOST), off(1 << HOST));
    let pool = allocator.create_pool(&PoolDesc::new(HOST)).unwrap();
    assert_eq!(allocator.check_pool_corruption(&pool), off(1 << HOST));
    allocator.destroy_pool(pool).unwrap();
    for a in live {
        free(&allocator, a);
    }
    finish(allocator, &device);

    let (allocator, device) = allocator_with(FakeLayout::discrete(), traced(with_margin(16, true)));
    assert_eq!(allocator.check_corruption(1 << VRAM), off(1 << VRAM));
    let pool = allocator.create_pool(&PoolDesc::new(VRAM)).unwrap();
    assert_eq!(allocator.check_pool_corruption(&pool), off(1 << VRAM));
    allocator.destroy_pool(pool).unwrap();
    assert!(allocator.check_corruption(1 << HOST).is_ok());
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
