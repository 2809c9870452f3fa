//! The allocator's frame-in-flight methods: deferred frees, frame fences
//! and budgets, and the reclaim of upload rings' space as frames are
//! collected (through `rings.rs`'s `Rings`; the rings' own methods are
//! `upload_rings.rs`'s). The carrying out of the frees whose frame has
//! finished, and the drop's release of every one still queued, are in
//! `frames/deferred_release.rs`.

use ash::vk;

use super::ring_fill::{RingDebug, RingFill};
use super::{lock, Allocation, Allocator};
use crate::device::{FrameSignal, HeapBudget, MemoryDeviceExt};
use crate::frames::upload_ring::{RingChunk, RingState};
use crate::frames::{Collected, Deferred, DeferredQueue};
use crate::memory::deferred_log;
use crate::memory::first_panic::FirstPanic;
use crate::Error;

mod deferred_release;
mod kept_blocks;

impl<D: MemoryDeviceExt<M>, M: Send> Allocator<D, M> {
    /// Frees `allocation` once every frame that may use it has finished: it
    /// joins the current frame, and is released by the first
    /// [`collect`](Self::collect) after that frame's signal.
    ///
    /// # Errors
    /// [`Error::ForeignAllocation`]; the allocation is dropped (its memory
    /// stays with its own allocator).
    ///
    /// # Time complexity
    /// O(1) amortised.
    pub fn free_after_frame(&self, allocation: Allocation) -> Result<(), Error> {
        self.check_owner(&allocation)?;
        lock(&self.frames).push(Deferred::Free(allocation));
        Ok(())
    }

    /// Destroys `buffer` and frees its allocation once every frame that may
    /// use them has finished (see [`free_after_frame`](Self::free_after_frame)).
    ///
    /// # Errors
    /// [`Error::ForeignAllocation`]; nothing is queued then.
    ///
    /// # Safety
    /// `buffer` was created by this allocator's device, with the
    /// `VkAllocationCallbacks` its backend destroys it with (the ash
    /// backend's: [`AshMemoryDevice::with_allocation_callbacks`](crate::device::AshMemoryDevice::with_allocation_callbacks),
    /// none by default), and nothing else destroys it:
    /// [`collect`](Self::collect) calls `vkDestroyBuffer` on it
    /// (VUID-vkDestroyBuffer-buffer-parameter, -00923). Work
    /// submitted before the frame ends may still use it; that is what the
    /// deferral is for.
    ///
    /// # Time complexity
    /// O(1) amortised, as [`free_after_frame`](Self::free_after_frame): the
    /// destruction is [`collect`](Self::collect)'s.
    pub unsafe fn destroy_buffer_after_frame(
        &self,
        buffer: vk::Buffer,
        allocation: Allocation,
    ) -> Result<(), Error> {
        self.check_owner(&allocation)?;
        lock(&self.frames).push(Deferred::Buffer(buffer, allocation));
        Ok(())
    }

    /// Destroys `image` and frees its allocation once every frame that may use
    /// them has finished.
    ///
    /// # Errors
    /// [`Error::ForeignAllocation`]; nothing is queued then.
    ///
    /// # Safety
    /// `image` was created by this allocator's device, with the
    /// `VkAllocationCallbacks` its backend destroys it with (as
    /// [`destroy_buffer_after_frame`](Self::destroy_buffer_after_frame)'s),
    /// and nothing else destroys it: [`collect`](Self::collect) calls
    /// `vkDestroyImage` on it (VUID-vkDestroyImage-image-parameter, -01001).
    ///
    /// # Time complexity
    /// O(1) amortised, as [`free_after_frame`](Self::free_after_frame): the
    /// destruction is [`collect`](Self::collect)'s.
    pub unsafe fn destroy_image_after_frame(
        &self,
        image: vk::Image,
        allocation: Allocation,
    ) -> Result<(), Error> {
        self.check_owner(&allocation)?;
        lock(&self.frames).push(Deferred::Image(image, allocation));
        Ok(())
    }

