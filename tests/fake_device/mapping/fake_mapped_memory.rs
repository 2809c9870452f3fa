//! The fake device's model of mapped memory, which the other mapping tests
//! rely on: non-coherent memory keeps the GPU's view apart from the host's
//! (flushes and invalidates carry bytes between them, a new mapping starts
//! from the device's bytes), the `vkMapMemory`, `vkUnmapMemory` and
//! `VkMappedMemoryRange` rules a validation layer checks are recorded as
//! violations, each alone, its flush hook runs until it is replaced, and a
//! formatted device shows host bytes by size only.

use ash::vk;
use vk_suballoc::device::fake::{FakeDevice, FakeLayout};
use vk_suballoc::Usage;

use super::super::{allocator, assert_rules, buffer, finish, free};

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
    assert_rules(
        &device.violations(),
        &[
            "VUID-vkMapMemory-size-00680",
            "VUID-vkMapMemory-offset-00679",
            "VUID-VkMappedMemoryRange-size-01389",
            "VUID-VkMappedMemoryRange-size-00686",
            "VUID-VkMappedMemoryRange-size-00686",
        ],
        "maps and whole-size ranges",
    );
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
    let check = |expected: &[&str], step: &str| assert_rules(&device.violations(), expected, step);
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
        flush(
            &mut expected,
            &memory,
            (0, 256),
            Some("VUID-VkMappedMemoryRange-memory-00684"),
            unmapped,
        );
        device.unmap_memory(&mut memory);
        expected.push("VUID-vkUnmapMemory-memory-00689");
        check(&expected, "unmap of unmapped memory");
        assert!(device.map_memory(&mut memory, 512, 600).is_err());
        expected.push("VUID-vkMapMemory-size-00681");
        check(&expected, "mapping past the end");

        // A mapping that ends on an atom before the memory's end.
        device.map_memory(&mut memory, 256, 512).unwrap();
        assert!(device.map_memory(&mut memory, 0, 256).is_err());
        expected.push("VUID-vkMapMemory-memory-00678");
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
        flush(
            &mut expected,
            &memory,
            (0, 512),
            Some("VUID-VkMappedMemoryRange-size-00685"),
            before,
        );
        let past = "range ending past the mapping";
        flush(
            &mut expected,
            &memory,
            (512, 512),
            Some("VUID-VkMappedMemoryRange-size-00685"),
            past,
        );
        let offset = "offset off the atom";
        flush(
            &mut expected,
            &memory,
            (300, 256),
            Some("VUID-VkMappedMemoryRange-offset-00687"),
            offset,
        );
        let size = "size off the atom";
        flush(
            &mut expected,
            &memory,
            (256, 100),
            Some("VUID-VkMappedMemoryRange-size-01390"),
            size,
        );
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
            Some("VUID-VkMappedMemoryRange-size-01389"),
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
    assert_eq!(
        hooks(&device),
        (0, 4),
        "no wait, poll, flush or budget hook yet"
    );
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
    assert_eq!(hooks(&device), (1, 3), "a flush hook");
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
    assert_eq!(hooks(&device), (0, 4), "cleared");

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

/// A flush or invalidate of no range at all is a violation
/// (VUID-vkFlushMappedMemoryRanges-memoryRangeCount-arraylength,
/// VUID-vkInvalidateMappedMemoryRanges-memoryRangeCount-arraylength) that
/// the fake device records, as the validation layer does: it counted the
/// call and let it pass, so an allocator path that called the driver with
/// an empty list (a batch whose ranges were all filtered out) would have
/// passed.
#[test]
fn fake_flushes_and_invalidates_of_no_range_are_violations() {
    use vk_suballoc::device::MemoryDevice;

    let device = FakeDevice::new(FakeLayout::mobile());
    // SAFETY: a fake device; the invalid calls are the ones under test.
    unsafe {
        device.flush_memory_ranges(&[]).unwrap();
        device.invalidate_memory_ranges(&[]).unwrap();
    }
    assert_rules(
        &device.violations(),
        &[
            "VUID-vkFlushMappedMemoryRanges-memoryRangeCount-arraylength",
            "VUID-vkInvalidateMappedMemoryRanges-memoryRangeCount-arraylength",
        ],
        "no range",
    );
    let counters = device.counters();
    assert_eq!((counters.flush_calls, counters.invalidate_calls), (1, 1));
}
