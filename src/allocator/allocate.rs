//! Allocation: [`Allocator::allocate`] and its lock-free twin
//! [`allocate_mut`](Allocator::allocate_mut), which hand a request to the
//! allocation path (`place.rs`) through the pools' locks or straight to the
//! pools; [`allocate_many`](Allocator::allocate_many), all or nothing,
//! which checks every request before it places any; and
//! `allocate_and_bind`, the one cleanup path of the create-and-bind helpers
//! and upload-ring chunks when the allocation or the bind fails or panics.
//! Apart from the facade, whose file holds the allocator's state and its
//! construction; frees are `free.rs`'s.

use std::panic::{self, AssertUnwindSafe};

use super::place::{check_placeable, Exclusive, Locked, Placer};
use super::pool::read;
use super::{Allocation, Allocator, Pool, Request};
use crate::device::MemoryDeviceExt;
use crate::Error;

#[cfg(all(test, feature = "fake-device"))]
mod tests;

impl<D: MemoryDeviceExt<M>, M: Send> Allocator<D, M> {
    /// Allocates memory for `request`.
    ///
    /// # Errors
    /// Bad requests: [`Error::ZeroSize`], [`Error::AlignmentNotPowerOfTwo`],
    /// [`Error::MissingDedicatedTarget`], [`Error::DedicatedTargetMismatch`],
    /// [`Error::NoMemoryTypeBits`], [`Error::MissingRequiredFlags`] (no
    /// type allowed has every flag of
    /// [`AllocationDesc::required_flags`](crate::AllocationDesc::required_flags)),
    /// [`Error::DeviceAddressNotEnabled`]
    /// (a device-address usage on a device without buffer device address),
    /// [`Error::SizeExceedsHeaps`], [`Error::NoSuitableMemoryType`],
    /// [`Error::SizeExceedsMaxAllocation`] (checked in that order; none
    /// makes a Vulkan call).
    /// [`Error::SizeExceedsHeaps`] also when the allowed types that suit
    /// the usage all have smaller heaps, even if a type that does not suit
    /// it has a large enough one. Exhaustion, after every candidate memory
    /// type was tried: [`Error::OutOfDeviceMemory`], [`Error::OverBudget`]
    /// (within-budget requests), [`Error::NoRoomInExistingMemory`]
    /// (requests for existing memory only), [`Error::TooManyObjects`], and
    /// device errors. [`Error::OutOfHostMemory`] when the driver, or the
    /// host for a new block's slot table, ran out of host memory and no
    /// existing block of the memory types still to be tried had room (no
    /// other memory object is asked for then).
    /// [`Error::SizeExceedsHeaps`] or [`Error::SizeExceedsMaxAllocation`]
    /// also for a request that may only take a block
    /// ([`DedicatedPolicy::Never`](crate::DedicatedPolicy::Never), or a
    /// custom pool's) and that, rounded up as a block places it, passes
    /// the last memory type's heap or `maxMemoryAllocationSize` (no Vulkan
    /// call, no kept empty block released for it).
    ///
    /// A request naming a custom pool
    /// ([`AllocationDesc::pool`](crate::AllocationDesc::pool)) is checked
    /// the same way against the pool's one memory type, but for
    /// [`Error::ForeignPool`] first, and [`Error::PoolTypeNotAllowed`] in
    /// the place of [`Error::NoMemoryTypeBits`], when `memoryTypeBits`
    /// exclude that type, and [`Error::MissingRequiredFlags`] when that
    /// type lacks a required flag; then [`Error::StalePool`] (none of these makes a
    /// Vulkan call either), [`Error::TooLargeForPool`] (and, in a pool of
    /// growing blocks, the two errors above for a request that rounded
    /// passes the heap or `maxMemoryAllocationSize`), [`Error::PoolFull`],
    /// [`Error::NotExportable`] for memory dedicated to an image in a pool
    /// that exports Android hardware buffers, and in a pool that exports
    /// D3D11 textures or D3D12 resources for any memory but that dedicated
    /// to the request's resource (a block, or dedicated memory for no one
    /// resource: VUID-VkMemoryAllocateInfo-pNext-00639) (no Vulkan call
    /// either way), and the device's errors for that type.
    ///
    /// The order in which memory types, blocks and dedicated memory are
    /// tried, the smaller blocks retried when the driver refuses memory,
    /// and the refused sizes later requests skip, are described in the
    /// crate docs ("How it is built": the block sizes and the fallbacks).
    ///
    /// # Time complexity
    /// Per block tried, what its offset allocator's placement costs: O(1)
    /// with the default [`Strategy::MinTime`](crate::Strategy::MinTime)
    /// (and `MinMemory`) when a block has room (no loop over allocations),
    /// but for a request close to the block's largest free range, whose
    /// boundary bins are searched range by range
    /// ([`OffsetAllocator::allocate`](crate::offset::OffsetAllocator::allocate));
    /// with [`Strategy::MinOffset`](crate::Strategy::MinOffset) a walk over
    /// the block's allocations below the range it takes, and with
    /// [`Strategy::MaxOffset`](crate::Strategy::MaxOffset) above it
    /// ([`AllocationDesc::strategy`](crate::AllocationDesc::strategy)).
    /// A `vkAllocateMemory` call when no block has room (a few when the
    /// driver refuses the first sizes, but not again for each request once
    /// a heap refused them). A request short of memory first
    /// releases the empty blocks the memory types of the heap that ran
    /// short (every memory type, at `maxMemoryAllocationCount`) keep
    /// beyond their largest
    /// ([`Config::empty_block_reserve`](crate::Config::empty_block_reserve)),
    /// then, still short, their largest too, and is tried again after
    /// each: a pass over those types' blocks per step and a `vkFreeMemory`
    /// call per block released. A named request
    /// ([`AllocationDesc::name`](crate::AllocationDesc::name)) copies its
    /// name as it is placed: a heap allocation, O(name's length), and in a
    /// block a hash table insertion (O(1) expected). With
    /// [`Config::debug_fill`](crate::Config::debug_fill) on, O(size) more
    /// (the allocation's bytes are read and written; a new block's,
    /// O(block size)); with
    /// [`Config::detect_corruption`](crate::Config::detect_corruption), the
    /// margin's are written; with
    /// [`Config::allocation_backtraces`](crate::Config::allocation_backtraces),
    /// a backtrace is captured (an unwind of the stack, microseconds) and
    /// kept in a hash table; with
    /// [`Config::log_allocations`](crate::Config::log_allocations), a line
    /// is formatted and logged.
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
    ///
    /// # Time complexity
    /// As [`allocate`](Self::allocate), with no lock taken but the heap's,
    /// held while a `VkDeviceMemory` is made.
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
    /// (VMA's `vmaAllocateMemoryPages`, for requests that may differ). The
    /// allocations are in the order of the requests.
    ///
    /// Every request is checked first, as [`allocate`](Self::allocate)
    /// checks one before it places it: a bad one (a zero size, an
    /// alignment no power of two, no allowed memory type (or none with its
    /// required flags), too large for
    /// every heap or for a custom pool's fixed block size, or, rounded up
    /// as a block places it, for its heap or `maxMemoryAllocationSize`
    /// (a custom pool's request, or one with
    /// [`DedicatedPolicy::Never`](crate::DedicatedPolicy::Never), in
    /// every memory type it may take), one for existing memory only that
    /// needs dedicated memory, another allocator's pool or a pool
    /// destroyed before the call...) fails the
    /// call before
    /// anything is placed, so it makes no Vulkan call and leaves the
    /// allocator as it was. A request that passes the checks and still
    /// fails as it is placed (out of memory or budget, no room in the
    /// existing memory for a request for existing memory only, a custom
    /// pool full or destroyed meanwhile, or [`Error::NotExportable`] in a pool that
    /// exports Android hardware buffers, D3D11 textures or D3D12
    /// resources, which is found only then) has the allocations made for
    /// those before it freed, and its error returned.
    ///
    /// A panic of the memory callback while one is made frees those made
    /// before it too, then goes on.
    ///
    /// # Errors
    /// The first bad request's, as [`allocate`](Self::allocate) gives
    /// them, when one is bad; else the first failing request's. Nothing
    /// stays allocated then. A block made for a request before the failing
    /// one stays, empty, and is kept or released as any block that
    /// empties
    /// ([`Config::empty_block_reserve`](crate::Config::empty_block_reserve));
    /// [`trim`](Self::trim) releases it.
    ///
    /// # Time complexity
    /// That of `requests.len()` calls to [`allocate`](Self::allocate), and
    /// on failure as many frees; the checks before them are a walk over
    /// each request's ranked memory types, with no lock taken (but the
    /// custom pool table's read lock, for a request naming a pool).
    pub fn allocate_many(&self, requests: &[Request<'_>]) -> Result<Vec<Allocation>, Error> {
        for request in requests {
            let shape_of = |pool: Pool| read(&self.custom).shape(pool.tag());
            check_placeable(&self.context, self.id, request, shape_of)?;
        }
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
    pub(super) fn allocate_and_bind(
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
}
