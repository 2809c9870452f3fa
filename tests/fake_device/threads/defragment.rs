//! Defragmentation while other threads allocate and free: one thread plans
//! moves of its own allocations and carries the plans out, as an engine
//! does, while the others allocate, free (now and after frames), end,
//! signal and collect frames and fill upload rings in the same memory
//! types.
//!
//! The shared shadow checks every destination, like every allocation, as it
//! is handed out: it overlaps no live allocation, no range freed after a
//! frame whose fence has not signalled, no ring bytes of such a frame. At
//! the end of each round every thread shows its live allocations: they
//! overlap nothing of the others' nor any range still held, they are
//! exactly what the shadow holds, and their tagged bytes survived the moves.

use std::collections::BTreeMap;
use std::sync::{Condvar, Mutex, PoisonError};

use vk_suballoc::device::fake::FakeLayout;
use vk_suballoc::{Allocation, Config, DefragmentationLimits, Movable, Request, ResourceKind};

use super::super::seeded_rng::Rng;
use super::super::stress::host_visible;
use super::super::{allocator_with, finish, free, requirements};
use super::{check_tag, range_of, Held, World, MIB, USAGES};

/// Rounds, and each other thread's steps per round: a few under Miri.
const ROUNDS: u64 = if cfg!(miri) { 2 } else { 40 };
const STEPS: u64 = if cfg!(miri) { 10 } else { 200 };
/// Threads besides the one that defragments.
const OTHERS: u64 = 3;

/// An allocation of the defragmenting thread, with the tag at its ends and
/// the request its resource was made with.
struct Own {
    tag: u64,
    allocation: Allocation,
    request: Request<'static>,
}

/// What the plans did over the test.
#[derive(Debug, Default)]
struct Tally {
    plans: u64,
    moves: u64,
    blocks: u64,
    given_up: u64,
}

/// Where the threads meet at the end of each round. Unlike `std`'s
/// `Barrier`, it lets the others go when one thread panics (see
/// [`ReleaseOnPanic`]), and they panic too: a failure ends the test rather
/// than hang it.
struct Meeting {
    threads: usize,
    state: Mutex<MeetingState>,
    turn: Condvar,
}

#[derive(Default)]
struct MeetingState {
    arrived: usize,
    generation: u64,
    failed: bool,
}

impl Meeting {
    fn new(threads: usize) -> Self {
        Self {
            threads,
            state: Mutex::default(),
            turn: Condvar::new(),
        }
    }

    /// Waits until every thread has arrived; `true` in the last to arrive.
    fn wait(&self) -> bool {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        assert!(!state.failed, "another thread failed");
        state.arrived += 1;
        if state.arrived == self.threads {
            state.arrived = 0;
            state.generation += 1;
            self.turn.notify_all();
            return true;
        }
        let generation = state.generation;
        let state = self
            .turn
            .wait_while(state, |s| s.generation == generation && !s.failed)
            .unwrap_or_else(PoisonError::into_inner);
        assert!(!state.failed, "another thread failed");
        false
    }
}

/// Held by each thread: when it panics, lets the others out of the
/// [`Meeting`].
struct ReleaseOnPanic<'a>(&'a Meeting);

impl Drop for ReleaseOnPanic<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            let meeting = self.0;
            let mut state = meeting.state.lock().unwrap_or_else(PoisonError::into_inner);
            state.failed = true;
            meeting.turn.notify_all();
        }
    }
}

/// The end of a round: where the threads meet, and the live ranges they
/// show there.
struct RoundEnd {
    meeting: Meeting,
    shown: Mutex<Vec<(u64, (u64, u64))>>,
}

