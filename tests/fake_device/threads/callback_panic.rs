//! A memory callback that panics on another thread, under the lock of the
//! pool whose memory object it reports on: that thread's call unwinds, and
//! the allocator carries on from every thread, the memory object made or
//! freed as if the callback had returned (the memory made is freed again,
//! as it is handed to nobody), so no memory object, usage or object count
//! is left behind. The same for a logger that panics on one of the
//! allocator's lines (as a logger that fails a test on a warning does).

use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;

use vk_suballoc::device::fake::FakeLayout;
use vk_suballoc::{Allocation, Config, DedicatedPolicy, MemoryEventKind, Usage};

use super::super::debug_fill::{compacting, keep_every_third};
use super::super::defragment::movables;
use super::super::frames::end_frame;
use super::super::{allocator_with, assert_panicked_with, buffer, finish, free, FakeAllocator};

/// No event panics.
const CALM: u8 = 0;
const ON_ALLOCATED: u8 = 1;
const ON_FREED: u8 = 2;

/// Dedicated memory, so that each allocation makes a memory object and
/// each free frees one.
fn dedicated(allocator: &FakeAllocator) -> Allocation {
    allocator
        .allocate(&buffer(1 << 20, 256, Usage::DEVICE_LOCAL).dedicated(DedicatedPolicy::Always))
        .unwrap()
}

/// What the allocator and the device hold: memory objects by the
/// allocator's count and the device's, and the usage the allocator counts
/// in each heap (all of it without `VK_EXT_memory_budget`).
fn held(
    allocator: &FakeAllocator,
    device: &vk_suballoc::device::fake::FakeDevice,
) -> (u32, usize, Vec<u64>) {
    let usage = allocator.budgets().iter().map(|b| b.usage).collect();
    (
        allocator.stats().memory_objects,
        device.live_allocations().len(),
        usage,
    )
}

/// What [`held`] says when nothing is held.
fn nothing(allocator: &FakeAllocator) -> (u32, usize, Vec<u64>) {
    (0, 0, vec![0; allocator.budgets().len()])
}

/// Sets a memory callback that panics on the next event of the kind the
/// returned trigger is armed with (`ON_ALLOCATED`, `ON_FREED`), once: the
/// trigger goes back to `CALM` as it fires.
fn panic_once_when_armed(allocator: &mut FakeAllocator) -> Arc<AtomicU8> {
    let trigger = Arc::new(AtomicU8::new(CALM));
    let armed = Arc::clone(&trigger);
    allocator.set_memory_callback(move |event| {
        let kind = match event.kind {
            MemoryEventKind::Allocated => ON_ALLOCATED,
            MemoryEventKind::Freed => ON_FREED,
        };
        if armed
            .compare_exchange(kind, CALM, Ordering::SeqCst, Ordering::SeqCst)
            .is_ok()
        {
            panic!("the test's callback panics on {:?}", event.kind);
        }
    });
    trigger
}

#[test]
fn a_callback_panicking_on_another_thread_leaves_no_memory_behind() {
    let (mut allocator, device) = allocator_with(FakeLayout::discrete(), Config::default());
    let panic_on = panic_once_when_armed(&mut allocator);
    let nothing = nothing(&allocator);
    assert_eq!(held(&allocator, &device), nothing);

    // The allocation's memory object is made, reported, and freed again.
    panic_on.store(ON_ALLOCATED, Ordering::SeqCst);
    let made = std::thread::scope(|scope| scope.spawn(|| dedicated(&allocator)).join());
    assert_panicked_with(
        made,
        "the test's callback panics on Allocated",
        "the callback's panic reaches the caller",
    );
    assert_eq!(
        held(&allocator, &device),
        nothing,
        "after a panic on Allocated"
    );

    // The next calls carry on: in the same memory type (its lock was held
    // by the panicking thread), and the free whose event panics frees.
    let allocation = dedicated(&allocator);
    assert_eq!(held(&allocator, &device).1, 1);
    panic_on.store(ON_FREED, Ordering::SeqCst);
    let freed = std::thread::scope(|scope| scope.spawn(|| free(&allocator, allocation)).join());
    assert_panicked_with(
        freed,
        "the test's callback panics on Freed",
        "the callback's panic reaches the caller",
    );
    assert_eq!(held(&allocator, &device), nothing, "after a panic on Freed");

    let again = dedicated(&allocator);
    free(&allocator, again);
    assert_eq!(held(&allocator, &device), nothing);
    finish(allocator, &device);
}

