//! `Config::heap_size_limits` (VMA's `pHeapSizeLimit`): a limited heap
//! looks `min(size, limit)` bytes large everywhere, and memory past the
//! limit is refused without a `vkAllocateMemory`, so that requests take
//! the fallbacks of a full heap, on every path that makes memory.

use vk_suballoc::device::fake::FakeLayout;
use vk_suballoc::{Config, DedicatedPolicy, Error, Request, Usage};

use super::{allocator_with, buffer, finish, free, requirements};

const MIB: u64 = 1 << 20;
const GIB: u64 = 1 << 30;

/// The default configuration with `limit` bytes on `heap`.
fn limited(heap: usize, limit: u64) -> Config {
    let mut heap_size_limits = [0; 16];
    heap_size_limits[heap] = limit;
    Config {
        heap_size_limits,
        ..Config::default()
    }
}

/// A request for `size` bytes of dedicated memory of memory type `ty`
/// alone.
fn dedicated_in(ty: u32, size: u64) -> Request<'static> {
    let mut request = buffer(size, 256, Usage::DEVICE_LOCAL).dedicated(DedicatedPolicy::Always);
    request.requirements.memory_type_bits = 1 << ty;
    request
}

#[test]
fn a_limited_heap_refuses_past_its_limit_without_asking_the_driver() {
    // A 4 GiB heap limited to 64 MiB; no budget extension, so the budget
    // (80 % of the limit) is passed by the requests that do not ask to
    // keep to it, and the limit alone stops them.
    let (allocator, device) = allocator_with(FakeLayout::integrated(), limited(0, 64 * MIB));
    let mut live = Vec::new();
    for _ in 0..4 {
        live.push(allocator.allocate(&dedicated_in(0, 16 * MIB)).unwrap());
    }
    assert_eq!(device.heap_usage()[0], 64 * MIB);
    let calls = device.counters().allocate_calls;
    let error = allocator.allocate(&dedicated_in(0, 16 * MIB)).unwrap_err();
    assert!(matches!(error, Error::OutOfDeviceMemory), "{error:?}");
    assert_eq!(
        device.counters().allocate_calls,
        calls,
        "the driver was asked for memory past the limit"
    );
    assert_eq!(device.heap_usage()[0], 64 * MIB);
    // Room again once memory is freed.
    free(&allocator, live.pop().unwrap());
    live.push(allocator.allocate(&dedicated_in(0, 16 * MIB)).unwrap());
    assert_eq!(device.heap_usage()[0], 64 * MIB);
    for allocation in live {
        free(&allocator, allocation);
    }
    finish(allocator, &device);
}

#[test]
fn a_limit_at_or_above_the_heap_caps_the_allocator_at_the_heap_size() {
    // As VMA: any limit makes the allocator count its memory against the
    // heap's size and refuse past it itself.
    let layout = FakeLayout::integrated().with_heap_sizes(64 * MIB);
    let (allocator, device) = allocator_with(layout, limited(0, u64::MAX));
    assert_eq!(allocator.stats().heaps[0].size, 64 * MIB);
    let mut live = Vec::new();
    for _ in 0..4 {
        live.push(allocator.allocate(&dedicated_in(0, 16 * MIB)).unwrap());
    }
    let calls = device.counters().allocate_calls;
    let error = allocator.allocate(&dedicated_in(0, 16 * MIB)).unwrap_err();
    assert!(matches!(error, Error::OutOfDeviceMemory), "{error:?}");
    assert_eq!(device.counters().allocate_calls, calls);
    for allocation in live {
        free(&allocator, allocation);
    }
    finish(allocator, &device);
}

