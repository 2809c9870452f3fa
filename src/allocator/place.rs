//! The allocation path: checks a request, ranks memory types and places it
//! in the first one that can take it. [`Placer`] reaches each memory type's
//! pool through a [`PoolAccess`]: its lock for [`Allocator::allocate`](crate::Allocator::allocate),
//! or directly for [`Allocator::allocate_mut`](crate::Allocator::allocate_mut),
//! whose `&mut self` proves no other thread is inside the allocator. A
//! request naming a custom pool goes to that pool alone
//! (`allocate_in_pool`), through the same access.

use std::panic::{self, AssertUnwindSafe};
use std::sync::{Mutex, MutexGuard, RwLock};

use ash::vk;

use super::pool::{
    pool_type_serves, type_bit, with_custom_pool, with_custom_pool_mut, CustomPools, Home, PoolTag,
};
use super::{Allocation, AllocationDesc, Pool, Request};
use crate::device::{DedicatedTarget, MemoryDeviceExt};
use crate::memory::context::MemoryContext;
use crate::memory::deferred_log;
use crate::memory::memory_type_choice::rank_memory_types;
use crate::memory::runs::class_of;
use crate::memory::type_pool::{DedicatedChoice, Placement, PoolRequest, TypePool};
use crate::memory::ResourceKind;
use crate::Error;

/// Locks a mutex, carrying on after a panic elsewhere: every critical section
/// leaves its pool consistent before anything that can panic.
///
/// Debug builds panic instead of deadlocking when this thread holds the
/// mutex already, as it does when a memory callback
/// ([`Allocator::set_memory_callback`](super::Allocator::set_memory_callback)),
/// which runs under a pool's lock, calls back into the allocator running it.
pub(super) fn lock<T>(mutex: &Mutex<T>) -> Held<'_, T> {
    #[cfg(debug_assertions)]
    let key = held::enter(mutex as *const Mutex<T> as usize);
    Held {
        guard: mutex
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner()),
        #[cfg(debug_assertions)]
        key,
    }
}

/// A mutex held through [`lock`]: its guard, and in debug builds the
/// record that this thread holds it (dropped with the guard).
pub(super) struct Held<'a, T> {
    guard: MutexGuard<'a, T>,
    #[cfg(debug_assertions)]
    key: usize,
}

impl<T> std::ops::Deref for Held<'_, T> {
    type Target = T;

    #[inline]
    fn deref(&self) -> &T {
        &self.guard
    }
}

impl<T> std::ops::DerefMut for Held<'_, T> {
    #[inline]
    fn deref_mut(&mut self) -> &mut T {
        &mut self.guard
    }
}

#[cfg(debug_assertions)]
impl<T> Drop for Held<'_, T> {
    fn drop(&mut self) {
        held::leave(self.key);
    }
}

/// Debug builds' record of the mutexes each thread holds through [`lock`].
#[cfg(debug_assertions)]
mod held {
    use std::cell::RefCell;

    thread_local! {
        static HELD: RefCell<Vec<usize>> = const { RefCell::new(Vec::new()) };
    }

    /// Records that this thread is about to lock the mutex at `key`, and
    /// panics when it holds it already: the lock would never be granted.
    pub(super) fn enter(key: usize) -> usize {
        // No record during the thread's teardown (the allocator dropped
        // by another thread-local's destructor): nothing is checked then.
        let _ = HELD.try_with(|held| {
            let mut held = held.borrow_mut();
            let again = held.contains(&key);
            if !again {
                held.push(key);
            }
            drop(held);
            assert!(
                !again,
                "vk-suballoc: this thread already holds this lock of the allocator, which \
                 would deadlock: a memory callback (Allocator::set_memory_callback) called \
                 into the allocator running it"
            );
        });
        key
    }

    /// The mutex at `key` was unlocked.
    pub(super) fn leave(key: usize) {
        let _ = HELD.try_with(|held| {
            let mut held = held.borrow_mut();
            if let Some(index) = held.iter().rposition(|&k| k == key) {
                held.swap_remove(index);
            }
        });
    }
}

