//! `Config::log_allocations` (gpu-allocator's `log_allocations` and
//! `log_frees`): a debug line for each allocation as it is made and as it
//! is freed, saying its name, size and where it lies, in a block, a run's
//! slot, dedicated memory or a custom pool; a free queued behind a frame
//! is logged when `collect` carries it out; a stale free logs nothing;
//! without the option nothing is logged; and a logger that calls back into
//! the allocator on such a line does not deadlock.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::Duration;

use ash::vk::Handle;
use vk_suballoc::device::fake::FakeLayout;
use vk_suballoc::{
    Allocation, AllocationDesc, Config, DedicatedPolicy, Error, PoolDesc, Request, ResourceKind,
    Usage,
};

use super::defragment::movables;
use super::frames::end_frame;
use super::leak_log::{on_line_with, record_thread_lines, take_thread_lines};
use super::{allocator, allocator_with, assert_panicked_with, buffer, finish, free, requirements};

fn logging() -> Config {
    Config {
        log_allocations: true,
        ..Config::default()
    }
}

/// The line the log has for `allocation`, `what` ("made", "freed"),
/// in a block whose serial in its memory type is `block`, or in dedicated
/// memory (`None`); `pool` is the custom pool's part.
fn line(what: &str, name: &str, allocation: &Allocation, block: Option<u32>, pool: &str) -> String {
    let memory_type = allocation.memory_type();
    let place = match block {
        Some(serial) => format!(
            "at offset {} of block {memory_type}/{serial}",
            allocation.offset()
        ),
        None => "of dedicated memory".to_owned(),
    };
    format!(
        "DEBUG: vk-suballoc: allocation {name:?} {what}: {} bytes {place}{pool} (memory type {memory_type}, memory {:#x})",
        allocation.size(),
        allocation.memory().as_raw()
    )
}

/// The allocation lines among this thread's (not the memory objects' own
/// debug lines).
fn allocator_lines() -> Vec<String> {
    take_thread_lines()
        .into_iter()
        .filter(|line| line.contains("vk-suballoc: allocation \""))
        .collect()
}

/// A 4 KiB upload buffer named "dedicated" in memory of its own.
fn dedicated_upload() -> Request<'static> {
    buffer(4096, 256, Usage::UPLOAD)
        .name("dedicated")
        .dedicated(DedicatedPolicy::Always)
}

