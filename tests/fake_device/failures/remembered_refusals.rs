//! A heap that refused new memory is not asked again, by each request,
//! for every size it refused: the allocator remembers, per heap, the
//! fewest bytes the driver refused (`VK_ERROR_OUT_OF_DEVICE_MEMORY`) and
//! skips new memory of that size or more, until memory in the heap is
//! freed, memory of that size or more is made there, or a frame ends. Each
//! request still asks the driver, in each memory type, for its last
//! attempt (dedicated memory after the blocks, else its smallest block)
//! and for its dedicated memory when it tries that first. Before, every
//! request that needed new memory in a full heap repeated every refused
//! `vkAllocateMemory` call: 8 on the discrete layout's VRAM, 18 on the
//! integrated layout (three types in one heap), 13 on ReBAR.

use ash::vk;
use vk_suballoc::device::fake::{FakeDevice, FakeLayout};
use vk_suballoc::{
    Allocation, AllocationDesc, DedicatedHint, DedicatedPolicy, Error, PoolDesc, Request,
    ResourceKind, Usage,
};

use crate::frames::end_frame;
use crate::{allocator, buffer, finish, free, FakeAllocator};

const MIB: u64 = 1 << 20;

/// A device-local buffer request of `size` bytes in the memory types
/// `bits` allows.
fn in_types(size: u64, bits: u32) -> Request<'static> {
    let requirements = vk::MemoryRequirements {
        size,
        alignment: 256,
        memory_type_bits: bits,
    };
    Request::new(requirements, Usage::DEVICE_LOCAL, ResourceKind::Buffer)
}

/// A 1 MiB buffer in the discrete layout's VRAM type (1) only.
fn vram_buffer() -> Request<'static> {
    in_types(MIB, 1 << 1)
}

/// An allocator over `layout` whose heap 0 holds a 256 MiB block, full
/// (the preferred size, so that the next block asked for is of it too),
/// and whatever `before_cap` allocates; then the heap is capped at what
/// it uses: full. Returns what `before_cap` returned, the block's
/// allocation last.
fn full_heap<T>(
    layout: FakeLayout,
    before_cap: impl FnOnce(&FakeAllocator) -> T,
) -> (FakeAllocator, FakeDevice, T, Allocation) {
    let (allocator, device) = allocator(layout);
    let whole_block = buffer(256 * MIB, 256, Usage::DEVICE_LOCAL).dedicated(DedicatedPolicy::Never);
    let block = allocator.allocate(&whole_block).unwrap();
    let made = before_cap(&allocator);
    device.cap_heap(0, device.heap_usage()[0]);
    (allocator, device, made, block)
}

/// `request`'s result and the `vkAllocateMemory` calls it made.
fn counted(
    allocator: &FakeAllocator,
    device: &FakeDevice,
    request: &Request<'_>,
) -> (Result<Allocation, Error>, u64) {
    let before = device.counters().allocate_calls;
    let result = allocator.allocate(request);
    (result, device.counters().allocate_calls - before)
}

/// The calls of `count` requests that all fail for want of memory.
fn refused_calls(
    allocator: &FakeAllocator,
    device: &FakeDevice,
    request: &Request<'_>,
    count: usize,
) -> Vec<u64> {
    (0..count)
        .map(|_| {
            let (result, calls) = counted(allocator, device, request);
            assert_eq!(result.err(), Some(Error::OutOfDeviceMemory));
            calls
        })
        .collect()
}

