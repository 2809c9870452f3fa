//! Calls made from a thread-local's destructor as its thread exits (a
//! per-thread cache that frees its allocations on drop, say). The
//! allocator keeps per-thread state of its own (the debug work's log
//! lines, `memory/deferred_log.rs`), which the thread may have destroyed
//! first: a call must not need it then. Before, `free` of an allocation
//! with debug work, `trim`, `end_frame` and `collect` (the last three
//! with debug work off too) read it, and the read's panic in a
//! thread-local's destructor aborted the process.

use std::cell::RefCell;
use std::sync::Arc;

use vk_suballoc::device::fake::{FakeDevice, FakeLayout};
use vk_suballoc::{Allocation, Config, Usage};

use super::frames::end_frame;
use super::{allocator_with, buffer, finish, free, FakeAllocator};

/// Frees its allocation, then ends and collects a frame and trims, when
/// dropped.
struct FreeOnExit {
    allocator: Arc<FakeAllocator>,
    device: FakeDevice,
    allocation: Option<Allocation>,
}

impl Drop for FreeOnExit {
    fn drop(&mut self) {
        if let Some(allocation) = self.allocation.take() {
            free(&self.allocator, allocation);
        }
        let fence = end_frame(&self.allocator, &self.device);
        self.device.signal_fence(fence);
        self.allocator.collect().unwrap();
        self.allocator.trim();
    }
}

thread_local! {
    static HELD: RefCell<Option<FreeOnExit>> = const { RefCell::new(None) };
}

/// A thread stores a `FreeOnExit` in a thread-local, then calls the
/// allocator (which sets up its own thread-locals after that one, so
/// that they are destroyed first) and exits; the allocation is freed.
fn calls_from_a_thread_local_s_destructor(config: Config) {
    let (allocator, device) = allocator_with(FakeLayout::discrete(), config);
    let allocator = Arc::new(allocator);
    let allocation = allocator
        .allocate(&buffer(50_000, 16, Usage::UPLOAD))
        .unwrap();
    let (for_thread, thread_device) = (Arc::clone(&allocator), device.clone());
    std::thread::spawn(move || {
        HELD.with(|held| {
            *held.borrow_mut() = Some(FreeOnExit {
                allocator: Arc::clone(&for_thread),
                device: thread_device.clone(),
                allocation: Some(allocation),
            });
        });
        let fence = end_frame(&for_thread, &thread_device);
        thread_device.signal_fence(fence);
        for_thread.collect().unwrap();
        for_thread.trim();
    })
    .join()
    .unwrap();
    assert_eq!(allocator.stats().live_bytes(), 0);
    let allocator = Arc::into_inner(allocator).expect("the thread's destructor dropped its Arc");
    finish(allocator, &device);
}

#[test]
fn with_debug_fills() {
    calls_from_a_thread_local_s_destructor(Config {
        debug_fill: true,
        ..Config::default()
    });
}

#[test]
fn without_debug_work() {
    calls_from_a_thread_local_s_destructor(Config::default());
}
