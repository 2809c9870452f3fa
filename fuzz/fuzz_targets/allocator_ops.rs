//! Fuzz target: arbitrary operation sequences on a whole [`Allocator`] over
//! the fake device, on a layout and a small configuration drawn from the
//! input (valid by construction but in one input of 8, where it may be out
//! of range: those `Allocator::new` refuses must be refused with
//! `InvalidConfig`; with or without a memory callback, and one installed
//! later over live memory, replacing the one before; layouts with a
//! protected memory type, the `protectedMemory` feature on or off, AMD's
//! `deviceCoherentMemory` feature on or off, and devices that export only
//! some handle types). The operations: requests of every shape (sizes of 0 to
//! `u64::MAX`, alignments that are not powers of two, `memoryTypeBits` of
//! 0, every usage, kind and dedicated policy, the driver's dedicated
//! requirement or preference, a dedicated target (an application's buffer
//! or image, of the request's kind or not), priorities, `can_alias`,
//! within-budget and existing-memory-only requests, `min_alignment`,
//! custom pools live and destroyed) through `allocate`, `allocate_mut` and
//! `allocate_many` (up to four at once, all or nothing); `check_alias` on
//! live allocations (and on each new one, whole, for a resource of every
//! kind); upload rings made through `create_upload_ring` and
//! `create_upload_ring_unchecked` with good and flawed descriptions,
//! growing or not, for uploads or readback (non-coherent memory, with
//! debug fills, of sizes off the atom), allocated from through
//! `ring_allocate` and `ring_allocate_mut` (up to full), written, destroyed and
//! reclaimed by the frames' collection, and filled to exactly their
//! capacity across frames then partly reclaimed; frees now and after frames (with
//! the allocation's resource: `destroy_*_after_frame`, or
//! `destroy_alias_*_after_frame` before the free) sealed with fences or
//! timeline values that "the GPU" signals in any order (and null ones,
//! and the value 0, refused); `collect` and `wait_and_collect` (timeouts of 0 to
//! `u64::MAX`, frames finishing during its waits); another allocator's
//! allocations, ring and pool handed to this one's entry points; custom pools (priorities, export handle types, the
//! D3D11 texture and D3D12 resource types among them) made
//! and destroyed, and one made (or taken) in the operation that places a
//! request in it and at once writes past its margin or after its free,
//! makes it dedicated memory, passes its fixed blocks or fails its map
//! (`PoolProbe`); requests whose `memoryTypeBits` are AMD's
//! device-coherent types and one other (`LastResort`); defragmentation plans over some live allocations, each
//! move carried out or given up; `trim`; host writes (`mapped_slice_mut`,
//! `copy_to_allocation`) and reads, flushes and invalidates of ranges in
//! and out of bounds, one at a time and through `flush_allocations` /
//! `invalidate_allocations`; a byte written after free into a just freed
//! allocation, by the host through its kept pointer or by the GPU (with
//! debug fills), and one past an allocation's end into its debug margin
//! before its free (with `detect_corruption`); names (`set_name`, read back
//! through `name`); `check_corruption` and `check_pool_corruption`; the stats, the JSON dump, the memory
//! map and the SVG; `memory_type_properties`, `memory_type_for`,
//! `budgets`, `memory_size`, `owns`; and the fake device's faults
//! (failing `vkAllocateMemory` and `vkMapMemory` calls, capped heaps
//! (one setup in 8 caps every heap at the start a little under the smallest
//! block of its ladder, where remainder blocks are made),
//! budgets (in MiB, or a few bytes to a few blocks above or below a
//! heap's usage, some set between the allocator's readings, unseen until
//! its next; one setup in 8 puts every heap's budget at the start a few
//! bytes to a few blocks above its usage), a lost device).
//!
//! Checked after every operation (a panic is a finding): flawed requests get
//! the error their flaw names and every error is one the docs promise
//! for what the walk knows (out of host memory and failed maps only from a
//! fault injected and due within the operation, too many objects only from
//! one or at the device's `maxMemoryAllocationCount`, no other device
//! error, `SizeExceedsHeaps` / `SizeExceedsMaxAllocation` naming a heap or
//! the device's limit the request passes, `PoolFull` only from a pool at
//! its `max_blocks`, `TooLargeForPool` only from a pool of fixed blocks
//! smaller than the request and its margin; the errors of the checks
//! before placement, `PoolTypeNotAllowed`, `NoMemoryTypeBits`,
//! `DeviceAddressNotEnabled`, `SizeExceedsHeaps` or `NoSuitableMemoryType`
//! where no allowed type suits the usage, and a destroyed pool's
//! `StalePool` after its type's checks, predicted exactly with their
//! payloads; `OverBudget` only for a within-budget request, in a heap it
//! may take, its usage and size past its budget, and for one request (not
//! a batch) the usage and budget `budgets()` reads after it; a
//! within-budget request (or a batch of them) that made memory on figures
//! the allocator had read leaves that memory's heap within its budget, on
//! the device's own figures; flushes, invalidates and
//! ring writes meet no device error); `create_pool` refuses exactly the
//! descriptions its docs name (`InvalidConfig`, then `NotExportable`) and
//! otherwise fails only in making its `min_blocks`, leaving nothing;
//! `trim` releases every empty block but those a pool keeps for its
//! `min_blocks` and returns the bytes it freed; live
//! allocations (and ranges freed after a frame not collected yet) never
//! overlap in one memory object, margins included, each lies inside its
//! memory and honours its alignments; no two allocations (live, ring
//! chunks, and those freed after a frame not collected yet) of kinds that
//! may not share a `bufferImageGranularity` page share one; only custom
//! pools use protected memory types; dedicated memory names the request's
//! resource and no other memory does, a driver's requirement gets
//! dedicated memory, priorities and export handle types reach the device
//! as asked; a pool exporting D3D11 textures or D3D12 resources takes no
//! `min_blocks` and makes only memory dedicated to a named resource
//! (`NotExportable` naming those types otherwise); AMD's device-coherent
//! types take only requests (and `memory_type_for` queries) whose
//! `memoryTypeBits` admit no other type; `stats()` and `pool_stats()` agree with the target's own tally
//! (ring chunks included), with the device's memory objects type by type
//! and with the memory map's blocks, pools and heaps (`figures.rs`); the memory callback's events (when one is
//! installed) match the device's memory objects, a callback replaced
//! having been told each object's free and its successor each object's
//! making; the application's
//! resources are destroyed exactly when their frame is collected; `current_frame` and `frames_in_flight` follow
//! the frames; the host bytes written come back, in allocations and in ring
//! allocations; each ring allocation lands where a model of the ring's
//! bump allocator says, with its chunk's buffer's device address at its
//! offset exactly when the ring's buffer usage has
//! `SHADER_DEVICE_ADDRESS`, never overlapping another of a live frame, and
//! `UploadRingFull` reports the free bytes the model counts; stale ring
//! allocations are refused; an existing-memory-only request of an
//! `allocate_many` batch lies in memory that was there before it or was
//! made for a request before it, and a batch of such requests makes no
//! memory object; a failed `allocate_many` leaves no allocation,
//! and one with a flawed request makes no memory object and leaves the
//! statistics as they were;
//! `check_alias` answers as its documented rules say; `end_frame` refuses
//! a null fence (`end_frame_timeline` a null semaphore or the value 0,
//! and a value at or below the newest a frame in flight waits for on the
//! same semaphore, with `TimelineValueNotAbove`) and `wait_and_collect` collects the frames finished before
//! the first that was not, then says `Timeout`; another allocator's
//! handles are refused with `ForeignAllocation` or `ForeignPool` and
//! change nothing in either allocator; the fake device
//! records no broken Vulkan rule; no debug margin is found damaged but
//! those written past, each reported before its allocation's free by
//! `check_corruption` (exactly that margin: type, memory, offset, size,
//! name, a margin of at least `debug_margin` bytes inside its block) and
//! counted once by the free; with
//! debug fills, a byte written after free is reported by every
//! `check_corruption` until the allocation that takes it again or the
//! release of its block counts it, and counted exactly once (one such
//! write outstanding at a time, so that `corruptions_detected` says which
//! it counted), and nothing else is ever reported or counted;
//! `check_pool_corruption` of a pool is off exactly when `check_corruption`
//! of its memory type is, else reports no damaged margin but the one of
//! the pool's allocation just written past (with its name), the write
//! after free only when the pool's block holds it, and as many margins
//! checked as the pool has allocations in blocks where detection is on,
//! and refuses destroyed pools (`StalePool`) and another allocator's
//! (`ForeignPool`); `name` says each live allocation's last name (its
//! request's or `set_name`'s, kept by a move) and refuses another
//! allocator's; `memory_type_properties` reports the layout's flags, with
//! `DEVICE_COHERENT_AMD` on AMD's device-coherent types;
//! `memory_type_for` fails exactly as its docs say (its error predicted)
//! and otherwise names the type a one-byte buffer of that description
//! lands in on a fresh allocator of the same device; `budgets` reports
//! the fake device's figures corrected as documented (or
//! `budget_fraction` of each heap and the allocator's own usage). At the
//! end, with everything freed and every frame collected, each memory type
//! keeps at most its largest empty block and each custom pool its
//! `min_blocks` (or one), `trim` leaves only the pools' `min_blocks`, and
//! once the pools are destroyed every write after free is counted, and
//! once the allocator is dropped the device holds nothing.

