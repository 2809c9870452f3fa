//! Debug fills in upload rings (`Config::debug_fill`): a chunk's free ring
//! space reads `0xEF` (when the chunk is made, and again when a frame's
//! space is reclaimed), ring allocations read `0xDC` when handed out, and
//! a write into ring space after its frame was collected, by the host
//! through a kept pointer or by the GPU, is caught by the `ring_allocate`
//! that takes those bytes again; in non-coherent memory too, where the
//! fills are flushed and the check invalidates first, never over a live
//! ring allocation's bytes (the fake device would report a range off the
//! atoms, `finish`).

use std::panic::{self, AssertUnwindSafe};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering};

use ash::vk;
use vk_suballoc::device::fake::{FakeCall, FakeDevice, FakeLayout};
use vk_suballoc::{
    Config, CorruptionReport, DedicatedPolicy, RingAllocation, UploadRing, UploadRingDesc, Usage,
};

use super::debug_fill::{all, bytes_at, device_bytes, write_at, written_after_free, FREED, NEW};
use super::frames::end_frame;
use super::seeded_rng::Rng;
use super::{allocator_with, buffer, finish, free, FakeAllocator};

fn with_fill() -> Config {
    Config {
        debug_fill: true,
        large_heap_block_size: 4 << 20,
        ..Config::default()
    }
}

/// A ring of `size` bytes per chunk for `usage`: `UPLOAD` lands in the
/// discrete layout's coherent host type, `READBACK` in mobile's cached,
/// non-coherent one (256-byte atoms).
fn ring(allocator: &FakeAllocator, size: u64, usage: Usage, grow: bool) -> UploadRing {
    allocator
        .create_upload_ring(&UploadRingDesc {
            size,
            usage,
            grow,
            name: Some("per-frame"),
            ..UploadRingDesc::default()
        })
        .unwrap()
}

/// Ends the frame, "the GPU" finishes it, and collects it: its ring space
/// is reclaimed.
fn finish_frame(allocator: &FakeAllocator, device: &FakeDevice) {
    device.signal_fence(end_frame(allocator, device));
    allocator.collect().unwrap();
}

/// The free spans a `check_corruption` report found written after free:
/// each one's memory, offset and size, and its first changed byte.
fn spans_written_after_free(report: &CorruptionReport) -> Vec<(vk::DeviceMemory, u64, u64, u64)> {
    report
        .written_after_free
        .iter()
        .map(|w| (w.memory, w.offset, w.size, w.first_changed))
        .collect()
}

/// Writes `0x42` at `at` bytes into `a`, by the GPU (`gpu`) or by the host
/// through the pointer kept from it: a write after free once its frame is
/// collected.
fn write_into(device: &FakeDevice, a: &RingAllocation, at: u64, gpu: bool) {
    if gpu {
        // SAFETY: no slice of these bytes is alive.
        assert!(unsafe { device.write(a.memory(), a.memory_offset() + at, &[0x42]) });
    } else {
        write_at(a.mapped_ptr(), at, &[0x42]);
    }
}

/// A ring allocation's bytes, as the host sees them and as the GPU does.
fn views(device: &FakeDevice, a: &RingAllocation) -> (Vec<u8>, Vec<u8>) {
    let host = bytes_at(a.mapped_ptr(), a.size());
    let gpu = device_bytes(device, a.memory(), a.memory_offset(), a.size());
    (host, gpu)
}

