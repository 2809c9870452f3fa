//! The variant of a walk's layout and the allocator configuration it
//! runs with, both drawn from the walk's seed.

use gpu_alloc_types::MemoryPropertyFlags as Props;
use vk_suballoc::device::fake::{BufferRequirements, FakeLayout};
use vk_suballoc::Config;

use super::super::seeded_rng::Rng;
use super::MIB;

/// A variant of `base` and a configuration, drawn from the seed: small
/// heaps, a low object limit, another granularity (one not a power of two
/// too), the budget extension toggled, AMD's device-coherent memory
/// enabled, a protected memory type, another driver's buffer alignment
/// and size rounding, a memory type buffers may not use; runs of several limits, separate
/// granularity classes, small blocks, frames in flight.
pub(super) fn variant(rng: &mut Rng, base: FakeLayout) -> (FakeLayout, Config) {
    let mut layout = base;
    if rng.below(3) == 0 {
        layout = layout.with_heap_sizes((32 + rng.below(480)) * MIB);
    }
    if rng.below(4) == 0 {
        layout = layout.with_max_allocation_count(6 + rng.below(20) as u32);
    }
    match rng.below(8) {
        0 => layout = layout.with_granularity(1 << rng.below(17)),
        1 => layout = layout.with_granularity(1536),
        _ => {}
    }
    if rng.below(4) == 0 {
        let enabled = !layout.memory_budget;
        layout = layout.with_memory_budget(enabled);
    }
    if rng.below(6) == 0 {
        layout.max_memory_allocation_size = (4 + rng.below(60)) * MIB;
    }
    if rng.below(4) == 0 {
        layout.non_coherent_atom_size = 1 << rng.below(13);
    }
    // AMD's device-coherent types: used only with their feature, last.
    if layout.amd_device_coherent_types != 0 && rng.below(2) == 0 {
        layout = layout.with_amd_device_coherent_memory(true);
    }
    // A protected device-local type after the others, with or without
    // `protectedMemory`: never ranked, and usable by custom pools only with
    // the feature. Drawn from a copy of the generator, so that the walks'
    // other draws replay as before.
    let mut protected = Rng(rng.0 ^ 0x0070_7274);
    if protected.below(4) == 0 && layout.memory_types.len() < 32 {
        let heap = layout.memory_types[0].heap;
        layout.memory_types.push(gpu_alloc_types::MemoryType {
            heap,
            props: Props::DEVICE_LOCAL | Props::PROTECTED,
        });
        layout = layout.with_protected_memory(protected.below(2) == 0);
    }
    // Another driver's answer to buffers' requirements in a quarter of
    // the walks (an alignment of 1 to 256 bytes, sizes rounded to 1 to 64),
    // drawn from another copy, so that the other draws replay as before:
    // ring chunks then land wherever some driver may put them.
    let mut buffers = Rng(rng.0 ^ 0x0062_7566);
    if buffers.below(4) == 0 {
        let alignment = 1 << buffers.below(9);
        let size_granule = 1 << buffers.below(7);
        layout = layout.with_buffer_requirements(BufferRequirements::new(alignment, size_granule));
    }
    // And in a quarter, a memory type buffers may not use
    // (`with_buffer_type_left_out`).
    if buffers.below(4) == 0 {
        let left_out = buffers.below(layout.memory_types.len() as u64) as usize;
        layout = layout.with_buffer_type_left_out(left_out);
    }
    // Debug fills in half the walks, drawn from another copy of the
    // generator (the other draws stay as they were). Fills make every byte
    // of a host-visible block (and dedicated object) resident in the fake
    // device, twice for non-coherent ones (the device's copy, flushed):
    // heaps of at most 512 MiB then.
    let debug_fill = Rng(rng.0 ^ 0x0066_696c).below(2) == 0;
    if debug_fill && layout.memory_heaps.iter().any(|heap| heap.size > 512 * MIB) {
        layout = layout.with_heap_sizes(512 * MIB);
    }
    let config = Config {
        debug_fill,
        initial_block_slots: if rng.below(4) == 0 {
            1 + rng.below(8) as u32
        } else {
            1024
        },
        budget_fraction: [0.0, 0.3, 0.8, 0.8, 1.0][rng.below(5) as usize],
        empty_block_reserve: [0.0, 0.5, 1.0, 1.0, f64::INFINITY][rng.below(5) as usize],
        empty_block_frames: [0, 1, 5, 120, u64::MAX][rng.below(5) as usize],
        small_buffer_limit: [0, 4096, 16384, 65536][rng.below(4) as usize],
        max_padded_granularity: if rng.below(4) == 0 { 256 } else { 4096 },
        large_heap_block_size: if rng.below(4) == 0 {
            16 * MIB
        } else {
            256 * MIB
        },
        max_frames_in_flight: 1 + rng.below(4) as u32,
        debug_margin: [0, 0, 4, 64][rng.below(4) as usize],
        detect_corruption: rng.below(2) == 0,
        // Backtraces in a quarter of the walks, from a third copy: every
        // free must drop its allocation's (checked at the drop).
        allocation_backtraces: Rng(rng.0 ^ 0x6274).below(4) == 0,
        // Mappings withheld in a quarter, from a fourth copy: allocations
        // and ring allocations of usages without host access then have
        // none, wherever they lie.
        strict_host_access: Rng(rng.0 ^ 0x7368).below(4) == 0,
        ..Config::default()
    };
    (layout, config)
}
