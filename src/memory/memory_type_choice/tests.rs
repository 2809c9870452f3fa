//! Unit tests of the ranking, on the fake device's presets: each preset's
//! choices for the usages an engine asks for, AMD's demoted types ranked
//! last, the filters (memory type bits, heap sizes), every usage on every
//! preset ranked as an engine expects, an empty usage ranked as
//! `DEVICE_LOCAL`, the flags that do not apply changing nothing, and the
//! ranking table matching the ranking per request. They are apart from
//! `memory_type_choice.rs` so that the ranking reads without its tests.

use super::*;
use crate::device::fake::FakeLayout;

/// Every usage flag; their 128 combinations are every usage there is.
const USAGE_FLAGS: [Usage; 7] = [
    Usage::DEVICE_LOCAL,
    Usage::UPLOAD,
    Usage::READBACK,
    Usage::TRANSIENT,
    Usage::DEVICE_ADDRESS,
    Usage::ALLOW_TRANSFER_INSTEAD,
    Usage::PREFER_HOST,
];

fn rank(layout: &FakeLayout, usage: Usage) -> Vec<u8> {
    rank_memory_types(&layout.memory_types, &layout.memory_heaps, !0, usage, 1, 0)
        .as_slice()
        .to_vec()
}

#[test]
fn discrete_gpu_choices() {
    let gpu = FakeLayout::discrete();
    // 0 none, 1 DL, 2 HV|HC, 3 HV|HC|HCached, 4 DL|HV|HC (BAR)
    assert_eq!(rank(&gpu, Usage::DEVICE_LOCAL)[0], 1);
    assert_eq!(rank(&gpu, Usage::DEVICE_LOCAL).last(), Some(&3));
    assert_eq!(rank(&gpu, Usage::UPLOAD), vec![2, 3, 4]);
    assert_eq!(
        rank(&gpu, Usage::UPLOAD | Usage::DEVICE_LOCAL),
        vec![4, 2, 3]
    );
    assert_eq!(rank(&gpu, Usage::READBACK), vec![3, 2, 4]);
    // The BAR, then VRAM (unmapped), then system memory.
    let optional = Usage::UPLOAD | Usage::ALLOW_TRANSFER_INSTEAD;
    assert_eq!(rank(&gpu, optional), vec![4, 1, 2, 3, 0]);
    assert_eq!(
        rank(&gpu, optional | Usage::DEVICE_LOCAL),
        vec![4, 1, 2, 3, 0]
    );
    // Host reads still need host-visible memory.
    assert_eq!(rank(&gpu, optional | Usage::READBACK), vec![3, 2, 4]);
    // Out of VRAM: system memory (the unmappable type first, as the
    // driver lists it; uncached before cached), then VRAM.
    let parked = Usage::PREFER_HOST;
    assert_eq!(rank(&gpu, parked), vec![0, 2, 3, 1, 4]);
    assert_eq!(
        rank(&gpu, parked | Usage::DEVICE_LOCAL),
        vec![0, 2, 3, 1, 4]
    );
    // Host writes: staging memory, also where `DEVICE_LOCAL` asked for
    // the BAR; with a transfer allowed, then memory not mapped,
    // outside VRAM first.
    assert_eq!(rank(&gpu, parked | Usage::UPLOAD), vec![2, 3, 4]);
    assert_eq!(
        rank(&gpu, parked | Usage::UPLOAD | Usage::DEVICE_LOCAL),
        vec![2, 3, 4]
    );
    assert_eq!(rank(&gpu, parked | optional), vec![2, 3, 4, 0, 1]);
    assert_eq!(rank(&gpu, parked | Usage::READBACK), vec![3, 2, 4]);
}

#[test]
fn integrated_gpu_choices() {
    let gpu = FakeLayout::integrated();
    // 0 DL, 1 DL|HV|HC, 2 DL|HV|HC|HCached
    assert_eq!(rank(&gpu, Usage::DEVICE_LOCAL), vec![0, 1, 2]);
    assert_eq!(rank(&gpu, Usage::UPLOAD), vec![1, 2]);
    assert_eq!(rank(&gpu, Usage::READBACK), vec![2, 1]);
    // Device-local host-visible memory: written directly.
    let optional = Usage::UPLOAD | Usage::ALLOW_TRANSFER_INSTEAD;
    assert_eq!(rank(&gpu, optional), vec![1, 2, 0]);
    // All memory is device-local: `PREFER_HOST` only puts the cached
    // type last.
    assert_eq!(rank(&gpu, Usage::PREFER_HOST), vec![0, 1, 2]);
    assert_eq!(rank(&gpu, optional | Usage::PREFER_HOST), vec![1, 2, 0]);
}

