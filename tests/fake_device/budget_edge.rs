//! Small requests at a heap's budget edge: when the room a heap has left
//! under its budget (or the driver's, or a `Config::heap_size_limits`
//! entry's) is below the smallest block of the ladder (1/64 of the
//! preferred size, `block_size.rs`), each small request that no existing
//! block holds used to take dedicated memory of its own size: a
//! `vkAllocateMemory` each, one of `maxMemoryAllocationCount` each (VMA's
//! issue #545: thousands of small dedicated allocations, then
//! `VK_ERROR_TOO_MANY_OBJECTS`). The last megabytes go to a few blocks
//! instead, each leaving at least half the room it found, so that a later,
//! larger request still finds most of it.

use std::sync::atomic::{AtomicUsize, Ordering};

use vk_suballoc::device::fake::{FakeDevice, FakeLayout};
use vk_suballoc::report::RangeKind;
use vk_suballoc::{
    Allocation, AllocationDesc, Config, DedicatedPolicy, DefragmentationLimits, Error, PoolDesc,
    Request, ResourceKind, Usage,
};

use super::defragment::movables;
use super::frames::{end_frame, free_all_and_finish};
use super::seeded_rng::Rng;
use super::{allocator_with, buffer, finish, free, requirements, FakeAllocator};

const KIB: u64 = 1 << 10;
const MIB: u64 = 1 << 20;
const GIB: u64 = 1 << 30;

/// What `count` small requests did at a heap's edge.
#[derive(Debug)]
struct Edge {
    /// Memory objects of the heap the requests were meant for.
    objects: usize,
    /// `vkAllocateMemory` calls the requests made, refused ones included.
    calls: u64,
    /// Requests placed in the memory type meant for them (the others went
    /// on to the next type).
    served: usize,
    /// Whether a later request of `later` bytes was placed there too.
    later_served: bool,
}

/// An allocator over `layout` (with `config`) whose heap 0 is brought to
/// its edge by `edge`, then `count` requests `small` and one `later`:
/// what they did, counted on memory type `memory_type` (heap 0). Frees
/// everything and checks the device clean.
fn at_the_edge(
    layout: FakeLayout,
    config: Config,
    edge: impl FnOnce(&FakeAllocator, &FakeDevice) -> Vec<Allocation>,
    memory_type: u32,
    small: &Request<'_>,
    count: usize,
    later: &Request<'_>,
) -> Edge {
    let (allocator, device) = allocator_with(layout, config);
    let mut live = edge(&allocator, &device);
    let objects_before = heap_objects(&device);
    let calls_before = device.counters().allocate_calls;
    let mut served = 0;
    for i in 0..count {
        let allocation = allocator
            .allocate(small)
            .unwrap_or_else(|error| panic!("request {i}: {error:?}"));
        served += usize::from(allocation.memory_type() == memory_type);
        live.push(allocation);
    }
    let objects = heap_objects(&device) - objects_before;
    let calls = device.counters().allocate_calls - calls_before;
    let later = allocator.allocate(later).unwrap();
    let later_served = later.memory_type() == memory_type;
    live.push(later);
    free_all_and_finish(allocator, &device, live);
    Edge {
        objects,
        calls,
        served,
        later_served,
    }
}

/// How many memory objects of heap 0 are live, and the largest of them,
/// those of `except` bytes left out.
fn memory_objects(device: &FakeDevice, except: u64) -> (usize, u64) {
    let live = device.live_allocations();
    let sizes = live.iter().filter(|m| m.heap == 0 && m.size != except);
    sizes.fold((0, 0), |(count, largest), m| {
        (count + 1, largest.max(m.size))
    })
}

/// Live memory objects of heap 0.
fn heap_objects(device: &FakeDevice) -> usize {
    let live = device.live_allocations();
    live.iter().filter(|m| m.heap == 0).count()
}

/// The sizes of heap 0's memory objects, smallest first, and the room its
/// budget leaves, as `budgets()` gives it.
fn heap_blocks_and_room(allocator: &FakeAllocator, device: &FakeDevice) -> (Vec<u64>, u64) {
    let mut sizes: Vec<u64> = device
        .live_allocations()
        .iter()
        .filter(|m| m.heap == 0)
        .map(|m| m.size)
        .collect();
    sizes.sort_unstable();
    let figures = allocator.budgets()[0];
    (sizes, figures.budget.saturating_sub(figures.usage))
}

/// A device-local buffer of `size` bytes, aligned to 256.
fn device_local(size: u64) -> Request<'static> {
    buffer(size, 256, Usage::DEVICE_LOCAL)
}

/// 3.5 MiB of budget left in the discrete layout's VRAM (heap 0 of 8 GiB,
/// whose ladder of blocks ends at 4 MiB).
fn three_and_a_half_mib_of_budget(_: &FakeAllocator, device: &FakeDevice) -> Vec<Allocation> {
    device.set_heap_budget(0, 100 * MIB, 100 * MIB - 3 * MIB - 512 * KIB);
    Vec::new()
}

/// The discrete layout's VRAM (8 GiB, blocks of 256 MiB, the smallest of
/// the ladder 4 MiB) with 3.5 MiB left under the driver's budget: 2000
/// uniform buffers of 256 bytes take one 1 MiB block of VRAM, made by one
/// `vkAllocateMemory` (before: 2000 memory objects, 2000 calls); and a
/// 1.5 MiB buffer after them still finds room there.
#[test]
fn small_requests_under_the_budget_share_a_few_blocks() {
    let edge = at_the_edge(
        FakeLayout::discrete(),
        Config::default(),
        three_and_a_half_mib_of_budget,
        1,
        &device_local(256),
        2000,
        &device_local(3 * MIB / 2).within_budget(),
    );
    assert_eq!(
        (edge.objects, edge.calls, edge.served),
        (1, 1, 2000),
        "{edge:?}"
    );
    assert!(edge.later_served, "{edge:?}");
}

/// The price of a remainder block is the room it holds: a block takes at
/// most half of what is left, so a later request of up to half the room
/// (less what the small requests use) still takes dedicated memory in the
/// same heap. With 3.5 MiB left: a 1 MiB block holds the 2000 buffers of
/// 256 bytes, and 2.5 MiB stay for a 2.5 MiB buffer (a 2 MiB block, the
/// largest that fits, would have left 1.5 MiB, and sent it to another
/// heap).
#[test]
fn a_later_larger_request_still_finds_half_the_room() {
    let edge = at_the_edge(
        FakeLayout::discrete(),
        Config::default(),
        three_and_a_half_mib_of_budget,
        1,
        &device_local(256),
        2000,
        &device_local(5 * MIB / 2).within_budget(),
    );
    assert_eq!((edge.objects, edge.served), (1, 2000), "{edge:?}");
    assert!(edge.later_served, "{edge:?}");
}

