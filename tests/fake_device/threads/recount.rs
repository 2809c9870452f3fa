//! The figures after threads: every thread allocates (in the default pools,
//! dedicated memory, a shared custom pool and a pool of its own, one by one
//! and `allocate_many`), frees now and after the frame, ends and collects
//! frames, trims, reads `stats()`, the dumps and the budgets at once; once
//! they are done, every figure of `stats()` must equal a recount of what
//! is alive: the allocations the threads kept, the device's memory
//! objects and the memory map. A figure that drifted under concurrency (a
//! count changed outside its pool's lock, or counted in the wrong pool)
//! shows there. While they run, each reading of `stats()` must hold
//! together within each memory type. A watchdog ends the process should
//! the threads deadlock.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use ash::vk::{self, Handle};
use vk_suballoc::device::fake::{FakeDevice, FakeLayout};
use vk_suballoc::{
    Allocation, Config, DedicatedPolicy, Error, Pool, PoolDesc, Request, ResourceKind, Usage,
};

use super::super::seeded_rng::Rng;
use super::super::{allocator_with, finish, free, no_room, requirements, FakeAllocator};
use super::{FIRST_USAGES, MIB};

const THREADS: u64 = 4;
/// The shared pool's `max_blocks`.
const POOL_MAX_BLOCKS: u64 = 8;
/// Operations per thread: a few under Miri.
const STEPS: u64 = if cfg!(miri) { 30 } else { 3000 };

/// What the threads share.
struct Shared<'a> {
    allocator: &'a FakeAllocator,
    device: &'a FakeDevice,
    /// A pool of 4 MiB blocks, at most eight, every thread allocates in.
    pool: Pool,
    /// Fences of sealed frames, signalled at the next collect.
    fences: Mutex<Vec<vk::Fence>>,
}

