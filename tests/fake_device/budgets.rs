//! Heap budgets: the driver's (`VK_EXT_memory_budget`) or a fraction of each
//! heap, how they steer requests, and how often the driver is asked.

use vk_suballoc::device::fake::FakeLayout;
use vk_suballoc::device::{HeapBudget, MemoryDeviceExt};
use vk_suballoc::{DedicatedPolicy, Error, Request, ResourceKind, Usage};

use super::frames::{end_frame, free_all_and_finish};
use super::{allocator, buffer, finish, free};

const MIB: u64 = 1 << 20;

#[path = "budgets/readings.rs"]
mod readings;

/// A within-budget request for `size` bytes of dedicated memory in VRAM
/// alone (type 1 of the discrete layouts), so that nothing moves to another
/// heap.
pub(super) fn vram_only(size: u64) -> Request<'static> {
    let mut request = buffer(size, 256, Usage::DEVICE_LOCAL)
        .dedicated(DedicatedPolicy::Always)
        .within_budget();
    request.requirements.memory_type_bits = 1 << 1;
    request
}

#[test]
fn budgets_steer_allocations_and_within_budget_fails_typed() {
    // No budget extension: 80 % of a 64 MiB heap is the budget.
    let layout = FakeLayout::integrated().with_heap_sizes(64 * MIB);
    let (allocator, device) = allocator(layout);
    let budget = allocator.budgets()[0];
    assert_eq!(budget.budget, (64.0 * MIB as f64 * 0.8) as u64);
    let mut live = Vec::new();
    let within = |size| buffer(size, 256, Usage::DEVICE_LOCAL).within_budget();
    let error = loop {
        match allocator.allocate(&within(4 * MIB)) {
            Ok(a) => live.push(a),
            Err(error) => break error,
        }
    };
    assert!(
        matches!(error, Error::OverBudget { heap: 0, .. }),
        "{error:?}"
    );
    assert!(allocator.budgets()[0].usage <= budget.budget);
    // Without within_budget the request goes over budget instead of failing.
    live.push(
        allocator
            .allocate(&buffer(4 * MIB, 256, Usage::DEVICE_LOCAL))
            .unwrap(),
    );
    assert!(allocator.budgets()[0].usage > budget.budget);
    free_all_and_finish(allocator, &device, live);
}

#[test]
fn the_budget_extension_moves_requests_to_the_next_heap() {
    let (allocator, device) = allocator(FakeLayout::discrete());
    // Other processes use 90 of the 100 MiB budget of VRAM.
    device.set_heap_budget(0, 100 * MIB, 90 * MIB);
    let b = allocator.budgets();
    assert_eq!((b[0].budget, b[0].usage), (100 * MIB, 90 * MIB));
    let a = allocator
        .allocate(&buffer(20 * MIB, 256, Usage::DEVICE_LOCAL).within_budget())
        .unwrap();
    // VRAM (type 1) is over budget: the BAR (type 4) is next.
    assert_eq!(a.memory_type(), 4);
    free_all_and_finish(allocator, &device, [a]);
}

/// A texture whose VRAM is over budget, without `within_budget`, goes on
/// to the other device-local heap, the 256 MiB BAR of a discrete GPU
/// without resizable BAR, while that has budget, and only then to system
/// memory (the README's "Coming from VMA" says so): device-local types
/// rank before host ones for GPU-only data.
#[test]
fn a_texture_over_the_vram_budget_takes_the_bar_then_system_memory() {
    // discrete: 0 none (system), 1 DL, 2 HV|HC, 3 HV|HC|cached, 4 BAR.
    let (allocator, device) = allocator(FakeLayout::discrete());
    device.set_heap_budget(0, 100 * MIB, 99 * MIB);
    // 40 MiB: each needs memory of its own, not room in the other's.
    let texture = || {
        Request::new(
            super::requirements(40 * MIB, 4096),
            Usage::DEVICE_LOCAL,
            ResourceKind::OptimalImage,
        )
    };
    let in_bar = allocator.allocate(&texture()).unwrap();
    assert_eq!(in_bar.memory_type(), 4);
    // The BAR heap's budget is gone too: system memory.
    device.set_heap_budget(2, 64 * MIB, 63 * MIB);
    let in_system = allocator.allocate(&texture()).unwrap();
    assert_eq!(in_system.memory_type(), 0);
    free_all_and_finish(allocator, &device, [in_bar, in_system]);
}