#[test]
fn requests_past_a_limited_heap_go_to_the_next_heap() {
    // Budgets of 0 everywhere: every request passes its budget, so only
    // the limit keeps VRAM (heap 0) to 32 MiB.
    let layout = FakeLayout::discrete().with_memory_budget(false);
    let config = Config {
        budget_fraction: 0.0,
        ..limited(0, 32 * MIB)
    };
    let (allocator, device) = allocator_with(layout, config);
    let mut live = Vec::new();
    let in_vram = |a: &vk_suballoc::Allocation| a.memory_type() == 1;
    for _ in 0..8 {
        let allocation = allocator
            .allocate(&buffer(4 * MIB, 256, Usage::DEVICE_LOCAL))
            .unwrap();
        assert!(in_vram(&allocation), "{}", allocation.memory_type());
        live.push(allocation);
    }
    assert!(device.heap_usage()[0] <= 32 * MIB);
    // VRAM holds 32 MiB of the allocator's: the next one goes elsewhere.
    let next = allocator
        .allocate(&buffer(4 * MIB, 256, Usage::DEVICE_LOCAL))
        .unwrap();
    assert!(!in_vram(&next), "past the limit in VRAM");
    live.push(next);
    assert!(
        device.heap_usage()[0] <= 32 * MIB,
        "{:?}",
        device.heap_usage()
    );
    let counters = device.counters();
    assert_eq!(
        counters.allocate_calls, counters.allocations,
        "the driver refused memory: the limit did not stop the allocator"
    );
    for allocation in live {
        free(&allocator, allocation);
    }
    finish(allocator, &device);
}

#[test]
fn blocks_are_sized_from_the_limited_heap() {
    // 8 GiB of VRAM: 256 MiB blocks, the first 32 MiB. Limited to
    // 512 MiB, a small heap: blocks of 1/8 of it, 64 MiB, the first 8 MiB.
    let first_block = |config: Config| {
        let (allocator, device) = allocator_with(FakeLayout::discrete(), config);
        let allocation = allocator
            .allocate(&buffer(MIB, 256, Usage::DEVICE_LOCAL))
            .unwrap();
        assert_eq!(allocation.memory_type(), 1);
        let sizes: Vec<u64> = device.live_allocations().iter().map(|m| m.size).collect();
        let json = allocator.stats_json(true);
        free(&allocator, allocation);
        finish(allocator, &device);
        (sizes, json)
    };
    let (sizes, _) = first_block(Config::default());
    assert_eq!(sizes, [32 * MIB]);
    let (sizes, json) = first_block(limited(0, 512 * MIB));
    assert_eq!(sizes, [8 * MIB]);
    assert!(
        json.contains(&format!("\"PreferredBlockSize\": {}", 64 * MIB)),
        "{json}"
    );
}

#[test]
fn a_block_past_the_limit_is_retried_smaller() {
    // 512 MiB of heap 0, 508 of them in dedicated memory: past the budget
    // (80 %), a request that may not take dedicated memory (which a
    // request past its budget would take) needs a new block; the first
    // (8 MiB) is refused by the limit, and a 4 MiB one fits.
    let (allocator, device) = allocator_with(FakeLayout::integrated(), limited(0, 512 * MIB));
    let big = allocator.allocate(&dedicated_in(0, 508 * MIB)).unwrap();
    let small = allocator
        .allocate(&buffer(MIB, 256, Usage::DEVICE_LOCAL).dedicated(DedicatedPolicy::Never))
        .unwrap();
    assert!(!small.is_dedicated());
    let mut sizes: Vec<u64> = device.live_allocations().iter().map(|m| m.size).collect();
    sizes.sort_unstable();
    assert_eq!(sizes, [4 * MIB, 508 * MIB]);
    let counters = device.counters();
    assert_eq!(counters.allocate_calls, counters.allocations);
    free(&allocator, small);
    free(&allocator, big);
    finish(allocator, &device);
}

#[test]
fn size_exceeds_heaps_names_the_limited_size() {
    let (allocator, device) = allocator_with(FakeLayout::discrete(), limited(0, 32 * MIB));
    let mut request = buffer(40 * MIB, 256, Usage::DEVICE_LOCAL);
    request.requirements.memory_type_bits = 1 << 1;
    let error = allocator.allocate(&request).unwrap_err();
    assert!(
        matches!(
            error,
            Error::SizeExceedsHeaps {
                size,
                largest_heap,
            } if size == 40 * MIB && largest_heap == 32 * MIB
        ),
        "{error:?}"
    );
    // Without the type pinned, the request goes to a heap it fits.
    let allocation = allocator
        .allocate(&buffer(40 * MIB, 256, Usage::DEVICE_LOCAL))
        .unwrap();
    assert_ne!(allocation.memory_type(), 1);
    free(&allocator, allocation);
    assert_eq!(device.counters().allocate_calls, 1);
    finish(allocator, &device);
}

