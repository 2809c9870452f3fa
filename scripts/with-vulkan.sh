#!/usr/bin/env bash
# Runs a command with the Vulkan stack the tests need:
#
#   scripts/with-vulkan.sh <command...>      e.g. scripts/with-vulkan.sh cargo test
#
# 1. Checks for the Vulkan loader (libvulkan.so.1), lavapipe (Mesa's CPU
#    driver) and the Khronos validation layer. When one is missing it installs
#    them with apt-get if run as root, else prints what to install and fails.
# 2. Builds the fake-memory test layer (cargo build -p vk-fake-memory-layer),
#    writes its manifest into <target>/debug/fake-memory-layer/ and adds that
#    folder to VK_ADD_LAYER_PATH, so the loader finds it next to the system's
#    layers (VK_LAYER_PATH would hide those).
# 3. Execs the command.
set -euo pipefail

if [ "$#" -eq 0 ]; then
    echo "usage: scripts/with-vulkan.sh <command...>" >&2
    exit 2
fi

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
packages=(mesa-vulkan-drivers vulkan-validationlayers libvulkan1)

# The entries of the colon-separated list in environment variable $1, one
# per line (none when it is unset or empty).
list_entries() {
    local entries="${!1:-}" entry
    IFS=: read -r -a entries <<< "$entries"
    for entry in "${entries[@]}"; do
        [ -n "$entry" ] && printf '%s\n' "$entry"
    done
}

# Folders the loader searches for driver and layer manifests: the XDG
# config and data folders (the user's first), /etc and the data dirs.
vulkan_data_dirs() {
    printf '%s\n' "${XDG_CONFIG_HOME:-${HOME:-/nonexistent}/.config}/vulkan"
    XDG_CONFIG_DIRS="${XDG_CONFIG_DIRS:-/etc/xdg}" list_entries XDG_CONFIG_DIRS \
        | sed 's|$|/vulkan|'
    printf '%s\n' /etc/vulkan
    printf '%s\n' "${XDG_DATA_HOME:-${HOME:-/nonexistent}/.local/share}/vulkan"
    XDG_DATA_DIRS="${XDG_DATA_DIRS:-/usr/local/share:/usr/share}" list_entries XDG_DATA_DIRS \
        | sed 's|$|/vulkan|'
}

# Succeeds when a file matching $2 exists in subfolder $1 of a Vulkan data
# dir, or, for each further argument naming an environment variable the
# loader reads (a Vulkan SDK's setup-env.sh sets them), in a folder that
# variable lists or as a file it lists.
has_manifest() {
    local subdir="$1" pattern="$2" dir variable entry
    shift 2
    while read -r dir; do
        if compgen -G "$dir/$subdir/$pattern" > /dev/null; then
            return 0
        fi
    done < <(vulkan_data_dirs)
    for variable in "$@"; do
        while read -r entry; do
            if [ -d "$entry" ]; then
                compgen -G "$entry/$pattern" > /dev/null && return 0
            elif [ -f "$entry" ]; then
                # shellcheck disable=SC2254 # $pattern is a glob on purpose.
                case "${entry##*/}" in $pattern) return 0 ;; esac
            fi
        done < <(list_entries "$variable")
    done
    return 1
}

# Succeeds when the ldconfig cache listing of command $1 names the loader.
# grep reads the whole listing (no -q): under pipefail, a grep that quits at
# the first match can leave ldconfig dying of SIGPIPE (141), which failed the
# check now and then with the loader installed.
lists_loader() {
    "$1" -p 2> /dev/null | grep 'libvulkan\.so\.1' > /dev/null
}

has_loader() {
    if command -v ldconfig > /dev/null && lists_loader ldconfig; then
        return 0
    fi
    if [ -x /sbin/ldconfig ] && lists_loader /sbin/ldconfig; then
        return 0
    fi
    local dir
    while read -r dir; do
        [ -e "$dir/libvulkan.so.1" ] && return 0
    done < <(list_entries LD_LIBRARY_PATH)
    compgen -G '/usr/lib/*/libvulkan.so.1' > /dev/null \
        || compgen -G '/usr/lib*/libvulkan.so.1' > /dev/null \
        || compgen -G '/usr/local/lib*/libvulkan.so.1' > /dev/null
}

# What is missing, one "  - " line each (none when nothing is).
missing_parts() {
    has_loader || echo "  - the Vulkan loader (libvulkan.so.1, package libvulkan1)"
    has_manifest icd.d 'lvp_icd*.json' VK_DRIVER_FILES VK_ICD_FILENAMES VK_ADD_DRIVER_FILES \
        || echo "  - lavapipe (package mesa-vulkan-drivers)"
    has_manifest explicit_layer.d 'VkLayer_khronos_validation.json' VK_LAYER_PATH VK_ADD_LAYER_PATH \
        || echo "  - the Khronos validation layer (package vulkan-validationlayers)"
}

missing="$(missing_parts)"
if [ -n "$missing" ]; then
    echo "with-vulkan.sh: missing:" >&2
    printf '%s\n' "$missing" >&2
    if [ "$(id -u)" -eq 0 ] && command -v apt-get > /dev/null; then
        echo "with-vulkan.sh: installing ${packages[*]}" >&2
        export DEBIAN_FRONTEND=noninteractive
        apt-get update && apt-get install -y "${packages[@]}"
        missing="$(missing_parts)"
        if [ -n "$missing" ]; then
            echo "with-vulkan.sh: still missing after installing:" >&2
            printf '%s\n' "$missing" >&2
            exit 1
        fi
    else
        echo "with-vulkan.sh: install them, e.g. (Debian/Ubuntu):" >&2
        echo "  sudo apt-get update && sudo apt-get install -y ${packages[*]}" >&2
        exit 1
    fi
fi

# Build the layer and make it findable.
(cd "$repo" && cargo build --quiet -p vk-fake-memory-layer)
target_dir="$(cd "$repo" && cargo metadata --no-deps --format-version 1 \
    | sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')"
target_dir="${target_dir:-$repo/target}"
library="$target_dir/debug/libvk_fake_memory_layer.so"
if [ -f "$library" ] && command -v realpath > /dev/null; then
    library="$(realpath "$library")"
fi
manifest_dir="$target_dir/debug/fake-memory-layer"
manifest="$manifest_dir/VkLayer_vk_suballoc_fake_memory.json"
if [ ! -f "$library" ]; then
    echo "with-vulkan.sh: the layer build did not produce $library" >&2
    exit 1
fi

# The same manifest the test harness writes: the template with the absolute
# library path (JSON-escaped; the quoted replacement keeps '&' literal).
json_path="${library//\\/\\\\}"
json_path="${json_path//\"/\\\"}"
template="$(< "$repo/layers/fake-memory/VkLayer_vk_suballoc_fake_memory.json.in")"
content="${template//@LIBRARY_PATH@/"$json_path"}"
mkdir -p "$manifest_dir"
if [ ! -f "$manifest" ] || [ "$(< "$manifest")" != "$content" ]; then
    temporary="$(mktemp "$manifest_dir/.manifest.XXXXXX")"
    printf '%s\n' "$content" > "$temporary"
    mv -f "$temporary" "$manifest"
fi

case ":${VK_ADD_LAYER_PATH:-}:" in
    *":$manifest_dir:"*) ;;
    *) export VK_ADD_LAYER_PATH="$manifest_dir${VK_ADD_LAYER_PATH:+:$VK_ADD_LAYER_PATH}" ;;
esac

exec "$@"
