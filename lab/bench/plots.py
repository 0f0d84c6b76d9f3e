"""The benchmark's plots: TTFT CDFs and prefill-fill histograms (needs matplotlib)."""

from __future__ import annotations

from pathlib import Path

from densegate.lab.bench.runs import BenchResult

__all__ = ["write_plots"]


def write_plots(result: BenchResult, directory: str | Path) -> list[Path]:
    """Per workload: ``ttft_cdf_<w>.png`` (TTFT CDF per policy), ``prefill_fill_<w>.png``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out_dir = Path(directory)
    out_dir.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    styles = ("-", "--", "-.", ":")  # policies that behave alike stay visible
    for w in result.workloads.values():
        fig, ax = plt.subplots(figsize=(7, 4.5))
        for k, (p, r) in enumerate(w.runs.items()):
            xs = sorted(r.ttft_passes)
            if xs:
                ys = [(i + 1) / len(xs) for i in range(len(xs))]
                ax.step(xs, ys, where="post", label=p, linestyle=styles[k % len(styles)])
        ax.set_xscale("log")
        ax.set_xlabel("time to first token (passes)")
        ax.set_ylabel("fraction of requests")
        ax.set_title(f"TTFT CDF: {w.workload} ({w.requests} requests, runner {result.runner})")
        ax.grid(True, alpha=0.3)
        ax.legend()
        path = out_dir / f"ttft_cdf_{w.workload}.png"
        fig.savefig(path, dpi=110, bbox_inches="tight")
        plt.close(fig)
        written.append(path)

        fig, ax = plt.subplots(figsize=(7, 4.5))
        bins = [i / 20 for i in range(21)]
        for k, (p, r) in enumerate(w.runs.items()):
            if r.fills:
                ax.hist(
                    r.fills,
                    bins=bins,
                    histtype="step",
                    linewidth=1.5,
                    linestyle=styles[k % len(styles)],
                    label=p,
                )
        ax.set_xlabel("prefill fill (prefill tokens / dense_tokens, capped at 1)")
        ax.set_ylabel("prefill passes")
        ax.set_title(f"Prefill fill: {w.workload} ({w.requests} requests)")
        ax.grid(True, alpha=0.3)
        ax.legend()
        path = out_dir / f"prefill_fill_{w.workload}.png"
        fig.savefig(path, dpi=110, bbox_inches="tight")
        plt.close(fig)
        written.append(path)
    return written
