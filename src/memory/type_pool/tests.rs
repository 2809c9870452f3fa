use ash::vk;

use crate::device::fake::{FakeDevice, FakeLayout, FakeMemory};
use crate::{Allocation, Allocator, Config, Error, Request, ResourceKind, Usage};

const MIB: u64 = 1 << 20;

fn request(size: u64) -> Request<'static> {
    let requirements = vk::MemoryRequirements {
        size,
        alignment: 256,
        memory_type_bits: !0,
    };
    Request::new(requirements, Usage::DEVICE_LOCAL, ResourceKind::Buffer)
}

fn free(allocator: &Allocator<FakeDevice, FakeMemory>, allocation: Allocation) {
    // SAFETY: the fake device runs no GPU work.
    unsafe { allocator.free(allocation) }.unwrap();
}

/// A second handle to `a`'s allocation, as a caller could not make one:
/// kept past `a`'s free, it is stale.
fn copy(a: &Allocation) -> Allocation {
    Allocation {
        memory: a.memory,
        offset: a.offset,
        size: a.size,
        home: a.home,
        location: a.location,
        allocator: a.allocator,
        mapped: a.mapped,
    }
}

/// A freed slot's handle is stale: refused when the slot is taken again
/// and when its run has gone back to the block, and nothing changes.
#[test]
fn stale_slots_are_refused() {
    let device = FakeDevice::new(FakeLayout::discrete());
    let allocator = Allocator::new(device.clone(), Config::default()).unwrap();
    // A range of its own (runs come from existing blocks), then slot 0 of
    // a run, which keeps the run alive.
    let keep = [
        allocator.allocate(&request(100)).unwrap(),
        allocator.allocate(&request(100)).unwrap(),
    ];
    assert!(matches!(keep[1].location, super::Location::Slot { .. }));
    let first = allocator.allocate(&request(100)).unwrap();
    assert!(matches!(first.location, super::Location::Slot { .. }));
    let stale = copy(&first);
    free(&allocator, first);
    assert!(!allocator.owns(&stale));
    // The same slot again, with the next generation.
    let second = allocator.allocate(&request(100)).unwrap();
    assert_eq!(second.offset, stale.offset);
    // SAFETY: the fake device runs no GPU work.
    let result = unsafe { allocator.free(stale) };
    assert_eq!(result, Err(Error::StaleAllocation));
    assert!(allocator.owns(&second));
    let before = allocator.stats();
    let stale = copy(&second);
    free(&allocator, second);
    let [range, slot] = keep;
    free(&allocator, range);
    free(&allocator, slot);
    // The run is gone: the stale handle names nothing.
    // SAFETY: as above.
    let result = unsafe { allocator.free(stale) };
    assert_eq!(result, Err(Error::StaleAllocation));
    assert_eq!(before.allocations(), 3);
    assert_eq!(allocator.stats().allocations(), 0);
    drop(allocator);
    assert!(device.live_allocations().is_empty());
}

/// A block that missed a request is skipped for requests at least as
/// large, but still serves smaller ones, and serves large ones again once
/// something in it is freed.
#[test]
fn a_known_miss_skips_only_what_cannot_fit() {
    let device = FakeDevice::new(FakeLayout::discrete());
    let allocator = Allocator::new(device.clone(), Config::default()).unwrap();
    // The first device-local block is 32 MiB (256 MiB / 8): fill it.
    let mut first: Vec<Allocation> = (0..32)
        .map(|_| allocator.allocate(&request(MIB)).unwrap())
        .collect();
    let block = first[0].memory();
    assert!(first.iter().all(|a| a.memory() == block));
    // 1 MiB holes at 7 and 20 MiB: 2 MiB free, but not in one range.
    free(&allocator, first.remove(20));
    free(&allocator, first.remove(7));
    // 2 MiB misses the first block and opens a second.
    let big = allocator.allocate(&request(2 * MIB)).unwrap();
    assert_ne!(big.memory(), block);
    // Smaller than the miss: the hole still takes it.
    let small = allocator.allocate(&request(MIB)).unwrap();
    assert_eq!((small.memory(), small.offset()), (block, 7 * MIB));
    // Free 2 MiB at 4 MiB: the first block takes 2 MiB again.
    free(&allocator, first.remove(4));
    free(&allocator, first.remove(4));
    let again = allocator.allocate(&request(2 * MIB)).unwrap();
    assert_eq!((again.memory(), again.offset()), (block, 4 * MIB));
    for allocation in first.into_iter().chain([big, small, again]) {
        free(&allocator, allocation);
    }
    drop(allocator);
    assert!(device.live_allocations().is_empty());
}

/// A slot table the host cannot allocate fails the request with
/// `OutOfHostMemory` before any device memory is made, and changes nothing.
/// `initial_block_slots = MAX_SLOTS` asks for 128 GiB, above what the unit
/// tests' global allocator grants (`host_memory_cap`).
#[test]
fn a_slot_table_the_host_cannot_allocate_is_a_typed_error() {
    let device = FakeDevice::new(FakeLayout::discrete());
    let config = Config {
        initial_block_slots: crate::offset::MAX_SLOTS,
        ..Config::default()
    };
    let allocator = Allocator::new(device.clone(), config).unwrap();
    for size in [100, MIB] {
        let result = allocator.allocate(&request(size));
        assert_eq!(result.err(), Some(Error::OutOfHostMemory));
    }
    assert_eq!(device.counters().allocate_calls, 0);
    assert_eq!(allocator.stats().allocations(), 0);
    drop(allocator);
    device.assert_clean();
}

/// A stale handle cannot rename the allocation now in its place, a range,
/// a run slot or dedicated memory: `set_name` refuses it and the live
/// allocation keeps its name.
#[test]
fn stale_handles_rename_nothing() {
    let device = FakeDevice::new(FakeLayout::discrete());
    let allocator = Allocator::new(device, Config::default()).unwrap();
    let keep = allocator.allocate(&request(MIB)).unwrap();
    for request in [
        request(100),
        request(MIB),
        request(4096).dedicated(crate::DedicatedPolicy::Always),
    ] {
        let first = allocator.allocate(&request.name("first")).unwrap();
        let stale = copy(&first);
        free(&allocator, first);
        let second = allocator.allocate(&request.name("second")).unwrap();
        assert_eq!(
            allocator.set_name(&stale, Some("stale")),
            Err(Error::StaleAllocation)
        );
        let json = allocator.stats_json(true);
        assert!(json.contains("\"second\"") && !json.contains("\"stale\""));
        free(&allocator, second);
    }
    free(&allocator, keep);
}
