//! The profiles that mirror a layout of the crate's own fake device
//! (`vk_suballoc::device::fake::FakeLayout`) report the same memory types,
//! heap structure, limits and `VK_EXT_memory_budget`, so that the Vulkan suite under validation and
//! the fake-device tests describe the same GPUs. Heap sizes are the one
//! exception: the layer's are scaled down so that tests which fill a heap
//! on lavapipe stay quick, but stay on the same side of 1 GiB (the
//! allocator's small-heap limit), and a heap of 256 MiB or less keeps its
//! size.

use ash::vk;
use vk_suballoc::device::fake::FakeLayout;

use crate::profile::{Profile, AMD, APPLE, ARC, DISCRETE, INTEGRATED, MALI, MOBILE, REBAR};

const GIB: u64 = 1 << 30;

/// Asserts that `profile` describes the same GPU as `layout`.
fn assert_mirrors(profile: &Profile, layout: &FakeLayout) {
    let name = profile.name;
    let types: Vec<(vk::MemoryPropertyFlags, u32)> =
        profile.types.iter().map(|t| (t.flags, t.heap)).collect();
    let layout_types: Vec<(vk::MemoryPropertyFlags, u32)> = layout
        .memory_types
        .iter()
        .map(|t| {
            let flags = vk::MemoryPropertyFlags::from_raw(u32::from(t.props.bits()));
            (flags, t.heap)
        })
        .collect();
    assert_eq!(types, layout_types, "{name}: memory types");
    assert_eq!(
        profile.heaps.len(),
        layout.memory_heaps.len(),
        "{name}: heaps"
    );
    for (index, (heap, layout_heap)) in profile.heaps.iter().zip(&layout.memory_heaps).enumerate() {
        if layout_heap.size <= GIB / 4 {
            assert_eq!(heap.size, layout_heap.size, "{name}: heap {index}");
        } else {
            assert!(heap.size <= layout_heap.size, "{name}: heap {index}");
            assert_eq!(
                heap.size > GIB,
                layout_heap.size > GIB,
                "{name}: heap {index}"
            );
        }
        // A heap is device-local when a device-local type lives in it.
        let device_local = layout.memory_types.iter().any(|t| {
            t.heap as usize == index
                && t.props.bits() & vk::MemoryPropertyFlags::DEVICE_LOCAL.as_raw() as u8 != 0
        });
        assert_eq!(
            heap.flags.contains(vk::MemoryHeapFlags::DEVICE_LOCAL),
            device_local,
            "{name}: heap {index} flags"
        );
    }
    assert_eq!(
        (
            profile.buffer_image_granularity,
            profile.non_coherent_atom_size,
            profile.max_memory_allocation_count,
        ),
        (
            layout.buffer_image_granularity,
            layout.non_coherent_atom_size,
            layout.max_memory_allocation_count,
        ),
        "{name}: granularity, atom, allocation count"
    );
    assert_eq!(
        profile.memory_budget, layout.memory_budget,
        "{name}: VK_EXT_memory_budget"
    );
}

#[test]
fn arc_mirrors_the_intel_arc_layout() {
    assert_mirrors(&ARC, &FakeLayout::intel_arc());
}

#[test]
fn apple_mirrors_the_apple_layout() {
    assert_mirrors(&APPLE, &FakeLayout::apple());
}

#[test]
fn mali_mirrors_the_mali_layout() {
    assert_mirrors(&MALI, &FakeLayout::mali());
}

