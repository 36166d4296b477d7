"""A bench run's result kept: its JSON (timestamped and ``latest.json``) and
PNG plots of throughput and latency (when matplotlib is installed)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from seqkeeper.bench.rig import LATENCY_P99_MS, LIMIT_RATIO


def write(result: dict[str, Any], outdir: Path) -> list[Path]:
    """JSON (timestamped and ``latest.json``) and PNG plots (if matplotlib is
    installed); the paths written."""
    outdir.mkdir(parents=True, exist_ok=True)
    stamp = result["when"].replace(":", "").replace("-", "")
    paths = []
    for name in (f"bench-{stamp}.json", "latest.json"):
        (outdir / name).write_text(json.dumps(result, indent=2))
        paths.append(outdir / name)
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return paths
    m = result["machine"]
    title = f"{m['cpu'] or 'CPU'}, {m['cpus']} CPUs, {result['when']}"
    rates = [f for f in result["figures"] if f["unit"] == "msg/s"]
    if rates:
        fig, ax = plt.subplots(figsize=(8, 3 + 0.4 * len(rates)))
        ax.barh([f["name"] for f in rates], [f["value"] for f in rates])
        limit = next((f["value"] for f in rates if f["name"].startswith("limit")), None)
        target = next(
            (f["detail"]["least"] for f in result["ratios"] if f["name"] == "seqkeeper / limit"),
            LIMIT_RATIO,
        )
        if limit is not None:
            ax.axvline(
                target * limit,
                color="grey",
                linestyle="--",
                label=f"seqkeeper's target: {target} × limit",
            )
            ax.legend(loc="upper right")
        ax.set_xlabel("messages per second")
        fig.suptitle(f"throughput: {title}", fontsize="medium")
        fig.tight_layout()
        fig.savefig(outdir / "throughput.png")
        plt.close(fig)
        paths.append(outdir / "throughput.png")
    lat = [f for f in result["figures"] if "cdf" in f.get("detail", {})]
    if lat:
        fig, ax = plt.subplots(figsize=(7, 4.5))
        for f in lat:
            ax.plot(f["detail"]["cdf"], [i / 100 for i in range(101)], label=f["name"])
        ax.axvline(
            LATENCY_P99_MS, color="grey", linestyle="--", label=f"target: p99 < {LATENCY_P99_MS} ms"
        )
        ax.axhline(0.99, color="grey", linestyle=":", linewidth=0.8)
        ax.set_xlabel("end-to-end latency, ms (produce time to output)")
        ax.set_ylabel("fraction of messages")
        fig.suptitle(f"latency: {title}", fontsize="medium")
        ax.legend(fontsize="small", loc="lower right")
        fig.tight_layout()
        fig.savefig(outdir / "latency_cdf.png")
        plt.close(fig)
        paths.append(outdir / "latency_cdf.png")
    return paths
