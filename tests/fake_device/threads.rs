//! Many threads over the whole API at once: allocations, frees now and after
//! frames, frames ended, signalled and collected by any thread, upload rings,
//! custom pools (shared, and one made and destroyed over and over),
//! statistics, dumps and trims, on layouts with several memory types, small
//! heaps and a low `maxMemoryAllocationCount`. Some requests take existing
//! memory only, some carry a `min_alignment`: each placement honours it,
//! and a request for existing memory only never gets dedicated memory and
//! fails only with `NoRoomInExistingMemory`.
//!
//! A shadow shared by the threads checks every range the allocator hands out
//! against the ranges that must not be reused yet: live allocations, ranges
//! freed after a frame whose fence has not signalled, and upload-ring bytes
//! of such frames. At the end the figures must match what is alive, and the
//! device must be clean: no leak, and no breach of a Vulkan rule (the fake
//! device records each allocation past `maxMemoryAllocationCount`).
//!
//! This file holds that world, shared by the tests in the files below: the
//! whole API from threads on three small GPUs (`whole_api.rs`), custom
//! pools under the threads (`pools.rs`), defragmentation under them
//! (`defragment.rs`), a callback that panics in one thread
//! (`callback_panic.rs`), and two threads racing for one budget
//! (`racing_within_budget.rs`); and, apart from the world, every figure
//! of `stats()` against a recount once threads are done (`recount.rs`),
//! and the figures at quiescent points while threads rename, plan
//! defragmentation side by side and end frames on fences and timelines
//! (`quiescent.rs`).

use std::collections::BTreeMap;
use std::sync::{Mutex, MutexGuard};

use ash::vk::{self, Handle};
use vk_suballoc::device::fake::FakeDevice;
use vk_suballoc::{Allocation, Error, Request, ResourceKind, UploadRing, UploadRingDesc, Usage};

use super::seeded_rng::Rng;
pub(super) use super::stress::check_tag;
use super::stress::{host_bytes_mut, host_visible, write_tag};
use super::{free, no_room, requirements, FakeAllocator};

#[path = "threads/callback_panic.rs"]
mod callback_panic;
#[path = "threads/defragment.rs"]
mod defragment;
#[path = "threads/pools.rs"]
mod pools;
#[path = "threads/quiescent.rs"]
mod quiescent;
#[path = "threads/racing_within_budget.rs"]
mod racing_within_budget;
#[path = "threads/recount.rs"]
mod recount;
#[path = "threads/whole_api.rs"]
mod whole_api;

const MIB: u64 = 1 << 20;
const THREADS: u64 = 4;
/// Operations per thread: a few under Miri, which runs ~1000x slower.
const STEPS: u64 = if cfg!(miri) { 40 } else { 4000 };

const USAGES: [Usage; 5] = [
    Usage::DEVICE_LOCAL,
    Usage::UPLOAD,
    Usage::READBACK,
    Usage::UPLOAD.union(Usage::DEVICE_LOCAL),
    Usage::READBACK.union(Usage::DEVICE_LOCAL),
];

/// The usages the recount and quiescent tests ask for: the first four of
/// [`USAGES`] (not `READBACK | DEVICE_LOCAL`).
const FIRST_USAGES: &[Usage] = USAGES.split_at(4).0;

/// A range that no new allocation or ring allocation may overlap until its
/// frame's fence has signalled.
struct Held {
    what: String,
    memory: u64,
    range: (u64, u64),
    /// A frame no later than the one it belongs to.
    frame: u64,
}

/// What the threads share, behind one lock.
#[derive(Default)]
struct Shadow {
    /// Live allocations: (memory, start) to end.
    live: BTreeMap<(u64, u64), u64>,
    /// Deferred frees and ring bytes of frames that may still be in flight.
    held: Vec<Held>,
    /// Sealed frames: their fence, and whether the test signalled it.
    sealed: BTreeMap<u64, (vk::Fence, bool)>,
}

impl Shadow {
    /// Whether `frame`'s fence has signalled (its ranges may come back).
    fn done(&self, frame: u64) -> bool {
        self.sealed
            .get(&frame)
            .is_some_and(|&(_, signalled)| signalled)
    }

