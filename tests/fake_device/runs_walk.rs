//! A seeded random walk aimed at run slots and what surrounds them: small
//! buffers of many sizes and alignments (`min_alignment` too) beside
//! optimal and linear images, resources of unknown kind and larger
//! buffers, through `allocate`, `allocate_mut` and `allocate_many`, in the
//! default pools and in a custom pool (fixed block sizes, some not a
//! power of two, `min_blocks`, `min_alignment`); frees now (`free`,
//! `free_mut`) and after frames; defragmentation plans carried out or
//! given up; on every fake layout, with `bufferImageGranularity` and
//! `nonCoherentAtomSize` redrawn at times (an 8 KiB atom, past Vulkan's
//! limit, among them), debug margins, corruption detection, debug fills,
//! small `small_buffer_limit`s, tiny block slot tables and every empty
//! block policy.
//!
//! Every allocation is checked for its alignment (the atom too in
//! non-coherent memory); a request naming the pool fails exactly when the
//! pool's type does not suit its usage (`NoSuitableMemoryType`) or it
//! passes the pool's fixed block size (`TooLargeForPool`), every other
//! request never; and after every step: no two live allocations of
//! a block overlap or come closer than the margin, a linear and an optimal
//! resource (or one of unknown kind and any other) share no granularity
//! page, every host-visible allocation holds the bytes written for it in
//! the host's view and the GPU's, `check_corruption` finds nothing, no
//! corruption is counted, the fake device saw no breach of a Vulkan rule,
//! `stats()` counts the live allocations and their bytes, and the memory
//! map's ranges tile each block. In non-coherent memory, an invalidate of
//! one allocation keeps every other allocation's unflushed host writes,
//! and a flush of one keeps what the GPU wrote for every other (the atoms
//! an allocation's ranges widen to hold no other allocation's byte).
//! Seeded (`VK_SUBALLOC_SEED`, printed); `RUNS_WALK_SEEDS` walks more
//! seeds from it.

use ash::vk;
use vk_suballoc::device::fake::{FakeDevice, FakeLayout};
use vk_suballoc::{
    Allocation, AllocationDesc, Config, DefragmentationLimits, Error, Movable, Pool, PoolDesc,
    Request, ResourceKind, Usage,
};

use super::seeded_rng::Rng;
use super::{allocator_with, requirements, FakeAllocator};

#[path = "runs_walk/checks.rs"]
mod checks;

/// Steps of one walk.
const STEPS: usize = 300;

/// A live allocation, what it was asked for and the byte it holds.
struct Live {
    allocation: Allocation,
    /// The byte every byte of it holds (host-visible memory only).
    tag: u8,
    /// The alignment it was placed with: its requirements' and its
    /// `min_alignment`, the larger.
    align: u64,
    kind: ResourceKind,
    host_visible: bool,
    non_coherent: bool,
}

struct Walk {
    rng: Rng,
    allocator: FakeAllocator,
    device: FakeDevice,
    live: Vec<Live>,
    margin: u64,
    atom: u64,
    granularity: u64,
    /// The custom pool, and its fixed block size (0: blocks that grow).
    pool: Option<(Pool, u64)>,
    /// Fences of frames ended and not yet signalled.
    frames: Vec<vk::Fence>,
    /// Whether a free waits in the frame queue: `stats()` counts it.
    pending: bool,
    next_tag: u8,
    context: String,
}

/// How the custom pool must refuse a request (`Walk::pool_refusal`).
enum PoolRefusal {
    /// Its memory type does not suit the request's usage: this error.
    Unsuitable(Error),
    /// `size` bytes (the request's and its margin) do not fit a block of
    /// `block_size`.
    TooLarge { size: u64, block_size: u64 },
}

impl PoolRefusal {
    fn is(&self, error: &Error) -> bool {
        match *self {
            Self::Unsuitable(want) => *error == want,
            // The bytes it takes in a block: its size and margin, rounded
            // up (by how much turns on the pool's placement: not modelled).
            Self::TooLarge { size, block_size } => matches!(
                *error,
                Error::TooLargeForPool { size: placed, block_size: b }
                    if b == block_size && placed >= size && placed > block_size
            ),
        }
    }
}

/// One of the fake layouts.
fn layout(i: u64) -> FakeLayout {
    match i {
        0 => FakeLayout::discrete(),
        1 => FakeLayout::integrated(),
        2 => FakeLayout::mobile(),
        3 => FakeLayout::mali(),
        4 => FakeLayout::apple(),
        5 => FakeLayout::amd(),
        6 => FakeLayout::rebar(),
        _ => FakeLayout::lavapipe(),
    }
}

