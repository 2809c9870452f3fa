//! Heap budgets: the driver's (`VK_EXT_memory_budget`) or a fraction of each
//! heap, how they steer requests, and how often the driver is asked.

use vk_suballoc::device::fake::FakeLayout;
use vk_suballoc::device::{HeapBudget, MemoryDeviceExt};
use vk_suballoc::{DedicatedPolicy, Error, Request, ResourceKind, Usage};

use super::frames::{end_frame, free_all_and_finish};
use super::{allocator, buffer, finish, free};

const MIB: u64 = 1 << 20;

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

/// The allocator checks a heap's budget before each memory object it makes,
/// but asks the driver (slow on some: milliseconds) only every 30 memory
/// objects made or freed, adding its own changes in between.
#[test]
fn the_driver_is_asked_for_budgets_every_thirty_memory_objects() {
    let (allocator, device) = allocator(FakeLayout::discrete());
    let request = buffer(MIB, 256, Usage::DEVICE_LOCAL).dedicated(DedicatedPolicy::Always);
    let live: Vec<_> = (0..90)
        .map(|_| allocator.allocate(&request).unwrap())
        .collect();
    assert_eq!(device.counters().allocations, 90);
    assert_eq!(device.counters().budget_queries, 3);
    free_all_and_finish(allocator, &device, live);
}

/// `stats()`, `budgets()` and the dumps read the driver's figures anew at
/// every call, once (the README: "one query of the driver's heap budgets
/// per call", "`Allocator::budgets`, `stats` and the dumps always read
/// anew"), and never without `VK_EXT_memory_budget`.
#[test]
fn stats_budgets_and_dumps_read_the_driver_once_per_call() {
    for layout in [
        FakeLayout::discrete(),
        FakeLayout::discrete().with_memory_budget(false),
    ] {
        let per_call = u64::from(layout.memory_budget);
        let (allocator, device) = allocator(layout);
        let calls: [(&str, &dyn Fn()); 5] = [
            ("stats", &|| {
                let _ = allocator.stats();
            }),
            ("budgets", &|| {
                let _ = allocator.budgets();
            }),
            ("memory_map", &|| {
                let _ = allocator.memory_map();
            }),
            ("stats_json", &|| {
                let _ = allocator.stats_json(true);
            }),
            ("memory_map_svg", &|| {
                let _ = allocator.memory_map_svg();
            }),
        ];
        for (name, call) in calls {
            for _ in 0..2 {
                let before = device.counters().budget_queries;
                call();
                assert_eq!(
                    device.counters().budget_queries,
                    before + per_call,
                    "{name}, budget extension: {}",
                    per_call == 1
                );
            }
        }
        finish(allocator, &device);
    }
}

/// Between readings, the estimate follows the allocator's own memory: a
/// budget read once still stops within-budget requests at the right place,
/// without asking the driver for each.
#[test]
fn between_readings_the_allocators_own_memory_counts() {
    let (allocator, device) = allocator(FakeLayout::discrete());
    device.set_heap_budget(0, 100 * MIB, 0);
    let request = vram_only(10 * MIB);
    let live: Vec<_> = (0..10)
        .map(|_| allocator.allocate(&request).unwrap())
        .collect();
    let queries = device.counters().budget_queries;
    assert_eq!(queries, 1);
    // The eleventh would pass 100 MiB: refused, on a new reading.
    assert_eq!(
        allocator.allocate(&request).err(),
        Some(Error::OverBudget {
            heap: 0,
            size: 10 * MIB,
            usage: 100 * MIB,
            budget: 100 * MIB,
        })
    );
    assert_eq!(device.counters().budget_queries, queries + 1);
    free_all_and_finish(allocator, &device, live);
}

