#!/usr/bin/env bash
# Checks the crate as published (`cargo package`): its own `cargo test`
# must build and pass outside this repository, as a distribution's
# packaging runs it. Cargo drops the dev-dependency on the crate itself, so
# there `fake-device` is off unless asked for: the fake-device suite is
# skipped (`required-features`), and each doc example that uses the fake
# device is compiled out by a hidden `#[cfg(feature = "fake-device")]`
# line. The Vulkan suite and the scripts are not in the package (Cargo.toml's
# `exclude`).
#
# Usage: scripts/check-package.sh         the doc tests without features
#                                         (what `.ci/run` runs: about a minute)
#        scripts/check-package.sh --full  every test, without features and
#                                         with `fake-device`
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
target=${CARGO_TARGET_DIR:-$root/target}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

cd "$root"
cargo package --allow-dirty --no-verify --target-dir "$target"
version=$(sed -n 's/^version = "\(.*\)"$/\1/p' Cargo.toml | head -1)
tar xzf "$target/package/vk-suballoc-$version.crate" -C "$work"
cd "$work/vk-suballoc-$version"
# The registry dependencies are built once, in the same target directory.
export CARGO_TARGET_DIR="$target"
if [ "${1:-}" = "--full" ]; then
    cargo test
    cargo test --features fake-device
else
    cargo test --doc
fi
