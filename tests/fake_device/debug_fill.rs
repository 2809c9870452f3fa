//! Debug fills (`Config::debug_fill`): new allocations read `0xDC`, freed
//! memory `0xEF`, and a write into freed memory is caught when the memory
//! is allocated again, or by `check_corruption`.
//!
//! Blocks are kept small (`large_heap_block_size`): a fill touches every
//! byte of a block, and the fake device's host memory is otherwise only
//! allocated when touched.

use std::ptr::NonNull;

use vk_suballoc::device::fake::{FakeDevice, FakeLayout};
use vk_suballoc::{
    Allocation, AllocationDesc, Config, CorruptionReport, DedicatedPolicy, DefragmentationLimits,
    Error, PoolDesc, Request, ResourceKind, UploadRingDesc, Usage,
};

use super::defragment::movables;
use super::frames::{end_frame, finish_after_frame};
use super::seeded_rng::Rng;
use super::{allocator_with, buffer, finish, free, requirements, FakeAllocator};

const MIB: u64 = 1 << 20;

/// The discrete layout's device-local type, which the host cannot see.
const VRAM: u32 = 1;
/// The discrete layout's host-visible coherent type, where `UPLOAD` lands.
const HOST: u32 = 2;

pub(super) const NEW: u8 = 0xDC;
pub(super) const FREED: u8 = 0xEF;

/// Debug fills on, with 4 MiB blocks (the first ones smaller).
fn with_fill() -> Config {
    Config {
        debug_fill: true,
        large_heap_block_size: 4 * MIB,
        ..Config::default()
    }
}

/// `len` bytes of `memory` from `offset`, as the GPU sees them.
pub(super) fn device_bytes(
    device: &FakeDevice,
    memory: ash::vk::DeviceMemory,
    offset: u64,
    len: u64,
) -> Vec<u8> {
    // SAFETY: the tests hold no mapped slice across the call.
    unsafe { device.read(memory, offset, len as usize) }.unwrap()
}

/// An allocation's bytes, as the GPU sees them.
fn bytes_of(device: &FakeDevice, a: &Allocation) -> Vec<u8> {
    device_bytes(device, a.memory(), a.offset(), a.size())
}

/// Makes 24 allocations of `request`, keeps every third and frees the
/// others, calling `freed(memory, offset)` after each free: blocks two
/// thirds free, whose kept allocations a compacting plan
/// ([`compacting`]) moves. Returns the kept ones.
pub(super) fn keep_every_third(
    allocator: &FakeAllocator,
    request: &Request<'_>,
    mut freed: impl FnMut(ash::vk::DeviceMemory, u64),
) -> Vec<Allocation> {
    let made: Vec<Allocation> = (0..24)
        .map(|_| allocator.allocate(request).unwrap())
        .collect();
    let mut kept = Vec::new();
    for (i, a) in made.into_iter().enumerate() {
        if i % 3 == 0 {
            kept.push(a);
            continue;
        }
        let (memory, offset) = (a.memory(), a.offset());
        free(allocator, a);
        freed(memory, offset);
    }
    kept
}

/// Limits under which a plan empties blocks and compacts the rest.
pub(super) fn compacting() -> DefragmentationLimits {
    DefragmentationLimits::default()
        .max_used_percent(0)
        .compact_blocks(true)
}

/// `len` bytes through `pointer`, kept from an allocation that may be
/// freed: its block must still be alive.
pub(super) fn bytes_at(pointer: NonNull<u8>, len: u64) -> Vec<u8> {
    // SAFETY: the caller keeps the block mapped; the tests hold no other
    // reference to these bytes, and nothing writes them meanwhile.
    unsafe { std::slice::from_raw_parts(pointer.as_ptr(), len as usize) }.to_vec()
}