    /// Destroys `buffer`, an alias bound into another allocation's memory
    /// ([`create_aliasing_buffer`](Self::create_aliasing_buffer)), once
    /// every frame that may use it has finished; the allocation is not
    /// freed. Queue it before the allocation's own free, in the same frame
    /// or an earlier one, so that the alias goes first.
    ///
    /// # Safety
    /// As [`destroy_buffer_after_frame`](Self::destroy_buffer_after_frame).
    ///
    /// # Time complexity
    /// O(1) amortised, as [`free_after_frame`](Self::free_after_frame): the
    /// destruction is [`collect`](Self::collect)'s.
    pub unsafe fn destroy_alias_buffer_after_frame(&self, buffer: vk::Buffer) {
        lock(&self.frames).push(Deferred::AliasBuffer(buffer));
    }

    /// Destroys `image`, an alias bound into another allocation's memory
    /// ([`create_aliasing_image`](Self::create_aliasing_image)), once every
    /// frame that may use it has finished, as
    /// [`destroy_alias_buffer_after_frame`](Self::destroy_alias_buffer_after_frame)
    /// does a buffer.
    ///
    /// # Safety
    /// As [`destroy_image_after_frame`](Self::destroy_image_after_frame).
    ///
    /// # Time complexity
    /// O(1) amortised, as [`free_after_frame`](Self::free_after_frame): the
    /// destruction is [`collect`](Self::collect)'s.
    pub unsafe fn destroy_alias_image_after_frame(&self, image: vk::Image) {
        lock(&self.frames).push(Deferred::AliasImage(image));
    }

    /// Seals the current frame with the fence its (last) submission signals,
    /// and starts the next frame. Returns the sealed frame's index. Then
    /// releases the empty blocks kept past
    /// [`Config::empty_block_frames`](crate::Config::empty_block_frames)
    /// (`vkFreeMemory`, and the memory callback, on this thread), and
    /// every empty block kept in a heap at or over its budget (with
    /// `VK_EXT_memory_budget` the driver's figures, read then, only when
    /// some memory type keeps an empty block; VMA reads them at every
    /// `vmaSetCurrentFrameIndex`), in the memory types whose locks
    /// no other thread holds. A panic of the
    /// memory callback ([`set_memory_callback`](Self::set_memory_callback))
    /// during that release reaches the caller with the frame sealed, as on
    /// success: its index is not returned, but its fence is queued and
    /// [`collect`](Self::collect) releases it as any other frame's.
    ///
    /// # Errors
    /// [`Error::NullFrameSignal`] for a null fence;
    /// [`Error::TooManyFramesInFlight`] when an upload ring holds as many
    /// sealed frames as it can track (64): `collect` was not called for
    /// that many frames, or released none of them as the oldest one's
    /// signal was not reached (never, after a lost device: see
    /// [`Error::DeviceLost`]), or a [`ring_write`](Self::ring_write) on another
    /// thread has been copying into the ring for that many (the space of
    /// the frame it writes, and of later ones, waits for it, collected or
    /// not), or a `collect` on another thread has been polling a fence for
    /// that many (`end_frame` does not wait for the driver's poll, and the
    /// frames sealed meanwhile are the next `collect`'s). No frame is
    /// sealed on error; ring space a finished `ring_write` had held past
    /// its frame's collection is given back first all the same, as any
    /// `end_frame` or `collect` gives it back.
    ///
    /// # Time complexity
    /// O(chunks of every ring), to seal their frames; and the release of
    /// aged blocks: a pass over the blocks of each default pool that keeps
    /// two empty blocks or more, and a `vkFreeMemory` call per block
    /// released (with [`Config::debug_fill`](crate::Config::debug_fill), a
    /// read of each first); a pass over the memory types and custom
    /// pools, and, when one keeps an empty block, one query of the
    /// driver's budgets (with `VK_EXT_memory_budget`) and a pass over the
    /// blocks of each type over budget. With debug fills, a write of the ring space a
    /// retried reclaim gives back (O(bytes)).
    ///
    /// # Safety
    /// `fence` belongs to the allocator's device, stays alive until the frame
    /// is collected, released by [`collect_idle`](Self::collect_idle) or
    /// the allocator is dropped (the drop reads no fence) (and
    /// until every [`wait_and_collect`](Self::wait_and_collect)
    /// call that began before then has returned: it may still wait on the
    /// fence), and signals only after every submitted command that may use
    /// memory freed during this frame or earlier (with a frame's last
    /// `vkQueueSubmit` on one queue, its fence does). `end_frame` may come
    /// before that submission, once the fence is unsignalled (reset): a
    /// fence still signalled from its previous use reads as done, and the
    /// frame's frees would be released while its own submission may still
    /// use them. But once sealed, the fence is read by every `collect` and
    /// `wait_and_collect`, on whichever thread calls them, and
    /// `vkQueueSubmit` and `vkResetFences` take it externally synchronized
    /// (host access: the validation layer reports an overlap as
    /// UNASSIGNED-Threading-MultipleThreads): seal before the submission
    /// only where no other thread calls them until it has returned, and
    /// reset a fence only while no `wait_and_collect` on another thread may
    /// be waiting on it.
    ///
    /// Call [`collect`](Self::collect) before resetting the fence for reuse:
    /// a reset fence reads as unsignalled, so its frame (and every later one)
    /// waits for the fence's next submission, and
    /// [`wait_and_collect`](Self::wait_and_collect) waits for that too.
    pub unsafe fn end_frame(&self, fence: vk::Fence) -> Result<u64, Error> {
        self.seal(FrameSignal::Fence(fence))
    }