#[test]
fn every_allocation_and_free_is_logged() {
    record_thread_lines();
    let (allocator, device) = allocator_with(FakeLayout::discrete(), logging());
    let pool = allocator
        .create_pool(&PoolDesc {
            name: Some("logged pool"),
            ..PoolDesc::new(1)
        })
        .unwrap();
    let pooled = Request::with_desc(
        requirements(1 << 20, 256),
        ResourceKind::Buffer,
        AllocationDesc::new(Usage::DEVICE_LOCAL)
            .pool(pool)
            .name("pooled"),
    );
    let block = allocator
        .allocate(&buffer(64 << 10, 256, Usage::DEVICE_LOCAL).name("in a block"))
        .unwrap();
    let slot = allocator
        .allocate(&buffer(1000, 16, Usage::DEVICE_LOCAL).name("in a slot"))
        .unwrap();
    let dedicated = allocator.allocate(&dedicated_upload()).unwrap();
    let in_pool = allocator.allocate(&pooled).unwrap();
    let unnamed = allocator
        .allocate(&buffer(64 << 10, 256, Usage::DEVICE_LOCAL))
        .unwrap();
    let pool_part = " in custom pool \"logged pool\"";
    assert!(dedicated.is_dedicated());
    assert_eq!(
        allocator_lines(),
        [
            line("made", "in a block", &block, Some(0), ""),
            line("made", "in a slot", &slot, Some(0), ""),
            line("made", "dedicated", &dedicated, None, ""),
            line("made", "pooled", &in_pool, Some(0), pool_part),
            line("made", "unnamed", &unnamed, Some(0), ""),
        ]
    );

    // Frees, each worded as its allocation was, and a stale one: nothing.
    let freed_lines = [
        line("freed", "in a block", &block, Some(0), ""),
        line("freed", "in a slot", &slot, Some(0), ""),
        line("freed", "dedicated", &dedicated, None, ""),
        line("freed", "pooled", &in_pool, Some(0), pool_part),
    ];
    // SAFETY: `Allocation` owns nothing on the heap and has no `Drop`; the
    // copy only names the freed slot, refused as stale below.
    let copy = unsafe { std::ptr::read(&slot) };
    for allocation in [block, slot, dedicated, in_pool] {
        free(&allocator, allocation);
    }
    // SAFETY: the fake device runs no GPU work.
    assert_eq!(unsafe { allocator.free(copy) }, Err(Error::StaleAllocation));
    assert_eq!(allocator_lines(), freed_lines);

    // Behind a frame: logged when `collect` carries the free out.
    let unnamed_freed = line("freed", "unnamed", &unnamed, Some(0), "");
    allocator.free_after_frame(unnamed).unwrap();
    let fence = end_frame(&allocator, &device);
    assert_eq!(allocator_lines(), Vec::<String>::new());
    device.signal_fence(fence);
    allocator.collect().unwrap();
    assert_eq!(allocator_lines(), [unnamed_freed]);

    // `allocate_many`, each of its allocations.
    let many = allocator
        .allocate_many(&[
            buffer(64 << 10, 256, Usage::DEVICE_LOCAL).name("first of many"),
            buffer(64 << 10, 256, Usage::DEVICE_LOCAL).name("second of many"),
        ])
        .unwrap();
    assert_eq!(
        allocator_lines(),
        [
            line("made", "first of many", &many[0], Some(0), ""),
            line("made", "second of many", &many[1], Some(0), ""),
        ]
    );
    for allocation in many {
        free(&allocator, allocation);
    }
    allocator.destroy_pool(pool).unwrap();
    finish(allocator, &device);
}

#[test]
fn without_the_option_nothing_is_logged() {
    record_thread_lines();
    let (allocator, device) = allocator(FakeLayout::discrete());
    let allocation = allocator
        .allocate(&buffer(64 << 10, 256, Usage::DEVICE_LOCAL).name("quiet"))
        .unwrap();
    free(&allocator, allocation);
    finish(allocator, &device);
    assert_eq!(allocator_lines(), Vec::<String>::new());
}

/// A logger that reads the allocator's stats on an allocation's or a
/// free's line: both are logged once the pool's lock is released, so the
/// call goes through (on a thread of its own, failing after 20 seconds
/// rather than hanging on a deadlock).
#[test]
fn a_logger_may_call_back_in_on_an_allocation_line() {
    let (allocator, device) = allocator_with(FakeLayout::discrete(), logging());
    let allocator = Arc::new(allocator);
    let (done, finished) = mpsc::channel();
    let shared = Arc::clone(&allocator);
    let calls = Arc::new(AtomicU32::new(0));
    let counted = Arc::clone(&calls);
    let thread = std::thread::spawn(move || {
        let hook = |text: &'static str| {
            let reader = Arc::clone(&shared);
            let counted = Arc::clone(&counted);
            on_line_with(text, move || {
                let _ = reader.stats();
                counted.fetch_add(1, Ordering::Relaxed);
            });
        };
        hook("vk-suballoc: allocation \"hooked\" made");
        let allocation = shared
            .allocate(&buffer(64 << 10, 256, Usage::DEVICE_LOCAL).name("hooked"))
            .unwrap();
        hook("vk-suballoc: allocation \"hooked\" freed");
        // SAFETY: the fake device runs no GPU work.
        unsafe { shared.free(allocation) }.unwrap();
        done.send(()).unwrap();
    });
    finished
        .recv_timeout(Duration::from_secs(20))
        .expect("the logger's call back into the allocator deadlocked");
    thread.join().unwrap();
    // The made line's hook, then the freed line's.
    assert_eq!(calls.load(Ordering::Relaxed), 2);
    let allocator = Arc::try_unwrap(allocator).ok().unwrap();
    finish(allocator, &device);
}

