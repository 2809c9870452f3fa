//! `check_corruption` over ring space: it checks the rings' free spans in
//! the memory types asked for, counting each span and reporting a write
//! after free with the span it lies in, without counting the write; and it
//! checks a destroyed ring's chunks as it does a live ring's, those still
//! queued and one kept back by a write, whose free then counts it.

use vk_suballoc::device::fake::FakeLayout;
use vk_suballoc::Usage;

use super::super::debug_fill::write_at;
use super::super::frames::end_frame;
use super::super::{allocator_with, finish};

use super::{finish_frame, ring, spans_written_after_free, with_fill, write_into};

/// `check_corruption` checks the rings' free space in the memory types
/// asked for only; counts each span of it in `free_checked` (one, then
/// two once the free space wraps: the part after the head and the part
/// from the ring's start); and reports a write after free with the span
/// it lies in, its offset in the memory and its size.
#[test]
fn check_corruption_checks_ring_spans_in_the_types_asked_for() {
    let (allocator, device) = allocator_with(FakeLayout::discrete(), with_fill());
    let ring = ring(&allocator, 4096, Usage::UPLOAD, false);
    let stale = allocator.ring_allocate(ring, 4096, 1).unwrap();
    let (memory, stale_at) = (stale.memory(), stale.memory_offset());
    finish_frame(&allocator, &device);
    let a = allocator.ring_allocate(ring, 1000, 1).unwrap();
    assert_eq!(a.buffer_offset(), 0);
    write_at(stale.mapped_ptr().unwrap(), 3000, &[0x42]);
    let all_types = allocator.check_corruption(!0).unwrap();
    assert_eq!(all_types.written_after_free.len(), 1, "{all_types:?}");
    let ring_type = all_types.written_after_free[0].memory_type;
    let others = allocator.check_corruption(!(1 << ring_type)).unwrap();
    assert!(others.is_clean(), "the other types' check: {others:?}");
    let one_span = allocator.check_corruption(1 << ring_type).unwrap();
    assert_eq!(one_span.written_after_free.len(), 1, "{one_span:?}");
    let first = end_frame(&allocator, &device);
    let b = allocator.ring_allocate(ring, 1000, 1).unwrap();
    assert_eq!(b.buffer_offset(), 1000);
    let second = end_frame(&allocator, &device);
    device.signal_fence(first);
    allocator.collect().unwrap();
    // Free: 2000..4096 and 0..1000.
    let two_spans = allocator.check_corruption(1 << ring_type).unwrap();
    assert_eq!(two_spans.free_checked, one_span.free_checked + 1);
    let found: Vec<_> = two_spans
        .written_after_free
        .iter()
        .map(|w| (w.memory_type, w.memory, w.offset, w.size, w.first_changed))
        .collect();
    assert_eq!(
        found,
        [(ring_type, memory, stale_at + 2000, 2096, stale_at + 3000)]
    );
    device.signal_fence(second);
    allocator.collect().unwrap();
    allocator.destroy_upload_ring(ring).unwrap();
    finish_frame(&allocator, &device);
    finish(allocator, &device);
}

/// `check_corruption` checks the free space of a destroyed ring's chunks
/// still queued (their frame not collected yet), as it does a live
/// ring's: it reports a write after free there, with its span, without
/// counting it; the chunk's free then counts it. In coherent memory and
/// in non-coherent memory, where a GPU write there is seen once its whole
/// atoms are invalidated.
#[test]
fn check_corruption_checks_a_destroyed_ring_s_queued_chunks() {
    for (layout, usage, gpu) in [
        (FakeLayout::discrete(), Usage::UPLOAD, false),
        (FakeLayout::mobile(), Usage::READBACK, false),
        (FakeLayout::mobile(), Usage::READBACK, true),
    ] {
        let case = format!("{} gpu {gpu}", layout.name);
        let (allocator, device) = allocator_with(layout.clone(), with_fill());
        let ring = ring(&allocator, 64 << 10, usage, false);
        let first = allocator.ring_allocate(ring, 10_000, 256).unwrap();
        finish_frame(&allocator, &device);
        let live = allocator.ring_allocate(ring, 2000, 256).unwrap();
        assert_eq!(live.buffer_offset(), 0, "{case}");
        allocator.ring_write(&live, 0, &[9; 2000]).unwrap();
        allocator.destroy_upload_ring(ring).unwrap();
        let clean = allocator.check_corruption(!0).unwrap();
        assert!(clean.is_clean(), "{case}: {clean:?}");
        let at = 5000;
        write_into(&device, &first, at, gpu);
        let report = allocator.check_corruption(!0).unwrap();
        assert_eq!(report.free_checked, clean.free_checked, "{case}");
        let found = spans_written_after_free(&report);
        let base = live.memory_offset();
        assert_eq!(
            found,
            [(live.memory(), base + 2000, (64 << 10) - 2000, base + at)],
            "{case}"
        );
        assert_eq!(allocator.corruptions_detected(), 0, "{case}: not counted");
        finish_frame(&allocator, &device);
        assert_eq!(allocator.corruptions_detected(), 1, "{case}");
        finish(allocator, &device);
    }
}

/// `check_corruption` checks a destroyed ring's chunk that a write still
/// copied into when its frame was collected (kept back, not freed yet), as
/// it does one still queued: a write after free into the space free when
/// the ring went is reported, with its span, without counting it; the
/// chunk's free, at the next collect, then counts it. (The queued chunks'
/// test above never reaches the kept-back ones, which `check_corruption`
/// finds in a list of their own.)
#[test]
fn check_corruption_checks_a_destroyed_ring_s_chunk_kept_back_by_a_write() {
    let (allocator, device) = allocator_with(FakeLayout::mobile(), with_fill());
    let ring = ring(&allocator, 64 << 10, Usage::READBACK, false);
    let target = allocator.ring_allocate(ring, 1024, 256).unwrap();
    let (written, during) =
        super::super::frames::while_a_ring_write_flushes(&allocator, &device, &target, || {
            allocator.destroy_upload_ring(ring).unwrap();
            device.signal_fence(end_frame(&allocator, &device));
            allocator.collect().unwrap()
        });
    let collected = during.expect("destroying the ring or collecting waited for the ring write");
    written.unwrap();
    // The ring's frame was collected, its chunk kept back for the write.
    assert_eq!(collected.frees, 0);
    assert_eq!(allocator.stats().allocations(), 1, "kept back, not freed");
    let clean = allocator.check_corruption(!0).unwrap();
    assert!(clean.is_clean(), "{clean:?}");
    // Past the write's 1 KiB: space free when the ring was destroyed.
    let at = 5000;
    write_at(target.mapped_ptr().unwrap(), at, &[0x42]);
    let report = allocator.check_corruption(!0).unwrap();
    assert_eq!(report.free_checked, clean.free_checked);
    let found = spans_written_after_free(&report);
    let base = target.memory_offset();
    assert_eq!(
        found,
        [(target.memory(), base + 1024, (64 << 10) - 1024, base + at)]
    );
    assert_eq!(allocator.corruptions_detected(), 0, "not counted");
    // No frame finished since: the chunk alone is freed, and checked.
    assert_eq!(allocator.collect().unwrap().frees, 1);
    assert_eq!(allocator.stats().allocations(), 0);
    assert_eq!(allocator.corruptions_detected(), 1);
    finish(allocator, &device);
}