impl Walk {
    /// A new byte to tag an allocation with: never 0 or a debug fill's.
    fn tag(&mut self) -> u8 {
        loop {
            self.next_tag = self.next_tag.wrapping_add(1);
            if ![0, 0xDC, 0xEF].contains(&self.next_tag) {
                return self.next_tag;
            }
        }
    }

    /// A request of a random kind, size, alignment and usage, named at
    /// times, in the custom pool at times.
    fn draw_request(&mut self) -> Request<'static> {
        let kind = match self.rng.below(20) {
            0..=13 => ResourceKind::Buffer,
            14 | 15 => ResourceKind::OptimalImage,
            16 => ResourceKind::LinearImage,
            17 => ResourceKind::Unknown,
            _ => ResourceKind::Buffer,
        };
        let size = match self.rng.below(10) {
            0..=6 => 1 + self.rng.below(600),
            7 | 8 => 1 + self.rng.below(40_000),
            _ => 1 + self.rng.below(300_000),
        };
        let usage =
            [Usage::DEVICE_LOCAL, Usage::UPLOAD, Usage::READBACK][self.rng.below(3) as usize];
        let mut desc = AllocationDesc::new(usage);
        if self.rng.below(8) == 0 {
            desc = desc.min_alignment(1 << self.rng.below(13));
        }
        if self.rng.below(4) == 0 {
            desc = desc.name("walk");
        }
        if let Some((pool, _)) = self.pool.filter(|_| self.rng.below(3) == 0) {
            desc = desc.pool(pool);
        }
        let alignment = 1 << self.rng.below(14);
        Request::with_desc(requirements(size, alignment), kind, desc)
    }

    fn allocate(&mut self) {
        let request = self.draw_request();
        let made = match self.rng.below(3) {
            0 => self.allocator.allocate(&request),
            1 => self.allocator.allocate_mut(&request),
            _ => self
                .allocator
                .allocate_many(&[request])
                .map(|mut made| made.pop().unwrap()),
        };
        let allocation = match (made, self.pool_refusal(&request)) {
            (Ok(allocation), None) => allocation,
            // The pool's fixed block size, or its memory type's
            // properties, may not suit the request: exactly then refused.
            (Err(error), Some(refusal)) if refusal.is(&error) => return,
            (made, _) => panic!("{}: {request:?}: {:?}", self.context, made.map(|_| ())),
        };
        if self.rng.below(5) == 0 {
            self.allocator
                .set_name(&allocation, Some("renamed"))
                .unwrap();
        }
        let props = self
            .allocator
            .memory_type_properties(allocation.memory_type())
            .unwrap();
        let host_visible = props.contains(vk::MemoryPropertyFlags::HOST_VISIBLE);
        let non_coherent = host_visible && !props.contains(vk::MemoryPropertyFlags::HOST_COHERENT);
        let align = request
            .requirements
            .alignment
            .max(request.desc.min_alignment);
        let offset = allocation.offset();
        assert_eq!(offset % align, 0, "{}: alignment {align}", self.context);
        if non_coherent {
            assert_eq!(offset % self.atom, 0, "{}: atom", self.context);
        }
        let mut live = Live {
            allocation,
            tag: 0,
            align,
            kind: request.kind,
            host_visible,
            non_coherent,
        };
        if host_visible {
            if self.allocator.config().debug_fill {
                let bytes = self.allocator.mapped_slice(&live.allocation).unwrap();
                assert!(
                    bytes.iter().all(|&b| b == 0xDC),
                    "{}: new fill",
                    self.context
                );
            }
            live.tag = self.tag();
            let slice = self.allocator.mapped_slice_mut(&mut live.allocation);
            slice.unwrap().fill(live.tag);
            self.allocator.flush(&live.allocation, ..).unwrap();
        }
        self.live.push(live);
    }

    /// The refusal of a request naming the pool that the pool must
    /// refuse: a memory type that is not host-visible for a usage that
    /// needs host access, else a request that with its margin passes the
    /// pool's fixed block size (a smaller one, however rounded, takes a
    /// whole block).
    fn pool_refusal(&self, request: &Request<'_>) -> Option<PoolRefusal> {
        let (pool, block_size) = self.pool.filter(|_| request.desc.pool.is_some())?;
        let memory_type = pool.memory_type();
        let props = self.allocator.memory_type_properties(memory_type).unwrap();
        let usage = request.desc.usage;
        if usage.needs_host_access() && !props.contains(vk::MemoryPropertyFlags::HOST_VISIBLE) {
            return Some(PoolRefusal::Unsuitable(Error::NoSuitableMemoryType {
                memory_type_bits: 1 << memory_type,
                usage,
            }));
        }
        let size = request.requirements.size;
        (block_size != 0 && size + self.margin > block_size).then_some(PoolRefusal::TooLarge {
            size: size + self.margin,
            block_size,
        })
    }

    fn free(&mut self) {
        if self.live.is_empty() {
            return;
        }
        let i = self.rng.below(self.live.len() as u64) as usize;
        let allocation = self.live.swap_remove(i).allocation;
        match self.rng.below(3) {
            // SAFETY: the fake device runs no GPU work.
            0 => unsafe { self.allocator.free(allocation) }.unwrap(),
            // SAFETY: as above.
            1 => unsafe { self.allocator.free_mut(allocation) }.unwrap(),
            _ => {
                self.allocator.free_after_frame(allocation).unwrap();
                self.pending = true;
            }
        }
    }

    /// Ends the frame being recorded; signals every frame and collects
    /// them when `settle` (then no free waits), or at random.
    fn end_frame(&mut self, settle: bool) {
        let fence = self.device.create_fence();
        // SAFETY: a fake fence, signalled below or by a later call.
        unsafe { self.allocator.end_frame(fence) }.unwrap();
        self.frames.push(fence);
        if settle || self.rng.below(2) == 0 || self.frames.len() > 2 {
            for fence in self.frames.drain(..) {
                self.device.signal_fence(fence);
            }
            self.allocator.collect().unwrap();
            self.pending = !settle && self.pending;
        }
    }

    /// A plan over a random subset of the live allocations (their own
    /// requirements, kind and alignment), each move carried out (its bytes
    /// copied, its source freed) or given up.
    fn defragment(&mut self) {
        let listed: Vec<usize> = (0..self.live.len())
            .filter(|_| self.rng.below(3) != 0)
            .collect();
        let movables: Vec<Movable<'_>> = listed
            .iter()
            .map(|&i| {
                let live = &self.live[i];
                let a = &live.allocation;
                let requirements = vk::MemoryRequirements {
                    size: a.size(),
                    alignment: live.align,
                    memory_type_bits: 1 << a.memory_type(),
                };
                Movable::new(a, requirements, live.kind)
            })
            .collect();
        let limits = DefragmentationLimits::default()
            .max_used_percent(self.rng.below(101) as u8)
            .split_blocks(self.rng.below(2) == 0)
            .compact_blocks(self.rng.below(2) == 0);
        let plan = self
            .allocator
            .plan_defragmentation(&movables, &limits)
            .unwrap();
        drop(movables);
        for planned in plan.moves {
            let i = listed[planned.movable];
            if self.rng.below(5) == 0 {
                self.allocator.give_up_move(planned).unwrap();
                self.pending = true;
                continue;
            }
            let mut destination = planned.destination;
            let live = &self.live[i];
            assert_eq!(destination.offset() % live.align, 0, "{}", self.context);
            if live.host_visible {
                let slice = self.allocator.mapped_slice_mut(&mut destination);
                slice.unwrap().fill(live.tag);
                self.allocator.flush(&destination, ..).unwrap();
            }
            let source = std::mem::replace(&mut self.live[i].allocation, destination);
            // SAFETY: the fake device runs no GPU work.
            unsafe { self.allocator.free(source) }.unwrap();
        }
    }

    fn step(&mut self) {
        match self.rng.below(20) {
            0..=8 => self.allocate(),
            9..=14 => self.free(),
            15 => self.end_frame(false),
            16 => self.neighbours(),
            17 => self.defragment(),
            _ => self.check_bytes(),
        }
        if self.rng.below(4) == 0 {
            self.end_frame(true);
        }
        self.check_placements();
        self.check_reports();
    }

    /// Checks the bytes, frees everything and destroys the pool.
    fn finish(mut self) {
        self.check_bytes();
        for live in self.live.drain(..) {
            // SAFETY: the fake device runs no GPU work.
            unsafe { self.allocator.free(live.allocation) }.unwrap();
        }
        self.end_frame(true);
        if let Some((pool, _)) = self.pool {
            self.allocator.destroy_pool(pool).unwrap();
        }
        assert_eq!(self.allocator.corruptions_detected(), 0, "{}", self.context);
        super::finish(self.allocator, &self.device);
    }
}

