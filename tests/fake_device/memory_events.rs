//! `Allocator::set_memory_callback`: every memory object made or freed is
//! reported once, each `Allocated` paired with one `Freed`, the memory
//! that exists when a callback is set or replaced included.

use std::collections::HashMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Arc, Mutex};

use ash::vk::Handle;
use vk_suballoc::device::fake::{FakeDevice, FakeLayout};
use vk_suballoc::{
    Allocation, AllocationDesc, Config, DedicatedPolicy, Error, MemoryEvent, MemoryEventKind,
    PoolDesc, Request, ResourceKind, Usage,
};

use super::budget_edge::remainder_turn::{in_type, two_mib_left_in_heap_0};
use super::{
    allocator_with, assert_panicked_with, buffer, finish, free, requirements, FakeAllocator,
};

/// The panic of debug builds' lock check when a memory callback calls
/// into the allocator running it.
#[cfg(debug_assertions)]
const REENTRY_PANIC: &str = "vk-suballoc: this thread already holds this lock of the allocator, \
    which would deadlock: a memory callback (Allocator::set_memory_callback), or a logger given a \
    line logged under the lock, called into the allocator running it";

/// The memory objects the events say are live, with type, size and name.
type Live = Arc<Mutex<HashMap<u64, (u32, u64, Option<String>)>>>;

fn record(live: &Live, event: &MemoryEvent<'_>) {
    let mut live = live.lock().unwrap();
    let handle = event.memory.as_raw();
    match event.kind {
        MemoryEventKind::Allocated => {
            let old = live.insert(
                handle,
                (event.memory_type, event.size, event.name.map(str::to_owned)),
            );
            assert!(old.is_none(), "{handle:#x} reported twice");
        }
        MemoryEventKind::Freed => {
            let (memory_type, size, _) = live.remove(&handle).expect("freed before made");
            assert_eq!((memory_type, size), (event.memory_type, event.size));
        }
    }
}

#[test]
fn memory_events_pair_up_and_match_the_device() {
    let (mut allocator, device) = allocator_with(FakeLayout::discrete(), Config::default());
    let live: Live = Arc::default();
    let sink = Arc::clone(&live);
    allocator.set_memory_callback(move |event| record(&sink, event));
    let matches_device = |what: &str| {
        let mut reported: Vec<_> = live.lock().unwrap().keys().copied().collect();
        let mut on_device: Vec<_> = device
            .live_allocations()
            .iter()
            .map(|m| m.memory.as_raw())
            .collect();
        reported.sort_unstable();
        on_device.sort_unstable();
        assert_eq!(reported, on_device, "{what}");
    };

    // Blocks, run slots (no new memory), dedicated memory with its name.
    let small = allocator.allocate(&buffer(256, 4, Usage::UPLOAD)).unwrap();
    let block = allocator
        .allocate(&buffer(1 << 20, 256, Usage::DEVICE_LOCAL))
        .unwrap();
    let dedicated = allocator
        .allocate(
            &buffer(4096, 256, Usage::DEVICE_LOCAL)
                .dedicated(DedicatedPolicy::Always)
                .name("shadow map"),
        )
        .unwrap();
    matches_device("allocations");
    assert_eq!(
        live.lock().unwrap()[&dedicated.memory().as_raw()],
        (1, 4096, Some("shadow map".to_owned()))
    );
    free(&allocator, dedicated);
    matches_device("dedicated memory freed");

    // A pool's min_blocks at creation, and its blocks at destruction.
    let pool = streaming_pool(&allocator, 2);
    matches_device("pool made");
    allocator.destroy_pool(pool).unwrap();
    matches_device("pool destroyed");

    // A mapping that fails frees the new memory at once (and the request
    // goes on to another memory type).
    device.fail_map(1);
    let frees = device.counters().frees;
    let elsewhere = allocator
        .allocate(&buffer(64 << 20, 256, Usage::READBACK))
        .unwrap();
    assert_eq!(device.counters().frees, frees + 1);
    matches_device("failed map");
    free(&allocator, elsewhere);

    // trim releases the kept empty block; dropping releases the rest.
    free(&allocator, block);
    allocator.trim();
    matches_device("trimmed");
    assert!(!live.lock().unwrap().is_empty());
    // Dropped with an allocation live: the allocator frees its memory.
    let _ = small;
    drop(allocator);
    assert!(
        live.lock().unwrap().is_empty(),
        "{:?}",
        live.lock().unwrap()
    );
}

/// The device's memory objects, as [`Live`] holds them: memory type,
/// size and debug name by handle.
fn on_device(device: &FakeDevice) -> HashMap<u64, (u32, u64, Option<String>)> {
    device
        .live_allocations()
        .into_iter()
        .map(|m| (m.memory.as_raw(), (m.memory_type, m.size, m.name)))
        .collect()
}

