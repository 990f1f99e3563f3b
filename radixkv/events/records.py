"""KV events in this process: vLLM's three event types and its field order.

The fields, their order and their defaults are those of vLLM 0.33's `vllm/distributed/kv_events.py`
(`BlockStored`, `BlockRemoved`, `AllBlocksCleared`), so an event converts to the wire struct
(radixkv.events.wire) field for field. These classes are plain slotted dataclasses, importable
without msgspec: the cache records them, the cluster indexes read them. Unlike vLLM, `lora_id`,
`medium` and `lora_name` have defaults here (None, "GPU", None) so that recording code can leave
them out; the wire struct still declares them without defaults, as vLLM does.

Compiled with the core (radixkv/core_loader.py): the cache builds one event per stored node. What
arrives from outside is validated by radixkv.events.parse (interpreted: its checks raise
EventFormatError where a compiled field type would raise TypeError first).

A cache's own BlockStored carries its `token_ids` as `TokenIds`: a read-only sequence of ints over
the int32 bytes the tree keys its edges by, so recording an event makes no Python int per token
(and no array: one is made when `ids` is read).
It reads as a list does (len, index, slice, iteration, `==` with a list, `tolist()`); the wire
(radixkv.events.wire) and `event_to_dict` (radixkv.events.parse) give plain lists. Its block hashes
likewise: `BlockHashes`, the 64-bit hashes as the 8-byte little-endian words the XXH3 chain writes
(events/hashing.py `xxh3_words`), kept once per node by the recorder and shared by its stored and
removed events; a Python int per block is made when they are read (a publisher's sender thread).
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass, fields
from typing import Any, Callable, Final, Iterable, Iterator, Union, overload

import numpy as np

from radixkv.core_loader import native

# vLLM's medium names (the tier, whatever the device); Final: compiled, a constant where a module global
# costs a dict lookup (the recorder reads DEVICE per removed node)
DEVICE: Final = "GPU"
HOST: Final = "CPU"
STORAGE: Final = "STORAGE"
MEDIA = (DEVICE, HOST, STORAGE)
HASH_LIMIT = 1 << 64
_INT32 = np.dtype("<i4")  # a tree key's ids (TokenIds over its bytes)
_U64 = np.dtype("<u8")  # block hashes' words (BlockHashes)
# radixkv/_runs_native.c's words -> ints while the compiled core runs, None interpreted (numpy, int.from_bytes)
_WORDS_INTS: Final[Callable[[bytes], list[int]] | None] = native("words_ints")
_WORD_AT: Final[Callable[[bytes, int], int] | None] = native("word_at")


class IntsView:
    """What TokenIds and BlockHashes share: a read-only sequence of ints read through `tolist()`, equal to a
    list of the same ints and to a view of its own kind with the same contents (`_same`)."""

    def tolist(self) -> list[int]:
        raise NotImplementedError

    def _same(self, other: Any) -> bool:
        raise NotImplementedError

    def __iter__(self) -> Iterator[int]:
        return iter(self.tolist())

    def __eq__(self, other: object) -> bool:
        if type(other) is type(self):
            return self._same(other)
        return self.tolist() == other if isinstance(other, list) else NotImplemented

    __hash__ = None  # type: ignore[assignment]  # compares equal to lists, which are unhashable

    def __repr__(self) -> str:
        return repr(self.tolist())

    def __reversed__(self) -> Iterator[int]:
        return reversed(self.tolist())

    def index(self, value: int) -> int:
        return self.tolist().index(value)

    def count(self, value: int) -> int:
        return self.tolist().count(value)


class TokenIds(IntsView):
    """Token ids of an event, read-only: int32 little-endian bytes that nobody writes (a tree key's,
    given with how many ids they hold), or a 1-D integer array (see the module docstring). `ids` is
    the array (a read-only view of the bytes, made when asked for); ints come out as Python ints; a
    slice is a TokenIds too. A registered Sequence, not a subclass: compiled, a subclass of an ABC
    would share collections.abc.Sequence's isinstance cache (a list would pass as a TokenIds)."""

    def __init__(self, ids: np.ndarray | bytes, length: int = -1) -> None:
        """`ids`: an array, or bytes holding at least `length` int32 ids (all of them when -1)."""
        self._src = ids
        self._len = (len(ids) // 4 if length < 0 else length) if isinstance(ids, bytes) else len(ids)

    @property
    def ids(self) -> np.ndarray:
        src = self._src
        return np.frombuffer(src, _INT32, self._len) if isinstance(src, bytes) else src

    def __len__(self) -> int:
        return self._len

    @overload
    def __getitem__(self, i: int) -> int: ...

    @overload
    def __getitem__(self, i: slice) -> TokenIds: ...

    def __getitem__(self, i: int | slice) -> int | TokenIds:
        return TokenIds(self.ids[i]) if isinstance(i, slice) else int(self.ids[i])

    def tolist(self) -> list[int]:
        return self.ids.tolist()

    def _same(self, other: Any) -> bool:
        return bool(np.array_equal(self.ids, other.ids))


Sequence.register(TokenIds)


class BlockHashes(IntsView):
    """Block hashes of an event, read-only: ints in [0, 2**64) kept as `words`, bytes of 8-byte
    little-endian words that nobody writes (see the module docstring). Reads as TokenIds does: ints
    come out as Python ints, a slice is a BlockHashes, `==` holds with a list of the same ints."""

    def __init__(self, words: bytes) -> None:
        self.words = words

    @staticmethod
    def of(hashes: Iterable[int]) -> BlockHashes:
        ints = list(hashes)
        return BlockHashes(struct.pack(f"<{len(ints)}Q", *ints))

    def tolist(self) -> list[int]:
        ints = _WORDS_INTS
        return ints(self.words) if ints is not None else np.frombuffer(self.words, _U64).tolist()

    def __len__(self) -> int:
        return len(self.words) >> 3

    @overload
    def __getitem__(self, i: int) -> int: ...

    @overload
    def __getitem__(self, i: slice) -> BlockHashes: ...

    def __getitem__(self, i: int | slice) -> int | BlockHashes:
        n = len(self.words) >> 3
        if isinstance(i, slice):
            lo, hi, step = i.indices(n)
            return BlockHashes(self.words[8 * lo:8 * max(lo, hi)]) if step == 1 else BlockHashes.of(self.tolist()[i])
        k = i + n if i < 0 else i
        if not 0 <= k < n:
            raise IndexError("block hash index out of range")
        return self.at(k)

    def at(self, k: int) -> int:
        """Hash k, for 0 <= k < len(self) (the recorder's own reads: no negative k)."""
        at = _WORD_AT
        return at(self.words, k) if at is not None else int.from_bytes(self.words[8 * k:8 * k + 8], "little")

    def cut(self, j: int) -> tuple[BlockHashes, BlockHashes]:
        """(self[:j], self[j:]) for 0 <= j <= len(self): a node's hashes when the tree splits it."""
        words = self.words
        return BlockHashes(words[:8 * j]), BlockHashes(words[8 * j:])

    def _same(self, other: Any) -> bool:
        return bool(self.words == other.words)


Sequence.register(BlockHashes)


# Dataclasses for their fields, equality and repr, with the __init__ written out: compiled with the
# core (radixkv/core_loader.py), an explicit __init__ is a native call, while the one dataclasses
# generates is interpreted code, slower than it is without compiling.
@dataclass(slots=True, init=False)
class BlockStored:
    block_hashes: list[int] | BlockHashes  # a cache's own: BlockHashes
    parent_block_hash: int | None
    token_ids: list[int] | TokenIds  # len(block_hashes) * block_size tokens
    block_size: int
    lora_id: int | None = None  # vLLM: deprecated in favour of lora_name, kept for compatibility
    medium: str | None = DEVICE
    lora_name: str | None = None
    extra_keys: list[tuple[Any, ...] | None] | None = None  # one entry per block (radixkv.keys)
    group_idx: int | None = None
    kv_cache_spec_kind: str | None = None
    kv_cache_spec_sliding_window: int | None = None
    locality: str | None = None
    ownership: str | None = None
    session_id: str | None = None
    lookahead_token_ids: list[list[int]] | None = None

    def __init__(self, block_hashes: list[int] | BlockHashes, parent_block_hash: int | None,
                 token_ids: list[int] | TokenIds,
                 block_size: int, lora_id: int | None = None, medium: str | None = DEVICE,
                 lora_name: str | None = None, extra_keys: list[tuple[Any, ...] | None] | None = None,
                 group_idx: int | None = None, kv_cache_spec_kind: str | None = None,
                 kv_cache_spec_sliding_window: int | None = None, locality: str | None = None,
                 ownership: str | None = None, session_id: str | None = None,
                 lookahead_token_ids: list[list[int]] | None = None) -> None:
        self.block_hashes = block_hashes
        self.parent_block_hash = parent_block_hash
        self.token_ids = token_ids
        self.block_size = block_size
        self.lora_id = lora_id
        self.medium = medium
        self.lora_name = lora_name
        self.extra_keys = extra_keys
        self.group_idx = group_idx
        self.kv_cache_spec_kind = kv_cache_spec_kind
        self.kv_cache_spec_sliding_window = kv_cache_spec_sliding_window
        self.locality = locality
        self.ownership = ownership
        self.session_id = session_id
        self.lookahead_token_ids = lookahead_token_ids


@dataclass(slots=True, init=False)
class BlockRemoved:
    block_hashes: list[int] | BlockHashes
    medium: str | None = DEVICE
    group_idx: int | None = None
    locality: str | None = None
    ownership: str | None = None

    def __init__(self, block_hashes: list[int] | BlockHashes, medium: str | None = DEVICE, group_idx: int | None = None,
                 locality: str | None = None, ownership: str | None = None) -> None:
        self.block_hashes = block_hashes
        self.medium = medium
        self.group_idx = group_idx
        self.locality = locality
        self.ownership = ownership


@dataclass(slots=True)
class AllBlocksCleared:
    pass


KVEvent = Union[BlockStored, BlockRemoved, AllBlocksCleared]
EVENT_TYPES: dict[str, type] = {"BlockStored": BlockStored, "BlockRemoved": BlockRemoved,
                                "AllBlocksCleared": AllBlocksCleared}
FIELDS: dict[str, tuple[str, ...]] = {name: tuple(f.name for f in fields(cls)) for name, cls in EVENT_TYPES.items()}
REQUIRED = {"BlockStored": 4, "BlockRemoved": 1, "AllBlocksCleared": 0}  # leading fields without a default
