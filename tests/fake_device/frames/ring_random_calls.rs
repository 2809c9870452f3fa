//! Seeded random sequences of upload-ring calls: a walk over several rings
//! that checks after every step that live ring allocations neither overlap
//! nor lose their bytes, and one that checks `ring_allocate_mut` against
//! `ring_allocate` step by step, on two allocators of one layout.

use std::collections::VecDeque;

use ash::vk;
use vk_suballoc::device::fake::FakeLayout;
use vk_suballoc::{Error, RingAllocation, UploadRing, UploadRingDesc};

use super::super::allocator;
use super::super::seeded_rng::Rng;

use super::{end_frame, finish_after_frame};

/// A live upload-ring allocation of the random walk and the byte it holds.
struct LiveRingBytes {
    allocation: RingAllocation,
    pattern: u8,
}

/// A seeded random walk over upload rings: up to four rings (growing or
/// not, some created while frames are in flight), random allocations and
/// alignments, frames sealed and their fences signalled in order. After
/// every step, no two live ring allocations overlap and each still holds
/// the bytes written to it; an allocation whose frame was collected can no
/// longer be written.
fn upload_rings_random_walk(test: &str, layout: FakeLayout) {
    let mut rng = Rng::from_env(test);
    let (allocator, device) = allocator(layout);
    let mut rings: Vec<UploadRing> = Vec::new();
    let mut live: Vec<LiveRingBytes> = Vec::new();
    let mut in_flight: VecDeque<(vk::Fence, u64)> = VecDeque::new();
    let mut pattern = 1u8;
    for step in 0..3000 {
        match rng.below(10) {
            0 if rings.len() < 4 => {
                let desc = UploadRingDesc {
                    size: 1024 + rng.below(8192),
                    grow: rng.below(2) == 0,
                    ..UploadRingDesc::default()
                };
                rings.push(allocator.create_upload_ring(&desc).unwrap());
            }
            1 => {
                let fence = end_frame(&allocator, &device);
                in_flight.push_back((fence, allocator.current_frame() - 1));
            }
            2 | 3 => {
                let Some((fence, frame)) = in_flight.pop_front() else {
                    continue;
                };
                device.signal_fence(fence);
                allocator.collect().unwrap();
                let (keep, collected): (Vec<_>, Vec<_>) =
                    live.drain(..).partition(|l| l.allocation.frame() > frame);
                live = keep;
                for l in collected {
                    assert_eq!(
                        allocator.ring_write(&l.allocation, 0, &[0]),
                        Err(Error::StaleAllocation),
                        "step {step}: a collected ring allocation is still writable"
                    );
                }
            }
            _ => {
                if rings.is_empty() {
                    continue;
                }
                let ring = rings[rng.below(rings.len() as u64) as usize];
                let size = 1 + rng.below(3000);
                let align = 1 << rng.below(9);
                match allocator.ring_allocate(ring, size, align) {
                    Ok(allocation) => {
                        assert_eq!(allocation.buffer_offset() % align, 0);
                        let range =
                            |a: &RingAllocation| a.memory_offset()..a.memory_offset() + a.size();
                        let new = range(&allocation);
                        for l in &live {
                            let old = range(&l.allocation);
                            assert!(
                                l.allocation.memory() != allocation.memory()
                                    || old.end <= new.start
                                    || new.end <= old.start,
                                "step {step}: {allocation:?} overlaps live {:?}",
                                l.allocation
                            );
                        }
                        pattern = pattern.wrapping_add(1).max(1);
                        allocator
                            .ring_write(&allocation, 0, &vec![pattern; size as usize])
                            .unwrap();
                        live.push(LiveRingBytes {
                            allocation,
                            pattern,
                        });
                    }
                    // Refused for this request's bytes (the errors' `size`
                    // is the size requested), not another's.
                    Err(
                        Error::UploadRingFull { size: asked, .. }
                        | Error::UploadRingTooSmall { size: asked, .. },
                    ) if asked == size => {}
                    Err(error) => panic!("step {step}: {size} bytes: {error:?}"),
                }
            }
        }
        for l in &live {
            let a = &l.allocation;
            // SAFETY: ring allocations hand out no slices.
            let bytes =
                unsafe { device.read(a.memory(), a.memory_offset(), a.size() as usize) }.unwrap();
            assert!(
                bytes.iter().all(|&b| b == l.pattern),
                "step {step}: the bytes of live {a:?} were overwritten"
            );
        }
    }
    for (fence, _) in in_flight {
        device.signal_fence(fence);
    }
    allocator.wait_and_collect(0).unwrap();
    for ring in rings {
        allocator.destroy_upload_ring(ring).unwrap();
    }
    finish_after_frame(allocator, &device);
}

#[test]
fn upload_rings_random_walk_discrete() {
    upload_rings_random_walk("upload_rings_random_walk_discrete", FakeLayout::discrete());
}

#[test]
fn upload_rings_random_walk_mobile() {
    upload_rings_random_walk("upload_rings_random_walk_mobile", FakeLayout::mobile());
}

