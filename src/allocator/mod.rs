//! [`Allocator`]: the facade engines use.
//!
//! `Send + Sync`, every method takes `&self`, and each memory type has its own
//! lock, so threads allocating from different memory types never wait for
//! each other. Requests are ranked over memory types
//! ([`memory_type_choice`](crate::memory)), placed in a type's blocks or
//! dedicated memory ([`TypePool`]), and handed back as [`Allocation`]s.

mod allocation;
mod ash_helpers;
mod dump;
mod frames;
mod request;

use std::ops::Range;
use std::sync::{Mutex, MutexGuard};

use ash::vk;
use gpu_alloc_types::MappedMemoryRange;

pub use allocation::Allocation;
pub use request::{AllocationDesc, DedicatedHint, DedicatedPolicy, Request};

use crate::device::{FrameSignal, MemoryDeviceExt};
use crate::frames::{Deferred, DeferredQueue};
use crate::memory::context::MemoryContext;
use crate::memory::mapping::atom_range;
use crate::memory::memory_type_choice::{rank_memory_types, RankTable};
use crate::memory::type_pool::{PoolRequest, TypePool};
use crate::memory::Usage;
use crate::report::{HeapStats, Stats, TypeStats};
use crate::{Config, Error};

/// A Vulkan memory allocator over a device `D` whose memory objects are `M`
/// (`vk::DeviceMemory` for [`AshMemoryDevice`](crate::device::AshMemoryDevice)).
///
/// Dropping it frees all device memory it holds; allocations still alive then
/// are logged (`log::warn!`) with their names, as leaks. The device must be
/// idle by then.
pub struct Allocator<D: MemoryDeviceExt<M>, M: Send = vk::DeviceMemory> {
    context: MemoryContext<D>,
    pools: Box<[Mutex<TypePool<M>>]>,
    /// Tags this allocator's allocations, so foreign ones are rejected.
    id: u32,
    /// Frees waiting for frame fences. Lock order: `frames`, then `rings`,
    /// then a memory type's pool.
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

/// A process-wide unique tag per allocator.
fn next_allocator_id() -> u32 {
    static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(1);
    NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

/// Locks a mutex, carrying on after a panic elsewhere: every critical section
/// leaves its pool consistent before anything that can panic.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl<D: MemoryDeviceExt<M>, M: Send> Allocator<D, M> {
    /// Creates an allocator for `device`. Reads the device's memory
    /// properties once; allocates no device memory yet.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] when a figure of `config` is out of range.
    pub fn new(device: D, config: Config) -> Result<Self, Error> {
        if config.large_heap_block_size == 0 {
            return Err(Error::InvalidConfig(
                "large_heap_block_size must be non-zero",
            ));
        }
        if !(0.0..=1.0).contains(&config.budget_fraction) {
            return Err(Error::InvalidConfig("budget_fraction must be within 0..=1"));
        }
        if config.initial_block_slots == 0 || config.max_frames_in_flight == 0 {
            return Err(Error::InvalidConfig(
                "initial_block_slots and max_frames_in_flight must be non-zero",
            ));
        }
        let properties = device.memory_properties();
        let types = properties.device.memory_types.len().min(32);
        let pools = (0..types as u32)
            .map(|t| Mutex::new(TypePool::new(t)))
            .collect();
        Ok(Self {
            context: MemoryContext::new(device, properties, config),
            pools,
            id: next_allocator_id(),
            frames: Mutex::new(DeferredQueue::new()),
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
    /// [`Error::NoMemoryTypeBits`], [`Error::NoSuitableMemoryType`],
    /// [`Error::SizeExceedsHeaps`]. Exhaustion, after every candidate memory
    /// type was tried: [`Error::OutOfDeviceMemory`], [`Error::OverBudget`]
    /// (within-budget requests), [`Error::TooManyObjects`], and device errors.
    ///
    /// # Time complexity
    /// O(1) per block tried when a block has room (no loop over allocations);
    /// a `vkAllocateMemory` call otherwise.
    pub fn allocate(&self, request: &Request<'_>) -> Result<Allocation, Error> {
        let requirements = &request.requirements;
        let size = requirements.size;
        if size == 0 {
            return Err(Error::ZeroSize);
        }
        if !requirements.alignment.is_power_of_two() {
            return Err(Error::AlignmentNotPowerOfTwo(requirements.alignment));
        }
        let types = self.context.memory_types();
        let existing = u32::MAX >> (32 - types.len().clamp(1, 32));
        let bits = requirements.memory_type_bits & existing;
        if bits == 0 || types.is_empty() {
            return Err(Error::NoMemoryTypeBits(requirements.memory_type_bits));
        }
        let usage = request.desc.usage;
        if usage.contains(Usage::DEVICE_ADDRESS)
            && !self.context.properties.device.buffer_device_address
        {
            return Err(Error::NoSuitableMemoryType {
                memory_type_bits: requirements.memory_type_bits,
                usage,
            });
        }
        let heaps = &self.context.properties.device.memory_heaps;
        // The ranking is precomputed per usage; the per-request filters keep
        // the order `rank_memory_types` would give (RankTable). The first
        // candidate, within its heap's budget, almost always takes the
        // request: the fallback over the others is out of line.
        let ranked = self.context.ranked_types(usage);
        let Some(first) = ranked
            .iter()
            .position(|&t| RankTable::admits(types, heaps, t, bits, size))
        else {
            return Err(self.no_candidate_error(requirements, bits, usage));
        };
        match self.allocate_in_type(u32::from(ranked[first]), request, true) {
            Ok(allocation) => Ok(allocation),
            Err(error) if error.try_next_type() => {
                self.allocate_in_next_types(request, &ranked[first..], bits, error)
            }
            Err(error) => Err(error),
        }
    }

    /// After `candidates[0]` failed within budget with `error`, tries the
    /// other admitted candidates in order, within their heaps' budgets; then,
    /// unless the caller asked for within-budget memory, every candidate over
    /// budget when a budget was what stopped one. Returns the last error when
    /// every attempt fails.
    #[cold]
    #[inline(never)]
    fn allocate_in_next_types(
        &self,
        request: &Request<'_>,
        candidates: &[u8],
        bits: u32,
        mut error: Error,
    ) -> Result<Allocation, Error> {
        let types = self.context.memory_types();
        let heaps = &self.context.properties.device.memory_heaps;
        let size = request.requirements.size;
        log::warn!(
            "vk-suballoc: memory type {} failed ({error}); trying the next one",
            candidates[0]
        );
        let mut over_budget = matches!(error, Error::OverBudget { .. });
        for (pass, within_budget) in [true, false].into_iter().enumerate() {
            if !within_budget && (request.desc.within_budget || !over_budget) {
                break;
            }
            // The first pass resumes after the candidate that failed.
            let skip = usize::from(pass == 0);
            for &memory_type in &candidates[skip..] {
                if !RankTable::admits(types, heaps, memory_type, bits, size) {
                    continue;
                }
                match self.allocate_in_type(u32::from(memory_type), request, within_budget) {
                    Ok(allocation) => return Ok(allocation),
                    Err(next) if next.try_next_type() => {
                        over_budget |= matches!(next, Error::OverBudget { .. });
                        log::warn!(
                            "vk-suballoc: memory type {memory_type} failed ({next}); trying the next one"
                        );
                        error = next;
                    }
                    Err(next) => return Err(next),
                }
            }
        }
        Err(error)
    }

    /// Why no memory type can take a request: too large for every allowed
    /// heap, or no allowed type suits the usage.
    #[cold]
    /// `bits` is `memoryTypeBits` restricted to the device's types.
    fn no_candidate_error(
        &self,
        requirements: &vk::MemoryRequirements,
        bits: u32,
        usage: Usage,
    ) -> Error {
        let types = self.context.memory_types();
        let heaps = &self.context.properties.device.memory_heaps;
        let size = requirements.size;
        debug_assert!(rank_memory_types(types, heaps, bits, usage, size).is_empty());
        let largest_heap = (0..types.len())
            .filter(|t| bits & (1 << t) != 0)
            .filter_map(|t| heaps.get(types[t].heap as usize))
            .map(|h| h.size)
            .max()
            .unwrap_or(0);
        if size > largest_heap {
            Error::SizeExceedsHeaps { size, largest_heap }
        } else {
            Error::NoSuitableMemoryType {
                memory_type_bits: requirements.memory_type_bits,
                usage,
            }
        }
    }

    fn allocate_in_type(
        &self,
        memory_type: u32,
        request: &Request<'_>,
        within_budget: bool,
    ) -> Result<Allocation, Error> {
        let properties = &self.context.properties;
        let mut align = request.requirements.alignment;
        if self.context.is_non_coherent(memory_type) {
            // Atom-aligned starts keep each allocation's widened flush and
            // invalidate ranges off its neighbours' bytes (mapping.rs).
            align = align.max(properties.device.non_coherent_atom_size.max(1));
        }
        // bufferImageGranularity: a linear and an optimal resource must not
        // share a page. Up to `max_padded_granularity`, optimal images take
        // whole pages (start and end on a page boundary), so no linear
        // resource can ever lie in one of their pages, and everything shares
        // one block class. Larger pages keep the two kinds in separate
        // blocks instead.
        let granularity = properties.buffer_image_granularity.max(1);
        let mixed_blocks = granularity <= self.context.config.max_padded_granularity;
        let linear = request.kind.is_linear();
        let class = usize::from(!mixed_blocks && !linear);
        let size = request.requirements.size;
        let placed_size = if mixed_blocks && !linear {
            align = align.max(granularity);
            size.next_multiple_of(granularity)
        } else {
            // Rounded to its own alignment: a tail sliver smaller than that
            // would only clutter the bins (on lavapipe every alignment is 64).
            size.next_multiple_of(align)
        };
        let pool_request = PoolRequest {
            size,
            placed_size,
            align,
            class,
            kind: request.kind,
            dedicated: request.dedicated_choice(),
            target: request.dedicated_target,
            name: request.desc.name,
            within_budget,
            priority: request.desc.priority,
        };
        let placement =
            lock(&self.pools[memory_type as usize]).allocate(&self.context, &pool_request)?;
        Ok(Allocation {
            memory: placement.memory,
            offset: placement.offset,
            size: request.requirements.size,
            memory_type,
            location: placement.location,
            allocator: self.id,
            mapped: placement.mapped,
        })
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
    /// O(1), plus `vkFreeMemory` when memory is released.
    pub unsafe fn free(&self, allocation: Allocation) -> Result<(), Error> {
        self.check_owner(&allocation)?;
        let mut pool = lock(&self.pools[allocation.memory_type as usize]);
        // SAFETY: the caller guarantees the GPU is done with the allocation.
        unsafe { pool.free(&self.context, allocation.location, allocation.size) }
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
    /// # Errors
    /// [`Error::ForeignAllocation`], [`Error::NotHostVisible`].
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
    /// Writes reach the GPU after [`flush`](Self::flush) on non-coherent memory.
    ///
    /// # Errors
    /// [`Error::ForeignAllocation`], [`Error::NotHostVisible`].
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

    /// Makes host writes to `range` (bytes of the allocation) visible to the
    /// GPU. A no-op on coherent memory; on non-coherent memory the range is
    /// widened to `nonCoherentAtomSize` and clamped to the memory object.
    ///
    /// # Errors
    /// [`Error::ForeignAllocation`], [`Error::RangeOutOfBounds`], device errors.
    pub fn flush(&self, allocation: &Allocation, range: Range<u64>) -> Result<(), Error> {
        self.flush_or_invalidate(allocation, range, true)
    }

    /// Makes GPU writes to `range` visible to the host. A no-op on coherent
    /// memory; widened and clamped as [`flush`](Self::flush).
    ///
    /// # Errors
    /// As [`flush`](Self::flush).
    pub fn invalidate(&self, allocation: &Allocation, range: Range<u64>) -> Result<(), Error> {
        self.flush_or_invalidate(allocation, range, false)
    }

    fn flush_or_invalidate(
        &self,
        allocation: &Allocation,
        range: Range<u64>,
        flush: bool,
    ) -> Result<(), Error> {
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
        if range.is_empty() || !self.context.is_non_coherent(allocation.memory_type) {
            return Ok(());
        }
        let pool = lock(&self.pools[allocation.memory_type as usize]);
        let (memory, memory_size) = pool
            .memory_at(allocation.location)
            .ok_or(Error::StaleAllocation)?;
        let absolute = allocation.offset + range.start..allocation.offset + range.end;
        let atom = self.context.properties.device.non_coherent_atom_size;
        let widened = atom_range(absolute, atom, memory_size);
        let ranges = [MappedMemoryRange {
            memory,
            offset: widened.start,
            size: widened.end - widened.start,
        }];
        // SAFETY: the memory is live and persistently mapped over its whole
        // size; the range lies inside it and is atom-aligned or ends at the
        // end of the memory object (VUID-VkMappedMemoryRange-memory-00684,
        // -offset-00687, -size-01390); the type lock serialises access to
        // the memory object.
        let result = unsafe {
            if flush {
                self.context.device.flush_memory_ranges(&ranges)
            } else {
                self.context.device.invalidate_memory_ranges(&ranges)
            }
        };
        result.map_err(|e| crate::device::DeviceError::from(e).into())
    }

    /// Releases every empty block of every memory type (one is normally kept
    /// per type to absorb churn). Returns the bytes given back to the driver.
    ///
    /// # Safety
    /// None needed: empty blocks hold no allocation, so nothing on the GPU
    /// can use them.
    pub fn trim(&self) -> u64 {
        self.pools
            .iter()
            .map(|pool| lock(pool).trim(&self.context))
            .sum()
    }

    /// Figures per memory type and heap, and totals. Cheap enough for every
    /// frame: one short lock per memory type, no walk over allocations.
    pub fn stats(&self) -> Stats {
        let properties = &self.context.properties.device;
        let memory_types: Vec<TypeStats> = self
            .pools
            .iter()
            .enumerate()
            .map(|(t, pool)| {
                let counters = lock(pool).counters;
                TypeStats::from_counters(t as u32, properties.memory_types[t].heap, &counters)
            })
            .collect();
        let budgets = self.context.heap_budgets();
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

    /// Whether `allocation` is a live allocation of this allocator.
    pub fn owns(&self, allocation: &Allocation) -> bool {
        allocation.allocator == self.id
            && lock(&self.pools[allocation.memory_type as usize]).is_live(allocation.location)
    }
}

impl<D: MemoryDeviceExt<M>, M: Send> Drop for Allocator<D, M> {
    fn drop(&mut self) {
        self.release_all_deferred();
        for pool in self.pools.iter_mut() {
            let pool = pool
                .get_mut()
                .unwrap_or_else(|poisoned| poisoned.into_inner());
            pool.release_all(&self.context);
        }
    }
}
