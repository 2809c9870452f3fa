#!/usr/bin/env bash
# Compiles the Vulkan tests' GLSL shaders (tests/vulkan/shaders/*.comp) into
# the SPIR-V files beside them (*.spv), which the tests load with
# include_bytes!: the tests need no shader compiler, and the SPIR-V is
# committed. Run it after editing a shader; needs glslangValidator (apt
# glslang-tools) and, to validate, spirv-val (apt spirv-tools).
#
#   scripts/build-test-shaders.sh           compile every shader
#   scripts/build-test-shaders.sh --check   fail if a committed .spv differs
#                                           from its source's compilation
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
check=false
[ "${1:-}" = "--check" ] && check=true

for tool in glslangValidator spirv-val; do
    if ! command -v "$tool" > /dev/null; then
        echo "build-test-shaders: $tool not found (apt-get install glslang-tools spirv-tools)" >&2
        exit 1
    fi
done

scratch="$(mktemp -d)"
trap 'rm -rf "$scratch"' EXIT
status=0
for source in "$repo"/tests/vulkan/shaders/*.comp; do
    name="$(basename "$source" .comp)"
    compiled="$scratch/$name.spv"
    # SPIR-V 1.6 (Vulkan 1.3, the tests' devices): its LocalSizeId, where 1.5
    # declared the WorkgroupSize built-in, which best practices warn of.
    glslangValidator --quiet --target-env vulkan1.3 -o "$compiled" "$source"
    spirv-val --target-env vulkan1.3 "$compiled"
    target="${source%.comp}.spv"
    if $check; then
        if ! cmp -s "$compiled" "$target"; then
            echo "build-test-shaders: $target is not $source compiled (run scripts/build-test-shaders.sh)" >&2
            status=1
        fi
    else
        cp "$compiled" "$target"
        echo "build-test-shaders: $target"
    fi
done
exit "$status"
