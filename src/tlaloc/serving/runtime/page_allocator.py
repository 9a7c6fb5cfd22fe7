"""KV page allocation: a free list, reference counts, and a prefix cache keyed by content hash.

Pages ``1 .. num_pages-1`` are handed out; page 0 is the scratch page padding rows
point at, and is never allocated. A page is *used* while some sequence holds it
(reference count > 0). A full page of prompt tokens is registered under the hash of
its tokens chained with the hash of every page before it (:func:`page_hashes`), so a
later prompt with the same prefix shares the page instead of recomputing it. When
its last holder lets go, a registered page stays *cached* (still findable by hash)
until the free list runs dry and it is evicted, least recently released first.
"""
from __future__ import annotations

import collections
import hashlib

import numpy as np


def page_hashes(tokens, block_size: int) -> list[bytes]:
    """The chained content hash of every full page of ``tokens``."""
    out, prev = [], b""
    for start in range(0, len(tokens) - block_size + 1, block_size):
        chunk = np.asarray(tokens[start:start + block_size], np.int64).tobytes()
        prev = hashlib.blake2b(prev + chunk, digest_size=16).digest()
        out.append(prev)
    return out


class PageAllocator:
    """Pages of one KV pool (every layer's pools share the page numbering)."""

    def __init__(self, num_pages: int):
        if num_pages < 2:
            raise ValueError(f"PageAllocator: num_pages={num_pages}; at least 2 (page 0 is scratch)")
        self.num_pages = num_pages
        self.reset()

    def reset(self) -> None:
        """Forget every page: all free, nothing cached."""
        self._free = collections.deque(range(1, self.num_pages))
        self._ref = [0] * self.num_pages
        self._hash_of: dict[int, bytes] = {}
        self._page_of: dict[bytes, int] = {}
        self._cached: collections.OrderedDict[int, None] = collections.OrderedDict()   # ref 0, registered

    # -- counts ------------------------------------------------------------------------------
    @property
    def total(self) -> int:
        """Pages that can hold tokens (the scratch page excluded)."""
        return self.num_pages - 1

    @property
    def used(self) -> int:
        return self.total - len(self._free) - len(self._cached)

    @property
    def cached(self) -> int:
        return len(self._cached)

    @property
    def available(self) -> int:
        """Pages an allocation may take: free ones, then cached ones (evicted)."""
        return len(self._free) + len(self._cached)

    def refcount(self, page: int) -> int:
        return self._ref[page]

    # -- allocation ------------------------------------------------------------------------------
    def allocate(self) -> int:
        """A page with reference count 1; raises RuntimeError when none is left."""
        if self._free:
            page = self._free.popleft()
        elif self._cached:
            page, _ = self._cached.popitem(last=False)                 # evict the least recently released
            del self._page_of[self._hash_of.pop(page)]
        else:
            raise RuntimeError("PageAllocator: no KV page left (the scheduler reserves pages before admitting; "
                               "this is a bug)")
        self._ref[page] = 1
        return page

    def release(self, page: int) -> None:
        """Drop one reference; at zero the page becomes cached (if registered) or free."""
        if self._ref[page] <= 0:
            raise RuntimeError(f"PageAllocator: page {page} released more often than held")
        self._ref[page] -= 1
        if self._ref[page] == 0:
            if page in self._hash_of:
                self._cached[page] = None
            else:
                self._free.append(page)

    # -- prefix cache ----------------------------------------------------------------------------
    def lookup(self, key: bytes) -> int | None:
        """The page registered under ``key``, with one more reference, or None."""
        page = self._page_of.get(key)
        if page is None:
            return None
        if self._ref[page] == 0:
            del self._cached[page]
        self._ref[page] += 1
        return page

    def register(self, page: int, key: bytes) -> None:
        """Make a full, written page findable by ``key`` (first writer wins)."""
        if key in self._page_of or page in self._hash_of:
            return
        self._page_of[key] = page
        self._hash_of[page] = key


__all__ = ["PageAllocator", "page_hashes"]