/// A callback panicking in `collect` on the `Freed` of one deferred free
/// stops that free's report, not the other frees of the frame: they are
/// carried out before the panic reaches the caller, and no memory object
/// stays behind. Before, the unwind dropped the frame's remaining frees,
/// whose memory stayed allocated until the allocator's drop.
#[test]
fn a_callback_panicking_in_collect_leaves_no_free_undone() {
    let (mut allocator, device) = allocator_with(FakeLayout::discrete(), Config::default());
    let panic_once = panic_once_when_armed(&mut allocator);
    for _ in 0..3 {
        let allocation = dedicated(&allocator);
        allocator.free_after_frame(allocation).unwrap();
    }
    let fence = device.create_fence();
    // SAFETY: a fake fence, signalled below as the fake GPU's work is done.
    unsafe { allocator.end_frame(fence) }.unwrap();
    device.signal_fence(fence);
    assert_eq!(held(&allocator, &device).1, 3);

    panic_once.store(ON_FREED, Ordering::SeqCst);
    let collected = std::thread::scope(|scope| scope.spawn(|| allocator.collect()).join());
    assert_panicked_with(
        collected,
        "the test's callback panics on Freed",
        "the callback's panic reaches the caller",
    );
    assert_eq!(held(&allocator, &device), nothing(&allocator));
    assert_eq!(allocator.frames_in_flight(), 0);
    finish(allocator, &device);
}

/// A callback panicking on the `Allocated` of a pool's second `min_blocks`
/// block: `create_pool` unwinds, and the block it made before is freed
/// with the one the panic reported on. Before, the first block leaked
/// with the unwound pool (allocated for good, counted in usage).
#[test]
fn a_callback_panicking_in_create_pool_leaves_no_block_behind() {
    use std::sync::atomic::AtomicU32;
    use vk_suballoc::PoolDesc;

    let (mut allocator, device) = allocator_with(FakeLayout::discrete(), Config::default());
    let allocated = Arc::new(AtomicU32::new(0));
    let counted = Arc::clone(&allocated);
    allocator.set_memory_callback(move |event| {
        if event.kind == MemoryEventKind::Allocated && counted.fetch_add(1, Ordering::SeqCst) == 1 {
            panic!("the test's callback panics on the second block");
        }
    });
    let desc = PoolDesc::new(1).block_size(1 << 20).min_blocks(3);
    let made = std::thread::scope(|scope| scope.spawn(|| allocator.create_pool(&desc)).join());
    assert_panicked_with(
        made,
        "the test's callback panics on the second block",
        "the callback's panic reaches the caller",
    );
    assert_eq!(allocated.load(Ordering::SeqCst), 2);
    assert_eq!(held(&allocator, &device), nothing(&allocator));
    // The allocator carries on: the same pool can be made.
    let pool = allocator.create_pool(&desc).unwrap();
    allocator.destroy_pool(pool).unwrap();
    finish(allocator, &device);
}

/// A callback panicking on the `Allocated` of an upload ring's first chunk:
/// `create_upload_ring` unwinds, and the chunk's buffer is destroyed with
/// its memory. Before, the unwind skipped the cleanup of the
/// create-allocate-bind path, and the buffer leaked.
#[test]
fn a_callback_panicking_in_create_upload_ring_leaves_no_buffer_behind() {
    use vk_suballoc::UploadRingDesc;

    let (mut allocator, device) = allocator_with(FakeLayout::discrete(), Config::default());
    panic_once_when_armed(&mut allocator).store(ON_ALLOCATED, Ordering::SeqCst);
    let desc = UploadRingDesc {
        size: 4096,
        ..UploadRingDesc::default()
    };
    let made =
        std::thread::scope(|scope| scope.spawn(|| allocator.create_upload_ring(&desc)).join());
    assert_panicked_with(
        made,
        "the test's callback panics on Allocated",
        "the callback's panic reaches the caller",
    );
    assert_eq!(device.live_resources(), 0);
    assert_eq!(held(&allocator, &device), nothing(&allocator));
    let ring = allocator.create_upload_ring(&desc).unwrap();
    allocator.destroy_upload_ring(ring).unwrap();
    finish(allocator, &device);
}

