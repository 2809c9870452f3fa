//! The check and fill of each ring allocation, in coherent memory: a
//! write through a pointer kept from a collected frame's allocation is
//! caught, logged and counted by the `ring_allocate` (or
//! `ring_allocate_mut`) that takes those bytes again, which then read
//! `0xDC`, and so is one into the bytes it skips (alignment padding, the
//! end of the ring before a wrap); without debug fills nothing is filled
//! or checked.

use std::ptr::NonNull;

use vk_suballoc::device::fake::FakeLayout;
use vk_suballoc::{Config, Usage};

use super::super::debug_fill::{all, bytes_at, write_at, FREED, NEW};
use super::super::frames::end_frame;
use super::super::{allocator_with, finish};

use super::{finish_frame, named_ring, ring, with_fill, write_into};

/// A write through a pointer kept from a ring allocation whose frame was
/// collected is found by `check_corruption` (the ring's free space), and
/// caught, logged (naming the byte, the ring and the ring offset) and
/// counted by the `ring_allocate` that takes the bytes again, which then
/// reads `0xDC`; one that takes other bytes is not. The collected
/// allocation's bytes read `0xEF`, not what was written.
#[test]
fn a_stale_host_write_is_caught_by_the_next_ring_allocation() {
    super::super::leak_log::install();
    let (allocator, device) = allocator_with(FakeLayout::discrete(), with_fill());
    let ring = ring(&allocator, 64 << 10, Usage::UPLOAD, false);
    let first = allocator.ring_allocate(ring, 1000, 256).unwrap();
    assert!(all(&bytes_at(first.mapped_ptr().unwrap(), 1000), NEW));
    // The chunk's ring space past it reads `0xEF`.
    let past = NonNull::new(first.mapped_ptr().unwrap().as_ptr().wrapping_add(1000)).unwrap();
    assert!(all(&bytes_at(past, (64 << 10) - 1000), FREED));
    allocator.ring_write(&first, 0, &[7; 1000]).unwrap();
    let stale = first.mapped_ptr().unwrap();
    finish_frame(&allocator, &device);
    assert!(all(&bytes_at(stale, 1000), FREED), "filled when reclaimed");
    assert_eq!(allocator.corruptions_detected(), 0);
    assert!(allocator.check_corruption(!0).unwrap().is_clean());
    // The bug: a write through the collected frame's allocation.
    write_at(stale, 123, &[0x42]);
    let report = allocator.check_corruption(!0).unwrap();
    assert_eq!(report.written_after_free.len(), 1, "{report:?}");
    let written = &report.written_after_free[0];
    assert_eq!(
        (written.memory, written.first_changed),
        (first.memory(), first.memory_offset() + 123)
    );
    assert_eq!(allocator.corruptions_detected(), 0, "reported, not counted");
    let again = allocator.ring_allocate(ring, 1000, 256).unwrap();
    assert_eq!(
        again.memory_offset(),
        first.memory_offset(),
        "the same bytes"
    );
    assert_eq!(allocator.corruptions_detected(), 1);
    assert!(all(&bytes_at(again.mapped_ptr().unwrap(), 1000), NEW));
    let needle = format!(
        "byte {} of memory {:?}",
        first.memory_offset() + 123,
        first.memory()
    );
    // The capture holds every test's lines; each fake device has handles
    // of its own, so only this test's lines name this memory, and the one
    // looked for also names the ring (this test's memory may have other
    // lines, a block's release, say).
    let ring_needle = "upload ring \"per-frame\", chunk 0, ring offset 0";
    let lines = super::super::leak_log::lines();
    assert!(
        lines
            .iter()
            .any(|l| l.contains(&needle) && l.contains(ring_needle)),
        "no line has {needle:?} and {ring_needle:?}: {lines:#?}"
    );
    // Other bytes, written by nobody: nothing more.
    let other = allocator.ring_allocate(ring, 5000, 16).unwrap();
    assert!(all(&bytes_at(other.mapped_ptr().unwrap(), 5000), NEW));
    assert_eq!(allocator.corruptions_detected(), 1);
    allocator.destroy_upload_ring(ring).unwrap();
    finish_frame(&allocator, &device);
    finish(allocator, &device);
}

