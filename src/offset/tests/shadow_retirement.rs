//! The shadow model of the property tests (`tests/offset_model/shadow.rs`)
//! through retired slots, which those tests cannot reach: a slot retires
//! when its generation's last value, `u32::MAX`, is freed, after 2^31
//! reuses. Here, with the internals at hand, a random run fast-forwards the
//! generations of unused slots (the allocator's and the model's alike) to
//! within a few reuses of the last one, so that slots retire among live
//! ones, requests meet `OutOfSlots` with fewer live allocations than slots,
//! and `reserve_slots` adds room again, every step checked by the model:
//! its placements, errors, counters, reports and which slots may be
//! handed out. Seeds are fixed in the test (the xorshift `next`).

use super::next;
use super::shadow::{Op, Shadow};

/// Sets unused `slot`'s generation to `generation` in the allocator and
/// tells the model.
fn fast_forward<const M: u32>(shadow: &mut Shadow<M>, slot: u32, generation: u32) {
    shadow.heap.nodes[slot as usize].set_generation(generation);
    shadow.fast_forward(slot, generation);
}

fn retiring_run<const M: u32>(seed: u64) -> (usize, u64) {
    let mut state = seed;
    let capacity = 1 << 12;
    let mut shadow = Shadow::<M>::new(capacity, 6);
    // Miri interprets every step (and the model's checks): fewer there.
    let steps = if cfg!(miri) { 300 } else { 3000 };
    for _ in 0..steps {
        let r = next(&mut state);
        let pick = next(&mut state) as usize;
        let size = 1 + next(&mut state) % 700;
        let align = 1 << (next(&mut state) % 6);
        let op = match r % 16 {
            0..=5 => Op::Allocate { size, align },
            6 => Op::AllocateMinMemory { size, align },
            7 => Op::AllocateMinOffset { size, align },
            8 => Op::AllocateBelow { size, align, pick },
            9 => Op::AllocateInGap { size, align, pick },
            10..=12 => Op::Free { pick },
            13 => Op::FreeStale { pick },
            // Now and then a slot more, once most are retired.
            14 if shadow.retired_slots() * 2 >= shadow.heap.slot_count() as usize => {
                Op::ReserveSlots { additional: 1 }
            }
            14 => Op::Probe { at: pick as u64 },
            _ => {
                // An unused slot within 0 to 3 reuses of its last.
                let unused = shadow.unused_slots();
                if !unused.is_empty() {
                    let (slot, generation) = unused[pick % unused.len()];
                    let reuses_left = (next(&mut state) % 4) as u32;
                    let target = u32::MAX - 1 - 2 * reuses_left;
                    // Forwards only: an earlier generation would make
                    // freed ids live again.
                    if target > generation {
                        fast_forward(&mut shadow, slot, target);
                    }
                }
                continue;
            }
        };
        shadow.apply(op);
    }
    let seen = (shadow.retired_slots(), shadow.refused_with_retired);
    shadow.finish();
    seen
}

/// Random runs of every width through retiring slots: each retires a few
/// dozen slots, and requests are refused for want of a slot while a
/// retired one is among them, the case where counting live allocations
/// alone says a slot is free.
#[test]
fn the_shadow_model_follows_slots_through_retirement() {
    let seeds: &[u64] = if cfg!(miri) {
        &[1]
    } else {
        &[1, 0x9e37_79b9_7f4a_7c15, 0xdead_beef_cafe_f00d]
    };
    // A few dozen per run; a few under Miri's shorter runs.
    let least: usize = if cfg!(miri) { 2 } else { 10 };
    for &seed in seeds {
        // Under Miri the classic width alone: each run there takes about
        // 35 s of `.ci/run`'s Miri step (the core has no unsafe code; the
        // other widths run natively).
        let runs = if cfg!(miri) {
            vec![retiring_run::<3>(seed)]
        } else {
            vec![
                retiring_run::<2>(seed),
                retiring_run::<3>(seed),
                retiring_run::<4>(seed),
                retiring_run::<5>(seed),
                retiring_run::<6>(seed),
            ]
        };
        for (retired, refused) in runs {
            println!("seed {seed:#x}: {retired} slots retired, {refused} refusals with one");
            assert!(
                retired >= least && refused >= least as u64,
                "seed {seed:#x}: {retired} slots retired, {refused} OutOfSlots with a retired slot"
            );
        }
    }
}
