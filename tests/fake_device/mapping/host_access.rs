//! The allocator's host access to mapped memory: bytes written through a
//! mapped slice reach the device memory (blocks mapped once, not per
//! allocation), `flush` and `invalidate` ranges are widened to the
//! non-coherent atom and clamped to the memory's end, the host sees the
//! GPU's writes after an invalidate, `copy_to_allocation` and
//! `copy_from_allocation` flush and invalidate the atoms they touch and
//! refuse a range out of bounds, and the batched `flush_allocations` and
//! `invalidate_allocations` make one driver call per pool. Coherent memory
//! needs none of these calls. Each mapped pointer is its block's one base
//! plus the allocation's offset, aligned as asked.

use vk_suballoc::device::fake::FakeLayout;
use vk_suballoc::{DedicatedPolicy, Usage};

use super::super::{allocator, buffer, finish, free};

#[test]
fn written_bytes_reach_the_device_memory() {
    let (allocator, device) = allocator(FakeLayout::discrete());
    let mut live = Vec::new();
    for i in 0..50u8 {
        let policy = if i % 10 == 0 {
            DedicatedPolicy::Always
        } else {
            DedicatedPolicy::Auto
        };
        let mut a = allocator
            .allocate(&buffer(1000 + u64::from(i), 4, Usage::UPLOAD).dedicated(policy))
            .unwrap();
        allocator.mapped_slice_mut(&mut a).unwrap().fill(i);
        live.push((i, a));
    }
    for (i, a) in &live {
        // SAFETY: no `&mut` slice of `a` is alive.
        let bytes = unsafe { device.read(a.memory(), a.offset(), a.size() as usize) }.unwrap();
        assert_eq!(
            bytes,
            vec![*i; a.size() as usize],
            "allocation {i} was overwritten"
        );
        assert!(allocator.mapped_slice(a).unwrap().iter().all(|b| b == i));
    }
    // Coherent memory needs no flush: the call is a no-op.
    allocator.flush(&live[0].1, 0..10).unwrap();
    assert_eq!(device.counters().flushes, 0);
    // Blocks were mapped once each, not per allocation.
    assert_eq!(
        device.counters().maps as usize,
        device.live_allocations().len()
    );
    for (_, a) in live {
        free(&allocator, a);
    }
    finish(allocator, &device);
}

#[test]
fn non_coherent_ranges_are_widened_to_atoms_and_clamped() {
    // Mobile: READBACK lands in type 2, cached and non-coherent, atom 256.
    let (allocator, device) = allocator(FakeLayout::mobile());
    let first = allocator
        .allocate(&buffer(1000, 4, Usage::READBACK))
        .unwrap();
    let mut second = allocator
        .allocate(&buffer(1000, 4, Usage::READBACK))
        .unwrap();
    assert_eq!(first.memory_type(), 2);
    // Atom-aligned starts: widened ranges never reach a neighbour's bytes.
    assert_eq!(first.offset() % 256, 0);
    assert_eq!(second.offset(), 1024);
    allocator.flush(&second, 10..20).unwrap();
    allocator.invalidate(&mut second, 0..1000).unwrap();
    allocator.flush(&second, 5..5).unwrap();
    let flushed = device.flushed_ranges();
    assert_eq!(flushed.len(), 1);
    assert_eq!((flushed[0].offset, flushed[0].size), (1024, 256));
    let invalidated = device.invalidated_ranges();
    assert_eq!((invalidated[0].offset, invalidated[0].size), (1024, 1024));
    // `..` is the whole allocation.
    allocator.flush(&second, ..).unwrap();
    let whole = *device.flushed_ranges().last().unwrap();
    assert_eq!((whole.offset, whole.size), (1024, 1024));
    // A dedicated allocation's last atom is clamped to the memory's end.
    let mut dedicated = allocator
        .allocate(&buffer(1000, 4, Usage::READBACK).dedicated(DedicatedPolicy::Always))
        .unwrap();
    allocator.invalidate(&mut dedicated, 900..1000).unwrap();
    let last = *device.invalidated_ranges().last().unwrap();
    assert_eq!((last.offset, last.size), (768, 232));
    assert!(device.violations().is_empty(), "{:?}", device.violations());
    for a in [first, second, dedicated] {
        free(&allocator, a);
    }
    finish(allocator, &device);
}

#[test]
fn gpu_writes_are_seen_after_invalidate() {
    let (allocator, device) = allocator(FakeLayout::mobile());
    let mut a = allocator
        .allocate(&buffer(512, 4, Usage::READBACK))
        .unwrap();
    // "The GPU" writes; the host invalidates and reads.
    // SAFETY: no slice of `a` is alive.
    assert!(unsafe { device.write(a.memory(), a.offset(), &[7; 512]) });
    allocator.invalidate(&mut a, 0..512).unwrap();
    assert!(allocator.mapped_slice(&a).unwrap().iter().all(|&b| b == 7));
    free(&allocator, a);
    finish(allocator, &device);
}

