//! Persistent mapping, byte access, and flush/invalidate on non-coherent memory.

use std::panic::{self, AssertUnwindSafe};

use ash::vk;
use ash::vk::Handle;
use vk_suballoc::device::fake::{FakeDevice, FakeLayout};
use vk_suballoc::{Allocation, Config, DedicatedPolicy, PoolDesc, Usage};

use super::{allocator, allocator_with, buffer, finish, free, FakeAllocator};

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

/// The fake device keeps what the GPU sees of non-coherent memory apart from
/// what the host sees, as the spec allows a driver to: host writes reach the
/// device only through a flush, device writes reach the host only through an
/// invalidate, and an invalidate discards unflushed host writes ("If a range
/// of non-coherent memory is written by the host and then invalidated
/// without first being flushed, its contents are undefined").
#[test]
fn fake_non_coherent_memory_needs_flushes_and_invalidates() {
    let (allocator, device) = allocator(FakeLayout::mobile());
    let mut a = allocator
        .allocate(&buffer(512, 4, Usage::READBACK))
        .unwrap();
    assert_eq!(a.memory_type(), 2, "cached, non-coherent");
    let (memory, offset) = (a.memory(), a.offset());
    // SAFETY: each call runs while no `&mut` slice of `a` is alive.
    let gpu = |device: &vk_suballoc::device::fake::FakeDevice| unsafe {
        device.read(memory, offset, 512).unwrap()
    };
    allocator.mapped_slice_mut(&mut a).unwrap().fill(1);
    assert!(gpu(&device).iter().all(|&b| b == 0), "seen before a flush");
    allocator.flush(&a, 0..256).unwrap();
    let seen = gpu(&device);
    assert!(seen[..256].iter().all(|&b| b == 1));
    assert!(seen[256..].iter().all(|&b| b == 0), "past the flushed atom");
    // SAFETY: no slice of `a` is alive.
    assert!(unsafe { device.write(a.memory(), a.offset(), &[2; 512]) });
    let host = allocator.mapped_slice(&a).unwrap();
    assert!(host.iter().all(|&b| b == 1), "seen before an invalidate");
    allocator.invalidate(&mut a, 0..512).unwrap();
    assert!(allocator.mapped_slice(&a).unwrap().iter().all(|&b| b == 2));
    // Unflushed host writes do not survive an invalidate.
    allocator.mapped_slice_mut(&mut a).unwrap().fill(3);
    allocator.invalidate(&mut a, 0..512).unwrap();
    assert!(allocator.mapped_slice(&a).unwrap().iter().all(|&b| b == 2));
    assert!(device.violations().is_empty(), "{:?}", device.violations());
    free(&allocator, a);
    finish(allocator, &device);
}

/// The fake device records the `vkMapMemory` and `VkMappedMemoryRange`
/// rules a validation layer checks: an offset past the memory
/// (VUID-vkMapMemory-offset-00679), a size of 0 (-size-00680), and, for
/// `VK_WHOLE_SIZE` ranges, an offset outside the mapping
/// (VUID-VkMappedMemoryRange-size-00686) and a mapping that ends inside an
/// atom before the end of the memory (-size-01389).
#[test]
fn fake_map_and_whole_size_range_rules() {
    use ash::vk;
    use gpu_alloc_types::MappedMemoryRange;
    use vk_suballoc::device::fake::FakeDevice;
    use vk_suballoc::device::{AllocationFlags, MemoryDevice};

    fn whole<M>(memory: &M, offset: u64) -> MappedMemoryRange<'_, M> {
        MappedMemoryRange {
            memory,
            offset,
            size: vk::WHOLE_SIZE,
        }
    }
    let device = FakeDevice::new(FakeLayout::mobile());
    // SAFETY: a fake device; the invalid calls are the ones under test.
    unsafe {
        // Type 2 is non-coherent, atom 256.
        let mut memory = device
            .allocate_memory(1000, 2, AllocationFlags::empty())
            .unwrap();
        assert!(device.map_memory(&mut memory, 0, 0).is_err());
        assert!(device
            .map_memory(&mut memory, 1000, vk::WHOLE_SIZE)
            .is_err());
        device.map_memory(&mut memory, 0, 300).unwrap();
        device.flush_memory_ranges(&[whole(&memory, 0)]).unwrap();
        device.unmap_memory(&mut memory);
        device.map_memory(&mut memory, 256, vk::WHOLE_SIZE).unwrap();
        device.flush_memory_ranges(&[whole(&memory, 0)]).unwrap();
        device
            .invalidate_memory_ranges(&[whole(&memory, 1024)])
            .unwrap();
        // Valid: from the mapping's start to the memory's end.
        device.flush_memory_ranges(&[whole(&memory, 256)]).unwrap();
        device.deallocate_memory(memory);
    }
    let violations = device.violations();
    for (i, vuid) in ["00680", "00679", "01389", "00686", "00686"]
        .iter()
        .enumerate()
    {
        assert!(violations[i].contains(vuid), "{vuid}: {violations:?}");
    }
    assert_eq!(violations.len(), 5, "{violations:?}");
}

