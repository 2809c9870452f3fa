//! The seeded walk of the pools' debug fills that must find what it
//! plants: over a long random workload (ranges, run slots, a custom
//! pool's blocks, through the pools' locks or `&mut self`, frees now and
//! after frames, trims), a byte written after free, by the host through
//! a kept pointer or by the GPU, into the bytes a just-freed allocation
//! held, is reported by every `check_corruption` until a check counts
//! it, and is counted exactly once: by the allocation that takes the
//! byte again, or by the release of its empty block. In the discrete layout's coherent upload type, and
//! in mobile's cached, non-coherent readback type, where the host's
//! unflushed writes and the GPU's uninvalidated ones sit in two views:
//! with its 256-byte atoms, and with 8 KiB ones (more than Vulkan allows,
//! but taken), larger than the 4 KiB an allocation's size is rounded to,
//! so that an allocation's last atom reaches past the bytes it holds.
//! A write lands anywhere in the bytes the freed allocation held: in
//! non-coherent memory these lie in atoms wholly free once it is freed
//! (it started on an atom, and the next allocation starts on one), so
//! no write there is lost by design (`debug_fill.rs` in the library says
//! which are). `check_corruption` runs after a random half of the steps
//! and of the writes, not after each: it invalidates the free atoms it
//! reads, bringing a GPU write into the host's view, where an
//! allocation's check that never read the device's view would still see
//! it. The no-false-positives walks are in `debug_fill/false_positives.rs`.

use ash::vk;
use vk_suballoc::device::fake::{FakeDevice, FakeLayout};
use vk_suballoc::{Allocation, AllocationDesc, Config, PoolDesc, Request, ResourceKind, Usage};

use super::debug_fill::{write_at, written_after_free};
use super::frames::end_frame;
use super::seeded_rng::Rng;
use super::{allocator_with, finish, free, requirements, FakeAllocator};

const MIB: u64 = 1 << 20;

/// Whether `memory` is alive on the device: a block the allocator still
/// holds, whose mapped bytes a kept pointer may still write.
fn alive(device: &FakeDevice, memory: vk::DeviceMemory) -> bool {
    device
        .live_allocations()
        .iter()
        .any(|live| live.memory == memory)
}

/// An allocation just freed, whose bytes a write after free may hit: its
/// memory, offset, mapped pointer, and the bytes from its offset it held
/// at least (its size rounded to its alignment, the atom included in
/// non-coherent memory, up to the 4 KiB an allocation's size is rounded
/// to: every range and run slot holds that many).
struct Freed {
    memory: vk::DeviceMemory,
    offset: u64,
    pointer: std::ptr::NonNull<u8>,
    held: u64,
}

