//! Ring fills and checks in non-coherent memory (mobile's cached type,
//! 256-byte atoms): fills are flushed and checks invalidate first, over
//! whole atoms that hold no live ring allocation's byte, so a host write
//! after free is not dropped unseen and a GPU write is seen; a reclaim
//! flushes only the space it gave back; a ring's last, partial atom is
//! synced as the others are, but not an atom that reaches past the
//! chunk into its block's free bytes.

use vk_suballoc::device::fake::FakeLayout;
use vk_suballoc::Usage;

use super::super::debug_fill::{
    all, bytes_at, device_bytes, write_at, written_after_free, FREED, NEW,
};
use super::super::frames::end_frame;
use super::super::{allocator_with, buffer, finish, free};

use super::{
    finish_frame, named_ring, ring, spans_written_after_free, views, with_fill, write_into,
};

/// In non-coherent memory, a write after free into a free byte beside a
/// new ring allocation, in an atom the allocation's check invalidates
/// (wholly free, and shared with the allocation), is counted by that
/// check, which names it so, and the byte is free and clean after it:
/// a host write (read before the invalidate, which dropped it unseen when
/// the check read only the bytes the allocation took) and a GPU write
/// (read once invalidated: the fill of the free bytes beside, which keeps
/// a write found there from being counted twice, would erase it).
#[test]
fn non_coherent_a_write_beside_a_new_ring_allocation_is_caught() {
    super::super::leak_log::install();
    for gpu in [false, true] {
        let (allocator, device) = allocator_with(FakeLayout::mobile(), with_fill());
        let name = format!("beside-{gpu}");
        let ring = named_ring(&allocator, &name, 4096, Usage::READBACK);
        let first = allocator.ring_allocate(ring, 3000, 1).unwrap();
        let first_frame = end_frame(&allocator, &device);
        let second = allocator.ring_allocate(ring, 1000, 1).unwrap();
        assert_eq!(second.buffer_offset(), 3000);
        let _in_flight = end_frame(&allocator, &device);
        // The first frame's 0..3000 is free, the second's in flight.
        device.signal_fence(first_frame);
        allocator.collect().unwrap();
        // In the atom 0..256, beside the next allocation's 0..200.
        let at = first.memory_offset() + 230;
        write_into(&device, &first, 230, gpu);
        let wrapped = allocator.ring_allocate(ring, 200, 1).unwrap();
        assert_eq!(
            wrapped.buffer_offset(),
            0,
            "{name}: wrapped to the ring's start"
        );
        assert_eq!(allocator.corruptions_detected(), 1, "{name}");
        let lines = super::super::leak_log::lines();
        let needle = format!(
            "byte {at} of memory {:?} was changed before a ring allocation of 200 bytes",
            first.memory()
        );
        let ring_needle = format!("upload ring \"{name}\"");
        let found: Vec<_> = lines
            .iter()
            .filter(|l| l.contains(&needle) && l.contains(&ring_needle))
            .collect();
        assert_eq!(found.len(), 1, "{name}: {lines:#?}");
        assert!(found[0].contains("found it free beside it"), "{}", found[0]);
        let report = allocator.check_corruption(!0).unwrap();
        assert!(report.is_clean(), "{name}: {report:?}");
        let (host, gpu_view) = views(&device, &first);
        assert_eq!((host[230], gpu_view[230]), (FREED, FREED), "{name}");
        allocator.destroy_upload_ring(ring).unwrap();
        finish_frame(&allocator, &device);
        assert_eq!(allocator.corruptions_detected(), 1, "{name}: counted once");
        finish(allocator, &device);
    }
}

