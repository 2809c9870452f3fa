//! Seeded long ring workloads, on the discrete layout's coherent type and
//! mobile's non-coherent one, the ring wrapping and growing: one writes
//! only where it may and nothing is ever reported; the other writes after
//! free on purpose, by the host and by the GPU, its ring destroyed every
//! 30 frames, and each write is reported by every `check_corruption` until
//! a check counts it, exactly once.

use ash::vk;
use vk_suballoc::device::fake::FakeLayout;
use vk_suballoc::{RingAllocation, Usage};

use super::super::debug_fill::{all, written_after_free, NEW};
use super::super::frames::end_frame;
use super::super::seeded_rng::Rng;
use super::super::{allocator_with, finish};

use super::{finish_frame, ring, views, with_fill, write_into};

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
