#!/usr/bin/env python3
"""Reserved/live and vkAllocateMemory calls of the four Vulkan allocators
over ten seeds: the table in bench/results/lavapipe-seeds.md.

    cargo build --release -p vk-suballoc-bench --bin peers
    scripts/with-vulkan.sh bench/seeds.py target/release/peers > bench/results/lavapipe-seeds.md

Runs `peers --seed S --no-scaling --runs RUNS` for S = 1..10 (RUNS = 3 by
default, a second argument) and prints, per trace and seed, each
allocator's median peak reserved / peak live and its median call count.
Memory figures do not depend on timing, but gpu-allocator's do vary from run
to run (its best fit takes equal fits in a hash set's random order), hence
the medians. About ten minutes on the 2-core VM.
"""

import json
import subprocess
import sys
import tempfile

ALLOCATORS = ["vk-suballoc", "vma", "gpu-allocator", "gpu-alloc"]
TRACES = ["streaming", "frame-loop", "small-churn", "mixed"]
SEEDS = range(1, 11)


def run(peers, seed, runs):
    with tempfile.NamedTemporaryFile(suffix=".json") as out:
        subprocess.run(
            [peers, "--seed", str(seed), "--no-scaling", "--runs", str(runs),
             "--allocators", ",".join(ALLOCATORS), "--json", out.name],
            check=True, stdout=subprocess.DEVNULL)
        results = json.load(open(out.name))["results"]
    return {(r["trace"], r["allocator"]): r for r in results}


def main():
    peers = sys.argv[1]
    runs = int(sys.argv[2]) if len(sys.argv) > 2 else 3
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"],
                            capture_output=True, text=True).stdout.strip()
    by_seed = {seed: run(peers, seed, runs) for seed in SEEDS}
    print("# Reserved/live and vkAllocateMemory calls over ten seeds (lavapipe)\n")
    print(f"`bench/seeds.py`: `peers --seed S --no-scaling --runs {runs}` for S = 1..10, "
          f"200 000 operations per trace, commit {commit}. Each cell: peak reserved / "
          "peak live, then vkAllocateMemory calls, each the median of the runs "
          "(gpu-allocator's vary from run to run; the others' do not). Times are left "
          "out. vk-suballoc's row is `allocate_mut`; the locked path places "
          "identically.\n")
    for trace in TRACES:
        print(f"\n## {trace}\n")
        print("| seed | " + " | ".join(ALLOCATORS) + " | ours vs the lowest peer |")
        print("|---:|" + "---:|" * len(ALLOCATORS) + "---|")
        verdicts = {"lower": 0, "tied": 0, "higher": 0}
        against_vma = {"lower": 0, "tied": 0, "higher": 0}
        for seed in SEEDS:
            rows = {a: by_seed[seed][(trace, a)] for a in ALLOCATORS}
            ratio = {a: round(rows[a]["reserved_per_live"], 3) for a in ALLOCATORS}
            cells = [f"{ratio[a]:.3f}, {rows[a]['vk_allocate_memory_calls']}" for a in ALLOCATORS]
            lowest = min(ratio[a] for a in ALLOCATORS[1:])

            def verdict(other):
                ours = ratio["vk-suballoc"]
                return "lower" if ours < other else "tied" if ours == other else "higher"

            v = verdict(lowest)
            verdicts[v] += 1
            against_vma[verdict(ratio["vma"])] += 1
            print(f"| {seed} | " + " | ".join(cells) + f" | {v} |")
        print(f"\nvk-suballoc lower than every peer on {verdicts['lower']} seeds, tied with "
              f"the lowest on {verdicts['tied']}, higher on {verdicts['higher']}.\n"
              f"Against VMA: lower {against_vma['lower']}, tied {against_vma['tied']}, "
              f"higher {against_vma['higher']}.\n")


if __name__ == "__main__":
    main()
