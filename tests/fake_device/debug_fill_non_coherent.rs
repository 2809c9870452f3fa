//! Debug fills in non-coherent memory: mobile's cached readback type and
//! MoltenVK's managed type. Fills are flushed, so the device reads them
//! too; checks look at the host's view, then invalidate and look at the
//! device's, so a GPU write after free is caught as a host one is; and
//! neither ever reaches a live neighbour's atoms: its unflushed host
//! writes, and its GPU writes the host has not invalidated yet, survive
//! every fill and check. The fake device keeps the two views apart and
//! reports any range off the atoms (`finish`).

use vk_suballoc::device::fake::{FakeDevice, FakeLayout};
use vk_suballoc::{
    Allocation, AllocationDesc, Config, DedicatedPolicy, PoolDesc, Request, ResourceKind, Usage,
};

use super::debug_fill::{all, bytes_at, device_bytes, write_at, written_after_free, FREED, NEW};
use super::{allocator_with, finish, free, requirements, FakeAllocator};

#[path = "debug_fill_non_coherent/panicking_backend.rs"]
mod panicking_backend;

const MIB: u64 = 1 << 20;

/// Mobile's host-visible cached, non-coherent type (256-byte atoms).
const CACHED: u32 = 2;

/// MoltenVK's managed type (16-byte atoms), non-coherent.
const MANAGED: u32 = 1;

fn with_fill() -> Config {
    Config {
        debug_fill: true,
        large_heap_block_size: 4 * MIB,
        small_heap_limit: 0,
        ..Config::default()
    }
}

/// A `size`-byte buffer request for readback memory (mobile's cached
/// type), in `pool` when given.
fn readback(size: u64, pool: Option<vk_suballoc::Pool>) -> Request<'static> {
    let mut desc = AllocationDesc::new(Usage::READBACK);
    if let Some(pool) = pool {
        desc = desc.pool(pool);
    }
    Request::with_desc(requirements(size, 16), ResourceKind::Buffer, desc)
}

/// An allocation's bytes as the host sees them, and as the device does.
fn views(device: &FakeDevice, a: &Allocation) -> (Vec<u8>, Vec<u8>) {
    let host = bytes_at(a.mapped_ptr().unwrap(), a.size());
    let gpu = device_bytes(device, a.memory(), a.offset(), a.size());
    (host, gpu)
}

/// New allocations (a range, a run slot, a custom pool's range, dedicated
/// memory) read `0xDC` in both views, the byte after one `0xEF`; freed,
/// their bytes read `0xEF` in both; on mobile's cached type and on
/// MoltenVK's managed type (through a custom pool, the default pools
/// preferring the coherent type).
#[test]
fn both_views_read_the_fills() {
    for (layout, memory_type) in [
        (FakeLayout::mobile(), CACHED),
        (FakeLayout::apple(), MANAGED),
    ] {
        let name = layout.name;
        let (allocator, device) = allocator_with(layout, with_fill());
        let pool = allocator
            .create_pool(&PoolDesc::new(memory_type).block_size(MIB))
            .unwrap();
        let default = (memory_type == CACHED).then_some(None);
        let pools = default.into_iter().chain([Some(pool)]);
        for pool in pools {
            let keeper = allocator.allocate(&readback(64, pool)).unwrap();
            let mut cases = vec![
                ("range", readback(100_000, pool)),
                ("run slot", readback(100, pool)),
            ];
            if pool.is_none() {
                cases.push((
                    "dedicated",
                    readback(20_000, None).dedicated(DedicatedPolicy::Always),
                ));
            }
            for (case, request) in cases {
                let ctx = format!("{name} {case} pool {pool:?}");
                let a = allocator.allocate(&request).unwrap();
                assert_eq!(a.memory_type(), memory_type, "{ctx}");
                let (host, gpu) = views(&device, &a);
                assert!(all(&host, NEW) && all(&gpu, NEW), "{ctx}: not filled");
                if a.is_dedicated() {
                    free(&allocator, a);
                    continue;
                }
                let end = a.offset() + a.size();
                assert_eq!(device_bytes(&device, a.memory(), end, 1), [FREED], "{ctx}");
                let (memory, offset, size) = (a.memory(), a.offset(), a.size());
                let pointer = a.mapped_ptr().unwrap();
                free(&allocator, a);
                assert!(all(&bytes_at(pointer, size), FREED), "{ctx}: host");
                let gpu = device_bytes(&device, memory, offset, size);
                assert!(all(&gpu, FREED), "{ctx}: device");
            }
            let report = allocator.check_corruption(1 << memory_type).unwrap();
            assert!(report.is_clean() && report.free_checked >= 1, "{report:?}");
            free(&allocator, keeper);
        }
        assert_eq!(allocator.corruptions_detected(), 0);
        allocator.destroy_pool(pool).unwrap();
        finish(allocator, &device);
    }
}

