//! A seeded random walk aimed at `bufferImageGranularity` alone, on large
//! pages (1 KiB to 64 KiB, and 3 KiB, which is not a power of two): buffers,
//! linear and optimal images, resources of unknown kind, small buffers in runs, custom pools (fixed
//! block sizes, some not a multiple of the page, `max_blocks`), requests
//! with a `min_alignment` or for existing memory only, debug margins, frees
//! now and after a frame, defragmentation plans (emptying blocks, in part,
//! and compacting them) carried out or given up, and aliases accepted by
//! `check_alias`, each request placed by a strategy drawn from its own
//! stream of the seed (`MinTime`, `MinMemory`, `MinOffset`, `MaxOffset`:
//! vulkano's `FreeListAllocator` checked the page of the neighbour before
//! a free range but not the one after it, vulkano-rs/vulkano PR #2834, so
//! placements from the top of a block or into holes are drawn here too).
//! A failed request fails only as its request explains
//! (existing memory only, a full pool, a size past a pool's fixed blocks),
//! and an alias is refused only with `CannotAlias`. After every step, no two resources of different
//! allocations (an allocation's own resource and the aliases bound into it)
//! that are still bound, one linear and one optimal (or either of unknown
//! kind), share a page of one
//! memory object: resources freed after a frame stay bound until that
//! frame is collected, and a move's source stays bound beside its
//! destination until the engine frees it.

use std::collections::HashMap;

use ash::vk::{self, Handle};
use vk_suballoc::device::fake::{FakeDevice, FakeLayout};
use vk_suballoc::{
    Allocation, AllocationDesc, Config, DefragmentationLimits, Error, Movable, Pool, PoolDesc,
    Request, ResourceKind, Usage,
};

use super::seeded_rng::Rng;
use super::{allocator_with, FakeAllocator};

const KIB: u64 = 1024;
const MIB: u64 = 1 << 20;

/// The discrete layout's device-local type.
const VRAM: u32 = 1;

/// A resource bound into memory: an allocation's own, or an alias.
#[derive(Clone, Copy, Debug)]
struct Bound {
    offset: u64,
    size: u64,
    kind: ResourceKind,
}

/// A live allocation, the kind it was made for and the aliases bound into it.
struct Live {
    id: u64,
    allocation: Allocation,
    kind: ResourceKind,
    aliases: Vec<Bound>,
}

/// Resources still bound after their allocation was freed for a frame:
/// (owner id, memory, resources), until that frame is collected.
type Pending = Vec<(u64, u64, Vec<Bound>)>;

struct GranularityWalk {
    rng: Rng,
    /// Draws each request's strategy: a stream of its own, so that the
    /// walk `rng` draws is the same for a seed as before strategies were
    /// drawn.
    strategies: Rng,
    allocator: FakeAllocator,
    device: FakeDevice,
    granularity: u64,
    live: Vec<Live>,
    /// Per frame in flight, its fence and what it keeps bound.
    frames: Vec<(vk::Fence, Pending)>,
    /// What the frame being recorded keeps bound.
    current: Pending,
    /// Each custom pool, its fixed block size (0: growing blocks) and its
    /// `max_blocks`.
    pools: Vec<(Pool, u64, Option<u32>)>,
    debug_margin: u64,
    next_id: u64,
    context: String,
}

impl Live {
    fn resources(&self) -> Vec<Bound> {
        let own = Bound {
            offset: self.allocation.offset(),
            size: self.allocation.size(),
            kind: self.kind,
        };
        std::iter::once(own)
            .chain(self.aliases.iter().copied())
            .collect()
    }
}

impl GranularityWalk {
    fn new(test: &str, seed: u64) -> Self {
        let mut rng = Rng(seed);
        let granularity = [1024, 4096, 8192, 65536, 65536, 3072][rng.below(6) as usize];
        let config = Config {
            large_heap_block_size: [2 * MIB, 8 * MIB][rng.below(2) as usize],
            max_padded_granularity: [4096, 256, 1 << 20][rng.below(3) as usize],
            debug_margin: [0, 0, 4, 64, 1000][rng.below(5) as usize],
            small_buffer_limit: [0, 4096, 16384][rng.below(3) as usize],
            initial_block_slots: [4, 1024][rng.below(2) as usize],
            ..Config::default()
        };
        let context = format!("granularity {granularity}, {config:?}");
        println!("{test}: walk seed {seed}: {context}");
        let layout = FakeLayout::discrete().with_granularity(granularity);
        let (allocator, device) = allocator_with(layout, config);
        let mut pools = Vec::new();
        for _ in 0..rng.below(3) {
            let block_size = [0, 256 * KIB, 100_000, MIB, 3 * 65536 + 512][rng.below(5) as usize];
            let mut desc = PoolDesc::new(VRAM).block_size(block_size);
            if rng.below(2) == 0 {
                desc = desc.max_blocks(2 + rng.below(4) as u32);
            }
            let pool = allocator.create_pool(&desc).unwrap();
            pools.push((pool, block_size, desc.max_blocks));
        }
        Self {
            rng,
            strategies: Rng(seed ^ 0x5742_4154_4547_5953),
            allocator,
            device,
            granularity,
            live: Vec::new(),
            frames: Vec::new(),
            current: Vec::new(),
            pools,
            debug_margin: config.debug_margin,
            next_id: 0,
            context,
        }
    }

