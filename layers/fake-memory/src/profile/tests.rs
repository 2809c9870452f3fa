//! Unit tests of the profiles' figures that the compile-time check in
//! `profile.rs` does not cover: names round-trip, and what each profile is
//! there to model (a non-coherent host type on the discrete GPU, a lazily
//! allocated type last on the mobile and Mali ones only, VRAM mapped through
//! a small BAR alone on Arc, Apple's non-coherent type listed first, Mali's
//! host-visible device-local memory). They are apart from `profile.rs` so
//! that the profiles' data reads without its tests.

use super::*;

#[test]
fn names_round_trip() {
    for profile in ALL {
        assert_eq!(Profile::by_name(profile.name), Some(profile));
    }
    assert_eq!(Profile::by_name("lavapipe"), None);
}

#[test]
fn discrete_has_a_non_coherent_type_and_a_device_local_only_type() {
    let properties = DISCRETE.memory_properties();
    let types = &properties.memory_types[..properties.memory_type_count as usize];
    assert!(types
        .iter()
        .any(|t| t.property_flags.contains(HOST_VISIBLE)
            && !t.property_flags.contains(HOST_COHERENT)));
    assert!(types.iter().any(|t| t.property_flags == DEVICE_LOCAL));
}

#[test]
fn only_mobile_and_mali_have_a_lazily_allocated_type_and_it_comes_last() {
    for profile in ALL {
        let lazy: Vec<usize> = (0..profile.types.len())
            .filter(|&t| profile.types[t].flags.contains(LAZILY_ALLOCATED))
            .collect();
        if ["mobile", "mali"].contains(&profile.name) {
            assert_eq!(lazy, [profile.types.len() - 1], "{}", profile.name);
            let last = profile.types[lazy[0]];
            assert_eq!(last.flags, DEVICE_LOCAL | LAZILY_ALLOCATED);
            assert!(profile.heaps[last.heap as usize]
                .flags
                .contains(HEAP_DEVICE_LOCAL));
        } else {
            assert_eq!(lazy, [] as [usize; 0], "{}", profile.name);
        }
    }
}

/// The host-visible types of `profile`, in order, by whether they are
/// coherent.
fn host_visible_coherence(profile: &Profile) -> Vec<bool> {
    profile
        .types
        .iter()
        .filter(|t| t.flags.contains(HOST_VISIBLE))
        .map(|t| t.flags.contains(HOST_COHERENT))
        .collect()
}

#[test]
fn arc_maps_vram_through_a_small_bar_only() {
    // The only uncached host-visible memory is device-local, in a heap
    // of 256 MiB next to a VRAM heap the host cannot map.
    let uncached_host: Vec<&FakeType> = ARC
        .types
        .iter()
        .filter(|t| t.flags.contains(HOST_VISIBLE) && !t.flags.contains(HOST_CACHED))
        .collect();
    assert_eq!(uncached_host.len(), 1);
    assert!(uncached_host[0].flags.contains(DEVICE_LOCAL));
    assert_eq!(ARC.heaps[uncached_host[0].heap as usize].size, 256 * MIB);
    assert!(ARC.heaps[0].size > GIB, "a large VRAM heap beside the BAR");
    assert!(ARC
        .types
        .iter()
        .filter(|t| t.heap == 0)
        .all(|t| !t.flags.contains(HOST_VISIBLE)));
}

#[test]
fn apple_lists_its_non_coherent_type_before_the_coherent_one() {
    assert_eq!(host_visible_coherence(&APPLE), [false, true]);
    assert!(APPLE.types.iter().all(|t| t.flags.contains(DEVICE_LOCAL)));
}

#[test]
fn mali_has_no_device_local_type_the_host_cannot_map() {
    assert!(MALI
        .types
        .iter()
        .filter(|t| !t.flags.contains(LAZILY_ALLOCATED))
        .all(|t| t
            .flags
            .contains(DEVICE_LOCAL | HOST_VISIBLE | HOST_COHERENT)));
}

/// Each rule of `valid_memory_types` refuses the layout that breaks it (so
/// the compile-time check of the profiles can fail), and a layout with
/// AMD's device-coherent types last passes.
#[test]
fn memory_type_rules_refuse_what_the_specification_forbids() {
    const LOCAL_HEAP: FakeHeap = FakeHeap {
        size: 1 << 30,
        flags: HEAP_DEVICE_LOCAL,
    };
    const HOST_HEAP: FakeHeap = FakeHeap {
        size: 1 << 30,
        flags: vk::MemoryHeapFlags::empty(),
    };
    let heaps = [LOCAL_HEAP, HOST_HEAP];
    let ty = |flags: vk::MemoryPropertyFlags, heap: u32| FakeType {
        flags,
        heap,
        ..DISCRETE.types[0]
    };
    let host = all(&[HOST_VISIBLE, HOST_COHERENT]);
    let amd = all(&[
        vk::MemoryPropertyFlags::DEVICE_COHERENT_AMD,
        vk::MemoryPropertyFlags::DEVICE_UNCACHED_AMD,
    ]);
    let valid = [ty(DEVICE_LOCAL, 0), ty(host, 1)];
    assert_eq!(valid_memory_types(&heaps, &valid), Ok(()));
    let with_amd = [
        ty(DEVICE_LOCAL, 0),
        ty(host, 1),
        ty(all(&[DEVICE_LOCAL, amd]), 0),
        ty(all(&[host, amd]), 1),
    ];
    assert_eq!(valid_memory_types(&heaps, &with_amd), Ok(()));
    let cases: [(&[FakeType], &str); 9] = [
        (&[ty(DEVICE_LOCAL, 1), ty(host, 1)], "heap is"),
        (&[ty(DEVICE_LOCAL, 0), ty(host, 0)], "heap is"),
        (
            &[ty(DEVICE_LOCAL, 0), ty(host, 1), ty(HOST_VISIBLE, 1)],
            "coherent or cached",
        ),
        (
            &[ty(DEVICE_LOCAL, 0), ty(host, 1), ty(HOST_CACHED, 1)],
            "coherent or cached",
        ),
        (
            &[
                ty(DEVICE_LOCAL, 0),
                ty(host, 1),
                ty(all(&[vk::MemoryPropertyFlags::PROTECTED, host]), 1),
            ],
            "not host-visible",
        ),
        (
            &[ty(DEVICE_LOCAL, 0), ty(host, 1), ty(LAZILY_ALLOCATED, 1)],
            "is device-local",
        ),
        (
            &[
                ty(DEVICE_LOCAL, 0),
                ty(host, 1),
                ty(
                    all(&[host, vk::MemoryPropertyFlags::DEVICE_UNCACHED_AMD]),
                    1,
                ),
            ],
            "device-coherent",
        ),
        (
            // Cached before uncached of the same heap: a strict superset first.
            &[
                ty(DEVICE_LOCAL, 0),
                ty(all(&[host, HOST_CACHED]), 1),
                ty(host, 1),
            ],
            "ordered",
        ),
        (
            &[ty(DEVICE_LOCAL, 0), ty(all(&[host, amd]), 1), ty(host, 1)],
            "ordered",
        ),
    ];
    for (types, rule) in cases {
        let refused = valid_memory_types(&heaps, types).unwrap_err();
        assert!(refused.contains(rule), "{types:?}: {refused}");
    }
    assert_eq!(
        valid_memory_types(&heaps, &[ty(DEVICE_LOCAL, 0)]),
        Err("some type is host-visible and host-coherent")
    );
    assert_eq!(
        valid_memory_types(&heaps, &[ty(host, 1)]),
        Err("some type is device-local")
    );
}