/// Ten requests in a full heap: the first asks for every size (a block
/// of the preferred size, its halvings down to 1/64, a remainder block
/// below that, dedicated memory), each later one once, for its dedicated
/// memory (the heap refused it its own size: no remainder block is
/// smaller). Where several memory
/// types share the heap, each type asks once per request too.
#[test]
fn a_full_heap_is_asked_once_per_memory_type_by_each_later_request() {
    // Layout, the types of heap 0 a device-local request may take, and the
    // calls of the first request (each type's ladder: 256 MiB down to 4,
    // a 2 MiB remainder block, then 1 MiB of dedicated memory; a type
    // without a block starts at 32 MiB; the types after the first ask for
    // their dedicated memory only).
    for (layout, bits, first) in [
        (FakeLayout::discrete(), 1u32 << 1, 9),
        // Types 0, 1, 2: 9 + 1 + 1 (they made 8 + 5 + 5).
        (FakeLayout::integrated(), 0b111, 11),
        // VRAM (1), then the BAR type (4) in the same heap: 9 + 1 (8 + 5).
        (FakeLayout::rebar(), 1 << 1 | 1 << 4, 10),
    ] {
        let name = layout.name;
        let later = u64::from(bits.count_ones());
        let (allocator, device, (), block) = full_heap(layout, |_| ());
        let calls = refused_calls(&allocator, &device, &in_types(MIB, bits), 10);
        let mut expected = vec![later; 10];
        expected[0] = first;
        assert_eq!(calls, expected, "{name}");
        assert!(device.violations().is_empty(), "{name}");
        free(&allocator, block);
        finish(allocator, &device);
    }
}

/// A request that may only take a block asks for its smallest (the
/// least halving of the preferred size that holds it) once the heap has
/// refused it.
#[test]
fn a_block_only_request_asks_for_its_smallest_block() {
    let (allocator, device, (), block) = full_heap(FakeLayout::discrete(), |_| ());
    let request = vram_buffer().dedicated(DedicatedPolicy::Never);
    // 256, 128, ... 4 MiB, a 2 MiB remainder block, 1 MiB, the least;
    // then 1 MiB alone.
    assert_eq!(refused_calls(&allocator, &device, &request, 3), [9, 1, 1]);
    free(&allocator, block);
    finish(allocator, &device);
}

/// Memory the allocator frees in the heap, by any path that frees a
/// memory object (dedicated memory freed, a custom pool destroyed), makes
/// the next request ask for every size again. (A kept empty block, of a
/// default pool or a custom one, is no such path: a request short of
/// memory releases it before it fails, `kept_blocks_giving_way.rs`.)
#[test]
fn memory_freed_in_the_heap_brings_every_size_back() {
    // How the memory is freed, and the calls and block of the next
    // request: with 64 KiB free, all 9 refused (the 2 MiB remainder
    // block too); with 4 MiB free, 7 (the last, a 4 MiB block, made).
    type Frees = fn(&FakeAllocator, &mut Freeable);
    let paths: [(&str, Frees, u64, Option<u64>); 2] = [
        ("dedicated memory freed", free_dedicated, 9, None),
        ("a custom pool destroyed", destroy_pool, 7, Some(4 * MIB)),
    ];
    for (path, frees, calls_after, block_after) in paths {
        let (allocator, device, mut freeable, block) =
            full_heap(FakeLayout::discrete(), make_freeable);
        let request = vram_buffer();
        assert_eq!(
            refused_calls(&allocator, &device, &request, 2),
            [9, 1],
            "{path}"
        );
        frees(&allocator, &mut freeable);
        let (result, calls) = counted(&allocator, &device, &request);
        assert_eq!(calls, calls_after, "{path}");
        match block_after {
            None => assert_eq!(result.err(), Some(Error::OutOfDeviceMemory), "{path}"),
            Some(size) => {
                let placed = result.unwrap();
                assert!(!placed.is_dedicated(), "{path}");
                let sizes: Vec<u64> = device.live_allocations().iter().map(|m| m.size).collect();
                // The new block, in the room the destroyed pool's left.
                assert_eq!(
                    sizes.iter().filter(|&&s| s == size).count(),
                    1,
                    "{path}: {sizes:?}"
                );
                free(&allocator, placed);
            }
        }
        if let Some(dedicated) = freeable.dedicated.take() {
            free(&allocator, dedicated);
        }
        free(&allocator, block);
        finish(allocator, &device);
    }
}

