//! The allocation path: checks a request, ranks memory types and places it
//! in the first one that can take it. [`Placer`] reaches each memory type's
//! pool through a [`PoolAccess`]: its lock for [`Allocator::allocate`](crate::Allocator::allocate),
//! or directly for [`Allocator::allocate_mut`](crate::Allocator::allocate_mut),
//! whose `&mut self` proves no other thread is inside the allocator. A
//! request naming a custom pool goes to that pool alone
//! (`allocate_in_pool`), through the same access.
//!
//! Its parts that the rest of the allocator uses too are beside it in
//! `place/`: the locks and the pool access (`pool_access.rs`), the checks
//! of a request (`request_checks.rs`), and of the memory types that may
//! take it (`candidates.rs`, which `Allocator::allocate_many` runs over
//! every request before it places any), a request as one memory type sees
//! it (`pool_request.rs`), and the release of kept empty blocks for a
//! request short of memory (`kept_block_release.rs`).

mod candidates;
mod kept_block_release;
mod pool_access;
mod pool_request;
mod request_checks;

use std::panic::{self, AssertUnwindSafe};

use super::pool::{Home, PoolTag};
use super::{Allocation, Pool, Request};
use crate::device::MemoryDeviceExt;
use crate::memory::context::{Failure, MemoryContext};
use crate::memory::deferred_log;
use crate::memory::type_pool::{backtraces, Placement, TypePool};
use crate::Error;
pub(super) use candidates::{allowed_types, check_placeable, preferring, unsuitable_types};
use candidates::{check_pool_request, with_candidates};
pub(super) use kept_block_release::retry_after_releasing;
pub(super) use pool_access::{exclusive, lock, try_lock, Exclusive, Locked, PoolAccess};
pub(super) use pool_request::{
    custom_pool_placement, custom_pool_request, pool_request, MAX_TAIL_ROUNDING,
};
pub(super) use request_checks::{check_desc, check_min_alignment, check_requirements};

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
            return rebuilt(self.allocate_debug(request));
        }
        self.allocate_plain(request)
    }

    /// [`allocate`](Self::allocate) with corruption detection or debug
    /// fills on in some memory type: the allocation, then, under its
    /// pool's lock taken again (it is handed to nobody yet), the check of
    /// its bytes and their fill (`debug_fill.rs`) and the pattern over its
    /// margin. A write after free the check finds is logged once the lock
    /// is released, with the lines of the kept empty blocks released for
    /// the request (`deferred_log`). With `Config::strict_host_access`,
    /// the mapping of an allocation whose request asks for no host access
    /// is withheld last. Out of line, so that the default path
    /// pays one test for both: tested after the placement instead, with
    /// the placement kept for the call, it cost 8 to 13 more instructions
    /// per allocation (callgrind, `frame-loop`).
    #[cold]
    #[inline(never)]
    fn allocate_debug(&mut self, request: &Request<'_>) -> Result<Allocation, Error> {
        let (outcome, mut lines) = deferred_log::deferring(|| self.allocate_checked(request));
        let (mut allocation, written_after_free) = match outcome {
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
        // After the debug work, which writes through the mapping.
        if self.context.strict_host_access() && !request.desc.asks_for_host_access() {
            allocation.mapped = None;
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
        // Before the pool's lock: the capture takes microseconds.
        let backtrace = backtraces::capture(context);
        let debug =
            |pool: &mut TypePool<P::Memory>| pool.on_placed(context, &placement, size, backtrace);
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
            let freed = unsafe { pool.free(context, &allocation.location, allocation.size) };
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
            let pools = &mut self.pools;
            return rebuilt(allocate_in_pool(
                self.context,
                self.allocator,
                pools,
                pool,
                request,
            ));
        }
        with_candidates(self.context, request, |candidates, bits| {
            match self.allocate_in_type(u32::from(candidates[0]), request, true) {
                Ok(allocation) => Ok(allocation),
                Err(error) if error.try_next_type() => {
                    rebuilt(self.allocate_in_next_types(request, candidates, bits, error))
                }
                Err(Error::OutOfHostMemory) => {
                    rebuilt(self.allocate_in_existing_memory_after(request, candidates, 0, bits))
                }
                Err(error) => Err(error),
            }
        })
    }

    /// After `candidates[0]` failed within budget with `error`, tries the
    /// other admitted candidates in order (AMD's device-coherent types only
    /// when `candidates[0]` is one: `RankTable::falls_back_to`), within
    /// their heaps' budgets; then, unless the caller asked for
    /// within-budget memory, every candidate over
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
                Err(Error::OutOfHostMemory) => {
                    return self.allocate_in_existing_memory_after(request, candidates, 0, bits)
                }
                Err(next) => return Err(next),
            };
        warn_next_type(self.context, candidates[0], error);
        let mut over_budget = matches!(error, Error::OverBudget { .. });
        for (pass, within_budget) in [true, false].into_iter().enumerate() {
            if !within_budget && (request.desc.within_budget || !over_budget) {
                break;
            }
            // The first pass resumes after the candidate that failed.
            let skip = usize::from(pass == 0);
            for (index, &memory_type) in candidates.iter().enumerate().skip(skip) {
                // AMD's device-coherent types only after one of them.
                if !ranks.falls_back_to(candidates[0], memory_type, bits, size) {
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
                        warn_next_type(self.context, memory_type, next);
                        error = next;
                    }
                    Err(Error::OutOfHostMemory) => {
                        return self
                            .allocate_in_existing_memory_after(request, candidates, index, bits)
                    }
                    Err(next) => return Err(next),
                }
            }
        }
        Err(error)
    }

    /// After `candidates[failed]` failed for want of host memory, the
    /// existing blocks of the candidates after it that `candidates[0]`
    /// falls back to, in order: they need no host memory, where another
    /// memory object would fail the same way (VMA tries the next types on
    /// any failure, new memory included). Those before it had their
    /// blocks tried already. [`Error::OutOfHostMemory`] when none has
    /// room.
    #[cold]
    #[inline(never)]
    fn allocate_in_existing_memory_after(
        &mut self,
        request: &Request<'_>,
        candidates: &[u8],
        failed: usize,
        bits: u32,
    ) -> Result<Allocation, Error> {
        let ranks = self.context.ranks();
        let size = request.requirements.size;
        let existing = request.existing_memory_only();
        let mut next = candidates
            .iter()
            .skip(failed + 1)
            .filter(|&&memory_type| ranks.falls_back_to(candidates[0], memory_type, bits, size))
            .peekable();
        // Warned only when a type is left to try.
        if next.peek().is_some() {
            warn_next_type(self.context, candidates[failed], Error::OutOfHostMemory);
        }
        for &memory_type in next {
            if let Ok(allocation) = self.allocate_in_type(u32::from(memory_type), &existing, true) {
                return Ok(allocation);
            }
        }
        Err(Error::OutOfHostMemory)
    }

    /// `memory_type`'s answer to `request` once the kept empty blocks
    /// that stood in its way are released
    /// ([`retry_after_releasing`], which says which and when), when
    /// `error`, its refusal, is for want of memory and those blocks were
    /// not all released for this request yet (`released`, a mask of memory
    /// types, says whose were); `error` otherwise. Any memory type's, not
    /// only the first's: one that failed otherwise (`MapFailed`) may be
    /// followed by one whose heap the kept blocks fill.
    fn retry_after_release(
        &mut self,
        memory_type: u8,
        request: &Request<'_>,
        within_budget: bool,
        error: Error,
        released: &mut u32,
    ) -> Result<Allocation, Error> {
        let (context, allocator) = (self.context, self.allocator);
        let memory_type = u32::from(memory_type);
        let place = |pools: &mut P| {
            allocate_in_type(
                context,
                allocator,
                pools,
                memory_type,
                request,
                within_budget,
            )
        };
        retry_after_releasing(
            context,
            &mut self.pools,
            memory_type,
            error,
            released,
            place,
        )
    }

    /// Places `request` in `memory_type` ([`allocate_in_type`]).
    #[inline(always)]
    fn allocate_in_type(
        &mut self,
        memory_type: u32,
        request: &Request<'_>,
        within_budget: bool,
    ) -> Result<Allocation, Error> {
        let (context, allocator) = (self.context, self.allocator);
        allocate_in_type(
            context,
            allocator,
            &mut self.pools,
            memory_type,
            request,
            within_budget,
        )
    }
}

