//! [`Allocator`]: the facade engines use.
//!
//! `Send + Sync`, its methods take `&self`, and each memory type has its own
//! lock, so threads allocating from different memory types never wait for
//! each other, except that a heap's `VkDeviceMemory` objects are made one at
//! a time (its budget check and usage count are one step). An owner that needs no sharing calls
//! [`allocate_mut`](Allocator::allocate_mut) and
//! [`free_mut`](Allocator::free_mut), which skip the lock, and
//! [`ring_allocate_mut`](Allocator::ring_allocate_mut), which skips the
//! rings' (`upload_rings.rs`). Requests are
//! ranked over memory types ([`memory_type_choice`](crate::memory::memory_type_choice)), placed
//! in a type's blocks or dedicated memory ([`TypePool`]) by the allocation
//! path in `place.rs`, and handed back as [`Allocation`]s. The host's
//! access to their bytes (slices, flushes, copies) is in `host_access.rs`.
//!
//! # Locks
//!
//! The `&self` methods take these locks, outermost first; a path may skip
//! any, but never takes one while it holds a later one:
//! 0. `releasing`: `collect` and `collect_idle` hold it from taking frees
//!    out of the frame queue until they are carried out (so frees are
//!    carried out one call at a time, in queue order), and
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
//!    and the free of the chunk, which later calls retry under 2. With
//!    debug fills, the fills and checks of ring space run under 2, taking
//!    the lock of the chunk's pool (4) for each flush and invalidate
//!    (`ring_fill.rs`);
//! 3. `custom`, the custom pools' table (`pool/table.rs`): read to clone a pool's
//!    `Arc`, written to put a pool in or take it out, and released before
//!    any pool lock is taken: never held with one;
//! 4. a pool: a memory type's default pool or a custom pool, one at a time.
//!    Calls over several pools (`stats`, `trim`, dumps, corruption checks,
//!    defragmentation plans, the release of kept empty blocks for a request
//!    short of memory) lock and release each in turn; `end_frame` ages
//!    empty blocks after releasing 1 and 2, and only `try_lock`s each
//!    default pool, skipping one another thread holds (it waits for a
//!    later frame: `Config::empty_block_frames`);
//! 5. a heap's turn (`MemoryContext`), from the budget check of a new
//!    memory object to its usage count, and around a free;
//! 6. the budget cache, briefly, never while the driver is read.
//!
//! No two pools' locks are ever held together, so threads in different
//! memory types or pools wait for each other only at 0, 1, 2, 5 and 6. The
//! memory callback ([`Allocator::set_memory_callback`]) runs under 4 (and
//! under 0 when its caller holds it), never under 1, 2, 5 or 6; `log`
//! calls run under any of them. Neither may call into the allocator: a
//! `std` mutex locked again by the thread that holds it deadlocks (or
//! panics). Debug builds catch it on the mutexes: `place::lock` records
//! which ones each thread holds and panics, with a message naming the
//! callback, on one the thread holds already (a call into another
//! allocator meets none and goes through); release builds, and the
//! read-write lock of the custom pools' table, check nothing. Every lock
//! carries on after a panic poisoned it (`place::lock`): a critical
//! section leaves its state consistent before anything that can panic,
//! and a panic of the memory callback is resumed only once the memory
//! object it reports on is made or freed (`MemoryContext::tell`).

mod alias;
mod allocation;
mod ash_helpers;
mod corruption;
mod defragment;
mod dump;
mod frames;
mod host_access;
mod memory_type_queries;
mod place;
mod pool;
mod request;
mod ring_fill;
mod rings;
mod upload_rings;

use std::panic::{self, AssertUnwindSafe};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Mutex, RwLock};

use ash::vk;

pub use crate::device::DedicatedHint;
pub use allocation::Allocation;
pub use corruption::{CorruptionReport, DamagedFree, DamagedMargin};
pub use defragment::{DefragmentationLimits, DefragmentationMove, DefragmentationPlan, Movable};
use place::{exclusive, lock, Exclusive, Locked, Placer};
use pool::{custom_mut, read, CustomPools, PoolTag};
pub use pool::{Pool, PoolDesc};
pub use request::{AllocationDesc, DedicatedPolicy, Request};

use crate::device::{FrameSignal, MemoryDeviceExt};
use crate::frames::upload_ring::RING_FRAMES;
use crate::frames::{Deferred, DeferredQueue};
use crate::memory::context::{MemoryContext, MAX_HEAPS};
use crate::memory::deferred_log;
use crate::memory::first_panic::FirstPanic;
use crate::memory::type_pool::TypePool;
use crate::report::{HeapStats, Stats, TypeStats};
use crate::{Config, Error};

