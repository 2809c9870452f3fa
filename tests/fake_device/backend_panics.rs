//! A device backend that panics (a bug, caught by the engine) in a call the
//! allocator makes between two steps that belong together: the memory
//! object it made or was freeing, the buffer it made, and the frees it took
//! out of the frame queue are not left behind, the figures stay those of
//! what is alive, and the allocator carries on. (`vkAllocateMemory`'s own
//! panic is `failures.rs`'s; the memory callback's, `threads/callback_panic.rs`'s.)

use std::panic::{self, AssertUnwindSafe};
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;

use ash::vk::{self, Handle};
use vk_suballoc::device::fake::{FakeCall, FakeDevice, FakeLayout};
use vk_suballoc::{Collected, DedicatedPolicy, MemoryEventKind, UploadRingDesc, Usage};

use super::{allocator, assert_panicked_with, buffer, finish, free, injected_panic, FakeAllocator};

#[path = "backend_panics/panic_walk.rs"]
mod panic_walk;

/// Memory objects the memory callback was told of, less those it was told
/// are freed.
fn count_events(allocator: &mut FakeAllocator) -> Arc<AtomicI64> {
    let balance = Arc::new(AtomicI64::new(0));
    let counter = Arc::clone(&balance);
    allocator.set_memory_callback(move |event| {
        let step = match event.kind {
            MemoryEventKind::Allocated => 1,
            MemoryEventKind::Freed => -1,
        };
        counter.fetch_add(step, Ordering::Relaxed);
    });
    balance
}

/// Nothing held: no memory object by the allocator's count, the device's
/// or the callback's, and no usage counted in any heap.
fn assert_nothing_held(allocator: &FakeAllocator, device: &FakeDevice, balance: &AtomicI64) {
    assert_eq!(allocator.stats().memory_objects, 0);
    assert_eq!(device.live_allocations(), vec![]);
    assert_eq!(balance.load(Ordering::Relaxed), 0);
    assert!(allocator.budgets().iter().all(|budget| budget.usage == 0));
}

/// A panic in `vkMapMemory` of a new host-visible memory object frees the
/// object again (with its `Freed` event) before it goes on: it was made,
/// counted in its heap's usage and against `maxMemoryAllocationCount`, and
/// told to the callback, but was in no pool, so nothing ever freed it.
#[test]
fn a_backend_panicking_in_map_leaves_no_memory_behind() {
    let (mut allocator, device) = allocator(FakeLayout::discrete());
    let balance = count_events(&mut allocator);
    device.panic_on(FakeCall::Map, 1);
    let caught = panic::catch_unwind(AssertUnwindSafe(|| {
        allocator.allocate(&buffer(1 << 20, 256, Usage::UPLOAD))
    }));
    assert_panicked_with(caught, &injected_panic(FakeCall::Map), "the backend's map");
    assert_nothing_held(&allocator, &device, &balance);
    // The next request is served, and mapped.
    let mut again = allocator
        .allocate(&buffer(1 << 20, 256, Usage::UPLOAD))
        .unwrap();
    allocator.mapped_slice_mut(&mut again).unwrap()[..4].copy_from_slice(b"next");
    free(&allocator, again);
    allocator.trim();
    assert_nothing_held(&allocator, &device, &balance);
    finish(allocator, &device);
}

/// A panic in `vkUnmapMemory` of memory being freed still frees it: the
/// pool had counted it out, so nothing would ever free it again. One in
/// `vkFreeMemory` (here once the memory is freed) leaves the allocator's
/// figures agreeing: the memory object is counted out of its heap's usage
/// and out of `maxMemoryAllocationCount`'s count alike. (The count stayed
/// one too high, for good, taking a slot of that limit.)
#[test]
fn a_backend_panicking_in_unmap_or_free_still_counts_the_memory_out() {
    for call in [FakeCall::Unmap, FakeCall::Free] {
        let (mut allocator, device) = allocator(FakeLayout::discrete());
        let balance = count_events(&mut allocator);
        let request = buffer(1 << 20, 256, Usage::UPLOAD).dedicated(DedicatedPolicy::Always);
        let dedicated = allocator.allocate(&request).unwrap();
        device.panic_on(call, 1);
        let caught = panic::catch_unwind(AssertUnwindSafe(|| {
            // SAFETY: the fake device runs no GPU work.
            unsafe { allocator.free(dedicated) }
        }));
        assert_panicked_with(caught, &injected_panic(call), &format!("{call:?}"));
        assert_nothing_held(&allocator, &device, &balance);
        assert_eq!(allocator.stats().allocations(), 0);
        finish(allocator, &device);
    }
}

