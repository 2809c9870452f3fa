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
use vk_suballoc::{Allocation, DedicatedPolicy, Error, Request, ResourceKind, Usage};

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
