//! Threads racing within-budget requests, frees, trims and budget readings
//! in one heap: no within-budget request ever takes the heap past its
//! budget.
//!
//! The device caps the heap where the budget ends (less the others' usage),
//! so memory past the budget is refused by the device itself: a request the
//! allocator's budget check wrongly passed shows as a failed
//! `vkAllocateMemory` call. The device's budget queries and frees are slow
//! (a driver that takes a while to answer), so that readings, checks and
//! frees overlap. And one reading raced by a free and by a new memory
//! object on either side of the driver's answer, which must not lower the
//! estimate the next check makes.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ash::vk;
use vk_suballoc::device::fake::FakeLayout;
use vk_suballoc::{
    Allocation, AllocationDesc, DedicatedPolicy, Error, PoolDesc, Request, ResourceKind, Usage,
};

use super::budgets::vram_only;
use super::seeded_rng::Rng;
use super::{allocator, buffer, finish, free};

const MIB: u64 = 1 << 20;

const THREADS: u64 = 3;
/// Operations per allocating thread: a few under Miri.
const STEPS: u64 = if cfg!(miri) { 10 } else { 300 };

/// Stops the reader thread when dropped: when the workers are done, or
/// when one of them panicked (the scope would wait for the reader forever).
struct StopOnDrop<'a>(&'a AtomicBool);

impl Drop for StopOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

#[test]
fn within_budget_threads_never_pass_the_budget() {
    let test = "within_budget_threads_never_pass_the_budget";
    let seed = Rng::seed(test);
    // Resizable BAR: device-local (1) and host-visible VRAM (4) share heap 0.
    let (allocator, device) = allocator(FakeLayout::rebar());
    let (budget, others) = (96 * MIB, 16 * MIB);
    device.set_heap_budget(0, budget, others);
    device.cap_heap(0, budget - others);
    allocator.budgets();
    let delay = Some(Duration::from_micros(500));
    device.slow_budget_queries(delay);
    device.slow_frees(delay);
    let live: Mutex<Vec<Allocation>> = Mutex::new(Vec::new());
    let done = AtomicBool::new(false);
    std::thread::scope(|scope| {
        let (allocator, done) = (&allocator, &done);
        scope.spawn(move || {
            while !done.load(Ordering::Relaxed) {
                allocator.budgets();
                std::thread::yield_now();
            }
        });
        let _stop_reader = StopOnDrop(done);
        let workers: Vec<_> = (0..THREADS)
            .map(|thread| {
                let live = &live;
                scope.spawn(move || {
                    let mut rng = Rng(seed ^ thread.wrapping_mul(0x9e37_79b9));
                    for _ in 0..STEPS {
                        match rng.below(8) {
                            0..=3 => {
                                let size = (1 + rng.below(12)) * MIB;
                                let memory_type = [1, 4][rng.below(2) as usize];
                                let requirements = vk::MemoryRequirements {
                                    size,
                                    alignment: 256,
                                    memory_type_bits: 1 << memory_type,
                                };
                                let mut request = Request::new(
                                    requirements,
                                    Usage::DEVICE_LOCAL,
                                    ResourceKind::Buffer,
                                )
                                .within_budget();
                                let always = rng.below(2) == 0;
                                if always {
                                    request = request.dedicated(DedicatedPolicy::Always);
                                }
                                match allocator.allocate(&request) {
                                    Ok(allocation) => live.lock().unwrap().push(allocation),
                                    // Both types live in heap 0, whose
                                    // budget stays put; its usage races the
                                    // other threads, yet the reading that
                                    // refused must have had no room. The
                                    // memory refused: the request's own
                                    // (dedicated), or a block.
                                    Err(Error::OverBudget {
                                        heap,
                                        size: refused,
                                        usage,
                                        budget: read,
                                    }) => assert!(
                                        heap == 0
                                            && read == budget
                                            && usage + refused > read
                                            && refused >= size
                                            && (!always || refused == size),
                                        "{test}: seed {seed}: {size} bytes, dedicated always {always}: OverBudget {{ heap: {heap}, size: {refused}, usage: {usage}, budget: {read} }}"
                                    ),
                                    Err(error) => panic!("{test}: seed {seed}: {error:?}"),
                                }
                            }
                            4..=6 => {
                                let taken = {
                                    let mut live = live.lock().unwrap();
                                    let count = live.len() as u64;
                                    (count > 0).then(|| live.swap_remove(rng.below(count) as usize))
                                };
                                if let Some(allocation) = taken {
                                    free(allocator, allocation);
                                }
                            }
                            _ => {
                                allocator.trim();
                            }
                        }
                    }
                })
            })
            .collect();
        for worker in workers {
            worker.join().unwrap();
        }
    });
    device.slow_budget_queries(None);
    device.slow_frees(None);
    let counters = device.counters();
    assert_eq!(
        counters.allocate_calls, counters.allocations,
        "{test}: seed {seed}: the device refused memory past the budget"
    );
    for allocation in live.into_inner().unwrap() {
        free(&allocator, allocation);
    }
    finish(allocator, &device);
}

