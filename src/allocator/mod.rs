//! [`Allocator`]: the facade engines use.
//!
//! `Send + Sync`, its methods take `&self`, and each memory type has its own
//! lock, so threads allocating from different memory types never wait for
//! each other, except that a heap's `VkDeviceMemory` objects are made one at
//! a time (its budget check and usage count are one step). An owner that needs no sharing calls
//! [`allocate_mut`](Allocator::allocate_mut) and
//! [`free_mut`](Allocator::free_mut), which skip the lock. Requests are
//! ranked over memory types ([`memory_type_choice`](crate::memory::memory_type_choice)), placed
//! in a type's blocks or dedicated memory ([`TypePool`]) by the allocation
//! path in `place.rs`, and handed back as [`Allocation`]s.

mod alias;
mod allocation;
mod ash_helpers;
mod corruption;
mod defragment;
mod dump;
mod frames;
mod host_access;
mod place;
mod pool;
mod request;

use std::ops::{Bound, Range, RangeBounds};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Mutex, RwLock};

use ash::vk;

pub use crate::device::DedicatedHint;
pub use allocation::Allocation;
pub use corruption::{CorruptionReport, DamagedMargin};
pub use defragment::{DefragmentationLimits, DefragmentationMove, DefragmentationPlan, Movable};
use place::{exclusive, lock, Exclusive, Locked, Placer};
use pool::{custom_mut, read, CustomPools, PoolTag};
pub use pool::{Pool, PoolDesc};
pub use request::{AllocationDesc, DedicatedPolicy, Request};

use crate::device::{FrameSignal, MemoryDeviceExt};
use crate::frames::upload_ring::RING_FRAMES;
use crate::frames::{Deferred, DeferredQueue};
use crate::memory::context::{MemoryContext, MAX_HEAPS};
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
/// It logs (block creation and release, fallbacks, leaks) through the `log`
/// crate while holding its locks: a logger must not call back into the
/// allocator.
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
    /// Frees waiting for frame fences. Lock order: `frames`, then `rings`,
    /// then a pool (or `custom`, never both).
    frames: Mutex<DeferredQueue<FrameSignal, Deferred>>,
    rings: Mutex<frames::Rings>,
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

/// Takes the next tag from `counter`, never one taken before: a tag that
/// came back would let a dropped allocator's handle (its memory freed) pass
/// for a later allocator's own, in `mapped_slice` or `free_after_frame`.
/// `range` as a half-open range of an allocation of `size` bytes: an open
/// end is `size`, an open start 0; an inclusive end of `u64::MAX` stays
/// `u64::MAX` (past any allocation, so refused as out of bounds).
fn byte_range(range: &impl RangeBounds<u64>, size: u64) -> Range<u64> {
    let start = match range.start_bound() {
        Bound::Included(&start) => start,
        Bound::Excluded(&start) => start.saturating_add(1),
        Bound::Unbounded => 0,
    };
    let end = match range.end_bound() {
        Bound::Included(&last) => last.saturating_add(1),
        Bound::Excluded(&end) => end,
        Bound::Unbounded => size,
    };
    start..end
}

/// A range checked against an allocation's mapped slice as a slice index.
/// Its ends fit `usize`: the slice, which is that long, exists.
fn slice_range(range: &Range<u64>) -> Range<usize> {
    let index = |at: u64| usize::try_from(at).unwrap_or(usize::MAX);
    index(range.start)..index(range.end)
}