/// Every profile with the crate's layout of the same name (`arc`'s is
/// `intel-arc`).
fn same_name_layouts() -> [(&'static Profile, FakeLayout); 8] {
    let pairs = [
        (&DISCRETE, FakeLayout::discrete()),
        (&INTEGRATED, FakeLayout::integrated()),
        (&MOBILE, FakeLayout::mobile()),
        (&AMD, FakeLayout::amd()),
        (&REBAR, FakeLayout::rebar()),
        (&ARC, FakeLayout::intel_arc()),
        (&APPLE, FakeLayout::apple()),
        (&MALI, FakeLayout::mali()),
    ];
    for (profile, layout) in &pairs {
        assert!(layout.name.ends_with(profile.name), "{}", profile.name);
    }
    pairs
}

/// Every profile offers `VK_EXT_memory_budget` exactly where the crate's
/// layout of that name has it, those that are not mirrors too (their types
/// and limits differ from the layouts of the same name, to reach other
/// paths): the Vulkan suite then takes the allocator's path without a
/// budget on integrated and mobile GPUs, as the fake-device tests do.
#[test]
fn budgets_match_the_layouts_of_the_same_name() {
    for (profile, layout) in same_name_layouts() {
        assert_eq!(
            profile.memory_budget, layout.memory_budget,
            "{}: VK_EXT_memory_budget",
            profile.name
        );
    }
}

/// Every profile answers buffers' memory requirements as the crate's
/// layout of the same name (its driver, `BufferRequirements`): the same
/// alignment for the usages without one of their own, and a size granule
/// the driver rounds to for some usage (ANV rounds uniform and storage
/// buffers' sizes to 4, others' not at all: the `arc` profile takes the
/// first, `integrated` the second).
#[test]
fn buffer_requirements_match_the_layouts_of_the_same_name() {
    for (profile, layout) in same_name_layouts() {
        let name = profile.name;
        let answer = layout.buffer_requirements;
        assert_eq!(
            profile.min_buffer_alignment, answer.alignment,
            "{name}: buffer alignment"
        );
        // The granule of buffers without a usage of their own, and that of
        // the usages with one (where the layout names any: an empty
        // usage's 1 is no granule any buffer gets).
        let (usages, usage_granule) = answer.usage_size_granule;
        let mut granules = vec![answer.size_granule];
        if !usages.is_empty() {
            granules.push(answer.size_granule.max(usage_granule));
        }
        assert!(
            granules.contains(&profile.buffer_size_granule),
            "{name}: buffer size granule {} where the layout has {granules:?}",
            profile.buffer_size_granule
        );
    }
}

/// Every profile aligns images as the crate's layout of the same name (its
/// driver, `ImageRequirements`): optimal images by size, depth/stencil and
/// linear ones apart, at least lavapipe's 64 bytes everywhere.
#[test]
fn image_alignments_match_the_layouts_of_the_same_name() {
    for (profile, layout) in same_name_layouts() {
        let answer = layout.image_requirements;
        let images = profile.image_alignment;
        assert_eq!(
            (
                images.optimal,
                images.large,
                images.large_from,
                images.depth_stencil,
                images.linear
            ),
            (
                answer.optimal_alignment,
                answer.large_alignment,
                answer.large_from,
                answer.depth_stencil_alignment,
                answer.linear_alignment
            ),
            "{}: image alignments",
            profile.name
        );
        assert!(images.optimal.min(images.linear) >= 64, "{}", profile.name);
        // The same answer image by image: the two sides' depth/stencil
        // format lists (`image_kinds::is_depth_stencil` here, the crate's
        // own there; the layer does not link the crate) agree too.
        for format in FORMATS {
            let depth_stencil = crate::image_kinds::is_depth_stencil(format);
            for tiling in [vk::ImageTiling::OPTIMAL, vk::ImageTiling::LINEAR] {
                for size in [16 << 10, 32 << 10, 128 << 10, 64 << 20] {
                    let linear = tiling == vk::ImageTiling::LINEAR;
                    assert_eq!(
                        images.of(size, linear, depth_stencil),
                        answer.alignment(size, format, tiling),
                        "{}: {format:?} {tiling:?} of {size} bytes",
                        profile.name
                    );
                }
            }
        }
    }
}

/// Every depth/stencil format, and colour ones beside them.
const FORMATS: [vk::Format; 10] = [
    vk::Format::D16_UNORM,
    vk::Format::X8_D24_UNORM_PACK32,
    vk::Format::D32_SFLOAT,
    vk::Format::S8_UINT,
    vk::Format::D16_UNORM_S8_UINT,
    vk::Format::D24_UNORM_S8_UINT,
    vk::Format::D32_SFLOAT_S8_UINT,
    vk::Format::R8G8B8A8_UNORM,
    vk::Format::R32_SFLOAT,
    vk::Format::BC7_UNORM_BLOCK,
];