/// The write-after-free walk over `layout`, whose `usage` lands in
/// `memory_type`, coherent or not.
fn walk(rng: &mut Rng, layout: FakeLayout, usage: Usage, memory_type: u32, non_coherent: bool) {
    let name = layout.name;
    let atom = if non_coherent {
        layout.non_coherent_atom_size
    } else {
        1
    };
    let config = Config {
        debug_fill: true,
        large_heap_block_size: 4 * MIB,
        small_heap_limit: 0,
        empty_block_frames: 3,
        ..Config::default()
    };
    let (mut allocator, device) = allocator_with(layout, config);
    let pool = allocator
        .create_pool(&PoolDesc::new(memory_type).block_size(MIB))
        .unwrap();
    // Each with the bytes it holds at least.
    let mut live: Vec<(Allocation, u64)> = Vec::new();
    // Freed after the current frame: where they lie, for blocks.
    let mut queued: Vec<Freed> = Vec::new();
    // The writes not counted yet, as far as the last check knows (a block
    // whose write a later step counted takes no new one before the next
    // check): memory and byte; one per block.
    let mut outstanding: Vec<(vk::DeviceMemory, u64)> = Vec::new();
    let (mut written, mut gpu_writes, mut counted) = (0u64, 0u64, 0u64);
    let (mut small, mut large) = (0u64, 0u64);
    let (mut by_allocations, mut by_releases) = (0u64, 0u64);
    let freed_of = |a: &Allocation, held: u64| Freed {
        memory: a.memory(),
        offset: a.offset(),
        pointer: a.mapped_ptr().unwrap(),
        held,
    };
    for step in 0..3000u32 {
        let mut freed: Vec<Freed> = Vec::new();
        let detected = allocator.corruptions_detected();
        let placing = match rng.below(20) {
            0..=8 if live.len() < 120 => {
                let size = match rng.below(10) {
                    0..=4 => 1 + rng.below(2000),
                    5..=6 => 1 + rng.below(16_000),
                    7..=8 => 1 + rng.below(100_000),
                    _ => 100_000 + rng.below(700_000),
                };
                let align = 1u64 << rng.below(10);
                let kind = if rng.below(8) == 0 {
                    ResourceKind::OptimalImage
                } else {
                    ResourceKind::Buffer
                };
                let mut desc = AllocationDesc::new(usage);
                if rng.below(4) == 0 {
                    desc = desc.pool(pool);
                }
                let request = Request::with_desc(requirements(size, align), kind, desc);
                // Through the pools' locks, or without (`&mut self`).
                let a = if rng.below(4) == 0 {
                    allocator.allocate_mut(&request)
                } else {
                    allocator.allocate(&request)
                };
                let a = a.unwrap();
                assert_eq!(a.memory_type(), memory_type, "{name} step {step}");
                let rounding = align.max(atom).min(4096);
                live.push((a, size.next_multiple_of(rounding)));
                true
            }
            0..=15 if !live.is_empty() => {
                for _ in 0..=rng.below(3).min(live.len() as u64 - 1) {
                    let (a, held) = live.swap_remove(rng.below(live.len() as u64) as usize);
                    let deferred = rng.below(4) == 0;
                    if !a.is_dedicated() {
                        let into = if deferred { &mut queued } else { &mut freed };
                        into.push(freed_of(&a, held));
                    }
                    if deferred {
                        allocator.free_after_frame(a).unwrap();
                    } else if rng.below(4) == 0 {
                        // SAFETY: the fake device runs no GPU work.
                        unsafe { allocator.free_mut(a) }.unwrap();
                    } else {
                        free(&allocator, a);
                    }
                }
                false
            }
            16..=18 => {
                // The GPU is done with the frame at once: its frees are
                // carried out by the collect.
                device.signal_fence(end_frame(&allocator, &device));
                allocator.collect().unwrap();
                freed.append(&mut queued);
                false
            }
            _ => {
                allocator.trim();
                false
            }
        };
        // An allocation counts the write it takes; frees, frames and
        // trims release blocks.
        let now = allocator.corruptions_detected();
        if placing {
            by_allocations += now - detected;
        } else {
            by_releases += now - detected;
        }
        // After half the steps (module docs).
        if rng.below(2) == 0 {
            check(&allocator, &mut outstanding, &mut counted, name, step);
        }
        // A new write into the bytes an allocation just freed held, in a
        // block still alive that holds no other write not counted yet.
        freed.retain(|f| {
            alive(&device, f.memory) && outstanding.iter().all(|&(memory, _)| memory != f.memory)
        });
        if freed.is_empty() || rng.below(3) == 0 {
            continue;
        }
        let f = &freed[rng.below(freed.len() as u64) as usize];
        let at = f.offset + rng.below(f.held);
        let gpu = rng.below(2) == 0;
        if gpu {
            // SAFETY: no slice of these bytes is alive.
            assert!(unsafe { device.write(f.memory, at, &[0x42]) });
            gpu_writes += 1;
        } else {
            write_at(f.pointer, at - f.offset, &[0x42]);
        }
        // Run slot sizes (`Config::small_buffer_limit`), or ranges only.
        if f.held <= 16384 {
            small += 1;
        } else {
            large += 1;
        }
        outstanding.push((f.memory, at));
        outstanding.sort();
        written += 1;
        if rng.below(2) == 0 {
            check(&allocator, &mut outstanding, &mut counted, name, step);
            assert!(
                outstanding.contains(&(f.memory, at)),
                "{name} step {step}: the write at {at} of {:?} (held {})",
                f.memory,
                f.held
            );
        }
    }
    for (a, _) in live.drain(..) {
        free(&allocator, a);
    }
    device.signal_fence(end_frame(&allocator, &device));
    allocator.collect().unwrap();
    allocator.destroy_pool(pool).unwrap();
    allocator.trim();
    check(&allocator, &mut outstanding, &mut counted, name, u32::MAX);
    assert!(outstanding.is_empty(), "{name}: {outstanding:?} left");
    assert_eq!(
        allocator.corruptions_detected(),
        written,
        "{name}: every write counted once"
    );
    assert!(
        gpu_writes > 20 && small > 20 && large > 20 && by_allocations > 20 && by_releases > 20,
        "{name}: {written} writes: {gpu_writes} by the GPU, {small} small, {large} large; \
         {by_allocations} counted by allocations, {by_releases} by block releases"
    );
    finish(allocator, &device);
}

/// `check_corruption` reports exactly the writes not counted yet, each at
/// its byte; those it no longer reports are the ones the checks since
/// the last call counted, which `corruptions_detected` shows.
fn check(
    allocator: &FakeAllocator,
    outstanding: &mut Vec<(vk::DeviceMemory, u64)>,
    counted: &mut u64,
    name: &str,
    step: u32,
) {
    let report = allocator.check_corruption(!0).unwrap();
    let mut found = written_after_free(&report);
    found.sort();
    let before = outstanding.len();
    outstanding.retain(|write| found.contains(write));
    assert_eq!(
        &found, outstanding,
        "{name} step {step}: reported, and not counted before"
    );
    *counted += (before - outstanding.len()) as u64;
    assert_eq!(
        allocator.corruptions_detected(),
        *counted,
        "{name} step {step}: the writes no longer reported were counted, once"
    );
}

/// The write-after-free walk (module docs), in the discrete layout's
/// coherent upload type, then in mobile's non-coherent readback type,
/// with 256-byte atoms and with 8 KiB ones (where a new allocation's
/// check counted a GPU write past its end in its last atom, and left it
/// for the next check to count again). Seeded (`VK_SUBALLOC_SEED`).
#[test]
fn every_write_after_free_in_a_long_pool_workload_is_found_once() {
    let mut rng = Rng::from_env("every_write_after_free_in_a_long_pool_workload_is_found_once");
    walk(&mut rng, FakeLayout::discrete(), Usage::UPLOAD, 2, false);
    walk(&mut rng, FakeLayout::mobile(), Usage::READBACK, 2, true);
    let mut layout = FakeLayout::mobile();
    layout.non_coherent_atom_size = 8192;
    layout.name = "mobile-8k";
    walk(&mut rng, layout, Usage::READBACK, 2, true);
}