    fn kind(&mut self) -> ResourceKind {
        match self.rng.below(6) {
            0 | 1 => ResourceKind::Buffer,
            2 => ResourceKind::LinearImage,
            3 | 4 => ResourceKind::OptimalImage,
            _ => ResourceKind::Unknown,
        }
    }

    fn allocate(&mut self) {
        let kind = self.kind();
        let size = match self.rng.below(8) {
            0..=3 => 1 + self.rng.below(4 * KIB),
            4..=6 => 4 * KIB + self.rng.below(200 * KIB),
            _ => 256 * KIB + self.rng.below(2 * MIB),
        };
        let alignment = if kind == ResourceKind::Buffer {
            [1, 4, 16, 64, 256][self.rng.below(5) as usize]
        } else {
            [256, 1024, 4096, 65536][self.rng.below(4) as usize]
        };
        let requirements = vk::MemoryRequirements {
            size,
            alignment,
            memory_type_bits: !0,
        };
        let usage = if self.rng.below(6) == 0 {
            Usage::UPLOAD
        } else {
            Usage::DEVICE_LOCAL
        };
        let strategy = super::STRATEGIES[self.strategies.below(4) as usize];
        let mut desc = AllocationDesc::new(usage).strategy(strategy);
        if self.rng.below(6) == 0 {
            desc = desc.min_alignment(1 << self.rng.below(17));
        }
        if self.rng.below(6) == 0 {
            desc = desc.existing_memory_only();
        }
        let mut pool = None;
        if !self.pools.is_empty() && usage == Usage::DEVICE_LOCAL && self.rng.below(3) == 0 {
            let drawn = self.pools[self.rng.below(self.pools.len() as u64) as usize];
            desc = desc.pool(drawn.0);
            pool = Some(drawn);
        }
        let request = Request::with_desc(requirements, kind, desc);
        // Failures (a full pool, a request too large for its blocks, no room
        // in existing memory) are fine when the request explains them: the
        // heaps are far larger than the walk's memory, and no fault is
        // injected.
        match self.allocator.allocate(&request) {
            Ok(allocation) => {
                self.live.push(Live {
                    id: self.next_id,
                    allocation,
                    kind,
                    aliases: Vec::new(),
                });
                self.next_id += 1;
            }
            Err(error) => self.explain(error, &request, pool),
        }
    }

    /// Panics unless `error`, the answer to `request` (in `pool`, if any:
    /// its handle, fixed block size and `max_blocks`), is one the request
    /// explains: a size past a pool's fixed blocks (exactly then), a full
    /// pool, no room in existing memory.
    fn explain(&self, error: Error, request: &Request<'_>, pool: Option<(Pool, u64, Option<u32>)>) {
        let existing = request.desc.existing_memory_only;
        // A resource of unknown kind takes dedicated memory where pages
        // are not a power of two, in a pool too: no block then.
        let dedicated =
            request.kind == ResourceKind::Unknown && !self.granularity.is_power_of_two();
        let too_large = pool.and_then(|(_, block_size, _)| {
            let bytes = request.requirements.size + self.debug_margin;
            (block_size != 0 && bytes > block_size && !dedicated).then_some(block_size)
        });
        let explained = match error {
            Error::TooLargeForPool { block_size, .. } => too_large == Some(block_size),
            _ if too_large.is_some() => false,
            Error::NoRoomInExistingMemory => existing,
            Error::PoolFull { max_blocks } => {
                !existing && pool.and_then(|p| p.2).map(u64::from) == Some(max_blocks)
            }
            _ => false,
        };
        assert!(
            explained,
            "{}: {error:?} for {request:?} (pool {pool:?})",
            self.context
        );
    }

    fn take_random(&mut self) -> Option<Live> {
        if self.live.is_empty() {
            return None;
        }
        let index = self.rng.below(self.live.len() as u64) as usize;
        Some(self.live.swap_remove(index))
    }

