//! Frames: sealed with fences or timeline values, signalled in any order,
//! collected with or without waiting, or all at once.

use super::*;

impl Walk {
    pub(super) fn end_frame(&mut self, timeline: bool) {
        let refused = self.rings_full_of_frames();
        let (signal, result) = if timeline {
            let value = self.next_frame + 1;
            // SAFETY: the fake semaphore reaches `value` only when "the GPU"
            // is done with the frame.
            let result = unsafe { self.allocator.end_frame_timeline(self.timeline, value) };
            (Signal::Timeline(value), result)
        } else {
            let fence = self.device.create_fence();
            // SAFETY: a fake fence, signalled only when "the GPU" is done.
            (Signal::Fence(fence), unsafe {
                self.allocator.end_frame(fence)
            })
        };
        if refused {
            return assert_eq!(result, Err(Error::TooManyFramesInFlight), "end_frame");
        }
        assert_eq!(result, Ok(self.next_frame), "end_frame");
        self.next_frame += 1;
        let freed = std::mem::take(&mut self.current);
        self.sealed.push_back(Frame {
            signal,
            signalled: false,
            freed,
        });
    }

    pub(super) fn signal_frame(&mut self, i: usize) {
        match self.sealed[i].signal {
            Signal::Fence(fence) => {
                self.device.signal_fence(fence);
                self.sealed[i].signalled = true;
            }
            Signal::Timeline(value) => {
                if value > self.timeline_value {
                    self.device.signal_timeline(self.timeline, value);
                    self.timeline_value = value;
                }
                for frame in &mut self.sealed {
                    if let Signal::Timeline(v) = frame.signal {
                        frame.signalled |= v <= self.timeline_value;
                    }
                }
            }
        }
    }

    pub(super) fn signal(&mut self, how: u8) {
        let pending: Vec<usize> = (0..self.sealed.len())
            .filter(|&i| !self.sealed[i].signalled)
            .collect();
        if pending.is_empty() {
            return;
        }
        match how % 3 {
            0 => self.signal_frame(pending[0]),
            1 => self.signal_frame(pending[how as usize / 3 % pending.len()]),
            _ => pending.into_iter().for_each(|i| self.signal_frame(i)),
        }
    }

    /// Releases, in the model, the signalled frames at the front.
    pub(super) fn release_signalled(&mut self) -> Collected {
        let mut collected = Collected::default();
        while self.sealed.front().is_some_and(|f| f.signalled) {
            if let Some(frame) = self.sealed.pop_front() {
                collected.frames += 1;
                collected.frees += frame.freed.iter().map(|h| h.queued).sum::<usize>();
            }
        }
        collected
    }

    pub(super) fn collect(&mut self, wait: bool) {
        if wait {
            return self.wait_and_collect(0);
        }
        let result = self.allocator.collect();
        if self.lost && !self.sealed.is_empty() {
            assert_eq!(result, Err(Error::DeviceLost), "collect on a lost device");
            return;
        }
        let released = self.release_signalled();
        self.reclaim_rings();
        assert_eq!(result, Ok(released), "collect");
    }

    /// `end_frame` (or `end_frame_timeline`) with a null fence (semaphore),
    /// or with `zero`, the walk's timeline semaphore and the value 0 it
    /// holds from its creation: refused with `NullFrameSignal` before
    /// anything else, a ring full of frames included, and nothing changes
    /// (`check` sees the frame and the frames in flight as before).
    pub(super) fn end_frame_null(&mut self, timeline: bool, zero: bool) {
        // SAFETY: a null handle or value, which the call refuses before
        // using it.
        let result = unsafe {
            if timeline && zero {
                self.allocator.end_frame_timeline(self.timeline, 0)
            } else if timeline {
                let value = self.next_frame + 1;
                self.allocator
                    .end_frame_timeline(vk::Semaphore::null(), value)
            } else {
                self.allocator.end_frame(vk::Fence::null())
            }
        };
        assert_eq!(result, Err(Error::NullFrameSignal), "a null frame signal");
    }

    /// `end_frame_timeline` on the walk's semaphore with a value at or below
    /// the newest one a frame in flight waits for (`back` below it, down to
    /// 1): refused with `TimelineValueNotAbove` before anything but the
    /// null checks, a ring full of frames included, and nothing changes
    /// (`check` sees the frame and the frames in flight as before). With
    /// no frame in flight on the semaphore it does nothing: the allocator
    /// takes any value then.
    pub(super) fn end_frame_stale(&mut self, back: u8) {
        let newest = self
            .sealed
            .iter()
            .rev()
            .find_map(|frame| match frame.signal {
                Signal::Timeline(value) => Some(value),
                Signal::Fence(_) => None,
            });
        let Some(in_flight) = newest else {
            return;
        };
        let value = in_flight - u64::from(back) % in_flight;
        // SAFETY: refused before the semaphore is used.
        let result = unsafe { self.allocator.end_frame_timeline(self.timeline, value) };
        assert_eq!(
            result,
            Err(Error::TimelineValueNotAbove { value, in_flight }),
            "a timeline value not above the one in flight"
        );
    }