/// A write through a pointer kept from a ring allocation whose frame was
/// collected is found by `check_corruption` (the ring's free space), and
/// caught, logged (naming the byte, the ring and the ring offset) and
/// counted by the `ring_allocate` that takes the bytes again, which then
/// reads `0xDC`; one that takes other bytes is not. The collected
/// allocation's bytes read `0xEF`, not what was written.
#[test]
fn a_stale_host_write_is_caught_by_the_next_ring_allocation() {
    super::leak_log::install();
    let (allocator, device) = allocator_with(FakeLayout::discrete(), with_fill());
    let ring = ring(&allocator, 64 << 10, Usage::UPLOAD, false);
    let first = allocator.ring_allocate(ring, 1000, 256).unwrap();
    assert!(all(&bytes_at(first.mapped_ptr(), 1000), NEW));
    // The chunk's ring space past it reads `0xEF`.
    let past = NonNull::new(first.mapped_ptr().as_ptr().wrapping_add(1000)).unwrap();
    assert!(all(&bytes_at(past, (64 << 10) - 1000), FREED));
    allocator.ring_write(&first, 0, &[7; 1000]).unwrap();
    let stale = first.mapped_ptr();
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
    assert!(all(&bytes_at(again.mapped_ptr(), 1000), NEW));
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
    let lines = super::leak_log::lines();
    assert!(
        lines
            .iter()
            .any(|l| l.contains(&needle) && l.contains(ring_needle)),
        "no line has {needle:?} and {ring_needle:?}: {lines:#?}"
    );
    // Other bytes, written by nobody: nothing more.
    let other = allocator.ring_allocate(ring, 5000, 16).unwrap();
    assert!(all(&bytes_at(other.mapped_ptr(), 5000), NEW));
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
    assert!(all(&bytes_at(first.mapped_ptr(), 1000), NEW));
    let stale = first.mapped_ptr();
    finish_frame(&allocator, &device);
    write_at(stale, 999, &[0x42]);
    let again = allocator.ring_allocate_mut(ring, 1000, 256).unwrap();
    assert_eq!(again.memory_offset(), first.memory_offset());
    assert_eq!(allocator.corruptions_detected(), 1);
    assert!(all(&bytes_at(again.mapped_ptr(), 1000), NEW));
    allocator.destroy_upload_ring(ring).unwrap();
    finish_frame(&allocator, &device);
    finish(allocator, &device);
}

/// Many frames of a growing ring, two in flight, with requests of every
/// size and alignment, some written, some larger than a chunk: every
/// allocation reads `0xDC` as handed out (in both views of the
/// non-coherent type, for whole atoms of it that held no other live
/// byte: checked at offsets on an atom), and no write after free is ever
/// reported, by the allocations or by `check_corruption`. The ring wraps
/// and grows. On the discrete layout's coherent
/// type and mobile's non-coherent one.
#[test]
fn a_long_ring_workload_reports_nothing() {
    let mut rng = Rng::from_env("a_long_ring_workload_reports_nothing");
    for (layout, usage) in [
        (FakeLayout::discrete(), Usage::UPLOAD),
        (FakeLayout::mobile(), Usage::READBACK),
    ] {
        let name = layout.name;
        let (allocator, device) = allocator_with(layout, with_fill());
        let ring = ring(&allocator, 32 << 10, usage, true);
        let mut fences = std::collections::VecDeque::new();
        let (mut wraps, mut buffers, mut last) = (0, Vec::new(), None);
        for frame in 0..300 {
            for _ in 0..rng.below(12) {
                let size = match rng.below(20) {
                    0 => 40_000 + rng.below(10_000),
                    1..=4 => 1 + rng.below(8),
                    _ => 1 + rng.below(6000),
                };
                let align = 1 << rng.below(9);
                let a = allocator.ring_allocate(ring, size, align).unwrap();
                let ctx = format!("{name} frame {frame}: {a:?}");
                let (host, gpu) = views(&device, &a);
                assert!(all(&host, NEW), "{ctx}");
                if usage == Usage::READBACK && a.memory_offset() % 256 == 0 && size >= 256 {
                    assert!(all(&gpu[..256], NEW), "{ctx}: device view");
                }
                if !buffers.contains(&a.buffer()) {
                    buffers.push(a.buffer());
                }
                if last.is_some_and(|(buffer, offset)| {
                    buffer == a.buffer() && offset > a.buffer_offset()
                }) {
                    wraps += 1;
                }
                last = Some((a.buffer(), a.buffer_offset()));
                if rng.below(2) == 0 {
                    let bytes = vec![rng.below(256) as u8; size.min(3000) as usize];
                    allocator.ring_write(&a, 0, &bytes).unwrap();
                }
            }
            fences.push_back(end_frame(&allocator, &device));
            if fences.len() > 2 {
                device.signal_fence(fences.pop_front().unwrap());
                allocator.collect().unwrap();
            }
            if frame % 10 == 0 {
                let report = allocator.check_corruption(!0).unwrap();
                assert!(report.is_clean(), "{name} frame {frame}: {report:?}");
                assert!(report.free_checked > 0, "{name} frame {frame}");
            }
        }
        assert_eq!(allocator.corruptions_detected(), 0, "{name}");
        assert!(
            buffers.len() > 1 && wraps > 10,
            "{name}: {buffers:?} {wraps}"
        );
        for fence in fences {
            device.signal_fence(fence);
        }
        allocator.collect().unwrap();
        allocator.destroy_upload_ring(ring).unwrap();
        finish_frame(&allocator, &device);
        assert_eq!(allocator.corruptions_detected(), 0, "{name}");
        finish(allocator, &device);
    }
}

