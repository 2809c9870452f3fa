//! Custom pools under the threads: two pools shared by every thread (one of
//! fixed blocks with a cap, one growing with a block made at once), which a
//! quarter of the requests name; and a private pool that one thread makes,
//! fills (some requests for existing memory only, which never add a
//! block), empties (now or after the frame) and destroys again and again,
//! refused while frees wait for their frame, which other threads may
//! collect at any time.
//!
//! Pool allocations go through the same shadow as the others: no range
//! they get overlaps anything live or held for a frame in flight.

use vk_suballoc::{AllocationDesc, Error, Pool, PoolDesc, Request, ResourceKind, Usage};

use super::super::seeded_rng::Rng;
use super::super::{free, requirements, FakeAllocator};
use super::{World, MIB};

/// The private pool's `max_blocks`.
const PRIVATE_MAX_BLOCKS: u64 = 2;

/// A pool the threads share, and what it was made with.
pub(super) struct SharedPool {
    pub(super) pool: Pool,
    /// The usage of the requests that name it: one its type serves.
    usage: Usage,
    block_size: Option<u64>,
    min_blocks: u32,
    max_blocks: Option<u32>,
}

impl SharedPool {
    /// The pools the threads share: 2 MiB blocks, at most four, of the
    /// device-local type; growing blocks, one made at once, of the upload
    /// type (which may be the same type: two pools of one type).
    pub(super) fn make(allocator: &FakeAllocator) -> [Self; 2] {
        let make = |usage, block_size, min_blocks, max_blocks: Option<u32>| {
            let memory_type = allocator.memory_type_for(!0, usage).unwrap();
            let mut desc = PoolDesc::new(memory_type)
                .block_size(block_size)
                .min_blocks(min_blocks)
                .name("shared");
            desc.max_blocks = max_blocks;
            let pool = allocator.create_pool(&desc).unwrap();
            Self {
                pool,
                usage,
                block_size: (block_size != 0).then_some(block_size),
                min_blocks,
                max_blocks,
            }
        };
        [
            make(Usage::DEVICE_LOCAL, 2 * MIB, 0, Some(4)),
            make(Usage::UPLOAD, 0, 1, None),
        ]
    }
}

/// The private pool, left holding `deferred` frees waiting for their frame
/// when a turn could not destroy it.
pub(super) struct PrivatePool {
    pool: Pool,
    deferred: u64,
}