/// A Vulkan memory allocator over a device `D` whose memory objects are `M`
/// (`vk::DeviceMemory` for [`AshMemoryDevice`](crate::device::AshMemoryDevice)).
///
/// Dropping it frees all device memory it holds; allocations still alive then
/// are logged (`log::warn!`) with their names, as leaks. The device must be
/// idle by then.
///
/// It logs through the `log` crate. Some lines go out while the call holds
/// a memory type's or custom pool's lock, and a logger must not call back
/// into the allocator on those (its call would wait for that lock):
/// - `debug`, "allocating … bytes of memory type …" and "freed … bytes of
///   memory type …": each memory object made or freed, blocks and
///   dedicated memory alike, on any call that makes or frees one;
/// - `warn`, "… retrying with a …-byte block": a block the driver refused,
///   tried again smaller.
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
/// next one", logged between two memory types' attempts.
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
    /// `frames` until they are carried out, and taken by `wait_and_collect`
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
    /// `maxMemoryAllocationSize` of 0, then more than Vulkan's
    /// `VK_MAX_MEMORY_HEAPS` (16) heaps;
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
        if config.initial_block_slots == 0 || config.max_frames_in_flight == 0 {
            return Err(Error::InvalidConfig(
                "initial_block_slots and max_frames_in_flight must be non-zero",
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
            return Err(Error::UnsupportedDevice("maxMemoryAllocationSize is 0"));
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

    /// Allocates memory for `request`.
    ///
    /// # Errors
    /// Bad requests: [`Error::ZeroSize`], [`Error::AlignmentNotPowerOfTwo`],
    /// [`Error::MissingDedicatedTarget`], [`Error::DedicatedTargetMismatch`],
    /// [`Error::NoMemoryTypeBits`], [`Error::SizeExceedsHeaps`],
    /// [`Error::NoSuitableMemoryType`], [`Error::SizeExceedsMaxAllocation`]
    /// (checked in that order, except that a device-address usage on a
    /// device without buffer device address is [`Error::NoSuitableMemoryType`]
    /// before the size checks; none makes a Vulkan call). Exhaustion, after every candidate memory
    /// type was tried: [`Error::OutOfDeviceMemory`], [`Error::OverBudget`]
    /// (within-budget requests), [`Error::NoRoomInExistingMemory`]
    /// (requests for existing memory only), [`Error::TooManyObjects`], and
    /// device errors. [`Error::OutOfHostMemory`] also when the host cannot allocate a new
    /// block's slot table (no other memory type is tried then).
    ///
    /// A request naming a custom pool ([`AllocationDesc::pool`]) is checked
    /// the same way against the pool's one memory type, but for
    /// [`Error::ForeignPool`] first, and [`Error::PoolTypeNotAllowed`] in
    /// the place of [`Error::NoMemoryTypeBits`], when `memoryTypeBits`
    /// exclude that type; then [`Error::StalePool`] (none of these makes a
    /// Vulkan call either), [`Error::TooLargeForPool`], [`Error::PoolFull`],
    /// and the device's errors for that type.
    ///
    /// # Time complexity
    /// O(1) per block tried when a block has room (no loop over allocations);
    /// a `vkAllocateMemory` call otherwise. A request short of memory first
    /// releases the empty blocks the memory types keep beyond their largest
    /// ([`Config::empty_block_reserve`](crate::Config::empty_block_reserve)):
    /// a pass over every memory type's blocks and a `vkFreeMemory` call per
    /// block, once.
    #[inline]
    pub fn allocate(&self, request: &Request<'_>) -> Result<Allocation, Error> {
        Placer {
            context: &self.context,
            allocator: self.id,
            pools: Locked {
                types: &self.pools,
                custom: &self.custom,
            },
        }
        .allocate(request)
    }

    /// [`allocate`](Self::allocate) without taking the memory type's lock
    /// (or a custom pool's): `&mut self` proves that no other thread is
    /// inside the allocator. For
    /// an engine that owns its allocator on one thread, or guards it with a
    /// lock of its own (as VMA's `EXTERNALLY_SYNCHRONIZED` flag). Allocations
    /// from either method are the same and may be freed by either.
    ///
    /// # Errors
    /// As [`allocate`](Self::allocate).
    // `#[inline]` (as on `allocate`): without the hint, whether LLVM
    // inlined this into a caller's loop flipped with changes to the
    // out-of-line debug paths it never runs (callgrind, the peers'
    // `frame-loop`: 12 % more instructions per operation when it did not).
    #[inline]
    pub fn allocate_mut(&mut self, request: &Request<'_>) -> Result<Allocation, Error> {
        Placer {
            context: &self.context,
            allocator: self.id,
            pools: Exclusive {
                types: &mut self.pools,
                custom: &mut self.custom,
            },
        }
        .allocate(request)
    }

    /// Allocates for every request of `requests`, in order, all or nothing
    /// (VMA's `vmaAllocateMemoryPages`, for requests that may differ): when
    /// one fails, the allocations made for those before it are freed and
    /// its error returned. The allocations are in the order of the
    /// requests.
    ///
    /// A panic of the memory callback while one is made frees those made
    /// before it too, then goes on.
    ///
    /// # Errors
    /// The first failing request's, as [`allocate`](Self::allocate) gives
    /// them; nothing stays allocated then.
    ///
    /// # Time complexity
    /// That of `requests.len()` calls to [`allocate`](Self::allocate), and
    /// on failure as many frees.
    pub fn allocate_many(&self, requests: &[Request<'_>]) -> Result<Vec<Allocation>, Error> {
        let mut made = Vec::with_capacity(requests.len());
        for request in requests {
            let failure = match panic::catch_unwind(AssertUnwindSafe(|| self.allocate(request))) {
                Ok(Ok(allocation)) => {
                    made.push(allocation);
                    continue;
                }
                Ok(Err(error)) => Ok(error),
                Err(payload) => Err(payload),
            };
            for allocation in made {
                // SAFETY: made above and handed to nobody, so no GPU work
                // uses it. A panic of the callback on one free does not
                // stop the others (the first failure goes on below).
                let _ = panic::catch_unwind(AssertUnwindSafe(|| unsafe { self.free(allocation) }));
            }
            return match failure {
                Ok(error) => Err(error),
                Err(payload) => panic::resume_unwind(payload),
            };
        }
        Ok(made)
    }

    /// Allocates for `request` and binds its resource with `bind`. When
    /// either fails (or panics), the resource is destroyed with `destroy`
    /// and what was allocated is freed, so nothing leaks: the one cleanup path of the
    /// create-allocate-bind helpers and upload-ring chunks.
    ///
    /// # Errors
    /// The allocation's error, or `bind`'s.
    fn allocate_and_bind(
        &self,
        request: &Request<'_>,
        bind: impl FnOnce(&Allocation) -> Result<(), Error>,
        destroy: impl FnOnce(),
    ) -> Result<Allocation, Error> {
        // A panic of the memory callback, once the memory it reported on
        // is freed again (`MemoryContext::tell`), destroys the resource too
        // before it goes on: unwound past `destroy`, the resource leaked.
        let allocation = match panic::catch_unwind(AssertUnwindSafe(|| self.allocate(request))) {
            Ok(Ok(allocation)) => allocation,
            Ok(Err(error)) => {
                destroy();
                return Err(error);
            }
            Err(payload) => {
                destroy();
                panic::resume_unwind(payload);
            }
        };
        // A backend that panics in the bind (a bug, caught by the engine)
        // is a failed bind too: unwound past the cleanup, the allocation
        // stayed allocated until the allocator's drop, and the resource
        // leaked.
        let failure = match panic::catch_unwind(AssertUnwindSafe(|| bind(&allocation))) {
            Ok(Ok(())) => return Ok(allocation),
            Ok(Err(error)) => Ok(error),
            Err(payload) => Err(payload),
        };
        // SAFETY: no GPU work was submitted with the allocation: the bind
        // failed or panicked, so its resource is destroyed unused.
        let freed = panic::catch_unwind(AssertUnwindSafe(|| unsafe { self.free(allocation) }));
        destroy();
        match (failure, freed) {
            (Err(payload), _) | (Ok(_), Err(payload)) => panic::resume_unwind(payload),
            (Ok(error), Ok(_)) => Err(error),
        }
    }

    /// Frees an allocation now. Its range may be handed out again at once, and
    /// a block that empties may be released with `vkFreeMemory`.
    ///
    /// # Errors
    /// [`Error::ForeignAllocation`] for another allocator's allocation;
    /// [`Error::StaleAllocation`] for one whose memory is no longer live
    /// (the handle is not `Clone` and a pool with allocations is not
    /// destroyed, so only a forged handle gets it); nothing changes then.
    ///
    /// # Safety
    /// No command that is pending execution on the GPU uses the allocation
    /// (VUID-vkFreeMemory-memory-00677: memory may be freed with it). When
    /// that is not known, use [`free_after_frame`](Self::free_after_frame).
    ///
    /// # Time complexity
    /// O(1), plus `vkFreeMemory` when memory is released. A block that
    /// empties while others are empty also walks the memory type's blocks
    /// and sorts the empty ones, to release those past what the type keeps
    /// ([`Config::empty_block_reserve`](crate::Config::empty_block_reserve)),
    /// smallest first, and unlink them.
    pub unsafe fn free(&self, allocation: Allocation) -> Result<(), Error> {
        self.check_owner(&allocation)?;
        if let Some(tag) = allocation.custom_pool() {
            // SAFETY: as for this call.
            return unsafe { self.free_in_custom_pool(tag, allocation) };
        }
        if self.context.is_debug_type(allocation.memory_type()) {
            // SAFETY: as for this call.
            return unsafe { self.free_debug(allocation) };
        }
        let mut pool = lock(&self.pools[allocation.memory_type() as usize]);
        // SAFETY: the caller guarantees the GPU is done with the
        // allocation; its memory type has no debug work (above).
        unsafe { pool.free_plain(&self.context, allocation.location, allocation.size) }
    }

    /// [`free`](Self::free) of an allocation of a default pool whose memory
    /// type has debug work (margins, debug fills): the lines of a damaged
    /// margin or a write after free it finds under the pool's lock are
    /// logged once the lock is released (`deferred_log`), so that a logger
    /// may call back into the allocator. Out of line, as the debug work.
    ///
    /// # Safety
    /// As [`free`](Self::free).
    #[cold]
    #[inline(never)]
    unsafe fn free_debug(&self, allocation: Allocation) -> Result<(), Error> {
        deferred_log::log_after(|| {
            let mut pool = lock(&self.pools[allocation.memory_type() as usize]);
            // SAFETY: the caller guarantees the GPU is done with the
            // allocation.
            unsafe { pool.free(&self.context, allocation.location, allocation.size) }
        })
    }

    /// [`free`](Self::free) of an allocation of custom pool `tag`. Out of
    /// line: the default pools' free path pays one test for pools.
    ///
    /// # Safety
    /// As [`free`](Self::free).
    #[inline(never)]
    unsafe fn free_in_custom_pool(
        &self,
        tag: PoolTag,
        allocation: Allocation,
    ) -> Result<(), Error> {
        let free = || {
            self.with_custom_pool(tag, |pool| {
                // SAFETY: the caller guarantees the GPU is done with the allocation.
                unsafe { pool.free(&self.context, allocation.location, allocation.size) }
            })
            .ok_or(Error::StaleAllocation)?
        };
        if self.context.is_debug_type(allocation.memory_type()) {
            // Lines found under the pool's lock, logged once it is released.
            return deferred_log::log_after(free);
        }
        free()
    }

    /// [`free`](Self::free) without taking the memory type's lock (or a
    /// custom pool's), as
    /// [`allocate_mut`](Self::allocate_mut).
    ///
    /// # Errors
    /// As [`free`](Self::free).
    ///
    /// # Safety
    /// As [`free`](Self::free).
    pub unsafe fn free_mut(&mut self, allocation: Allocation) -> Result<(), Error> {
        self.check_owner(&allocation)?;
        if let Some(tag) = allocation.custom_pool() {
            // SAFETY: as for this call.
            return unsafe { self.free_mut_in_custom_pool(tag, allocation) };
        }
        let pool = exclusive(&mut self.pools[allocation.memory_type() as usize]);
        // SAFETY: the caller guarantees the GPU is done with the allocation.
        unsafe { pool.free(&self.context, allocation.location, allocation.size) }
    }

    /// [`free_mut`](Self::free_mut) of an allocation of custom pool `tag`,
    /// with no lock taken. Out of line, as `free_in_custom_pool`.
    ///
    /// # Safety
    /// As [`free`](Self::free).
    #[inline(never)]
    unsafe fn free_mut_in_custom_pool(
        &mut self,
        tag: PoolTag,
        allocation: Allocation,
    ) -> Result<(), Error> {
        let context = &self.context;
        pool::with_custom_pool_mut(&mut self.custom, tag, |pool| {
            // SAFETY: the caller guarantees the GPU is done with the allocation.
            unsafe { pool.free(context, allocation.location, allocation.size) }
        })
        .ok_or(Error::StaleAllocation)?
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
        match allocation.custom_pool() {
            None => Ok(f(&mut lock(&self.pools[allocation.memory_type() as usize]))),
            Some(tag) => self.with_custom_pool(tag, f).ok_or(Error::StaleAllocation),
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
    fn for_each_custom_pool(&self, mut f: impl FnMut(&mut TypePool<M>)) {
        let cells = read(&self.custom).snapshot();
        for (_, cell) in cells {
            let mut pool = lock(&cell);
            if !pool.is_destroyed() {
                f(&mut pool);
            }
        }
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

    /// Figures per memory type and heap, and totals. Cheap enough for every
    /// frame: one short lock per memory type and per custom pool, no walk
    /// over allocations, and
    /// with `VK_EXT_memory_budget` one query of the driver's heap budgets,
    /// as [`budgets`](Self::budgets) makes (VMA reads them once a frame).
    /// A memory type's figures count its custom pools' blocks and
    /// allocations ([`pool_stats`](Self::pool_stats) has each pool's).
    ///
    /// While other threads allocate and free, each pool's figures are read
    /// whole under its lock, but one pool after another, and the memory
    /// object count and budgets after them: the totals may then mix
    /// moments (say, `memory_objects` one more than the blocks and
    /// dedicated allocations counted). They agree whenever no other call
    /// runs.
    pub fn stats(&self) -> Stats {
        let properties = &self.context.properties.device;
        let mut counters: Vec<_> = self.pools.iter().map(|pool| lock(pool).counters).collect();
        self.for_each_custom_pool(|pool| counters[pool.memory_type() as usize] += pool.counters);
        let memory_types: Vec<TypeStats> = counters
            .iter()
            .enumerate()
            .map(|(t, counters)| {
                TypeStats::from_counters(t as u32, properties.memory_types[t].heap, counters)
            })
            .collect();
        let budgets = self.context.fresh_heap_budgets();
        let heaps = properties
            .memory_heaps
            .iter()
            .enumerate()
            .map(|(h, heap)| HeapStats::sum(h as u32, heap.size, budgets[h], &memory_types))
            .collect();
        Stats {
            memory_types,
            heaps,
            memory_objects: self.context.memory_object_count(),
        }
    }

    /// The size of the `VkDeviceMemory` `allocation` lives in
    /// ([`Allocation::memory`]): its block's, or its dedicated memory's
    /// (then the allocation's [`size`](Allocation::size)). An importer of
    /// memory exported from a custom pool ([`PoolDesc::export`](crate::PoolDesc::export))
    /// names it as `allocationSize` (for opaque handles, with the pool's
    /// memory type), and finds the allocation at its
    /// [`offset`](Allocation::offset).
    ///
    /// # Errors
    /// [`Error::ForeignAllocation`], [`Error::StaleAllocation`].
    ///
    /// # Time complexity
    /// O(1), under the lock of the allocation's pool.
    pub fn memory_size(&self, allocation: &Allocation) -> Result<u64, Error> {
        self.check_owner(allocation)?;
        self.with_pool(allocation, |pool| {
            pool.memory_at(allocation.location)
                .map(|(_, size)| size)
                .ok_or(Error::StaleAllocation)
        })?
    }

    /// Names `allocation` anew, or drops its name with `None` (VMA's
    /// `vmaSetAllocationName`): the name leak reports, memory maps, dumps
    /// and corruption reports give it. Dedicated memory (its own
    /// `VkDeviceMemory`, from the default pools or a custom pool) is
    /// renamed for debuggers and validation messages too
    /// (`VK_EXT_debug_utils`, through
    /// [`MemoryDeviceExt::set_memory_name`]):
    /// it gets the debug name a new allocation of that name would, `name`
    /// itself, or for `None` `vk-suballoc dedicated <type>/<n>` (in a
    /// custom pool `vk-suballoc pool "<pool>" dedicated <type>/<n>`, or
    /// `vk-suballoc custom pool dedicated <type>/<n>` when the pool has no
    /// name, as its blocks are named). A block's debug name stays the
    /// block's.
    ///
    /// # Errors
    /// [`Error::ForeignAllocation`], [`Error::StaleAllocation`]; nothing
    /// changes then.
    ///
    /// # Time complexity
    /// O(1) expected (a hash table entry), under the lock of the
    /// allocation's pool; for dedicated memory, one
    /// `vkSetDebugUtilsObjectNameEXT` call there as well.
    pub fn set_name(&self, allocation: &Allocation, name: Option<&str>) -> Result<(), Error> {
        self.check_owner(allocation)?;
        self.with_pool(allocation, |pool| {
            pool.rename(&self.context, allocation.location, name)
        })?
    }

    /// Calls `callback` on every `VkDeviceMemory` the allocator makes or
    /// frees from now on, blocks and dedicated memory alike (VMA's
    /// `pDeviceMemoryCallbacks`): for a profiler's GPU memory view (Tracy's
    /// `TracyAllocN` / `TracyFreeN` on the memory handle) or an engine's
    /// own accounting. Each `Allocated` event is followed by one `Freed`
    /// event for the same handle, at the latest when the allocator is
    /// dropped. Replaces an earlier callback.
    ///
    /// The callback runs on the thread that made or freed the memory,
    /// while the allocator holds the lock of the memory's pool (and, in
    /// [`collect`](Self::collect), [`collect_idle`](Self::collect_idle) and
    /// [`wait_and_collect`](Self::wait_and_collect), the lock those calls
    /// carry out their frees under, which other threads' calls to them wait
    /// for): it must not call into the allocator (it would deadlock on a
    /// lock its own thread holds; debug builds panic instead, with a
    /// message that says so; a call into another allocator is fine), and
    /// should be quick.
    ///
    /// A panic in the callback reaches the caller of the method that made
    /// or freed the memory, once that memory object is made and freed
    /// again (a `Freed` event follows the panicking `Allocated` one), or
    /// freed: no memory object, usage or object count is left behind, and
    /// the allocator carries on from every thread. [`collect`](Self::collect),
    /// [`collect_idle`](Self::collect_idle) and
    /// [`wait_and_collect`](Self::wait_and_collect) carry out the other
    /// frees they took out of the frame queue first, and the allocator's
    /// drop the other queued frees, upload-ring chunks and pools' memory
    /// (the panic is dropped when the drop runs while its thread unwinds
    /// already: a second panic would abort); [`create_pool`](Self::create_pool)
    /// frees the blocks it made before, and [`destroy_pool`](Self::destroy_pool)
    /// the pool's other blocks (the pool is gone, its slot free), and
    /// [`end_frame`](Self::end_frame) has sealed its frame. Other calls
    /// that were to make or free more objects stop at that one: the blocks
    /// they had not released stay in their pools. A logger (the `log`
    /// crate's) that panics on one of the allocator's lines leaves nothing
    /// behind either.
    ///
    /// ```
    /// use std::sync::atomic::{AtomicU64, Ordering};
    /// use std::sync::Arc;
    /// use vk_suballoc::device::fake::{FakeDevice, FakeLayout};
    /// use vk_suballoc::{Allocator, Config, MemoryEventKind, Request, ResourceKind, Usage};
    ///
    /// let mut allocator = Allocator::new(FakeDevice::new(FakeLayout::discrete()), Config::default())?;
    /// let reserved = Arc::new(AtomicU64::new(0));
    /// let counter = Arc::clone(&reserved);
    /// allocator.set_memory_callback(move |event| {
    ///     match event.kind {
    ///         MemoryEventKind::Allocated => counter.fetch_add(event.size, Ordering::Relaxed),
    ///         MemoryEventKind::Freed => counter.fetch_sub(event.size, Ordering::Relaxed),
    ///     };
    /// });
    /// let requirements = ash::vk::MemoryRequirements { size: 4096, alignment: 256, memory_type_bits: !0 };
    /// let vertices = allocator.allocate(&Request::new(requirements, Usage::DEVICE_LOCAL, ResourceKind::Buffer))?;
    /// assert_eq!(reserved.load(Ordering::Relaxed), allocator.stats().reserved_bytes());
    /// // SAFETY: the fake device runs no GPU work.
    /// unsafe { allocator.free(vertices)? };
    /// drop(allocator);
    /// assert_eq!(reserved.load(Ordering::Relaxed), 0);
    /// # Ok::<(), vk_suballoc::Error>(())
    /// ```
    pub fn set_memory_callback(
        &mut self,
        callback: impl Fn(&crate::MemoryEvent<'_>) + Send + Sync + 'static,
    ) {
        self.context
            .set_callback(crate::memory::events::MemoryCallback(Box::new(callback)));
    }

    /// Whether `allocation` is a live allocation of this allocator.
    pub fn owns(&self, allocation: &Allocation) -> bool {
        allocation.allocator == self.id
            && self
                .with_pool(allocation, |pool| pool.is_live(allocation.location))
                .unwrap_or(false)
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