/// The other side of the walk above: on the same kind of workload (the
/// ring wraps and grows), a byte written after its frame was collected,
/// through a kept pointer by the host or by the GPU, at a random place in
/// a random allocation of that frame, is reported by every
/// `check_corruption` (the byte, not counted) until a check counts it,
/// exactly once: the ring allocation that takes it again, or the chunk's
/// free when the ring goes. A chunk holds one such write at a time, as
/// each check reads one chunk and counts once, so the writes a frame's
/// checks counted are those `check_corruption` stops reporting. In
/// non-coherent memory a GPU write is into an atom the allocation holds
/// wholly (in an atom it shares with a live ring allocation, the reclaim
/// of that one's frame flushes its fill over the atom, and the write is
/// lost: documented in `ring_fill.rs`), a host write anywhere in it.
#[test]
fn every_write_after_free_in_a_long_ring_workload_is_found_once() {
    use std::collections::VecDeque;

    let mut rng = Rng::from_env("every_write_after_free_in_a_long_ring_workload_is_found_once");
    for (layout, usage) in [
        (FakeLayout::discrete(), Usage::UPLOAD),
        (FakeLayout::mobile(), Usage::READBACK),
    ] {
        let name = layout.name;
        let atom = layout.non_coherent_atom_size;
        let non_coherent = usage == Usage::READBACK;
        let (allocator, device) = allocator_with(layout, with_fill());
        let new_ring = || ring(&allocator, 32 << 10, usage, true);
        let mut ring = new_ring();
        // Each frame in flight: its fence and its ring allocations.
        let mut in_flight: VecDeque<(vk::Fence, Vec<RingAllocation>)> = VecDeque::new();
        let mut frame_allocations = Vec::new();
        // The writes not counted yet: chunk (buffer), memory and byte.
        let mut outstanding: Vec<(vk::Buffer, vk::DeviceMemory, u64)> = Vec::new();
        let (mut written, mut gpu_writes, mut counted_in_walk) = (0, 0, 0);
        let mut destroyed = 0;
        for frame in 0..300u64 {
            // Every 30 frames the ring goes, at a frame's start, and another
            // takes its place: its chunks are freed once this frame is
            // collected, and the space of its frames in flight is free,
            // and written into, as they are collected before that.
            if frame % 30 == 17 {
                allocator.destroy_upload_ring(ring).unwrap();
                ring = new_ring();
                destroyed += 1;
            }
            for _ in 0..rng.below(12) {
                let size = match rng.below(20) {
                    0 => 40_000 + rng.below(10_000),
                    1..=4 => 1 + rng.below(8),
                    _ => 1 + rng.below(6000),
                };
                let align = 1 << rng.below(9);
                frame_allocations.push(allocator.ring_allocate(ring, size, align).unwrap());
                if rng.below(2) == 0 {
                    let a = frame_allocations.last().unwrap();
                    let bytes = vec![rng.below(256) as u8; a.size().min(3000) as usize];
                    allocator.ring_write(a, 0, &bytes).unwrap();
                }
            }
            in_flight.push_back((
                end_frame(&allocator, &device),
                std::mem::take(&mut frame_allocations),
            ));
            let mut collected = Vec::new();
            if in_flight.len() > 2 {
                let (fence, allocations) = in_flight.pop_front().unwrap();
                device.signal_fence(fence);
                allocator.collect().unwrap();
                collected = allocations;
            }
            // What this frame's checks counted, by the writes no longer
            // reported; the others are reported, each at its byte.
            let report = allocator.check_corruption(!0).unwrap();
            let found = written_after_free(&report);
            let before = outstanding.len();
            outstanding.retain(|&(_, memory, at)| found.contains(&(memory, at)));
            let ctx = format!("{name} frame {frame}: {found:?} {outstanding:?}");
            assert_eq!(
                found.len(),
                outstanding.len(),
                "{ctx}: a report of no write"
            );
            let counted = (before - outstanding.len()) as u64;
            counted_in_walk += counted;
            assert_eq!(allocator.corruptions_detected(), counted_in_walk, "{ctx}");
            // A new write into an allocation of the frame just collected,
            // in a chunk that holds none.
            let free_chunk: Vec<_> = collected
                .iter()
                .filter(|a| outstanding.iter().all(|&(buffer, ..)| buffer != a.buffer()))
                .collect();
            if free_chunk.is_empty() || rng.below(2) == 0 {
                continue;
            }
            let a = free_chunk[rng.below(free_chunk.len() as u64) as usize];
            let base = a.memory_offset();
            // Atoms the allocation holds wholly, for the GPU.
            let first_atom = base.next_multiple_of(atom);
            let atoms_end = (base + a.size()) / atom * atom;
            let gpu = rng.below(2) == 0 && (!non_coherent || first_atom < atoms_end);
            let into = if gpu && non_coherent {
                first_atom - base + rng.below(atoms_end - first_atom)
            } else {
                rng.below(a.size())
            };
            write_into(&device, a, into, gpu);
            gpu_writes += u32::from(gpu);
            let at = base + into;
            outstanding.push((a.buffer(), a.memory(), at));
            written += 1;
            let report = allocator.check_corruption(!0).unwrap();
            let found = written_after_free(&report);
            assert!(
                found.contains(&(a.memory(), at)),
                "{name} frame {frame}: the write at {at} of {a:?} is not found: {report:?}"
            );
        }
        for (fence, _) in in_flight {
            device.signal_fence(fence);
        }
        allocator.collect().unwrap();
        allocator.destroy_upload_ring(ring).unwrap();
        finish_frame(&allocator, &device);
        assert_eq!(destroyed, 10, "{name}");
        assert_eq!(
            allocator.corruptions_detected(),
            written,
            "{name}: every write counted once ({counted_in_walk} in the walk, {outstanding:?} left)"
        );
        assert!(
            counted_in_walk > 20 && gpu_writes > 5,
            "{name}: {written} writes, {counted_in_walk} counted in the walk, {gpu_writes} by the GPU"
        );
        finish(allocator, &device);
    }
}

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
    super::leak_log::install();
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
        let lines = super::leak_log::lines();
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
    super::leak_log::install();
    let (allocator, device) = allocator_with(FakeLayout::mobile(), with_fill());
    let ring = ring(&allocator, 64 << 10, Usage::READBACK, false);
    let mut count = 0;
    for gpu in [false, true] {
        let first = allocator.ring_allocate(ring, 1000, 256).unwrap();
        assert_eq!(first.buffer_offset(), 0, "gpu {gpu}: an empty ring");
        let (memory, offset, stale) = (first.memory(), first.memory_offset(), first.mapped_ptr());
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
        let lines = super::leak_log::lines();
        assert!(lines.iter().any(|l| l.contains(&needle)), "{lines:#?}");
        // A live neighbour in the same atom, written through its pointer
        // and not flushed, and one in the atoms after.
        let neighbour = allocator.ring_allocate(ring, 50, 4).unwrap();
        assert_eq!(neighbour.buffer_offset(), 100, "in the same atom");
        write_at(neighbour.mapped_ptr(), 0, &[9; 50]);
        let third = allocator.ring_allocate(ring, 2000, 4).unwrap();
        assert!(all(&bytes_at(third.mapped_ptr(), 2000), NEW));
        assert!(all(&bytes_at(neighbour.mapped_ptr(), 50), 9), "gpu {gpu}");
        assert_eq!(allocator.corruptions_detected(), count, "gpu {gpu}");
        finish_frame(&allocator, &device);
    }
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
        assert!(all(&bytes_at(first.mapped_ptr(), 1000), 0), "untouched");
        allocator.ring_write(&first, 0, &[7; 1000]).unwrap();
        finish_frame(&allocator, &device);
        assert!(all(&bytes_at(first.mapped_ptr(), 1000), 7), "not filled");
        write_at(first.mapped_ptr(), 10, &[0x42]);
        let again = allocator.ring_allocate(ring, 1000, 256).unwrap();
        assert_eq!(again.memory_offset(), first.memory_offset());
        let bytes = bytes_at(again.mapped_ptr(), 1000);
        assert_eq!((bytes[9], bytes[10], bytes[11]), (7, 0x42, 7));
        assert_eq!(allocator.corruptions_detected(), 0);
        allocator.destroy_upload_ring(ring).unwrap();
        finish_frame(&allocator, &device);
        finish(allocator, &device);
    }
}