#[test]
fn copies_flush_and_invalidate_on_non_coherent_memory() {
    // Mobile: READBACK lands in type 2, cached and non-coherent (atom 256),
    // where the fake device's GPU sees host writes only after a flush and
    // the host sees GPU writes only after an invalidate.
    let (allocator, device) = allocator(FakeLayout::mobile());
    let mut upload = allocator
        .allocate(&buffer(1000, 4, Usage::READBACK))
        .unwrap();
    assert_eq!(upload.memory_type(), 2);
    let bytes: Vec<u8> = (0..100).collect();
    allocator
        .copy_to_allocation(&mut upload, 300, &bytes)
        .unwrap();
    // SAFETY: no slice of `upload` is alive.
    let seen = unsafe { device.read(upload.memory(), upload.offset() + 300, 100) }.unwrap();
    assert_eq!(seen, bytes, "the copy was not flushed");
    let flushed = *device.flushed_ranges().last().unwrap();
    assert_eq!(
        (flushed.offset, flushed.size),
        (upload.offset() + 256, 256),
        "the flush should cover the written bytes' atoms only"
    );

    let mut readback = allocator
        .allocate(&buffer(512, 4, Usage::READBACK))
        .unwrap();
    // SAFETY: no slice of `readback` is alive.
    assert!(unsafe { device.write(readback.memory(), readback.offset(), &[9; 512]) });
    let mut out = [0u8; 16];
    allocator
        .copy_from_allocation(&mut readback, 496, &mut out)
        .unwrap();
    assert_eq!(out, [9; 16], "the copy was not invalidated first");

    // Out of range: nothing written or read, the buffer untouched.
    let size = upload.size();
    for (offset, len) in [(size - 10, 11), (size + 1, 0), (u64::MAX, 2)] {
        let error = allocator
            .copy_to_allocation(&mut upload, offset, &vec![1; len])
            .unwrap_err();
        assert!(
            matches!(error, vk_suballoc::Error::RangeOutOfBounds { start, .. } if start == offset),
            "{error:?}"
        );
    }
    let mut out = [5u8; 4];
    assert!(matches!(
        allocator.copy_from_allocation(&mut readback, 510, &mut out),
        Err(vk_suballoc::Error::RangeOutOfBounds {
            start: 510,
            end: 514,
            size: 512
        })
    ));
    assert_eq!(out, [5; 4]);
    // An empty copy at the end is fine.
    allocator
        .copy_to_allocation(&mut upload, size, &[])
        .unwrap();

    // Device-local memory is not host-visible.
    let mut local = allocator
        .allocate(&buffer(256, 4, Usage::DEVICE_LOCAL))
        .unwrap();
    assert!(matches!(
        allocator.copy_to_allocation(&mut local, 0, &[1]),
        Err(vk_suballoc::Error::NotHostVisible)
    ));
    assert!(device.violations().is_empty(), "{:?}", device.violations());
    for a in [upload, readback, local] {
        free(&allocator, a);
    }
    finish(allocator, &device);
}

/// `flush_allocations` and `invalidate_allocations` make one driver call
/// per pool of non-coherent allocations (none for coherent ones), with the
/// same atom-widened ranges as one call per allocation would, after
/// checking every entry: a bad one fails the call before anything is
/// flushed.
#[test]
fn batched_flushes_make_one_call_per_pool() {
    // Mobile: READBACK is type 2, non-coherent (atom 256); UPLOAD type 1,
    // coherent.
    let (allocator, device) = allocator(FakeLayout::mobile());
    let pool = allocator
        .create_pool(&vk_suballoc::PoolDesc::new(2).block_size(1 << 20))
        .unwrap();
    let mut cached: Vec<_> = (0..4)
        .map(|i| {
            let mut request = buffer(1000, 4, Usage::READBACK);
            if i % 2 == 1 {
                request.desc = request.desc.pool(pool);
            }
            allocator.allocate(&request).unwrap()
        })
        .collect();
    let coherent = allocator.allocate(&buffer(1000, 4, Usage::UPLOAD)).unwrap();
    assert_eq!(coherent.memory_type(), 1);
    allocator
        .flush_allocations(
            cached
                .iter()
                .map(|a| (a, 10..20))
                .chain([(&coherent, 0..1000)]),
        )
        .unwrap();
    // Two pools: the default pool of type 2 and the custom pool.
    assert_eq!(device.counters().flush_calls, 2);
    let mut flushed = device.flushed_ranges();
    flushed.sort_by_key(|r| (ash::vk::Handle::as_raw(r.memory), r.offset));
    let mut expected: Vec<_> = cached
        .iter()
        .map(|a| (ash::vk::Handle::as_raw(a.memory()), a.offset(), 256))
        .collect();
    expected.sort();
    let flushed: Vec<_> = flushed
        .iter()
        .map(|r| (ash::vk::Handle::as_raw(r.memory), r.offset, r.size))
        .collect();
    assert_eq!(flushed, expected);

    // GPU writes reach every allocation's host view through one batch.
    for (i, a) in cached.iter().enumerate() {
        // SAFETY: no slice of `a` is alive.
        assert!(unsafe { device.write(a.memory(), a.offset(), &[i as u8 + 1; 1000]) });
    }
    allocator
        .invalidate_allocations(cached.iter_mut().map(|a| (a, 0..1000)))
        .unwrap();
    assert_eq!(device.counters().invalidate_calls, 2);
    for (i, a) in cached.iter().enumerate() {
        assert!(allocator.mapped_slice(a).unwrap()[..1000]
            .iter()
            .all(|&b| b == i as u8 + 1));
    }

    // One bad entry: nothing flushed.
    let before = device.counters().flush_calls;
    let error = allocator
        .flush_allocations([(&cached[0], 0..10), (&cached[1], 0..5000)])
        .unwrap_err();
    assert!(
        matches!(
            error,
            vk_suballoc::Error::RangeOutOfBounds { end: 5000, .. }
        ),
        "{error:?}"
    );
    let local = allocator
        .allocate(&buffer(64, 4, Usage::DEVICE_LOCAL))
        .unwrap();
    assert_eq!(
        allocator.flush_allocations([(&cached[0], 0..10), (&local, 0..0)]),
        Err(vk_suballoc::Error::NotHostVisible)
    );
    // Coherent memory and empty ranges need no call.
    allocator
        .flush_allocations([(&coherent, 0..10), (&cached[0], 5..5)])
        .unwrap();
    allocator.flush_allocations([]).unwrap();
    assert_eq!(device.counters().flush_calls, before);
    assert!(device.violations().is_empty(), "{:?}", device.violations());
    for a in cached.into_iter().chain([coherent, local]) {
        free(&allocator, a);
    }
    allocator.destroy_pool(pool).unwrap();
    finish(allocator, &device);
}

