#!/bin/bash
# The device check run on an NVIDIA H200 machine (bench/results/nvidia-h200*):
# the Vulkan test suite, the real-resources replay, the everyday example and
# the peer benchmark, on the device whose name contains $DEVICE (default NVIDIA).
#
# That machine has no Rust toolchain and no Vulkan loader or validation layer,
# so everything is built here and carried in one folder:
#
#   mkdir -p .devrun/bin .devrun/gl .devrun/extra
#   cargo test --release --test vulkan --no-run        # copy the binary to .devrun/bin/vulkan-tests
#   cargo build --release -p vk-fake-memory-layer
#   cargo build --release --example everyday
#   cargo build --release -p vk-suballoc-bench --bin peers
#   cp target/release/{peers,examples/everyday,libvk_fake_memory_layer.so} .devrun/bin/
#   (cd .devrun/gl && apt-get download libvulkan1 libegl1 libglvnd0 libopengl0 libgl1 libglx0 libgles2)
#   (cd .devrun/extra && apt-get download vulkan-validationlayers)
#   cp bench/device-check.sh .devrun/run.sh; git rev-parse HEAD > .devrun/commit.txt
#
# and on the machine: `.devrun/run.sh` with $OUT set. The loader libraries
# are unpacked into /, the validation layer into /tmp/vvl; the tests find the
# prebuilt fake-memory layer through VK_SUBALLOC_FAKE_LAYER_LIB and the GPU
# through VK_SUBALLOC_TEST_DEVICE. Every log is packed into $OUT/all.tgz after
# each step, so a run cut short still returns what it did. $STEPS names the
# steps to run (default all: vulkan-tests requirements real-resources
# everyday peers peers-vma-rule defragment scaling), for a lease too short
# for every one.
set -u
cd "$(dirname "$0")"
D=$PWD
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
R=/tmp/res; rm -rf $R; mkdir -p $R
DEVICE=${DEVICE:-NVIDIA}
STEPS=" ${STEPS:-all} "
# Announces step $1 and answers whether it is to run.
step() {
  case "$STEPS" in *" all "*|*" $1 "*) ;; *) echo "=== $1 skipped"; return 1;; esac
  echo "=== $* ($(date +%T))"
}
pack() { tar czf "$OUT/all.tgz" -C /tmp res; }
{
for f in gl/*.deb; do dpkg -x "$f" /; done; ldconfig
rm -rf /tmp/vvl && mkdir -p /tmp/vvl && dpkg -x extra/vulkan-validationlayers_*.deb /tmp/vvl
export VK_ADD_LAYER_PATH=/tmp/vvl/usr/share/vulkan/explicit_layer.d
export LD_LIBRARY_PATH=/tmp/vvl/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
icd=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
if [ "$DEVICE" = NVIDIA ] && [ -f $icd ]; then export VK_DRIVER_FILES=$icd VK_ICD_FILENAMES=$icd __EGL_VENDOR_LIBRARY_FILENAMES=/usr/local/nvidia/share/glvnd/egl_vendor.d/10_nvidia.json; fi
cat commit.txt 2>/dev/null; lscpu | grep -Ei 'model name|cache'; nvidia-smi -L 2>&1
} > $R/info.txt 2>&1
cat $R/info.txt

if step vulkan-tests; then
# Four test threads: at eight on two cores, Debian 12's Vulkan loader
# (1.3.239) crashed the process (SIGSEGV; a use-after-free of its device
# list when devices are made and destroyed while another thread names
# memory, KhronosGroup/Vulkan-Loader#2018) in about one run in five. A run
# that ends in a signal is run once more; both logs stay.
vulkan_tests() {
  VK_SUBALLOC_TEST_DEVICE="$DEVICE" VK_SUBALLOC_FAKE_LAYER_LIB="$D/bin/libvk_fake_memory_layer.so" \
    timeout 180 bin/vulkan-tests --test-threads ${TEST_THREADS:-4} > "$1" 2>&1; rc=$?; echo "rc=$rc" >> "$1"
}
vulkan_tests $R/vulkan-tests.log
if [ $rc -gt 128 ] && [ $rc -ne 137 ]; then
  mv $R/vulkan-tests.log $R/vulkan-tests-first.log; tail -3 $R/vulkan-tests-first.log
  vulkan_tests $R/vulkan-tests.log
fi
grep -E 'FAILED|panicked|^test result|rc=' $R/vulkan-tests.log | head -30; pack
fi

if step requirements; then
timeout 30 bin/peers --device "$DEVICE" --print-requirements --traces "" --no-scaling > $R/requirements.log 2>&1
cat $R/requirements.log; pack
fi

if step real-resources; then
timeout 60 bin/peers --device "$DEVICE" --real-resources --ops 20000 > $R/real-resources.log 2>&1; echo "rc=$?" >> $R/real-resources.log
tail -2 $R/real-resources.log; pack
fi

if step everyday; then
timeout 30 bin/everyday > $R/everyday.log 2>&1; echo "rc=$?" >> $R/everyday.log
tail -2 $R/everyday.log; pack
fi

if step peers; then
timeout 200 bin/peers --device "$DEVICE" --no-scaling --json $R/peers.json --markdown $R/peers.md ${PEERS_ARGS:-} > $R/peers.log 2>&1; echo "rc=$?" >> $R/peers.log
cat $R/peers.md; pack
fi

if step peers-vma-rule; then
# vk-suballoc with VMA's empty-block rule (one kept), beside the default's.
timeout 60 bin/peers --device "$DEVICE" --allocators vk-suballoc,vk-suballoc-locked --no-scaling --empty-block-reserve 0 \
  --json $R/peers-vma-rule.json --markdown $R/peers-vma-rule.md > $R/peers-vma-rule.log 2>&1; echo "rc=$?" >> $R/peers-vma-rule.log
grep -E '^trace|^  vk-suballoc  ' $R/peers-vma-rule.log; pack
fi

if step defragment; then
timeout 120 bin/peers --device "$DEVICE" --defragment --json $R/defragment.json --markdown $R/defragment.md > $R/defragment.log 2>&1; echo "rc=$?" >> $R/defragment.log
tail -3 $R/defragment.log; pack
fi

if step scaling; then
timeout 100 bin/peers --device "$DEVICE" --traces "" --allocators vk-suballoc,gpu-alloc,core-ours,core-offset-allocator \
  --json $R/scaling.json --markdown $R/scaling.md > $R/scaling.log 2>&1; echo "rc=$?" >> $R/scaling.log
tail -12 $R/scaling.md; pack
timeout 40 bin/peers --device "$DEVICE" --traces "" --allocators vma,gpu-allocator --scaling 1000,10000 \
  --json $R/scaling-slow.json --markdown $R/scaling-slow.md > $R/scaling-slow.log 2>&1; echo "rc=$?" >> $R/scaling-slow.log
tail -8 $R/scaling-slow.md; pack
fi

cp $R/peers.md $R/vulkan-tests.log $OUT/ 2>/dev/null
echo "=== done ($(date +%T))"