/// `ring_allocate_mut` does the debug fills' work as `ring_allocate`
/// does: its allocation reads `0xDC`, and it catches a write through a
/// collected frame's allocation into the bytes it takes again.
#[test]
fn ring_allocate_mut_checks_and_fills_too() {
    let (mut allocator, device) = allocator_with(FakeLayout::discrete(), with_fill());
    let ring = ring(&allocator, 64 << 10, Usage::UPLOAD, false);
    let first = allocator.ring_allocate_mut(ring, 1000, 256).unwrap();
    assert!(all(&bytes_at(first.mapped_ptr().unwrap(), 1000), NEW));
    let stale = first.mapped_ptr().unwrap();
    finish_frame(&allocator, &device);
    write_at(stale, 999, &[0x42]);
    let again = allocator.ring_allocate_mut(ring, 1000, 256).unwrap();
    assert_eq!(again.memory_offset(), first.memory_offset());
    assert_eq!(allocator.corruptions_detected(), 1);
    assert!(all(&bytes_at(again.mapped_ptr().unwrap(), 1000), NEW));
    allocator.destroy_upload_ring(ring).unwrap();
    finish_frame(&allocator, &device);
    finish(allocator, &device);
}

/// Without debug fills, ring space is neither filled nor checked: a ring
/// allocation reads what its memory held, what a collected frame wrote
/// included.
#[test]
fn without_fills_ring_bytes_are_left_alone() {
    for (layout, usage) in [
        (FakeLayout::discrete(), Usage::UPLOAD),
        (FakeLayout::mobile(), Usage::READBACK),
    ] {
        let (allocator, device) = allocator_with(layout, Config::default());
        let ring = ring(&allocator, 64 << 10, usage, false);
        let first = allocator.ring_allocate(ring, 1000, 256).unwrap();
        assert!(
            all(&bytes_at(first.mapped_ptr().unwrap(), 1000), 0),
            "untouched"
        );
        allocator.ring_write(&first, 0, &[7; 1000]).unwrap();
        finish_frame(&allocator, &device);
        assert!(
            all(&bytes_at(first.mapped_ptr().unwrap(), 1000), 7),
            "not filled"
        );
        write_at(first.mapped_ptr().unwrap(), 10, &[0x42]);
        let again = allocator.ring_allocate(ring, 1000, 256).unwrap();
        assert_eq!(again.memory_offset(), first.memory_offset());
        let bytes = bytes_at(again.mapped_ptr().unwrap(), 1000);
        assert_eq!((bytes[9], bytes[10], bytes[11]), (7, 0x42, 7));
        assert_eq!(allocator.corruptions_detected(), 0);
        allocator.destroy_upload_ring(ring).unwrap();
        finish_frame(&allocator, &device);
        finish(allocator, &device);
    }
}

