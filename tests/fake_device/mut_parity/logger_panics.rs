//! Regression tests of the `&mut self` twins' frees when a logger or a
//! memory callback panics mid-free, built on the walk's [`Side`].

use std::panic::{catch_unwind, AssertUnwindSafe};

use ash::vk;
use vk_suballoc::device::fake::FakeLayout;
use vk_suballoc::{AllocationDesc, Config, DedicatedPolicy, Request, ResourceKind, Usage};

use super::side::Side;
use super::{Step, MIB};
use crate::leak_log::{
    disarm_panic_on_line, panic_on_line_with, record_thread_lines, take_thread_lines,
};
use crate::panic_message;
use crate::walk_text::normalise;

/// A free that empties a block of a memory type with debug fills, and so
/// releases it and two kept empty blocks, both written after they were
/// freed, to a logger that panics on the first line of a write after free:
/// through `free` or `free_mut`, the call panics once the blocks are
/// released and both lines given to the logger. (`free_mut` logged each line at once,
/// in the middle of the release: the logger's panic stopped it after the
/// first block, and the second stayed, its line untold.)
#[test]
fn a_logger_panicking_in_a_free_that_releases_blocks_stops_neither_twin() {
    let scenario = |exclusive: bool| {
        let config = Config {
            debug_fill: true,
            small_buffer_limit: 0,
            ..Config::default()
        };
        let mut side = Side::new(
            &FakeLayout::discrete().with_heap_sizes(64 * MIB),
            &config,
            exclusive,
        );
        // Allocations of 256 KiB until a fourth block takes one: the first
        // three are full. That one goes at once (its block, the largest,
        // stays empty).
        let request =
            crate::buffer(256 << 10, 256, Usage::UPLOAD).dedicated(DedicatedPolicy::Never);
        let mut blocks: Vec<vk::DeviceMemory> = Vec::new();
        while blocks.len() < 4 {
            let allocation = side.allocator.allocate(&request).unwrap();
            if !blocks.contains(&allocation.memory()) {
                blocks.push(allocation.memory());
            }
            side.live.push(allocation);
        }
        let fourth = side.live.pop().unwrap();
        crate::free(&side.allocator, fourth);
        // The first two blocks empty (kept: the third holds their bytes
        // and more), each written after its allocations were freed.
        for &block in &blocks[..2] {
            while let Some(index) = side.live.iter().position(|a| a.memory() == block) {
                side.take(&Step::Free(index));
            }
            // SAFETY: no slice of the memory is alive.
            assert!(unsafe { side.device.write(block, 4096, &[0x24]) });
        }
        let before = side.device.counters().frees;
        record_thread_lines();
        panic_on_line_with("written after it was freed");
        let mut outcomes = Vec::new();
        while let Some(index) = side.live.iter().position(|a| a.memory() == blocks[2]) {
            let outcome = catch_unwind(AssertUnwindSafe(|| side.take(&Step::Free(index))));
            outcomes.push(
                outcome
                    .err()
                    .map(|payload| panic_message(&*payload).to_owned()),
            );
        }
        disarm_panic_on_line();
        let lines: Vec<String> = take_thread_lines()
            .iter()
            .map(|l| normalise(l))
            .filter(|l| !l.starts_with("DEBUG"))
            .collect();
        let released = side.device.counters().frees - before;
        let stats = side.allocator.stats();
        side.finish();
        (outcomes, lines, released, stats)
    };
    let locked = scenario(false);
    let exclusive = scenario(true);
    // Each free returns but the last, which panics with the logger's panic.
    let mut panics = vec![None; locked.0.len() - 1];
    panics.push(Some(
        "the test's logger panics on \"written after it was freed\"".to_owned(),
    ));
    assert_eq!(locked.0, panics, "the last free panics: {locked:?}");
    // The two written blocks, and the one just emptied; the largest stays.
    assert_eq!(locked.2, 3, "the blocks are released: {locked:?}");
    assert_eq!(locked.1.len(), 2, "both lines reach the logger: {locked:?}");
    assert_eq!(exclusive.0, locked.0, "free_mut: {exclusive:?}");
    assert_eq!(exclusive.2, locked.2, "free_mut releases: {exclusive:?}");
    assert_eq!(exclusive.1, locked.1, "free_mut's lines: {exclusive:?}");
    assert_eq!(exclusive.3, locked.3, "free_mut's stats");
}