    /// [`end_frame`](Self::end_frame) with a timeline semaphore that reaches
    /// `value` when the frame's work is done.
    ///
    /// # Errors
    /// As [`end_frame`](Self::end_frame); [`Error::NullFrameSignal`] for a
    /// null semaphore and for `value` 0 too, which every timeline
    /// semaphore has reached from its creation and no submission can
    /// signal (a signal must raise the value): the frame would count as
    /// done at once, and its frees be released while the GPU may still
    /// use them. [`Error::TimelineValueNotAbove`] for a `value` at or
    /// below one a frame still in flight waits for on the same
    /// `semaphore`, which the semaphore reaches no later than that
    /// frame's (values only rise), alike. Nothing is sealed then.
    ///
    /// # Safety
    /// As [`end_frame`](Self::end_frame), for the semaphore reaching `value`;
    /// and the device has timeline semaphores, its `timelineSemaphore`
    /// feature enabled: through Vulkan 1.2 (both the physical device and
    /// the instance's `apiVersion` 1.2 or later: the device's version is
    /// the lower of the two), or through `VK_KHR_timeline_semaphore`
    /// enabled on the device. The
    /// [`AshMemoryDevice`](crate::device::AshMemoryDevice) backend calls
    /// the extension's commands wherever the extension is enabled, else
    /// the core `vkGetSemaphoreCounterValue` and `vkWaitSemaphores`; with
    /// neither, calling them aborts the process.
    ///
    /// # Time complexity
    /// As [`end_frame`](Self::end_frame), and a walk back over the frames in
    /// flight sealed after the newest one on `semaphore` (none when every
    /// frame is sealed on it).
    pub unsafe fn end_frame_timeline(
        &self,
        semaphore: vk::Semaphore,
        value: u64,
    ) -> Result<u64, Error> {
        self.seal(FrameSignal::Timeline { semaphore, value })
    }