/// A request that may not take dedicated memory (`DedicatedPolicy::Never`)
/// takes a remainder block too, in the memory type it prefers: before,
/// its ladder ended at 4 MiB, over the budget, and all 2000 went on to
/// the next memory type (system memory).
#[test]
fn block_only_requests_at_the_edge_stay_in_their_memory_type() {
    let edge = at_the_edge(
        FakeLayout::discrete(),
        Config::default(),
        three_and_a_half_mib_of_budget,
        1,
        &device_local(256).dedicated(DedicatedPolicy::Never),
        2000,
        &device_local(MIB).within_budget(),
    );
    assert_eq!(
        (edge.objects, edge.calls, edge.served),
        (1, 1, 2000),
        "{edge:?}"
    );
    assert!(edge.later_served, "{edge:?}");
}

/// Dedicated memory in memory type `ty` alone (in pieces of at most
/// 1 GiB) that leaves `room` bytes of heap `heap`'s budget, as `allocator`
/// reads it: what brings a heap to its edge.
fn fill_to(allocator: &FakeAllocator, heap: usize, ty: u32, room: u64) -> Vec<Allocation> {
    let budget = allocator.budgets()[heap];
    let mut left = budget.budget - budget.usage - room;
    let mut live = Vec::new();
    while left > 0 {
        let size = left.min(GIB);
        let mut request = device_local(size).dedicated(DedicatedPolicy::Always);
        request.requirements.memory_type_bits = 1 << ty;
        live.push(allocator.allocate(&request).unwrap());
        left -= size;
    }
    live
}

/// A heap's edge and what small requests there must do.
struct Case {
    name: &'static str,
    layout: FakeLayout,
    config: Config,
    /// Brings heap 0 to its edge; returns what it allocated.
    edge: fn(&FakeAllocator, &FakeDevice) -> Vec<Allocation>,
    small: Request<'static>,
    count: usize,
    /// The later request's size, held to the budget.
    later: u64,
    /// The memory objects and `vkAllocateMemory` calls of the small
    /// requests.
    made: (usize, u64),
}

/// Other edges: small images with VMA issue #545's 8 MiB blocks, the
/// budget of a heap without `VK_EXT_memory_budget`, a small heap's (whose
/// ladder ends at 176 KiB), the driver's room (the budget far away), a
/// `Config::heap_size_limits` entry's. Before remainder blocks, the small
/// requests made a memory object and a call each (on the driver's edge,
/// 4 refused calls more).
#[test]
fn small_requests_at_every_kind_of_edge() {
    let limited = {
        // The whole limit as the budget: the limit stops requests.
        let mut config = Config {
            budget_fraction: 1.0,
            ..Config::default()
        };
        config.heap_size_limits[0] = GIB;
        config
    };
    let cases = [
        Case {
            // VMA's issue #545: 8 MiB blocks (the smallest of the ladder
            // 128 KiB), small images. Blocks of 32, 32 and 16 KiB (the
            // last image fills the last).
            name: "discrete, 8 MiB blocks, 1 KiB optimal images, 120 KiB of budget",
            layout: FakeLayout::discrete(),
            config: Config {
                large_heap_block_size: 8 * MIB,
                ..Config::default()
            },
            edge: |_, device| {
                device.set_heap_budget(0, 100 * MIB, 100 * MIB - 120 * KIB);
                Vec::new()
            },
            small: Request::new(
                requirements(KIB, KIB),
                Usage::DEVICE_LOCAL,
                ResourceKind::OptimalImage,
            ),
            count: 80,
            later: 16 * KIB,
            made: (3, 3),
        },
        Case {
            // 1 MiB, then another (the first leaves 2.5 MiB).
            name: "discrete, 4 KiB buffers, 3.5 MiB of budget",
            layout: FakeLayout::discrete(),
            config: Config::default(),
            edge: three_and_a_half_mib_of_budget,
            small: device_local(4 * KIB),
            count: 500,
            later: MIB,
            made: (2, 2),
        },
        Case {
            name: "integrated 4 GiB, no budget extension, 3.5 MiB of budget",
            layout: FakeLayout::integrated(),
            config: Config::default(),
            edge: |allocator, _| fill_to(allocator, 0, 0, 3 * MIB + 512 * KIB),
            small: device_local(256),
            count: 2000,
            later: 3 * MIB / 2,
            made: (1, 1),
        },
        Case {
            // Blocks of 44, 44, 22, 11 and 11 KiB (halvings of the 11 MiB
            // preferred block), each at most half the room left.
            name: "integrated 88 MiB, 150 KiB of budget",
            layout: FakeLayout::integrated().with_heap_sizes(88 * MIB),
            config: Config::default(),
            edge: |allocator, _| fill_to(allocator, 0, 0, 150 * KIB),
            small: device_local(256),
            count: 500,
            later: 16 * KIB,
            made: (5, 5),
        },
        Case {
            // 32, 16, 8 and 4 MiB refused by the driver, then a 2 MiB
            // block, below its refusal.
            name: "discrete, the driver grants 3.5 MiB",
            layout: FakeLayout::discrete(),
            config: Config::default(),
            edge: |_, device| {
                device.cap_heap(0, 3 * MIB + 512 * KIB);
                Vec::new()
            },
            small: device_local(256),
            count: 2000,
            later: MIB,
            made: (1, 5),
        },
        Case {
            // 32, 16, 8 and 4 MiB refused, a 2 MiB block for the first
            // 512 buffers; then 2 MiB refused (1.5 MiB left) and that
            // request's own memory; then a block below that refusal for
            // the rest. Sized without the refusal, every later remainder
            // block was 2 MiB, answered by the remembered refusal without
            // a call: each request past the first block took memory of
            // its own.
            name: "discrete, the driver grants 3.5 MiB, 4 KiB buffers past the first block",
            layout: FakeLayout::discrete(),
            config: Config::default(),
            edge: |_, device| {
                device.cap_heap(0, 3 * MIB + 512 * KIB);
                Vec::new()
            },
            small: device_local(4 * KIB),
            count: 600,
            later: 256 * KIB,
            made: (3, 8),
        },
        Case {
            name: "discrete, VRAM limited to 1 GiB, 1.5 MiB left",
            layout: FakeLayout::discrete().with_memory_budget(false),
            config: limited,
            edge: |allocator, _| {
                let mut request =
                    device_local(GIB - 3 * MIB / 2).dedicated(DedicatedPolicy::Always);
                request.requirements.memory_type_bits = 1 << 1;
                vec![allocator.allocate(&request).unwrap()]
            },
            small: device_local(256),
            count: 2000,
            later: 512 * KIB,
            made: (1, 1),
        },
    ];
    for case in cases {
        let memory_type = if case.layout.name == "integrated" {
            0
        } else {
            1
        };
        let edge = at_the_edge(
            case.layout,
            case.config,
            case.edge,
            memory_type,
            &case.small,
            case.count,
            &device_local(case.later).within_budget(),
        );
        let name = case.name;
        assert_eq!(
            (edge.objects, edge.calls, edge.served),
            (case.made.0, case.made.1, case.count),
            "{name}: {edge:?}"
        );
        assert!(edge.later_served, "{name}: {edge:?}");
    }
}