#[test]
fn mobile_gpu_choices() {
    let gpu = FakeLayout::mobile();
    // 0 DL, 1 DL|HV|HC, 2 DL|HV|HCached (non-coherent), 3 DL|LAZY
    assert_eq!(rank(&gpu, Usage::DEVICE_LOCAL), vec![0, 1, 2]);
    assert_eq!(rank(&gpu, Usage::READBACK), vec![2, 1]);
    assert_eq!(rank(&gpu, Usage::UPLOAD), vec![1, 2]);
    assert_eq!(rank(&gpu, Usage::TRANSIENT)[0], 3);
}

/// Intel Arc without resizable BAR: the only system-memory type is
/// cached, the only uncached host-visible one the 256 MiB BAR.
#[test]
fn intel_arc_small_bar_choices() {
    let gpu = FakeLayout::intel_arc();
    // 0 DL, 1 HV|HC|HCached (system), 2 DL|HV|HC (BAR)
    assert_eq!(rank(&gpu, Usage::DEVICE_LOCAL), vec![0, 2, 1]);
    // Staging stays out of the BAR: cached system memory, which VMA
    // picks too (a tie there, broken by the index).
    assert_eq!(rank(&gpu, Usage::UPLOAD), vec![1, 2]);
    assert_eq!(rank(&gpu, Usage::UPLOAD | Usage::DEVICE_LOCAL), vec![2, 1]);
    assert_eq!(rank(&gpu, Usage::READBACK), vec![1, 2]);
    let optional = Usage::UPLOAD | Usage::ALLOW_TRANSFER_INSTEAD;
    assert_eq!(rank(&gpu, optional), vec![2, 0, 1]);
}

/// MoltenVK on Apple silicon lists managed storage (cached, not
/// coherent) before shared storage (cached and coherent). VMA's flag
/// counts tie them for uploads the GPU reads and prefer neither for
/// readback, so it takes the first, which needs flushes and
/// invalidations; the coherent one goes first here.
#[test]
fn apple_choices() {
    let gpu = FakeLayout::apple();
    // 0 DL, 1 DL|HV|HCached (non-coherent), 2 DL|HV|HC|HCached
    assert_eq!(rank(&gpu, Usage::DEVICE_LOCAL), vec![0, 1, 2]);
    assert_eq!(rank(&gpu, Usage::UPLOAD), vec![2, 1]);
    assert_eq!(rank(&gpu, Usage::UPLOAD | Usage::DEVICE_LOCAL), vec![2, 1]);
    assert_eq!(rank(&gpu, Usage::READBACK), vec![2, 1]);
    let optional = Usage::UPLOAD | Usage::ALLOW_TRANSFER_INSTEAD;
    assert_eq!(rank(&gpu, optional), vec![2, 1, 0]);
}

/// Mali has no device-local type the host cannot map: GPU-only data
/// takes the uncached one, and the lazily allocated type is for
/// transient attachments only.
#[test]
fn mali_choices() {
    let gpu = FakeLayout::mali();
    // 0 DL|HV|HC, 1 DL|HV|HC|HCached, 2 DL|LAZY
    assert_eq!(rank(&gpu, Usage::DEVICE_LOCAL), vec![0, 1]);
    assert_eq!(rank(&gpu, Usage::UPLOAD), vec![0, 1]);
    assert_eq!(rank(&gpu, Usage::READBACK), vec![1, 0]);
    assert_eq!(rank(&gpu, Usage::TRANSIENT), vec![2, 0, 1]);
}