    /// Frees `live` now or after the frame (its resources stay bound until
    /// the frame is collected).
    fn release(&mut self, live: Live, now: bool) {
        if now {
            // SAFETY: the fake device runs no GPU work.
            unsafe { self.allocator.free(live.allocation) }.unwrap();
        } else {
            let memory = live.allocation.memory().as_raw();
            self.current.push((live.id, memory, live.resources()));
            self.allocator.free_after_frame(live.allocation).unwrap();
        }
    }

    fn end_frame(&mut self) {
        if (self.frames.len() >= 2 || self.rng.below(2) == 0) && !self.frames.is_empty() {
            let (fence, _) = self.frames.remove(0);
            self.device.signal_fence(fence);
            self.allocator.collect().unwrap();
        }
        let fence = self.device.create_fence();
        // SAFETY: the fake device's fence, signalled only by this walk.
        unsafe { self.allocator.end_frame(fence) }.unwrap();
        let pending = std::mem::take(&mut self.current);
        self.frames.push((fence, pending));
    }

    fn alias(&mut self) {
        if self.live.is_empty() {
            return;
        }
        let index = self.rng.below(self.live.len() as u64) as usize;
        let kind = self.kind();
        let alignment = [1, 256, 1024, 65536][self.rng.below(4) as usize];
        let size_of = self.live[index].allocation.size();
        let offset = self.rng.below(size_of) / alignment * alignment;
        let size = 1 + self.rng.below(size_of - offset);
        let requirements = vk::MemoryRequirements {
            size,
            alignment,
            memory_type_bits: !0,
        };
        let live = &mut self.live[index];
        let checked = self
            .allocator
            .check_alias(&live.allocation, offset, &requirements, kind);
        match checked {
            Ok(()) => live.aliases.push(Bound {
                offset: live.allocation.offset() + offset,
                size,
                kind,
            }),
            // In range, of a power-of-two alignment, in a live allocation,
            // of every memory type: refused only for a bound offset off the
            // alignment (the allocation's own offset may be), else as
            // resources that cannot share its pages.
            Err(Error::CannotAlias(why)) => {
                let misaligned = (live.allocation.offset() + offset) % alignment != 0;
                let expected = if misaligned {
                    super::aliasing::MISALIGNED
                } else {
                    super::aliasing::GRANULARITY
                };
                assert_eq!(
                    why, expected,
                    "{}: check_alias of {size} bytes at {offset} of {:?}",
                    self.context, live.allocation
                );
            }
            Err(error) => panic!(
                "{}: check_alias of {size} bytes at {offset} of {:?}: {error:?}",
                self.context, live.allocation
            ),
        }
    }

    fn defragment(&mut self) {
        let listed: Vec<usize> = (0..self.live.len())
            .filter(|_| self.rng.below(4) != 0)
            .collect();
        let mut limits = DefragmentationLimits {
            max_used_percent: [50, 100][self.rng.below(2) as usize],
            split_blocks: self.rng.below(2) == 0,
            compact_blocks: self.rng.below(2) == 0,
            ..DefragmentationLimits::default()
        };
        if self.rng.below(2) == 0 {
            limits.max_moves = 1 + self.rng.below(8) as usize;
        }
        // Now and then the resource is made again of another kind (the
        // destination is placed for the new one).
        let kinds: Vec<ResourceKind> = listed
            .iter()
            .map(|&i| {
                if self.rng.below(10) == 0 {
                    self.kind()
                } else {
                    self.live[i].kind
                }
            })
            .collect();
        let movables: Vec<Movable<'_>> = listed
            .iter()
            .zip(&kinds)
            .map(|(&i, &kind)| {
                let a = &self.live[i].allocation;
                let alignment = if kind == ResourceKind::Buffer {
                    16
                } else {
                    1024
                };
                let requirements = vk::MemoryRequirements {
                    size: a.size(),
                    alignment,
                    memory_type_bits: 1 << a.memory_type(),
                };
                Movable::new(a, requirements, kind)
            })
            .collect();
        let plan = self
            .allocator
            .plan_defragmentation(&movables, &limits)
            .unwrap();
        drop(movables);
        // The copies are recorded: sources and every destination are bound
        // together.
        let bound_by_copies: Pending = (0..)
            .zip(&plan.moves)
            .map(|(n, planned)| {
                let destination = Bound {
                    offset: planned.destination.offset(),
                    size: planned.destination.size(),
                    kind: kinds[planned.movable],
                };
                let memory = planned.destination.memory().as_raw();
                (u64::MAX - n, memory, vec![destination])
            })
            .collect();
        self.check(&bound_by_copies);
        let mut moved = Vec::new();
        let mut given_up = Vec::new();
        for (planned, (_, memory, bound)) in plan.moves.into_iter().zip(bound_by_copies) {
            let (index, kind) = (listed[planned.movable], kinds[planned.movable]);
            let destination = bound[0];
            if self.rng.below(8) == 0 {
                given_up.push((memory, destination));
                self.allocator.give_up_move(planned).unwrap();
            } else {
                moved.push((index, kind, planned.destination));
            }
        }
        for (memory, destination) in given_up {
            let id = self.next_id;
            self.next_id += 1;
            self.current.push((id, memory, vec![destination]));
        }
        // Each source is replaced by its destination (its aliases are made
        // again there by the engine, or not: dropped here) and freed, now or
        // after the frame.
        let mut sources = Vec::new();
        for (index, kind, destination) in moved {
            let id = self.next_id;
            self.next_id += 1;
            let source = std::mem::replace(
                &mut self.live[index],
                Live {
                    id,
                    allocation: destination,
                    kind,
                    aliases: Vec::new(),
                },
            );
            sources.push(source);
        }
        for source in sources {
            let now = self.rng.below(2) == 0;
            self.release(source, now);
        }
    }