/// Where buffers and optimal images take separate blocks (a granularity
/// past `Config::max_padded_granularity`), each kind makes its own
/// remainder blocks at the edge, and no block holds both: 1000 buffers of
/// 256 bytes and 1000 optimal images of 1 KiB, taken in turns with
/// 3.5 MiB of budget left, take a 1 MiB block each (the buffers' leaves
/// 2.5 MiB, half of which the images' may take), all in VRAM: 2 memory
/// objects, where they took 2000.
#[test]
fn each_granularity_class_takes_its_own_remainder_blocks() {
    let layout = FakeLayout::discrete().with_granularity(65536);
    let (allocator, device) = allocator_with(layout, Config::default());
    three_and_a_half_mib_of_budget(&allocator, &device);
    let buffer = device_local(256);
    let image = Request::new(
        requirements(KIB, KIB),
        Usage::DEVICE_LOCAL,
        ResourceKind::OptimalImage,
    );
    let mut live = Vec::new();
    for i in 0..2000 {
        let request = if i % 2 == 0 { &buffer } else { &image };
        let allocation = allocator
            .allocate(request)
            .unwrap_or_else(|error| panic!("request {i}: {error:?}"));
        assert_eq!(allocation.memory_type(), 1, "request {i}");
        live.push(allocation);
    }
    let map = allocator.memory_map();
    let blocks = &map.memory_types[1].blocks;
    for block in blocks {
        let linear = block.allocations().filter(|r| r.kind == RangeKind::Buffer);
        let optimal = block
            .allocations()
            .filter(|r| r.kind == RangeKind::ImageOptimal);
        assert!(
            linear.count() == 0 || optimal.count() == 0,
            "block {} holds both kinds",
            block.id
        );
    }
    let sizes: Vec<u64> = blocks.iter().map(|b| b.size).collect();
    assert_eq!(heap_objects(&device), blocks.len(), "{sizes:?}");
    assert_eq!(sizes, [MIB, MIB]);
    free_all_and_finish(allocator, &device, live);
}

/// VMA's issue #545 to its end: with `maxMemoryAllocationCount` at 64 and
/// 3.5 MiB of VRAM budget left, small requests took a memory object each
/// until none was left, and then every request failed with
/// `TooManyObjects` (no block existed to take it, in any memory type).
/// With remainder blocks they all share one.
#[test]
fn small_requests_at_the_edge_never_reach_the_object_limit() {
    let layout = FakeLayout::discrete().with_max_allocation_count(64);
    let (allocator, device) = allocator_with(layout, Config::default());
    three_and_a_half_mib_of_budget(&allocator, &device);
    let mut live = Vec::new();
    for i in 0..2000 {
        match allocator.allocate(&device_local(256)) {
            Ok(allocation) => live.push(allocation),
            Err(error) => panic!(
                "request {i}: {error:?}, with {} memory objects",
                device.live_allocations().len()
            ),
        }
    }
    assert_eq!(device.live_allocations().len(), 1);
    free_all_and_finish(allocator, &device, live);
}

/// A request not held to the budget, over it in every type it may take
/// (others use all of VRAM's budget), goes on past the budget: a
/// `DedicatedPolicy::Never` request there takes a block, and where the
/// driver grants 3.5 MiB, less than the ladder's 4 MiB, a remainder block
/// sized by the heap's room (its size less this allocator's memory), not
/// by the budget's, which has none: one 2 MiB block (below the 4 MiB the
/// driver refused) for 2000 buffers of 256 bytes. Sized by the budget's
/// room, each took the least block, 256 bytes, a memory object each.
#[test]
fn past_the_budget_remainder_blocks_are_sized_by_the_heaps_room() {
    let (allocator, device) = allocator_with(FakeLayout::discrete(), Config::default());
    device.set_heap_budget(0, 100 * MIB, 100 * MIB);
    device.cap_heap(0, 3 * MIB + 512 * KIB);
    let mut small = device_local(256).dedicated(DedicatedPolicy::Never);
    small.requirements.memory_type_bits = 1 << 1;
    let mut live = Vec::new();
    for i in 0..2000 {
        let allocation = allocator
            .allocate(&small)
            .unwrap_or_else(|error| panic!("request {i}: {error:?}"));
        assert_eq!(allocation.memory_type(), 1, "request {i}");
        live.push(allocation);
    }
    // 32, 16, 8 and 4 MiB refused by the driver, then 2 MiB.
    assert_eq!(
        (memory_objects(&device, 0), device.counters().allocate_calls),
        ((1, 2 * MIB), 5)
    );
    free_all_and_finish(allocator, &device, live);
}

/// Custom pools keep to their ladder at the edge (their blocks count
/// against `max_blocks`): with 3.5 MiB of VRAM budget left, a pool's
/// request held to the budget fails on the ladder's smallest block,
/// 4 MiB, without a memory object below it; one not held to it takes a
/// block of the ladder past the budget.
#[test]
fn custom_pools_keep_to_their_ladder_at_the_edge() {
    let (allocator, device) = allocator_with(FakeLayout::discrete(), Config::default());
    three_and_a_half_mib_of_budget(&allocator, &device);
    let pool = allocator.create_pool(&PoolDesc::new(1)).unwrap();
    let in_pool = |within_budget: bool| {
        let desc = AllocationDesc {
            within_budget,
            ..AllocationDesc::new(Usage::DEVICE_LOCAL).pool(pool)
        };
        Request::with_desc(requirements(256, 256), ResourceKind::Buffer, desc)
    };
    let error = allocator.allocate(&in_pool(true)).unwrap_err();
    assert!(
        matches!(error, Error::OverBudget { heap: 0, size, .. } if size == 4 * MIB),
        "{error:?}"
    );
    assert_eq!(device.counters().allocate_calls, 0);
    let past = allocator.allocate(&in_pool(false)).unwrap();
    let sizes: Vec<u64> = device.live_allocations().iter().map(|m| m.size).collect();
    assert!(sizes.iter().all(|&size| size >= 4 * MIB), "{sizes:?}");
    free(&allocator, past);
    allocator.destroy_pool(pool).unwrap();
    finish(allocator, &device);
}