    /// `wait_and_collect` with a timeout of `how & 3` (0, 1 ms, 16.7 ms or
    /// `u64::MAX`), while the GPU finishes frames: with a finite timeout,
    /// at the start of each wait the oldest unfinished frame finishes
    /// until `how >> 2` did (the fake device's waits answer at once: what
    /// finishes within the timeout is what the wait hook signals); with
    /// `u64::MAX`, every frame it waits for finishes (the wait ends only
    /// then). The model runs the call's loop: wait for the oldest frame
    /// sealed before the call, `Timeout` if it did not finish (the frames
    /// collected before it stay collected), else collect.
    pub(super) fn wait_and_collect(&mut self, how: u8) {
        let timeout = [0, 1_000_000, 16_666_667, u64::MAX][usize::from(how & 3)];
        let finishing = if timeout == u64::MAX {
            usize::MAX
        } else {
            usize::from(how >> 2)
        };
        // The signals of the unfinished frames, oldest first: each wait
        // finishes the first left, while any of `finishing` is.
        let pending: std::collections::VecDeque<Signal> = self
            .sealed
            .iter()
            .filter(|f| !f.signalled)
            .map(|f| f.signal)
            .take(finishing)
            .collect();
        let fired = Arc::new(Mutex::new(0usize));
        if !pending.is_empty() {
            let (device, timeline, fired) = (self.device.clone(), self.timeline, fired.clone());
            let mut pending = pending;
            self.device.set_wait_hook(Some(Box::new(move || {
                if let Some(signal) = pending.pop_front() {
                    match signal {
                        Signal::Fence(fence) => device.signal_fence(fence),
                        Signal::Timeline(value) => device.signal_timeline(timeline, value),
                    }
                    *fired.lock().unwrap() += 1;
                }
            })));
        }
        let result = self.allocator.wait_and_collect(timeout);
        self.device.set_wait_hook(None);
        let fired = *fired.lock().unwrap();
        // The model's run of the call's loop.
        let mut total = Collected::default();
        let mut finished = 0;
        let expected = loop {
            if self.sealed.is_empty() {
                break Ok(total);
            }
            if finished < fired {
                let oldest = (0..self.sealed.len()).find(|&i| !self.sealed[i].signalled);
                self.signal_frame(oldest.expect("a frame finished in the wait"));
                finished += 1;
            }
            if self.lost {
                break Err(Error::DeviceLost);
            }
            if !self.sealed[0].signalled {
                break Err(Error::Timeout);
            }
            let released = self.release_signalled();
            self.reclaim_rings();
            total.frames += released.frames;
            total.frees += released.frees;
        };
        assert_eq!(finished, fired, "frames finished in the waits");
        assert_eq!(result, expected, "wait_and_collect({timeout} ns)");
    }

    pub(super) fn collect_idle(&mut self) {
        // SAFETY: the fake device runs no GPU work.
        let result = unsafe { self.allocator.collect_idle() };
        let frames = self.sealed.len() + 1;
        let sealed = self.sealed.iter().flat_map(|f| f.freed.iter());
        let frees = sealed.chain(self.current.iter()).map(|h| h.queued).sum();
        self.sealed.clear();
        self.current.clear();
        self.next_frame += 1;
        self.reclaim_rings();
        assert_eq!(result, Collected { frames, frees }, "collect_idle");
    }

    /// Frees a live allocation after the frame; one with a resource as
    /// the application would, with it.
    pub(super) fn free_after_frame(&mut self, pick: u16, alias: bool) {
        let Some(i) = self.index(pick) else { return };
        let live = self.live.swap_remove(i);
        let mut held = live.held();
        let result = match live.resource {
            None => self.allocator.free_after_frame(live.allocation),
            Some(resource) if alias => {
                held.queued = 2;
                // SAFETY: the resource is the application's, destroyed by
                // nothing else; the fake device runs no GPU work.
                unsafe {
                    match resource.target() {
                        DedicatedTarget::Buffer(b) => {
                            self.allocator.destroy_alias_buffer_after_frame(b);
                        }
                        DedicatedTarget::Image(i) => {
                            self.allocator.destroy_alias_image_after_frame(i);
                        }
                    }
                }
                self.allocator.free_after_frame(live.allocation)
            }
            // SAFETY: as above.
            Some(resource) => unsafe {
                match resource.target() {
                    DedicatedTarget::Buffer(b) => self
                        .allocator
                        .destroy_buffer_after_frame(b, live.allocation),
                    DedicatedTarget::Image(i) => {
                        self.allocator.destroy_image_after_frame(i, live.allocation)
                    }
                }
            },
        };
        assert_eq!(result, Ok(()), "free after the frame");
        self.current.push(held);
    }
}
