//! When the driver's budgets are read: every 30 memory objects, anew at
//! each `stats()`/`budgets()`/dump call and after a frame ends, again
//! before a refusal (once per request), the allocator's own memory counted
//! between readings, and readings that race frees or are slow.

use vk_suballoc::device::fake::FakeLayout;
use vk_suballoc::{DedicatedPolicy, Error, Usage};

use super::vram_only;
use super::MIB;
use crate::frames::{end_frame, free_all_and_finish};
use crate::{allocator, buffer, finish};

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
