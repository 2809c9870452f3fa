//! Seeded allocation traces, replayed identically through every allocator.
//!
//! A trace is a list of operations grouped in *segments*: runs of allocations
//! or runs of frees. Segments are what the replay times (one clock read per
//! segment, not per operation), so the traces are built from batches: a
//! level-streaming burst, a frame's transient buffers, a churn batch.
//!
//! Every allocation names a resource (a buffer of some size and usage, or an
//! optimal-tiling RGBA8 image of some extent) and carries the
//! `VkMemoryRequirements` the driver reports for it, queried once per
//! distinct resource ([`RequirementSource`]). Every allocator gets exactly
//! those requirements. (The driver queries and the create infos are in
//! `trace/requirements.rs`.)

use std::ops::Range;

use ash::vk;

mod requirements;

pub use requirements::{buffer_info, image_info, RequirementSource};

/// The traces of issue 5.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TraceKind {
    /// Log-uniform 4 KiB..32 MiB buffers in bursts, random lifetimes, peak
    /// live around 1 GiB.
    Streaming,
    /// 50..200 transient 256 B..256 KiB buffers per frame freed 2..3 frames
    /// later, plus long-lived buffers replaced now and then.
    FrameLoop,
    /// 64 B..64 KiB buffers, about 8192 live, freed in random order.
    SmallChurn,
    /// Buffers and optimal-tiling images interleaved, random lifetimes: the
    /// `bufferImageGranularity` case.
    Mixed,
}

impl TraceKind {
    pub const ALL: [Self; 4] = [
        Self::Streaming,
        Self::FrameLoop,
        Self::SmallChurn,
        Self::Mixed,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Self::Streaming => "streaming",
            Self::FrameLoop => "frame-loop",
            Self::SmallChurn => "small-churn",
            Self::Mixed => "mixed",
        }
    }
}

/// Linear (buffer) or optimal-tiling (image) resource.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Kind {
    Buffer,
    Image,
}

/// Where the memory should live.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MemUse {
    /// GPU only.
    DeviceLocal,
    /// Written by the host every frame, read by the GPU.
    Upload,
}

/// The resource a request is for (what `--real-resources` creates).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Resource {
    Buffer {
        size: u64,
        usage: vk::BufferUsageFlags,
    },
    Image {
        width: u32,
        height: u32,
    },
}

/// One allocation request: the same for every allocator.
#[derive(Clone, Copy, Debug)]
pub struct Req {
    pub requirements: vk::MemoryRequirements,
    pub kind: Kind,
    pub usage: MemUse,
    pub resource: Resource,
}

#[cfg(test)]
impl Req {
    /// A device-local request of `size` bytes aligned to `alignment` in
    /// memory type 0, for the bench's unit tests: a storage buffer, or a
    /// 1×1 image (no test reads the resource's figures).
    pub fn device_local(size: u64, alignment: u64, kind: Kind) -> Self {
        Self {
            requirements: vk::MemoryRequirements {
                size,
                alignment,
                memory_type_bits: 1,
            },
            kind,
            usage: MemUse::DeviceLocal,
            resource: match kind {
                Kind::Buffer => Resource::Buffer {
                    size,
                    usage: vk::BufferUsageFlags::STORAGE_BUFFER,
                },
                Kind::Image => Resource::Image {
                    width: 1,
                    height: 1,
                },
            },
        }
    }
}

/// One operation: allocate request `req` into `slot`, or free `slot`.
#[derive(Clone, Copy, Debug)]
pub struct Op {
    pub slot: u32,
    pub req: u32,
}

/// A run of allocations or of frees.
#[derive(Clone, Copy, Debug)]
pub struct Segment {
    pub alloc: bool,
    pub start: u32,
    pub end: u32,
}

/// A complete trace: every allocation is freed by its end.
#[derive(Debug)]
pub struct Trace {
    pub name: String,
    pub seed: u64,
    pub requests: Vec<Req>,
    pub ops: Vec<Op>,
    pub segments: Vec<Segment>,
    /// Most slots alive at once (the replay's handle table size).
    pub slots: usize,
    /// The segments counted in the figures: all of them, but for the scaling
    /// run, whose fill and final free-all are set-up.
    pub measured: Range<usize>,
    pub allocations: u64,
    pub frees: u64,
}

