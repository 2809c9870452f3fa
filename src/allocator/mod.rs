//! [`Allocator`]: the facade engines use.
//!
//! `Send + Sync`, its methods take `&self`, and each memory type has its own
//! lock, so threads allocating from different memory types never wait for
//! each other, except that a heap's `VkDeviceMemory` objects are made one at
//! a time (its budget check and usage count are one step). An owner that needs no sharing calls
//! [`allocate_mut`](Allocator::allocate_mut) and
//! [`free_mut`](Allocator::free_mut), which skip the lock, and
//! [`ring_allocate_mut`](Allocator::ring_allocate_mut), which skips the
//! rings' (`upload_rings/ring_allocate.rs`). Requests are
//! ranked over memory types ([`memory_type_choice`](crate::memory::memory_type_choice)), placed
//! in a type's blocks or dedicated memory ([`TypePool`]) by the allocation
//! path in `place.rs`, and handed back as [`Allocation`]s. The host's
//! access to their bytes (slices, flushes, copies) is in `host_access.rs`.
//!
//! The allocator's methods are in files of their concept beside this one:
//! allocation (`allocate.rs`) and frees (`free.rs`), deferred frees and
//! frames (`frames.rs`), custom pools (`pool.rs`), read-only queries
//! (`queries.rs`, `memory_type_queries.rs`), naming (`naming.rs`), the
//! memory callback (`memory_callback.rs`), and the others their names
//! say (aliasing, defragmentation, dumps, corruption checks, upload rings,
//! the `ash` helpers). This file holds the struct, its construction, the
//! ways into a pool, `trim` and the drop.
//!
//! # Locks
//!
//! The `&self` methods take these locks, outermost first; a path may skip
//! any, but never takes one while it holds a later one:
//! 0. `releasing`: `collect` and `collect_idle` hold it from taking frees
//!    out of the frame queue until they are carried out (so frees are
//!    carried out one call at a time, in queue order; `collect` takes it
//!    before polling the frames' signals with 1 released, so the frames
//!    it finds done stay the oldest in the queue), and
//!    `wait_and_collect` takes it to read the queue (so a frame gone from
//!    it has had its frees carried out); `free_after_frame` and
//!    `end_frame` never take it;
//! 1. `frames`, the frame queue of deferred frees (`frames.rs`): `collect`
//!    and `collect_idle` take the finished frames' frees out under it and
//!    carry them out after releasing it, under 0;
//! 2. `rings`, the upload rings (`rings.rs`; their methods in
//!    `upload_rings.rs`, their reclaim in `frames.rs`): released while a new chunk is made
//!    (`ring_allocate` and `create_upload_ring` make it with no lock held
//!    but its pool's, then put it in), and while `ring_write` copies and
//!    flushes (with its pool's lock for the flush): a pin counted in the
//!    chunk, taken under 2, holds back the reclaim of the frame written
//!    and the free of the chunk, which later calls retry under 2. The
//!    writes into a chunk also take turns (`ChunkPins::atoms`,
//!    `frames/upload_ring/write_pins.rs`): `ring_write` and `ring_flush`
//!    take the chunk's turn once 2 is released and hold it over the copy
//!    and the flush, so that only the lock of the chunk's pool (4) is
//!    taken under it, and no thread waits for it holding another (a
//!    `collect_idle` that waits for a write's pin waits with none). With
//!    debug fills, the fills and checks of ring space run under 2, taking
//!    the lock of the chunk's pool (4) for each flush and invalidate
//!    (`ring_fill.rs`);
//! 3. `custom`, the custom pools' table (`pool/table.rs`): read to clone a pool's
//!    `Arc`, written to put a pool in or take it out, and released before
//!    any pool lock is taken: never held with one;
//! 4. a pool: a memory type's default pool or a custom pool, one at a time.
//!    Calls over several pools (`stats`, `trim`, dumps, corruption checks,
//!    defragmentation plans, the release of kept empty blocks for a request
//!    short of memory) lock and release each in turn; every frame's end
//!    (`end_frame`, `end_frame_timeline`, and `collect_idle`, which
//!    releases 0 first too) releases kept empty blocks (aged ones, and
//!    those of heaps at or over budget, custom pools' included) after
//!    releasing 1 and 2, and only `try_lock`s each
//!    pool, skipping one another thread holds (it waits for a later
//!    frame: `Config::empty_block_frames`);
//! 5. a heap's remainder turn (`MemoryContext`), from sizing a default
//!    pool's remainder block on the heap's room to the block counted in
//!    the heap's usage, or refused (`type_pool/new_block.rs`; a refused
//!    one keeps it over the least block tried after it, until that is
//!    counted or refused too, and one whose map failed takes it again
//!    for that block): memory types of one heap size theirs one after
//!    another;
//! 6. a heap's turn (`MemoryContext`), from the budget check of a new
//!    memory object to its usage count, and around a free;
//! 7. the budget cache, briefly, never while the driver is read.
//!
//! No two pools' locks are ever held together, so threads in different
//! memory types or pools wait for each other only at 0, 1, 2, 5, 6 and 7.
//! The memory callback ([`Allocator::set_memory_callback`]) runs under 4
//! (and under 0 when its caller holds it), never under 1, 2, 5, 6 or 7
//! (a remainder block's turn, 5, is released with 6 once the block is
//! counted, before its `Allocated` event, its map and its debug fill);
//! `log` calls run under any of them. Neither may call into the allocator: a
//! `std` mutex locked again by the thread that holds it deadlocks (or
//! panics). Debug builds catch it on the mutexes:
//! `memory::held_lock::lock` (and its `try_lock`, `end_frame`'s) records
//! which ones each thread holds and panics, with a message naming the
//! callback, on one the thread holds already (a call into another
//! allocator meets none and goes through). The pools' locks and the
//! heaps' remainder turns (4 and 5) are taken through it: a logger given
//! a line logged under a remainder turn that asks for memory of another
//! memory type of the heap meets no pool lock of its own, but the turn.
//! Release builds, and the read-write lock of the custom pools' table,
//! check nothing. Every lock carries on after a panic poisoned it
//! (`held_lock::lock`): a critical
//! section leaves its state consistent before anything that can panic,
//! and a panic of the memory callback is resumed only once the memory
//! object it reports on is made or freed (`MemoryContext::tell`).

