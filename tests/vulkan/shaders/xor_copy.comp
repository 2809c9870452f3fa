#version 460
// vk-suballoc Vulkan tests: copies `count` 32-bit words from one device
// address to another (both in push constants), each XORed with `salt`.
// One invocation per word. Compiled into xor_copy.spv by
// scripts/build-test-shaders.sh (glslang), which the tests load.
#extension GL_EXT_buffer_reference : require

layout(local_size_x = 64) in;

layout(buffer_reference, std430, buffer_reference_align = 4) readonly buffer Source {
    uint words[];
};
layout(buffer_reference, std430, buffer_reference_align = 4) writeonly buffer Target {
    uint words[];
};

layout(push_constant, std430) uniform Push {
    Source source;
    Target target;
    uint count;
    uint salt;
} push;

void main() {
    uint i = gl_GlobalInvocationID.x;
    if (i < push.count) {
        push.target.words[i] = push.source.words[i] ^ push.salt;
    }
}
