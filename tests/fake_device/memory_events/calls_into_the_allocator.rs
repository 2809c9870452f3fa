//! Memory callbacks (and loggers) that call into an allocator: into the
//! one running them, which debug builds catch rather than deadlock, or into
//! another, or into another memory type of a heap at its edge, which go through.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Arc, Mutex};

use vk_suballoc::device::fake::FakeLayout;
use vk_suballoc::{Allocation, Config, Error, MemoryEventKind, Usage};

#[cfg(debug_assertions)]
use super::super::assert_panicked_with;
use super::super::budget_edge::remainder_turn::{in_type, two_mib_left_in_heap_0};
use super::super::{allocator_with, buffer, free, panic_message, FakeAllocator};

/// The panic of debug builds' lock check when a memory callback calls
/// into the allocator running it.
#[cfg(debug_assertions)]
const REENTRY_PANIC: &str = "vk-suballoc: this thread already holds this lock of the allocator, \
    which would deadlock: a memory callback (Allocator::set_memory_callback), or a logger given a \
    line logged under the lock, called into the allocator running it";

/// A callback that calls back into the allocator (which its docs forbid:
/// it runs under the lock of the memory's pool) panics with a message that
/// says so, in debug builds, where it deadlocked silently; the allocator
/// carries on afterwards. Release builds check nothing (the test would
/// hang there).
#[cfg(debug_assertions)]
#[test]
fn a_callback_calling_into_the_allocator_panics_instead_of_deadlocking() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::{OnceLock, Weak};

    use super::super::FakeAllocator;

    let (mut allocator, device) = allocator_with(FakeLayout::discrete(), Config::default());
    let shared: Arc<OnceLock<Weak<FakeAllocator>>> = Arc::default();
    let reenter = Arc::new(AtomicBool::new(true));
    let (target, flag) = (Arc::clone(&shared), Arc::clone(&reenter));
    allocator.set_memory_callback(move |_| {
        if flag.load(Ordering::Relaxed) {
            if let Some(allocator) = target.get().and_then(Weak::upgrade) {
                let _ = allocator.stats();
            }
        }
    });
    let allocator = Arc::new(allocator);
    shared.set(Arc::downgrade(&allocator)).unwrap();

    let request = buffer(1 << 20, 256, Usage::DEVICE_LOCAL);
    let panic = catch_unwind(AssertUnwindSafe(|| allocator.allocate(&request)));
    let what = "the callback's call into the allocator panics";
    assert_panicked_with(panic, REENTRY_PANIC, what);
    // The block made for the request was freed again.
    assert_eq!(device.live_allocations().len(), 0);
    assert_eq!(allocator.stats().reserved_bytes(), 0);

    // The thread is no longer marked as inside the callback, and the
    // allocator works.
    reenter.store(false, Ordering::Relaxed);
    let allocation = allocator.allocate(&request).unwrap();
    assert_eq!(device.live_allocations().len(), 1);
    free(&allocator, allocation);
}

/// The same on `end_frame`'s release of aged empty blocks, which locks
/// each default pool with `try_lock` (skipping one another thread holds):
/// a callback calling into the allocator on that release panics in debug
/// builds too, where it deadlocked (the lock taken there was not
/// recorded). Run on a thread of its own, so that a deadlock fails the
/// test rather than hang it.
#[cfg(debug_assertions)]
#[test]
fn a_callback_calling_into_the_allocator_on_an_aged_release_panics_instead_of_deadlocking() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::{OnceLock, Weak};

    use super::super::FakeAllocator;

    let config = Config {
        large_heap_block_size: 1 << 20,
        small_buffer_limit: 0,
        empty_block_reserve: f64::INFINITY,
        empty_block_frames: 1,
        ..Config::default()
    };
    let (mut allocator, device) = allocator_with(FakeLayout::discrete(), config);
    let shared: Arc<OnceLock<Weak<FakeAllocator>>> = Arc::default();
    let reenter = Arc::new(AtomicBool::new(false));
    let (target, flag) = (Arc::clone(&shared), Arc::clone(&reenter));
    allocator.set_memory_callback(move |event| {
        if event.kind == MemoryEventKind::Freed && flag.load(Ordering::Relaxed) {
            if let Some(allocator) = target.get().and_then(Weak::upgrade) {
                let _ = allocator.stats();
            }
        }
    });
    let allocator = Arc::new(allocator);
    shared.set(Arc::downgrade(&allocator)).unwrap();

    // Blocks of one allocation each (two 512 KiB ones fill a 1 MiB
    // block); all but one empty, and kept while that one lives.
    let request = buffer(512 << 10, 256, Usage::DEVICE_LOCAL);
    let mut made: Vec<_> = (0..6)
        .map(|_| allocator.allocate(&request).unwrap())
        .collect();
    let kept = made.remove(0);
    for allocation in made {
        free(&allocator, allocation);
    }
    let memory_type = kept.memory_type() as usize;
    assert!(allocator.stats().memory_types[memory_type].empty_blocks >= 2);

    reenter.store(true, Ordering::Relaxed);
    let (ending, fences) = (Arc::clone(&allocator), device.clone());
    let message = panic_message_on_a_thread(
        move || {
            for _ in 0..3 {
                // SAFETY: fake fences, signalled by no GPU work.
                unsafe { ending.end_frame(fences.create_fence()) }.unwrap();
            }
        },
        "end_frame deadlocked: the callback's call into the allocator was not caught",
    );
    assert_eq!(message, REENTRY_PANIC);

    // The allocator works on: the empty blocks but the largest go as
    // frames end.
    reenter.store(false, Ordering::Relaxed);
    for _ in 0..3 {
        // SAFETY: as above.
        unsafe { allocator.end_frame(device.create_fence()) }.unwrap();
    }
    assert_eq!(allocator.stats().memory_types[memory_type].empty_blocks, 1);
    free(&allocator, kept);
    let allocator = Arc::try_unwrap(allocator).unwrap();
    drop(allocator);
    device.assert_clean();
}

