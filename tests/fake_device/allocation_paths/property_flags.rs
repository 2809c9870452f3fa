//! `AllocationDesc::required_flags` and `preferred_flags` (VMA's
//! `requiredFlags` and `preferredFlags`): required flags narrow the memory
//! types a request may take, fallbacks included, with a typed error when
//! none is left; preferred flags reorder the types, `usage` breaking ties,
//! and the request still falls back to types without them;
//! `memory_type_for_desc` answers what `allocate` does. Every fallback walk
//! (the next types after a want of memory, the existing blocks after a
//! want of host memory, requests for existing memory only, the pass over
//! budgets) keeps to the types with the required flags.

use ash::vk;
use vk_suballoc::device::fake::FakeLayout;
use vk_suballoc::device::DeviceError;
use vk_suballoc::{Allocation, AllocationDesc, Error, PoolDesc, Request, ResourceKind, Usage};

use super::super::{allocator, buffer, finish, free, requirements, FakeAllocator};

const DL: vk::MemoryPropertyFlags = vk::MemoryPropertyFlags::DEVICE_LOCAL;
const HV: vk::MemoryPropertyFlags = vk::MemoryPropertyFlags::HOST_VISIBLE;
const HC: vk::MemoryPropertyFlags = vk::MemoryPropertyFlags::HOST_COHERENT;
const CACHED: vk::MemoryPropertyFlags = vk::MemoryPropertyFlags::HOST_CACHED;
const LAZY: vk::MemoryPropertyFlags = vk::MemoryPropertyFlags::LAZILY_ALLOCATED;
const AMD: vk::MemoryPropertyFlags = vk::MemoryPropertyFlags::DEVICE_COHERENT_AMD;