    fn seal(&self, signal: FrameSignal) -> Result<u64, Error> {
        let null = match signal {
            FrameSignal::Fence(fence) => fence == vk::Fence::null(),
            FrameSignal::Timeline { semaphore, value } => {
                semaphore == vk::Semaphore::null() || value == 0
            }
        };
        if null {
            return Err(Error::NullFrameSignal);
        }
        // Debug fills of ring space given back below: logged, and a panic
        // of theirs resumed, once the frame is sealed and the locks are
        // released.
        let mut fill = RingFill::new(self);
        let mut frames = lock(&self.frames);
        if let Some(error) = timeline_value_not_above(&frames, signal) {
            drop(frames);
            return Err(error);
        }
        let mut rings = lock(&self.rings);
        rings.retry_owed(&mut |chunk, space| fill.reclaimed(chunk, space));
        if !rings.rings.iter().all(|(_, ring)| ring.can_finish_frame()) {
            drop((rings, frames));
            fill.finish();
            return Err(Error::TooManyFramesInFlight);
        }
        rings.rings.values_mut().for_each(RingState::finish_frame);
        let frame = frames.seal(signal);
        rings.current_frame = frame + 1;
        // Under the queue's lock, so that frames sealed on two threads, or a
        // `collect_idle`, set it in the order they advance the queue.
        self.context.set_current_frame(frame + 1);
        drop((rings, frames));
        let mut panics = FirstPanic::default();
        panics.run(|| fill.finish());
        self.after_frame_end();
        panics.resume();
        Ok(frame)
    }

