//! A request as one memory type sees it, the [`PoolRequest`] its pool
//! places: the alignment (widened to `nonCoherentAtomSize` on
//! non-coherent memory), the `bufferImageGranularity` class and the page
//! padding of optimal images, the size it takes in a block (with
//! `Config::debug_margin`, rounded up to its alignment, at most
//! [`MAX_TAIL_ROUNDING`]), whether it must take dedicated memory (lazily
//! allocated types), and the run class of a small buffer. Apart from the
//! walk over memory types because defragmentation sizes its moves the same
//! way.

use crate::allocator::Request;
use crate::memory::context::MemoryContext;
use crate::memory::runs::class_of;
use crate::memory::type_pool::{fit_to_block_size, DedicatedChoice, PoolRequest, PoolShape};
use crate::memory::ResourceKind;

/// The largest alignment a block allocation's size is rounded up to
/// ([`pool_request`], for a request not padded to whole
/// `bufferImageGranularity` pages).
pub(crate) const MAX_TAIL_ROUNDING: u64 = 4096;

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

/// `request` as memory type `memory_type` sees it: its alignment (with
/// `nonCoherentAtomSize` on non-coherent memory), granularity class, placed
/// size, dedicated choice and run class.
#[inline(always)]
pub(crate) fn pool_request<'r, D>(
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
pub(crate) fn custom_pool_request<'r, D>(
    context: &MemoryContext<D>,
    memory_type: u32,
    request: &Request<'r>,
    within_budget: bool,
) -> PoolRequest<'r> {
    let padded = context.granularity_page();
    pool_request_padded(context, memory_type, request, within_budget, padded)
}

/// A request naming a custom pool as that pool places it: raised to the
/// pool's least alignment ([`PoolShape::min_alignment`], as
/// `AllocationDesc::min_alignment` raises it), seen as
/// [`custom_pool_request`] sees it, in the pool's blocks unless dedicated
/// memory is required (by the driver, the caller or a lazily allocated
/// type: then dedicated memory of its type, counted in the pool), in a run
/// slot only when `takes_runs`, and fitted to the pool's fixed block size
/// ([`fit_to_block_size`]). The allocation path builds it under the pool's
/// lock; `Allocator::allocate_many` from the pools' table, before it places
/// anything.
pub(crate) fn custom_pool_placement<'r, D>(
    context: &MemoryContext<D>,
    memory_type: u32,
    shape: PoolShape,
    takes_runs: bool,
    request: &Request<'r>,
    within_budget: bool,
) -> PoolRequest<'r> {
    let mut aligned = *request;
    aligned.desc.min_alignment = aligned.desc.min_alignment.max(shape.min_alignment);
    let mut pool_request = custom_pool_request(context, memory_type, &aligned, within_budget);
    if pool_request.dedicated != DedicatedChoice::Require {
        pool_request.dedicated = DedicatedChoice::Never;
    }
    if !takes_runs {
        pool_request.run_class = None;
    }
    if let Some(block_size) = shape.block_size {
        fit_to_block_size(&mut pool_request, block_size, context.config.debug_margin);
    }
    pool_request
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
    let run_class = (placed_size <= context.run_limit
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
        strategy: request.desc.strategy,
    }
}
