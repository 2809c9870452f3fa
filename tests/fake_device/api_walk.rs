//! A seeded random walk over the whole API, as an engine uses it in one
//! session: allocations of every usage, resource kind and dedicated policy,
//! named or not, with `memoryTypeBits` subsets and sizes from one byte to
//! beyond every heap, some for existing memory only, some with a
//! `min_alignment` (huge or invalid at times); frees now (`free`, `free_mut`)
//! and after frames (`free_after_frame`, `destroy_*_after_frame`) with fences
//! and timeline values signalled in order, out of order, late, or the device
//! lost, and GPU stalls in which frames end unsignalled until an upload ring
//! is full of them; upload rings created, filled, grown and destroyed; defragmentation
//! planned over a random subset of the live allocations and carried out
//! (bytes copied, sources freed now or after the frame, a move given up at
//! times), or refused for a bad movable; `trim`; custom pools made with
//! random descriptions (some invalid) on random memory types, named by some
//! requests (some flawed for the pool), destroyed while they hold allocations
//! or frees waiting for their frame and once empty, and stale and foreign
//! pool handles; flushes, invalidates and copies in and out of host-visible
//! memory (and refused ones); the stats, the JSON dump, the memory map and
//! the SVG read at random points; injected `vkAllocateMemory` and
//! `vkMapMemory` failures, capped heaps, budgets. Each walk draws a variant
//! of its layout (heap sizes, object limit, granularity, budget extension)
//! and a configuration from its seed.
//!
//! Checked against a model of what the allocator counts (live allocations,
//! frees waiting for their frame, ring chunks): no panic; a rejected request
//! gets exactly the error its flaw names, and an exhausted one an error the
//! situation explains (an injected failure of its kind, a full heap or budget, the object
//! limit, a lost device), never out of memory while a candidate heap has room
//! for a whole new block, nor before the driver refused one of its calls
//! (a heap's remembered refusal never skips a request's last attempt);
//! `end_frame` refuses (`TooManyFramesInFlight`, sealing nothing) exactly
//! when a live ring's chunk tracks 64 frames sealed since it began;
//! a failed call changes no figure of `stats()`; a
//! request for existing memory only calls no `vkAllocateMemory`, makes no
//! memory object, fails only with `NoRoomInExistingMemory` (when no flaw of
//! its own is refused first) and succeeds only in a block that existed
//! before; placements honour alignment and `min_alignment`, the non-coherent
//! atom and `bufferImageGranularity`, never overlap and keep
//! `Config::debug_margin` free bytes after each allocation in a block (with
//! corruption detection, no margin is ever found damaged; with debug fills,
//! each new allocation and destination in host-visible memory reads
//! `0xDC`, as the host and the GPU see it, and no freed memory is ever
//! found written), including ranges
//! freed after a frame that was not collected yet; `stats()`, the device, the
//! memory map, the JSON dump (its figures per heap and memory type too)
//! and the SVG agree with the model, and a memory callback, set at the
//! start or at a random step and replaced at times, has heard exactly the
//! device's memory objects made and not freed (and at the end, after the
//! allocator's drop, every one freed); host-visible
//! bytes are not clobbered, and a copy's bytes reach the GPU (flushed) and
//! come back, as a GPU write does through a copy out (invalidated); a plan
//! moves only within a memory type, out of blocks that held nothing but
//! listed allocations and queued frees, into blocks that held something and
//! that no plan is emptying, within its limits, and a pool's allocation
//! within its pool, never emptying it below `min_blocks`. A custom pool's
//! requests take its memory type alone, dedicated memory only when required;
//! its figures (`pool_stats`) agree with the model and its description
//! (`min_blocks` to `max_blocks` blocks, of its fixed size), `trim` keeps its
//! `min_blocks`, and destroying it is refused with the exact count while it
//! holds anything, else releases its blocks. At the end nothing leaks,
//! whether the pools are destroyed or left to the allocator's drop.

use std::collections::{HashSet, VecDeque};

use ash::vk;
use gpu_alloc_types::MemoryPropertyFlags as Props;
use vk_suballoc::device::fake::{FakeCounters, FakeDevice, FakeLayout};
use vk_suballoc::device::DeviceError;
use vk_suballoc::{
    Allocation, Config, Pool, PoolDesc, Request, ResourceKind, RingAllocation, UploadRing, Usage,
};

