//! A seeded random walk through the allocator, checked against a model of
//! what must hold: buffers, linear and optimal images of random sizes,
//! alignments and usages, with injected `vkAllocateMemory` failures, on
//! layouts whose `bufferImageGranularity` is padded (NVIDIA's 1024, mobile's
//! 4096 with non-coherent memory) or separated (65536).
//!
//! After every allocation: alignment (and the atom on non-coherent memory).
//! Every few hundred steps, over everything live: no two allocations of one
//! `VkDeviceMemory` overlap, no linear and optimal allocation share a
//! granularity page, `stats()` count what the model holds, the memory map
//! shows each allocation at its offset with its kind, and `owns` is true.
//! A failed allocation is `OutOfDeviceMemory` after the driver refused
//! one of its calls (an injected failure), and changes no figure.

use std::collections::HashMap;

use ash::vk::Handle;
use gpu_alloc_types::MemoryPropertyFlags;
use vk_suballoc::device::fake::FakeLayout;
use vk_suballoc::device::DeviceError;
use vk_suballoc::report::RangeKind;
use vk_suballoc::{Allocation, Error, Request, ResourceKind, Usage};

use super::seeded_rng::Rng;
use super::{allocator, assert_ranges_tile, finish, free, requirements, FakeAllocator};

const KINDS: [ResourceKind; 3] = [
    ResourceKind::Buffer,
    ResourceKind::LinearImage,
    ResourceKind::OptimalImage,
];

const USAGES: [Usage; 4] = [
    Usage::DEVICE_LOCAL,
    Usage::UPLOAD,
    Usage::READBACK,
    Usage::UPLOAD.union(Usage::DEVICE_LOCAL),
];

/// One live allocation and what was asked for it.
struct Live {
    allocation: Allocation,
    kind: ResourceKind,
}

/// A request of a random kind, size (mostly small, sometimes tens of MiB)
/// and power-of-two alignment (optimal images aligned as drivers align them).
fn random_request(rng: &mut Rng) -> (Request<'static>, ResourceKind, u64) {
    let kind = KINDS[rng.below(3) as usize];
    let size = match rng.below(100) {
        0 => (1 + rng.below(48)) << 20,
        1..=9 => 1 + rng.below(4 << 20),
        // Small: buffers take slots of runs.
        10..=49 => 1 + rng.below(4 << 10),
        _ => 1 + rng.below(64 << 10),
    };
    let align = match kind {
        ResourceKind::OptimalImage => 1 << (8 + rng.below(9)),
        _ => 1 << rng.below(9),
    };
    let usage = USAGES[rng.below(4) as usize];
    let request = Request::new(requirements(size, align), usage, kind);
    (request, kind, align)
}

/// No two of `live` in one `VkDeviceMemory` overlap, and no linear and
/// optimal pair there shares a page of `granularity` (any pair, not only
/// neighbours: a page can hold several small allocations).
pub(super) fn check_disjoint<'a>(
    live: impl IntoIterator<Item = (&'a Allocation, ResourceKind)>,
    granularity: u64,
    context: &str,
) {
    let mut by_memory: HashMap<u64, Vec<(&Allocation, ResourceKind)>> = HashMap::new();
    for (allocation, kind) in live {
        by_memory
            .entry(allocation.memory().as_raw())
            .or_default()
            .push((allocation, kind));
    }
    let page = |offset: u64| offset / granularity;
    for group in by_memory.values_mut() {
        group.sort_by_key(|(a, _)| a.offset());
        for pair in group.windows(2) {
            let (a, b) = (pair[0].0, pair[1].0);
            assert!(
                a.offset() + a.size() <= b.offset(),
                "{context}: {}+{} overlaps {}",
                a.offset(),
                a.size(),
                b.offset()
            );
        }
        for (i, &(first, x)) in group.iter().enumerate() {
            for &(second, y) in &group[i + 1..] {
                if x.is_linear() == y.is_linear() {
                    continue;
                }
                assert!(
                    page(first.offset() + first.size() - 1) < page(second.offset()),
                    "{context}: {x:?} at {}+{} and {y:?} at {} share a page of {granularity}",
                    first.offset(),
                    first.size(),
                    second.offset()
                );
            }
        }
    }
}