/// Arms the fake device to panic in its `nth` flush from now (1: the
/// next); returns how many flushes are left before it does (0 once it
/// has).
fn panic_in_flush(device: &FakeDevice, nth: u64) -> std::sync::Arc<AtomicU64> {
    let left = std::sync::Arc::new(AtomicU64::new(nth));
    let counter = std::sync::Arc::clone(&left);
    device.set_flush_hook(Some(Box::new(move || {
        let before = counter.load(Ordering::SeqCst);
        if before > 0 {
            counter.store(before - 1, Ordering::SeqCst);
            assert!(before != 1, "the backend panics in a flush");
        }
    })));
    left
}

/// A backend panicking in the flush of a new chunk's fill (the third
/// flush `create_upload_ring` makes in non-coherent memory, after the
/// new block's fill and the chunk allocation's) leaves no buffer or
/// memory behind: the chunk is freed before the panic goes on.
#[test]
fn a_backend_panicking_in_a_new_chunk_s_fill_leaves_nothing_behind() {
    let (allocator, device) = allocator_with(FakeLayout::mobile(), with_fill());
    let left = panic_in_flush(&device, 3);
    let caught = panic::catch_unwind(AssertUnwindSafe(|| {
        ring(&allocator, 64 << 10, Usage::READBACK, false)
    }));
    assert!(caught.is_err(), "the backend panicked");
    assert_eq!(left.load(Ordering::SeqCst), 0);
    device.set_flush_hook(None);
    assert_eq!(device.live_resources(), 0, "the chunk's buffer");
    assert_eq!(allocator.stats().allocations(), 0, "the chunk's memory");
    let ring = ring(&allocator, 64 << 10, Usage::READBACK, false);
    let a = allocator.ring_allocate(ring, 1000, 256).unwrap();
    assert!(all(&bytes_at(a.mapped_ptr(), 1000), NEW));
    allocator.destroy_upload_ring(ring).unwrap();
    finish_frame(&allocator, &device);
    finish(allocator, &device);
}