/// Some drivers report a heap budget of 0, or one larger than the heap.
/// As VMA does (`UpdateVulkanBudget`), 0 reads as `budget_fraction` of the
/// heap and a larger budget as the heap's size; taken as reported, the 0
/// made every within-budget request fail.
#[test]
fn implausible_driver_budgets_are_read_as_vma_reads_them() {
    let (allocator, device) = allocator(FakeLayout::discrete());
    let heaps = &device.layout().memory_heaps;
    let (vram, bar) = (heaps[0].size, heaps[2].size);
    device.set_heap_budget(0, 0, 0);
    device.set_heap_budget(2, 64 * bar, 0);
    let b = allocator.budgets();
    assert_eq!(b[0].budget, (vram as f64 * 0.8) as u64);
    assert_eq!(b[2].budget, bar);
    let a = allocator
        .allocate(&buffer(MIB, 256, Usage::DEVICE_LOCAL).within_budget())
        .unwrap();
    assert_eq!(a.memory_type(), 1);
    free_all_and_finish(allocator, &device, [a]);
}

/// A driver usage below what this allocator alone holds in the heap (some
/// report 0) is stale: budgets count at least the allocator's own memory,
/// so within-budget requests still stop at the budget.
#[test]
fn a_driver_usage_below_our_own_is_not_believed() {
    let (allocator, device) = allocator(FakeLayout::discrete());
    device.set_heap_budget(0, 100 * MIB, 0);
    device.report_heap_usage(0, Some(0));
    // Only VRAM (type 1), so that nothing moves to another heap.
    let request = vram_only(40 * MIB);
    let first = allocator.allocate(&request).unwrap();
    let second = allocator.allocate(&request).unwrap();
    // The driver says 0; the allocator counts its own 80 MiB.
    let mut reported = [HeapBudget::default(); 3];
    assert!(device.heap_budgets(&mut reported));
    assert_eq!(reported[0].usage, 0);
    assert_eq!(allocator.budgets()[0].usage, 80 * MIB);
    // Refused on the allocator's own 80 MiB, not the driver's 0 (with
    // which 40 MiB more would pass).
    assert_eq!(
        allocator.allocate(&request).err(),
        Some(Error::OverBudget {
            heap: 0,
            size: 40 * MIB,
            usage: 80 * MIB,
            budget: 100 * MIB,
        })
    );
    free_all_and_finish(allocator, &device, [first, second]);
}

#[test]
fn a_small_budget_left_is_used_with_smaller_blocks_first() {
    let (allocator, device) = allocator(FakeLayout::discrete());
    // 10 MiB of VRAM budget left: the usual 32 MiB first block does not fit,
    // an 8 MiB one does, so the request stays in VRAM (type 1).
    device.set_heap_budget(0, 100 * MIB, 90 * MIB);
    let a = allocator
        .allocate(&buffer(MIB, 256, Usage::DEVICE_LOCAL).within_budget())
        .unwrap();
    assert_eq!(a.memory_type(), 1);
    assert_eq!(allocator.stats().memory_types[1].block_bytes, 8 * MIB);
    free_all_and_finish(allocator, &device, [a]);
}

/// A within-budget request may use the budget up to its last byte: memory
/// that brings a heap's usage exactly to its budget is within it.
#[test]
fn a_request_that_exactly_fills_the_budget_is_within_it() {
    let (allocator, device) = allocator(FakeLayout::discrete());
    // 16 MiB of the 32 MiB VRAM budget left.
    device.set_heap_budget(0, 32 * MIB, 16 * MIB);
    let exact = buffer(16 * MIB, 256, Usage::DEVICE_LOCAL)
        .dedicated(DedicatedPolicy::Always)
        .within_budget();
    let a = allocator.allocate(&exact).unwrap();
    assert_eq!(a.memory_type(), 1);
    let b = allocator.budgets()[0];
    assert_eq!((b.usage, b.budget), (32 * MIB, 32 * MIB));
    // Not one byte more.
    let over = allocator.allocate(&exact).unwrap();
    assert_eq!(over.memory_type(), 4);
    free_all_and_finish(allocator, &device, [a, over]);
}

