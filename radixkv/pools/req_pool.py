"""ReqToTokenPool: `req_to_token[row, pos] -> slot` (int32 `[max_requests, max_context_len]`).

Rows come from a free list (a Python stack: O(1) take and give back). Row writes are queued and
applied together, with one `write_req_to_token` call, the first time anyone reads the table after
them (`batch()` does, every attention kernel does): a decode step of 64 requests is one launch,
not 64 small host-to-device copies. Entries past a row's `kv_len` are stale. Only the sequence
table (radixkv/sequences.py) writes here; attention kernels read the table.
"""

from __future__ import annotations

import numpy as np
import torch

from radixkv.errors import InvalidSlotsError, OutOfRowsError
from radixkv.kernels import write_req_to_token_ref, write_req_to_token_unchecked


class ReqToTokenPool:
    def __init__(self, max_requests: int, max_context_len: int, device: str | torch.device) -> None:
        self.max_requests = max_requests
        self.max_context_len = max_context_len
        self._table = torch.zeros((max_requests, max_context_len), dtype=torch.int32, device=torch.device(device))
        self._free_rows = list(range(max_requests - 1, -1, -1))  # row 0 is taken first
        self._in_use = [False] * max_requests
        self._pending: list[tuple[int, int, np.ndarray]] = []  # (row, start, int64 slots), in order

    @property
    def req_to_token(self) -> torch.Tensor:
        """int32 `[max_requests, max_context_len]`, with every queued write applied."""
        if self._pending:
            self._flush()
        return self._table

    @property
    def num_free_rows(self) -> int:
        return len(self._free_rows)

    def alloc_row(self) -> int:
        if not self._free_rows:
            raise OutOfRowsError(
                f"all {self.max_requests} req_to_token rows are in use; close a Sequence first "
                "or raise CacheConfig.max_requests")
        row = self._free_rows.pop()
        self._in_use[row] = True
        return row

    def free_row(self, row: int) -> None:
        """Give back a row in use."""
        if not self._in_use[row]:
            raise InvalidSlotsError(f"req_to_token row {row} is not in use")
        self._in_use[row] = False
        self._free_rows.append(row)

    def rows_in_use(self) -> list[int]:
        return [r for r, used in enumerate(self._in_use) if used]

    def write(self, row: int, start: int, slots: np.ndarray) -> None:
        """Queue `req_to_token[row, start:start + len(slots)] = slots` (int64 `[n]`, not modified later)."""
        if len(slots):
            self._pending.append((row, start, slots))

    def _flush(self) -> None:
        pending, self._pending = self._pending, []
        rows, starts, chunks = zip(*pending)
        device = self._table.device
        lens = torch.tensor([len(c) for c in chunks], dtype=torch.int32)
        slots = torch.from_numpy(np.concatenate(chunks))
        args = (torch.tensor(rows, dtype=torch.int32), torch.tensor(starts, dtype=torch.int32), slots, lens)
        if device.type == "cpu":  # the bookkeeping path: plain torch, never the Triton interpreter
            write_req_to_token_ref(self._table, *args)
        else:  # rows, starts and slots come from the sequence table: valid by construction
            write_req_to_token_unchecked(self._table, *(t.to(device, non_blocking=True) for t in args))
