//! Workloads that write only where they may and must see nothing
//! reported: a long seeded run with fills and margins, and threads
//! writing their own memory while others' fills and checks run (with
//! `threads_writing_their_own_memory`, one layout's run). Seeded
//! (`VK_SUBALLOC_SEED`) and slower than the others, so apart.

use vk_suballoc::device::fake::FakeLayout;
use vk_suballoc::{
    Allocation, AllocationDesc, Config, DefragmentationLimits, PoolDesc, Request, ResourceKind,
    Usage,
};

use super::super::defragment::movables;
use super::super::frames::{end_frame, finish_after_frame};
use super::super::seeded_rng::Rng;
use super::super::{allocator_with, finish, free, requirements};

use super::{all, bytes_of, with_fill, HOST, MIB, NEW};

/// Debug fills with margins, over a long random run of allocations (each
/// written whole), frees now and after frames, and defragmentation plans
/// carried out: no write after free and no damaged margin is ever found,
/// and each new allocation reads `0xDC`. Seeded (`VK_SUBALLOC_SEED`).
#[test]
fn no_false_positives_with_fills_and_margins() {
    let mut rng = Rng::from_env("no_false_positives_with_fills_and_margins");
    let config = Config {
        debug_margin: 16,
        detect_corruption: true,
        ..with_fill()
    };
    let (allocator, device) = allocator_with(FakeLayout::discrete(), config);
    let mut live: Vec<Allocation> = Vec::new();
    for step in 0..3000u32 {
        match rng.below(12) {
            0..=4 if live.len() < 150 => {
                let largest = if rng.below(16) == 0 { 300_000 } else { 4096 };
                let size = 1 + rng.below(largest);
                let kind =
                    [ResourceKind::Buffer, ResourceKind::OptimalImage][rng.below(2) as usize];
                let request =
                    Request::new(requirements(size, 1 << rng.below(9)), Usage::UPLOAD, kind);
                let mut a = allocator.allocate(&request).unwrap();
                assert!(all(&bytes_of(&device, &a), NEW), "step {step}");
                allocator.mapped_slice_mut(&mut a).unwrap().fill(step as u8);
                live.push(a);
            }
            0..=8 if !live.is_empty() => {
                let a = live.swap_remove(rng.below(live.len() as u64) as usize);
                if rng.below(2) == 0 {
                    free(&allocator, a);
                } else {
                    allocator.free_after_frame(a).unwrap();
                }
            }
            9 => device.signal_fence(end_frame(&allocator, &device)),
            10 if !live.is_empty() => {
                let plan = allocator
                    .plan_defragmentation(&movables(&live), &DefragmentationLimits::default())
                    .unwrap();
                for planned in plan.moves {
                    let old = std::mem::replace(&mut live[planned.movable], planned.destination);
                    free(&allocator, old);
                }
            }
            _ => {
                allocator.collect().unwrap();
                let report = allocator.check_corruption(!0).unwrap();
                assert!(report.is_clean(), "step {step}: {report:?}");
            }
        }
    }
    for a in live {
        free(&allocator, a);
    }
    assert_eq!(allocator.corruptions_detected(), 0);
    assert!(allocator.check_corruption(!0).unwrap().is_clean());
    finish_after_frame(allocator, &device);
}

/// Threads that allocate in one host-visible type (ranges, run slots, a
/// shared custom pool's ranges, `allocate_many`), write every byte of
/// their allocations and free them now or after a frame (which one of
/// them ends and collects), while another thread checks the free memory
/// over and over: every new allocation reads `0xDC`, keeps its owner's
/// bytes until freed, and no write after free is ever found, neither by a
/// check nor when memory is allocated again. The fills and checks run
/// under the pool's lock, on memory no live allocation holds: in the
/// discrete layout's host-coherent type, and in the mobile layout's
/// non-coherent one, where the owners never flush their writes and the
/// checks' invalidates must leave them alone. Seeded (`VK_SUBALLOC_SEED`):
/// the seed fixes each thread's choices, not how they interleave.
#[test]
fn threads_writing_their_own_memory_never_read_as_writes_after_free() {
    threads_writing_their_own_memory(FakeLayout::discrete(), HOST, Usage::UPLOAD);
    threads_writing_their_own_memory(FakeLayout::mobile(), 2, Usage::READBACK);
}