/// AMD's device-coherent duplicates (types 4–7) rank after every
/// normal type, whatever the usage, when their feature is enabled; in
/// the driver's order among themselves by cost.
#[test]
fn demoted_types_rank_last() {
    let gpu = FakeLayout::amd();
    let ranked = |usage| {
        rank_memory_types(
            &gpu.memory_types,
            &gpu.memory_heaps,
            !0,
            usage,
            1,
            0b1111_0000,
        )
        .as_slice()
        .to_vec()
    };
    // 0 DL, 1 HV|HC, 2 DL|HV|HC (BAR), 3 HV|HC|HCached, 4..7 the same, AMD.
    assert_eq!(ranked(Usage::DEVICE_LOCAL), vec![0, 2, 1, 3, 4, 6, 5, 7]);
    assert_eq!(ranked(Usage::UPLOAD), vec![1, 3, 2, 5, 7, 6]);
    assert_eq!(ranked(Usage::READBACK), vec![3, 1, 2, 7, 5, 6]);
    // Not demoted, the duplicates interleave with the normal types.
    assert_eq!(
        rank(&gpu, Usage::DEVICE_LOCAL),
        vec![0, 4, 2, 6, 1, 5, 3, 7]
    );
}

#[test]
fn memory_type_bits_and_heap_sizes_filter() {
    let gpu = FakeLayout::discrete();
    let only_host = rank_memory_types(
        &gpu.memory_types,
        &gpu.memory_heaps,
        0b01100,
        Usage::DEVICE_LOCAL,
        1,
        0,
    );
    assert_eq!(only_host.as_slice(), &[2, 3]);
    // 512 MiB does not fit the 256 MiB BAR heap.
    let big = rank_memory_types(
        &gpu.memory_types,
        &gpu.memory_heaps,
        !0,
        Usage::UPLOAD | Usage::DEVICE_LOCAL,
        512 << 20,
        0,
    );
    assert_eq!(big.as_slice(), &[2, 3]);
    assert!(!big.is_empty());
    assert!(
        rank_memory_types(&gpu.memory_types, &gpu.memory_heaps, 0, Usage::UPLOAD, 1, 0).is_empty()
    );
}

/// Whether every `false` of `flags` comes before every `true`.
fn falses_first(flags: impl Iterator<Item = bool>) -> bool {
    let flags: Vec<bool> = flags.collect();
    flags.windows(2).all(|pair| pair[0] <= pair[1])
}