/// A callback panicking on the `Freed` of the first block `destroy_pool`
/// releases: the call unwinds once the pool's other blocks are freed too.
/// Before, they stayed in the pool, marked destroyed, which the
/// allocator's drop skips: their memory objects leaked for good.
#[test]
fn a_callback_panicking_in_destroy_pool_leaves_no_block_behind() {
    use vk_suballoc::PoolDesc;

    let (mut allocator, device) = allocator_with(FakeLayout::discrete(), Config::default());
    let panic_on = panic_once_when_armed(&mut allocator);
    let desc = PoolDesc::new(1).block_size(1 << 20).min_blocks(3);
    let pool = allocator.create_pool(&desc).unwrap();
    assert_eq!(held(&allocator, &device).1, 3);

    panic_on.store(ON_FREED, Ordering::SeqCst);
    let destroyed = std::thread::scope(|scope| scope.spawn(|| allocator.destroy_pool(pool)).join());
    assert_panicked_with(
        destroyed,
        "the test's callback panics on Freed",
        "the callback's panic reaches the caller",
    );
    assert_eq!(held(&allocator, &device), nothing(&allocator));
    finish(allocator, &device);
}

/// A callback panicking in `destroy_pool` with every pool slot taken: the
/// destroyed pool's slot is free afterwards, so the next `create_pool`
/// succeeds. Before, the unwind skipped the slot's removal: the destroyed
/// pool kept it, and the allocator had room for one pool fewer for good.
#[test]
fn a_callback_panicking_in_destroy_pool_frees_the_pool_s_slot() {
    use vk_suballoc::PoolDesc;

    let (mut allocator, device) = allocator_with(FakeLayout::discrete(), Config::default());
    let panic_on = panic_once_when_armed(&mut allocator);
    let desc = PoolDesc::new(1).block_size(1 << 20);
    // 2047 pools: every slot (Error::TooManyPools); the last has a block
    // for its destruction to free.
    let mut pools: Vec<_> = (0..2046)
        .map(|_| allocator.create_pool(&desc).unwrap())
        .collect();
    let victim = allocator.create_pool(&desc.min_blocks(1)).unwrap();
    assert_eq!(
        allocator.create_pool(&desc),
        Err(vk_suballoc::Error::TooManyPools)
    );

    panic_on.store(ON_FREED, Ordering::SeqCst);
    let destroyed =
        std::thread::scope(|scope| scope.spawn(|| allocator.destroy_pool(victim)).join());
    assert_panicked_with(
        destroyed,
        "the test's callback panics on Freed",
        "the callback's panic reaches the caller",
    );
    let again = allocator
        .create_pool(&desc)
        .expect("the destroyed pool's slot is free");
    pools.push(again);
    for pool in pools {
        allocator.destroy_pool(pool).unwrap();
    }
    assert_eq!(held(&allocator, &device), nothing(&allocator));
    finish(allocator, &device);
}

/// A callback panicking on the `Freed` of the first memory object the
/// allocator's drop releases: the drop unwinds once every pool's memory is
/// freed. Before, it stopped at that pool, and the other pools' memory
/// objects leaked.
#[test]
fn a_callback_panicking_in_the_allocator_s_drop_leaves_no_memory_behind() {
    use vk_suballoc::PoolDesc;

    let (mut allocator, device) = allocator_with(FakeLayout::discrete(), Config::default());
    let panic_on = panic_once_when_armed(&mut allocator);
    // Memory in two default pools and a custom one, left for the drop.
    let kept = [
        dedicated(&allocator),
        allocator
            .allocate(&buffer(4096, 256, Usage::UPLOAD))
            .unwrap(),
    ];
    let desc = PoolDesc::new(1).block_size(1 << 20).min_blocks(2);
    let _pool = allocator.create_pool(&desc).unwrap();
    assert_eq!(held(&allocator, &device).1, 4);

    panic_on.store(ON_FREED, Ordering::SeqCst);
    let dropped = std::thread::spawn(move || drop(allocator)).join();
    assert_panicked_with(
        dropped,
        "the test's callback panics on Freed",
        "the callback's panic reaches the caller",
    );
    assert_eq!(device.live_allocations().len(), 0);
    drop(kept);
}