/// Threads at the edge: three threads allocate small buffers (1 to
/// 16 KiB, at most 400 KiB live each) and free them at random in VRAM's two
/// memory types of a resizable-BAR layout (types 1 and 4 share heap 0,
/// each a pool of its own, which race for the heap's room), with 3.5 MiB
/// of budget left and the driver refusing memory past it. Every request is
/// served in heap 0, by a few blocks, not a memory object per request,
/// and the driver refuses no call: no remainder block is sized past the
/// room, whatever the other type took meanwhile.
#[test]
fn threads_at_the_edge_share_a_few_blocks_in_the_heap() {
    let test = "threads_at_the_edge_share_a_few_blocks_in_the_heap";
    let seed = Rng::seed(test);
    let (allocator, device) = allocator_with(FakeLayout::rebar(), Config::default());
    let (budget, others) = (100 * MIB, 100 * MIB - 3 * MIB - 512 * KIB);
    device.set_heap_budget(0, budget, others);
    device.cap_heap(0, budget - others);
    let most_objects = AtomicUsize::new(0);
    let live: Vec<Vec<Allocation>> = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..3u64)
            .map(|thread| {
                let (allocator, device, most_objects) = (&allocator, &device, &most_objects);
                scope.spawn(move || {
                    let mut rng = Rng(seed ^ thread.wrapping_mul(0x9e37_79b9));
                    let mut live: Vec<Allocation> = Vec::new();
                    for step in 0..if cfg!(miri) { 40 } else { 400 } {
                        let size = KIB << rng.below(5);
                        let live_bytes: u64 = live.iter().map(Allocation::size).sum();
                        if live_bytes + size <= 400 * KIB && rng.below(3) != 0 {
                            let mut request = device_local(size);
                            request.requirements.memory_type_bits = [1 << 1, 1 << 4]
                                [rng.below(2) as usize];
                            let allocation = allocator.allocate(&request).unwrap_or_else(|error| {
                                panic!("{test}: seed {seed}: thread {thread} step {step}: {error:?}")
                            });
                            let memory_type = allocation.memory_type();
                            assert!(
                                memory_type == 1 || memory_type == 4,
                                "{test}: seed {seed}: thread {thread} step {step}: {size} bytes in memory type {memory_type}"
                            );
                            live.push(allocation);
                            most_objects.fetch_max(heap_objects(device), Ordering::Relaxed);
                        } else if !live.is_empty() {
                            let index = rng.below(live.len() as u64) as usize;
                            free(allocator, live.swap_remove(index));
                        }
                    }
                    live
                })
            })
            .collect();
        workers.into_iter().map(|w| w.join().unwrap()).collect()
    });
    let counters = device.counters();
    assert_eq!(
        counters.allocate_calls, counters.allocations,
        "{test}: seed {seed}: the driver refused memory past the budget"
    );
    let most = most_objects.into_inner();
    println!("{test}: at most {most} memory objects in heap 0");
    assert!(
        most <= 16,
        "{test}: seed {seed}: {most} memory objects in heap 0"
    );
    free_all_and_finish(allocator, &device, live.into_iter().flatten());
}

/// Two memory types of one heap at its edge at the same moment leave half
/// the room between them, as one after the other does: with 2 MiB of VRAM
/// budget left on the resizable-BAR layout (types 1 and 4 share heap 0,
/// each a pool under its own lock) and a driver that takes 2 ms per
/// `vkAllocateMemory`, two threads each ask for 256 bytes, one in each
/// type. The first remainder block is 1 MiB (half of 2 MiB); the second,
/// sized once the first is counted, 512 KiB (half of the 1 MiB left), and
/// 512 KiB stay. Sized on the room each read before the other's block was
/// counted, both were 1 MiB and took all of it: the budget check passed
/// (exact), but a later request of up to half the room found none. The
/// overlap is left to the scheduler here (it showed in 10 of 20, 5 of 40
/// and 0 of 40 iterations of three runs before the fix); the next test
/// holds one thread where the two overlap.
#[test]
fn two_memory_types_at_the_edge_at_once_leave_half_the_room() {
    let test = "two_memory_types_at_the_edge_at_once_leave_half_the_room";
    let iterations = if cfg!(miri) { 2 } else { 40 };
    let mut broken = Vec::new();
    for iteration in 0..iterations {
        let (allocator, device) = allocator_with(FakeLayout::rebar(), Config::default());
        let (budget, others) = (100 * MIB, 98 * MIB);
        device.set_heap_budget(0, budget, others);
        device.cap_heap(0, budget - others);
        device.slow_allocations(Some(std::time::Duration::from_millis(2)));
        let start = std::sync::Barrier::new(2);
        let live: Vec<Allocation> = std::thread::scope(|scope| {
            let workers: Vec<_> = [1u32, 4]
                .into_iter()
                .map(|memory_type| {
                    let (allocator, start) = (&allocator, &start);
                    scope.spawn(move || {
                        let mut request = device_local(256);
                        request.requirements.memory_type_bits = 1 << memory_type;
                        start.wait();
                        let allocation = allocator.allocate(&request).unwrap_or_else(|error| {
                            panic!("{test}: iteration {iteration}: memory type {memory_type}: {error:?}")
                        });
                        assert_eq!(allocation.memory_type(), memory_type);
                        allocation
                    })
                })
                .collect();
            workers.into_iter().map(|w| w.join().unwrap()).collect()
        });
        device.slow_allocations(None);
        let (sizes, room) = heap_blocks_and_room(&allocator, &device);
        if (sizes.as_slice(), room) != ([512 * KIB, MIB].as_slice(), 512 * KIB) {
            broken.push((iteration, sizes, room));
        }
        free_all_and_finish(allocator, &device, live);
    }
    println!(
        "{test}: {iterations} iterations, {} left less than half the room: {broken:?}",
        broken.len()
    );
    assert!(
        broken.is_empty(),
        "{test}: (iteration, block sizes, room left) where 2 MiB were left and [512 KiB, 1 MiB] blocks, 512 KiB left, were meant: {broken:?}"
    );
}

/// [`two_memory_types_at_the_edge_at_once_leave_half_the_room`] without
/// leaving the overlap to the scheduler: the thread of memory type 1 is
/// held once it has sized its remainder block (on its debug line
/// "allocating 1048576 bytes of memory type 1", logged before the heap's
/// turn is taken), until the other thread's 256 bytes in memory type 4
/// are placed or 300 ms have passed. Sized on the room both read, each
/// block was 1 MiB and the two took all 2 MiB (every time); sized one
/// after another, the second waits for the first and takes 512 KiB.
#[test]
fn a_remainder_block_sized_meanwhile_in_another_memory_type_leaves_half_the_room() {
    use std::sync::mpsc::channel;
    use std::time::Duration;
    let test = "a_remainder_block_sized_meanwhile_in_another_memory_type_leaves_half_the_room";
    let iterations = if cfg!(miri) { 1 } else { 3 };
    for iteration in 0..iterations {
        let (allocator, device) = allocator_with(FakeLayout::rebar(), Config::default());
        let (budget, others) = (100 * MIB, 98 * MIB);
        device.set_heap_budget(0, budget, others);
        device.cap_heap(0, budget - others);
        let in_type = |memory_type: u32| {
            let mut request = device_local(256);
            request.requirements.memory_type_bits = 1 << memory_type;
            request
        };
        let (go, go_rx) = channel::<()>();
        let (done, done_rx) = channel::<()>();
        let live: Vec<Allocation> = std::thread::scope(|scope| {
            let allocator = &allocator;
            let other = scope.spawn(move || {
                go_rx.recv().unwrap();
                let allocation = allocator.allocate(&in_type(4));
                let _ = done.send(());
                allocation.unwrap()
            });
            let held = scope.spawn(move || {
                super::leak_log::on_line_with(
                    "allocating 1048576 bytes of memory type 1 (",
                    move || {
                        go.send(()).unwrap();
                        let _ = done_rx.recv_timeout(Duration::from_millis(300));
                    },
                );
                allocator.allocate(&in_type(1)).unwrap()
            });
            vec![held.join().unwrap(), other.join().unwrap()]
        });
        let types: Vec<u32> = live.iter().map(Allocation::memory_type).collect();
        let (sizes, room) = heap_blocks_and_room(&allocator, &device);
        println!("{test}: iteration {iteration}: blocks {sizes:?}, {room} bytes left");
        assert_eq!(types, [1, 4], "{test}: iteration {iteration}");
        assert_eq!(
            (sizes.as_slice(), room),
            ([512 * KIB, MIB].as_slice(), 512 * KIB),
            "{test}: iteration {iteration}: blocks and room left of 2 MiB"
        );
        free_all_and_finish(allocator, &device, live);
    }
}