mod alias;
mod allocate;
mod allocation;
mod ash_helpers;
mod corruption;
mod defragment;
mod dump;
mod frames;
mod free;
mod host_access;
// Where the unit tests' allocator counts each thread's bytes
// (`host_memory_cap`).
#[cfg(all(test, feature = "fake-device", thread_counts))]
mod host_memory_tests;
mod memory_callback;
mod memory_type_queries;
mod naming;
mod place;
mod pool;
mod queries;
mod request;
mod ring_fill;
mod rings;
mod upload_rings;

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Mutex, RwLock};

use ash::vk;

pub use crate::device::DedicatedHint;
pub use allocation::Allocation;
pub use corruption::{CorruptionReport, DamagedFree, DamagedMargin};
pub use defragment::{DefragmentationLimits, DefragmentationMove, DefragmentationPlan, Movable};
use place::{exclusive, lock, try_lock};
use pool::{custom_mut, CustomPools, Home, PoolTag};
pub use pool::{Pool, PoolDesc};
pub use request::{AllocationDesc, DedicatedPolicy, Request};

use crate::device::{FrameSignal, MemoryDeviceExt};
use crate::frames::upload_ring::RING_FRAMES;
use crate::frames::{Deferred, DeferredQueue};
use crate::memory::context::{MemoryContext, MAX_HEAPS};
use crate::memory::deferred_log;
use crate::memory::first_panic::FirstPanic;
use crate::memory::type_pool::TypePool;
use crate::{Config, Error};

