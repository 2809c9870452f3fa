//! Neighbours in non-coherent memory: an allocation's flushes and
//! invalidates, widened to atoms, never reach another allocation's bytes
//! (an invalidate would drop its unflushed host writes, a flush overwrite
//! what the GPU wrote for it), in run slots, ranges, dedicated memory,
//! custom pools whose blocks end inside an atom and with debug margins;
//! and a slice of one allocation stays valid while the fake device reads,
//! writes, flushes and invalidates its neighbour (a Miri check).

use vk_suballoc::device::fake::{FakeDevice, FakeLayout};
use vk_suballoc::{Allocation, Config, DedicatedPolicy, PoolDesc, Usage};

use super::super::{allocator, allocator_with, buffer, finish, free, FakeAllocator};

/// On non-coherent memory an allocation's flushes and invalidates, widened
/// to atoms, must not reach a neighbour's bytes: an invalidate there would
/// discard the neighbour's unflushed host writes, a flush would overwrite
/// what the GPU wrote for it. Small buffers (run slots), ranges of blocks,
/// sizes off the atom and dedicated memory alike.
#[test]
fn non_coherent_neighbours_keep_their_bytes() {
    let (allocator, device) = allocator(FakeLayout::mobile());
    let mut live = Vec::new();
    for (i, size) in [
        1u64, 100, 200, 255, 256, 257, 300, 1000, 5000, 20_000, 70_000,
    ]
    .into_iter()
    .cycle()
    .take(40)
    .enumerate()
    {
        let policy = if i % 13 == 12 {
            DedicatedPolicy::Always
        } else {
            DedicatedPolicy::Auto
        };
        let a = allocator
            .allocate(&buffer(size, 4, Usage::READBACK).dedicated(policy))
            .unwrap();
        assert_eq!(a.memory_type(), 2, "cached, non-coherent");
        live.push((i as u8 + 1, a));
    }
    // The GPU writes `tag + 100` everywhere; the host writes `tag` and
    // flushes nothing.
    for (tag, a) in &mut live {
        let bytes = vec![*tag + 100; a.size() as usize];
        // SAFETY: no slice of `a` is alive.
        assert!(unsafe { device.write(a.memory(), a.offset(), &bytes) });
        allocator.mapped_slice_mut(a).unwrap().fill(*tag);
    }
    for j in 0..live.len() {
        let (_, a) = &mut live[j];
        let size = a.size();
        if j % 2 == 0 {
            allocator.invalidate(a, 0..size).unwrap();
        } else {
            allocator.flush(a, size / 2..size).unwrap();
        }
        for (k, (tag, b)) in live.iter().enumerate() {
            if k == j {
                continue;
            }
            let host = allocator.mapped_slice(b).unwrap();
            assert!(
                host.iter().all(|x| x == tag),
                "host bytes of {k} lost to the invalidate of {j}"
            );
            // SAFETY: the one slice of `b` alive, `host`, is shared.
            let gpu = unsafe { device.read(b.memory(), b.offset(), b.size() as usize) }.unwrap();
            assert!(
                gpu.iter().all(|&x| x == tag + 100),
                "GPU bytes of {k} overwritten by the flush of {j}"
            );
        }
        // Restore `j` as it was for the next rounds.
        let (tag, a) = &mut live[j];
        let bytes = vec![*tag + 100; size as usize];
        // SAFETY: no slice of `a` is alive.
        assert!(unsafe { device.write(a.memory(), a.offset(), &bytes) });
        allocator.mapped_slice_mut(a).unwrap().fill(*tag);
    }
    assert!(device.violations().is_empty(), "{:?}", device.violations());
    for (_, a) in live {
        free(&allocator, a);
    }
    finish(allocator, &device);
}

/// Each allocation of `live` (tag, allocation), in non-coherent memory, is
/// flushed or invalidated over several ranges, its ends included; every
/// other one keeps its unflushed host bytes (`tag`) and its GPU bytes
/// (`tag + 100`), and no range breaks a `VkMappedMemoryRange` rule.
fn assert_ranges_keep_neighbours(
    allocator: &FakeAllocator,
    device: &FakeDevice,
    live: &mut [(u8, Allocation)],
) {
    let reset = |allocator: &FakeAllocator, (tag, a): &mut (u8, Allocation)| {
        let bytes = vec![*tag + 100; a.size() as usize];
        // SAFETY: no slice of `a` is alive.
        assert!(unsafe { device.write(a.memory(), a.offset(), &bytes) });
        allocator.mapped_slice_mut(a).unwrap().fill(*tag);
    };
    for entry in live.iter_mut() {
        reset(allocator, entry);
    }
    for j in 0..live.len() {
        let size = live[j].1.size();
        for (k, range) in [0..size, size / 3..size, size - 1..size, 0..1]
            .into_iter()
            .enumerate()
        {
            let a = &mut live[j].1;
            if k % 2 == 0 {
                allocator.invalidate(a, range.clone()).unwrap();
            } else {
                allocator.flush(a, range.clone()).unwrap();
            }
            for (i, (tag, b)) in live.iter().enumerate().filter(|&(i, _)| i != j) {
                let host = allocator.mapped_slice(b).unwrap();
                assert!(
                    host.iter().all(|x| x == tag),
                    "host bytes of {i} lost to {range:?} of {j}"
                );
                // SAFETY: the one slice of `b` alive, `host`, is shared.
                let gpu = unsafe { device.read(b.memory(), b.offset(), b.size() as usize) };
                assert!(
                    gpu.unwrap().iter().all(|&x| x == tag + 100),
                    "GPU bytes of {i} overwritten by {range:?} of {j}"
                );
            }
            reset(allocator, &mut live[j]);
        }
    }
    assert!(device.violations().is_empty(), "{:?}", device.violations());
}