#![no_main]

#[path = "allocator_ops/heap_edges.rs"]
mod heap_edges;
#[path = "../../tests/common/layout_model.rs"]
mod layout_model;
#[path = "allocator_ops/model.rs"]
mod model;

use arbitrary::Arbitrary;
use gpu_alloc_types::{MemoryPropertyFlags as Props, MemoryType};
use libfuzzer_sys::fuzz_target;
use vk_suballoc::device::fake::{BufferRequirements, FakeDevice, FakeLayout};
use vk_suballoc::{Allocator, Config, Error};

use heap_edges::{budget_at_edge, cap_at_edge};
use model::{ladder, Op, Walk};

const MIB: u64 = 1 << 20;

/// The device and the configuration, drawn from the input.
#[derive(Arbitrary, Debug)]
struct Setup {
    /// The preset, modulo 9 (but `granularity` may pick `amd`); `layout /
    /// 9` 1 modulo 4: `Config::strict_host_access`.
    layout: u8,
    /// 0: the preset's heaps; else every heap of `heap_mib * 4` MiB
    /// (see `toggle_budget` bit 3).
    heap_mib: u8,
    /// 0: the preset's limit; else this many memory objects at most.
    max_objects: u8,
    /// Modulo 8: 0, a `bufferImageGranularity` of `1 << (granularity / 8
    /// % 17)`; 1, of 1536; 2, another driver's buffer requirements; 3, a
    /// memory type buffers may not use, or from 131 the `amd` preset with
    /// all host-visible types but one ([`buffers_off_host`]); else the
    /// preset's.
    granularity: u8,
    /// Bit 0: `VK_EXT_memory_budget` toggled from the preset's. Bit 1: a
    /// `bufferImageGranularity` large against the blocks, a quarter of the
    /// block size `block_size` picks (1 KiB to 64 KiB), so that resources
    /// of kinds that may not share a page meet in few pages. Bit 2: the
    /// walk's first ring (`flags` bit 5) is for readback, in host-cached
    /// memory (non-coherent on `mobile` and `apple`). Bit 3: debug fills
    /// on whatever `margin` says, with heaps of 4 to 256 MiB (`heap_mib`
    /// out of 1 to 64 wraps into it), so that rings of sizes off the
    /// atom meet non-coherent memory with fills. Bit 4: the
    /// `deviceCoherentMemory` feature on (not for [`buffers_off_host`]), so that AMD's device-coherent
    /// types (the `amd` preset's 4 to 7) are usable, by requests whose
    /// `memoryTypeBits` admit no other type (crash breadcrumbs) and by
    /// custom pools. Bits 5 and 6: `Config::heap_size_limits` on the
    /// first heap and on the others ([`heap_size_limits`]). Bit 7, with
    /// `atom` bit 1: `Config::allocation_backtraces` (every free must drop
    /// its allocation's backtrace: a debug assertion at the drop); with
    /// `atom` bit 0: `Config::log_allocations`. (A byte,
    /// where a `bool` was: the corpus keeps its layout.)
    toggle_budget: u8,
    atom: u8,
    block_size: u8,
    small_heap_limit: u8,
    slots: u8,
    budget_fraction: u8,
    reserve: u8,
    frames: u8,
    small_buffers: u8,
    padded_granularity: u8,
    frames_in_flight: u8,
    /// Picks `debug_margin`; 128 and above also turn `debug_fill` on when
    /// `heap_mib` is 1 to 64 (as `toggle_budget` bit 3 does).
    margin: u8,
    /// Bit 0: `detect_corruption`. Bits 1 to 3 all clear: the
    /// configuration may be out of range (else it is valid by
    /// construction). Bit 4: no memory callback is installed (at the start). Bit 5: the
    /// walk starts with an upload ring that does not grow, of the size
    /// bits 6 and 7 pick (so that rings fill and wrap in short inputs);
    /// the last size (16 KiB) makes it a device-address ring where the
    /// layout has buffer device addresses. (The byte of
    /// the `detect_corruption` bool it replaced, whose bit 0 it keeps: the
    /// corpus's inputs keep their layout, and those that drew a valid
    /// configuration keep it.)
    flags: u8,
    /// Below 128: no protected memory type; else one (device-local,
    /// protected) at index `protected % (types + 1)`, with the
    /// `protectedMemory` feature on odd values.
    protected: u8,
    /// Bit 0: the device exports only opaque file descriptors (else it
    /// does not tell, as the presets). Bits 1 to 3 of 2 (one setup in
    /// 8; not all set, as most of the corpus's inputs have them): every
    /// heap capped at the edge of the ladder ([`cap_at_edge`], bits 4 and
    /// 5 picking the room). Bits 1 to 3 of 3 (another one in 8):
    /// `VK_EXT_memory_budget` on, and every heap's budget a few bytes to a
    /// few blocks above its usage ([`budget_at_edge`], bits 4 to 7
    /// picking the room). (A byte, where a `bool` was: the corpus keeps
    /// its layout.)
    opaque_fd_only: u8,
}

