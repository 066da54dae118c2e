"""The outputs that compare methods run on one federation: one summary, one table, two plots.

Both runtimes write them: ``collabfl compare``/``simulate`` for every method they ran (over
one seed, or aggregated over several), the Flower ServerApp for the one method of a real
federation's run.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from collabfl.engine.report.plots import plot_accuracy_by_round, plot_accuracy_vs_variance
from collabfl.engine.report.run_dir import read_run
from collabfl.engine.report.setting import setting_title
from collabfl.engine.report.table import results_caption, results_markdown
from collabfl.kernel.atomic import write_text


def write_comparison(
    out_dir: Path,
    summaries: list[dict[str, Any]],
    run_dirs: Mapping[str, Path | Sequence[Path]],
) -> None:
    """The cross-method outputs: summary.json, results.md (a caption naming the setting, the
    seeds and what ± is, then the table) and the two comparison plots.

    ``run_dirs`` holds each method's run folder, or its folders over several seeds (the
    plots then show the spread across seeds).
    """
    runs = {
        label: [read_run(p) for p in ([paths] if isinstance(paths, Path) else paths)]
        for label, paths in run_dirs.items()
    }
    config = next((r[0].config for r in runs.values() if r), {})
    plot_accuracy_by_round(runs, out_dir / "accuracy_by_round.png")
    plot_accuracy_vs_variance(summaries, out_dir / "accuracy_vs_variance.png", config)
    write_text(out_dir / "summary.json", json.dumps(summaries, indent=2), shared=True)
    caption = results_caption(summaries, setting_title(config), config.get("seed"))
    write_text(out_dir / "results.md", f"{caption}\n\n{results_markdown(summaries)}", shared=True)