/// A budget that grew since the last reading (other processes gave memory
/// back) is not missed: a request the old figures would refuse is checked
/// against a new reading first.
#[test]
fn a_stale_budget_never_refuses_what_the_driver_would_grant() {
    let (allocator, device) = allocator(FakeLayout::discrete());
    device.set_heap_budget(0, 100 * MIB, 90 * MIB);
    let request = vram_only(20 * MIB);
    assert_eq!(
        allocator.allocate(&request).err(),
        Some(Error::OverBudget {
            heap: 0,
            size: 20 * MIB,
            usage: 90 * MIB,
            budget: 100 * MIB,
        })
    );
    // The other processes leave; the allocator has not read that yet.
    device.set_heap_budget(0, 100 * MIB, 0);
    let granted = allocator.allocate(&request).unwrap();
    free_all_and_finish(allocator, &device, [granted]);
}

/// A budget that shrank since the last reading (another process took
/// memory) is read at the next check after the frame ends.
#[test]
fn a_frame_end_makes_the_next_check_read_the_budget_again() {
    let (allocator, device) = allocator(FakeLayout::discrete());
    device.set_heap_budget(0, 100 * MIB, 0);
    let request = vram_only(20 * MIB);
    let first = allocator.allocate(&request).unwrap();
    // Another process takes 70 MiB: 20 + 20 + 70 would pass 100 MiB.
    device.set_heap_budget(0, 100 * MIB, 70 * MIB);
    let queries = device.counters().budget_queries;
    let fence = end_frame(&allocator, &device);
    assert_eq!(device.counters().budget_queries, queries);
    assert!(matches!(
        allocator.allocate(&request),
        Err(Error::OverBudget { heap: 0, .. })
    ));
    device.signal_fence(fence);
    free_all_and_finish(allocator, &device, [first]);
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

/// A reading of the driver's figures that races a free must not count the
/// freed memory as the allocator's own when the driver's usage no longer
/// does: the estimate would then fall below the true usage by the freed
/// size, and within-budget requests pass the budget until the next reading.
/// The reader took the allocator's usage before waiting for the driver, and
/// a free subtracted its size only after `vkFreeMemory` returned. (Times:
/// the free begins at 100 ms, the driver frees at 500 ms and returns at
/// 900 ms; the reader reads the driver's figures at 700 ms.)
#[test]
fn a_reading_that_races_a_free_never_lowers_the_estimate() {
    use std::time::Duration;
    let (allocator, device) = allocator(FakeLayout::discrete());
    // Others use 150 of the 256 MiB budget of VRAM.
    device.set_heap_budget(0, 256 * MIB, 150 * MIB);
    let vram = |size| {
        let mut request = buffer(size, 256, Usage::DEVICE_LOCAL)
            .dedicated(DedicatedPolicy::Always)
            .within_budget();
        request.requirements.memory_type_bits = 1 << 1;
        request
    };
    let freed = allocator.allocate(&vram(100 * MIB)).unwrap();
    device.slow_budget_queries(Some(Duration::from_millis(700)));
    device.slow_frees(Some(Duration::from_millis(400)));
    std::thread::scope(|scope| {
        let reader = scope.spawn(|| allocator.budgets());
        // The reader waits for the driver; the free lands meanwhile.
        std::thread::sleep(Duration::from_millis(100));
        super::free(&allocator, freed);
        reader.join().unwrap();
    });
    device.slow_budget_queries(None);
    device.slow_frees(None);
    // 150 + 150 MiB pass the budget (no new reading before this check).
    let queries = device.counters().budget_queries;
    assert!(matches!(
        allocator.allocate(&vram(150 * MIB)),
        Err(Error::OverBudget { heap: 0, .. })
    ));
    assert_eq!(device.counters().budget_queries, queries + 1);
    finish(allocator, &device);
}

/// A request the figures refuse is checked against a new reading once, not
/// once per memory object it tries (smaller blocks, then dedicated memory),
/// nor twice when the check itself had just read them: nothing changed in
/// between, and some drivers take milliseconds to answer.
#[test]
fn a_refused_request_reads_the_budgets_once() {
    let (allocator, device) = allocator(FakeLayout::discrete());
    // All of VRAM's budget is used by others.
    device.set_heap_budget(0, 100 * MIB, 100 * MIB);
    let mut request = buffer(MIB, 256, Usage::DEVICE_LOCAL).within_budget();
    request.requirements.memory_type_bits = 1 << 1;
    // The first check reads the figures: they refuse, without a second read.
    assert!(matches!(
        allocator.allocate(&request),
        Err(Error::OverBudget { heap: 0, .. })
    ));
    assert_eq!(device.counters().budget_queries, 1);
    // A frame ended: one new reading for the next request, however many
    // block sizes and dedicated memory it tries.
    device.signal_fence(end_frame(&allocator, &device));
    assert!(matches!(
        allocator.allocate(&request),
        Err(Error::OverBudget { heap: 0, .. })
    ));
    assert_eq!(device.counters().budget_queries, 2);
    // Another request: its refusal is checked on one new reading.
    assert!(matches!(
        allocator.allocate(&request),
        Err(Error::OverBudget { heap: 0, .. })
    ));
    assert_eq!(device.counters().budget_queries, 3);
    allocator.collect().unwrap();
    finish(allocator, &device);
}

/// A slow reading of the driver's budgets (milliseconds on some drivers)
/// holds up no other thread's memory objects: the cache is not locked
/// while the driver answers. Locked, every memory object made or freed
/// (under its memory type's lock, so every request of that type stalled
/// too) waited for a `budgets()` call on another thread to get its answer.
#[test]
fn a_slow_budget_reading_holds_up_no_other_thread() {
    use std::time::{Duration, Instant};
    let (allocator, device) = allocator(FakeLayout::discrete());
    let request = buffer(MIB, 256, Usage::DEVICE_LOCAL).dedicated(DedicatedPolicy::Always);
    let first = allocator.allocate(&request).unwrap();
    // Long enough that a thread waiting for the reader (at least 1.8 s)
    // stands apart from one only descheduled on a loaded machine (under
    // 1 s allowed).
    let delay = Duration::from_millis(2000);
    device.slow_budget_queries(Some(delay));
    std::thread::scope(|scope| {
        let reader = scope.spawn(|| allocator.budgets());
        std::thread::sleep(Duration::from_millis(200));
        // Making memory is not slowed down: it must not wait for the reader.
        let started = Instant::now();
        let second = allocator.allocate(&request).unwrap();
        let elapsed = started.elapsed();
        assert!(elapsed < delay / 2, "allocation took {elapsed:?}");
        reader.join().unwrap();
        device.slow_budget_queries(None);
        for allocation in [first, second] {
            super::free(&allocator, allocation);
        }
    });
    finish(allocator, &device);
}

/// Memory being freed counts against its heap's budget until
/// `vkFreeMemory` returns: the driver counts it until then. A within-budget
/// request in another memory type of the heap waits for the free (frees
/// take the heap's turn, as new memory does) instead of passing the check
/// on memory the driver still holds. (Times: the free begins at 0 ms, the
/// driver frees at 300 ms and returns at 600 ms; the request comes at
/// 100 ms.)
#[test]
fn a_free_in_flight_still_counts_against_the_budget() {
    use std::time::Duration;
    let (allocator, device) = allocator(FakeLayout::rebar());
    // Others use 100 of the 256 MiB budget of VRAM (heap 0: types 1 and 4).
    device.set_heap_budget(0, 256 * MIB, 100 * MIB);
    let in_type = |memory_type: u32| {
        let mut request = buffer(100 * MIB, 256, Usage::DEVICE_LOCAL)
            .dedicated(DedicatedPolicy::Always)
            .within_budget();
        request.requirements.memory_type_bits = 1 << memory_type;
        request
    };
    let freed = allocator.allocate(&in_type(1)).unwrap();
    device.slow_frees(Some(Duration::from_millis(300)));
    std::thread::scope(|scope| {
        let freeing = scope.spawn(|| super::free(&allocator, freed));
        std::thread::sleep(Duration::from_millis(100));
        let granted = allocator.allocate(&in_type(4)).unwrap();
        let usage = device.heap_usage()[0] + 100 * MIB;
        assert!(
            usage <= 256 * MIB,
            "{} MiB in VRAM, over its 256 MiB budget",
            usage / MIB
        );
        freeing.join().unwrap();
        device.slow_frees(None);
        super::free(&allocator, granted);
    });
    finish(allocator, &device);
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
