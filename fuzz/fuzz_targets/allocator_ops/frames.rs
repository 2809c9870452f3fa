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
        let result = if wait {
            self.allocator.wait_and_collect(0)
        } else {
            self.allocator.collect()
        };
        if self.lost && !self.sealed.is_empty() {
            assert_eq!(result, Err(Error::DeviceLost), "collect on a lost device");
            return;
        }
        let released = self.release_signalled();
        self.reclaim_rings();
        let expected = if wait && !self.sealed.is_empty() {
            Err(Error::Timeout)
        } else {
            Ok(released)
        };
        assert_eq!(result, expected, "collect (wait {wait})");
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