/// Atom widening stays off the neighbours with debug margins, and in custom
/// pools whose block size is not a multiple of the atom (the last atom of a
/// block is cut short): run slots, ranges, alignments above the atom and
/// above a slot class's, and dedicated memory.
#[test]
fn non_coherent_neighbours_keep_their_bytes_in_pools_and_margins() {
    // Size and alignment; mobile's atom is 256.
    let requests = [
        (1u64, 1u64),
        (100, 4),
        (255, 1),
        (257, 64),
        (300, 512),
        (1000, 4),
        (3, 2048),
        (70, 4096),
        (17, 8192),
        (5000, 8),
        (20_000, 4),
    ];
    for (block_size, margin) in [(None, 4), (None, 252), (Some(10_100), 0), (Some(70_000), 4)] {
        let config = Config {
            debug_margin: margin,
            ..Config::default()
        };
        let (allocator, device) = allocator_with(FakeLayout::mobile(), config);
        let pool = block_size.map(|size| {
            allocator
                .create_pool(&PoolDesc::new(2).block_size(size))
                .unwrap()
        });
        let mut live = Vec::new();
        for (i, &(size, align)) in requests.iter().cycle().take(40).enumerate() {
            let mut request = buffer(size, align, Usage::READBACK);
            if let Some(pool) = &pool {
                request.desc = request.desc.pool(*pool);
            }
            if i % 13 == 12 {
                request = request.dedicated(DedicatedPolicy::Always);
            }
            // A 10_100-byte block holds no 20_000-byte buffer.
            let Ok(a) = allocator.allocate(&request) else {
                assert!(block_size.is_some_and(|block| size + margin > block));
                continue;
            };
            assert_eq!(a.memory_type(), 2, "cached, non-coherent");
            live.push((live.len() as u8 + 1, a));
        }
        assert_ranges_keep_neighbours(&allocator, &device, &mut live);
        for (_, a) in live {
            free(&allocator, a);
        }
        if let Some(pool) = pool {
            allocator.destroy_pool(pool).unwrap();
        }
        finish(allocator, &device);
    }
}

/// A slice of one allocation stays valid while the fake device flushes,
/// invalidates, reads and writes a neighbour in the same memory object: the
/// device touches only the bytes of the range it is given, never a
/// reference to the whole object, which would end every slice the
/// allocator handed out of it (Miri, under Stacked Borrows, reports that as
/// undefined behaviour: `cargo +nightly miri test --features fake-device
/// --test fake_device neighbour`).
#[test]
fn a_slice_outlives_device_accesses_to_its_neighbours() {
    // Small heaps: 128 KiB blocks, so that Miri runs this in a second.
    let (allocator, device) = allocator(FakeLayout::mobile().with_heap_sizes(1 << 20));
    // READBACK: type 2, non-coherent (a device copy beside the host bytes);
    // UPLOAD: type 1, coherent (the device reads the host bytes).
    for usage in [Usage::READBACK, Usage::UPLOAD] {
        let mut a = allocator.allocate(&buffer(1000, 4, usage)).unwrap();
        let mut b = allocator.allocate(&buffer(1000, 4, usage)).unwrap();
        assert_eq!(a.memory(), b.memory());
        let bytes = allocator.mapped_slice_mut(&mut a).unwrap();
        bytes[0] = 1;
        allocator.flush(&b, 0..1000).unwrap();
        allocator.invalidate(&mut b, 0..1000).unwrap();
        // SAFETY: no slice of `b` is alive (`bytes` is `a`'s).
        unsafe {
            assert!(device.read(b.memory(), b.offset(), 1000).is_some());
            assert!(device.write(b.memory(), b.offset(), &[2; 1000]));
        }
        bytes[1] = 3;
        assert_eq!(&bytes[..2], &[1, 3]);
        for allocation in [a, b] {
            free(&allocator, allocation);
        }
    }
    assert!(device.violations().is_empty(), "{:?}", device.violations());
    finish(allocator, &device);
}

/// A shared slice of an allocation stays valid across a flush of its own
/// bytes: `flush` and `flush_allocations` take the allocation by `&`, as
/// `mapped_slice` does, so safe code may hold the slice over them. The fake
/// device's flush only reads the host's bytes, and must not take a unique
/// reference to them (Miri, under Stacked Borrows, reports the next read
/// of the slice as undefined behaviour: `cargo +nightly miri test
/// --features fake-device --test fake_device a_shared_slice`).
#[test]
fn a_shared_slice_outlives_a_flush_of_its_own_bytes() {
    let (allocator, device) = allocator(FakeLayout::mobile().with_heap_sizes(1 << 20));
    // READBACK: type 2, non-coherent, where a flush copies the host bytes.
    let mut a = allocator
        .allocate(&buffer(1000, 4, Usage::READBACK))
        .unwrap();
    allocator.mapped_slice_mut(&mut a).unwrap().fill(7);
    let bytes = allocator.mapped_slice(&a).unwrap();
    allocator.flush(&a, 0..1000).unwrap();
    assert_eq!(bytes[0], 7);
    allocator.flush_allocations([(&a, 0..1000)]).unwrap();
    assert_eq!(bytes[999], 7);
    // SAFETY: no mutable slice of `a` is alive (`bytes` only reads).
    let device_bytes = unsafe { device.read(a.memory(), a.offset(), 1000) };
    assert_eq!(device_bytes.as_deref(), Some(&[7u8; 1000][..]));
    free(&allocator, a);
    assert!(device.violations().is_empty(), "{:?}", device.violations());
    finish(allocator, &device);
}
