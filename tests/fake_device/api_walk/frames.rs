//! The walk's frames: sealed with fences or timeline values, signalled in
//! order, out of order or late, collected with or without waiting.

use vk_suballoc::{Collected, Error};

use super::{Rng, Signal, Walk};

/// The sealed frames an upload ring's chunk tracks at most.
const RING_FRAMES: u64 = 64;

impl Walk {
    pub(super) fn end_frame(&mut self) {
        // Now and then the GPU stalls (drawn from a copy of the generator,
        // so that the walks' other draws stay as they were).
        if Rng(self.rng.0 ^ 0x7374_616c).below(40) == 0 {
            return self.stall();
        }
        if !self.lost && self.sealed.len() >= 66 {
            // An engine collects every frame; this one is late, not stuck.
            (0..self.sealed.len()).for_each(|i| self.signal_frame(i));
            self.collect_now(false);
        }
        self.seal_frame();
    }

    /// An engine whose GPU stalls: frames end with nothing signalled or
    /// collected, until `end_frame` refuses one (an upload ring is full of
    /// frames) or 70 are sealed.
    fn stall(&mut self) {
        for _ in 0..70 {
            if !self.seal_frame() {
                return;
            }
        }
    }

    /// Whether some upload ring's chunk tracks as many sealed frames as it
    /// can (64): those sealed since the chunk began, the chunks of
    /// destroyed rings aside. `end_frame` must refuse exactly then.
    fn rings_full(&self) -> bool {
        let oldest = self.next_frame - self.sealed.len() as u64;
        let chunks = self.rings.iter().flat_map(|r| &r.chunk_frames);
        chunks
            .map(|&first| self.next_frame - first.max(oldest))
            .any(|tracked| tracked >= RING_FRAMES)
    }

    /// Ends the current frame, checked against the model. Returns whether
    /// it was sealed.
    fn seal_frame(&mut self) -> bool {
        let full = self.rings_full();
        let (signal, result) = if self.rng.below(3) == 0 {
            let value = self.next_frame + 1;
            // SAFETY: the walk's fake semaphore reaches `value` only when
            // "the GPU" is done with the frame.
            let result = unsafe { self.allocator.end_frame_timeline(self.timeline, value) };
            (Signal::Timeline(value), result)
        } else {
            let fence = self.device.create_fence();
            // SAFETY: a fake fence, signalled only when "the GPU" is done.
            (Signal::Fence(fence), unsafe {
                self.allocator.end_frame(fence)
            })
        };
        match result {
            Ok(index) => {
                assert!(
                    !full,
                    "{}: frame sealed with a ring full ({} frames in flight)",
                    self.ctx(),
                    self.sealed.len()
                );
                assert_eq!(index, self.next_frame, "{}", self.ctx());
                self.next_frame += 1;
                if self.config.empty_block_frames == 0 {
                    // Every kept empty block but the largest has aged out.
                    for memory_type in self.allocator.memory_map().memory_types {
                        let empty = memory_type.blocks.iter();
                        let empty = empty.filter(|b| b.allocations().next().is_none());
                        assert!(empty.count() <= 1, "{}: kept past its frames", self.ctx());
                    }
                }
                let mut frame = std::mem::take(&mut self.current);
                frame.signal = Some(signal);
                self.sealed.push_back(frame);
                true
            }
            Err(Error::TooManyFramesInFlight) => {
                assert!(
                    full,
                    "{}: refused with no ring full ({} frames in flight)",
                    self.ctx(),
                    self.sealed.len()
                );
                assert_eq!(
                    self.allocator.frames_in_flight(),
                    self.sealed.len(),
                    "{}: a refused frame was sealed",
                    self.ctx()
                );
                self.frames_refused += 1;
                false
            }
            Err(error) => panic!("{}: end_frame: {error:?}", self.ctx()),
        }
    }

    /// "The GPU" finishes sealed frame `i` (a timeline value also finishes
    /// the frames with lower values).
    pub(super) fn signal_frame(&mut self, i: usize) {
        match self.sealed[i].signal {
            Some(Signal::Fence(fence)) => {
                self.device.signal_fence(fence);
                self.sealed[i].signalled = true;
            }
            Some(Signal::Timeline(value)) => {
                if value > self.timeline_value {
                    self.device.signal_timeline(self.timeline, value);
                    self.timeline_value = value;
                }
                for frame in &mut self.sealed {
                    if let Some(Signal::Timeline(v)) = frame.signal {
                        frame.signalled |= v <= self.timeline_value;
                    }
                }
            }
            None => unreachable!("sealed frames have a signal"),
        }
    }

    /// Signals the oldest pending frame, a random one (out of order), all,
    /// or none (late).
    pub(super) fn signal(&mut self) {
        let pending: Vec<usize> = (0..self.sealed.len())
            .filter(|&i| !self.sealed[i].signalled)
            .collect();
        if pending.is_empty() {
            return;
        }
        match self.rng.below(5) {
            0 | 1 => self.signal_frame(pending[0]),
            2 => {
                let i = pending[self.rng.below(pending.len() as u64) as usize];
                self.signal_frame(i);
            }
            3 => pending.into_iter().for_each(|i| self.signal_frame(i)),
            _ => {}
        }
    }

    /// Releases, in the model, the signalled frames at the front: what
    /// `collect` must release.
    pub(super) fn release_signalled(&mut self) -> Collected {
        let mut collected = Collected::default();
        while self.sealed.front().is_some_and(|f| f.signalled) {
            let frame = self.sealed.pop_front().unwrap_or_default();
            collected.frames += 1;
            collected.frees += frame.items;
        }
        // Ring allocations of released frames are stale now.
        let oldest = self.next_frame - self.sealed.len() as u64;
        let (live, stale): (Vec<_>, Vec<_>) =
            self.ring_live.drain(..).partition(|a| a.frame() >= oldest);
        self.ring_live = live;
        self.ring_stale.extend(stale);
        let excess = self.ring_stale.len().saturating_sub(32);
        self.ring_stale.drain(..excess);
        collected
    }

    pub(super) fn collect(&mut self) {
        if self.rng.below(16) == 0 {
            return self.collect_idle();
        }
        let wait = self.rng.below(4) == 0;
        self.collect_now(wait);
    }

    /// `collect_idle` against the model: every sealed frame, signalled or
    /// not, and the current one are released, and their ring allocations go
    /// stale.
    fn collect_idle(&mut self) {
        // SAFETY: the fake device runs no GPU work, so nothing queued is in
        // use (the walk's signals only stand for it).
        let result = unsafe { self.allocator.collect_idle() };
        let frames = self
            .sealed
            .drain(..)
            .chain([std::mem::take(&mut self.current)]);
        let expected = frames.fold(Collected::default(), |total, frame| Collected {
            frames: total.frames + 1,
            frees: total.frees + frame.items,
        });
        self.next_frame += 1;
        // No frame is in flight: every ring allocation is stale.
        self.release_signalled();
        assert_eq!(result, expected, "{}", self.ctx());
    }

    /// `collect`, or `wait_and_collect` without waiting, against the model.
    pub(super) fn collect_now(&mut self, wait: bool) {
        let result = if wait {
            self.allocator.wait_and_collect(0)
        } else {
            self.allocator.collect()
        };
        if self.lost && !self.sealed.is_empty() {
            assert_eq!(result, Err(Error::DeviceLost), "{}", self.ctx());
            return;
        }
        let released = self.release_signalled();
        let expected = if wait && !self.sealed.is_empty() {
            Err(Error::Timeout)
        } else {
            Ok(released)
        };
        assert_eq!(result, expected, "{}", self.ctx());
    }
}
