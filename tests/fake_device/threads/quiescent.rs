//! Figures checked at quiescent points while threads run: the threads
//! allocate (one by one and `allocate_many`, in the default pools, a
//! shared custom pool and pools of their own made and destroyed), rename
//! and read names back, free now, after the frame and with a buffer
//! destroyed after it, end frames on fences and on a timeline semaphore,
//! collect (polling, waiting, idle), trim, write and flush a shared upload
//! ring, and each plans and carries out (or gives up) moves of its own
//! allocations while the others plan theirs in the same pools. Every few
//! hundred steps they stop together and one checks, after `collect_idle`,
//! that no two live allocations overlap, that `stats()`, the memory map
//! and the shared pool's figures equal what is alive (per memory type),
//! that the device's memory objects and heap usage equal the allocator's
//! figures, and that every buffer destroyed after a frame was destroyed.
//! Apart from `recount.rs`, which checks once the threads are done, and
//! `defragment.rs`, where one thread alone plans.
//!
//! A panic on one thread aborts the process (its message printed): the
//! others would wait at the barrier for ever.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Barrier, Mutex};

use ash::vk::{self, Handle};
use vk_suballoc::device::fake::{FakeDevice, FakeLayout};
use vk_suballoc::{
    Allocation, Config, DedicatedPolicy, DefragmentationLimits, Error, Movable, Pool, PoolDesc,
    Request, ResourceKind, UploadRing, UploadRingDesc, Usage,
};

use super::super::seeded_rng::Rng;
use super::super::{allocator_with, finish, free, requirements, FakeAllocator};
use super::{check_tag, host_bytes_mut, write_tag, FIRST_USAGES, MIB};

const THREADS: usize = 4;
const ROUNDS: u64 = if cfg!(miri) { 2 } else { 12 };
const STEPS: u64 = if cfg!(miri) { 20 } else { 300 };

struct Shared<'a> {
    allocator: &'a FakeAllocator,
    device: &'a FakeDevice,
    ring: UploadRing,
    /// A pool of 4 MiB blocks, at most six, that one request in six names.
    pool: Pool,
    timeline: vk::Semaphore,
    next_value: AtomicU64,
    /// Sealed frames' fences, or timeline values, not signalled yet.
    sealed: Mutex<Vec<Option<vk::Fence>>>,
    /// Each thread's live allocations, published at a quiescent point.
    published: Mutex<Vec<Published>>,
    barrier: Barrier,
    /// (allocations, live bytes) per memory type before the threads start:
    /// the ring's chunk.
    base: Vec<(u64, u64)>,
    ctx: String,
    /// Moves carried out, moves given up, frames sealed: printed, to show
    /// the run did each.
    tally: [AtomicU64; 3],
}

/// A live allocation as a thread publishes it at a quiescent point: its
/// memory, offset, size, memory type, whether dedicated, whether in a
/// custom pool.
type Published = (u64, u64, u64, u32, bool, bool);

/// An allocation a thread holds, and the request it came from.
struct Own {
    tag: u64,
    a: Allocation,
    requirements: vk::MemoryRequirements,
    kind: ResourceKind,
}

fn may_refuse(error: &Error) -> bool {
    matches!(
        error,
        Error::OutOfDeviceMemory
            | Error::OverBudget { .. }
            | Error::TooManyObjects(_)
            | Error::PoolFull { .. }
    )
}