/// A logger panicking on the debug line of a new memory object: nothing is
/// left allocated. Before, the line came after the memory was made, mapped
/// and counted, and the unwind leaked the object (handed to nobody).
#[test]
fn a_logger_panicking_on_a_new_memory_object_leaves_no_memory_behind() {
    let (allocator, device) = allocator_with(FakeLayout::discrete(), Config::default());
    super::super::leak_log::panic_on_line_with("bytes of memory type");
    let made = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| dedicated(&allocator)));
    assert_panicked_with(
        made,
        "the test's logger panics on \"bytes of memory type\"",
        "the logger's panic reaches the caller",
    );
    assert_eq!(held(&allocator, &device), nothing(&allocator));
    free(&allocator, dedicated(&allocator));
    finish(allocator, &device);
}

/// A logger panicking on the error line of a damaged margin, when its
/// allocation is freed: the allocation is freed all the same (its block
/// stays, as the pool's kept empty block). Before, the line came before the free, and the unwind
/// left the allocation live until the allocator's drop.
#[test]
fn a_logger_panicking_on_a_damaged_margin_still_frees_its_allocation() {
    let config = Config {
        debug_margin: 16,
        detect_corruption: true,
        ..Config::default()
    };
    let (allocator, device) = allocator_with(FakeLayout::discrete(), config);
    let victim = allocator
        .allocate(&buffer(1000, 16, Usage::UPLOAD))
        .unwrap();
    // SAFETY: no slice of the allocation is alive across the call.
    let written = unsafe { device.write(victim.memory(), victim.offset() + 1000, &[0xAB]) };
    assert!(written);
    super::super::leak_log::panic_on_line_with("memory corruption");
    let freed = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        // SAFETY: no GPU work uses it.
        unsafe { allocator.free(victim) }
    }));
    assert_panicked_with(
        freed,
        "the test's logger panics on \"memory corruption\"",
        "the logger's panic reaches the caller",
    );
    assert_eq!(allocator.corruptions_detected(), 1);
    assert_eq!(allocator.stats().live_bytes(), 0);
    finish(allocator, &device);
}

/// A logger panicking on the error line of a write after free, found when
/// a new allocation takes the written bytes (`Config::debug_fill`): the new
/// allocation, handed to nobody, is freed before the panic goes on. Before,
/// the line came after the allocation was placed, and the unwind left it
/// live until the allocator's drop.
#[test]
fn a_logger_panicking_on_a_write_after_free_frees_the_new_allocation() {
    let config = Config {
        debug_fill: true,
        large_heap_block_size: 4 << 20,
        ..Config::default()
    };
    let (allocator, device) = allocator_with(FakeLayout::discrete(), config);
    let keeper = allocator.allocate(&buffer(64, 16, Usage::UPLOAD)).unwrap();
    let live = allocator.stats().live_bytes();
    let old = allocator
        .allocate(&buffer(50_000, 16, Usage::UPLOAD))
        .unwrap();
    let (memory, offset) = (old.memory(), old.offset());
    free(&allocator, old);
    // SAFETY: no slice of these bytes is alive across the call.
    assert!(unsafe { device.write(memory, offset + 7, &[0x42]) });
    super::super::leak_log::panic_on_line_with("written after it was freed");
    let made = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        allocator.allocate(&buffer(50_000, 16, Usage::UPLOAD))
    }));
    assert_panicked_with(
        made,
        "the test's logger panics on \"written after it was freed\"",
        "the logger's panic reaches the caller",
    );
    assert_eq!(allocator.corruptions_detected(), 1);
    assert_eq!(allocator.stats().live_bytes(), live);
    free(&allocator, keeper);
    finish(allocator, &device);
}

/// A logger panicking on the error line of a write after free found in a
/// defragmentation plan's destination (`Config::debug_fill`): the plan's
/// moves are given up before the panic goes on, so that their
/// destinations, handed to nobody, are freed with the next collect. Before,
/// the lines were logged while the plan was built, and the unwind left the
/// destinations live until the allocator's drop.
#[test]
fn a_logger_panicking_on_a_write_after_free_gives_up_the_plan() {
    let config = Config {
        debug_fill: true,
        small_buffer_limit: 0,
        large_heap_block_size: 4 << 20,
        ..Config::default()
    };
    let (allocator, device) = allocator_with(FakeLayout::discrete(), config);
    // Every freed range written: whichever the plan takes is caught.
    let live = keep_every_third(
        &allocator,
        &buffer(200_000, 256, Usage::UPLOAD),
        |memory, offset| {
            // SAFETY: no slice of these bytes is alive across the call.
            assert!(unsafe { device.write(memory, offset + 5, &[0x42]) });
        },
    );
    let live_bytes = allocator.stats().live_bytes();
    let limits = compacting();
    super::super::leak_log::panic_on_line_with("written after it was freed");
    let planned = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        allocator.plan_defragmentation(&movables(&live), &limits)
    }));
    assert_panicked_with(
        planned,
        "the test's logger panics on \"written after it was freed\"",
        "the logger's panic reaches the caller",
    );
    assert!(allocator.corruptions_detected() >= 1);
    let fence = end_frame(&allocator, &device);
    device.signal_fence(fence);
    allocator.collect().unwrap();
    assert_eq!(allocator.stats().live_bytes(), live_bytes);
    for a in live {
        free(&allocator, a);
    }
    finish(allocator, &device);
}