/// A host write through a pointer kept from a freed allocation, never
/// flushed, and a GPU write into freed memory, which the host sees only
/// once it is invalidated, are caught: by `check_corruption` (the first
/// byte written), and when an allocation takes the bytes again (whether
/// or not `check_corruption` looked first); the new allocation reads
/// `0xDC` in both views, and the free ranges are clean again. In a range
/// and in a run slot.
#[test]
fn writes_after_free_are_caught() {
    super::leak_log::install();
    let (allocator, device) = allocator_with(FakeLayout::mobile(), with_fill());
    let keeper = allocator.allocate(&readback(64, None)).unwrap();
    let mut count = 0;
    for (case, size, at) in [("range", 50_000, 4321), ("run slot", 200, 199)] {
        for gpu in [false, true] {
            for checked_first in [false, true] {
                let ctx = format!("{case}, gpu {gpu}, checked first {checked_first}");
                let request = readback(size, None);
                let a = allocator.allocate(&request).unwrap();
                let (memory, offset, pointer) = (a.memory(), a.offset(), a.mapped_ptr().unwrap());
                free(&allocator, a);
                assert!(
                    allocator.check_corruption(1 << CACHED).unwrap().is_clean(),
                    "{ctx}"
                );
                if gpu {
                    // SAFETY: no slice of these bytes is alive.
                    assert!(unsafe { device.write(memory, offset + at, &[0x42]) });
                    assert!(all(&bytes_at(pointer, size), FREED), "{ctx}: host sees it");
                } else {
                    write_at(pointer, at, &[0x42]);
                    let gpu = device_bytes(&device, memory, offset, size);
                    assert!(all(&gpu, FREED), "{ctx}: flushed");
                }
                if checked_first {
                    let report = allocator.check_corruption(1 << CACHED).unwrap();
                    assert_eq!(report.written_after_free.len(), 1, "{ctx}: {report:?}");
                    let written = &report.written_after_free[0];
                    assert_eq!(
                        (written.memory, written.first_changed),
                        (memory, offset + at),
                        "{ctx}"
                    );
                }
                let again = allocator.allocate(&request).unwrap();
                assert_eq!((again.memory(), again.offset()), (memory, offset), "{ctx}");
                count += 1;
                assert_eq!(allocator.corruptions_detected(), count, "{ctx}");
                let (host, gpu) = views(&device, &again);
                assert!(all(&host, NEW) && all(&gpu, NEW), "{ctx}");
                let needle = format!("byte {} of memory {memory:?}", offset + at);
                let lines = super::leak_log::lines();
                assert!(
                    lines.iter().any(|l| l.contains(&needle)),
                    "{ctx}: {lines:#?}"
                );
                assert!(allocator.check_corruption(!0).unwrap().is_clean(), "{ctx}");
                free(&allocator, again);
            }
        }
    }
    assert_eq!(allocator.corruptions_detected(), count);
    free(&allocator, keeper);
    finish(allocator, &device);
}

/// A GPU write into freed memory that no allocation took again is caught
/// when its empty block is released: the block is invalidated whole.
#[test]
fn a_gpu_write_is_caught_when_its_block_is_released() {
    let (allocator, device) = allocator_with(FakeLayout::mobile(), with_fill());
    let a = allocator.allocate(&readback(50_000, None)).unwrap();
    let (memory, offset) = (a.memory(), a.offset());
    free(&allocator, a);
    // SAFETY: no slice of these bytes is alive.
    assert!(unsafe { device.write(memory, offset + 77, &[0x42]) });
    assert!(allocator.trim() > 0);
    assert!(device.live_allocations().is_empty());
    assert_eq!(allocator.corruptions_detected(), 1);
    finish(allocator, &device);
}