#[derive(Arbitrary, Debug)]
struct Input {
    setup: Setup,
    ops: Vec<Op>,
}

fn pick<T: Copy>(choices: &[T], at: u8) -> T {
    choices[at as usize % choices.len()]
}

fn layout(setup: &Setup) -> FakeLayout {
    let presets: [fn() -> FakeLayout; 9] = [
        FakeLayout::discrete,
        FakeLayout::integrated,
        FakeLayout::mobile,
        FakeLayout::rebar,
        FakeLayout::amd,
        FakeLayout::lavapipe,
        FakeLayout::intel_arc,
        FakeLayout::apple,
        FakeLayout::mali,
    ];
    // The `amd` preset (4), whatever `layout` says.
    let preset = if buffers_off_host(setup) {
        4
    } else {
        setup.layout as usize % presets.len()
    };
    let mut layout = presets[preset]();
    if heap_mib(setup) != 0 {
        layout = layout.with_heap_sizes(u64::from(heap_mib(setup)) * 4 * MIB);
    }
    if setup.max_objects != 0 {
        layout = layout.with_max_allocation_count(u32::from(setup.max_objects % 32) + 1);
    }
    match setup.granularity % 8 {
        0 => layout = layout.with_granularity(1 << (setup.granularity / 8 % 17)),
        1 => layout = layout.with_granularity(1536),
        // Another driver's answer to buffers' memory requirements (ring
        // chunks' buffers): an alignment of 1 to 256 bytes, sizes rounded
        // to 1 to 64.
        2 => {
            let draw = u32::from(setup.granularity / 8);
            let answer = BufferRequirements::new(1 << (draw % 9), 1 << (draw / 4 % 7));
            layout = layout.with_buffer_requirements(answer);
        }
        // A memory type buffers may not use (`with_buffer_type_left_out`);
        // or every host-visible one the device may leave out
        // ([`buffers_off_host`]).
        3 => {
            let draw = usize::from(setup.granularity / 8);
            if buffers_off_host(setup) {
                for t in 0..layout.memory_types.len() {
                    if layout.memory_types[t].props.contains(Props::HOST_VISIBLE) {
                        layout = layout.with_buffer_type_left_out(t);
                    }
                }
            } else {
                let left_out = draw % layout.memory_types.len();
                layout = layout.with_buffer_type_left_out(left_out);
            }
        }
        _ => {}
    }
    if setup.toggle_budget & 2 != 0 && setup.block_size >= 2 {
        let block_log2 = 12 + u32::from(setup.block_size) % 17;
        layout = layout.with_granularity(1 << (block_log2 - 2).min(16));
    }
    if setup.toggle_budget & 16 != 0 && !buffers_off_host(setup) {
        layout = layout.with_amd_device_coherent_memory(true);
    }
    if setup.toggle_budget & 1 != 0 {
        let enabled = !layout.memory_budget;
        layout = layout.with_memory_budget(enabled);
    }
    if (setup.opaque_fd_only >> 1) & 7 == 3 {
        layout = layout.with_memory_budget(true);
    }
    // The fake device backs host-visible memory with host memory: objects
    // past libFuzzer's 2 GiB malloc limit would end the run. Vulkan
    // guarantees 1 GiB.
    layout.max_memory_allocation_size = layout.max_memory_allocation_size.min(1 << 30);
    if setup.atom.is_multiple_of(4) {
        layout.non_coherent_atom_size = 1 << (setup.atom / 4 % 13);
    }
    if setup.protected >= 128 {
        let at = setup.protected as usize % (layout.memory_types.len() + 1);
        let props = Props::DEVICE_LOCAL | Props::PROTECTED;
        layout
            .memory_types
            .insert(at, MemoryType { heap: 0, props });
        // The AMD types after it move up one.
        let amd = layout.amd_device_coherent_types;
        let below = (1u32 << at) - 1;
        layout.amd_device_coherent_types = (amd & below) | ((amd & !below) << 1);
        // And the types buffers may use (the new one too, as the fake
        // device lets buffers use protected types).
        let answer = layout.buffer_requirements;
        let bits = answer.memory_type_bits;
        let bits = (bits & below) | ((bits & !below) << 1) | (1 << at);
        layout = layout.with_buffer_requirements(answer.with_memory_type_bits(bits));
        layout.protected_memory = setup.protected % 2 == 1;
    }
    if setup.opaque_fd_only & 1 != 0 {
        layout.exportable_handle_types = Some(ash::vk::ExternalMemoryHandleTypeFlags::OPAQUE_FD);
    }
    layout
}

