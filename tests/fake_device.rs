//! The allocator on the fake device: every path lavapipe cannot reach
//! (several memory types, non-coherent memory, out-of-memory fallbacks,
//! object limits, map failures, granularity), with the device's allocate and
//! free counts balanced at the end of every test.

#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "fake_device/adversarial.rs"]
mod adversarial;
#[path = "fake_device/aliasing.rs"]
mod aliasing;
#[path = "fake_device/allocation_log.rs"]
mod allocation_log;
#[path = "fake_device/allocation_paths.rs"]
mod allocation_paths;
#[path = "fake_device/api_walk.rs"]
mod api_walk;
#[path = "fake_device/backend_panics.rs"]
mod backend_panics;
#[path = "fake_device/bad_input.rs"]
mod bad_input;
#[path = "fake_device/budget_edge.rs"]
mod budget_edge;
#[path = "fake_device/budget_threads.rs"]
mod budget_threads;
#[path = "fake_device/budget_walk.rs"]
mod budget_walk;
#[path = "fake_device/budgets.rs"]
mod budgets;
#[path = "fake_device/debug_fill.rs"]
mod debug_fill;
#[path = "fake_device/debug_fill_non_coherent.rs"]
mod debug_fill_non_coherent;
#[path = "fake_device/debug_fill_walk.rs"]
mod debug_fill_walk;
#[path = "fake_device/defragment.rs"]
mod defragment;
#[path = "fake_device/defragment_debug_fill.rs"]
mod defragment_debug_fill;
#[path = "fake_device/defragment_walk.rs"]
mod defragment_walk;
#[path = "fake_device/device_address.rs"]
mod device_address;
#[path = "fake_device/driver_images.rs"]
mod driver_images;
#[path = "fake_device/empty_block_release.rs"]
mod empty_block_release;
#[path = "fake_device/extreme_handles.rs"]
mod extreme_handles;
#[path = "fake_device/extremes.rs"]
mod extremes;
#[path = "fake_device/failures.rs"]
mod failures;
#[path = "fake_device/frames.rs"]
mod frames;
#[path = "fake_device/granularity.rs"]
mod granularity;
#[path = "fake_device/granularity_walk.rs"]
mod granularity_walk;
#[path = "fake_device/heap_size_limits.rs"]
mod heap_size_limits;
#[path = "common/layout_model.rs"]
mod layout_model;
#[path = "fake_device/leak_log.rs"]
mod leak_log;
#[path = "fake_device/mapping.rs"]
mod mapping;
#[path = "fake_device/margins.rs"]
mod margins;
#[path = "fake_device/memory_events.rs"]
mod memory_events;
#[path = "fake_device/misuse.rs"]
mod misuse;
#[path = "fake_device/model.rs"]
mod model;
#[path = "fake_device/mut_parity.rs"]
mod mut_parity;
#[path = "fake_device/pool_edges.rs"]
mod pool_edges;
#[path = "fake_device/pool_export.rs"]
mod pool_export;
#[path = "fake_device/pools.rs"]
mod pools;
#[path = "fake_device/reentrant_logger.rs"]
mod reentrant_logger;
#[path = "fake_device/report.rs"]
mod report;
#[path = "fake_device/ring_fill.rs"]
mod ring_fill;
#[path = "fake_device/runs.rs"]
mod runs;
#[path = "fake_device/runs_walk.rs"]
mod runs_walk;
#[path = "common/seeded_rng.rs"]
mod seeded_rng;
#[path = "fake_device/stress.rs"]
mod stress;
#[path = "fake_device/svg.rs"]
mod svg;
#[path = "fake_device/thread_exit.rs"]
mod thread_exit;
#[path = "fake_device/threads.rs"]
mod threads;
#[path = "fake_device/vma_dump.rs"]
mod vma_dump;
#[path = "fake_device/walk_text.rs"]
mod walk_text;

use ash::vk;
use vk_suballoc::device::fake::{FakeDevice, FakeLayout, FakeMemory};
use vk_suballoc::{Allocation, Allocator, Config, Request, ResourceKind, Usage};

/// The allocator type these tests use.
pub type FakeAllocator = Allocator<FakeDevice, FakeMemory>;

/// An allocator over a new fake device; returns a clone of the device too.
pub fn allocator(layout: FakeLayout) -> (FakeAllocator, FakeDevice) {
    allocator_with(layout, Config::default())
}

/// As [`allocator`], with a configuration.
pub fn allocator_with(layout: FakeLayout, config: Config) -> (FakeAllocator, FakeDevice) {
    let device = FakeDevice::new(layout);
    let allocator = Allocator::new(device.clone(), config).unwrap();
    (allocator, device)
}