/// A free of an allocation whose margin is damaged (corruption detection)
/// and whose block's emptying releases another empty block, to a memory
/// callback that panics on that release and a logger that panics on the
/// damaged margin's line: through `free` or `free_mut`, in a default pool
/// or a custom one, the callback's panic goes on (the logger's is dropped,
/// as `free` drops it once the pool's lock is released), the line reaches
/// the logger and the allocation is freed. (`free_mut` logged the line
/// at once, in the middle of the free: the logger's panic went on instead
/// of the callback's.)
#[test]
fn a_callback_panic_in_a_free_outranks_the_loggers_on_both_twins() {
    let scenario = |exclusive: bool, in_pool: bool| {
        let config = Config {
            detect_corruption: true,
            debug_margin: 64,
            small_buffer_limit: 0,
            ..Config::default()
        };
        let mut side = Side::new(&FakeLayout::discrete(), &config, exclusive);
        let mut desc = AllocationDesc::new(Usage::UPLOAD).dedicated(DedicatedPolicy::Never);
        let size = if in_pool {
            side.take(&Step::CreatePool {
                memory_type: 2,
                block_size: MIB,
                min_blocks: 0,
                max_blocks: 2,
            });
            desc = desc.pool(side.pools[0]);
            768 << 10
        } else {
            MIB
        };
        // Allocations until two blocks hold some.
        let request =
            Request::with_desc(crate::requirements(size, 256), ResourceKind::Buffer, desc);
        let mut blocks: Vec<vk::DeviceMemory> = Vec::new();
        while blocks.len() < 2 {
            let allocation = side.allocator.allocate(&request).unwrap();
            assert_eq!(allocation.memory_type(), 2);
            if !blocks.contains(&allocation.memory()) {
                blocks.push(allocation.memory());
            }
            side.live.push(allocation);
        }
        // The first block empties (kept); the last allocation, alone in
        // the second, is damaged past its end.
        while let Some(index) = side.live.iter().position(|a| a.memory() == blocks[0]) {
            side.take(&Step::Free(index));
        }
        while side.live.len() > 1 {
            side.take(&Step::Free(0));
        }
        assert_eq!(side.take(&Step::DamageMargin(0)), "written by the host");
        side.take(&Step::CallbackPanics(1));
        record_thread_lines();
        panic_on_line_with("memory corruption");
        let outcome = catch_unwind(AssertUnwindSafe(|| side.take(&Step::Free(0))));
        disarm_panic_on_line();
        let lines: Vec<String> = take_thread_lines()
            .into_iter()
            .filter(|line| line.contains("memory corruption"))
            .collect();
        let message = outcome
            .err()
            .map(|payload| panic_message(&*payload).to_owned());
        let stats = side.allocator.stats();
        if in_pool {
            assert_eq!(side.allocator.destroy_pool(side.pools[0]), Ok(()));
        }
        let live = side.live.len();
        side.finish();
        (message, lines.len(), live, stats)
    };
    for in_pool in [false, true] {
        let locked = scenario(false, in_pool);
        assert_eq!(
            locked.0.as_deref(),
            Some("the memory callback panics on event 3"),
            "free, in a pool: {in_pool}"
        );
        assert_eq!(locked.1, 1, "free, in a pool: {in_pool}: the line");
        assert_eq!(locked.3.allocations(), 0, "free, in a pool: {in_pool}");
        assert_eq!(
            scenario(true, in_pool),
            locked,
            "free_mut, in a pool: {in_pool}"
        );
    }
}
