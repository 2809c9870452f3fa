//! Extreme arguments the other bad-input tests do not try: `min_alignment`
//! at 2^63 and past it, sizes near `u64::MAX` with a debug margin on a
//! device whose heaps admit them, custom pools of odd descriptions and
//! their requests, defragmentation movables and limits at their ends,
//! aliasing offsets, names with NULs, masks of no type and of every
//! type, and a memory type of a heap the device does not report. Each
//! gets a typed error (or a correct result), no panic
//! (these run in debug, where arithmetic overflow panics), and leaves the
//! allocator as it was.

use ash::vk;
use vk_suballoc::device::fake::FakeLayout;
use vk_suballoc::{
    AllocationDesc, Config, DedicatedPolicy, DefragmentationLimits, Error, Movable, PoolDesc,
    Request, ResourceKind, Usage,
};

use super::{allocator, allocator_with, buffer, finish, free, requirements};

const GIB: u64 = 1 << 30;

/// A layout whose heaps and `maxMemoryAllocationSize` are `u64::MAX`: no
/// size is refused up front, so every size reaches the placement's sums.
fn boundless() -> FakeLayout {
    let mut layout = FakeLayout::discrete().with_heap_sizes(u64::MAX);
    layout.max_memory_allocation_size = u64::MAX;
    layout
}

fn with_desc<'a>(size: u64, alignment: u64, desc: AllocationDesc<'a>) -> Request<'a> {
    Request::with_desc(requirements(size, alignment), ResourceKind::Buffer, desc)
}

/// `min_alignment` at 2^63 and at values that are no power of two, on
/// every path (blocks, dedicated memory, existing memory only, runs'
/// sizes): a typed error or an allocation at a multiple of it.
#[test]
fn min_alignment_at_its_extremes() {
    let (allocator, device) = allocator(FakeLayout::discrete());
    let before = allocator.stats();
    for min in [3, u64::MAX, (1 << 63) + 1, 1 << 62 | 1] {
        for usage in [Usage::DEVICE_LOCAL, Usage::UPLOAD, Usage::READBACK] {
            let desc = AllocationDesc::new(usage).min_alignment(min);
            assert_eq!(
                allocator
                    .allocate(&with_desc(64, 1, desc))
                    .map(|a| a.size()),
                Err(Error::AlignmentNotPowerOfTwo(min)),
            );
        }
    }
    assert_eq!(allocator.stats(), before);
    for min in [1 << 63, 1 << 62, 1 << 40] {
        for usage in [Usage::DEVICE_LOCAL, Usage::UPLOAD, Usage::READBACK] {
            for policy in [
                DedicatedPolicy::Auto,
                DedicatedPolicy::Always,
                DedicatedPolicy::Never,
            ] {
                let desc = AllocationDesc::new(usage)
                    .min_alignment(min)
                    .dedicated(policy);
                match allocator.allocate(&with_desc(64, 1, desc)) {
                    Ok(a) => {
                        assert_eq!(a.offset() % min, 0, "{min} {usage:?} {policy:?}");
                        free(&allocator, a);
                    }
                    Err(error) => assert!(
                        matches!(error, Error::OutOfDeviceMemory),
                        "{min} {usage:?} {policy:?}: {error:?}"
                    ),
                }
                let existing = desc.existing_memory_only();
                let result = allocator.allocate(&with_desc(64, 1, existing));
                if let Ok(a) = result {
                    assert_eq!(a.offset() % min, 0);
                    free(&allocator, a);
                } else {
                    assert_eq!(result.err(), Some(Error::NoRoomInExistingMemory));
                }
            }
        }
    }
    allocator.trim();
    assert_eq!(allocator.stats().allocations(), 0);
    finish(allocator, &device);
}