/// Memory in VRAM (type 1) that [`memory_freed_in_the_heap_brings_every_size_back`]
/// frees: 64 KiB of dedicated memory, and a custom pool of 4 MiB blocks
/// whose block is its `min_blocks`.
struct Freeable {
    dedicated: Option<Allocation>,
    min_block: vk_suballoc::Pool,
}

fn make_freeable(allocator: &FakeAllocator) -> Freeable {
    let dedicated = allocator
        .allocate(&in_types(64 << 10, 1 << 1).dedicated(DedicatedPolicy::Always))
        .unwrap();
    let min_block = allocator
        .create_pool(&PoolDesc::new(1).block_size(4 * MIB).min_blocks(1))
        .unwrap();
    Freeable {
        dedicated: Some(dedicated),
        min_block,
    }
}

/// Frees the dedicated memory (64 KiB).
fn free_dedicated(allocator: &FakeAllocator, freeable: &mut Freeable) {
    free(allocator, freeable.dedicated.take().unwrap());
}

/// Destroys the pool whose block is its `min_blocks` (4 MiB).
fn destroy_pool(allocator: &FakeAllocator, freeable: &mut Freeable) {
    allocator.destroy_pool(freeable.min_block).unwrap();
}

/// A frame's end makes the next request ask for every size again: other
/// processes may have freed memory meanwhile. So does `collect_idle`,
/// which ends the current frame too (a level change, on an idle device);
/// it left the refusal remembered.
#[test]
fn the_end_of_a_frame_brings_every_size_back() {
    let (allocator, device, (), block) = full_heap(FakeLayout::discrete(), |_| ());
    let request = vram_buffer();
    assert_eq!(refused_calls(&allocator, &device, &request, 2), [9, 1]);
    for _ in 0..2 {
        let fence = end_frame(&allocator, &device);
        assert_eq!(refused_calls(&allocator, &device, &request, 2), [9, 1]);
        device.signal_fence(fence);
        allocator.collect().unwrap();
    }
    // SAFETY: the fake device runs no GPU work.
    unsafe { allocator.collect_idle() };
    assert_eq!(refused_calls(&allocator, &device, &request, 2), [9, 1]);
    free(&allocator, block);
    finish(allocator, &device);
}

/// Memory made in the heap of at least the size it refused makes the next
/// request ask for every size again; memory made of fewer bytes does not.
#[test]
fn memory_made_of_the_refused_size_brings_every_size_back() {
    let (allocator, device, (), block) = full_heap(FakeLayout::discrete(), |_| ());
    let request = vram_buffer();
    // The last refusal: 1 MiB of dedicated memory.
    assert_eq!(refused_calls(&allocator, &device, &request, 2), [9, 1]);
    // Room for one more MiB: the request's one call, for its dedicated
    // memory, gets it; the heap is full again.
    device.cap_heap(0, device.heap_usage()[0] + MIB);
    let (made, calls) = counted(&allocator, &device, &request);
    let made = made.unwrap();
    assert!(made.is_dedicated());
    assert_eq!(calls, 1);
    assert_eq!(refused_calls(&allocator, &device, &request, 2), [9, 1]);
    free(&allocator, made);
    free(&allocator, block);
    finish(allocator, &device);
}