/// Writes `bytes` through `pointer`, kept from a freed allocation whose
/// block is still alive: the bug the fills catch.
pub(super) fn write_at(pointer: NonNull<u8>, at: u64, bytes: &[u8]) {
    // SAFETY: the block is mapped still (the test keeps it), and no
    // reference to these bytes is alive.
    unsafe {
        std::ptr::copy_nonoverlapping(
            bytes.as_ptr(),
            pointer.as_ptr().add(at as usize),
            bytes.len(),
        );
    }
}

/// Where a `check_corruption` report found writes after free: each one's
/// memory and first changed byte, in the report's order.
pub(super) fn written_after_free(report: &CorruptionReport) -> Vec<(ash::vk::DeviceMemory, u64)> {
    report
        .written_after_free
        .iter()
        .map(|written| (written.memory, written.first_changed))
        .collect()
}

pub(super) fn all(bytes: &[u8], byte: u8) -> bool {
    bytes.iter().all(|&b| b == byte)
}

/// The request `size` bytes of `kind` in custom pool `pool`, or in the
/// default pools.
fn request(size: u64, kind: ResourceKind, pool: Option<vk_suballoc::Pool>) -> Request<'static> {
    let mut desc = AllocationDesc::new(Usage::UPLOAD);
    if let Some(pool) = pool {
        desc = desc.pool(pool);
    }
    Request::with_desc(requirements(size, 256), kind, desc)
}

/// New allocations read `0xDC`, buffer-like and image-like, ranges, run
/// slots, a custom pool's and dedicated memory; the bytes after one in its
/// block read `0xEF`. Freed directly, or through the frame queue once its
/// frame is collected (not before), the old bytes read `0xEF`.
#[test]
fn new_memory_reads_0xdc_and_freed_memory_0xef() {
    let (allocator, device) = allocator_with(FakeLayout::discrete(), with_fill());
    let pool = allocator
        .create_pool(&PoolDesc::new(HOST).block_size(MIB))
        .unwrap();
    // Keeps the default pool's block alive through the frees.
    let keeper = allocator
        .allocate(&request(64, ResourceKind::Buffer, None))
        .unwrap();
    let cases = [
        ("range", request(100_000, ResourceKind::Buffer, None)),
        ("run slot", request(100, ResourceKind::Buffer, None)),
        (
            "linear image",
            request(5000, ResourceKind::LinearImage, None),
        ),
        (
            "optimal image",
            request(70_000, ResourceKind::OptimalImage, None),
        ),
        (
            "custom pool",
            request(3000, ResourceKind::Buffer, Some(pool)),
        ),
        (
            "dedicated",
            request(20_000, ResourceKind::Buffer, None).dedicated(DedicatedPolicy::Always),
        ),
    ];
    for deferred in [false, true] {
        for (name, request) in &cases {
            let a = allocator.allocate(request).unwrap();
            assert_eq!(a.memory_type(), HOST, "{name}");
            assert!(all(&bytes_of(&device, &a), NEW), "{name}: not filled");
            if a.is_dedicated() {
                free(&allocator, a);
                continue;
            }
            let after = device_bytes(&device, a.memory(), a.offset() + a.size(), 1);
            assert_eq!(after, [FREED], "{name}: the byte after it");
            let (pointer, size) = (a.mapped_ptr().unwrap(), a.size());
            if deferred {
                allocator.free_after_frame(a).unwrap();
                allocator.collect().unwrap();
                assert!(
                    all(&bytes_at(pointer, size), NEW),
                    "{name}: filled before its frame"
                );
                device.signal_fence(end_frame(&allocator, &device));
                allocator.collect().unwrap();
            } else {
                free(&allocator, a);
            }
            assert!(
                all(&bytes_at(pointer, size), FREED),
                "{name}, deferred {deferred}"
            );
        }
    }
    assert_eq!(allocator.corruptions_detected(), 0);
    free(&allocator, keeper);
    allocator.destroy_pool(pool).unwrap();
    finish(allocator, &device);
}