/// A defragmentation plan logs each move's destination as made, named as
/// its source; the placements it tries for a block whose allocations do
/// not all fit elsewhere, and undoes, were never handed out: neither
/// made nor freed is logged for them.
#[test]
fn a_plan_logs_its_destinations_and_not_the_placements_it_undoes() {
    const MIB: u64 = 1 << 20;
    record_thread_lines();
    let config = Config {
        small_buffer_limit: 0,
        ..logging()
    };
    let (allocator, device) = allocator_with(FakeLayout::discrete(), config);
    // 32 buffers of 1 MiB fill the first block (32 MiB), 32 more half the
    // second (64 MiB); every other one of the first block's is freed, and
    // 24 of the second's.
    let all: Vec<Allocation> = (0..64)
        .map(|_| {
            allocator
                .allocate(&buffer(MIB, 256, Usage::DEVICE_LOCAL).name("mib"))
                .unwrap()
        })
        .collect();
    let mut live = Vec::new();
    for (i, allocation) in all.into_iter().enumerate() {
        if (i < 32 && i % 2 == 0) || i >= 56 {
            live.push(allocation);
        } else {
            free(&allocator, allocation);
        }
    }
    // Two 2 MiB buffers in the second block; one 3 MiB hole in the first,
    // the rest 1 MiB: the first fits in the hole, the second does not, so
    // the first's placement is undone.
    let second = live[16].memory();
    for _ in 0..2 {
        let large = allocator
            .allocate(&buffer(2 * MIB, 256, Usage::DEVICE_LOCAL).name("large"))
            .unwrap();
        assert_eq!(large.memory(), second);
        live.push(large);
    }
    free(&allocator, live.remove(1));
    let _ = allocator_lines();
    let plan = allocator
        .plan_defragmentation(&movables(&live[15..]), &Default::default())
        .unwrap();
    assert!(plan.moves.is_empty());
    assert_eq!(
        allocator_lines(),
        Vec::<String>::new(),
        "the undone placement"
    );

    // A plan that empties the first block into the second's holes: each
    // destination is logged as made there (block 1/1), named as its
    // source.
    let plan = allocator
        .plan_defragmentation(&movables(&live[..15]), &Default::default())
        .unwrap();
    assert!(!plan.moves.is_empty());
    let made: Vec<String> = plan
        .moves
        .iter()
        .map(|planned| line("made", "mib", &planned.destination, Some(1), ""))
        .collect();
    let mut lines = allocator_lines();
    lines.sort();
    let mut expected = made;
    expected.sort();
    assert_eq!(lines, expected);
    for planned in plan.moves.into_iter().rev() {
        let old = std::mem::replace(&mut live[planned.movable], planned.destination);
        free(&allocator, old);
    }
    for allocation in live {
        free(&allocator, allocation);
    }
    finish(allocator, &device);
}

/// A memory callback that panics as a free releases its memory (dedicated
/// memory here): the allocation is freed all the same (the pool is updated
/// before the callback runs), so its free is logged before the panic goes
/// on.
#[test]
fn a_free_whose_memory_callback_panics_is_logged() {
    record_thread_lines();
    let (mut allocator, device) = allocator_with(FakeLayout::discrete(), logging());
    allocator.set_memory_callback(|event| {
        if event.kind == vk_suballoc::MemoryEventKind::Freed {
            panic!("the test's callback panics on a free");
        }
    });
    let dedicated = allocator.allocate(&dedicated_upload()).unwrap();
    let freed = line("freed", "dedicated", &dedicated, None, "");
    let _ = allocator_lines();
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        // SAFETY: the fake device runs no GPU work.
        unsafe { allocator.free(dedicated) }
    }));
    let callback = "the test's callback panics on a free";
    assert_panicked_with(outcome, callback, "the callback's panic reaches the caller");
    assert_eq!(allocator.stats().allocations(), 0);
    assert_eq!(allocator_lines(), [freed]);
    finish(allocator, &device);
}