/// A backend panicking in the invalidate of a ring allocation's check,
/// or in the flush of a reclaimed frame's fill (in `collect`, which took
/// a deferred free out of the frame queue), leaves nothing behind: the
/// panic reaches the caller once the call's work is done (the deferred
/// free is carried out), and the ring goes on serving, with no false
/// report.
#[test]
fn a_backend_panicking_in_the_ring_fills_leaves_nothing_behind() {
    let (allocator, device) = allocator_with(FakeLayout::mobile(), with_fill());
    let ring = ring(&allocator, 64 << 10, Usage::READBACK, false);
    let request = buffer(1 << 20, 256, Usage::DEVICE_LOCAL).dedicated(DedicatedPolicy::Always);
    let queued = allocator.allocate(&request).unwrap();
    let first = allocator.ring_allocate(ring, 1000, 256).unwrap();
    allocator.free_after_frame(queued).unwrap();
    let live = device.live_allocations().len();
    device.signal_fence(end_frame(&allocator, &device));
    let left = panic_in_flush(&device, 1);
    let caught = panic::catch_unwind(AssertUnwindSafe(|| allocator.collect()));
    assert!(caught.is_err(), "the backend panicked");
    assert_eq!(left.load(Ordering::SeqCst), 0);
    device.set_flush_hook(None);
    assert_eq!(
        device.live_allocations().len(),
        live - 1,
        "the free was made"
    );
    assert!(all(&bytes_at(first.mapped_ptr(), 1000), FREED));
    device.panic_on(FakeCall::Invalidate, 1);
    let caught = panic::catch_unwind(AssertUnwindSafe(|| {
        allocator.ring_allocate(ring, 1000, 256)
    }));
    assert!(caught.is_err(), "the backend panicked");
    let next = allocator.ring_allocate(ring, 1000, 256).unwrap();
    assert!(all(&bytes_at(next.mapped_ptr(), 1000), NEW));
    finish_frame(&allocator, &device);
    let again = allocator.ring_allocate(ring, 3000, 256).unwrap();
    assert!(all(&bytes_at(again.mapped_ptr(), 3000), NEW));
    assert_eq!(allocator.corruptions_detected(), 0);
    allocator.destroy_upload_ring(ring).unwrap();
    finish_frame(&allocator, &device);
    finish(allocator, &device);
}