/// Without `debug_fill` (the default), nothing is filled: new memory
/// reads the device's zeros, and freed memory what was written there.
#[test]
fn nothing_is_filled_by_default() {
    let config = Config {
        large_heap_block_size: 4 * MIB,
        ..Config::default()
    };
    assert!(!config.debug_fill);
    let (allocator, device) = allocator_with(FakeLayout::discrete(), config);
    let keeper = allocator
        .allocate(&request(64, ResourceKind::Buffer, None))
        .unwrap();
    let live: Vec<Allocation> = [100, 100_000]
        .map(|size| {
            allocator
                .allocate(&request(size, ResourceKind::Buffer, None))
                .unwrap()
        })
        .into();
    for mut a in live {
        let size = a.size();
        assert!(all(&bytes_of(&device, &a), 0), "size {size}");
        allocator.mapped_slice_mut(&mut a).unwrap().fill(0x5A);
        let pointer = a.mapped_ptr().unwrap();
        free(&allocator, a);
        assert!(all(&bytes_at(pointer, size), 0x5A), "size {size}");
    }
    assert_eq!(
        allocator.check_corruption(!0),
        Err(Error::CorruptionDetectionOff {
            memory_type_bits: !0
        })
    );
    free(&allocator, keeper);
    finish(allocator, &device);
}

/// A host write through a pointer kept from a freed allocation is listed
/// by `check_corruption` (its free range, the first byte written), then,
/// when an allocation takes those bytes again, logged (memory type,
/// offsets, the pool) and counted once; the new allocation still reads
/// `0xDC`, and the free ranges are clean again. So for a range, a run
/// slot, and a custom pool's range; and for a GPU write.
#[test]
fn a_write_after_free_is_caught() {
    super::leak_log::install();
    let (allocator, device) = allocator_with(FakeLayout::discrete(), with_fill());
    let pool = allocator
        .create_pool(&PoolDesc::new(HOST).block_size(MIB).name("fill pool"))
        .unwrap();
    let keeper = allocator
        .allocate(&request(64, ResourceKind::Buffer, None))
        .unwrap();
    let in_pool = allocator
        .allocate(&request(64, ResourceKind::Buffer, Some(pool)))
        .unwrap();
    let cases = [
        (
            "range",
            request(50_000, ResourceKind::Buffer, None),
            4321,
            false,
        ),
        (
            "run slot",
            request(200, ResourceKind::Buffer, None),
            199,
            false,
        ),
        (
            "pool range",
            request(9000, ResourceKind::Buffer, Some(pool)),
            0,
            false,
        ),
        (
            "gpu write",
            request(30_000, ResourceKind::Buffer, None),
            17,
            true,
        ),
    ];
    for (name, request, at, gpu) in cases {
        let count = allocator.corruptions_detected();
        let a = allocator.allocate(&request).unwrap();
        let (memory, offset, pointer) = (a.memory(), a.offset(), a.mapped_ptr().unwrap());
        free(&allocator, a);
        assert!(
            allocator.check_corruption(1 << HOST).unwrap().is_clean(),
            "{name}"
        );
        if gpu {
            // SAFETY: no slice of these bytes is alive.
            assert!(unsafe { device.write(memory, offset + at, &[0x42]) });
        } else {
            write_at(pointer, at, &[0x42]);
        }
        let report = allocator.check_corruption(!0).unwrap();
        assert!(!report.is_clean(), "{name}");
        assert!(report.damaged.is_empty(), "{name}: {report:?}");
        assert_eq!(report.written_after_free.len(), 1, "{name}: {report:?}");
        let written = &report.written_after_free[0];
        assert_eq!(
            (written.memory_type, written.memory, written.first_changed),
            (HOST, memory, offset + at),
            "{name}"
        );
        assert!(written.offset <= offset + at && offset + at < written.offset + written.size);
        // Found, not counted.
        assert_eq!(allocator.corruptions_detected(), count, "{name}");
        let again = allocator.allocate(&request).unwrap();
        assert_eq!((again.memory(), again.offset()), (memory, offset), "{name}");
        assert_eq!(allocator.corruptions_detected(), count + 1, "{name}");
        assert!(all(&bytes_of(&device, &again), NEW), "{name}");
        let lines = super::leak_log::lines();
        let needle = format!("byte {} of memory {memory:?}", offset + at);
        let line = lines
            .iter()
            .find(|line| line.contains(&needle))
            .unwrap_or_else(|| panic!("{name}: no line has {needle:?}: {lines:#?}"));
        let mut figures = vec![
            "written after it was freed".to_owned(),
            format!("memory type {HOST}"),
            format!("at offset {offset}"),
        ];
        if name == "pool range" {
            figures.push("in custom pool \"fill pool\"".to_owned());
        }
        for figure in figures {
            assert!(line.contains(&figure), "{line:?} lacks {figure:?}");
        }
        assert!(allocator.check_corruption(!0).unwrap().is_clean(), "{name}");
        free(&allocator, again);
        assert_eq!(allocator.corruptions_detected(), count + 1, "{name}");
    }
    free(&allocator, keeper);
    free(&allocator, in_pool);
    allocator.destroy_pool(pool).unwrap();
    finish(allocator, &device);
}

