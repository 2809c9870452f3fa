//! What a request naming a custom pool may get: drawn aimed at a pool
//! (live, destroyed or another allocator's), the error a flawed one must
//! get, and when running out of memory in a pool is explained.

use gpu_alloc_types::MemoryPropertyFlags as Props;
use vk_suballoc::report::TypeStats;
use vk_suballoc::{DedicatedPolicy, Error, Pool, Request, ResourceKind, Usage};

use super::expect::min_alignment_refusal;
use super::pools::WalkPool;
use super::{is_host_visible, is_non_coherent, Fired, Walk};

/// `place/pool_request.rs`'s tail rounding: past this alignment a size is
/// no longer rounded up to it.
const MAX_TAIL_ROUNDING: u64 = 4096;

impl Walk {
    /// A pool for a request to name: none mostly; a live pool about one
    /// time in three when there is one; now and then a destroyed one or
    /// another allocator's.
    pub(super) fn draw_pool(&mut self) -> Option<Pool> {
        match self.rng.below(60) {
            0 if !self.dead_pools.is_empty() => {
                let i = self.rng.below(self.dead_pools.len() as u64) as usize;
                Some(self.dead_pools[i])
            }
            1 => Some(self.foreign.pool),
            2..=21 if !self.pools.is_empty() => {
                let i = self.rng.below(self.pools.len() as u64) as usize;
                Some(self.pools[i].pool)
            }
            _ => None,
        }
    }