/// The value behind a mutex we hold exclusively: no lock taken. Carries on
/// after a panic as [`lock`] does.
pub(super) fn exclusive<T>(mutex: &mut Mutex<T>) -> &mut T {
    mutex
        .get_mut()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// How the allocation path reaches the pool of a memory type.
pub(super) trait PoolAccess {
    /// The pools' memory objects.
    type Memory;

    /// Runs `f` on the default pool of `memory_type`, with exclusive
    /// access to it.
    fn with_pool<R>(
        &mut self,
        memory_type: u32,
        f: impl FnOnce(&mut TypePool<Self::Memory>) -> R,
    ) -> R;

    /// Runs `f` on custom pool `tag`, with exclusive access to it; `None`
    /// when it was destroyed.
    fn with_custom_pool<R>(
        &mut self,
        tag: PoolTag,
        f: impl FnOnce(&mut TypePool<Self::Memory>) -> R,
    ) -> Option<R>;
}

/// Through each pool's lock: the `&self` methods.
pub(super) struct Locked<'a, M> {
    pub(super) types: &'a [Mutex<TypePool<M>>],
    pub(super) custom: &'a RwLock<CustomPools<M>>,
}

impl<M> PoolAccess for Locked<'_, M> {
    type Memory = M;

    #[inline]
    fn with_pool<R>(&mut self, memory_type: u32, f: impl FnOnce(&mut TypePool<M>) -> R) -> R {
        f(&mut lock(&self.types[memory_type as usize]))
    }

    fn with_custom_pool<R>(
        &mut self,
        tag: PoolTag,
        f: impl FnOnce(&mut TypePool<M>) -> R,
    ) -> Option<R> {
        with_custom_pool(self.custom, tag, f)
    }
}

/// Straight to the pools, no lock: the `&mut self` methods.
pub(super) struct Exclusive<'a, M> {
    pub(super) types: &'a mut [Mutex<TypePool<M>>],
    pub(super) custom: &'a mut RwLock<CustomPools<M>>,
}

impl<M> PoolAccess for Exclusive<'_, M> {
    type Memory = M;

    #[inline]
    fn with_pool<R>(&mut self, memory_type: u32, f: impl FnOnce(&mut TypePool<M>) -> R) -> R {
        f(exclusive(&mut self.types[memory_type as usize]))
    }

    fn with_custom_pool<R>(
        &mut self,
        tag: PoolTag,
        f: impl FnOnce(&mut TypePool<M>) -> R,
    ) -> Option<R> {
        with_custom_pool_mut(self.custom, tag, f)
    }
}

/// The largest alignment a block allocation's size is rounded up to
/// ([`Placer::allocate_in_type`]).
pub(super) const MAX_TAIL_ROUNDING: u64 = 4096;

/// `value` rounded up to a multiple of `to`, a power of two: every
/// alignment is one (requests are checked, `nonCoherentAtomSize` is checked
/// at creation, and only power-of-two pages are padded to). A mask, not
/// `next_multiple_of`: a 64-bit division has a longer latency than the rest
/// of the request's rounding and checks together, and the placement waits
/// for it.
///
/// Saturates at `u64::MAX` when the multiple would pass it (only a heap of
/// nearly 2^64 bytes admits such a size): no block can hold that many
/// bytes, so the request goes to dedicated memory, of its exact size, or
/// fails. Wrapped, it became a tiny placed size that took a run slot.
#[inline]
fn round_up(value: u64, to: u64) -> u64 {
    debug_assert!(to.is_power_of_two());
    value
        .checked_add(to - 1)
        .map_or(u64::MAX, |end| end & !(to - 1))
}

/// What every request's `VkMemoryRequirements` must be: a non-zero size
/// ([`Error::ZeroSize`]) and a power-of-two alignment
/// ([`Error::AlignmentNotPowerOfTwo`]), as Vulkan's always are.
#[inline]
pub(super) fn check_requirements(requirements: &vk::MemoryRequirements) -> Result<(), Error> {
    if requirements.size == 0 {
        return Err(Error::ZeroSize);
    }
    if !requirements.alignment.is_power_of_two() {
        return Err(Error::AlignmentNotPowerOfTwo(requirements.alignment));
    }
    Ok(())
}