/// With debug fills alone, `check_corruption` checks free ranges (no
/// margins: `checked` is 0) in the host-visible types the allocator uses,
/// and refuses the others; non-coherent types (mobile's type 2) are filled
/// and checked as the coherent type 1 is, their fills flushed: the device
/// reads them (`debug_fill_non_coherent.rs` has the rest).
#[test]
fn host_visible_types_are_filled_coherent_or_not() {
    let off = |bits| {
        Err(Error::CorruptionDetectionOff {
            memory_type_bits: bits,
        })
    };
    let (allocator, device) = allocator_with(FakeLayout::discrete(), with_fill());
    assert_eq!(allocator.check_corruption(1 << VRAM), off(1 << VRAM));
    let a = allocator
        .allocate(&request(1000, ResourceKind::Buffer, None))
        .unwrap();
    let report = allocator.check_corruption(1 << HOST).unwrap();
    assert_eq!(report.checked, 0);
    assert!(report.free_checked >= 1, "{report:?}");
    assert!(report.is_clean());
    assert_eq!(allocator.check_corruption(!0).unwrap(), report);
    free(&allocator, a);
    finish(allocator, &device);

    let config = Config {
        large_heap_block_size: 4 * MIB,
        small_heap_limit: 0,
        ..with_fill()
    };
    let (allocator, device) = allocator_with(FakeLayout::mobile(), config);
    assert_eq!(allocator.check_corruption(1 << 0), off(1 << 0));
    let keeper = allocator
        .allocate(&buffer(64, 16, Usage::READBACK))
        .unwrap();
    let cached: Vec<Allocation> = [100, 100_000]
        .map(|size| {
            allocator
                .allocate(&buffer(size, 16, Usage::READBACK))
                .unwrap()
        })
        .into();
    for mut cached in cached {
        let size = cached.size();
        let coherent = allocator
            .allocate(&buffer(size, 16, Usage::UPLOAD))
            .unwrap();
        assert_eq!(coherent.memory_type(), 1);
        assert!(all(&bytes_of(&device, &coherent), NEW), "size {size}");
        assert_eq!(cached.memory_type(), 2);
        assert!(all(&bytes_of(&device, &cached), NEW), "size {size}");
        allocator.mapped_slice_mut(&mut cached).unwrap().fill(0x5A);
        allocator.flush(&cached, ..).unwrap();
        let (memory, offset) = (cached.memory(), cached.offset());
        free(&allocator, cached);
        assert!(
            all(&device_bytes(&device, memory, offset, size), FREED),
            "size {size}"
        );
        free(&allocator, coherent);
    }
    let report = allocator.check_corruption(1 << 2).unwrap();
    assert!(report.is_clean() && report.free_checked >= 1, "{report:?}");
    free(&allocator, keeper);
    finish(allocator, &device);
}

