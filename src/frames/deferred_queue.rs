//! [`DeferredQueue`]: frees that wait for their frame's GPU work to finish.
//!
//! An engine records frame N's commands, submits them with a fence, and goes
//! on to record frame N+1 while the GPU still executes frame N. A buffer the
//! engine stops using during frame N may still be read by frame N's commands
//! (and by earlier frames still in flight), so its memory cannot be reused
//! yet. The queue keeps such frees in the *current* frame; sealing the frame
//! attaches the signal its submission raises (a fence, or a timeline
//! semaphore value); collecting polls the oldest sealed frames and releases
//! their frees, oldest frame first, stopping at the first frame not done.
//!
//! The queue is pure: frames are numbered by a `u64` index and the signal is
//! a type parameter, so it is tested without a device.

use std::collections::VecDeque;

/// One sealed frame: its index, its signal and what it freed.
#[derive(Debug)]
struct SealedFrame<S, T> {
    index: u64,
    signal: S,
    items: Vec<T>,
}

/// Deferred frees grouped by frame.
#[derive(Debug)]
pub struct DeferredQueue<S, T> {
    current: Vec<T>,
    current_index: u64,
    sealed: VecDeque<SealedFrame<S, T>>,
    /// Emptied item vectors, reused so steady-state frames do not allocate;
    /// none larger than [`SPARE_CAPACITY`] items.
    spare: Vec<Vec<T>>,
}

/// The most items an emptied vector keeps room for when it is kept for a
/// later frame: a frame of more frees (a level's unload) would otherwise
/// pin its vector's memory for good, one per frame in flight. Far above
/// what an engine frees in an ordinary frame, which so never allocates.
const SPARE_CAPACITY: usize = 4096;

/// `items`, emptied, as a spare vector: with room for at most
/// [`SPARE_CAPACITY`] items (a larger one is given back to the host).
fn spare<T>(mut items: Vec<T>) -> Vec<T> {
    debug_assert!(items.is_empty());
    if items.capacity() > SPARE_CAPACITY {
        items = Vec::new();
    }
    items
}

impl<S, T> Default for DeferredQueue<S, T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<S, T> DeferredQueue<S, T> {
    /// An empty queue whose current frame is 0.
    pub const fn new() -> Self {
        Self {
            current: Vec::new(),
            current_index: 0,
            sealed: VecDeque::new(),
            spare: Vec::new(),
        }
    }

    /// An empty queue with room for `frames` sealed frames (at most
    /// [`MAX_PREALLOCATED_FRAMES`](Self::MAX_PREALLOCATED_FRAMES); more grow
    /// on demand), so that an engine keeping at most that many in flight
    /// never makes it allocate for frames (items still go into vectors that
    /// are reused).
    pub fn with_capacity(frames: usize) -> Self {
        let frames = frames.min(Self::MAX_PREALLOCATED_FRAMES);
        Self {
            current: Vec::new(),
            current_index: 0,
            sealed: VecDeque::with_capacity(frames),
            spare: Vec::with_capacity(frames + 1),
        }
    }

    /// The most sealed frames [`with_capacity`](Self::with_capacity) makes
    /// room for: far more than any engine keeps in flight, and a bound on
    /// what a huge argument preallocates (`usize::MAX` would overflow).
    pub const MAX_PREALLOCATED_FRAMES: usize = 1024;

    /// Index of the frame that [`push`](Self::push) adds to.
    pub fn current_frame(&self) -> u64 {
        self.current_index
    }

    /// Sealed frames not yet released.
    pub fn frames_in_flight(&self) -> usize {
        self.sealed.len()
    }

