//! The carrying out of deferred frees: once a frame's fence or timeline
//! semaphore has signalled, the frees queued for it (allocations, buffers
//! and images destroyed after the frame, aliases, and retired upload-ring
//! chunks) are released here, one at a time and with no lock of the
//! allocator held but `releasing`. It is apart from `frames.rs`, which
//! queues the frees and decides which frames have finished, because this
//! is the one place that destroys and frees what the GPU no longer uses,
//! and it keeps going past a panic of the backend or the memory callback
//! so that no memory is left allocated; the drop's release of everything
//! still queued is here too.

use crate::allocator::{lock, Allocator};
use crate::device::MemoryDeviceExt;
use crate::frames::upload_ring::{RetiredChunk, RingState};
use crate::frames::Deferred;
use crate::memory::deferred_log;
use crate::memory::first_panic::FirstPanic;

impl<D: MemoryDeviceExt<M>, M: Send> Allocator<D, M> {
    /// Carries out `items` in order, with no lock of the allocator held but
    /// `releasing` (by the callers that share the allocator). A panic (of
    /// the memory callback, `MemoryContext::tell`, or of a logger) in one
    /// stops that one, not the rest: the first goes on once every item is
    /// carried out.
    pub(in crate::allocator) fn release_each(&self, items: Vec<Deferred>) {
        let mut panics = FirstPanic::default();
        for item in items {
            panics.run(|| self.release(item));
        }
        panics.resume();
    }

    /// Carries out one deferred free whose frame has finished. A panic of
    /// the backend destroying the buffer or image (a bug, caught by the
    /// engine) still frees the memory, then goes on: unwound past the free,
    /// the memory stayed allocated until the allocator's drop.
    fn release(&self, item: Deferred) {
        let mut panics = FirstPanic::default();
        let mut result = Ok(());
        // SAFETY: the item's frame signal has completed, and `end_frame`'s
        // contract says that signal follows all GPU work that may use it
        // (from `collect_idle`: its caller vouches that no GPU work uses
        // it; at drop: the device is idle); a buffer or image came from this
        // device and is destroyed only here (the contracts of
        // `destroy_*_after_frame`, and ring chunks are the allocator's own).
        // Memory may be freed while a resource whose destroy panicked is
        // still bound to it: the resource merely may not be used again
        // (VUID-vkFreeMemory-memory-00677 asks only that no pending GPU work
        // uses the memory).
        unsafe {
            match item {
                Deferred::Free(allocation) => result = self.free(allocation),
                Deferred::Buffer(buffer, allocation) => {
                    panics.run(|| self.context.device.destroy_buffer(buffer));
                    panics.run(|| result = self.free(allocation));
                }
                Deferred::Image(image, allocation) => {
                    panics.run(|| self.context.device.destroy_image(image));
                    panics.run(|| result = self.free(allocation));
                }
                Deferred::AliasBuffer(buffer) => self.context.device.destroy_buffer(buffer),
                Deferred::AliasImage(image) => self.context.device.destroy_image(image),
                // No write copies into it (`Rings::sort_ring_chunks` kept
                // it back until none did; no new one can start).
                Deferred::RingChunk(chunk) => {
                    debug_assert!(!chunk.pins.any_pinned());
                    let RetiredChunk {
                        buffer,
                        allocation,
                        free,
                        ..
                    } = *chunk;
                    // With debug fills: its free ring space is checked
                    // before it goes (a backend's panic in an invalidate
                    // does not keep it from going).
                    if let Some(free) = free {
                        panics.run(|| self.check_retired_chunk(&allocation, &free));
                    }
                    panics.run(|| self.context.device.destroy_buffer(buffer));
                    panics.run(|| result = self.free(allocation));
                }
            }
        }
        if let Err(error) = result {
            // With debug work on, logged once `collect`'s locks
            // (`releasing`) are released, as the debug work's lines
            // (`deferred_log`); else, and in the drop, at once.
            // No caller reaches it: a queued allocation is checked as it
            // joins the queue, and its pool cannot be destroyed under it.
            let line = format!("vk-suballoc: deferred free failed: {error}");
            deferred_log::log(log::Level::Warn, line);
        }
        panics.resume();
    }

    /// Releases every deferred free now, for drop: the device must be idle.
    pub(crate) fn release_all_deferred(&mut self) {
        // `&mut self`: no `ring_write` is copying, so nothing is pinned.
        let mut items: Vec<Deferred> = lock(&self.frames).drain_all().collect();
        let mut rings = lock(&self.rings);
        let live: Vec<RingState> = rings.rings.drain().collect();
        items.extend(
            rings
                .retired
                .drain(..)
                .map(|chunk| Deferred::RingChunk(Box::new(chunk))),
        );
        // Every destroyed ring's chunk is in `items`: none leaves a copy of
        // its memory handle behind.
        rings.settle_leaving(&mut items);
        debug_assert!(rings.leaving.is_empty());
        rings.leaving.clear();
        drop(rings);
        // A logger's panic on a leaked ring's line stops that line, not the
        // release: it goes on once every item is carried out.
        let mut panics = FirstPanic::default();
        for RingState { chunks, name, .. } in live {
            // A ring not destroyed is a leak, as a live allocation is:
            // named as the pools name theirs (`TypePool::log_leaks`). Its
            // bytes are its chunks' (a growing ring's outgrown chunks are
            // larger than its chunk size).
            if let Some(first) = chunks.first() {
                let label = name.as_deref().unwrap_or("unnamed");
                let bytes: u64 = chunks.iter().map(|chunk| chunk.linear.capacity()).sum();
                panics.run(|| {
                    log::warn!(
                        "vk-suballoc: leaked upload ring {label:?}: {} chunk(s), {bytes} bytes (memory type {})",
                        chunks.len(),
                        first.allocation.memory_type()
                    );
                });
            }
            for (index, chunk) in chunks.into_iter().enumerate() {
                // Its reclaim state is dropped: its frames are not
                // collected, and their space is not checked.
                let (retired, _leaving) = chunk.retire(name.as_deref(), index);
                items.push(Deferred::RingChunk(retired));
            }
        }
        panics.run(|| self.release_each(items));
        panics.resume();
    }
}
