//! The whole API from threads on three small GPUs (mobile, integrated,
//! discrete): `whole_api_from_threads` runs the shared world's threads over
//! a layout, then checks its figures and the device, once per layout. Apart
//! from the world itself, which the pool and defragmentation tests under
//! the threads share.

use vk_suballoc::device::fake::FakeLayout;
use vk_suballoc::{Allocation, Config};

use super::super::seeded_rng::Rng;
use super::super::{allocator_with, finish};
use super::{World, MIB, THREADS};

fn whole_api_from_threads(test: &str, layout: FakeLayout) {
    whole_api_from_threads_with(test, layout, Config::default());
}

fn whole_api_from_threads_with(test: &str, layout: FakeLayout, config: Config) {
    let seed = Rng::seed(test);
    let object_limit = layout.max_memory_allocation_count;
    let (allocator, device) = allocator_with(layout, config);
    let world = World::new(&allocator, &device, object_limit);
    let (survivors, private) = std::thread::scope(|scope| {
        let world = &world;
        let handles: Vec<_> = (0..THREADS)
            .map(|thread| scope.spawn(move || world.run(seed, thread)))
            .collect();
        let mut survivors: Vec<(u64, Allocation)> = Vec::new();
        let mut private = None;
        for handle in handles {
            let (live, pool) = handle.join().unwrap();
            survivors.extend(live);
            private = private.or(pool);
        }
        (survivors, private)
    });
    world.finish_frames();
    // Every frame is over: the private pool's frees are collected.
    if let Some(left) = private {
        assert!(world.destroy_private(&left), "the private pool");
    }
    let pooled = survivors
        .iter()
        .filter(|(_, a)| a.is_in_custom_pool())
        .count();
    assert_eq!(world.pooled_allocations(), pooled as u64);

    // The figures match what is alive, and nothing overlaps (the shadow
    // checked each range as it was handed out; it must hold the survivors).
    let stats = allocator.stats();
    // Each ring holds a chunk or more.
    assert!(stats.allocations() >= survivors.len() as u64 + 2);
    assert_eq!(
        allocator.memory_map().allocation_count() as u64,
        stats.allocations()
    );
    let reserved: Vec<u64> = stats.heaps.iter().map(|h| h.reserved_bytes).collect();
    assert_eq!(reserved, device.heap_usage());
    assert_eq!(world.shadow().live.len(), survivors.len());
    assert_eq!(
        stats.memory_objects as usize,
        device.live_allocations().len()
    );
    world.free_all(survivors);
    // The threads wrote only their own bytes: with debug fills and
    // margins, nothing may read as written after free or past an end.
    assert_eq!(allocator.corruptions_detected(), 0, "{test}: seed {seed}");
    finish(allocator, &device);
}

#[test]
fn whole_api_from_threads_on_a_small_mobile_gpu() {
    whole_api_from_threads(
        "whole_api_from_threads_on_a_small_mobile_gpu",
        FakeLayout::mobile()
            .with_heap_sizes(24 * MIB)
            .with_max_allocation_count(10),
    );
}

#[test]
fn whole_api_from_threads_on_a_small_integrated_gpu() {
    // No budget extension: budgets are the allocator's own counts.
    whole_api_from_threads(
        "whole_api_from_threads_on_a_small_integrated_gpu",
        FakeLayout::integrated()
            .with_heap_sizes(32 * MIB)
            .with_max_allocation_count(8),
    );
}

#[test]
fn whole_api_from_threads_on_a_small_discrete_gpu() {
    whole_api_from_threads(
        "whole_api_from_threads_on_a_small_discrete_gpu",
        FakeLayout::discrete()
            .with_heap_sizes(32 * MIB)
            .with_max_allocation_count(12),
    );
}

#[test]
fn whole_api_from_threads_with_debug_work_on_a_small_mobile_gpu() {
    // Debug fills (non-coherent types included) and margins: their
    // checks and fills run beside the other threads' writes, flushes,
    // ring copies and corruption checks.
    let config = Config {
        debug_fill: true,
        detect_corruption: true,
        debug_margin: 16,
        ..Config::default()
    };
    whole_api_from_threads_with(
        "whole_api_from_threads_with_debug_work_on_a_small_mobile_gpu",
        FakeLayout::mobile()
            .with_heap_sizes(24 * MIB)
            .with_max_allocation_count(10),
        config,
    );
}