impl Trace {
    /// Peak of live requested bytes (`requirements.size`), when nothing fails.
    pub fn peak_live(&self) -> u64 {
        let mut live = 0u64;
        let mut peak = 0u64;
        let mut sizes = vec![0u64; self.slots];
        for op in &self.ops {
            if op.req == FREE {
                live -= sizes[op.slot as usize];
            } else {
                let size = self.requests[op.req as usize].requirements.size;
                sizes[op.slot as usize] = size;
                live += size;
                peak = peak.max(live);
            }
        }
        peak
    }
}

/// `Op::req` of a free.
pub const FREE: u32 = u32::MAX;

/// SplitMix64: small, fast, good enough for traces; reproducible from a seed.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Self(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `[0, 1)`.
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Uniform in `lo..=hi`.
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next_u64() % (hi - lo + 1)
    }

    /// Log-uniform in `lo..=hi`.
    pub fn log_uniform(&mut self, lo: u64, hi: u64) -> u64 {
        let (a, b) = ((lo as f64).ln(), (hi as f64 + 1.0).ln());
        ((a + self.unit() * (b - a)).exp() as u64).clamp(lo, hi)
    }

    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }
}

const ASSET_USAGE: vk::BufferUsageFlags = vk::BufferUsageFlags::from_raw(
    vk::BufferUsageFlags::VERTEX_BUFFER.as_raw()
        | vk::BufferUsageFlags::INDEX_BUFFER.as_raw()
        | vk::BufferUsageFlags::TRANSFER_DST.as_raw(),
);
const UNIFORM_USAGE: vk::BufferUsageFlags = vk::BufferUsageFlags::from_raw(
    vk::BufferUsageFlags::UNIFORM_BUFFER.as_raw() | vk::BufferUsageFlags::TRANSFER_SRC.as_raw(),
);
const STORAGE_USAGE: vk::BufferUsageFlags = vk::BufferUsageFlags::from_raw(
    vk::BufferUsageFlags::STORAGE_BUFFER.as_raw() | vk::BufferUsageFlags::TRANSFER_DST.as_raw(),
);

/// Builds a trace: hands out slots, groups operations in segments.
struct Builder<'s, 'd> {
    source: &'s mut RequirementSource<'d>,
    requests: Vec<Req>,
    ops: Vec<Op>,
    segments: Vec<Segment>,
    free_slots: Vec<u32>,
    slots: u32,
    allocations: u64,
    frees: u64,
    force_new: bool,
}

impl<'s, 'd> Builder<'s, 'd> {
    fn new(source: &'s mut RequirementSource<'d>) -> Self {
        Self {
            source,
            requests: Vec::new(),
            ops: Vec::new(),
            segments: Vec::new(),
            free_slots: Vec::new(),
            slots: 0,
            allocations: 0,
            frees: 0,
            force_new: false,
        }
    }

    fn push(&mut self, op: Op, alloc: bool) {
        let at = self.ops.len() as u32;
        self.ops.push(op);
        match self.segments.last_mut() {
            Some(s) if s.alloc == alloc && !self.force_new => s.end = at + 1,
            _ => self.segments.push(Segment {
                alloc,
                start: at,
                end: at + 1,
            }),
        }
        self.force_new = false;
    }

    /// Ends the current segment even when the next operation is of the same
    /// kind (a new burst or frame).
    fn cut(&mut self) {
        self.force_new = true;
    }

    fn alloc(&mut self, resource: Resource, kind: Kind, usage: MemUse) -> u32 {
        let requirements = self.source.get(resource);
        let slot = self.free_slots.pop().unwrap_or_else(|| {
            self.slots += 1;
            self.slots - 1
        });
        self.requests.push(Req {
            requirements,
            kind,
            usage,
            resource,
        });
        let req = self.requests.len() as u32 - 1;
        self.push(Op { slot, req }, true);
        self.allocations += 1;
        slot
    }

    fn free(&mut self, slot: u32) {
        self.push(Op { slot, req: FREE }, false);
        self.free_slots.push(slot);
        self.frees += 1;
    }

    fn finish(self, name: String, seed: u64, measured: Option<Range<usize>>) -> Trace {
        let measured = measured.unwrap_or(0..self.segments.len());
        Trace {
            name,
            seed,
            requests: self.requests,
            ops: self.ops,
            segments: self.segments,
            slots: self.slots as usize,
            measured,
            allocations: self.allocations,
            frees: self.frees,
        }
    }
}