#[test]
fn budgets_and_reports_show_the_limited_size() {
    // Without the budget extension: 80 % of the limit.
    let (allocator, device) = allocator_with(FakeLayout::integrated(), limited(0, 64 * MIB));
    let budget = allocator.budgets()[0];
    assert_eq!(budget.budget, (64.0 * MIB as f64 * 0.8) as u64);
    assert_eq!(allocator.stats().heaps[0].size, 64 * MIB);
    assert_eq!(allocator.stats().heaps[0].budget.budget, budget.budget);
    assert_eq!(allocator.memory_map().heaps[0].size, 64 * MIB);
    let json = allocator.stats_json(false);
    assert!(json.contains(&format!("\"Size\": {}", 64 * MIB)), "{json}");
    // A within-budget request keeps to that budget, below the limit.
    let mut request = dedicated_in(0, 60 * MIB).within_budget();
    request.requirements.memory_type_bits = 1;
    assert_eq!(
        allocator.allocate(&request).err(),
        Some(Error::OverBudget {
            heap: 0,
            size: 60 * MIB,
            usage: 0,
            budget: (64.0 * MIB as f64 * 0.8) as u64,
        })
    );
    finish(allocator, &device);

    // With it: the driver's budget (80 % of 8 GiB), clamped to the limit;
    // the other heaps as the driver reports them.
    let (allocator, device) = allocator_with(FakeLayout::discrete(), limited(0, 32 * MIB));
    let budgets = allocator.budgets();
    assert_eq!(budgets[0].budget, 32 * MIB);
    assert_eq!(budgets[1].budget, 16 * GIB / 10 * 8);
    let stats = allocator.stats();
    assert_eq!(
        stats.heaps.iter().map(|h| h.size).collect::<Vec<_>>(),
        [32 * MIB, 16 * GIB, 256 * MIB]
    );
    finish(allocator, &device);
}

#[test]
fn no_limit_and_limits_of_missing_heaps_change_nothing() {
    // Limits of 0, and one for a heap the device lacks (it has one).
    let mut config = Config::default();
    config.heap_size_limits[5] = MIB;
    for config in [Config::default(), config] {
        let (allocator, device) = allocator_with(FakeLayout::integrated(), config);
        assert_eq!(allocator.stats().heaps[0].size, 4 * GIB);
        assert_eq!(
            allocator.budgets()[0].budget,
            (4.0 * GIB as f64 * 0.8) as u64
        );
        let allocation = allocator
            .allocate(&buffer(MIB, 256, Usage::DEVICE_LOCAL))
            .unwrap();
        // 4 GiB: 256 MiB blocks, the first 32 MiB.
        assert_eq!(device.live_allocations()[0].size, 32 * MIB);
        free(&allocator, allocation);
        finish(allocator, &device);
    }
}

#[test]
fn custom_pools_keep_to_the_limit() {
    use vk_suballoc::{AllocationDesc, PoolDesc, ResourceKind};

    let (allocator, device) = allocator_with(FakeLayout::discrete(), limited(0, 32 * MIB));
    // A block larger than the limited heap is refused up front.
    let too_large = PoolDesc {
        block_size: 64 * MIB,
        ..PoolDesc::new(1)
    };
    assert_eq!(
        allocator.create_pool(&too_large).err(),
        Some(Error::InvalidConfig(
            "PoolDesc::block_size exceeds the heap or maxMemoryAllocationSize"
        ))
    );
    // Blocks of 12 MiB: two fit under 32 MiB, a third would not.
    let pool = allocator
        .create_pool(&PoolDesc {
            block_size: 12 * MIB,
            ..PoolDesc::new(1)
        })
        .unwrap();
    let in_pool = || {
        let desc = AllocationDesc::new(Usage::DEVICE_LOCAL).pool(pool);
        Request::with_desc(requirements(8 * MIB, 256), ResourceKind::Buffer, desc)
            .dedicated(DedicatedPolicy::Never)
    };
    let mut live = vec![
        allocator.allocate(&in_pool()).unwrap(),
        allocator.allocate(&in_pool()).unwrap(),
    ];
    assert_eq!(device.heap_usage()[0], 24 * MIB);
    let calls = device.counters().allocate_calls;
    let error = allocator.allocate(&in_pool()).unwrap_err();
    assert!(matches!(error, Error::OutOfDeviceMemory), "{error:?}");
    assert_eq!(device.counters().allocate_calls, calls);
    // Freeing makes room again.
    free(&allocator, live.pop().unwrap());
    live.push(allocator.allocate(&in_pool()).unwrap());
    for allocation in live {
        free(&allocator, allocation);
    }
    allocator.destroy_pool(pool).unwrap();
    finish(allocator, &device);
}

