//! Run slots in a [`TypePool`]: small buffers take slots of runs
//! ([`runs`](crate::memory::runs)), ranges of a block cut into equal slots
//! of one size class, so that up to 64 buffers share one offset-allocator
//! range. This file carves a new run from an existing block when no run of
//! the request's class has a free slot, and hands slots out; the runs' own
//! bookkeeping is `memory/runs.rs`. It is apart from the block path because
//! runs follow their own rules: never in a new block, in a retiring one, or
//! in one less than 16 times the run's size.

use super::{Location, Placement, PoolRequest, TypePool};
use crate::memory::runs::{class_size, run_fits_block, slots_per_run, TakenSlot};
use crate::memory::slab::SlabKey;

impl<M> TypePool<M> {
    /// Carves a new run of `class` from the existing blocks and takes its
    /// first slot; `None` when no block has room for a run. Runs never
    /// create blocks: the request then takes a range of its own (in a gap
    /// too small for a run, or in a new block), and later runs come from the
    /// block it made. Nor do they come from blocks a defragmentation plan
    /// is emptying: a run there would hand out slots that keep the block;
    /// nor from blocks less than 16 times the run's size
    /// ([`run_fits_block`]). The request comes by value, as to
    /// [`allocate_slow`](Self::allocate_slow).
    #[cold]
    #[inline(never)]
    pub(super) fn take_from_new_run(
        &mut self,
        request: PoolRequest<'_>,
        class: usize,
    ) -> Option<TakenSlot> {
        let run_request = Self::run_request(&request, class);
        let placement = (0..self.order[request.class].len()).find_map(|index| {
            let key = self.order[request.class][index];
            if !self.takes_run_in(key, &run_request) {
                return None;
            }
            self.allocate_in_block(key, &run_request)
        })?;
        self.start_run(class, placement)
    }

    /// Whether block `key` may hold a new run, whose range `run_request`
    /// asks for: it is not retiring, and large enough ([`run_fits_block`]).
    pub(super) fn takes_run_in(&self, key: SlabKey, run_request: &PoolRequest<'_>) -> bool {
        self.blocks.get(key).is_some_and(|block| {
            !block.retiring && run_fits_block(run_request.placed_size, block.size)
        })
    }

    /// The request for the range of a new run of `class`, made for `request`.
    pub(super) fn run_request<'r>(request: &PoolRequest<'r>, class: usize) -> PoolRequest<'r> {
        let slot_size = class_size(class);
        let bytes = slot_size * u64::from(slots_per_run(slot_size));
        PoolRequest {
            // Every slot then keeps every alignment its class serves (runs.rs).
            align: 1 << slot_size.trailing_zeros(),
            class: request.class,
            within_budget: request.within_budget,
            ..PoolRequest::for_block(bytes)
        }
    }

    /// Makes the block range `placement` a run of `class` and takes its
    /// first slot.
    pub(super) fn start_run(&mut self, class: usize, placement: Placement) -> Option<TakenSlot> {
        let Placement {
            location: Location::Block { block, range },
            memory,
            offset,
            mapped,
        } = placement
        else {
            return None;
        };
        self.runs
            .insert(class, block, range, offset, memory, mapped);
        // The new run is the last of its class's list: take hands out its slot.
        self.runs.take(class)
    }

    /// Names a run slot taken for `request` and counts it as handed out.
    #[inline(always)]
    pub(super) fn hand_out_slot(
        &mut self,
        taken: TakenSlot,
        request: &PoolRequest<'_>,
    ) -> Placement {
        if let Some(name) = request.name {
            self.runs.set_name(&taken, name);
        }
        self.count(taken.into(), request)
    }
}