/// An upload ring's chunk is one allocation, whose ring space reads
/// `0xEF` when the ring takes it (ring allocations in it read `0xDC`,
/// `ring_fill.rs`), and which reads `0xEF` once the destroyed ring's
/// frame is collected and the chunk freed.
#[test]
fn a_destroyed_ring_s_chunk_is_filled_when_it_is_freed() {
    let (allocator, device) = allocator_with(FakeLayout::discrete(), with_fill());
    let keeper = allocator
        .allocate(&request(64, ResourceKind::Buffer, None))
        .unwrap();
    let size = 64 << 10;
    let ring = allocator
        .create_upload_ring(&UploadRingDesc {
            size,
            usage: Usage::UPLOAD,
            ..UploadRingDesc::default()
        })
        .unwrap();
    let first = allocator.ring_allocate(ring, 1000, 256).unwrap();
    assert_eq!(first.memory(), keeper.memory());
    let chunk_start = first.memory_offset() - first.buffer_offset();
    let chunk = NonNull::new(
        first
            .mapped_ptr()
            .as_ptr()
            .wrapping_sub(first.buffer_offset() as usize),
    )
    .unwrap();
    let bytes = bytes_at(chunk, size);
    assert!(all(&bytes[..1000], NEW) && all(&bytes[1000..], FREED));
    allocator.ring_write(&first, 0, &[7; 1000]).unwrap();
    let second = allocator.ring_allocate(ring, 500, 256).unwrap();
    assert!(all(&bytes_at(second.mapped_ptr(), 500), NEW));
    allocator.destroy_upload_ring(ring).unwrap();
    assert!(all(&bytes_at(first.mapped_ptr(), 1000), 7));
    device.signal_fence(end_frame(&allocator, &device));
    allocator.collect().unwrap();
    assert!(all(&bytes_at(chunk, size), FREED));
    assert!(all(
        &device_bytes(&device, keeper.memory(), chunk_start, size),
        FREED
    ));
    assert_eq!(allocator.corruptions_detected(), 0);
    assert!(allocator.check_corruption(!0).unwrap().is_clean());
    free(&allocator, keeper);
    finish(allocator, &device);
}

/// Defragmentation's destinations read `0xDC` before the engine copies
/// into them, and their sources `0xEF` once freed.
#[test]
fn defragmentation_destinations_are_filled() {
    let config = Config {
        small_buffer_limit: 0,
        ..with_fill()
    };
    let (allocator, device) = allocator_with(FakeLayout::discrete(), config);
    let mut live = keep_every_third(&allocator, &buffer(200_000, 256, Usage::UPLOAD), |_, _| {});
    let limits = compacting();
    let plan = allocator
        .plan_defragmentation(&movables(&live), &limits)
        .unwrap();
    assert!(!plan.moves.is_empty());
    for planned in plan.moves {
        assert!(all(&bytes_of(&device, &planned.destination), NEW));
        let old = std::mem::replace(&mut live[planned.movable], planned.destination);
        let (memory, offset, size) = (old.memory(), old.offset(), old.size());
        free(&allocator, old);
        // Compaction: the source's block stays.
        assert!(all(&device_bytes(&device, memory, offset, size), FREED));
    }
    let report = allocator.check_corruption(!0).unwrap();
    assert!(report.is_clean() && report.free_checked >= 1, "{report:?}");
    for a in live {
        free(&allocator, a);
    }
    assert_eq!(allocator.corruptions_detected(), 0);
    finish(allocator, &device);
}