/// Sizes near `u64::MAX` on heaps that admit them, with the largest debug
/// margin, corruption detection, a `min_alignment`, every resource kind
/// and dedicated policy: the size plus the margin, rounded up, must not
/// wrap.
#[test]
fn sizes_near_u64_max_with_a_margin() {
    let config = Config {
        debug_margin: 65536,
        detect_corruption: true,
        ..Config::default()
    };
    let (allocator, device) = allocator_with(boundless(), config);
    // Blocks (and runs) exist, so a wrapped size would find room.
    let small = allocator
        .allocate(&buffer(16, 16, Usage::DEVICE_LOCAL))
        .unwrap();
    let upload = allocator.allocate(&buffer(16, 16, Usage::UPLOAD)).unwrap();
    let before = allocator.stats();
    for size in [
        u64::MAX,
        u64::MAX - 1,
        u64::MAX - 65535,
        1 << 63,
        (1 << 63) + 1,
    ] {
        for align in [1, 256, 1 << 63] {
            for min in [0, 1 << 63] {
                for kind in [
                    ResourceKind::Buffer,
                    ResourceKind::LinearImage,
                    ResourceKind::OptimalImage,
                ] {
                    for usage in [Usage::DEVICE_LOCAL, Usage::UPLOAD] {
                        let desc = AllocationDesc::new(usage)
                            .min_alignment(min)
                            .dedicated(DedicatedPolicy::Never);
                        let request = Request::with_desc(requirements(size, align), kind, desc);
                        let ctx = format!("{size} {align} {min} {kind:?} {usage:?}");
                        let result = allocator.allocate(&request).map(|a| a.size());
                        assert_eq!(result, Err(Error::OutOfDeviceMemory), "{ctx}");
                        let existing = Request::with_desc(
                            requirements(size, align),
                            kind,
                            desc.existing_memory_only(),
                        );
                        let result = allocator.allocate(&existing).map(|a| a.size());
                        assert_eq!(result, Err(Error::NoRoomInExistingMemory), "{ctx}");
                    }
                }
            }
        }
    }
    assert_eq!(allocator.stats(), before);
    free(&allocator, small);
    free(&allocator, upload);
    finish(allocator, &device);
}

