//! The writer threads of the ring stress: each allocates from the shared
//! rings, writes each allocation with a pattern of its own and checks it
//! while it holds the allocation's frame, and writes some again later; the
//! late writer writes again, with no hold, what the writers gave up, racing
//! the frame thread's collects.

use std::collections::VecDeque;
use std::sync::Mutex;

use vk_suballoc::device::fake::FakeDevice;
use vk_suballoc::{Error, RingAllocation, UploadRing};

use super::super::super::seeded_rng::Rng;
use super::super::super::FakeAllocator;

use super::{
    assert_ring_bytes, handed, ring_pattern, ring_stress_aborted, AbortOnPanic, RingStress,
    Written, HANDED_WHILE_PINNED, RING_STRESS_STEPS, SLOW_FLUSH,
};

/// One writer of [`ring_stress`](super::ring_stress): allocates from the
/// shared rings and writes each allocation with a pattern of its own,
/// checks it through the device, writes some again later (`held`, whose
/// frames it holds) and much later (`loose`, whose frames may be collected
/// by then).
pub(super) fn ring_stress_writer(
    allocator: &FakeAllocator,
    device: &FakeDevice,
    shared: &Mutex<RingStress>,
    me: usize,
    seed: u64,
) {
    let mut rng = Rng(seed);
    let lock = || {
        shared
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    };
    let destroyed = |ring: UploadRing| !lock().rings.contains(&ring);
    let mut held: Vec<Written> = Vec::new();
    let mut loose: VecDeque<RingAllocation> = VecDeque::new();
    let mut next_tag = 0u64;
    let mut tag = move || {
        next_tag += 1;
        Rng(((me as u64) << 48) ^ next_tag).next()
    };
    let _abort = AbortOnPanic;
    for step in 0..RING_STRESS_STEPS {
        if ring_stress_aborted() {
            return;
        }
        let (release, ring) = {
            let mut shared = lock();
            // The frame thread waits for every hold to go before it calls
            // `collect_idle`: give it up, and take none meanwhile.
            let release = held.len() >= 12
                || rng.below(8) == 0
                || (shared.want_idle && shared.holds[me].is_some());
            let ring = if release || shared.want_idle {
                None
            } else {
                // Before this call's allocations: each is made in this
                // frame or a later one.
                if shared.holds[me].is_none() {
                    shared.holds[me] = Some(allocator.current_frame());
                }
                Some(shared.rings[rng.below(shared.rings.len() as u64) as usize])
            };
            (release, ring)
        };
        if release {
            // Every frame in `held` is held still: nothing may have
            // written over their bytes since their owner's last write.
            let mut gone = Vec::new();
            for written in held.drain(..) {
                assert_ring_bytes(device, &written, &format!("writer {me} step {step}"));
                if written.allocation.size() >= 64 * 1024 || rng.below(4) == 0 {
                    loose.push_back(written.allocation);
                    gone.push(written.allocation);
                }
            }
            while loose.len() > 8 {
                loose.pop_front();
            }
            let mut shared = lock();
            shared.holds[me] = None;
            shared.released.extend(gone);
            while shared.released.len() > 32 {
                shared.released.pop_front();
            }
            drop(shared);
            std::thread::yield_now();
            continue;
        }
        let Some(ring) = ring else {
            // With no hold, while `collect_idle` is coming: loose writes
            // only, which race it.
            let mut writes = 0;
            while lock().want_idle && !ring_stress_aborted() {
                if !loose.is_empty() && writes < 3 {
                    writes += 1;
                    let index = rng.below(loose.len() as u64) as usize;
                    loose_write(
                        allocator,
                        &loose[index],
                        tag(),
                        &format!("writer {me} idle"),
                    );
                }
                std::thread::yield_now();
            }
            continue;
        };
        match rng.below(10) {
            // Again, into a held frame: written unless its ring is gone.
            0 | 1 if !held.is_empty() => {
                let index = rng.below(held.len() as u64) as usize;
                let written = &mut held[index];
                let tag = tag();
                let size = written.allocation.size();
                match allocator.ring_write(&written.allocation, 0, &ring_pattern(tag, size)) {
                    Ok(()) => written.tag = tag,
                    Err(Error::StaleAllocation) => assert!(
                        destroyed(written.ring),
                        "writer {me} step {step}: a held frame's allocation is stale"
                    ),
                    Err(error) => panic!("writer {me} step {step}: late write: {error:?}"),
                }
                assert_ring_bytes(device, written, &format!("writer {me} step {step}, late"));
            }
            // Frames later, into a frame that may be collected, or being
            // collected as this copies: written or stale, nothing else.
            // Its bytes are not checked (another allocation may own them
            // right after the call), but a write landing on bytes handed
            // out again shows in their owner's check.
            2 | 3 if !loose.is_empty() => {
                let index = rng.below(loose.len() as u64) as usize;
                loose_write(
                    allocator,
                    &loose[index],
                    tag(),
                    &format!("writer {me} step {step}"),
                );
            }
            _ => {
                let size = if rng.below(4) == 0 {
                    (128 << 10) + rng.below(256 << 10)
                } else {
                    1 + rng.below(4096)
                };
                let align = 1 << rng.below(9);
                let allocation = match allocator.ring_allocate(ring, size, align) {
                    Ok(allocation) => allocation,
                    // Every ring holds 512 KiB at least, more than any
                    // request here: full for now (its free bytes race the
                    // other threads), never too small.
                    Err(Error::UploadRingFull { size: asked, .. }) if asked == size => continue,
                    Err(Error::StaleAllocation) if destroyed(ring) => continue,
                    Err(error) => panic!("writer {me} step {step}: allocate: {error:?}"),
                };
                let range = allocation.memory_offset()..allocation.memory_offset() + size;
                handed().push((allocation.memory(), range, allocation.frame()));
                let written = Written {
                    ring,
                    allocation,
                    tag: tag(),
                };
                match allocator.ring_write(&allocation, 0, &ring_pattern(written.tag, size)) {
                    Ok(()) => {}
                    Err(Error::StaleAllocation) if destroyed(ring) => continue,
                    Err(error) => panic!("writer {me} step {step}: write: {error:?}"),
                }
                assert_ring_bytes(device, &written, &format!("writer {me} step {step}"));
                held.push(written);
            }
        }
    }
    for written in held.drain(..) {
        assert_ring_bytes(device, &written, &format!("writer {me} at the end"));
    }
    lock().holds[me] = None;
}

