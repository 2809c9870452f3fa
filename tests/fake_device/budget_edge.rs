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

use vk_suballoc::device::fake::{FakeDevice, FakeLayout};
use vk_suballoc::report::RangeKind;
use vk_suballoc::{
    Allocation, AllocationDesc, Config, DedicatedPolicy, Error, PoolDesc, Request, ResourceKind,
    Usage,
};

use super::frames::free_all_and_finish;
// The remainder-turn tests' `super::leak_log`, from their own module.
use super::leak_log;
use super::{allocator_with, buffer, finish, free, requirements, FakeAllocator};

const KIB: u64 = 1 << 10;
const MIB: u64 = 1 << 20;
const GIB: u64 = 1 << 30;

#[path = "budget_edge/beyond_the_edge.rs"]
mod beyond_the_edge;
#[path = "budget_edge/remainder_turn.rs"]
pub(crate) mod remainder_turn;
#[path = "budget_edge/threads_and_frames.rs"]
mod threads_and_frames;

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

/// [`at_the_edge`] with 3.5 MiB of budget left in the discrete layout's
/// VRAM ([`three_and_a_half_mib_of_budget`]): 2000 requests `small`, then
/// `later`, counted on the device-local type (1).
fn two_thousand_at_the_vram_edge(small: &Request<'_>, later: &Request<'_>) -> Edge {
    at_the_edge(
        FakeLayout::discrete(),
        Config::default(),
        three_and_a_half_mib_of_budget,
        1,
        small,
        2000,
        later,
    )
}

/// The discrete layout's VRAM (8 GiB, blocks of 256 MiB, the smallest of
/// the ladder 4 MiB) with 3.5 MiB left under the driver's budget: 2000
/// uniform buffers of 256 bytes take one 1 MiB block of VRAM, made by one
/// `vkAllocateMemory` (before: 2000 memory objects, 2000 calls); and a
/// 1.5 MiB buffer after them still finds room there.
#[test]
fn small_requests_under_the_budget_share_a_few_blocks() {
    let edge = two_thousand_at_the_vram_edge(
        &device_local(256),
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
    let edge = two_thousand_at_the_vram_edge(
        &device_local(256),
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
    let edge = two_thousand_at_the_vram_edge(
        &device_local(256).dedicated(DedicatedPolicy::Never),
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