#[test]
fn threads_in_the_types_of_a_limited_heap_never_pass_it_together() {
    // The integrated layout's three types share heap 0: a thread per type
    // (and one more), each allocating and freeing dedicated memory, past
    // the budget; the device never holds more than the limit.
    let (allocator, device) = allocator_with(FakeLayout::integrated(), limited(0, 64 * MIB));
    let refusals = std::sync::atomic::AtomicU64::new(0);
    std::thread::scope(|scope| {
        for thread in 0..4u32 {
            let (allocator, device, refusals) = (&allocator, &device, &refusals);
            scope.spawn(move || {
                let mut live = Vec::new();
                for round in 0..200 {
                    match allocator.allocate(&dedicated_in(thread % 3, 6 * MIB)) {
                        Ok(allocation) => live.push(allocation),
                        Err(Error::OutOfDeviceMemory) => {
                            refusals.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        }
                        Err(error) => panic!("{error:?}"),
                    }
                    let usage = device.heap_usage()[0];
                    assert!(usage <= 64 * MIB, "round {round}: {usage} bytes in heap 0");
                    // Up to 12 live (72 MiB): one thread alone reaches the
                    // limit, however the threads are scheduled.
                    if !live.is_empty() && (round % 3 == 2 || live.len() > 11) {
                        free(allocator, live.remove(0));
                    }
                }
                for allocation in live {
                    free(allocator, allocation);
                }
            });
        }
    });
    assert!(refusals.into_inner() > 0, "the limit was never reached");
    let counters = device.counters();
    assert_eq!(counters.allocate_calls, counters.allocations);
    finish(allocator, &device);
}

/// The limit caps this allocator's own memory, not other processes': with
/// `VK_EXT_memory_budget`, a limited heap's budget leaves the allocator
/// room for its limit beside what the others use (within the driver's
/// budget), so their memory does not push its requests out of the heap.
#[test]
fn others_memory_does_not_count_against_the_limit() {
    let (allocator, device) = allocator_with(FakeLayout::discrete(), limited(0, 2 * GIB));
    // 3 GiB of VRAM used by others, 7 GiB of budget.
    device.set_heap_budget(0, 7 * GIB, 3 * GIB);
    let budget = allocator.budgets()[0];
    assert_eq!((budget.budget, budget.usage), (5 * GIB, 3 * GIB));
    let allocation = allocator
        .allocate(&buffer(4 * MIB, 256, Usage::DEVICE_LOCAL))
        .unwrap();
    assert_eq!(allocation.memory_type(), 1, "not in VRAM");
    free(&allocator, allocation);
    // The driver's budget still bounds it: 1 GiB left to take, under the
    // limit's 2.
    device.set_heap_budget(0, 4 * GIB, 3 * GIB);
    assert_eq!(allocator.budgets()[0].budget, 4 * GIB);
    finish(allocator, &device);
}

/// So too where the driver reports a budget of 0, which is read as
/// `budget_fraction` of the heap (as VMA reads it): in a limited heap, of
/// the limit, beside what the others use, as without
/// `VK_EXT_memory_budget` the allocator gets `budget_fraction` of the
/// limit. Read as `budget_fraction` of the limit alone, the others' 3 GiB
/// were over it, and a VRAM request went to another heap while the
/// allocator held nothing of its 2 GiB.
#[test]
fn a_budget_of_0_in_a_limited_heap_leaves_its_fraction_beside_the_others() {
    let (allocator, device) = allocator_with(FakeLayout::discrete(), limited(0, 2 * GIB));
    device.set_heap_budget(0, 0, 3 * GIB);
    let fraction = (2.0 * GIB as f64 * 0.8) as u64;
    let budget = allocator.budgets()[0];
    assert_eq!((budget.budget, budget.usage), (3 * GIB + fraction, 3 * GIB));
    let allocation = allocator
        .allocate(&buffer(4 * MIB, 256, Usage::DEVICE_LOCAL).within_budget())
        .unwrap();
    assert_eq!(allocation.memory_type(), 1, "in VRAM");
    free(&allocator, allocation);
    finish(allocator, &device);
}