/// The fake device records the other `vkMapMemory`, `vkUnmapMemory` and
/// `VkMappedMemoryRange` rules, each alone, and lets the ranges next to
/// them pass: a range of unmapped memory (VUID-VkMappedMemoryRange-memory-00684),
/// one that starts before the mapping or ends past it (-size-00685), an
/// offset (-offset-00687) or a size (-size-01390) off the atom, unless the
/// range ends at the memory's end, a mapping past the memory's end
/// (VUID-vkMapMemory-size-00681) or of mapped memory (-memory-00678), and
/// an unmap of unmapped memory (VUID-vkUnmapMemory-memory-00689); and it
/// counts every call. The allocator's own ranges are all valid, so only a
/// test like this one sees a check that lets an invalid range through.
#[test]
fn fake_range_and_mapping_rules_one_at_a_time() {
    use ash::vk;
    use gpu_alloc_types::MappedMemoryRange;
    use vk_suballoc::device::fake::{FakeDevice, FakeMemory};
    use vk_suballoc::device::{AllocationFlags, MemoryDevice};

    let device = FakeDevice::new(FakeLayout::mobile());
    // Each step with the violation it adds, if any; checked after each.
    let mut expected: Vec<&str> = Vec::new();
    let check = |expected: &[&str], step: &str| {
        let violations = device.violations();
        assert_eq!(violations.len(), expected.len(), "{step}: {violations:#?}");
        for (violation, vuid) in violations.iter().zip(expected) {
            assert!(violation.contains(vuid), "{step}: {vuid}: {violations:#?}");
        }
    };
    // Flushes `size` bytes of `memory` from `offset`, a step that adds the
    // violation `vuid` (or none).
    let flush = |expected: &mut Vec<&str>,
                 memory: &FakeMemory,
                 (offset, size): (u64, u64),
                 vuid: Option<&'static str>,
                 step: &str| {
        let range = MappedMemoryRange {
            memory,
            offset,
            size,
        };
        // SAFETY: a fake device; nothing reads or writes through the
        // mapping.
        unsafe { device.flush_memory_ranges(&[range]) }.unwrap();
        expected.extend(vuid);
        check(expected, step);
    };
    let whole = vk::WHOLE_SIZE;
    // SAFETY: a fake device; the invalid calls are the ones under test, and
    // nothing reads or writes through the mappings.
    unsafe {
        // Type 2 is non-coherent, atom 256.
        let mut memory = device
            .allocate_memory(1000, 2, AllocationFlags::empty())
            .unwrap();
        let unmapped = "range of unmapped memory";
        flush(&mut expected, &memory, (0, 256), Some("00684"), unmapped);
        device.unmap_memory(&mut memory);
        expected.push("00689");
        check(&expected, "unmap of unmapped memory");
        assert!(device.map_memory(&mut memory, 512, 600).is_err());
        expected.push("00681");
        check(&expected, "mapping past the end");

        // A mapping that ends on an atom before the memory's end.
        device.map_memory(&mut memory, 256, 512).unwrap();
        assert!(device.map_memory(&mut memory, 0, 256).is_err());
        expected.push("00678");
        check(&expected, "mapping of mapped memory");
        let valid = "valid ranges of an atom-aligned mapping";
        flush(&mut expected, &memory, (256, whole), None, valid);
        flush(&mut expected, &memory, (256, 512), None, valid);
        let range = MappedMemoryRange {
            memory: &memory,
            offset: 512,
            size: 256,
        };
        device.invalidate_memory_ranges(&[range]).unwrap();
        check(&expected, valid);
        let before = "range starting before the mapping";
        flush(&mut expected, &memory, (0, 512), Some("00685"), before);
        let past = "range ending past the mapping";
        flush(&mut expected, &memory, (512, 512), Some("00685"), past);
        let offset = "offset off the atom";
        flush(&mut expected, &memory, (300, 256), Some("00687"), offset);
        let size = "size off the atom";
        flush(&mut expected, &memory, (256, 100), Some("01390"), size);
        device.unmap_memory(&mut memory);

        // A size off the atom is valid when the range ends at the memory's end.
        device.map_memory(&mut memory, 0, whole).unwrap();
        let to_end = "size off the atom, to the memory's end";
        flush(&mut expected, &memory, (768, 232), None, to_end);
        device.unmap_memory(&mut memory);

        // A mapping that ends inside an atom: ranges of whole atoms in it
        // are valid; a whole-size range is not, however short the mapping.
        device.map_memory(&mut memory, 0, 300).unwrap();
        let inside = "range of whole atoms in a mapping ending inside one";
        flush(&mut expected, &memory, (0, 256), None, inside);
        device.unmap_memory(&mut memory);
        device.map_memory(&mut memory, 0, 100).unwrap();
        let first_atom = "whole-size range of a mapping inside the first atom";
        flush(
            &mut expected,
            &memory,
            (0, whole),
            Some("01389"),
            first_atom,
        );
        device.unmap_memory(&mut memory);
        device.deallocate_memory(memory);
    }
    check(&expected, "the end");
    // Every call counts, the invalid ones too.
    let counters = device.counters();
    assert_eq!((counters.maps, counters.unmaps), (6, 5), "maps and unmaps");
    assert_eq!(
        (counters.flushes, counters.invalidates),
        (10, 1),
        "ranges flushed and invalidated"
    );
}

