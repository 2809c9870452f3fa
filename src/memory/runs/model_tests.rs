//! The runs' randomised model test: seeded random takes (as the
//! allocation path and defragmentation make them), frees, stale and
//! double frees, retirements and reopenings of blocks, checked after each
//! step against the live handles the test keeps and against the runs'
//! own lists of runs with room. It is apart from `runs.rs`, and from the
//! unit tests in `runs/tests.rs`, because it checks the runs' invariants
//! as a whole rather than one rule each; its seed comes from
//! `VK_SUBALLOC_SEED` (the `seeded_rng` module `runs.rs` declares).

use super::tests::RANGE;
use super::*;

use super::seeded_rng::Rng;

/// The lists of runs with room name exactly the runs with a free slot
/// that are not retired, each at its `listed_at`; no run is empty.
fn check(runs: &Runs) {
    for (class, list) in runs.with_room.iter().enumerate() {
        for (at, &key) in list.iter().enumerate() {
            let run = runs.runs.get(key).expect("listed run exists");
            assert_eq!(usize::from(run.class), class);
            assert_eq!(run.listed_at as usize, at);
        }
    }
    for (key, run) in runs.runs.iter() {
        assert_ne!(run.free, Run::all_free(run.slots), "an empty run stays");
        assert_eq!(run.free & !Run::all_free(run.slots), 0);
        let listed = run.listed_at != Run::UNLISTED;
        assert_eq!(listed, run.free != 0 && !run.retired, "{key:?}: {run:?}");
    }
}

/// Random takes (`take` and, as defragmentation does, `take_in`),
/// frees, stale and double frees, retirements and reopenings: no slot
/// is handed out twice, none from a retired block's run, none is
/// refused while a run outside the retired blocks has room (a reopened
/// block's runs give slots again), every stale handle is refused, the
/// lists stay right and the live slots add up.
#[test]
fn random_takes_frees_retirements_keep_the_lists_and_handles_right() {
    let mut rng = Rng::from_env("runs model");
    let mut runs = Runs::default();
    let blocks: Vec<SlabKey> = (0..3)
        .map(|index| SlabKey {
            index,
            generation: 0,
        })
        .collect();
    // Live handles, and freed ones.
    let mut live: Vec<TakenSlot> = Vec::new();
    let mut dead: Vec<TakenSlot> = Vec::new();
    let mut retired: Vec<SlabKey> = Vec::new();
    let classes = [0usize, 5, 20, CLASSES - 1];
    for _ in 0..20_000 {
        let class = classes[rng.below(classes.len() as u64) as usize];
        match rng.below(10) {
            0..=3 => {
                let taken = if rng.below(2) == 0 {
                    runs.take(class)
                } else {
                    let open = |key: SlabKey| {
                        if retired.contains(&key) {
                            u32::MAX
                        } else {
                            key.index
                        }
                    };
                    runs.best_with_room(class, open)
                        .and_then(|(_, key)| runs.take_in(key))
                };
                let taken = match taken {
                    Some(taken) => taken,
                    None => {
                        // No slot: no run of the class outside the
                        // retired blocks has a free one, or a new run
                        // would take block space while slots sit unused.
                        let usable = runs.iter().find(|(_, run)| {
                            usize::from(run.class) == class
                                && run.free != 0
                                && !retired.contains(&run.block)
                        });
                        assert!(usable.is_none(), "no slot taken, yet {usable:?} has room");
                        let block = blocks[rng.below(3) as usize];
                        if retired.contains(&block) {
                            continue;
                        }
                        runs.insert(class, block, RANGE, 0, vk::DeviceMemory::null(), None);
                        runs.take(class).unwrap()
                    }
                };
                let run = runs.live(taken.run, taken.slot, taken.generation).unwrap();
                assert!(
                    !retired.contains(&run.block),
                    "a retired block's run gave a slot"
                );
                assert_eq!(usize::from(run.class), class);
                for other in &live {
                    assert!(
                        (other.run, other.slot) != (taken.run, taken.slot),
                        "slot handed out twice"
                    );
                }
                live.push(taken);
            }
            4..=6 if !live.is_empty() => {
                let i = rng.below(live.len() as u64) as usize;
                let slot = live.swap_remove(i);
                assert!(runs.free(slot.run, slot.slot, slot.generation).is_ok());
                dead.push(slot);
            }
            7 if !dead.is_empty() => {
                let slot = dead[rng.below(dead.len() as u64) as usize];
                assert!(runs.free(slot.run, slot.slot, slot.generation).is_err());
                assert!(runs.live(slot.run, slot.slot, slot.generation).is_none());
            }
            8 => {
                let block = blocks[rng.below(3) as usize];
                if !retired.contains(&block) {
                    runs.retire_in_block(block);
                    retired.push(block);
                }
            }
            _ => {
                if let Some(block) = retired.pop() {
                    runs.reopen_in_block(block);
                }
            }
        }
        check(&runs);
        let slots: u64 = runs
            .iter()
            .map(|(_, run)| u64::from(run.live_slots()))
            .sum();
        assert_eq!(slots, live.len() as u64);
    }
}
