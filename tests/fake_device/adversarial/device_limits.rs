//! Device layouts at and past Vulkan's limits: more than 16 heaps, a
//! `maxMemoryAllocationSize` or `maxMemoryAllocationCount` of 0, the order
//! in which `Allocator::new` refuses a bad config and a bad device, the
//! largest layouts Vulkan allows, and types past 32 ignored when a request
//! is short of memory or fits no type, a type naming a heap the layout does
//! not list. What a backend reports, not what a caller asks, so apart
//! from the entry points' arguments.

use gpu_alloc_types::{MemoryHeap, MemoryPropertyFlags as Props, MemoryType};
use vk_suballoc::device::fake::{FakeDevice, FakeLayout};
use vk_suballoc::device::{AllocationFlags, MemoryDevice};
use vk_suballoc::{Allocator, Config, DedicatedPolicy, Error, PoolDesc, Usage};

use super::super::{allocator, buffer, finish, free};

/// `Allocator::new`'s refusal of a `maxMemoryAllocationSize` of 0, which
/// names the likely cause.
const SIZE_ZERO: &str = "maxMemoryAllocationSize is 0 (read so over an instance made for \
                         Vulkan 1.0: set VkApplicationInfo::apiVersion to 1.1 or later)";

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
            Err(error) => assert_eq!(
                error,
                Error::UnsupportedDevice("more than VK_MAX_MEMORY_HEAPS (16) memory heaps")
            ),
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

/// A backend reporting a `maxMemoryAllocationSize` of 0 (Vulkan guarantees
/// at least 2^30) is refused up front: every request would otherwise fail
/// as larger than the limit.
#[test]
fn a_max_allocation_size_of_zero_is_an_unsupported_device() {
    let mut layout = FakeLayout::discrete();
    layout.max_memory_allocation_size = 0;
    let device = FakeDevice::new(layout);
    let result = Allocator::new(device.clone(), Config::default());
    assert_eq!(result.err(), Some(Error::UnsupportedDevice(SIZE_ZERO)));
    device.assert_clean();
}

/// A backend reporting a `maxMemoryAllocationCount` of 0 (Vulkan
/// guarantees at least 4096) is refused up front too, as one of
/// `maxMemoryAllocationSize` 0 is. gfx-hal's DX12 backend reported 0, and
/// gpu-alloc then could allocate nothing (zakarumych/gpu-alloc PR #19);
/// here each request failed with `TooManyObjects(0)`, though no memory
/// object existed, and an upload ring could not be made.
#[test]
fn a_max_allocation_count_of_zero_is_an_unsupported_device() {
    let device = FakeDevice::new(FakeLayout::discrete().with_max_allocation_count(0));
    let result = Allocator::new(device.clone(), Config::default());
    assert_eq!(
        result.err(),
        Some(Error::UnsupportedDevice("maxMemoryAllocationCount is 0"))
    );
    device.assert_clean();
}

/// `Allocator::new` refuses in its documented order: a bad `Config`
/// before anything about the device, then a `nonCoherentAtomSize` that is
/// not a power of two, a `maxMemoryAllocationSize` of 0, a
/// `maxMemoryAllocationCount` of 0, and more than 16 heaps; an atom of 0
/// is read as 1, not refused.
#[test]
fn new_refuses_config_then_device_in_the_documented_order() {
    let mut layout = FakeLayout::mobile();
    layout.non_coherent_atom_size = 48;
    layout.max_memory_allocation_size = 0;
    layout.max_memory_allocation_count = 0;
    layout.memory_heaps = vec![MemoryHeap { size: 1 << 30 }; 17];
    let bad_config = Config {
        max_frames_in_flight: 0,
        ..Config::default()
    };
    let refusal = |layout: &FakeLayout, config: Config| {
        let device = FakeDevice::new(layout.clone());
        let error = Allocator::new(device.clone(), config).err();
        device.assert_clean();
        error
    };
    assert_eq!(
        refusal(&layout, bad_config),
        Some(Error::InvalidConfig(
            "max_frames_in_flight must be non-zero"
        ))
    );
    assert_eq!(
        refusal(&layout, Config::default()),
        Some(Error::UnsupportedDevice(
            "nonCoherentAtomSize must be a power of two"
        ))
    );
    layout.non_coherent_atom_size = 0;
    assert_eq!(
        refusal(&layout, Config::default()),
        Some(Error::UnsupportedDevice(SIZE_ZERO))
    );
    layout.max_memory_allocation_size = 1 << 30;
    assert_eq!(
        refusal(&layout, Config::default()),
        Some(Error::UnsupportedDevice("maxMemoryAllocationCount is 0"))
    );
    layout.max_memory_allocation_count = 4096;
    assert_eq!(
        refusal(&layout, Config::default()),
        Some(Error::UnsupportedDevice(
            "more than VK_MAX_MEMORY_HEAPS (16) memory heaps"
        ))
    );
    // An atom of 0 counts as 1: the mobile layout's non-coherent type
    // takes allocations, and their bytes are flushed and invalidated as
    // with an atom of 1 (the fake device divided by the atom there, and
    // panicked).
    let mut layout = FakeLayout::mobile();
    layout.non_coherent_atom_size = 0;
    let (allocator, device) = super::super::allocator_with(layout, Config::default());
    let mut a = allocator
        .allocate(&buffer(1000, 4, Usage::READBACK))
        .unwrap();
    allocator.copy_to_allocation(&mut a, 3, &[7; 5]).unwrap();
    let mut back = [0; 5];
    allocator
        .copy_from_allocation(&mut a, 3, &mut back)
        .unwrap();
    assert_eq!(back, [7; 5]);
    let flushed = device.flushed_ranges();
    assert_eq!(
        flushed.last().map(|r| (r.offset, r.size)),
        Some((a.offset() + 3, 5))
    );
    free(&allocator, a);
    finish(allocator, &device);
}