/// The checks of every request before any memory type is looked at:
/// [`check_requirements`], a power-of-two (or 0) `min_alignment`
/// ([`Error::AlignmentNotPowerOfTwo`]), then
/// [`Error::MissingDedicatedTarget`] when the driver requires dedicated
/// memory and the request names no resource, and
/// [`Error::DedicatedTargetMismatch`] when the resource it names is not of
/// its kind.
#[inline]
fn check_request(request: &Request<'_>) -> Result<(), Error> {
    check_requirements(&request.requirements)?;
    check_min_alignment(request.desc.min_alignment)?;
    match (request.dedicated_target, request.kind) {
        (None, _) if request.driver_dedicated.required => Err(Error::MissingDedicatedTarget),
        (
            Some(DedicatedTarget::Buffer(_)),
            ResourceKind::LinearImage | ResourceKind::OptimalImage,
        )
        | (Some(DedicatedTarget::Image(_)), ResourceKind::Buffer) => {
            Err(Error::DedicatedTargetMismatch)
        }
        _ => Ok(()),
    }
}

/// [`Error::AlignmentNotPowerOfTwo`] for a `min_alignment` that is
/// neither 0 nor a power of two.
#[inline]
fn check_min_alignment(min_alignment: u64) -> Result<(), Error> {
    if min_alignment & min_alignment.wrapping_sub(1) != 0 {
        return Err(Error::AlignmentNotPowerOfTwo(min_alignment));
    }
    Ok(())
}

/// The checks of [`Allocator::allocate`](crate::Allocator::allocate) that
/// look at `desc` alone, in its order: [`Error::ForeignPool`] for a pool
/// of another allocator than `allocator`, then a `min_alignment` that is
/// no power of two. The create-and-bind helpers make them before they
/// create the resource, so that a request refused for them creates
/// nothing, and `allocate` makes them again. Its only checks before them
/// are of the requirements (a zero size, an alignment no power of two),
/// which a resource's requirements from the driver always pass, so the
/// error is the one `allocate` would give.
pub(super) fn check_desc(allocator: u32, desc: &AllocationDesc<'_>) -> Result<(), Error> {
    if desc.pool.is_some_and(|pool| pool.allocator != allocator) {
        return Err(Error::ForeignPool);
    }
    check_min_alignment(desc.min_alignment)
}

/// One allocation's walk over the memory types.
pub(super) struct Placer<'a, D, P> {
    pub(super) context: &'a MemoryContext<D>,
    /// The allocator's tag, stamped on each [`Allocation`].
    pub(super) allocator: u32,
    pub(super) pools: P,
}