fn shuffle<T>(rng: &mut Rng, items: &mut [T]) {
    for i in (1..items.len()).rev() {
        items.swap(i, rng.below(i + 1));
    }
}

/// Frees everything in `live`, in random order, in batches of up to 64.
fn free_all(b: &mut Builder<'_, '_>, rng: &mut Rng, live: &mut Vec<u32>) {
    shuffle(rng, live);
    for chunk in live.chunks(64) {
        b.cut();
        for &slot in chunk {
            b.free(slot);
        }
    }
    live.clear();
}

/// Generates trace `kind` with about `ops` operations (allocations + frees).
pub fn generate(
    kind: TraceKind,
    ops: usize,
    seed: u64,
    source: &mut RequirementSource<'_>,
) -> Trace {
    let mut rng = Rng::new(seed);
    let mut b = Builder::new(source);
    let target_allocs = (ops / 2).max(1) as u64;
    match kind {
        TraceKind::Streaming => {
            // Mean of log-uniform 4 KiB..32 MiB is ~3.6 MiB; bursts of 1..16
            // (mean 8.5); lifetimes uniform in 1..=2L bursts: about 640 MiB
            // live on average, so the peak over a long trace is around 1 GiB.
            let mean_size = (32u64 << 20) as f64 / (8192f64).ln();
            let mean_lifetime = ((640u64 << 20) as f64 / (mean_size * 8.5)).round() as u64;
            lifetimes(&mut b, &mut rng, target_allocs, mean_lifetime, 16, |rng| {
                let size = rng.log_uniform(4 << 10, 32 << 20);
                (
                    Resource::Buffer {
                        size,
                        usage: ASSET_USAGE,
                    },
                    Kind::Buffer,
                    MemUse::DeviceLocal,
                )
            });
        }
        TraceKind::Mixed => {
            // Buffers 256 B..1 MiB and RGBA8 images 16..1024 texels a side,
            // half and half; ~256 MiB live.
            lifetimes(&mut b, &mut rng, target_allocs, 120, 16, |rng| {
                if rng.next_u64() & 1 == 0 {
                    let size = rng.log_uniform(256, 1 << 20);
                    (
                        Resource::Buffer {
                            size,
                            usage: STORAGE_USAGE,
                        },
                        Kind::Buffer,
                        MemUse::DeviceLocal,
                    )
                } else {
                    let width = 16 << rng.range(0, 6);
                    let height = 16 << rng.range(0, 6);
                    (
                        Resource::Image { width, height },
                        Kind::Image,
                        MemUse::DeviceLocal,
                    )
                }
            });
        }
        TraceKind::FrameLoop => frame_loop(&mut b, &mut rng, target_allocs),
        TraceKind::SmallChurn => {
            churn(&mut b, &mut rng, 8192, target_allocs, 64, 64 << 10);
        }
    }
    b.finish(kind.name().to_owned(), seed, None)
}

/// Bursts of 1..=`burst` allocations per tick, each living a uniform
/// 1..=2×`mean_lifetime` ticks; expired ones are freed (in random order) at
/// the start of each tick.
fn lifetimes(
    b: &mut Builder<'_, '_>,
    rng: &mut Rng,
    target_allocs: u64,
    mean_lifetime: u64,
    burst: u64,
    mut pick: impl FnMut(&mut Rng) -> (Resource, Kind, MemUse),
) {
    let horizon = (2 * mean_lifetime + 1) as usize;
    let mut expiring: Vec<Vec<u32>> = vec![Vec::new(); horizon];
    let mut tick = 0usize;
    while b.allocations < target_allocs {
        let mut due = std::mem::take(&mut expiring[tick % horizon]);
        shuffle(rng, &mut due);
        b.cut();
        for &slot in &due {
            b.free(slot);
        }
        due.clear();
        expiring[tick % horizon] = due;
        b.cut();
        for _ in 0..rng.range(1, burst) {
            let (resource, kind, usage) = pick(rng);
            let slot = b.alloc(resource, kind, usage);
            let life = rng.range(1, 2 * mean_lifetime) as usize;
            expiring[(tick + life) % horizon].push(slot);
        }
        tick += 1;
    }
    let mut live: Vec<u32> = expiring.into_iter().flatten().collect();
    free_all(b, rng, &mut live);
}

