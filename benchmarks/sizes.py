"""How much each figure does (standard library only: the runner imports it too)."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, replace


@dataclass(frozen=True)
class Sizes:
    """Job counts of each figure; ``*_cap`` bound a timed phase in seconds."""

    enqueue: int = 3000
    async_enqueue: int = 5000
    async_concurrency: int = 100
    bulk: int = 20000
    chunk: int = 1000
    process: int = 20000
    fill_cap: float = 5.0
    phase_cap: float = 4.0
    process_cap: float = 6.0
    latency: int = 1000
    latency_interval: float = 0.005
    claim_small: int = 1000
    claim_large: int = 1_000_000
    claims: int = 500
    claim_reps: int = 5
    ceiling_one: int = 10000
    ceiling_pipelined: int = 100000
    ceiling_benchmark: int = 200000
    ceiling_clients: int = 50

    @classmethod
    def from_json(cls, text: str) -> Sizes:
        return cls(**json.loads(text)) if text else cls()

    def to_json(self) -> str:
        return json.dumps(asdict(self))


FULL = Sizes()
QUICK = replace(
    FULL,
    enqueue=300,
    async_enqueue=300,
    async_concurrency=50,
    bulk=2000,
    process=1000,
    fill_cap=3.0,
    phase_cap=2.0,
    process_cap=3.0,
    latency=50,
    claim_large=10000,
    claims=100,
    ceiling_one=2000,
    ceiling_pipelined=10000,
    ceiling_benchmark=20000,
)