/// A 4 KiB buffer request with `desc`.
fn request(desc: AllocationDesc<'static>) -> Request<'static> {
    Request::with_desc(requirements(4096, 256), ResourceKind::Buffer, desc)
}

/// The memory type `desc` gets, or the error; frees what it got.
fn placed(allocator: &FakeAllocator, desc: AllocationDesc<'static>) -> Result<u32, Error> {
    let allocation = allocator.allocate(&request(desc))?;
    let memory_type = allocation.memory_type();
    free(allocator, allocation);
    Ok(memory_type)
}

#[test]
fn required_flags_narrow_the_types() {
    // discrete: 0 none, 1 DL, 2 HV|HC, 3 HV|HC|cached, 4 DL|HV|HC (the BAR).
    let (allocator, device) = allocator(FakeLayout::discrete());
    let with = |usage: Usage, required| AllocationDesc::new(usage).required_flags(required);
    // Staging that the host also reads: cached, where usage alone says 2.
    assert_eq!(
        placed(&allocator, AllocationDesc::new(Usage::UPLOAD)),
        Ok(2)
    );
    assert_eq!(placed(&allocator, with(Usage::UPLOAD, CACHED)), Ok(3));
    // Host writes that must land in VRAM: the BAR, never system memory.
    assert_eq!(placed(&allocator, with(Usage::UPLOAD, DL)), Ok(4));
    // GPU data the host may also write: the BAR again, and mapped.
    let gpu_visible = allocator
        .allocate(&request(with(Usage::DEVICE_LOCAL, HV)))
        .unwrap();
    assert_eq!(gpu_visible.memory_type(), 4);
    assert!(gpu_visible.mapped_ptr().is_some());
    free(&allocator, gpu_visible);
    // Flags no allowed type has: a typed error naming the types tried.
    assert_eq!(
        placed(&allocator, with(Usage::DEVICE_LOCAL, LAZY)),
        Err(Error::MissingRequiredFlags {
            memory_type_bits: 0b1_1111,
            required: LAZY
        })
    );
    let unknown = vk::MemoryPropertyFlags::from_raw(1 << 20);
    assert_eq!(
        placed(&allocator, with(Usage::UPLOAD, unknown)),
        Err(Error::MissingRequiredFlags {
            memory_type_bits: 0b1_1111,
            required: unknown
        })
    );
    // The resource's and the description's type bits apply first.
    let mut narrowed = request(with(Usage::UPLOAD, CACHED).memory_type_bits(0b1_0110));
    narrowed.requirements.memory_type_bits = 0b1_1101;
    assert_eq!(
        allocator.allocate(&narrowed).map(|a| a.memory_type()),
        Err(Error::MissingRequiredFlags {
            memory_type_bits: 0b1_0100,
            required: CACHED
        })
    );
    // Required flags the usage's types lack: the usage's error, naming
    // the types with the required flags (1, device-local, not
    // host-visible), not those without them that would suit it (2, 3).
    assert_eq!(
        placed(
            &allocator,
            with(Usage::READBACK, DL).memory_type_bits(0b1111)
        ),
        Err(Error::NoSuitableMemoryType {
            memory_type_bits: 0b10,
            usage: Usage::READBACK
        })
    );
    assert_eq!(allocator.stats().allocations(), 0);
    finish(allocator, &device);
}

/// A type that runs out of memory hands the request on only to types that
/// have the required flags: with the BAR's heap full, a request that
/// requires device-local host-visible memory fails rather than land in
/// system memory, and one that merely prefers it lands there.
#[test]
fn fallbacks_keep_required_flags_and_drop_preferred_ones() {
    // discrete: heap 0 VRAM (types 1), heap 1 system (0, 2, 3), heap 2 the
    // BAR (4).
    let (allocator, device) = allocator(FakeLayout::discrete());
    device.cap_heap(2, 0);
    let required = AllocationDesc::new(Usage::UPLOAD).required_flags(DL);
    assert_eq!(placed(&allocator, required), Err(Error::OutOfDeviceMemory));
    let preferred = AllocationDesc::new(Usage::UPLOAD).preferred_flags(DL);
    assert_eq!(placed(&allocator, preferred), Ok(2));
    // The heap has room again: the preferred type first.
    device.cap_heap(2, u64::MAX);
    assert_eq!(placed(&allocator, preferred), Ok(4));
    assert_eq!(placed(&allocator, required), Ok(4));
    finish(allocator, &device);
}

#[test]
fn preferred_flags_reorder_the_types() {
    let (allocator, device) = allocator(FakeLayout::discrete());
    let prefer = |usage: Usage, flags| AllocationDesc::new(usage).preferred_flags(flags);
    // discrete: 0 none, 1 DL, 2 HV|HC, 3 HV|HC|cached, 4 DL|HV|HC.
    assert_eq!(placed(&allocator, prefer(Usage::UPLOAD, CACHED)), Ok(3));
    // GPU-only data preferring host-visible memory: of the three types
    // with it, the usage's favourite (the BAR, device-local).
    assert_eq!(placed(&allocator, prefer(Usage::DEVICE_LOCAL, HV)), Ok(4));
    // Flags every type or no type has change nothing.
    assert_eq!(placed(&allocator, prefer(Usage::DEVICE_LOCAL, LAZY)), Ok(1));
    assert_eq!(placed(&allocator, prefer(Usage::READBACK, HV | HC)), Ok(3));
    // Preferred flags never admit a type the usage rules out: readback
    // needs host-visible memory, whatever device-local memory is preferred
    // (4 is device-local and host-visible).
    assert_eq!(placed(&allocator, prefer(Usage::READBACK, DL)), Ok(4));
    assert_eq!(
        placed(
            &allocator,
            prefer(Usage::READBACK, DL).memory_type_bits(0b11)
        ),
        Err(Error::NoSuitableMemoryType {
            memory_type_bits: 0b11,
            usage: Usage::READBACK
        })
    );
    finish(allocator, &device);
}

/// AMD's device-coherent types: required `DEVICE_COHERENT_AMD` takes one
/// (with the feature on), and preferred flags that one of them has do not
/// pull it before the ordinary types.
#[test]
fn amd_device_coherent_types_by_flags() {
    // amd: 0 DL, 1 HV|HC, 2 DL|HV|HC, 3 HV|HC|cached; 4-7 the same + AMD.
    let (allocator, device) = allocator(FakeLayout::amd());
    let breadcrumbs = AllocationDesc::new(Usage::UPLOAD | Usage::DEVICE_LOCAL).required_flags(AMD);
    assert_eq!(
        placed(&allocator, breadcrumbs),
        Err(Error::MissingRequiredFlags {
            memory_type_bits: 0b1111,
            required: AMD
        })
    );
    finish(allocator, &device);

    let (allocator, device) = allocator_amd_on();
    assert_eq!(placed(&allocator, breadcrumbs), Ok(6));
    let cached = AllocationDesc::new(Usage::UPLOAD).preferred_flags(CACHED | AMD);
    assert_eq!(placed(&allocator, cached), Ok(3));
    assert_eq!(
        placed(&allocator, cached.memory_type_bits(0b1000_0110)),
        Ok(1),
        "ordinary types before AMD's, whatever flags they lack"
    );
    assert_eq!(
        allocator.memory_type_properties(6),
        Some(DL | HV | HC | AMD)
    );
    finish(allocator, &device);
}

fn allocator_amd_on() -> (FakeAllocator, vk_suballoc::device::fake::FakeDevice) {
    allocator(FakeLayout::amd().with_amd_device_coherent_memory(true))
}

/// In a custom pool the pool's type must have the required flags; the
/// preferred ones are ignored.
#[test]
fn custom_pools_check_required_flags_only() {
    let (allocator, device) = allocator(FakeLayout::discrete());
    let pool = allocator.create_pool(&PoolDesc::new(2)).unwrap();
    let in_pool = |desc: AllocationDesc<'static>| desc.pool(pool);
    let base = AllocationDesc::new(Usage::UPLOAD);
    assert_eq!(
        placed(&allocator, in_pool(base.required_flags(CACHED))),
        Err(Error::MissingRequiredFlags {
            memory_type_bits: 1 << 2,
            required: CACHED
        })
    );
    assert_eq!(
        placed(&allocator, in_pool(base.required_flags(HV | HC))),
        Ok(2)
    );
    assert_eq!(
        placed(&allocator, in_pool(base.preferred_flags(CACHED))),
        Ok(2)
    );
    allocator.destroy_pool(pool).unwrap();
    finish(allocator, &device);
}

/// `allocate_many` refuses a batch whose request no type with its required
/// flags can take before it places any request.
#[test]
fn allocate_many_checks_required_flags_up_front() {
    let (allocator, device) = allocator(FakeLayout::mobile());
    let good = buffer(4096, 256, Usage::UPLOAD);
    let bad = request(AllocationDesc::new(Usage::READBACK).required_flags(HV | LAZY));
    assert_eq!(
        allocator.allocate_many(&[good, bad]).err(),
        Some(Error::MissingRequiredFlags {
            memory_type_bits: 0b1111,
            required: HV | LAZY
        })
    );
    assert_eq!(device.counters().allocate_calls, 0);
    finish(allocator, &device);
}

/// On every preset, for every usage and every pair of required and
/// preferred flags drawn from a set: `memory_type_for_desc` names the type
/// `allocate` takes (or gives its error), and that type is the one a model
/// picks: of the types `memory_type_for` ranks for the usage that have the
/// required flags, the first of those missing the fewest preferred ones,
/// ordinary types before AMD's device-coherent ones.
#[test]
fn memory_type_for_desc_agrees_with_allocate_and_the_model() {
    let layouts = [
        FakeLayout::discrete(),
        FakeLayout::rebar(),
        FakeLayout::integrated(),
        FakeLayout::mobile(),
        FakeLayout::amd().with_amd_device_coherent_memory(true),
        FakeLayout::apple(),
        FakeLayout::lavapipe(),
    ];
    let usages = [
        Usage::DEVICE_LOCAL,
        Usage::UPLOAD,
        Usage::UPLOAD | Usage::DEVICE_LOCAL,
        Usage::UPLOAD | Usage::ALLOW_TRANSFER_INSTEAD,
        Usage::READBACK,
        Usage::TRANSIENT,
        Usage::DEVICE_LOCAL | Usage::PREFER_HOST,
    ];
    let flag_sets = [
        vk::MemoryPropertyFlags::empty(),
        DL,
        HV,
        HC,
        CACHED,
        DL | HV,
        HV | CACHED,
        LAZY,
        AMD,
    ];
    let mut checked = 0;
    for layout in layouts {
        let name = layout.name;
        let types = layout.memory_types.len() as u32;
        let (allocator, device) = allocator(layout);
        for usage in usages {
            let ranked = usage_ranking(&allocator, usage);
            for required in flag_sets {
                for preferred in flag_sets {
                    let desc = AllocationDesc::new(usage)
                        .required_flags(required)
                        .preferred_flags(preferred);
                    let context =
                        format!("{name} {usage:?} required {required:?} preferred {preferred:?}");
                    let answer = allocator.memory_type_for_desc(!0, &desc);
                    assert_eq!(answer, placed(&allocator, desc), "{context}");
                    let flags = |t: u32| allocator.memory_type_properties(t).unwrap();
                    let expected = ranked
                        .iter()
                        .copied()
                        .filter(|&t| flags(t).contains(required))
                        .min_by_key(|&t| {
                            let missing = (preferred & !flags(t)).as_raw().count_ones();
                            (flags(t).contains(AMD), missing)
                        });
                    match expected {
                        Some(t) => assert_eq!(answer, Ok(t), "{context}"),
                        // No type has the required flags, or those that do
                        // suit not the usage (`Error::NoSuitableMemoryType`'s
                        // docs): the types then named.
                        None => {
                            let with_flags = (0..types)
                                .filter(|&t| flags(t).contains(required))
                                .fold(0, |bits, t| bits | 1 << t);
                            let error = if with_flags == 0 {
                                Error::MissingRequiredFlags {
                                    memory_type_bits: (1 << types) - 1,
                                    required,
                                }
                            } else {
                                Error::NoSuitableMemoryType {
                                    memory_type_bits: with_flags,
                                    usage,
                                }
                            };
                            assert_eq!(answer, Err(error), "{context}");
                        }
                    }
                    checked += 1;
                }
            }
        }
        finish(allocator, &device);
    }
    assert_eq!(checked, 7 * 7 * 9 * 9);
}

/// Every memory type `memory_type_for` would give `usage`, best first: the
/// first, then the first of the rest, and so on.
fn usage_ranking(allocator: &FakeAllocator, usage: Usage) -> Vec<u32> {
    let mut ranked = Vec::new();
    let mut bits = !0u32;
    while let Ok(memory_type) = allocator.memory_type_for(bits, usage) {
        ranked.push(memory_type);
        bits &= !(1 << memory_type);
    }
    ranked
}

/// An upload buffer in the BAR (4) and one in type 2, on the discrete
/// preset: each memory type then holds a block with room.
fn bar_and_system_blocks(allocator: &FakeAllocator) -> (Allocation, Allocation) {
    let bar = allocator
        .allocate(&request(
            AllocationDesc::new(Usage::UPLOAD).memory_type_bits(1 << 4),
        ))
        .unwrap();
    let system = allocator
        .allocate(&request(AllocationDesc::new(Usage::UPLOAD)))
        .unwrap();
    assert_eq!((bar.memory_type(), system.memory_type()), (4, 2));
    (bar, system)
}

/// The order the fallback tests below rely on: `UPLOAD` on the discrete
/// preset takes 2, then the cached type (3), then the BAR (4).
#[test]
fn discrete_upload_ranking_assumed_below() {
    let (allocator, device) = allocator(FakeLayout::discrete());
    // Type 3 (cached) before the BAR (4): so the tests below have a type
    // after the required one, with a block, that the fallbacks must skip.
    assert_eq!(usage_ranking(&allocator, Usage::UPLOAD), vec![2, 3, 4]);
    finish(allocator, &device);
}

/// After the driver runs out of host memory, the allocation path tries only
/// the existing blocks of the types still to come: those with the required
/// flags, in the order the preferred flags give. The BAR (4) and type 2
/// each hold a block with room.
#[test]
fn host_memory_fallback_keeps_required_and_preferred_flags() {
    let (allocator, device) = allocator(FakeLayout::discrete());
    let (bar, system) = bar_and_system_blocks(&allocator);
    let calls = device.counters().allocate_calls;

    // Cached memory required: type 3 alone, which needs a new block.
    device.fail_allocation(1, DeviceError::OutOfHostMemory);
    let required = AllocationDesc::new(Usage::UPLOAD).required_flags(CACHED);
    assert_eq!(placed(&allocator, required), Err(Error::OutOfHostMemory));
    assert_eq!(device.counters().allocate_calls, calls + 1);

    // Cached memory preferred: 3, then 2 (usage's order), then 4; 2's
    // block takes it, no new memory asked for.
    device.fail_allocation(1, DeviceError::OutOfHostMemory);
    let preferred = AllocationDesc::new(Usage::UPLOAD).preferred_flags(CACHED);
    assert_eq!(placed(&allocator, preferred), Ok(2));
    assert_eq!(device.counters().allocate_calls, calls + 2);

    // Device-local preferred: the BAR first; on its failure the walk goes
    // on to 2, whose block takes it.
    free(&allocator, bar);
    allocator.trim();
    device.fail_allocation(1, DeviceError::OutOfHostMemory);
    let preferred = AllocationDesc::new(Usage::UPLOAD).preferred_flags(DL);
    assert_eq!(placed(&allocator, preferred), Ok(2));
    free(&allocator, system);
    finish(allocator, &device);
}

/// A request for existing memory only takes the blocks of the types with
/// the required flags only, and those of types without the preferred flags
/// once the ones with them have no room. Type 2 and the BAR (4), before and
/// after the cached type (3) in the usage's order, each hold a block.
#[test]
fn existing_memory_only_keeps_required_flags() {
    let (allocator, device) = allocator(FakeLayout::discrete());
    let (bar, system) = bar_and_system_blocks(&allocator);
    let existing = AllocationDesc::new(Usage::UPLOAD).existing_memory_only();
    assert_eq!(
        placed(&allocator, existing.required_flags(CACHED)),
        Err(Error::NoRoomInExistingMemory)
    );
    assert_eq!(placed(&allocator, existing.preferred_flags(CACHED)), Ok(2));
    assert_eq!(placed(&allocator, existing.required_flags(DL)), Ok(4));
    free(&allocator, bar);
    free(&allocator, system);
    finish(allocator, &device);
}

/// A type out of device memory hands the request on only to the types
/// after it with the required flags: with system memory full, a request
/// that requires cached memory (3) fails rather than take the BAR (4,
/// after 3 in the usage's order), and one that prefers it takes the BAR.
#[test]
fn next_types_keep_required_flags() {
    // discrete: heap 1 system (types 0, 2, 3), heap 2 the BAR (4).
    let (allocator, device) = allocator(FakeLayout::discrete());
    device.cap_heap(1, 0);
    let required = AllocationDesc::new(Usage::UPLOAD).required_flags(CACHED);
    assert_eq!(placed(&allocator, required), Err(Error::OutOfDeviceMemory));
    let preferred = AllocationDesc::new(Usage::UPLOAD).preferred_flags(CACHED);
    assert_eq!(placed(&allocator, preferred), Ok(4));
    finish(allocator, &device);
}

/// A heap over budget: a request that requires cached memory (3, in the
/// system heap) passes that heap's budget (or fails within it) rather than
/// take the BAR (4, after 3 in the usage's order, its heap within budget);
/// one that prefers it takes the BAR within budget.
#[test]
fn budget_fallbacks_keep_required_flags() {
    let (allocator, device) = allocator(FakeLayout::discrete());
    // Heap 1, system memory: other processes use all of its 64 MiB budget.
    device.set_heap_budget(1, 64 << 20, 64 << 20);
    let required = AllocationDesc::new(Usage::UPLOAD).required_flags(CACHED);
    // Refused in heap 1, the cached type's, on its figures (not the
    // BAR's heap 2); the bytes are those of the last attempt in it.
    let refused = placed(&allocator, required.within_budget());
    assert!(
        matches!(
            refused,
            Err(Error::OverBudget {
                heap: 1,
                usage: 0x400_0000,
                budget: 0x400_0000,
                ..
            })
        ),
        "{refused:?}"
    );
    assert_eq!(placed(&allocator, required), Ok(3));
    let preferred = AllocationDesc::new(Usage::UPLOAD).preferred_flags(CACHED);
    assert_eq!(placed(&allocator, preferred), Ok(4));
    assert_eq!(placed(&allocator, preferred.within_budget()), Ok(4));
    finish(allocator, &device);
}

/// A heap of 0 bytes (a type no request fits): `memory_type_for` and
/// `memory_type_for_desc` skip its types, as `allocate` does.
#[test]
fn memory_type_queries_skip_types_of_empty_heaps() {
    // discrete: heap 1 holds types 0, 2 and 3.
    let (allocator, device) = allocator(FakeLayout::discrete().with_heap_size(1, 0));
    let desc = AllocationDesc::new(Usage::UPLOAD);
    assert_eq!(placed(&allocator, desc), Ok(4));
    assert_eq!(allocator.memory_type_for(!0, Usage::UPLOAD), Ok(4));
    assert_eq!(allocator.memory_type_for_desc(!0, &desc), Ok(4));
    let preferred = desc.preferred_flags(CACHED);
    assert_eq!(allocator.memory_type_for_desc(!0, &preferred), Ok(4));
    finish(allocator, &device);
}

/// Flags that only types no request ranks have: protected types (with
/// their feature on; without it, no usable type has the flag) and lazily
/// allocated ones for a usage without `TRANSIENT` get the usage's error;
/// `DEVICE_UNCACHED_AMD`, which the allocator is not told of, no type has
/// (`AllocationDesc::required_flags` says so).
#[test]
fn flags_of_types_no_request_ranks() {
    use vk_suballoc::device::{MemoryPropertyFlags as Props, MemoryType};
    let mut layout = FakeLayout::discrete();
    layout.memory_types.push(MemoryType {
        heap: 0,
        props: Props::DEVICE_LOCAL | Props::PROTECTED,
    });
    let protected = vk::MemoryPropertyFlags::PROTECTED;
    let desc = AllocationDesc::new(Usage::DEVICE_LOCAL).required_flags(protected);
    let (plain, device) = allocator(layout.clone());
    assert_eq!(
        placed(&plain, desc),
        Err(Error::MissingRequiredFlags {
            memory_type_bits: 0b1_1111,
            required: protected
        })
    );
    finish(plain, &device);
    let (with_protected, device) = allocator(layout.with_protected_memory(true));
    let unsuitable = Err(Error::NoSuitableMemoryType {
        memory_type_bits: 1 << 5,
        usage: Usage::DEVICE_LOCAL,
    });
    assert_eq!(placed(&with_protected, desc), unsuitable);
    assert_eq!(with_protected.memory_type_for_desc(!0, &desc), unsuitable);
    finish(with_protected, &device);

    // mobile: 3 DL|LAZY, the only lazily allocated type.
    let (allocator, device) = allocator(FakeLayout::mobile());
    let lazy = AllocationDesc::new(Usage::DEVICE_LOCAL).required_flags(LAZY);
    let unsuitable = Err(Error::NoSuitableMemoryType {
        memory_type_bits: 1 << 3,
        usage: Usage::DEVICE_LOCAL,
    });
    assert_eq!(placed(&allocator, lazy), unsuitable);
    let transient = AllocationDesc::new(Usage::TRANSIENT).required_flags(LAZY);
    assert_eq!(allocator.memory_type_for_desc(!0, &transient), Ok(3));
    finish(allocator, &device);

    let (allocator, device) = allocator_amd_on();
    let uncached = vk::MemoryPropertyFlags::DEVICE_UNCACHED_AMD;
    let breadcrumbs = AllocationDesc::new(Usage::UPLOAD).required_flags(AMD | uncached);
    // Every one of the layout's 8 types may be used (the feature is on);
    // none has the flag the allocator is not told of.
    assert_eq!(
        placed(&allocator, breadcrumbs),
        Err(Error::MissingRequiredFlags {
            memory_type_bits: 0xff,
            required: AMD | uncached,
        })
    );
    finish(allocator, &device);
}
