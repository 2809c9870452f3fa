//! The checks of free ring space off the allocation path: as a chunk that
//! left its ring is freed ([`check_retired_chunk`](Allocator::check_retired_chunk)),
//! and in `check_corruption` ([`damaged_ring_space`](Allocator::damaged_ring_space)),
//! both reading each free span through
//! [`first_written_free`](Allocator::first_written_free). They fill
//! nothing, and find a write after free in space that no ring allocation
//! takes again, which the check of each ring allocation (`ring_fill.rs`)
//! cannot see. Apart from that check and the fills, whose rules for
//! non-coherent atoms they follow (`ring_fill.rs`'s docs), as they run at
//! a chunk's free and on demand, over whole free spans.

use std::ops::Range;

use super::ring_label;
use crate::allocator::{lock, Allocator};
use crate::device::MemoryDeviceExt;
use crate::frames::upload_ring::RetiredFree;
use crate::frames::Deferred;
use crate::memory::deferred_log::Kept;
use crate::memory::mapping::MappedPtr;
use crate::memory::type_pool::debug_fill::{first_changed, FREED};
use crate::memory::type_pool::WrittenFree;
use crate::Allocation;

impl<D: MemoryDeviceExt<M>, M: Send> Allocator<D, M> {
    /// The ring offset of the first byte of `span`, free ring space of
    /// `chunk` (a ring chunk's allocation with debug fills, mapped at
    /// `mapped`) that no ring allocation may take meanwhile, that no
    /// longer reads `0xEF`; `None` when all do. In a non-coherent type, a
    /// span clean as the host sees it is read again once its whole atoms
    /// are invalidated (they hold no live ring allocation's byte: the
    /// module's docs); its partial atoms, as the host sees them only. A
    /// host write found is left in the host's view (no invalidate drops
    /// it). The checks of `check_corruption` and of a chunk as it is
    /// freed.
    fn first_written_free(
        &self,
        chunk: &Allocation,
        capacity: u64,
        mapped: MappedPtr,
        span: Range<u64>,
        lines: &mut Kept,
    ) -> Option<u64> {
        // SAFETY: free ring space of the chunk, inside its mapped
        // allocation: no ring allocation holds it, and none takes it
        // meanwhile (the caller's contract).
        let read = |range: Range<u64>| unsafe {
            first_changed(
                mapped.add(range.start).0.as_ptr(),
                range.end - range.start,
                FREED,
            )
            .map(|at| range.start + at)
        };
        let changed = read(span.clone());
        if changed.is_some() || !self.context.is_non_coherent(chunk.memory_type()) {
            return changed;
        }
        let whole = self.whole_atoms(chunk, span, capacity);
        if whole.is_empty() {
            return None;
        }
        // Whole atoms of free space: no live ring allocation's byte.
        self.sync_ring_space(chunk, whole.clone(), false, lines);
        read(whole)
    }

    /// Before the free of a ring chunk with debug fills that left its
    /// ring (destroyed, or at the allocator's drop), `chunk` its
    /// allocation: checks that its ring space free when it left, and that
    /// of its frames collected since ([`RetiredFree`]), reads `0xEF`
    /// still, as
    /// [`check_corruption`](Self::check_corruption) checks a live ring's
    /// free space (in a non-coherent type, its whole atoms once
    /// invalidated too). The chunk's frames are all collected and no
    /// `ring_write` copies into it (its free waits for that), so no ring
    /// allocation lives in it. A byte written after its frame was
    /// collected, which no ring allocation took again before the chunk
    /// went, is counted in
    /// [`corruptions_detected`](Self::corruptions_detected) and logged
    /// with `log::error!` through `deferred_log` (once the locks of
    /// `collect` and `collect_idle` are released, which free retired
    /// chunks inside it; at once at the drop), as is a failed invalidate,
    /// with `log::warn!`.
    ///
    /// # Time complexity
    /// O(bytes checked), and at most two invalidates.
    #[cold]
    #[inline(never)]
    pub(in crate::allocator) fn check_retired_chunk(&self, chunk: &Allocation, free: &RetiredFree) {
        let Some(mapped) = chunk.mapped else {
            return;
        };
        let mut lines = Kept::default();
        let changed = free
            .spans
            .iter()
            .filter(|span| !span.is_empty())
            // Free when the chunk left its ring, and no ring allocation
            // may take them since.
            .find_map(|span| {
                self.first_written_free(chunk, free.capacity, mapped, span.clone(), &mut lines)
            });
        if let Some(at) = changed {
            self.context.count_corruption();
            lines.push(log::Level::Error, format!(
                "vk-suballoc: memory written after it was freed: byte {} of memory {:?} was changed before its upload ring's chunk was freed (upload ring{}, chunk {}, ring offset {at}, memory type {}): written through a ring allocation of a collected frame, or by the GPU",
                chunk.offset() + at,
                chunk.memory(),
                ring_label(free.ring.as_deref()),
                free.index,
                chunk.memory_type(),
            ));
        }
        lines.defer();
    }