impl<D, P> Placer<'_, D, P>
where
    P: PoolAccess,
    P::Memory: Send,
    D: MemoryDeviceExt<P::Memory>,
{
    /// [`Allocator::allocate`](crate::Allocator::allocate), whose docs say
    /// what it checks and returns.
    #[inline]
    pub(super) fn allocate(&mut self, request: &Request<'_>) -> Result<Allocation, Error> {
        if self.context.debug_types() != 0 {
            return self.allocate_debug(request);
        }
        self.allocate_plain(request)
    }

    /// [`allocate`](Self::allocate) with corruption detection or debug
    /// fills on in some memory type: the allocation, then, under its
    /// pool's lock taken again (it is handed to nobody yet), the check of
    /// its bytes and their fill (`debug_fill.rs`) and the pattern over its
    /// margin. A write after free the check finds is logged once the lock
    /// is released, with the lines of the kept empty blocks released for
    /// the request (`deferred_log`). Out of line, so that the default path
    /// pays one test for both: tested after the placement instead, with
    /// the placement kept for the call, it cost 8 to 13 more instructions
    /// per allocation (callgrind, `frame-loop`).
    #[cold]
    #[inline(never)]
    fn allocate_debug(&mut self, request: &Request<'_>) -> Result<Allocation, Error> {
        let (outcome, mut lines) = deferred_log::deferring(|| self.allocate_checked(request));
        let (allocation, written_after_free) = match outcome {
            Ok(Ok(made)) => made,
            Ok(Err(error)) => {
                lines.log();
                return Err(error);
            }
            Err(payload) => {
                lines.log_quietly();
                panic::resume_unwind(payload);
            }
        };
        if let Some(line) = written_after_free {
            lines.push(log::Level::Error, line);
        }
        // A logger panicking on a line (one that fails a test on an
        // error): the allocation, handed to nobody, is freed before the
        // panic goes on, or it stayed live until the drop.
        if let Err(payload) = panic::catch_unwind(AssertUnwindSafe(|| lines.log())) {
            self.free_unused(&allocation);
            panic::resume_unwind(payload);
        }
        Ok(allocation)
    }

    /// The allocation of [`allocate_debug`](Self::allocate_debug), and
    /// the debug work on it under its pool's lock, whose line about a
    /// write after free it returns. A backend panicking in a flush or
    /// invalidate of the check and fill (non-coherent types): the
    /// allocation, handed to nobody, is freed before the panic goes on.
    fn allocate_checked(
        &mut self,
        request: &Request<'_>,
    ) -> Result<(Allocation, Option<String>), Error> {
        let allocation = self.allocate_plain(request)?;
        let memory_type = allocation.memory_type();
        if !self.context.is_debug_type(memory_type) {
            return Ok((allocation, None));
        }
        let placement = Placement {
            location: allocation.location,
            memory: allocation.memory,
            offset: allocation.offset,
            mapped: allocation.mapped,
        };
        let size = allocation.size;
        let context = self.context;
        let debug = |pool: &mut TypePool<P::Memory>| pool.on_placed(context, &placement, size);
        let pools = &mut self.pools;
        let checked = panic::catch_unwind(AssertUnwindSafe(|| match allocation.custom_pool() {
            None => pools.with_pool(memory_type, debug),
            // Its pool holds this allocation, so no thread destroyed it.
            Some(tag) => pools.with_custom_pool(tag, debug).flatten(),
        }));
        match checked {
            Ok(line) => Ok((allocation, line)),
            Err(payload) => {
                self.free_unused(&allocation);
                panic::resume_unwind(payload);
            }
        }
    }

    /// Frees `allocation`, just made and handed to nobody, on the way out
    /// of a panic; a second panic (the memory callback, as its block is
    /// released, or a logger on a line of the free's debug work, logged
    /// once the lock is released) is dropped, so that the first one goes on.
    #[cold]
    fn free_unused(&mut self, allocation: &Allocation) {
        let context = self.context;
        let free = |pool: &mut TypePool<P::Memory>| {
            // SAFETY: the allocation was handed to nobody, so no GPU work
            // uses it.
            let freed = unsafe { pool.free(context, allocation.location, allocation.size) };
            debug_assert!(freed.is_ok());
        };
        let (_, lines) = deferred_log::deferring(|| match allocation.custom_pool() {
            None => self.pools.with_pool(allocation.memory_type(), free),
            // Its pool holds this allocation, so no thread destroyed it.
            Some(tag) => self.pools.with_custom_pool(tag, free).unwrap_or(()),
        });
        lines.log_quietly();
    }

    /// [`allocate`](Self::allocate) without the debug work (margins'
    /// patterns, debug fills): the path of every allocation when both are
    /// off.
    #[inline(always)]
    fn allocate_plain(&mut self, request: &Request<'_>) -> Result<Allocation, Error> {
        if let Some(pool) = request.desc.pool {
            return allocate_in_pool(self.context, self.allocator, &mut self.pools, pool, request);
        }
        check_request(request)?;
        let requirements = &request.requirements;
        let size = requirements.size;
        let bits = request.type_bits() & self.context.usable_types();
        if bits == 0 {
            return Err(Error::NoMemoryTypeBits(request.type_bits()));
        }
        let usage = request.desc.usage;
        if self.context.lacks_device_address(usage) {
            return Err(Error::NoSuitableMemoryType {
                memory_type_bits: request.type_bits(),
                usage,
            });
        }
        // The ranking is precomputed per usage; the per-request filters keep
        // the order `rank_memory_types` would give (RankTable). The first
        // candidate, within its heap's budget, almost always takes the
        // request: the fallback over the others is out of line.
        let ranks = self.context.ranks();
        let ranked = ranks.ranked(usage);
        let Some(first) = ranked.iter().position(|&t| ranks.admits(t, bits, size)) else {
            return Err(self.no_candidate_error(request, bits));
        };
        // No memory object can hold more: without this check, each
        // candidate type would try dedicated memory and a block, and fail.
        let max = self.context.properties.device.max_memory_allocation_size;
        if size > max {
            return Err(Error::SizeExceedsMaxAllocation { size, max });
        }
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
    /// budget when a budget was what stopped one. The first candidate that
    /// want of memory stops, `candidates[0]` included, is tried again once
    /// the pools' kept empty blocks are released
    /// ([`retry_after_release`](Self::retry_after_release)). Returns the
    /// last error when every attempt fails.
    #[cold]
    #[inline(never)]
    fn allocate_in_next_types(
        &mut self,
        request: &Request<'_>,
        candidates: &[u8],
        bits: u32,
        error: Error,
    ) -> Result<Allocation, Error> {
        let ranks = self.context.ranks();
        let size = request.requirements.size;
        // Memory types whose kept empty blocks this request released.
        let mut released = 0;
        let mut error =
            match self.retry_after_release(candidates[0], request, true, error, &mut released) {
                Ok(allocation) => return Ok(allocation),
                Err(next) if next.try_next_type() => next,
                Err(next) => return Err(next),
            };
        warn_next_type(candidates[0], error);
        let mut over_budget = matches!(error, Error::OverBudget { .. });
        for (pass, within_budget) in [true, false].into_iter().enumerate() {
            if !within_budget && (request.desc.within_budget || !over_budget) {
                break;
            }
            // The first pass resumes after the candidate that failed.
            let skip = usize::from(pass == 0);
            for &memory_type in &candidates[skip..] {
                if !ranks.admits(memory_type, bits, size) {
                    continue;
                }
                let result =
                    match self.allocate_in_type(u32::from(memory_type), request, within_budget) {
                        Err(next) if next.try_next_type() => self.retry_after_release(
                            memory_type,
                            request,
                            within_budget,
                            next,
                            &mut released,
                        ),
                        result => result,
                    };
                match result {
                    Ok(allocation) => return Ok(allocation),
                    Err(next) if next.try_next_type() => {
                        over_budget |= matches!(next, Error::OverBudget { .. });
                        warn_next_type(memory_type, next);
                        error = next;
                    }
                    Err(next) => return Err(next),
                }
            }
        }
        Err(error)
    }

    /// `memory_type`'s answer to `request` once the kept empty blocks
    /// that stood in its way are released ([`release_kept_empty_blocks`]:
    /// those beyond each type's largest, then, while it still lacks
    /// memory, the largest too), when `error`, its refusal, is for want of
    /// memory and those blocks were not all released for this request yet
    /// (`released`, a mask of memory types, says whose were); `error`
    /// otherwise. Any memory type's, not only the first's: one that failed
    /// otherwise (`MapFailed`) may be followed by one whose heap the kept
    /// blocks fill. A type is marked released only once its largest kept
    /// blocks go too: a retry that fails otherwise after the first step
    /// leaves them, and the next type of their heap that lacks memory
    /// releases them.
    fn retry_after_release(
        &mut self,
        memory_type: u8,
        request: &Request<'_>,
        within_budget: bool,
        error: Error,
        released: &mut u32,
    ) -> Result<Allocation, Error> {
        let scope = release_scope(self.context, error, u32::from(memory_type)) & !*released;
        if scope == 0 {
            return Err(error);
        }
        let mut error = error;
        for keep in [Keep::Largest, Keep::None] {
            if let Keep::None = keep {
                *released |= scope;
            }
            if release_kept_empty_blocks(self.context, &mut self.pools, scope, keep) == 0 {
                continue;
            }
            match self.allocate_in_type(u32::from(memory_type), request, within_budget) {
                Err(next) if next.is_want_of_memory() => error = next,
                result => return result,
            }
        }
        Err(error)
    }

    /// Why no memory type can take a request: too large for every allowed
    /// heap, or no allowed type suits the usage. `bits` is the request's
    /// [`type_bits`](Request::type_bits) restricted to the device's usable
    /// types.
    #[cold]
    #[inline(never)]
    fn no_candidate_error(&self, request: &Request<'_>, bits: u32) -> Error {
        let types = self.context.memory_types();
        let heaps = &self.context.properties.device.memory_heaps;
        let (size, usage) = (request.requirements.size, request.desc.usage);
        debug_assert!(rank_memory_types(types, heaps, bits, usage, size, 0).is_empty());
        // `bits` has a bit for the first 32 types only: a backend may list
        // more (Vulkan does not), which the allocator ignores.
        let largest_heap = (0..types.len().min(32))
            .filter(|t| bits & (1 << t) != 0)
            .filter_map(|t| heaps.get(types[t].heap as usize))
            .map(|h| h.size)
            .max()
            .unwrap_or(0);
        if size > largest_heap {
            Error::SizeExceedsHeaps { size, largest_heap }
        } else {
            Error::NoSuitableMemoryType {
                memory_type_bits: request.type_bits(),
                usage,
            }
        }
    }

    /// Places `request` in `memory_type`. Inlined into the allocation path:
    /// as a call, its 64-byte result was written field by field and then
    /// copied in 16-byte loads that waited for those stores (perf: a third
    /// of the caller's samples on that copy); inlined, `mixed` allocates
    /// 4–6 ns faster on lavapipe's machine.
    #[inline(always)]
    fn allocate_in_type(
        &mut self,
        memory_type: u32,
        request: &Request<'_>,
        within_budget: bool,
    ) -> Result<Allocation, Error> {
        let mut pool_request = pool_request(self.context, memory_type, request, within_budget);
        // The default pools' requests are checked against the budget but in
        // the last pass over the candidates, which may pass it.
        pool_request.past_budget = !within_budget;
        let context = self.context;
        let placement = self
            .pools
            .with_pool(memory_type, |pool| pool.allocate(context, &pool_request))?;
        Ok(Allocation {
            memory: placement.memory,
            offset: placement.offset,
            size: request.requirements.size,
            home: Home::new(memory_type, PoolTag::DEFAULT),
            location: placement.location,
            allocator: self.allocator,
            mapped: placement.mapped,
        })
    }
}

/// Logs that `memory_type` failed with `error` and the next is tried: a
/// fallback worth a warning, except for a request for existing memory
/// only, whose misses are its expected outcome (an opportunistic request,
/// possibly every frame).
#[cold]
fn warn_next_type(memory_type: impl std::fmt::Display, error: Error) {
    if error != Error::NoRoomInExistingMemory {
        log::warn!("vk-suballoc: memory type {memory_type} failed ({error}); trying the next one");
    }
}

/// `request` as memory type `memory_type` sees it: its alignment (with
/// `nonCoherentAtomSize` on non-coherent memory), granularity class, placed
/// size, dedicated choice and run class.
#[inline(always)]
pub(super) fn pool_request<'r, D>(
    context: &MemoryContext<D>,
    memory_type: u32,
    request: &Request<'r>,
    within_budget: bool,
) -> PoolRequest<'r> {
    let padded = context.padded_granularity();
    pool_request_padded(context, memory_type, request, within_budget, padded)
}

