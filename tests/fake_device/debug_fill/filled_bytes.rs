//! What the fills leave: new allocations reading `0xDC` and freed memory
//! `0xEF` (ranges, run slots, a custom pool's, dedicated memory), nothing
//! filled without `debug_fill`, host-visible types filled coherent or not,
//! a destroyed ring's chunk filled when freed, and defragmentation's
//! destinations and sources. Each test reads bytes; none writes where it
//! should not.

use std::ptr::NonNull;

use vk_suballoc::device::fake::FakeLayout;
use vk_suballoc::{
    Allocation, Config, DedicatedPolicy, Error, PoolDesc, ResourceKind, UploadRingDesc, Usage,
};

use super::super::defragment::movables;
use super::super::frames::end_frame;
use super::super::{allocator_with, buffer, finish, free};

use super::{
    all, bytes_at, bytes_of, compacting, device_bytes, keep_every_third, request, with_fill, FREED,
    HOST, MIB, NEW, VRAM,
};

/// New allocations read `0xDC`, buffer-like and image-like, ranges, run
/// slots, a custom pool's and dedicated memory; the bytes after one in its
/// block read `0xEF`. Freed directly, or through the frame queue once its
/// frame is collected (not before), the old bytes read `0xEF`.
#[test]
fn new_memory_reads_0xdc_and_freed_memory_0xef() {
    let (allocator, device) = allocator_with(FakeLayout::discrete(), with_fill());
    let pool = allocator
        .create_pool(&PoolDesc::new(HOST).block_size(MIB))
        .unwrap();
    // Keeps the default pool's block alive through the frees.
    let keeper = allocator
        .allocate(&request(64, ResourceKind::Buffer, None))
        .unwrap();
    let cases = [
        ("range", request(100_000, ResourceKind::Buffer, None)),
        ("run slot", request(100, ResourceKind::Buffer, None)),
        (
            "linear image",
            request(5000, ResourceKind::LinearImage, None),
        ),
        (
            "optimal image",
            request(70_000, ResourceKind::OptimalImage, None),
        ),
        (
            "custom pool",
            request(3000, ResourceKind::Buffer, Some(pool)),
        ),
        (
            "dedicated",
            request(20_000, ResourceKind::Buffer, None).dedicated(DedicatedPolicy::Always),
        ),
    ];
    for deferred in [false, true] {
        for (name, request) in &cases {
            let a = allocator.allocate(request).unwrap();
            assert_eq!(a.memory_type(), HOST, "{name}");
            assert!(all(&bytes_of(&device, &a), NEW), "{name}: not filled");
            if a.is_dedicated() {
                free(&allocator, a);
                continue;
            }
            let after = device_bytes(&device, a.memory(), a.offset() + a.size(), 1);
            assert_eq!(after, [FREED], "{name}: the byte after it");
            let (pointer, size) = (a.mapped_ptr().unwrap(), a.size());
            if deferred {
                allocator.free_after_frame(a).unwrap();
                allocator.collect().unwrap();
                assert!(
                    all(&bytes_at(pointer, size), NEW),
                    "{name}: filled before its frame"
                );
                device.signal_fence(end_frame(&allocator, &device));
                allocator.collect().unwrap();
            } else {
                free(&allocator, a);
            }
            assert!(
                all(&bytes_at(pointer, size), FREED),
                "{name}, deferred {deferred}"
            );
        }
    }
    assert_eq!(allocator.corruptions_detected(), 0);
    free(&allocator, keeper);
    allocator.destroy_pool(pool).unwrap();
    finish(allocator, &device);
}

/// Without `debug_fill` (the default), nothing is filled: new memory
/// reads the device's zeros, and freed memory what was written there.
#[test]
fn nothing_is_filled_by_default() {
    let config = Config {
        large_heap_block_size: 4 * MIB,
        ..Config::default()
    };
    assert!(!config.debug_fill);
    let (allocator, device) = allocator_with(FakeLayout::discrete(), config);
    let keeper = allocator
        .allocate(&request(64, ResourceKind::Buffer, None))
        .unwrap();
    let live: Vec<Allocation> = [100, 100_000]
        .map(|size| {
            allocator
                .allocate(&request(size, ResourceKind::Buffer, None))
                .unwrap()
        })
        .into();
    for mut a in live {
        let size = a.size();
        assert!(all(&bytes_of(&device, &a), 0), "size {size}");
        allocator.mapped_slice_mut(&mut a).unwrap().fill(0x5A);
        let pointer = a.mapped_ptr().unwrap();
        free(&allocator, a);
        assert!(all(&bytes_at(pointer, size), 0x5A), "size {size}");
    }
    assert_eq!(
        allocator.check_corruption(!0),
        Err(Error::CorruptionDetectionOff {
            memory_type_bits: !0
        })
    );
    free(&allocator, keeper);
    finish(allocator, &device);
}

