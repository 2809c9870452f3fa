//! `ring_write`: the non-coherent atoms it flushes, its refusals in their
//! documented order, and how it runs beside other threads: it copies with
//! the rings' lock released, so other ring calls, `end_frame` and `collect`
//! go on meanwhile, and writes into one non-coherent chunk, or into one
//! allocation, take turns.

use vk_suballoc::device::fake::{FakeDevice, FakeLayout};
use vk_suballoc::{Error, RingAllocation, UploadRingDesc, Usage};

use super::super::{allocator, finish, FakeAllocator};

use super::{
    end_frame, finish_after_frame, non_coherent_ring, while_a_ring_write_flushes, HeldWrite,
};

/// A ring write to non-coherent memory flushes exactly the atoms holding
/// the written bytes, at the start of the ring or inside a later allocation:
/// on non-coherent memory, bytes outside the flushed atoms never reach the
/// GPU.
#[test]
fn ring_writes_flush_the_atoms_of_the_written_bytes() {
    let (allocator, device, a, b) = two_allocations_in_a_non_coherent_ring();
    // Bytes 110..130 of the ring: the atom 0..256 only.
    allocator.ring_write(&a, 110, &[9; 20]).unwrap();
    // Bytes 360..370 of the ring: the atom 256..512 only.
    allocator.ring_write(&b, 60, &[7; 10]).unwrap();
    let flushed = device.flushed_ranges();
    assert_eq!(flushed.len(), 2);
    assert!(flushed.iter().all(|f| f.memory == b.memory()));
    assert_eq!(
        (flushed[0].offset, flushed[0].size),
        (a.memory_offset(), 256)
    );
    assert_eq!(
        (flushed[1].offset, flushed[1].size),
        (a.memory_offset() + 256, 256)
    );
    // SAFETY: ring allocations hand out no slices.
    let (first, second) = unsafe {
        (
            device.read(a.memory(), a.memory_offset() + 110, 20),
            device.read(b.memory(), b.memory_offset() + 60, 10),
        )
    };
    assert_eq!(first, Some(vec![9; 20]));
    assert_eq!(second, Some(vec![7; 10]));
    assert!(device.violations().is_empty(), "{:?}", device.violations());
    finish(allocator, &device);
}

/// `ring_write` refuses, in its documented order: another allocator's
/// ring allocation (however far out of range), a range past the allocation
/// (however stale), then a stale allocation.
#[test]
fn ring_write_refuses_in_the_documented_order() {
    with_a_foreign_and_a_stale_ring_allocation(|allocator, theirs, gone| {
        assert_eq!(
            allocator.ring_write(&theirs, 60, &[0; 8]),
            Err(Error::ForeignAllocation)
        );
        assert_eq!(
            allocator.ring_write(&gone, 60, &[0; 8]),
            Err(Error::RangeOutOfBounds {
                start: 60,
                end: 68,
                size: 64
            })
        );
        assert_eq!(
            allocator.ring_write(&gone, 0, &[0; 8]),
            Err(Error::StaleAllocation)
        );
    });
}

/// While one thread's `ring_write` copies and flushes (held in the fake
/// flush), another thread allocates from the same ring, writes another
/// ring, seals a frame and collects: `ring_write` holds the upload rings'
/// lock only for its checks. Before, it held it over the copy and the
/// flush, and a loading thread's 32 MiB upload stalled the render thread.
#[test]
fn ring_calls_end_frame_and_collect_do_not_wait_for_another_thread_s_ring_write() {
    let (allocator, device) = allocator(FakeLayout::mobile());
    let (ring, target) = non_coherent_ring(&allocator, 64 * 1024, 1024);
    // Coherent (mobile's type 1): its writes flush nothing.
    let other = allocator
        .create_upload_ring(&UploadRingDesc::default())
        .unwrap();
    let (written, during) = while_a_ring_write_flushes(&allocator, &device, &target, || {
        let next = allocator.ring_allocate(ring, 1024, 256).unwrap();
        let elsewhere = allocator.ring_allocate(other, 64, 64).unwrap();
        allocator.ring_write(&elsewhere, 0, &[1; 64]).unwrap();
        let fence = end_frame(&allocator, &device);
        device.signal_fence(fence);
        let collected = allocator.collect().unwrap();
        (next, collected)
    });
    let (next, collected) = during.expect("another thread's ring calls waited for the ring write");
    written.unwrap();
    assert_ne!(next.buffer_offset(), target.buffer_offset());
    assert_eq!(collected.frames, 1);
    // The write's frame was collected meanwhile: its bytes were flushed
    // all the same, before its space came back.
    // SAFETY: ring allocations hand out no slices.
    let bytes = unsafe { device.read(target.memory(), target.memory_offset(), 1024) };
    assert_eq!(bytes, Some(vec![0x5a; 1024]));
    assert!(device.violations().is_empty(), "{:?}", device.violations());
    allocator.destroy_upload_ring(ring).unwrap();
    allocator.destroy_upload_ring(other).unwrap();
    finish_after_frame(allocator, &device);
}

