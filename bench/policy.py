"""The policy micro-bench: one cached chain decision that evaluates CEL assertions in two layers."""

from __future__ import annotations

import statistics
import time

from ledger.policy.chain import Chain, Denial, Layer
from ledger.policy.statements import Statement

def _benchmark_chain() -> Chain:
    client = Layer(
        'client "bench" (00000000-0000-0000-0000-0000000000be)',
        (
            Statement("DENY", ("DELETE",), ("financial.*",)),
            Statement("DENY", ("SELECT",), ("financial.Account.document",), 'context.document.currency == "XXX"'),
            Statement("ALLOW", ("SELECT", "INSERT"), ("financial.Account.*",), 'context.document.currency == "EUR"'),
            Statement("ALLOW", ("SELECT",), ("financial.Transfer.*",)),
        ),
    )
    tool = Layer(
        'tool "transfer" v3',
        (
            Statement(
                "ALLOW",
                ("SELECT",),
                ("financial.*.document",),
                'context.document.tenant_id == principal.tenant && action.name == "transfer"',
            ),
        ),
    )
    return Chain((client, tool))


def bench_decisions(n: int = 20_000) -> dict[str, float]:
    """Latency of one cached chain decision that evaluates CEL assertions in two layers."""
    chain = _benchmark_chain()
    principal = {"tenant": "t1", "client": "00000000-0000-0000-0000-0000000000be", "claims": {"sub": "bench"}}
    action = {"id": "00000000-0000-0000-0000-00000000a11c", "version": 3, "name": "transfer"}
    document = {
        "id": "00000000-0000-0000-0000-000000000001",
        "tenant_id": "t1",
        "name": "operating",
        "currency": "EUR",
        "balance": 1250,
    }

    def decide() -> Denial | None:
        return chain.decide(
            "SELECT",
            "financial.Account.document",
            principal=principal,
            document=document,
            has_document=True,
            action=action,
        )

    assert decide() is None, "the benchmark decision must exercise the allowing path"
    for _ in range(min(n, 1000)):  # warm caches and the allocator
        decide()
    samples = []
    clock = time.perf_counter_ns
    for _ in range(n):
        started = clock()
        decide()
        samples.append(clock() - started)
    centiles = statistics.quantiles(samples, n=100, method="inclusive")
    return {"p50_us": round(centiles[49] / 1000, 2), "p99_us": round(centiles[98] / 1000, 2)}


if __name__ == "__main__":
    print(bench_decisions())