    /// Releases the frees of sealed frames whose signal has completed, oldest
    /// first, stopping at the first frame that is not done (frames finish in
    /// submission order), and the upload-ring space of those frames. Never
    /// waits for the GPU: call it once per frame (after waiting for the oldest frame's
    /// fence, as engines do before reusing its command buffers).
    ///
    /// Nor does it wait for a [`ring_write`](Self::ring_write) on another
    /// thread: ring space that write is copying into, and the memory of a
    /// destroyed ring it is copying into, are held back (their
    /// allocations are stale all the same) and released by a later call,
    /// the space by the next `collect`, `end_frame` or `ring_allocate`
    /// after the write, the memory by the next `collect` after it. Such a
    /// chunk counts in [`Collected::frees`] when it is freed.
    ///
    /// The frames' signals are polled, and their frees carried out, with
    /// the frame queue's lock released: other threads'
    /// [`free_after_frame`](Self::free_after_frame) and
    /// [`end_frame`](Self::end_frame) wait neither for the driver's
    /// `vkGetFenceStatus` / `vkGetSemaphoreCounterValue` calls nor for its
    /// `vkFreeMemory` calls (frames they seal meanwhile are left to the
    /// next call: it polls only the frames sealed when it begins, so that a
    /// thread sealing frames as fast as it polls them does not keep it
    /// going). Other threads' `collect`,
    /// [`collect_idle`](Self::collect_idle) and
    /// [`wait_and_collect`](Self::wait_and_collect) do: frees are carried
    /// out one call at a time, in the order they were queued (an alias
    /// before the memory it aliases, when queued so), and a
    /// `wait_and_collect` or `collect_idle` returns only once the frees it
    /// covers are carried out, whichever thread took them out of the queue.
    /// A panic of the memory callback
    /// ([`set_memory_callback`](Self::set_memory_callback)) during one free
    /// reaches the caller once the others are carried out, as does one of
    /// the device backend destroying a buffer or image (whose memory is
    /// freed still); a panic of the device backend polling a frame's
    /// signal, once the frees of the
    /// frames found done before it are (that frame and later ones stay
    /// queued).
    ///
    /// # Errors
    /// [`Error::DeviceLost`] when the device is lost, and the other failures
    /// of `vkGetFenceStatus` / `vkGetSemaphoreCounterValue`
    /// ([`Error::OutOfHostMemory`], [`Error::OutOfDeviceMemory`],
    /// [`Error::Device`]): frames released before the failing one stay
    /// released, the rest stay queued, and dropping the allocator still
    /// frees everything.
    ///
    /// # Time complexity
    /// O(frames released + chunks of every ring + destroyed rings' chunks
    /// held back), one `vkGetFenceStatus` or `vkGetSemaphoreCounterValue`
    /// per frame polled (those released and the first not done), and each
    /// free carried out as [`free`](Self::free) costs (with a
    /// `vkDestroyBuffer` or `vkDestroyImage` for one queued with its
    /// resource); a destroyed ring's chunk that a write still copies into
    /// is held back in the same pass over the frees. With
    /// [`Config::debug_fill`](crate::Config::debug_fill), a write of the
    /// ring space given back and a read of the free ring space of each
    /// destroyed ring's chunk freed (O(bytes)).
    pub fn collect(&self) -> Result<Collected, Error> {
        // Held until the frees taken out below are carried out: another
        // call finding them gone from the queue finds them released.
        let releasing = lock(&self.releasing);
        // The signals of the frames sealed now, oldest first, polled up to
        // the first one not reached, with the frame queue's lock released
        // during each poll (some drivers' polls are system calls): other
        // threads' `free_after_frame` and `end_frame` wait for none. Only
        // calls holding `releasing` take frames out of the queue, so the
        // frames found done are still its oldest below; others may only be
        // sealed behind them, and are left to the next call: polled too, a
        // thread sealing frames done by the time they were polled kept this
        // call going, every free found due (and the rings' space, up to
        // `TooManyFramesInFlight`) held back until it stopped. A backend
        // that panics in a poll (a bug, caught by the engine) stops the
        // polls, not the release of the frames found done before it (their
        // buffers and images would never be destroyed): the panic goes on
        // once their frees are carried out.
        let mut panics = FirstPanic::default();
        let mut frames_done = 0;
        let mut poll_error = None;
        let sealed = lock(&self.frames).frames_in_flight();
        panics.run(|| {
            while frames_done < sealed {
                let Some(signal) = lock(&self.frames).sealed_signal(frames_done).copied() else {
                    break;
                };
                // SAFETY: every sealed signal came through `end_frame` or
                // `end_frame_timeline`, whose contract keeps it a live
                // signal of the device until its frame is collected; it is
                // not yet (it is still queued: only this call, holding
                // `releasing`, takes it out).
                match unsafe { self.context.device.is_signalled(signal) } {
                    Ok(true) => frames_done += 1,
                    Ok(false) => break,
                    Err(error) => {
                        poll_error = Some(error);
                        break;
                    }
                }
            }
        });
        // The finished frames' frees, taken out of the queue under its lock
        // and carried out after it is released (`release_each`).
        let mut done = Vec::new();
        let mut frames = lock(&self.frames);
        let oldest_before = frames.oldest().map(|(index, _)| index);
        let (frames_released, frees) = frames.release_oldest(frames_done, |item| done.push(item));
        let oldest_after = frames.oldest().map(|(index, _)| index);
        let mut rings = lock(&self.rings);
        // Debug fills of the ring space given back: a backend's panic in
        // one is caught, the rest carried out.
        let mut fill = RingFill::new(self);
        let mut on_reclaim = |chunk: &RingChunk, space| fill.reclaimed(chunk, space);
        // Frames released: from the old oldest up to (not including) the new
        // oldest, or up to the current frame when all were released; also
        // when a later frame's signal failed.
        if let Some(first) = oldest_before {
            let next_unreleased = oldest_after.unwrap_or_else(|| frames.current_frame());
            if next_unreleased > first {
                rings.rings_reclaim_through(next_unreleased - 1, &mut on_reclaim);
            }
        }
        rings.retry_owed(&mut on_reclaim);
        let (kept, freed) = rings.sort_ring_chunks(&mut done);
        drop((rings, frames));
        // Lines the debug work finds under a pool's lock as the frees are
        // carried out, logged once `releasing` is released too.
        let (released, lines) =
            deferred_log::deferring_if(self.context.debug_types() != 0, || self.release_each(done));
        drop(releasing);
        panics.run(|| deferred_log::finish(released, lines));
        panics.run(|| fill.finish());
        panics.resume();
        if let Some(error) = poll_error {
            return Err(error.into());
        }
        Ok(Collected {
            frames: frames_released,
            frees: frees + freed - kept,
        })
    }

