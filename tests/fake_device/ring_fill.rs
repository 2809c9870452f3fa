//! Debug fills in upload rings (`Config::debug_fill`): a chunk's free ring
//! space reads `0xEF` (when the chunk is made, and again when a frame's
//! space is reclaimed), ring allocations read `0xDC` when handed out, and
//! a write into ring space after its frame was collected, by the host
//! through a kept pointer or by the GPU, is caught by the `ring_allocate`
//! that takes those bytes again; in non-coherent memory too, where the
//! fills are flushed and the check invalidates first, never over a live
//! ring allocation's bytes (the fake device would report a range off the
//! atoms, `finish`).
//!
//! The tests sit in the files below by what they check. This file holds
//! the helpers they share: the config with fills, rings (named or not),
//! a frame finished and collected, a write after free by the host or the
//! GPU, and the two views of a ring allocation's bytes and the spans a
//! `check_corruption` report found written.

use ash::vk;
use vk_suballoc::device::fake::FakeDevice;
use vk_suballoc::{Config, CorruptionReport, RingAllocation, UploadRing, UploadRingDesc, Usage};

use super::debug_fill::{bytes_at, device_bytes, write_at};
use super::frames::end_frame;
use super::FakeAllocator;

#[path = "ring_fill/allocation_checks.rs"]
mod allocation_checks;
#[path = "ring_fill/beside_writes.rs"]
mod beside_writes;
#[path = "ring_fill/check_corruption.rs"]
mod check_corruption;
#[path = "ring_fill/chunk_frees.rs"]
mod chunk_frees;
#[path = "ring_fill/long_workloads.rs"]
mod long_workloads;
#[path = "ring_fill/non_coherent_memory.rs"]
mod non_coherent_memory;
#[path = "ring_fill/panics_and_reentry.rs"]
mod panics_and_reentry;

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
        write_at(a.mapped_ptr().unwrap(), at, &[0x42]);
    }
}

/// A ring allocation's bytes, as the host sees them and as the GPU does.
fn views(device: &FakeDevice, a: &RingAllocation) -> (Vec<u8>, Vec<u8>) {
    let host = bytes_at(a.mapped_ptr().unwrap(), a.size());
    let gpu = device_bytes(device, a.memory(), a.memory_offset(), a.size());
    (host, gpu)
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