impl Shared<'_> {
    fn request(&self, rng: &mut Rng) -> Request<'static> {
        let size = match rng.below(30) {
            0 => (1 + rng.below(4)) * MIB,
            1..=4 => 64 << 10 | rng.below(1 << 20),
            _ => 16 + rng.below(32 << 10),
        };
        let kind = [ResourceKind::Buffer, ResourceKind::OptimalImage][rng.below(2) as usize];
        let usage = FIRST_USAGES[rng.below(FIRST_USAGES.len() as u64) as usize];
        let mut request = Request::new(requirements(size, 1 << rng.below(10)), usage, kind);
        if rng.below(12) == 0 {
            request = request.dedicated(DedicatedPolicy::Always);
        }
        if rng.below(5) == 0 {
            request = request.within_budget();
        }
        if rng.below(6) == 0 {
            request.desc.pool = Some(self.pool);
            request.desc.usage = Usage::DEVICE_LOCAL;
            request.desc.dedicated = DedicatedPolicy::default();
            request.requirements.size = request.requirements.size.min(2 * MIB);
        }
        request
    }

    fn keep(&self, mut a: Allocation, tag: u64, request: &Request<'_>, live: &mut Vec<Own>) {
        if let Some(bytes) = host_bytes_mut(self.allocator, &mut a) {
            if bytes.len() >= 16 {
                write_tag(bytes, tag);
                let len = bytes.len() as u64;
                self.allocator.flush(&a, 0..len).unwrap();
            }
        }
        live.push(Own {
            tag,
            a,
            requirements: request.requirements,
            kind: request.kind,
        });
    }

    fn release(&self, rng: &mut Rng, tag: u64, a: Allocation) {
        if a.size() >= 16 {
            check_tag(self.allocator, tag, &a);
        }
        match rng.below(4) {
            0 => self.allocator.free_after_frame(a).unwrap(),
            1 => {
                let buffer = vk::Buffer::from_raw(self.device.create_resource());
                // SAFETY: the fake device runs no GPU work; the buffer is
                // the fake device's own.
                unsafe { self.allocator.destroy_buffer_after_frame(buffer, a) }.unwrap();
            }
            _ => free(self.allocator, a),
        }
    }

    fn end_frame(&self, rng: &mut Rng) {
        let mut sealed = self.sealed.lock().unwrap();
        if rng.below(2) == 0 {
            let fence = self.device.create_fence();
            // SAFETY: the fake device's fence, signalled before collect_idle.
            match unsafe { self.allocator.end_frame(fence) } {
                Ok(_) => {
                    sealed.push(Some(fence));
                    self.tally[2].fetch_add(1, Ordering::Relaxed);
                }
                Err(Error::TooManyFramesInFlight) => {}
                Err(error) => panic!("end_frame: {error:?}"),
            }
        } else {
            let value = self.next_value.fetch_add(1, Ordering::Relaxed);
            // SAFETY: as above.
            match unsafe { self.allocator.end_frame_timeline(self.timeline, value) } {
                Ok(_) => {
                    sealed.push(None);
                    self.tally[2].fetch_add(1, Ordering::Relaxed);
                }
                Err(Error::TooManyFramesInFlight) => {}
                Err(error) => panic!("end_frame_timeline: {error:?}"),
            }
        }
    }

    fn signal_oldest(&self) {
        let mut sealed = self.sealed.lock().unwrap();
        if sealed.is_empty() {
            return;
        }
        match sealed.remove(0) {
            Some(fence) => self.device.signal_fence(fence),
            None => {
                // Timeline values are sealed in order; signal the highest
                // sealed so far, which covers the oldest.
                let value = self.next_value.load(Ordering::Relaxed);
                self.device.signal_timeline(self.timeline, value - 1);
            }
        }
    }

    fn ring(&self, rng: &mut Rng) {
        let size = 1 + rng.below(2048);
        let align = 1 << rng.below(8);
        let allocation = match self.allocator.ring_allocate(self.ring, size, align) {
            Ok(allocation) => allocation,
            Err(Error::UploadRingFull { .. }) => return,
            Err(error) => panic!("ring_allocate: {error:?}"),
        };
        let bytes = vec![0xA5; size as usize];
        match self.allocator.ring_write(&allocation, 0, &bytes) {
            Ok(()) | Err(Error::StaleAllocation) => {}
            Err(error) => panic!("ring_write: {error:?}"),
        }
        match self.allocator.ring_flush(&allocation, ..) {
            Ok(()) | Err(Error::StaleAllocation) => {}
            Err(error) => panic!("ring_flush: {error:?}"),
        }
    }

    fn step(&self, rng: &mut Rng, thread: u64, step: u64, live: &mut Vec<Own>) {
        let tag = (thread << 48) | step;
        match rng.below(100) {
            0..=29 if live.len() < 120 => {
                let request = self.request(rng);
                match self.allocator.allocate(&request) {
                    Ok(a) => self.keep(a, tag, &request, live),
                    Err(error) => assert!(may_refuse(&error), "{}: {error:?}", self.ctx),
                }
            }
            30..=33 if live.len() < 120 => {
                let requests: Vec<_> = (0..1 + rng.below(4)).map(|_| self.request(rng)).collect();
                match self.allocator.allocate_many(&requests) {
                    Ok(all) => all
                        .into_iter()
                        .zip(&requests)
                        .for_each(|(a, request)| self.keep(a, tag, request, live)),
                    Err(error) => assert!(may_refuse(&error), "{}: {error:?}", self.ctx),
                }
            }
            34..=59 if !live.is_empty() => {
                let own = live.swap_remove(rng.below(live.len() as u64) as usize);
                self.release(rng, own.tag, own.a);
            }
            60..=65 if !live.is_empty() => {
                let Own { tag, a, .. } = &live[rng.below(live.len() as u64) as usize];
                let name = format!("t{tag:x}");
                self.allocator.set_name(a, Some(&name)).unwrap();
                assert_eq!(self.allocator.name(a).unwrap().as_deref(), Some(&*name));
            }
            66..=70 => self.end_frame(rng),
            71..=74 => self.signal_oldest(),
            75..=78 => {
                self.allocator.collect().unwrap();
            }
            79 => {
                self.allocator.wait_and_collect(0).ok();
            }
            80..=81 => {
                self.allocator.trim();
            }
            82..=91 => self.ring(rng),
            92..=93 if !live.is_empty() => self.defragment(rng, live),
            94 => self.private_pool(rng),
            _ => {}
        }
    }

    /// Plans moves of some of this thread's allocations, while the other
    /// threads may plan theirs in the same pools, and carries them out
    /// (the tagged bytes copied, the source freed) or gives some up.
    fn defragment(&self, rng: &mut Rng, live: &mut [Own]) {
        let movables: Vec<Movable<'_>> = live
            .iter()
            .filter(|_| rng.below(2) == 0)
            .map(|o| Movable::new(&o.a, o.requirements, o.kind))
            .collect();
        let limits = DefragmentationLimits::default()
            .max_moves(1 + rng.below(16) as usize)
            .compact_blocks(rng.below(3) == 0);
        let plan = match self.allocator.plan_defragmentation(&movables, &limits) {
            Ok(plan) => plan,
            Err(error) => panic!("{}: plan_defragmentation: {error:?}", self.ctx),
        };
        // Indices into `movables`, mapped back to `live`.
        let index_of: Vec<usize> = movables
            .iter()
            .map(|m| {
                live.iter()
                    .position(|o| std::ptr::eq(&o.a, m.allocation))
                    .unwrap()
            })
            .collect();
        drop(movables);
        for planned in plan.moves {
            let own = &mut live[index_of[planned.movable]];
            if rng.below(8) == 0 {
                self.allocator.give_up_move(planned).unwrap();
                self.tally[1].fetch_add(1, Ordering::Relaxed);
                continue;
            }
            let mut destination = planned.destination;
            if let Ok(bytes) = self.allocator.mapped_slice(&own.a) {
                let bytes = bytes.to_vec();
                let target = self.allocator.mapped_slice_mut(&mut destination).unwrap();
                target.copy_from_slice(&bytes);
                let size = destination.size();
                self.allocator.flush(&destination, 0..size).unwrap();
            }
            self.tally[0].fetch_add(1, Ordering::Relaxed);
            let old = std::mem::replace(&mut own.a, destination);
            let tag = own.tag;
            self.release(rng, tag, old);
        }
    }

    /// A pool of this thread's, made, filled, emptied and destroyed.
    fn private_pool(&self, rng: &mut Rng) {
        let memory_type = self.allocator.memory_type_for(!0, Usage::UPLOAD).unwrap();
        let desc = PoolDesc::new(memory_type)
            .block_size(2 * MIB)
            .min_blocks(rng.below(2) as u32);
        let pool = match self.allocator.create_pool(&desc) {
            Ok(pool) => pool,
            Err(error) => return assert!(may_refuse(&error), "{}: {error:?}", self.ctx),
        };
        let mut made = Vec::new();
        for _ in 0..1 + rng.below(3) {
            let mut request = Request::new(
                requirements(1 + rng.below(256 << 10), 256),
                Usage::UPLOAD,
                ResourceKind::Buffer,
            );
            request.desc.pool = Some(pool);
            match self.allocator.allocate(&request) {
                Ok(a) => made.push(a),
                Err(error) => assert!(may_refuse(&error), "{}: {error:?}", self.ctx),
            }
        }
        let stats = self.allocator.pool_stats(&pool).unwrap();
        assert_eq!(stats.allocations(), made.len() as u64, "{}", self.ctx);
        made.into_iter().for_each(|a| free(self.allocator, a));
        self.allocator.destroy_pool(pool).unwrap();
    }

    /// Run by one thread while the others wait.
    fn check(&self, round: u64) {
        let ctx = format!("{} round {round}", self.ctx);
        {
            let mut sealed = self.sealed.lock().unwrap();
            for fence in sealed.drain(..).flatten() {
                self.device.signal_fence(fence);
            }
        }
        // SAFETY: the fake device runs no GPU work.
        unsafe { self.allocator.collect_idle() };
        let mut all = self.published.lock().unwrap().clone();
        all.sort_unstable();
        for pair in all.windows(2) {
            let (m0, o0, s0, ..) = pair[0];
            let (m1, o1, ..) = pair[1];
            assert!(
                m0 != m1 || o0 + s0 <= o1,
                "{ctx}: overlap {:?} {:?}",
                pair[0],
                pair[1]
            );
        }
        let stats = self.allocator.stats();
        for t in &stats.memory_types {
            let mine = all.iter().filter(|a| a.3 == t.memory_type);
            let (base_n, base_bytes) = self.base[t.memory_type as usize];
            let want = (
                base_n + mine.clone().count() as u64,
                base_bytes + mine.clone().map(|a| a.2).sum::<u64>(),
                mine.clone().filter(|a| a.4).count() as u64,
            );
            let got = (t.allocations(), t.live_bytes(), t.dedicated_allocations);
            assert_eq!(got, want, "{ctx}: memory type {}: {t:?}", t.memory_type);
            let objects = self
                .device
                .live_allocations()
                .iter()
                .filter(|m| m.memory_type == t.memory_type)
                .count() as u64;
            assert_eq!(
                t.blocks + t.dedicated_allocations,
                objects,
                "{ctx}: memory type {}: {t:?}",
                t.memory_type
            );
        }
        assert_eq!(
            stats.memory_objects as usize,
            self.device.live_allocations().len(),
            "{ctx}"
        );
        let usage = self.device.heap_usage();
        for h in &stats.heaps {
            assert_eq!(h.reserved_bytes, usage[h.heap as usize], "{ctx}: {h:?}");
            // The budget's usage (the driver's, or ours alone) holds ours.
            assert!(h.budget.usage >= h.reserved_bytes, "{ctx}: {h:?}");
        }
        let base: u64 = self.base.iter().map(|&(n, _)| n).sum();
        let map = self.allocator.memory_map();
        assert_eq!(
            map.allocation_count() as u64,
            base + all.len() as u64,
            "{ctx}"
        );
        let pooled = all.iter().filter(|a| a.5).count() as u64;
        let pool = self.allocator.pool_stats(&self.pool).unwrap();
        assert_eq!(pool.allocations(), pooled, "{ctx}: {pool:?}");
        // The ring's buffer alone.
        assert_eq!(
            self.device.live_resources(),
            1,
            "{ctx}: buffers not destroyed"
        );
        self.published.lock().unwrap().clear();
    }

    fn run(&self, seed: u64, thread: u64) -> Vec<Own> {
        let mut rng = Rng(seed ^ (thread << 40));
        let mut live = Vec::new();
        for round in 0..ROUNDS {
            for step in 0..STEPS {
                self.step(&mut rng, thread, round * STEPS + step, &mut live);
            }
            self.published
                .lock()
                .unwrap()
                .extend(live.iter().map(|Own { a, .. }| {
                    (
                        a.memory().as_raw(),
                        a.offset(),
                        a.size(),
                        a.memory_type(),
                        a.is_dedicated(),
                        a.is_in_custom_pool(),
                    )
                }));
            if self.barrier.wait().is_leader() {
                self.check(round);
            }
            self.barrier.wait();
        }
        live
    }
}