/// `ring_allocate_mut` hands out what `ring_allocate` does: one seeded
/// sequence of ring calls (growing and fixed rings, frames ended and
/// collected, rings destroyed, bad sizes and alignments, another
/// allocator's ring) on two allocators of one layout, one through `&self`
/// and one through `&mut self`, gives the same placements and the same
/// errors at every step.
fn ring_allocate_mut_matches_ring_allocate(test: &str, layout: FakeLayout) {
    let mut rng = Rng::from_env(test);
    let (shared, shared_device) = allocator(layout.clone());
    let (mut owned, owned_device) = allocator(layout);
    let (other, other_device) = allocator(FakeLayout::discrete());
    let foreign = other
        .create_upload_ring(&UploadRingDesc::default())
        .unwrap();
    let mut rings: Vec<(UploadRing, UploadRing)> = Vec::new();
    let mut in_flight: VecDeque<(vk::Fence, vk::Fence)> = VecDeque::new();
    let placed = |a: &RingAllocation| (a.buffer_offset(), a.memory_offset(), a.size(), a.frame());
    // Allocations made, rings full or too small, bad sizes or alignments.
    let mut seen = [0; 3];
    for step in 0..2000 {
        match rng.below(12) {
            0 if rings.len() < 4 => {
                let desc = UploadRingDesc {
                    size: 1024 + rng.below(8192),
                    grow: rng.below(2) == 0,
                    ..UploadRingDesc::default()
                };
                rings.push((
                    shared.create_upload_ring(&desc).unwrap(),
                    owned.create_upload_ring(&desc).unwrap(),
                ));
            }
            1 if !rings.is_empty() && rng.below(4) == 0 => {
                // Destroyed, and asked once more: stale on both.
                let (a, b) = rings.swap_remove(rng.below(rings.len() as u64) as usize);
                shared.destroy_upload_ring(a).unwrap();
                owned.destroy_upload_ring(b).unwrap();
                assert_eq!(
                    shared.ring_allocate(a, 16, 16).map(|a| placed(&a)),
                    owned.ring_allocate_mut(b, 16, 16).map(|a| placed(&a)),
                    "step {step}: a destroyed ring"
                );
            }
            2 => in_flight.push_back((
                end_frame(&shared, &shared_device),
                end_frame(&owned, &owned_device),
            )),
            3 => {
                let Some((a, b)) = in_flight.pop_front() else {
                    continue;
                };
                shared_device.signal_fence(a);
                owned_device.signal_fence(b);
                assert_eq!(
                    shared.collect().unwrap().frames,
                    owned.collect().unwrap().frames,
                    "step {step}"
                );
            }
            4 => assert_eq!(
                owned.ring_allocate_mut(foreign, 16, 16).map(|a| placed(&a)),
                Err(Error::ForeignAllocation),
                "step {step}"
            ),
            _ => {
                if rings.is_empty() {
                    continue;
                }
                let (a, b) = rings[rng.below(rings.len() as u64) as usize];
                let size = match rng.below(20) {
                    0 => 0,
                    1 => 20_000,
                    _ => 1 + rng.below(3000),
                };
                let align = match rng.below(20) {
                    0 => 3 << rng.below(4),
                    _ => 1 << rng.below(9),
                };
                let expected = shared.ring_allocate(a, size, align).map(|a| placed(&a));
                let got = owned.ring_allocate_mut(b, size, align).map(|a| placed(&a));
                assert_eq!(got, expected, "step {step}: {size} bytes at {align}");
                seen[match got {
                    Ok(_) => 0,
                    Err(Error::UploadRingFull { .. } | Error::UploadRingTooSmall { .. }) => 1,
                    Err(Error::ZeroSize | Error::AlignmentNotPowerOfTwo(_)) => 2,
                    Err(error) => panic!("step {step}: {error:?}"),
                }] += 1;
            }
        }
    }
    assert!(seen.iter().all(|&n| n > 0), "every outcome met: {seen:?}");
    for (a, b) in in_flight {
        shared_device.signal_fence(a);
        owned_device.signal_fence(b);
    }
    shared.wait_and_collect(0).unwrap();
    owned.wait_and_collect(0).unwrap();
    for (a, b) in rings {
        shared.destroy_upload_ring(a).unwrap();
        owned.destroy_upload_ring(b).unwrap();
    }
    other.destroy_upload_ring(foreign).unwrap();
    finish_after_frame(other, &other_device);
    finish_after_frame(shared, &shared_device);
    finish_after_frame(owned, &owned_device);
}

#[test]
fn ring_allocate_mut_matches_ring_allocate_discrete() {
    ring_allocate_mut_matches_ring_allocate(
        "ring_allocate_mut_matches_ring_allocate_discrete",
        FakeLayout::discrete(),
    );
}

#[test]
fn ring_allocate_mut_matches_ring_allocate_mobile() {
    ring_allocate_mut_matches_ring_allocate(
        "ring_allocate_mut_matches_ring_allocate_mobile",
        FakeLayout::mobile(),
    );
}
