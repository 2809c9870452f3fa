//! The check of free memory for writes after free on demand
//! ([`Allocator::check_corruption`](crate::Allocator::check_corruption)):
//! every free range and free run slot of a pool's mapped blocks should
//! still read [`FREED`]; those that do not are reported as [`WrittenFree`].
//! It is apart from the fills and checks along an allocation's life: it
//! reads all of a pool's free memory at once, when the caller asks, not
//! one allocation's bytes as it comes or goes.

use ash::vk;

use super::non_coherent_sync::sync;
use super::{first_changed, whole_atoms, FREED};
use crate::device::MemoryDeviceExt;
use crate::memory::block::Block;
use crate::memory::context::MemoryContext;
use crate::memory::mapping::MappedPtr;
use crate::memory::type_pool::TypePool;

/// A free range, or a free run slot, of a block, in which something wrote
/// after it was freed.
#[derive(Clone, Copy, Debug)]
pub(crate) struct WrittenFree {
    /// Its block.
    pub(crate) memory: vk::DeviceMemory,
    /// Its offset in its block.
    pub(crate) offset: u64,
    /// Its size.
    pub(crate) size: u64,
    /// The offset in the block of its first byte that is not [`FREED`].
    pub(crate) first_changed: u64,
}

impl<M> TypePool<M> {
    /// Every free range and free run slot, in this pool's mapped blocks,
    /// in which a byte no longer reads [`FREED`]; and how many were
    /// checked. Only for pools of memory types with debug fills.
    ///
    /// In a non-coherent type, each is checked as the host sees it, then,
    /// when clean there, its whole atoms are invalidated and checked
    /// again, as the device holds them. A free range may start inside the last atom of the
    /// allocation before it, whose owner's unflushed writes an invalidate
    /// of that atom would drop: partial atoms are checked as the host sees
    /// them only. A free range ends on an atom boundary (the next
    /// allocation starts on one) or at the block's end; free run slots are
    /// whole atoms.
    ///
    /// # Time complexity
    /// O(free bytes in the pool's blocks); in a non-coherent type, at most
    /// one invalidate per free range and free slot (none for one found
    /// written as the host sees it, or holding no whole atom).
    pub(crate) fn damaged_free_ranges<D: MemoryDeviceExt<M>>(
        &self,
        context: &MemoryContext<D>,
    ) -> (u64, Vec<WrittenFree>) {
        let non_coherent = context.is_non_coherent(self.memory_type);
        let atom = context.properties.device.non_coherent_atom_size;
        let mut checked = 0;
        let mut damaged = Vec::new();
        let mut check = |block: &Block<M>, mapped: MappedPtr, offset: u64, size: u64| {
            checked += 1;
            // SAFETY: a free range (or slot) of a live, mapped block: `size`
            // bytes from `offset` are inside it, and no allocation holds
            // them.
            let read = |from: u64, len: u64| unsafe {
                first_changed(mapped.add(from).0.as_ptr(), len, FREED).map(|at| from + at)
            };
            let mut changed = read(offset, size);
            // A host write found stays in the host's view, for the
            // allocation that takes these bytes to find and count: the
            // invalidate would drop it.
            if non_coherent && changed.is_none() {
                let whole = whole_atoms(offset..offset + size, atom, block.size);
                if !whole.is_empty() {
                    // SAFETY: whole atoms inside a free range: no live
                    // allocation's byte (above); under the pool's lock.
                    unsafe { sync(context, &block.memory, block.size, whole.clone(), false) };
                    changed = read(whole.start, whole.end - whole.start);
                }
            }
            if let Some(first_changed) = changed {
                damaged.push(WrittenFree {
                    memory: block.raw,
                    offset,
                    size,
                    first_changed,
                });
            }
        };
        for (_, block) in self.blocks.iter() {
            let Some(mapped) = block.mapped else { continue };
            for free in block.ranges.free_ranges() {
                check(block, mapped, free.offset, free.size);
            }
        }
        for (_, run) in self.runs.iter() {
            let Some(block) = self.blocks.get(run.block) else {
                continue;
            };
            let Some(mapped) = block.mapped else { continue };
            for (_, live, offset) in run.slots() {
                if !live {
                    check(block, mapped, offset, run.slot_size);
                }
            }
        }
        (checked, damaged)
    }
}