/// A host write into freed memory that no allocation took again is caught
/// when its empty block is released, though it was never flushed: the
/// block is read as the host sees it before it is invalidated, which
/// would drop the write.
#[test]
fn an_unflushed_host_write_is_caught_when_its_block_is_released() {
    let (allocator, device) = allocator_with(FakeLayout::mobile(), with_fill());
    let a = allocator.allocate(&readback(50_000, None)).unwrap();
    let pointer = a.mapped_ptr().unwrap();
    free(&allocator, a);
    write_at(pointer, 77, &[0x42]);
    assert!(allocator.trim() > 0);
    assert!(device.live_allocations().is_empty());
    assert_eq!(allocator.corruptions_detected(), 1);
    finish(allocator, &device);
}

/// `check_corruption` finds a GPU write after free wherever the free
/// bytes lie: in a free range between two live allocations, in a free
/// run slot between two live ones, and in the last atom of a block whose
/// size is no multiple of the atom (an invalidate may end at the
/// memory's end, partial atom and all). Each is reported once, at its
/// byte, and nothing is once the byte reads `0xEF` again.
#[test]
fn gpu_writes_after_free_are_found_anywhere_in_a_block() {
    let (allocator, device) = allocator_with(FakeLayout::mobile(), with_fill());
    // 256-byte atoms: the block's last 100 bytes are part of one.
    let block_size = MIB + 100;
    let pool = allocator
        .create_pool(&PoolDesc::new(CACHED).block_size(block_size))
        .unwrap();
    let keeper = allocator.allocate(&readback(1000, Some(pool))).unwrap();
    let (memory, base) = (keeper.memory(), keeper.offset());
    let pointer = keeper.mapped_ptr().unwrap();
    let found_at = |at: u64| {
        // SAFETY: no slice of these bytes is alive.
        assert!(unsafe { device.write(memory, at, &[0x42]) });
        let report = allocator.check_corruption(1 << CACHED).unwrap();
        let found = written_after_free(&report);
        // Both views read 0xEF again (the check invalidated the GPU's
        // byte into the host's view).
        // SAFETY: as above.
        assert!(unsafe { device.write(memory, at, &[FREED]) });
        write_at(pointer, at - base, &[FREED]);
        let report = allocator.check_corruption(1 << CACHED).unwrap();
        assert!(report.is_clean(), "{report:?}");
        found
    };
    assert_eq!(found_at(block_size - 1), [(memory, block_size - 1)]);
    let mut kept = vec![keeper];
    for (case, size) in [("range", 1000), ("run slot", 100)] {
        let [before, middle, after] =
            [0; 3].map(|_| allocator.allocate(&readback(size, Some(pool))).unwrap());
        assert!(
            [&before, &middle, &after]
                .iter()
                .all(|a| a.memory() == memory),
            "{case}"
        );
        assert!(before.offset() < middle.offset(), "{case}");
        assert!(middle.offset() < after.offset(), "{case}");
        let at = middle.offset() + size - 1;
        free(&allocator, middle);
        assert_eq!(found_at(at), [(memory, at)], "{case}");
        kept.extend([before, after]);
    }
    for a in kept {
        free(&allocator, a);
    }
    allocator.destroy_pool(pool).unwrap();
    assert_eq!(allocator.corruptions_detected(), 0);
    finish(allocator, &device);
}

/// A device failing the invalidate of a new allocation's check and the
/// flush of its fill (out of host memory) costs a warning each, naming
/// the call, the bytes and the memory, and nothing else: the allocation
/// is made, reads `0xDC` as the host sees it, and is freed.
#[test]
fn a_failed_flush_or_invalidate_of_a_fill_is_logged_and_ignored() {
    super::leak_log::install();
    let (allocator, device) = allocator_with(FakeLayout::mobile(), with_fill());
    let keeper = allocator.allocate(&readback(50_000, None)).unwrap();
    device.fail_invalidate(1);
    device.fail_flush(1);
    let a = allocator.allocate(&readback(50_000, None)).unwrap();
    assert_eq!(a.memory(), keeper.memory());
    assert!(all(&bytes_at(a.mapped_ptr().unwrap(), a.size()), NEW));
    let lines = super::leak_log::lines();
    for call in ["invalidate", "flush"] {
        let needle = format!("debug fill: the {call} of bytes {}..", a.offset());
        let memory = format!("of memory {:?} failed", a.memory());
        assert!(
            lines
                .iter()
                .any(|l| l.contains(&needle) && l.contains(&memory)),
            "{call}: {lines:#?}"
        );
    }
    free(&allocator, a);
    free(&allocator, keeper);
    finish(allocator, &device);
}