/// With resizable BAR, host-visible VRAM (type 4) is in the VRAM heap:
/// device-only blocks use its budget too, and a within-budget upload that
/// would pass it goes to system memory (type 2) instead.
#[test]
fn rebar_uploads_share_the_vram_budget_with_device_local_memory() {
    let (allocator, device) = allocator(FakeLayout::rebar());
    device.set_heap_budget(0, 100 * MIB, 0);
    let vram = allocator
        .allocate(&buffer(80 * MIB, 256, Usage::DEVICE_LOCAL).dedicated(DedicatedPolicy::Always))
        .unwrap();
    assert_eq!(vram.memory_type(), 1);
    let upload = buffer(40 * MIB, 256, Usage::UPLOAD | Usage::DEVICE_LOCAL)
        .dedicated(DedicatedPolicy::Always)
        .within_budget();
    let staging = allocator.allocate(&upload).unwrap();
    assert_eq!(staging.memory_type(), 2);
    assert!(staging.mapped_ptr().is_some());
    // Within the budget, the same request gets host-visible VRAM.
    allocator.free_after_frame(vram).unwrap();
    device.signal_fence(end_frame(&allocator, &device));
    allocator.collect().unwrap();
    let bar = allocator.allocate(&upload).unwrap();
    assert_eq!(bar.memory_type(), 4);
    free_all_and_finish(allocator, &device, [staging, bar]);
}

/// A heap short of budget gives back every empty block of its memory
/// types before a request leaves the heap, each type's largest included:
/// memory that holds nothing never sends device-local data to system
/// memory. With resizable BAR, host-visible VRAM (type 4) shares the VRAM
/// heap with device-only memory (type 1): an empty upload block of type 4,
/// kept for reuse, stood in the way of a texture in type 1, which went to
/// system memory (type 0) with VRAM budget to spare once the block went
/// (the texture is larger than the kept block, so it cannot go there).
/// VMA keeps one empty block per type too, but gives it back when it
/// empties over budget.
#[test]
fn an_empty_block_of_another_type_gives_way_to_device_local_memory() {
    for within_budget in [true, false] {
        let (allocator, device) = allocator(FakeLayout::rebar());
        device.set_heap_budget(0, 600 * MIB, 0);
        allocator.budgets();
        // A block of host-visible VRAM, emptied and kept (the type's largest).
        let upload = allocator
            .allocate(&buffer(MIB, 256, Usage::UPLOAD | Usage::DEVICE_LOCAL))
            .unwrap();
        assert_eq!(upload.memory_type(), 4);
        free(&allocator, upload);
        let kept = allocator.stats().memory_types[4].block_bytes;
        assert_eq!(allocator.stats().memory_types[4].empty_blocks, 1);
        assert!(kept < 40 * MIB);
        // VRAM used up to 16 MiB below the budget, the kept block included.
        let large = allocator
            .allocate(&vram_only(600 * MIB - kept - 16 * MIB))
            .unwrap();
        // 40 MiB more fit once the kept block goes, not beside it.
        let mut texture = buffer(40 * MIB, 256, Usage::DEVICE_LOCAL);
        if within_budget {
            texture = texture.within_budget();
        }
        let texture = allocator
            .allocate(&texture)
            .unwrap_or_else(|error| panic!("within budget {within_budget}: {error}"));
        assert_eq!(
            texture.memory_type(),
            1,
            "within budget {within_budget}: VRAM had room"
        );
        assert_eq!(allocator.stats().memory_types[4].blocks, 0);
        let b = allocator.budgets()[0];
        assert!(b.usage <= b.budget, "within budget {within_budget}: {b:?}");
        free_all_and_finish(allocator, &device, [large, texture]);
    }
}

/// A request that did not ask to stay within the budget, and that every
/// candidate memory type refused within it, passes the budget by its own
/// size: dedicated memory, as VMA does, not a new block (32 MiB here, up to
/// 256 MiB). Before, the last pass made a block. With `within_budget` it
/// is refused.
#[test]
fn a_request_past_the_budget_passes_it_by_its_own_size() {
    let (allocator, device) = allocator(FakeLayout::discrete());
    // The rest of the application already uses VRAM's whole budget, and
    // the other heaps have no room at all.
    device.set_heap_budget(0, 100 * MIB, 100 * MIB);
    device.cap_heap(1, 0);
    device.cap_heap(2, 0);
    let before = allocator.budgets()[0].usage;
    let small = buffer(64 << 10, 256, Usage::DEVICE_LOCAL);
    let refused = allocator.allocate(&small.within_budget());
    // (The last candidate's error: its heap is full.)
    assert_eq!(refused, Err(Error::OutOfDeviceMemory));
    let allocation = allocator.allocate(&small).unwrap();
    assert_eq!(allocation.memory_type(), 1);
    assert!(allocation.is_dedicated());
    assert_eq!(allocator.budgets()[0].usage - before, 64 << 10);
    assert_eq!(allocator.stats().memory_types[1].blocks, 0);
    free_all_and_finish(allocator, &device, [allocation]);
}