use super::seeded_rng::Rng;
use super::{allocator_with, FakeAllocator};

#[path = "api_walk/allocations.rs"]
mod allocations;
#[path = "api_walk/checks.rs"]
mod checks;
#[path = "api_walk/copies.rs"]
mod copies;
#[path = "api_walk/defragment.rs"]
mod defragment;
#[path = "api_walk/expect.rs"]
mod expect;
#[path = "api_walk/frames.rs"]
mod frames;
#[path = "api_walk/memory_callback.rs"]
mod memory_callback;
#[path = "api_walk/pool_requests.rs"]
mod pool_requests;
#[path = "api_walk/pools.rs"]
mod pools;
#[path = "api_walk/rings.rs"]
mod rings;
#[path = "api_walk/variant.rs"]
mod variant;

use memory_callback::Heard;
use variant::variant;

const MIB: u64 = 1 << 20;
const NAMES: [&str; 3] = ["walk-mesh", "walk-texture", "walk-staging"];
const KINDS: [ResourceKind; 4] = [
    ResourceKind::Buffer,
    ResourceKind::LinearImage,
    ResourceKind::OptimalImage,
    ResourceKind::Unknown,
];
/// Usages an engine asks for; `DEVICE_ADDRESS` is added to some.
const USAGES: [Usage; 10] = [
    Usage::DEVICE_LOCAL,
    Usage::UPLOAD,
    Usage::UPLOAD.union(Usage::DEVICE_LOCAL),
    Usage::UPLOAD.union(Usage::ALLOW_TRANSFER_INSTEAD),
    Usage::READBACK,
    Usage::READBACK.union(Usage::UPLOAD),
    Usage::TRANSIENT,
    Usage::TRANSIENT.union(Usage::DEVICE_LOCAL),
    Usage::DEVICE_LOCAL.union(Usage::PREFER_HOST),
    Usage::UPLOAD
        .union(Usage::ALLOW_TRANSFER_INSTEAD)
        .union(Usage::PREFER_HOST),
];

/// Where an allocation lies: its memory object, first byte and kind.
#[derive(Clone, Copy, Debug)]
struct Place {
    memory: vk::DeviceMemory,
    offset: u64,
    kind: ResourceKind,
}

/// An allocation the allocator counts in `stats()`: live, freed after a
/// frame not collected yet, or an upload-ring chunk (whose place the walk
/// learns from the ring allocations in it).
#[derive(Clone, Copy, Debug)]
struct Counted {
    memory_type: u32,
    size: u64,
    dedicated: bool,
    place: Option<Place>,
    deferred: bool,
    /// The custom pool it lives in, if any.
    pool: Option<Pool>,
}

/// A live allocation of the walk.
struct Live {
    allocation: Allocation,
    /// The requirements it was requested with: those of its resource,
    /// which a defragmentation move recreates, with its `min_alignment`
    /// folded into the alignment (as a movable carries it).
    requirements: vk::MemoryRequirements,
    kind: ResourceKind,
    name: Option<&'static str>,
    /// The fake buffer or image it was made for (dedicated target).
    resource: Option<u64>,
    /// The byte written at both ends, for host-visible memory.
    tag: Option<u8>,
    /// The custom pool it was requested from, if any.
    pool: Option<Pool>,
}

impl Live {
    fn counted(&self) -> Counted {
        let a = &self.allocation;
        Counted {
            memory_type: a.memory_type(),
            size: a.size(),
            dedicated: a.is_dedicated(),
            place: Some(Place {
                memory: a.memory(),
                offset: a.offset(),
                kind: self.kind,
            }),
            deferred: false,
            pool: self.pool,
        }
    }
}

/// Another allocator's allocation, which the walk's allocator must refuse
/// to plan a move of, and its custom pool, which the walk's allocator must
/// refuse to allocate from, read or destroy.
struct Foreign {
    allocator: FakeAllocator,
    device: FakeDevice,
    allocation: Allocation,
    requirements: vk::MemoryRequirements,
    pool: Pool,
}