/// Places `request` in `memory_type`'s default pool, for the allocator
/// tagged `allocator`. Inlined into the allocation path: as a call, its
/// 64-byte result was written field by field and then copied in 16-byte
/// loads that waited for those stores (perf: a third of the caller's
/// samples on that copy); inlined, `mixed` allocates 4–6 ns faster on
/// lavapipe's machine.
#[inline(always)]
fn allocate_in_type<D, P>(
    context: &MemoryContext<D>,
    allocator: u32,
    pools: &mut P,
    memory_type: u32,
    request: &Request<'_>,
    within_budget: bool,
) -> Result<Allocation, Error>
where
    P: PoolAccess,
    P::Memory: Send,
    D: MemoryDeviceExt<P::Memory>,
{
    let mut pool_request = pool_request(context, memory_type, request, within_budget);
    // The default pools' requests are checked against the budget but in
    // the last pass over the candidates, which may pass it.
    pool_request.past_budget = !within_budget;
    let placement = pools.with_pool(memory_type, |pool| pool.allocate(context, &pool_request))?;
    Ok(Allocation {
        memory: placement.memory,
        offset: placement.offset,
        size: request.requirements.size,
        home: Home::new(memory_type, PoolTag::DEFAULT),
        location: placement.location,
        allocator,
        mapped: placement.mapped,
    })
}