/// [`pool_request`] for a custom pool's request: optimal images are padded
/// to whole `bufferImageGranularity` pages whenever the granularity is a
/// power of two, however large, so that one block holds both kinds. A
/// default pool gives images blocks of their own past
/// `Config::max_padded_granularity`; a pool limited to `max_blocks` would
/// then refuse a buffer beside an image with blocks almost empty.
#[inline]
pub(super) fn custom_pool_request<'r, D>(
    context: &MemoryContext<D>,
    memory_type: u32,
    request: &Request<'r>,
    within_budget: bool,
) -> PoolRequest<'r> {
    let padded = context.granularity_page();
    pool_request_padded(context, memory_type, request, within_budget, padded)
}

/// [`pool_request`] with optimal images padded to `padded` pages, or in
/// blocks of their own when `None`.
#[inline(always)]
fn pool_request_padded<'r, D>(
    context: &MemoryContext<D>,
    memory_type: u32,
    request: &Request<'r>,
    within_budget: bool,
    padded: Option<u64>,
) -> PoolRequest<'r> {
    let properties = &context.properties;
    let mut align = request
        .requirements
        .alignment
        .max(request.desc.min_alignment);
    // One test for the common type, coherent and not lazily allocated,
    // instead of one for each (`is_unusual` is the union of the two).
    let unusual = context.is_unusual(memory_type);
    if unusual && context.is_non_coherent(memory_type) {
        // Atom-aligned starts keep each allocation's widened flush and
        // invalidate ranges off its neighbours' bytes (mapping.rs).
        align = align.max(properties.device.non_coherent_atom_size.max(1));
    }
    // bufferImageGranularity (MemoryContext::padded_granularity): optimal
    // images either take whole pages of blocks they share with linear
    // resources, or blocks of their own (class 1). A resource of unknown
    // kind takes whole pages of a linear block, which no neighbour of
    // either kind shares, wherever the granularity is a power of two (else
    // dedicated memory, below).
    let (class, page) = match request.kind {
        ResourceKind::Buffer | ResourceKind::LinearImage => (0, None),
        ResourceKind::OptimalImage => (usize::from(padded.is_none()), padded),
        ResourceKind::Unknown => (0, context.granularity_page()),
    };
    let size = request.requirements.size;
    // `Config::debug_margin` (0 by default) free bytes after the
    // allocation, in the bytes it takes in its block: the offset
    // allocator's range or the run slot holds them, so no other allocation
    // starts before they end. Dedicated memory has the exact size.
    let with_margin = size.saturating_add(context.config.debug_margin);
    let placed_size = match page {
        Some(page) => {
            align = align.max(page);
            round_up(with_margin, page)
        }
        // Rounded to its own alignment, up to MAX_TAIL_ROUNDING: a tail
        // sliver smaller than that would only clutter the bins (on
        // lavapipe, buffers align to 64). A larger alignment's tail stays
        // free for other requests: a 1 MiB buffer aligned to 64 MiB
        // takes 1 MiB, not 64.
        _ => round_up(with_margin, align.min(MAX_TAIL_ROUNDING)),
    };
    let unplaceable_kind = request.kind == ResourceKind::Unknown && page.is_none();
    let dedicated = if (unusual && context.is_lazily_allocated(memory_type)) || unplaceable_kind {
        DedicatedChoice::Require
    } else {
        request.dedicated_choice()
    };
    // Small buffers take run slots (runs.rs), whose sizes must then be
    // multiples of their alignment.
    let run_class = (placed_size <= context.config.small_buffer_limit
        && align <= MAX_TAIL_ROUNDING
        && request.kind == ResourceKind::Buffer
        && matches!(dedicated, DedicatedChoice::Auto | DedicatedChoice::Never))
    .then(|| class_of(placed_size) as u8);
    PoolRequest {
        size,
        placed_size,
        align,
        class,
        kind: request.kind,
        dedicated,
        target: request.dedicated_target,
        name: request.desc.name,
        within_budget,
        past_budget: false,
        existing_memory_only: request.desc.existing_memory_only,
        priority: request.desc.priority,
        run_class,
    }
}