fn threads_writing_their_own_memory(layout: FakeLayout, memory_type: u32, usage: Usage) {
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

    const THREADS: u64 = 3;
    const STEPS: u64 = if cfg!(miri) { 30 } else { 1500 };
    let seed = Rng::from_env("threads_writing_their_own_memory_never_read_as_writes_after_free").0;
    let config = Config {
        debug_margin: 8,
        detect_corruption: true,
        ..with_fill()
    };
    let (allocator, device) = allocator_with(layout, config);
    let pool = allocator
        .create_pool(&PoolDesc::new(memory_type).block_size(MIB).min_blocks(1))
        .unwrap();
    let done = AtomicBool::new(false);
    let checks = AtomicU64::new(0);
    let fences = std::sync::Mutex::new(Vec::new());
    std::thread::scope(|scope| {
        let checker = scope.spawn(|| {
            while !done.load(Ordering::Acquire) {
                let report = allocator.check_corruption(1 << memory_type).unwrap();
                assert!(report.is_clean(), "{report:?}");
                checks.fetch_add(1, Ordering::Relaxed);
            }
        });
        let workers: Vec<_> = (0..THREADS)
            .map(|thread| {
                let (allocator, device, fences) = (&allocator, &device, &fences);
                scope.spawn(move || {
                    let mut rng = Rng(seed ^ (thread + 1).wrapping_mul(0x9e37_79b9));
                    let byte = 0x10 + thread as u8;
                    let mut live: Vec<Allocation> = Vec::new();
                    let check_own = |a: &Allocation, step: u64| {
                        let bytes = allocator.mapped_slice(a).unwrap();
                        assert!(all(bytes, byte), "thread {thread} step {step}: {a:?}");
                    };
                    for step in 0..STEPS {
                        match rng.below(10) {
                            0..=4 if live.len() < 40 => {
                                let size = if rng.below(8) == 0 {
                                    1 + rng.below(200_000)
                                } else {
                                    1 + rng.below(3000)
                                };
                                let kind = [ResourceKind::Buffer, ResourceKind::OptimalImage]
                                    [rng.below(2) as usize];
                                let in_pool = (rng.below(4) == 0).then_some(pool);
                                let mut desc =
                                    AllocationDesc::new(usage).min_alignment(1 << rng.below(9));
                                if let Some(pool) = in_pool {
                                    desc = desc.pool(pool);
                                }
                                let request =
                                    Request::with_desc(requirements(size, 256), kind, desc);
                                let made = if rng.below(4) == 0 {
                                    allocator.allocate_many(&[request, request])
                                } else {
                                    allocator.allocate(&request).map(|a| vec![a])
                                };
                                for mut a in made.unwrap() {
                                    assert_eq!(a.memory_type(), memory_type);
                                    let bytes = allocator.mapped_slice_mut(&mut a).unwrap();
                                    assert!(all(bytes, NEW), "thread {thread} step {step}");
                                    bytes.fill(byte);
                                    live.push(a);
                                }
                            }
                            0..=8 if !live.is_empty() => {
                                let a = live.swap_remove(rng.below(live.len() as u64) as usize);
                                check_own(&a, step);
                                if rng.below(3) == 0 {
                                    allocator.free_after_frame(a).unwrap();
                                } else {
                                    free(allocator, a);
                                }
                            }
                            _ if thread == 0 => {
                                let fence = end_frame(allocator, device);
                                fences.lock().unwrap().push(fence);
                                let mut fences = fences.lock().unwrap();
                                for fence in fences.drain(..) {
                                    device.signal_fence(fence);
                                }
                                drop(fences);
                                allocator.collect().unwrap();
                            }
                            _ => live.iter().for_each(|a| check_own(a, step)),
                        }
                    }
                    for a in live {
                        check_own(&a, STEPS);
                        free(allocator, a);
                    }
                })
            })
            .collect();
        // The checker stops also when a worker panicked, so that the test
        // fails rather than hangs.
        let joined: Vec<_> = workers.into_iter().map(|worker| worker.join()).collect();
        done.store(true, Ordering::Release);
        checker.join().unwrap();
        for worker in joined {
            worker.unwrap();
        }
    });
    assert!(checks.load(Ordering::Relaxed) > 0);
    device.signal_fence(end_frame(&allocator, &device));
    allocator.collect().unwrap();
    assert_eq!(allocator.corruptions_detected(), 0);
    let report = allocator.check_corruption(!0).unwrap();
    assert!(report.is_clean() && report.free_checked > 0, "{report:?}");
    allocator.destroy_pool(pool).unwrap();
    finish(allocator, &device);
}
