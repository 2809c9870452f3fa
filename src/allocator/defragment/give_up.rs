//! Giving up planned moves: [`Allocator::give_up_move`], the engine's way
//! out of a move it cannot carry out, which frees the destination through
//! the frame queue and lets the source block take requests again; and
//! `give_up_plan`, which gives up every move of a plan on the way out of
//! a panic. Apart from the planning (`planning.rs`): a move is given up
//! once its plan is made, by the engine or as the planning unwinds.

use std::panic::{self, AssertUnwindSafe};

use super::{DefragmentationMove, DefragmentationPlan};
use crate::allocator::Allocator;
use crate::device::MemoryDeviceExt;
use crate::Error;

impl<D: MemoryDeviceExt<M>, M: Send> Allocator<D, M> {
    /// Gives up every move of `plan` ([`give_up_move`](Self::give_up_move)),
    /// on the way out of a panic: their destinations, handed to nobody,
    /// would otherwise stay live until the allocator's drop. A second panic
    /// (the memory callback) is dropped, so that the first one goes on.
    #[cold]
    pub(super) fn give_up_plan(&self, plan: &mut DefragmentationPlan) {
        for planned in plan.moves.drain(..) {
            let _ = panic::catch_unwind(AssertUnwindSafe(|| self.give_up_move(planned)));
        }
    }

    /// Gives up a planned move, as VMA's `MOVE_OPERATION_IGNORE` does: the
    /// moved allocation stays where it is, and its destination is freed
    /// through the frame queue, as [`free_after_frame`](Self::free_after_frame)
    /// frees (so a copy already submitted may still write it). The block
    /// the move would have left can no longer empty, so it stops being
    /// emptied: it takes requests and other plans' moves again, and its
    /// small-buffer slots reopen. Other moves out of that block may still
    /// be carried out; they just do not empty it. A compaction's move
    /// ([`DefragmentationLimits::compact_blocks`](crate::DefragmentationLimits::compact_blocks))
    /// leaves no block being emptied: giving it up only frees its
    /// destination.
    ///
    /// Freeing the destination directly gives the move up too, but leaves
    /// the block being emptied until it empties or a later plan empties
    /// it. That is the way out for a resource unloaded while its move is
    /// pending (VMA's `MOVE_OPERATION_DESTROY`): free its old allocation
    /// and the destination (after the frame, when a copy was submitted),
    /// and the block, which can still empty, goes on being emptied and is
    /// released once it does. Given up instead, the move would end its
    /// retirement: the block would take requests again, and once empty be
    /// kept as any block emptied by other frees may be.
    ///
    /// With [`Config::debug_fill`](crate::Config::debug_fill) the
    /// destination is filled `0xEF` as it is freed, unchecked, as any
    /// freed allocation is: the copy may have written it. (It was checked
    /// as the plan placed it.)
    ///
    /// A move planned by another allocator, whose public `destination` the
    /// engine replaced with an allocation of this one, gives up only that
    /// allocation (freed through the frame queue): the block the move
    /// leaves is the other allocator's, which goes on emptying it.
    ///
    /// # Errors
    /// [`Error::ForeignAllocation`] for a move whose destination is
    /// another allocator's (nothing changes then);
    /// [`Error::StaleAllocation`] when the destination was freed already.
    ///
    /// # Time complexity
    /// O(1) amortised, but for a move whose source block is still being
    /// emptied: that block goes back to its pool's first-fit order and its
    /// runs reopen, a pass over the pool's blocks and runs.
    pub fn give_up_move(&self, planned: DefragmentationMove) -> Result<(), Error> {
        self.check_owner(&planned.destination)?;
        let destination = &planned.destination;
        // Another allocator's move, whose destination the engine swapped
        // for one of this allocator's: its source block and pool are the
        // other allocator's (its memory type may be past this device's,
        // its block key may name a block of this allocator), so only the
        // destination is given up, as freeing it directly would.
        let own_move = planned.allocator == self.id;
        // The source block is in the pool the plan placed the move in,
        // which is the destination's unless the engine put another move's
        // destination there: a block key means nothing in another pool.
        let own_pool = own_move && destination.home == planned.home;
        self.with_pool(destination, |pool| {
            if !pool.is_live(destination.location) {
                return Err(Error::StaleAllocation);
            }
            if own_pool {
                pool.stop_retiring(planned.source);
            }
            Ok(())
        })??;
        if own_move && !own_pool {
            self.with_home_pool(planned.home, |pool| pool.stop_retiring(planned.source));
        }
        self.free_after_frame(planned.destination)
    }
}
