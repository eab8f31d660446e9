"""A chunk store that answers slowly and knows no chunk: a resolver hook for the fleet's
end-to-end test, so a worker holds its entries pending long enough to be killed so."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any


def lookup(chunk_ids: list[str]) -> Mapping[str, Mapping[str, Any]]:
    time.sleep(1.0)
    return {}