impl Foreign {
    fn new() -> Self {
        let (allocator, device) = allocator_with(FakeLayout::discrete(), Config::default());
        let requirements = super::requirements(256, 256);
        let request = Request::new(requirements, Usage::DEVICE_LOCAL, ResourceKind::Buffer);
        let allocation = allocator.allocate(&request).unwrap();
        let pool = allocator.create_pool(&PoolDesc::new(1)).unwrap();
        Self {
            allocator,
            device,
            allocation,
            requirements,
            pool,
        }
    }

    /// Frees the allocation and destroys the pool; the device must be clean.
    fn finish(self) {
        super::free(&self.allocator, self.allocation);
        assert_eq!(self.allocator.destroy_pool(self.pool), Ok(()));
        super::finish(self.allocator, &self.device);
    }
}

/// An upload ring and its chunks, oldest first; only the first chunk's
/// buffer can be unknown (growth hands out the new chunk at once).
struct Ring {
    ring: UploadRing,
    usage: Usage,
    /// Its buffers' usage.
    buffer_usage: vk::BufferUsageFlags,
    grow: bool,
    chunk_size: u64,
    /// Its chunks' least alignment in their memory objects.
    min_alignment: u64,
    /// Whether its buffers take their device address.
    device_address: bool,
    chunks: Vec<(Option<vk::Buffer>, Counted)>,
    /// The allocator frame each chunk began in: a chunk tracks the frames
    /// sealed since then (`end_frame` is refused when one tracks 64).
    chunk_frames: Vec<u64>,
}

/// The injected failures that fired during a call, by the error each
/// makes the driver return: only the matching one explains an error.
#[derive(Clone, Copy, Debug, Default)]
struct Fired {
    /// A `vkAllocateMemory` failing with `VK_ERROR_OUT_OF_DEVICE_MEMORY`.
    device_memory: bool,
    /// With `VK_ERROR_OUT_OF_HOST_MEMORY`.
    host_memory: bool,
    /// With `VK_ERROR_TOO_MANY_OBJECTS`.
    objects: bool,
    /// A `vkMapMemory` failing (`VK_ERROR_MEMORY_MAP_FAILED`).
    map: bool,
}

impl Fired {
    /// Whether any fired.
    fn any(self) -> bool {
        self.device_memory || self.host_memory || self.objects || self.map
    }
}

/// What a frame's submission signals.
#[derive(Clone, Copy, Debug)]
enum Signal {
    Fence(vk::Fence),
    Timeline(u64),
}

/// A frame: its signal once sealed, and what was freed in it.
#[derive(Default)]
struct Frame {
    signal: Option<Signal>,
    signalled: bool,
    freed: Vec<Counted>,
    /// Deferred items: frees, resource destructions, ring chunks.
    items: usize,
}

/// One walk: the allocator, its fake device, and the model of both.
struct Walk {
    test: String,
    step: u64,
    rng: Rng,
    allocator: FakeAllocator,
    device: FakeDevice,
    layout: FakeLayout,
    config: Config,
    /// Each memory type's preferred block size, from the memory map.
    preferred: Vec<u64>,
    /// Each heap's cap (`FakeDevice::cap_heap`), if any.
    caps: Vec<Option<u64>>,
    live: Vec<Live>,
    rings: Vec<Ring>,
    /// Destroyed rings, whose handles are stale.
    dead_rings: Vec<UploadRing>,
    /// Ring allocations whose frame is not collected.
    ring_live: Vec<RingAllocation>,
    /// Some ring allocations whose frame was collected or ring destroyed.
    ring_stale: Vec<RingAllocation>,
    /// The frame that frees go to now, and the sealed ones not collected.
    current: Frame,
    sealed: VecDeque<Frame>,
    next_frame: u64,
    /// One timeline semaphore for every frame sealed with a value, and the
    /// value "the GPU" has reached.
    timeline: vk::Semaphore,
    timeline_value: u64,
    lost: bool,
    lose_at: Option<u64>,
    /// The `vkAllocateMemory` calls (1-based) that fail, with the error
    /// each fails with, and the `vkMapMemory` calls that fail.
    alloc_faults: Vec<(u64, DeviceError)>,
    map_faults: Vec<u64>,
    /// The last byte written at both ends of a host-visible allocation.
    next_tag: u8,
    /// Blocks that defragmentation plans are emptying: they take no
    /// destination until they hold nothing.
    retiring: HashSet<vk::DeviceMemory>,
    foreign: Foreign,
    defragmented: defragment::Defragmented,
    /// The live custom pools, and the allocator's table of them: each
    /// slot's pool, which a new pool takes when free.
    pools: Vec<pools::WalkPool>,
    pool_slots: Vec<Option<Pool>>,
    /// Some destroyed pools, whose handles are stale.
    dead_pools: Vec<Pool>,
    /// Pools made over the walk, for their names.
    pools_made: u64,
    pooled: pools::Pooled,
    /// What the memory callback heard, once one is set (at the start, or
    /// at a random step), and the step at which one is set or replaced.
    heard: Option<Heard>,
    listen_at: u64,
    /// Frames `end_frame` refused (`TooManyFramesInFlight`).
    frames_refused: u64,
}

