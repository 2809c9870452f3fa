//! Whether any memory type can take a request, before a pool is touched:
//! the checks of bad input ([`check_request`]), then the memory types the
//! request's `memoryTypeBits` allow, that have its required flags and
//! that its usage suits, in rank order (re-ranked for its preferred flags)
//! ([`with_candidates`]), or, for a request naming a custom pool, that
//! pool's one memory type ([`check_pool_request`]) and, in
//! [`check_placeable`], its fixed block size (with its least alignment). None takes a lock (but the
//! custom pool table's read lock, for the block size) or makes a Vulkan
//! call, and none depends on what is allocated: a request they pass can
//! fail later only as it is placed: for want of memory (or another error
//! of the device's), at a custom pool's `max_blocks`, for a pool
//! destroyed meanwhile (one destroyed before is found here), or with
//! `Error::NotExportable` for memory a pool exporting Android hardware
//! buffers, D3D11 textures or D3D12 resources may not make, which
//! `MemoryContext::allocate_memory` refuses as it is asked for. So
//! [`Allocator::allocate_many`](crate::Allocator::allocate_many) runs them
//! over every request before it places any ([`check_placeable`]), and the
//! allocation path runs the same ones before it places each. Apart from
//! the walk over memory types because both use them.

use ash::vk;

use super::request_checks::check_request;
use super::{custom_pool_placement, pool_request};
use crate::allocator::pool::{pool_type_serves, type_bit};
use crate::allocator::{AllocationDesc, Pool, Request};
use crate::memory::context::MemoryContext;
use crate::memory::memory_type_choice::{rank_memory_types, Candidates};
use crate::memory::type_pool::{
    too_large_for_any_block, too_large_for_block_size, DedicatedChoice, PoolShape,
};
use crate::Error;

/// Every check [`Placer::allocate`](super::Placer::allocate) makes of
/// `request` before it places it, for the allocator tagged `allocator`:
/// [`check_pool_request`] for a request naming a custom pool,
/// [`with_candidates`] otherwise. Its errors are those,
/// [`Error::StalePool`] for a request naming a destroyed custom pool
/// (`shape_of(pool)` gives `None`), and for one naming a live pool, with
/// the [`PoolShape`] `shape_of(pool)` gives,
/// [`Error::TooLargeForPool`] when its blocks have a fixed size and none
/// can hold the request as the pool places it
/// ([`custom_pool_placement`]), else [`Error::SizeExceedsHeaps`] or
/// [`Error::SizeExceedsMaxAllocation`] when, so placed, it passes the
/// largest block its memory type can have ([`too_large_for_any_block`]),
/// unless dedicated memory is required: then
/// [`Error::NoRoomInExistingMemory`] for a request for existing memory
/// only. For a request naming no pool, those errors too when it may take
/// only a block and passes the largest block of every memory type it may
/// take, or is for existing memory only and every type it may take
/// either needs dedicated memory for it or is so passed
/// ([`past_every_candidate_block`]).
pub(crate) fn check_placeable<D>(
    context: &MemoryContext<D>,
    allocator: u32,
    request: &Request<'_>,
    shape_of: impl FnOnce(Pool) -> Option<PoolShape>,
) -> Result<(), Error> {
    let Some(pool) = request.desc.pool else {
        return with_candidates(context, request, |candidates, bits| {
            past_every_candidate_block(context, request, candidates, bits)
        });
    };
    let memory_type = check_pool_request(context, allocator, pool, request)?;
    // A pool destroyed before the call: placement would report it too,
    // but only after the requests ahead of it had made their blocks.
    let shape = shape_of(pool).ok_or(Error::StalePool)?;
    let pool_request = custom_pool_placement(context, memory_type, shape, false, request, false);
    if pool_request.dedicated == DedicatedChoice::Require {
        return match request.desc.existing_memory_only {
            true => Err(Error::NoRoomInExistingMemory),
            false => Ok(()),
        };
    }
    let too_large = match shape.block_size {
        Some(block_size) => too_large_for_block_size(&pool_request, block_size),
        None => too_large_for_any_block(context, memory_type, &pool_request),
    };
    too_large.map_or(Ok(()), Err)
}