    /// Panics when `range` of `memory` overlaps a live allocation or a range
    /// of a frame not yet signalled.
    fn check_free(&mut self, what: &str, memory: u64, range: (u64, u64)) {
        if let Some((&(m, start), &end)) = self.live.range(..(memory, range.1)).next_back() {
            assert!(
                m != memory || end <= range.0,
                "{what} {range:?} of memory {memory:#x} overlaps live {start}..{end}"
            );
        }
        let sealed = &self.sealed;
        self.held
            .retain(|h| !sealed.get(&h.frame).is_some_and(|&(_, done)| done));
        for held in &self.held {
            assert!(
                held.memory != memory || held.range.1 <= range.0 || range.1 <= held.range.0,
                "{what} {range:?} of memory {memory:#x} overlaps {} {:?}, held for frame {} (not done: {})",
                held.what,
                held.range,
                held.frame,
                !self.done(held.frame)
            );
        }
    }
}

fn range_of(a: &Allocation) -> (u64, (u64, u64)) {
    (a.memory().as_raw(), (a.offset(), a.offset() + a.size()))
}

/// Everything the threads share.
struct World<'a> {
    allocator: &'a FakeAllocator,
    device: &'a FakeDevice,
    shadow: Mutex<Shadow>,
    rings: [UploadRing; 2],
    pools: [pools::SharedPool; 2],
    object_limit: u32,
}

impl<'a> World<'a> {
    /// A world over `allocator` with its two upload rings, one growing, and
    /// its two shared pools.
    fn new(allocator: &'a FakeAllocator, device: &'a FakeDevice, object_limit: u32) -> Self {
        let ring = |grow| {
            let desc = UploadRingDesc {
                size: 64 << 10,
                grow,
                ..UploadRingDesc::default()
            };
            allocator.create_upload_ring(&desc).unwrap()
        };
        World {
            allocator,
            device,
            shadow: Mutex::default(),
            rings: [ring(false), ring(true)],
            pools: pools::SharedPool::make(allocator),
            object_limit,
        }
    }

    /// Once the threads are done: lets every frame finish, then seals and
    /// finishes one more; none is left in flight.
    fn finish_frames(&self) {
        while self.shadow().sealed.values().any(|&(_, done)| !done) {
            self.signal_oldest();
        }
        self.end_frame();
        self.signal_oldest();
        let collected = self.allocator.wait_and_collect(0).unwrap();
        assert_eq!(self.allocator.frames_in_flight(), 0, "{collected:?}");
        self.check_stats();
    }

    /// Frees `survivors`, destroys the rings and the shared pools, then
    /// checks that nothing is left: no allocation, every block empty, none
    /// after `trim`.
    fn free_all(self, survivors: Vec<(u64, Allocation)>) {
        let allocator = self.allocator;
        for (tag, a) in survivors {
            self.retire(tag, &a);
            free(allocator, a);
        }
        for ring in self.rings {
            allocator.destroy_upload_ring(ring).unwrap();
        }
        self.end_frame();
        self.signal_oldest();
        allocator.collect().unwrap();
        let stats = allocator.stats();
        assert_eq!((stats.allocations(), stats.live_bytes()), (0, 0));
        assert!(stats
            .memory_types
            .iter()
            .all(|t| t.blocks == t.empty_blocks));
        self.destroy_pools();
        allocator.trim();
        assert_eq!(allocator.stats().reserved_bytes(), 0);
    }