/// Pool descriptions at their extremes: a memory type past the device's
/// or past 32, block sizes of 1 and past every heap, `max_blocks` of 0,
/// NaN and infinite priorities, names with NULs and markup.
#[test]
fn pool_descriptions_at_their_extremes() {
    let (allocator, device) = allocator(FakeLayout::discrete());
    // Each refused with the text of the rule it breaks (`create_pool`'s
    // checks), not merely some `InvalidConfig`.
    const TYPE: &str = "PoolDesc::memory_type is not a memory type this allocator uses";
    const BLOCK_SIZE: &str = "PoolDesc::block_size exceeds the heap or maxMemoryAllocationSize";
    const MAX_BLOCKS: &str = "PoolDesc::max_blocks must be at least 1 and at least min_blocks";
    for memory_type in [5, 31, 32, 33, 63, 64, u32::MAX] {
        assert_eq!(
            allocator.create_pool(&PoolDesc::new(memory_type)).err(),
            Some(Error::InvalidConfig(TYPE)),
            "{memory_type}"
        );
    }
    // Type 1's heap is 8 GiB, the device's maxMemoryAllocationSize 4 GiB.
    for (text, desc) in [
        (BLOCK_SIZE, PoolDesc::new(1).block_size(u64::MAX)),
        (BLOCK_SIZE, PoolDesc::new(1).block_size(16 * GIB + 1)),
        (BLOCK_SIZE, PoolDesc::new(1).block_size(4 * GIB + 1)),
        (MAX_BLOCKS, PoolDesc::new(1).max_blocks(0)),
        (MAX_BLOCKS, PoolDesc::new(1).min_blocks(2).max_blocks(1)),
        (
            MAX_BLOCKS,
            PoolDesc::new(1)
                .min_blocks(u32::MAX)
                .max_blocks(u32::MAX - 1),
        ),
    ] {
        assert_eq!(
            allocator.create_pool(&desc).err(),
            Some(Error::InvalidConfig(text)),
            "{desc:?}"
        );
    }
    assert_eq!(device.counters().allocate_calls, 0);
    // More blocks than the heap holds: the blocks made are given back.
    // Type 4's heap holds 256 MiB, four blocks, far below the device's
    // 4096 memory objects: the fifth is out of device memory.
    let too_many = PoolDesc::new(4).block_size(64 << 20).min_blocks(u32::MAX);
    assert_eq!(
        allocator.create_pool(&too_many).err(),
        Some(Error::OutOfDeviceMemory)
    );
    assert_eq!(allocator.stats().memory_objects, 0);

    let name = "pool \0 <&\"'>\u{1}\u{fffe}";
    let long = "p".repeat(1 << 20);
    for desc in [
        PoolDesc::new(1).block_size(1).min_blocks(1),
        PoolDesc::new(1).block_size(4 * GIB).max_blocks(1),
        PoolDesc::new(2).priority(f32::NAN).name(name).min_blocks(1),
        PoolDesc::new(2).priority(f32::INFINITY).name(&long),
        PoolDesc::new(3)
            .priority(f32::NEG_INFINITY)
            .max_blocks(u32::MAX),
    ] {
        let pool = allocator.create_pool(&desc).unwrap();
        let in_pool = |size, alignment, min| {
            let desc = AllocationDesc::new(Usage::DEVICE_LOCAL)
                .pool(pool)
                .min_alignment(min)
                .name(name);
            with_desc(size, alignment, desc)
        };
        for (size, alignment, min) in [
            (u64::MAX, 1, 0),
            (u64::MAX, 1 << 63, 1 << 63),
            ((1 << 63) + 1, 1, 0),
            (4 * GIB + 1, 1, 0),
            (1, 1 << 63, 0),
            (1, 1, 1 << 63),
            (2, 1, 0),
        ] {
            match allocator.allocate(&in_pool(size, alignment, min)) {
                Ok(a) => {
                    assert_eq!(a.offset() % alignment.max(min), 0, "{desc:?}");
                    assert!(a.size() == size);
                    free(&allocator, a);
                }
                Err(error) => assert!(
                    matches!(
                        error,
                        Error::TooLargeForPool { .. }
                            | Error::SizeExceedsHeaps { .. }
                            | Error::SizeExceedsMaxAllocation { .. }
                            | Error::OutOfDeviceMemory
                            | Error::PoolFull { .. }
                    ),
                    "{desc:?} {size} {alignment} {min}: {error:?}"
                ),
            }
        }
        let a = allocator.allocate(&in_pool(1, 1, 0)).unwrap();
        assert!(allocator.stats_json(true).contains("pool \\u0000 <&"));
        assert!(allocator
            .memory_map_svg()
            .contains("pool \u{fffd} &lt;&amp;"));
        free(&allocator, a);
        assert_eq!(allocator.destroy_pool(pool), Ok(()));
        assert_eq!(allocator.destroy_pool(pool), Err(Error::StalePool));
        assert_eq!(
            allocator.pool_stats(&pool).map(|s| s.blocks),
            Err(Error::StalePool)
        );
    }
    assert_eq!(allocator.stats().memory_objects, 0);
    finish(allocator, &device);
}

/// Names with NULs, markup, control characters and a megabyte of text, on
/// blocks and dedicated memory: kept, renamed, and written escaped into
/// the JSON dump and the SVG map.
#[test]
fn odd_names_reach_the_reports_escaped() {
    let (allocator, device) = allocator(FakeLayout::discrete());
    let long = "n".repeat(1 << 20);
    let names = [
        "a\0b",
        "</text><script>\"'&",
        "\u{1}\u{1f}\u{7f}\u{fffe}\u{ffff}",
        "",
        &long,
    ];
    let mut live = Vec::new();
    for name in names {
        for policy in [DedicatedPolicy::Always, DedicatedPolicy::Never] {
            let desc = AllocationDesc::new(Usage::DEVICE_LOCAL)
                .name(name)
                .dedicated(policy);
            let a = allocator.allocate(&with_desc(4096, 256, desc)).unwrap();
            assert_eq!(allocator.set_name(&a, Some(name)), Ok(()));
            live.push(a);
        }
    }
    let json = allocator.stats_json(true);
    let parsed: serde_json::Value = serde_json::from_str(&json).expect("valid JSON");
    assert!(parsed.is_object());
    for needle in ["a\\u0000b", "\\u0001\\u001f\u{7f}", "<script>\\\"'&"] {
        assert!(json.contains(needle), "{needle}");
    }
    let svg = allocator.memory_map_svg();
    assert!(!svg.contains('\0') && !svg.contains('\u{1}') && !svg.contains("<script>"));
    for a in &live {
        assert_eq!(allocator.set_name(a, None), Ok(()));
    }
    for a in live {
        free(&allocator, a);
    }
    finish(allocator, &device);
}