/// [`Error::SizeExceedsHeaps`] or [`Error::SizeExceedsMaxAllocation`]
/// when `request` (one naming no custom pool, whose ranked memory types
/// from the first that admits it are `candidates`, and allowed types
/// `bits`: [`with_candidates`]) may take only a block in every memory type
/// the allocation path tries, and, rounded up as a block places it, passes
/// each one's heap or `maxMemoryAllocationSize`
/// ([`too_large_for_any_block`]); or, for a request for existing memory
/// only, those or [`Error::NoRoomInExistingMemory`] when each type it
/// tries either is such a type or would need dedicated memory for it:
/// the allocation path's answer whatever is
/// allocated, the last type's error, as its walk over the types
/// (`Placer::allocate_in_next_types`: the first candidate, then the others
/// it falls back to, `RankTable::falls_back_to`) gives it.
/// (The walk's second pass, past the budgets, comes only after a type
/// refused the request over budget, which none did then.)
fn past_every_candidate_block<D>(
    context: &MemoryContext<D>,
    request: &Request<'_>,
    candidates: &[u8],
    bits: u32,
) -> Result<(), Error> {
    let existing_only = request.desc.existing_memory_only;
    if request.dedicated_choice() != DedicatedChoice::Never && !existing_only {
        return Ok(());
    }
    let ranks = context.ranks();
    let size = request.requirements.size;
    let mut past = Ok(());
    for (index, &memory_type) in candidates.iter().enumerate() {
        if index > 0 && !ranks.falls_back_to(candidates[0], memory_type, bits, size) {
            continue;
        }
        let memory_type = u32::from(memory_type);
        let placed = pool_request(context, memory_type, request, false);
        // Dedicated memory required (by the driver, the caller, a lazily
        // allocated type or a resource of unknown kind no block may take)
        // is made, unless the request is for existing memory only, which
        // this type then refuses (`TypePool::allocate_in_existing`).
        // Other choices may take a block or dedicated memory.
        match placed.dedicated {
            DedicatedChoice::Require if existing_only => {
                past = Err(Error::NoRoomInExistingMemory);
                continue;
            }
            DedicatedChoice::Never => {}
            _ => return Ok(()),
        }
        match too_large_for_any_block(context, memory_type, &placed) {
            Some(error) => past = Err(error),
            None => return Ok(()),
        }
    }
    past
}

/// The memory types that may take `request` (one naming no custom pool),
/// handed to `then`: the ranking for the request's usage from the first
/// type that admits it (the caller tests each later one again:
/// `RankTable::admits`), re-ranked for its preferred flags when it has
/// some ([`preferring`]), and the request's
/// [`type_bits`](Request::type_bits) restricted to the types it may take
/// ([`allowed_types`]). Returns `then`'s result, or the error of the
/// first check that fails.
///
/// `then` is the placement in the allocation path, or nothing in
/// [`check_placeable`]: so the allocation path returns each error straight
/// into its own result, as it did when these checks were written in it.
/// By callgrind on a churn of 200 000 allocations and frees on the fake
/// device, against the checks written in the allocation path: this way
/// none is lost (25 and 3 fewer instructions per allocation through
/// `allocate` and `allocate_mut`, LLVM inlining a little differently);
/// returning the candidates in a `Result` instead cost 6 and 20 more, and
/// as `#[inline]` rather than `#[inline(always)]` LLVM called the checks
/// out of line, 3 and 30 more.
///
/// # Errors
/// Those of [`check_request`], then those of [`allowed_types`]
/// ([`Error::NoMemoryTypeBits`], [`Error::MissingRequiredFlags`],
/// [`Error::DeviceAddressNotEnabled`]), [`Error::SizeExceedsHeaps`] or
/// [`Error::NoSuitableMemoryType`] when no type admits it
/// ([`no_candidate_error`]), and [`Error::SizeExceedsMaxAllocation`]:
/// the order of [`Allocator::allocate`](crate::Allocator::allocate)'s
/// docs. Then `then`'s.
#[inline(always)]
pub(super) fn with_candidates<D, R>(
    context: &MemoryContext<D>,
    request: &Request<'_>,
    then: impl FnOnce(&[u8], u32) -> Result<R, Error>,
) -> Result<R, Error> {
    check_request(request)?;
    let size = request.requirements.size;
    let bits = allowed_types(context, request.type_bits(), &request.desc)?;
    // The ranking is precomputed per usage; the per-request filters keep
    // the order `rank_memory_types` would give (RankTable). The first
    // candidate, within its heap's budget, almost always takes the
    // request: the fallback over the others is out of line.
    let ranks = context.ranks();
    let ranked = ranks.ranked(request.desc.usage);
    let Some(first) = ranked.iter().position(|&t| ranks.admits(t, bits, size)) else {
        return Err(no_candidate_error(context, request, bits));
    };
    // No memory object can hold more: without this check, each
    // candidate type would try dedicated memory and a block, and fail.
    let max = context.properties.device.max_memory_allocation_size;
    if size > max {
        return Err(Error::SizeExceedsMaxAllocation { size, max });
    }
    // One call of `then`, so that it is inlined here: with a second
    // call for the preferred flags' order, LLVM called it out of line and
    // every allocation on the default path ran about 100 instructions
    // more (callgrind, `mixed`).
    let preferred = request.desc.preferred_flags;
    let reordered;
    let candidates = if preferred.is_empty() {
        &ranked[first..]
    } else {
        reordered = preferring(context, &ranked[first..], bits, size, preferred);
        reordered.as_slice()
    };
    then(candidates, bits)
}