/// The default configuration with runs off: every allocation takes a range
/// of its own, for tests of how ranges pack.
pub fn without_runs() -> Config {
    Config {
        small_buffer_limit: 0,
        ..Config::default()
    }
}

/// Every placement strategy, for walks that draw one per request.
pub const STRATEGIES: [vk_suballoc::Strategy; 4] = [
    vk_suballoc::Strategy::MinTime,
    vk_suballoc::Strategy::MinMemory,
    vk_suballoc::Strategy::MinOffset,
    vk_suballoc::Strategy::MaxOffset,
];

/// Memory requirements allowing every type.
pub fn requirements(size: u64, alignment: u64) -> vk::MemoryRequirements {
    vk::MemoryRequirements {
        size,
        alignment,
        memory_type_bits: !0,
    }
}

/// A buffer request.
pub fn buffer(size: u64, alignment: u64, usage: Usage) -> Request<'static> {
    Request::new(requirements(size, alignment), usage, ResourceKind::Buffer)
}

/// [`Request::dedicated_target`] for the fake device's resources.
pub trait FakeTarget {
    /// The request with `target` as its dedicated target.
    fn fake_target(self, target: vk_suballoc::DedicatedTarget) -> Self;
}

impl FakeTarget for Request<'_> {
    fn fake_target(self, target: vk_suballoc::DedicatedTarget) -> Self {
        // SAFETY: no driver sees the handle: the fake device checks a
        // dedicated target itself (a resource it never made, or one
        // destroyed, is a reported violation), which is what these tests
        // exercise.
        unsafe { self.dedicated_target(target) }
    }
}

/// Frees `allocation`, which the test never submitted to a GPU.
pub fn free(allocator: &FakeAllocator, allocation: Allocation) {
    // SAFETY: the fake device runs no GPU work.
    unsafe { allocator.free(allocation) }.unwrap();
}

/// Checks that a block's ranges in the memory map tile it: each starts where
/// the one before ends, the first at 0, the last ending at the block's size.
pub fn assert_ranges_tile(block: &vk_suballoc::report::BlockMap, context: &str) {
    let mut end = 0;
    for range in &block.ranges {
        assert_eq!(range.offset, end, "{context}: gap or overlap in the map");
        end += range.size;
    }
    assert_eq!(end, block.size, "{context}");
}

/// Whether a heap reading of `usage` bytes against `budget` had no room
/// for `size` more, as the allocator's budget check decides (a sum past
/// `u64::MAX` has none): what an `OverBudget` error's figures must say.
pub fn no_room(usage: u64, size: u64, budget: u64) -> bool {
    usage.checked_add(size).map_or(true, |total| total > budget)
}

/// The memory types a request tries, in order, among `candidates` (a bit
/// per type): each next one as `rank` names it among those left
/// (`memory_type_for` or `memory_type_for_desc`; `None` when it names
/// none), less AMD's device-coherent types (`amd_device_coherent_types`)
/// unless the first is one: they are no ordinary request's fallback.
pub fn tried_order(
    candidates: u32,
    amd_device_coherent_types: u32,
    mut rank: impl FnMut(u32) -> Option<u32>,
) -> Vec<u32> {
    let mut left = candidates;
    let mut order = Vec::new();
    while let Some(next) = rank(left) {
        assert!(
            left & (1 << next) != 0,
            "the ranking of {left:#b} named {next}"
        );
        order.push(next);
        left &= !(1 << next);
    }
    let last_resort = |t: u32| amd_device_coherent_types & (1 << t) != 0;
    let first_is_one = order.first().is_some_and(|&t| last_resort(t));
    order.retain(|&t| first_is_one || !last_resort(t));
    order
}

/// The rule a violation of the fake device names: the text before its
/// first `": "`. The device writes each breach as `"<rule>: <what was
/// wrong>"`, its rule the VUID where Vulkan gives one
/// (`"VUID-vkMapMemory-size-00680: size 0"`), else the call
/// (`"vkMapMemory: memory 0x5 is not live"`).
pub fn rule_id(violation: &str) -> &str {
    violation
        .split_once(": ")
        .map_or(violation, |(rule, _)| rule)
}