/// One walk, its layout, configuration and pool drawn from `seed`.
fn walk(seed: u64) {
    let mut rng = Rng(seed);
    let mut layout = layout(rng.below(8));
    if rng.below(3) == 0 {
        layout = layout.with_granularity([1, 64, 1024, 4096, 65536][rng.below(5) as usize]);
    }
    if rng.below(6) == 0 {
        layout.non_coherent_atom_size = [4, 128, 8192][rng.below(3) as usize];
    }
    let config = Config {
        debug_margin: [0, 4, 16, 60, 256][rng.below(5) as usize],
        detect_corruption: rng.below(2) == 0,
        debug_fill: rng.below(2) == 0,
        small_buffer_limit: [16 << 10, 1024, 32 << 10, 64 << 10, 100][rng.below(5) as usize],
        large_heap_block_size: [1 << 20, 4 << 20, 16 << 20][rng.below(3) as usize],
        max_padded_granularity: [1024, 4096, 65536][rng.below(3) as usize],
        initial_block_slots: [1, 4, 1024][rng.below(3) as usize],
        empty_block_reserve: [0.0, 1.0, 3.0][rng.below(3) as usize],
        empty_block_frames: [0, 1, 120][rng.below(3) as usize],
        ..Config::default()
    };
    let context = format!("seed {seed}, {} layout, {config:?}", layout.name);
    let (atom, granularity) = (
        layout.non_coherent_atom_size,
        layout.buffer_image_granularity,
    );
    let types = layout.memory_types.len() as u64;
    let (allocator, device) = allocator_with(layout, config);
    // Every walk has its pool (drawn in one of two, it was made in fewer
    // than one walk in four: refused on lazily allocated types).
    let pool = Some(()).map(|()| {
        let mut desc = PoolDesc {
            block_size: [0, 1 << 20, 2 << 20, (3 << 20) + 4096][rng.below(4) as usize],
            min_blocks: rng.below(2) as u32,
            min_alignment: [0, 0, 64, 512][rng.below(4) as usize],
            ..PoolDesc::new(rng.below(types) as u32)
        };
        // AMD's device-coherent types, without their feature, are not the
        // allocator's to use: refused, then the pool is made in type 0.
        let props = allocator.memory_type_properties(desc.memory_type);
        if props
            .unwrap()
            .contains(vk::MemoryPropertyFlags::DEVICE_COHERENT_AMD)
        {
            let refused = allocator.create_pool(&desc).err();
            assert_eq!(
                refused,
                Some(Error::InvalidConfig(
                    "PoolDesc::memory_type is not a memory type this allocator uses"
                )),
                "seed {seed}: {desc:?}"
            );
            desc.memory_type = 0;
        }
        // A lazily allocated type takes neither a block size nor
        // `min_blocks` (its requests all take dedicated memory): refused,
        // then made without them.
        let props = allocator.memory_type_properties(desc.memory_type);
        if props
            .unwrap()
            .contains(vk::MemoryPropertyFlags::LAZILY_ALLOCATED)
            && (desc.block_size, desc.min_blocks) != (0, 0)
        {
            let refused = allocator.create_pool(&desc).err();
            assert_eq!(
                refused,
                Some(Error::InvalidConfig(
                    "PoolDesc::min_blocks and block_size must be 0 for a lazily allocated memory type"
                )),
                "seed {seed}: {desc:?}"
            );
            (desc.block_size, desc.min_blocks) = (0, 0);
        }
        let made = allocator.create_pool(&desc);
        let pool = made.unwrap_or_else(|error| panic!("seed {seed}: {desc:?}: {error:?}"));
        (pool, desc.block_size)
    });
    let mut walk = Walk {
        rng,
        allocator,
        device,
        live: Vec::new(),
        margin: config.debug_margin,
        atom,
        granularity,
        pool,
        frames: Vec::new(),
        pending: false,
        next_tag: 0,
        context: String::new(),
    };
    for step in 0..STEPS {
        walk.context = format!("{context}, step {step}");
        walk.step();
    }
    walk.finish();
}

/// The walk above, from `VK_SUBALLOC_SEED` (and the seeds after it, as
/// many as `RUNS_WALK_SEEDS` says: 3 by default).
#[test]
fn run_slots_beside_everything_keep_their_bytes_and_neighbours() {
    let seed = Rng::seed("runs walk");
    let seeds: u64 = std::env::var("RUNS_WALK_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(3);
    for i in 0..seeds {
        walk(seed.wrapping_add(i));
    }
}
