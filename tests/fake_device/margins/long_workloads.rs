//! The two seeded random workloads with margins: one that never writes
//! where it should not and asserts nothing is reported, one that overruns
//! live allocations at random and asserts each overrun is found once.
//! They are long and seeded (`VK_SUBALLOC_SEED`), so they sit apart from
//! the tests of one case each.

use ash::vk;
use vk_suballoc::device::fake::FakeLayout;
use vk_suballoc::{Allocation, Config, Usage};

use super::super::frames::end_frame;
use super::super::seeded_rng::Rng;
use super::super::{allocator_with, buffer, finish, free, STRATEGIES};

use super::{gpu_write, with_margin, MIB};

/// Allocations that fill their whole slice, over a long random run with
/// frees now and after frames, never damage a margin.
#[test]
fn no_false_positives_on_a_long_random_run() {
    let mut rng = Rng::from_env("no_false_positives_on_a_long_random_run");
    let (allocator, device) = allocator_with(FakeLayout::discrete(), with_margin(4, true));
    let mut live: Vec<Allocation> = Vec::new();
    for step in 0..4000u32 {
        match rng.below(10) {
            0..=4 if live.len() < 200 => {
                let largest = if rng.below(16) == 0 { MIB } else { 4096 };
                let size = 1 + rng.below(largest);
                let alignment = 1 << rng.below(9);
                let mut a = allocator
                    .allocate(&buffer(size, alignment, Usage::UPLOAD))
                    .unwrap();
                allocator.mapped_slice_mut(&mut a).unwrap().fill(step as u8);
                live.push(a);
            }
            0..=7 if !live.is_empty() => {
                let a = live.swap_remove(rng.below(live.len() as u64) as usize);
                if rng.below(2) == 0 {
                    free(&allocator, a);
                } else {
                    allocator.free_after_frame(a).unwrap();
                }
            }
            8 => device.signal_fence(end_frame(&allocator, &device)),
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
    device.signal_fence(end_frame(&allocator, &device));
    allocator.collect().unwrap();
    assert_eq!(allocator.corruptions_detected(), 0);
    finish(allocator, &device);
}

/// The other side of the run above: over a long random run of
/// allocations (ranges and run slots, placed by every strategy) freed at
/// once or after their frame, a write past the end of a live allocation
/// into its margin, by the host or by the GPU, is listed by every `check_corruption` while the
/// allocation lives (queued for its frame included), and counted once,
/// when it is freed; nothing else is listed or counted. With debug fills
/// on too, which fill the margin's bytes again at the free.
#[test]
fn every_overrun_in_a_long_random_run_is_found_once() {
    let mut rng = Rng::from_env("every_overrun_in_a_long_random_run_is_found_once");
    // Each request's strategy, from a stream of its own (the run `rng`
    // draws stays what it was for a seed): an allocation placed at the top
    // of its block keeps its margin there too.
    let mut strategies = Rng(rng.0 ^ 0x5354_5241_5445_4759);
    for fills in [false, true] {
        let config = Config {
            debug_fill: fills,
            // Small blocks: `check_corruption` reads every free byte
            // with fills on.
            large_heap_block_size: 4 * MIB,
            ..with_margin(16, true)
        };
        let (allocator, device) = allocator_with(FakeLayout::discrete(), config);
        // Live allocations, whether each was overrun, and those queued
        // for their frame (still listed until the frame is collected).
        let mut live: Vec<(Allocation, bool)> = Vec::new();
        let mut queued: Vec<(vk::DeviceMemory, u64, bool, u64)> = Vec::new();
        let mut fences = Vec::new();
        let (mut overruns, mut freed_overrun) = (0u64, 0u64);
        for step in 0..2000u32 {
            let ctx = format!("fills {fills} step {step}");
            let action = rng.below(12);
            match action {
                0..=4 if live.len() < 150 => {
                    let largest = if rng.below(16) == 0 { MIB } else { 4096 };
                    let size = 1 + rng.below(largest);
                    let alignment = 1 << rng.below(9);
                    let mut request = buffer(size, alignment, Usage::UPLOAD);
                    request.desc = request
                        .desc
                        .strategy(STRATEGIES[strategies.below(4) as usize]);
                    let a = allocator.allocate(&request).unwrap();
                    live.push((a, false));
                }
                5..=7 if !live.is_empty() => {
                    let (a, overrun) = live.swap_remove(rng.below(live.len() as u64) as usize);
                    if rng.below(2) == 0 {
                        free(&allocator, a);
                        freed_overrun += u64::from(overrun);
                    } else {
                        let frame = allocator.current_frame();
                        queued.push((a.memory(), a.offset(), overrun, frame));
                        allocator.free_after_frame(a).unwrap();
                    }
                }
                8 if !live.is_empty() => {
                    let index = rng.below(live.len() as u64) as usize;
                    let (a, overrun) = &mut live[index];
                    if !*overrun {
                        // One byte of the margin's 16, past the end.
                        let past = a.size() + rng.below(16);
                        if rng.below(2) == 0 {
                            gpu_write(&device, a, past, &[0x42]);
                        } else {
                            let pointer = a.mapped_ptr().unwrap();
                            // SAFETY: the overrun on purpose: inside the
                            // allocation's margin in its mapped block,
                            // which no other allocation holds.
                            unsafe { pointer.as_ptr().add(past as usize).write(0x42) };
                        }
                        *overrun = true;
                        overruns += 1;
                    }
                }
                9 => fences.push(end_frame(&allocator, &device)),
                _ => {
                    for fence in fences.drain(..) {
                        device.signal_fence(fence);
                    }
                    allocator.collect().unwrap();
                    // Every ended frame is collected; the current one stays.
                    let current = allocator.current_frame();
                    let collected = queued.iter().filter(|q| q.3 < current);
                    freed_overrun += collected.filter(|q| q.2).count() as u64;
                    queued.retain(|q| q.3 == current);
                }
            }
            // After each overrun and collect, and every few steps.
            if action < 8 && step % 8 != 0 {
                assert_eq!(allocator.corruptions_detected(), freed_overrun, "{ctx}");
                continue;
            }
            let report = allocator.check_corruption(!0).unwrap();
            let mut found: Vec<_> = report
                .damaged
                .iter()
                .map(|d| (d.memory, d.offset))
                .collect();
            found.sort_unstable();
            let mut want: Vec<_> = live
                .iter()
                .filter(|(_, overrun)| *overrun)
                .map(|(a, _)| (a.memory(), a.offset()))
                .chain(queued.iter().filter(|q| q.2).map(|q| (q.0, q.1)))
                .collect();
            want.sort_unstable();
            assert_eq!(found, want, "{ctx}");
            assert!(report.written_after_free.is_empty(), "{ctx}: {report:?}");
            assert_eq!(allocator.corruptions_detected(), freed_overrun, "{ctx}");
        }
        for (a, overrun) in live {
            free(&allocator, a);
            freed_overrun += u64::from(overrun);
        }
        for fence in fences {
            device.signal_fence(fence);
        }
        device.signal_fence(end_frame(&allocator, &device));
        allocator.collect().unwrap();
        freed_overrun += queued.iter().filter(|q| q.2).count() as u64;
        assert_eq!(freed_overrun, overruns);
        assert_eq!(allocator.corruptions_detected(), overruns, "fills {fills}");
        assert!(overruns > 50, "fills {fills}: {overruns} overruns");
        finish(allocator, &device);
    }
}
