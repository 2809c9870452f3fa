//! The release of the empty blocks the pools keep
//! ([`Config::empty_block_reserve`](crate::Config::empty_block_reserve);
//! a custom pool's one, VMA's rule) when they stand in the way of a
//! request short of memory: which memory types' kept blocks do
//! ([`release_scope`]), their release in two steps (all but each default
//! pool's largest, then those too and the custom pools' kept blocks of the
//! same types, but their `min_blocks`: [`Keep`]), and the request tried
//! again after each. Apart from the walk over memory types
//! because a custom pool's requests and the `min_blocks` blocks of
//! `Allocator::create_pool` give way to kept blocks the same way.

use super::pool_access::PoolAccess;
use crate::device::MemoryDeviceExt;
use crate::memory::context::MemoryContext;
use crate::memory::deferred_log;
use crate::Error;

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
    /// None, neither in the default pools nor in the custom pools of the
    /// types (but their `min_blocks`): the heap is short of memory even
    /// without the others, and an empty block holds nothing that needs it.
    None,
}

/// Releases the empty blocks the default pools of the memory types in
/// `types` (a mask, from [`release_scope`]) keep
/// ([`Config::empty_block_reserve`](crate::Config::empty_block_reserve)),
/// all but those `keep` says (with [`Keep::None`], the custom pools' of
/// those types too, but their `min_blocks`), for a request that want of
/// memory stopped (or a custom pool's `min_blocks` blocks,
/// `Allocator::create_pool`): it
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
        let types = types & context.usable_types();
        let mut left = types;
        while left != 0 {
            let memory_type = left.trailing_zeros();
            left &= left - 1;
            released += pools.with_pool(memory_type, |pool| match keep {
                Keep::Largest => pool.release_surplus_empty_blocks(context, 0.0, None),
                Keep::None => pool.trim(context),
            });
        }
        // Custom pools keep one empty block (VMA's rule), which the first
        // step leaves as each default pool's largest; the second takes it
        // too, but for their `min_blocks`, so that no kept block makes a
        // request fail.
        if let Keep::None = keep {
            pools.for_each_custom_pool(|pool| {
                if types & 1u32.wrapping_shl(pool.memory_type()) != 0 {
                    released += pool.trim(context);
                }
            });
        }
        released
    })
}

/// `attempt`'s answer once the kept empty blocks of the memory types that
/// `error`, its refusal, says stood in its way ([`release_scope`] of
/// `memory_type`) are released, in the two steps of
/// [`release_kept_empty_blocks`]; `error` when the refusal was not for want
/// of memory or those blocks were all released for this request already
/// (`released`, a mask of memory types, says whose were: a request walking
/// over memory types passes the same mask to each type's retry). A type is
/// marked released only once its largest kept blocks go too: a retry that
/// fails otherwise after the first step leaves them, and the next type of
/// their heap that lacks memory releases them. A retry refused at
/// `maxMemoryAllocationCount` after a refusal of the heap (its memory or
/// budget) goes on to the kept blocks of every type not released yet, as
/// that refusal first would: objects are counted device-wide, and another
/// thread may have taken those the release freed (or objects the allocator
/// did not make, the driver's last ones).
pub(crate) fn retry_after_releasing<P, D, R>(
    context: &MemoryContext<D>,
    pools: &mut P,
    memory_type: u32,
    error: Error,
    released: &mut u32,
    mut attempt: impl FnMut(&mut P) -> Result<R, Error>,
) -> Result<R, Error>
where
    P: PoolAccess,
    D: MemoryDeviceExt<P::Memory>,
{
    let scope = release_scope(context, error, memory_type) & !*released;
    if scope == 0 {
        return Err(error);
    }
    let mut error = error;
    for keep in [Keep::Largest, Keep::None] {
        if let Keep::None = keep {
            *released |= scope;
        }
        if release_kept_empty_blocks(context, pools, scope, keep) == 0 {
            continue;
        }
        match attempt(pools) {
            Err(next) if next.is_want_of_memory() => error = next,
            result => return result,
        }
    }
    // Once more at most: after it every type's are released.
    if release_scope(context, error, memory_type) & !*released != 0 {
        return retry_after_releasing(context, pools, memory_type, error, released, attempt);
    }
    Err(error)
}