    /// No linear and optimal resources of different allocations share a
    /// page of one memory object, nor any bytes, among the live, the
    /// pending and `extra`.
    fn check(&self, extra: &[(u64, u64, Vec<Bound>)]) {
        let page = self.granularity;
        let mut by_memory: HashMap<u64, Vec<(u64, Bound)>> = HashMap::new();
        for live in &self.live {
            let memory = live.allocation.memory().as_raw();
            for bound in live.resources() {
                by_memory.entry(memory).or_default().push((live.id, bound));
            }
        }
        let pending = self.frames.iter().flat_map(|(_, p)| p.iter());
        for (id, memory, bounds) in pending.chain(self.current.iter()).chain(extra) {
            for &bound in bounds {
                by_memory.entry(*memory).or_default().push((*id, bound));
            }
        }
        for (memory, mut group) in by_memory {
            group.sort_by_key(|(_, b)| b.offset);
            for (i, &(id_a, a)) in group.iter().enumerate() {
                let a_last = a.offset + a.size - 1;
                for &(id_b, b) in &group[i + 1..] {
                    if b.offset / page > a_last / page {
                        break;
                    }
                    if id_a == id_b {
                        continue;
                    }
                    assert!(
                        b.offset > a_last,
                        "{}: memory {memory:#x}: {a:?} (allocation {id_a}) and {b:?} (allocation {id_b}) overlap",
                        self.context
                    );
                    assert!(
                        a.kind.may_share_page_with(b.kind),
                        "{}: memory {memory:#x}: {a:?} (allocation {id_a}) and {b:?} (allocation {id_b}) share a page of {page}",
                        self.context
                    );
                }
            }
        }
    }

    fn step(&mut self) {
        match self.rng.below(20) {
            0..=8 => self.allocate(),
            9..=11 => {
                if let Some(live) = self.take_random() {
                    self.release(live, true);
                }
            }
            12 | 13 => {
                if let Some(live) = self.take_random() {
                    self.release(live, false);
                }
            }
            14 => self.end_frame(),
            15 | 16 => self.alias(),
            17 => self.defragment(),
            18 => {
                if let Some(live) = self.live.last_mut() {
                    live.aliases.clear();
                }
            }
            _ => {
                let _ = self.allocator.trim();
            }
        }
        self.check(&[]);
    }

    fn finish(mut self) {
        while let Some(live) = self.live.pop() {
            self.release(live, true);
        }
        for (fence, _) in std::mem::take(&mut self.frames) {
            self.device.signal_fence(fence);
        }
        self.allocator.collect().unwrap();
        let fence = self.device.create_fence();
        // SAFETY: as in `end_frame`.
        unsafe { self.allocator.end_frame(fence) }.unwrap();
        self.device.signal_fence(fence);
        self.allocator.collect().unwrap();
        for (pool, _, _) in std::mem::take(&mut self.pools) {
            self.allocator.destroy_pool(pool).unwrap();
        }
        let GranularityWalk {
            allocator, device, ..
        } = self;
        super::finish(allocator, &device);
    }
}

/// Many short walks, each drawing its own layout and configuration.
#[test]
fn random_walks_keep_linear_and_optimal_resources_off_each_others_pages() {
    let mut seeds = Rng::from_env("granularity_walk");
    for walk in 0..24 {
        let seed = seeds.next();
        let mut walk_state = GranularityWalk::new(&format!("granularity walk {walk}"), seed);
        for _ in 0..400 {
            walk_state.step();
        }
        walk_state.finish();
    }
}