    /// The signals of the sealed frames not yet released, oldest first.
    ///
    /// # Time complexity
    /// O(1) to make; each step O(1).
    pub fn signals(&self) -> impl DoubleEndedIterator<Item = &S> + '_ {
        self.sealed.iter().map(|frame| &frame.signal)
    }

    /// Items waiting, in the current and all sealed frames.
    pub fn pending(&self) -> usize {
        self.current.len() + self.sealed.iter().map(|f| f.items.len()).sum::<usize>()
    }

    /// Adds a free to the current frame.
    ///
    /// # Time complexity
    /// O(1) amortised.
    pub fn push(&mut self, item: T) {
        self.current.push(item);
    }

    /// Seals the current frame with the signal its submission raises and
    /// starts the next one. Returns the sealed frame's index. Frames without
    /// frees are sealed too, so indices stay in step with the engine's frames.
    ///
    /// # Time complexity
    /// O(1) amortised.
    pub fn seal(&mut self, signal: S) -> u64 {
        let next = self.spare.pop().unwrap_or_default();
        let items = std::mem::replace(&mut self.current, next);
        self.sealed.push_back(SealedFrame {
            index: self.current_index,
            signal,
            items,
        });
        self.current_index += 1;
        self.current_index - 1
    }

    /// Releases the frames whose signal `is_done` reports complete, oldest
    /// first, stopping at the first one that is not (frames finish in
    /// submission order). Calls `release` on every item of a released frame,
    /// then returns `(frames released, items released)`.
    ///
    /// A panic in `release` goes on to the caller once its frame is out of
    /// the queue: that frame's items not yet released are dropped, and the
    /// frames after it stay queued.
    ///
    /// # Errors
    /// The first error of `is_done`; frames released before it stay released,
    /// the rest stay queued.
    pub fn collect<E>(
        &mut self,
        mut is_done: impl FnMut(&S) -> Result<bool, E>,
        mut release: impl FnMut(T),
    ) -> Result<(usize, usize), E> {
        let (mut frames, mut items) = (0, 0);
        while let Some(oldest) = self.sealed.front() {
            if !is_done(&oldest.signal)? {
                break;
            }
            let Some(mut frame) = self.sealed.pop_front() else {
                break;
            };
            items += frame.items.len();
            frame.items.drain(..).for_each(&mut release);
            self.spare.push(spare(frame.items));
            frames += 1;
        }
        Ok((frames, items))
    }

    /// The index and signal of the oldest sealed frame, if any.
    pub fn oldest(&self) -> Option<(u64, &S)> {
        self.sealed.front().map(|f| (f.index, &f.signal))
    }

    /// The signal of the sealed frame `position` frames after the oldest
    /// (0: the oldest), if that many are sealed: for a caller that polls
    /// the signals with no lock on the queue held, one at a time, then
    /// releases the frames found done with
    /// [`release_oldest`](Self::release_oldest).
    ///
    /// # Time complexity
    /// O(1).
    pub fn sealed_signal(&self, position: usize) -> Option<&S> {
        self.sealed.get(position).map(|frame| &frame.signal)
    }

    /// Releases the `frames` oldest sealed frames (every sealed frame when
    /// fewer are), oldest first, as [`collect`](Self::collect) releases the
    /// frames it finds done, panics of `release` included. Returns
    /// `(frames released, items released)`.
    ///
    /// # Time complexity
    /// O(frames released + items released).
    pub fn release_oldest(&mut self, frames: usize, release: impl FnMut(T)) -> (usize, usize) {
        let mut left = frames;
        let first_ones = |_: &S| {
            let done = left > 0;
            left = left.saturating_sub(1);
            Ok::<_, std::convert::Infallible>(done)
        };
        // A `match` with no `Err` arm, not `let Ok(..) =`: a refutable-looking
        // pattern of an `Infallible` error builds from Rust 1.82 only, and the
        // crate's `rust-version` is 1.80.
        match self.collect(first_ones, release) {
            Ok(released) => released,
            Err(never) => match never {},
        }
    }

    /// Releases every item, sealed or not, as if every sealed frame and the
    /// current one had finished (for a device known to be idle), oldest
    /// first. The current frame counts as sealed and released: the next one
    /// starts. Returns `(frames released, items released)`, the current
    /// frame included.
    ///
    /// A panic in `release` goes on to the caller as in
    /// [`collect`](Self::collect): the frame it was releasing (sealed or
    /// current) loses the items not yet released, dropped; later frames
    /// stay queued, and the current frame stays current (the next one does
    /// not start).
    pub fn release_all(&mut self, mut release: impl FnMut(T)) -> (usize, usize) {
        let (sealed_frames, sealed_items) = self.release_oldest(usize::MAX, &mut release);
        let current_items = self.current.len();
        self.current.drain(..).for_each(&mut release);
        self.current = spare(std::mem::take(&mut self.current));
        self.current_index += 1;
        (sealed_frames + 1, sealed_items + current_items)
    }

    /// Every item waiting, sealed or not, oldest frame first.
    pub fn iter(&self) -> impl Iterator<Item = &T> + '_ {
        let sealed = self.sealed.iter().flat_map(|f| &f.items);
        sealed.chain(&self.current)
    }

    /// Removes every item, sealed or not, for shutdown and drop.
    pub fn drain_all(&mut self) -> impl Iterator<Item = T> + '_ {
        let sealed = self.sealed.drain(..).flat_map(|f| f.items);
        sealed.chain(self.current.drain(..))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_huge_capacity_is_a_bounded_preallocation_not_a_panic() {
        let mut queue: DeferredQueue<u32, u32> = DeferredQueue::with_capacity(usize::MAX);
        queue.push(7);
        assert_eq!(queue.seal(0), 0);
        let mut released = Vec::new();
        let result: Result<_, ()> = queue.collect(|_| Ok(true), |item| released.push(item));
        assert_eq!((result, released), (Ok((1, 1)), vec![7]));
    }

    /// What `release_all`'s docs say of a panicking `release`: the frame
    /// being released loses the rest of its items, later frames stay
    /// queued, and the current frame stays current.
    #[test]
    fn a_panic_in_release_all_leaves_later_frames_and_the_current_one() {
        let mut queue: DeferredQueue<&'static str, u32> = DeferredQueue::new();
        queue.push(1);
        queue.push(2);
        assert_eq!(queue.seal("f0"), 0);
        queue.push(3);
        assert_eq!(queue.seal("f1"), 1);
        queue.push(4);
        let mut released = Vec::new();
        let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            queue.release_all(|item| {
                assert_ne!(item, 1, "a panicking release");
                released.push(item);
            })
        }));
        assert!(caught.is_err());
        assert!(released.is_empty());
        // f0 and its item 2 are gone; f1 and the current frame remain.
        assert_eq!(queue.iter().copied().collect::<Vec<_>>(), vec![3, 4]);
        assert_eq!(queue.frames_in_flight(), 1);
        assert_eq!(queue.release_all(|item| released.push(item)), (2, 2));
        assert_eq!(released, vec![3, 4]);
        assert_eq!(queue.seal("f3"), 3, "the current frame was 2, then 3");
    }

    #[test]
    fn releases_in_frame_order_and_stops_at_the_first_pending_frame() {
        let mut queue: DeferredQueue<&'static str, u32> = DeferredQueue::new();
        queue.push(1);
        queue.push(2);
        assert_eq!(queue.seal("f0"), 0);
        assert_eq!(queue.seal("f1"), 1); // a frame without frees
        queue.push(3);
        assert_eq!(queue.seal("f2"), 2);
        queue.push(4); // current frame 3, not sealed
        let mut released = Vec::new();
        let done = ["f0", "f2"]; // f1 is not done, so f2 must wait too
        let result: Result<_, ()> = queue.collect(|s| Ok(done.contains(s)), |i| released.push(i));
        assert_eq!(result, Ok((1, 2)));
        assert_eq!(released, vec![1, 2]);
        assert_eq!(queue.frames_in_flight(), 2);
        assert_eq!(queue.pending(), 2);
        // The signals still waited for, oldest first.
        assert_eq!(
            queue.signals().copied().collect::<Vec<_>>(),
            vec!["f1", "f2"]
        );
        // What waits, oldest frame first, the current frame last.
        assert_eq!(queue.iter().copied().collect::<Vec<_>>(), vec![3, 4]);
        let result: Result<_, ()> = queue.collect(|_| Ok(true), |i| released.push(i));
        assert_eq!(result, Ok((2, 1)));
        assert_eq!(released, vec![1, 2, 3]);
        assert_eq!(queue.drain_all().collect::<Vec<_>>(), vec![4]);
    }

    #[test]
    fn a_queue_sized_for_its_frames_in_flight_keeps_its_storage() {
        let mut queue: DeferredQueue<u64, u32> = DeferredQueue::with_capacity(3);
        let capacity = (queue.sealed.capacity(), queue.spare.capacity());
        for frame in 0..100u64 {
            queue.push(frame as u32);
            queue.seal(frame);
            // The oldest of three frames in flight is done.
            let result: Result<_, ()> = queue.collect(|&s| Ok(s + 2 <= frame), |_| {});
            assert!(result.is_ok());
            assert!(queue.frames_in_flight() <= 3);
        }
        assert_eq!((queue.sealed.capacity(), queue.spare.capacity()), capacity);
    }

    /// A frame of many frees (a level's unload) does not pin its vector's
    /// memory once released, through `collect` or `release_all`; an
    /// ordinary frame's vector is kept for the next frames.
    #[test]
    fn a_huge_frame_leaves_no_huge_spare_vector() {
        let mut queue: DeferredQueue<u64, u32> = DeferredQueue::with_capacity(2);
        let huge = SPARE_CAPACITY as u32 + 1;
        (0..huge).for_each(|item| queue.push(item));
        queue.seal(0);
        let result: Result<_, ()> = queue.collect(|_| Ok(true), |_| {});
        assert_eq!(result, Ok((1, huge as usize)));
        let capacities = |queue: &DeferredQueue<u64, u32>| {
            let spare = queue.spare.iter().map(Vec::capacity);
            spare.chain([queue.current.capacity()]).max()
        };
        assert_eq!(capacities(&queue), Some(0));
        (0..huge).for_each(|item| queue.push(item));
        assert_eq!(queue.release_all(|_| {}), (1, huge as usize));
        assert_eq!(capacities(&queue), Some(0));
        // An ordinary frame's vector is kept.
        (0..100).for_each(|item| queue.push(item));
        queue.seal(1);
        let result: Result<_, ()> = queue.collect(|_| Ok(true), |_| {});
        assert_eq!(result, Ok((1, 100)));
        assert!(queue.spare.iter().any(|items| items.capacity() >= 100));
    }

    #[test]
    fn errors_stop_collection_and_keep_the_rest() {
        let mut queue: DeferredQueue<u32, u32> = DeferredQueue::new();
        queue.push(10);
        queue.seal(0);
        queue.push(11);
        queue.seal(1);
        let mut released = Vec::new();
        let result = queue.collect(
            |&s| if s == 0 { Ok(true) } else { Err("lost") },
            |i| released.push(i),
        );
        assert_eq!(result, Err("lost"));
        assert_eq!(released, vec![10]);
        assert_eq!(queue.oldest().map(|(i, _)| i), Some(1));
    }

    /// A caller polling with the queue unlocked reads the signals by
    /// position, then releases as many of the oldest frames as it found
    /// done; frames sealed meanwhile stay queued behind them.
    #[test]
    fn release_oldest_releases_that_many_frames_oldest_first() {
        let mut queue: DeferredQueue<&'static str, u32> = DeferredQueue::new();
        queue.push(1);
        queue.seal("f0");
        queue.seal("f1");
        queue.push(2);
        queue.seal("f2");
        queue.push(3); // current frame 3
        let signals = (0..4).map(|position| queue.sealed_signal(position).copied());
        assert_eq!(
            signals.collect::<Vec<_>>(),
            vec![Some("f0"), Some("f1"), Some("f2"), None]
        );
        let mut released = Vec::new();
        assert_eq!(queue.release_oldest(0, |i| released.push(i)), (0, 0));
        assert_eq!(queue.release_oldest(2, |i| released.push(i)), (2, 1));
        assert_eq!(released, vec![1]);
        assert_eq!(queue.oldest(), Some((2, &"f2")));
        assert_eq!(queue.sealed_signal(0), Some(&"f2"));
        // More than are sealed: every sealed frame, not the current one.
        assert_eq!(queue.release_oldest(5, |i| released.push(i)), (1, 1));
        assert_eq!(released, vec![1, 2]);
        assert_eq!((queue.frames_in_flight(), queue.pending()), (0, 1));
        assert_eq!(queue.current_frame(), 3);
    }

    #[test]
    fn release_all_takes_sealed_and_current_frames_in_order() {
        let mut queue: DeferredQueue<&'static str, u32> = DeferredQueue::new();
        queue.push(1);
        queue.seal("never signalled");
        queue.seal("empty");
        queue.push(2);
        queue.push(3); // current frame 2
        let mut released = Vec::new();
        assert_eq!(queue.release_all(|i| released.push(i)), (3, 3));
        assert_eq!(released, vec![1, 2, 3]);
        assert_eq!((queue.frames_in_flight(), queue.pending()), (0, 0));
        assert_eq!(queue.current_frame(), 3);
        // Nothing queued: the current frame still counts, and ends.
        assert_eq!(queue.release_all(|_| unreachable!()), (1, 0));
        assert_eq!(queue.current_frame(), 4);
    }
}