/// A Vulkan memory allocator over a device `D` whose memory objects are `M`
/// (`vk::DeviceMemory` for [`AshMemoryDevice`](crate::device::AshMemoryDevice)).
///
/// Dropping it frees all device memory it holds; allocations still alive then,
/// and upload rings not destroyed, are logged (`log::warn!`) with their
/// names, as leaks. Frees still waiting for their frame are carried out
/// then, whatever their fences or semaphores say (which are not read):
/// the buffers and images queued with the `destroy_*_after_frame` helpers
/// are destroyed, and those frees are no leak. The device must be idle by
/// then.
///
/// It logs through the `log` crate. Some lines go out while the call holds
/// a memory type's or custom pool's lock, and a logger must not call back
/// into the allocator on those (its call would wait for that lock):
/// - `debug`, "allocating … bytes of memory type …" and "freed … bytes of
///   memory type …": each memory object made or freed, blocks and
///   dedicated memory alike, on any call that makes or frees one;
/// - `warn`, "… retrying with a …-byte block": a block the driver (or the
///   heap's budget) refused, tried again smaller; once per memory type
///   until that type makes a memory object again;
/// - `debug`, "not asking for … bytes of memory type …: heap … refused …
///   bytes": a memory object skipped because its heap refused as many
///   bytes or fewer before (`memory/context/refusals.rs`); and "not asking
///   for … bytes of memory type …: heap … would pass its limit of …
///   bytes": one that would take this allocator's memory in a heap past
///   its [`Config::heap_size_limits`] entry.
///
/// They are not deferred as the lines below are because the calls that
/// make memory objects are the allocation and free paths themselves:
/// keeping their lines for later would cost every allocation and free a
/// per-thread check, where these lines come only from cold paths.
/// The error lines of the debug work (writes after free with
/// [`Config::debug_fill`], damaged margins with
/// [`Config::detect_corruption`]) and the debug fills' warning of a
/// failed flush or invalidate of a block's bytes are logged once the call
/// that found them has released its locks, so a logger that reacts to them
/// may call back in; so may one on "memory type … failed …; trying the
/// next one", logged between two memory types' attempts, once per memory
/// type until that type makes a memory object again, as the line above (a
/// heap at its budget refuses every request that needs new memory: they
/// warn at the first).
pub struct Allocator<D: MemoryDeviceExt<M>, M: Send = vk::DeviceMemory> {
    context: MemoryContext<D>,
    /// The default pool of each memory type.
    pools: Box<[Mutex<TypePool<M>>]>,
    /// Custom pools (`pool.rs`). Never locked while a pool is: calls take
    /// a pool's `Arc` from it, release it, then lock the pool.
    custom: RwLock<CustomPools<M>>,
    /// Tags this allocator's allocations, so foreign ones are rejected.
    /// Never repeats ([`take_allocator_id`]).
    id: u32,
    /// Held by `collect` and `collect_idle` from taking frees out of
    /// `frames` until they are carried out (`collect`: from before its
    /// polls of the frames' signals), and taken by `wait_and_collect`
    /// to read `frames`: frees out of the queue are then carried out, and
    /// in queue order. Lock order: `releasing`, `frames`, `rings`,
    /// `custom`, a pool (the module's "Locks").
    releasing: Mutex<()>,
    /// Frees waiting for frame fences.
    frames: Mutex<DeferredQueue<FrameSignal, Deferred>>,
    rings: Mutex<rings::Rings>,
}

impl<D: MemoryDeviceExt<M>, M: Send> std::fmt::Debug for Allocator<D, M> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Allocator")
            .field("device", &self.context.device)
            .field("memory_types", &self.pools.len())
            .field("id", &self.id)
            .finish()
    }
}

/// A process-wide unique tag per allocator; `None` once every tag is taken.
fn next_allocator_id() -> Option<u32> {
    static NEXT: AtomicU32 = AtomicU32::new(1);
    take_allocator_id(&NEXT)
}

/// The largest [`Config::debug_margin`]: margins catch overruns of a few
/// words (VMA's are 16 to 256 bytes). A larger one only made every block
/// request fail as out of device memory and, with detection, wrote and
/// read its whole length per allocation.
const MAX_DEBUG_MARGIN: u64 = 1 << 16;

/// Takes the next tag from `counter`, never one taken before: a tag that
/// came back would let a dropped allocator's handle (its memory freed) pass
/// for a later allocator's own, in `mapped_slice` or `free_after_frame`.
fn take_allocator_id(counter: &AtomicU32) -> Option<u32> {
    counter
        .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |id| id.checked_add(1))
        .ok()
}

