"""ReqToTokenPool: `req_to_token[row, pos] -> slot` (int32 `[max_requests, max_context_len]`).

Rows are handed out from a free list (a Python stack: O(1) take and give back). The table is only
written here by the cache; attention kernels read it. Entries past a row's `kv_len` are stale.
"""

from __future__ import annotations

import torch

from radixkv.errors import InvalidSlotsError, OutOfRowsError


class ReqToTokenPool:
    def __init__(self, max_requests: int, max_context_len: int, device: str | torch.device) -> None:
        self.max_requests = max_requests
        self.max_context_len = max_context_len
        self.req_to_token = torch.zeros((max_requests, max_context_len), dtype=torch.int32,
                                        device=torch.device(device))
        self._free_rows = list(range(max_requests - 1, -1, -1))  # row 0 is taken first
        self._in_use = [False] * max_requests

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
        if not self._in_use[row]:
            raise InvalidSlotsError(f"req_to_token row {row} is not in use")
        self._in_use[row] = False
        self._free_rows.append(row)

    def rows_in_use(self) -> list[int]:
        return [r for r, used in enumerate(self._in_use) if used]