/// A reading that a free and a new memory object both race never lowers
/// the estimate: what the reading counts as the allocator's own stays
/// within what the driver counted. Taken as the lower of the allocator's
/// usage before and after the driver's answer, it counted the freed
/// memory (in the usage before) and the new memory (in the usage after)
/// as one, though the driver had counted neither: the estimate then fell
/// short by their size, and a within-budget request passed a budget it
/// exceeds, which the driver refused. (Times: the reader asks at 0 ms,
/// the free lands at 100 ms, the driver reads its figures at 700 ms, and
/// the new memory is made as its answer comes back.)
#[test]
fn a_reading_that_races_a_free_and_a_new_object_never_lowers_the_estimate() {
    let (allocator, device) = allocator(FakeLayout::discrete());
    let allocator = Arc::new(allocator);
    // Others use 100 of the 256 MiB budget of VRAM; the driver refuses
    // memory past the budget, as a full heap.
    device.set_heap_budget(0, 256 * MIB, 100 * MIB);
    device.cap_heap(0, 156 * MIB);
    let freed = allocator.allocate(&vram_only(64 * MIB)).unwrap();
    // Made by "another thread" once the driver has read its figures,
    // before the reading's call returns.
    let made: Arc<Mutex<Option<Allocation>>> = Arc::default();
    let hook = {
        let (allocator, made) = (Arc::clone(&allocator), Arc::clone(&made));
        move || {
            let mut made = made.lock().unwrap();
            if made.is_none() {
                let mut request =
                    buffer(64 * MIB, 256, Usage::DEVICE_LOCAL).dedicated(DedicatedPolicy::Always);
                request.requirements.memory_type_bits = 1 << 1;
                *made = Some(allocator.allocate(&request).unwrap());
            }
        }
    };
    device.slow_budget_queries(Some(Duration::from_millis(700)));
    device.set_budget_hook(Some(Box::new(hook)));
    std::thread::scope(|scope| {
        let reader = scope.spawn(|| allocator.budgets());
        // The reader waits for the driver; the free lands meanwhile.
        std::thread::sleep(Duration::from_millis(100));
        free(&allocator, freed);
        reader.join().unwrap();
    });
    device.set_budget_hook(None);
    device.slow_budget_queries(None);
    let made = made.lock().unwrap().take().expect("the hook made memory");
    // 100 (others) + 64 (made) + 100 MiB pass the 256 MiB budget.
    let refused = allocator.allocate(&vram_only(100 * MIB));
    // Refused on the exact usage: the others' and the memory made.
    assert_eq!(
        refused.map(|a| a.size()),
        Err(Error::OverBudget {
            heap: 0,
            size: 100 * MIB,
            usage: 164 * MIB,
            budget: 256 * MIB
        }),
        "usage {:?}, device {:?}",
        allocator.budgets()[0],
        device.heap_usage()
    );
    let counters = device.counters();
    assert_eq!(
        counters.allocate_calls, counters.allocations,
        "the driver refused memory past the budget"
    );
    free(&allocator, made);
    let allocator = Arc::into_inner(allocator).expect("the hook let go of the allocator");
    finish(allocator, &device);
}