fn is_host_visible(props: Props) -> bool {
    props.contains(Props::HOST_VISIBLE)
}

impl Walk {
    /// Whether an allocation of `usage` in a type of `props` is mapped:
    /// in host-visible memory, but with `Config::strict_host_access` only
    /// for a usage that needs host access (the walk requires no flags).
    fn is_mapped(&self, props: Props, usage: Usage) -> bool {
        is_host_visible(props) && (!self.config.strict_host_access || usage.needs_host_access())
    }
}

fn is_non_coherent(props: Props) -> bool {
    props.contains(Props::HOST_VISIBLE) && !props.contains(Props::HOST_COHERENT)
}

fn overlaps(a: (u64, u64), b: (u64, u64)) -> bool {
    a.0 < b.0 + b.1 && b.0 < a.0 + a.1
}

impl Walk {
    fn new(test: &str, base: FakeLayout, steps: u64) -> Self {
        let mut rng = Rng::from_env(test);
        // The four walks of one seed draw different variants.
        rng.0 ^= test
            .bytes()
            .fold(0, |h, b| (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3));
        let (layout, config) = variant(&mut rng, base);
        let lose_at = (rng.below(4) == 0).then(|| steps / 2 + rng.below(steps / 2));
        println!(
            "{test}: {} heaps {:?}, {} objects, granularity {}, budget {}, AMD device-coherent memory {}; {config:?}; device lost at {lose_at:?}",
            layout.name,
            layout.memory_heaps.iter().map(|h| h.size).collect::<Vec<_>>(),
            layout.max_memory_allocation_count,
            layout.buffer_image_granularity,
            layout.memory_budget,
            layout.amd_device_coherent_memory,
        );
        let (allocator, device) = allocator_with(layout.clone(), config);
        let preferred = allocator
            .memory_map()
            .memory_types
            .iter()
            .map(|t| t.preferred_block_size)
            .collect();
        let timeline = device.create_timeline_semaphore();
        // Drawn from a copy of the generator: the walks' other draws stay.
        let listen_at = Rng(rng.0 ^ 0x006c_6973).below(2 * steps);
        Self {
            test: test.to_owned(),
            step: 0,
            rng,
            allocator,
            device,
            caps: vec![None; layout.memory_heaps.len()],
            layout,
            config,
            preferred,
            live: Vec::new(),
            rings: Vec::new(),
            dead_rings: Vec::new(),
            ring_live: Vec::new(),
            ring_stale: Vec::new(),
            current: Frame::default(),
            sealed: VecDeque::new(),
            next_frame: 0,
            timeline,
            timeline_value: 0,
            lost: false,
            lose_at,
            alloc_faults: Vec::new(),
            map_faults: Vec::new(),
            next_tag: 0,
            retiring: HashSet::new(),
            foreign: Foreign::new(),
            defragmented: defragment::Defragmented::default(),
            pools: Vec::new(),
            pool_slots: Vec::new(),
            dead_pools: Vec::new(),
            pools_made: 0,
            pooled: pools::Pooled::default(),
            heard: None,
            listen_at,
            frames_refused: 0,
        }
    }

    fn ctx(&self) -> String {
        format!("{} step {}", self.test, self.step)
    }