/// Past the budget, small requests still go to a block once 3/4 of
/// `maxMemoryAllocationCount` is used: dedicated memory for each would
/// spend a memory object per buffer and reach the limit, where a block
/// holds them all. (Before, every request past the budget took dedicated
/// memory until `TooManyObjects`, which a new block would have avoided.)
#[test]
fn past_the_budget_small_requests_keep_the_last_objects_for_a_block() {
    let (allocator, device) = allocator(FakeLayout::discrete().with_max_allocation_count(8));
    device.set_heap_budget(0, 100 * MIB, 100 * MIB);
    device.cap_heap(1, 0);
    device.cap_heap(2, 0);
    let small = buffer(4096, 256, Usage::DEVICE_LOCAL);
    let mut live = Vec::new();
    for i in 0..32 {
        match allocator.allocate(&small) {
            Ok(allocation) => live.push(allocation),
            Err(error) => panic!("request {i}: {error:?}"),
        }
    }
    // The first requests pass the budget by their own size; then a block.
    let stats = allocator.stats();
    assert!(stats.memory_objects <= 8, "{}", stats.memory_objects);
    assert_eq!(stats.memory_types[1].blocks, 1);
    assert!(live.iter().any(|a| !a.is_dedicated()));
    free_all_and_finish(allocator, &device, live);
}

/// Past the budget, a request that rules out dedicated memory
/// (`DedicatedPolicy::Never`) still gets memory: a new block, as the
/// README's fallback order says, not an error.
#[test]
fn past_the_budget_a_request_that_rules_out_dedicated_memory_takes_a_block() {
    let (allocator, device) = allocator(FakeLayout::discrete());
    device.set_heap_budget(0, 100 * MIB, 100 * MIB);
    device.cap_heap(1, 0);
    device.cap_heap(2, 0);
    let never = buffer(64 << 10, 256, Usage::DEVICE_LOCAL).dedicated(DedicatedPolicy::Never);
    let allocation = allocator.allocate(&never).unwrap();
    assert_eq!(allocation.memory_type(), 1);
    assert!(!allocation.is_dedicated());
    assert_eq!(allocator.stats().memory_types[1].blocks, 1);
    free_all_and_finish(allocator, &device, [allocation]);
}

/// Intel Arc without resizable BAR: 256 MiB of VRAM the host can map, in a
/// heap of its own, and only *cached* system memory. Staging buffers take
/// system memory from the first, never the BAR; per-frame uploads fill the
/// BAR within its budget, then go to system memory, mapped; vertex buffers
/// the host may write directly take the BAR while it has room, then VRAM,
/// unmapped (upload through a transfer), not system memory.
#[test]
fn a_small_bar_fills_then_uploads_go_where_an_engine_expects() {
    let (allocator, device) = allocator(FakeLayout::intel_arc());
    device.set_heap_budget(2, 200 * MIB, 0);
    let staging = allocator
        .allocate(&buffer(8 * MIB, 256, Usage::UPLOAD))
        .unwrap();
    assert_eq!(staging.memory_type(), 1);
    let mut live = vec![staging];
    let per_frame = Usage::UPLOAD | Usage::DEVICE_LOCAL;
    let spilled = loop {
        let a = allocator
            .allocate(&buffer(4 * MIB, 256, per_frame))
            .unwrap();
        assert!(a.mapped_ptr().is_some());
        if a.memory_type() != 2 {
            break a;
        }
        live.push(a);
    };
    assert_eq!(spilled.memory_type(), 1);
    assert!(allocator.budgets()[2].usage <= 200 * MIB);
    live.push(spilled);
    let direct = Usage::UPLOAD | Usage::ALLOW_TRANSFER_INSTEAD;
    let vertices = allocator.allocate(&buffer(4 * MIB, 256, direct)).unwrap();
    assert_eq!(vertices.memory_type(), 0);
    assert!(vertices.mapped_ptr().is_none());
    live.push(vertices);
    free_all_and_finish(allocator, &device, live);
}

/// The fake device's slow calls take at least their delay: a budget query
/// and an allocation once, a free twice (before the memory goes and
/// after). The race tests here that widen their windows with a slow query
/// or free pass without any race if its delay is dropped, so only a test
/// like this one sees it (`threads`' budget races time their allocations
/// already).
#[test]
fn fake_slow_driver_calls_take_their_delay() {
    use std::time::{Duration, Instant};

    use vk_suballoc::device::fake::FakeDevice;
    use vk_suballoc::device::{AllocationFlags, MemoryDevice};

    const DELAY: Duration = Duration::from_millis(100);
    let device = FakeDevice::new(FakeLayout::discrete());
    device.slow_allocations(Some(DELAY));
    device.slow_budget_queries(Some(DELAY));
    device.slow_frees(Some(DELAY));

    let started = Instant::now();
    // SAFETY: a fake device; the memory is freed below.
    let memory = unsafe { device.allocate_memory(MIB, 1, AllocationFlags::empty()) }.unwrap();
    let took = started.elapsed();
    assert!(took >= DELAY, "the allocation took {took:?}");

    let mut reported = [HeapBudget::default(); 3];
    let started = Instant::now();
    assert!(device.heap_budgets(&mut reported));
    let took = started.elapsed();
    assert!(took >= DELAY, "the budget query took {took:?}");
    assert_eq!(reported[0].usage, MIB, "it read the figures");

    let started = Instant::now();
    // SAFETY: as above; freed once.
    unsafe { device.deallocate_memory(memory) };
    let took = started.elapsed();
    assert!(took >= 2 * DELAY, "the free took {took:?}");
    device.assert_clean();
}

