#!/usr/bin/env bash
# A/B timing of two builds of the `peers` binary on a noisy machine.
#
#   bench/ab.sh OLD_PEERS NEW_PEERS [traces] [rounds] [allocators]
#
# Runs the two binaries in turn, `rounds` times each (default 4), pinned to
# one core, and prints per trace and allocator (default vk-suballoc; a
# comma-separated list as for `--allocators`) the fastest ns/alloc, ns/free
# and ns/op each build reached, in ns (cells printed in µs are converted). The 2-core VM this project is built on swings by ±30 %
# between slow and fast spells that last minutes; the median of one run does
# not filter that out, the minimum over interleaved rounds does. Copy each
# build's `target/release/peers` aside first, e.g.
#
#   git stash; cargo build --release -p vk-suballoc-bench; cp target/release/peers /tmp/old
#   git stash pop; cargo build --release -p vk-suballoc-bench; cp target/release/peers /tmp/new
#   scripts/with-vulkan.sh bench/ab.sh /tmp/old /tmp/new small-churn,mixed 6
#
# Callgrind instruction counts (`valgrind --tool=callgrind`) are the other
# reliable measure there.
set -euo pipefail

if [ "$#" -lt 2 ]; then
    sed -n '2,4p' "$0" >&2
    exit 2
fi
old=$1
new=$2
traces=${3:-streaming,frame-loop,small-churn,mixed}
rounds=${4:-4}
allocator=${5:-vk-suballoc}

results=$(mktemp)
trap 'rm -f "$results"' EXIT
for _ in $(seq "$rounds"); do
    for build in "$old" "$new"; do
        taskset -c 1 "$build" --traces "$traces" --allocators "$allocator" --no-scaling --runs 5 \
            | awk -v build="$build" '
                # A cell in ns, whether printed as "41.5", "25.5 us" or "1.2 ms".
                function ns(text,    f) {
                    split(text, f, " ")
                    return f[1] * (f[2] == "us" ? 1000 : f[2] == "ms" ? 1000000 : 1)
                }
                /^### vk-suballoc against/ { trace = ""; next }
                /^### / { trace = $2 }
                /^\| / && trace != "" && $0 !~ /^\| (allocator|---)/ {
                    split($0, cell, "|")
                    name = cell[2]
                    gsub(/^ +| +$/, "", name)
                    gsub(/ /, "_", name)
                    print trace, name, build, ns(cell[3]), ns(cell[4]), ns(cell[5])
                }' >> "$results"
    done
done
printf '%-12s %-28s %-24s %9s %9s %9s\n' trace allocator build ns/alloc ns/free ns/op
awk '
    {
        key = $1 " " $2 " " $3
        if (!(key in op) || $4 < alloc[key]) alloc[key] = $4
        if (!(key in op) || $5 < free[key]) free[key] = $5
        if (!(key in op) || $6 < op[key]) op[key] = $6
    }
    END {
        for (key in op) {
            split(key, k, " ")
            printf "%-12s %-28s %-24s %9.1f %9.1f %9.1f\n", k[1], k[2], k[3], alloc[key], free[key], op[key]
        }
    }' "$results" | sort