/// The memory types whose kept empty blocks stand in the way of a request
/// that `memory_type` refused with `error`: none unless it is a want of
/// memory; every usable type at `maxMemoryAllocationCount` (objects are
/// counted device-wide); else the types of `memory_type`'s heap, whose
/// memory or budget ran short (kept blocks in other heaps stay).
pub(super) fn release_scope<D>(context: &MemoryContext<D>, error: Error, memory_type: u32) -> u32 {
    let usable = context.usable_types();
    match error {
        Error::TooManyObjects(_) => usable,
        _ if error.is_want_of_memory() => {
            let heap = context.heap_of(memory_type);
            (0..context.memory_types().len().min(32) as u32)
                .filter(|&t| context.heap_of(t) == heap)
                .fold(0, |mask, t| mask | 1 << t)
                & usable
        }
        _ => 0,
    }
}

/// Which empty blocks [`release_kept_empty_blocks`] leaves in each pool.
#[derive(Clone, Copy)]
pub(super) enum Keep {
    /// The largest (VMA's rule: one empty block per memory type).
    Largest,
    /// None: the heap is short of memory even without the others, and an
    /// empty block holds nothing that needs it.
    None,
}

/// Releases the empty blocks the default pools of the memory types in
/// `types` (a mask, from [`release_scope`]) keep
/// ([`Config::empty_block_reserve`](crate::Config::empty_block_reserve)),
/// all but those `keep` says, for a request that want of memory stopped
/// (or a custom pool's `min_blocks` blocks, `Allocator::create_pool`): it
/// is tried again without them, first with each type's largest kept, then,
/// when it still lacks memory, without those either, so that kept blocks
/// never make it fail, go over budget or leave its best heap. Returns the
/// bytes released.
#[cold]
#[inline(never)]
pub(super) fn release_kept_empty_blocks<P, D>(
    context: &MemoryContext<D>,
    pools: &mut P,
    types: u32,
    keep: Keep,
) -> u64
where
    P: PoolAccess,
    D: MemoryDeviceExt<P::Memory>,
{
    // A write after free found in a released block (debug fills) is
    // logged once the pool's lock is released: here, or by
    // `Placer::allocate_debug`, whose request this is, once it is placed.
    deferred_log::log_after_if(context.debug_types() != 0, || {
        let mut released = 0;
        // The usable types only: only they have blocks, and a device's
        // types past 32 (which Vulkan does not allow) have no pool at all.
        let mut types = types & context.usable_types();
        while types != 0 {
            let memory_type = types.trailing_zeros();
            types &= types - 1;
            released += pools.with_pool(memory_type, |pool| match keep {
                Keep::Largest => pool.release_surplus_empty_blocks(context, 0.0, None),
                Keep::None => pool.trim(context),
            });
        }
        released
    })
}

