//! Threads and frames at a heap's budget edge: several threads, frees
//! and frame ends sharing a few remainder blocks, never past the budget.

use std::sync::atomic::{AtomicUsize, Ordering};

use vk_suballoc::device::fake::FakeLayout;
use vk_suballoc::{Allocation, Config};

use super::{device_local, heap_objects, three_and_a_half_mib_of_budget, KIB, MIB};
use crate::frames::{end_frame, free_all_and_finish};
use crate::seeded_rng::Rng;
use crate::{allocator_with, finish, free};

/// Threads at the edge: three threads allocate small buffers (1 to
/// 16 KiB, at most 400 KiB live each) and free them at random in VRAM's two
/// memory types of a resizable-BAR layout (types 1 and 4 share heap 0,
/// each a pool of its own, which race for the heap's room), with 3.5 MiB
/// of budget left and the driver refusing memory past it. Every request is
/// served in heap 0, by a few blocks, not a memory object per request,
/// and the driver refuses no call: no remainder block is sized past the
/// room, whatever the other type took meanwhile.
#[test]
fn threads_at_the_edge_share_a_few_blocks_in_the_heap() {
    let test = "threads_at_the_edge_share_a_few_blocks_in_the_heap";
    let seed = Rng::seed(test);
    let (allocator, device) = allocator_with(FakeLayout::rebar(), Config::default());
    let (budget, others) = (100 * MIB, 100 * MIB - 3 * MIB - 512 * KIB);
    device.set_heap_budget(0, budget, others);
    device.cap_heap(0, budget - others);
    let most_objects = AtomicUsize::new(0);
    let live: Vec<Vec<Allocation>> = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..3u64)
            .map(|thread| {
                let (allocator, device, most_objects) = (&allocator, &device, &most_objects);
                scope.spawn(move || {
                    let mut rng = Rng(seed ^ thread.wrapping_mul(0x9e37_79b9));
                    let mut live: Vec<Allocation> = Vec::new();
                    for step in 0..if cfg!(miri) { 40 } else { 400 } {
                        let size = KIB << rng.below(5);
                        let live_bytes: u64 = live.iter().map(Allocation::size).sum();
                        if live_bytes + size <= 400 * KIB && rng.below(3) != 0 {
                            let mut request = device_local(size);
                            request.requirements.memory_type_bits = [1 << 1, 1 << 4]
                                [rng.below(2) as usize];
                            let allocation = allocator.allocate(&request).unwrap_or_else(|error| {
                                panic!("{test}: seed {seed}: thread {thread} step {step}: {error:?}")
                            });
                            let memory_type = allocation.memory_type();
                            assert!(
                                memory_type == 1 || memory_type == 4,
                                "{test}: seed {seed}: thread {thread} step {step}: {size} bytes in memory type {memory_type}"
                            );
                            live.push(allocation);
                            most_objects.fetch_max(heap_objects(device), Ordering::Relaxed);
                        } else if !live.is_empty() {
                            let index = rng.below(live.len() as u64) as usize;
                            free(allocator, live.swap_remove(index));
                        }
                    }
                    live
                })
            })
            .collect();
        workers.into_iter().map(|w| w.join().unwrap()).collect()
    });
    let counters = device.counters();
    assert_eq!(
        counters.allocate_calls, counters.allocations,
        "{test}: seed {seed}: the driver refused memory past the budget"
    );
    let most = most_objects.into_inner();
    println!("{test}: at most {most} memory objects in heap 0");
    assert!(
        most <= 16,
        "{test}: seed {seed}: {most} memory objects in heap 0"
    );
    free_all_and_finish(allocator, &device, live.into_iter().flatten());
}