/// The largest [`Config::debug_margin`]: margins catch overruns of a few
/// words (VMA's are 16 to 256 bytes). A larger one only made every block
/// request fail as out of device memory and, with detection, wrote and
/// read its whole length per allocation.
const MAX_DEBUG_MARGIN: u64 = 1 << 16;

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
    /// [`Error::InvalidConfig`] when a figure of `config` is out of range;
    /// [`Error::UnsupportedDevice`] when the device's `nonCoherentAtomSize`
    /// is not a power of two (allocations in non-coherent memory start on an
    /// atom, through the offset allocator's power-of-two alignment; VMA
    /// assumes the same), when it reports more than Vulkan's
    /// `VK_MAX_MEMORY_HEAPS` (16) heaps, or a `maxMemoryAllocationSize` of 0;
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
        let pools = (0..types as u32)
            .map(|t| Mutex::new(TypePool::new(t)))
            .collect();
        Ok(Self {
            context: MemoryContext::new(device, properties, config),
            pools,
            custom: RwLock::new(CustomPools::default()),
            id,
            // Room for the frames kept in flight, up to as many as an upload
            // ring tracks: a larger figure is no engine's, and reserving it
            // (at u32::MAX, 240 GB) aborted the process. More still queue.
            frames: Mutex::new(DeferredQueue::with_capacity(
                config.max_frames_in_flight.min(RING_FRAMES) as usize,
            )),
            rings: Mutex::new(frames::Rings::default()),
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
    /// [`Error::MissingDedicatedTarget`],
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
    /// [`Error::ForeignPool`] first, and [`Error::PoolTypeNotAllowed`] when
    /// `memoryTypeBits` exclude that type; then [`Error::StalePool`],
    /// [`Error::TooLargeForPool`], [`Error::PoolFull`], and the device's
    /// errors for that type.
    ///
    /// # Time complexity
    /// O(1) per block tried when a block has room (no loop over allocations);
    /// a `vkAllocateMemory` call otherwise.
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

    /// Allocates for `request` and binds its resource with `bind`. When
    /// either fails, the resource is destroyed with `destroy` and what was
    /// allocated is freed, so nothing leaks: the one cleanup path of the
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
        let allocation = match self.allocate(request) {
            Ok(allocation) => allocation,
            Err(error) => {
                destroy();
                return Err(error);
            }
        };
        if let Err(error) = bind(&allocation) {
            // SAFETY: the allocation was never bound (the bind failed) and no
            // GPU work was submitted with it.
            let _ = unsafe { self.free(allocation) };
            destroy();
            return Err(error);
        }
        Ok(allocation)
    }

    /// Frees an allocation now. Its range may be handed out again at once, and
    /// a block that empties may be released with `vkFreeMemory`.
    ///
    /// # Errors
    /// [`Error::ForeignAllocation`] for another allocator's allocation;
    /// nothing changes then.
    ///
    /// # Safety
    /// No command that is pending execution on the GPU uses the allocation
    /// (VUID-vkFreeMemory-memory-00677: memory may be freed with it). When
    /// that is not known, use [`free_after_frame`](Self::free_after_frame).
    ///
    /// # Time complexity
    /// O(1), plus `vkFreeMemory` when memory is released. Releasing a block
    /// (when a second one empties) also walks the memory type's blocks, to
    /// pick the smaller of the two empty ones and unlink it.
    pub unsafe fn free(&self, allocation: Allocation) -> Result<(), Error> {
        self.check_owner(&allocation)?;
        if let Some(tag) = allocation.custom_pool() {
            // SAFETY: as for this call.
            return unsafe { self.free_in_custom_pool(tag, allocation) };
        }
        let mut pool = lock(&self.pools[allocation.memory_type() as usize]);
        if self.context.detects_corruption(allocation.memory_type()) {
            corruption::check_margin_on_free(&self.context, &mut pool, allocation.location);
        }
        // SAFETY: the caller guarantees the GPU is done with the allocation.
        unsafe { pool.free(&self.context, allocation.location, allocation.size) }
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
        self.with_custom_pool(tag, |pool| {
            if self.context.detects_corruption(allocation.memory_type()) {
                corruption::check_margin_on_free(&self.context, pool, allocation.location);
            }
            // SAFETY: the caller guarantees the GPU is done with the allocation.
            unsafe { pool.free(&self.context, allocation.location, allocation.size) }
        })
        .ok_or(Error::StaleAllocation)?
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
        if self.context.detects_corruption(allocation.memory_type()) {
            corruption::check_margin_on_free(&self.context, pool, allocation.location);
        }
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
            if context.detects_corruption(allocation.memory_type()) {
                corruption::check_margin_on_free(context, pool, allocation.location);
            }
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

    /// The bytes of a host-visible allocation, to read.
    ///
    /// The slice has the allocation's [`size`](Allocation::size): for a
    /// resource made by the helpers that is the driver's figure, which can
    /// exceed the buffer's own size (NVIDIA rounds it up to 16 bytes). Index
    /// the buffer's bytes (`&slice[..len]`) before comparing or copying.
    ///
    /// # Errors
    /// [`Error::ForeignAllocation`], [`Error::NotHostVisible`];
    /// [`Error::MapFailed`] when the allocation is larger than the host's
    /// address space (on 32-bit hosts).
    pub fn mapped_slice<'a>(&'a self, allocation: &'a Allocation) -> Result<&'a [u8], Error> {
        self.check_owner(allocation)?;
        let mapped = allocation.mapped.ok_or(Error::NotHostVisible)?;
        let len = usize::try_from(allocation.size).map_err(|_| Error::MapFailed)?;
        // SAFETY:
        // - the pointer is the persistent mapping of the allocation's memory
        //   plus its offset, and `len` bytes from it are inside the mapping:
        //   blocks stay mapped until released, and a block holding a live
        //   allocation (this one: its handle exists, so it was not freed) is
        //   never released while the allocator, borrowed for 'a, lives;
        // - no other allocation overlaps this range (the offset allocator's
        //   invariant), and a `&mut` to it needs `&mut Allocation`, which the
        //   shared borrow of `allocation` excludes for 'a.
        Ok(unsafe { std::slice::from_raw_parts(mapped.0.as_ptr(), len) })
    }

    /// The bytes of a host-visible allocation, to write (or read).
    ///
    /// As with [`mapped_slice`](Self::mapped_slice), the slice can be longer
    /// than the buffer: copy into its front,
    /// `allocator.mapped_slice_mut(&mut allocation)?[..bytes.len()].copy_from_slice(bytes)`,
    /// since `copy_from_slice` panics when the lengths differ.
    ///
    /// Writes reach the GPU after [`flush`](Self::flush) on non-coherent memory.
    ///
    /// # Errors
    /// As [`mapped_slice`](Self::mapped_slice).
    pub fn mapped_slice_mut<'a>(
        &'a self,
        allocation: &'a mut Allocation,
    ) -> Result<&'a mut [u8], Error> {
        self.check_owner(allocation)?;
        let mapped = allocation.mapped.ok_or(Error::NotHostVisible)?;
        let len = usize::try_from(allocation.size).map_err(|_| Error::MapFailed)?;
        // SAFETY: as in `mapped_slice`, and the exclusive borrow of the
        // allocation for 'a makes this the only slice of its bytes.
        Ok(unsafe { std::slice::from_raw_parts_mut(mapped.0.as_ptr(), len) })
    }

    /// Makes host writes to `range` (bytes of the allocation: `..` for all
    /// of them, `16..`, `0..len`, `0..=last`) visible to the GPU. A no-op on
    /// coherent memory; on non-coherent memory the range is widened to
    /// `nonCoherentAtomSize` and clamped to the memory object.
    ///
    /// # Errors
    /// [`Error::ForeignAllocation`]; [`Error::RangeOutOfBounds`] for a range
    /// past the allocation's end or reversed (`10..5`);
    /// [`Error::NotHostVisible`] for unmapped memory, even with an empty range
    /// (an empty range of mapped memory is `Ok`); device errors.
    pub fn flush(
        &self,
        allocation: &Allocation,
        range: impl RangeBounds<u64>,
    ) -> Result<(), Error> {
        self.flush_or_invalidate(allocation, byte_range(&range, allocation.size), true)
    }

    /// Makes GPU writes to `range` visible to the host. A no-op on coherent
    /// memory; widened and clamped as [`flush`](Self::flush).
    ///
    /// It takes the allocation by `&mut` because on non-coherent memory it
    /// changes the bytes the host sees (and drops host writes not yet
    /// flushed), so no slice of the allocation may be alive across it. A
    /// shared borrow does not do:
    ///
    /// ```compile_fail,E0308
    /// # fn f(allocator: &vk_suballoc::Allocator<vk_suballoc::device::AshMemoryDevice>,
    /// #      readback: vk_suballoc::Allocation) {
    /// let bytes = allocator.mapped_slice(&readback).unwrap();
    /// allocator.invalidate(&readback, 0..64).unwrap(); // error: expected `&mut Allocation`
    /// let first = bytes[0];
    /// # }
    /// ```
    ///
    /// and with `&mut readback` there, the borrow checker refuses it while
    /// `bytes` lives:
    ///
    /// ```compile_fail,E0502
    /// # fn f(allocator: &vk_suballoc::Allocator<vk_suballoc::device::AshMemoryDevice>,
    /// #      mut readback: vk_suballoc::Allocation) {
    /// let bytes = allocator.mapped_slice(&readback).unwrap();
    /// allocator.invalidate(&mut readback, 0..64).unwrap(); // error: `readback` is borrowed
    /// let first = bytes[0];
    /// # }
    /// ```
    ///
    /// Invalidate first, then take the slice:
    ///
    /// ```
    /// # fn f(allocator: &vk_suballoc::Allocator<vk_suballoc::device::AshMemoryDevice>,
    /// #      mut readback: vk_suballoc::Allocation) {
    /// allocator.invalidate(&mut readback, 0..64).unwrap();
    /// let first = allocator.mapped_slice(&readback).unwrap()[0];
    /// # }
    /// ```
    ///
    /// Atom widening never reaches another allocation's bytes: allocations
    /// in non-coherent memory start on a `nonCoherentAtomSize` boundary.
    ///
    /// # Errors
    /// As [`flush`](Self::flush).
    pub fn invalidate(
        &self,
        allocation: &mut Allocation,
        range: impl RangeBounds<u64>,
    ) -> Result<(), Error> {
        self.flush_or_invalidate(allocation, byte_range(&range, allocation.size), false)
    }

    /// Copies `bytes` into a host-visible allocation at `offset`, then
    /// flushes them (VMA's `vmaCopyMemoryToAllocation`): the one call an
    /// upload needs on any memory type, coherent or not.
    ///
    /// ```
    /// # fn f(allocator: &vk_suballoc::Allocator<vk_suballoc::device::AshMemoryDevice>,
    /// #      mut staging: vk_suballoc::Allocation) -> Result<(), vk_suballoc::Error> {
    /// let vertices = [0u8; 256];
    /// allocator.copy_to_allocation(&mut staging, 0, &vertices)?;
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    /// [`Error::ForeignAllocation`]; [`Error::RangeOutOfBounds`] when
    /// `offset + bytes.len()` passes the allocation's end (nothing is
    /// written); [`Error::NotHostVisible`]; device errors from the flush.
    pub fn copy_to_allocation(
        &self,
        allocation: &mut Allocation,
        offset: u64,
        bytes: &[u8],
    ) -> Result<(), Error> {
        let range = self.copy_range(allocation, offset, bytes.len())?;
        let slice = self.mapped_slice_mut(allocation)?;
        slice[slice_range(&range)].copy_from_slice(bytes);
        self.flush(allocation, range)
    }

    /// Invalidates `out.len()` bytes of a host-visible allocation at
    /// `offset`, then copies them into `out` (VMA's
    /// `vmaCopyAllocationToMemory`): the one call a readback needs on any
    /// memory type.
    ///
    /// ```
    /// # fn f(allocator: &vk_suballoc::Allocator<vk_suballoc::device::AshMemoryDevice>,
    /// #      mut readback: vk_suballoc::Allocation) -> Result<(), vk_suballoc::Error> {
    /// let mut pixels = vec![0u8; 4096];
    /// allocator.copy_from_allocation(&mut readback, 0, &mut pixels)?;
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// As with [`invalidate`](Self::invalidate), host writes to the
    /// allocation not yet flushed may be lost on non-coherent memory.
    ///
    /// # Errors
    /// As [`copy_to_allocation`](Self::copy_to_allocation); `out` is left
    /// as it was on error.
    pub fn copy_from_allocation(
        &self,
        allocation: &mut Allocation,
        offset: u64,
        out: &mut [u8],
    ) -> Result<(), Error> {
        let range = self.copy_range(allocation, offset, out.len())?;
        self.invalidate(allocation, range.clone())?;
        out.copy_from_slice(&self.mapped_slice(allocation)?[slice_range(&range)]);
        Ok(())
    }

    /// The bytes `offset..offset + len` of `allocation`, checked as the
    /// copies need them: owned, inside the allocation, host-visible.
    fn copy_range(
        &self,
        allocation: &Allocation,
        offset: u64,
        len: usize,
    ) -> Result<Range<u64>, Error> {
        self.check_owner(allocation)?;
        // Past the end either way when `offset + len` overflows.
        let end = offset.saturating_add(u64::try_from(len).unwrap_or(u64::MAX));
        if end > allocation.size {
            return Err(Error::RangeOutOfBounds {
                start: offset,
                end,
                size: allocation.size,
            });
        }
        if allocation.mapped.is_none() {
            return Err(Error::NotHostVisible);
        }
        Ok(offset..end)
    }

    /// The checks of a flush or invalidate of `range`: the allocation is
    /// this allocator's, the range lies within it, and it is mapped.
    fn check_host_range(&self, allocation: &Allocation, range: &Range<u64>) -> Result<(), Error> {
        self.check_owner(allocation)?;
        if range.start > range.end || range.end > allocation.size {
            return Err(Error::RangeOutOfBounds {
                start: range.start,
                end: range.end,
                size: allocation.size,
            });
        }
        if allocation.mapped.is_none() {
            return Err(Error::NotHostVisible);
        }
        Ok(())
    }

    fn flush_or_invalidate(
        &self,
        allocation: &Allocation,
        range: Range<u64>,
        flush: bool,
    ) -> Result<(), Error> {
        self.check_host_range(allocation, &range)?;
        if range.is_empty() || !self.context.is_non_coherent(allocation.memory_type()) {
            return Ok(());
        }
        self.with_pool(allocation, |pool| {
            let (memory, memory_size) = pool
                .memory_at(allocation.location)
                .ok_or(Error::StaleAllocation)?;
            let ranges = [self.mapped_range(allocation, &range, memory, memory_size)];
            self.flush_or_invalidate_ranges(&ranges, flush)
        })?
    }

    /// Releases every empty block of every memory type (one is normally kept
    /// per type to absorb churn). Returns the bytes given back to the driver.
    /// Safe at any time: empty blocks hold no allocation, so nothing on the
    /// GPU can use them.
    ///
    /// Custom pools keep their `min_blocks` blocks.
    pub fn trim(&self) -> u64 {
        let default: u64 = self
            .pools
            .iter()
            .map(|pool| lock(pool).trim(&self.context))
            .sum();
        let mut custom = 0;
        self.for_each_custom_pool(|pool| custom += pool.trim(&self.context));
        default + custom
    }

    /// Figures per memory type and heap, and totals. Cheap enough for every
    /// frame: one short lock per memory type and per custom pool, no walk
    /// over allocations, and
    /// with `VK_EXT_memory_budget` one query of the driver's heap budgets,
    /// as [`budgets`](Self::budgets) makes (VMA reads them once a frame).
    /// A memory type's figures count its custom pools' blocks and
    /// allocations ([`pool_stats`](Self::pool_stats) has each pool's).
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

    /// Calls `callback` on every `VkDeviceMemory` the allocator makes or
    /// frees from now on, blocks and dedicated memory alike (VMA's
    /// `pDeviceMemoryCallbacks`): for a profiler's GPU memory view (Tracy's
    /// `TracyAllocN` / `TracyFreeN` on the memory handle) or an engine's
    /// own accounting. Each `Allocated` event is followed by one `Freed`
    /// event for the same handle, at the latest when the allocator is
    /// dropped. Replaces an earlier callback.
    ///
    /// The callback runs on the thread that made or freed the memory,
    /// while the allocator holds the lock of the memory's pool: it must
    /// not call into the allocator (it would deadlock), and should be
    /// quick.
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
        self.release_all_deferred();
        for pool in self.pools.iter_mut() {
            exclusive(pool).release_all(&self.context);
        }
        for cell in custom_mut(&mut self.custom).drain() {
            let mut pool = lock(&cell);
            if !pool.is_destroyed() {
                pool.release_all(&self.context);
            }
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