    /// Waits for every frame sealed before the call (up to `timeout_ns`
    /// each), then collects: for shutdown, or before destroying resources
    /// at a level change.
    ///
    /// Frames other threads seal while it waits are collected when they
    /// have finished, but not waited for: a loading thread waiting here
    /// while the render thread goes on sealing frames returns once the
    /// frames sealed before its call are done. Their frees are carried out
    /// when it returns, also those another thread's `collect` took out of
    /// the queue first (it waits for that call to carry them out), but for
    /// ring memory a [`ring_write`](Self::ring_write) still copies into,
    /// released by a later call (as [`collect`](Self::collect) says).
    ///
    /// Frees queued since the last [`end_frame`](Self::end_frame) belong to
    /// the current frame, which is not sealed: they stay queued (and counted
    /// in [`stats`](Self::stats)) until a later `end_frame` and collect, or
    /// the allocator's drop. Seal the frame first to release them here, or,
    /// once the device is idle, release everything with
    /// [`collect_idle`](Self::collect_idle).
    ///
    /// A fence that another thread's frame loop collects and resets (for
    /// its next submission) while this call is about to wait on it reads
    /// as unsignalled: the wait then lasts until the fence signals again
    /// or `timeout_ns` passes, and goes on with the next frame (its frame
    /// was collected: no [`Error::Timeout`]). Give it a finite timeout when
    /// a render thread resets fences meanwhile. A reset (or a
    /// `vkQueueSubmit` with the fence) that overlaps the wait itself breaks
    /// the external synchronization those calls require of the fence
    /// ([`end_frame`](Self::end_frame)'s safety section): keep this call on
    /// the thread that resets and submits, or apart from them.
    ///
    /// # Errors
    /// [`Error::Timeout`] when a frame did not finish in time (frames before
    /// it are collected, but their [`Collected`] counts are not returned:
    /// [`stats`](Self::stats) shows what is still queued);
    /// [`Error::DeviceLost`] and the other failures of
    /// the wait (`vkWaitForFences` / `vkWaitSemaphores`) and of
    /// [`collect`](Self::collect); [`Error::DeviceLost`] too when the wait
    /// reports a frame's signal reached but `collect`'s poll
    /// (`vkGetFenceStatus` / `vkGetSemaphoreCounterValue`) does not, as a
    /// lost device may answer without reporting the loss (the frame stays
    /// queued for [`collect_idle`](Self::collect_idle)).
    ///
    /// # Time complexity
    /// At most one wait (up to `timeout_ns`) and one [`collect`](Self::collect)
    /// per frame sealed before the call, each `collect` as it costs.
    pub fn wait_and_collect(&self, timeout_ns: u64) -> Result<Collected, Error> {
        let mut total = Collected::default();
        // The first frame sealed after the call starts. Waiting for every
        // sealed frame instead never returned while another thread sealed
        // frames faster than their fences signalled (a render loop).
        let end = lock(&self.frames).current_frame();
        loop {
            // Under `releasing`: a frame gone from the queue has had its
            // frees carried out, even by another thread's `collect`.
            let Some((index, signal)) = self.oldest_sealed_before(end) else {
                return Ok(total);
            };
            let still_queued = || {
                self.oldest_sealed_before(end)
                    .is_some_and(|(oldest, _)| oldest == index)
            };
            // SAFETY: the signal of a frame that was not collected when it
            // was read; `end_frame`'s contract keeps it alive until this
            // call returns, even when another thread collects the frame
            // meanwhile.
            let reached = unsafe { self.context.device.wait_signalled(signal, timeout_ns) }?;
            // Another thread may have collected the frame and reset its
            // fence, which then read as unsignalled: not a timeout.
            if !reached && still_queued() {
                return Err(Error::Timeout);
            }
            let collected = self.collect()?;
            total.frames += collected.frames;
            total.frees += collected.frees;
            // The wait found the signal reached, the poll did not: a lost
            // device may answer so (a wait returns `VK_SUCCESS`, a poll
            // the value it had), for ever with timeline semaphores. Waiting
            // again returned at once, and the call never did.
            if reached && still_queued() {
                return Err(Error::DeviceLost);
            }
        }
    }

