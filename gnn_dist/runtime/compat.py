"""What differs across the supported torch range (pyproject: the floor, 2.2.1, and 2.13 are tested), in one place.

Each guard names the release that changed the behaviour, so it can go when the floor passes it.
"""
from __future__ import annotations

import torch

TORCH = torch.torch_version.TorchVersion(torch.__version__)

# The libuv TCPStore adopts an already listening socket (`master_listen_fd`) from 2.8 on (pytorch#150215); before,
# only the classic backend does, and 2.2's libuv store given one never answers.
STORE_LIBUV_TAKES_FD = TORCH >= (2, 8)