/// Debug fills with margins, over a long random run of allocations (each
/// written whole), frees now and after frames, and defragmentation plans
/// carried out: no write after free and no damaged margin is ever found,
/// and each new allocation reads `0xDC`. Seeded (`VK_SUBALLOC_SEED`).
#[test]
fn no_false_positives_with_fills_and_margins() {
    let mut rng = Rng::from_env("no_false_positives_with_fills_and_margins");
    let config = Config {
        debug_margin: 16,
        detect_corruption: true,
        ..with_fill()
    };
    let (allocator, device) = allocator_with(FakeLayout::discrete(), config);
    let mut live: Vec<Allocation> = Vec::new();
    for step in 0..3000u32 {
        match rng.below(12) {
            0..=4 if live.len() < 150 => {
                let largest = if rng.below(16) == 0 { 300_000 } else { 4096 };
                let size = 1 + rng.below(largest);
                let kind =
                    [ResourceKind::Buffer, ResourceKind::OptimalImage][rng.below(2) as usize];
                let request =
                    Request::new(requirements(size, 1 << rng.below(9)), Usage::UPLOAD, kind);
                let mut a = allocator.allocate(&request).unwrap();
                assert!(all(&bytes_of(&device, &a), NEW), "step {step}");
                allocator.mapped_slice_mut(&mut a).unwrap().fill(step as u8);
                live.push(a);
            }
            0..=8 if !live.is_empty() => {
                let a = live.swap_remove(rng.below(live.len() as u64) as usize);
                if rng.below(2) == 0 {
                    free(&allocator, a);
                } else {
                    allocator.free_after_frame(a).unwrap();
                }
            }
            9 => device.signal_fence(end_frame(&allocator, &device)),
            10 if !live.is_empty() => {
                let plan = allocator
                    .plan_defragmentation(&movables(&live), &DefragmentationLimits::default())
                    .unwrap();
                for planned in plan.moves {
                    let old = std::mem::replace(&mut live[planned.movable], planned.destination);
                    free(&allocator, old);
                }
            }
            _ => {
                allocator.collect().unwrap();
                let report = allocator.check_corruption(!0).unwrap();
                assert!(report.is_clean(), "step {step}: {report:?}");
            }
        }
    }
    for a in live {
        free(&allocator, a);
    }
    assert_eq!(allocator.corruptions_detected(), 0);
    assert!(allocator.check_corruption(!0).unwrap().is_clean());
    finish_after_frame(allocator, &device);
}

/// Threads that allocate in one host-visible type (ranges, run slots, a
/// shared custom pool's ranges, `allocate_many`), write every byte of
/// their allocations and free them now or after a frame (which one of
/// them ends and collects), while another thread checks the free memory
/// over and over: every new allocation reads `0xDC`, keeps its owner's
/// bytes until freed, and no write after free is ever found, neither by a
/// check nor when memory is allocated again. The fills and checks run
/// under the pool's lock, on memory no live allocation holds: in the
/// discrete layout's host-coherent type, and in the mobile layout's
/// non-coherent one, where the owners never flush their writes and the
/// checks' invalidates must leave them alone. Seeded (`VK_SUBALLOC_SEED`):
/// the seed fixes each thread's choices, not how they interleave.
#[test]
fn threads_writing_their_own_memory_never_read_as_writes_after_free() {
    threads_writing_their_own_memory(FakeLayout::discrete(), HOST, Usage::UPLOAD);
    threads_writing_their_own_memory(FakeLayout::mobile(), 2, Usage::READBACK);
}

