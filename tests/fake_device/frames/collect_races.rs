//! `collect` and `wait_and_collect` on two threads while a render thread
//! queues frees and seals frames (and now and then, the device idle, calls
//! `collect_idle`), a "GPU" thread signals the frames' fences in order, and
//! a ring thread writes upload-ring allocations and reads them back; every
//! poll of a fence (the device's poll hook, which runs with the frame
//! queue's lock released) yields a seeded number of times, so that the
//! other threads seal, free and write while `collect` is between polls.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use ash::vk;
use vk_suballoc::device::fake::{FakeDevice, FakeLayout};
use vk_suballoc::{Collected, Config, Error, UploadRing, UploadRingDesc, Usage};

use super::super::seeded_rng::Rng;
use super::super::{allocator_with, buffer, FakeAllocator};
use super::finish_after_frame;

/// What a frame's submission signals: a fence, or a value of the race's
/// timeline semaphore.
#[derive(Clone, Copy)]
enum Signal {
    Fence(vk::Fence),
    Value(u64),
}

/// What the threads share: the frames "the GPU" has not finished.
struct Gpu {
    /// Sealed frames whose signal is not reached, oldest first: the frame,
    /// its signal, and the fake buffers queued in it.
    unsignalled: VecDeque<(u64, Signal, u64)>,
    /// The oldest frame whose ring bytes the ring thread reads now: no
    /// fence of it or a later frame is signalled meanwhile.
    hold: Option<u64>,
}

/// Counts the checks read, each only ever rising.
#[derive(Default)]
struct Counts {
    /// Fake buffers the render thread made (counted once each is made).
    created: AtomicU64,
    /// Fake buffers whose frame's fence was signalled, or that a
    /// `collect_idle` was let release (counted before the signal or call).
    due: AtomicU64,
    /// `Collected::frees` of every call that returned them.
    collected: AtomicU64,
    /// A `wait_and_collect` timed out: the frees it carried out are not
    /// in `collected`.
    uncounted: AtomicBool,
    /// Fences polled (the poll hook counts them).
    polls: Arc<AtomicU64>,
    /// The render thread is done.
    done: AtomicBool,
}

struct Race<'a> {
    allocator: &'a FakeAllocator,
    device: &'a FakeDevice,
    gpu: Mutex<Gpu>,
    counts: Counts,
    /// Live fake resources that are not the render thread's (the ring's
    /// buffer).
    others: usize,
    ring: UploadRing,
    /// The semaphore frames are sealed on (`end_frame_timeline`), if not
    /// on fences.
    timeline: Option<vk::Semaphore>,
}