impl World<'_> {
    /// Every thread calls this at the end of a round with its live
    /// allocations: their tags must hold, and, once all have shown theirs,
    /// one thread checks them all against each other, the ranges held for
    /// frames not finished, and the shadow.
    fn end_round<'l>(
        &self,
        round_end: &RoundEnd,
        round: u64,
        live: impl Iterator<Item = (u64, &'l Allocation)>,
    ) {
        {
            let mut shown = round_end.shown.lock().unwrap();
            for (tag, a) in live {
                check_tag(self.allocator, tag, a);
                shown.push(range_of(a));
            }
        }
        if round_end.meeting.wait() {
            let mut shown = round_end.shown.lock().unwrap();
            let shadow = self.shadow();
            let recorded: Vec<(u64, (u64, u64))> = shadow
                .live
                .iter()
                .map(|(&(memory, start), &end)| (memory, (start, end)))
                .collect();
            shown.sort_unstable();
            assert_eq!(*shown, recorded, "round {round}: the shadow's live ranges");
            let mut by_memory: BTreeMap<u64, Vec<(u64, u64)>> = BTreeMap::new();
            let held = shadow.held.iter().filter(|h| !shadow.done(h.frame));
            for (memory, range) in shown.drain(..).chain(held.map(|h| (h.memory, h.range))) {
                by_memory.entry(memory).or_default().push(range);
            }
            for (memory, ranges) in &mut by_memory {
                ranges.sort_unstable();
                for pair in ranges.windows(2) {
                    assert!(
                        pair[0].1 <= pair[1].0,
                        "round {round}: memory {memory:#x}: {:?} and {:?} overlap",
                        pair[0],
                        pair[1]
                    );
                }
            }
        }
        round_end.meeting.wait();
    }

    /// One round of a thread other than the defragmenting one.
    fn churn(&self, rng: &mut Rng, live: &mut Vec<(u64, Allocation)>, first_tag: u64) {
        for step in 0..STEPS {
            let tag = first_tag + step;
            match rng.below(100) {
                0..=44 if live.len() < 150 => live.extend(self.allocate(rng, tag)),
                0..=79 if !live.is_empty() => self.free_random(rng, live),
                80..=84 => self.end_frame(),
                85..=89 => self.signal_oldest(),
                90..=94 => {
                    self.allocator.collect().unwrap();
                }
                _ => self.ring_allocate(self.rings[rng.below(2) as usize], rng),
            }
        }
    }

    /// One round of the defragmenting thread: a burst of allocations of
    /// 4 KiB to 512 KiB, most of its allocations freed (now or after the
    /// frame), leaving blocks sparse; then a plan over all it holds, within
    /// a random move limit at times, carried out.
    fn defragment_round(
        &self,
        rng: &mut Rng,
        own: &mut Vec<Own>,
        first_tag: u64,
        tally: &mut Tally,
    ) {
        for step in 0..20 + rng.below(60) {
            let kind = [
                ResourceKind::Buffer,
                ResourceKind::LinearImage,
                ResourceKind::OptimalImage,
            ][rng.below(3) as usize];
            // Large ones fill blocks of their own, small ones take run
            // slots and holes.
            let size = if rng.below(3) == 0 {
                256 + rng.below(16 << 10)
            } else {
                (256 << 10) + rng.below(MIB + (256 << 10))
            };
            let usage = USAGES[rng.below(USAGES.len() as u64) as usize];
            let request = Request::new(requirements(size, 1 << rng.below(12)), usage, kind);
            let request = self.aim_at_pool(rng, request);
            let tag = first_tag + step;
            if let Some(allocation) = self.allocate_request(&request, tag) {
                own.push(Own {
                    tag,
                    allocation,
                    request,
                });
            }
        }
        for _ in 0..own.len() * 2 / 3 {
            let gone = own.swap_remove(rng.below(own.len() as u64) as usize);
            if rng.below(2) == 0 {
                self.retire(gone.tag, &gone.allocation);
                free(self.allocator, gone.allocation);
            } else {
                self.free_after_frame(gone.tag, gone.allocation);
            }
        }
        let limits = match rng.below(3) {
            0 => DefragmentationLimits::default().max_moves(1 + rng.below(16) as usize),
            _ => DefragmentationLimits::default(),
        }
        .compact_blocks(rng.below(3) == 0);
        let movables: Vec<Movable<'_>> = own
            .iter()
            .map(|o| Movable::new(&o.allocation, o.request.requirements, o.request.kind))
            .collect();
        let plan = self
            .allocator
            .plan_defragmentation(&movables, &limits)
            .unwrap();
        drop(movables);
        assert!(plan.moves.len() <= limits.max_moves, "{limits:?}");
        // The blocks moves to other blocks leave (compaction's stay).
        let sources: Vec<u64> = plan
            .moves
            .iter()
            .map(|m| range_of(&own[m.movable].allocation).0)
            .zip(plan.moves.iter().map(|m| range_of(&m.destination).0))
            .filter(|(from, to)| from != to)
            .map(|(from, _)| from)
            .collect();
        tally.plans += 1;
        tally.moves += plan.moves.len() as u64;
        tally.blocks += plan.blocks_released as u64;
        for planned in plan.moves {
            let source = &own[planned.movable];
            let (a, d) = (&source.allocation, &planned.destination);
            let requirements = &source.request.requirements;
            assert_eq!(d.memory_type(), a.memory_type(), "{d:?} for {a:?}");
            assert_eq!(d.size(), requirements.size, "{d:?} for {a:?}");
            assert_eq!(d.offset() % requirements.alignment, 0, "{d:?} for {a:?}");
            assert!(!d.is_dedicated(), "{d:?} for {a:?}");
            // A pool's allocation moves within its pool (the shadow's
            // ranges are by memory object; the pool's blocks are its own).
            assert_eq!(
                d.is_in_custom_pool(),
                a.is_in_custom_pool(),
                "{d:?} for {a:?}"
            );
            let (memory, range) = range_of(d);
            assert!(
                !sources.contains(&memory),
                "{d:?} for {a:?}: in a block the plan empties"
            );
            let (source_memory, (source_offset, _)) = range_of(a);
            if memory == source_memory {
                assert!(limits.compact_blocks, "{d:?} for {a:?}: in its block");
                assert!(range.1 <= source_offset, "{d:?} not below {a:?}");
            }
            self.hand_out("destination", d);
            if rng.below(16) == 0 {
                // Given up: its source stays, and so does its block.
                let end = self.shadow().live.remove(&(memory, range.0));
                assert_eq!(end, Some(range.1));
                tally.given_up += 1;
                if rng.below(2) == 0 {
                    free(self.allocator, planned.destination);
                } else {
                    // The destination waits for the frame, as a deferred
                    // free; the block stops being emptied.
                    let frame = self.allocator.current_frame();
                    self.shadow().held.push(Held {
                        what: format!("given-up destination {:?}", planned.destination),
                        memory,
                        range,
                        frame,
                    });
                    self.allocator.give_up_move(planned).unwrap();
                }
                continue;
            }
            let mut destination = planned.destination;
            // The copy: the whole of the mapped bytes, as on the host.
            if host_visible(self.allocator, a) {
                let bytes = self.allocator.mapped_slice(a).unwrap().to_vec();
                let target = self.allocator.mapped_slice_mut(&mut destination).unwrap();
                target.copy_from_slice(&bytes);
                let size = destination.size();
                self.allocator.flush(&destination, 0..size).unwrap();
            }
            let tag = source.tag;
            let old = std::mem::replace(&mut own[planned.movable].allocation, destination);
            if rng.below(2) == 0 {
                self.retire(tag, &old);
                free(self.allocator, old);
            } else {
                self.free_after_frame(tag, old);
            }
        }
        match rng.below(4) {
            0 => self.end_frame(),
            1 => self.signal_oldest(),
            2 => {
                self.allocator.collect().unwrap();
            }
            _ => {
                self.allocator.trim();
            }
        }
    }
}