/// Copies at offsets near `u64::MAX`, of nothing and of bytes: refused as
/// out of bounds, nothing written; at the allocation's end, an empty copy
/// is fine.
#[test]
fn copies_at_extreme_offsets() {
    let (allocator, device) = allocator(FakeLayout::mobile());
    let mut a = allocator
        .allocate(&buffer(1000, 1, Usage::READBACK))
        .unwrap();
    let out = |start, end| Error::RangeOutOfBounds {
        start,
        end,
        size: 1000,
    };
    for (offset, len, expected) in [
        (u64::MAX, 0, Err(out(u64::MAX, u64::MAX))),
        (u64::MAX, 1, Err(out(u64::MAX, u64::MAX))),
        (u64::MAX - 1, 2, Err(out(u64::MAX - 1, u64::MAX))),
        (1 << 63, 1, Err(out(1 << 63, (1 << 63) + 1))),
        (1001, 0, Err(out(1001, 1001))),
        (1000, 1, Err(out(1000, 1001))),
        (1000, 0, Ok(())),
        (999, 1, Ok(())),
    ] {
        let bytes = vec![9u8; len];
        assert_eq!(
            allocator.copy_to_allocation(&mut a, offset, &bytes),
            expected,
            "{offset} {len}"
        );
        let mut back = vec![1u8; len];
        assert_eq!(
            allocator.copy_from_allocation(&mut a, offset, &mut back),
            expected
        );
        if expected.is_err() {
            assert!(back.iter().all(|&b| b == 1));
        }
    }
    let flushes = [(&a, 0..1000), (&a, u64::MAX..u64::MAX)];
    assert_eq!(
        allocator.flush_allocations(flushes),
        Err(out(u64::MAX, u64::MAX))
    );
    free(&allocator, a);
    finish(allocator, &device);
}

/// Aliasing offsets and requirements at their extremes.
#[test]
fn alias_checks_at_extreme_offsets() {
    let (allocator, device) = allocator(FakeLayout::discrete());
    let a = allocator
        .allocate(&buffer(4096, 256, Usage::DEVICE_LOCAL))
        .unwrap();
    let check = |offset, size, alignment, bits| {
        let requirements = vk::MemoryRequirements {
            size,
            alignment,
            memory_type_bits: bits,
        };
        allocator.check_alias(&a, offset, &requirements, ResourceKind::Buffer)
    };
    let out = |start, end| {
        Err(Error::RangeOutOfBounds {
            start,
            end,
            size: 4096,
        })
    };
    assert_eq!(check(u64::MAX, 1, 1, !0), out(u64::MAX, u64::MAX));
    assert_eq!(check(1, u64::MAX, 1, !0), out(1, u64::MAX));
    assert_eq!(check(0, u64::MAX, 1, !0), out(0, u64::MAX));
    assert_eq!(check(4096, 1, 1, !0), out(4096, 4097));
    assert_eq!(check(0, 0, 1, !0), Err(Error::ZeroSize));
    assert_eq!(check(0, 1, 0, !0), Err(Error::AlignmentNotPowerOfTwo(0)));
    assert_eq!(
        check(0, 1, 1, 0),
        Err(Error::CannotAlias(super::aliasing::OTHER_TYPES))
    );
    // Only a bound offset of 0 in the memory object is a multiple of 2^63.
    let at_zero = if a.offset() == 0 {
        Ok(())
    } else {
        Err(Error::CannotAlias(super::aliasing::MISALIGNED))
    };
    assert_eq!(check(0, 1, 1 << 63, !0), at_zero);
    assert_eq!(
        check(256, 1, 1 << 63, !0),
        Err(Error::CannotAlias(super::aliasing::MISALIGNED))
    );
    assert_eq!(check(4095, 1, 1, !0), Ok(()));
    free(&allocator, a);
    finish(allocator, &device);
}