/// A formatted fake device shows each host-visible memory object's size,
/// not its bytes (reading them all would end the slices handed out).
#[test]
fn a_formatted_fake_device_shows_host_bytes_by_size() {
    use vk_suballoc::device::fake::FakeDevice;
    use vk_suballoc::device::{AllocationFlags, MemoryDevice};

    let device = FakeDevice::new(FakeLayout::mobile());
    // SAFETY: a fake device; the memory is freed below.
    let memory = unsafe { device.allocate_memory(1000, 2, AllocationFlags::empty()) }.unwrap();
    let text = format!("{device:?}");
    assert!(text.contains("HostBytes { size: 1000, .. }"), "{text}");
    // SAFETY: as above.
    unsafe { device.deallocate_memory(memory) };
}

/// The fake device's flush hook runs in every flush until it is replaced,
/// and a hook that replaces or clears itself while it runs is not put
/// back over its successor (tests clear a hook from inside it to run it
/// once); a formatted device shows whether each hook is set.
#[test]
fn a_fake_flush_hook_runs_until_replaced_even_from_inside_itself() {
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::Arc;

    use gpu_alloc_types::MappedMemoryRange;
    use vk_suballoc::device::{AllocationFlags, MemoryDevice};

    let device = FakeDevice::new(FakeLayout::mobile());
    let hooks = |device: &FakeDevice| {
        let text = format!("{device:?}");
        (
            text.matches("CallHook(set)").count(),
            text.matches("CallHook(none)").count(),
        )
    };
    assert_eq!(hooks(&device), (0, 2), "no wait or flush hook yet");
    // SAFETY: a fake device; nothing reads or writes through the mapping,
    // and the memory is freed below.
    let mut memory = unsafe { device.allocate_memory(1024, 2, AllocationFlags::empty()) }.unwrap();
    // SAFETY: as above.
    unsafe { device.map_memory(&mut memory, 0, vk::WHOLE_SIZE) }.unwrap();
    let flush = || {
        let range = MappedMemoryRange {
            memory: &memory,
            offset: 0,
            size: 256,
        };
        // SAFETY: as above; type 2 is non-coherent, atom 256.
        unsafe { device.flush_memory_ranges(&[range]) }.unwrap();
    };

    // A counting hook runs in each flush.
    let (first, second) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let counter = Arc::clone(&first);
    device.set_flush_hook(Some(Box::new(move || {
        counter.fetch_add(1, Ordering::SeqCst);
    })));
    assert_eq!(hooks(&device), (1, 1), "a flush hook");
    flush();
    flush();
    assert_eq!(first.load(Ordering::SeqCst), 2, "it ran in both flushes");

    // One that clears itself runs once.
    let (counter, inner) = (Arc::clone(&first), device.clone());
    device.set_flush_hook(Some(Box::new(move || {
        counter.fetch_add(1, Ordering::SeqCst);
        inner.set_flush_hook(None);
    })));
    flush();
    flush();
    assert_eq!(first.load(Ordering::SeqCst), 3, "it cleared itself");
    assert_eq!(hooks(&device), (0, 2), "cleared");

    // One that replaces itself runs once, its successor from then on.
    let (counter, inner, next) = (Arc::clone(&first), device.clone(), Arc::clone(&second));
    device.set_flush_hook(Some(Box::new(move || {
        counter.fetch_add(1, Ordering::SeqCst);
        let next = Arc::clone(&next);
        inner.set_flush_hook(Some(Box::new(move || {
            next.fetch_add(1, Ordering::SeqCst);
        })));
    })));
    flush();
    flush();
    flush();
    assert_eq!(first.load(Ordering::SeqCst), 4, "it replaced itself");
    assert_eq!(
        second.load(Ordering::SeqCst),
        2,
        "its successor ran after it"
    );
    device.set_flush_hook(None);
    // SAFETY: as above.
    unsafe {
        device.unmap_memory(&mut memory);
        device.deallocate_memory(memory);
    }
    assert!(device.violations().is_empty(), "{:?}", device.violations());
}