/// The memory types of `type_bits` (one bit per type index: a request's
/// [`type_bits`](Request::type_bits)) that a request described by `desc`
/// may take: those the allocator may use
/// ([`MemoryContext::usable_types`]) with every flag of
/// `desc.required_flags`. Checks `desc.usage`'s device addresses too.
///
/// # Errors
/// [`Error::NoMemoryTypeBits`] when the allocator may use none of
/// `type_bits`, then [`Error::MissingRequiredFlags`] when none of those
/// has the required flags, then [`Error::DeviceAddressNotEnabled`] for a
/// device-address usage on a device without buffer device address.
#[inline(always)]
pub(crate) fn allowed_types<D>(
    context: &MemoryContext<D>,
    type_bits: u32,
    desc: &AllocationDesc<'_>,
) -> Result<u32, Error> {
    let mut bits = type_bits & context.usable_types();
    if bits == 0 {
        return Err(Error::NoMemoryTypeBits(type_bits));
    }
    let required = desc.required_flags;
    if !required.is_empty() {
        bits = with_required_flags(context, bits, required)?;
    }
    context.check_device_address(desc.usage)?;
    Ok(bits)
}

/// `bits` less the memory types without every flag of `required`;
/// [`Error::MissingRequiredFlags`] when that leaves none.
#[cold]
#[inline(never)]
fn with_required_flags<D>(
    context: &MemoryContext<D>,
    bits: u32,
    required: vk::MemoryPropertyFlags,
) -> Result<u32, Error> {
    match bits & context.types_with(required) {
        0 => Err(Error::MissingRequiredFlags {
            memory_type_bits: bits,
            required,
        }),
        narrowed => Ok(narrowed),
    }
}

/// The memory types of `ranked` (a usage's ranking, or its tail from the
/// first type that admits the request) that admit a request of `size`
/// bytes allowed in `bits`, those missing fewer flags of `preferred` first;
/// types missing as many keep their rank, and AMD's device-coherent types
/// ([`RankTable::is_last_resort`](crate::memory::memory_type_choice::RankTable::is_last_resort))
/// stay after all others. With no preferred flags: the admitted types in
/// the ranking's order (which has AMD's types last already).
#[cold]
#[inline(never)]
pub(crate) fn preferring<D>(
    context: &MemoryContext<D>,
    ranked: &[u8],
    bits: u32,
    size: u64,
    preferred: vk::MemoryPropertyFlags,
) -> Candidates {
    let ranks = context.ranks();
    Candidates::reordered(
        ranked,
        |t| ranks.admits(t, bits, size),
        |t| {
            let flags = context.vk_props(u32::from(t)).unwrap_or_default();
            let missing = (preferred & !flags).as_raw().count_ones();
            // Above any count of missing flags.
            let last = if ranks.is_last_resort(t) { 1 << 16 } else { 0 };
            missing + last
        },
    )
}

