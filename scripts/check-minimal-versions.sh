#!/usr/bin/env bash
# Checks that the library builds with the oldest version of each direct
# dependency that Cargo.toml allows (`cargo -Z direct-minimal-versions`,
# nightly): a user whose lockfile holds an older `log` than ours gets the
# versions our requirements name, not the newest.
#
# The check runs on a copy of the package alone, with its non-optional
# dependencies: in the workspace, the window example's winit (an optional
# dependency) and the test layer need newer versions of the same crates,
# so Cargo could not pick the oldest ones there. A user without the
# `window-example` feature resolves no winit either.
#
# Usage: scripts/check-minimal-versions.sh (from anywhere; needs nightly).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# The [dependencies] table without its optional entries, and the
# workspace's ash line in place of `ash.workspace = true`.
deps=$(sed -n '/^\[dependencies\]$/,/^\[/{/^\[/d;/optional = true/d;/^$/d;p}' "$root/Cargo.toml")
ash=$(sed -n 's/^ash = /ash = /p' "$root/Cargo.toml")
deps=$(printf '%s\n' "$deps" | sed "s|^ash.workspace = true$|$ash|")
if ! grep -q '^ash = ' <<< "$deps" || ! grep -q '^log = ' <<< "$deps"; then
    echo "check-minimal-versions: Cargo.toml's [dependencies] are not what this script reads" >&2
    exit 1
fi

cp -r "$root/src" "$root/build.rs" "$root/README.md" "$work/"
cat > "$work/Cargo.toml" <<EOF
[package]
name = "vk-suballoc"
version = "0.0.0"
edition = "2021"
build = "build.rs"

[lib]
name = "vk_suballoc"

[features]
fake-device = []

[dependencies]
$deps

[lints.rust]
unexpected_cfgs = { level = "warn", check-cfg = ['cfg(fuzzing)'] }
EOF

cd "$work"
cargo +nightly update -Z direct-minimal-versions
grep -A1 -E '^name = "(ash|gpu-alloc-types|log|thiserror)"$' Cargo.lock | grep -v '^--$' | paste - - || true
cargo +nightly check --lib --features fake-device
