"""PyTorch's CUDA caching allocator with its default settings, replayed on a sequence of allocations and frees.

The rules are those of ``c10/cuda/CUDACachingAllocator.cpp`` (``expandable_segments`` off, ``max_split_size``
unlimited, one stream):

* a request is rounded up to a multiple of 512 B (:func:`block_bytes`); up to 1 MiB it is served from the small
  pool, above from the large pool;
* the smallest cached free block of the pool that is large enough is taken (best fit by size, then address) and
  split when the rest is worth keeping: at least 512 B in the small pool, more than 1 MiB in the large pool;
* with no such block a new segment is allocated (``cudaMalloc``, :func:`segment_bytes`): 2 MiB for a small
  request, 20 MiB for a request of 1-10 MiB (the rest of it serves later requests), else the request rounded up
  to 2 MiB. In a fresh process the driver hands out each new segment below the earlier ones, so of two free
  blocks of one size the newer segment's is taken (the allocator's tie-break is the lower address);
* a freed block merges with its free neighbours of the same segment;
* when a segment does not fit in what the card has left, every cached segment with no block in use is returned
  (``release_cached_blocks``) and the allocation is tried once more; if it still does not fit the program raises
  ``torch.OutOfMemoryError``.

What decides whether a step runs is then not the allocated peak but where its blocks fell: a request of 16 GB
fails when 20 GB are free in cached segments but no 16 GB of them are contiguous.

Examples
--------
A 2 MiB tensor takes a 20 MiB segment, a 30 MiB one a segment of its own; once the first is freed, a 4 MiB
tensor is cut from the cached 20 MiB segment and nothing more is reserved:

>>> MiB = 2**20
>>> run = simulate_allocator([("a", 2 * MiB), ("b", 30 * MiB), ("a", 0), ("c", 4 * MiB)])
>>> run.peak_reserved_bytes // MiB, run.peak_allocated_bytes // MiB, int(run.segments[-1])
(50, 34, 2)
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass
from typing import Hashable, Iterable

import numpy as np

from ..base.errors import ArgumentError
from ..base.reprs import ResultRecord

__all__ = ["simulate_allocator", "AllocatorRun", "block_bytes", "segment_bytes", "MIN_BLOCK_BYTES",
           "SMALL_REQUEST_BYTES", "SMALL_SEGMENT_BYTES", "LARGE_SEGMENT_BYTES", "MIN_LARGE_ALLOC_BYTES",
           "ROUND_LARGE_BYTES"]

MiB = 2 ** 20
#: every block is a multiple of this [B] (``kMinBlockSize``)
MIN_BLOCK_BYTES = 512
#: the largest request served from the small pool [B] (``kSmallSize``)
SMALL_REQUEST_BYTES = 1 * MiB
#: segment of the small pool [B] (``kSmallBuffer``)
SMALL_SEGMENT_BYTES = 2 * MiB
#: segment a request of 1-10 MiB gets [B] (``kLargeBuffer``)
LARGE_SEGMENT_BYTES = 20 * MiB
#: from this request size [B] a segment is the request rounded up (``kMinLargeAlloc``)
MIN_LARGE_ALLOC_BYTES = 10 * MiB
#: rounding of the large segments [B] (``kRoundLarge``)
ROUND_LARGE_BYTES = 2 * MiB
#: the address the first segment ends at: segments are laid out downwards from it
_TOP_ADDRESS = 2 ** 62


def block_bytes(request_bytes):
    """The size of the block a request takes: rounded up to 512 B, at least 512 B.

    Parameters
    ----------
    request_bytes : int or array_like of int
        Bytes asked for [B].

    Returns
    -------
    int or ndarray
        Block size [B].

    Examples
    --------
    >>> block_bytes(1), block_bytes(1000)
    (512, 1024)
    """
    n = np.asarray(request_bytes, dtype=np.int64)
    out = np.maximum(MIN_BLOCK_BYTES, -(-n // MIN_BLOCK_BYTES) * MIN_BLOCK_BYTES)
    return int(out) if out.ndim == 0 else out


def segment_bytes(request_bytes):
    """The segment ``cudaMalloc`` gets for a request that finds no cached block.

    Parameters
    ----------
    request_bytes : int or array_like of int
        Bytes asked for [B].

    Returns
    -------
    int or ndarray
        Segment size [B]: 2 MiB up to 1 MiB requested, 20 MiB below 10 MiB, else the block rounded up to 2 MiB.

    Examples
    --------
    >>> [segment_bytes(n) // 2**20 for n in (4096, 2 * 2**20, 11 * 2**20)]
    [2, 20, 12]
    """
    b = np.asarray(block_bytes(request_bytes), dtype=np.int64)
    large = -(-b // ROUND_LARGE_BYTES) * ROUND_LARGE_BYTES
    out = np.where(b <= SMALL_REQUEST_BYTES, SMALL_SEGMENT_BYTES, np.where(b < MIN_LARGE_ALLOC_BYTES,
                                                                           LARGE_SEGMENT_BYTES, large))
    return int(out) if out.ndim == 0 else out


@dataclass(frozen=True, repr=False)
class AllocatorRun(ResultRecord):
    """What the allocator held after each event of a replay.

    Attributes
    ----------
    reserved_bytes : ndarray
        Bytes in segments after each event that ran [B] (``torch.cuda.memory_reserved``).
    allocated_bytes : ndarray
        Bytes in blocks in use after each event that ran [B] (``torch.cuda.memory_allocated``).
    segments : ndarray
        Segments held after each event that ran.
    failed_event : int or None
        Index of the allocation that raised out-of-memory (the replay stops there), or None.
    failed_request_bytes : int
        Bytes that allocation asked for [B] (0 when none failed).
    alloc_retries : int
        Allocations that returned the cached segments and tried again (``num_alloc_retries``).
    capacity_bytes : float
        Bytes segments could take in all [B].
    """

    reserved_bytes: np.ndarray
    allocated_bytes: np.ndarray
    segments: np.ndarray
    failed_event: int | None
    failed_request_bytes: int
    alloc_retries: int
    capacity_bytes: float

    @property
    def ran(self) -> bool:
        """True when no allocation failed."""
        return self.failed_event is None

    @property
    def peak_reserved_bytes(self) -> int:
        """The most the segments held [B] (``torch.cuda.max_memory_reserved``)."""
        return int(self.reserved_bytes.max(initial=0))

    @property
    def peak_allocated_bytes(self) -> int:
        """The most the blocks in use held [B] (``torch.cuda.max_memory_allocated``)."""
        return int(self.allocated_bytes.max(initial=0))

    def __repr__(self) -> str:
        state = "ran" if self.ran else f"out of memory at event {self.failed_event}"
        return (f"AllocatorRun({state}, peak reserved {self.peak_reserved_bytes / 2**30:.2f} GiB, "
                f"allocated {self.peak_allocated_bytes / 2**30:.2f} GiB, {self.alloc_retries} retries)")


class _Pools:
    """The caching allocator's state: blocks by address, free blocks of each pool sorted by (size, address)."""

    def __init__(self, capacity: float):
        self.capacity = capacity
        self.free = ([], [])            # large, small: sorted (size, address)
        self.size, self.prev, self.next, self.pool = {}, {}, {}, {}
        self.busy: set[int] = set()
        self.reserved = self.allocated = self.segments = self.retries = 0
        self.bottom = _TOP_ADDRESS

    def _segment(self, pool: int, nbytes: int) -> int | None:
        if self.reserved + nbytes > self.capacity:
            return None
        self.bottom -= nbytes           # a new address range, below every earlier one (as cudaMalloc's fall)
        a = self.bottom
        self.size[a], self.prev[a], self.next[a], self.pool[a] = nbytes, None, None, pool
        self.reserved += nbytes
        self.segments += 1
        return a

    def _release_cached(self) -> None:
        for pool in (0, 1):
            keep = []
            for size, a in self.free[pool]:
                if self.prev[a] is None and self.next[a] is None:
                    self.reserved -= size
                    self.segments -= 1
                    del self.size[a], self.prev[a], self.next[a], self.pool[a]
                else:
                    keep.append((size, a))
            self.free[pool][:] = keep

    def malloc(self, request: int) -> int | None:
        size = block_bytes(request)
        pool = 1 if size <= SMALL_REQUEST_BYTES else 0
        free = self.free[pool]
        i = bisect.bisect_left(free, (size, -1))
        if i < len(free):
            a = free.pop(i)[1]
        else:
            a = self._segment(pool, segment_bytes(size))
            if a is None:
                self._release_cached()
                self.retries += 1
                a = self._segment(pool, segment_bytes(size))
                if a is None:
                    return None
        rest = self.size[a] - size
        if (rest >= MIN_BLOCK_BYTES) if pool else (rest > SMALL_REQUEST_BYTES):
            b, nxt = a + size, self.next[a]
            self.size[b], self.prev[b], self.next[b], self.pool[b] = rest, a, nxt, pool
            if nxt is not None:
                self.prev[nxt] = b
            self.next[a], self.size[a] = b, size
            bisect.insort(free, (rest, b))
        self.busy.add(a)
        self.allocated += self.size[a]
        return a

    def release(self, a: int) -> None:
        self.busy.discard(a)
        self.allocated -= self.size[a]
        free = self.free[self.pool[a]]
        left = self.prev[a]
        if left is not None and left not in self.busy:      # a free neighbour leaves the free list and merges
            free.pop(bisect.bisect_left(free, (self.size[left], left)))
            self._merge(left, a)
            a = left
        right = self.next[a]
        if right is not None and right not in self.busy:
            free.pop(bisect.bisect_left(free, (self.size[right], right)))
            self._merge(a, right)
        bisect.insort(free, (self.size[a], a))

    def _merge(self, left: int, right: int) -> None:
        self.size[left] += self.size[right]
        self.next[left] = self.next[right]
        if self.next[right] is not None:
            self.prev[self.next[right]] = left
        del self.size[right], self.prev[right], self.next[right], self.pool[right]


def simulate_allocator(events: Iterable[tuple[Hashable, int]], capacity_bytes: float = np.inf) -> AllocatorRun:
    """Replay allocations and frees through PyTorch's default CUDA caching allocator.

    Parameters
    ----------
    events : iterable of (key, bytes)
        In program order: ``(key, n)`` with ``n > 0`` allocates ``n`` bytes [B] as the tensor ``key``;
        ``(key, 0)`` frees the tensor ``key`` allocated last under that key.
    capacity_bytes : float
        What segments may take in all [B]: the card's memory less the CUDA context and other processes (the
        free memory ``torch.cuda.mem_get_info`` reports plus what the allocator already holds). Unlimited by
        default.

    Returns
    -------
    AllocatorRun
        Reserved and allocated bytes after each event, and the allocation that failed, if one did.

    Raises
    ------
    ArgumentError
        A free of a key that holds no block, or a negative size.

    Examples
    --------
    A 2 MiB request takes a 20 MiB segment; the next one is cut from its rest:

    >>> MiB = 2**20
    >>> run = simulate_allocator([("a", 2 * MiB), ("b", 2 * MiB)])
    >>> int(run.reserved_bytes[-1]) // MiB, int(run.segments[-1])
    (20, 1)

    A 30 MiB request on a card of 40 MiB holding a free 20 MiB segment: the segment goes back, then it fits:

    >>> run = simulate_allocator([("a", 20 * MiB), ("a", 0), ("b", 30 * MiB)], capacity_bytes=40 * MiB)
    >>> run.ran, run.alloc_retries, int(run.reserved_bytes[-1]) // MiB
    (True, 1, 30)
    """
    pools = _Pools(float(capacity_bytes))
    where: dict = {}
    reserved, allocated, segments = [], [], []
    failed, failed_bytes = None, 0
    for i, (key, n) in enumerate(events):
        n = int(n)
        if n > 0:
            a = pools.malloc(n)
            if a is None:
                failed, failed_bytes = i, n
                break
            where[key] = a
        elif n == 0:
            if key not in where:
                raise ArgumentError(f"event {i} frees {key!r}, which holds no block", argument="events", value=key)
            pools.release(where.pop(key))
        else:
            raise ArgumentError(f"event {i} asks for {n} bytes; sizes are >= 0 (0 frees)", argument="events",
                                value=n, allowed="bytes >= 0")
        reserved.append(pools.reserved)
        allocated.append(pools.allocated)
        segments.append(pools.segments)
    return AllocatorRun(reserved_bytes=np.asarray(reserved, dtype=np.int64),
                        allocated_bytes=np.asarray(allocated, dtype=np.int64),
                        segments=np.asarray(segments, dtype=np.int64), failed_event=failed,
                        failed_request_bytes=failed_bytes, alloc_retries=pools.retries,
                        capacity_bytes=float(capacity_bytes))