impl Race<'_> {
    /// "The GPU" reaches `signal`.
    fn reach(&self, signal: Signal) {
        match (signal, self.timeline) {
            (Signal::Fence(fence), _) => self.device.signal_fence(fence),
            (Signal::Value(value), Some(semaphore)) => {
                self.device.signal_timeline(semaphore, value);
            }
            (Signal::Value(_), None) => unreachable!("a value with no semaphore"),
        }
    }

    fn gpu(&self) -> MutexGuard<'_, Gpu> {
        self.gpu.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// No fake buffer is destroyed before its frame's fence is signalled
    /// (or a `collect_idle` is let release it), nor twice. `created` is read
    /// first and `due` last, so a buffer made or a fence signalled between
    /// the reads only makes the check looser.
    fn check(&self, what: &str) {
        let created = self.counts.created.load(Ordering::SeqCst);
        let live = self.device.live_resources() - self.others;
        let due = self.counts.due.load(Ordering::SeqCst);
        let destroyed = (created as usize).saturating_sub(live) as u64;
        assert!(
            destroyed <= due,
            "after {what}: {destroyed} buffers destroyed, {due} due"
        );
        assert_eq!(
            self.device.violations(),
            Vec::<String>::new(),
            "after {what}"
        );
    }

    fn counted(&self, collected: Collected) {
        let frees = collected.frees as u64;
        self.counts.collected.fetch_add(frees, Ordering::SeqCst);
    }

    /// Queues frees and seals frames; now and then, "the device idle",
    /// lets a `collect_idle` release everything.
    fn render(&self, seed: u64) {
        /// Sets `done` when the render thread ends, failed checks included,
        /// so that the other threads end too.
        struct Done<'a>(&'a AtomicBool);
        impl Drop for Done<'_> {
            fn drop(&mut self) {
                self.0.store(true, Ordering::SeqCst);
            }
        }
        let _done = Done(&self.counts.done);
        let mut rng = Rng(seed);
        let request = buffer(4096, 256, Usage::DEVICE_LOCAL);
        let mut current = 0;
        let mut value = 0;
        // Until the other threads have polled fences a while, yielding to
        // them after each step (on a machine that runs them so late that
        // 50,000 steps go by first, the test is only weaker).
        let mut step = 0;
        while step < 300 || self.counts.polls.load(Ordering::SeqCst) < 2_000 && step < 50_000 {
            step += 1;
            match rng.below(16) {
                0..=7 => {
                    let allocation = self.allocator.allocate(&request).unwrap();
                    let resource = vk::Handle::from_raw(self.device.create_resource());
                    self.counts.created.fetch_add(1, Ordering::SeqCst);
                    // SAFETY: the fake device's own handle, destroyed only by
                    // the allocator.
                    unsafe {
                        self.allocator
                            .destroy_buffer_after_frame(resource, allocation)
                    }
                    .unwrap();
                    current += 1;
                }
                8..=14 => {
                    let mut gpu = self.gpu();
                    if gpu.unsignalled.len() >= 40 {
                        continue;
                    }
                    let (signal, sealed) = match self.timeline {
                        // SAFETY: fake fences and semaphore values,
                        // signalled only by the test.
                        Some(semaphore) => (Signal::Value(value + 1), unsafe {
                            self.allocator.end_frame_timeline(semaphore, value + 1)
                        }),
                        None => {
                            let fence = self.device.create_fence();
                            // SAFETY: as above.
                            (Signal::Fence(fence), unsafe {
                                self.allocator.end_frame(fence)
                            })
                        }
                    };
                    match sealed {
                        Ok(frame) => {
                            value += 1;
                            gpu.unsignalled.push_back((frame, signal, current));
                            current = 0;
                        }
                        // 64 frames sealed in the ring, not collected yet.
                        Err(Error::TooManyFramesInFlight) => {}
                        Err(error) => panic!("render step {step}: end_frame: {error:?}"),
                    }
                }
                _ => {
                    let mut gpu = self.gpu();
                    if gpu.hold.is_some() {
                        continue;
                    }
                    // "vkDeviceWaitIdle": every frame finishes.
                    for (_, signal, buffers) in gpu.unsignalled.drain(..) {
                        self.counts.due.fetch_add(buffers, Ordering::SeqCst);
                        self.reach(signal);
                    }
                    self.counts.due.fetch_add(current, Ordering::SeqCst);
                    current = 0;
                    // SAFETY: "the GPU" has finished every frame, and the
                    // ring thread reads no ring bytes until it takes a hold,
                    // under the lock held here.
                    self.counted(unsafe { self.allocator.collect_idle() });
                }
            }
            self.check(&format!("render step {step}"));
            std::thread::yield_now();
        }
    }

    /// Signals the oldest frames' fences, in order, never one of a frame
    /// the ring thread holds.
    fn signal(&self, seed: u64) {
        let mut rng = Rng(seed);
        while !self.counts.done.load(Ordering::SeqCst) {
            {
                let mut gpu = self.gpu();
                for _ in 0..rng.below(3) {
                    let Some(&(frame, signal, buffers)) = gpu.unsignalled.front() else {
                        break;
                    };
                    if gpu.hold.is_some_and(|held| frame >= held) {
                        break;
                    }
                    gpu.unsignalled.pop_front();
                    self.counts.due.fetch_add(buffers, Ordering::SeqCst);
                    self.reach(signal);
                }
            }
            std::thread::yield_now();
        }
    }

    fn collect(&self, seed: u64) {
        let mut rng = Rng(seed);
        while !self.counts.done.load(Ordering::SeqCst) {
            if rng.below(4) == 0 {
                match self.allocator.wait_and_collect(0) {
                    Ok(collected) => self.counted(collected),
                    Err(Error::Timeout) => self.counts.uncounted.store(true, Ordering::SeqCst),
                    Err(error) => panic!("wait_and_collect: {error:?}"),
                }
                self.check("wait_and_collect");
            } else {
                self.counted(self.allocator.collect().unwrap());
                self.check("collect");
            }
            std::thread::yield_now();
        }
    }

    /// Writes ring allocations of a held frame and reads them back: their
    /// bytes stay as written until the frame's fence is signalled (the
    /// debug fill of ring space given back too soon would show).
    fn write(&self, seed: u64) {
        let mut rng = Rng(seed);
        while !self.counts.done.load(Ordering::SeqCst) {
            self.gpu().hold = Some(self.allocator.current_frame());
            let size = 64 * (1 + rng.below(8));
            match self.allocator.ring_allocate(self.ring, size, 16) {
                Ok(allocation) => {
                    let byte = rng.below(0xEF) as u8;
                    let bytes = vec![byte; size as usize];
                    self.allocator.ring_write(&allocation, 0, &bytes).unwrap();
                    for _ in 0..rng.below(8) {
                        std::thread::yield_now();
                    }
                    let mapped = allocation.mapped_ptr().unwrap();
                    // SAFETY: the allocation's `size` mapped bytes, which no
                    // other thread writes while its frame is held.
                    let read = unsafe { std::slice::from_raw_parts(mapped.as_ptr(), bytes.len()) };
                    let changed = read.iter().position(|&read| read != byte);
                    assert_eq!(changed, None, "ring bytes of a frame in flight changed");
                }
                Err(Error::UploadRingFull { .. }) => {}
                Err(error) => panic!("ring_allocate: {error:?}"),
            }
            self.gpu().hold = None;
            std::thread::yield_now();
        }
    }
}