    /// The index and signal of the oldest frame in the queue, when it was
    /// sealed before frame `end`; read under the `releasing` lock, so that a
    /// frame gone from the queue has had its frees carried out, even by
    /// another thread's `collect`.
    fn oldest_sealed_before(&self, end: u64) -> Option<(u64, FrameSignal)> {
        let _releasing = lock(&self.releasing);
        lock(&self.frames)
            .oldest()
            .filter(|(index, _)| *index < end)
            .map(|(index, signal)| (index, *signal))
    }

    /// Releases everything queued now, whatever the fences say: the frees
    /// and upload-ring space of every sealed frame and of the current one.
    /// For a device known to be idle, after `vkDeviceWaitIdle` at a level
    /// change or shutdown, where [`wait_and_collect`](Self::wait_and_collect)
    /// leaves the current frame's frees queued.
    ///
    /// The current frame ends with it, as if sealed and collected: the next
    /// frame starts, and ring allocations made before the call are stale.
    /// As at [`end_frame`](Self::end_frame), the next budget check reads the
    /// driver's heap budgets again, and the heaps are asked again for every
    /// size they refused (other processes may have taken or given back
    /// memory while the device went idle); once the frees are carried out,
    /// the kept empty blocks are released as `end_frame` releases them
    /// (aged ones, and those of heaps at or over their budget).
    /// The sealed frames' fences and semaphores are not read, here or later
    /// (a [`wait_and_collect`](Self::wait_and_collect) already waiting on
    /// one, on another thread, keeps it in use until it returns, as
    /// [`end_frame`](Self::end_frame) says).
    ///
    /// # Safety
    /// No command that uses what is queued (memory, buffers and images given
    /// to `free_after_frame` and `destroy_*_after_frame`, and ring space
    /// handed out, before this call or, on another thread, during it until
    /// it takes the frame queue's lock: below, it may wait for a ring write
    /// first) is pending on the GPU, and none that uses them will be
    /// submitted: the device is idle, or every submission that may use
    /// them has completed.
    ///
    /// As in [`collect`](Self::collect), the frees are carried out after
    /// the frame queue's lock is released, and the call returns once every
    /// free queued before it is carried out, also those another thread's
    /// `collect` took out of the queue first; but for ring space and a
    /// destroyed ring's memory that a [`ring_write`](Self::ring_write) on
    /// another thread is copying into, which a later call releases, as in
    /// `collect`. The ring allocations are stale when it returns all the
    /// same. It waits for such a write (with no lock held) only when the
    /// write copies into the oldest of as many sealed frames as a ring
    /// holds (64), a ring allocation written that many frames late.
    ///
    /// # Time complexity
    /// As [`collect`](Self::collect)'s, over every queued frame, with no
    /// signal polled; then the release of kept empty blocks that
    /// [`end_frame`](Self::end_frame) makes (its passes over blocks, its
    /// query of the driver's budgets, a `vkFreeMemory` call per block
    /// released).
    pub unsafe fn collect_idle(&self) -> Collected {
        // As in `collect`.
        let mut fill = RingFill::new(self);
        let mut on_reclaim = |chunk: &RingChunk, space| fill.reclaimed(chunk, space);
        let (releasing, mut frames, mut rings) = loop {
            // As in `collect`: held until the frees are carried out.
            let releasing = lock(&self.releasing);
            let frames = lock(&self.frames);
            let mut rings = lock(&self.rings);
            if let Some(last_sealed) = frames.current_frame().checked_sub(1) {
                rings.rings_reclaim_through(last_sealed, &mut on_reclaim);
            }
            // No ring holds a sealed frame now, so each can seal the current
            // one; but where a write on another thread still copies into a
            // frame that was sealed `RING_FRAMES - 1` frames before the last
            // (a ring allocation written that many frames late, with no
            // collect meanwhile), its chunk holds `RING_FRAMES` sealed
            // frames. Then wait, with no lock held, for that write: a
            // memcpy and a flush, and new writes cannot pin those frames.
            if rings.rings.iter().all(|(_, ring)| ring.can_finish_frame()) {
                break (releasing, frames, rings);
            }
            drop((rings, frames, releasing));
            std::thread::yield_now();
        };
        let mut done = Vec::new();
        let (frames_released, frees) = frames.release_all(|item| done.push(item));
        rings.rings.values_mut().for_each(RingState::finish_frame);
        rings.rings_reclaim_through(frames.current_frame() - 1, &mut on_reclaim);
        rings.current_frame = frames.current_frame();
        let (kept, freed) = rings.sort_ring_chunks(&mut done);
        // The next frame has started: blocks that empty from now on count
        // their frames from it (`Config::empty_block_frames`).
        self.context.set_current_frame(frames.current_frame());
        drop((rings, frames));
        // As in `collect`: lines found as the frees are carried out are
        // logged once `releasing` is released, then the ring fills' lines.
        let mut panics = FirstPanic::default();
        let (released, lines) =
            deferred_log::deferring_if(self.context.debug_types() != 0, || self.release_each(done));
        drop(releasing);
        panics.run(|| deferred_log::finish(released, lines));
        panics.run(|| fill.finish());
        // The frame has ended, as at `end_frame` (budgets, refusals, kept
        // blocks), now that its frees are carried out.
        panics.run(|| self.after_frame_end());
        panics.resume();
        Collected {
            frames: frames_released,
            frees: frees + freed - kept,
        }
    }