/// With debug fills alone, `check_corruption` checks free ranges (no
/// margins: `checked` is 0) in the host-visible types the allocator uses,
/// and refuses the others; non-coherent types (mobile's type 2) are filled
/// and checked as the coherent type 1 is, their fills flushed: the device
/// reads them (`debug_fill_non_coherent.rs` has the rest).
#[test]
fn host_visible_types_are_filled_coherent_or_not() {
    let off = |bits| {
        Err(Error::CorruptionDetectionOff {
            memory_type_bits: bits,
        })
    };
    let (allocator, device) = allocator_with(FakeLayout::discrete(), with_fill());
    assert_eq!(allocator.check_corruption(1 << VRAM), off(1 << VRAM));
    let a = allocator
        .allocate(&request(1000, ResourceKind::Buffer, None))
        .unwrap();
    let report = allocator.check_corruption(1 << HOST).unwrap();
    assert_eq!(report.checked, 0);
    assert!(report.free_checked >= 1, "{report:?}");
    assert!(report.is_clean());
    assert_eq!(allocator.check_corruption(!0).unwrap(), report);
    free(&allocator, a);
    finish(allocator, &device);

    let config = Config {
        large_heap_block_size: 4 * MIB,
        small_heap_limit: 0,
        ..with_fill()
    };
    let (allocator, device) = allocator_with(FakeLayout::mobile(), config);
    assert_eq!(allocator.check_corruption(1 << 0), off(1 << 0));
    let keeper = allocator
        .allocate(&buffer(64, 16, Usage::READBACK))
        .unwrap();
    let cached: Vec<Allocation> = [100, 100_000]
        .map(|size| {
            allocator
                .allocate(&buffer(size, 16, Usage::READBACK))
                .unwrap()
        })
        .into();
    for mut cached in cached {
        let size = cached.size();
        let coherent = allocator
            .allocate(&buffer(size, 16, Usage::UPLOAD))
            .unwrap();
        assert_eq!(coherent.memory_type(), 1);
        assert!(all(&bytes_of(&device, &coherent), NEW), "size {size}");
        assert_eq!(cached.memory_type(), 2);
        assert!(all(&bytes_of(&device, &cached), NEW), "size {size}");
        allocator.mapped_slice_mut(&mut cached).unwrap().fill(0x5A);
        allocator.flush(&cached, ..).unwrap();
        let (memory, offset) = (cached.memory(), cached.offset());
        free(&allocator, cached);
        assert!(
            all(&device_bytes(&device, memory, offset, size), FREED),
            "size {size}"
        );
        free(&allocator, coherent);
    }
    let report = allocator.check_corruption(1 << 2).unwrap();
    assert!(report.is_clean() && report.free_checked >= 1, "{report:?}");
    free(&allocator, keeper);
    finish(allocator, &device);
}

/// An upload ring's chunk is one allocation, whose ring space reads
/// `0xEF` when the ring takes it (ring allocations in it read `0xDC`,
/// `ring_fill.rs`), and which reads `0xEF` once the destroyed ring's
/// frame is collected and the chunk freed.
#[test]
fn a_destroyed_ring_s_chunk_is_filled_when_it_is_freed() {
    let (allocator, device) = allocator_with(FakeLayout::discrete(), with_fill());
    let keeper = allocator
        .allocate(&request(64, ResourceKind::Buffer, None))
        .unwrap();
    let size = 64 << 10;
    let ring = allocator
        .create_upload_ring(&UploadRingDesc {
            size,
            usage: Usage::UPLOAD,
            ..UploadRingDesc::default()
        })
        .unwrap();
    let first = allocator.ring_allocate(ring, 1000, 256).unwrap();
    assert_eq!(first.memory(), keeper.memory());
    let chunk_start = first.memory_offset() - first.buffer_offset();
    let chunk = NonNull::new(
        first
            .mapped_ptr()
            .unwrap()
            .as_ptr()
            .wrapping_sub(first.buffer_offset() as usize),
    )
    .unwrap();
    let bytes = bytes_at(chunk, size);
    assert!(all(&bytes[..1000], NEW) && all(&bytes[1000..], FREED));
    allocator.ring_write(&first, 0, &[7; 1000]).unwrap();
    let second = allocator.ring_allocate(ring, 500, 256).unwrap();
    assert!(all(&bytes_at(second.mapped_ptr().unwrap(), 500), NEW));
    allocator.destroy_upload_ring(ring).unwrap();
    assert!(all(&bytes_at(first.mapped_ptr().unwrap(), 1000), 7));
    device.signal_fence(end_frame(&allocator, &device));
    allocator.collect().unwrap();
    assert!(all(&bytes_at(chunk, size), FREED));
    assert!(all(
        &device_bytes(&device, keeper.memory(), chunk_start, size),
        FREED
    ));
    assert_eq!(allocator.corruptions_detected(), 0);
    assert!(allocator.check_corruption(!0).unwrap().is_clean());
    free(&allocator, keeper);
    finish(allocator, &device);
}

/// Defragmentation's destinations read `0xDC` before the engine copies
/// into them, and their sources `0xEF` once freed.
#[test]
fn defragmentation_destinations_are_filled() {
    let config = Config {
        small_buffer_limit: 0,
        ..with_fill()
    };
    let (allocator, device) = allocator_with(FakeLayout::discrete(), config);
    let mut live = keep_every_third(&allocator, &buffer(200_000, 256, Usage::UPLOAD), |_, _| {});
    let limits = compacting();
    let plan = allocator
        .plan_defragmentation(&movables(&live), &limits)
        .unwrap();
    assert!(!plan.moves.is_empty());
    for planned in plan.moves {
        assert!(all(&bytes_of(&device, &planned.destination), NEW));
        let old = std::mem::replace(&mut live[planned.movable], planned.destination);
        let (memory, offset, size) = (old.memory(), old.offset(), old.size());
        free(&allocator, old);
        // Compaction: the source's block stays.
        assert!(all(&device_bytes(&device, memory, offset, size), FREED));
    }
    let report = allocator.check_corruption(!0).unwrap();
    assert!(report.is_clean() && report.free_checked >= 1, "{report:?}");
    for a in live {
        free(&allocator, a);
    }
    assert_eq!(allocator.corruptions_detected(), 0);
    finish(allocator, &device);
}