impl World<'_> {
    /// `request` aimed at a shared pool one time in four: its usage, and a
    /// size of at most 1 MiB (so a 2 MiB block holds it, whatever the
    /// rounding).
    pub(super) fn aim_at_pool(
        &self,
        rng: &mut Rng,
        mut request: Request<'static>,
    ) -> Request<'static> {
        if rng.below(4) != 0 {
            return request;
        }
        let shared = &self.pools[rng.below(2) as usize];
        request.desc.pool = Some(shared.pool);
        request.desc.usage = shared.usage;
        request.requirements.size = request.requirements.size.min(MIB);
        request
    }

    /// The `max_blocks` of `pool`: a shared pool's, else the private
    /// pool's (2); `None` for a pool without a cap.
    pub(super) fn pool_max_blocks(&self, pool: Pool) -> Option<u64> {
        match self.pools.iter().find(|p| p.pool == pool) {
            Some(shared) => shared.max_blocks.map(u64::from),
            None => Some(PRIVATE_MAX_BLOCKS),
        }
    }

    /// Each shared pool's figures are within its description: between
    /// `min_blocks` and `max_blocks` blocks, each of its fixed size.
    pub(super) fn check_pools(&self) {
        for shared in &self.pools {
            let stats = self.allocator.pool_stats(&shared.pool).unwrap();
            let max = shared.max_blocks.map_or(u64::MAX, u64::from);
            let min = u64::from(shared.min_blocks);
            assert!((min..=max).contains(&stats.blocks), "{stats:?}");
            if let Some(size) = shared.block_size {
                assert_eq!(stats.block_bytes, stats.blocks * size, "{stats:?}");
            }
            assert_eq!(stats.memory_type, shared.pool.memory_type());
        }
    }

    /// The allocations the shared pools hold.
    pub(super) fn pooled_allocations(&self) -> u64 {
        let stats = self
            .pools
            .iter()
            .map(|p| self.allocator.pool_stats(&p.pool));
        stats.map(|s| s.unwrap().allocations()).sum()
    }

    /// Destroys the shared pools, which hold nothing any more; their handles
    /// go stale.
    pub(super) fn destroy_pools(&self) {
        for shared in &self.pools {
            assert_eq!(self.allocator.destroy_pool(shared.pool), Ok(()));
            let stale = self.allocator.pool_stats(&shared.pool);
            assert_eq!(stale, Err(Error::StalePool));
        }
    }

    /// The private pool's turn: tries to destroy it again when an earlier
    /// turn left it holding frees waiting for their frame; else makes it,
    /// fills it with one to four buffers, frees them (now, or after the
    /// frame) and destroys it. `tag` is the first tag of its allocations.
    pub(super) fn private_pool(&self, rng: &mut Rng, private: &mut Option<PrivatePool>, tag: u64) {
        if let Some(left) = private {
            if self.destroy_private(left) {
                *private = None;
            }
            return;
        }
        let memory_type = self.pools[0].pool.memory_type();
        let min_blocks = rng.below(2) as u32;
        let desc = PoolDesc::new(memory_type)
            .block_size(MIB)
            .min_blocks(min_blocks)
            .max_blocks(PRIVATE_MAX_BLOCKS as u32)
            .name("private");
        let pool = match self.allocator.create_pool(&desc) {
            Ok(pool) => pool,
            Err(error) if self.exhausted(&error) => return,
            Err(error) => panic!("create_pool: {error:?}"),
        };
        let stats = self.allocator.pool_stats(&pool).unwrap();
        assert_eq!(
            (stats.blocks, stats.allocations()),
            (u64::from(min_blocks), 0)
        );
        let mut mine = Vec::new();
        for i in 0..1 + rng.below(4) {
            let size = 4096 + rng.below(256 << 10);
            let mut desc = AllocationDesc::new(Usage::DEVICE_LOCAL).pool(pool);
            desc.existing_memory_only = rng.below(4) == 0;
            let request = Request::with_desc(requirements(size, 256), ResourceKind::Buffer, desc);
            let blocks = self.allocator.pool_stats(&pool).unwrap().blocks;
            if let Some(allocation) = self.allocate_request(&request, tag + i) {
                mine.push((tag + i, allocation));
            }
            // No other thread names the pool, so its blocks are this
            // thread's to count: a request for existing memory only makes
            // none (another thread's `trim` may release one).
            if desc.existing_memory_only {
                let now = self.allocator.pool_stats(&pool).unwrap().blocks;
                assert!(now <= blocks, "{blocks} blocks, then {now}");
            }
        }
        // No other thread names it.
        let stats = self.allocator.pool_stats(&pool).unwrap();
        assert_eq!(stats.allocations(), mine.len() as u64, "{stats:?}");
        let mut deferred = 0;
        for (tag, allocation) in mine {
            if rng.below(2) == 0 {
                self.retire(tag, &allocation);
                free(self.allocator, allocation);
            } else {
                self.free_after_frame(tag, allocation);
                deferred += 1;
            }
        }
        let left = PrivatePool { pool, deferred };
        if !self.destroy_private(&left) {
            *private = Some(left);
        }
    }

    /// Destroys the private pool, whose allocations are freed, `deferred` of
    /// them after their frame: refused while some of those wait (other
    /// threads may collect them any time), never once none was deferred.
    /// Whether it is gone.
    pub(super) fn destroy_private(&self, private: &PrivatePool) -> bool {
        let PrivatePool { pool, deferred } = *private;
        match self.allocator.destroy_pool(pool) {
            Ok(()) => {
                assert_eq!(self.allocator.pool_stats(&pool), Err(Error::StalePool));
                let request = Request::with_desc(
                    requirements(4096, 256),
                    ResourceKind::Buffer,
                    AllocationDesc::new(Usage::DEVICE_LOCAL).pool(pool),
                );
                assert_eq!(self.allocator.allocate(&request), Err(Error::StalePool));
                true
            }
            Err(Error::PoolNotEmpty { allocations }) => {
                assert!(
                    (1..=deferred).contains(&allocations),
                    "{allocations} allocations in a pool with {deferred} frees deferred"
                );
                false
            }
            Err(error) => panic!("destroy_pool: {error:?}"),
        }
    }
}