/// 16 heaps, the most Vulkan allows, and 32 types, work; types past 32
/// (which Vulkan does not allow either) are ignored rather than trip a
/// shift, by the allocator and by the fake device (an upload ring's
/// buffer, a memory object of the 33rd type).
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
    // An upload ring's buffer, made by the fake device, whose
    // memoryTypeBits name the 32 types a mask can (the 33rd type's bit
    // was shifted past the mask's end, a panic in debug builds).
    let ring = allocator
        .create_upload_ring(&vk_suballoc::UploadRingDesc::default())
        .unwrap();
    let bytes = allocator.ring_allocate(ring, 256, 256).unwrap();
    allocator.ring_write(&bytes, 0, &[1; 256]).unwrap();
    allocator.destroy_upload_ring(ring).unwrap();
    // SAFETY: the fake device runs no GPU work.
    unsafe { allocator.collect_idle() };
    // The 33rd type itself, which the allocator never uses, through the
    // fake device's own call.
    // SAFETY: a fake device; the memory is freed below.
    let memory = unsafe { device.allocate_memory(4096, 32, AllocationFlags::empty()) }.unwrap();
    // SAFETY: as above; freed once.
    unsafe { device.deallocate_memory(memory) };
    free(&allocator, a);
    finish(allocator, &device);
}

/// Types past 32 have no pool, so a request short of memory, which releases
/// the empty blocks each pool keeps (`Config::empty_block_reserve`), looks
/// at the 32 there are (before, it indexed a 33rd pool and panicked).
#[test]
fn a_request_short_of_memory_ignores_types_past_32() {
    let mut layout = FakeLayout::lavapipe();
    layout.memory_types = (0..33)
        .map(|_| MemoryType {
            heap: 0,
            props: Props::DEVICE_LOCAL | Props::HOST_VISIBLE | Props::HOST_COHERENT,
        })
        .collect();
    let (allocator, device) = allocator(layout);
    device.fail_allocation(1, vk_suballoc::device::DeviceError::TooManyObjects);
    let a = allocator.allocate(&buffer(4096, 1, Usage::UPLOAD)).unwrap();
    assert_eq!(a.memory_type(), 1);
    free(&allocator, a);
    finish(allocator, &device);
}

/// A request no memory type can take says why, on a layout with types
/// past 32 too: it looks at the 32 the allocator uses (before, working out
/// whether the request was too large for every heap shifted a bit by the
/// 33rd type's index and panicked in debug builds).
#[test]
fn a_request_no_type_takes_ignores_types_past_32() {
    let mut layout = FakeLayout::lavapipe();
    layout.memory_types = (0..33)
        .map(|_| MemoryType {
            heap: 0,
            props: Props::DEVICE_LOCAL,
        })
        .collect();
    let heap = layout.memory_heaps[0].size;
    let (allocator, device) = allocator(layout);
    let before = allocator.stats();
    assert_eq!(
        allocator.allocate(&buffer(4096, 1, Usage::UPLOAD)),
        Err(Error::NoSuitableMemoryType {
            memory_type_bits: !0,
            usage: Usage::UPLOAD,
        })
    );
    assert_eq!(
        allocator.allocate(&buffer(heap + 1, 1, Usage::DEVICE_LOCAL)),
        Err(Error::SizeExceedsHeaps {
            size: heap + 1,
            largest_heap: heap,
        })
    );
    assert_eq!(allocator.stats(), before);
    finish(allocator, &device);
}

/// A memory type naming a heap the layout does not list (Vulkan rules it
/// out; a backend's bug) has a heap of 0 bytes (`MemoryContext`'s
/// `allocate_memory`): requests pass over it, one it alone may take is
/// too large for its heap, a pool of it makes no block, and no figure or
/// report indexes the heaps' tables past their end. Here the discrete
/// layout's BAR type (4) names heap 2, which the layout drops.
#[test]
fn a_type_whose_heap_is_not_listed_takes_no_memory() {
    let mut layout = FakeLayout::discrete();
    layout.memory_heaps.truncate(2);
    let bar = 4;
    let (allocator, device) = allocator(layout);
    // The BAR's usage goes to another type.
    let upload = allocator
        .allocate(&buffer(4096, 256, Usage::UPLOAD | Usage::DEVICE_LOCAL))
        .unwrap();
    assert_ne!(upload.memory_type(), bar);
    // The BAR type alone: too large for its heap of 0 bytes, in a block or
    // dedicated memory.
    for dedicated in [DedicatedPolicy::Auto, DedicatedPolicy::Always] {
        let mut request = buffer(4096, 256, Usage::UPLOAD).dedicated(dedicated);
        request.requirements.memory_type_bits = 1 << bar;
        assert_eq!(
            allocator.allocate(&request),
            Err(Error::SizeExceedsHeaps {
                size: 4096,
                largest_heap: 0,
            }),
            "{dedicated:?}"
        );
    }
    // Nor is a pool's block made there, as a full heap's.
    let pool = allocator.create_pool(&PoolDesc::new(bar).min_blocks(1));
    assert_eq!(pool.err(), Some(Error::OutOfDeviceMemory));
    // Figures and reports keep to the two heaps listed.
    let stats = allocator.stats();
    assert_eq!(stats.heaps.len(), 2);
    assert_eq!(stats.memory_types[bar as usize].reserved_bytes(), 0);
    assert_eq!(stats.memory_objects, 1);
    assert_eq!(allocator.budgets().len(), 2);
    let _ = allocator.stats_json(true);
    let _ = allocator.memory_map();
    free(&allocator, upload);
    finish(allocator, &device);
}