/// Defragmentation limits of 0 and of their largest; movables listed
/// twice, with requirements past every heap or aligned to 2^63, or whose
/// `memoryTypeBits` exclude their type.
#[test]
fn defragmentation_at_its_extremes() {
    let (allocator, device) = allocator_with(FakeLayout::discrete(), super::without_runs());
    // Two blocks with little in them: a plan may empty one into the other.
    let mut live = Vec::new();
    for _ in 0..2 {
        let big = allocator
            .allocate(&buffer(20 << 20, 256, Usage::DEVICE_LOCAL))
            .unwrap();
        live.push(
            allocator
                .allocate(&buffer(4096, 256, Usage::DEVICE_LOCAL))
                .unwrap(),
        );
        free(&allocator, big);
        // Fill the rest so the next allocation opens a new block.
        let fill = allocator.allocate(&buffer(24 << 20, 256, Usage::DEVICE_LOCAL));
        if let Ok(fill) = fill {
            live.push(fill);
        }
    }
    let movable = |a, size, alignment, bits| {
        Movable::new(
            a,
            vk::MemoryRequirements {
                size,
                alignment,
                memory_type_bits: bits,
            },
            ResourceKind::Buffer,
        )
    };
    let before = allocator.stats();
    let zero = DefragmentationLimits::default()
        .max_moves(0)
        .max_bytes(0)
        .max_used_percent(0)
        .split_blocks(true)
        .compact_blocks(true);
    let max = DefragmentationLimits::default()
        .max_moves(usize::MAX)
        .max_bytes(u64::MAX)
        .max_used_percent(u8::MAX)
        .split_blocks(true)
        .compact_blocks(true);
    for limits in [zero, max] {
        for (size, alignment, bits) in [
            (u64::MAX, 1, !0),
            (1 << 63, 1 << 63, !0),
            (4096, 1 << 63, !0),
            (4096, 256, 0),
            (4096, 256, !0),
        ] {
            let movables: Vec<_> = live
                .iter()
                .chain(live.iter())
                .map(|a| movable(a, size, alignment, bits))
                .collect();
            let plan = allocator
                .plan_defragmentation(&movables, &limits)
                .unwrap_or_else(|e| panic!("{limits:?} {size} {alignment}: {e:?}"));
            let mut moved = std::collections::HashSet::new();
            for planned in plan.moves {
                assert!(
                    moved.insert(planned.movable % live.len()),
                    "{limits:?}: one allocation moved twice"
                );
                assert_eq!(planned.destination.offset() % alignment, 0);
                allocator.give_up_move(planned).unwrap();
            }
        }
    }
    let fence = device.create_fence();
    // SAFETY: a fake fence, signalled below.
    unsafe { allocator.end_frame(fence) }.unwrap();
    device.signal_fence(fence);
    allocator.collect().unwrap();
    assert_eq!(allocator.stats().allocations(), before.allocations());
    for (bad, error) in [
        ((0, 1), Error::ZeroSize),
        ((1, 0), Error::AlignmentNotPowerOfTwo(0)),
        ((1, 3), Error::AlignmentNotPowerOfTwo(3)),
    ] {
        let movables = [movable(&live[0], bad.0, bad.1, !0)];
        assert_eq!(
            allocator
                .plan_defragmentation(&movables, &DefragmentationLimits::default())
                .map(|plan| plan.moves.len()),
            Err(error),
            "{bad:?}"
        );
    }
    for a in live {
        free(&allocator, a);
    }
    finish(allocator, &device);
}