/// Whether the setup is the `amd` preset with every host-visible memory
/// type the fake device may leave out of buffers' `memoryTypeBits` left
/// out, in turn, and AMD's `deviceCoherentMemory` feature off
/// (`granularity` 3 modulo 8, from 131: one setup in 16): buffers keep
/// one host-coherent type (Vulkan's promise), the last of AMD's
/// device-coherent ones, which the allocator does not use without the
/// feature, so no usable type a buffer allows suits a ring for the host
/// and `create_upload_ring` must say `NoSuitableMemoryType`
/// (`ring_no_suitable_type`). No single type left out reaches that, and
/// in 10 minutes' fuzzing no input drew the `amd` preset, its types left
/// out and the feature off together.
fn buffers_off_host(setup: &Setup) -> bool {
    setup.granularity % 8 == 3 && setup.granularity >= 131
}

/// The configuration: for one setup in 8 (`flags` bits 1 to 3 clear) one
/// drawn from figures in and out of the documented ranges, which
/// `Allocator::new` must refuse or accept as those ranges say; for the
/// rest, one valid by construction, each out-of-range figure replaced by
/// one in range (most near an edge), so that the operations run. Heap
/// size limits are drawn against `layout`, the device's.
fn config(setup: &Setup, layout: &FakeLayout) -> Config {
    let raw = (setup.flags >> 1) & 7 == 0;
    let block_size = match setup.block_size {
        0 => valid(raw, 0, 1),
        1 => 3 * MIB + 17,
        n => 1 << (12 + u32::from(n) % 17),
    };
    // Not `MAX_SLOTS` itself in range: a 128 GiB slot table, past
    // libFuzzer's malloc limit.
    let slots = vk_suballoc::offset::MAX_SLOTS;
    Config {
        large_heap_block_size: block_size,
        small_heap_limit: pick(&[1 << 30, 0, 64 * MIB, u64::MAX], setup.small_heap_limit),
        initial_block_slots: pick(
            &[1024, 1, 2, 8, valid(raw, 0, 3), valid(raw, slots + 1, 4096)],
            setup.slots,
        ),
        budget_fraction: pick(
            &[
                0.8,
                0.0,
                0.3,
                1.0,
                valid(raw, 1.5, 0.5),
                valid(raw, -0.1, -0.0),
                valid(raw, f64::NAN, f64::MIN_POSITIVE),
            ],
            setup.budget_fraction,
        ),
        empty_block_reserve: pick(
            &[
                1.0,
                0.0,
                0.5,
                f64::INFINITY,
                valid(raw, -1.0, -0.0),
                valid(raw, f64::NAN, f64::MAX),
            ],
            setup.reserve,
        ),
        empty_block_frames: pick(&[120, 0, 1, 2, 5, u64::MAX], setup.frames),
        small_buffer_limit: pick(
            &[16384, 0, 256, 4096, 65536, valid(raw, 65537, 1)],
            setup.small_buffers,
        ),
        max_padded_granularity: pick(&[4096, 0, 256, u64::MAX], setup.padded_granularity),
        max_frames_in_flight: pick(
            &[3, 1, 2, 64, u32::MAX, valid(raw, 0, 65)],
            setup.frames_in_flight,
        ),
        debug_margin: pick(
            &[
                0,
                0,
                4,
                16,
                64,
                65536,
                valid(raw, 6, 8),
                valid(raw, 65540, 65532),
            ],
            setup.margin,
        ),
        detect_corruption: setup.flags & 1 == 1,
        // Fills touch every byte of each host-visible block (and dedicated
        // object) the fake device would otherwise leave unallocated: only
        // with heaps of at most 256 MiB, so that the input stays within
        // libFuzzer's memory limit.
        debug_fill: (setup.margin >= 128 || setup.toggle_budget & 8 != 0)
            && (1..=64).contains(&heap_mib(setup)),
        heap_size_limits: heap_size_limits(setup, layout),
        // One setup in four: a capture per allocation (microseconds, more
        // under ASan) slows the inputs that have it.
        allocation_backtraces: setup.toggle_budget & 128 != 0 && setup.atom & 2 != 0,
        // The lines go nowhere (no logger here): their wording runs.
        log_allocations: setup.toggle_budget & 128 != 0 && setup.atom & 1 != 0,
        // One setup in four: mappings withheld from requests without host
        // access (checked where each allocation is accepted).
        strict_host_access: setup.layout / 9 % 4 == 1,
    }
}