impl Shared<'_> {
    /// A random request: mostly small buffers, some images, now and then
    /// a few MiB or dedicated memory; one in five in the shared pool, one
    /// in six within budget.
    fn request(&self, rng: &mut Rng) -> Request<'static> {
        let size = match rng.below(30) {
            0 => (2 + rng.below(6)) * MIB,
            1..=4 => 64 << 10 | rng.below(1 << 20),
            _ => 16 + rng.below(32 << 10),
        };
        let kind = [
            ResourceKind::Buffer,
            ResourceKind::OptimalImage,
            ResourceKind::LinearImage,
        ][rng.below(3) as usize];
        let usage = FIRST_USAGES[rng.below(FIRST_USAGES.len() as u64) as usize];
        let mut request = Request::new(requirements(size, 1 << rng.below(10)), usage, kind);
        match rng.below(10) {
            0 => request = request.dedicated(DedicatedPolicy::Always),
            1 | 2 => {
                request.desc.pool = Some(self.pool);
                request.desc.usage = Usage::DEVICE_LOCAL;
                request.requirements.size = size.min(2 * MIB);
            }
            _ => {}
        }
        if rng.below(6) == 0 {
            request = request.within_budget();
        }
        request
    }

    /// Whether `error` is one `requests` may meet while others allocate,
    /// with the figures the test knows: exhaustion (the device's
    /// `maxMemoryAllocationCount`), `OverBudget` only for a request that
    /// asked to stay within budget, with a reading that had no room for
    /// the refused memory object, which holds the request (in the pool's
    /// heap for a request naming it), `PoolFull` only for one that names
    /// the shared pool, with its `max_blocks` (of `allocate_many`'s requests, any
    /// may be the one that failed). Which default memory type was refused
    /// last, and the heap's usage then, race the other threads.
    fn may_refuse(&self, error: &Error, requests: &[Request<'_>]) -> bool {
        let layout = self.device.layout();
        let pool_heap = layout.memory_types[self.pool.memory_type() as usize].heap;
        match *error {
            Error::OutOfDeviceMemory => true,
            Error::TooManyObjects(limit) => limit == layout.max_memory_allocation_count,
            Error::OverBudget {
                heap,
                size,
                usage,
                budget,
            } => {
                no_room(usage, size, budget)
                    && requests.iter().any(|r| {
                        r.desc.within_budget
                            && size >= r.requirements.size
                            && r.desc.pool.map_or(true, |_| heap == pool_heap)
                    })
            }
            Error::PoolFull { max_blocks } => {
                max_blocks == POOL_MAX_BLOCKS
                    && requests.iter().any(|r| r.desc.pool == Some(self.pool))
            }
            _ => false,
        }
    }

    fn allocate(&self, rng: &mut Rng, live: &mut Vec<Allocation>) {
        let request = self.request(rng);
        match self.allocator.allocate(&request) {
            Ok(allocation) => live.push(allocation),
            Err(error) => assert!(
                self.may_refuse(&error, &[request]),
                "{request:?}: {error:?}"
            ),
        }
    }

    fn allocate_many(&self, rng: &mut Rng, live: &mut Vec<Allocation>) {
        let requests: Vec<_> = (0..1 + rng.below(3)).map(|_| self.request(rng)).collect();
        match self.allocator.allocate_many(&requests) {
            Ok(made) => live.extend(made),
            Err(error) => assert!(
                self.may_refuse(&error, &requests),
                "{requests:?}: {error:?}"
            ),
        }
    }

    fn free_one(&self, rng: &mut Rng, live: &mut Vec<Allocation>, later: bool) {
        if live.is_empty() {
            return;
        }
        let allocation = live.swap_remove(rng.below(live.len() as u64) as usize);
        if later {
            self.allocator.free_after_frame(allocation).unwrap();
        } else {
            free(self.allocator, allocation);
        }
    }

    fn end_frame(&self) {
        let fence = self.device.create_fence();
        let mut fences = self.fences.lock().unwrap();
        // SAFETY: a fake fence, signalled at a later collect.
        match unsafe { self.allocator.end_frame(fence) } {
            Ok(_) => fences.push(fence),
            Err(error) => panic!("end_frame: {error:?}"),
        }
    }

    fn collect(&self) {
        for fence in self.fences.lock().unwrap().drain(..) {
            self.device.signal_fence(fence);
        }
        self.allocator.collect().unwrap();
    }

    /// A pool of this thread's own: made, given an allocation or two,
    /// emptied and destroyed.
    fn private_pool(&self, rng: &mut Rng) {
        let memory_type = self.allocator.memory_type_for(!0, Usage::UPLOAD).unwrap();
        let desc = PoolDesc::new(memory_type)
            .block_size(MIB)
            .min_blocks(rng.below(2) as u32);
        let pool = match self.allocator.create_pool(&desc) {
            Ok(pool) => pool,
            // Its first block need not stay within budget.
            Err(error) => return assert!(self.may_refuse(&error, &[]), "{error:?}"),
        };
        let mut made = Vec::new();
        for _ in 0..1 + rng.below(2) {
            let mut request = Request::new(
                requirements(1 + rng.below(256 << 10), 256),
                Usage::UPLOAD,
                ResourceKind::Buffer,
            );
            request.desc.pool = Some(pool);
            match self.allocator.allocate(&request) {
                Ok(allocation) => made.push(allocation),
                Err(error) => assert!(self.may_refuse(&error, &[request]), "{error:?}"),
            }
        }
        let stats = self.allocator.pool_stats(&pool).unwrap();
        assert_eq!(stats.allocations(), made.len() as u64, "{stats:?}");
        for allocation in made {
            free(self.allocator, allocation);
        }
        self.allocator.destroy_pool(pool).unwrap();
    }

    /// One reading of `stats()` holds together within each memory type,
    /// whatever the other threads do: each pool is read whole under its
    /// lock.
    fn check_reading(&self) {
        let stats = self.allocator.stats();
        for t in &stats.memory_types {
            assert!(t.empty_blocks + t.retiring_blocks <= t.blocks, "{t:?}");
            assert!(t.block_allocated_bytes <= t.block_bytes, "{t:?}");
            assert!(
                t.block_allocations >= t.blocks - t.empty_blocks,
                "{t:?}: a block in use without an allocation"
            );
            assert!(t.dedicated_bytes >= t.dedicated_allocations, "{t:?}");
        }
        for h in &stats.heaps {
            assert!(h.live_bytes <= h.reserved_bytes, "{h:?}");
        }
    }

    fn run(&self, seed: u64, thread: u64) -> Vec<Allocation> {
        let mut rng = Rng(seed ^ (thread << 40));
        let mut live = Vec::new();
        for _ in 0..STEPS {
            match rng.below(100) {
                0..=29 if live.len() < 150 => self.allocate(&mut rng, &mut live),
                30..=33 if live.len() < 150 => self.allocate_many(&mut rng, &mut live),
                34..=56 => self.free_one(&mut rng, &mut live, false),
                57..=66 => self.free_one(&mut rng, &mut live, true),
                67..=71 => self.end_frame(),
                72..=76 => self.collect(),
                77..=81 => self.check_reading(),
                82..=83 => {
                    self.allocator.trim();
                }
                84 => {
                    let map = self.allocator.memory_map();
                    assert!(map.allocation_count() >= live.len());
                }
                85 => {
                    let _ = self.allocator.stats_json(false);
                }
                86..=87 => {
                    let _ = self.allocator.budgets();
                }
                88..=89 => self.private_pool(&mut rng),
                90..=92 => {
                    let _ = self.allocator.pool_stats(&self.pool).unwrap();
                }
                93..=95 if !live.is_empty() => {
                    let a = &live[rng.below(live.len() as u64) as usize];
                    assert!(self.allocator.owns(a), "{a:?}");
                    let size = self.allocator.memory_size(a).unwrap();
                    assert!(size >= a.offset() + a.size(), "{a:?}: {size}");
                }
                _ => {}
            }
        }
        live
    }
}