/// The remainder turn spans the least block too, tried once the driver
/// refused the remainder block: with 2 MiB of heap 0's budget left on the
/// resizable-BAR layout, a block-only request of 300 KiB in memory type 1
/// tries a 1 MiB block, which the driver refuses (once), then its least
/// block, 512 KiB. It is held on its debug line "allocating 524288 bytes
/// of memory type 1", logged under the turn, while a frame ends (which
/// forgets the heap's refusal of 1 MiB: the next remainder block is no
/// longer sized below it) and a thread of memory type 4 asks for 256
/// bytes, until that thread is done or 300 ms have passed (a thread
/// waiting for the turn, as it should, says so through no hook: the wait
/// ends on the clock only then, and the outcome does not depend on it).
/// Sized once the least block is counted, type 4's block is 512 KiB
/// (half of the 1.5 MiB left would be 768 KiB) and 1 MiB stays; with the
/// turn released before the least block, it was sized on the 2 MiB that
/// type 1 had read: 1 MiB, and 512 KiB stayed.
#[test]
fn the_least_block_after_a_refused_remainder_block_is_made_under_the_turn() {
    use std::sync::mpsc::channel;
    use std::time::Duration;
    use vk_suballoc::device::DeviceError;
    let test = "the_least_block_after_a_refused_remainder_block_is_made_under_the_turn";
    let (allocator, device) = allocator_with(FakeLayout::rebar(), Config::default());
    let (budget, others) = (100 * MIB, 98 * MIB);
    device.set_heap_budget(0, budget, others);
    device.cap_heap(0, budget - others);
    // The ladder's blocks (4 MiB and up) are over the budget, refused
    // without a call: the first call is type 1's 1 MiB remainder block.
    device.fail_allocation(1, DeviceError::OutOfDeviceMemory);
    let in_type = |memory_type: u32, size: u64| {
        let mut request = device_local(size).dedicated(DedicatedPolicy::Never);
        request.requirements.memory_type_bits = 1 << memory_type;
        request
    };
    let (at_least, at_least_rx) = channel::<()>();
    let (go, go_rx) = channel::<()>();
    let (done, done_rx) = channel::<()>();
    let live: Vec<Allocation> = std::thread::scope(|scope| {
        let allocator = &allocator;
        let held = scope.spawn(move || {
            super::leak_log::on_line_with(
                "allocating 524288 bytes of memory type 1 (",
                move || {
                    at_least.send(()).unwrap();
                    let _ = done_rx.recv_timeout(Duration::from_millis(300));
                },
            );
            allocator.allocate(&in_type(1, 300 * KIB)).unwrap()
        });
        let other = scope.spawn(move || {
            go_rx.recv().unwrap();
            let allocation = allocator.allocate(&in_type(4, 256));
            let _ = done.send(());
            allocation.unwrap()
        });
        at_least_rx.recv().unwrap();
        device.signal_fence(end_frame(allocator, &device));
        go.send(()).unwrap();
        vec![held.join().unwrap(), other.join().unwrap()]
    });
    let types: Vec<u32> = live.iter().map(Allocation::memory_type).collect();
    let (sizes, room) = heap_blocks_and_room(&allocator, &device);
    let counters = device.counters();
    println!("{test}: blocks {sizes:?}, {room} bytes left, {counters:?}");
    assert_eq!(types, [1, 4], "{test}");
    // Type 1's refused 1 MiB, its 512 KiB and type 4's block.
    assert_eq!((counters.allocate_calls, counters.allocations), (3, 2));
    assert_eq!(
        (sizes.as_slice(), room),
        ([512 * KIB, 512 * KIB].as_slice(), MIB),
        "{test}: blocks and room left of 2 MiB: type 4's block was sized before type 1's least block was counted"
    );
    free_all_and_finish(allocator, &device, live);
}

/// As [`the_least_block_after_a_refused_remainder_block_is_made_under_the_turn`],
/// with the remainder block refused by the budget check rather than the
/// driver: with 2 MiB of heap 0's budget left on the resizable-BAR
/// layout, a block-only request of 300 KiB in memory type 1 sizes a
/// 1 MiB remainder block and is held on its debug line (logged before the
/// budget check) while another thread makes 1.25 MiB of dedicated memory
/// in memory type 4 (no remainder turn). The 1 MiB block is then over the
/// budget, refused without a driver call, and the least block, 512 KiB,
/// is tried: held on its debug line while a thread of memory type 4 asks
/// for 256 bytes, until that thread is done or 300 ms have passed. Sized
/// once the least block is counted, type 4's block is 128 KiB (half of
/// the 256 KiB left would be 128 KiB) and 128 KiB stay; with the turn
/// released on the budget's refusal, it was sized on the 768 KiB left
/// before the least block: 256 KiB, and nothing stayed.
#[test]
fn the_least_block_after_a_remainder_block_over_the_budget_is_made_under_the_turn() {
    use std::sync::mpsc::channel;
    use std::time::Duration;
    let test = "the_least_block_after_a_remainder_block_over_the_budget_is_made_under_the_turn";
    let (allocator, device) = allocator_with(FakeLayout::rebar(), Config::default());
    let (budget, others) = (100 * MIB, 98 * MIB);
    device.set_heap_budget(0, budget, others);
    device.cap_heap(0, budget - others);
    let in_type = |memory_type: u32, size: u64| {
        let mut request = device_local(size).dedicated(DedicatedPolicy::Never);
        request.requirements.memory_type_bits = 1 << memory_type;
        request
    };
    let (remainder, remainder_rx) = channel::<()>();
    let (dedicated_done, dedicated_done_rx) = channel::<()>();
    let (at_least, at_least_rx) = channel::<()>();
    let (done, done_rx) = channel::<()>();
    let live: Vec<Allocation> = std::thread::scope(|scope| {
        let allocator = &allocator;
        let held = scope.spawn(move || {
            super::leak_log::on_line_with(
                "allocating 1048576 bytes of memory type 1 (",
                move || {
                    super::leak_log::on_line_with(
                        "allocating 524288 bytes of memory type 1 (",
                        move || {
                            at_least.send(()).unwrap();
                            let _ = done_rx.recv_timeout(Duration::from_millis(300));
                        },
                    );
                    remainder.send(()).unwrap();
                    dedicated_done_rx
                        .recv_timeout(Duration::from_secs(20))
                        .expect("the dedicated memory waited for the remainder turn");
                },
            );
            allocator.allocate(&in_type(1, 300 * KIB)).unwrap()
        });
        let dedicated = scope.spawn(move || {
            remainder_rx.recv().unwrap();
            let mut request = device_local(MIB + MIB / 4)
                .dedicated(DedicatedPolicy::Always)
                .within_budget();
            request.requirements.memory_type_bits = 1 << 4;
            let allocation = allocator.allocate(&request);
            dedicated_done.send(()).unwrap();
            allocation.unwrap()
        });
        let other = scope.spawn(move || {
            at_least_rx.recv().unwrap();
            let allocation = allocator.allocate(&in_type(4, 256));
            let _ = done.send(());
            allocation.unwrap()
        });
        vec![
            held.join().unwrap(),
            dedicated.join().unwrap(),
            other.join().unwrap(),
        ]
    });
    let types: Vec<u32> = live.iter().map(Allocation::memory_type).collect();
    let (sizes, room) = heap_blocks_and_room(&allocator, &device);
    let counters = device.counters();
    println!("{test}: memory objects {sizes:?}, {room} bytes left, {counters:?}");
    assert_eq!(types, [1, 4, 4], "{test}");
    // Type 1's 512 KiB, the dedicated memory and type 4's block: the
    // budget refused the 1 MiB block with no call.
    assert_eq!((counters.allocate_calls, counters.allocations), (3, 3));
    assert_eq!(
        (sizes.as_slice(), room),
        ([128 * KIB, 512 * KIB, MIB + MIB / 4].as_slice(), 128 * KIB),
        "{test}: memory objects and room left of 2 MiB: type 4's block was sized before type 1's least block was counted"
    );
    free_all_and_finish(allocator, &device, live);
}