/// A panic while `collect` polls a frame's fence carries out the frees of
/// the frames it had found done and taken out of the queue before it goes
/// on: dropped with the unwinding, their buffers were never destroyed and
/// their memory stayed allocated until the allocator's drop. The frame
/// whose poll panicked stays queued for the next `collect`.
#[test]
fn a_backend_panicking_while_collect_polls_a_fence_still_frees_the_frames_taken() {
    let (allocator, device) = allocator(FakeLayout::discrete());
    let mut fences = Vec::new();
    for _ in 0..2 {
        let buffer_handle = vk::Buffer::from_raw(device.create_resource());
        let allocation = allocator
            .allocate(&buffer(1 << 20, 256, Usage::DEVICE_LOCAL))
            .unwrap();
        // SAFETY: a buffer of the device, destroyed by nothing else.
        unsafe { allocator.destroy_buffer_after_frame(buffer_handle, allocation) }.unwrap();
        let fence = device.create_fence();
        // SAFETY: the fence outlives the frame; the fake GPU runs nothing.
        unsafe { allocator.end_frame(fence) }.unwrap();
        device.signal_fence(fence);
        fences.push(fence);
    }
    // The first frame's poll answers (done), the second's panics.
    device.panic_on(FakeCall::SignalQuery, 2);
    let caught = panic::catch_unwind(AssertUnwindSafe(|| allocator.collect()));
    let poll = injected_panic(FakeCall::SignalQuery);
    assert_panicked_with(caught, &poll, "the second frame's poll");
    assert_eq!(device.live_resources(), 1, "the second frame's buffer");
    assert_eq!(allocator.stats().allocations(), 1);
    assert_eq!(allocator.frames_in_flight(), 1);
    let collected = allocator.collect().unwrap();
    assert_eq!(
        collected,
        Collected {
            frames: 1,
            frees: 1
        }
    );
    assert_eq!(device.live_resources(), 0);
    assert_eq!(allocator.stats().allocations(), 0);
    finish(allocator, &device);
}

/// A panic in `vkBindBufferMemory` of a new upload-ring chunk destroys the
/// chunk's buffer and frees its memory before it goes on, as a bind that
/// fails does.
#[test]
fn a_backend_panicking_in_a_ring_chunk_s_bind_leaves_no_chunk_behind() {
    let (allocator, device) = allocator(FakeLayout::discrete());
    device.panic_on(FakeCall::BindBuffer, 1);
    let desc = UploadRingDesc {
        size: 1 << 20,
        ..UploadRingDesc::default()
    };
    let caught = panic::catch_unwind(AssertUnwindSafe(|| allocator.create_upload_ring(&desc)));
    let bind = injected_panic(FakeCall::BindBuffer);
    assert_panicked_with(caught, &bind, "the chunk's bind");
    assert_eq!(device.live_resources(), 0);
    assert_eq!(allocator.stats().allocations(), 0);
    // The next ring is made, and its space handed out.
    let ring = allocator.create_upload_ring(&desc).unwrap();
    let bytes = allocator.ring_allocate(ring, 256, 16).unwrap();
    allocator.ring_write(&bytes, 0, &[7; 256]).unwrap();
    allocator.destroy_upload_ring(ring).unwrap();
    // SAFETY: the fake device runs no GPU work.
    unsafe { allocator.collect_idle() };
    assert_eq!(device.live_resources(), 0);
    finish(allocator, &device);
}