/// The soundness of it all: live allocations on both sides of one freed
/// and taken again keep their unflushed host writes, and the GPU's
/// writes the host has not invalidated yet, through frees, new
/// allocations and `check_corruption`; nothing is reported.
#[test]
fn live_neighbours_keep_their_unflushed_writes() {
    let (allocator, device) = allocator_with(FakeLayout::mobile(), with_fill());
    let pool = allocator
        .create_pool(&PoolDesc::new(CACHED).block_size(MIB))
        .unwrap();
    // 1000 bytes: 1024 held, four atoms.
    let [mut before, middle, mut after] =
        [0; 3].map(|_| allocator.allocate(&readback(1000, Some(pool))).unwrap());
    assert_eq!(middle.offset(), before.offset() + 1024);
    assert_eq!(after.offset(), middle.offset() + 1024);
    allocator.mapped_slice_mut(&mut before).unwrap().fill(0x11);
    // SAFETY: no slice of these bytes is alive.
    assert!(unsafe { device.write(after.memory(), after.offset(), &[0x77; 1000]) });
    let intact = |allocator: &FakeAllocator| {
        let (host, gpu) = views(&device, &before);
        assert!(all(&host, 0x11) && all(&gpu, NEW), "before");
        let (host, gpu) = views(&device, &after);
        assert!(all(&host, NEW) && all(&gpu, 0x77), "after");
        assert!(allocator.check_corruption(!0).unwrap().is_clean());
    };
    free(&allocator, middle);
    intact(&allocator);
    for size in [1000, 1024, 300, 1] {
        let a = allocator.allocate(&readback(size, Some(pool))).unwrap();
        intact(&allocator);
        free(&allocator, a);
        intact(&allocator);
    }
    allocator.flush(&before, ..).unwrap();
    allocator.invalidate(&mut after, ..).unwrap();
    let (host, gpu) = views(&device, &before);
    assert!(all(&host, 0x11) && all(&gpu, 0x11));
    let (host, gpu) = views(&device, &after);
    assert!(all(&host, 0x77) && all(&gpu, 0x77));
    assert_eq!(allocator.corruptions_detected(), 0);
    free(&allocator, before);
    free(&allocator, after);
    allocator.destroy_pool(pool).unwrap();
    finish(allocator, &device);
}

/// With atoms larger than the tail rounding (8 KiB: Vulkan allows at most
/// 256 bytes, but the allocator takes any power of two), an allocation
/// holds 4 KiB of its atom and the free range after it starts inside that
/// atom: `check_corruption` reads that part as the host sees it and never
/// invalidates it, so the live allocation's unflushed writes survive; a
/// host write after free there is still caught.
#[test]
fn free_ranges_starting_inside_an_atom() {
    let mut layout = FakeLayout::mobile();
    layout.non_coherent_atom_size = 8192;
    let (allocator, device) = allocator_with(layout, with_fill());
    let pool = allocator
        .create_pool(&PoolDesc::new(CACHED).block_size(MIB))
        .unwrap();
    let mut live = allocator.allocate(&readback(100, Some(pool))).unwrap();
    let next = allocator.allocate(&readback(100, Some(pool))).unwrap();
    assert_eq!(next.offset(), live.offset() + 8192);
    allocator.mapped_slice_mut(&mut live).unwrap().fill(0x11);
    let report = allocator.check_corruption(1 << CACHED).unwrap();
    assert!(report.is_clean(), "{report:?}");
    let (host, gpu) = views(&device, &live);
    assert!(all(&host, 0x11) && all(&gpu, NEW));
    // The free bytes in `live`'s atom, past the 4 KiB it holds.
    let pointer = live.mapped_ptr().unwrap();
    write_at(pointer, 5000, &[0x42]);
    let report = allocator.check_corruption(1 << CACHED).unwrap();
    assert_eq!(report.written_after_free.len(), 1, "{report:?}");
    assert_eq!(
        report.written_after_free[0].first_changed,
        live.offset() + 5000
    );
    assert!(all(&views(&device, &live).0, 0x11));
    write_at(pointer, 5000, &[FREED]);
    assert!(allocator.check_corruption(1 << CACHED).unwrap().is_clean());
    free(&allocator, live);
    free(&allocator, next);
    assert_eq!(allocator.corruptions_detected(), 0);
    allocator.destroy_pool(pool).unwrap();
    finish(allocator, &device);
}