/// A logger panicking on the line of a write after free (one that fails a
/// test on an error) reaches `ring_allocate`'s caller with the rings'
/// lock released and the write counted; the ring goes on serving.
#[test]
fn a_logger_panicking_on_the_line_leaves_the_ring_working() {
    let (allocator, device) = allocator_with(FakeLayout::discrete(), with_fill());
    let ring = ring(&allocator, 64 << 10, Usage::UPLOAD, false);
    let first = allocator.ring_allocate(ring, 1000, 256).unwrap();
    finish_frame(&allocator, &device);
    write_at(first.mapped_ptr(), 5, &[0x42]);
    super::leak_log::panic_on_line_with("before a ring allocation");
    let caught = panic::catch_unwind(AssertUnwindSafe(|| {
        allocator.ring_allocate(ring, 1000, 256)
    }));
    assert!(caught.is_err(), "the logger panicked");
    assert_eq!(allocator.corruptions_detected(), 1);
    let next = allocator.ring_allocate(ring, 1000, 256).unwrap();
    assert!(all(&bytes_at(next.mapped_ptr(), 1000), NEW));
    assert_eq!(allocator.corruptions_detected(), 1);
    allocator.destroy_upload_ring(ring).unwrap();
    finish_frame(&allocator, &device);
    finish(allocator, &device);
}

/// A logger that calls back into the allocator on the line of a write
/// after free (to dump its state) finds its locks free: the line is
/// logged once `ring_allocate` has released the rings' lock. (Logged
/// under it, debug builds panic on the lock taken again; release builds
/// deadlock.)
#[test]
fn a_logger_calling_back_into_the_allocator_on_the_line_does_not_deadlock() {
    let (allocator, device) = allocator_with(FakeLayout::discrete(), with_fill());
    let allocator = std::sync::Arc::new(allocator);
    let ring = ring(&allocator, 64 << 10, Usage::UPLOAD, false);
    let first = allocator.ring_allocate(ring, 1000, 256).unwrap();
    finish_frame(&allocator, &device);
    write_at(first.mapped_ptr(), 5, &[0x42]);
    let inner = std::sync::Arc::new(std::sync::Mutex::new(None));
    let (from_logger, result) = (
        std::sync::Arc::clone(&allocator),
        std::sync::Arc::clone(&inner),
    );
    super::leak_log::on_line_with("before a ring allocation", move || {
        let allocated = from_logger.ring_allocate(ring, 16, 16).map(|a| a.size());
        let report = from_logger.check_corruption(!0).map(|r| r.free_checked);
        *result.lock().unwrap() = Some((allocated, report.is_ok()));
    });
    let again = allocator.ring_allocate(ring, 1000, 256).unwrap();
    assert_eq!(allocator.corruptions_detected(), 1);
    assert!(all(&bytes_at(again.mapped_ptr(), 1000), NEW));
    assert_eq!(*inner.lock().unwrap(), Some((Ok(16), true)));
    allocator.destroy_upload_ring(ring).unwrap();
    finish_frame(&allocator, &device);
    let allocator = std::sync::Arc::into_inner(allocator).unwrap();
    finish(allocator, &device);
}

/// A ring like [`ring`]'s, of `size` bytes, not growing, named `name`
/// (for a log line no other test's matches).
fn named_ring(allocator: &FakeAllocator, name: &str, size: u64, usage: Usage) -> UploadRing {
    allocator
        .create_upload_ring(&UploadRingDesc {
            size,
            usage,
            name: Some(name),
            ..UploadRingDesc::default()
        })
        .unwrap()
}

/// How a chunk with a write after free in its free space goes.
#[derive(Clone, Copy, Debug, PartialEq)]
enum ChunkEnd {
    /// Its ring destroyed, then `collect` after the frame.
    Collect,
    /// Its ring destroyed, then `collect_idle`.
    CollectIdle,
    /// With its ring, at the allocator's drop.
    Drop,
}