/// A remainder block's `Allocated` event runs once the block is counted
/// in its heap's usage, and the heap's remainder turn is released by
/// then, as its turn is (the allocator module's "Locks"): a callback that
/// calls into the allocator for another memory type of the heap at its
/// edge (the resizable-BAR layout's types 1 and 4 share heap 0, with
/// 2 MiB of its budget left) meets no lock its thread holds here, and
/// goes through, in every build. (Not a licence: `set_memory_callback`
/// still forbids calls into the allocator. The callback holds its own
/// pool's lock, so two threads doing this could wait for each other's
/// pools, and a type short of memory releases kept blocks of the heap's
/// other pools, this thread's own among them.) The other type's remainder block is sized on the room the first one left:
/// 1 MiB for type 1, then 512 KiB for type 4, and 512 KiB stay. Held over
/// the callback, the turn was met there: debug builds panicked (the lock
/// checker), release builds deadlocked. Run on a thread of its own, so
/// that a deadlock fails the test rather than hang it.
#[test]
fn a_callback_of_a_remainder_block_runs_with_the_heaps_remainder_turn_released() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::{OnceLock, Weak};

    const MIB: u64 = 1 << 20;
    // 2 MiB of heap 0's budget left: below the ladder's smallest block,
    // so a 256-byte request takes a remainder block.
    let (mut allocator, device) = two_mib_left_in_heap_0();
    let shared: Arc<OnceLock<Weak<FakeAllocator>>> = Arc::default();
    let reenter = Arc::new(AtomicBool::new(true));
    let inner: Arc<Mutex<Option<Result<Allocation, Error>>>> = Arc::default();
    let (target, flag, made) = (
        Arc::clone(&shared),
        Arc::clone(&reenter),
        Arc::clone(&inner),
    );
    allocator.set_memory_callback(move |event| {
        if event.kind == MemoryEventKind::Allocated
            && event.memory_type == 1
            && flag.swap(false, Ordering::Relaxed)
        {
            if let Some(allocator) = target.get().and_then(Weak::upgrade) {
                let allocation = allocator.allocate(&in_type(4, 256));
                *made.lock().unwrap() = Some(allocation);
            }
        }
    });
    let allocator = Arc::new(allocator);
    shared.set(Arc::downgrade(&allocator)).unwrap();

    let at_edge = Arc::clone(&allocator);
    let (sender, receiver) = std::sync::mpsc::channel();
    let thread = std::thread::spawn(move || {
        let outcome = catch_unwind(AssertUnwindSafe(|| at_edge.allocate(&in_type(1, 256))));
        let _ = sender.send(outcome.map_err(|panic| panic_message(&*panic).to_owned()));
    });
    let outer = receiver
        .recv_timeout(std::time::Duration::from_secs(20))
        .expect("allocate deadlocked: the callback's call met the heap's remainder turn")
        .unwrap_or_else(|message| {
            panic!("the callback's call into another memory type of the heap panicked: {message}")
        })
        .unwrap();
    thread.join().unwrap();
    let inner = inner
        .lock()
        .unwrap()
        .take()
        .expect("the callback ran")
        .unwrap();
    assert_eq!((outer.memory_type(), inner.memory_type()), (1, 4));
    let mut sizes: Vec<u64> = device.live_allocations().iter().map(|m| m.size).collect();
    sizes.sort_unstable();
    assert_eq!(
        sizes,
        [MIB / 2, MIB],
        "type 4's block sized on the room type 1's left"
    );
    let figures = allocator.budgets()[0];
    assert_eq!(figures.budget - figures.usage, MIB / 2);
    free(&allocator, outer);
    free(&allocator, inner);
    let allocator = Arc::try_unwrap(allocator).unwrap();
    drop(allocator);
    device.assert_clean();
}