/// In non-coherent memory (mobile's cached type, 256-byte atoms), a
/// reclaimed frame's space reads `0xEF` in both views (the fill is
/// flushed); a host write after it was collected, never flushed, and a
/// GPU write into it, which the host sees only once it invalidates, are
/// both found by `check_corruption` and caught by the ring allocation
/// that takes the bytes again, which then reads `0xDC` in both views. A live ring allocation in the same
/// atoms keeps its unflushed host writes throughout.
#[test]
fn non_coherent_host_and_gpu_writes_after_reclaim_are_caught() {
    super::super::leak_log::install();
    let (allocator, device) = allocator_with(FakeLayout::mobile(), with_fill());
    let ring = ring(&allocator, 64 << 10, Usage::READBACK, false);
    let mut count = 0;
    for gpu in [false, true] {
        let first = allocator.ring_allocate(ring, 1000, 256).unwrap();
        assert_eq!(first.buffer_offset(), 0, "gpu {gpu}: an empty ring");
        let (memory, offset, stale) = (
            first.memory(),
            first.memory_offset(),
            first.mapped_ptr().unwrap(),
        );
        allocator.ring_write(&first, 0, &[7; 1000]).unwrap();
        finish_frame(&allocator, &device);
        let (host, device_view) = views(&device, &first);
        assert!(all(&host, FREED) && all(&device_view, FREED), "gpu {gpu}");
        if gpu {
            // SAFETY: no slice of these bytes is alive.
            assert!(unsafe { device.write(memory, offset + 30, &[0x42]) });
            assert!(
                all(&bytes_at(stale, 1000), FREED),
                "the host does not see it"
            );
        } else {
            write_at(stale, 30, &[0x42]);
            assert!(all(&device_bytes(&device, memory, offset, 1000), FREED));
        }
        let report = allocator.check_corruption(!0).unwrap();
        let found = written_after_free(&report);
        assert_eq!(found, [(memory, offset + 30)], "gpu {gpu}");
        let again = allocator.ring_allocate(ring, 100, 4).unwrap();
        assert_eq!(again.memory_offset(), offset, "gpu {gpu}: the same bytes");
        count += 1;
        assert_eq!(allocator.corruptions_detected(), count, "gpu {gpu}");
        let (host, device_view) = views(&device, &again);
        assert!(all(&host, NEW) && all(&device_view, NEW), "gpu {gpu}");
        let needle = format!("byte {} of memory {memory:?}", offset + 30);
        let lines = super::super::leak_log::lines();
        assert!(lines.iter().any(|l| l.contains(&needle)), "{lines:#?}");
        // A live neighbour in the same atom, written through its pointer
        // and not flushed, and one in the atoms after.
        let neighbour = allocator.ring_allocate(ring, 50, 4).unwrap();
        assert_eq!(neighbour.buffer_offset(), 100, "in the same atom");
        write_at(neighbour.mapped_ptr().unwrap(), 0, &[9; 50]);
        let third = allocator.ring_allocate(ring, 2000, 4).unwrap();
        assert!(all(&bytes_at(third.mapped_ptr().unwrap(), 2000), NEW));
        assert!(
            all(&bytes_at(neighbour.mapped_ptr().unwrap(), 50), 9),
            "gpu {gpu}"
        );
        assert_eq!(allocator.corruptions_detected(), count, "gpu {gpu}");
        finish_frame(&allocator, &device);
    }
    allocator.destroy_upload_ring(ring).unwrap();
    finish_frame(&allocator, &device);
    finish(allocator, &device);
}

/// In non-coherent memory (mobile's cached type, 256-byte atoms), the
/// check of a ring allocation invalidates the atoms over the bytes it
/// takes that the free space held wholly, and no others: a GPU write
/// after free into its last atom, which it shares with the free space
/// after it, is caught, in a ring more than half full, and the
/// allocation reads `0xDC` in both views; a host write after free, never
/// flushed, in the free space past that atom is kept for
/// `check_corruption` to find (an invalidate there would drop it), which
/// reports it with the free span it lies in. The ring's chunk lies past
/// the start of its memory.
#[test]
fn non_coherent_checks_invalidate_the_atoms_taken_and_no_others() {
    let (allocator, device) = allocator_with(FakeLayout::mobile(), with_fill());
    // Something before the ring's chunk in its memory.
    let before = allocator
        .allocate(&buffer(64 << 10, 256, Usage::READBACK))
        .unwrap();
    let ring = ring(&allocator, 4096, Usage::READBACK, false);
    // Over the whole ring, collected: its pointer reaches every byte.
    let stale = allocator.ring_allocate(ring, 4096, 1).unwrap();
    let base = stale.memory_offset() - stale.buffer_offset();
    assert!(base > 0 && base % 256 == 0, "the chunk at {base}");
    assert_eq!(before.memory(), stale.memory());
    finish_frame(&allocator, &device);
    // Ten whole atoms, live; the next allocation starts an atom.
    let live = allocator.ring_allocate(ring, 2560, 1).unwrap();
    assert_eq!(live.buffer_offset(), 0);
    let (memory, stale_at) = (stale.memory(), stale.memory_offset());
    // SAFETY: no slice of these bytes is alive.
    assert!(unsafe { device.write(memory, stale_at + 2610, &[0x42]) });
    write_at(stale.mapped_ptr().unwrap(), 2900, &[0x43]);
    let a = allocator.ring_allocate(ring, 100, 1).unwrap();
    assert_eq!(a.buffer_offset(), 2560);
    assert_eq!(allocator.corruptions_detected(), 1, "the GPU write");
    let (host, gpu) = views(&device, &a);
    assert!(all(&host, NEW) && all(&gpu, NEW), "{host:?} {gpu:?}");
    let report = allocator.check_corruption(!0).unwrap();
    let found = spans_written_after_free(&report);
    assert_eq!(
        found,
        [(memory, stale_at + 2660, 4096 - 2660, stale_at + 2900)],
        "the host write, in the free span after `a`"
    );
    assert_eq!(allocator.corruptions_detected(), 1);
    free(&allocator, before);
    allocator.destroy_upload_ring(ring).unwrap();
    finish_frame(&allocator, &device);
    finish(allocator, &device);
}

