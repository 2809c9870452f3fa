//! A write after free into a ring's free space that no ring allocation
//! takes again is caught as the ring's chunk is freed: after the ring is
//! destroyed, by `collect` or `collect_idle`, at the allocator's drop, and
//! in the space of a frame in flight when the ring went, once that frame
//! is collected; counted, and logged naming the byte and the ring. The
//! ring allocation of the frame the ring goes in is not reported.

use vk_suballoc::device::fake::FakeLayout;
use vk_suballoc::Usage;

use super::super::debug_fill::write_at;
use super::super::frames::end_frame;
use super::super::{allocator_with, finish};

use super::{finish_frame, named_ring, with_fill, write_into};

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
    super::super::leak_log::install();
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
            write_at(live.mapped_ptr().unwrap(), 1990, &[5; 10]);
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
            let lines = super::super::leak_log::lines();
            let found: Vec<_> = lines.iter().filter(|l| l.contains(&ring_needle)).collect();
            assert_eq!(found.len(), 1, "{case}: {lines:#?}");
            assert!(found[0].contains(&needle), "{case}: {}", found[0]);
            assert!(
                found[0].contains("before its upload ring's chunk was freed"),
                "{case}: {}",
                found[0]
            );
            let other = format!("upload ring \"{name}\"");
            let (leaks, reported): (Vec<&String>, Vec<&String>) = lines
                .iter()
                .filter(|l| l.contains(&other))
                .partition(|l| l.contains("leaked upload ring"));
            assert_eq!(
                reported.len(),
                1,
                "{case}: the live allocation is not reported"
            );
            // A ring alive at the drop is a leak, named once.
            let leaked = usize::from(end == ChunkEnd::Drop);
            assert_eq!(leaks.len(), leaked, "{case}: {leaks:#?}");
        }
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
    super::super::leak_log::install();
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
        write_at(first.mapped_ptr().unwrap(), at, &[0x42]);
        finish_frame(&allocator, &device);
        assert_eq!(allocator.stats().allocations(), 0, "{case}: freed");
        assert_eq!(allocator.corruptions_detected(), 1, "{case}");
        let (memory, offset) = (first.memory(), first.memory_offset());
        finish(allocator, &device);
        let needle = format!("byte {} of memory {memory:?}", offset + at);
        let ring_needle = format!("upload ring \"{name}\", chunk 0, ring offset {at}");
        let lines = super::super::leak_log::lines();
        let found: Vec<_> = lines.iter().filter(|l| l.contains(&ring_needle)).collect();
        assert_eq!(found.len(), 1, "{case}: {lines:#?}");
        assert!(found[0].contains(&needle), "{case}: {}", found[0]);
        let other = format!("upload ring \"{name}\"");
        let reported = lines.iter().filter(|l| l.contains(&other)).count();
        assert_eq!(reported, 1, "{case}: the live allocation is not reported");
    }
}