/// Why no memory type can take a request: too large for the heaps of
/// every allowed type that suits the usage (when one does), or for
/// every allowed heap, or no allowed type suits the usage. `bits` is
/// the request's [`type_bits`](Request::type_bits) restricted to the
/// device's usable types.
#[cold]
#[inline(never)]
fn no_candidate_error<D>(context: &MemoryContext<D>, request: &Request<'_>, bits: u32) -> Error {
    let types = context.memory_types();
    let heaps = &context.properties.device.memory_heaps;
    let (size, usage) = (request.requirements.size, request.desc.usage);
    debug_assert!(rank_memory_types(types, heaps, bits, usage, size, 0).is_empty());
    // Allowed types that suit the usage, all too small for the request
    // (none was admitted): it can live in none of them, whatever an
    // allowed type that does not suit the usage could hold.
    if let Some(largest_heap) = context.largest_ranked_heap(usage, bits) {
        return Error::SizeExceedsHeaps { size, largest_heap };
    }
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
            memory_type_bits: unsuitable_types(request.type_bits(), bits, &request.desc),
            usage,
        }
    }
}

/// The memory types [`Error::NoSuitableMemoryType`] names for a request
/// described by `desc` whose `memoryTypeBits`, less the types `desc` rules
/// out, are `type_bits`, and which may take `bits` of them
/// ([`allowed_types`]): `type_bits`, or with required flags `bits`, the
/// usable types that have them, so that the error does not name a type
/// that suits the usage but lacks a required flag.
pub(crate) fn unsuitable_types(type_bits: u32, bits: u32, desc: &AllocationDesc<'_>) -> u32 {
    if desc.required_flags.is_empty() {
        type_bits
    } else {
        bits
    }
}

/// The checks of `request`, which names custom pool `pool`, for the
/// allocator tagged `allocator`: the same as [`with_candidates`]',
/// against the pool's one memory type, which it returns.
///
/// # Errors
/// [`Error::ForeignPool`] first, those of [`check_request`], then
/// [`Error::PoolTypeNotAllowed`] where the default path has
/// [`Error::NoMemoryTypeBits`], [`Error::MissingRequiredFlags`] when the
/// pool's type lacks a required flag, then in the default path's order the
/// device-address feature ([`Error::DeviceAddressNotEnabled`]), the heap
/// ([`Error::SizeExceedsHeaps`]), the type's properties
/// ([`Error::NoSuitableMemoryType`]) and `maxMemoryAllocationSize`
/// ([`Error::SizeExceedsMaxAllocation`]). Whether the pool still exists
/// ([`Error::StalePool`]) is found under its lock, as it is placed.
pub(super) fn check_pool_request<D>(
    context: &MemoryContext<D>,
    allocator: u32,
    pool: Pool,
    request: &Request<'_>,
) -> Result<u32, Error> {
    if pool.allocator != allocator {
        return Err(Error::ForeignPool);
    }
    check_request(request)?;
    let size = request.requirements.size;
    let memory_type = pool.memory_type();
    let type_bits = request.type_bits();
    if type_bits & type_bit(memory_type) == 0 {
        return Err(Error::PoolTypeNotAllowed {
            memory_type,
            memory_type_bits: type_bits,
        });
    }
    let required = request.desc.required_flags;
    if !required.is_empty() {
        with_required_flags(context, type_bit(memory_type), required)?;
    }
    let usage = request.desc.usage;
    context.check_device_address(usage)?;
    let heap = context.heap_size(memory_type);
    if size > heap {
        return Err(Error::SizeExceedsHeaps {
            size,
            largest_heap: heap,
        });
    }
    let props = context.memory_types()[memory_type as usize].props;
    if !pool_type_serves(props, usage) {
        // The pool's type: the only one the request could take, and the
        // one the message must name.
        return Err(Error::NoSuitableMemoryType {
            memory_type_bits: type_bit(memory_type),
            usage,
        });
    }
    let max = context.properties.device.max_memory_allocation_size;
    if size > max {
        return Err(Error::SizeExceedsMaxAllocation { size, max });
    }
    Ok(memory_type)
}