/// With atoms larger than the tail rounding (8 KiB, as above), a write
/// after free into the free bytes past a new allocation's end, in its
/// last atom (which its check reads and invalidates), is counted by that
/// check, once: the bytes read `0xEF` again in both views after it, so
/// neither `check_corruption` nor the release of the block finds it
/// again. A GPU write there was invalidated into the host's view,
/// counted, and left there, for `check_corruption` to report in the free
/// range after the allocation, and for the allocation's free to flush to
/// the device and the block's release to count again. A host write is
/// dropped by the invalidate. With a margin, the allocation's own fill
/// is flushed over atoms that end before that last one: the free bytes'
/// new fill is flushed on its own. A live neighbour's GPU writes, not
/// invalidated yet, survive it all.
#[test]
fn a_write_past_a_new_allocation_in_its_last_atom_is_counted_once() {
    // The write by the GPU or the host, the margin, whether
    // `check_corruption` looked before the allocation.
    for (gpu, margin, checked_first) in [
        (false, 0, true),
        (true, 0, true),
        (true, 0, false),
        (true, 8192, false),
    ] {
        let ctx = format!("gpu {gpu}, margin {margin}, checked first {checked_first}");
        let mut layout = FakeLayout::mobile();
        layout.non_coherent_atom_size = 8192;
        let config = Config {
            debug_margin: margin,
            ..with_fill()
        };
        let (allocator, device) = allocator_with(layout, config);
        let pool = allocator
            .create_pool(&PoolDesc::new(CACHED).block_size(MIB))
            .unwrap();
        let first = allocator.allocate(&readback(8000, Some(pool))).unwrap();
        let next = allocator.allocate(&readback(100, Some(pool))).unwrap();
        // 8000 bytes and the margin, rounded to whole atoms.
        let held = (8000 + margin).next_multiple_of(8192);
        assert_eq!(next.offset(), first.offset() + held, "{ctx}");
        // SAFETY: no slice of these bytes is alive.
        assert!(unsafe { device.write(next.memory(), next.offset(), &[0x77]) });
        let (memory, offset, pointer) =
            (first.memory(), first.offset(), first.mapped_ptr().unwrap());
        free(&allocator, first);
        // In the freed atoms, past the 4 KiB, or 12 with the margin, that
        // the 100-byte allocation below will hold, in its last atom.
        let past = (100 + margin).next_multiple_of(4096);
        let at = offset + past + 1904;
        if gpu {
            // SAFETY: no slice of these bytes is alive.
            assert!(unsafe { device.write(memory, at, &[0x42]) });
        } else {
            write_at(pointer, at - offset, &[0x42]);
        }
        if checked_first {
            let report = allocator.check_corruption(1 << CACHED).unwrap();
            assert_eq!(report.written_after_free.len(), 1, "{ctx}: {report:?}");
            assert_eq!(report.written_after_free[0].first_changed, at, "{ctx}");
        }
        let again = allocator.allocate(&readback(100, Some(pool))).unwrap();
        assert_eq!((again.memory(), again.offset()), (memory, offset), "{ctx}");
        assert_eq!(allocator.corruptions_detected(), 1, "{ctx}");
        let report = allocator.check_corruption(1 << CACHED).unwrap();
        assert!(report.is_clean(), "{ctx}: {report:?}");
        let host = bytes_at(pointer, at - offset + 1)[(at - offset) as usize];
        assert_eq!(host, FREED, "{ctx}: host");
        assert_eq!(
            device_bytes(&device, memory, at, 1),
            [FREED],
            "{ctx}: device"
        );
        let neighbour = device_bytes(&device, memory, next.offset(), 1);
        assert_eq!(neighbour, [0x77], "{ctx}: the live neighbour's GPU write");
        free(&allocator, again);
        free(&allocator, next);
        allocator.destroy_pool(pool).unwrap();
        assert_eq!(allocator.corruptions_detected(), 1, "{ctx}: counted once");
        finish(allocator, &device);
    }
}