/// An allocator that maps a block once and hands out pointers into it must
/// add each allocation's offset to the block's own pointer (VMA's
/// `pMappedData`, gpu-allocator's `mapped_ptr`): a pointer off by a margin,
/// a run slot's place or a stale block's base writes into a neighbour, and
/// one not aligned as asked breaks typed access (a `&mut [[f32; 4]]` cast).
/// In random runs over the host-visible types of three layouts, with and
/// without debug margins, every live allocation's pointer less its offset
/// is its memory object's one base, aligned to `minMemoryMapAlignment`
/// (64 on the fake device), and the pointer keeps the alignment asked for
/// up to that; bytes written through it are the device's bytes at the
/// allocation's offset.
#[test]
fn mapped_pointers_are_the_blocks_base_plus_the_offset_and_aligned() {
    use std::collections::HashMap;
    use vk_suballoc::Config;

    const MAP_ALIGNMENT: u64 = 64;
    for (layout, margin) in [
        (FakeLayout::discrete(), 0),
        (FakeLayout::mobile(), 0),
        (FakeLayout::integrated(), 16),
        (FakeLayout::mobile(), 256),
    ] {
        let seed = 0x6d61_7070 ^ margin;
        println!("seed {seed:#x}, margin {margin}");
        let mut state = seed;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        let config = Config {
            debug_margin: margin,
            ..Config::default()
        };
        let (allocator, device) = super::super::allocator_with(layout, config);
        let mut live = Vec::new();
        for step in 0..400u32 {
            if next() % 3 == 0 && !live.is_empty() {
                let index = (next() % live.len() as u64) as usize;
                let (a, _) = live.swap_remove(index);
                free(&allocator, a);
                continue;
            }
            let size = [4, 100, 256, 4000, 70_000, 1 << 20][(next() % 6) as usize] + next() % 64;
            let align = 1 << (next() % 13);
            let usage = [
                Usage::UPLOAD,
                Usage::READBACK,
                Usage::UPLOAD | Usage::DEVICE_LOCAL,
            ][(next() % 3) as usize];
            let policy = if next() % 8 == 0 {
                DedicatedPolicy::Always
            } else {
                DedicatedPolicy::Auto
            };
            let mut a = allocator
                .allocate(&buffer(size, align, usage).dedicated(policy))
                .unwrap();
            let tag = (step % 251) as u8;
            allocator.mapped_slice_mut(&mut a).unwrap().fill(tag);
            allocator.flush(&a, ..).unwrap();
            live.push((a, (align, tag)));

            let mut bases = HashMap::new();
            for (a, (align, _)) in &live {
                let pointer = a.mapped_ptr().unwrap().as_ptr() as u64;
                let base = pointer - a.offset();
                assert_eq!(
                    *bases.entry(a.memory()).or_insert(base),
                    base,
                    "step {step}: two bases in one memory object"
                );
                assert_eq!(base % MAP_ALIGNMENT, 0, "step {step}: base {base:#x}");
                assert_eq!(
                    pointer % align.min(&MAP_ALIGNMENT),
                    0,
                    "step {step}: pointer {pointer:#x} for alignment {align}"
                );
            }
        }
        for (a, (_, tag)) in &live {
            // SAFETY: no `&mut` slice of `a` is alive.
            let bytes = unsafe { device.read(a.memory(), a.offset(), a.size() as usize) };
            assert!(
                bytes.unwrap().iter().all(|b| b == tag),
                "the device's bytes are not the allocation's"
            );
        }
        for (a, _) in live {
            free(&allocator, a);
        }
        finish(allocator, &device);
    }
}