/// `result` taken apart and put together again: an allocation of an out
/// of line path (whose result comes back through memory) rebuilt where the
/// allocation path's own meets it, so that they meet in registers
/// (`TypePool::allocate`, whose slow path's placement is rebuilt too).
/// Returned as they came, the path's stack slot was where the inlined
/// path's allocation was stored, field by field, then copied out again.
#[inline(always)]
fn rebuilt(result: Result<Allocation, Error>) -> Result<Allocation, Error> {
    let Allocation {
        memory,
        offset,
        size,
        location,
        allocator,
        home,
        mapped,
    } = result?;
    Ok(Allocation {
        memory,
        offset,
        size,
        location,
        allocator,
        home,
        mapped,
    })
}

/// Logs that `memory_type` failed with `error` and the next is tried: a
/// fallback worth a warning, except for a request for existing memory
/// only, whose misses are its expected outcome (an opportunistic request,
/// possibly every frame). Once per memory type until it makes a memory
/// object again ([`MemoryContext::first_failure`]): a heap at its budget
/// sends every request that needs new memory on, and a line for each was
/// a log on the allocation path.
#[cold]
fn warn_next_type<D>(context: &MemoryContext<D>, memory_type: u8, error: Error) {
    if error != Error::NoRoomInExistingMemory
        && context.first_failure(u32::from(memory_type), Failure::NextType)
    {
        log::warn!("vk-suballoc: memory type {memory_type} failed ({error}); trying the next one");
    }
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
    let memory_type = check_pool_request(context, allocator, pool, request)?;
    let size = request.requirements.size;
    let place = |pools: &mut P, within_budget: bool| {
        pools
            .with_custom_pool(pool.tag(), |custom| {
                let (shape, runs) = (custom.shape(), custom.takes_runs());
                let pool_request = custom_pool_placement(
                    context,
                    memory_type,
                    shape,
                    runs,
                    request,
                    within_budget,
                );
                custom.allocate(context, &pool_request)
            })
            .ok_or(Error::StalePool)?
    };
    // An attempt, then the same once the kept empty blocks that stood in
    // its way are released.
    let attempt = |pools: &mut P, within_budget: bool| match place(pools, within_budget) {
        Err(error) => retry_after_releasing(
            context,
            pools,
            memory_type,
            error,
            &mut 0,
            |pools: &mut P| place(pools, within_budget),
        ),
        placed => placed,
    };
    // Within the heap's budget first, whatever the request asked: new
    // memory past it is made only once the kept empty blocks of the heap
    // (other pools' too) are released and it is still short, as the
    // default pools' requests do (`allocate_in_next_types`). A request
    // that an existing block holds never reads the budget.
    let placement = match attempt(pools, true) {
        // Not held to the budget (VMA's pools are not): past it. Short of
        // memory there too (the driver's, or its object count, which the
        // budget's refusal came before), the kept blocks that stand in
        // that way give way as well: the budget's release reached this
        // heap's only, and a count device-wide needs every heap's.
        Err(Error::OverBudget { .. }) if !request.desc.within_budget => attempt(pools, false)?,
        placed => placed?,
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
