//! `Allocator::set_memory_callback`: every memory object made or freed is
//! reported once, each `Allocated` paired with one `Freed`, the memory
//! that exists when a callback is set or replaced included.

use std::collections::HashMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Arc, Mutex};

use ash::vk::Handle;
use vk_suballoc::device::fake::{FakeDevice, FakeLayout};
use vk_suballoc::{
    AllocationDesc, Config, DedicatedPolicy, MemoryEvent, MemoryEventKind, PoolDesc, Request,
    ResourceKind, Usage,
};

use super::{
    allocator_with, assert_panicked_with, buffer, finish, free, requirements, FakeAllocator,
};

#[path = "memory_events/calls_into_the_allocator.rs"]
mod calls_into_the_allocator;

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
