#!/usr/bin/env python3
"""bench/patterns/window_model.py -- a model of rolling's window, to compare growth rules.

It replays block-level write sequences against a FIFO window of dirty blocks (no data, no
device) and prints what the window sends to the device (its evictions plus the flush at the
call) over what lazy sends (every dirtied block once), for several ways of growing the window on
a regret: a block written again after its eviction, before the next call. Halving at a call
follows the runtime's rule. docs/design.md (section 5) quotes the table; the runtime implements
the last row (adsm_impl/protocol.h). Deterministic (fixed seed); a few seconds.

    python3 bench/patterns/window_model.py
"""
import collections
import random

WRITES = 262144  # random block writes per epoch, as in bench/patterns and the issue


def run(pattern, nblocks, epochs, grow, cap_touched, floor=2):
    """Bytes sent over lazy's, and the final window, for `epochs` epochs of `pattern`."""
    rnd = random.Random(1)
    limit, clock, epoch_start, sent, lazy = floor, 0, 0, 0, 0
    evicted_at = {}
    for _ in range(epochs):
        fifo, dirty = collections.OrderedDict(), set()
        regrets = evictions = touched = 0
        for b in pattern(rnd, nblocks):
            dirty.add(b)
            if b in fifo:
                continue
            if evicted_at.get(b, 0) > epoch_start:  # regret
                regrets += 1
                distance = clock - evicted_at.pop(b) + 1
                grown = grow(limit, distance)
                if cap_touched:
                    grown = min(grown, 2 * touched)
                limit = max(limit, min(nblocks, grown))
            else:
                touched += 1
            fifo[b] = True
            while len(fifo) > limit:
                old, _ = fifo.popitem(last=False)
                clock += 1
                evicted_at[old] = clock
                sent += 1
                evictions += 1
        sent += len(fifo)  # the call flushes the rest
        lazy += len(dirty)
        if regrets == 0 and (evictions > 0 or len(fifo) <= limit // 2):
            limit = max(floor, limit // 2)
        epoch_start = clock
    return sent / lazy, limit


def random_writes(rnd, n):
    return (rnd.randrange(n) for _ in range(WRITES))


def hot_eighth(rnd, n):
    return (rnd.randrange(max(1, n // 8)) for _ in range(WRITES))


RULES = [
    ("`L + 1` (GMAC)", lambda L, d: L + 1, False),
    ("`2L`", lambda L, d: 2 * L, False),
    ("`L + max(d, L)`", lambda L, d: L + max(d, L), False),
    ("`L + max(d, L)`, at most 2x the blocks dirtied (chosen)", lambda L, d: L + max(d, L), True),
]

if __name__ == "__main__":
    print("| growth per regret | random, 32 blocks | 1,024 blocks | 16,384 blocks "
          "| hot eighth of 1,024: bytes, final window |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for name, grow, cap in RULES:
        cells = [f"{run(random_writes, n, 1, grow, cap)[0]:.2f}" for n in (32, 1024, 16384)]
        ratio, window = run(hot_eighth, 1024, 1, grow, cap)
        print(f"| {name} | " + " | ".join(cells) + f" | {ratio:.2f}, {window} |")