/// A driver that refuses 8 MiB and more (no large enough range, say):
/// once a 4 MiB block was made, the next request that needs a block asks
/// for 4 MiB at once (it asked for 256, 128, ... 8 MiB again each time: a
/// heap near full that makes small blocks paid every refused size again
/// per block).
#[test]
fn memory_made_below_the_refused_size_keeps_it() {
    let (allocator, device) = allocator(FakeLayout::discrete());
    let whole_block = buffer(256 * MIB, 256, Usage::DEVICE_LOCAL).dedicated(DedicatedPolicy::Never);
    let block = allocator.allocate(&whole_block).unwrap();
    device.fail_allocations_from(Some(8 * MIB));
    let request = vram_buffer();
    let mut live = Vec::new();
    let mut calls = Vec::new();
    // Two 4 MiB blocks of four requests each.
    for _ in 0..8 {
        let (placed, made) = counted(&allocator, &device, &request);
        live.push(placed.unwrap());
        calls.push(made);
    }
    assert_eq!(calls, [7, 0, 0, 0, 1, 0, 0, 0]);
    let sizes: Vec<u64> = device.live_allocations().iter().map(|m| m.size).collect();
    assert_eq!(sizes, [256 * MIB, 4 * MIB, 4 * MIB]);
    for placed in live.into_iter().chain([block]) {
        free(&allocator, placed);
    }
    finish(allocator, &device);
}

/// Memory another process frees (here: the heap uncapped) goes to the
/// next request at once through its one call, its dedicated memory, and
/// to blocks again after the frame.
#[test]
fn memory_another_process_frees_is_taken_at_once_and_fully_after_the_frame() {
    let (allocator, device, (), block) = full_heap(FakeLayout::discrete(), |_| ());
    let request = vram_buffer();
    assert_eq!(refused_calls(&allocator, &device, &request, 2), [9, 1]);
    device.cap_heap(0, 8 << 30);
    let (at_once, calls) = counted(&allocator, &device, &request);
    let at_once = at_once.unwrap();
    assert!(at_once.is_dedicated());
    assert_eq!(calls, 1);
    free(&allocator, at_once);

    // Full again, remembered again; freed by "another process", then the
    // frame ends: a block, the first size asked for.
    device.cap_heap(0, device.heap_usage()[0]);
    assert_eq!(refused_calls(&allocator, &device, &request, 2), [9, 1]);
    device.cap_heap(0, 8 << 30);
    let fence = end_frame(&allocator, &device);
    let (after_frame, calls) = counted(&allocator, &device, &request);
    let after_frame = after_frame.unwrap();
    assert!(!after_frame.is_dedicated());
    assert_eq!(calls, 1);
    device.signal_fence(fence);
    allocator.collect().unwrap();
    free(&allocator, after_frame);
    free(&allocator, block);
    finish(allocator, &device);
}

/// A request larger than half a block asks for its dedicated memory
/// first, and for a block after it, whatever the heap refused: its
/// dedicated memory, the least it can take, is asked for too, not only its
/// last attempt. So memory another process frees serves it at once, as it
/// did before the refusals were remembered: more than the request, less
/// than a block.
#[test]
fn a_large_request_asks_for_its_dedicated_memory() {
    let (allocator, device, (), block) = full_heap(FakeLayout::discrete(), |_| ());
    assert_eq!(
        refused_calls(&allocator, &device, &vram_buffer(), 2),
        [9, 1]
    );
    let large = in_types(150 * MIB, 1 << 1);
    // Still full: its dedicated 150 MiB and a 256 MiB block refused.
    assert_eq!(refused_calls(&allocator, &device, &large, 2), [2, 2]);
    device.cap_heap(0, device.heap_usage()[0] + 200 * MIB);
    let (placed, calls) = counted(&allocator, &device, &large);
    let placed = placed.unwrap();
    assert!(placed.is_dedicated());
    assert_eq!(calls, 1);
    free(&allocator, placed);
    free(&allocator, block);
    finish(allocator, &device);
}

/// Memory the driver prefers dedicated: its dedicated memory is asked for
/// first, then, once the heap refused fewer bytes, its smallest block
/// only, not every size from 256 MiB down (8 calls).
#[test]
fn a_request_for_preferred_dedicated_memory_asks_twice() {
    let (allocator, device, (), block) = full_heap(FakeLayout::discrete(), |_| ());
    let preferred = vram_buffer().driver_dedicated(DedicatedHint {
        required: false,
        preferred: true,
    });
    assert_eq!(refused_calls(&allocator, &device, &preferred, 3), [2, 2, 2]);
    free(&allocator, block);
    finish(allocator, &device);
}