/// What one worker of
/// [`threads_of_every_kind_at_the_edge_never_pass_the_budget`] asks for.
#[derive(Clone, Copy, Debug)]
enum Kind {
    /// Small buffers (256 bytes to 64 KiB) in a memory type of heap 0:
    /// remainder blocks once the room is below the ladder's 4 MiB,
    /// ladder blocks above it.
    Small(u32),
    /// Dedicated memory (64 KiB to 1 MiB), in types 1 and 4 by turns: no
    /// remainder turn.
    Dedicated,
    /// Buffers of 64 KiB to 512 KiB in a custom pool of type 4, of 1 MiB
    /// blocks: no remainder turn.
    Pool,
}

/// Threads of both memory types of heap 0 (resizable BAR) at the edge of
/// its budget, all within budget and each kept to its type: small
/// requests of each type (the heap's remainder turn orders their
/// remainder blocks), dedicated memory and a custom pool's blocks (which
/// take no remainder turn, so they are made at the same moment as a
/// remainder block sized on the room they then take), with frees and
/// trims between, on a driver that takes a while to allocate, and a
/// reader of the public figures. What a user can observe: a request
/// refused `OverBudget` (its usage plus its size past the budget, as
/// read), or placed; never memory past the budget (the driver's heap is
/// capped where the budget ends, so memory the budget check wrongly
/// passed would be a refused `vkAllocateMemory`), and figures read with
/// nothing racing them exact. A reading raced by frees may show usage
/// past the budget for a moment (printed, not asserted: bytes freed
/// during it are still counted, by design, `driver_budgets`), and a
/// remainder block may leave less than half the room it was sized on
/// when other memory is made meanwhile (its size is a guide; the budget
/// check decides): neither is memory past the budget.
#[test]
fn threads_of_every_kind_at_the_edge_never_pass_the_budget() {
    let test = "threads_of_every_kind_at_the_edge_never_pass_the_budget";
    let seed = Rng::seed(test);
    let steps = if cfg!(miri) { 10 } else { 250 };
    let (allocator, device) = allocator(FakeLayout::rebar());
    // 6 MiB left: a ladder block of 4 MiB at most, then remainder
    // blocks; frees and trims give room back.
    let (budget, others) = (100 * MIB, 94 * MIB);
    device.set_heap_budget(0, budget, others);
    device.cap_heap(0, budget - others);
    let pool = allocator
        .create_pool(&PoolDesc::new(4).block_size(MIB))
        .unwrap();
    device.slow_allocations(Some(Duration::from_micros(200)));
    let kinds = [Kind::Small(1), Kind::Small(4), Kind::Dedicated, Kind::Pool];
    let done = AtomicBool::new(false);
    let placed = std::sync::atomic::AtomicU64::new(0);
    let refused = std::sync::atomic::AtomicU64::new(0);
    let live: Vec<Vec<Allocation>> = std::thread::scope(|scope| {
        let (allocator, done, placed, refused) = (&allocator, &done, &placed, &refused);
        let reader = scope.spawn(move || {
            // The largest usage past the budget the public figures showed:
            // a reading raced by frees (or new memory) counts those bytes
            // as still in use (`driver_budgets` never takes less as ours
            // than the driver may have counted), so it may show more than
            // the heap ever held.
            let (mut readings, mut past) = (0u64, 0u64);
            while !done.load(Ordering::Relaxed) {
                let figures = allocator.budgets()[0];
                past = past.max(figures.usage.saturating_sub(figures.budget));
                readings += 1;
                std::thread::yield_now();
            }
            (readings, past)
        });
        let _stop_reader = StopOnDrop(done);
        let workers: Vec<_> = kinds
            .into_iter()
            .enumerate()
            .map(|(index, kind)| {
                scope.spawn(move || {
                    let mut rng = Rng(seed ^ (index as u64 + 1).wrapping_mul(0x9e37_79b9));
                    let mut live: Vec<Allocation> = Vec::new();
                    for step in 0..steps {
                        match rng.below(10) {
                            0..=4 => {
                                let (size, memory_type) = match kind {
                                    Kind::Small(memory_type) => {
                                        (256 << rng.below(9), memory_type)
                                    }
                                    Kind::Dedicated => {
                                        ((64 + rng.below(961)) << 10, [1, 4][step % 2])
                                    }
                                    Kind::Pool => ((64 << 10) << rng.below(4), 4),
                                };
                                let requirements = vk::MemoryRequirements {
                                    size,
                                    alignment: 256,
                                    memory_type_bits: 1 << memory_type,
                                };
                                let mut desc = AllocationDesc::new(Usage::DEVICE_LOCAL).within_budget();
                                if let Kind::Pool = kind {
                                    desc = desc.pool(pool);
                                }
                                let mut request =
                                    Request::with_desc(requirements, ResourceKind::Buffer, desc);
                                if let Kind::Dedicated = kind {
                                    request = request.dedicated(DedicatedPolicy::Always);
                                }
                                match allocator.allocate(&request) {
                                    Ok(allocation) => {
                                        assert_eq!(allocation.memory_type(), memory_type);
                                        placed.fetch_add(1, Ordering::Relaxed);
                                        live.push(allocation);
                                    }
                                    Err(Error::OverBudget {
                                        heap,
                                        size: asked,
                                        usage,
                                        budget: read,
                                    }) => {
                                        assert!(
                                            heap == 0 && read == budget && usage + asked > read,
                                            "{test}: seed {seed}: {kind:?}, {size} bytes: OverBudget {{ heap: {heap}, size: {asked}, usage: {usage}, budget: {read} }}"
                                        );
                                        refused.fetch_add(1, Ordering::Relaxed);
                                    }
                                    Err(error) => {
                                        panic!("{test}: seed {seed}: {kind:?}, {size} bytes: {error:?}")
                                    }
                                }
                            }
                            5..=8 if !live.is_empty() => {
                                let allocation =
                                    live.swap_remove(rng.below(live.len() as u64) as usize);
                                free(allocator, allocation);
                            }
                            _ => {
                                allocator.trim();
                            }
                        }
                    }
                    live
                })
            })
            .collect();
        let live = workers.into_iter().map(|w| w.join().unwrap()).collect();
        done.store(true, Ordering::Relaxed);
        let (readings, past) = reader.join().unwrap();
        println!(
            "{test}: seed {seed}: {readings} readings of the figures, at most {past} bytes past the budget in them"
        );
        live
    });
    device.slow_allocations(None);
    let counters = device.counters();
    println!(
        "{test}: seed {seed}: {} placed, {} refused over budget, {} vkAllocateMemory calls, {} refused by the driver",
        placed.into_inner(),
        refused.into_inner(),
        counters.allocate_calls,
        counters.allocate_calls - counters.allocations
    );
    assert_eq!(
        counters.allocate_calls, counters.allocations,
        "{test}: seed {seed}: the device refused memory past the budget"
    );
    // Read with nothing racing: exact, within the budget.
    let figures = allocator.budgets()[0];
    assert_eq!(
        figures.usage,
        others + device.heap_usage()[0],
        "{test}: seed {seed}"
    );
    assert!(figures.usage <= budget, "{test}: seed {seed}: {figures:?}");
    for allocation in live.into_iter().flatten() {
        free(&allocator, allocation);
    }
    allocator.destroy_pool(pool).unwrap();
    finish(allocator, &device);
}