/// `check_corruption` and `memory_type_for` over every mask, empty and
/// full, and usages with every bit set.
#[test]
fn masks_at_their_extremes() {
    let (allocator, device) = allocator(FakeLayout::discrete());
    for bits in [0, 1 << 31, u32::MAX] {
        assert_eq!(
            allocator.check_corruption(bits).map(|r| r.checked),
            Err(Error::CorruptionDetectionOff {
                memory_type_bits: bits
            })
        );
    }
    assert_eq!(
        allocator.memory_type_for(0, Usage::UPLOAD),
        Err(Error::NoMemoryTypeBits(0))
    );
    assert_eq!(
        allocator.memory_type_for(1 << 31, Usage::UPLOAD),
        Err(Error::NoMemoryTypeBits(1 << 31))
    );
    let every = [
        Usage::DEVICE_LOCAL,
        Usage::UPLOAD,
        Usage::READBACK,
        Usage::TRANSIENT,
        Usage::DEVICE_ADDRESS,
        Usage::ALLOW_TRANSFER_INSTEAD,
        Usage::PREFER_HOST,
    ]
    .into_iter()
    .fold(Usage::default(), Usage::union);
    for usage in [Usage::default(), every, Usage::TRANSIENT] {
        let _ = allocator.memory_type_for(u32::MAX, usage);
        let _ = allocator
            .allocate(&buffer(64, 1, usage))
            .map(|a| free(&allocator, a));
    }
    let excluded = AllocationDesc {
        excluded_memory_types: u32::MAX,
        ..AllocationDesc::new(Usage::DEVICE_LOCAL)
    };
    assert_eq!(
        allocator
            .allocate(&with_desc(64, 1, excluded))
            .map(|a| a.size()),
        Err(Error::NoMemoryTypeBits(0))
    );
    finish(allocator, &device);
}

/// A backend whose memory type names a heap it does not report (Vulkan
/// never does, but a `MemoryDevice` implementation can): the type counts
/// as one of an empty heap, which serves no request, and nothing panics.
#[test]
fn a_memory_type_of_a_missing_heap_serves_nothing() {
    for heap in [3, 15, 16, u32::MAX] {
        let mut layout = FakeLayout::discrete();
        layout.memory_types[2].heap = heap;
        let (allocator, device) = allocator(layout);
        // The type's heap holds nothing: larger than every heap it may use.
        let no_heap = Error::SizeExceedsHeaps {
            size: 64,
            largest_heap: 0,
        };
        let only = vk::MemoryRequirements {
            size: 64,
            alignment: 1,
            memory_type_bits: 1 << 2,
        };
        for usage in [Usage::UPLOAD, Usage::DEVICE_LOCAL] {
            let request = Request::new(only, usage, ResourceKind::Buffer);
            assert_eq!(
                allocator.allocate(&request).map(|a| a.size()),
                Err(no_heap),
                "{heap}"
            );
            let _ = allocator.memory_type_for(1 << 2, usage);
        }
        if let Ok(pool) = allocator.create_pool(&PoolDesc::new(2)) {
            let desc = AllocationDesc::new(Usage::UPLOAD).pool(pool);
            assert_eq!(
                allocator
                    .allocate(&with_desc(64, 1, desc))
                    .map(|a| a.size()),
                Err(no_heap),
                "{heap}"
            );
            assert_eq!(allocator.destroy_pool(pool), Ok(()));
        }
        // A block of the pool's would be memory of that type: there is
        // none (before, making it indexed the heaps past their end).
        assert_eq!(
            allocator.create_pool(&PoolDesc::new(2).min_blocks(1)),
            Err(Error::OutOfDeviceMemory),
            "{heap}"
        );
        let a = allocator.allocate(&buffer(64, 1, Usage::UPLOAD)).unwrap();
        assert_ne!(a.memory_type(), 2);
        let _ = (allocator.stats(), allocator.budgets());
        let _ = (allocator.stats_json(true), allocator.memory_map_svg());
        free(&allocator, a);
        finish(allocator, &device);
    }
}