    /// Index of the frame that frees and ring allocations go to now.
    pub fn current_frame(&self) -> u64 {
        lock(&self.frames).current_frame()
    }

    /// Sealed frames not yet collected.
    pub fn frames_in_flight(&self) -> usize {
        lock(&self.frames).frames_in_flight()
    }

    /// Budget and usage of each heap: from `VK_EXT_memory_budget` when
    /// enabled (process-wide usage), else `Config::budget_fraction` of each
    /// heap and this allocator's own usage.
    ///
    /// A reported budget is read as VMA reads it: 0 (some drivers report
    /// it) means `Config::budget_fraction` of the heap, and one larger than
    /// the heap means the heap's size. A reported usage is at least this
    /// allocator's own memory in the heap (a driver reporting less, such as
    /// 0, is stale). A heap with a
    /// [`Config::heap_size_limits`](crate::Config::heap_size_limits) entry
    /// has instead a budget of at most what others use (the usage less this
    /// allocator's memory) plus the limit: a reported budget larger than
    /// the limited heap is kept up to that, not cut to the limit.
    ///
    /// This call, [`stats`](crate::Allocator::stats) and the dumps read the
    /// driver's figures anew. The allocator's own budget checks, made before
    /// each new `VkDeviceMemory`, read them only every 30 memory objects
    /// made or freed and after each [`end_frame`](Self::end_frame) (or
    /// [`collect_idle`](Self::collect_idle)), as VMA
    /// does (some drivers take milliseconds to answer), and add the
    /// allocator's own changes in between; a request those figures would
    /// refuse is checked against a new reading first. Calling this method
    /// also gives those checks the new reading.
    pub fn budgets(&self) -> Vec<HeapBudget> {
        let heaps = self.context.properties.device.memory_heaps.len();
        self.context.fresh_heap_budgets()[..heaps].to_vec()
    }
}

/// [`Error::TimelineValueNotAbove`] when `signal` is a timeline value at or
/// below the one the newest frame in flight on the same semaphore waits
/// for. Every frame sealed on a semaphore passed this check, so the newest
/// one on it waits for the highest value in flight there: the walk back
/// from the newest frame stops at it.
fn timeline_value_not_above(
    frames: &DeferredQueue<FrameSignal, Deferred>,
    signal: FrameSignal,
) -> Option<Error> {
    let FrameSignal::Timeline { semaphore, value } = signal else {
        return None;
    };
    let in_flight = frames.signals().rev().find_map(|&sealed| match sealed {
        FrameSignal::Timeline {
            semaphore: sealed_on,
            value,
        } if sealed_on == semaphore => Some(value),
        _ => None,
    })?;
    (value <= in_flight).then_some(Error::TimelineValueNotAbove { value, in_flight })
}
