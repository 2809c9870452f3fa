//! Unit tests of the `ring` trace's replay and frame plan, on small test
//! backends (a bump allocator that never reuses, one that keeps the tags
//! written, one that places everything at one offset): a clean backend
//! passes the checks, tags are checked under their own frame, misaligned
//! and overlapping allocations are counted, and frames complete two or
//! three frames later, in order. They are apart from `ring.rs` so that the
//! trace and its timed replay read without the test backends.

use super::*;

/// A bump allocator that never reuses: nothing overlaps.
struct Bump(u64, u64);

impl RingBackend for Bump {
    type Handle = u64;
    fn allocate(&mut self, size: u64, align: u64) -> Option<u64> {
        let at = self.0.next_multiple_of(align) + self.1;
        self.0 = at + size;
        Some(at)
    }
    fn release(&mut self, handles: &mut Vec<u64>) {
        handles.clear();
    }
    fn placement(&self, handle: &u64) -> (u64, u64) {
        (0, *handle)
    }
    fn live_allocations(&mut self) -> Option<u64> {
        Some(0)
    }
}

fn trace() -> RingTrace {
    RingTrace {
        seed: 0,
        sizes: vec![300, 300, 300, 300],
        starts: vec![0, 2, 4],
        done: vec![0, 0],
        align: 256,
        memory_type_bits: 1,
    }
}

#[test]
fn a_clean_backend_passes_the_checks() {
    let fig = replay(&mut Bump(0, 0), &trace(), 0.0, false);
    assert!(fig.clean(), "{fig:?}");
    assert_eq!((fig.allocs, fig.frames, fig.peak_live), (4, 2, 1200));
}

/// A bump allocator whose "memory" keeps the tags written.
#[derive(Default)]
struct Tagged(u64, std::collections::HashMap<u64, (u64, u64)>);

impl RingBackend for Tagged {
    type Handle = u64;
    fn allocate(&mut self, size: u64, align: u64) -> Option<u64> {
        let at = self.0.next_multiple_of(align);
        self.0 = at + size;
        Some(at)
    }
    fn release(&mut self, handles: &mut Vec<u64>) {
        handles.clear();
    }
    fn placement(&self, handle: &u64) -> (u64, u64) {
        (0, *handle)
    }
    fn live_allocations(&mut self) -> Option<u64> {
        Some(0)
    }
    fn write_tag(&mut self, handle: &mut u64, _: u64, tag: u64) -> bool {
        self.1.insert(*handle, (tag, !tag));
        true
    }
    fn read_tag(&mut self, handle: &mut u64, _: u64) -> Option<(u64, u64)> {
        self.1.get(handle).copied()
    }
}

/// Two frames released at one frame start, and the rest at the end:
/// each allocation's tag is looked up under its own frame.
#[test]
fn tags_are_checked_under_their_own_frame() {
    let trace = RingTrace {
        seed: 0,
        sizes: vec![300; 8],
        starts: vec![0, 2, 4, 6, 8],
        done: vec![0, 0, 0, 2],
        align: 256,
        memory_type_bits: 1,
    };
    let fig = replay(&mut Tagged::default(), &trace, 0.0, true);
    assert!(fig.clean(), "{fig:?}");
}

#[test]
fn a_misaligned_allocation_is_counted() {
    let fig = replay(&mut Bump(0, 16), &trace(), 0.0, false);
    assert_eq!(fig.misaligned, 4);
}

/// Hands every allocation offset 0: each overlaps the live ones.
struct Same;

impl RingBackend for Same {
    type Handle = ();
    fn allocate(&mut self, _: u64, _: u64) -> Option<()> {
        Some(())
    }
    fn release(&mut self, handles: &mut Vec<()>) {
        handles.clear();
    }
    fn placement(&self, _: &()) -> (u64, u64) {
        (7, 0)
    }
    fn live_allocations(&mut self) -> Option<u64> {
        None
    }
}

#[test]
fn overlapping_live_allocations_are_counted() {
    let fig = replay(&mut Same, &trace(), 0.0, false);
    // The second of each frame overlaps the first (the shadow keeps
    // one entry per offset), and frame 1's first overlaps frame 0's.
    assert!(fig.overlaps >= 2, "{fig:?}");
    assert!(!fig.clean());
}

#[test]
fn frames_complete_two_or_three_frames_later_in_order() {
    let (sizes, starts, done) = frame_plan(20_000, 1);
    assert_eq!(starts.len(), done.len() + 1);
    assert_eq!(*starts.last().unwrap(), sizes.len());
    assert!(sizes.len() >= 10_000);
    let mut delays = [0usize; 4];
    for (f, &d) in done.iter().enumerate() {
        let f = f as u64;
        assert!(f == 0 || d >= done[f as usize - 1], "in order");
        // At the start of frame f, frames before f - 2 are done, and
        // frame f - 2 may be: at most two sealed frames in flight.
        assert!(
            f - d <= 2 && f.saturating_sub(d) >= f.min(1),
            "frame {f}: {d} done"
        );
        delays[(f - d) as usize] += 1;
    }
    assert!(delays[1] > 0 && delays[2] > 0, "{delays:?}");
    for f in 0..done.len() {
        let n = starts[f + 1] - starts[f];
        assert!((50..=200).contains(&n));
    }
    assert!(sizes.iter().all(|s| (256..=256 << 10).contains(s)));
}