/// A late write whose frame may be collected before or while it copies:
/// written or refused as stale, nothing else. Once written, no allocation
/// of a later frame may have been handed its bytes while it was pinned
/// (noted at the end of its flush): its frame was live when the write
/// pinned it (else it would be stale), and its space comes back only once
/// the write is over.
fn loose_write(allocator: &FakeAllocator, allocation: &RingAllocation, tag: u64, when: &str) {
    let bytes = ring_pattern(tag, allocation.size());
    SLOW_FLUSH.set(true);
    HANDED_WHILE_PINNED.set(None);
    let written = allocator.ring_write(allocation, 0, &bytes);
    SLOW_FLUSH.set(false);
    match written {
        Ok(()) => {}
        Err(Error::StaleAllocation) => return,
        Err(error) => panic!("{when}: late write: {error:?}"),
    }
    // Coherent memory, or another thread's flush ran the hook: unknown.
    let Some(made) = HANDED_WHILE_PINNED.take() else {
        return;
    };
    let range = allocation.memory_offset()..allocation.memory_offset() + allocation.size();
    let handed = handed();
    let over = handed[..made].iter().find(|(memory, other, frame)| {
        *memory == allocation.memory()
            && *frame > allocation.frame()
            && other.start < range.end
            && range.start < other.end
    });
    assert!(
        over.is_none(),
        "{when}: {over:?} was handed bytes of {allocation:?} while a write into them went on"
    );
}

/// The late writer of [`ring_stress`](super::ring_stress), until the
/// `writers` writers have `finished`: writes again, with no hold,
/// allocations the writers gave up, the oldest of those whose frame's fence
/// is not signalled yet first (the frame collected when the oldest hold
/// goes), so that collects fall within its writes.
pub(super) fn ring_stress_late_writer(
    allocator: &FakeAllocator,
    shared: &Mutex<RingStress>,
    finished: &std::sync::atomic::AtomicUsize,
    writers: usize,
    seed: u64,
) {
    let mut rng = Rng(seed);
    let _abort = AbortOnPanic;
    while finished.load(std::sync::atomic::Ordering::SeqCst) < writers && !ring_stress_aborted() {
        let target = {
            let shared = shared
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            let next = shared.unsignalled.front().map_or(0, |&(frame, _)| frame);
            let soonest = shared
                .released
                .iter()
                .filter(|a| a.frame() >= next)
                .min_by_key(|a| a.frame());
            match soonest {
                Some(allocation) if rng.below(4) != 0 => Some(*allocation),
                _ if shared.released.is_empty() => None,
                _ => {
                    let index = rng.below(shared.released.len() as u64) as usize;
                    Some(shared.released[index])
                }
            }
        };
        if let Some(allocation) = target {
            loose_write(allocator, &allocation, rng.next(), "late writer");
        }
        std::thread::yield_now();
    }
}