fn threads_writing_their_own_memory(layout: FakeLayout, memory_type: u32, usage: Usage) {
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

    const THREADS: u64 = 3;
    const STEPS: u64 = if cfg!(miri) { 30 } else { 1500 };
    let seed = Rng::from_env("threads_writing_their_own_memory_never_read_as_writes_after_free").0;
    let config = Config {
        debug_margin: 8,
        detect_corruption: true,
        ..with_fill()
    };
    let (allocator, device) = allocator_with(layout, config);
    let pool = allocator
        .create_pool(&PoolDesc::new(memory_type).block_size(MIB).min_blocks(1))
        .unwrap();
    let done = AtomicBool::new(false);
    let checks = AtomicU64::new(0);
    let fences = std::sync::Mutex::new(Vec::new());
    std::thread::scope(|scope| {
        let checker = scope.spawn(|| {
            while !done.load(Ordering::Acquire) {
                let report = allocator.check_corruption(1 << memory_type).unwrap();
                assert!(report.is_clean(), "{report:?}");
                checks.fetch_add(1, Ordering::Relaxed);
            }
        });
        let workers: Vec<_> = (0..THREADS)
            .map(|thread| {
                let (allocator, device, fences) = (&allocator, &device, &fences);
                scope.spawn(move || {
                    let mut rng = Rng(seed ^ (thread + 1).wrapping_mul(0x9e37_79b9));
                    let byte = 0x10 + thread as u8;
                    let mut live: Vec<Allocation> = Vec::new();
                    let check_own = |a: &Allocation, step: u64| {
                        let bytes = allocator.mapped_slice(a).unwrap();
                        assert!(all(bytes, byte), "thread {thread} step {step}: {a:?}");
                    };
                    for step in 0..STEPS {
                        match rng.below(10) {
                            0..=4 if live.len() < 40 => {
                                let size = if rng.below(8) == 0 {
                                    1 + rng.below(200_000)
                                } else {
                                    1 + rng.below(3000)
                                };
                                let kind = [ResourceKind::Buffer, ResourceKind::OptimalImage]
                                    [rng.below(2) as usize];
                                let in_pool = (rng.below(4) == 0).then_some(pool);
                                let mut desc =
                                    AllocationDesc::new(usage).min_alignment(1 << rng.below(9));
                                if let Some(pool) = in_pool {
                                    desc = desc.pool(pool);
                                }
                                let request =
                                    Request::with_desc(requirements(size, 256), kind, desc);
                                let made = if rng.below(4) == 0 {
                                    allocator.allocate_many(&[request, request])
                                } else {
                                    allocator.allocate(&request).map(|a| vec![a])
                                };
                                for mut a in made.unwrap() {
                                    assert_eq!(a.memory_type(), memory_type);
                                    let bytes = allocator.mapped_slice_mut(&mut a).unwrap();
                                    assert!(all(bytes, NEW), "thread {thread} step {step}");
                                    bytes.fill(byte);
                                    live.push(a);
                                }
                            }
                            0..=8 if !live.is_empty() => {
                                let a = live.swap_remove(rng.below(live.len() as u64) as usize);
                                check_own(&a, step);
                                if rng.below(3) == 0 {
                                    allocator.free_after_frame(a).unwrap();
                                } else {
                                    free(allocator, a);
                                }
                            }
                            _ if thread == 0 => {
                                let fence = end_frame(allocator, device);
                                fences.lock().unwrap().push(fence);
                                let mut fences = fences.lock().unwrap();
                                for fence in fences.drain(..) {
                                    device.signal_fence(fence);
                                }
                                drop(fences);
                                allocator.collect().unwrap();
                            }
                            _ => live.iter().for_each(|a| check_own(a, step)),
                        }
                    }
                    for a in live {
                        check_own(&a, STEPS);
                        free(allocator, a);
                    }
                })
            })
            .collect();
        // The checker stops also when a worker panicked, so that the test
        // fails rather than hangs.
        let joined: Vec<_> = workers.into_iter().map(|worker| worker.join()).collect();
        done.store(true, Ordering::Release);
        checker.join().unwrap();
        for worker in joined {
            worker.unwrap();
        }
    });
    assert!(checks.load(Ordering::Relaxed) > 0);
    device.signal_fence(end_frame(&allocator, &device));
    allocator.collect().unwrap();
    assert_eq!(allocator.corruptions_detected(), 0);
    let report = allocator.check_corruption(!0).unwrap();
    assert!(report.is_clean() && report.free_checked > 0, "{report:?}");
    allocator.destroy_pool(pool).unwrap();
    finish(allocator, &device);
}