/// The kept empty blocks a request short of memory releases free memory
/// in the heap: the request asks for every size again, and takes a block
/// of the room they leave (here the BAR type's 32 MiB block, in ReBAR's
/// VRAM heap), not dedicated memory.
#[test]
fn kept_empty_blocks_released_for_a_request_bring_every_size_back() {
    let (allocator, device, (), block) = full_heap(FakeLayout::rebar(), |allocator| {
        let bar = in_types(MIB, 1 << 4);
        free(allocator, allocator.allocate(&bar).unwrap());
    });
    assert!(device.live_allocations().iter().any(|m| m.size == 32 * MIB));
    let (placed, calls) = counted(&allocator, &device, &vram_buffer());
    let placed = placed.unwrap();
    // 256 MiB down to 4, a 2 MiB remainder block, then 1 MiB dedicated,
    // refused; the kept block
    // released; 256, 128, 64 MiB refused, 32 made.
    assert_eq!(calls, 13);
    assert!(!placed.is_dedicated());
    assert_eq!(placed.memory_type(), 1);
    let sizes: Vec<u64> = device.live_allocations().iter().map(|m| m.size).collect();
    assert_eq!(sizes, [256 * MIB, 32 * MIB]);
    free(&allocator, placed);
    free(&allocator, block);
    finish(allocator, &device);
}

/// The warnings of a type that keeps failing are those it gave before
/// the refusals were remembered: once each, at the first request.
#[test]
fn a_full_heap_warns_as_before() {
    crate::leak_log::record_thread_lines();
    let (allocator, device, (), block) = full_heap(FakeLayout::discrete(), |_| ());
    refused_calls(&allocator, &device, &vram_buffer(), 10);
    let warnings: Vec<String> = crate::leak_log::take_thread_warnings();
    assert_eq!(
        warnings,
        [
            "WARN: vk-suballoc: out of device memory in memory type 1, retrying with a 134217728-byte block",
            "WARN: vk-suballoc: memory type 1 failed (out of device memory); trying the next one",
        ]
    );
    free(&allocator, block);
    finish(allocator, &device);
}

/// A refusal of exportable memory (a custom pool's `PoolDesc::export`) is
/// not remembered for its heap: a driver may refuse exportable memory for
/// reasons of its own (a cap on exportable objects, an external-memory
/// path short of room) while plain memory is still there. So the default
/// pools' next block is asked for at its preferred size, not skipped down
/// to the smallest of the ladder.
#[test]
fn a_refused_export_leaves_plain_requests_their_preferred_block() {
    const OPAQUE_FD: vk::ExternalMemoryHandleTypeFlags =
        vk::ExternalMemoryHandleTypeFlags::OPAQUE_FD;
    // The block the same request makes on a device that refused nothing.
    let sizes = |device: &FakeDevice| -> Vec<u64> {
        device.live_allocations().iter().map(|m| m.size).collect()
    };
    let (control, control_device) = allocator(FakeLayout::discrete());
    let first = control.allocate(&vram_buffer()).unwrap();
    let first_block = sizes(&control_device);
    assert!(first_block[0] > 8 * MIB, "{first_block:?}");
    free(&control, first);
    finish(control, &control_device);

    let (allocator, device) = allocator(FakeLayout::discrete());
    let pool = allocator
        .create_pool(&PoolDesc::new(1).block_size(8 * MIB).export(OPAQUE_FD))
        .unwrap();
    let exported = Request::with_desc(
        crate::requirements(MIB, 256),
        ResourceKind::Buffer,
        AllocationDesc::new(Usage::DEVICE_LOCAL).pool(pool),
    );
    device.fail_allocation(1, vk_suballoc::device::DeviceError::OutOfDeviceMemory);
    let (result, calls) = counted(&allocator, &device, &exported);
    assert_eq!((result.err(), calls), (Some(Error::OutOfDeviceMemory), 1));

    let (result, calls) = counted(&allocator, &device, &vram_buffer());
    let plain = result.unwrap();
    assert_eq!(
        (calls, sizes(&device)),
        (1, first_block),
        "one call, for the block a device that refused nothing gets"
    );
    free(&allocator, plain);
    allocator.destroy_pool(pool).unwrap();
    finish(allocator, &device);
}

