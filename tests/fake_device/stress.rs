//! Many threads allocating and freeing in several memory types at once.

use std::collections::BTreeMap;

use ash::vk::Handle;
use vk_suballoc::device::fake::FakeLayout;
use vk_suballoc::{Allocation, Error, Usage};

use super::seeded_rng::Rng;
use super::{allocator, buffer, finish, free, FakeAllocator};

const USAGES: [Usage; 4] = [
    Usage::DEVICE_LOCAL,
    Usage::UPLOAD,
    Usage::READBACK,
    Usage::UPLOAD.union(Usage::DEVICE_LOCAL),
];

/// One thread's work: returns what it left alive.
fn churn(
    allocator: &FakeAllocator,
    seed: u64,
    thread: u64,
    operations: u64,
) -> Vec<(u64, Allocation)> {
    let mut rng = Rng(seed ^ (thread << 32));
    let mut live: Vec<(u64, Allocation)> = Vec::new();
    for op in 0..operations {
        if live.len() < 64 || (rng.below(2) == 0 && live.len() < 2000) {
            let usage = USAGES[rng.below(4) as usize];
            let size = if rng.below(500) == 0 {
                (1 + rng.below(200)) << 20
            } else {
                64 + rng.below(64 << 10)
            };
            let align = 1 << rng.below(9);
            let mut a = allocator.allocate(&buffer(size, align, usage)).unwrap();
            assert_eq!(a.offset() % align, 0);
            let tag = (thread << 48) | op;
            if let Some(bytes) = host_bytes_mut(allocator, &mut a) {
                write_tag(bytes, tag);
            }
            live.push((tag, a));
        } else {
            let (tag, a) = live.swap_remove(rng.below(live.len() as u64) as usize);
            check_tag(allocator, tag, &a);
            free(allocator, a);
        }
    }
    live
}

/// The first and last 8 bytes still hold the tag written at allocation: no
/// other allocation overlapped them. (Written in host-visible memory
/// only, whose allocations all map: `mapped_slice` refuses exactly the
/// others.)
pub(super) fn check_tag(allocator: &FakeAllocator, tag: u64, a: &Allocation) {
    if let Some(bytes) = host_bytes(allocator, a) {
        let end = bytes.len() - 8;
        assert_eq!(bytes[..8], tag.to_le_bytes(), "{a:?}: head overwritten");
        assert_eq!(bytes[end..], tag.to_le_bytes(), "{a:?}: tail overwritten");
    }
}

/// Writes `tag` over the first and last 8 bytes, for [`check_tag`].
pub(super) fn write_tag(bytes: &mut [u8], tag: u64) {
    let end = bytes.len() - 8;
    bytes[..8].copy_from_slice(&tag.to_le_bytes());
    bytes[end..].copy_from_slice(&tag.to_le_bytes());
}

/// `a`'s bytes where it lies in a host-visible memory type, `None` in any
/// other; panics unless mapping succeeds exactly in host-visible types
/// (every host-visible allocation is mapped).
pub(super) fn host_bytes<'a>(allocator: &'a FakeAllocator, a: &'a Allocation) -> Option<&'a [u8]> {
    match allocator.mapped_slice(a) {
        Ok(bytes) if host_visible(allocator, a) => Some(bytes),
        Err(Error::NotHostVisible) if !host_visible(allocator, a) => None,
        result => panic!("{a:?}: {:?}", result.map(|_| ())),
    }
}

/// [`host_bytes`], writable.
pub(super) fn host_bytes_mut<'a>(
    allocator: &'a FakeAllocator,
    a: &'a mut Allocation,
) -> Option<&'a mut [u8]> {
    let host_visible = host_visible(allocator, a);
    let memory_type = a.memory_type();
    match allocator.mapped_slice_mut(a) {
        Ok(bytes) if host_visible => Some(bytes),
        Err(Error::NotHostVisible) if !host_visible => None,
        result => panic!("type {memory_type}: {:?}", result.map(|_| ())),
    }
}

/// Whether `a` lies in a host-visible memory type.
pub(super) fn host_visible(allocator: &FakeAllocator, a: &Allocation) -> bool {
    let props = allocator.memory_type_properties(a.memory_type()).unwrap();
    props.contains(ash::vk::MemoryPropertyFlags::HOST_VISIBLE)
}

#[test]
fn threads_in_several_memory_types() {
    let seed = Rng::seed("threads_in_several_memory_types");
    const THREADS: u64 = 4;
    const OPERATIONS: u64 = if cfg!(miri) { 100 } else { 30_000 };
    let (allocator, device) = allocator(FakeLayout::discrete());
    let survivors: Vec<(u64, Allocation)> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..THREADS)
            .map(|thread| {
                let allocator = &allocator;
                scope.spawn(move || churn(allocator, seed, thread, OPERATIONS))
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().unwrap())
            .collect()
    });
    // Invariants: figures match what is alive, nothing overlaps.
    let stats = allocator.stats();
    assert_eq!(stats.allocations(), survivors.len() as u64);
    assert_eq!(
        stats.live_bytes(),
        survivors.iter().map(|(_, a)| a.size()).sum::<u64>()
    );
    assert_eq!(
        stats.memory_objects as usize,
        device.live_allocations().len()
    );
    let mut by_memory: BTreeMap<u64, Vec<(u64, u64)>> = BTreeMap::new();
    for (tag, a) in &survivors {
        check_tag(&allocator, *tag, a);
        by_memory
            .entry(a.memory().as_raw())
            .or_default()
            .push((a.offset(), a.offset() + a.size()));
    }
    for ranges in by_memory.values_mut() {
        ranges.sort_unstable();
        assert!(
            ranges.windows(2).all(|w| w[0].1 <= w[1].0),
            "overlap in {ranges:?}"
        );
    }
    for (_, a) in survivors {
        free(&allocator, a);
    }
    let stats = allocator.stats();
    assert_eq!(stats.allocations(), 0);
    // At most one empty block per memory type is kept.
    assert!(stats
        .memory_types
        .iter()
        .all(|t| t.blocks == t.empty_blocks && t.blocks <= 1));
    allocator.trim();
    assert_eq!(allocator.stats().reserved_bytes(), 0);
    finish(allocator, &device);
}
