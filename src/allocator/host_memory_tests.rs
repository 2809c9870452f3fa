//! The host memory a steady frame loop takes: none more once it has run a
//! while. gpu-alloc's buddy allocator grew its pair table by a megabyte
//! every few seconds under the same five buffers made and freed each frame
//! (zakarumych/gpu-alloc issue #55); an allocator whose bookkeeping (slot
//! tables, run lists, frame queues, names, kept blocks, budget readings)
//! kept a little of each frame would do the same.

use ash::vk;

use crate::device::fake::{FakeDevice, FakeLayout, FakeMemory};
use crate::host_memory_cap::thread_net_bytes;
use crate::{
    Allocation, Allocator, Config, DedicatedPolicy, Request, ResourceKind, UploadRing,
    UploadRingDesc, Usage,
};

const KIB: u64 = 1 << 10;
const MIB: u64 = 1 << 20;

type FakeAllocator = Allocator<FakeDevice, FakeMemory>;

fn request(size: u64, usage: Usage, kind: ResourceKind) -> Request<'static> {
    let requirements = vk::MemoryRequirements {
        size,
        alignment: 256,
        memory_type_bits: !0,
    };
    Request::new(requirements, usage, kind)
}

/// One frame of an engine: uploads from a ring, small named buffers (run
/// slots), ranges of their own, an image, a staging buffer flushed, a
/// readback buffer invalidated, dedicated memory, half of them freed at once and half after the frame; the frame
/// ended on its fence,
/// the frame before it signalled and collected, and the figures read.
fn frame(
    allocator: &FakeAllocator,
    device: &FakeDevice,
    ring: UploadRing,
    fences: &[vk::Fence],
    index: usize,
) {
    for size in [256, 4000, 64 * 1024] {
        allocator.ring_allocate(ring, size, 256).unwrap();
    }
    let mut made: Vec<Allocation> = Vec::new();
    for i in 0..8 {
        let buffer = request(100 + 64 * i, Usage::DEVICE_LOCAL, ResourceKind::Buffer);
        made.push(
            allocator
                .allocate(&buffer.name("per-frame constants"))
                .unwrap(),
        );
    }
    for size in [64 * KIB, 300 * KIB, 2 * MIB] {
        let buffer = request(size, Usage::DEVICE_LOCAL, ResourceKind::Buffer);
        made.push(allocator.allocate(&buffer).unwrap());
    }
    let image = request(MIB, Usage::DEVICE_LOCAL, ResourceKind::OptimalImage);
    made.push(allocator.allocate(&image.name("shadow map")).unwrap());
    let staging = request(256 * KIB, Usage::UPLOAD, ResourceKind::Buffer);
    let staging = allocator.allocate(&staging).unwrap();
    allocator.flush(&staging, 1000..5000).unwrap();
    made.push(staging);
    let readback = request(8 * KIB, Usage::READBACK, ResourceKind::Buffer);
    let mut readback = allocator.allocate(&readback).unwrap();
    allocator.invalidate(&mut readback, ..).unwrap();
    made.push(readback);
    let dedicated = request(4 * MIB, Usage::DEVICE_LOCAL, ResourceKind::OptimalImage)
        .dedicated(DedicatedPolicy::Always);
    made.push(allocator.allocate(&dedicated).unwrap());
    allocator.set_name(&made[0], Some("renamed")).unwrap();
    for (i, allocation) in made.into_iter().enumerate() {
        if i % 2 == 0 {
            // SAFETY: the fake device runs no GPU work.
            unsafe { allocator.free(allocation) }.unwrap();
        } else {
            allocator.free_after_frame(allocation).unwrap();
        }
    }
    let fence = fences[index % fences.len()];
    // SAFETY: the fake fence is unsignalled and no frame in flight holds it.
    unsafe { allocator.end_frame(fence) }.unwrap();
    // The frame before this one completes; its fence goes back unsignalled
    // once collected, for the frame that takes it next.
    let previous = fences[(index + fences.len() - 1) % fences.len()];
    if index > 0 {
        device.signal_fence(previous);
        allocator.collect().unwrap();
        device.reset_fence(previous);
    }
    let _ = allocator.stats();
    let _ = allocator.budgets();
    // The fake device records every flush and invalidate: its growth,
    // not the allocator's.
    device.forget_recorded_ranges();
}

/// After a warm-up, 3000 more frames of the same work take no more host
/// memory on this thread (the allocator's and the fake device's, both on
/// it): a few kilobytes of slack for a table that doubles once, where a
/// leak of 8 bytes a frame would show 24 KB. With the debug options off,
/// and on (margins, corruption checks, fills, backtraces, the allocation
/// log), on a discrete GPU and a mobile one (non-coherent readback memory).
#[test]
fn a_steady_frame_loop_takes_no_more_host_memory() {
    let debug = Config {
        debug_margin: 16,
        detect_corruption: true,
        debug_fill: true,
        allocation_backtraces: true,
        log_allocations: true,
        ..Config::default()
    };
    for (layout, config) in [
        (FakeLayout::discrete(), Config::default()),
        (FakeLayout::discrete(), debug),
        (FakeLayout::mobile(), debug),
    ] {
        let name = layout.name;
        let device = FakeDevice::new(layout);
        let allocator = Allocator::new(device.clone(), config).unwrap();
        let ring = allocator
            .create_upload_ring(&UploadRingDesc::default())
            .unwrap();
        let fences: Vec<vk::Fence> = (0..3).map(|_| device.create_fence()).collect();
        for index in 0..300 {
            frame(&allocator, &device, ring, &fences, index);
        }
        let warm = thread_net_bytes();
        for index in 300..3300 {
            frame(&allocator, &device, ring, &fences, index);
        }
        let grown = thread_net_bytes() - warm;
        assert!(
            grown < 16 * 1024,
            "{name}, {config:?}: 3000 frames took {grown} more bytes of host memory"
        );
        for fence in &fences {
            device.signal_fence(*fence);
        }
        allocator.collect().unwrap();
        allocator.destroy_upload_ring(ring).unwrap();
        drop(allocator);
        device.assert_clean();
    }
}