/// `attempt`'s answer once the kept empty blocks of the memory types that
/// `error`, its first refusal, says stood in its way ([`release_scope`] of
/// `memory_type`) are released, in the two steps of
/// [`release_kept_empty_blocks`]; `error` when that released nothing or
/// the refusal was not for want of memory.
pub(super) fn retry_after_releasing<P, D, R>(
    context: &MemoryContext<D>,
    pools: &mut P,
    memory_type: u32,
    error: Error,
    mut attempt: impl FnMut(&mut P) -> Result<R, Error>,
) -> Result<R, Error>
where
    P: PoolAccess,
    D: MemoryDeviceExt<P::Memory>,
{
    let scope = release_scope(context, error, memory_type);
    let mut error = error;
    for keep in [Keep::Largest, Keep::None] {
        if scope == 0 || release_kept_empty_blocks(context, pools, scope, keep) == 0 {
            continue;
        }
        match attempt(pools) {
            Err(next) if next.is_want_of_memory() => error = next,
            result => return result,
        }
    }
    Err(error)
}

/// [`Placer::allocate`] for a request naming a custom pool: the same
/// checks, then the pool's memory type alone (no ranking, no fallback),
/// through `pools` (its locks, or none for `allocate_mut`). Out of line:
/// the default pools' path pays one test for pools, about 8 instructions
/// per allocation by callgrind, whether this is a method of the placer or
/// a function of its fields. (Checked in `Allocator::allocate_mut`
/// instead, the test kept `allocate_mut` from being inlined.)
#[inline(never)]
fn allocate_in_pool<P, D>(
    context: &MemoryContext<D>,
    allocator: u32,
    pools: &mut P,
    pool: Pool,
    request: &Request<'_>,
) -> Result<Allocation, Error>
where
    P: PoolAccess,
    P::Memory: Send,
    D: MemoryDeviceExt<P::Memory>,
{
    if pool.allocator != allocator {
        return Err(Error::ForeignPool);
    }
    check_request(request)?;
    let requirements = &request.requirements;
    let size = requirements.size;
    let memory_type = pool.memory_type();
    let type_bits = request.type_bits();
    if type_bits & type_bit(memory_type) == 0 {
        return Err(Error::PoolTypeNotAllowed {
            memory_type,
            memory_type_bits: type_bits,
        });
    }
    // In the default path's order: the device-address feature, the
    // heap, the type's properties, maxMemoryAllocationSize.
    let usage = request.desc.usage;
    let no_type = Error::NoSuitableMemoryType {
        memory_type_bits: type_bits,
        usage,
    };
    if context.lacks_device_address(usage) {
        return Err(no_type);
    }
    let heap = context.heap_size(memory_type);
    if size > heap {
        return Err(Error::SizeExceedsHeaps {
            size,
            largest_heap: heap,
        });
    }
    let props = context.memory_types()[memory_type as usize].props;
    if !pool_type_serves(props, usage) {
        return Err(no_type);
    }
    let max = context.properties.device.max_memory_allocation_size;
    if size > max {
        return Err(Error::SizeExceedsMaxAllocation { size, max });
    }
    let within_budget = request.desc.within_budget;
    let mut pool_request = custom_pool_request(context, memory_type, request, within_budget);
    // A pool's requests take its blocks, unless dedicated memory is
    // required (by the driver, the caller or a lazily allocated type):
    // then dedicated memory of its type, counted in the pool.
    if pool_request.dedicated != DedicatedChoice::Require {
        pool_request.dedicated = DedicatedChoice::Never;
    }
    let mut place = |pools: &mut P| {
        pools
            .with_custom_pool(pool.tag(), |custom| {
                if !custom.takes_runs() {
                    pool_request.run_class = None;
                }
                custom.fit_to_fixed_blocks(&mut pool_request, context.config.debug_margin);
                custom.allocate(context, &pool_request)
            })
            .ok_or(Error::StalePool)?
    };
    let placement = match place(pools) {
        Err(error) => retry_after_releasing(context, pools, memory_type, error, place)?,
        Ok(placement) => placement,
    };
    Ok(Allocation {
        memory: placement.memory,
        offset: placement.offset,
        size,
        home: Home::new(memory_type, pool.tag()),
        location: placement.location,
        allocator,
        mapped: placement.mapped,
    })
}
