"""The paged KV cache: a pool of fixed-size blocks, with optional prefix caching.

Blocks are accounted, not materialised: the simulator needs how many blocks each request
holds and which cached prefixes exist, not their addresses. Semantics follow vLLM V1's
KVCacheManager / BlockPool:

- a request holds ceil(computed tokens / block_size) blocks and grows one block at a time;
- allocation fails (the scheduler then preempts or stops admitting) when the pool is short;
- with prefix caching, a full block whose hash is known is registered as soon as a step
  is scheduled to compute it (vLLM's `allocate_slots` caches up to the tokens scheduled),
  so a request admitted later in the same step already reuses it: a burst of requests
  sharing a prefix prefills it once, not once per request of the step. When its last
  holder frees it, it stays cached but evictable (LRU, the tail of a request first) until
  a new allocation needs the space; a new request reuses its longest cached prefix.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence

from burstguard.core.engine.request import EngineRequest


def expand_block_hashes(
    hashes: Sequence[int], src_block_tokens: int, block_size: int, prompt_tokens: int
) -> tuple[int, ...]:
    """Names a prompt's `block_size`-token engine blocks from prefix hashes of
    `src_block_tokens`-token blocks (a Mooncake trace's hash_ids: 512 tokens). Engine block
    j is named by the source block holding its last token and that token's offset in it,
    `h * src_block_tokens + offset`: source hashes are chained (a hash names its whole
    prefix, as Mooncake's and vLLM's do), so equal names mean equal leading tokens. Only
    blocks lying entirely inside the prompt and its source blocks are kept (vLLM hashes
    full blocks only)."""
    src = src_block_tokens
    n = min(prompt_tokens, len(hashes) * src) // block_size
    out: list[int] = []
    for j in range(n):
        last = (j + 1) * block_size - 1
        out.append(hashes[last // src] * src + last % src)
    return tuple(out)


class BlockPool:
    """`num_blocks` blocks of `block_size` tokens."""

    def __init__(self, num_blocks: int, block_size: int, enable_prefix_caching: bool) -> None:
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.enable_prefix_caching = enable_prefix_caching
        self._free_uncached = num_blocks
        self._refs: dict[int, int] = {}  # cached block hash -> number of holders
        self._evictable: OrderedDict[int, None] = OrderedDict()  # cached, unheld, LRU first
        self._held: dict[str, list[int]] = {}  # request id -> cached hashes it holds
        self._next_hash: dict[str, int] = {}  # request id -> next block index to register
        self.prefix_hits_tokens = 0
        self.prefix_queries_tokens = 0

    @property
    def num_free(self) -> int:
        return self._free_uncached + len(self._evictable)

    @property
    def usage(self) -> float:
        """Share of blocks held by requests (cached-but-evictable blocks count as free)."""
        return 1.0 - self.num_free / self.num_blocks if self.num_blocks else 0.0

    def blocks_for(self, num_tokens: int) -> int:
        return -(-num_tokens // self.block_size)

    def cached_prefix(self, req: EngineRequest) -> list[int]:
        """Hashes of the longest cached prefix of a request about to be admitted; at
        least one token is always left to compute (vLLM recomputes the last one)."""
        if not self.enable_prefix_caching or not req.prefix_hashes:
            return []
        limit = (req.num_tokens - 1) // self.block_size
        hits: list[int] = []
        for h in req.prefix_hashes[:limit]:
            if h not in self._refs:
                break
            hits.append(h)
        return hits

    def count_prefix_query(self, req: EngineRequest, num_hits: int) -> None:
        """Counts an admission's prompt tokens and cache hits (the hit rate's inputs)."""
        self.prefix_queries_tokens += req.prompt_tokens
        self.prefix_hits_tokens += num_hits * self.block_size

    def allocate(self, req: EngineRequest, num_new_tokens: int, hits: Sequence[int] = ()) -> bool:
        """Reserves blocks so that `req` can hold its computed tokens (after crediting
        `hits`, cached prefix blocks it takes over) plus `num_new_tokens`. All or
        nothing: returns False and changes nothing when the pool is short."""
        if not hits:  # the common case (a block boundary crossed): the same, fewer steps
            need = -(-(req.num_computed_tokens + num_new_tokens) // self.block_size)
            need -= req.num_blocks
            if need <= 0:
                return True
            free = self._free_uncached
            if need > free + len(self._evictable):
                return False
            if need <= free:
                self._free_uncached = free - need
                req.num_blocks += need
                return True
        computed = req.num_computed_tokens + len(hits) * self.block_size
        need = self.blocks_for(computed + num_new_tokens) - req.num_blocks - len(hits)
        touched = sum(1 for h in hits if h in self._evictable)
        if need + touched > self.num_free:
            return False
        if hits:
            held = self._held.setdefault(req.id, [])
            for h in hits:
                self._evictable.pop(h, None)
                self._refs[h] += 1
                held.append(h)
            self._next_hash[req.id] = len(hits)
            req.num_computed_tokens = computed
            req.num_blocks += len(hits)
        if need > 0:
            take = min(need, self._free_uncached)
            self._free_uncached -= take
            for _ in range(need - take):
                h, _ = self._evictable.popitem(last=False)
                del self._refs[h]
            req.num_blocks += need
        return True

    def register_full_blocks(self, req: EngineRequest, num_tokens: int) -> None:
        """When a step is scheduled: makes the request's blocks that are full once it has
        computed `num_tokens` tokens (those computed so far and this step's) cacheable."""
        if not self.enable_prefix_caching or not req.prefix_hashes:
            return
        start = self._next_hash.get(req.id, 0)
        end = min(num_tokens // self.block_size, len(req.prefix_hashes))
        if end <= start:
            return
        held = self._held.setdefault(req.id, [])
        for h in req.prefix_hashes[start:end]:
            if h not in self._refs:  # a duplicate computed concurrently stays private
                self._refs[h] = 1
                held.append(h)
        self._next_hash[req.id] = end

    def free(self, req: EngineRequest) -> None:
        """Releases every block of `req` at once (finish, abort, preemption)."""
        held = self._held.pop(req.id, ())
        self._next_hash.pop(req.id, None)
        for h in reversed(held):
            refs = self._refs[h] - 1
            self._refs[h] = refs
            if refs == 0:
                self._evictable[h] = None
        self._free_uncached += req.num_blocks - len(held)
        req.num_blocks = 0

    def check(self) -> None:
        """Asserts the pool's accounting (tests call it after every step)."""
        held = sum(len(v) for v in self._held.values())
        assert 0 <= self._free_uncached <= self.num_blocks
        assert all(r >= 0 for r in self._refs.values())
        assert all(self._refs[h] == 0 for h in self._evictable)
        assert sum(1 for r in self._refs.values() if r > 0) <= held
        assert self.num_free <= self.num_blocks