    /// The free ring space of every upload ring's chunks in the memory
    /// types of `types` that have debug fills, and of the destroyed rings'
    /// chunks not freed yet (queued in their frame, or kept back by a
    /// `ring_write`: the space free when their ring went and that of their
    /// frames collected since, `Rings::leaving`, else [`RetiredFree`]),
    /// in which a byte no longer reads `0xEF`, with its memory type; and
    /// how many free spans were checked (one or two per chunk: the free
    /// space after the head, and its part from the ring's start when it
    /// wraps). For [`check_corruption`](Self::check_corruption). Space a
    /// collect gave back but a `ring_write` still holds (`ChunkPins`) is
    /// not free yet, and not checked.
    ///
    /// In a non-coherent type a span found clean as the host sees it is
    /// read again once its whole atoms are invalidated
    /// ([`first_written_free`](Self::first_written_free)). A failed
    /// invalidate is logged with `log::warn!` through `deferred_log`, once
    /// `check_corruption` has released its locks.
    ///
    /// # Time complexity
    /// O(free ring bytes in those types + items queued in the frames ×
    /// destroyed rings' chunks not freed yet),
    /// under the frames' and the rings' locks; at most one invalidate per
    /// span in a non-coherent type.
    pub(in crate::allocator) fn damaged_ring_space(
        &self,
        types: u32,
    ) -> (u64, Vec<(u32, WrittenFree)>) {
        let mut checked = 0;
        let mut damaged = Vec::new();
        let mut lines = Kept::default();
        // The frames' lock too, before the rings' (the lock order): a
        // destroyed ring's chunk is in the frame queue or in `retired`
        // until a collect, holding both, takes it out to free it.
        let frames = lock(&self.frames);
        let rings = lock(&self.rings);
        let live = rings.rings.iter().flat_map(|(_, ring)| &ring.chunks);
        let live = live.filter(|chunk| chunk.fills).map(|chunk| {
            (
                &chunk.allocation,
                chunk.linear.capacity(),
                chunk.free_spans(),
            )
        });
        let queued = frames.iter().filter_map(|item| match item {
            Deferred::RingChunk(chunk) => Some(&**chunk),
            _ => None,
        });
        // Their free space now: that of their `leaving` entry, which the
        // reclaims of their frames collected since their ring went grew.
        let gone = queued.chain(&rings.retired).filter_map(|chunk| {
            let free = chunk.free.as_deref()?;
            let spans = match rings.leaving_index(&chunk.pins) {
                Some(index) => rings.leaving[index].free_spans(),
                None => free.spans.clone(),
            };
            Some((&chunk.allocation, free.capacity, spans))
        });
        for (allocation, capacity, spans) in live.chain(gone) {
            let memory_type = allocation.memory_type();
            if types & 1u32.wrapping_shl(memory_type) == 0 {
                continue;
            }
            let Some(mapped) = allocation.mapped else {
                continue;
            };
            let base = allocation.offset();
            for span in spans {
                if span.is_empty() {
                    continue;
                }
                checked += 1;
                // Free ring space: no ring allocation takes it while the
                // rings' lock is held (none at all in a destroyed ring's
                // chunk), and no collect frees its chunk meanwhile.
                let changed =
                    self.first_written_free(allocation, capacity, mapped, span.clone(), &mut lines);
                if let Some(at) = changed {
                    let written = WrittenFree {
                        memory: allocation.memory(),
                        offset: base + span.start,
                        size: span.end - span.start,
                        first_changed: base + at,
                    };
                    damaged.push((memory_type, written));
                }
            }
        }
        drop((rings, frames));
        lines.defer();
        (checked, damaged)
    }
}