/// A write into a ring's free space after its frame was collected, which
/// no ring allocation takes again before the chunk goes, is caught as the
/// chunk is freed: after its ring is destroyed, by `collect` or
/// `collect_idle`, and at the allocator's drop; counted, and logged
/// naming the byte and the ring. In coherent memory and in non-coherent
/// memory, where a GPU write there is seen once its whole atoms are
/// invalidated. The ring allocation of the frame the ring is destroyed in,
/// written by the engine (through `ring_write`, and through its pointer,
/// never flushed), is not free space: nothing is reported for it. (Before,
/// the chunk's free filled its bytes again unchecked.)
#[test]
fn a_write_after_free_is_caught_when_a_ring_s_chunk_is_freed() {
    super::leak_log::install();
    let cases = [
        (FakeLayout::discrete(), Usage::UPLOAD, false),
        (FakeLayout::mobile(), Usage::READBACK, false),
        (FakeLayout::mobile(), Usage::READBACK, true),
    ];
    let mut case_index = 0;
    for (layout, usage, gpu) in cases {
        for end in [ChunkEnd::Collect, ChunkEnd::CollectIdle, ChunkEnd::Drop] {
            case_index += 1;
            let case = format!("{} gpu {gpu} {end:?}", layout.name);
            let name = format!("chunk-end-{case_index}");
            let (allocator, device) = allocator_with(layout.clone(), with_fill());
            let ring = named_ring(&allocator, &name, 64 << 10, usage);
            let first = allocator.ring_allocate(ring, 10_000, 256).unwrap();
            allocator.ring_write(&first, 0, &[7; 10_000]).unwrap();
            finish_frame(&allocator, &device);
            // The engine's data in the frame the ring goes in: not free.
            let live = allocator.ring_allocate(ring, 2000, 256).unwrap();
            assert_eq!(live.buffer_offset(), 0, "{case}");
            allocator.ring_write(&live, 0, &[9; 2000]).unwrap();
            write_at(live.mapped_ptr(), 1990, &[5; 10]);
            // The bug: a write through the collected frame's allocation,
            // past `live`, into free space.
            let at = 5000;
            write_into(&device, &first, at, gpu);
            assert_eq!(allocator.corruptions_detected(), 0, "{case}");
            match end {
                ChunkEnd::Collect => {
                    allocator.destroy_upload_ring(ring).unwrap();
                    finish_frame(&allocator, &device);
                }
                ChunkEnd::CollectIdle => {
                    allocator.destroy_upload_ring(ring).unwrap();
                    // SAFETY: the fake device runs no GPU work.
                    unsafe { allocator.collect_idle() };
                }
                ChunkEnd::Drop => {}
            }
            if end != ChunkEnd::Drop {
                assert_eq!(allocator.stats().allocations(), 0, "{case}: freed");
                assert_eq!(allocator.corruptions_detected(), 1, "{case}");
            }
            let (memory, offset) = (first.memory(), first.memory_offset());
            finish(allocator, &device);
            let needle = format!("byte {} of memory {memory:?}", offset + at);
            let ring_needle = format!("upload ring \"{name}\", chunk 0, ring offset {at}");
            let lines = super::leak_log::lines();
            let found: Vec<_> = lines.iter().filter(|l| l.contains(&ring_needle)).collect();
            assert_eq!(found.len(), 1, "{case}: {lines:#?}");
            assert!(found[0].contains(&needle), "{case}: {}", found[0]);
            assert!(
                found[0].contains("before its upload ring's chunk was freed"),
                "{case}: {}",
                found[0]
            );
            let other = format!("upload ring \"{name}\"");
            let reported = lines.iter().filter(|l| l.contains(&other)).count();
            assert_eq!(reported, 1, "{case}: the live allocation is not reported");
        }
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
    super::leak_log::install();
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
        write_at(a.mapped_ptr(), 0, &[3; 10]);
        write(600);
        let b = allocator.ring_allocate(ring, 100, 1024).unwrap();
        assert_eq!(b.buffer_offset(), 1024, "{case}");
        assert_eq!(allocator.corruptions_detected(), 1, "{case}: padding");
        assert!(all(&bytes_at(a.mapped_ptr(), 10), 3), "{case}");
        assert!(all(&bytes_at(b.mapped_ptr(), 100), NEW), "{case}");
        let padding = bytes_at(stale.mapped_ptr(), 1024);
        assert!(all(&padding[10..600], FREED) && all(&padding[601..], FREED));
        let first = end_frame(&allocator, &device);
        // 1124..3624; the next frame's allocation wraps, skipping the end.
        let c = allocator.ring_allocate(ring, 2500, 1).unwrap();
        assert_eq!(c.buffer_offset(), 1124, "{case}");
        write_at(c.mapped_ptr(), 0, &[4; 2500]);
        let second = end_frame(&allocator, &device);
        device.signal_fence(first);
        allocator.collect().unwrap();
        write(3900);
        let d = allocator.ring_allocate(ring, 1000, 1).unwrap();
        assert_eq!(d.buffer_offset(), 0, "{case}: wrapped");
        assert_eq!(allocator.corruptions_detected(), 2, "{case}: skipped end");
        assert!(all(&bytes_at(d.mapped_ptr(), 1000), NEW), "{case}");
        assert!(all(&bytes_at(c.mapped_ptr(), 2500), 4), "{case}");
        // The skipped end is the frame's: not free, not reported again.
        assert!(allocator.check_corruption(!0).unwrap().is_clean(), "{case}");
        device.signal_fence(second);
        finish_frame(&allocator, &device);
        assert!(all(&bytes_at(stale.mapped_ptr(), 4096), FREED), "{case}");
        assert!(allocator.check_corruption(!0).unwrap().is_clean(), "{case}");
        allocator.destroy_upload_ring(ring).unwrap();
        finish_frame(&allocator, &device);
        assert_eq!(allocator.corruptions_detected(), 2, "{case}");
        finish(allocator, &device);
        let lines = super::leak_log::lines();
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
    write_at(stale.mapped_ptr(), 2900, &[0x43]);
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
    let stale = first.mapped_ptr();
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
    write_at(stale.mapped_ptr(), 3000, &[0x42]);
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

/// A write after free into the space of a frame that was in flight when
/// its ring was destroyed, made once that frame is collected (through a
/// pointer kept from its ring allocation) and before the chunk is freed,
/// is caught as the chunk is freed: counted, and logged naming the byte
/// and the ring. The frame the ring is destroyed in, written by the
/// engine, is not reported. (Before, only the space free when the ring
/// was destroyed was checked.)
#[test]
fn a_write_after_free_into_a_destroyed_ring_s_collected_frame_is_caught() {
    super::leak_log::install();
    for (index, (layout, usage)) in [
        (FakeLayout::discrete(), Usage::UPLOAD),
        (FakeLayout::mobile(), Usage::READBACK),
    ]
    .into_iter()
    .enumerate()
    {
        let case = layout.name;
        let name = format!("destroyed-in-flight-{index}");
        let (allocator, device) = allocator_with(layout.clone(), with_fill());
        let ring = named_ring(&allocator, &name, 64 << 10, usage);
        let first = allocator.ring_allocate(ring, 10_000, 256).unwrap();
        allocator.ring_write(&first, 0, &[7; 10_000]).unwrap();
        let in_flight = end_frame(&allocator, &device);
        let live = allocator.ring_allocate(ring, 2000, 256).unwrap();
        allocator.ring_write(&live, 0, &[9; 2000]).unwrap();
        allocator.destroy_upload_ring(ring).unwrap();
        // `first`'s frame is collected: its bytes are free from now on.
        device.signal_fence(in_flight);
        allocator.collect().unwrap();
        assert_eq!(allocator.stats().allocations(), 1, "{case}: not freed yet");
        let at = 5000;
        write_at(first.mapped_ptr(), at, &[0x42]);
        finish_frame(&allocator, &device);
        assert_eq!(allocator.stats().allocations(), 0, "{case}: freed");
        assert_eq!(allocator.corruptions_detected(), 1, "{case}");
        let (memory, offset) = (first.memory(), first.memory_offset());
        finish(allocator, &device);
        let needle = format!("byte {} of memory {memory:?}", offset + at);
        let ring_needle = format!("upload ring \"{name}\", chunk 0, ring offset {at}");
        let lines = super::leak_log::lines();
        let found: Vec<_> = lines.iter().filter(|l| l.contains(&ring_needle)).collect();
        assert_eq!(found.len(), 1, "{case}: {lines:#?}");
        assert!(found[0].contains(&needle), "{case}: {}", found[0]);
        let other = format!("upload ring \"{name}\"");
        let reported = lines.iter().filter(|l| l.contains(&other)).count();
        assert_eq!(reported, 1, "{case}: the live allocation is not reported");
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
        super::frames::while_a_ring_write_flushes(&allocator, &device, &target, || {
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
    write_at(target.mapped_ptr(), at, &[0x42]);
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