/// In non-coherent memory, a reclaim flushes its `0xEF` fill over the
/// atoms of the space it gave back only: a GPU write after free into
/// ring space that was free before the reclaim, in the same free span as
/// the reclaimed space now, is not overwritten by the host's view, and
/// `check_corruption` still finds it.
#[test]
fn non_coherent_a_reclaim_flushes_only_the_space_it_gave_back() {
    let (allocator, device) = allocator_with(FakeLayout::mobile(), with_fill());
    let ring = ring(&allocator, 4096, Usage::READBACK, false);
    let stale = allocator.ring_allocate(ring, 4096, 1).unwrap();
    let (memory, stale_at) = (stale.memory(), stale.memory_offset());
    finish_frame(&allocator, &device);
    let x = allocator.ring_allocate(ring, 2048, 1).unwrap();
    assert_eq!(x.buffer_offset(), 0);
    let first = end_frame(&allocator, &device);
    let y = allocator.ring_allocate(ring, 1024, 1).unwrap();
    assert_eq!(y.buffer_offset(), 2048);
    let second = end_frame(&allocator, &device);
    device.signal_fence(first);
    allocator.collect().unwrap();
    // Wraps, skipping 3072..4096: the free space is 1536..2048.
    let z = allocator.ring_allocate(ring, 1536, 1).unwrap();
    assert_eq!(z.buffer_offset(), 0);
    let third = end_frame(&allocator, &device);
    // SAFETY: no slice of these bytes is alive.
    assert!(unsafe { device.write(memory, stale_at + 1800, &[0x42]) });
    // Gives back 2048..3072: the free space is 1536..3072.
    device.signal_fence(second);
    allocator.collect().unwrap();
    let report = allocator.check_corruption(!0).unwrap();
    let found = written_after_free(&report);
    assert_eq!(found, [(memory, stale_at + 1800)], "{report:?}");
    device.signal_fence(third);
    allocator.collect().unwrap();
    allocator.destroy_upload_ring(ring).unwrap();
    finish_frame(&allocator, &device);
    finish(allocator, &device);
}

/// In non-coherent memory (mobile's cached type, 256-byte atoms), a
/// ring whose size is not a multiple of the atom syncs its last, partial
/// atom as it syncs the others (the bytes past the ring's end in that
/// atom are its chunk's, no ring allocation's): a reclaim's `0xEF` and a
/// ring allocation's `0xDC` reach the GPU there, not the data a collected
/// frame's `ring_write` flushed, and a GPU write after free there is
/// found by `check_corruption`, by the ring allocation that takes the
/// bytes again and by the check of the chunk as it is freed.
#[test]
fn non_coherent_a_ring_s_last_partial_atom_is_synced() {
    let (allocator, device) = allocator_with(FakeLayout::mobile(), with_fill());
    // Three whole atoms and 232 bytes of a fourth.
    let ring = ring(&allocator, 1000, Usage::READBACK, false);
    let first = allocator.ring_allocate(ring, 1000, 1).unwrap();
    let (memory, offset) = (first.memory(), first.memory_offset());
    assert_eq!(offset % 256, 0, "the chunk starts an atom");
    allocator.ring_write(&first, 0, &[7; 1000]).unwrap();
    finish_frame(&allocator, &device);
    let (host, gpu) = views(&device, &first);
    assert!(all(&host, FREED), "{host:?}");
    assert!(all(&gpu, FREED), "the reclaim's fill: {gpu:?}");
    // SAFETY: no slice of these bytes is alive.
    assert!(unsafe { device.write(memory, offset + 900, &[0x42]) });
    let report = allocator.check_corruption(!0).unwrap();
    let found = written_after_free(&report);
    assert_eq!(found, [(memory, offset + 900)], "{report:?}");
    let again = allocator.ring_allocate(ring, 1000, 1).unwrap();
    assert_eq!(again.memory_offset(), offset, "the same bytes");
    assert_eq!(allocator.corruptions_detected(), 1, "the GPU write");
    let (host, gpu) = views(&device, &again);
    assert!(all(&host, NEW) && all(&gpu, NEW), "{host:?} {gpu:?}");
    finish_frame(&allocator, &device);
    // SAFETY: as above.
    assert!(unsafe { device.write(memory, offset + 950, &[0x43]) });
    allocator.destroy_upload_ring(ring).unwrap();
    finish_frame(&allocator, &device);
    assert_eq!(allocator.corruptions_detected(), 2, "the chunk's check");
    finish(allocator, &device);
}

