//! Ring fills in non-coherent memory beside a `ring_write` on another
//! thread: the write's flush covers whole `nonCoherentAtomSize` atoms,
//! which ring allocations, packed at their own alignment, share with the
//! bytes a fill writes (a new ring allocation's, the space a reclaim gave
//! back), and the fake device flushes by copying the host's bytes of
//! those atoms. Run under Miri for the data race that would be
//! (`cargo +nightly miri test --features fake-device --test fake_device
//! beside_a_ring_write`); without it, the bytes and the counts are checked.

use vk_suballoc::device::fake::FakeLayout;
use vk_suballoc::{Error, Usage};

use super::super::debug_fill::{FREED, NEW};
use super::super::frames::end_frame;
use super::super::{allocator_with, finish};
use super::{finish_frame, ring, views, with_fill};

/// Rounds of each test: each a fresh pair of threads.
const ROUNDS: usize = if cfg!(miri) { 2 } else { 200 };

/// A `ring_allocate` (whose check fills its bytes with `0xDC`) and a
/// `ring_write` into the allocation before it, in the same atom, run on
/// two threads at once: the write's bytes reach the device whole, the new
/// allocation reads `0xDC` on the host, and no write after free is
/// reported.
#[test]
fn non_coherent_a_new_allocation_s_fill_beside_a_ring_write() {
    let (allocator, device) = allocator_with(FakeLayout::mobile(), with_fill());
    // Mobile's READBACK type: cached, not coherent, 256-byte atoms.
    let ring = ring(&allocator, 4096, Usage::READBACK, false);
    for round in 0..ROUNDS {
        let first = allocator.ring_allocate(ring, 100, 1).unwrap();
        let second = std::thread::scope(|scope| {
            let allocator = &allocator;
            let first = &first;
            scope.spawn(move || allocator.ring_write(first, 0, &[7; 100]).unwrap());
            scope
                .spawn(move || allocator.ring_allocate(ring, 100, 1).unwrap())
                .join()
                .unwrap()
        });
        assert_eq!(
            second.buffer_offset(),
            first.buffer_offset() + 100,
            "round {round}: in the first allocation's atom"
        );
        assert_eq!(
            views(&device, &first),
            (vec![7; 100], vec![7; 100]),
            "round {round}"
        );
        assert_eq!(views(&device, &second).0, vec![NEW; 100], "round {round}");
        finish_frame(&allocator, &device);
    }
    assert_eq!(allocator.corruptions_detected(), 0);
    allocator.destroy_upload_ring(ring).unwrap();
    finish_frame(&allocator, &device);
    finish(allocator, &device);
}

/// A `collect_idle` that reclaims a frame (and fills its space with
/// `0xEF`) and a `ring_write` into the next frame's allocation, which
/// shares an atom with that space, run on two threads at once: the write
/// either comes first, and its bytes reach the device whole (until the
/// collect reclaims them too, once the write is over), or finds its frame
/// collected; no write after free is reported. (`collect_idle`
/// reads no fence, so only the rings' lock orders it with the write:
/// Miri sees the race at once.)
#[test]
fn non_coherent_a_reclaim_s_fill_beside_a_ring_write() {
    let (allocator, device) = allocator_with(FakeLayout::mobile(), with_fill());
    let ring = ring(&allocator, 4096, Usage::READBACK, false);
    let mut written = 0;
    for round in 0..ROUNDS {
        allocator.ring_allocate(ring, 100, 1).unwrap();
        end_frame(&allocator, &device);
        // The next frame's, in the atom of the first frame's bytes.
        let next = allocator.ring_allocate(ring, 100, 1).unwrap();
        let write = std::thread::scope(|scope| {
            let allocator = &allocator;
            let next = &next;
            let writer = scope.spawn(move || allocator.ring_write(next, 0, &[9; 100]));
            // SAFETY: the fake device runs no GPU work.
            scope.spawn(move || unsafe { allocator.collect_idle() });
            writer.join().unwrap()
        });
        match write {
            Ok(()) => written += 1,
            Err(error) => assert_eq!(error, Error::StaleAllocation, "round {round}"),
        }
        // The write's bytes, or, once the collect reclaimed their frame
        // after the write, the fill; the same on the host and the device.
        let (host, gpu) = views(&device, &next);
        assert_eq!(host, gpu, "round {round}");
        let byte = if write.is_ok() && host[0] == 9 {
            9
        } else {
            FREED
        };
        assert_eq!(host, vec![byte; 100], "round {round}");
        // A write that held its frame's space back gives it back here.
        finish_frame(&allocator, &device);
    }
    println!("{written} of {ROUNDS} writes came before the collect");
    assert_eq!(allocator.corruptions_detected(), 0);
    allocator.destroy_upload_ring(ring).unwrap();
    finish_frame(&allocator, &device);
    finish(allocator, &device);
}