/// A callback panicking on the memory `allocate_many` makes for its
/// second request: the first request's allocation is freed too before the
/// panic goes on. Before `allocate_many` caught it, that allocation's
/// handle was dropped in the unwind and its memory held until drop.
#[test]
fn a_callback_panicking_in_allocate_many_leaves_no_memory_behind() {
    let (mut allocator, device) = allocator_with(FakeLayout::discrete(), Config::default());
    let made = std::sync::atomic::AtomicU32::new(0);
    allocator.set_memory_callback(move |event| {
        if event.kind == MemoryEventKind::Allocated && made.fetch_add(1, Ordering::SeqCst) == 1 {
            panic!("the test's callback panics on the second object");
        }
    });
    let request = buffer(1 << 20, 256, Usage::DEVICE_LOCAL).dedicated(DedicatedPolicy::Always);
    let made = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        allocator.allocate_many(&[request, request])
    }));
    assert_panicked_with(
        made,
        "the test's callback panics on the second object",
        "the callback's panic reaches the caller",
    );
    assert_eq!(held(&allocator, &device), nothing(&allocator));
    finish(allocator, &device);
}

/// A damaged margin found by the free that empties a custom pool's second
/// block, whose release the callback panics on: the error line naming the
/// allocation is logged all the same before the panic goes on. Before, the
/// line came after the free, and the panic skipped it: the corruption was
/// counted but never logged.
#[test]
fn a_callback_panicking_as_a_damaged_allocation_is_freed_still_lets_its_line_out() {
    use vk_suballoc::{AllocationDesc, PoolDesc, Request, ResourceKind};

    super::super::leak_log::install();
    let config = Config {
        debug_margin: 16,
        detect_corruption: true,
        ..Config::default()
    };
    let (mut allocator, device) = allocator_with(FakeLayout::discrete(), config);
    let panic_on = panic_once_when_armed(&mut allocator);
    let pool = allocator
        .create_pool(&PoolDesc::new(2).block_size(1 << 20))
        .unwrap();
    let request = |name| {
        let desc = AllocationDesc::new(Usage::UPLOAD).pool(pool).name(name);
        Request::with_desc(
            super::super::requirements(400 << 10, 16),
            ResourceKind::Buffer,
            desc,
        )
    };
    // Two in the first block, the third in a second one.
    let neighbour = allocator.allocate(&request("neighbour")).unwrap();
    let victim = allocator
        .allocate(&request("victim of a panicking release"))
        .unwrap();
    let alone = allocator.allocate(&request("alone")).unwrap();
    assert_eq!(neighbour.memory(), victim.memory());
    assert_ne!(alone.memory(), victim.memory());
    free(&allocator, alone);
    free(&allocator, neighbour);
    // SAFETY: no slice of the allocation is alive across the call.
    let written = unsafe { device.write(victim.memory(), victim.offset() + (400 << 10), &[0xAB]) };
    assert!(written);

    // The victim's free empties its block: one empty block too many for
    // the custom pool, whose release the callback panics on.
    panic_on.store(ON_FREED, Ordering::SeqCst);
    let freed = std::thread::scope(|scope| scope.spawn(|| free(&allocator, victim)).join());
    assert_panicked_with(
        freed,
        "the test's callback panics on Freed",
        "the callback's panic reaches the caller",
    );
    assert_eq!(allocator.corruptions_detected(), 1);
    let lines = super::super::leak_log::lines();
    assert!(
        lines.iter().any(|line| line.contains("memory corruption")
            && line.contains("victim of a panicking release")),
        "no line names the damaged allocation: {lines:#?}"
    );
    allocator.destroy_pool(pool).unwrap();
    assert_eq!(held(&allocator, &device), nothing(&allocator));
    finish(allocator, &device);
}
