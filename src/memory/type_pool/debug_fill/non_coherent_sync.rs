//! The flushes and invalidates of debug fills in non-coherent memory
//! types, where the host's and the GPU's views of a mapped block meet only
//! through `vkFlushMappedMemoryRanges` and `vkInvalidateMappedMemoryRanges`,
//! a whole `nonCoherentAtomSize` atom at a time: one call over a range
//! widened to whole atoms, whose device error is logged, not returned; and
//! whether an allocation's fills are synced at all. It is apart from the
//! fills and checks that call it as the one place where they reach the
//! device; why the atoms it widens over hold no live allocation's byte is
//! in `debug_fill.rs`.

use std::ops::Range;

use ash::vk;
use gpu_alloc_types::MappedMemoryRange;

use super::HeldSpan;
use crate::device::MemoryDeviceExt;
use crate::memory::context::MemoryContext;
use crate::memory::deferred_log;
use crate::memory::mapping::atom_range;
use crate::memory::type_pool::TypePool;

/// `vkFlushMappedMemoryRanges` (`flush`) or
/// `vkInvalidateMappedMemoryRanges` over `range` of `memory`, a memory
/// object of `memory_size` bytes of a non-coherent type, widened to whole
/// atoms (`mapping.rs`). A device error is logged and ignored: it leaves
/// the debug fills unsynced, which may show later as a write after free
/// that did not happen (the line says why), and nothing else.
///
/// # Safety
/// `memory` is live and mapped whole; the caller holds its pool's lock.
/// For an invalidate, the widened range holds no byte of a live
/// allocation (it would drop the owner's unflushed writes) but one handed
/// to nobody yet; for a flush, none whose GPU writes may be pending or
/// still unread by the host (it would overwrite them), but one being
/// freed or handed to nobody yet.
pub(super) unsafe fn sync<M, D: MemoryDeviceExt<M>>(
    context: &MemoryContext<D>,
    memory: &M,
    memory_size: u64,
    range: Range<u64>,
    flush: bool,
) {
    let atom = context.properties.device.non_coherent_atom_size;
    let widened = atom_range(range, atom, memory_size);
    if widened.is_empty() {
        return;
    }
    let ranges = [MappedMemoryRange {
        memory,
        offset: widened.start,
        size: widened.end - widened.start,
    }];
    // SAFETY: the range is inside the live memory object, mapped whole,
    // atom-aligned or ending at its end (`atom_range`;
    // VUID-VkMappedMemoryRange-memory-00684, -offset-00687, -size-01390);
    // the pool's lock serialises access to its memory objects; the bytes
    // it covers are the caller's contract.
    let result = unsafe {
        if flush {
            context.device.flush_memory_ranges(&ranges)
        } else {
            context.device.invalidate_memory_ranges(&ranges)
        }
    };
    if result.is_err() {
        sync_failed(context.device.raw_memory(memory), widened, flush);
    }
}

/// The warning for a failed [`sync`].
#[cold]
fn sync_failed(memory: vk::DeviceMemory, range: Range<u64>, flush: bool) {
    let call = if flush { "flush" } else { "invalidate" };
    // Under the pool's lock: logged once it is released.
    deferred_log::log(log::Level::Warn, format!(
        "vk-suballoc: debug fill: the {call} of bytes {range:?} of memory {memory:?} failed (out of memory); its fill patterns may not match between host and device, and a later check may report a write after free that did not happen"
    ));
}

impl<M> TypePool<M> {
    /// Whether the fills of `span` are flushed, and its checks invalidate
    /// first: in a non-coherent type, where every allocation starts on an
    /// atom (`pool_request_padded`). One that did not would widen its
    /// flushes and invalidates over its neighbour's bytes: it is checked
    /// and filled as the host sees it only.
    pub(super) fn syncs_span<D>(&self, context: &MemoryContext<D>, span: &HeldSpan<'_, M>) -> bool {
        if !context.is_non_coherent(self.memory_type) {
            return false;
        }
        let atom = context.properties.device.non_coherent_atom_size.max(1);
        debug_assert_eq!(span.offset % atom, 0, "an allocation off an atom");
        span.offset % atom == 0
    }
}