/// Two writes into one non-coherent ring chunk take turns: the second
/// copies nothing until the first has copied and flushed. Packed at their
/// own alignment, ring allocations share `nonCoherentAtomSize` atoms, which
/// a flush covers whole; a driver that flushes by copying the host's bytes,
/// as the fake device does, would read bytes the other write is copying.
#[test]
fn writes_into_one_non_coherent_ring_chunk_take_turns() {
    use std::time::Duration;

    let (allocator, device) = allocator(FakeLayout::mobile());
    let (ring, first) = non_coherent_ring(&allocator, 64 * 1024, 40);
    // Packed next to `first`, in the same 64-byte atom.
    let second = allocator.ring_allocate(ring, 16, 8).unwrap();
    assert_eq!(second.buffer_offset() / 64, first.buffer_offset() / 64);
    std::thread::scope(|scope| {
        let held = HeldWrite::start(scope, &allocator, &device, &first, &[0x5a; 40]);
        let second_writer = scope.spawn(|| allocator.ring_write(&second, 0, &[0xa5; 16]));
        // Time for the second write to copy, were it not waiting its turn.
        std::thread::sleep(Duration::from_millis(200));
        // SAFETY: the second write waits for its turn before it copies, so
        // nothing writes these bytes while they are read (the assertion is
        // what checks it).
        let copied =
            unsafe { std::slice::from_raw_parts(second.mapped_ptr().unwrap().as_ptr(), 16) }
                .to_vec();
        held.release().unwrap();
        assert_eq!(
            copied, [0; 16],
            "the second write copied during the first one's flush"
        );
        second_writer.join().unwrap().unwrap();
    });
    for (allocation, byte, len) in [(&first, 0x5a, 40), (&second, 0xa5, 16)] {
        // SAFETY: ring allocations hand out no slices.
        let bytes = unsafe { device.read(allocation.memory(), allocation.memory_offset(), len) };
        assert_eq!(bytes, Some(vec![byte; len]));
    }
    allocator.destroy_upload_ring(ring).unwrap();
    finish_after_frame(allocator, &device);
}

/// Two threads writing the same ring allocation at once (`RingAllocation`
/// is `Copy` and `Sync`, `ring_write` safe) copy one after the other:
/// the bytes end as one write left them, whole, and under Miri no data
/// race is reported. Coherent memory, where no flush makes them take
/// turns.
#[test]
fn two_threads_ring_writing_one_allocation_take_turns() {
    let (allocator, device) = allocator(FakeLayout::mobile());
    // Coherent (mobile's type 1).
    let ring = allocator
        .create_upload_ring(&UploadRingDesc {
            size: 64 * 1024,
            ..UploadRingDesc::default()
        })
        .unwrap();
    let len = if cfg!(miri) { 64 } else { 16 * 1024 };
    let target = allocator.ring_allocate(ring, len as u64, 256).unwrap();
    let rounds = if cfg!(miri) { 1 } else { 200 };
    for _ in 0..rounds {
        std::thread::scope(|scope| {
            for byte in [0x11u8, 0x22] {
                let (allocator, target) = (&allocator, &target);
                scope.spawn(move || allocator.ring_write(target, 0, &vec![byte; len]).unwrap());
            }
        });
        // SAFETY: both writes are over; ring allocations hand out no slices.
        let bytes = unsafe { device.read(target.memory(), target.memory_offset(), len) }.unwrap();
        assert!(
            bytes.iter().all(|&b| b == bytes[0]),
            "two writes' bytes mixed: {:?}",
            &bytes[..64]
        );
    }
    allocator.destroy_upload_ring(ring).unwrap();
    finish_after_frame(allocator, &device);
}