/// On non-coherent memory a new mapping shows what the device holds, not
/// what an earlier mapping wrote without a flush (mapping does not write
/// back the host's cache), nor stale bytes from before a device write.
#[test]
fn fake_non_coherent_mappings_start_from_the_device_bytes() {
    use vk_suballoc::device::fake::FakeDevice;
    use vk_suballoc::device::{AllocationFlags, MemoryDevice};

    let device = FakeDevice::new(FakeLayout::mobile());
    // SAFETY: a fake device; each mapping is written within its 512 bytes
    // and read before it is unmapped, and its device write runs while no
    // mapping is.
    unsafe {
        // Type 2 is non-coherent, atom 256.
        let mut memory = device
            .allocate_memory(512, 2, AllocationFlags::empty())
            .unwrap();
        let host = device.map_memory(&mut memory, 0, 512).unwrap();
        host.as_ptr().write_bytes(0xaa, 512);
        device.unmap_memory(&mut memory);
        let host = device.map_memory(&mut memory, 0, 512).unwrap();
        let mapped = std::slice::from_raw_parts(host.as_ptr(), 512);
        assert!(mapped.iter().all(|&b| b == 0), "unflushed writes survived");
        device.unmap_memory(&mut memory);
        assert!(device.write(memory.raw(), 0, &[7; 512]));
        let host = device.map_memory(&mut memory, 256, 256).unwrap();
        let mapped = std::slice::from_raw_parts(host.as_ptr(), 256);
        assert!(
            mapped.iter().all(|&b| b == 7),
            "the device's write is missed"
        );
        device.unmap_memory(&mut memory);
        device.deallocate_memory(memory);
    }
    assert!(device.violations().is_empty(), "{:?}", device.violations());
}

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

/// Allocates a dedicated 4 KiB upload buffer and frees it, checking that its
/// memory object went; returns the memory and the old mapped pointer of
/// byte 100 with its memory offset.
fn freed_upload_memory(
    allocator: &FakeAllocator,
    device: &FakeDevice,
) -> (vk::DeviceMemory, std::ptr::NonNull<u8>, u64) {
    let a = allocator
        .allocate(&buffer(4096, 4, Usage::UPLOAD).dedicated(DedicatedPolicy::Always))
        .unwrap();
    let memory = a.memory();
    let offset = a.offset() + 100;
    // SAFETY: byte 100 of a 4096-byte mapped allocation.
    let pointer = unsafe { a.mapped_ptr().unwrap().add(100) };
    free(allocator, a);
    assert!(
        device.live_allocations().iter().all(|m| m.memory != memory),
        "the dedicated memory was freed"
    );
    (memory, pointer, offset)
}