/// The remainder turn orders remainder blocks only: dedicated memory (as
/// a custom pool's block, or another type's ladder block) made while a
/// remainder block is sized takes room that block was sized on, and the
/// budget check alone decides. With 2 MiB of heap 0's budget left on the
/// resizable-BAR layout, 256 bytes in memory type 1 size a 1 MiB
/// remainder block (half the room), and are held on its debug line
/// ("allocating 1048576 bytes of memory type 1", under the turn) while
/// another thread makes 1 MiB of dedicated memory in memory type 4, held
/// to the budget. Both fit, the budget is never passed (the driver, its
/// heap capped where the budget ends, refuses nothing), and no room is
/// left: a remainder block leaves half the room only of what it read.
#[test]
fn dedicated_memory_made_while_a_remainder_block_is_sized_takes_the_room_it_leaves() {
    use std::sync::mpsc::channel;
    let test = "dedicated_memory_made_while_a_remainder_block_is_sized_takes_the_room_it_leaves";
    let (allocator, device) = allocator_with(FakeLayout::rebar(), Config::default());
    let (budget, others) = (100 * MIB, 98 * MIB);
    device.set_heap_budget(0, budget, others);
    device.cap_heap(0, budget - others);
    let (go, go_rx) = channel::<()>();
    let (done, done_rx) = channel::<()>();
    let live: Vec<Allocation> = std::thread::scope(|scope| {
        let allocator = &allocator;
        let dedicated = scope.spawn(move || {
            go_rx.recv().unwrap();
            let mut request = device_local(MIB)
                .dedicated(DedicatedPolicy::Always)
                .within_budget();
            request.requirements.memory_type_bits = 1 << 4;
            let allocation = allocator.allocate(&request);
            done.send(()).unwrap();
            allocation.unwrap()
        });
        let remainder = scope.spawn(move || {
            // The other thread takes neither this pool's lock nor the
            // remainder turn: it is waited for, not raced (the timeout
            // fails the test, should dedicated memory ever wait for the
            // turn, rather than hang it).
            super::leak_log::on_line_with(
                "allocating 1048576 bytes of memory type 1 (",
                move || {
                    go.send(()).unwrap();
                    done_rx
                        .recv_timeout(std::time::Duration::from_secs(20))
                        .expect("the dedicated memory waited for the remainder turn");
                },
            );
            let mut request = device_local(256);
            request.requirements.memory_type_bits = 1 << 1;
            allocator.allocate(&request).unwrap()
        });
        vec![remainder.join().unwrap(), dedicated.join().unwrap()]
    });
    let types: Vec<u32> = live.iter().map(Allocation::memory_type).collect();
    let (sizes, room) = heap_blocks_and_room(&allocator, &device);
    let counters = device.counters();
    println!("{test}: memory objects {sizes:?}, {room} bytes left, {counters:?}");
    assert_eq!(types, [1, 4], "{test}");
    assert_eq!(
        (sizes.as_slice(), room),
        ([MIB, MIB].as_slice(), 0),
        "{test}: memory objects and room left of 2 MiB"
    );
    assert_eq!(
        (counters.allocate_calls, counters.allocations),
        (2, 2),
        "{test}: the driver refused memory past the budget"
    );
    free_all_and_finish(allocator, &device, live);
}

/// `allocate_mut` (`&mut self`, no pool lock) at the edge takes remainder
/// blocks as `allocate` does, the heap's remainder turn included: with
/// 2 MiB of heap 0's budget left on the resizable-BAR layout, 256 bytes
/// in memory type 1, then in type 4, take blocks of 1 MiB and 512 KiB
/// (each half of the room it found), and 512 KiB stay; `free_mut` gives
/// the room back.
#[test]
fn allocate_mut_at_the_edge_takes_remainder_blocks_as_allocate_does() {
    let (mut allocator, device) = allocator_with(FakeLayout::rebar(), Config::default());
    let (budget, others) = (100 * MIB, 98 * MIB);
    device.set_heap_budget(0, budget, others);
    device.cap_heap(0, budget - others);
    let in_type = |memory_type: u32| {
        let mut request = device_local(256);
        request.requirements.memory_type_bits = 1 << memory_type;
        request
    };
    let first = allocator.allocate_mut(&in_type(1)).unwrap();
    let second = allocator.allocate_mut(&in_type(4)).unwrap();
    assert_eq!((first.memory_type(), second.memory_type()), (1, 4));
    let (sizes, room) = heap_blocks_and_room(&allocator, &device);
    assert_eq!(
        (sizes.as_slice(), room),
        ([512 * KIB, MIB].as_slice(), 512 * KIB)
    );
    // SAFETY: the fake device runs no GPU work.
    unsafe { allocator.free_mut(first) }.unwrap();
    // SAFETY: as above.
    unsafe { allocator.free_mut(second) }.unwrap();
    allocator.trim();
    let figures = allocator.budgets()[0];
    assert_eq!(figures.budget.saturating_sub(figures.usage), 2 * MIB);
    finish(allocator, &device);
}

