//! Adversarial arguments to every public entry point: sizes, offsets and
//! alignments at 0, 1, non-powers of two and near `u64::MAX`, reversed and
//! overflowing ranges, layouts at Vulkan's limits. Each gets a typed error
//! (or a correct result) and leaves the allocator consistent: never a
//! panic, never a wrapped figure.

use gpu_alloc_types::{MemoryHeap, MemoryPropertyFlags as Props, MemoryType};
use vk_suballoc::device::fake::{FakeDevice, FakeLayout};
use vk_suballoc::{Allocator, Config, DedicatedPolicy, Error, Usage};

use super::{allocator, buffer, finish, free};

/// A request whose size, rounded up to its alignment, would pass `u64::MAX`
/// fits no block: it must not wrap to a tiny placed size (and take a 16-byte
/// run slot while reporting `u64::MAX` bytes, with a mapped slice that long).
/// Only a heap of nearly 2^64 bytes admits such a size; the fake device can
/// report one.
#[test]
fn a_size_that_rounds_past_u64_max_takes_no_block() {
    let layout = FakeLayout::lavapipe().with_heap_sizes(u64::MAX);
    let (allocator, device) = allocator(layout);
    // A block (and a run) exists, so a wrapped size would find room.
    let small = allocator.allocate(&buffer(16, 16, Usage::UPLOAD)).unwrap();
    let before = allocator.stats();
    for (size, align) in [
        (u64::MAX, 2),
        (u64::MAX, 256),
        (u64::MAX - 254, 256),
        (u64::MAX, 1 << 63),
        ((1 << 63) + 1, 1 << 63),
    ] {
        let request = buffer(size, align, Usage::UPLOAD).dedicated(DedicatedPolicy::Never);
        assert_eq!(
            allocator.allocate(&request).map(|a| (a.size(), a.offset())),
            Err(Error::OutOfDeviceMemory),
            "size {size} align {align}"
        );
    }
    assert_eq!(allocator.stats(), before);
    free(&allocator, small);
    finish(allocator, &device);
}

/// Vulkan caps a device at `VK_MAX_MEMORY_HEAPS` (16) heaps; a layout with
/// more is an unsupported device, refused up front, not a panic in `stats`
/// or `budgets` later.
#[test]
fn more_heaps_than_vulkan_allows_is_an_unsupported_device() {
    for memory_budget in [false, true] {
        let mut layout = FakeLayout::lavapipe().with_memory_budget(memory_budget);
        layout.memory_heaps = vec![MemoryHeap { size: 1 << 30 }; 17];
        let device = FakeDevice::new(layout);
        match Allocator::new(device.clone(), Config::default()) {
            Err(error) => assert!(matches!(error, Error::UnsupportedDevice(_))),
            Ok(allocator) => {
                // Before the fix: these panicked indexing 16 budgets.
                let _ = allocator.stats();
                let _ = allocator.budgets();
                panic!("a 17-heap device was accepted");
            }
        }
        device.assert_clean();
    }
}

/// 16 heaps, the most Vulkan allows, and 32 types, work; types past 32
/// (which Vulkan does not allow either) are ignored rather than trip a shift.
#[test]
fn vulkan_s_largest_layouts_work() {
    let mut layout = FakeLayout::lavapipe();
    layout.memory_heaps = vec![MemoryHeap { size: 1 << 30 }; 16];
    layout.memory_types = (0..33)
        .map(|t| MemoryType {
            heap: t % 16,
            props: Props::DEVICE_LOCAL | Props::HOST_VISIBLE | Props::HOST_COHERENT,
        })
        .collect();
    let (allocator, device) = allocator(layout);
    let a = allocator.allocate(&buffer(4096, 1, Usage::UPLOAD)).unwrap();
    assert_eq!(allocator.stats().heaps.len(), 16);
    assert_eq!(allocator.budgets().len(), 16);
    assert_eq!(allocator.memory_map().memory_types.len(), 32);
    free(&allocator, a);
    finish(allocator, &device);
}

/// The fake device's `read` and `write` refuse ranges whose end passes
/// `u64::MAX`, as any other out-of-range access, instead of overflowing (a
/// panic in debug; in release a wrapped check let a write land before the
/// memory object and return `true`).
#[test]
fn fake_reads_and_writes_past_u64_max_are_refused() {
    let (allocator, device) = allocator(FakeLayout::lavapipe());
    let a = allocator.allocate(&buffer(4096, 1, Usage::UPLOAD)).unwrap();
    let memory = a.memory();
    for offset in [u64::MAX, u64::MAX - 1, u64::MAX - 4095, 1 << 63] {
        assert!(!device.write(memory, offset, &[1]), "write at {offset}");
        assert!(!device.write(memory, offset, &[1; 2]), "write at {offset}");
        assert_eq!(device.read(memory, offset, 1), None, "read at {offset}");
        assert_eq!(device.read(memory, offset, usize::MAX), None);
    }
    assert_eq!(device.read(memory, 0, usize::MAX), None);
    // Nothing landed anywhere in the object either.
    assert!(device
        .read(memory, 0, 4096)
        .unwrap()
        .iter()
        .all(|&b| b == 0));
    free(&allocator, a);
    finish(allocator, &device);
}