/// Checks that `violations` name exactly `rules`, in order, each by its
/// whole rule id: a test matching a part of the line would pass when
/// another rule containing it fired (`image-parameter` for
/// `VUID-vkBindImageMemory-image-parameter`), or the expected id only
/// appeared inside another violation's text.
pub fn assert_rules(violations: &[String], rules: &[&str], context: &str) {
    let fired: Vec<&str> = violations.iter().map(|v| rule_id(v)).collect();
    assert_eq!(fired, rules, "{context}: {violations:#?}");
}

/// The message of a caught panic (`panic!` with a literal or a format).
pub fn panic_message(payload: &(dyn std::any::Any + Send)) -> &str {
    (payload.downcast_ref::<String>().map(String::as_str))
        .or_else(|| payload.downcast_ref::<&str>().copied())
        .unwrap_or("<a panic with no message>")
}

/// Checks that `caught` (from `catch_unwind` or a joined thread) is the
/// panic whose message is `expected`: a call that returned, or unwound
/// from another panic (an `unwrap` of an error, an assertion), fails.
pub fn assert_panicked_with<T>(caught: std::thread::Result<T>, expected: &str, what: &str) {
    match caught {
        Ok(_) => panic!("{what}: no panic"),
        Err(payload) => assert_eq!(panic_message(&*payload), expected, "{what}"),
    }
}

/// The message of the panic [`FakeDevice::panic_on`] injects into `call`.
pub fn injected_panic(call: vk_suballoc::device::fake::FakeCall) -> String {
    format!("FakeDevice: {call:?} panicked (as asked)")
}

/// Drops the allocator and checks the device: no memory object left, no rule
/// broken, allocate and free counts equal.
pub fn finish(allocator: FakeAllocator, device: &FakeDevice) {
    drop(allocator);
    device.assert_clean();
}

/// The allocator and what an engine keeps of it (handles, plans, rings'
/// allocations) move and are shared between threads; its errors go into
/// `Box<dyn Error + Send + Sync>` (anyhow's, say).
#[test]
fn allocator_is_send_and_sync() {
    fn check<T: Send + Sync>() {}
    fn check_error<T: std::error::Error + Send + Sync + 'static>() {}
    check::<FakeAllocator>();
    check::<Allocator<vk_suballoc::device::AshMemoryDevice>>();
    check::<Allocation>();
    check::<vk_suballoc::Pool>();
    check::<vk_suballoc::UploadRing>();
    check::<vk_suballoc::RingAllocation>();
    check::<vk_suballoc::DefragmentationPlan>();
    check::<vk_suballoc::offset::OffsetAllocator<3>>();
    check::<vk_suballoc::offset::LinearAllocator>();
    check_error::<vk_suballoc::Error>();
    check_error::<vk_suballoc::offset::OffsetError>();
}

/// `FakeDevice::assert_clean`, which every test's `finish` ends with,
/// panics on each leftover alone (a live memory object, a live buffer or
/// image, a broken rule) and passes once the object is gone; with it
/// passing always, every test's leak check would pass unseen.
#[test]
fn assert_clean_panics_on_each_leftover() {
    use std::panic::{catch_unwind, AssertUnwindSafe};
    use vk_suballoc::device::{AllocationFlags, MemoryDevice};

    let device = FakeDevice::new(FakeLayout::discrete());
    let clean = || catch_unwind(AssertUnwindSafe(|| device.assert_clean())).is_ok();
    assert!(clean(), "a new device");
    // SAFETY: a fake device; the memory is freed below.
    let memory = unsafe { device.allocate_memory(4096, 1, AllocationFlags::empty()) }.unwrap();
    assert!(!clean(), "a live memory object");
    // SAFETY: as above; freed once.
    unsafe { device.deallocate_memory(memory) };
    assert!(clean(), "the memory freed");
    let resource = device.create_resource();
    assert!(!clean(), "a live buffer");
    device.destroy_resource(resource);
    assert!(clean(), "the buffer destroyed");
    // A violation stays on record: destroying the buffer again.
    device.destroy_resource(resource);
    assert!(!clean(), "a broken rule");
}

/// `rule_id` takes a violation's whole rule and nothing else: the VUID
/// before the text, not a part of it nor of the text.
#[test]
fn rule_id_is_the_whole_rule() {
    assert_eq!(
        rule_id("VUID-vkMapMemory-size-00680: size 0 (VUID-x)"),
        "VUID-vkMapMemory-size-00680"
    );
    assert_eq!(
        rule_id("VUID-vkBindBufferMemory-memory-01035: memory type not in memoryTypeBits (buffer 0x2, memory 0x3, offset 0)"),
        "VUID-vkBindBufferMemory-memory-01035"
    );
    assert_eq!(rule_id("no rule"), "no rule");
}