/// A remainder block is sized below the refusal its heap remembered when
/// the request read it, but its attempt may still be skipped: another
/// memory type of the heap may record a smaller refusal before the
/// driver is asked, through dedicated memory, which takes no remainder
/// turn (remainder blocks of the heap's types are sized one after
/// another, `MemoryContext::remainder_turn`). Then, as for any attempt
/// but the last, the refusal answers it without a call, and the least
/// block that holds the request, which comes after it when no dedicated
/// memory does, is asked for. With 3.5 MiB of system memory's budget left
/// (heap 1 of the discrete layout), a 256-byte buffer in type 0 that may
/// not take dedicated memory tries a 1 MiB remainder block. As that
/// attempt logs its size (before the heap's turn), a logger hook has
/// another thread ask for 1 MiB of dedicated memory in type 2, of the
/// same heap, which the driver refuses (the heap remembers 1 MiB). The
/// first request's 1 MiB block is then not asked for: it takes a
/// 256-byte block, its least, with one call. Asking the driver for the
/// remainder block whatever the heap refused (its `skip_if_refused`
/// false) passed every test on one thread.
#[test]
fn a_refusal_recorded_meanwhile_skips_the_remainder_block_for_the_least() {
    let (allocator, device) = allocator(FakeLayout::discrete());
    let allocator = std::sync::Arc::new(allocator);
    device.set_heap_budget(1, 100 * MIB, 100 * MIB - 7 * MIB / 2);
    let request = in_types(256, 1 << 0).dedicated(DedicatedPolicy::Never);
    let other = std::sync::Arc::new(std::sync::Mutex::new(None));
    {
        let (allocator, device, other) = (allocator.clone(), device.clone(), other.clone());
        crate::leak_log::on_line_with("allocating 1048576 bytes of memory type 0 (", move || {
            device.fail_allocation(1, vk_suballoc::device::DeviceError::OutOfDeviceMemory);
            let calls = device.counters().allocate_calls;
            let request = in_types(MIB, 1 << 2).dedicated(DedicatedPolicy::Always);
            let watched = device.clone();
            // Not joined here: once refused, the request releases the kept
            // blocks of its heap's types, type 0's among them, whose pool
            // this thread holds; it ends once this request has.
            let thread = std::thread::spawn(move || allocator.allocate(&request));
            // Once its call is counted the other thread holds the heap's
            // turn, and keeps it until the refusal is remembered; this
            // request's attempt then looks for remembered refusals under
            // that turn, so it sees this one.
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
            while watched.counters().allocate_calls == calls {
                assert!(
                    std::time::Instant::now() < deadline,
                    "the other request made no call"
                );
                std::thread::yield_now();
            }
            *other.lock().unwrap() = Some(thread);
        });
    }
    let before = device.counters().allocate_calls;
    let placed = allocator.allocate(&request).unwrap();
    let thread = other.lock().unwrap().take().expect("the hook ran");
    let other = thread.join().unwrap();
    assert_eq!(
        other.unwrap_err(),
        Error::OutOfDeviceMemory,
        "1 MiB refused"
    );
    let sizes: Vec<u64> = device.live_allocations().iter().map(|m| m.size).collect();
    assert_eq!(
        (device.counters().allocate_calls - before, sizes),
        (2, vec![256]),
        "the other request's refused call and the least block's call alone"
    );
    free(&allocator, placed);
    let allocator = std::sync::Arc::into_inner(allocator).expect("the hook dropped its clone");
    finish(allocator, &device);
}