    fn run(mut self, steps: u64) {
        // On half the walks set at the start and replaced at a random
        // step (the replay to both callbacks), on the others first set at a
        // random step.
        if self.listen_at >= steps {
            self.listen();
        }
        for step in 0..steps {
            self.step = step;
            if self.listen_at % steps == step {
                self.listen();
            }
            if self.lose_at == Some(step) {
                self.device.lose_device();
                self.lost = true;
            }
            match self.rng.below(100) {
                0..=34 if self.live.len() < 150 => self.allocate(),
                0..=59 => self.free(),
                60..=66 => self.end_frame(),
                67..=72 => self.signal(),
                73..=78 => self.collect(),
                79..=86 => self.ring_op(),
                87..=90 => self.inject(),
                91..=93 => {
                    self.host_access();
                    self.copy_access();
                }
                94 => self.trim(),
                95..=96 => self.defragment(),
                97 => self.pool_op(),
                _ => self.inspect(),
            }
            self.forget_emptied_blocks();
            if step % 128 == 0 {
                self.check_all();
            }
        }
        self.finish();
    }

    /// Everything the allocator counts, as the model sees it.
    fn counted(&self) -> impl Iterator<Item = Counted> + '_ {
        let frames = std::iter::once(&self.current).chain(&self.sealed);
        self.live
            .iter()
            .map(Live::counted)
            .chain(frames.flat_map(|f| f.freed.iter().copied()))
            .chain(self.rings.iter().flat_map(|r| r.chunks.iter().map(|c| c.1)))
    }

    /// Panics when `[offset, offset + size)` of `place.memory` overlaps
    /// anything the allocator counts: above all, a range freed after a
    /// frame that was not collected yet.
    fn assert_disjoint(&self, place: Place, size: u64, what: &str) {
        for c in self.counted() {
            let Some(p) = c.place else { continue };
            if p.memory == place.memory && overlaps((p.offset, c.size), (place.offset, size)) {
                panic!(
                    "{}: {what} at {}+{size} overlaps {} at {}+{}{}",
                    self.ctx(),
                    place.offset,
                    if c.deferred {
                        "a range freed after a frame not collected yet"
                    } else {
                        "a live allocation"
                    },
                    p.offset,
                    c.size,
                    if c.deferred {
                        " (reused too early)"
                    } else {
                        ""
                    },
                );
            }
        }
    }

    /// The injected failures that fired since `before`; forgets the faults
    /// whose call has passed.
    fn faults_fired(&mut self, before: &FakeCounters) -> Fired {
        let after = self.device.counters();
        let mut fired = Fired::default();
        for &(at, error) in &self.alloc_faults {
            if before.allocate_calls < at && at <= after.allocate_calls {
                match error {
                    DeviceError::OutOfDeviceMemory => fired.device_memory = true,
                    DeviceError::OutOfHostMemory => fired.host_memory = true,
                    DeviceError::TooManyObjects => fired.objects = true,
                    other => unreachable!("the walk injects no {other:?}"),
                }
            }
        }
        fired.map = (self.map_faults.iter()).any(|&at| before.maps < at && at <= after.maps);
        self.alloc_faults
            .retain(|&(at, _)| at > after.allocate_calls);
        self.map_faults.retain(|&at| at > after.maps);
        fired
    }
}

fn walk(test: &str, layout: FakeLayout) {
    const STEPS: u64 = 4000;
    Walk::new(test, layout, STEPS).run(STEPS);
}

#[test]
fn api_walk_discrete() {
    walk("api_walk_discrete", FakeLayout::discrete());
}

#[test]
fn api_walk_integrated() {
    walk("api_walk_integrated", FakeLayout::integrated());
}

#[test]
fn api_walk_mobile() {
    walk("api_walk_mobile", FakeLayout::mobile());
}

#[test]
fn api_walk_lavapipe() {
    walk("api_walk_lavapipe", FakeLayout::lavapipe());
}

#[test]
fn api_walk_amd() {
    walk("api_walk_amd", FakeLayout::amd());
}

#[test]
fn api_walk_rebar() {
    walk("api_walk_rebar", FakeLayout::rebar());
}

#[test]
fn api_walk_intel_arc() {
    walk("api_walk_intel_arc", FakeLayout::intel_arc());
}

#[test]
fn api_walk_apple() {
    walk("api_walk_apple", FakeLayout::apple());
}

#[test]
fn api_walk_mali() {
    walk("api_walk_mali", FakeLayout::mali());
}
