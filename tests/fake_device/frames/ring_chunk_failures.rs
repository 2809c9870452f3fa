//! An upload ring's chunk whose `vkCreateBuffer` or `vkBindBufferMemory`
//! fails (`FakeDevice::fail_call`), on a ring's first chunk and on a
//! growing ring's new one, through every call that makes a chunk: the
//! caller gets the driver's error as its variant, nothing is left behind
//! (no buffer, no allocation, no memory object the allocator does not
//! count), and the same call made again succeeds and leaves the allocator
//! as a run that never failed leaves it.

use vk_suballoc::device::fake::{FakeCall, FakeDevice, FakeLayout};
use vk_suballoc::device::DeviceError;
use vk_suballoc::{Config, Error, RingAllocation, UploadRing, UploadRingDesc};

use super::super::{allocator_with, finish, FakeAllocator};

/// Bytes of each chunk of the rings here; a growing ring's second
/// allocation of [`TAKEN`] bytes needs a new chunk.
const CHUNK: u64 = 4096;

/// Bytes of each ring allocation here.
const TAKEN: u64 = 3000;

/// The calls that make a ring's chunk.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Entry {
    /// `create_upload_ring`: the first chunk.
    Create,
    /// `create_upload_ring_unchecked`: the first chunk.
    CreateUnchecked,
    /// `ring_allocate` on a growing ring whose chunk is full.
    Grow,
    /// `ring_allocate_mut` on a growing ring whose chunk is full.
    GrowMut,
    /// `ring_allocate` with debug fills (another path through the call).
    GrowFilled,
}

const ENTRIES: [Entry; 5] = [
    Entry::Create,
    Entry::CreateUnchecked,
    Entry::Grow,
    Entry::GrowMut,
    Entry::GrowFilled,
];

/// Each driver error a test injects, and the error the allocator's caller
/// gets for it: out-of-memory results as the allocator's own variants,
/// `VK_ERROR_TOO_MANY_OBJECTS` of a call that is not `vkAllocateMemory`
/// passed on as a device error (not `Error::TooManyObjects`, which means
/// `maxMemoryAllocationCount`).
const ERRORS: [(DeviceError, Error); 3] = [
    (DeviceError::OutOfDeviceMemory, Error::OutOfDeviceMemory),
    (DeviceError::OutOfHostMemory, Error::OutOfHostMemory),
    (
        DeviceError::TooManyObjects,
        Error::Device(DeviceError::TooManyObjects),
    ),
];

/// The ring of a test, before the call that makes a chunk: none yet for
/// the first chunk, or a growing ring whose one chunk holds an allocation
/// too large for a second one.
struct Before {
    allocator: FakeAllocator,
    device: FakeDevice,
    ring: Option<(UploadRing, RingAllocation)>,
}

fn desc(grow: bool) -> UploadRingDesc<'static> {
    UploadRingDesc {
        size: CHUNK,
        grow,
        ..UploadRingDesc::default()
    }
}

fn before(entry: Entry) -> Before {
    let config = Config {
        debug_fill: entry == Entry::GrowFilled,
        ..Config::default()
    };
    let (allocator, device) = allocator_with(FakeLayout::discrete(), config);
    let ring = match entry {
        Entry::Create | Entry::CreateUnchecked => None,
        Entry::Grow | Entry::GrowMut | Entry::GrowFilled => {
            let ring = allocator.create_upload_ring(&desc(true)).unwrap();
            let first = allocator.ring_allocate(ring, TAKEN, 16).unwrap();
            allocator
                .ring_write(&first, 0, &[1; TAKEN as usize])
                .unwrap();
            Some((ring, first))
        }
    };
    Before {
        allocator,
        device,
        ring,
    }
}