/// With atoms larger than the 4 KiB a block allocation's size is rounded
/// to (8 KiB here: no conforming device's, but `Allocator::new` takes
/// them), a ring chunk holds part of its last atom only, and the block's
/// free bytes the rest: the ring's syncs leave that atom out, so a host
/// write after free into those free bytes stays for `check_corruption`
/// to find. (Counting the atom as the chunk's, the invalidate of the
/// next ring allocation dropped it unseen.)
#[test]
fn non_coherent_a_ring_s_last_atom_past_its_block_bytes_is_not_invalidated() {
    let mut layout = FakeLayout::mobile();
    layout.non_coherent_atom_size = 8192;
    let (allocator, device) = allocator_with(layout, with_fill());
    let ring = ring(&allocator, 1000, Usage::READBACK, false);
    let first = allocator.ring_allocate(ring, 1000, 1).unwrap();
    let (memory, chunk) = (first.memory(), first.memory_offset());
    assert_eq!(chunk % 8192, 0, "the chunk starts an atom");
    let stale = first.mapped_ptr().unwrap();
    finish_frame(&allocator, &device);
    // The block's free bytes past the chunk's 4 KiB, in its atom.
    write_at(stale, 5000, &[0x42]);
    let again = allocator.ring_allocate(ring, 1000, 1).unwrap();
    assert_eq!(again.memory_offset(), chunk);
    let report = allocator.check_corruption(!0).unwrap();
    let found = written_after_free(&report);
    assert_eq!(found, [(memory, chunk + 5000)], "{report:?}");
    assert_eq!(bytes_at(stale, 5001)[5000], 0x42);
    allocator.destroy_upload_ring(ring).unwrap();
    finish_frame(&allocator, &device);
    finish(allocator, &device);
}

/// A ring of GPU-only scratch (a usage without host access) in
/// non-coherent memory gets no fills: the GPU writes its live allocations,
/// and the host's cached view of an atom one shares with a fill, written
/// back, would put the host's bytes over the GPU's. Its free ring space
/// reads as its chunk's allocation was filled (`0xDC`, as any new
/// allocation of the type), not `0xEF`; the same ring in the coherent
/// host type is filled as any ring, and so is an upload ring in the
/// non-coherent one, `ALLOW_TRANSFER_INSTEAD` or not.
#[test]
fn a_gpu_only_ring_in_non_coherent_memory_is_not_filled() {
    use ash::vk::MemoryPropertyFlags as Flags;
    use vk_suballoc::UploadRingDesc;
    let (allocator, device) = allocator_with(FakeLayout::mobile(), with_fill());
    for (usage, required, filled) in [
        (Usage::DEVICE_LOCAL, Flags::HOST_CACHED, false),
        (Usage::DEVICE_LOCAL, Flags::HOST_COHERENT, true),
        (Usage::UPLOAD, Flags::HOST_CACHED, true),
        // The host writes the mapped chunks of an upload ring that may
        // transfer instead: filled.
        (
            Usage::UPLOAD | Usage::ALLOW_TRANSFER_INSTEAD,
            Flags::HOST_CACHED,
            true,
        ),
    ] {
        let ring = allocator
            .create_upload_ring(&UploadRingDesc {
                size: 4096,
                usage,
                required_flags: required,
                ..UploadRingDesc::default()
            })
            .unwrap();
        let a = allocator.ring_allocate(ring, 512, 256).unwrap();
        // The free ring space after it.
        let start = a.mapped_ptr().unwrap().as_ptr().wrapping_add(512);
        let free = bytes_at(std::ptr::NonNull::new(start).unwrap(), 4096 - 512);
        let case = format!("{usage:?} in {required:?}");
        let expected = if filled { FREED } else { NEW };
        assert!(all(&free, expected), "{case}: {:?}", &free[..4]);
        allocator.destroy_upload_ring(ring).unwrap();
    }
    finish_frame(&allocator, &device);
    assert_eq!(allocator.corruptions_detected(), 0);
    finish(allocator, &device);
}