/// A write into freed memory that no allocation takes again before its
/// block goes is caught when the block is released: by `trim` for the
/// empty block a memory type keeps, by `destroy_pool` for a custom pool's
/// block; counted once and logged (the byte, its memory, the pool). An
/// untouched block is released with nothing found.
#[test]
fn a_write_after_free_is_caught_when_its_block_is_released() {
    super::leak_log::install();
    let (allocator, device) = allocator_with(FakeLayout::discrete(), with_fill());
    let pool = allocator
        .create_pool(&PoolDesc::new(HOST).block_size(MIB).name("released pool"))
        .unwrap();
    let cases = [
        ("untouched", None, None),
        ("trimmed", Some(123), None),
        ("destroyed pool", Some(4095), Some(pool)),
    ];
    let mut count = 0;
    for (name, written, pool) in cases {
        let a = allocator
            .allocate(&request(50_000, ResourceKind::Buffer, pool))
            .unwrap();
        let (memory, offset, pointer) = (a.memory(), a.offset(), a.mapped_ptr().unwrap());
        free(&allocator, a);
        // The emptied block is kept: its bytes are still mapped.
        if let Some(at) = written {
            write_at(pointer, at, &[0x42]);
            count += 1;
        }
        match pool {
            Some(pool) => allocator.destroy_pool(pool).unwrap(),
            None => assert!(allocator.trim() > 0, "{name}"),
        }
        assert!(device.live_allocations().is_empty(), "{name}");
        assert_eq!(allocator.corruptions_detected(), count, "{name}");
        let Some(at) = written else { continue };
        let lines = super::leak_log::lines();
        let needle = format!("byte {} of memory {memory:?}", offset + at);
        let line = lines
            .iter()
            .find(|line| line.contains(&needle))
            .unwrap_or_else(|| panic!("{name}: no line has {needle:?}: {lines:#?}"));
        assert!(line.contains("was released"), "{line}");
        if pool.is_some() {
            assert!(line.contains("in custom pool \"released pool\""), "{line}");
        }
    }
    finish(allocator, &device);
}

/// A memory callback that panics on the `Freed` event of a released block
/// in which a write after free is found: the block is released, and the
/// line logged, before the panic reaches the caller.
#[test]
fn a_write_found_as_its_block_is_released_is_logged_when_the_callback_panics() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;

    super::leak_log::install();
    let (mut allocator, device) = allocator_with(FakeLayout::discrete(), with_fill());
    let armed = Arc::new(AtomicBool::new(false));
    let trigger = Arc::clone(&armed);
    allocator.set_memory_callback(move |event| {
        if event.kind == vk_suballoc::MemoryEventKind::Freed
            && trigger.swap(false, Ordering::SeqCst)
        {
            panic!("the test's callback panics on Freed");
        }
    });
    let a = allocator
        .allocate(&request(30_000, ResourceKind::Buffer, None))
        .unwrap();
    let (memory, offset, pointer) = (a.memory(), a.offset(), a.mapped_ptr().unwrap());
    free(&allocator, a);
    write_at(pointer, 77, &[0]);
    armed.store(true, Ordering::SeqCst);
    let trimmed = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| allocator.trim()));
    assert!(trimmed.is_err(), "the callback's panic reaches the caller");
    assert!(device.live_allocations().is_empty());
    assert_eq!(allocator.corruptions_detected(), 1);
    let needle = format!("byte {} of memory {memory:?}", offset + 77);
    assert!(
        super::leak_log::lines()
            .iter()
            .any(|line| line.contains(&needle)),
        "no line has {needle:?}"
    );
    finish(allocator, &device);
}