/// `Config::heap_size_limits` as `toggle_budget` bits 5 and 6 draw them:
/// bit 5 limits the first heap to 3/8 of its size, bit 6 every other heap
/// to half its size (a limit of the heap's size when both are clear on a
/// heap: none then).
fn heap_size_limits(setup: &Setup, layout: &FakeLayout) -> [u64; 16] {
    let mut limits = [0; 16];
    for (heap, (limit, figures)) in limits.iter_mut().zip(&layout.memory_heaps).enumerate() {
        let bit = if heap == 0 { 32 } else { 64 };
        if setup.toggle_budget & bit != 0 {
            *limit = if heap == 0 {
                figures.size / 8 * 3
            } else {
                figures.size / 2
            };
        }
    }
    limits
}

/// `layout` as the allocator sees it under `limits`
/// (`Config::heap_size_limits`): each limited heap `min(size, limit)`
/// large. The walk's model reads this one; the fake device keeps the
/// real sizes.
fn limited(layout: &FakeLayout, limits: &[u64; 16]) -> FakeLayout {
    let mut limited = layout.clone();
    for (heap, &limit) in limited.memory_heaps.iter_mut().zip(limits) {
        if limit != 0 {
            heap.size = heap.size.min(limit);
        }
    }
    limited
}

/// `Setup::heap_mib`, brought into 1 to 64 when `toggle_budget` bit 3
/// asks for debug fills.
fn heap_mib(setup: &Setup) -> u8 {
    match setup.heap_mib {
        n @ 1..=64 => n,
        n if setup.toggle_budget & 8 != 0 => n % 64 + 1,
        n => n,
    }
}