fn frame_loop(b: &mut Builder<'_, '_>, rng: &mut Rng, target_allocs: u64) {
    let long_lived = |rng: &mut Rng| Resource::Buffer {
        size: rng.log_uniform(64 << 10, 4 << 20),
        usage: ASSET_USAGE,
    };
    let mut persistent: Vec<u32> = Vec::new();
    for _ in 0..100 {
        let r = long_lived(rng);
        persistent.push(b.alloc(r, Kind::Buffer, MemUse::DeviceLocal));
    }
    // Frees due at frame f live in ring[f % 4].
    let mut ring: [Vec<u32>; 4] = Default::default();
    let mut frame = 0usize;
    while b.allocations < target_allocs {
        let mut due = std::mem::take(&mut ring[frame % 4]);
        shuffle(rng, &mut due);
        b.cut();
        for &slot in &due {
            b.free(slot);
        }
        // Now and then a long-lived buffer is replaced (a level change).
        if rng.below(10) == 0 {
            let i = rng.below(persistent.len());
            b.free(persistent[i]);
            b.cut();
            let r = long_lived(rng);
            persistent[i] = b.alloc(r, Kind::Buffer, MemUse::DeviceLocal);
        }
        due.clear();
        ring[frame % 4] = due;
        b.cut();
        for _ in 0..rng.range(50, 200) {
            let size = rng.log_uniform(256, 256 << 10);
            let slot = b.alloc(
                Resource::Buffer {
                    size,
                    usage: UNIFORM_USAGE,
                },
                Kind::Buffer,
                MemUse::Upload,
            );
            let delay = rng.range(2, 3) as usize;
            ring[(frame + delay) % 4].push(slot);
        }
        frame += 1;
    }
    let mut live: Vec<u32> = ring.into_iter().flatten().collect();
    live.extend(persistent);
    free_all(b, rng, &mut live);
}

/// Fills to `live_target` buffers of `lo..=hi` bytes, then alternates
/// batches of 1..=32 frees of random live buffers and as many allocations
/// until `target_allocs` allocations were made, then frees all. Returns the
/// segments of the churn (after the fill, before the final frees).
fn churn(
    b: &mut Builder<'_, '_>,
    rng: &mut Rng,
    live_target: usize,
    target_allocs: u64,
    lo: u64,
    hi: u64,
) -> Range<usize> {
    let mut live: Vec<u32> = Vec::with_capacity(live_target);
    let new = |b: &mut Builder<'_, '_>, rng: &mut Rng| {
        let size = rng.log_uniform(lo, hi);
        b.alloc(
            Resource::Buffer {
                size,
                usage: STORAGE_USAGE,
            },
            Kind::Buffer,
            MemUse::DeviceLocal,
        )
    };
    for i in 0..live_target {
        if i % 64 == 0 {
            b.cut();
        }
        let slot = new(b, rng);
        live.push(slot);
    }
    let fill_segments = b.segments.len();
    let target = target_allocs.max(b.allocations + 1);
    while b.allocations < target {
        let n = rng.range(1, 32) as usize;
        b.cut();
        for _ in 0..n.min(live.len()) {
            let i = rng.below(live.len());
            let slot = live.swap_remove(i);
            b.free(slot);
        }
        b.cut();
        for _ in 0..n {
            let slot = new(b, rng);
            live.push(slot);
        }
    }
    let churn_end = b.segments.len();
    free_all(b, rng, &mut live);
    fill_segments..churn_end
}

/// The scaling trace: fill to `live` buffers of 64 B..1 KiB, then
/// `churn_ops` operations of random frees and allocations, then free all.
/// Only the churn is measured.
pub fn scaling(
    live: usize,
    churn_ops: usize,
    seed: u64,
    source: &mut RequirementSource<'_>,
) -> Trace {
    let mut rng = Rng::new(seed);
    let mut b = Builder::new(source);
    let target = (live + churn_ops / 2) as u64;
    let measured = churn(&mut b, &mut rng, live, target, 64, 1 << 10);
    b.finish(format!("scaling-{live}"), seed, Some(measured))
}