/// Every usage, every preset (and one with a protected type): the
/// first type is the one an engine developer expects, and the order
/// never puts a worse kind of memory before a better one.
/// - never a protected type; lazily allocated ones for `TRANSIENT` only;
///   only host-visible ones when the host reads or writes directly;
/// - `READBACK`: host-cached first where the device has it;
/// - `UPLOAD | DEVICE_LOCAL`: device-local host-visible (BAR, ReBAR,
///   unified) first, every one of those before host memory;
/// - `UPLOAD` (staging): host-visible memory outside VRAM first,
///   uncached where the device has it there;
/// - `UPLOAD | ALLOW_TRANSFER_INSTEAD` and GPU-only: every device-local
///   type before any host type; GPU-only data first where the host
///   cannot map it; `TRANSIENT`: lazily allocated memory first;
/// - with `PREFER_HOST`: `UPLOAD` (with `DEVICE_LOCAL` too) as staging;
///   `UPLOAD | ALLOW_TRANSFER_INSTEAD` every host-visible type first,
///   outside VRAM where the device has such; GPU-only every type outside
///   VRAM first, uncached where the device has such;
/// - types ranked last (AMD's device-coherent ones) after all others.
#[test]
fn every_usage_on_every_preset_ranks_as_an_engine_expects() {
    let mut protected = FakeLayout::discrete();
    protected.memory_types.insert(
        0,
        MemoryType {
            heap: 0,
            props: Props::DEVICE_LOCAL | Props::PROTECTED,
        },
    );
    let mut layouts: Vec<(FakeLayout, u32)> = vec![
        (FakeLayout::discrete(), 0),
        (FakeLayout::rebar(), 0),
        (FakeLayout::integrated(), 0),
        (FakeLayout::mobile(), 0),
        (FakeLayout::lavapipe(), 0),
        (FakeLayout::amd(), 0b1111_0000),
        (FakeLayout::intel_arc(), 0),
        (FakeLayout::apple(), 0),
        (FakeLayout::mali(), 0),
        (protected, 0),
    ];
    // Whatever order the driver lists the types in.
    for index in 0..layouts.len() {
        let (mut reversed, last) = layouts[index].clone();
        reversed.memory_types.reverse();
        let count = reversed.memory_types.len() as u32;
        layouts.push((reversed, last.reverse_bits() >> (32 - count)));
    }
    let flags = USAGE_FLAGS;
    let (dl, hv, cached) = (Props::DEVICE_LOCAL, Props::HOST_VISIBLE, Props::HOST_CACHED);
    let originals = layouts.len() / 2;
    for (index, (layout, last)) in layouts.iter().enumerate() {
        let order = if index < originals {
            ""
        } else {
            " (types reversed)"
        };
        let types = &layout.memory_types;
        for combo in 0..1u32 << flags.len() {
            let mut usage = Usage::default();
            for (bit, flag) in flags.iter().enumerate() {
                if combo & (1 << bit) != 0 {
                    usage |= *flag;
                }
            }
            let ranked = rank_memory_types(types, &layout.memory_heaps, !0, usage, 1, *last);
            let ctx = format!("{}{order} {usage:?}: {:?}", layout.name, ranked.as_slice());
            // Demoted types come after all the others.
            let demoted = ranked.as_slice().iter().map(|&t| last & (1 << t) != 0);
            assert!(falses_first(demoted), "{ctx}");
            let props: Vec<Props> = ranked
                .as_slice()
                .iter()
                .filter(|&&t| last & (1 << t) == 0)
                .map(|&t| types[usize::from(t)].props)
                .collect();
            assert!(!props.is_empty(), "{ctx}");
            let first = props[0];
            // Whether a type the ranking kept has `flags` and none of `without`.
            let exists = |flags: Props, without: Props| {
                props
                    .iter()
                    .any(|p| p.contains(flags) && !p.intersects(without))
            };
            // Every type with `flags` comes before every type without.
            let come_first = |flags: Props| falses_first(props.iter().map(|p| !p.contains(flags)));
            for p in &props {
                assert!(!p.contains(Props::PROTECTED), "{ctx}");
                if p.contains(Props::LAZILY_ALLOCATED) {
                    assert!(usage.contains(Usage::TRANSIENT), "{ctx}");
                }
                if usage.needs_host_access() {
                    assert!(p.contains(hv), "{ctx}");
                }
            }
            let upload = usage.contains(Usage::UPLOAD);
            let prefer_host = usage.contains(Usage::PREFER_HOST);
            // Every type without `flags` comes before every type with.
            let come_last = |flags: Props| falses_first(props.iter().map(|p| p.contains(flags)));
            if usage.contains(Usage::READBACK) {
                if exists(hv | cached, Props::empty()) {
                    assert!(first.contains(cached), "{ctx}");
                }
            } else if upload && usage.contains(Usage::ALLOW_TRANSFER_INSTEAD) && prefer_host {
                assert!(come_first(hv), "{ctx}");
                if exists(hv, dl) {
                    assert!(!first.contains(dl), "{ctx}");
                }
            } else if upload && usage.contains(Usage::ALLOW_TRANSFER_INSTEAD) {
                assert!(come_first(dl), "{ctx}");
                if exists(dl | hv, Props::empty()) {
                    assert!(first.contains(dl | hv), "{ctx}");
                }
            } else if upload && usage.contains(Usage::DEVICE_LOCAL) && !prefer_host {
                assert!(come_first(dl | hv), "{ctx}");
            } else if upload {
                if exists(hv, dl) {
                    assert!(!first.contains(dl), "{ctx}");
                }
                // Uncached where system memory has it; the BAR is
                // not worth it (Intel Arc's one uncached type).
                if exists(
                    hv,
                    cached | if exists(hv, dl) { dl } else { Props::empty() },
                ) {
                    assert!(!first.contains(cached), "{ctx}");
                }
            } else if usage.contains(Usage::TRANSIENT) && exists(Props::LAZILY_ALLOCATED, hv) {
                assert!(first.contains(Props::LAZILY_ALLOCATED), "{ctx}");
            } else if usage.contains(Usage::TRANSIENT) {
                // No lazily allocated type: GPU-only memory, as below
                // without `PREFER_HOST`, which a transient
                // attachment does not heed.
                assert!(come_first(dl), "{ctx}");
            } else if prefer_host {
                assert!(come_last(dl), "{ctx}");
                if exists(Props::empty(), dl | cached) {
                    assert!(!first.intersects(dl | cached), "{ctx}");
                }
            } else {
                assert!(come_first(dl), "{ctx}");
                if exists(dl, hv) {
                    assert!(!first.contains(hv), "{ctx}");
                }
            }
        }
    }
}