/// The call of `entry` that makes a chunk, and a ring allocation in it.
fn make_chunk(
    entry: Entry,
    allocator: &mut FakeAllocator,
    ring: Option<UploadRing>,
) -> Result<(UploadRing, RingAllocation), Error> {
    let ring = match (entry, ring) {
        (Entry::Create, _) => allocator.create_upload_ring(&desc(false))?,
        // SAFETY: the default buffer usage is core Vulkan 1.0's.
        (Entry::CreateUnchecked, _) => unsafe {
            allocator.create_upload_ring_unchecked(&desc(false))?
        },
        (Entry::GrowMut, Some(ring)) => {
            return Ok((ring, allocator.ring_allocate_mut(ring, TAKEN, 16)?))
        }
        (_, Some(ring)) => return Ok((ring, allocator.ring_allocate(ring, TAKEN, 16)?)),
        (_, None) => unreachable!("a growing ring's entry without its ring"),
    };
    let allocation = allocator.ring_allocate(ring, TAKEN, 16)?;
    Ok((ring, allocation))
}

/// What a test compares of two runs: the allocator's figures, the
/// buffers alive, and each memory object's size and type.
fn shape(allocator: &FakeAllocator, device: &FakeDevice) -> impl PartialEq + std::fmt::Debug {
    let mut memory: Vec<(u64, u32)> = device
        .live_allocations()
        .iter()
        .map(|m| (m.size, m.memory_type))
        .collect();
    memory.sort_unstable();
    (allocator.stats(), device.live_resources(), memory)
}

/// Makes the chunk of `entry` with `call`'s `nth` call from now failing
/// with `error` (none: no failure), then again if it failed; returns the
/// error of the first try and the shape of the end.
fn run(
    entry: Entry,
    fault: Option<(FakeCall, DeviceError)>,
) -> (Option<Error>, impl PartialEq + std::fmt::Debug) {
    let Before {
        mut allocator,
        device,
        ring,
    } = before(entry);
    let what = format!("{entry:?}, {fault:?}");
    let stats = allocator.stats();
    let buffers = device.live_resources();
    if let Some((call, error)) = fault {
        device.fail_call(call, 1, error);
    }
    let first = make_chunk(entry, &mut allocator, ring.map(|(r, _)| r));
    let failure = first.as_ref().err().copied();
    if failure.is_some() {
        // Nothing of the chunk is left: its buffer destroyed, its memory
        // freed (a block kept for reuse is counted by the allocator).
        let after = allocator.stats();
        assert_eq!(device.live_resources(), buffers, "{what}: a buffer left");
        assert_eq!(after.allocations(), stats.allocations(), "{what}");
        assert_eq!(after.live_bytes(), stats.live_bytes(), "{what}");
        assert_eq!(
            device.live_allocations().len(),
            after.memory_objects as usize,
            "{what}: a memory object the allocator does not count"
        );
        if fault.is_some_and(|(call, _)| call == FakeCall::CreateBuffer) {
            assert_eq!(after, stats, "{what}: memory made without a buffer");
        }
        assert_eq!(device.violations(), Vec::<String>::new(), "{what}");
    }
    // The ring, and its earlier allocation, still work; the same call
    // succeeds now.
    if let Some((_, earlier)) = &ring {
        allocator
            .ring_write(earlier, 0, &[2; TAKEN as usize])
            .unwrap();
    }
    let (ring, allocation) = match first {
        Ok(made) => made,
        Err(_) => make_chunk(entry, &mut allocator, ring.map(|(r, _)| r))
            .unwrap_or_else(|error| panic!("{what}: the call again: {error:?}")),
    };
    allocator
        .ring_write(&allocation, 0, &[3; TAKEN as usize])
        .unwrap();
    // SAFETY: ring allocations hand out no slices.
    let bytes = unsafe {
        device.read(
            allocation.memory(),
            allocation.memory_offset(),
            TAKEN as usize,
        )
    };
    assert_eq!(bytes, Some(vec![3; TAKEN as usize]), "{what}");
    let end = shape(&allocator, &device);
    allocator.destroy_upload_ring(ring).unwrap();
    // SAFETY: the fake device runs no GPU work.
    unsafe { allocator.collect_idle() };
    finish(allocator, &device);
    (failure, end)
}