/// Ends the process should the threads not be done by `limit`: a deadlock
/// would otherwise hang the suite. Disarmed when dropped.
struct Watchdog(std::sync::Arc<AtomicBool>);

impl Watchdog {
    fn arm(test: &'static str, seed: u64, limit: Duration) -> Self {
        let done = std::sync::Arc::new(AtomicBool::new(false));
        let flag = std::sync::Arc::clone(&done);
        std::thread::spawn(move || {
            let start = std::time::Instant::now();
            while start.elapsed() < limit {
                if flag.load(Ordering::Relaxed) {
                    return;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            eprintln!("{test}: seed {seed}: the threads did not finish in {limit:?} (deadlock?)");
            std::process::abort();
        });
        Self(done)
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

fn figures_equal_a_recount_after_threads(test: &'static str, layout: FakeLayout, config: Config) {
    let seed = Rng::seed(test);
    let (allocator, device) = allocator_with(layout, config);
    let memory_type = allocator.memory_type_for(!0, Usage::DEVICE_LOCAL).unwrap();
    let desc = PoolDesc::new(memory_type)
        .block_size(4 * MIB)
        .max_blocks(POOL_MAX_BLOCKS as u32);
    let pool = allocator.create_pool(&desc).unwrap();
    let shared = Shared {
        allocator: &allocator,
        device: &device,
        pool,
        fences: Mutex::default(),
    };
    let limit = if cfg!(miri) { 3600 } else { 60 };
    let watchdog = Watchdog::arm(test, seed, Duration::from_secs(limit));
    let survivors: Vec<Allocation> = std::thread::scope(|scope| {
        let shared = &shared;
        let handles: Vec<_> = (0..THREADS)
            .map(|thread| scope.spawn(move || shared.run(seed, thread)))
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().unwrap())
            .collect()
    });
    drop(watchdog);
    shared.collect();
    // SAFETY: the fake device runs no GPU work.
    unsafe { allocator.collect_idle() };
    assert_eq!(allocator.frames_in_flight(), 0);

    let ctx = format!("{test}: seed {seed}");
    let stats = allocator.stats();
    let on_device = device.live_allocations();
    let dedicated: HashSet<u64> = survivors
        .iter()
        .filter(|a| a.is_dedicated())
        .map(|a| a.memory().as_raw())
        .collect();
    let map = allocator.memory_map();
    assert_eq!(stats.memory_objects as usize, on_device.len(), "{ctx}");
    assert_eq!(stats.allocations(), survivors.len() as u64, "{ctx}");
    assert_eq!(map.allocation_count(), survivors.len(), "{ctx}");
    for t in &stats.memory_types {
        let mine: Vec<&Allocation> = survivors
            .iter()
            .filter(|a| a.memory_type() == t.memory_type)
            .collect();
        let in_dedicated = mine.iter().filter(|a| a.is_dedicated());
        let want = (
            mine.len() as u64,
            mine.iter().map(|a| a.size()).sum::<u64>(),
            in_dedicated.clone().count() as u64,
            in_dedicated.map(|a| a.size()).sum::<u64>(),
        );
        let got = (
            t.allocations(),
            t.live_bytes(),
            t.dedicated_allocations,
            t.dedicated_bytes,
        );
        assert_eq!(got, want, "{ctx}: memory type {}: {t:?}", t.memory_type);
        let blocks: Vec<u64> = on_device
            .iter()
            .filter(|m| m.memory_type == t.memory_type && !dedicated.contains(&m.memory.as_raw()))
            .map(|m| m.size)
            .collect();
        let want = (blocks.len() as u64, blocks.iter().sum::<u64>());
        assert_eq!(
            (t.blocks, t.block_bytes),
            want,
            "{ctx}: memory type {}: {t:?}",
            t.memory_type
        );
        let type_map = &map.memory_types[t.memory_type as usize];
        let mapped_blocks = type_map
            .blocks
            .iter()
            .chain(type_map.custom_pools.iter().flat_map(|p| p.blocks.iter()));
        let empty = mapped_blocks
            .clone()
            .filter(|b| b.allocations().next().is_none())
            .count() as u64;
        let retiring = mapped_blocks.filter(|b| b.retiring).count() as u64;
        assert_eq!(
            (t.empty_blocks, t.retiring_blocks),
            (empty, retiring),
            "{ctx}: memory type {}: {t:?}",
            t.memory_type
        );
    }
    let usage = device.heap_usage();
    for h in &stats.heaps {
        assert_eq!(h.reserved_bytes, usage[h.heap as usize], "{ctx}: {h:?}");
        assert!(h.budget.usage >= h.reserved_bytes, "{ctx}: {h:?}");
    }
    let pooled = survivors.iter().filter(|a| a.is_in_custom_pool()).count() as u64;
    let pool_stats = allocator.pool_stats(&pool).unwrap();
    assert_eq!(pool_stats.allocations(), pooled, "{ctx}: {pool_stats:?}");
    let by_pool: HashMap<u32, u64> = map
        .custom_pools()
        .map(|p| (p.memory_type, p.blocks.len() as u64))
        .collect();
    assert_eq!(by_pool.get(&memory_type), Some(&pool_stats.blocks), "{ctx}");

    for allocation in survivors {
        free(&allocator, allocation);
    }
    allocator.destroy_pool(pool).unwrap();
    let stats = allocator.stats();
    assert_eq!((stats.allocations(), stats.live_bytes()), (0, 0), "{ctx}");
    allocator.trim();
    assert_eq!(allocator.stats().reserved_bytes(), 0, "{ctx}");
    // The threads wrote no byte: nothing reads as damaged.
    assert_eq!(allocator.corruptions_detected(), 0, "{ctx}");
    finish(allocator, &device);
}

#[test]
fn figures_equal_a_recount_after_threads_on_a_discrete_gpu() {
    figures_equal_a_recount_after_threads(
        "figures_equal_a_recount_after_threads_on_a_discrete_gpu",
        FakeLayout::discrete()
            .with_heap_size(0, 96 * MIB)
            .with_heap_size(2, 48 * MIB)
            .with_max_allocation_count(40),
        Config::default(),
    );
}

#[test]
fn figures_equal_a_recount_after_threads_on_a_small_integrated_gpu() {
    // No budget extension: budgets are the allocator's own counts.
    figures_equal_a_recount_after_threads(
        "figures_equal_a_recount_after_threads_on_a_small_integrated_gpu",
        FakeLayout::integrated()
            .with_heap_sizes(64 * MIB)
            .with_max_allocation_count(24),
        Config::default(),
    );
}

#[test]
fn figures_equal_a_recount_after_threads_with_debug_work_on_a_mobile_gpu() {
    // Debug fills (in non-coherent memory too) and margins: the
    // allocations and frees take their out-of-line paths.
    let config = Config {
        debug_fill: true,
        detect_corruption: true,
        debug_margin: 32,
        ..Config::default()
    };
    figures_equal_a_recount_after_threads(
        "figures_equal_a_recount_after_threads_with_debug_work_on_a_mobile_gpu",
        FakeLayout::mobile()
            .with_heap_sizes(96 * MIB)
            .with_max_allocation_count(32),
        config,
    );
}