/// Checks everything live against each other, `stats()` and the memory map.
fn check_all(allocator: &FakeAllocator, live: &[Live], granularity: u64, context: &str) {
    let stats = allocator.stats();
    assert_eq!(stats.allocations(), live.len() as u64, "{context}");
    let bytes: u64 = live.iter().map(|l| l.allocation.size()).sum();
    assert_eq!(stats.live_bytes(), bytes, "{context}");

    for l in live {
        assert!(allocator.owns(&l.allocation), "{context}");
    }
    check_disjoint(
        live.iter().map(|l| (&l.allocation, l.kind)),
        granularity,
        context,
    );

    // The memory map's ranges tile each block and show every allocation in
    // a block at its offset, with its kind and at least its size held;
    // dedicated memory counts match.
    let map = allocator.memory_map();
    let mut in_blocks: HashMap<(u64, u64), (RangeKind, u64)> = HashMap::new();
    let mut dedicated = 0;
    for memory_type in &map.memory_types {
        for block in &memory_type.blocks {
            assert_ranges_tile(block, context);
            for range in block.allocations() {
                in_blocks.insert(
                    (block.memory.as_raw(), range.offset),
                    (range.kind, range.size),
                );
            }
        }
        dedicated += memory_type.dedicated.len();
    }
    let mut model_dedicated = 0;
    for l in live {
        let a = &l.allocation;
        if a.is_dedicated() {
            model_dedicated += 1;
            continue;
        }
        let range = in_blocks.get(&(a.memory().as_raw(), a.offset()));
        let want = RangeKind::from(l.kind);
        assert_eq!(
            range.map(|r| r.0),
            Some(want),
            "{context}: at {}",
            a.offset()
        );
        assert!(
            range.is_some_and(|r| r.1 >= a.size()),
            "{context}: {range:?} holds less than {}",
            a.size()
        );
    }
    assert_eq!(in_blocks.len() + dedicated, live.len(), "{context}");
    assert_eq!(dedicated, model_dedicated, "{context}");
}

fn random_walk(layout: FakeLayout, steps: u64, test: &str) {
    let granularity = layout.buffer_image_granularity;
    let atom = layout.non_coherent_atom_size;
    let (mut allocator, device) = allocator(layout);
    let mut rng = Rng::from_env(test);
    let mut live: Vec<Live> = Vec::new();
    for step in 0..steps {
        let context = format!("{test} step {step}");
        if step % 97 == 0 {
            // One of the next few vkAllocateMemory calls fails.
            device.fail_allocation(1 + rng.below(3), DeviceError::OutOfDeviceMemory);
        }
        if live.len() < 8 || (rng.below(100) < 55 && live.len() < 600) {
            let (request, kind, align) = random_request(&mut rng);
            let before = allocator.stats();
            let counters = device.counters();
            // Both entry points, the locked one and the `&mut self` one.
            let result = if step % 2 == 0 {
                allocator.allocate(&request)
            } else {
                allocator.allocate_mut(&request)
            };
            match result {
                Ok(allocation) => {
                    assert_eq!(allocation.offset() % align, 0, "{context}");
                    let props =
                        device.layout().memory_types[allocation.memory_type() as usize].props;
                    let non_coherent = props.contains(MemoryPropertyFlags::HOST_VISIBLE)
                        && !props.contains(MemoryPropertyFlags::HOST_COHERENT);
                    if non_coherent && !allocation.is_dedicated() {
                        assert_eq!(allocation.offset() % atom, 0, "{context}");
                    }
                    live.push(Live { allocation, kind });
                }
                Err(error) => {
                    // Only the injected `vkAllocateMemory` failures make a
                    // request fail (the heaps are far larger than the
                    // walk's memory), and only once the driver refused one
                    // of its calls: a heap's remembered refusal never
                    // skips a request's last attempt.
                    let now = device.counters();
                    assert_eq!(error, Error::OutOfDeviceMemory, "{context}");
                    assert!(
                        now.refused_allocations() > counters.refused_allocations(),
                        "{context}: {error:?} for {request:?}, yet the driver refused no call ({counters:?}, then {now:?})"
                    );
                    let after = allocator.stats();
                    assert_eq!(after.allocations(), before.allocations(), "{context}");
                    assert_eq!(after.live_bytes(), before.live_bytes(), "{context}");
                }
            }
        } else {
            let l = live.swap_remove(rng.below(live.len() as u64) as usize);
            if step % 2 == 0 {
                free(&allocator, l.allocation);
            } else {
                // SAFETY: the fake device runs no GPU work.
                unsafe { allocator.free_mut(l.allocation) }.unwrap();
            }
        }
        if step % 250 == 0 || step + 1 == steps {
            check_all(&allocator, &live, granularity, &context);
        }
    }
    let counters = device.counters();
    assert!(
        counters.allocate_calls > counters.allocations,
        "{test}: no injected vkAllocateMemory failure fired ({counters:?})"
    );
    for l in live {
        free(&allocator, l.allocation);
    }
    finish(allocator, &device);
}

#[test]
fn random_walk_nvidia_like_granularity() {
    random_walk(
        FakeLayout::discrete().with_granularity(1024),
        4000,
        "random_walk_nvidia_like_granularity",
    );
}

#[test]
fn random_walk_mobile_non_coherent() {
    random_walk(
        FakeLayout::mobile(),
        4000,
        "random_walk_mobile_non_coherent",
    );
}

#[test]
fn random_walk_separate_granularity_classes() {
    random_walk(
        FakeLayout::discrete().with_granularity(65536),
        4000,
        "random_walk_separate_granularity_classes",
    );
}