impl<D: MemoryDeviceExt<M>, M: Send> Allocator<D, M> {
    /// Creates an allocator for `device`. Reads the device's memory
    /// properties once; allocates no device memory yet.
    ///
    /// Make one allocator per `VkDevice`. Each counts only its own memory
    /// objects against `maxMemoryAllocationCount` and, without
    /// `VK_EXT_memory_budget`, only its own usage against the budgets, so
    /// several on one device (or much memory allocated beside it) can
    /// together pass limits that each one respects.
    ///
    /// # Errors
    /// In this order: [`Error::InvalidConfig`] when a figure of `config` is
    /// out of range (the ranges [`Config`]'s fields give);
    /// [`Error::UnsupportedDevice`] when the device's `nonCoherentAtomSize`
    /// is not a power of two (allocations in non-coherent memory start on an
    /// atom, through the offset allocator's power-of-two alignment; VMA
    /// assumes the same; 0 is read as 1), then when it reports a
    /// `maxMemoryAllocationSize` of 0 (as lavapipe's read over an instance
    /// made for Vulkan 1.0, which
    /// [`AshMemoryDevice::new`](crate::device::AshMemoryDevice::new) rules
    /// out), then a `maxMemoryAllocationCount`
    /// of 0, then more than Vulkan's `VK_MAX_MEMORY_HEAPS` (16) heaps;
    /// [`Error::TooManyAllocators`] after 2^32 - 2 allocators in the process.
    pub fn new(device: D, config: Config) -> Result<Self, Error> {
        if config.large_heap_block_size == 0 {
            return Err(Error::InvalidConfig(
                "large_heap_block_size must be non-zero",
            ));
        }
        if !(0.0..=1.0).contains(&config.budget_fraction) {
            return Err(Error::InvalidConfig("budget_fraction must be within 0..=1"));
        }
        // Infinity is valid: every empty block kept while blocks are in use.
        if config.empty_block_reserve.is_nan() || config.empty_block_reserve < 0.0 {
            return Err(Error::InvalidConfig(
                "empty_block_reserve must be a number, at least 0",
            ));
        }
        if config.small_buffer_limit > crate::memory::runs::RUN_BYTES {
            return Err(Error::InvalidConfig(
                "small_buffer_limit must be at most 65536",
            ));
        }
        // One check per figure, so that the text names the one to fix.
        if config.initial_block_slots == 0 {
            return Err(Error::InvalidConfig("initial_block_slots must be non-zero"));
        }
        if config.max_frames_in_flight == 0 {
            return Err(Error::InvalidConfig(
                "max_frames_in_flight must be non-zero",
            ));
        }
        if config.debug_margin % 4 != 0 || config.debug_margin > MAX_DEBUG_MARGIN {
            return Err(Error::InvalidConfig(
                "debug_margin must be a multiple of 4 and at most 65536",
            ));
        }
        if config.initial_block_slots > crate::offset::MAX_SLOTS {
            return Err(Error::InvalidConfig(
                "initial_block_slots must be at most offset::MAX_SLOTS",
            ));
        }
        let properties = device.memory_properties();
        if !properties
            .device
            .non_coherent_atom_size
            .max(1)
            .is_power_of_two()
        {
            return Err(Error::UnsupportedDevice(
                "nonCoherentAtomSize must be a power of two",
            ));
        }
        // Vulkan guarantees at least 2^30 (maintenance3); a backend that
        // reports 0 would make every request fail as too large.
        if properties.device.max_memory_allocation_size == 0 {
            return Err(Error::UnsupportedDevice(
                "maxMemoryAllocationSize is 0 (read so over an instance made for Vulkan 1.0: \
                 set VkApplicationInfo::apiVersion to 1.1 or later)",
            ));
        }
        // Likewise at least 4096: with 0, every request would fail as past
        // the object limit (`TooManyObjects(0)`) with no object made.
        if properties.device.max_memory_allocation_count == 0 {
            return Err(Error::UnsupportedDevice("maxMemoryAllocationCount is 0"));
        }
        // Budgets are kept per heap in arrays of Vulkan's maximum.
        if properties.device.memory_heaps.len() > MAX_HEAPS {
            return Err(Error::UnsupportedDevice(
                "more than VK_MAX_MEMORY_HEAPS (16) memory heaps",
            ));
        }
        let id = next_allocator_id().ok_or(Error::TooManyAllocators)?;
        let types = properties.device.memory_types.len().min(32);
        let context = MemoryContext::new(device, properties, config);
        let pools = (0..types as u32)
            .map(|t| Mutex::new(TypePool::new(t, context.preferred_block_size(t))))
            .collect();
        Ok(Self {
            context,
            pools,
            custom: RwLock::new(CustomPools::default()),
            id,
            releasing: Mutex::new(()),
            // Room for the frames kept in flight, up to as many as an upload
            // ring tracks: a larger figure is no engine's, and reserving it
            // (at u32::MAX, 240 GB) aborted the process. More still queue.
            frames: Mutex::new(DeferredQueue::with_capacity(
                config.max_frames_in_flight.min(RING_FRAMES) as usize,
            )),
            rings: Mutex::new(rings::Rings::default()),
        })
    }

    /// The device backend.
    pub fn device(&self) -> &D {
        &self.context.device
    }

    /// The configuration it was created with.
    pub fn config(&self) -> &Config {
        &self.context.config
    }