/// The remainder turn is still taken through the debug lock check: a
/// logger given the remainder block's debug line ("allocating 1048576
/// bytes of memory type 1", logged under the turn) that calls into the
/// allocator for memory type 4, of the same heap, meets no pool lock of
/// its own but the turn its thread holds, and debug builds panic there
/// rather than deadlock. (The memory callback, which ran under the turn
/// and met it so, no longer does:
/// [`a_callback_of_a_remainder_block_runs_with_the_heaps_remainder_turn_released`].)
#[cfg(debug_assertions)]
#[test]
fn a_logger_calling_into_the_allocator_under_a_remainder_turn_panics_instead_of_deadlocking() {
    // 2 MiB of heap 0's budget left: a 256-byte request takes a 1 MiB
    // remainder block.
    let (allocator, device) = two_mib_left_in_heap_0();
    let allocator = Arc::new(allocator);
    let at_edge = Arc::clone(&allocator);
    let message = panic_message_on_a_thread(
        move || {
            let reentrant = Arc::clone(&at_edge);
            super::super::leak_log::on_line_with(
                "allocating 1048576 bytes of memory type 1 (",
                move || {
                    let _ = reentrant.allocate(&in_type(4, 256));
                },
            );
            let _ = at_edge.allocate(&in_type(1, 256));
        },
        "allocate deadlocked: the logger's call met the heap's remainder turn, unseen",
    );
    assert_eq!(message, REENTRY_PANIC);

    // Nothing was made, and the allocator works on.
    assert_eq!(device.live_allocations().len(), 0);
    let first = allocator.allocate(&in_type(1, 256)).unwrap();
    let second = allocator.allocate(&in_type(4, 256)).unwrap();
    assert_eq!((first.memory_type(), second.memory_type()), (1, 4));
    free(&allocator, first);
    free(&allocator, second);
    let allocator = Arc::try_unwrap(allocator).unwrap();
    drop(allocator);
    device.assert_clean();
}

/// Debug builds panic only on a lock the thread holds already: a callback
/// that reads another allocator's figures (one per device, say) meets no
/// lock of its own allocator and goes through, in every build.
#[test]
fn a_callback_may_call_into_another_allocator() {
    let (mut allocator, device) = allocator_with(FakeLayout::discrete(), Config::default());
    let (other, other_device) = allocator_with(FakeLayout::integrated(), Config::default());
    let other = Arc::new(other);
    let seen = Arc::new(Mutex::new(Vec::new()));
    let (reader, sink) = (Arc::clone(&other), Arc::clone(&seen));
    allocator.set_memory_callback(move |event| {
        let reserved = reader.stats().reserved_bytes();
        sink.lock().unwrap().push((event.kind, reserved));
    });
    let held = other
        .allocate(&buffer(4096, 256, Usage::DEVICE_LOCAL))
        .unwrap();
    let reserved = other.stats().reserved_bytes();
    assert!(reserved > 0);
    let allocation = allocator
        .allocate(&buffer(1 << 20, 256, Usage::DEVICE_LOCAL))
        .unwrap();
    free(&allocator, allocation);
    drop(allocator);
    assert_eq!(device.live_allocations().len(), 0);
    let seen = seen.lock().unwrap().clone();
    assert_eq!(
        seen,
        [
            (MemoryEventKind::Allocated, reserved),
            (MemoryEventKind::Freed, reserved)
        ]
    );
    free(&other, held);
    drop(other);
    assert_eq!(other_device.live_allocations().len(), 0);
}

/// The message of the panic `call` ends in, run on a thread of its own;
/// fails with `deadlocked` unless the thread answers within 20 seconds
/// (it is joined only once it has: a deadlocked thread never returns), and
/// if `call` returns.
#[cfg(debug_assertions)]
fn panic_message_on_a_thread(call: impl FnOnce() + Send + 'static, deadlocked: &str) -> String {
    let (sender, receiver) = std::sync::mpsc::channel();
    let thread = std::thread::spawn(move || {
        let outcome = catch_unwind(AssertUnwindSafe(call));
        let message = outcome.err().map(|panic| panic_message(&*panic).to_owned());
        let _ = sender.send(message);
    });
    let message = receiver
        .recv_timeout(std::time::Duration::from_secs(20))
        .expect(deadlocked)
        .expect("the callback's call into the allocator panics");
    thread.join().unwrap();
    message
}