/// One thread defragments its allocations, round after round, while three
/// others allocate and free in the same memory types (see the module docs).
/// Blocks of 4 MiB make many blocks, and so many to empty.
#[test]
fn defragmentation_while_other_threads_allocate_and_free() {
    let test = "defragmentation_while_other_threads_allocate_and_free";
    let seed = Rng::seed(test);
    let layout = FakeLayout::discrete();
    let object_limit = layout.max_memory_allocation_count;
    let config = Config {
        large_heap_block_size: 4 * MIB,
        ..Config::default()
    };
    let (allocator, device) = allocator_with(layout, config);
    let world = World::new(&allocator, &device, object_limit);
    let round_end = RoundEnd {
        meeting: Meeting::new(1 + OTHERS as usize),
        shown: Mutex::default(),
    };
    let (tally, survivors) = std::thread::scope(|scope| {
        let (world, round_end) = (&world, &round_end);
        let others: Vec<_> = (1..=OTHERS)
            .map(|thread| {
                scope.spawn(move || {
                    let _release = ReleaseOnPanic(&round_end.meeting);
                    let mut rng = Rng(seed ^ (thread << 40));
                    let mut live = Vec::new();
                    for round in 0..ROUNDS {
                        world.churn(&mut rng, &mut live, (thread << 48) | (round << 24));
                        let shown = live.iter().map(|(tag, a)| (*tag, a));
                        world.end_round(round_end, round, shown);
                    }
                    live
                })
            })
            .collect();
        let _release = ReleaseOnPanic(&round_end.meeting);
        let mut rng = Rng(seed);
        let mut own = Vec::new();
        let mut tally = Tally::default();
        for round in 0..ROUNDS {
            world.defragment_round(&mut rng, &mut own, round << 24, &mut tally);
            let shown = own.iter().map(|o| (o.tag, &o.allocation));
            world.end_round(round_end, round, shown);
        }
        let mut survivors: Vec<(u64, Allocation)> =
            own.into_iter().map(|o| (o.tag, o.allocation)).collect();
        for handle in others {
            survivors.extend(handle.join().unwrap());
        }
        (tally, survivors)
    });
    println!("{test}: {tally:?}");
    assert!(tally.moves > 0, "no plan moved anything: {tally:?}");
    world.finish_frames();
    world.free_all(survivors);
    finish(allocator, &device);
}