/// An engine's threads at the edge through `&self`: three threads
/// allocate small buffers (1 to 16 KiB, at most 400 KiB live each) in
/// VRAM's two memory types of the resizable-BAR layout (types 1 and 4,
/// heap 0, each a pool of its own) and free them at random, now or after
/// a frame, while a fourth thread ends frames and collects them (which
/// releases aged empty blocks, `try_lock`ing each pool, and frees the
/// frames' allocations: the heap's turn), with 3.5 MiB of budget left and
/// the driver refusing memory past it. Every request is served in its
/// memory type, the driver refuses no call (no remainder block sized past
/// the room, whatever the other type or a frame's end did meanwhile), the
/// heap holds a few memory objects, and nothing waits forever: the whole
/// run has 60 seconds.
#[test]
fn threads_at_the_edge_with_frees_and_frame_ends_share_the_heap() {
    use std::sync::atomic::AtomicBool;
    use std::sync::{mpsc, Arc};
    use std::time::Duration;

    let test = "threads_at_the_edge_with_frees_and_frame_ends_share_the_heap";
    let seed = Rng::seed(test);
    let config = Config {
        empty_block_frames: 2,
        ..Config::default()
    };
    let (allocator, device) = allocator_with(FakeLayout::rebar(), config);
    let (budget, others) = (100 * MIB, 100 * MIB - 3 * MIB - 512 * KIB);
    device.set_heap_budget(0, budget, others);
    device.cap_heap(0, budget - others);
    let (allocator, device) = (Arc::new(allocator), Arc::new(device));
    let (sender, receiver) = mpsc::channel();
    let (shared, on_device) = (Arc::clone(&allocator), Arc::clone(&device));
    // Detached: a deadlocked run never returns.
    std::thread::spawn(move || {
        let (allocator, device) = (&*shared, &*on_device);
        let most_objects = AtomicUsize::new(0);
        let frames = AtomicUsize::new(0);
        let done = AtomicBool::new(false);
        let live: Vec<Vec<Allocation>> = std::thread::scope(|scope| {
            let (done, frames) = (&done, &frames);
            scope.spawn(move || {
                while !done.load(Ordering::Relaxed) {
                    device.signal_fence(end_frame(allocator, device));
                    allocator.collect().unwrap();
                    frames.fetch_add(1, Ordering::Relaxed);
                    std::thread::yield_now();
                }
            });
            let workers: Vec<_> = (0..3u64)
                .map(|thread| {
                    let most_objects = &most_objects;
                    scope.spawn(move || {
                        let mut rng = Rng(seed ^ thread.wrapping_mul(0x9e37_79b9));
                        let mut live: Vec<Allocation> = Vec::new();
                        for step in 0..if cfg!(miri) { 40 } else { 1000 } {
                            // Frames end between the steps, not only
                            // before or after them all.
                            std::thread::yield_now();
                            let size = KIB << rng.below(5);
                            let live_bytes: u64 = live.iter().map(Allocation::size).sum();
                            if live_bytes + size <= 400 * KIB && rng.below(3) != 0 {
                                let memory_type = [1u32, 4][rng.below(2) as usize];
                                let mut request = device_local(size);
                                request.requirements.memory_type_bits = 1 << memory_type;
                                let allocation = allocator.allocate(&request).unwrap_or_else(|error| {
                                    panic!("{test}: seed {seed}: thread {thread} step {step}: {error:?}")
                                });
                                assert_eq!(
                                    allocation.memory_type(),
                                    memory_type,
                                    "{test}: seed {seed}: thread {thread} step {step}"
                                );
                                live.push(allocation);
                                most_objects.fetch_max(heap_objects(device), Ordering::Relaxed);
                            } else if !live.is_empty() {
                                let index = rng.below(live.len() as u64) as usize;
                                let allocation = live.swap_remove(index);
                                if rng.below(2) == 0 {
                                    free(allocator, allocation);
                                } else {
                                    allocator.free_after_frame(allocation).unwrap();
                                }
                            }
                        }
                        live
                    })
                })
                .collect();
            let live = workers.into_iter().map(|w| w.join().unwrap()).collect();
            done.store(true, Ordering::Relaxed);
            live
        });
        let outcome = (live, most_objects.into_inner(), frames.into_inner());
        // Before the outcome is sent: the test unwraps the allocator's
        // `Arc` once it has it.
        drop((shared, on_device));
        let _ = sender.send(outcome);
    });
    let (live, most, frames) = match receiver.recv_timeout(Duration::from_secs(60)) {
        Ok(outcome) => outcome,
        Err(_) => panic!("{test}: seed {seed}: a thread panicked, or the run did not end in 60 s"),
    };
    let counters = device.counters();
    println!("{test}: {frames} frames, at most {most} memory objects in heap 0");
    assert_eq!(
        counters.allocate_calls, counters.allocations,
        "{test}: seed {seed}: the driver refused memory past the budget"
    );
    assert!(
        most <= 16,
        "{test}: seed {seed}: {most} memory objects in heap 0"
    );
    let allocator = Arc::try_unwrap(allocator).unwrap_or_else(|_| unreachable!());
    free_all_and_finish(allocator, &device, live.into_iter().flatten());
}

/// An engine's frames at the edge: buffers of 4 to 32 KiB allocated and
/// freed at random (at most 1.5 MiB live), a frame ended every 50 steps,
/// with 3.5 MiB of VRAM budget left. Every request stays in VRAM; the
/// heap holds a few memory objects at most, not one per churn
/// (empty remainder blocks are kept or released as other blocks are); and
/// once everything is freed and the frames age the kept blocks out, one
/// empty block is left (the largest, kept for reuse), which `trim`
/// releases.
#[test]
fn frames_of_churn_at_the_edge_keep_a_few_blocks() {
    let test = "frames_of_churn_at_the_edge_keep_a_few_blocks";
    let mut rng = Rng::from_env(test);
    let config = Config {
        empty_block_frames: 3,
        ..Config::default()
    };
    let (allocator, device) = allocator_with(FakeLayout::discrete(), config);
    three_and_a_half_mib_of_budget(&allocator, &device);
    let mut live: Vec<Allocation> = Vec::new();
    let mut most = 0;
    for step in 0..if cfg!(miri) { 300 } else { 3000 } {
        let size = (4 * KIB) << rng.below(4);
        let live_bytes: u64 = live.iter().map(Allocation::size).sum();
        if live_bytes + size <= 3 * MIB / 2 && rng.below(2) == 0 {
            let allocation = allocator
                .allocate(&device_local(size))
                .unwrap_or_else(|error| panic!("{test}: step {step}: {error:?}"));
            assert_eq!(
                allocation.memory_type(),
                1,
                "{test}: step {step}: {size} bytes"
            );
            live.push(allocation);
        } else if !live.is_empty() {
            let index = rng.below(live.len() as u64) as usize;
            allocator.free_after_frame(live.swap_remove(index)).unwrap();
        }
        if step % 50 == 49 {
            device.signal_fence(end_frame(&allocator, &device));
            allocator.collect().unwrap();
        }
        most = most.max(heap_objects(&device));
    }
    println!("{test}: at most {most} memory objects in heap 0");
    assert!(most <= 16, "{test}: {most} memory objects in heap 0");
    for allocation in live {
        allocator.free_after_frame(allocation).unwrap();
    }
    for _ in 0..5 {
        device.signal_fence(end_frame(&allocator, &device));
        allocator.collect().unwrap();
    }
    assert_eq!(heap_objects(&device), 1, "{test}: one empty block kept");
    allocator.trim();
    assert_eq!(heap_objects(&device), 0, "{test}: trim releases it");
    finish(allocator, &device);
}