/// Bytes written in place through a ring allocation's pointer reach the
/// GPU on non-coherent memory once `ring_flush` flushes their atoms (and
/// not before); the range is in bytes of the allocation, `..` all of them.
/// On coherent memory the GPU sees them at once and `ring_flush` flushes
/// nothing.
#[test]
fn ring_flush_makes_bytes_written_in_place_visible() {
    let (allocator, device, a, b) = two_allocations_in_a_non_coherent_ring();
    let write = |at: &RingAllocation, offset: usize, bytes: &[u8]| {
        // SAFETY: inside the allocation, whose frame is live; ring
        // allocations hand out no slices.
        unsafe {
            std::ptr::copy_nonoverlapping(
                bytes.as_ptr(),
                at.mapped_ptr().unwrap().as_ptr().add(offset),
                bytes.len(),
            );
        }
    };
    // SAFETY: ring allocations hand out no slices (every read below).
    let seen = |at: &RingAllocation, offset: u64, len: usize| unsafe {
        device.read(at.memory(), at.memory_offset() + offset, len)
    };
    write(&a, 110, &[9; 20]);
    assert_ne!(seen(&a, 110, 20), Some(vec![9; 20]), "seen unflushed");
    allocator.ring_flush(&a, 110..130).unwrap();
    assert_eq!(seen(&a, 110, 20), Some(vec![9; 20]));
    // Bytes 360..370 of the ring, in the second atom: `..` of `b`.
    write(&b, 60, &[7; 10]);
    allocator.ring_flush(&b, ..).unwrap();
    assert_eq!(seen(&b, 60, 10), Some(vec![7; 10]));
    let flushed = device.flushed_ranges();
    assert_eq!(
        flushed
            .iter()
            .map(|f| (f.memory, f.offset, f.size))
            .collect::<Vec<_>>(),
        [
            (a.memory(), a.memory_offset(), 256),
            (a.memory(), a.memory_offset() + 256, 256),
        ],
        "b's 100 bytes at 300 lie in the second atom"
    );
    // An empty range checks and flushes nothing.
    allocator.ring_flush(&b, 5..5).unwrap();
    assert_eq!(device.flushed_ranges().len(), 2);

    // Coherent memory (mobile's type 1): nothing to flush.
    let coherent = allocator
        .create_upload_ring(&UploadRingDesc::default())
        .unwrap();
    let c = allocator.ring_allocate(coherent, 64, 64).unwrap();
    write(&c, 0, &[3; 64]);
    assert_eq!(seen(&c, 0, 64), Some(vec![3; 64]));
    allocator.ring_flush(&c, ..).unwrap();
    assert_eq!(device.flushed_ranges().len(), 2);
    assert!(device.violations().is_empty(), "{:?}", device.violations());
    finish(allocator, &device);
}

/// `ring_flush` refuses as `ring_write` does, in the same order: another
/// allocator's ring allocation (however far out of range), a range past
/// the allocation or reversed (however stale), then a stale allocation.
#[test]
#[allow(clippy::reversed_empty_ranges)]
fn ring_flush_refuses_in_the_documented_order() {
    with_a_foreign_and_a_stale_ring_allocation(|allocator, theirs, gone| {
        assert_eq!(
            allocator.ring_flush(&theirs, 60..1000),
            Err(Error::ForeignAllocation)
        );
        assert_eq!(
            allocator.ring_flush(&theirs, 10..5),
            Err(Error::ForeignAllocation)
        );
        assert_eq!(
            allocator.ring_flush(&gone, 60..68),
            Err(Error::RangeOutOfBounds {
                start: 60,
                end: 68,
                size: 64
            })
        );
        assert_eq!(
            allocator.ring_flush(&gone, 10..5),
            Err(Error::RangeOutOfBounds {
                start: 10,
                end: 5,
                size: 64
            })
        );
        assert_eq!(allocator.ring_flush(&gone, ..), Err(Error::StaleAllocation));
    });
}

/// Runs `check` with an allocator, a ring allocation of another allocator
/// (`theirs`), and one of a ring of its own since destroyed (`gone`,
/// 64 bytes); then cleans up.
fn with_a_foreign_and_a_stale_ring_allocation(
    check: impl FnOnce(&FakeAllocator, RingAllocation, RingAllocation),
) {
    let (other, other_device) = allocator(FakeLayout::integrated());
    let (allocator, device) = allocator(FakeLayout::integrated());
    let desc = UploadRingDesc {
        size: 4096,
        ..UploadRingDesc::default()
    };
    let theirs_ring = other.create_upload_ring(&desc).unwrap();
    let theirs = other.ring_allocate(theirs_ring, 64, 64).unwrap();
    let gone_ring = allocator.create_upload_ring(&desc).unwrap();
    let gone = allocator.ring_allocate(gone_ring, 64, 64).unwrap();
    allocator.destroy_upload_ring(gone_ring).unwrap();
    check(&allocator, theirs, gone);
    other.destroy_upload_ring(theirs_ring).unwrap();
    finish_after_frame(allocator, &device);
    finish_after_frame(other, &other_device);
}

/// An allocator on the mobile layout and two ring allocations of a
/// `READBACK` ring there (type 2, non-coherent, atom 256): 300 bytes from
/// the start of an atom, and 100 right after them.
fn two_allocations_in_a_non_coherent_ring(
) -> (FakeAllocator, FakeDevice, RingAllocation, RingAllocation) {
    let (allocator, device) = allocator(FakeLayout::mobile());
    let desc = UploadRingDesc {
        size: 8192,
        usage: Usage::READBACK,
        ..UploadRingDesc::default()
    };
    let ring = allocator.create_upload_ring(&desc).unwrap();
    let a = allocator.ring_allocate(ring, 300, 4).unwrap();
    let b = allocator.ring_allocate(ring, 100, 4).unwrap();
    assert_eq!(b.memory_offset() - a.memory_offset(), 300);
    assert_eq!(a.memory_offset() % 256, 0);
    (allocator, device, a, b)
}
