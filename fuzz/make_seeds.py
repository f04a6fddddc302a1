#!/usr/bin/env python3
"""fuzz/make_seeds.py -- writes the seed corpora under fuzz/corpus/<target>/.

Each seed is a short, hand-built input in the format its target decodes (see the comment at the
top of each fuzz/fuzz_*.c). Run from anywhere: python3 fuzz/make_seeds.py"""
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))


def u16(v):
    return struct.pack("<H", v & 0xFFFF)


def u32(v):
    return struct.pack("<I", v & 0xFFFFFFFF)


def write(target, name, data):
    d = os.path.join(HERE, "corpus", target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


# ---- fuzz_blocktree: window byte, then ops (op % 8) -------------------------------------------
def bt_insert(slot, off, length):
    return bytes([0, slot]) + u16(off) + bytes([length - 1])


bt_find = lambda off: bytes([3]) + u16(off)
bt_edges = lambda i: bytes([4, i])
bt_remove = lambda i: bytes([2, i])
bt_iter = bytes([5])
bt_reinsert = lambda i: bytes([7, i])

write("fuzz_blocktree", "insert_find", bytes([0]) + b"".join(bt_insert(i, i * 40, 30) for i in range(12))
      + bt_find(35) + bt_find(41) + bt_edges(3) + bt_iter)
write("fuzz_blocktree", "overlap_remove", bytes([4]) + bt_insert(0, 100, 50) + bt_insert(1, 120, 10)
      + bt_insert(2, 150, 1) + bt_insert(3, 10, 90) + bt_remove(1) + bt_reinsert(0) + bt_iter + bt_edges(0))
write("fuzz_blocktree", "top_of_space", bytes([2]) + b"".join(bt_insert(i, 0x1000 + i * 0x800, 255) for i in range(8))
      + bt_insert(9, 0xFFFF, 255) + bt_edges(7) + bytes([6, 2, 12]) + u16(77) + bt_remove(0) + bt_iter)
write("fuzz_blocktree", "at_zero", bytes([1]) + bt_insert(0, 0, 1) + bt_insert(1, 1, 1) + bt_find(0) + bt_edges(0)
      + b"".join(bt_insert(2 + i, 1000 - 7 * i, 3) for i in range(20)) + bt_remove(5) + bt_remove(0) + bt_iter)


# ---- fuzz_arena: shape, granule shift, granules, slack, ops (op % 6) --------------------------
def ar_head(shape, gshift, ngran, slack=0, extra=b""):
    return bytes([shape, gshift]) + u16(ngran - 1) + u16(slack) + extra


ar_alloc = lambda granules, align_byte=1: bytes([0, granules, align_byte])
ar_free = lambda i: bytes([2, i])
ar_bogus = lambda off, n: bytes([4]) + u16(off) + bytes([n])
ar_double = lambda i: bytes([5, i])

write("fuzz_arena", "alloc_free", ar_head(1, 12, 64) + b"".join(ar_alloc(k) for k in (1, 3, 5, 2, 8))
      + ar_free(1) + ar_free(0) + ar_alloc(4) + ar_double(2) + ar_bogus(0, 1))
write("fuzz_arena", "aligned", ar_head(3, 12, 200, 100, u16(0x1234)) + ar_alloc(3, 13) + ar_alloc(1, 17)
      + ar_alloc(7, 14) + ar_alloc(2, 201) + ar_free(0) + ar_alloc(9, 18) + ar_free(1) + ar_free(0))
write("fuzz_arena", "base_zero", ar_head(0, 4, 100) + ar_alloc(10) + ar_alloc(20) + ar_alloc(30) + ar_free(1)
      + ar_alloc(25) + ar_bogus(15, 10) + bytes([0, 245, 1]))
write("fuzz_arena", "top", ar_head(0x42, 16, 32, 5, u16(77)) + ar_alloc(4) + ar_alloc(28) + ar_alloc(1) + ar_free(0)
      + bytes([0, 250, 1]))

# ---- fuzz_config: set mask, mode, [config], '\n'-separated values -----------------------------
order = ["emu", "rolling", "4K", "0", "2", "1G", "4", "warn"]
write("fuzz_config", "all_valid", bytes([0xFF, 0]) + "\n".join(order).encode())
write("fuzz_config", "bad_block", bytes([0x04, 0]) + b"\n\n3000\n")
write("fuzz_config", "suffixes", bytes([0x7C, 1]) + b"\n\n64KiB\n16\n4096\n256mb\n1K\n")
write("fuzz_config", "overflow", bytes([0x24, 0]) + b"\n\n99999999999999999999\n\n\n17179869184T\n")
write("fuzz_config", "struct", bytes([0xFF, 0x80, 2, 0xFF, 9, 100, 0, 0, 0, 0])
      + "\n".join(["host", "lazy", "2M", "x", "5000", "0", "300", "loud"]).encode())
# the last protocol in the struct (hmm, 6) is valid, the next (7) is not; hmm by name too
write("fuzz_config", "struct_last_protocol", bytes([0x00, 0x80, 4, 6, 3, 0, 0, 0, 0, 0]))
write("fuzz_config", "struct_past_protocol", bytes([0x00, 0x80, 4, 7, 3, 0, 0, 0, 0, 0]))
write("fuzz_config", "hmm_by_name", bytes([0x02, 0]) + b"\nhmm\n")


# ---- fuzz_protocol: op bytes (op % 13), see fuzz_protocol.c -------------------------------------
def alloc(kind_byte, *params, safe=False, zero_check=True):
    return bytes([0 | (0x80 if safe else 0) | (0x40 if zero_check else 0), kind_byte]) + b"".join(params)


def rng_any(off, length):
    return bytes([0]) + u16(off) + u16(length - 1)


RNG_ALL = bytes([1])
rng_blocks = lambda b, k: bytes([2, b, k - 1])
rng_boundary = lambda b, back, length: bytes([3, b, back, length - 1])

write_memcpy = lambda pick, rng, src: bytes([3, pick]) + rng + bytes([0]) + u16(src)
write_bytes = lambda pick, rng, a, b: bytes([3, pick]) + rng + bytes([1, a, b])
write_rmw = lambda pick, rng, d: bytes([4, pick]) + rng + bytes([2, d])
read_cmp = lambda pick, rng: bytes([5, pick]) + rng + bytes([0])
read_stride = lambda pick, rng, stride: bytes([6, pick]) + rng + bytes([1]) + u16(stride)
memset_ = lambda pick, rng, v: bytes([7, pick]) + rng + bytes([v])
SYNC = bytes([11])
VERIFY = bytes([11 | 0x80])


def kernel(seed, objs, tpb=2, extra=0):
    """objs: list of (slot, role) with role 0 IN, 1 OUT, 2 INOUT (whole objects)."""
    out = bytes([9]) + u32(seed) + bytes([0, len(objs)])
    for slot, role in objs:
        out += bytes([slot, role])
    return out + bytes([tpb, extra])


memcpy_oo = lambda d, s, rng, soff, doff: bytes([8, 0, d, s]) + rng + u16(soff) + u16(doff)
memcpy_po = lambda d, rng, src: bytes([8, 1, d]) + rng + u16(src)
memcpy_op = lambda s, rng, dst: bytes([8, 2, s]) + rng + u16(dst)
free_ = lambda slot, again=False: bytes([2 | (0x80 if again else 0), slot])
probe = lambda kind, *rest: bytes([12, kind]) + bytes(rest)

three_blocks = alloc(1, bytes([2]))  # 3 blocks
odd = alloc(2, bytes([4, 2]))  # 5 blocks + 1 byte
small = alloc(0, u16(99))

write("fuzz_protocol", "write_kernel_read", three_blocks + write_bytes(0, RNG_ALL, 3, 5)
      + three_blocks + kernel(7, [(0, 0), (1, 1)]) + read_cmp(1, RNG_ALL) + SYNC + VERIFY)
write("fuzz_protocol", "inout_partial", odd + alloc(3, u16(20000), safe=True) + write_memcpy(0, rng_boundary(1, 10, 100), 5)
      + write_rmw(1, rng_blocks(1, 2), 9) + kernel(11, [(0, 2), (1, 0)], tpb=1, extra=1)
      + read_stride(0, RNG_ALL, 13) + kernel(12, [(1, 1), (0, 0)]) + SYNC + read_cmp(1, rng_any(4000, 300)))
write("fuzz_protocol", "memops", three_blocks + odd + small + memset_(0, rng_blocks(0, 2), 0xAB)
      + memset_(1, rng_any(100, 9000), 0x11) + memcpy_oo(1, 0, rng_any(0, 5000), 0, 10)
      + memcpy_po(2, RNG_ALL, 100) + memcpy_op(1, RNG_ALL, 0) + bytes([8, 3, 0]) + u16(3000) + u16(10) + u16(5) + bytes([1])
      + kernel(3, [(0, 1), (1, 2), (2, 0)]) + memcpy_oo(2, 0, rng_any(0, 90), 4000, 0) + VERIFY)
write("fuzz_protocol", "free_probes", three_blocks + small + write_bytes(1, RNG_ALL, 1, 1) + kernel(5, [(0, 1)])
      + probe(0, 0) + u16(77) + probe(1) + free_(1, again=True) + probe(3, 1) + u32(0) + bytes([0, 1, 0, 1, 0, 0])
      + probe(2, 0) + u16(4) + SYNC + free_(0))
write("fuzz_protocol", "evict_many", b"".join(alloc(1, bytes([9])) for _ in range(4))
      + b"".join(write_bytes(k % 4, rng_blocks(k, 1), k, 3) for k in range(10))
      + kernel(9, [(0, 1), (1, 2), (2, 0), (3, 0)], tpb=3) + read_cmp(0, RNG_ALL) + SYNC + VERIFY)