/// Frees are carried out once each and only after their frame's fence, ring
/// bytes stay until theirs, and the counts add up, while collects poll
/// fences with the frame queue's lock released. Releasing one frame more
/// than the polls found done, reclaiming the ring space of the oldest frame
/// not released, or polling the oldest frame's fence over and over (for
/// each frame after it) each failed 3 runs of 3. The seed fixes each
/// thread's choices, not how they interleave.
#[test]
fn collects_on_threads_release_each_free_once_after_its_fence() {
    let mut rng = Rng::from_env("collects_on_threads_release_each_free_once_after_its_fence");
    race(rng.next(), false);
    race(rng.next(), true);
}

/// The race, its frames sealed on fences or (`timeline`) on a timeline
/// semaphore.
fn race(seed: u64, timeline: bool) {
    let mut rng = Rng(seed);
    let config = Config {
        debug_fill: true,
        ..Config::default()
    };
    let (allocator, device) = allocator_with(FakeLayout::discrete(), config);
    let ring = allocator
        .create_upload_ring(&UploadRingDesc {
            size: 256 << 10,
            ..UploadRingDesc::default()
        })
        .unwrap();
    let mut hook_rng = Rng(rng.next());
    let counts = Counts::default();
    let polls = Arc::clone(&counts.polls);
    device.set_poll_hook(Some(Box::new(move || {
        polls.fetch_add(1, Ordering::SeqCst);
        for _ in 0..hook_rng.below(4) {
            std::thread::yield_now();
        }
    })));
    let race = Race {
        allocator: &allocator,
        device: &device,
        gpu: Mutex::new(Gpu {
            unsignalled: VecDeque::new(),
            hold: None,
        }),
        counts,
        others: device.live_resources(),
        ring,
        timeline: timeline.then(|| device.create_timeline_semaphore()),
    };
    let seeds: [u64; 5] = std::array::from_fn(|_| rng.next());
    std::thread::scope(|scope| {
        let race = &race;
        scope.spawn(move || race.signal(seeds[1]));
        scope.spawn(move || race.collect(seeds[2]));
        scope.spawn(move || race.collect(seeds[3]));
        scope.spawn(move || race.write(seeds[4]));
        race.render(seeds[0]);
    });
    device.set_poll_hook(None);

    let unsignalled = std::mem::take(&mut race.gpu().unsignalled);
    for (_, signal, buffers) in unsignalled {
        race.counts.due.fetch_add(buffers, Ordering::SeqCst);
        race.reach(signal);
    }
    let counts = race.counts;
    // The sealed frames, then the current one's frees.
    for _ in 0..2 {
        let collected = allocator.collect().unwrap();
        counts
            .collected
            .fetch_add(collected.frees as u64, Ordering::SeqCst);
        device.signal_fence(super::end_frame(&allocator, &device));
    }
    let collected = allocator.collect().unwrap();
    counts
        .collected
        .fetch_add(collected.frees as u64, Ordering::SeqCst);
    let created = counts.created.load(Ordering::SeqCst);
    assert_eq!(
        device.live_resources() - race.others,
        0,
        "a free never carried out"
    );
    assert!(counts.collected.load(Ordering::SeqCst) <= created);
    if !counts.uncounted.load(Ordering::SeqCst) {
        assert_eq!(counts.collected.load(Ordering::SeqCst), created);
    }
    assert_eq!(allocator.frames_in_flight(), 0);
    assert_eq!(allocator.corruptions_detected(), 0);
    allocator.destroy_upload_ring(ring).unwrap();
    finish_after_frame(allocator, &device);
}