fn figures_hold_at_quiescent_points(test: &str, layout: FakeLayout, config: Config) {
    let seed = Rng::seed(test);
    let (allocator, device) = allocator_with(layout, config);
    let ring = allocator
        .create_upload_ring(&UploadRingDesc {
            size: 64 << 10,
            ..UploadRingDesc::default()
        })
        .unwrap();
    let memory_type = allocator.memory_type_for(!0, Usage::DEVICE_LOCAL).unwrap();
    let pool = allocator
        .create_pool(&PoolDesc::new(memory_type).block_size(4 * MIB).max_blocks(6))
        .unwrap();
    let stats = allocator.stats();
    let shared = Shared {
        allocator: &allocator,
        device: &device,
        ring,
        pool,
        timeline: device.create_timeline_semaphore(),
        next_value: 1.into(),
        sealed: Mutex::default(),
        published: Mutex::default(),
        barrier: Barrier::new(THREADS),
        base: stats
            .memory_types
            .iter()
            .map(|t| (t.allocations(), t.live_bytes()))
            .collect(),
        ctx: format!("{test}: seed {seed}"),
        tally: Default::default(),
    };
    let survivors: Vec<Own> = std::thread::scope(|scope| {
        let shared = &shared;
        let handles: Vec<_> = (0..THREADS as u64)
            .map(|thread| {
                scope.spawn(move || {
                    // A panic on one thread would leave the others at the
                    // barrier: end the process, its message printed.
                    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                        shared.run(seed, thread)
                    }))
                    .unwrap_or_else(|_| std::process::abort())
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().unwrap())
            .collect()
    });
    let [moved, given_up, sealed] = shared.tally.each_ref().map(|n| n.load(Ordering::Relaxed));
    eprintln!("{test}: {moved} moves carried out, {given_up} given up, {sealed} frames sealed");
    for Own { tag, a, .. } in survivors {
        if a.size() >= 16 {
            check_tag(&allocator, tag, &a);
        }
        free(&allocator, a);
    }
    allocator.destroy_upload_ring(ring).unwrap();
    allocator.destroy_pool(pool).unwrap();
    // SAFETY: the fake device runs no GPU work.
    unsafe { allocator.collect_idle() };
    allocator.trim();
    assert_eq!(allocator.stats().memory_objects, 0, "{}", shared.ctx);
    assert_eq!(allocator.corruptions_detected(), 0, "{}", shared.ctx);
    finish(allocator, &device);
}