/// A write after free into the bytes a ring allocation skips (its
/// alignment padding, or the end of the ring it skips to wrap to its
/// start) is caught by that ring allocation, which takes them out of the
/// free space with its own, and reported once: the bytes stay its
/// frame's, and are filled again when the frame is reclaimed. In coherent
/// memory and in non-coherent memory, where a GPU write there is seen
/// once the whole atoms over them (that held only free bytes) are
/// invalidated. The padding reads `0xEF` but for the byte written, and
/// each line says which bytes the allocation skipped.
/// (Before, only `check_corruption` saw those bytes, while free.)
#[test]
fn a_write_after_free_into_padding_or_a_skipped_end_is_caught() {
    super::super::leak_log::install();
    let cases = [
        (FakeLayout::discrete(), Usage::UPLOAD, false),
        (FakeLayout::mobile(), Usage::READBACK, false),
        (FakeLayout::mobile(), Usage::READBACK, true),
    ];
    for (case_index, (layout, usage, gpu)) in cases.into_iter().enumerate() {
        let case = format!("{} gpu {gpu}", layout.name);
        let (allocator, device) = allocator_with(layout, with_fill());
        let name = format!("skipped-bytes-{case_index}");
        let ring = named_ring(&allocator, &name, 4096, usage);
        // Over the whole ring, collected: its pointer reaches every byte.
        let stale = allocator.ring_allocate(ring, 4096, 1).unwrap();
        finish_frame(&allocator, &device);
        let write = |at: u64| write_into(&device, &stale, at, gpu);
        // Padding: 10..1024, before an allocation aligned to 1 KiB.
        let a = allocator.ring_allocate(ring, 10, 1).unwrap();
        assert_eq!(a.buffer_offset(), 0, "{case}");
        // Written through its pointer, never flushed: the check's
        // invalidate must not reach it.
        write_at(a.mapped_ptr().unwrap(), 0, &[3; 10]);
        write(600);
        let b = allocator.ring_allocate(ring, 100, 1024).unwrap();
        assert_eq!(b.buffer_offset(), 1024, "{case}");
        assert_eq!(allocator.corruptions_detected(), 1, "{case}: padding");
        assert!(all(&bytes_at(a.mapped_ptr().unwrap(), 10), 3), "{case}");
        assert!(all(&bytes_at(b.mapped_ptr().unwrap(), 100), NEW), "{case}");
        let padding = bytes_at(stale.mapped_ptr().unwrap(), 1024);
        assert!(all(&padding[10..600], FREED) && all(&padding[601..], FREED));
        let first = end_frame(&allocator, &device);
        // 1124..3624; the next frame's allocation wraps, skipping the end.
        let c = allocator.ring_allocate(ring, 2500, 1).unwrap();
        assert_eq!(c.buffer_offset(), 1124, "{case}");
        write_at(c.mapped_ptr().unwrap(), 0, &[4; 2500]);
        let second = end_frame(&allocator, &device);
        device.signal_fence(first);
        allocator.collect().unwrap();
        write(3900);
        let d = allocator.ring_allocate(ring, 1000, 1).unwrap();
        assert_eq!(d.buffer_offset(), 0, "{case}: wrapped");
        assert_eq!(allocator.corruptions_detected(), 2, "{case}: skipped end");
        assert!(all(&bytes_at(d.mapped_ptr().unwrap(), 1000), NEW), "{case}");
        assert!(all(&bytes_at(c.mapped_ptr().unwrap(), 2500), 4), "{case}");
        // The skipped end is the frame's: not free, not reported again.
        assert!(allocator.check_corruption(!0).unwrap().is_clean(), "{case}");
        device.signal_fence(second);
        finish_frame(&allocator, &device);
        assert!(
            all(&bytes_at(stale.mapped_ptr().unwrap(), 4096), FREED),
            "{case}"
        );
        assert!(allocator.check_corruption(!0).unwrap().is_clean(), "{case}");
        allocator.destroy_upload_ring(ring).unwrap();
        finish_frame(&allocator, &device);
        assert_eq!(allocator.corruptions_detected(), 2, "{case}");
        finish(allocator, &device);
        let lines = super::super::leak_log::lines();
        let ring_needle = format!("upload ring \"{name}\"");
        let found: Vec<_> = lines.iter().filter(|l| l.contains(&ring_needle)).collect();
        assert_eq!(found.len(), 2, "{case}: {lines:#?}");
        assert!(
            found[0].contains("ring offset 1024")
                && found[0].contains("skipped it as alignment padding"),
            "{case}: {}",
            found[0]
        );
        assert!(
            found[1].contains("ring offset 0")
                && found[1].contains("skipped it, the end of the ring, to wrap to its start"),
            "{case}: {}",
            found[1]
        );
    }
}