/// An engine's threads at the edge through `&self`: three threads
/// allocate small buffers (1 to 16 KiB, at most 400 KiB live each) in
/// VRAM's two memory types of the resizable-BAR layout (types 1 and 4,
/// heap 0, each a pool of its own) and free them at random, now or after
/// a frame, while a fourth thread ends frames and collects them (which
/// releases aged empty blocks, `try_lock`ing each pool, and frees the
/// frames' allocations: the heap's turn), with 3.5 MiB of budget left and
/// the driver refusing memory past it. Every request is served in its
/// memory type, the driver refuses no call (no remainder block sized past
/// the room, whatever the other type or a frame's end did meanwhile), the
/// heap holds a few memory objects, and nothing waits forever: the whole
/// run has 60 seconds.
#[test]
fn threads_at_the_edge_with_frees_and_frame_ends_share_the_heap() {
    use std::sync::atomic::AtomicBool;
    use std::sync::{mpsc, Arc};
    use std::time::Duration;

    let test = "threads_at_the_edge_with_frees_and_frame_ends_share_the_heap";
    let seed = Rng::seed(test);
    let config = Config {
        empty_block_frames: 2,
        ..Config::default()
    };
    let (allocator, device) = allocator_with(FakeLayout::rebar(), config);
    let (budget, others) = (100 * MIB, 100 * MIB - 3 * MIB - 512 * KIB);
    device.set_heap_budget(0, budget, others);
    device.cap_heap(0, budget - others);
    let (allocator, device) = (Arc::new(allocator), Arc::new(device));
    let (sender, receiver) = mpsc::channel();
    let (shared, on_device) = (Arc::clone(&allocator), Arc::clone(&device));
    // Detached: a deadlocked run never returns.
    std::thread::spawn(move || {
        let (allocator, device) = (&*shared, &*on_device);
        let most_objects = AtomicUsize::new(0);
        let frames = AtomicUsize::new(0);
        let done = AtomicBool::new(false);
        let live: Vec<Vec<Allocation>> = std::thread::scope(|scope| {
            let (done, frames) = (&done, &frames);
            scope.spawn(move || {
                while !done.load(Ordering::Relaxed) {
                    device.signal_fence(end_frame(allocator, device));
                    allocator.collect().unwrap();
                    frames.fetch_add(1, Ordering::Relaxed);
                    std::thread::yield_now();
                }
            });
            let workers: Vec<_> = (0..3u64)
                .map(|thread| {
                    let most_objects = &most_objects;
                    scope.spawn(move || {
                        let mut rng = Rng(seed ^ thread.wrapping_mul(0x9e37_79b9));
                        let mut live: Vec<Allocation> = Vec::new();
                        for step in 0..if cfg!(miri) { 40 } else { 1000 } {
                            // Frames end between the steps, not only
                            // before or after them all.
                            std::thread::yield_now();
                            let size = KIB << rng.below(5);
                            let live_bytes: u64 = live.iter().map(Allocation::size).sum();
                            if live_bytes + size <= 400 * KIB && rng.below(3) != 0 {
                                let memory_type = [1u32, 4][rng.below(2) as usize];
                                let mut request = device_local(size);
                                request.requirements.memory_type_bits = 1 << memory_type;
                                let allocation = allocator.allocate(&request).unwrap_or_else(|error| {
                                    panic!("{test}: seed {seed}: thread {thread} step {step}: {error:?}")
                                });
                                assert_eq!(
                                    allocation.memory_type(),
                                    memory_type,
                                    "{test}: seed {seed}: thread {thread} step {step}"
                                );
                                live.push(allocation);
                                most_objects.fetch_max(heap_objects(device), Ordering::Relaxed);
                            } else if !live.is_empty() {
                                let index = rng.below(live.len() as u64) as usize;
                                let allocation = live.swap_remove(index);
                                if rng.below(2) == 0 {
                                    free(allocator, allocation);
                                } else {
                                    allocator.free_after_frame(allocation).unwrap();
                                }
                            }
                        }
                        live
                    })
                })
                .collect();
            let live = workers.into_iter().map(|w| w.join().unwrap()).collect();
            done.store(true, Ordering::Relaxed);
            live
        });
        let outcome = (live, most_objects.into_inner(), frames.into_inner());
        // Before the outcome is sent: the test unwraps the allocator's
        // `Arc` once it has it.
        drop((shared, on_device));
        let _ = sender.send(outcome);
    });
    let (live, most, frames) = match receiver.recv_timeout(Duration::from_secs(60)) {
        Ok(outcome) => outcome,
        Err(_) => panic!("{test}: seed {seed}: a thread panicked, or the run did not end in 60 s"),
    };
    let counters = device.counters();
    println!("{test}: {frames} frames, at most {most} memory objects in heap 0");
    assert_eq!(
        counters.allocate_calls, counters.allocations,
        "{test}: seed {seed}: the driver refused memory past the budget"
    );
    assert!(
        most <= 16,
        "{test}: seed {seed}: {most} memory objects in heap 0"
    );
    let allocator = Arc::try_unwrap(allocator).unwrap_or_else(|_| unreachable!());
    free_all_and_finish(allocator, &device, live.into_iter().flatten());
}

/// An engine's frames at the edge: buffers of 4 to 32 KiB allocated and
/// freed at random (at most 1.5 MiB live), a frame ended every 50 steps,
/// with 3.5 MiB of VRAM budget left. Every request stays in VRAM; the
/// heap holds a few memory objects at most, not one per churn
/// (empty remainder blocks are kept or released as other blocks are); and
/// once everything is freed and the frames age the kept blocks out, one
/// empty block is left (the largest, kept for reuse), which `trim`
/// releases.
#[test]
fn frames_of_churn_at_the_edge_keep_a_few_blocks() {
    let test = "frames_of_churn_at_the_edge_keep_a_few_blocks";
    let mut rng = Rng::from_env(test);
    let config = Config {
        empty_block_frames: 3,
        ..Config::default()
    };
    let (allocator, device) = allocator_with(FakeLayout::discrete(), config);
    three_and_a_half_mib_of_budget(&allocator, &device);
    let mut live: Vec<Allocation> = Vec::new();
    let mut most = 0;
    for step in 0..if cfg!(miri) { 300 } else { 3000 } {
        let size = (4 * KIB) << rng.below(4);
        let live_bytes: u64 = live.iter().map(Allocation::size).sum();
        if live_bytes + size <= 3 * MIB / 2 && rng.below(2) == 0 {
            let allocation = allocator
                .allocate(&device_local(size))
                .unwrap_or_else(|error| panic!("{test}: step {step}: {error:?}"));
            assert_eq!(
                allocation.memory_type(),
                1,
                "{test}: step {step}: {size} bytes"
            );
            live.push(allocation);
        } else if !live.is_empty() {
            let index = rng.below(live.len() as u64) as usize;
            allocator.free_after_frame(live.swap_remove(index)).unwrap();
        }
        if step % 50 == 49 {
            device.signal_fence(end_frame(&allocator, &device));
            allocator.collect().unwrap();
        }
        most = most.max(heap_objects(&device));
    }
    println!("{test}: at most {most} memory objects in heap 0");
    assert!(most <= 16, "{test}: {most} memory objects in heap 0");
    for allocation in live {
        allocator.free_after_frame(allocation).unwrap();
    }
    for _ in 0..5 {
        device.signal_fence(end_frame(&allocator, &device));
        allocator.collect().unwrap();
    }
    assert_eq!(heap_objects(&device), 1, "{test}: one empty block kept");
    allocator.trim();
    assert_eq!(heap_objects(&device), 0, "{test}: trim releases it");
    finish(allocator, &device);
}