/// Nor does the allocator's own memory count among the others': the
/// driver's usage includes it, and the budget leaves room for the limit
/// beside that usage less the allocator's own (its memory is under the
/// limit already). With 3 GiB used by others, a 2 GiB limit and a 7 GiB
/// budget, the budget stays 5 GiB once the allocator holds memory in the
/// heap, and a request held to the budget that would take the
/// allocator's memory past the limit is refused as over that budget,
/// naming it.
#[test]
fn the_allocators_own_memory_is_not_counted_as_others() {
    let (allocator, device) = allocator_with(FakeLayout::discrete(), limited(0, 2 * GIB));
    device.set_heap_budget(0, 7 * GIB, 3 * GIB);
    let held = allocator.allocate(&dedicated_in(1, 256 * MIB)).unwrap();
    let own = device.heap_usage()[0];
    assert_eq!(own, 256 * MIB);
    let budget = allocator.budgets()[0];
    assert_eq!(
        (budget.budget, budget.usage),
        (5 * GIB, 3 * GIB + own),
        "the limit beside the others' 3 GiB"
    );
    let past_the_limit = 2 * GIB - own + MIB;
    assert_eq!(
        allocator
            .allocate(&dedicated_in(1, past_the_limit).within_budget())
            .err(),
        Some(Error::OverBudget {
            heap: 0,
            size: past_the_limit,
            usage: 3 * GIB + own,
            budget: 5 * GIB,
        })
    );
    free(&allocator, held);
    finish(allocator, &device);
}

/// VMA #278: one path to `vkAllocateMemory` (there the dedicated
/// fallback) skipped a check the others made, and memory went past what
/// the allocator was told to keep to. The heap limit is checked on every
/// path that makes memory: besides blocks, dedicated memory and pools'
/// blocks (above), a pool's `min_blocks` made at `create_pool`, an upload
/// ring's first chunk, a growing ring's new chunks and `allocate_many`.
/// At no point does the device hold more than the limit in the heap.
#[test]
fn every_path_that_makes_memory_keeps_to_the_limit() {
    use vk_suballoc::{PoolDesc, UploadRingDesc};

    const LIMIT: u64 = 64 * MIB;
    let (allocator, device) = allocator_with(FakeLayout::integrated(), limited(0, LIMIT));
    let within = |what: &str| {
        let usage = device.heap_usage()[0];
        assert!(usage <= LIMIT, "{what}: {usage} bytes in the limited heap");
    };
    let ring = allocator
        .create_upload_ring(&UploadRingDesc {
            size: 24 * MIB,
            grow: true,
            ..UploadRingDesc::default()
        })
        .unwrap();
    within("a ring");
    let too_many_blocks = PoolDesc::new(0).block_size(16 * MIB).min_blocks(3);
    assert!(allocator.create_pool(&too_many_blocks).is_err());
    within("a pool's min_blocks past the limit");
    let pool = allocator
        .create_pool(&PoolDesc::new(0).block_size(16 * MIB).min_blocks(2))
        .unwrap();
    within("a pool's min_blocks");
    // 56 MiB held: once its chunk is full, the ring cannot grow by another.
    allocator.ring_allocate(ring, 24 * MIB, 256).unwrap();
    for _ in 0..2 {
        let grown = allocator.ring_allocate(ring, 20 * MIB, 256);
        within("a growing ring");
        assert!(grown.is_err(), "the ring grew past the limit");
    }
    let many = [
        buffer(4 * MIB, 256, Usage::UPLOAD),
        buffer(6 * MIB, 256, Usage::DEVICE_LOCAL),
        buffer(12 * MIB, 256, Usage::READBACK).dedicated(DedicatedPolicy::Always),
    ];
    let made = allocator.allocate_many(&many);
    within("allocate_many");
    assert!(made.is_err(), "allocate_many went past the limit");
    allocator.destroy_pool(pool).unwrap();
    let fence = device.create_fence();
    // SAFETY: a fake fence, signalled below once "the GPU" is done.
    unsafe { allocator.end_frame(fence) }.unwrap();
    device.signal_fence(fence);
    allocator.collect().unwrap();
    allocator.destroy_upload_ring(ring).unwrap();
    finish(allocator, &device);
}