/// The chunk of each entry, with its `vkCreateBuffer` or
/// `vkBindBufferMemory` failing with each error: the caller gets the
/// error, nothing is left behind, and the call made again leaves the
/// allocator as a run that never failed leaves it (the same memory objects
/// of the same types: a heap whose buffer creation or bind failed is not
/// taken for a full one).
#[test]
fn a_ring_chunk_whose_buffer_creation_or_bind_fails_leaves_nothing_behind() {
    for entry in ENTRIES {
        let (none, clean) = run(entry, None);
        assert_eq!(none, None, "{entry:?} without a failure");
        for call in [FakeCall::CreateBuffer, FakeCall::BindBuffer] {
            for (injected, expected) in ERRORS {
                let (failure, end) = run(entry, Some((call, injected)));
                assert_eq!(failure, Some(expected), "{entry:?}, {call:?}, {injected:?}");
                assert_eq!(end, clean, "{entry:?}, {call:?}, {injected:?}");
            }
        }
    }
}

/// `VK_ERROR_TOO_MANY_OBJECTS` from a chunk's `vkCreateBuffer` says what
/// happened: a device error naming the result, not the allocator's
/// `maxMemoryAllocationCount` variant (whose payload would be a limit the
/// device never reached).
#[test]
fn too_many_objects_from_a_ring_s_buffer_names_the_vulkan_result() {
    let Before {
        allocator, device, ..
    } = before(Entry::Create);
    device.fail_call(FakeCall::CreateBuffer, 1, DeviceError::TooManyObjects);
    let error = allocator.create_upload_ring(&desc(false)).unwrap_err();
    assert_eq!(error, Error::Device(DeviceError::TooManyObjects));
    assert_eq!(
        error.to_string(),
        "device error: VK_ERROR_TOO_MANY_OBJECTS (too many objects)"
    );
    assert_eq!(device.live_resources(), 0);
    finish(allocator, &device);
}

/// A growing ring whose new chunk failed keeps the chunk it had: its
/// space comes back at `collect` as before, and once the frame is done a
/// request that fits the old chunk takes it again, making no buffer.
#[test]
fn a_growing_ring_whose_new_chunk_failed_keeps_its_old_one() {
    let Before {
        allocator,
        device,
        ring,
    } = before(Entry::Grow);
    let (ring, first) = ring.unwrap();
    device.fail_call(FakeCall::BindBuffer, 1, DeviceError::OutOfDeviceMemory);
    assert_eq!(
        allocator.ring_allocate(ring, TAKEN, 16).map(|_| ()),
        Err(Error::OutOfDeviceMemory)
    );
    let fence = super::end_frame(&allocator, &device);
    device.signal_fence(fence);
    allocator.collect().unwrap();
    let buffers = device.live_resources();
    let again = allocator.ring_allocate(ring, TAKEN, 16).unwrap();
    assert_eq!(again.buffer(), first.buffer(), "the old chunk is reused");
    assert_eq!(device.live_resources(), buffers, "no buffer was made");
    allocator.destroy_upload_ring(ring).unwrap();
    // SAFETY: the fake device runs no GPU work.
    unsafe { allocator.collect_idle() };
    finish(allocator, &device);
}

/// The failure hits the call asked for: a growing ring's third chunk
/// (the second `vkCreateBuffer` from now) fails, the second is made.
#[test]
fn a_ring_chunk_failure_hits_the_chunk_it_was_asked_for() {
    let Before {
        allocator,
        device,
        ring,
    } = before(Entry::Grow);
    let (ring, _) = ring.unwrap();
    device.fail_call(FakeCall::CreateBuffer, 2, DeviceError::OutOfHostMemory);
    let second = allocator.ring_allocate(ring, TAKEN, 16).unwrap();
    let buffers = device.live_resources();
    assert_eq!(
        allocator.ring_allocate(ring, TAKEN, 16).map(|_| ()),
        Err(Error::OutOfHostMemory)
    );
    assert_eq!(device.live_resources(), buffers);
    let third = allocator.ring_allocate(ring, TAKEN, 16).unwrap();
    assert_ne!(third.buffer(), second.buffer());
    allocator.destroy_upload_ring(ring).unwrap();
    // SAFETY: the fake device runs no GPU work.
    unsafe { allocator.collect_idle() };
    finish(allocator, &device);
}