    fn shadow(&self) -> MutexGuard<'_, Shadow> {
        self.shadow.lock().unwrap()
    }

    /// Whether `error` is one a request that need not stay within budget
    /// (an upload ring's chunk, a pool's first blocks) may meet on small
    /// heaps with few memory objects: not `OverBudget`, which only
    /// within-budget requests get (`allocate`'s docs); `TooManyObjects`
    /// with the device's `maxMemoryAllocationCount`.
    fn exhausted(&self, error: &Error) -> bool {
        match *error {
            Error::OutOfDeviceMemory => true,
            Error::TooManyObjects(limit) => limit == self.object_limit,
            _ => false,
        }
    }

    /// A request as the threads make them: mostly small buffers, some
    /// images, now and then a few MiB; one in four within budget; one in
    /// eight for existing memory only, one in eight with a `min_alignment`
    /// (mostly a power of two up to 4 MiB, rarely 2^40, rarely 96, which
    /// is refused).
    fn draw_request(rng: &mut Rng) -> Request<'static> {
        let size = if rng.below(20) == 0 {
            (1 + rng.below(4)) * MIB
        } else {
            64 + rng.below(48 << 10)
        };
        let kind = match rng.below(6) {
            0 => ResourceKind::OptimalImage,
            1 => ResourceKind::LinearImage,
            _ => ResourceKind::Buffer,
        };
        let mut request = Request::new(
            requirements(size, 1 << rng.below(9)),
            USAGES[rng.below(USAGES.len() as u64) as usize],
            kind,
        );
        if rng.below(4) == 0 {
            request = request.within_budget();
        }
        if rng.below(8) == 0 {
            request = request.existing_memory_only();
        }
        if rng.below(8) == 0 {
            request.desc.min_alignment = match rng.below(32) {
                0 => 96,
                1 => 1 << 40,
                _ => 1 << rng.below(23),
            };
        }
        request
    }

    /// Panics unless `error` is one `request` may meet while other threads
    /// allocate and free: a `min_alignment` that is not a power of two
    /// refused as such; for existing memory only, `NoRoomInExistingMemory`
    /// alone (it calls no `vkAllocateMemory`, so no exhaustion of the
    /// device, no full pool); else exhaustion on small heaps with few
    /// memory objects, `OverBudget` only when it asked to stay within
    /// budget, or a full pool when it names one.
    fn check_refusal(&self, request: &Request<'_>, error: Error) {
        let size = request.requirements.size;
        let min_alignment = request.desc.min_alignment;
        if min_alignment != 0 && !min_alignment.is_power_of_two() {
            assert_eq!(error, Error::AlignmentNotPowerOfTwo(min_alignment));
        } else if request.desc.existing_memory_only {
            assert_eq!(
                error,
                Error::NoRoomInExistingMemory,
                "{size} bytes for existing memory only"
            );
        } else {
            let full = matches!(error, Error::PoolFull { .. }) && request.desc.pool.is_some();
            let over = matches!(error, Error::OverBudget { .. }) && request.desc.within_budget;
            assert!(
                self.exhausted(&error) || full || over,
                "allocate {size} (within budget: {}, pool: {:?}): {error:?}",
                request.desc.within_budget,
                request.desc.pool
            );
            self.check_refusal_figures(request, error);
        }
    }

    /// Panics unless the figures of `error`, a refusal of `request` for
    /// want of memory, are those the walk knows (past
    /// [`exhausted`](Self::exhausted)'s): the `max_blocks` of the pool the request
    /// names; for `OverBudget`, a reading with no room for the refused
    /// memory object, which holds the request, in the heap of the pool's
    /// type for a pool's request. (Which default memory type was refused
    /// last, and the heap's usage then, race the other threads.)
    fn check_refusal_figures(&self, request: &Request<'_>, error: Error) {
        let size = request.requirements.size;
        let heap_of = |t: u32| self.device.layout().memory_types[t as usize].heap;
        match error {
            Error::PoolFull { max_blocks } => {
                let pool = request.desc.pool.unwrap();
                assert_eq!(
                    Some(max_blocks),
                    self.pool_max_blocks(pool),
                    "{error:?} for {pool:?}"
                );
            }
            Error::OverBudget {
                heap,
                size: refused,
                usage,
                budget,
            } => {
                let pool_heap = request.desc.pool.map(|p| heap_of(p.memory_type()));
                assert!(
                    pool_heap.map_or(true, |h| h == heap)
                        && refused >= size
                        && no_room(usage, refused, budget),
                    "{error:?} for {size} bytes (pool's heap {pool_heap:?})"
                );
            }
            _ => {}
        }
    }

    fn allocate(&self, rng: &mut Rng, tag: u64) -> Option<(u64, Allocation)> {
        let request = Self::draw_request(rng);
        let request = self.aim_at_pool(rng, request);
        self.allocate_request(&request, tag).map(|a| (tag, a))
    }

    /// Allocates `request`, checks it against the shadow and writes `tag`
    /// at both ends when host-visible; `None` when memory ran out (or the
    /// pool it names is full).
    fn allocate_request(&self, request: &Request<'_>, tag: u64) -> Option<Allocation> {
        let mut allocation = match self.allocator.allocate(request) {
            Ok(allocation) => allocation,
            Err(error) => {
                self.check_refusal(request, error);
                return None;
            }
        };
        assert_eq!(
            allocation.is_in_custom_pool(),
            request.desc.pool.is_some(),
            "{allocation:?}"
        );
        // Sound under concurrency: where it lies. (Whether an existing
        // block took it is not: another thread may make a block between
        // any look at the device and this request, and the request may
        // land there; nor is a count of memory objects made meanwhile.)
        let alignment = request
            .desc
            .min_alignment
            .max(request.requirements.alignment);
        assert_eq!(allocation.offset() % alignment, 0, "{allocation:?}");
        if request.desc.existing_memory_only {
            assert!(!allocation.is_dedicated(), "{allocation:?}");
        }
        if let Some(pool) = request.desc.pool {
            assert_eq!(allocation.memory_type(), pool.memory_type());
            assert!(!allocation.is_dedicated(), "{allocation:?}");
        }
        self.hand_out("allocation", &allocation);
        if let Some(bytes) = host_bytes_mut(self.allocator, &mut allocation) {
            write_tag(bytes, tag);
            let len = bytes.len() as u64;
            self.allocator.flush(&allocation, 0..len).unwrap();
        }
        Some(allocation)
    }

    /// Checks a range the allocator just handed out against the shadow,
    /// and records it live.
    fn hand_out(&self, what: &str, allocation: &Allocation) {
        let (memory, range) = range_of(allocation);
        let mut shadow = self.shadow();
        shadow.check_free(what, memory, range);
        shadow.live.insert((memory, range.0), range.1);
    }

    /// Removes a live allocation from the shadow before it goes back.
    fn retire(&self, tag: u64, allocation: &Allocation) {
        check_tag(self.allocator, tag, allocation);
        let (memory, range) = range_of(allocation);
        let end = self.shadow().live.remove(&(memory, range.0));
        assert_eq!(end, Some(range.1), "not live in the shadow");
    }

    /// Frees a random allocation of `live`, now or after the frame.
    fn free_random(&self, rng: &mut Rng, live: &mut Vec<(u64, Allocation)>) {
        let (tag, a) = live.swap_remove(rng.below(live.len() as u64) as usize);
        if rng.below(2) == 0 {
            self.retire(tag, &a);
            free(self.allocator, a);
        } else {
            self.free_after_frame(tag, a);
        }
    }

    fn free_after_frame(&self, tag: u64, allocation: Allocation) {
        self.retire(tag, &allocation);
        // Read before the free joins a frame: the frame recorded is never
        // later than the one the free joins.
        let frame = self.allocator.current_frame();
        let (memory, range) = range_of(&allocation);
        self.shadow().held.push(Held {
            what: format!("deferred free {allocation:?}"),
            memory,
            range,
            frame,
        });
        self.allocator.free_after_frame(allocation).unwrap();
    }

    fn end_frame(&self) {
        let fence = self.device.create_fence();
        // Under the shadow's lock, so that `collect_idle` knows which frames
        // it ended.
        let mut shadow = self.shadow();
        // SAFETY: a fake fence, signalled by the test only once "the GPU" is
        // done with its frame.
        match unsafe { self.allocator.end_frame(fence) } {
            Ok(frame) => {
                shadow.sealed.insert(frame, (fence, false));
            }
            Err(Error::TooManyFramesInFlight) => {}
            Err(error) => panic!("end_frame: {error:?}"),
        }
    }

    /// `collect_idle`, as if "the GPU" had gone idle: every frame up to the
    /// current one is over (no `end_frame` can run meanwhile: it takes the
    /// shadow's lock too).
    fn collect_idle(&self) {
        let mut shadow = self.shadow();
        // SAFETY: the fake device runs no GPU work.
        unsafe { self.allocator.collect_idle() };
        let ended = self.allocator.current_frame();
        for frame in 0..ended {
            shadow
                .sealed
                .entry(frame)
                .or_insert((vk::Fence::null(), true))
                .1 = true;
        }
    }

    /// "The GPU" finishes the oldest frame not finished yet.
    fn signal_oldest(&self) {
        let mut shadow = self.shadow();
        if let Some((_, (fence, signalled))) = shadow.sealed.iter_mut().find(|(_, (_, s))| !*s) {
            self.device.signal_fence(*fence);
            *signalled = true;
        }
    }

    fn ring_allocate(&self, ring: UploadRing, rng: &mut Rng) {
        let size = 1 + rng.below(4096);
        let align = 1 << rng.below(9);
        let allocation = match self.allocator.ring_allocate(ring, size, align) {
            Ok(allocation) => allocation,
            // Every ring holds 4096 bytes at least: full for now (its free
            // bytes race the other threads), never too small.
            Err(Error::UploadRingFull { size: asked, .. }) if asked == size => return,
            Err(error) if self.exhausted(&error) => return,
            Err(error) => panic!("ring_allocate: {error:?}"),
        };
        assert_eq!(allocation.buffer_offset() % align, 0);
        let memory = allocation.memory().as_raw();
        let range = (
            allocation.memory_offset(),
            allocation.memory_offset() + size,
        );
        {
            let mut shadow = self.shadow();
            // Other threads may have sealed, signalled and collected its
            // frame since, and handed its bytes out again; until its fence
            // signals, they are its alone.
            if shadow.done(allocation.frame()) {
                return;
            }
            shadow.check_free("ring allocation", memory, range);
            shadow.held.push(Held {
                what: format!("ring allocation {allocation:?}"),
                memory,
                range,
                frame: allocation.frame(),
            });
        }
        let bytes = vec![allocation.frame() as u8; size as usize];
        match self.allocator.ring_write(&allocation, 0, &bytes) {
            // Another thread may have sealed, signalled and collected the
            // frame meanwhile.
            Ok(()) | Err(Error::StaleAllocation) => {}
            Err(error) => panic!("ring_write: {error:?}"),
        }
    }

    fn check_stats(&self) {
        self.check_pools();
        let stats = self.allocator.stats();
        assert!(stats.memory_objects <= self.object_limit);
        for heap in &stats.heaps {
            assert!(heap.live_bytes <= heap.reserved_bytes);
        }
    }

    /// One thread's work: returns the allocations it left alive, and its
    /// private pool (the first thread's) when its last turn left it holding
    /// frees waiting for their frame.
    fn run(&self, seed: u64, thread: u64) -> (Vec<(u64, Allocation)>, Option<pools::PrivatePool>) {
        let mut rng = Rng(seed ^ (thread << 40));
        let mut live: Vec<(u64, Allocation)> = Vec::new();
        let mut private = None;
        for step in 0..STEPS {
            let tag = (thread << 48) | step;
            match rng.below(100) {
                0..=29 if live.len() < 200 => live.extend(self.allocate(&mut rng, tag)),
                30..=57 if !live.is_empty() => self.free_random(&mut rng, &mut live),
                58..=63 => self.end_frame(),
                64..=69 => self.signal_oldest(),
                70..=75 => {
                    self.allocator.collect().unwrap();
                }
                76..=85 => self.ring_allocate(self.rings[rng.below(2) as usize], &mut rng),
                86..=88 => self.check_stats(),
                89 => {
                    let map = self.allocator.memory_map();
                    assert!(map.allocation_count() > 0 || self.shadow().live.is_empty());
                    let _ = self.allocator.stats_json(true);
                }
                90 => {
                    self.allocator.trim();
                    // With debug work on: the threads write only their
                    // own bytes, so nothing reads as damaged. Without,
                    // every type is refused.
                    let config = self.allocator.config();
                    match self.allocator.check_corruption(!0) {
                        Ok(report) => {
                            assert!(config.detect_corruption || config.debug_fill);
                            assert!(report.is_clean(), "{report:?}");
                        }
                        Err(Error::CorruptionDetectionOff { memory_type_bits })
                            if memory_type_bits == !0
                                && !config.detect_corruption
                                && !config.debug_fill => {}
                        Err(error) => panic!("check_corruption: {error:?}"),
                    }
                }
                91 => self.collect_idle(),
                92..=93 => match self.allocator.wait_and_collect(0) {
                    Ok(_) | Err(Error::Timeout) => {}
                    Err(error) => panic!("wait_and_collect: {error:?}"),
                },
                94 => {
                    let desc = UploadRingDesc {
                        size: 4096 + rng.below(16 << 10),
                        ..UploadRingDesc::default()
                    };
                    match self.allocator.create_upload_ring(&desc) {
                        Ok(ring) => {
                            self.ring_allocate(ring, &mut rng);
                            self.allocator.destroy_upload_ring(ring).unwrap();
                        }
                        Err(error) if self.exhausted(&error) => {}
                        Err(error) => panic!("create_upload_ring: {error:?}"),
                    }
                }
                95 | 96 if thread == 0 => {
                    let tag = (thread << 48) | (1 << 47) | (step << 4);
                    self.private_pool(&mut rng, &mut private, tag);
                }
                _ if !live.is_empty() => {
                    let index = rng.below(live.len() as u64) as usize;
                    let (tag, a) = &mut live[index];
                    check_tag(self.allocator, *tag, a);
                    if host_visible(self.allocator, a) {
                        let size = a.size();
                        self.allocator.invalidate(a, 0..size).unwrap();
                    }
                }
                _ => {}
            }
        }
        (live, private)
    }
}