#[test]
fn a_host_write_into_freed_memory_is_a_violation() {
    let (allocator, device) = allocator(FakeLayout::discrete());
    // A free with no write after it breaks no rule.
    freed_upload_memory(&allocator, &device);
    assert!(device.violations().is_empty(), "{:#?}", device.violations());
    let (memory, pointer, offset) = freed_upload_memory(&allocator, &device);
    // SAFETY: a deliberate write after `vkFreeMemory`, yet into live host
    // memory: the fake device keeps a freed object's host bytes (4 KiB,
    // under its 16 MiB quarantine limit) allocated in its quarantine until
    // 64 MiB of later frees evict them or `violations` checks them, and
    // nothing was freed or checked since. No reference to those bytes
    // exists (the allocation is gone, no slice of it was made), and the
    // device reads them only under its lock, on this thread, after this
    // write: no aliasing, no race. It breaks Vulkan's rule, not Rust's.
    unsafe { pointer.as_ptr().write(0x5A) };
    let violations = device.violations();
    assert_eq!(violations.len(), 1, "{violations:#?}");
    let expected = format!(
        "freed memory {:#x} were written after the free (first changed byte at offset {offset})",
        memory.as_raw()
    );
    assert!(violations[0].contains(&expected), "{violations:#?}");
    drop(allocator);
    assert!(device.live_allocations().is_empty());
    assert_eq!(device.counters().allocations, device.counters().frees);
}

/// Frees a dedicated upload buffer, drops `allocator` and writes a byte
/// through the buffer's old mapping: a host write into freed memory that
/// no `violations` or `assert_clean` call has checked yet. Returns the
/// line the quarantine's check will give for it.
fn unchecked_write_into_freed_memory(allocator: FakeAllocator, device: &FakeDevice) -> String {
    let (memory, pointer, offset) = freed_upload_memory(&allocator, device);
    drop(allocator);
    // SAFETY: as in `a_host_write_into_freed_memory_is_a_violation`: the
    // freed host bytes stay allocated in the device's quarantine (nothing
    // is freed or checked after them) until the device's drop reads them,
    // on this thread, after this write; no reference to them exists.
    unsafe { pointer.as_ptr().write(0x5A) };
    format!(
        "freed memory {:#x} were written after the free (first changed byte at offset {offset})",
        memory.as_raw()
    )
}

/// A host write into freed memory that no check saw before the device
/// went is not lost: the device's drop checks the quarantine and panics,
/// naming the memory and the byte. Every other test checks the quarantine
/// through `violations` first, so a drop that checked nothing, or
/// panicked only while unwinding already, went unseen.
#[test]
fn an_unchecked_write_into_freed_memory_panics_when_the_device_drops() {
    let (allocator, device) = allocator(FakeLayout::discrete());
    let expected = unchecked_write_into_freed_memory(allocator, &device);
    let dropped = panic::catch_unwind(AssertUnwindSafe(move || drop(device)));
    let message = *dropped
        .expect_err("the drop panics")
        .downcast::<String>()
        .expect("a formatted message");
    assert!(
        message.contains("fake device dropped with writes into freed memory"),
        "{message}"
    );
    assert!(message.contains(&expected), "{message}");
}

/// A device dropped while its thread unwinds from another panic (a test
/// failing with the device in scope) reports no write into freed memory:
/// a second panic would abort the test binary and hide the first failure.
#[test]
fn a_device_dropped_while_unwinding_does_not_panic_again() {
    let (allocator, device) = allocator(FakeLayout::discrete());
    unchecked_write_into_freed_memory(allocator, &device);
    let unwound = panic::catch_unwind(AssertUnwindSafe(move || {
        let _device = device;
        panic!("an earlier failure");
    }));
    let message = *unwound
        .expect_err("the closure panics")
        .downcast::<&str>()
        .expect("the closure's own message");
    assert_eq!(message, "an earlier failure");
}