    /// Runs `f` on the pool holding `allocation`, under its lock: its
    /// memory type's default pool or its custom pool.
    ///
    /// # Errors
    /// [`Error::StaleAllocation`] when its custom pool was destroyed.
    #[inline]
    fn with_pool<R>(
        &self,
        allocation: &Allocation,
        f: impl FnOnce(&mut TypePool<M>) -> R,
    ) -> Result<R, Error> {
        self.with_home_pool(allocation.home, f)
            .ok_or(Error::StaleAllocation)
    }

    /// Runs `f` on the pool `home` names, under its lock: its memory
    /// type's default pool or its custom pool; `None` when that custom
    /// pool was destroyed.
    #[inline]
    fn with_home_pool<R>(&self, home: Home, f: impl FnOnce(&mut TypePool<M>) -> R) -> Option<R> {
        let tag = home.pool();
        match tag.slot() {
            None => Some(f(&mut lock(&self.pools[home.memory_type() as usize]))),
            Some(_) => self.with_custom_pool(tag, f),
        }
    }

    /// Runs `f` on custom pool `tag` under its lock (not the table's:
    /// `pool.rs`); `None` when it was destroyed.
    #[inline(never)]
    fn with_custom_pool<R>(
        &self,
        tag: PoolTag,
        f: impl FnOnce(&mut TypePool<M>) -> R,
    ) -> Option<R> {
        pool::with_custom_pool(&self.custom, tag, f)
    }

    /// Every custom pool, each under its own lock in turn: `f` runs on
    /// those not destroyed.
    fn for_each_custom_pool(&self, f: impl FnMut(&mut TypePool<M>)) {
        pool::for_each_custom_pool(&self.custom, f);
    }

    fn check_owner(&self, allocation: &Allocation) -> Result<(), Error> {
        if allocation.allocator == self.id {
            Ok(())
        } else {
            Err(Error::ForeignAllocation)
        }
    }

    /// Releases every empty block of every memory type (each type keeps
    /// some to absorb churn: its largest, and more while its blocks are in
    /// use, [`Config::empty_block_reserve`](crate::Config::empty_block_reserve)).
    /// Returns the bytes given back to the driver.
    /// Safe at any time: empty blocks hold no allocation, so nothing on the
    /// GPU can use them.
    ///
    /// Custom pools keep their `min_blocks` blocks.
    ///
    /// # Time complexity
    /// A pass over each pool's blocks, however many it releases, and a
    /// `vkFreeMemory` call per block released (with debug fills, a read of
    /// each first).
    pub fn trim(&self) -> u64 {
        // A write after free found in a released block (debug fills) is
        // logged once the pools' locks are released.
        deferred_log::log_after_if(self.context.debug_types() != 0, || {
            let default: u64 = self
                .pools
                .iter()
                .map(|pool| lock(pool).trim(&self.context))
                .sum();
            let mut custom = 0;
            self.for_each_custom_pool(|pool| custom += pool.trim(&self.context));
            default + custom
        })
    }
}

impl<D: MemoryDeviceExt<M>, M: Send> Drop for Allocator<D, M> {
    fn drop(&mut self) {
        // A panic (of the memory callback, or of a logger) in one step
        // stops that step, not the rest: every memory object is freed
        // first, then the first panic goes on, unless the drop runs while
        // the thread unwinds already (a panic leaving it then aborts).
        let mut panics = FirstPanic::default();
        panics.run(|| self.release_all_deferred());
        for pool in self.pools.iter_mut() {
            panics.run(|| exclusive(pool).release_all(&self.context));
        }
        for cell in custom_mut(&mut self.custom).drain() {
            panics.run(|| {
                let mut pool = lock(&cell);
                if !pool.is_destroyed() {
                    pool.release_all(&self.context);
                }
            });
        }
        if !std::thread::panicking() {
            panics.resume();
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU32, Ordering};

    use super::take_allocator_id;

    /// Past 2^32 - 2 allocators no tag is left: none comes back, so no
    /// handle of a dropped allocator passes for a later one's.
    #[test]
    fn allocator_ids_never_repeat() {
        let counter = AtomicU32::new(1);
        let first = take_allocator_id(&counter);
        counter.store(u32::MAX - 1, Ordering::Relaxed);
        let later: Vec<_> = (0..3).map(|_| take_allocator_id(&counter)).collect();
        assert!(!later.contains(&first), "{first:?} again in {later:?}");
        assert_eq!(later, [Some(u32::MAX - 1), None, None]);
    }
}