/// A driver may report a heap's budget as u64::MAX ("no limit"), and the
/// usage of others near it. "usage + size <= budget" must neither
/// overflow (a panic in debug builds, a wrap in release) nor saturate into
/// a pass: a sum past u64::MAX is over any budget. Allocations and frees
/// work as on any heap.
#[test]
fn budgets_at_the_top_of_the_u64_range_allocate_and_free() {
    let layout = FakeLayout::discrete().with_heap_size(0, u64::MAX);
    let (allocator, device) = allocator(layout);
    // No limit, nothing used.
    device.set_heap_budget(0, u64::MAX, 0);
    let a = allocator.allocate(&vram_only(32 * MIB)).unwrap();
    let b = allocator.budgets()[0];
    assert_eq!((b.budget, b.usage), (u64::MAX, 32 * MIB));
    free(&allocator, a);
    // Others use all but 40 MiB of it: one 32 MiB object fits, a second
    // would pass u64::MAX.
    device.set_heap_budget(0, u64::MAX, u64::MAX - 40 * MIB);
    assert_eq!(allocator.budgets()[0].usage, u64::MAX - 40 * MIB);
    let first = allocator.allocate(&vram_only(32 * MIB)).unwrap();
    assert!(matches!(
        allocator.allocate(&vram_only(32 * MIB)),
        Err(Error::OverBudget { heap: 0, .. })
    ));
    assert_eq!(allocator.budgets()[0].usage, u64::MAX - 8 * MIB);
    // Not within budget: it goes over, and the driver's usage saturates.
    let mut plain = vram_only(32 * MIB);
    plain.desc.within_budget = false;
    let past = allocator.allocate(&plain).unwrap();
    assert_eq!(allocator.budgets()[0].usage, u64::MAX);
    free(&allocator, past);
    free(&allocator, first);
    // A budget just below u64::MAX, and a usage at it: nothing more fits
    // within it, blocks still come and go past it.
    device.set_heap_budget(0, u64::MAX - 1, u64::MAX - 1);
    let b = allocator.budgets()[0];
    assert_eq!((b.budget, b.usage), (u64::MAX - 1, u64::MAX - 1));
    let mut block = buffer(MIB, 256, Usage::DEVICE_LOCAL);
    block.requirements.memory_type_bits = 1 << 1;
    assert!(matches!(
        allocator.allocate(&block.within_budget()),
        Err(Error::OverBudget { heap: 0, .. })
    ));
    let a = allocator.allocate(&block).unwrap();
    assert_eq!(a.memory_type(), 1);
    free(&allocator, a);
    finish(allocator, &device);
}

/// Huge usage: memory objects of 2^63 bytes in a heap of u64::MAX bytes
/// whose budget says no limit. One fits; a second would take the heap's
/// usage past u64::MAX: over budget within it, out of memory past it (the
/// device's own sum of its heap's usage must not wrap either), never a
/// panic; and the first is freed as any.
#[test]
fn memory_objects_of_half_the_u64_range_do_not_overflow_the_heaps_usage() {
    let mut layout = FakeLayout::discrete().with_heap_size(0, u64::MAX);
    layout.max_memory_allocation_size = u64::MAX;
    let (allocator, device) = allocator(layout);
    device.set_heap_budget(0, u64::MAX, 0);
    let half = vram_only(1 << 63);
    let first = allocator.allocate(&half).unwrap();
    assert_eq!(allocator.budgets()[0].usage, 1 << 63);
    // Within budget: over it, as the sum passes u64::MAX.
    assert!(matches!(
        allocator.allocate(&half),
        Err(Error::OverBudget { heap: 0, .. })
    ));
    let mut plain = half;
    plain.desc.within_budget = false;
    assert_eq!(allocator.allocate(&plain), Err(Error::OutOfDeviceMemory));
    free(&allocator, first);
    finish(allocator, &device);
}