/// A panic in `vkCreateBuffer` of a growing ring's new chunk leaves the
/// ring as it was: the chunk is made with no lock of the allocator held,
/// so none is poisoned, and the next request makes the chunk.
#[test]
fn a_backend_panicking_in_a_ring_chunk_s_buffer_creation_leaves_the_ring_usable() {
    let (allocator, device) = allocator(FakeLayout::discrete());
    let desc = UploadRingDesc {
        size: 4096,
        grow: true,
        ..UploadRingDesc::default()
    };
    let ring = allocator.create_upload_ring(&desc).unwrap();
    let first = allocator.ring_allocate(ring, 3000, 16).unwrap();
    let stats = allocator.stats();
    device.panic_on(FakeCall::CreateBuffer, 1);
    let caught = panic::catch_unwind(AssertUnwindSafe(|| allocator.ring_allocate(ring, 3000, 16)));
    let create = injected_panic(FakeCall::CreateBuffer);
    assert_panicked_with(caught, &create, "the chunk's buffer creation");
    assert_eq!(allocator.stats(), stats);
    assert_eq!(device.live_resources(), 1);
    let second = allocator.ring_allocate(ring, 3000, 16).unwrap();
    assert_ne!(second.buffer(), first.buffer());
    allocator.ring_write(&first, 0, &[1; 3000]).unwrap();
    allocator.ring_write(&second, 0, &[2; 3000]).unwrap();
    allocator.destroy_upload_ring(ring).unwrap();
    // SAFETY: the fake device runs no GPU work.
    unsafe { allocator.collect_idle() };
    finish(allocator, &device);
}

/// A panic in `vkDestroyBuffer` or `vkDestroyImage` while `collect`
/// carries out a frame's frees still frees the memory the resource was
/// bound to, and the rest of the frame's frees: unwound past the free, the
/// memory stayed allocated until the allocator's drop. The first panic goes
/// on once all are carried out.
#[test]
fn a_backend_panicking_in_a_deferred_destroy_still_frees_the_memory() {
    let (allocator, device) = allocator(FakeLayout::discrete());
    let buffer_handle = vk::Buffer::from_raw(device.create_resource());
    let image_handle = vk::Image::from_raw(device.create_resource());
    let after_buffer = vk::Buffer::from_raw(device.create_resource());
    let request = buffer(1 << 20, 256, Usage::DEVICE_LOCAL);
    // SAFETY: resources of the device, destroyed by nothing else; the fake
    // GPU runs nothing.
    unsafe {
        let allocation = allocator.allocate(&request).unwrap();
        allocator
            .destroy_buffer_after_frame(buffer_handle, allocation)
            .unwrap();
        let allocation = allocator.allocate(&request).unwrap();
        allocator
            .destroy_image_after_frame(image_handle, allocation)
            .unwrap();
        let allocation = allocator.allocate(&request).unwrap();
        allocator
            .destroy_buffer_after_frame(after_buffer, allocation)
            .unwrap();
        allocator
            .free_after_frame(allocator.allocate(&request).unwrap())
            .unwrap();
    }
    let fence = device.create_fence();
    // SAFETY: the fence outlives the frame; the fake GPU runs nothing.
    unsafe { allocator.end_frame(fence) }.unwrap();
    device.signal_fence(fence);
    device.panic_on(FakeCall::DestroyBuffer, 1);
    device.panic_on(FakeCall::DestroyImage, 1);
    let caught = panic::catch_unwind(AssertUnwindSafe(|| allocator.collect()));
    let first = injected_panic(FakeCall::DestroyBuffer);
    assert_panicked_with(caught, &first, "the first panic goes on");
    assert_eq!(allocator.stats().allocations(), 0, "every free carried out");
    assert_eq!(allocator.frames_in_flight(), 0);
    // The two whose destroy panicked were never destroyed; the last was.
    assert_eq!(device.live_resources(), 2);
    device.destroy_resource(buffer_handle.as_raw());
    device.destroy_resource(image_handle.as_raw());
    assert_eq!(allocator.collect(), Ok(Collected::default()));
    finish(allocator, &device);
}