/// `out_of_range` when the configuration may be out of range, else
/// `in_range`: the tables are the same either way, each figure out of range
/// giving way to one in range at its place, so that a setup drawing only
/// figures in range gets one configuration in both.
fn valid<T>(raw: bool, out_of_range: T, in_range: T) -> T {
    if raw {
        out_of_range
    } else {
        in_range
    }
}

/// Whether `Allocator::new` must accept `config` (the ranges `Config`'s
/// fields document).
fn config_is_valid(config: &Config) -> bool {
    config.large_heap_block_size != 0
        && (0.0..=1.0).contains(&config.budget_fraction)
        && !config.empty_block_reserve.is_nan()
        && config.empty_block_reserve >= 0.0
        && config.small_buffer_limit <= 65536
        && config.initial_block_slots != 0
        && config.initial_block_slots <= vk_suballoc::offset::MAX_SLOTS
        && config.max_frames_in_flight != 0
        && config.debug_margin.is_multiple_of(4)
        && config.debug_margin <= 65536
}

fuzz_target!(|input: Input| {
    let layout = layout(&input.setup);
    let config = config(&input.setup, &layout);
    let device = FakeDevice::new(layout.clone());
    let allocator = match Allocator::new(device.clone(), config) {
        Ok(allocator) => {
            assert!(config_is_valid(&config), "{config:?} was accepted");
            allocator
        }
        Err(Error::InvalidConfig(_)) => {
            assert!(!config_is_valid(&config), "{config:?} was refused");
            return;
        }
        // The non-power-of-two atom sizes are not drawn.
        Err(error) => panic!("Allocator::new: {error:?}"),
    };
    let callback = input.setup.flags & (1 << 4) == 0;
    let seen = limited(&layout, &config.heap_size_limits);
    let mut walk = Walk::new(allocator, device.clone(), seen, config, callback);
    if input.setup.flags & (1 << 5) != 0 {
        let size_pick = usize::from(input.setup.flags >> 6);
        let size = [0xffff, 4096, 1000, 0x4000][size_pick];
        walk.start_ring(size, input.setup.toggle_budget & 4 != 0, size_pick == 3);
        walk.check();
    }
    cap_at_edge(&input.setup, &device, &config);
    if budget_at_edge(&input.setup, &mut walk, &device, &config) {
        walk.check();
    }
    for op in input.ops {
        walk.apply(op);
        walk.check();
    }
    walk.finish();
});