/// Past the budget in a heap with a `Config::heap_size_limits` entry
/// (VRAM limited to 1 GiB, whose ladder ends at 2 MiB, this allocator
/// using all but 1.5 MiB of it, others all of the budget): a
/// `DedicatedPolicy::Never` request not held to the budget takes a
/// remainder block sized by the limit's room less this allocator's
/// memory, 512 KiB (half of 1.5 MiB, rounded down to a halving), and 2000
/// buffers of 256 bytes share it. Sized by the heap's size without the
/// limit, or without this allocator's memory taken off, the block was
/// 1 MiB, all but half a MiB of the room; sized by the budget's room,
/// which has none, each request took the least block, 256 bytes, a memory
/// object each.
#[test]
fn past_the_budget_a_limited_heaps_remainder_blocks_fit_the_limit() {
    let mut config = Config::default();
    config.heap_size_limits[0] = GIB;
    let (allocator, device) = allocator_with(FakeLayout::discrete(), config);
    device.set_heap_budget(0, 100 * MIB, 100 * MIB);
    let mut fill = device_local(GIB - 3 * MIB / 2).dedicated(DedicatedPolicy::Always);
    fill.requirements.memory_type_bits = 1 << 1;
    let mut live = vec![allocator.allocate(&fill).unwrap()];
    let calls = device.counters().allocate_calls;
    let mut small = device_local(256).dedicated(DedicatedPolicy::Never);
    small.requirements.memory_type_bits = 1 << 1;
    for i in 0..2000 {
        let allocation = allocator
            .allocate(&small)
            .unwrap_or_else(|error| panic!("request {i}: {error:?}"));
        live.push(allocation);
    }
    // One block (the fill left out).
    assert_eq!(
        (
            memory_objects(&device, fill.requirements.size),
            device.counters().allocate_calls - calls
        ),
        ((1, 512 * KIB), 1)
    );
    free_all_and_finish(allocator, &device, live);
}

/// A heap whose budget grows again: the remainder block made at the edge
/// stays while it holds allocations, and a defragmentation plan empties
/// it into a block of the ladder made once the room came back. Ten
/// buffers of 4 KiB take a 1 MiB remainder block with 3.5 MiB of budget
/// left; the budget grows, a 2 MiB buffer takes a 32 MiB block; the plan
/// moves the ten into that block and releases the remainder block, and
/// the heap is left with the one block of the ladder.
#[test]
fn once_the_budget_grows_a_defragmentation_empties_remainder_blocks() {
    let (allocator, device) = allocator_with(FakeLayout::discrete(), Config::default());
    three_and_a_half_mib_of_budget(&allocator, &device);
    let mut live: Vec<Allocation> = (0..10)
        .map(|_| allocator.allocate(&device_local(4 * KIB)).unwrap())
        .collect();
    let sizes = |device: &FakeDevice| -> Vec<u64> {
        let mut sizes: Vec<u64> = device.live_allocations().iter().map(|m| m.size).collect();
        sizes.sort_unstable();
        sizes
    };
    assert_eq!(sizes(&device), [MIB]);
    device.set_heap_budget(0, 4 * GIB, 0);
    device.signal_fence(end_frame(&allocator, &device));
    allocator.collect().unwrap();
    live.push(allocator.allocate(&device_local(2 * MIB)).unwrap());
    assert_eq!(sizes(&device), [MIB, 32 * MIB]);
    let plan = allocator
        .plan_defragmentation(&movables(&live), &DefragmentationLimits::default())
        .unwrap();
    assert_eq!(
        (plan.moves.len(), plan.blocks_released, plan.bytes_released),
        (10, 1, MIB)
    );
    for planned in plan.moves.into_iter().rev() {
        let old = std::mem::replace(&mut live[planned.movable], planned.destination);
        free(&allocator, old);
    }
    assert_eq!(sizes(&device), [32 * MIB]);
    free_all_and_finish(allocator, &device, live);
}

/// A block-only request (`DedicatedPolicy::Never`) whose remainder block
/// is its least block asks the driver for it once: with 768 bytes of
/// VRAM budget left the remainder block of a 256-byte buffer is 256 bytes,
/// its least; the driver, with less than that, refuses it, and the
/// request goes on to system memory. One refused call, not that block
/// asked for twice (a refused call can be slow).
#[test]
fn a_least_block_the_driver_refused_is_not_asked_for_again() {
    let (allocator, device) = allocator_with(FakeLayout::discrete(), Config::default());
    device.set_heap_budget(0, 100 * MIB, 100 * MIB - 768);
    device.cap_heap(0, 128);
    let request = device_local(256).dedicated(DedicatedPolicy::Never);
    let allocation = allocator.allocate(&request).unwrap();
    assert_ne!(allocation.memory_type(), 1);
    let counters = device.counters();
    // The refused 256-byte block in VRAM, the block in system memory.
    assert_eq!((counters.allocate_calls, counters.allocations), (2, 1));
    free_all_and_finish(allocator, &device, vec![allocation]);
}

/// An empty remainder block, kept for reuse as any block that empties,
/// gives way to a request that needs its room: with 3.5 MiB of VRAM
/// budget left, a buffer of 256 bytes takes a 1 MiB block and is freed;
/// a 3 MiB buffer held to the budget then finds only 2.5 MiB beside the
/// kept block, which is released for it, and it takes VRAM.
#[test]
fn an_empty_remainder_block_gives_way_to_a_larger_request() {
    let (allocator, device) = allocator_with(FakeLayout::discrete(), Config::default());
    three_and_a_half_mib_of_budget(&allocator, &device);
    let small = allocator.allocate(&device_local(256)).unwrap();
    assert_eq!(memory_objects(&device, 0), (1, MIB));
    free(&allocator, small);
    assert_eq!(memory_objects(&device, 0), (1, MIB), "kept");
    let large = allocator
        .allocate(&device_local(3 * MIB).within_budget())
        .unwrap();
    assert_eq!(large.memory_type(), 1);
    assert_eq!(memory_objects(&device, 0), (1, 3 * MIB));
    free_all_and_finish(allocator, &device, vec![large]);
}