/// An empty [`Usage`] (what `Usage::default()`, and so
/// `AllocationDesc::default()` and `Request::default()`, carry; what a
/// port of gpu-allocator's `MemoryLocation::Unknown` may write) ranks
/// the memory types exactly as `DEVICE_LOCAL` does, on every preset in
/// either type order, with `DEVICE_ADDRESS` too (the README's "Coming
/// from gpu-allocator" promises it).
#[test]
fn an_empty_usage_ranks_as_device_local() {
    for layout in FakeLayout::presets() {
        let mut reversed = layout.clone();
        reversed.memory_types.reverse();
        for layout in [layout, reversed] {
            for extra in [Usage::default(), Usage::DEVICE_ADDRESS] {
                assert_eq!(
                    rank(&layout, extra),
                    rank(&layout, Usage::DEVICE_LOCAL | extra),
                    "{} ({:?}): {extra:?}",
                    layout.name,
                    layout.memory_types
                );
            }
        }
    }
}

/// The flags [`Usage`]'s docs say change nothing where they do not
/// apply leave the ranking exactly as it was, for every usage, on every
/// preset in either type order: `DEVICE_ADDRESS` anywhere ("it
/// restricts no memory type"), `ALLOW_TRANSFER_INSTEAD` without
/// `UPLOAD` or with `READBACK`, and `PREFER_HOST` with `READBACK`, or
/// with `TRANSIENT` and no `UPLOAD`.
#[test]
fn flags_that_do_not_apply_change_no_ranking() {
    for layout in FakeLayout::presets() {
        let mut reversed = layout.clone();
        reversed.memory_types.reverse();
        for layout in [layout, reversed] {
            for combo in 0..1u32 << USAGE_FLAGS.len() {
                let usage = USAGE_FLAGS
                    .iter()
                    .enumerate()
                    .filter(|(bit, _)| combo & (1 << bit) != 0)
                    .fold(Usage::default(), |usage, (_, &flag)| usage | flag);
                let upload = usage.contains(Usage::UPLOAD);
                let readback = usage.contains(Usage::READBACK);
                let transient = usage.contains(Usage::TRANSIENT);
                let mut inert = vec![Usage::DEVICE_ADDRESS];
                if !upload || readback {
                    inert.push(Usage::ALLOW_TRANSFER_INSTEAD);
                }
                if readback || (transient && !upload) {
                    inert.push(Usage::PREFER_HOST);
                }
                for flag in inert {
                    assert_eq!(
                        rank(&layout, usage | flag),
                        rank(&layout, usage),
                        "{} ({:?}): {usage:?} with {flag:?}",
                        layout.name,
                        layout.memory_types
                    );
                }
            }
        }
    }
}

/// The table plus the per-request filters give exactly what ranking
/// each request from scratch gives.
#[test]
fn rank_table_matches_ranking_per_request() {
    let flags = USAGE_FLAGS;
    for (layout, last) in [
        (FakeLayout::discrete(), 0),
        (FakeLayout::integrated(), 0),
        (FakeLayout::mobile(), 0),
        (FakeLayout::amd(), 0b1111_0000),
        (FakeLayout::intel_arc(), 0),
        (FakeLayout::apple(), 0),
        (FakeLayout::mali(), 0),
    ] {
        let (types, heaps) = (&layout.memory_types, &layout.memory_heaps);
        let table = RankTable::new(types, heaps, last);
        // Every combination of the flags, `ALLOW_TRANSFER_INSTEAD` too.
        for combo in 0..1u32 << flags.len() {
            let mut usage = Usage::default();
            for (bit, flag) in flags.iter().enumerate() {
                if combo & (1 << bit) != 0 {
                    usage |= *flag;
                }
            }
            for bits in [0, 1, 0b0110, 0b1010, 0b1_1111, u32::MAX, 1 << 31] {
                for size in [1, 64 << 20, 300 << 20, 2 << 30, 1 << 40] {
                    let expected = rank_memory_types(types, heaps, bits, usage, size, last);
                    let fast: Vec<u8> = table
                        .ranked(usage)
                        .iter()
                        .copied()
                        .filter(|&t| table.admits(t, bits, size))
                        .collect();
                    assert_eq!(fast, expected.as_slice(), "{usage:?} {bits:#b} {size}");
                }
            }
        }
    }
}