/// A callback recording into a new [`Live`], which it returns.
fn recorder() -> (Live, impl Fn(&MemoryEvent<'_>) + Send + Sync + 'static) {
    let live: Live = Arc::default();
    let sink = Arc::clone(&live);
    (live, move |event: &MemoryEvent<'_>| record(&sink, event))
}

/// A custom pool "streaming" of device-local type 1, with `min_blocks`
/// blocks of 1 MiB made with it.
fn streaming_pool(allocator: &FakeAllocator, min_blocks: u32) -> vk_suballoc::Pool {
    allocator
        .create_pool(
            &PoolDesc::new(1)
                .block_size(1 << 20)
                .min_blocks(min_blocks)
                .name("streaming"),
        )
        .unwrap()
}

/// An allocator holding memory of every kind: a block with a run slot
/// (upload), a device-local block, dedicated memory renamed since it was
/// made, and a custom pool's kept block and dedicated memory. The
/// allocations are returned to be freed, with the pool.
fn holding_memory(allocator: &FakeAllocator) -> (Vec<vk_suballoc::Allocation>, vk_suballoc::Pool) {
    let pool = streaming_pool(allocator, 1);
    let in_pool = Request::with_desc(
        requirements(4096, 256),
        ResourceKind::Buffer,
        AllocationDesc::new(Usage::DEVICE_LOCAL).pool(pool),
    )
    .dedicated(DedicatedPolicy::Always)
    .driver_dedicated(vk_suballoc::DedicatedHint {
        required: false,
        preferred: true,
    });
    let requests = [
        buffer(256, 4, Usage::UPLOAD),
        buffer(1 << 20, 256, Usage::DEVICE_LOCAL),
        buffer(4096, 256, Usage::DEVICE_LOCAL)
            .dedicated(DedicatedPolicy::Always)
            .name("shadow map"),
        in_pool,
    ];
    let made = allocator.allocate_many(&requests).unwrap();
    allocator.set_name(&made[2], Some("cascade 0")).unwrap();
    (made, pool)
}

/// Makes and frees more memory, frees the allocations and the pool of
/// [`holding_memory`], and drops the allocator: the events `live` records
/// follow the device's memory throughout, and balance at the end.
fn carries_on(
    allocator: FakeAllocator,
    device: &FakeDevice,
    (made, pool): (Vec<vk_suballoc::Allocation>, vk_suballoc::Pool),
    live: &Live,
) {
    let more = allocator
        .allocate(&buffer(64 << 20, 256, Usage::READBACK))
        .unwrap();
    assert_eq!(*live.lock().unwrap(), on_device(device));
    free(&allocator, more);
    for allocation in made {
        free(&allocator, allocation);
    }
    allocator.destroy_pool(pool).unwrap();
    allocator.trim();
    assert_eq!(*live.lock().unwrap(), on_device(device));
    finish(allocator, device);
    assert!(live.lock().unwrap().is_empty());
}

/// A callback set while the allocator holds memory hears of each object
/// first, as `Allocated` with its memory type, size and debug name as the
/// device has them, so that every `Freed` it hears later balances one. It
/// heard nothing of that memory before, and its first `Freed` was of
/// memory it had never seen made.
#[test]
fn a_callback_set_late_hears_of_the_memory_that_exists() {
    let (mut allocator, device) = allocator_with(FakeLayout::discrete(), Config::default());
    let (made, pool) = holding_memory(&allocator);
    assert_eq!(device.live_allocations().len(), 5);
    let (live, callback) = recorder();
    allocator.set_memory_callback(callback);
    assert_eq!(*live.lock().unwrap(), on_device(&device));
    let names: Vec<_> = live.lock().unwrap().values().map(|v| v.2.clone()).collect();
    assert!(names.contains(&Some("cascade 0".to_owned())), "{names:?}");

    carries_on(allocator, &device, (made, pool), &live);
}

/// A callback replaced hears each memory object that exists freed (the
/// memory stays), then nothing more; the new one hears each made.
#[test]
fn a_replaced_callback_hears_the_memory_freed() {
    let (mut allocator, device) = allocator_with(FakeLayout::discrete(), Config::default());
    let (first, callback) = recorder();
    allocator.set_memory_callback(callback);
    let (made, pool) = holding_memory(&allocator);
    // The dedicated memory renamed since it was made: the device's name
    // changed, not the one the callback heard.
    let unnamed = |live: HashMap<u64, (u32, u64, Option<String>)>| {
        let mut live: Vec<_> = live
            .into_iter()
            .map(|(m, (t, size, _))| (m, t, size))
            .collect();
        live.sort_unstable();
        live
    };
    assert_eq!(
        unnamed(first.lock().unwrap().clone()),
        unnamed(on_device(&device))
    );
    let frees = device.counters().frees;

    let (second, callback) = recorder();
    allocator.set_memory_callback(callback);
    assert!(first.lock().unwrap().is_empty());
    assert_eq!(*second.lock().unwrap(), on_device(&device));
    assert_eq!(device.counters().frees, frees, "no memory freed");

    // The first hears no more: a `Freed` would panic in its `record`, an
    // `Allocated` would show.
    carries_on(allocator, &device, (made, pool), &second);
    assert!(first.lock().unwrap().is_empty());
}

/// A callback that panics in the replay (on every event here), or a
/// replaced one panicking on its `Freed` events: the panic reaches the
/// caller of `set_memory_callback` once the replay is over; each callback
/// heard of every object, the new one is set, and the allocator carries
/// on, its events balanced.
#[test]
fn a_callback_panicking_in_the_replay_leaves_the_allocator_usable() {
    let (mut allocator, device) = allocator_with(FakeLayout::discrete(), Config::default());
    let (made, pool) = holding_memory(&allocator);
    let (first, record_first) = recorder();
    let set = catch_unwind(AssertUnwindSafe(|| {
        allocator.set_memory_callback(move |event| {
            record_first(event);
            panic!("the callback panics on {:?}", event.kind);
        });
    }));
    let replay = "the callback panics on Allocated";
    assert_panicked_with(set, replay, "the replay's first panic goes on");
    assert_eq!(*first.lock().unwrap(), on_device(&device));

    let (second, callback) = recorder();
    let set = catch_unwind(AssertUnwindSafe(|| allocator.set_memory_callback(callback)));
    let replaced = "the callback panics on Freed";
    assert_panicked_with(set, replaced, "the replaced callback's first panic goes on");
    assert!(first.lock().unwrap().is_empty());
    assert_eq!(*second.lock().unwrap(), on_device(&device));

    carries_on(allocator, &device, (made, pool), &second);
}

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

    use super::FakeAllocator;

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

    use super::FakeAllocator;

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
        let _ = sender.send(outcome.map_err(|panic| super::panic_message(&*panic).to_owned()));
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
            super::leak_log::on_line_with(
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

/// Each `Allocated` event names the memory object as its debug name does
/// (`VK_EXT_debug_utils`, which the device records): dedicated memory by
/// its request's name, or without one by the name the allocator gives it,
/// in a custom pool with the pool's name, as blocks are. A profiler that
/// labels memory by the event's name then labels every object, not only
/// the named requests' (the docs said the request's name, which an
/// unnamed request does not have).
#[test]
fn events_name_memory_as_its_debug_name_does() {
    let (mut allocator, device) = allocator_with(FakeLayout::discrete(), Config::default());
    let live: Live = Arc::default();
    let sink = Arc::clone(&live);
    allocator.set_memory_callback(move |event| record(&sink, event));
    let pool = allocator
        .create_pool(&PoolDesc::new(1).name("streaming").min_blocks(1))
        .unwrap();
    let dedicated = buffer(4096, 256, Usage::DEVICE_LOCAL).dedicated(DedicatedPolicy::Always);
    let mut in_pool = dedicated;
    in_pool.desc = in_pool.desc.pool(pool);
    let allocations = [
        allocator.allocate(&dedicated).unwrap(),
        allocator.allocate(&dedicated.name("shadow map")).unwrap(),
        allocator.allocate(&in_pool).unwrap(),
        allocator
            .allocate(&buffer(1 << 20, 256, Usage::DEVICE_LOCAL))
            .unwrap(),
    ];
    let on_device = device.live_allocations();
    assert_eq!(on_device.len(), 5, "the pool's block, 3 dedicated, 1 block");
    let told = live.lock().unwrap().clone();
    for memory in &on_device {
        let (_, _, name) = &told[&memory.memory.as_raw()];
        assert!(name.is_some(), "{memory:?} made without a name");
        assert_eq!(name, &memory.name, "{memory:?}");
    }
    let names: Vec<&str> = (on_device.iter())
        .filter_map(|m| m.name.as_deref())
        .collect();
    for expected in [
        "vk-suballoc dedicated 1/",
        "shadow map",
        "vk-suballoc pool \"streaming\" dedicated 1/",
        "vk-suballoc pool \"streaming\" block 1/",
        "vk-suballoc block 1/",
    ] {
        assert!(
            names.iter().any(|n| n.starts_with(expected)),
            "{expected} in {names:?}"
        );
    }
    for allocation in allocations {
        free(&allocator, allocation);
    }
    allocator.destroy_pool(pool).unwrap();
    drop(allocator);
    assert!(live.lock().unwrap().is_empty());
    device.assert_clean();
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
        let message = outcome
            .err()
            .map(|panic| super::panic_message(&*panic).to_owned());
        let _ = sender.send(message);
    });
    let message = receiver
        .recv_timeout(std::time::Duration::from_secs(20))
        .expect(deadlocked)
        .expect("the callback's call into the allocator panics");
    thread.join().unwrap();
    message
}