    /// `request` aimed at `pool`: mostly one the pool can serve (its memory
    /// type allowed, no host access to a type the host cannot reach), at
    /// times within a KiB of a fixed block's size.
    pub(super) fn aim_at_pool(
        &mut self,
        mut request: Request<'static>,
        pool: Pool,
    ) -> Request<'static> {
        let t = pool.memory_type();
        request.desc.pool = Some(pool);
        if self.rng.below(5) != 0 {
            request.requirements.memory_type_bits |= 1 << t;
        }
        let host = self
            .layout
            .memory_types
            .get(t as usize)
            .is_some_and(|ty| is_host_visible(ty.props));
        if !host && request.desc.usage.needs_host_access() && self.rng.below(4) != 0 {
            let address = request.desc.usage.contains(Usage::DEVICE_ADDRESS);
            request.desc.usage = Usage::DEVICE_LOCAL;
            if address {
                request.desc.usage |= Usage::DEVICE_ADDRESS;
            }
        }
        let block = self.live_pool(pool).and_then(|p| p.block_size);
        if let Some(block) = block.filter(|_| self.rng.below(4) == 0) {
            request.requirements.size = (block + 1).saturating_sub(1024) + self.rng.below(2048);
        }
        request
    }

    /// The bytes `request` takes in a block of a custom pool of memory type
    /// `t`, as `custom_pool_request` in `place/pool_request.rs` computes them: its size
    /// and `Config::debug_margin` rounded up to the granularity page (optimal images, when the page is
    /// a power of two: in a pool, however large), else to its alignment
    /// (widened to `min_alignment`, the pool's and the non-coherent atom) up
    /// to 4 KiB.
    pub(super) fn placed_size(&self, t: u32, request: &Request<'_>) -> u64 {
        let r = &request.requirements;
        let mut align = r.alignment.max(request.desc.min_alignment);
        // A pool's own min_alignment raises it too.
        align = align.max(self.pool_min_alignment(request.desc.pool));
        if is_non_coherent(self.layout.memory_types[t as usize].props) {
            align = align.max(self.layout.non_coherent_atom_size.max(1));
        }
        // Config::debug_margin after the allocation, in the bytes it takes.
        let margin = self.config.debug_margin;
        let page = self.layout.buffer_image_granularity.max(1);
        if page.is_power_of_two()
            && matches!(
                request.kind,
                ResourceKind::OptimalImage | ResourceKind::Unknown
            )
        {
            (r.size + margin).next_multiple_of(page)
        } else {
            (r.size + margin).next_multiple_of(align.min(MAX_TAIL_ROUNDING))
        }
    }

    /// Whether a request to a pool of memory type `t` gets dedicated
    /// memory: only when it is required (by the caller, the driver or a
    /// lazily allocated type).
    pub(super) fn pool_dedicated(&self, t: u32, request: &Request<'_>) -> bool {
        let props = self.layout.memory_types[t as usize].props;
        let lazy = props.contains(Props::LAZILY_ALLOCATED);
        request.driver_dedicated.required
            || request.desc.dedicated == DedicatedPolicy::Always
            || lazy
            || self.unknown_on_odd_pages(request)
    }

    /// The error a flawed request naming `pool` must get, in the order
    /// `allocate_in_custom_pool` checks: the pool's owner, the
    /// requirements and `min_alignment`, the dedicated target, the pool's
    /// memory type against `memoryTypeBits`, the device-address feature,
    /// the heap's size, host access, `maxMemoryAllocationSize`, whether the
    /// pool still exists, and a fixed block size; then, for existing
    /// memory only, dedicated memory required.
    pub(super) fn pool_rejection(&self, pool: Pool, request: &Request<'_>) -> Option<Error> {
        if pool == self.foreign.pool {
            return Some(Error::ForeignPool);
        }
        let r = &request.requirements;
        let usage = request.desc.usage;
        if r.size == 0 {
            return Some(Error::ZeroSize);
        }
        if !r.alignment.is_power_of_two() {
            return Some(Error::AlignmentNotPowerOfTwo(r.alignment));
        }
        if let Some(error) = min_alignment_refusal(request) {
            return Some(error);
        }
        if request.driver_dedicated.required && request.target().is_none() {
            return Some(Error::MissingDedicatedTarget);
        }
        let t = pool.memory_type();
        if r.memory_type_bits & (1 << t) == 0 {
            return Some(Error::PoolTypeNotAllowed {
                memory_type: t,
                memory_type_bits: r.memory_type_bits,
            });
        }
        let unsuitable = Error::NoSuitableMemoryType {
            memory_type_bits: 1 << t,
            usage,
        };
        if usage.contains(Usage::DEVICE_ADDRESS) && !self.layout.buffer_device_address {
            return Some(Error::DeviceAddressNotEnabled);
        }
        let heap = self.layout.memory_types[t as usize].heap as usize;
        let heap = self.layout.memory_heaps[heap].size;
        if r.size > heap {
            return Some(Error::SizeExceedsHeaps {
                size: r.size,
                largest_heap: heap,
            });
        }
        let props = self.layout.memory_types[t as usize].props;
        if usage.needs_host_access() && !is_host_visible(props) {
            return Some(unsuitable);
        }
        let max = self.layout.max_memory_allocation_size;
        if r.size > max {
            return Some(Error::SizeExceedsMaxAllocation { size: r.size, max });
        }
        let Some(live) = self.live_pool(pool) else {
            return Some(Error::StalePool);
        };
        let placed = self.placed_size(t, request);
        let dedicated = self.pool_dedicated(t, request);
        // Rounding alone past a block's end takes a whole block.
        let bytes = r.size + self.config.debug_margin;
        match live.block_size {
            Some(block_size) if bytes > block_size && !dedicated => Some(Error::TooLargeForPool {
                size: placed,
                block_size,
            }),
            // Existing memory only, yet dedicated memory required.
            _ if dedicated && request.desc.existing_memory_only => {
                Some(Error::NoRoomInExistingMemory)
            }
            _ => None,
        }
    }

    /// Panics unless `error`, the answer to `request` naming live pool
    /// `pool` (whose figures were `pool_before`), is the one its flaw
    /// names or one the situation explains: `PoolFull` exactly when the
    /// pool holds `max_blocks` blocks and the request needs a new one, else
    /// an exhausted device, never out of memory while the pool's heap has
    /// room for a whole new block.
    pub(super) fn explain_in_pool(
        &self,
        error: Error,
        request: &Request<'_>,
        pool: Pool,
        pool_before: &TypeStats,
        fired: Fired,
        objects: u32,
    ) {
        let ctx = self.ctx();
        if let Some(expected) = self.rejection(request) {
            assert_eq!(error, expected, "{ctx}: {request:?}");
            return;
        }
        let Some(p) = self.live_pool(pool) else {
            panic!("{ctx}: {pool:?} is not live, yet not refused");
        };
        // Never PoolFull: no new block is tried.
        if request.desc.existing_memory_only {
            return self.explain_existing_only(error, request, fired);
        }
        let t = p.memory_type();
        let dedicated = self.pool_dedicated(t, request);
        let full = p
            .max_blocks
            .filter(|&max| !dedicated && pool_before.blocks >= u64::from(max));
        let heap = self.layout.memory_types[t as usize].heap as usize;
        let heap = self.layout.memory_heaps[heap].size;
        if let Some(max) = full.filter(|_| self.placed_size(t, request) <= heap) {
            let expected = Error::PoolFull {
                max_blocks: u64::from(max),
            };
            assert_eq!(error, expected, "{ctx}: {request:?} to a full pool");
            return;
        }
        assert!(
            self.exhaustion_explained(error, request, fired, objects),
            "{ctx}: {error:?} for {request:?} in a pool ({pool_before:?}) is not explained (injected failures {fired:?}, lost {}, {objects} objects)",
            self.lost
        );
        let no_room = matches!(error, Error::OutOfDeviceMemory | Error::OverBudget { .. });
        if !fired.any() && no_room && self.pool_has_room(request, p, objects) {
            panic!(
                "{ctx}: {error:?} for {request:?}, yet pool {pool:?} ({pool_before:?}) has room (heap usage {:?}, caps {:?}, budgets {:?}, {objects} objects)",
                self.device.heap_usage(),
                self.caps,
                self.allocator.budgets()
            );
        }
    }

    /// Whether the heap of pool `p` (and its budget, when `request` asks
    /// to stay within it) has room for a whole new block of the pool, or
    /// for the dedicated memory the request requires, below the object
    /// limit.
    fn pool_has_room(&self, request: &Request<'_>, p: &WalkPool, objects: u32) -> bool {
        if self.lost || objects >= self.layout.max_memory_allocation_count {
            return false;
        }
        let t = p.memory_type();
        let size = request.requirements.size;
        let needed = if self.pool_dedicated(t, request) {
            size
        } else {
            let placed = self.placed_size(t, request);
            p.block_size
                .unwrap_or_else(|| self.preferred[t as usize].max(placed))
        };
        self.heap_has_room(t, needed, request.desc.within_budget)
    }

    /// Whether `bytes` of one new memory object of type `t` fit its heap
    /// (and the heap's budget, when `within_budget`) and
    /// `maxMemoryAllocationSize`.
    pub(super) fn heap_has_room(&self, t: u32, bytes: u64, within_budget: bool) -> bool {
        let heap = self.layout.memory_types[t as usize].heap as usize;
        let size = self.layout.memory_heaps[heap].size;
        let limit = self.caps[heap].map_or(size, |cap| cap.min(size));
        let usage = self.device.heap_usage()[heap];
        let budget = self.allocator.budgets()[heap];
        bytes <= self.layout.max_memory_allocation_size
            && bytes <= limit.saturating_sub(usage)
            && (!within_budget || bytes <= budget.budget.saturating_sub(budget.usage))
    }
}