#[test]
fn figures_hold_at_quiescent_points_on_a_discrete_gpu() {
    figures_hold_at_quiescent_points(
        "figures_hold_at_quiescent_points_on_a_discrete_gpu",
        FakeLayout::discrete()
            .with_heap_size(0, 64 * MIB)
            .with_heap_size(2, 32 * MIB)
            .with_max_allocation_count(32),
        Config {
            empty_block_frames: 2,
            ..Config::default()
        },
    );
}

#[test]
fn figures_hold_at_quiescent_points_with_debug_work_on_a_mobile_gpu() {
    figures_hold_at_quiescent_points(
        "figures_hold_at_quiescent_points_with_debug_work_on_a_mobile_gpu",
        FakeLayout::mobile()
            .with_heap_sizes(64 * MIB)
            .with_max_allocation_count(24),
        Config {
            debug_fill: true,
            detect_corruption: true,
            debug_margin: 32,
            empty_block_frames: 1,
            ..Config::default()
        },
    );
}

#[test]
fn figures_hold_at_quiescent_points_on_a_small_integrated_gpu() {
    // No budget extension, few memory objects, kept blocks released at
    // once: the kept blocks give way to requests short of memory often.
    figures_hold_at_quiescent_points(
        "figures_hold_at_quiescent_points_on_a_small_integrated_gpu",
        FakeLayout::integrated()
            .with_heap_sizes(48 * MIB)
            .with_max_allocation_count(16),
        Config {
            empty_block_frames: 0,
            ..Config::default()
        },
    );
}
